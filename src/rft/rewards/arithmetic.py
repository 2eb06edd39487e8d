"""Reward for rft's synthetic arithmetic task (rft.tasks.arithmetic): the response is the answer alone."""

from __future__ import annotations


def arithmetic_score(solution_str: str, ground_truth) -> float:
    """1.0 when the response, stripped of surrounding whitespace, is exactly the answer ("12" for "5+7="),
    else 0.0.

    No number parsing: "12.0", "012" and "12 apples" all score 0.0.
    """
    return 1.0 if solution_str.strip() == str(ground_truth).strip() else 0.0


ANSWER_LINE = "#### "  # GSM8K's answer line


def calculator_score(solution_str: str, ground_truth) -> float:
    """The calculator task's reward (rft.tasks.calculator): 1.0 when the final reply is exactly the product,
    bare ("1776") or on GSM8K's answer line ("#### 1776"), else 0.0. The ground truth may be written either way."""

    def answer(text) -> str:
        text = str(text).strip()
        return text[len(ANSWER_LINE):] if text.startswith(ANSWER_LINE) else text

    return 1.0 if answer(solution_str) == answer(ground_truth) else 0.0
