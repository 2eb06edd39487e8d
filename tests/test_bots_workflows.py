"""Trinity-RFT's BOTS example (examples/bots: arXiv:2510.26374): its plugin's workflows (bots_math_boxed_workflow,
bots_ref_eval_collect_math_boxed_workflow, named by module path in its YAMLs) and reward (bots_math_boxed_reward),
by hand; its three YAMLs translated; bots.yaml and random.yaml trained one step, ref_eval_collect.yaml explored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rft.config.load import ConfigError
from rft.data.dataset import Prompt
from rft.data.io import column_value, has_column
from rft.dialects.trinity import translate
from rft.explorer.model import Completion
from rft.explorer.plugins import workflow_class
from rft.explorer.workflow import (
    BOTSMathBoxedWorkflow,
    BOTSRefEvalCollectWorkflow,
    Task,
)
from rft.rewards import reward_fn_type
from rft.rewards.math_answers import bots_math_boxed_reward, marked_answer

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "peer-configs" / "trinity"


@pytest.mark.parametrize("response, answer, accuracy", [
    # Trinity's math grader's reading, rule by rule (truth 36)
    ("so the answer is 36", "36", 1.0),
    ("The answer is: 36 apples. Done", "36 apples", 1.0),  # after "answer:", then before the last ". "
    ("36 is the answer", "36", 1.0),  # before "is the answer"
    ("<think> 6 x 6 </think> \\boxed{36}", "36", 1.0),  # the last \boxed{}
    ("\\boxed{35} then \\boxed{36}", "36", 1.0),
    ("\\boxed{x = 36}", "36", 1.0),  # after the last "="
    ("The answer is 36.", "36.", 1.0),  # the closing full stop dropped, as Trinity's float() check drops it
    ("I get 35", "35", 0.0),  # after "get "
    ("I think it is 6 x 6", "6 x 6", 0.0),  # after "is ": "6 x 6" is no number math-verify equates with 36
    ("no idea", "no idea", 0.0),
    ("", "", 0.0),
])
def test_bots_reward_reads_the_answer_as_trinitys_grader_and_checks_it_by_hand(response, answer, accuracy):
    assert marked_answer(response) == answer
    assert bots_math_boxed_reward("math", response, "36") == {"score": accuracy, "accuracy": accuracy,
                                                              "math_verify_timeout": 0.0}


def test_a_dotted_column_reads_the_nested_field_as_bots_reads_its_rows():
    row = {"prompt": "p", "reward_model": {"ground_truth": "7"}, "a.b": 1}
    assert column_value(row, "reward_model.ground_truth") == "7"
    assert column_value(row, "a.b") == 1  # a column of that very name first
    assert not has_column(row, "reward_model.style") and not has_column(row, "prompt.x")
    with pytest.raises(KeyError):
        column_value(row, "nope")


class FakeModel:
    def __init__(self, replies: list[str], version: int = 3):
        self.replies, self.asked = replies, []
        self.server = type("S", (), {"engine": type("E", (), {"version": version})()})()

    def chat(self, messages, n=1, tools=None, **sampling):
        self.asked.append(messages)
        assert n == len(self.replies)
        return [Completion(text=r, prompt_ids=[1, 2], token_ids=[3, 4], logprobs=[-0.5, -0.5], finish_reason="stop")
                for r in self.replies]


MESSAGES = [{"role": "user", "content": "What is 6 x 6? Put the answer in \\boxed{}."}]
REPLIES = ["<think> 6 x 6 </think> \\boxed{36}", "\\boxed{36}", "<think> hm </think> \\boxed{35}"]


def _task(args=None, replies=REPLIES):
    prompt = Prompt(ids=[1, 2], data_source="math", ground_truth="36", extra_info={}, messages=MESSAGES)
    return Task(prompt=prompt, repeat_times=len(replies), workflow_args=args or {},
                reward_fn=reward_fn_type("bots_math_boxed_reward"))


@pytest.mark.parametrize("args, rewards", [
    ({}, [1.0, 1.0, 0.0]),
    # with_think: -format_score_coef for a reply without one <think>...</think>
    ({"with_think": True}, [1.0, 0.9, 0.0]),
    ({"with_think": True, "format_score_coef": 0.5}, [1.0, 0.5, 0.0]),
])
def test_bots_workflow_sends_the_rows_conversation_as_it_is_and_scores_as_trinity(args, rewards):
    model = FakeModel(REPLIES)
    exps = BOTSMathBoxedWorkflow(task=_task(args), model=model).run()
    assert model.asked == [MESSAGES]  # no system prompt added, with_think or not
    assert [e.reward for e in exps] == pytest.approx(rewards)
    assert [e.rewards["accuracy"] for e in exps] == [1.0, 1.0, 0.0]
    assert workflow_class("bots_math_boxed_workflow") is BOTSMathBoxedWorkflow


def test_bots_reference_collection_appends_one_line_per_task(tmp_path, monkeypatch):
    log = tmp_path / "logs" / "ref.jsonl"
    monkeypatch.setenv("BOTS_REF_EVAL_LOG_FILE", str(log))
    for replies in (REPLIES, REPLIES[2:]):
        BOTSRefEvalCollectWorkflow(task=_task(replies=replies), model=FakeModel(replies, version=5)).run()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert lines == [{"model_version": 5, "rewards": [1.0, 1.0, 0.0], "question": MESSAGES, "truth": "36"},
                     {"model_version": 5, "rewards": [0.0], "question": MESSAGES, "truth": "36"}]


def _trinity(workflow: str, **taskset) -> dict:
    return {"mode": "both", "model": {"model_path": "m"}, "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "buffer": {"batch_size": 2, "total_steps": 1,
                       "explorer_input": {"taskset": {"path": "t", **taskset}, "default_workflow_type": workflow}}}


@pytest.mark.parametrize("written, workflow", [
    ("examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow", "bots_math_boxed_workflow"),
    ("bots_math_boxed_workflow", "bots_math_boxed_workflow"),
    ("bots_ref_eval_collect_math_boxed_workflow", "bots_ref_eval_collect_math_boxed_workflow"),
])
def test_trinitys_bots_workflow_names_translate_with_their_reward(written, workflow):
    out = translate(_trinity(written, format={"prompt_key": "prompt", "response_key": "reward_model.ground_truth"}))
    assert out["workflow"]["type"] == workflow
    assert out["custom_reward_function"]["reward_fn_type"] == "bots_math_boxed_reward"
    assert out["data"]["response_key"] == "reward_model.ground_truth"


def test_a_reward_the_bots_workflow_would_not_read_is_refused_by_its_key():
    with pytest.raises(ConfigError) as err:
        translate(_trinity("bots_math_boxed_workflow", default_reward_fn_type="math_reward"), "t.yaml")
    assert ("buffer.explorer_input.taskset.default_reward_fn_type='math_reward': Trinity-RFT's "
            "bots_math_boxed_workflow scores with its own reward, bots_math_boxed_reward") in str(err.value)


def _guru_rows() -> list[dict]:
    """GURU's columns (the BOTS example's data): the prompt as a conversation, the truth nested, two pass rates."""
    return [{"prompt": MESSAGES, "reward_model": {"ground_truth": str(36 + i)}, "data_source": "math",
             "qwen2.5_7b_pass_rate": i / 4, "qwen3_30b_pass_rate": 1 - i / 4} for i in range(4)]


def _item(name: str, tmp_path: Path) -> Path:
    """Trinity's BOTS YAML as its user runs it, with local stand-ins and small sizes (the tiny model, 2 tasks x 2
    samples of 16 tokens, one step, the hf engine)."""
    from rft.data.io import write_parquet
    from rft.models.tiny import init_model

    model, tasks = tmp_path / "m", tmp_path / "tasks"
    init_model("tiny", model, seed=0)
    tasks.mkdir()
    write_parquet(_guru_rows(), tasks / "train.parquet")
    tree = yaml.safe_load((CORPUS / "examples" / "bots" / name).read_text())
    tree["model"].update(model_path=str(model), max_response_tokens=16, max_prompt_tokens=64)
    tree["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    tree["cluster"] = {"node_num": 1, "gpu_per_node": 1}
    tree["algorithm"]["repeat_times"] = 2
    buffer = tree["buffer"]
    buffer.update(total_steps=1, batch_size=2)
    buffer["explorer_input"]["taskset"]["path"] = str(tasks)
    buffer["explorer_input"].pop("eval_tasksets", None)
    buffer["trainer_input"]["experience_buffer"]["path"] = f"sqlite:///{tmp_path / 'buffer.db'}"
    tree["explorer"]["rollout_model"].update(engine_num=1, engine_type="hf")
    tree["synchronizer"]["sync_method"] = "checkpoint" if tree.get("mode") == "explore" else "memory"
    tree["synchronizer"]["sync_interval"] = 1
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree))
    return config


@pytest.mark.parametrize("name", ["bots.yaml", "random.yaml"])
def test_trinitys_bots_examples_train_one_step(tmp_path, name):
    from cli_helpers import rft_here

    config = _item(name, tmp_path)
    shown = yaml.safe_load(rft_here("config", "show", str(config), cwd=tmp_path).stdout)
    assert (shown["workflow"]["type"], shown["custom_reward_function"]["reward_fn_type"]) == (
        "bots_math_boxed_workflow", "bots_math_boxed_reward")
    assert shown["data"]["selector"]["selector_type"] == ("difficulty_based" if name == "bots.yaml" else "random")
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl")
               for m in map(json.loads, f.read_text().splitlines()) if "training/global_step" in m]
    assert [m["training/global_step"] for m in metrics] == [1]
    assert metrics[-1]["reward_extra/accuracy/mean"] == 0.0  # the tiny model answers nothing right


def test_trinitys_bots_reference_collection_writes_a_line_per_task(tmp_path, monkeypatch):
    from cli_helpers import rft_here

    config = _item("ref_eval_collect.yaml", tmp_path)
    log = tmp_path / "ref.jsonl"
    monkeypatch.setenv("BOTS_REF_EVAL_LOG_FILE", str(log))
    rft_here("train", str(config), cwd=tmp_path)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 2  # one explore step of 2 tasks
    assert all(line["question"] == MESSAGES and len(line["rewards"]) == 2 for line in lines)
    assert sorted(line["truth"] for line in lines) == sorted({line["truth"] for line in lines})
