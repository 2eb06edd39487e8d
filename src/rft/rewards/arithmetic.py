"""Reward for rft's synthetic arithmetic task (rft.tasks.arithmetic): the response is the answer alone."""

from __future__ import annotations


def arithmetic_score(solution_str: str, ground_truth) -> float:
    """1.0 when the response, stripped of surrounding whitespace, is exactly the answer ("12" for "5+7="),
    else 0.0.

    No number parsing: "12.0", "012" and "12 apples" all score 0.0.
    """
    return 1.0 if solution_str.strip() == str(ground_truth).strip() else 0.0
