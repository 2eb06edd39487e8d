"""Built-in reward scorers, keyed by a row's ``data_source`` (verl's default_compute_score).

Every scorer has one signature: ``(solution_str, ground_truth, extra_info) -> float | dict``; a dict carries
the reward under "score" and any other numeric entries as per-row metrics (see rft.rewards.scoring).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rft.config.suggest import did_you_mean, nearest_first
from rft.registry import Registry
from rft.rewards.arithmetic import arithmetic_score, calculator_score
from rft.rewards.code import CODE_SOURCES, code_score
from rft.rewards.gsm8k import gsm8k_score

ScoreResult = float | dict[str, Any]
Scorer = Callable[[str, Any, dict | None], ScoreResult]

SCORERS: Registry[Scorer] = Registry("reward scorer")


@SCORERS.register("arithmetic", "shapes")
def _score_arithmetic(solution_str: str, ground_truth, extra_info: dict | None = None) -> float:
    return arithmetic_score(solution_str, ground_truth)


@SCORERS.register("calculator")
def _score_calculator(solution_str: str, ground_truth, extra_info: dict | None = None) -> float:
    return calculator_score(solution_str, ground_truth)


@SCORERS.register("openai/gsm8k", "gsm8k")
def _score_gsm8k(solution_str: str, ground_truth, extra_info: dict | None = None) -> float:
    return gsm8k_score(solution_str, ground_truth, method="strict")


@SCORERS.register("hiyouga/geometry3k", "geometry3k")
def _score_geometry3k(solution_str: str, ground_truth, extra_info: dict | None = None) -> dict:
    from rft.rewards.math_answers import geo3k_reward

    return geo3k_reward("hiyouga/geometry3k", solution_str, ground_truth, extra_info)


def _score_code(solution_str: str, ground_truth, extra_info: dict | None = None) -> dict:
    return code_score(solution_str, ground_truth)


SCORERS.register(*CODE_SOURCES)(_score_code)  # on this machine; default_compute_score's code_runner: elsewhere


def meant_source(data_source: Any) -> str:
    """"did you mean 'openai/gsm8k'?" naming the built-in data source closest to `data_source`, or ""."""
    return did_you_mean(str(data_source), SCORERS.names())


def known_sources(data_source: Any) -> str:
    """"built-in: openai/gsm8k, arithmetic, ...": the built-in data sources, the closest to `data_source` first."""
    return f"built-in: {', '.join(nearest_first(str(data_source), SCORERS.names()))}"


def default_compute_score(
    data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None, code_runner=None
) -> ScoreResult:
    """Score one response with the built-in scorer registered for `data_source`; `code_runner`: where the code
    data sources' programs run (`rft.rewards.code`: reward_model.sandbox_fusion's runner; None: this machine)."""
    if code_runner is not None and data_source in CODE_SOURCES:
        return code_score(solution_str, ground_truth, code_runner)
    if data_source not in SCORERS:
        raise KeyError(
            f"no built-in reward scorer for data_source {data_source!r}; "
            f"{' '.join(filter(None, (meant_source(data_source), known_sources(data_source))))}. "
            "For other data sources set custom_reward_function.path to a Python file defining "
            "compute_score(data_source, solution_str, ground_truth, extra_info)"
        )
    return SCORERS.get(data_source)(solution_str, ground_truth, extra_info)
