"""Trinity-RFT's ALFWorld workflows (rft.explorer.alfworld) on the alfworld package's TextWorld engine, in the venv
`make alfworld` builds (`make test-alfworld`): a game of the package's own domain and grammar (`write_game`); a
scripted model that plays the five winning commands is paid 1, one that only looks -0.1 after 30 turns; Trinity's
prompts and its reminder after "Nothing happens."; max_env_steps; the RAFT workflows learn what Trinity's keep
(a won, well-formed episode; reflecting, a better second attempt as its clean conversation); Trinity's ALFWorld
example YAMLs (RAFT's too) train a step through `rft train` and resolve in the peer corpus."""

from __future__ import annotations

import json

import pytest
import yaml
from cli_helpers import rft_here
from test_frozen_lake import Scripted, tokenizer  # noqa: F401  (the fixture)
from test_trinity_workflows import _corpus_item

from rft.data.dataset import Prompt
from rft.errors import RftError
from rft.explorer.alfworld import (
    RAFT_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    game_file,
    open_env,
    parse_raft_reply,
    write_game,
)
from rft.explorer.workflow import (
    AlfworldWorkflow,
    RaftAlfworldWorkflow,
    RaftReflectAlfworldWorkflow,
    StepWiseAlfworldWorkflow,
    Task,
)

WIN = ["go to cabinet 1", "open cabinet 1", "take apple 1 from cabinet 1", "go to countertop 1",
       "move apple 1 to countertop 1"]


def _task(game, n: int, args: dict | None = None) -> Task:
    return Task(prompt=Prompt(ids=[], data_source="alfworld", ground_truth=None, extra_info={},
                              messages=[{"role": "user", "content": str(game)}]), repeat_times=n,
                workflow_args=args or {})


def _script(actions: list[str]) -> list[str]:
    return [f"<think>next</think><action>{a}</action>" for a in actions]


def test_the_game_of_the_packages_domain_is_won_by_its_five_commands(tmp_path):
    env = open_env(game_file(str(write_game(tmp_path / "g"))))
    try:
        observation, _ = env.reset()
        assert observation == ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
                               "around you, you see a cabinet 1, and a countertop 1.\n\nYour task is to: put some "
                               "apple in countertop.")
        steps = [env.step(a) for a in WIN]
        assert [done for _, _, done, _ in steps] == [False] * 4 + [True] and steps[-1][1] == 1
        assert steps[1][0] == "You open the cabinet 1. The cabinet 1 is open. In it, you see a apple 1."
    finally:
        env.close()


def test_a_task_rows_prompt_must_be_a_game_file_with_its_traj_data(tmp_path):
    with pytest.raises(RftError, match="is the path of its game file"):
        game_file("put the apple in the countertop")
    (tmp_path / "game.tw-pddl").write_text("{}")
    with pytest.raises(RftError, match="traj_data.json"):
        game_file(str(tmp_path / "game.tw-pddl"))


def test_winning_is_paid_one_and_running_out_of_turns_minus_a_tenth(tokenizer, tmp_path):  # noqa: F811
    game = write_game(tmp_path / "g")
    (exp,) = AlfworldWorkflow(task=_task(game, 1), model=Scripted(tokenizer, _script(WIN), max_tokens=400)).run()
    assert exp.reward == 1.0 and exp.rewards["env_done"] == 1.0 and exp.info["env_rounds"] == 4
    text = tokenizer.decode(exp.tokens)
    assert SYSTEM_PROMPT.strip()[:60] in text
    assert "Observation: -= Welcome to TextWorld, ALFRED! =-" in text
    assert "Observation: You pick up the apple 1 from the cabinet 1." in text
    idle = Scripted(tokenizer, _script(["look"]) * 30, max_tokens=64)
    exps = AlfworldWorkflow(task=_task(game, 2), model=idle).run()  # two episodes, the game reset between them
    assert [e.reward for e in exps] == [-0.1, -0.1] and [e.info["env_rounds"] for e in exps] == [29, 29]
    assert [e.rewards["env_done"] for e in exps] == [0.0, 0.0]
    # an action the game does not take: "Nothing happens." and Trinity's reminder; then the game goes on
    (exp,) = AlfworldWorkflow(task=_task(game, 1), model=Scripted(tokenizer, _script(["fly"] + WIN),
                                                                  max_tokens=400)).run()
    assert exp.reward == 1.0 and exp.info["env_rounds"] == 5
    assert "Observation: Nothing happens.Please check if the action you take is valid" in tokenizer.decode(exp.tokens)


@pytest.mark.parametrize("workflow", [AlfworldWorkflow, StepWiseAlfworldWorkflow])
def test_both_workflows_take_max_env_steps_turns(tokenizer, tmp_path, workflow):  # noqa: F811
    game = write_game(tmp_path / "g")
    idle = Scripted(tokenizer, _script(["look"]) * 30, max_tokens=64)
    (exp,) = workflow(task=_task(game, 1, {"max_env_steps": 3}), model=idle).run()
    assert exp.reward == -0.1 and exp.info["env_rounds"] == 2 and exp.info["turns"] == 3
    (exp,) = workflow(task=_task(game, 1), model=Scripted(tokenizer, _script(WIN), max_tokens=400)).run()
    assert exp.reward == 1.0 and exp.info["env_rounds"] == 4


