"""Math answers checked by equivalence with math-verify (Hugging Face's `math-verify`: LaTeX / boxed / plain numbers
parsed to SymPy and compared symbolically and numerically), in the reward functions of Trinity-RFT's registry
(trinity/common/rewards/{math_reward,accuracy_reward,dapo_reward}.py).

What rft does that Trinity does not, and why:
* The ground truth is read one way for every function (`gold_text`): the text after the last ``####`` of a GSM8K
  reference solution (commas removed), a number, or a LaTeX / plain string; it is parsed as ``\\boxed{...}``
  (verl's math_verify scorer does the same), and one that math-verify cannot parse is an error naming the row, not a
  reward of 0 for every response (Trinity compares unparseable truths as strings or never matches them).
* math-verify's own time limits use ``signal.alarm``, which would cancel the per-call limit of
  custom_reward_function.timeout (one timer per process); rft turns them off and puts one limit of
  `MATH_VERIFY_SECONDS` around each check (`rft.rewards.runner.within_budget`, nested in the call's limit). A check
  that runs out counts as not equal, as math-verify's own timeout does, and is counted in the part
  ``math_verify_timeout`` (1.0 for such a row) instead of only a log line.
"""

from __future__ import annotations

import logging
import math
import numbers
import re
from decimal import Decimal
from functools import cache, lru_cache
from typing import Any

from rft.errors import RewardError
from rft.rewards.formats import LOOSE_THINK_ANSWER, format_score
from rft.rewards.runner import BudgetExceeded, within_budget

