"""Issue 63 (Trinity half): Trinity-RFT's workflows and reward functions that its examples name and rft now runs:
math_boxed_workflow (its prompts, its with_think format part, use_base), simple_mm_workflow (its fixed system
prompt), math_rm_workflow (simple_workflow), and rm_gallery_reward with reward_name math_verify_reward (RM-Gallery's
math-verify rule, rft's math_verify_reward). Rewards by hand on Trinity's own test cases; the dialect's translation
and refusals; the workflow arguments' checks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from rft.config.load import ConfigError
from rft.data.dataset import Prompt
from rft.dialects.trinity import translate
from rft.distributed import SINGLE
from rft.explorer.model import Completion
from rft.explorer.plugins import workflow_class
from rft.explorer.workflow import (
    BOXED_PROMPT,
    BOXED_THINK_PROMPT,
    QWEN_MATH_SYSTEM_PROMPT,
    MathBoxedWorkflow,
    OnPolicyDistillMathWorkflow,
    SimpleMMWorkflow,
    Task,
)
from rft.rewards import REWARD_FN_TYPES, reward_fn_type
from rft.rewards.formats import think_format_penalty
from rft.rewards.math_answers import math_verify_reward


# Trinity-RFT's own test of rm_gallery_reward with reward_name math_verify_reward (tests/explorer/workflow_test.py):
# truth "36"; rewards 1, 1, 1, 0
@pytest.mark.parametrize("response, accuracy", [
    ("<think> balabalabala 99 </think>\n \\boxed{36}", 1.0),
    ("answer is \\boxed{36 }", 1.0),
    ("Kim's total points are 6 + 30 =\\boxed{36}", 1.0),
    ("<think> balalaba </think> \\boxed{35.00}", 0.0),
    ("the answer is 36", 1.0),  # no box needed: the whole response is read
    ("no number at all", 0.0),
])
def test_math_verify_reward_by_hand(response, accuracy):
    assert math_verify_reward("", response, "36") == {"score": accuracy, "accuracy": accuracy,
                                                      "math_verify_timeout": 0.0}
    assert "math_verify_reward" in REWARD_FN_TYPES


# Trinity-RFT's math_boxed_reward_naive_dapo (its GURU math template's reward): the last \boxed{} after the last
# </think>, else that whole text; format_score always 0
@pytest.mark.parametrize("response, truth, accuracy", [
    ("<think> maybe \\boxed{35} </think> so \\boxed{36}", "36", 1.0),
    ("<think> \\boxed{36} </think> the answer is 35", "36", 0.0),  # the box inside the thinking is not read
    ("36", "36", 1.0),  # no box: the text itself
    ("</think>\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{(1, 2)}", "(1,2)", 1.0),
    ("<think> 36 </think>", "36", 0.0),  # nothing after the thinking
])
def test_math_boxed_reward_naive_dapo_by_hand(response, truth, accuracy):
    from rft.rewards.math_answers import math_boxed_reward_naive_dapo

    assert math_boxed_reward_naive_dapo("", response, truth) == {
        "score": accuracy, "accuracy": accuracy, "format_score": 0.0, "math_verify_timeout": 0.0}
    assert "math_boxed_reward_naive_dapo" in REWARD_FN_TYPES


@pytest.mark.parametrize("response, coef, penalty", [
    ("<think> a </think> \\boxed{1}", 0.1, 0.0),
    ("x <think>a</think> y", 0.5, 0.0),  # text may surround the pair
    ("\\boxed{1}", 0.1, -0.1),  # no think
    ("</think> a <think>", 0.1, -0.1),  # the wrong order
    ("<think>a</think><think>b</think>", 0.2, -0.2),  # two pairs
    ("\\boxed{1}", 0, -0.1),  # Trinity's `coef or 0.1`
])
def test_think_format_penalty_by_hand(response, coef, penalty):
    assert think_format_penalty(response, coef) == pytest.approx(penalty)


class FakeModel:
    """A model handle whose replies are given: records the messages or prompt text it was asked with."""

    def __init__(self, replies: list[str]):
        self.replies, self.asked = replies, []

    def _completions(self, n: int) -> list[Completion]:
        assert n == len(self.replies)
        return [Completion(text=r, prompt_ids=[1, 2], token_ids=[3, 4], logprobs=[-0.5, -0.5], finish_reason="stop")
                for r in self.replies]

    def chat(self, messages, n=1, tools=None, **sampling):
        self.asked.append(messages)
        return self._completions(n)

    def generate(self, prompts, n=1, **sampling):
        self.asked.append(prompts)
        return [self._completions(n)]


def _task(messages, replies, args=None, truth="36", reward="math_boxed_reward"):
    prompt = Prompt(ids=[1, 2], data_source="math", ground_truth=truth, extra_info={}, messages=messages)
    return Task(prompt=prompt, repeat_times=len(replies), workflow_args=args or {}, reward_fn=reward_fn_type(reward))


REPLIES = ["<think> 6 x 6 </think> \\boxed{36}", "\\boxed{36}", "<think> hm </think> \\boxed{35}", "36"]


@pytest.mark.parametrize("args, rewards, fmt", [
    # Trinity's MathBoxedRewardFn: accuracy of the last \boxed{}, + format_score -coef when with_think and the reply
    # has no single <think>...</think>; rewards are their sum
    ({}, [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]),
    ({"with_think": True}, [1.0, 0.9, 0.0, -0.1], [0.0, -0.1, 0.0, -0.1]),
    ({"with_think": True, "format_score_coef": 0.5}, [1.0, 0.5, 0.0, -0.5], [0.0, -0.5, 0.0, -0.5]),
])
def test_math_boxed_workflow_scores_as_trinity(args, rewards, fmt):
    model = FakeModel(REPLIES)
    task = _task([{"role": "user", "content": "What is 6 x 6?"}], REPLIES, args)
    exps = MathBoxedWorkflow(task=task, model=model).run()
    assert [e.reward for e in exps] == pytest.approx(rewards)
    assert [e.rewards["format_score"] for e in exps] == pytest.approx(fmt)
    assert [e.rewards["accuracy"] for e in exps] == [1.0, 1.0, 0.0, 0.0]
    # Trinity's system prompt, the think one with with_think, before the question
    assert model.asked[0] == [{"role": "system", "content": BOXED_THINK_PROMPT if args else BOXED_PROMPT},
                              {"role": "user", "content": "What is 6 x 6?"}]


def test_math_boxed_workflow_keeps_the_tasks_system_prompt_and_prompts_a_base_model_as_trinity():
    model = FakeModel(["\\boxed{36}"])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6 x 6?"}]
    exps = MathBoxedWorkflow(task=_task(messages, ["\\boxed{36}"], {"use_base": True}), model=model).run()
    assert model.asked == [["System:Be brief.\nUser:\n6 x 6?\nAssistant:\n"]]
    assert [e.reward for e in exps] == [1.0]


def test_simple_mm_workflow_puts_trinitys_prompt_in_place_of_the_tasks():
    model = FakeModel(["\\boxed{36}", "37"])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6 x 6?"}]
    exps = SimpleMMWorkflow(task=_task(messages, ["a", "b"]), model=model).run()
    assert model.asked[0] == [{"role": "system", "content": BOXED_THINK_PROMPT}, {"role": "user", "content": "6 x 6?"}]
    assert [e.reward for e in exps] == [1.0, 0.0]
    assert workflow_class("simple_mm_workflow") is SimpleMMWorkflow


def test_on_policy_distill_math_workflow_prompts_as_trinity():
    """Qwen2.5-Math's prompt in place of the task's (its system prompt dropped), word for word; the run's reward."""
    model = FakeModel(["\\boxed{36}", "37"])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 6 x 6?"}]
    exps = OnPolicyDistillMathWorkflow(task=_task(messages, ["a", "b"]), model=model).run()
    assert model.asked[0] == [{"role": "system", "content": "You are a helpful assistant."},
                              {"role": "user", "content": "What is 6 x 6?\nPlease reason step by step, and put your "
                                                          "final answer within \\boxed{}."}]
    assert QWEN_MATH_SYSTEM_PROMPT == "You are a helpful assistant."
    assert [e.reward for e in exps] == [1.0, 0.0]
    assert workflow_class("on_policy_distill_math_workflow") is OnPolicyDistillMathWorkflow


