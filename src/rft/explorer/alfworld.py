"""The ALFWorld environment of Trinity-RFT's `alfworld_workflow` and `step_wise_alfworld_workflow` (the workflows:
`rft.explorer.workflow`): ALFWorld's text households (the alfworld package on TextWorld's PDDL engine; the games
themselves are the files `alfworld-download` fetches, or any of the same form). A task row's prompt is the path of a
game file (`game.tw-pddl`, Trinity's get_alfworld_data.py writes them under `game_file`), beside which ALFWorld keeps
its `traj_data.json`; the game is opened as Trinity opens it (TextWorld's gym registration with ALFWorld's
demangler, which names things "cabinet 1", and its hand-coded expert). Each episode the model reads an observation
and answers with `<think>...</think><action>...</action>`, for at most `max_env_steps` turns (30) or until the
game is won; the reward is the game's score when it ends (1 for a won game), else
-0.1. `write_game` builds a one-room game of the package's own domain and grammar (tests, smoke runs)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from rft.errors import RftError
from rft.explorer.sciworld import parse_action  # Trinity's <action> format, as ScienceWorld's

SYSTEM_PROMPT = """
You are an agent interacting with a virtual text-based environment.

## Notes:
At each step, you should first think then perform action to fulfill the instruction. You should ALWAYS wrap your thinking with the <think> </think> tag and wrap your action with the <action> </action> tag.
You should ALWAYS take one action each step.
DO NOT try to interact with the user at anytime. Finish the task by yourself.

## Action Format:
Below are the available commands you can use:
  look:                             look around your current location
  inventory:                        check your current inventory(you can only have 1 item in your inventory)
  go to (receptacle):               move to a receptacle
  open (receptacle):                open a receptacle
  close (receptacle):               close a receptacle
  take (object) from (receptacle):  take an object from a receptacle
  move (object) to (receptacle):  place an object in or on a receptacle
  examine (something):              examine a receptacle or an object
  use (object):                     use an object
  heat (object) with (receptacle):  heat an object using a receptacle
  clean (object) with (receptacle): clean an object using a receptacle
  cool (object) with (receptacle):  cool an object using a receptacle
  slice (object) with (object):     slice an object using a sharp object

For example your output should be like this:
<think> To solve the task, I need first to ... </think><action>go to cabinet 1</action>
"""
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
