"""The precision a model computes in: what the config names, where the hardware computes it faster.

verl's keys name a precision per model: `actor_rollout_ref.rollout.dtype` for generation, `fsdp_config.
mixed_precision` (`param_dtype` the compute dtype, `reduce_dtype` the gradients' reduction, `buffer_dtype` the
buffers) for the actor, the reference and the critic, and the SFT trainer's `model.fsdp_config.model_dtype`. rft
keeps the master weights and the optimizer state in float32 and computes a pass in the named precision under
`torch.autocast`, as mixed-precision training does (every matmul in bf16 / fp16, the softmaxes, norms and losses in
float32, the gradients reaching the float32 weights).

On a GPU that is always so. A CPU computes bf16 fast only with BF16 or AMX instructions (AVX512-BF16 on recent
AMD EPYC and Intel Xeon; AMX on Sapphire Rapids and later) and fp16 only with AMX-FP16 or AVX512-FP16; elsewhere a
low-precision matmul is emulated and runs many times slower than float32. Measured (bench/RESULTS.md): bf16 matmuls
at 0.016x the float32 rate on this project's AVX2 AMD EPYC, 2.1x on its AVX512-BF16 EPYC, 5.0x on an Intel Xeon with
AMX. So on a CPU the named precision is used where the CPU has those instructions, float32 otherwise (`decide`), with
the choice and its reason in one log line ("this CPU has AVX512-BF16 instructions"). The rule reads the CPU's
instructions, never a timing (rft timed a matmul in each precision before: a busy machine's timing could flip the
choice, and with it the run's numbers), and a run keeps the choice in its folder (`rft.runtime.run_choice`), so its
resumed half computes as it did. `RFT_CPU_PRECISION` overrides it: `auto` (the default; `measure`, its earlier name,
is the same), `requested` (compute in the named precision however slow: for checking numerics) or `float32`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

import torch
from torch import nn

from rft.config.errors import ConfigError
from rft.runtime import cpu_flags, run_choice

log = logging.getLogger("rft")

NAMES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
MODE_ENV = "RFT_CPU_PRECISION"
MODES = ("auto", "requested", "float32")
FAST_WITH = {torch.bfloat16: ("AMX-BF16", "AVX512-BF16"), torch.float16: ("AMX-FP16", "AVX512-FP16")}
"""The instructions with which a CPU computes a low precision faster than float32."""
_PROBES = {"AMX-BF16": "_is_amx_tile_supported", "AVX512-BF16": "_is_avx512_bf16_supported",
           "AMX-FP16": "_is_amx_fp16_supported"}  # torch.cpu's probes; AVX512-FP16 has none: /proc/cpuinfo's flags


def dtype_of(name: str) -> torch.dtype | None:
    """The torch dtype a config names ('bf16', 'bfloat16', ...); None for 'auto'."""
    if name == "auto":
        return None
    try:
        return NAMES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; valid: auto, {', '.join(NAMES)}") from None


# ------------------------------------------------------------------------------------------- the rule
def has_instructions(name: str) -> bool:
    """Whether this CPU has the instructions `name` (a `FAST_WITH` entry)."""
    probe = getattr(torch.cpu, _PROBES.get(name, ""), None)
    if probe is not None:
        return bool(probe())
    return name.lower().replace("-", "_") in cpu_flags()


def decide(dtype: torch.dtype) -> tuple[str, str]:
    """(what a CPU pass asked to compute in `dtype` computes in, why): `MODE_ENV`, then the CPU's instructions."""
    mode = os.environ.get(MODE_ENV) or "auto"
    mode = "auto" if mode == "measure" else mode
    if mode not in MODES:
        raise ConfigError(f"{MODE_ENV}={mode!r}: valid values are {', '.join(MODES)}")
    if mode != "auto":
        return SHORT[dtype if mode == "requested" else torch.float32], f"{MODE_ENV}={mode}"
    has = [name for name in FAST_WITH[dtype] if has_instructions(name)]
    if has:
        return SHORT[dtype], f"this CPU has {has[0]} instructions"
    return "fp32", f"this CPU has no {' or '.join(FAST_WITH[dtype])} instructions: {SHORT[dtype]} would be emulated"


def run_choices() -> dict[str, tuple[str, str]]:
    """This process's answers for a run's record (`rft.runtime.fix_run_choices`): what bf16 and fp16 compute in."""
    return {_choice_name(dtype): decide(dtype) for dtype in FAST_WITH}


def _choice_name(dtype: torch.dtype) -> str:
    return f"{SHORT[dtype]} on the CPU"


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
    runs, why = run_choice(_choice_name(want), lambda: decide(want))
    return Choice(NAMES[runs], name, why)


def describe(choices: dict[str, Choice]) -> str:
    """One log line for the precisions of a run: 'precision: rollout bf16, actor bf16 (this CPU has AMX-BF16
    instructions); master weights and optimizer state fp32'. A reason is told only where a precision the config named
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
