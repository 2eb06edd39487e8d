"""The ALFWorld environment of Trinity-RFT's `alfworld_workflow` and `step_wise_alfworld_workflow` (the workflows:
`rft.explorer.workflow`): ALFWorld's text households (the alfworld package on TextWorld's PDDL engine; the games
themselves are the files `alfworld-download` fetches, or any of the same form). A task row's prompt is the path of a
game file (`game.tw-pddl`, Trinity's get_alfworld_data.py writes them under `game_file`), beside which ALFWorld keeps
its `traj_data.json`; the game is opened as Trinity opens it (TextWorld's gym registration with ALFWorld's
demangler, which names things "cabinet 1", and its hand-coded expert). Each episode the model reads an observation
and answers with `<think>...</think><action>...</action>`, for at most `max_env_steps` turns (30) or until the
game is won; the reward is the game's score when it ends (1 for a won game), else
-0.1. `write_game` builds a one-room game of the package's own domain and grammar (tests, smoke runs).

Trinity-RFT's RAFT workflows (`RAFT_alfworld_workflow`, `RAFT_reflect_alfworld_workflow`: `raft_episode`,
`reflect_episode`) play the same games under their own prompt, whose replies carry
`<experience>...</experience><think>...</think><action>...</action>`, for at most 50 turns, an episode ending
unwon (reward 0) after three identical actions in a row; what they learn is chosen by `raft_kept` and
`reflect_kept`."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from rft.errors import RftError
from rft.explorer.sciworld import parse_action  # Trinity's <action> format, as ScienceWorld's

ACTION_COMMANDS = (
    ("look:", "look around your current location"),
    ("inventory:", "check your current inventory(you can only have 1 item in your inventory)"),
    ("go to (receptacle):", "move to a receptacle"),
    ("open (receptacle):", "open a receptacle"),
    ("close (receptacle):", "close a receptacle"),
    ("take (object) from (receptacle):", "take an object from a receptacle"),
    ("move (object) to (receptacle):", "place an object in or on a receptacle"),
    ("examine (something):", "examine a receptacle or an object"),
    ("use (object):", "use an object"),
    ("heat (object) with (receptacle):", "heat an object using a receptacle"),
    ("clean (object) with (receptacle):", "clean an object using a receptacle"),
    ("cool (object) with (receptacle):", "cool an object using a receptacle"),
    ("slice (object) with (object):", "slice an object using a sharp object"),
)
"""ALFWorld's commands as both of Trinity-RFT's ALFWorld prompts list them."""


def action_commands(squeezed: str = "") -> str:
    """The commands, one a line, each description at column 37; `squeezed`: the command whose description follows
    it after two spaces (the ALFWorld prompt's "move", as Trinity-RFT writes it)."""
    return "\n".join(f"  {c}  {d}" if c == squeezed else f"  {c:<34}{d}" for c, d in ACTION_COMMANDS)


SYSTEM_PROMPT = """
You are an agent interacting with a virtual text-based environment.

## Notes:
At each step, you should first think then perform action to fulfill the instruction. You should ALWAYS wrap your thinking with the <think> </think> tag and wrap your action with the <action> </action> tag.
You should ALWAYS take one action each step.
DO NOT try to interact with the user at anytime. Finish the task by yourself.

## Action Format:
Below are the available commands you can use:
{commands}

For example your output should be like this:
<think> To solve the task, I need first to ... </think><action>go to cabinet 1</action>
""".format(commands=action_commands(squeezed="move (object) to (receptacle):"))
"""Trinity-RFT's ALFWorld system prompt (its releases since 0.3; the first one's had typos), word for word, its leading
newline included."""

MAX_ENV_STEPS = 30  # Trinity-RFT's default of both workflows' max_env_steps
UNFINISHED_REWARD = -0.1  # Trinity-RFT's reward of an episode that is not done when its turns run out


def require_alfworld():
    """TextWorld's gym module and ALFWorld's two wrappers (`AlfredDemangler`, `AlfredExpert` with its type)."""
    try:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredExpertType
    except ImportError as e:
        raise RftError(f"the ALFWorld workflows run ALFWorld on TextWorld: pip install 'rft[alfworld]' (the alfworld "
                       f"package, whose PDDL planner builds with a C++ compiler; `make alfworld`): {e}") from None
    return textworld, AlfredDemangler, AlfredExpert, AlfredExpertType


def game_file(text: str) -> str:
    """A task row's prompt: the path of its game file, which must exist here (with its traj_data.json beside it)."""
    path = Path(text.strip()).expanduser()
    if not path.is_file():
        raise RftError(f"an ALFWorld task row's prompt is the path of its game file (Trinity's get_alfworld_data.py "
                       f"writes them under game_file), got {text[:200]!r}, which is no file here")
    if not (path.parent / "traj_data.json").is_file():
        raise RftError(f"{path}: ALFWorld reads the task's traj_data.json beside the game file, and there is none")
    return str(path)


_ENGINE = threading.Lock()
"""TextWorld's PDDL engine (its grammar parser, Fast Downward's library) is one per process and not thread-safe;
rft's workflows run as threads of the explorer (Trinity's as processes), so every call into a game holds this lock:
a step is milliseconds beside a model's reply, which runs outside it."""


class LockedEnv:
    """A game whose reset / step / close hold `_ENGINE`."""

    def __init__(self, env):
        self.env = env

    def reset(self):
        with _ENGINE:
            return self.env.reset()

    def step(self, action: str):
        with _ENGINE:
            return self.env.step(action)

    def close(self) -> None:
        with _ENGINE:
            self.env.close()


def open_env(path: str) -> LockedEnv:
    """The game at `path` as Trinity-RFT opens it: TextWorld's gym env with ALFWorld's demangler and hand-coded
    expert, asked for the description, the inventory and the admissible commands."""
    textworld, AlfredDemangler, AlfredExpert, AlfredExpertType = require_alfworld()
    infos = textworld.EnvInfos(description=True, inventory=True, admissible_commands=True)
    with _ENGINE:
        env_id = textworld.gym.register_game(path, infos, wrappers=[
            AlfredDemangler(), AlfredExpert(expert_type=AlfredExpertType.HANDCODED)])
        return LockedEnv(textworld.gym.make(env_id))


def observation_message(observation: str) -> dict:
    """The user turn of an observation: "Observation: " and the text, with Trinity's reminder after "Nothing
    happens." (an action the game did not take)."""
    if "Nothing happens." in observation:
        observation += "Please check if the action you take is valid or you have carefully followed the action format."
    return {"role": "user", "content": "Observation: " + observation}


def play(model, env, episodes: int, max_steps: int) -> list:
    """`episodes` episodes of `env` (reset before each) by `model` (a workflow's model handle): the experiences, each
    paid the game's score when it ended, else UNFINISHED_REWARD; logged env_done and env_rounds (the last turn's
    index), as Trinity-RFT logs them."""
    out = []
    for _ in range(episodes):
        observation, _ = env.reset()
        conversation = model.start([{"role": "system", "content": SYSTEM_PROMPT}, observation_message(observation)])
        reward, done, rounds = UNFINISHED_REWARD, False, 0
        for rounds in range(max_steps):
            if rounds:
                conversation.add([observation_message(observation)])
            model.respond([conversation])
            observation, score, done, _ = env.step(parse_action(conversation.last_reply))
            if done:
                reward = float(score)
                break
        out.append(conversation.to_experience(reward, {"env_done": float(done)}, {"env_rounds": rounds}))
    return out


def write_game(folder: Path, task: str = "Apple", source: str = "Cabinet", target: str = "CounterTop") -> Path:
    """A one-room ALFWorld game in `folder` (game.tw-pddl and its traj_data.json) on the alfworld package's own
    PDDL domain and grammar: the `task` object (an ALFWorld object class) lies in a closed `source` (openable), the
    goal is to put it in or on `target` (ALFWorld's pick_and_place_simple). Returns the game file; winning takes
    five commands (the classes lower-cased): go to cabinet 1, open cabinet 1, take apple 1 from cabinet 1, go to
    countertop 1, move apple 1 to countertop 1."""
    import alfworld

    data = Path(alfworld.__file__).parent / "data"
    obj, src, dst = (f"{n}_bar__plus_00_dot_{i}0" for i, n in enumerate((task, source, target), 1))
    locations = [f"loc_bar_{i}_bar_0_bar_0_bar_0" for i in range(3)]
    problem = "\n".join([
        "(define (problem plan_trial_rft)", "(:domain alfred)", "(:objects", "agent1 - agent", f"{obj} - object",
        f"{src} - receptacle", f"{dst} - receptacle", f"{task}Type - otype", f"{source}Type - rtype",
        f"{target}Type - rtype", *(f"{loc} - location" for loc in locations), ")", "(:init",
        f"(atLocation agent1 {locations[0]})", f"(receptacleAtLocation {src} {locations[1]})",
        f"(receptacleAtLocation {dst} {locations[2]})", f"(objectAtLocation {obj} {locations[1]})",
        f"(inReceptacle {obj} {src})", f"(openable {src})", f"(receptacleType {src} {source}Type)",
        f"(receptacleType {dst} {target}Type)", f"(objectType {obj} {task}Type)",
        f"(canContain {source}Type {task}Type)", f"(canContain {target}Type {task}Type)",
        f"(pickupable {obj})", ")", f"(:goal (and (inReceptacle {obj} {dst})))", ")"])
    grammar = (data / "alfred.twl2").read_text().replace("Your task is to: UNKNOWN GOAL.",
                                                        f"Your task is to: put some {task.lower()} in {target.lower()}.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple", "pddl_params": {
        "object_target": task, "parent_target": target, "mrecep_target": "", "toggle_target": "",
        "object_sliced": False}}))
    game = folder / "game.tw-pddl"
    game.write_text(json.dumps({"pddl_domain": (data / "alfred.pddl").read_text(), "grammar": grammar,
                                "pddl_problem": problem, "solvable": True}))
    return game


