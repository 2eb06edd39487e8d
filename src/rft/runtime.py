"""Process-wide CPU settings for training, applied once by the trainer."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

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


def cpu_model() -> str:
    """The CPU's model name ('AMD EPYC', 'Intel(R) Xeon(R) Processor'), else the machine's architecture."""
    name = platform.processor()
    if not name:
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
    return name or platform.machine()


T = TypeVar("T")
MEASUREMENTS_FILE = "measurements.json"
"""What rft measured of this machine (`measured_once`), in `~/.cache/rft` (`RFT_CACHE_DIR`)."""


def machine_key() -> str:
    """What a measurement of this machine depends on: the CPU model, torch's CPU capability (which
    `ATEN_CPU_CAPABILITY` lowers), the thread count, torch's version and the allocator settings every rft process
    computes under ("runtime": a key without it may hold a rate measured under glibc's defaults, which understate bf16
    on a CPU with AMX: `rft.models.precision.measure`)."""
    return f"{cpu_model()}|{torch.backends.cpu.get_cpu_capability()}|{torch.get_num_threads()} threads|" \
           f"torch {torch.__version__}|runtime"


def measurements_file() -> Path:
    root = os.environ.get("RFT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "rft")
    return Path(root) / MEASUREMENTS_FILE


def measured_once(label: str, measure: Callable[[], T], kinds: tuple[type, ...] = (int, float)) -> T:
    """`measure()` once per machine (`machine_key`) and `label`: kept in `measurements_file()`, so that every later
    process on the machine uses the same value instead of timing again (a choice timed anew in each process could
    differ between a run and its resumed half on a busy machine). A cached value whose type is not one of `kinds`
    is measured again; a file that cannot be read or written costs a measurement, nothing else."""
    path, key = measurements_file(), f"{machine_key()}|{label}"
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    if type(cached.get(key)) in kinds:
        return cached[key]
    cached[key] = value = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(cached, indent=1) + "\n")
        tmp.replace(path)
    except OSError as e:
        log.debug("rft: the measurements cache %s is not writable (%s)", path, e)
    return value


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
    """End this process (`os._exit(code)`, after `message` on stderr) once its parent `parent` (default: the
    current one) is gone: a child left by a SIGKILLed parent would otherwise wait on forever. A daemon thread
    watches."""
    import os
    import sys
    import threading
    import time

    parent = os.getppid() if parent is None else parent

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        if message:
            print(message.format(parent=parent), file=sys.stderr, flush=True)
        os._exit(code)

    threading.Thread(target=watch, name="rft-parent-watch", daemon=True).start()