def _trinity(taskset: dict, **buffer) -> dict:
    return {"mode": "both", "model": {"model_path": "m"}, "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "buffer": {"batch_size": 2, "total_steps": 1,
                       "explorer_input": {"taskset": {"path": "t", **taskset}, **buffer}}}


@pytest.mark.parametrize("taskset, buffer, workflow, reward", [
    # grpo_math's pair: Trinity's math_rm_workflow is simple_workflow; RM-Gallery's math_verify_reward is rft's
    ({"default_workflow_type": "math_rm_workflow", "default_reward_fn_type": "rm_gallery_reward",
      "reward_fn_args": {"reward_name": "math_verify_reward"}}, {}, "simple_workflow", "math_verify_reward"),
    # the async variants: the same workflow
    ({"default_workflow_type": "async_math_workflow"}, {}, "math_workflow", "math_reward"),
    ({"default_workflow_type": "async_math_boxed_workflow"}, {}, "math_boxed_workflow", "math_boxed_reward"),
    # math_boxed_workflow scores with math_boxed_reward where the taskset names none, else with the one it names
    ({"default_reward_fn_type": "math_dapo_reward"}, {"default_workflow_type": "math_boxed_workflow"},
     "math_boxed_workflow", "math_dapo_reward"),
    ({}, {"default_workflow_type": "math_boxed_workflow"}, "math_boxed_workflow", "math_boxed_reward"),
    ({"default_reward_fn_type": "math_boxed_reward"}, {"default_workflow_type": "math_boxed_workflow"},
     "math_boxed_workflow", "math_boxed_reward"),
    ({"default_workflow_type": "simple_mm_workflow", "default_reward_fn_type": "math_boxed_reward"}, {},
     "simple_mm_workflow", "math_boxed_reward"),
])
def test_trinitys_workflow_and_reward_names_translate(taskset, buffer, workflow, reward):
    out = translate(_trinity(taskset, **buffer))
    assert out["workflow"]["type"] == workflow
    assert out["custom_reward_function"]["reward_fn_type"] == reward
    assert not out["custom_reward_function"].get("reward_kwargs")


@pytest.mark.parametrize("taskset, buffer, needle", [
    ({"default_reward_fn_type": "rm_gallery_reward", "reward_fn_args": {"reward_name": "base_helpfulness_listwise"}},
     {}, "buffer.explorer_input.taskset.default_reward_fn_type='rm_gallery_reward' with "
         "reward_name='base_helpfulness_listwise' (buffer.explorer_input.taskset.reward_fn_args): RM-Gallery's reward "
         "models and graders are not in rft"),
    ({"default_reward_fn_type": "rm_gallery_reward", "reward_fn_args": {"reward_name": "math_verify_reward",
                                                                        "timeout_score": 0.5}},
     {}, "buffer.explorer_input.taskset.reward_fn_args={'timeout_score': 0.5}"),
])
def test_what_trinity_would_not_read_or_rft_has_not_is_refused_by_its_key(taskset, buffer, needle):
    with pytest.raises(ConfigError) as err:
        translate(_trinity(taskset, **buffer), "t.yaml")
    assert needle in str(err.value), str(err.value)


