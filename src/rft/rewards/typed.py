"""Reward functions chosen by type (custom_reward_function.reward_fn_type; Trinity-RFT's default_reward_fn_type),
under Trinity's names.

Each is one rft function with verl's signature ``(data_source, solution_str, ground_truth, extra_info) -> dict``: the
reward under "score" and its parts (accuracy, format_score, ...) under their own keys, which the trainer logs as
``reward_extra/<part>/mean``. The data source is not read: a typed reward scores every row the same way.

| type | score | parts |
| --- | --- | --- |
| math_reward | accuracy (math-verify) + format_score (+-0.1, think/answer tags) | accuracy, format_score, math_verify_timeout |
| accuracy_reward | accuracy (math-verify, LaTeX answers only) | accuracy, math_verify_timeout |
| math_boxed_reward, math_dapo_reward | accuracy of the last \\boxed{} (math-verify) | accuracy, math_verify_timeout |
| math_verify_reward | accuracy of the whole response (math-verify, LaTeX or plain; RM-Gallery's) | accuracy, math_verify_timeout |
| bots_math_boxed_reward | accuracy of the answer Trinity's math grader reads (answer phrases, \\boxed{}; math-verify) | accuracy, math_verify_timeout |
| math_boxed_reward_naive_dapo | accuracy of the last \\boxed{} after </think>, else of that text (math-verify; naive-DAPO's) | accuracy, format_score (0), math_verify_timeout |
| format_reward | format_score: +0.1 / -0.1 (strict think/answer tags) | format_score |
| countdown_reward | 1.0 / 0.1 (an equation, wrong) / 0.0 (none) | accuracy, format |

`llm_judge` (a judge among workflow.auxiliary_models, rft.rewards.judge) is a reward type too, but not in this
registry: it needs the explorer's model handles, so the explorer builds it. math_verify_reward is RM-Gallery's rule
reward of that name, which Trinity reaches as rm_gallery_reward with reward_name math_verify_reward (the Trinity
dialect translates that pair). Not offered from Trinity's registry: rm_gallery_reward with RM-Gallery's other
rewards (its reward models and LLM graders), Trinity's own judges (trajectory_accuracy_grader_reward,
openjudge_multi_grader_reward: their prompts and rubrics), and math_boxed_reward_prime_math (verl's Prime grader).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rft.registry import Registry
from rft.rewards.countdown import countdown_reward, countdown_task
from rft.rewards.formats import format_reward
from rft.rewards.math_answers import (
    accuracy_reward,
    bots_math_boxed_reward,
    gold_text,
    math_boxed_reward,
    math_boxed_reward_naive_dapo,
    math_reward,
    math_verify_reward,
)


@dataclass(frozen=True)
class RewardFnType:
    """A reward function by type and what the rest of rft asks about it.

    `ground_truth`: a check of one row's ground truth, returning what is wrong with it (None: fine), run on every row
    before the model loads (rft.explorer.preflight); None: the type does not read the ground truth. `parallel`: one
    call costs enough (milliseconds: math-verify's SymPy) that scoring a batch's rows in worker processes pays
    (rft.rewards.parallel); the cheap regex rewards run in process.
    """

    fn: Callable[..., dict[str, float]]
    ground_truth: Callable[[Any], str | None] | None
    parallel: bool

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None):
        return self.fn(data_source, solution_str, ground_truth, extra_info)


def _problem(parse: Callable[[Any], Any]) -> Callable[[Any], str | None]:
    def check(ground_truth: Any) -> str | None:
        try:
            parse(ground_truth)
        except ValueError as e:
            return str(e)
        return None

    return check


REWARD_FN_TYPES: Registry[RewardFnType] = Registry("reward function type (custom_reward_function.reward_fn_type)")
REWARD_FN_TYPES.register("math_reward")(RewardFnType(math_reward, _problem(gold_text), parallel=True))
REWARD_FN_TYPES.register("accuracy_reward")(RewardFnType(accuracy_reward, _problem(gold_text), parallel=True))
REWARD_FN_TYPES.register("math_boxed_reward", "math_dapo_reward")(
    RewardFnType(math_boxed_reward, _problem(gold_text), parallel=True))
REWARD_FN_TYPES.register("math_boxed_reward_naive_dapo")(
    RewardFnType(math_boxed_reward_naive_dapo, _problem(gold_text), parallel=True))
REWARD_FN_TYPES.register("bots_math_boxed_reward")(
    RewardFnType(bots_math_boxed_reward, _problem(gold_text), parallel=True))
REWARD_FN_TYPES.register("math_verify_reward")(
    RewardFnType(math_verify_reward, _problem(gold_text), parallel=True))
REWARD_FN_TYPES.register("format_reward")(RewardFnType(format_reward, None, parallel=False))
REWARD_FN_TYPES.register("countdown_reward")(RewardFnType(countdown_reward, _problem(countdown_task), parallel=False))


def reward_fn_type(name: str) -> RewardFnType:
    """The registered type `name`; KeyError listing the valid names otherwise."""
    return REWARD_FN_TYPES.get(name)