@pytest.mark.parametrize("item, workflow", [("examples/grpo_alfworld/alfworld.yaml", "alfworld_workflow"),
                                            ("examples/grpo_alfworld_general_multi_step/alfworld.yaml",
                                             "step_wise_alfworld_workflow"),
                                            ("examples/RAFT_alfworld/RAFT_alfworld_7B.yaml", "RAFT_alfworld_workflow"),
                                            ("examples/RAFT_alfworld/RAFT_reflect_alfworld_7B.yaml",
                                             "RAFT_reflect_alfworld_workflow")])
def test_trinitys_alfworld_examples_train_one_step(tmp_path, item, workflow):
    """The examples as their users run them (stand-ins as test_trinity_workflows' `_corpus_item`): task rows whose
    game_file is a game of the package's domain, one step of 2 tasks x 2 episodes; every score is -0.1 or 1."""
    from rft.models.tiny import init_model

    tasks, model = tmp_path / "tasks", tmp_path / "m"
    tasks.mkdir()
    init_model("tiny", model, seed=0)
    games = [write_game(tmp_path / f"game{i}") for i in range(2)]
    (tasks / "train.jsonl").write_text("".join(json.dumps({"game_file": str(g)}) + "\n" for g in games * 2))
    tree = _corpus_item(item, model, tasks, tmp_path / "ckpt")
    tree["buffer"]["explorer_input"]["taskset"].setdefault("workflow_args", {})["max_env_steps"] = 6  # minutes less
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree))
    shown = rft_here("config", "show", str(config), cwd=tmp_path).stdout
    assert f"type: {workflow}" in shown
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m]
    assert [m["training/global_step"] for m in metrics] == [1]
    assert -0.1 - 1e-6 <= metrics[-1]["critic/score/mean"] <= 1.0  # -0.1 in float32


def _raft(actions: list[str], experience: str = "Look before acting.") -> list[str]:
    return [f"<experience>{experience}</experience>\n\n<think>next</think>\n\n<action>{a}</action>" for a in actions]