@pytest.mark.parametrize("args, needle", [
    ({"with_thinking": True}, "workflow.args: ['with_thinking'] are not arguments of "
                              "workflow.type='math_boxed_workflow', which takes ['format_score_coef', 'use_base', "
                              "'with_think']"),
    ({"with_think": "sometimes"}, "workflow.args.with_think='sometimes' must be true or false"),
    ({"format_score_coef": -1}, "workflow.args.format_score_coef=-1 must be a number >= 0"),
    ({"with_think": True, "reward": "math_reward"}, "workflow.args.with_think=true adds math_boxed_reward's think "
                                                    "format part"),
])
def test_math_boxed_workflow_arguments_are_checked(tmp_path, args, needle):
    from rft.explorer.checks import BUILTIN_WORKFLOWS
    from rft.trainer.configure import load_config
    from rft.trainer.validate import validate

    assert {"math_boxed_workflow", "simple_mm_workflow"} <= set(BUILTIN_WORKFLOWS)
    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "1+1=", "data_source": "d", "reward_model": {"ground_truth": "2"}}\n')
    reward = args.pop("reward", "math_boxed_reward")
    flow = "{" + ", ".join(f"{k}: {v}" for k, v in args.items()) + "}"
    with pytest.raises(ConfigError) as err:
        cfg = load_config(None, [f"data.train_files={data}", "actor_rollout_ref.model.path=m",
                                 "workflow.type=math_boxed_workflow", f"workflow.args={flow}",
                                 f"custom_reward_function.reward_fn_type={reward}"], validate_paths=False)
        validate(cfg, check_paths=False)
    assert needle in str(err.value), str(err.value)


# ------------------------------------------------------------------------------------------------ one step each

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "peer-configs" / "trinity"


def _corpus_item(item: str, model: Path, tasks: Path, ckpt: Path) -> dict:
    """A Trinity-RFT example as its user runs it, with local stand-ins and small sizes (as
    ../shared/peer-configs/measure.py trains its items): the tiny model, this test's rows, one process, one step of
    2 tasks x 2 samples of 16 tokens, the hf engine; its workflow, reward function and formats as written."""
    tree = yaml.safe_load((CORPUS / item).read_text())
    tree["model"].update(model_path=str(model), max_response_tokens=16)
    tree["model"].pop("max_model_len", None)
    tree["checkpoint_root_dir"] = str(ckpt)
    tree["cluster"] = {"node_num": 1, "gpu_per_node": 1}
    tree["algorithm"]["repeat_times"] = 2
    buffer = tree["buffer"]
    buffer.update(total_steps=1, batch_size=2, total_epochs=1)
    buffer.pop("train_batch_size", None)
    buffer["explorer_input"]["taskset"]["path"] = str(tasks)
    buffer["explorer_input"].pop("eval_tasksets", None)
    tree["explorer"]["rollout_model"].update(engine_num=1, engine_type="hf", enforce_eager=True)
    tree["explorer"]["eval_interval"] = 1000
    for aux in tree["explorer"].get("auxiliary_models") or []:  # a distillation teacher: the tiny model too
        aux["model_path"] = str(model)
    buffer["explorer_input"]["taskset"].pop("subset_name", None)  # the stand-in rows are one file
    return tree


@pytest.mark.parametrize("item, rows, workflow, reward", [
    ("examples/asymre_math/math.yaml", [{"problem": "What is 6 x 6?", "solution": "36"}] * 4,
     "math_boxed_workflow", "math_boxed_reward"),
    ("examples/grpo_math/math.yaml", [{"question": "What is 6 x 6?", "gt_answer": "36"}] * 4,
     "simple_workflow", "math_verify_reward"),
    ("examples/grpo_vlm/vlm.yaml", "image rows", "simple_mm_workflow", "math_boxed_reward"),
    # on_policy_distill: the teacher (explorer.auxiliary_models[0]) scores the tokens; the reward is only logged
    ("examples/opd_gsm8k/opd_gsm8k.yaml", [{"question": "What is 6 x 6?", "answer": "36"}] * 4,
     "on_policy_distill_math_workflow", "math_boxed_reward"),
    ("examples/opd_gsm8k/opd_gsm8k_jsd.yaml", [{"question": "What is 6 x 6?", "answer": "36"}] * 4,
     "on_policy_distill_math_workflow", "math_boxed_reward"),
])
def test_the_trinity_example_trains_one_step_with_its_workflow(tmp_path, vlm, caplog, item, rows, workflow, reward):
    from cli_helpers import rft_here

    from rft.data.io import write_parquet
    from rft.models.tiny import init_model

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    if rows == "image rows":  # geometry3k's columns: a question, its answer and its images
        from vision_helpers import png

        model = vlm("qwen2_vl")
        write_parquet([{"problem": "<image>How many shapes?", "answer": "1", "images": [png()]}] * 4,
                      tasks / "train.parquet")
    else:
        model = tmp_path / "m"
        init_model("tiny", model, seed=0)
        (tasks / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_corpus_item(item, model, tasks, tmp_path / "ckpt")))
    with caplog.at_level("WARNING", logger="rft"):
        shown = yaml.safe_load(rft_here("config", "show", str(config), cwd=tmp_path).stdout)
    assert (shown["workflow"]["type"], shown["custom_reward_function"]["reward_fn_type"]) == (workflow, reward)
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m]  # the trainer's (the explorer's own file logs its timings)
    assert [m["training/global_step"] for m in metrics] == [1]
    # the tiny models write no right answer: accuracy 0 on every sample, and the reward its parts' sum
    assert metrics[-1]["reward_extra/accuracy/mean"] == 0.0
    assert metrics[-1]["critic/score/mean"] == pytest.approx(0.0)
    if "opd" in item:  # the teacher, the student's own weights here, scored every sampled token: divergence 0
        assert shown["distillation"]["enabled"] is True
        # the teacher's pass is micro-batched by the reference's keys (trainer.max_token_len_per_gpu fills them)
        assert "builds no reference" not in caplog.text, caplog.text
        assert metrics[-1]["distill/divergence"] == pytest.approx(0.0, abs=1e-4)


DAPO_ARGS = {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 64, "cache_length": 16}