MATH_VERIFY_SECONDS = 5.0
"""The limit of one check (parsing the gold and the answer, then comparing them): math-verify's default per parse."""

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{|\\boxed (?=[^{\s])")
_LATEX_ANCHORS = ("\\boxed", "\\fbox", "$", "\\(", "\\[")


_filtered = False


class _DropDisabledTimeoutNotes(logging.Filter):
    """math-verify warns once that its timeouts are off; rft runs its own (`within_budget`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


def _math_verify():
    """The math_verify module, imported on first use (it loads SymPy: about a second)."""
    try:
        import math_verify
    except ImportError as e:
        raise RewardError("the math reward functions (custom_reward_function.reward_fn_type) need the math-verify "
                          "package: pip install math-verify") from e
    global _filtered
    if not _filtered:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropDisabledTimeoutNotes())
        _filtered = True
    return math_verify


@cache
def _extraction(kind: str) -> tuple[list, str]:
    """(extraction_config, extraction_mode) for `parse`.

    plain: math-verify's defaults (LaTeX then plain expressions, the first that parses), as Trinity's math_reward
    parses the <answer> text. latex: open-r1's accuracy reward (Trinity's accuracy_reward): LaTeX only, \\boxed
    first, nothing without an anchor (a \\boxed or an answer phrase such as "the final answer is"), the first match.
    """
    mv = _math_verify()
    if kind == "plain":
        return [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()], "any_match"
    # open-r1 also sets equations=True, which latex2sympy2_extended 1.11 deprecates: its parser now reads equations
    normalization = mv.LatexNormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                boxed="all", units=True)
    return [mv.LatexExtractionConfig(normalization_config=normalization, boxed_match_priority=0,
                                     try_extract_without_anchor=False)], "first_match"


def gold_text(ground_truth: Any) -> str:
    """The ground truth as text for math-verify: a GSM8K reference solution ("... #### 1,200") gives the text after
    its last "####" without commas ("1200"); a number its decimal digits (0.5 -> "0.5", 1e-7 -> "0.0000001");
    another string itself, stripped. ValueError for anything else or an empty text."""
    if ground_truth is None:
        raise ValueError("the row has no reward_model.ground_truth")
    if isinstance(ground_truth, numbers.Real) and not isinstance(ground_truth, bool):
        if not math.isfinite(ground_truth):
            raise ValueError(f"the ground truth {ground_truth!r} is not a finite number")
        return format(Decimal(repr(ground_truth)), "f") if isinstance(ground_truth, float) else str(ground_truth)
    if not isinstance(ground_truth, str):
        raise ValueError(f"the ground truth is a {type(ground_truth).__name__}; give a number or a string "
                         "(a number, LaTeX, or a GSM8K solution ending in '#### <answer>')")
    text = ground_truth.strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip().replace(",", "")
    if not text:
        raise ValueError(f"the ground truth {ground_truth!r} holds no answer")
    return text


@lru_cache(maxsize=4096)
def _parsed_gold(text: str) -> tuple:
    """The gold's math-verify parse (cached: a group's responses share it). A gold without a LaTeX anchor is read as
    \\boxed{gold}, as verl does, so "72", "-3", "\\frac{1}{2}" and "x^2+1" all parse. Only a parse to math counts
    (no fallback to the raw text, which would compare a broken gold such as "\\frac{" as a string)."""
    mv = _math_verify()
    source = text if any(anchor in text for anchor in _LATEX_ANCHORS) else "\\boxed{" + text + "}"
    parsed = mv.parse(source, extraction_config=[mv.LatexExtractionConfig()], fallback_mode="no_fallback",
                      parsing_timeout=None)
    if not parsed:
        raise ValueError(f"math-verify finds no answer in the ground truth {text!r}; fix the row's "
                         "reward_model.ground_truth (a number or LaTeX)")
    return tuple(parsed)


def _equivalent(gold: str, answer_text: str, kind: str) -> bool:
    mv = _math_verify()
    config, mode = _extraction(kind)
    answer = mv.parse(answer_text, extraction_config=config, extraction_mode=mode, parsing_timeout=None)
    return bool(answer) and bool(mv.verify(list(_parsed_gold(gold)), answer, timeout_seconds=None))


def verify_answer(ground_truth: Any, answer_text: str, kind: str = "plain") -> tuple[float, float]:
    """(accuracy, timed_out): accuracy 1.0 when math-verify finds `answer_text` equivalent to the ground truth
    (`gold_text`), else 0.0; timed_out 1.0 when the check ran past `MATH_VERIFY_SECONDS` (then accuracy is 0.0).
    `kind`: how the answer is extracted (`_extraction`). A bad ground truth raises ValueError."""
    gold = gold_text(ground_truth)
    _math_verify()  # imported outside the limit: an import cut half way would stay broken
    try:
        return float(within_budget(MATH_VERIFY_SECONDS, _equivalent, gold, answer_text, kind)), 0.0
    except BudgetExceeded:
        return 0.0, 1.0


def answer_span(response: str) -> str:
    """Where math_reward looks for the answer: the text inside the first <answer>...</answer> (Trinity's answer
    parser; rft lets it span lines, which Trinity's own format rule puts there), else the text after the last
    "####" (GSM8K's answer marker, which rft's GSM8K prompt asks for), else the whole response."""
    tagged = _ANSWER_TAG.search(response)
    if tagged:
        return tagged.group(1)
    if "####" in response:
        return response.rsplit("####", 1)[1]
    return response


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces matched) or ``\\boxed X`` (one token) in
    `text`; None when there is none or the last one never closes (Trinity's last_boxed_only_string)."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    start = matches[-1].end()
    if not matches[-1].group().endswith("{"):  # "\boxed 5": the token up to white space or "$"
        return re.match(r"[^\s$]+", text[start:]).group()
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def math_reward(data_source: str, solution_str: str, ground_truth: Any,
                extra_info: dict | None = None) -> dict[str, float]:
    """Trinity-RFT's `math_reward`: score = accuracy + format_score.

    accuracy: 1.0 when math-verify finds the answer (`answer_span`: the <answer> text, else the text after the last
    "####", else the whole response; parsed as LaTeX or plain math) equivalent to the ground truth (`gold_text`:
    a GSM8K solution, a number or LaTeX), else 0.0. format_score: +0.1 when the response has
    ``<think>...</think> <answer>...</answer>`` (`LOOSE_THINK_ANSWER`), else -0.1. So a correct bare answer scores
    0.9, a correct tagged one 1.1, a wrong tagged one 0.1 and a wrong bare one -0.1 (Trinity's values).
    Returns {"score", "accuracy", "format_score", "math_verify_timeout"}.
    """
    accuracy, timed_out = verify_answer(ground_truth, answer_span(solution_str), "plain")
    fmt = format_score(solution_str, LOOSE_THINK_ANSWER)
    return {"score": accuracy + fmt, "accuracy": accuracy, "format_score": fmt, "math_verify_timeout": timed_out}


def accuracy_reward(data_source: str, solution_str: str, ground_truth: Any,
                    extra_info: dict | None = None) -> dict[str, float]:
    """Trinity-RFT's `accuracy_reward` (open-r1's): score = accuracy = 1.0 when the response's answer, as open-r1's
    LaTeX extraction finds it, is equivalent to the ground truth, else 0.0. That extraction reads a \\boxed{} first,
    else LaTeX after an answer phrase ("the final answer is $3$"); a bare number or LaTeX elsewhere is not read.
    Returns {"score", "accuracy", "math_verify_timeout"}."""
    accuracy, timed_out = verify_answer(ground_truth, solution_str, "latex")
    return {"score": accuracy, "accuracy": accuracy, "math_verify_timeout": timed_out}


def math_boxed_reward(data_source: str, solution_str: str, ground_truth: Any,
                      extra_info: dict | None = None) -> dict[str, float]:
    """Trinity-RFT's `math_boxed_reward` (and `math_dapo_reward`): score = accuracy = 1.0 when the last \\boxed{}
    of the response (`last_boxed`) is equivalent to the ground truth, else 0.0 (no \\boxed: 0.0).

    Trinity compares the two as strings after the MATH benchmark's normalisation (Hendrycks' strip_string); rft
    compares them with math-verify, which accepts what that normalisation equates and also equal values written
    differently (0.5 and \\frac{1}{2}). Trinity's `with_think` / `format_score_coef` arguments (off by default, a
    format_score of 0) are not offered; DAPO's overlong penalty, the rest of Trinity's math_dapo_reward, is
    reward_model.overlong_buffer. Returns {"score", "accuracy", "math_verify_timeout"}.
    """
    boxed = last_boxed(solution_str)
    if boxed is None:
        gold_text(ground_truth)  # a bad ground truth fails on every row, boxed or not
        accuracy, timed_out = 0.0, 0.0
    else:
        accuracy, timed_out = verify_answer(ground_truth, "\\boxed{" + boxed + "}", "plain")
    return {"score": accuracy, "accuracy": accuracy, "math_verify_timeout": timed_out}


def math_verify_reward(data_source: str, solution_str: str, ground_truth: Any,
                       extra_info: dict | None = None) -> dict[str, float]:
    """RM-Gallery's `math_verify_reward` (Trinity-RFT's rm_gallery_reward with reward_name math_verify_reward):
    score = accuracy = 1.0 when math-verify, reading the whole response as LaTeX or plain math (its default
    extraction: the first that parses), finds it equivalent to the ground truth, else 0.0. No tags, no \\boxed{}
    needed: "6 + 30 = \\boxed{36}" and "the answer is 36" both score 1.0 against 36.

    RM-Gallery parses the reference with the same extraction; rft reads it as every typed reward does (`gold_text`:
    a GSM8K solution's answer, a number or LaTeX, read as \\boxed{}), and a reference math-verify cannot parse is an
    error naming the row where RM-Gallery scores 0. Returns {"score", "accuracy", "math_verify_timeout"}."""
    accuracy, timed_out = verify_answer(ground_truth, solution_str, "plain")
    return {"score": accuracy, "accuracy": accuracy, "math_verify_timeout": timed_out}


def math_boxed_reward_naive_dapo(data_source: str, solution_str: str, ground_truth: Any,
                                 extra_info: dict | None = None) -> dict[str, float]:
    """Trinity-RFT's `math_boxed_reward_naive_dapo` (Reasoning360's naive-DAPO grader, its GURU math benchmark's
    reward): score = accuracy = 1.0 when the answer is equivalent to the ground truth, else 0.0; format_score 0
    (Trinity's returns one of 0 and ignores with_think). The answer is read from the text after the last
    "</think>": the content of its last \\boxed{} / \\fbox{}, or where it has none that whole text (naive-DAPO
    grades it as written: "36" alone scores 1.0 against 36).

    naive-DAPO checks equivalence by a string match after the MATH normalisation, then its own normalisation,
    tuples element by element, SymPy, and Prime's math_equal; rft checks it with math-verify, which equates what
    those do, except that naive-DAPO keeps unreduced fractions apart (2/4 against 1/2: 0 there, 1 here) and asks
    an integer truth for an integer answer. Returns {"score", "accuracy", "format_score", "math_verify_timeout"}."""
    text = solution_str.split("</think>")[-1]
    boxed = last_boxed(text)
    answer = boxed if boxed is not None else text.strip()
    if not answer:
        gold_text(ground_truth)  # a bad ground truth fails on every row
        accuracy, timed_out = 0.0, 0.0
    else:
        accuracy, timed_out = verify_answer(ground_truth, "\\boxed{" + answer + "}", "plain")
    return {"score": accuracy, "accuracy": accuracy, "format_score": 0.0, "math_verify_timeout": timed_out}


_ANSWER_AFTER = ("answer:", "answer is", "answers are")
_ANSWER_BEFORE = ("is answer", "is the answer", "are answers", "are the answers")
_LAST_MARKERS = ("be ", "is ", "are ", "=", ": ", "get ", "be\n", "is\n", "are\n", ":\n", "get\n")


def marked_answer(response: str) -> str:
    """The answer Trinity-RFT's math grader (`trinity.utils.math_utils.match_answer`, which BOTS' reward reads)
    takes from a response, its rules in its order: the text after the last "answer:" / "answer is" / "answers
    are" (each applied to what the one before left), the text before the last "is the answer" and its kin, the
    content of the last \\boxed{} there is, the text before the last ". ", then the text after the last of
    "be ", "is ", "are ", "=", ": ", "get " (each in turn). "The answer is 7." -> "7."; "\\boxed{x = 5}" -> "5"."""
    for marker in _ANSWER_AFTER:
        at = response.lower().rfind(marker)
        if at != -1:
            response = response[at + len(marker):].strip()
    for marker in _ANSWER_BEFORE:
        at = response.lower().rfind(marker)
        if at != -1:
            response = response[:at].strip()
    boxed = last_boxed(response)
    if boxed:
        response = boxed.strip()
    if ". " in response:
        response = response[:response.rfind(". ")].strip()
    for marker in _LAST_MARKERS:
        at = response.lower().rfind(marker)
        if at != -1:
            response = response[at + len(marker):].strip()
    return response


def bots_math_boxed_reward(data_source: str, solution_str: str, ground_truth: Any,
                           extra_info: dict | None = None) -> dict[str, float]:
    """The accuracy of Trinity-RFT's BOTS example (`bots_math_boxed_reward`, its plugin's BOTSMathBoxedRewardFn):
    score = accuracy = 1.0 when the answer its grader reads (`marked_answer`: answer phrases, the last \\boxed{},
    "x = ..." tails) is equivalent to the ground truth, else 0.0. BOTS grades equivalence with Reasoning360's
    naive-DAPO checks (a string match after the MATH normalisation, then numbers within 1e-4 or equal as
    percentages, then SymPy); rft grades it with math-verify, which equates what those do except the percentage
    variants (0.5 against 50), the answer's closing full stop dropped as Trinity's number check drops it. The think format part (with_think) is the workflow's, as with math_boxed_workflow.
    Returns {"score", "accuracy", "math_verify_timeout"}."""
    answer = marked_answer(solution_str)
    answer = answer[:-1] if answer.endswith(".") else answer  # "7.": a number to Trinity's float() check
    if not answer:
        gold_text(ground_truth)  # a bad ground truth fails on every row
        return {"score": 0.0, "accuracy": 0.0, "math_verify_timeout": 0.0}
    accuracy, timed_out = verify_answer(ground_truth, "\\boxed{" + answer + "}", "plain")
    return {"score": accuracy, "accuracy": accuracy, "math_verify_timeout": timed_out}


_GEO3K_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def geo3k_reward(data_source: str, solution_str: str, ground_truth: Any,
                 extra_info: dict | None = None) -> dict[str, float]:
    """verl's geo3k scorer (data_source "hiyouga/geometry3k"): score = 0.9 * accuracy + 0.1 * format.

    accuracy: 1.0 when the last \\boxed{} of the response is equivalent to the ground truth (`math_boxed_reward`;
    verl grades with mathruler's grade_answer, rft with math-verify), else 0.0. format: 1.0 when the whole response
    is ``<think>...</think>`` followed by text holding a \\boxed{...} (verl's pattern, matched in full), else 0.0.
    Returns {"score", "accuracy", "format_score", "math_verify_timeout"}."""
    parts = math_boxed_reward(data_source, solution_str, ground_truth, extra_info)
    fmt = 1.0 if _GEO3K_FORMAT.fullmatch(solution_str) else 0.0
    return {**parts, "score": 0.9 * parts["accuracy"] + 0.1 * fmt, "format_score": fmt}

