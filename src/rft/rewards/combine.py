"""The reward function of a config: a typed one (Trinity's reward_fn_type), one function, or several combined with
weights (TRL's ``reward_funcs`` + ``reward_weights``)."""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from rft.errors import RewardError
from rft.rewards.custom import VERL_ARGS, load_callable_rewards
from rft.rewards.parallel import default_workers
from rft.rewards.runner import RewardFunction
from rft.rewards.scorers import default_compute_score
from rft.rewards.typed import reward_fn_type as reward_fn_type_of


class WeightedReward:
    """``score = sum_f weight_f * score_f`` over named functions (see `weighted_reward`); a class, not a closure, so
    that it pickles (to worker processes) whenever its functions do."""

    def __init__(self, functions: Sequence[tuple[str, Callable]], weights: Sequence[float]):
        if len(functions) != len(weights):
            raise ValueError(f"{len(functions)} reward functions but {len(weights)} weights")
        self.functions, self.weights = list(functions), [float(w) for w in weights]

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict:
        out: dict[str, Any] = {}
        total = 0.0
        for (name, fn), weight in zip(self.functions, self.weights):
            result = fn(data_source, solution_str, ground_truth, extra_info)
            extras = {}
            if isinstance(result, dict):
                if "score" not in result:
                    raise ValueError(f"reward function {name!r} returned a dict without 'score': {sorted(result)}")
                result, extras = result["score"], {k: v for k, v in result.items() if k != "score"}
            if not isinstance(result, numbers.Real):
                raise TypeError(f"reward function {name!r} returned a score of type {type(result).__name__}")
            total += weight * float(result)
            out[name] = float(result)
            out.update({f"{name}/{key}": value for key, value in extras.items()})
        out["score"] = total
        return out


class VerlCall:
    """A function of `custom_reward_function.path`, called as verl's reward managers call it: the four by name,
    ``fn(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``, so a function written for verl gets
    each value under its own name whatever the order of its parameters; plus ``reward_kwargs`` (verl's
    custom_reward_function.reward_kwargs), which win over what the call passes. A class, so that it pickles (to
    worker processes) whenever the function does."""

    def __init__(self, fn: Callable, kwargs: dict | None = None):
        self.fn, self.kwargs = fn, dict(kwargs or {})

    def __call__(self, *values: Any, **kwargs):
        """`values`: rft's positional call, in the order of `VERL_ARGS` (extra_info may be left out: None), passed
        on by those names, the list `check_call` binds."""
        if len(values) > len(VERL_ARGS):
            raise TypeError(f"a reward function takes {len(VERL_ARGS)} arguments ({', '.join(VERL_ARGS)}), "
                            f"got {len(values)}")
        return self.fn(**{"extra_info": None, **dict(zip(VERL_ARGS, values)), **kwargs, **self.kwargs})


def weighted_reward(functions: Sequence[tuple[str, Callable]], weights: Sequence[float]) -> Callable:
    """One reward function out of several: ``score = sum_f weight_f * score_f``.

    Each function has verl's signature and returns a number or a dict with "score" (see ``score_responses``).
    The combined function returns a dict: "score", each function's own (unweighted) score under its name, and
    each function's other numeric entries under "<name>/<key>", so ``score_responses`` reports them per row and
    the trainer logs them as ``reward_extra/<name>/mean`` (TRL logs ``rewards/<name>/mean``).
    """
    return WeightedReward(functions, weights)


def build_reward_fn(path: str | None, name: str | Sequence[str] = "compute_score",
                    weights: Sequence[float] | None = None, timeout: float | None = None,
                    on_error: str | None = None, reward_fn_type: str | None = None,
                    num_workers: int | None = 1, reward_kwargs: dict | None = None,
                    code_runner=None) -> Callable:
    """The reward function of ``custom_reward_function``: the typed reward ``reward_fn_type`` (rft.rewards.typed),
    the built-in scorers (no path), the function ``name`` of the file at ``path``, or, for a list of names or with
    ``weights``, their weighted sum. With a ``timeout`` (seconds per call), an ``on_error`` policy or a typed reward
    that pays for worker processes, it is a `RewardFunction` (rft.rewards.runner) carrying them and its name for
    messages; otherwise the plain function.

    ``num_workers``: processes that score a batch's rows (None: `parallel.default_workers()`); used only by typed
    rewards whose calls cost enough (`RewardFnType.parallel`), every other function runs in process.
    ``reward_kwargs``: keyword arguments every function of ``path`` is called with (verl's meaning).
    ``code_runner``: where the built-in scorer runs the code data sources' programs (reward_model.sandbox_fusion).
    """
    if reward_fn_type is not None and path:
        raise RewardError(f"custom_reward_function.reward_fn_type={reward_fn_type!r} and custom_reward_function.path "
                          "are both set; choose one")
    names = [name] if isinstance(name, str) else list(name)
    workers = 1
    if reward_fn_type is not None:
        try:
            typed = reward_fn_type_of(reward_fn_type)
        except KeyError as e:
            raise RewardError(f"custom_reward_function.reward_fn_type: {e.args[0]}") from None
        functions = [(reward_fn_type, typed.fn)]
        label = f"the reward function of type {reward_fn_type!r} (rft.rewards.typed)"
        if typed.parallel:
            workers = default_workers() if num_workers is None else num_workers
    elif path:
        functions = [(name, VerlCall(fn, reward_kwargs))
                     for name, fn in zip(names, load_callable_rewards(path, names, reward_kwargs))]
        label = (f"reward function {names[0]!r}" if len(names) == 1 else f"reward functions {names}") + \
            f" in {str(path)!r}"
    else:
        functions = [("default_compute_score", default_compute_score if code_runner is None
                      else functools.partial(default_compute_score, code_runner=code_runner))]
        label = "the built-in scorer (rft.rewards.scorers)"
    if weights is None and len(functions) == 1:
        fn = functions[0][1]
    else:
        fn = weighted_reward(functions, list(weights) if weights is not None else [1.0] * len(functions))
    if timeout is None and on_error is None and workers == 1:
        return fn
    fix = "the row's reward_model.ground_truth" if reward_fn_type is not None else "the function"
    return RewardFunction(fn, label, timeout=timeout, on_error=on_error or "error", workers=workers, fix=fix)