# ------------------------------------------------------------------------------------------------------ RAFT
RAFT_SYSTEM_PROMPT = f"""
You are an agent interacting with a virtual text-based environment.

## Response Format:
You MUST use this exact format for every response. All three tags are REQUIRED in sequential order:

<experience>Working principles, strategies, common knowledge, and potential pitfalls relevant to the current task.</experience>\n\n
<think>your reasoning process</think>\n\n
<action>exactly one action command</action>

## Action Commands:
{action_commands()}

For example your output should be like this:
<experience>In household tasks, I should start by exploring the environment to understand available objects and receptacles. Common pitfalls include forgetting to check inventory capacity and not examining objects before taking action.</experience>\n\n<think> To solve the task, I need first to ... </think>\n\n<action>go to cabinet 1</action>

## Important Note:
You must ensure that the <experience> section contains descriptions of working principles, strategies, common sense knowledge, and potential pitfalls that are universally applicable to this type of task, rather than generic statements, placeholder content, or overly specific behavioral guidelines.
"""
"""Trinity-RFT's system prompt of both RAFT ALFWorld workflows, word for word (its escaped line breaks
after the first two tags' examples make blank lines)."""

RAFT_MAX_ENV_STEPS = 50  # the turns Trinity-RFT's RAFT workflows give an episode
_RAFT_REPLY = re.compile(r"<experience>\s*(.*?)\s*</experience>.*?<think>\s*(.*?)\s*</think>.*?<action>\s*(.*?)\s*</action>",
                         re.DOTALL)


