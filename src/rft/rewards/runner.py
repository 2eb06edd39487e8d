"""Calling a reward function safely: a time limit per call, a name for messages, and a policy for failures.

`RewardFunction` wraps a function with verl's signature (`build_reward_fn` makes one from
custom_reward_function.*). Each call runs under `timeout` seconds: in the main thread a SIGALRM timer interrupts the
function itself (nothing keeps running afterwards); elsewhere the call runs in a daemon thread that is abandoned when
it overruns. `score_responses` reads `on_error`: `error` stops the run with one line naming the function, its file,
the batch row and its data_source; `zero` scores the failed row 0 and counts it (`reward_failed`, logged as
`reward_extra/reward_failed/mean`, the share of failed rows). A failure is an exception, a timeout, a score that is
not a number, or a non-finite one. `within_budget` is a shorter limit inside one call (math-verify's checks).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from rft.errors import RewardError

ON_ERROR = ("error", "zero")


class RewardTypeError(RewardError, TypeError):
    """A reward function that returned something other than a number (or a dict with a number under 'score')."""


class _Timeout(BaseException):
    """Raised inside a reward function by the SIGALRM timer (a BaseException: `except Exception` in the function
    does not swallow it)."""


def call_with_timeout(fn: Callable[..., Any], args: tuple, timeout: float | None) -> Any:
    """`fn(*args)`; TimeoutError when it runs longer than `timeout` seconds (None or <= 0: no limit)."""
    if not timeout or timeout <= 0:
        return fn(*args)
    if threading.current_thread() is threading.main_thread():
        def on_alarm(signum, frame):
            raise _Timeout

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return fn(*args)
        except _Timeout:
            raise TimeoutError(f"took longer than {timeout:g} s") from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    worker = threading.Thread(target=run, name="rft-reward", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"took longer than {timeout:g} s (left running in a background thread)")
    if "error" in box:
        raise box["error"]
    return box["value"]


class BudgetExceeded(Exception):
    """`within_budget`'s limit ran out (the caller decides what that means, e.g. math-verify's "not equal")."""


class _Budget(BaseException):
    """Raised inside the function by `within_budget`'s timer (a BaseException, like `_Timeout`)."""


def within_budget(seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, or BudgetExceeded when it runs longer than `seconds`: a limit inside one reward call, nested in
    `call_with_timeout`'s limit for the whole call.

    There is one real-time timer per process (signal.alarm and ITIMER_REAL share it), so a library that sets its own
    alarm (math-verify does) would cancel the outer limit; this one saves the outer timer, runs `fn` under the shorter
    of the two, and re-arms the outer timer with what is left of it. When the outer limit ends first, it fires as
    usual (TimeoutError from the outer call). Outside the main thread (where rft's outer limit is a thread join) there
    is no signal: `fn` runs without this inner limit.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:
        return fn(*args)  # the outer limit comes first; its handler stays in place

    def on_alarm(signum, frame):
        raise _Budget

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    except _Budget:
        raise BudgetExceeded(f"took longer than {seconds:g} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:  # re-arm the outer limit; if it ran out meanwhile, fire it at once
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - start), 1e-6))


class RewardFunction:
    """A reward function (verl's signature) with its name for messages, a time limit per call, the failure policy
    (`on_error`: error | zero) and the worker processes that may score a batch's rows (`workers`; 1: in process; more
    only for picklable pure functions, rft.rewards.parallel)."""

    def __init__(self, fn: Callable[..., Any], label: str, timeout: float | None = None, on_error: str = "error",
                 workers: int = 1, fix: str = "the function"):
        """`fix`: what a failure's message asks to fix (a built-in function's failures come from the rows)."""
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        self.fn, self.label, self.timeout, self.on_error, self.workers = fn, label, timeout, on_error, workers
        self.fix = fix

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None):
        return call_with_timeout(self.fn, (data_source, solution_str, ground_truth, extra_info), self.timeout)

    def __repr__(self) -> str:
        return (f"RewardFunction({self.label}, timeout={self.timeout}, on_error={self.on_error}, "
                f"workers={self.workers})")


def label_of(fn: Callable[..., Any]) -> str:
    return fn.label if isinstance(fn, RewardFunction) else "the reward function"


def policy_of(fn: Callable[..., Any]) -> str:
    return fn.on_error if isinstance(fn, RewardFunction) else "error"


def advice(fn: Callable[..., Any], kind: str = "error") -> str:
    """What to do about a failing row, for the messages (`kind`: error | timeout)."""
    zero = ("set custom_reward_function.on_error=zero to score such rows 0 (counted as "
            "reward_extra/reward_failed/mean)")
    if kind == "timeout":
        return zero
    if isinstance(fn, RewardFunction):  # on_error=zero: said of a row it scored 0 already
        return f"fix {fn.fix}" if fn.on_error == "zero" else f"fix {fn.fix}, or {zero}"
    return "fix the function"
