"""Ctrl-C (SIGINT) and SIGTERM: a stop between phases instead of a traceback from the middle of one.

`handled()` (the CLI wraps every command in it) installs handlers for both signals. Before training has started a
signal stops the process at once (`StopNow`, a KeyboardInterrupt: nothing is at risk while models load). Once the
first training phase has begun (`monitor.Timer` calls `check_between_phases` on entering each phase), the first
signal only sets a flag and says so in one line; the run then stops when the next phase would begin, raising
`Interrupted`. A second signal stops at once. Either way the files a run writes are whole (atomic writes), so the
same command resumes from the last checkpoint exactly, or, before the first one is written, starts the run again
from step 0 (the run's folder says which: `rft.trainer.run_folder`).

Several processes: every rank gets the signal (the terminal's process group, or the launcher forwarding SIGTERM);
the ranks agree at the start of each step (one all-reduce of the flag), so they stop together and none waits in a
collective for a rank that left. Processes that rft's own launcher started (`quiet()`) stop without a word and
exit 128 + the signal number: the launcher, which got the signal first, says the one line for the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

import torch

SIGNALS = ("SIGINT", "SIGTERM")
LAUNCHER_ENV = "RFT_LAUNCHER"
"""Set to 1 by `rft.distributed.launch` for the processes it starts (they inherit it)."""


def exit_code(signal_name: str) -> int:
    return 143 if signal_name == "SIGTERM" else 130


def quiet() -> bool:
    """This process is a rank that rft's launcher started: its signals are the launcher's to report."""
    return os.environ.get(LAUNCHER_ENV) == "1" and "RANK" in os.environ


def _stop(error: KeyboardInterrupt) -> None:
    """Raise `error`, or, in a process rft's launcher started, exit quietly with its code (the launcher's line
    says it; one line per rank said the same thing N + 1 times)."""
    if quiet():
        raise SystemExit(exit_code(error.signal_name))
    raise error


class StopNow(KeyboardInterrupt):
    """A signal that stops the process at once (before training, or the second one). `message`: the CLI's line,
    when the run's folder said what the same command does next (`rft.trainer.run_folder`)."""

    def __init__(self, signal_name: str, message: str | None = None):
        super().__init__(message or signal_name)
        self.signal_name = signal_name
        self.message = message


class Interrupted(KeyboardInterrupt):
    """A signal honoured between two phases. A KeyboardInterrupt, so no `except Exception` on the way swallows
    it; the CLI prints `message` in one line and exits 128 + the signal number."""

    def __init__(self, signal_name: str, message: str):
        super().__init__(message)
        self.signal_name = signal_name
        self.message = message
        self.exit_code = exit_code(signal_name)


class _State:
    signal_name: str | None = None  # the first signal received while deferring
    deferring = False  # training has started: the first signal waits for the end of the phase
    installed = False
    ending = False  # the process is printing the error it ends with: signals no longer act
    dist = None  # the ranks of a several-process run (they agree before stopping)


_state = _State()


def _handler(signum, frame) -> None:
    name = signal.Signals(signum).name
    if _state.ending:
        return
    if not _state.deferring or _state.signal_name is not None:
        # kept as well: a raise that lands in a `__del__` or a weakref callback is printed and dropped by Python,
        # and the process runs on; the first phase that begins then stops it (`check_between_phases`)
        _state.signal_name = _state.signal_name or name
        _stop(StopNow(name))
    _state.signal_name = name
    if quiet():
        return
    again = "press Ctrl-C again" if name == "SIGINT" else "send it again"
    print(f"rft: {name} received: stopping before the next phase ({again} to stop at once)", file=sys.stderr,
          flush=True)


def _quiet_swallowed_stop(hook):
    """`sys.unraisablehook` that says nothing of a stop Python could not raise (it landed in a `__del__`): the
    signal is kept and the run stops at its next phase with its one line; other unraisable errors go to `hook`."""
    def quiet_hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, (StopNow, SystemExit)):
            hook(unraisable)
    return quiet_hook


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Handle SIGINT and SIGTERM for the duration (main thread only; elsewhere Python's defaults stay)."""
    if threading.current_thread() is not threading.main_thread() or _state.installed:
        yield
        return
    previous = {name: signal.getsignal(getattr(signal, name)) for name in SIGNALS}
    _state.installed, _state.signal_name, _state.deferring, _state.dist = True, None, False, None
    for name in SIGNALS:
        signal.signal(getattr(signal, name), _handler)
    unraisable, sys.unraisablehook = sys.unraisablehook, _quiet_swallowed_stop(sys.unraisablehook)
    try:
        yield
        # it came during the last phase, and the work finished anyway (not when the process ends with an error)
        if _state.signal_name is not None and not _state.ending:
            print(f"rft: the {_state.signal_name} came during the last phase; the command finished", file=sys.stderr,
                  flush=True)
    finally:
        sys.unraisablehook = unraisable
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)
        _state.installed, _state.signal_name, _state.deferring, _state.dist = False, None, False, None
        _state.ending = False


def ending() -> None:
    """The process is ending with an error and prints its line now: a signal from here on is not acted on (the
    launcher stops a run's other ranks with SIGTERM when one of them died; one that caught the death itself was cut
    off between logging its line and printing it, killed by the signal with nothing on the console)."""
    if _state.installed:
        _state.ending = True


def set_dist(dist) -> None:
    """The ranks of this run: with several, the stop is agreed on at the start of each step."""
    _state.dist = dist if getattr(dist, "enabled", False) else None


def requested() -> str | None:
    """The signal that asked for a stop, if any."""
    return _state.signal_name


def check_while_waiting(what: str) -> None:
    """Called by a wait that may last long within a phase (a database file another process locks): a signal
    received while deferring stops it now, not after the wait; `what` completes "stopped by SIGTERM while"."""
    if _state.installed and _state.signal_name is not None:
        _stop(Interrupted(_state.signal_name, f"stopped by {_state.signal_name} while {what}"))


def check_between_phases(phase: str) -> None:
    """Called when a phase begins: from now on a first signal waits for a phase boundary; when one was received,
    raise `Interrupted` here. With several processes only the `step` phase (which every rank enters at the same
    point) checks, with an all-reduce so that all ranks stop together."""
    if not _state.installed:
        return
    _state.deferring = True
    dist = _state.dist
    if dist is not None:
        if phase != "step":
            return
        flag = dist.max(torch.tensor([int(_state.signal_name is not None)], dtype=torch.long))
        if not int(flag):
            return
        name = _state.signal_name or "SIGTERM"  # another rank's signal
    else:
        if _state.signal_name is None:
            return
        name = _state.signal_name
    _stop(Interrupted(name, f"stopped by {name} before phase {phase!r}"))
