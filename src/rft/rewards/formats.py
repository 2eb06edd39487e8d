"""The think / answer tag format (DeepSeek-R1's "<think> reasoning </think> <answer> answer </answer>"), with
Trinity-RFT's rules and score values (trinity/common/rewards/format_reward.py, after open-r1's format reward).

Two patterns, both matched from the start of the response with DOTALL (``.`` crosses lines) and MULTILINE (``$``
matches at the end of any line, so text on lines after ``</answer>`` is allowed, as in Trinity and open-r1):

* `STRICT_THINK_ANSWER` (Trinity's `format_reward`): the response opens with ``<think>``, and each tag sits on a
  line of its own: ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>``.
* `LOOSE_THINK_ANSWER` (the format part of Trinity's `math_reward`): anything, then ``<think>...</think>``, white
  space, ``<answer>...</answer>`` and white space to the end of a line.

A response that matches earns `FORMAT_BONUS` (+0.1), one that does not `-FORMAT_BONUS` (-0.1): Trinity's values.
"""

from __future__ import annotations

import re
from typing import Any

FORMAT_BONUS = 0.1
STRICT_THINK_ANSWER = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL | re.MULTILINE)
LOOSE_THINK_ANSWER = re.compile(r".*?<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL | re.MULTILINE)


def format_score(response: str, pattern: re.Pattern = STRICT_THINK_ANSWER) -> float:
    """+0.1 when `pattern` matches at the start of `response`, else -0.1."""
    return FORMAT_BONUS if pattern.match(response) else -FORMAT_BONUS


def format_reward(data_source: str, solution_str: str, ground_truth: Any = None,
                  extra_info: dict | None = None) -> dict[str, float]:
    """Trinity-RFT's `format_reward`: score = format_score = +0.1 when the response is
    ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`` (`STRICT_THINK_ANSWER`), else -0.1.

    The ground truth, data source and extra_info are not read. Returns {"score", "format_score"} (equal: the score
    is the sum of the parts, as Trinity's workflows sum a reward function's dict).
    """
    value = format_score(solution_str, STRICT_THINK_ANSWER)
    return {"score": value, "format_score": value}


def think_format_penalty(response: str, coef: float | None = 0.1) -> float:
    """The format part of Trinity-RFT's math_boxed_reward with with_think: 0.0 when the response has exactly one
    ``<think>`` and one ``</think>``, in that order (Trinity's validate_think_pattern; text may surround them),
    else -coef (a coef of 0 or None counts as Trinity's 0.1, as its ``coef or 0.1`` does)."""
    opens, closes = response.count("<think>"), response.count("</think>")
    if opens == 1 and closes == 1 and response.find("<think>") < response.find("</think>"):
        return 0.0
    return -(coef or 0.1)
