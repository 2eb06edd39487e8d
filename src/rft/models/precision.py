"""The precision a model computes in: what the config names, where the hardware computes it faster.

verl's keys name a precision per model: `actor_rollout_ref.rollout.dtype` for generation, `fsdp_config.
mixed_precision` (`param_dtype` the compute dtype, `reduce_dtype` the gradients' reduction, `buffer_dtype` the
buffers) for the actor, the reference and the critic, and the SFT trainer's `model.fsdp_config.model_dtype`. rft
keeps the master weights and the optimizer state in float32 and computes a pass in the named precision under
`torch.autocast`, as mixed-precision training does (every matmul in bf16 / fp16, the softmaxes, norms and losses in
float32, the gradients reaching the float32 weights).

On a GPU that is always so. A CPU computes bf16 fast only with BF16 or AMX instructions (AVX-512 BF16 on recent
AMD EPYC and Intel Xeon; AMX on Sapphire Rapids and later) and fp16 only with AMX-FP16 or AVX512-FP16; elsewhere a
low-precision matmul is emulated and runs many times slower than float32 (this project's AVX2 AMD EPYC: bf16 at
~1% of the float32 rate). So on a CPU the named precision is used where a measured matmul in it runs faster than in
float32, and float32 otherwise, with the choice and its reason in one log line ("bf16 matmul 2.6x fp32 on this
CPU"). The measurement (`speedup`) runs once per machine, CPU capability, thread count and torch version and is
cached in `~/.cache/rft/measurements.json` (`RFT_CACHE_DIR`; `rft.runtime.measured_once`). `RFT_CPU_PRECISION` overrides it: `measure` (the
default), `requested` (compute in the named precision however slow: for checking numerics) or `float32`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass

import torch
from torch import nn

log = logging.getLogger("rft")

NAMES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
MODE_ENV = "RFT_CPU_PRECISION"
MODES = ("measure", "requested", "float32")
FASTER = 1.1
"""A low precision is used on a CPU when its matmul runs at least this many times the float32 rate."""
_SHAPE = (256, 512, 512)  # (m, k, n): a matmul of a small model's training pass; ~67 MFLOP, ~1 ms in float32
_speedups: dict[torch.dtype, float] = {}


def dtype_of(name: str) -> torch.dtype | None:
    """The torch dtype a config names ('bf16', 'bfloat16', ...); None for 'auto'."""
    if name == "auto":
        return None
    try:
        return NAMES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; valid: auto, {', '.join(NAMES)}") from None


# ------------------------------------------------------------------------------------------- the measurement
def _rate(dtype: torch.dtype, budget: float = 0.15) -> float:
    """Matmuls per second of `_SHAPE` in `dtype` (at least one call, then as many as fit in `budget` s)."""
    m, k, n = _SHAPE
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.matmul(a, b)  # warm-up
    calls, t0 = 0, time.perf_counter()
    while True:
        torch.matmul(a, b)
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= budget:
            return calls / elapsed


def measure(dtype: torch.dtype) -> float:
    """How many times the float32 rate a CPU matmul in `dtype` runs here (float32 and `dtype` timed alternately, the
    better of two each), under the settings every rft process computes with (`configure_cpu_runtime`): with glibc's
    defaults, oneDNN's bf16 product allocates its buffers with a fresh mmap each call, and the bf16 matmul measured
    1.0x fp32 on an Intel Xeon with AMX that runs it 5.0x with them (2026-11-26)."""
    from rft.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    fp32 = low = 0.0
    for _ in range(2):
        fp32 = max(fp32, _rate(torch.float32))
        low = max(low, _rate(dtype))
    return low / fp32


def speedup(dtype: torch.dtype) -> float:
    """`measure(dtype)`, once per machine (cached in memory and in `~/.cache/rft/measurements.json`)."""
    if dtype == torch.float32:
        return 1.0
    if dtype in _speedups:
        return _speedups[dtype]
    from rft.runtime import measured_once

    _speedups[dtype] = float(measured_once(SHORT[dtype], lambda: measure(dtype)))
    return _speedups[dtype]


# ------------------------------------------------------------------------------------------------ the choice
@dataclass(frozen=True)
class Choice:
    """A precision decided for one key: `dtype` what runs, `reason` why (empty where it is what was asked)."""

    dtype: torch.dtype
    asked: str
    reason: str = ""


def choose(name: str, device: torch.device) -> Choice:
    """The dtype a pass computes in for the config's `name` on `device` (see the module docstring). 'auto' is the
    fastest of bf16 and float32 here (bf16 on a GPU)."""
    asked = dtype_of(name)
    if device.type != "cpu":
        return Choice(asked or torch.bfloat16, name)
    if asked == torch.float32:
        return Choice(torch.float32, name)
    want = asked or torch.bfloat16
    mode = os.environ.get(MODE_ENV, "measure")
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}={mode!r}: valid values are {', '.join(MODES)}")
    if mode == "float32":
        return Choice(torch.float32, name, f"{MODE_ENV}=float32")
    if mode == "requested":
        return Choice(want, name, f"{MODE_ENV}=requested")
    ratio = speedup(want)
    why = f"{SHORT[want]} matmul {ratio:.2g}x fp32 on this CPU"
    return Choice(want if ratio >= FASTER else torch.float32, name, why)


def describe(choices: dict[str, Choice]) -> str:
    """One log line for the precisions of a run: 'precision: rollout bf16, actor bf16 (bf16 matmul 2.6x fp32 on
    this CPU); master weights and optimizer state fp32'. A reason is told only where a precision the config named
    is not the one that runs, or a pass computes below float32; a run in float32 that asked for nothing else
    (`auto`, the default, on a CPU slow in bf16) gets a plain 'precision: fp32'."""
    parts, reasons = [], []
    for what, c in choices.items():
        refused = dtype_of(c.asked) not in (None, c.dtype)
        parts.append(f"{what} {SHORT[c.dtype]}" + (f" ({c.asked} asked)" if refused else ""))
        if c.reason and (refused or c.dtype != torch.float32) and c.reason not in reasons:
            reasons.append(c.reason)
    lowp = any(c.dtype != torch.float32 for c in choices.values())
    if not lowp and not reasons:
        return "precision: fp32"
    return (f"precision: {', '.join(parts)}" + (f" ({'; '.join(reasons)})" if reasons else "")
            + ("; master weights and optimizer state fp32" if lowp else ""))


# ------------------------------------------------------------------------------------------------ the passes
MASTER = torch.float32
"""The dtype of the trained weights and the optimizer state."""
COMPUTE_ATTR = "_rft_compute_dtype"
REDUCE_ATTR = "_rft_reduce_dtype"


def set_compute(model: nn.Module, choice: Choice, mixed_precision=None, device: torch.device | None = None) -> None:
    """Make `model`'s training and log-prob passes (`autocast`) compute in `choice.dtype`. `mixed_precision` (an
    FSDP `mixed_precision` section): its `buffer_dtype` applies to the floating buffers (rotary frequencies, ...)
    while the passes compute in a low precision (chosen as `choose` chooses), its `reduce_dtype` to the gradients'
    reduction across processes (`workers/fsdp.py:wrap`)."""
    setattr(model, COMPUTE_ATTR, choice.dtype)
    if mixed_precision is None:
        return
    setattr(model, REDUCE_ATTR, dtype_of(mixed_precision.reduce_dtype) or MASTER)
    buffer_dtype = mixed_precision.buffer_dtype
    if choice.dtype == MASTER:  # float32 passes keep float32 buffers
        return
    buffers = choose(buffer_dtype, device or next(model.parameters()).device).dtype
    if buffers != MASTER:
        for module in model.modules():
            for name, buf in module.named_buffers(recurse=False):
                if buf.is_floating_point():
                    setattr(module, name, buf.to(buffers))


def compute_dtype_of(model: nn.Module) -> torch.dtype:
    return getattr(model, COMPUTE_ATTR, None) or next(model.parameters()).dtype


def autocast(model: nn.Module, dtype: torch.dtype | None = None) -> contextlib.AbstractContextManager:
    """The context a pass of `model` runs in: `torch.autocast` to `dtype` (default: the model's compute dtype,
    `set_compute`) when that is below its weights' precision; else nothing. Entered around a whole generation, the
    weights are cast once for all its decode steps (autocast's cache lives until the outermost context ends)."""
    dtype = dtype or compute_dtype_of(model)
    param = next(model.parameters())
    if dtype == param.dtype or not param.is_floating_point():
        return contextlib.nullcontext()
    return torch.autocast(param.device.type, dtype=dtype)
