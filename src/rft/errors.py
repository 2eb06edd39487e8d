"""The failures rft expects, and how the command line reports them.

An expected failure (bad input, a bad file, a fault the user can fix) is an `RftError` whose message says what went
wrong, where, and what to do. `rft`'s one error boundary (`rft.cli.main`) prints it as one line,
`rft: error: <message>`, and exits with `exit_code`; operating-system faults (a full disk, a folder without write
permission) are turned into such a line by `describe_os_error`. Anything else is a bug: one line saying so, and the
traceback only with `--debug` or `RFT_DEBUG=1`.
"""

from __future__ import annotations

import errno
import os

EXIT_ERROR = 2
"""Bad input or a fault the user can fix (argparse's code for bad usage too)."""
EXIT_BUG = 1
"""An unexpected exception: a bug in rft or in a library it calls."""


class RftError(Exception):
    """An expected failure; the message says what, where and what to do (the CLI prints `rft: error: <message>`)."""

    exit_code = EXIT_ERROR


class RewardError(RftError, ValueError):
    """A reward function that cannot be used: not found, raising, too slow, or returning a non-number / NaN."""


class CheckpointError(RftError):
    """A checkpoint that cannot be written or resumed from."""


class TrainingDiverged(RftError):
    """Updates that keep producing non-finite or exploding values."""


class RunLocked(RftError):
    """Another live run holds the output folder."""


DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def describe_os_error(e: OSError) -> str:
    """One line for an operating-system error: the file, what happened, what to do."""
    if e.errno is None:  # raised by rft or a library with its own message
        return " ".join(str(e).split())
    where = f" {e.filename!r}" if e.filename else ""
    if e.errno in DISK_FULL:
        what = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                errno.EFBIG: "file too large for this file system or process limit"}[e.errno]
        return (f"{what} while writing{where or ' a file'}: free space on that file system (or raise the limit), "
                "then run the same command again; checkpoints are written whole or not at all, so it resumes from "
                "the last one")
    if isinstance(e, PermissionError):
        return (f"permission denied on{where or ' a file'} ({e.strerror}); choose a folder you can write "
                "(e.g. trainer.default_local_dir=...) or fix its permissions")
    if isinstance(e, FileNotFoundError):
        return f"no such file or folder:{where or ' (unnamed)'}; check the path"
    if isinstance(e, IsADirectoryError | NotADirectoryError):
        return f"{e.strerror}:{where}; check the path"
    return f"{e.strerror or e}:{where} (operating-system error {e.errno}); check the path and the file system"


def describe_failure(error: BaseException) -> str:
    """The one line `rft.cli.report` prints for `error` (without the `rft: error: ` prefix)."""
    if isinstance(error, RftError):
        return str(error)
    if isinstance(error, OSError):
        return describe_os_error(error)
    if isinstance(error, KeyboardInterrupt):
        return getattr(error, "message", None) or "stopped by SIGINT"
    message = " ".join(str(error).split())[:300]
    return (f"unexpected {type(error).__name__}: {message}. This is a bug in rft (or a library it calls): run again "
            "with --debug (or RFT_DEBUG=1) for the traceback and report it")


def debug_requested() -> bool:
    """RFT_DEBUG=1 (or true / yes): show tracebacks."""
    return os.environ.get("RFT_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
