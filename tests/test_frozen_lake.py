"""Trinity-RFT's frozen_lake_workflow (rft.explorer.frozen_lake): maps, observations and actions by hand, episodes
with a scripted model (rewards, Trinity's turns, the token budget), Trinity's example YAML through `rft train`, and
the refusals."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from cli_helpers import rft_here

from rft.config import ConfigError
from rft.data.dataset import Prompt
from rft.dialects.trinity import translate
from rft.errors import RftError
from rft.explorer.frozen_lake import (
    INVALID,
    INVALID_NOTE,
    SYSTEM_PROMPT,
    Lake,
    _has_path,
    generate_map,
    observation_message,
    parse_action,
)
from rft.explorer.model import Completion, Conversation
from rft.explorer.workflow import FrozenLakeWorkflow, Task
from rft.rollout import SamplingParams


@pytest.mark.parametrize("reply, action", [
    ("I go right. ```Right```", 3), ("```up```", 4), ("```LEFT```", 1), ("```Down```", 2),
    ("think ```Up``` no, ```Left```", 1),  # the last block
    ("```2```", 2), ("```5```", INVALID), ("```Jump```", INVALID), ("Right", INVALID), ("``` right ```", 3),
])
def test_actions_are_read_as_trinity_reads_them(reply, action):
    assert parse_action(reply) == action


def test_the_board_renders_as_trinitys_text():
    lake = Lake(["SFF", "FHF", "FFG"], is_slippery=False, seed=0)
    assert lake.render() == " P \t _ \t _ \t\n _ \t O \t _ \t\n _ \t _ \t G \t"
    assert lake.step(3) == (0.0, False) and lake.position() == (0, 1)  # Right
    assert lake.render().splitlines()[0] == " _ \t P \t _ \t"  # the start drawn frozen
    assert lake.step(2) == (0.0, True)  # Down into the hole: over, nothing paid
    assert lake.render().splitlines()[1] == " _ \t X \t _ \t"
    goal = Lake(["SG"], is_slippery=False, seed=0)
    assert goal.step(INVALID) == (0.0, False) and goal.position() == (0, 0)  # no move
    assert goal.step(3) == (1.0, True) and goal.render() == " _ \t √ \t"
    assert goal.step(3) == (1.0, True)  # on the goal: paid again, as Trinity's env_step


def test_generated_maps_are_seeded_and_have_a_short_path():
    a, b = generate_map(4, 0.8, seed=7, max_steps=3), generate_map(4, 0.8, seed=7, max_steps=3)
    assert a == b and len(a) == 4 and all(len(r) == 4 for r in a)
    assert sum(r.count("S") for r in a) == 1 and sum(r.count("G") for r in a) == 1
    assert _has_path([list(r) for r in a], 4, 3)
    assert generate_map(4, 0.8, seed=8, max_steps=3) != a
    # by hand: S next to G is a path of one move; a wall of holes between them is none
    assert _has_path([list("SG"), list("FF")], 2, 0) and not _has_path([list("SH"), list("HG")], 2, 5)
    # a row that can make no map is one line, where Trinity draws forever
    with pytest.raises(RftError, match="no room for a start and a goal"):
        generate_map(1, 0.8, seed=0, max_steps=8)
    import rft.explorer.frozen_lake as lake

    lake.MAP_TRIES, tries = 3, lake.MAP_TRIES  # all holes: only a goal next to the start would do
    try:
        with pytest.raises(RftError, match="raise p or env_max_steps"):
            generate_map(8, 0.0, seed=0, max_steps=1)
    finally:
        lake.MAP_TRIES = tries


def test_observation_messages_are_trinitys_words():
    assert observation_message(0, "B", False, 10) == (
        "Current Observation (0): \nB\nYou have not achieved the goal, P has not reached G yet. Please give the next "
        "action.\nThe maximum number of steps remaining is 10.")
    assert observation_message(3, "B", True, 0).endswith("Please give the next action." + INVALID_NOTE)


class Scripted:
    """A model handle (start / respond) on a real tokenizer whose n-th reply in a conversation is `script[n]`."""

    def __init__(self, tokenizer, script: list[str], max_tokens: int):
        self.tokenizer, self.script = tokenizer, script
        self.sampling = SamplingParams(max_tokens=max_tokens)
        self.asked: list[int] = []  # max_tokens of each call

    def start(self, messages, tools=None):
        return Conversation(self.tokenizer, messages)

    def respond(self, conversations, max_tokens=None, **sampling):
        for c in conversations:
            self.asked.append(max_tokens)
            text = self.script[c.turns]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens]
            c.append_completion(Completion(text=self.tokenizer.decode(ids), prompt_ids=list(c.ids), token_ids=ids,
                                           logprobs=[-0.5] * len(ids), finish_reason="stop"))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from rft.models.tiny import init_model

    folder = tmp_path_factory.mktemp("lake_model")
    init_model("tiny", folder, seed=0)
    return AutoTokenizer.from_pretrained(folder)


def _task(row: dict, n: int, args: dict) -> Task:
    return Task(prompt=Prompt(ids=[], data_source="frozenlake", ground_truth=None, extra_info={}, row=row),
                repeat_times=n, workflow_args=args)


def test_an_episode_that_reaches_the_goal_is_paid_one(tokenizer):
    model = Scripted(tokenizer, ["```Right```", "```Down```"], max_tokens=400)
    exps = FrozenLakeWorkflow(task=_task({"seed": 0}, 2, {"desc": ["SF", "FG"]}), model=model).run()
    assert [e.reward for e in exps] == [1.0, 1.0]
    assert [e.info["env_steps"] for e in exps] == [2, 2] and [e.rewards["env_done"] for e in exps] == [1.0, 1.0]
    assert exps[0].info["turns"] == 2
    # the first budget is the whole of it; the second what the first reply and the next observation left
    assert model.asked[0] == 400 and model.asked[2] < 400
    # the loss is on the model's turns: two replies' tokens
    reply_tokens = sum(len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in ["```Right```", "```Down```"])
    assert int(exps[0].action_mask.sum()) == reply_tokens


def test_a_reply_without_an_action_is_told_so_and_the_turns_run_out(tokenizer):
    model = Scripted(tokenizer, ["I am lost."] * 3, max_tokens=4000)
    task = _task({"seed": 0}, 1, {"desc": ["SF", "FG"], "agent_max_steps": 3})
    workflow = FrozenLakeWorkflow(task=task, model=model)
    starts = []
    original = model.start
    model.start = lambda messages, tools=None: starts.append(messages) or original(messages)
    (exp,) = workflow.run()
    assert exp.reward == 0.0 and exp.info["env_steps"] == 3 and exp.rewards["env_done"] == 0.0
    assert starts[0][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert starts[0][1]["content"] == observation_message(0, " P \t _ \t\n _ \t G \t", False, 3)
    text = tokenizer.decode(exp.tokens)
    assert observation_message(1, " P \t _ \t\n _ \t G \t", True, 2) in text  # Trinity's note: nothing moved
    assert "The maximum number of steps remaining" in text and "Current Observation (3)" not in text


def test_the_token_budget_ends_an_episode_without_its_last_observation(tokenizer):
    long = "```Left``` " + "wait " * 30
    first = Scripted(tokenizer, [long], max_tokens=4000)
    model = Scripted(tokenizer, [long] * 10, max_tokens=0)
    # a budget the first reply and one observation exceed: the episode ends after one turn, truncated
    probe = FrozenLakeWorkflow(task=_task({"seed": 0}, 1, {"desc": ["SFF", "FFG"], "agent_max_steps": 1}),
                               model=first).run()[0]
    budget = len(probe.tokens) - probe.prompt_length + 5
    model.sampling = SamplingParams(max_tokens=budget)
    (exp,) = FrozenLakeWorkflow(task=_task({"seed": 0}, 1, {"desc": ["SFF", "FFG"]}), model=model).run()
    assert exp.info["truncated"] == 1 and exp.info["env_steps"] == 1 and exp.reward == 0.0
    # the observation that did not fit is not in it: the first reply alone
    assert len(exp.tokens) - exp.prompt_length == len(probe.tokens) - probe.prompt_length


# ------------------------------------------------------------------------------------ Trinity's YAML, rft train


def test_trinitys_frozen_lake_example_lands_on_the_workflow():
    config = {"project": "p", "name": "n", "model": {"model_path": "m"}, "buffer": {"explorer_input": {
        "taskset": {"path": "t", "workflow_args": {"env_max_steps": 8, "agent_max_steps": 10, "is_slippery": False}},
        "default_workflow_type": "frozen_lake_workflow"}}}
    out = translate(config)
    assert out["workflow"]["type"] == "frozen_lake_workflow" and out["data"]["prompt_key"] is None
    assert out["workflow"]["args"] == {"env_max_steps": 8, "agent_max_steps": 10, "is_slippery": False}


def test_trinitys_frozen_lake_trains_two_steps(tmp_path, caplog):
    """Trinity's example, its taskset naming a response column its rows lack (the lake pays the reward: Trinity reads
    the missing column as None; rft notes that the key has no effect)."""
    rft_here("init-model", "--preset", "tiny", "m", cwd=tmp_path)
    rows = [{"seed": s, "size": 3, "p": 0.8, "index": i, "uid": f"{s}_3_0.8"} for i, s in enumerate(range(100, 108))]
    (tmp_path / "lake").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "lake" / "train.parquet")
    config = {
        "project": "lake", "name": "run", "mode": "both", "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(tmp_path / "m"), "max_prompt_tokens": 1024, "max_response_tokens": 24},
        "buffer": {"batch_size": 2, "total_steps": 2, "explorer_input": {
            "taskset": {"name": "lake", "path": str(tmp_path / "lake"), "split": "train",
                        "workflow_args": {"env_max_steps": 4, "agent_max_steps": 2, "is_slippery": False},
                        "format": {"response_key": "task_desc"}},
            "default_workflow_type": "frozen_lake_workflow"}},
        "explorer": {"eval_interval": 100}, "trainer": {"save_interval": 100},
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(config))
    rft_here("train", "t.yaml", cwd=tmp_path)
    out = tmp_path / "ckpt" / "lake" / "run"
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(0.0 <= s["critic/score/mean"] <= 1.0 for s in steps)
    assert (out / "model" / "model.safetensors").exists()
    assert "reads no reference answer, so these keys have no effect: buffer.explorer_input.taskset.format" \
        ".response_key" in caplog.text


@pytest.mark.parametrize("overrides, message", [
    (["workflow.args={desc: [SFX, FFG]}"], "must be a map"),
    (["workflow.args={agent_max_steps: 0}"], "workflow.args.agent_max_steps=0 must be an integer >= 1"),
    (["workflow.args={is_slippery: maybe}"], "must be true or false"),
    (["workflow.args={max_turns: 2}"], "are not arguments of workflow.type='frozen_lake_workflow'"),
])
def test_bad_frozen_lake_arguments_are_refused(overrides, message):
    from test_config import load

    with pytest.raises(ConfigError) as err:
        load("workflow.type=frozen_lake_workflow", "data.prompt_key=null", *overrides)
    assert message in str(err.value), str(err.value)


def test_rows_without_a_prompt_need_a_workflow_that_writes_its_own():
    from test_config import load

    with pytest.raises(ConfigError, match="data.prompt_key=null .* needs a workflow that writes its own"):
        load("data.prompt_key=null")
