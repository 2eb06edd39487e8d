"""Trinity-RFT's sciworld_workflow (rft.explorer.sciworld) on AllenAI's ScienceWorld simulator (Java): a scripted
model playing the task's gold path is paid what the simulator's steps pay (0.92) and one that only looks around 0, Trinity's prompts and bookkeeping;
the task row's JSON; Trinity's example YAML through the dialect."""

from __future__ import annotations

import json
import shutil

import pytest
from test_frozen_lake import Scripted, tokenizer  # noqa: F401  (the fixture)

from rft.data.dataset import Prompt
from rft.dialects.trinity import translate
from rft.errors import RftError
from rft.explorer.sciworld import SYSTEM_PROMPT, close_env, open_env, parse_action, task_config
from rft.explorer.workflow import SciWorldWorkflow, Task

JAVA = pytest.mark.skipif(shutil.which("java") is None, reason="needs a Java runtime for ScienceWorld's simulator "
                          "(`apt-get install -y default-jre-headless`; .ci/run installs it)")
TASK = {"task_name": "find-non-living-thing", "var_num": 0, "jar_path": "/not/here/scienceworld.jar"}


def _task(n: int) -> Task:
    return Task(prompt=Prompt(ids=[], data_source="sciworld", ground_truth=None, extra_info={},
                              messages=[{"role": "user", "content": json.dumps(TASK)}]), repeat_times=n)


@pytest.fixture(scope="module")
def gold() -> list[str]:
    env = open_env(TASK)  # the row's jar is not here: the package's simulator
    try:
        return list(env.get_gold_action_sequence())
    finally:
        close_env(env)


def test_actions_and_task_rows_are_read_as_trinity_reads_them():
    assert parse_action("<think>go</think><action> teleport to kitchen </action>") == "teleport to kitchen"
    assert parse_action("<action>a</action><action>b</action>") == "a" and parse_action("no action") == ""
    assert task_config(json.dumps(TASK))["task_name"] == "find-non-living-thing"
    with pytest.raises(RftError, match="task_name"):
        task_config("boil water")


@JAVA
def test_the_gold_path_is_paid_one_and_looking_around_nothing(tokenizer, gold):  # noqa: F811
    assert 0 < len(gold) < 30
    winner = Scripted(tokenizer, [f"<think>step</think><action>{a}</action>" for a in gold], max_tokens=400)
    (exp,) = SciWorldWorkflow(task=_task(1), model=winner).run()
    # the simulator's step rewards along the gold path are 0, 17, 0, 50, 25 (the 8 points of opening the door are in
    # no step's reward: its score counts from the reset's own first move), summed as Trinity sums them: 92 / 100
    assert gold == ["open door to kitchen", "go to kitchen", "look around", "focus on painting",
                    "move painting to red box"]
    assert exp.reward == pytest.approx(0.92) and exp.rewards["env_done"] == 1.0
    assert exp.info["env_rounds"] == len(gold) - 1 and exp.info["golden_rounds"] == len(gold)
    text = tokenizer.decode(exp.tokens)
    assert SYSTEM_PROMPT.strip()[:60] in text and "Observation: \nTask Description: Your task is to find" in text
    idle = Scripted(tokenizer, ["<think>hm</think><action>look around</action>"] * 30, max_tokens=64)
    exps = SciWorldWorkflow(task=_task(2), model=idle).run()  # two episodes, the simulator reset between them
    assert [e.reward for e in exps] == [0.0, 0.0] and [e.info["env_rounds"] for e in exps] == [29, 29]
    assert [e.rewards["env_done"] for e in exps] == [0.0, 0.0] and exps[0].info["turns"] == 30


def test_trinitys_sciworld_taskset_lands_on_the_workflow():
    out = translate({"project": "p", "name": "n", "model": {"model_path": "m"}, "buffer": {"explorer_input": {
        "taskset": {"path": "t", "format": {"prompt_key": "task_desc"}, "default_workflow_type": "sciworld_workflow"}}}})
    assert out["workflow"]["type"] == "sciworld_workflow" and out["data"]["prompt_key"] == "task_desc"


@JAVA
@pytest.mark.heavy  # 30 turns an episode on the CPU: a minute and a half
def test_trinitys_sciworld_example_trains_one_step(tmp_path):
    """examples/grpo_sciworld as its user runs it (stand-ins as test_trinity_workflows' `_corpus_item`): task rows
    of JSON under task_desc, one step of 2 tasks x 2 episodes, rewards in [0, 1]."""
    import yaml
    from cli_helpers import rft_here
    from test_trinity_workflows import _corpus_item

    from rft.models.tiny import init_model

    tasks, model = tmp_path / "tasks", tmp_path / "m"
    tasks.mkdir()
    init_model("tiny", model, seed=0)
    (tasks / "train.jsonl").write_text((json.dumps({"task_desc": json.dumps(TASK)}) + "\n") * 4)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_corpus_item("examples/grpo_sciworld/sciworld.yaml", model, tasks,
                                                  tmp_path / "ckpt")))
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m]
    assert [m["training/global_step"] for m in metrics] == [1] and 0.0 <= metrics[-1]["critic/score/mean"] <= 1.0