def test_math_dapo_rewards_overlong_penalty_is_rfts_overlong_buffer():
    tree = _trinity({"default_reward_fn_type": "math_dapo_reward", "reward_fn_args": DAPO_ARGS})
    tree["model"]["max_response_tokens"] = 64
    out = translate(tree)
    assert out["custom_reward_function"]["reward_fn_type"] == "math_dapo_reward"
    assert not out["custom_reward_function"].get("reward_kwargs")
    assert out["reward_model"]["reward_manager"] == "dapo"
    assert out["reward_model"]["overlong_buffer"] == {"enable": True, "len": 16, "penalty_factor": 1.0}


@pytest.mark.parametrize("args, needle", [
    ({**DAPO_ARGS, "max_response_length": 48}, "buffer.explorer_input.taskset.reward_fn_args.max_response_length=48 "
                                               "differs from model.max_response_tokens=64"),
    ({**DAPO_ARGS, "cache_length": 64}, "enable_overlong_penalty needs all three, max_response_length > cache_length"),
    ({**DAPO_ARGS, "cache_len": 3}, "['cache_len'] are not arguments of Trinity-RFT's math_dapo_reward"),
])
def test_math_dapo_reward_arguments_rft_cannot_honour_are_refused(args, needle):
    tree = _trinity({"default_reward_fn_type": "math_dapo_reward", "reward_fn_args": args})
    tree["model"]["max_response_tokens"] = 64
    with pytest.raises(ConfigError) as err:
        translate(tree, "t.yaml")
    assert needle in str(err.value), str(err.value)


def test_the_overlong_buffer_punishes_a_workflows_experiences(tmp_path):
    """DAPO's overlong punishment with a workflow (Trinity's math_dapo_reward adds it in the reward function): each
    experience's reward gets min(0, -(L - (max_response_length - len)) / len x factor) of its L model tokens.
    Hand-computed, max_response_length 8, len 4, factor 0.5: L 3 -> 0, 4 -> 0, 6 -> -0.25, 8 -> -0.5."""
    from types import SimpleNamespace

    import torch

    from rft.experience import Experience
    from rft.explorer.explorer import punish_overlong
    from rft.trainer.configure import load_config
    from rft.trainer.validate import validate

    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "1+1=", "data_source": "d", "reward_model": {"ground_truth": "2"}}\n')
    cfg = load_config(None, [f"data.train_files={data}", "actor_rollout_ref.model.path=m",
                             "workflow.type=math_boxed_workflow", "reward_model.reward_manager=dapo",
                             "reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=4",
                             "data.max_response_length=8",
                             "custom_reward_function.reward_fn_type=math_dapo_reward"], validate_paths=False)
    validate(cfg, check_paths=False)  # accepted: the workflow's experiences get it

    def experience(length: int, reward: float) -> Experience:
        return Experience(tokens=torch.arange(2 + length), prompt_length=2,
                          action_mask=torch.ones(length, dtype=torch.long), logprobs=torch.zeros(length),
                          reward=reward, group="g", rewards={"accuracy": reward})

    out = [experience(3, 1.0), experience(4, -1.0), experience(6, 1.0), experience(8, 1.0)]
    rewards = SimpleNamespace(overlong=SimpleNamespace(len=4, penalty_factor=0.5, log=True), max_response_length=8)
    punish_overlong(out, rewards)
    assert [e.reward for e in out] == pytest.approx([1.0, -1.0, 0.75, 0.5])
    assert [e.rewards["overlong_reward"] for e in out] == pytest.approx([0.0, 0.0, -0.25, -0.5])
    assert [e.rewards["overlong"] for e in out] == [0.0, 0.0, 1.0, 1.0]
    unchanged = [experience(8, 1.0)]
    punish_overlong(unchanged, SimpleNamespace(overlong=None))  # no buffer: nothing added
    assert unchanged[0].reward == 1.0 and "overlong_reward" not in unchanged[0].rewards


@pytest.mark.parametrize("reply, scores", [
    ("Solution 1 is right, 2 is not. [0.9, 0.2]", [0.9, 0.2]),
    ("first [1, 1] then, on reflection: [1.5, -0.3]", [1.0, 0.0]),  # the last list, clipped to [0, 1]
    ("no list here", None),
    ("[0.5, oops]", None),  # does not parse
    ("[0.5]", None),  # one score for two responses
])
def test_ruler_scores_by_hand(reply, scores):
    from rft.explorer.workflow import ruler_scores

    assert ruler_scores(reply, 2) == scores


def test_math_ruler_workflow_rewards_the_judges_scores_and_logs_the_gold_reward():
    """Trinity-RFT's math_ruler_workflow: the judge (auxiliary model 0) sees the question and every response in
    Trinity's prompt; its clipped scores are the rewards; the reward function's score is gold_reward only."""
    from rft.explorer.workflow import RULER_MATH_PROMPT, MathRULERWorkflow, ruler_messages

    replies = ["<answer> \\boxed{36} </answer>", "<answer> 35 </answer>"]
    model, judge = FakeModel(replies), FakeModel(["The first is right. [1.0, 0.25]"])
    task = _task([{"role": "user", "content": "What is 6 x 6?"}], replies, reward="math_boxed_reward")
    exps = MathRULERWorkflow(task=task, model=model, auxiliary_models=[judge]).run()
    assert [e.reward for e in exps] == [1.0, 0.25]
    assert [e.rewards["gold_reward"] for e in exps] == [1.0, 0.0]
    assert [e.rewards["judge_success"] for e in exps] == [1.0, 1.0]
    assert model.asked[0][0] == {"role": "system", "content": RULER_MATH_PROMPT}
    assert judge.asked == [ruler_messages("What is 6 x 6?", replies)]
    asked = judge.asked[0][1]["content"]
    assert "Candidate solution 1: <answer> \\boxed{36} </answer>\n\nCandidate solution 2: <answer> 35 </answer>" in asked
    assert judge.asked[0][0]["content"].startswith("You are a fair judge. The user will provide a question and 2 ")
    failed = MathRULERWorkflow(task=_task([{"role": "user", "content": "6 x 6?"}], replies),
                               model=FakeModel(replies), auxiliary_models=[FakeModel(["no scores"])]).run()
    assert [e.reward for e in failed] == [0.0, 0.0] and [e.rewards["judge_success"] for e in failed] == [0.0, 0.0]


