"""Process-wide CPU settings for training, applied once by the trainer."""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import platform
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from rft.errors import LAST_WORD, error_said
from rft.fsutil import checked_write

log = logging.getLogger("rft")

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def configure_cpu_runtime() -> None:
    """Flush denormals, and keep glibc from returning large blocks to the OS.

    Denormal probabilities of unused tokens made a tiny model's matmuls ~15x slower. And glibc serves each
    allocation over 32 MiB (one MLP activation of a 7M model at 128 rows) with a fresh mmap that page-faults
    on first touch: measured in bench/, ~30% of the update's time. Keeping freed memory in the heap reuses it.
    """
    torch.set_flush_denormal(True)
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_MAX, 0)
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):  # not glibc (macOS, musl): the defaults stay
        log.debug("mallopt unavailable; large allocations use the allocator's defaults")


def _cpuinfo(field: str) -> str:
    """The first `field` line's value in Linux's /proc/cpuinfo; '' where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field) and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> set[str]:
    """The CPU's instruction flags as Linux names them ('avx2', 'avx512_bf16', 'amx_tile', ...); empty elsewhere."""
    return set(_cpuinfo("flags").split())


def cpu_model() -> str:
    """The CPU's model name ('AMD EPYC', 'Intel(R) Xeon(R) Processor'), else the machine's architecture."""
    return platform.processor() or _cpuinfo("model name") or platform.machine()


RUN_CHOICES_FILE = "numerics.json"
"""A run folder's record of what the run computes with where the machine, not the config, decides (`fix_run_choices`)."""

_run_choices: dict[str, tuple[str, str]] = {}


def run_choice(name: str, decide: Callable[[], tuple[str, str]]) -> tuple[str, str]:
    """(value, why) of the choice `name`: as the run this process serves recorded it (`fix_run_choices`), else
    `decide()`, this machine's own answer (outside a run: `rft generate`, a test)."""
    return _run_choices.get(name) or decide()


@contextlib.contextmanager
def fix_run_choices(path: Path, decided: dict[str, tuple[str, str]], fresh: bool
                    ) -> Iterator[dict[str, tuple[str, str]]]:
    """Fix, within, for this process, the choices of the run whose record is `path` (its folder's `RUN_CHOICES_FILE`):
    `decided` ({name: (value, why)}, this machine's answers) is written there when the run starts afresh (`fresh`)
    or finds no record; otherwise the record is read back, so a resumed run, and every process of a run (ranks,
    an explorer), computes as the run started, whatever this machine or its environment would choose now (each
    choice that differs said in one line). A choice that depends on the machine's load (a kernel timed faster)
    could differ between a run and its resumed half, or two runs of one config: rft's rules depend on the CPU's
    instructions and the environment only, and the record carries them across machines and environments."""
    recorded = None if fresh else _read_choices(path)
    if recorded is None:
        _write_choices(path, decided, replace=fresh)
        recorded = _read_choices(path) or decided  # another process of the run may have written it first
    for name, (value, _) in recorded.items():
        if name in decided and decided[name][0] != value:
            print(f"rft: {name}: {value}, as the run started ({path}); this process alone would choose "
                  f"{decided[name][0]} ({decided[name][1]})", flush=True)
    before = dict(_run_choices)
    _run_choices.clear()
    _run_choices.update(recorded)
    try:
        yield dict(recorded)
    finally:
        _run_choices.clear()
        _run_choices.update(before)


def _write_choices(path: Path, choices: dict[str, tuple[str, str]], replace: bool) -> None:
    """Write `choices` to `path`, over an earlier record (`replace`) or only where there is none: of two processes
    of one run writing it at the same moment, one makes the record (a hard link does not replace a file)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")  # what a kill leaves, the run folder's lock removes
    text = json.dumps({name: {"value": v, "why": why} for name, (v, why) in choices.items()}, indent=1) + "\n"
    checked_write(lambda: tmp.write_text(text), path)
    try:
        if replace:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: the last writer's (one machine's rules, the same)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_choices(path: Path) -> dict[str, tuple[str, str]] | None:
    """The choices recorded at `path`; None where there is no record (or none that reads: it is written anew)."""
    try:
        raw = json.loads(path.read_text())
        return {name: (str(entry["value"]), str(entry["why"])) for name, entry in raw.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the OS has one), at least 1."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def human_bytes(n: float) -> str:
    """`n` bytes in binary units: '1000 B', '15.6 MB', '22.1 GB'."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _meminfo(field: str) -> int | None:
    """A field of Linux's /proc/meminfo in bytes; None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory() -> int | None:
    """Bytes of host memory free for a new allocation (Linux's MemAvailable); None where it cannot be read."""
    return _meminfo("MemAvailable")


def total_memory() -> int | None:
    """Bytes of host memory in all (Linux's MemTotal); None where it cannot be read."""
    return _meminfo("MemTotal")


_LIBC: Any = None


TRIM_SHARE = 0.25
"""`release_freed_memory` trims only while the process holds more than this share of the machine's memory."""


def resident_memory() -> int | None:
    """This process's resident memory in bytes (Linux), None where it cannot be read."""
    try:
        import os

        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_freed_memory(force: bool = False) -> None:
    """Hand the memory freed tensors left in the C allocator's heap back to the system (glibc's malloc_trim; a
    no-op elsewhere), when the process holds more than TRIM_SHARE of the machine's memory (`force`: always).
    glibc keeps freed blocks below its mmap threshold (which grows to 32 MB as blocks are freed) for reuse, so after
    a generation or a backward pass the process can hold GBs of freed tensors that the next phase's allocations,
    shaped differently, do not reuse: measured at Qwen2.5-0.5B's shape, 1.6 GiB before the optimizer step. A trim is
    not free: 0.16 s a call at W2's shape here (a 3 GB heap), and the pages it returns fault in again when the next
    phase touches them; a process that holds a small share of the machine keeps its heap."""
    global _LIBC
    if not force:
        rss, total = resident_memory(), total_memory()
        if rss is not None and total and rss <= TRIM_SHARE * total:
            return
    if _LIBC is None:
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018  (glibc only)
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


def exit_with_parent(code: int, message: str | None = None, parent: int | None = None, poll_s: float = 1.0) -> None:
    """End this process (`os._exit(code)`, after `message` on stderr unless the process already said its error,
    `say_error`) once its parent `parent` (default: the current one) is gone: a child left by a SIGKILLed parent
    would otherwise wait on forever. A daemon thread watches."""
    import sys
    import time

    parent = os.getppid() if parent is None else parent

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        LAST_WORD.acquire()  # held to the exit: the main thread's error line cannot follow this one
        if message and not error_said():
            print(message.format(parent=parent), file=sys.stderr, flush=True)
        os._exit(code)

    threading.Thread(target=watch, name="rft-parent-watch", daemon=True).start()
