"""GSM8K answer extraction and scoring, with verl's semantics (verl/utils/reward_score/gsm8k.py,
after ReFT, Trung et al. 2024).

Only the last ``GSM8K_CLIP_CHARS`` characters of a response are searched: the final answer sits at the end,
and regexes over very long generations are slow.
"""

from __future__ import annotations

import re

GSM8K_CLIP_CHARS = 300

# "strict" also checks the format the prompt asked for: the answer must follow "#### " (one space).
_STRICT_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
_ANY_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")
_NOT_A_NUMBER = ("", ".")
GSM8K_METHODS = ("strict", "flexible")


def gsm8k_extract(solution_str: str, method: str = "strict") -> str | None:
    """The final answer in `solution_str`, or None when there is none.

    strict: the last ``#### <number>`` in the last 300 characters.
    flexible: the last number (a match of ``-?[0-9.,]+`` other than "" and ".") in the last 300 characters.
    Commas and "$" are removed from the answer, so "#### 1,234" gives "1234".
    """
    if method not in GSM8K_METHODS:
        raise ValueError(f"unknown gsm8k extraction method {method!r}; valid: {', '.join(GSM8K_METHODS)}")
    tail = solution_str[-GSM8K_CLIP_CHARS:]
    if method == "strict":
        candidates = _STRICT_ANSWER.findall(tail)
    else:
        candidates = [match for match in _ANY_NUMBER.findall(tail) if match not in _NOT_A_NUMBER]
    if not candidates:
        return None
    return candidates[-1].replace(",", "").replace("$", "")


def gsm8k_score(
    solution_str: str,
    ground_truth,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """`score` when the extracted answer equals ``str(ground_truth)`` exactly (as strings: "72.0" is not
    "72"), `format_score` when an answer was found but is wrong, 0.0 when none was found."""
    answer = gsm8k_extract(solution_str, method=method)
    if answer is None:
        return 0.0
    return float(score) if answer == str(ground_truth) else float(format_score)