class ScriptedModel(FakeModel):
    """The policy of a workflow that calls it more than once: each call's replies in turn."""

    def __init__(self, *calls: list[str]):
        super().__init__([])
        self.calls = list(calls)

    def chat(self, messages, n=1, tools=None, **sampling):
        self.replies = self.calls.pop(0)
        return super().chat(messages, n, tools, **sampling)


@pytest.mark.parametrize("with_truth", [True, False])
def test_math_trainable_ruler_workflow_trains_the_policy_as_its_own_judge(monkeypatch, with_truth):
    """Trinity-RFT's math_trainable_ruler_workflow: with the ground truth (a share of the tasks), the responses get
    their gold reward and each of repeat_times judgements by the policy 1 - mean |score - (gold + 0.1) / 1.2| in a
    group of its own; without it, one judgement whose scores are the rewards."""
    import rft.explorer.workflow as wf

    monkeypatch.setattr(wf, "TRAINABLE_RULER_GOLD_SHARE", 1.0 if with_truth else 0.0)
    replies = ["<think> 6 x 6 </think> <answer> 36 </answer>", "<answer> 35 </answer>"]
    judgements = ["[1.0, 0.5]", "no scores"] if with_truth else ["[0.75, 0.25]"]
    model = ScriptedModel(replies, judgements)
    task = _task([{"role": "user", "content": "What is 6 x 6?"}], replies, reward="math_reward")
    exps = wf.MathTrainableRULERWorkflow(task=task, model=model).run()
    # math_reward: 1.1 for the right answer in think and answer tags, -0.1 for a wrong one without think
    gold = [1.1, -0.1]
    assert [e.rewards["gold_reward"] for e in exps[:2]] == pytest.approx(gold)
    assert model.asked[0][0] == {"role": "system", "content": wf.RULER_MATH_PROMPT}
    assert model.asked[1] == wf.ruler_messages("What is 6 x 6?", replies, trainable=True)
    assert "candidate solutions.\nQuestion: What is 6 x 6?" in model.asked[1][1]["content"]
    assert model.asked[1][1]["content"].endswith("..., score for solution 2]\n")
    if with_truth:
        assert [e.reward for e in exps[:2]] == pytest.approx(gold)
        # scaled gold (g + 0.1) / 1.2 = [1.0, 0.0]: the first judgement misses by (0 + 0.5) / 2 -> 0.75; the second
        # does not parse -> 0
        assert [e.reward for e in exps[2:]] == pytest.approx([0.75, 0.0])
        assert [e.group for e in exps] == ["", "", "ruler", "ruler"]
        assert [e.rewards["judge_success"] for e in exps] == [0.5] * 4
        assert "reward_for_judger" in exps[2].rewards and "gold_reward" not in exps[2].rewards
    else:
        assert [e.reward for e in exps] == [0.75, 0.25] and len(exps) == 2
    validation = wf.MathTrainableRULERWorkflow(task=dataclasses.replace(task, is_eval=True),
                                               model=ScriptedModel(replies)).run()
    assert [e.reward for e in validation] == pytest.approx(gold)  # no judging in validation


def test_trinitys_trainable_ruler_example_trains_one_step(tmp_path):
    """examples/grpo_gsm8k_trainable_ruler as its user runs it (buffer.train_batch_size 960 of 768: the judgements
    are experiences too), with the stand-ins: one trainer step of experience_buffer.train_batch_size experiences."""
    from cli_helpers import rft_here

    from rft.models.tiny import init_model

    model, tasks = tmp_path / "m", tmp_path / "tasks"
    init_model("tiny", model, seed=0)
    tasks.mkdir()
    (tasks / "train.jsonl").write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"})
                                               + "\n" for i in range(8)))
    tree = _corpus_item("examples/grpo_gsm8k_trainable_ruler/gsm8k_ruler.yaml", model, tasks, tmp_path / "ckpt")
    tree["buffer"]["train_batch_size"] = 6  # more than 2 tasks x 2 responses: the judgements count
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree))
    shown = yaml.safe_load(rft_here("config", "show", str(config), cwd=tmp_path).stdout)
    assert (shown["workflow"]["type"], shown["custom_reward_function"]["reward_fn_type"]) == (
        "math_trainable_ruler_workflow", "math_reward")
    assert shown["experience_buffer"]["train_batch_size"] == 6
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m and "buffer/rows" in m]
    assert [m["training/global_step"] for m in metrics] == [1] and metrics[0]["buffer/rows"] >= 4
    assert "reward_extra/judge_success/mean" in metrics[0]


def test_the_rows_a_judge_carries_are_logged_over_the_rows_that_carry_them():
    """reward_extra/<name>/mean over the rows that carry the name: a workflow's judgement rows have their own."""
    from types import SimpleNamespace

    import torch

    from rft.trainer.rl import RLTrainer

    trainer = SimpleNamespace(dist=SINGLE, _stats=lambda prefix, x: {})
    batch = SimpleNamespace(scores=torch.zeros(3), reward_baselines=None,
                            reward_rows=[{"gold_reward": 1.0, "judge_success": 0.5},
                                         {"gold_reward": 0.0, "judge_success": 0.5},
                                         {"reward_for_judger": 0.75, "judge_success": 0.5}])
    metrics = RLTrainer.reward_metrics(trainer, batch)
    assert metrics == {"reward_extra/gold_reward/mean": 0.5, "reward_extra/judge_success/mean": 0.5,
                       "reward_extra/reward_for_judger/mean": 0.75}
    assert set(RLTrainer.reward_values(batch)) == {"judge_success", "score"}  # those every row carries