def parse_raft_reply(reply: str) -> dict[str, str]:
    """A RAFT reply's experience, think and action (each stripped), all three "" unless the reply has the three
    tags in order, as Trinity-RFT parses it."""
    match = _RAFT_REPLY.search(reply)
    return dict(zip(("experience", "think", "action"), match.groups() if match else ("", "", "")))


@dataclass
class RaftEpisode:
    """One RAFT episode: its conversation (the model's own, or, reflecting, the clean one it learns), the game's
    reward, whether it ended (won or lost), its turns and whether every reply had the three tags filled."""

    conversation: object
    reward: float = 0.0
    done: bool = False
    steps: int = 0
    well_formed: bool = True
    actions: list[str] = field(default_factory=list)

    @property
    def won(self) -> bool:
        return self.done and self.reward >= 1


def _turn(episode: RaftEpisode, reply: str) -> str:
    parsed = parse_raft_reply(reply.strip())  # Trinity strips the reply before it parses it
    episode.well_formed &= all(parsed.values())
    episode.actions.append(parsed["action"])
    return parsed["action"]


def raft_episode(model, env, max_steps: int) -> RaftEpisode:
    """Trinity-RFT's RAFT rollout: `env` reset, then turns of an observation and the model's reply (its <action>
    stepped, "" when the tags are missing) until the game ends (its reward), three identical actions in a row end
    it unwon (reward 0, not done), or `max_steps` turns pass (the last step's reward, not done)."""
    observation, _ = env.reset()
    conversation = model.start([{"role": "system", "content": RAFT_SYSTEM_PROMPT}, observation_message(observation)])
    episode = RaftEpisode(conversation)
    for step in range(max_steps):
        if step:
            conversation.add([observation_message(observation)])
        model.respond([conversation])
        action = _turn(episode, conversation.last_reply)
        episode.steps = step + 1
        if len(episode.actions) >= 3 and len(set(episode.actions[-3:])) == 1:
            episode.reward, episode.done = 0.0, False
            return episode
        observation, reward, done, _ = env.step(action)
        episode.reward, episode.done = float(reward), bool(done)
        if done:
            return episode
    episode.done = False
    return episode


