"""Scoring a batch of decoded responses with one reward function (verl's NaiveRewardManager loop)."""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from rft.errors import RewardError
from rft.rewards.parallel import score_in_processes, worth_parallel
from rft.rewards.runner import RewardTypeError, advice, label_of, policy_of

log = logging.getLogger("rft")

FAILED = "reward_failed"
"""The per-row extra (1.0 for a failed row) reported when failures are scored 0 (on_error=zero)."""


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _or_zero(fn: Callable[..., Any]) -> str:
    return f", or {advice(fn, 'timeout')}" if policy_of(fn) != "zero" and hasattr(fn, "on_error") else ""


def _score_of(result: Any, row: int, data_source: str, fn: Callable[..., Any]) -> tuple[float, dict[str, float]]:
    """(score, numeric metrics) of one call's result, or RewardError / RewardTypeError naming the row."""
    where = f"for row {row} (data_source {data_source!r})"
    metrics: dict[str, float] = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardError(
                f"{label_of(fn)} returned a dict without 'score' {where}; its keys: {sorted(map(str, result))}; "
                f"put the reward under 'score'{_or_zero(fn)}"
            )
        score = result["score"]
        metrics = {str(key): float(value) for key, value in result.items()
                   if key != "score" and isinstance(value, numbers.Real)}
    else:
        score = result
    if not isinstance(score, numbers.Real):
        raise RewardTypeError(
            f"{label_of(fn)} returned a score of type {type(score).__name__} ({_short(score)}) {where}; return a "
            f"float or a dict with a float under 'score'{_or_zero(fn)}"
        )
    score = float(score)
    if not math.isfinite(score):
        raise RewardError(f"{label_of(fn)} returned score {score} {where}; return a finite number{_or_zero(fn)}")
    return score, metrics


_ELSEWHERE = "its message is in another process's log"
UNTRAINED_STEP = "the run would train on nothing"
UNSCORED_VALIDATION = "its score would be 0 whatever the model answered"
"""`report_failures`'s `without`: what an explore step, a validation pass (plain or through a workflow), with no
row scored would come to."""


def report_failures(failed: int, rows: int, first: str | None, where: str,
                    without: str = UNTRAINED_STEP) -> None:
    """Say how many of `rows` rows of `where` (a step's batch, a validation pass) failed and were scored 0 under
    on_error=zero (a warning with the first failure's message, `first`), or raise RewardError when every row did:
    zero substitutes for a row that fails now and then, and a function that fails on every row is broken (a wrong
    signature, a missing import), which all-0 rewards would hide as a model with nothing to learn (or, in a
    validation, as its score). `without`: what a pass with no row scored would come to."""
    if rows and failed == rows:
        raise RewardError(
            f"the reward function failed on every row of {where} ({failed} of {rows}; custom_reward_function."
            f"on_error=zero scores a failed row 0, but with none left {without}): {first or _ELSEWHERE}"
        )
    if failed:
        _warn_failures(failed, rows, first or _ELSEWHERE, where)


def _warn_failures(failed: int, rows: int, first: str, where: str) -> None:
    log.warning("rft: %s: %d of %d rows scored 0 by custom_reward_function.on_error=zero (their reward failed); the "
                "first: %s", where, failed, rows, first)


def score_responses(
    fn: Callable[..., Any],
    data_sources: Sequence[str],
    responses: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None],
    failures: list[str] | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """Call ``fn(data_source, solution_str, ground_truth, extra_info)`` (positionally) once per row.

    fn returns a number (bool and int included), which is the score, or a dict with the score under "score";
    the dict's other numeric entries become per-row metrics, and every row must then report the same metric
    keys (non-numeric entries, e.g. the extracted answer as text, are ignored).

    A function that asks for worker processes (`RewardFunction.workers` > 1: the typed rewards that pay for it,
    rft.rewards.parallel) scores a batch of at least 2 x `MIN_ROWS_PER_WORKER` rows in them, each call under the same
    time limit; the scores, metrics and failure messages are those of the in-process loop, in row order (with
    on_error=error the in-process loop stops calling at the first failure, the workers score every row first).

    A row fails when fn raises, overruns its time limit (a `RewardFunction`'s timeout), or returns no usable
    score (not a number, NaN / inf, a dict without "score"). With the function's policy `error` (the default for
    a plain function) the first failure raises RewardError naming the function, its file, the row and its
    data_source; with `zero` the row scores 0, its metrics count as absent, and the per-row extra
    `reward_failed` (1.0 for failed rows) is reported for every row. Each failed row's message is appended to
    `failures` when given (the caller says them, per step: `report_failures`); otherwise one warning says how many
    rows of the call failed and how the first did.

    Returns (scores, metrics): B floats, and {metric name: B floats}.
    """
    num_rows = len(responses)
    lengths = {
        "data_sources": len(data_sources),
        "responses": num_rows,
        "ground_truths": len(ground_truths),
        "extra_infos": len(extra_infos),
    }
    if len(set(lengths.values())) != 1:
        raise ValueError(f"score_responses needs lists of one length, got {lengths}")

    zero_on_error = policy_of(fn) == "zero"
    calls = list(zip(data_sources, responses, ground_truths, extra_infos))
    outcomes = score_in_processes(fn, calls, fn.workers) if worth_parallel(fn, num_rows) else None
    scores: list[float] = []
    row_metrics: list[dict[str, float]] = []
    failed: list[float] = []
    messages: list[str] = []  # each failed row's, under on_error=zero
    for row, (data_source, response, ground_truth, extra_info) in enumerate(calls):
        try:
            try:
                if outcomes is None:
                    result = fn(data_source, response, ground_truth, extra_info)
                else:
                    result, error = outcomes[row]
                    if error is not None:
                        raise error
            except RewardError:
                raise
            except TimeoutError as e:
                raise RewardError(
                    f"{label_of(fn)} {e} (custom_reward_function.timeout) on row {row} (data_source "
                    f"{data_source!r}); make it faster or raise the timeout{_or_zero(fn)}"
                ) from e
            except (Exception, SystemExit) as e:  # sys.exit() in the function is its failure, not rft's exit
                message = " ".join(str(e).split())[:200]
                raised = f"called sys.exit({e.code!r})" if isinstance(e, SystemExit) else \
                    f"raised {type(e).__name__}: {message}"
                raise RewardError(
                    f"{label_of(fn)} {raised} on row {row} (data_source "
                    f"{data_source!r}, ground truth {_short(ground_truth, 40)}); {advice(fn)}"
                ) from e
            score, metrics = _score_of(result, row, data_source, fn)
        except RewardError as e:
            if not zero_on_error:
                raise
            messages.append(str(e))
            score, metrics = 0.0, None
        scores.append(score)
        row_metrics.append(metrics)
        failed.append(1.0 if metrics is None else 0.0)

    if failures is not None:
        failures.extend(messages)
    elif messages:
        _warn_failures(len(messages), num_rows, messages[0], "a batch")

    metric_names = sorted({name for metrics in row_metrics if metrics for name in metrics})
    for name in metric_names:
        missing = [row for row, metrics in enumerate(row_metrics) if metrics is not None and name not in metrics]
        if missing:
            raise RewardError(
                f"{label_of(fn)} returned metric {name!r} for some rows but not for rows {missing[:10]} "
                f"(data_source {data_sources[missing[0]]!r}); return the same numeric keys on every row"
            )
    out = {name: [metrics[name] if metrics is not None else 0.0 for metrics in row_metrics]
           for name in metric_names}
    if zero_on_error:
        out[FAILED] = failed
    return scores, out