def test_math_ruler_workflow_without_a_judge_is_refused(tmp_path):
    from rft.trainer.configure import load_config
    from rft.trainer.validate import validate

    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "1+1=", "data_source": "d", "reward_model": {"ground_truth": "2"}}\n')
    with pytest.raises(ConfigError, match="math_ruler_workflow' scores each group's responses with a judge"):
        cfg = load_config(None, [f"data.train_files={data}", "actor_rollout_ref.model.path=m",
                                 "workflow.type=math_ruler_workflow"], validate_paths=False)
        validate(cfg, check_paths=False)


# ------------------------------------------------------------------------------------------ rubric_judge_workflow


@pytest.mark.parametrize("reply, score", [
    ('```json\n{\n"rating": 7\n}```', 6 / 9),  # (7 - 1) / 9
    ('Here: ```json {"rating": 10} ``` done', 1.0),
    ('```\n{"rating": 1}\n```', 0.0),  # a plain ``` block
    ('```json {"rating": 11} ```', None), ('```json {"rating": "7"} ```', None),  # out of range; not a number
    ('{"rating": 7}', None), ('```json {rating: 7} ```', None),  # no block; no JSON
])
def test_rubric_ratings_are_read_as_trinity_reads_them(reply, score):
    from rft.explorer.workflow import rubric_rating

    assert rubric_rating(reply) == (pytest.approx(score) if score is not None else None)


class FakeJudge(FakeModel):
    def chat_batch(self, conversations, n=1, tools=None, **sampling):
        assert sampling == {"do_sample": False}  # Trinity's judge runs at temperature 0
        self.asked.extend(conversations)
        return [[Completion(text=r, prompt_ids=[1], token_ids=[2], logprobs=[0.0], finish_reason="stop")]
                for r in self.replies[:len(conversations)]]


def test_rubric_judge_workflow_rewards_the_judges_rating_against_the_rows_rubrics():
    from rft.explorer.workflow import RUBRIC_SYSTEM_PROMPT, RubricJudgeWorkflow, rubric_judge_messages

    replies = ["Aspirin.", "Water."]
    rubric = [{"weight": 5, "description": "Names aspirin"}, {"weight": -2, "description": "Is rude"}]
    prompt = Prompt(ids=[1, 2], data_source="medicine", ground_truth="aspirin", extra_info={},
                    messages=[{"role": "user", "content": "What helps a headache?"}], row={"rubric": rubric})
    task = Task(prompt=prompt, repeat_times=2)
    model, judge = FakeModel(replies), FakeJudge(['```json\n{"rating": 10}\n```', "I cannot rate this."])
    exps = RubricJudgeWorkflow(task=task, model=model, auxiliary_models=[judge]).run()
    assert [e.reward for e in exps] == [1.0, 0.0]
    assert [e.rewards["judge_success"] for e in exps] == [0.5, 0.5]  # the group's share of valid ratings
    assert model.asked[0][0] == {"role": "system", "content": RUBRIC_SYSTEM_PROMPT}
    assert judge.asked == [rubric_judge_messages("What helps a headache?", r, rubric) for r in replies]
    user = judge.asked[0][1]["content"]
    assert "<response>\nAspirin.\n</response>" in user and "Rubric 0 (weight: 5): Names aspirin\nRubric 1 (weight: " \
        "-2): Is rude" in user and user.endswith("</rubrics>\nYour JSON Evaluation:")
    assert "Rubrics are not provided." in rubric_judge_messages("q", "r", [])[1]["content"]


def test_rubric_judge_workflow_needs_a_judge_and_reads_no_reward_function(tmp_path):
    from rft.trainer.configure import load_config
    from rft.trainer.validate import validate

    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "q", "rubric": []}\n')
    base = [f"data.train_files={data}", "actor_rollout_ref.model.path=m", "workflow.type=rubric_judge_workflow"]
    for extra, needle in (([], "which is empty: give one"),
                          (["+workflow.auxiliary_models=[{model_path: m}]", "custom_reward_function.reward_fn_type="
                            "math_reward"], "computes its own reward")):
        with pytest.raises(ConfigError) as err:
            validate(load_config(None, [*base, *extra], validate_paths=False), check_paths=False)
        assert needle in str(err.value), str(err.value)


def test_trinitys_rubric_example_trains_one_step_with_the_judge(tmp_path):
    """examples/grpo_rubric_as_reward as its user runs it (stand-ins as `_corpus_item`): the judge, the tiny model
    too, writes no valid rating, so every reward is 0 and judge_success 0; the run trains its step."""
    from cli_helpers import rft_here

    from rft.models.tiny import init_model

    tasks, model = tmp_path / "tasks", tmp_path / "m"
    tasks.mkdir()
    init_model("tiny", model, seed=0)
    row = {"question": "What helps a headache?", "reference_answer": "aspirin",
           "rubric": [{"weight": 5, "description": "Names aspirin"}]}
    (tasks / "train.jsonl").write_text((json.dumps(row) + "\n") * 4)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_corpus_item("examples/grpo_rubric_as_reward/rubric.yaml", model, tasks,
                                                  tmp_path / "ckpt")))
    shown = yaml.safe_load(rft_here("config", "show", str(config), cwd=tmp_path).stdout)
    assert shown["workflow"]["type"] == "rubric_judge_workflow" and shown["workflow"]["auxiliary_models"]
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m]
    assert [m["training/global_step"] for m in metrics] == [1]
    assert metrics[-1]["critic/score/mean"] == 0.0 and metrics[-1]["reward_extra/judge_success/mean"] == 0.0


# --------------------------------------------------------------------------- learn2ask_workflow (Trinity's plugin)


