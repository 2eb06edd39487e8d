"""The console a command prints to, kept from ending the run when it goes away.

`rft train ... | head -1` or quitting `less` closes the pipe stdout (and stderr, with `2>&1`) writes into; Python
ignores SIGPIPE, so the next write raises BrokenPipeError, which would end a training run for want of a console.
While `guarded_console()` holds, the first such write points the stream's file descriptor at os.devnull (and the
other standard stream's too when it is the same pipe), notes it in the log (the run's log file, `rft.monitor.
logfile`) and carries on: console output is dropped, the log file, metrics and checkpoints are written as before.

`counted` words a count for the lines rft prints ("1 step", "2 steps").
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
from collections.abc import Iterator

log = logging.getLogger("rft")


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, singular for one: counted(1, "step") == "1 step", counted(3, "process", "processes") ==
    "3 processes" (`plural`: where adding an s is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


CLOSED: list[str] = []
"""The standard streams whose pipe was closed (now os.devnull) in this process."""


def closed_note() -> str | None:
    """The log's line saying the console went away (None while it is there)."""
    if not CLOSED:
        return None
    return (f"rft: the console's pipe was closed ({' and '.join(CLOSED)}); the run carries on, its output only in "
            "its log file and metrics")


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


class _Guarded:
    """A standard stream whose writes and flushes survive the reader closing its pipe (see the module docstring);
    everything else is the stream's."""

    def __init__(self, stream, name: str):
        self._stream, self._name = stream, name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            self._gone(e)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self._gone(e)

    def _gone(self, error: OSError) -> None:
        if error.errno != errno.EPIPE:
            raise error
        names = [self._name]
        fd = _fileno(self._stream)
        other = "stderr" if self._name == "stdout" else "stdout"
        other_fd = _fileno(getattr(sys, f"__{other}__", None))
        if fd is None:
            raise error  # not a file descriptor we can point elsewhere
        if other_fd is not None and _same_file(fd, other_fd):
            names.append(other)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
            if len(names) > 1:
                os.dup2(devnull, other_fd)
        finally:
            os.close(devnull)
        with contextlib.suppress(OSError):
            self._stream.flush()  # what was buffered for the closed pipe, now into os.devnull
        CLOSED.extend(n for n in names if n not in CLOSED)
        log.warning(closed_note())

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


@contextlib.contextmanager
def guarded_console() -> Iterator[None]:
    """sys.stdout and sys.stderr guarded against a closed pipe while the block runs (flushed at its end, still
    guarded, so the interpreter's last flush finds nothing for a closed pipe)."""
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}
    guards = {name: _Guarded(stream, name) for name, stream in streams.items()}
    sys.stdout, sys.stderr = guards["stdout"], guards["stderr"]
    try:
        yield
    finally:
        for name, guard in guards.items():
            guard.flush()
            if getattr(sys, name) is guard:
                setattr(sys, name, streams[name])
