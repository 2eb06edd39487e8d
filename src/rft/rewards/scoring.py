"""Scoring a batch of decoded responses with one reward function (verl's NaiveRewardManager loop)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any


def score_responses(
    fn: Callable[..., Any],
    data_sources: Sequence[str],
    responses: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None],
) -> tuple[list[float], dict[str, list[float]]]:
    """Call ``fn(data_source, solution_str, ground_truth, extra_info)`` (positionally) once per row.

    fn returns a number (bool and int included), which is the score, or a dict with the score under "score";
    the dict's other numeric entries become per-row metrics, and every row must then report the same metric
    keys (non-numeric entries, e.g. the extracted answer as text, are ignored).

    Returns (scores, metrics): B floats, and {metric name: B floats}.
    Raises ValueError for lists of different lengths, a dict without "score", a non-finite score, or a metric
    reported for some rows but not others; TypeError for a score that is not a number.
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

    scores: list[float] = []
    row_metrics: list[dict[str, float]] = []
    for row, (data_source, response, ground_truth, extra_info) in enumerate(
        zip(data_sources, responses, ground_truths, extra_infos)
    ):
        result = fn(data_source, response, ground_truth, extra_info)
        metrics: dict[str, float] = {}
        if isinstance(result, dict):
            if "score" not in result:
                raise ValueError(
                    f"the reward function returned a dict without 'score' for row {row} "
                    f"(data_source {data_source!r}); its keys: {sorted(map(str, result))}"
                )
            score = result["score"]
            metrics = {
                str(key): float(value)
                for key, value in result.items()
                if key != "score" and isinstance(value, numbers.Real)
            }
        else:
            score = result
        if not isinstance(score, numbers.Real):
            raise TypeError(
                f"the reward function returned a score of type {type(score).__name__} for row {row} "
                f"(data_source {data_source!r}); return a float or a dict with a float under 'score'"
            )
        score = float(score)
        if not math.isfinite(score):
            raise ValueError(
                f"the reward function returned score {score} for row {row} (data_source {data_source!r})"
            )
        scores.append(score)
        row_metrics.append(metrics)

    metric_names = sorted({name for metrics in row_metrics for name in metrics})
    for name in metric_names:
        missing = [row for row, metrics in enumerate(row_metrics) if name not in metrics]
        if missing:
            raise ValueError(
                f"the reward function returned metric {name!r} for some rows but not for rows {missing[:10]} "
                f"(data_source {data_sources[missing[0]]!r}); return the same numeric keys on every row"
            )
    return scores, {name: [metrics[name] for metrics in row_metrics] for name in metric_names}
