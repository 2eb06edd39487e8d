"""The reward function of a config: one function, or several combined with weights (TRL's ``reward_funcs`` +
``reward_weights``)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

from rft.rewards.custom import load_custom_rewards
from rft.rewards.runner import RewardFunction
from rft.rewards.scorers import default_compute_score


def weighted_reward(functions: Sequence[tuple[str, Callable]], weights: Sequence[float]) -> Callable:
    """One reward function out of several: ``score = sum_f weight_f * score_f``.

    Each function has verl's signature and returns a number or a dict with "score" (see ``score_responses``).
    The combined function returns a dict: "score", each function's own (unweighted) score under its name, and
    each function's other numeric entries under "<name>/<key>", so ``score_responses`` reports them per row and
    the trainer logs them as ``reward_extra/<name>/mean`` (TRL logs ``rewards/<name>/mean``).
    """
    if len(functions) != len(weights):
        raise ValueError(f"{len(functions)} reward functions but {len(weights)} weights")

    def combined(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict:
        out: dict[str, Any] = {}
        total = 0.0
        for (name, fn), weight in zip(functions, weights):
            result = fn(data_source, solution_str, ground_truth, extra_info)
            extras = {}
            if isinstance(result, dict):
                if "score" not in result:
                    raise ValueError(f"reward function {name!r} returned a dict without 'score': {sorted(result)}")
                result, extras = result["score"], {k: v for k, v in result.items() if k != "score"}
            if not isinstance(result, numbers.Real):
                raise TypeError(f"reward function {name!r} returned a score of type {type(result).__name__}")
            total += float(weight) * float(result)
            out[name] = float(result)
            out.update({f"{name}/{key}": value for key, value in extras.items()})
        out["score"] = total
        return out

    return combined


def build_reward_fn(path: str | None, name: str | Sequence[str] = "compute_score",
                    weights: Sequence[float] | None = None, timeout: float | None = None,
                    on_error: str | None = None) -> Callable:
    """The reward function of ``custom_reward_function``: the built-in scorers (no path), the function ``name``
    of the file at ``path``, or, for a list of names or with ``weights``, their weighted sum. With a ``timeout``
    (seconds per call) or an ``on_error`` policy it is a `RewardFunction` (rft.rewards.runner) carrying both and
    its name for messages; without either, the plain function."""
    names = [name] if isinstance(name, str) else list(name)
    if path:
        functions = list(zip(names, load_custom_rewards(path, names)))
        label = (f"reward function {names[0]!r}" if len(names) == 1 else f"reward functions {names}") + \
            f" in {str(path)!r}"
    else:
        functions = [("default_compute_score", default_compute_score)]
        label = "the built-in scorer (rft.rewards.scorers)"
    if weights is None and len(functions) == 1:
        fn = functions[0][1]
    else:
        fn = weighted_reward(functions, list(weights) if weights is not None else [1.0] * len(functions))
    if timeout is None and on_error is None:
        return fn
    return RewardFunction(fn, label, timeout=timeout, on_error=on_error or "error")