@pytest.mark.parametrize("action, truth, scores, mode, fusion, response, reward", [
    # a right "continue": R_s = 1, the judge's R_a = 0.5 and P = 1 -> 1 x (1 + 2 x 0.5) + 1 = 3
    ("continue", "continue", {"format_score": 1.0, "content_score": 0.5}, "Ra+Rs", "default", "q?", 3.0),
    ("continue", "continue", {"format_score": 1.0, "content_score": 0.5}, "Ra+Rs", "sum", "q?", 2.5),  # 1 + .5 + 1
    ("continue", "continue", {"format_score": 1.0, "content_score": 0.5}, "Ra", "default", "q?", 2.0),  # 2 x .5 + 1
    ("continue", "continue", {"format_score": 1.0, "content_score": 0.5}, "Rs", "default", "q?", 4.0),  # 3 x 1 + 1
    ("continue", "continue", None, "Ra+Rs", "default", "q?", 1.0),  # no judgement: 1 x (1 + 0) + 0
    ("stop", "stop", None, "Ra+Rs", "default", "<stop />", 4.0),  # R_a = 1, P = 1 for exactly <stop />: 1 x 3 + 1
    ("stop", "stop", None, "Ra+Rs", "default", "enough. <stop />", 3.0),  # P = 0
    ("stop", "continue", None, "Ra+Rs", "default", "<stop />", 0.0), ("continue", "stop", None, "Rs", "sum", "q?", 0.0),
])
def test_learn2ask_reward_by_hand(action, truth, scores, mode, fusion, response, reward):
    from rft.explorer.workflow import learn2ask_reward

    assert learn2ask_reward(action, truth, scores, mode, fusion, response) == reward


def test_learn2ask_judge_scores_are_read_as_trinity_reads_them():
    from rft.explorer.workflow import learn2ask_scores

    assert learn2ask_scores("<think>x</think>\n<format_score>1.0</format_score>\n<content_score>0.5</content_score>") \
        == {"format_score": 1.0, "content_score": 0.5}
    assert learn2ask_scores("<format_score>0.5</format_score>") == {"format_score": 0.5, "content_score": 0.0}
    assert learn2ask_scores("<format_score>\n1.0\n</format_score>")["format_score"] == 0.0  # one line, as Trinity's
    assert learn2ask_scores("<format_score>one</format_score>") is None  # not a number: asked again


class ScriptedJudge(FakeModel):
    def chat_batch(self, conversations, n=1, tools=None, **sampling):
        self.asked.append(conversations)
        replies, self.replies = self.replies[:len(conversations)], self.replies[len(conversations):]
        return [[Completion(text=r, prompt_ids=[1], token_ids=[2], logprobs=[0.0], finish_reason="stop")]
                for r in replies]


def test_learn2ask_workflow_judges_the_right_continues_and_asks_again_for_scores_that_do_not_parse():
    from rft.explorer.workflow import LEARN2ASK_JUDGE_PROMPT, LEARN2ASK_PROMPT, Learn2AskWorkflow

    dialogue = [{"role": "user", "content": "I have a headache."}, {"role": "assistant", "content": "Since when?"},
                {"role": "user", "content": "Two days."}]
    prompt = Prompt(ids=[1, 2], data_source="med", ground_truth=None, extra_info={}, messages=dialogue,
                    row={"decision_truth": "continue", "info_truth": "fever: yes"})
    replies = ["Do you have a fever (yes / no)?", "Any nausea (yes / no)?", "<stop />"]
    model = FakeModel(replies)
    judge = ScriptedJudge(["<format_score>1.0</format_score><content_score>1.0</content_score>",
                           "<format_score>x</format_score>",  # the second reply's first judgement: asked again
                           "<format_score>0.5</format_score><content_score>0.0</content_score>"])
    exps = Learn2AskWorkflow(task=Task(prompt=prompt, repeat_times=3), model=model, auxiliary_models=[judge]).run()
    # 1 x (1 + 2 x 1) + 1 = 4; 1 x (1 + 0) + 0.5 = 1.5; a wrong "stop": 0
    assert [e.reward for e in exps] == [4.0, 1.5, 0.0]
    assert [e.rewards for e in exps] == [{"judge_success": 1.0}, {"judge_success": 1.0}, {}]
    assert model.asked[0] == [{"role": "system", "content": LEARN2ASK_PROMPT}, *dialogue]
    assert [len(call) for call in judge.asked] == [2, 1]  # both continues, then the one that did not parse
    first = judge.asked[0][0]
    assert first[0] == {"role": "system", "content": LEARN2ASK_JUDGE_PROMPT.format("fever: yes")}
    assert first[1]["content"] == ("patient: I have a headache.\ndoctor: Since when?\npatient: Two days.\n"
                                   "doctor: Do you have a fever (yes / no)?\n")


@pytest.mark.parametrize("arg, message", [("train_mode: Rb", "workflow.args.train_mode='Rb' is not one of"),
                                          ("fusion_mode: product", "workflow.args.fusion_mode='product' is not one")])
def test_learn2ask_reward_modes_it_has_not_are_refused(arg, message):
    from rft.trainer.configure import load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, ["data.train_files=t.jsonl", "actor_rollout_ref.model.path=m",
                           "workflow.type=learn2ask_workflow", "+workflow.auxiliary_models=[{model_path: m}]",
                           f"workflow.args={{{arg}}}"], validate_paths=False)


