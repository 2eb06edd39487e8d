"""Each process's log file, laid out as Trinity-RFT lays out its actors' logs (its `log` section).

Trinity writes an actor's log to `<checkpoint_root_dir>/<project>/<name>/log/<actor>.log`, or under
`log/<node_ip>/` with log.group_by_node. That folder is rft's run folder (trainer.default_local_dir) and rft's
processes are its actors, one file each: `trainer` (rank 0 of the trainer processes; `trainer_1`, ... the other
ranks), `explorer` (`explorer_1`, ... with trainer.explorer_num > 1), `bench`. A staged run's stages have folders of
their own, hence logs of their own. The file is appended to, so a rerun that resumes continues it.

What goes in, from when the process takes its run folder (`rft.trainer.run_folder`) to when it gives it back (the
config's notes, printed before, are not in it): every line the process shows on its console, as it shows it (stdout
and stderr are copied line by line; the console itself is unchanged), and the records of Python's `logging`, each
with its level and time. A run that ends with an error or a stop ends its log with the line the command prints for
it. A console that goes away (its pipe closed: `| head`, quitting `less`; `rft.console`) is noted in it, and
the run carries on. trainer.log_level filters:
records by their own level, console lines by theirs (`rft: error:` lines ERROR, Python warnings WARNING, the rest
INFO); DEBUG adds rft's debug records (each step's metrics, the process's command), which the console never shows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from rft.console import closed_note
from rft.errors import failure_lines

LOG_DIR = "log"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_PYTHON_WARNING = re.compile(r"^\S.*:\d+: \w*Warning: ")  # what warnings.showwarning prints first
log = logging.getLogger("rft")


def node_ip() -> str:
    """This machine's address as other nodes reach it, found the way Ray's get_node_ip_address finds it: the local
    end of a UDP socket pointed at a public address (nothing is sent); 127.0.0.1 on a machine without a route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("8.8.8.8", 80))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def log_path(out: str | Path, role: str, group_by_node: bool = False) -> Path:
    """`<out>/log/[<node_ip>/]<role>.log`."""
    folder = Path(out) / LOG_DIR
    return (folder / node_ip() if group_by_node else folder) / f"{role}.log"


def console_level(line: str) -> int:
    """The level a console line is filed at: `rft: error:` lines ERROR, Python's warnings WARNING, the rest INFO."""
    if line.startswith("rft: error:"):
        return logging.ERROR
    if _PYTHON_WARNING.match(line):
        return logging.WARNING
    return logging.INFO


class _LineFormatter(logging.Formatter):
    """`LEVEL date time message`, a record of several lines (a traceback, several refusals) as that many lines, each
    with the level and time (as Trinity's NewLineFormatter), so every line of the file says what it is."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        prefix = f"{record.levelname} {self.formatTime(record, DATE_FORMAT)} "
        return "\n".join(prefix + line for line in text.splitlines() or [""])


class _Copied:
    """A console stream that writes through and hands each complete line to `emit` (of a line a progress bar
    redraws with carriage returns, the last drawing); everything else (isatty, fileno, ...) is the stream's."""

    def __init__(self, stream, emit: Callable[[str], None]):
        self._stream, self._emit = stream, emit
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            for line in lines:
                self._emit(line)
        return written

    def close_lines(self) -> None:
        """Emit what is left of an unfinished line."""
        with self._lock:
            self._emit(self._partial)
            self._partial = ""

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def run_log(path: Path, level: str = "INFO") -> Iterator[Path]:
    """Copy this process's console lines and log records at `level` and above into the file `path` while the
    block runs (see the module docstring); the error or stop that ends the block is its last line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")  # appended to: a resumed run continues its log
    handler.setLevel(level)
    handler.setFormatter(_LineFormatter())

    def emit(levelno: int, line: str) -> None:
        line = line.rsplit("\r", 1)[-1].rstrip()  # a progress bar's redraws: the last
        if line and levelno >= handler.level:
            handler.handle(logging.LogRecord("rft.console", levelno, "", 0, line, None, None))

    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with _rft_debug_records(handler.level == logging.DEBUG), _console_copied(emit) as copies:
            log.debug("rft: log of pid %d on %s: %s", os.getpid(), socket.gethostname(), " ".join(sys.argv))
            if (note := closed_note()) is not None:  # the console went away before the log began
                log.warning(note)
            try:
                yield path
            except BaseException as e:
                for copy in copies:
                    copy.close_lines()
                for line in failure_lines(e):  # what the command prints once the block has ended
                    emit(logging.ERROR, line)
                raise
    finally:
        root.removeHandler(handler)
        handler.close()


@contextlib.contextmanager
def _console_copied(emit: Callable[[int, str], None]) -> Iterator[list[_Copied]]:
    """sys.stdout and sys.stderr copied line by line to `emit(level, line)` (`console_level`) while the block runs."""
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}
    copies = {name: _Copied(stream, lambda line: emit(console_level(line), line)) for name, stream in streams.items()}
    sys.stdout, sys.stderr = copies["stdout"], copies["stderr"]
    try:
        yield list(copies.values())
    finally:
        for name, copy in copies.items():
            copy.close_lines()
            if getattr(sys, name) is copy:  # unless something replaced it in the meantime
                setattr(sys, name, streams[name])


@contextlib.contextmanager
def _rft_debug_records(enabled: bool) -> Iterator[None]:
    """`enabled`: rft's debug records made while the block runs (for the file), the console's handlers (those of
    no level of their own) showing INFO and up as before."""
    if not enabled:
        yield
        return
    console = [h for h in logging.getLogger().handlers if h.level == logging.NOTSET]
    previous = log.level
    for h in console:
        h.setLevel(logging.INFO)
    log.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        log.setLevel(previous)
        for h in console:
            h.setLevel(logging.NOTSET)
