"""The Countdown task (TinyZero's, Trinity-RFT's `countdown_reward`): reach a target number from given numbers with
+ - * / and parentheses, each number used exactly once.

Rules and score values are Trinity's (trinity/common/rewards/countdown_reward.py, from Jiayi-Pan/TinyZero's
verl/utils/reward_score/countdown.py): the equation is the last ``<answer>...</answer>`` on the response's last line;
no equation scores 0.0; an equation that does not use exactly the given numbers, cannot be evaluated or misses the
target scores the format score 0.1; one that reaches the target scores 1.0.

What rft does that Trinity does not, and why:
* The equation is evaluated by walking its syntax tree (integer literals, + - * /, unary minus, parentheses), never
  by ``eval``: ``**`` and ``//`` (which TinyZero's character filter lets through to ``eval``, so "2**3" earned 1.0
  for the target 8) and decimal literals are not Countdown operations and score 0.1.
* Arithmetic is exact (fractions): the result must equal the target, where Trinity accepts a float within 1e-5.
* Trailing white space is dropped before the last line is taken: a response ending in a newline keeps its answer
  (Trinity's last line is then empty and scores 0).
* The ground truth may be a mapping as well as Trinity's JSON text: ``{"target": 24, "numbers": [2, 3, 4, 1]}``.
"""

from __future__ import annotations

import ast
import json
import math
import numbers
import operator
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

COUNTDOWN_FORMAT_SCORE = 0.1
_ANSWER = re.compile(r"<answer>(.*?)</answer>")
_ALLOWED_CHARACTERS = re.compile(r"^[\d+\-*/().\s]+$")  # TinyZero's filter, kept before the syntax tree
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def countdown_task(ground_truth: Any) -> tuple[Fraction, list[int]]:
    """(target, numbers) of a Countdown ground truth: {"target": number, "numbers": [int, ...]} as a mapping or JSON
    text. ValueError naming what is wrong."""
    task = ground_truth
    if task is None:
        raise ValueError("the row has no reward_model.ground_truth")
    if isinstance(task, str):
        try:
            task = json.loads(task)
        except json.JSONDecodeError as e:
            raise ValueError(f"the countdown ground truth is not JSON ({e.msg})") from None
    if not isinstance(task, Mapping) or "target" not in task or "numbers" not in task:
        raise ValueError('the countdown ground truth must be {"target": <number>, "numbers": [<int>, ...]}, got '
                         f"{str(ground_truth)[:80]!r}")
    target, given = task["target"], task["numbers"]
    if isinstance(target, bool) or not isinstance(target, numbers.Real) or not math.isfinite(target):
        raise ValueError(f"the countdown target must be a finite number, got {target!r}")
    if isinstance(given, (str, bytes, Mapping)) or not hasattr(given, "__iter__"):
        raise ValueError(f"the countdown numbers must be a list of integers, got {given!r}")
    given = list(given)
    if not given or not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 0 for n in given):
        raise ValueError(f"the countdown numbers must be a non-empty list of integers >= 0, got {given!r}")
    # a float target is read from its decimal text, so 0.1 is one tenth, not the binary fraction nearest to it
    return Fraction(repr(float(target))) if isinstance(target, float) else Fraction(target), [int(n) for n in given]


def countdown_equation(response: str) -> str | None:
    """The last <answer>...</answer> on the last line of `response` (after trailing white space), stripped."""
    found = _ANSWER.findall(response.rstrip().split("\n")[-1])
    return found[-1].strip() if found else None


def uses_exactly(equation: str, given: list[int]) -> bool:
    """Every integer written in `equation` is one of `given`, each of them used once (TinyZero's check)."""
    return sorted(int(n) for n in re.findall(r"\d+", equation)) == sorted(given)


def evaluate(equation: str) -> Fraction | None:
    """The exact value of an equation of integers, + - * /, unary minus and parentheses; None when it has anything
    else, divides by zero or does not parse."""
    if not _ALLOWED_CHARACTERS.match(equation):
        return None
    try:
        tree = ast.parse(equation, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _value(tree.body)


def _value(node: ast.AST) -> Fraction | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand)
        return None if operand is None else (-operand if isinstance(node.op, ast.USub) else operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        return _BINARY[type(node.op)](left, right)
    return None


def countdown_reward(data_source: str, solution_str: str, ground_truth: Any,
                     extra_info: dict | None = None) -> dict[str, float]:
    """Trinity-RFT's `countdown_reward`: 1.0 when the response's equation (`countdown_equation`) uses exactly the
    given numbers and equals the target, 0.1 when it has an equation that does not, 0.0 when it has none.

    Returns {"score", "accuracy" (1.0 when the target is reached), "format" (1.0 when an equation was found)}.
    """
    target, given = countdown_task(ground_truth)
    equation = countdown_equation(solution_str)
    if equation is None:
        return {"score": 0.0, "accuracy": 0.0, "format": 0.0}
    correct = uses_exactly(equation, given) and evaluate(equation) == target
    return {"score": 1.0 if correct else COUNTDOWN_FORMAT_SCORE, "accuracy": float(correct), "format": 1.0}