def raft_kept(episode: RaftEpisode) -> bool:
    """RAFT_alfworld_workflow learns an episode that scored 1 or more with every reply well formed."""
    return episode.reward >= 1 and episode.well_formed


def reflect_feedback(reward: float, steps: int, won: bool, max_steps: int) -> str:
    """Trinity-RFT's note on the first attempt, which the second reads (it is passed whether the first was won)."""
    if won and reward >= 1:
        return (f"In your attempt, you successfully completed the task in {steps} steps with a reward of "
                f"{reward:.3f}. Try to maintain this success while being more efficient.")
    if won:
        return (f"In your attempt, you completed the task in {steps} steps but only achieved a reward of "
                f"{reward:.3f}. You need to improve your performance to achieve full success.")
    if steps >= max_steps:
        return (f"In your attempt, you reached the maximum step limit of {max_steps} steps without completing the "
                f"task (reward: {reward:.3f}). You need to be more efficient and focused to complete the task within "
                "the step limit.")
    return (f"In your attempt, you stopped after {steps} steps with a reward of {reward:.3f} without completing the "
            "task. You need to improve your strategy and persistence to achieve success.")


SECOND_ATTEMPT = (
    "This is your second attempt. You need to perform better this time. Focus on updating a more thoughtful and "
    "comprehensive <experience>...</experience> section that incorporates strategies, common pitfalls, and domain "
    "knowledge to help improve task performance and avoid previous mistakes. Learn from your first attempt and apply "
    "that knowledge to make better decisions. IMPORTANT: You must update your experience based on what you learned "
    "from the first attempt. Also, DO NOT repeat the same action consecutively as this is inefficient and useless - "
    "if you find yourself repeating actions, stop and try a different approach. In your responses, do not explicitly "
    "mention this is a second attempt or reference previous attempts. Instead, present your actions as if starting "
    "fresh, but incorporate general experience and strategies you can summarize for this type of task.")
"""Trinity-RFT's instruction after the feedback, word for word."""


def reflect_episode(model, env, first: RaftEpisode, max_steps: int) -> RaftEpisode:
    """Trinity-RFT's second attempt: the game reset; the model plays on after its first conversation and a system
    message (`reflect_feedback` and `SECOND_ATTEMPT`), while the episode's conversation is the clean one it learns:
    the system prompt, the observations and the same replies (their sampled tokens), as if played fresh. No
    repetition stop; ends when the game does (won if its reward is above 0) or after `max_steps` turns."""
    observation, _ = env.reset()
    note = reflect_feedback(first.reward, first.steps, first.won, max_steps)
    context = first.conversation.copy()
    context.add([{"role": "system", "content": f"{note}\n\n{SECOND_ATTEMPT}"}, observation_message(observation)])
    clean = model.start([{"role": "system", "content": RAFT_SYSTEM_PROMPT}, observation_message(observation)])
    episode = RaftEpisode(clean)
    for step in range(max_steps):
        if step:
            context.add([observation_message(observation)])
            clean.add([observation_message(observation)])
        model.respond([context])
        clean.append_completion(context.last_completion)
        action = _turn(episode, context.last_reply)
        episode.steps = step + 1
        observation, reward, done, _ = env.step(action)
        episode.reward = float(reward)
        if done:
            episode.done = episode.reward > 0
            return episode
    return episode


def reflect_kept(first: RaftEpisode, second: RaftEpisode) -> bool:
    """RAFT_reflect_alfworld_workflow learns the second attempt when every reply is well formed and it scored more
    than the first, or won in fewer turns."""
    return second.well_formed and (second.reward > first.reward or (second.steps < first.steps and second.reward >= 1))