class Recording(Scripted):
    """A scripted model that keeps the text of every prompt it answered."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []

    def respond(self, conversations, max_tokens=None, **sampling):
        self.prompts += [c.text for c in conversations]
        super().respond(conversations, max_tokens=max_tokens, **sampling)


def test_a_raft_reply_has_three_tags_in_order_or_none():
    assert parse_raft_reply(_raft(["open cabinet 1"], " x ")[0]) == {"experience": "x", "think": "next",
                                                                    "action": "open cabinet 1"}
    assert parse_raft_reply("<think>a</think><action>look</action>") == {"experience": "", "think": "", "action": ""}
    assert parse_raft_reply("<action>look</action><experience>e</experience><think>t</think>")["action"] == ""
    assert "</experience>\n\n\n<think>your reasoning process</think>" in RAFT_SYSTEM_PROMPT  # Trinity's escapes


def test_raft_learns_a_won_well_formed_episode_only(tokenizer, tmp_path):  # noqa: F811
    game = write_game(tmp_path / "g")
    (won,) = RaftAlfworldWorkflow(task=_task(game, 1), model=Scripted(tokenizer, _raft(WIN), max_tokens=400)).run()
    assert won.reward == 1.0 and won.rewards["success"] == 1.0 and won.info["steps"] == 5 and won.info["kept"]
    assert int(won.action_mask.sum()) > 0 and RAFT_SYSTEM_PROMPT.strip()[:60] in tokenizer.decode(won.tokens)
    # won, but one reply's <experience> is empty: nothing to learn, the win still logged
    script = _raft(WIN[:2]) + _raft(WIN[2:3], "") + _raft(WIN[3:])
    (sloppy,) = RaftAlfworldWorkflow(task=_task(game, 1), model=Scripted(tokenizer, script, max_tokens=400)).run()
    assert sloppy.reward == 1.0 and sloppy.rewards["success"] == 1.0 and not sloppy.info["kept"]
    assert int(sloppy.action_mask.sum()) == 0 and len(sloppy.action_mask) > 0
    # three identical actions end the episode unwon after three turns; two episodes, the game reset between them
    idle = RaftAlfworldWorkflow(task=_task(game, 2), model=Scripted(tokenizer, _raft(["look"] * 50), max_tokens=400))
    exps = idle.run()
    assert [(e.reward, e.rewards["success"], e.info["steps"], e.info["turns"]) for e in exps] == [(0.0, 0.0, 3, 3)] * 2
    assert all(int(e.action_mask.sum()) == 0 for e in exps)
    # the turn budget: the last step's reward, not done
    wander = _raft(["look", "inventory"] * 25)
    (exp,) = RaftAlfworldWorkflow(task=_task(game, 1, {"max_env_steps": 4}),
                                  model=Scripted(tokenizer, wander, max_tokens=400)).run()
    assert (exp.reward, exp.info["steps"], exp.info["kept"]) == (0.0, 4, False)


def test_reflecting_learns_the_clean_second_attempt_when_it_does_better(tokenizer, tmp_path):  # noqa: F811
    game = write_game(tmp_path / "g")
    first = _raft(["look"] * 3, "Tried once.")  # three identical actions: lost in 3 turns
    model = Recording(tokenizer, first + _raft(WIN, "Open first."), max_tokens=400)
    (exp,) = RaftReflectAlfworldWorkflow(task=_task(game, 1), model=model).run()
    assert exp.reward == 1.0 and exp.info["kept"] and exp.info["steps"] == 5 and int(exp.action_mask.sum()) > 0
    assert {k: exp.rewards[k] for k in ("first_reward", "first_steps", "second_reward", "second_steps",
                                        "improvement", "success")} == {
        "first_reward": 0.0, "first_steps": 3.0, "second_reward": 1.0, "second_steps": 5.0, "improvement": 1.0,
        "success": 1.0}
    note = ("In your attempt, you stopped after 3 steps with a reward of 0.000 without completing the task. You need "
            "to improve your strategy and persistence to achieve success.\n\nThis is your second attempt.")
    assert len(model.prompts) == 8 and all(note in p for p in model.prompts[3:]) and note not in model.prompts[2]
    assert "<experience>Tried once.</experience>" in model.prompts[3]  # the second attempt sees the first
    learnt = tokenizer.decode(exp.tokens)  # the clean conversation: the prompt, observations, the new replies
    assert learnt.count("<experience>Open first.</experience>") == 5 and "Tried once." not in learnt
    assert "second attempt" not in learnt
    assert learnt.count("Observation: ") == 5 and RAFT_SYSTEM_PROMPT.strip()[:60] in learnt
    # worse or no better the second time: nothing learnt; validation plays the first attempt only
    model = Scripted(tokenizer, first + _raft(["look", "inventory"] * 25), max_tokens=400)
    (exp,) = RaftReflectAlfworldWorkflow(task=_task(game, 1, {"max_env_steps": 6}), model=model).run()
    assert exp.rewards["second_steps"] == 6.0 and not exp.info["kept"] and int(exp.action_mask.sum()) == 0
    task = _task(game, 1)
    task.is_eval = True
    model = Recording(tokenizer, first + _raft(WIN), max_tokens=400)
    (exp,) = RaftReflectAlfworldWorkflow(task=task, model=model).run()
    assert exp.reward == 0.0 and len(model.prompts) == 3 and exp.rewards["second_steps"] == 3.0
    # a first attempt that wins is learnt as RAFT_alfworld_workflow's, no second attempt
    model = Recording(tokenizer, _raft(WIN), max_tokens=400)
    (exp,) = RaftReflectAlfworldWorkflow(task=_task(game, 1), model=model).run()
    assert exp.reward == 1.0 and exp.info["kept"] and len(model.prompts) == 5
    assert exp.rewards == {"success": 1.0, "first_reward": 1.0, "first_steps": 5.0, "second_reward": 1.0,
                           "second_steps": 5.0, "improvement": 0.0}  # the same names as a reflected episode's


def test_the_alfworld_example_trains_a_step_on_the_rows_rft_data_writes(tmp_path):
    """As a user with ALFWorld's data folder: `rft data alfworld` writes the rows of its games (here games of
    write_game in alfworld-download's layout), and `rft train` of examples/alfworld_grpo.yaml trains a step on them,
    validating on the held-out ones."""
    from pathlib import Path

    from rft.models.tiny import init_model

    for split in ("train", "valid_seen", "valid_unseen"):
        for i in range(2):
            write_game(tmp_path / "alf" / "json_2.1.1" / split / f"pick_and_place_simple-{i}" / "trial_1")
    rft_here("data", "alfworld", str(tmp_path / "alf"), "alfworld", cwd=tmp_path)
    assert len((tmp_path / "alfworld" / "train.jsonl").read_text().splitlines()) == 2
    example = Path(__file__).resolve().parents[2] / "examples" / "alfworld_grpo.yaml"
    rft_here("train", str(example), f"actor_rollout_ref.model.path={init_model('tiny', tmp_path / 'm', seed=0)}",
             "data.train_batch_size=2", "data.max_prompt_length=1024", "data.max_response_length=16",
             "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
             "workflow.args={max_env_steps: 3}", "trainer.total_training_steps=1", "trainer.logger=[]",
             f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path)
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in metrics if "training/global_step" in m]
    assert [m["training/global_step"] for m in trained] == [1]
    assert any(k.startswith("val-core/") for m in metrics for k in m), metrics  # the held-out games were played