def test_trinitys_learn_to_ask_example_trains_one_step_with_its_judge(tmp_path):
    """examples/learn_to_ask as its user runs it (stand-ins as `_corpus_item`; the judge the tiny model too, whose
    replies hold no scores): dialogue rows with decision_truth and info_truth; the run trains its step."""
    from cli_helpers import rft_here

    from rft.models.tiny import init_model

    tasks, model = tmp_path / "tasks", tmp_path / "m"
    tasks.mkdir()
    init_model("tiny", model, seed=0)
    row = {"messages": [{"role": "user", "content": "I have a headache."}], "action_truth": "continue",
           "decision_truth": "continue", "info_truth": "fever: yes"}
    (tasks / "train.jsonl").write_text((json.dumps(row) + "\n") * 4)
    tree = _corpus_item("examples/learn_to_ask/train.yaml", model, tasks, tmp_path / "ckpt")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree))
    shown = yaml.safe_load(rft_here("config", "show", str(config), cwd=tmp_path).stdout)
    assert shown["workflow"]["type"] == "learn2ask_workflow" and shown["workflow"]["args"]["train_mode"] == "Ra+Rs"
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m]
    assert [m["training/global_step"] for m in metrics] == [1]
    assert 0.0 <= metrics[-1]["critic/score/mean"] <= 4.0


# ---------------------------------------------------------------------------------- toolcall_workflow (Tool-N1)

ANSWER = json.dumps([{"name": "weather", "arguments": {"city": "Paris", "unit": "C"}}])


@pytest.mark.parametrize("reply, reward", [
    ('<think>need weather</think><tool_call>[{"name": "weather", "arguments": {"unit": "C", "city": "Paris"}}]'
     '</tool_call>', 1.0),  # the same call, its arguments in another order
    ('<think>x</think> <tool_call>{"name": "weather", "arguments": {"city": "Paris", "unit": "C"}}</tool_call>', 1.0),
    ('<think>x</think><tool_call>[{"name": "weather", "arguments": {"city": "Rome", "unit": "C"}}]</tool_call>', 0.0),
    ('<tool_call>[{"name": "weather", "arguments": {"city": "Paris", "unit": "C"}}]</tool_call>', 0.0),  # no think
    ('<tool_call>[]</tool_call><think>x</think>', 0.0),  # think after the call
    ('<think>a</think><think>b</think><tool_call>[{"name": "weather", "arguments": {"city": "Paris", "unit": "C"}}]'
     '</tool_call>', 0.0),  # two thinks
    ('<think>x</think><tool_call>not json</tool_call>', 0.0), ('<think>x</think> no call', 0.0),
    ('<think>x</think><tool_call>[{"name": "weather"}]</tool_call>', 0.0),  # no arguments
])
def test_tool_n1_reward_by_hand(reply, reward):
    from rft.explorer.workflow import toolcall_reward

    assert toolcall_reward(reply, ANSWER) == reward
    assert toolcall_reward("<think>x</think><tool_call>[]</tool_call>", "[]") == 1.0  # no call against none


TOOLACE_ROW = {
    "raw_system": "You are a helpful assistant.",
    "tools": json.dumps([{"name": "weather", "parameters": {"city": {"type": "string"}}}]),
    "conversations": [{"from": "user", "value": "Weather in Paris?"},
                      {"from": "function_call", "value": {"name": "weather", "arguments": {"city": "Paris"}}},
                      {"from": "observation", "value": "12 C"}],
    "answer": ANSWER,
}


def test_toolcall_workflow_prompts_and_rewards_as_trinity():
    from rft.explorer.workflow import TOOL_N1_PROMPT, ToolN1Workflow, toolcall_messages

    messages = toolcall_messages(TOOLACE_ROW)
    schema = json.dumps({"type": "function", "function": json.loads(TOOLACE_ROW["tools"])[0]})
    assert messages[0] == {"role": "system", "content": "You are a helpful assistant." +
                           TOOL_N1_PROMPT.format(tools=schema)}
    assert "<tools>\n" + schema + "\n</tools>" in messages[0]["content"]
    assert messages[1:] == [{"role": "user", "content": "Weather in Paris?"},
                            {"role": "assistant", "content": json.dumps({"name": "weather",
                                                                         "arguments": {"city": "Paris"}})},
                            {"role": "tool", "content": "12 C"}]
    good = '<think>ok</think><tool_call>[{"name": "weather", "arguments": {"city": "Paris", "unit": "C"}}]</tool_call>'
    model = FakeModel([good, "no idea"])
    task = Task(prompt=Prompt(ids=[], data_source="toolace", ground_truth=None, extra_info={}, row=TOOLACE_ROW),
                repeat_times=2)
    exps = ToolN1Workflow(task=task, model=model).run()
    assert [e.reward for e in exps] == [1.0, 0.0] and model.asked == [messages]


def test_trinitys_toolcall_taskset_lands_on_the_workflow_without_a_prompt_column():
    out = translate({"project": "p", "name": "n", "model": {"model_path": "m"}, "buffer": {"explorer_input": {
        "taskset": {"path": "t", "default_workflow_type": "toolcall_workflow"}}}})
    assert out["workflow"]["type"] == "toolcall_workflow" and out["data"]["prompt_key"] is None


def test_trinitys_toolace_example_trains_one_step(tmp_path):
    """examples/grpo_toolcall as its user runs it (stand-ins as `_corpus_item`; its sequence parallelism of 2 set
    to 1 for the one process here): ToolACE rows without a prompt column, Tool-N1's reward."""
    from cli_helpers import rft_here

    from rft.models.tiny import init_model

    tasks, model = tmp_path / "tasks", tmp_path / "m"
    tasks.mkdir()
    init_model("tiny", model, seed=0)
    (tasks / "train.jsonl").write_text((json.dumps(TOOLACE_ROW) + "\n") * 4)
    tree = _corpus_item("examples/grpo_toolcall/toolace.yaml", model, tasks, tmp_path / "ckpt")
    tree["trainer"]["ulysses_sequence_parallel_size"] = 1
    tree["model"]["max_prompt_tokens"] = 4096
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree))
    shown = yaml.safe_load(rft_here("config", "show", str(config), cwd=tmp_path).stdout)
    assert shown["workflow"]["type"] == "toolcall_workflow" and shown["data"]["prompt_key"] is None
    rft_here("train", str(config), cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m]
    assert [m["training/global_step"] for m in metrics] == [1] and metrics[-1]["critic/score/mean"] == 0.0
