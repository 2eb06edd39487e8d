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
the choice and its reason in one log line ("this CPU has AVX512-BF16 instructions").

Having the instructions is not enough at every size: a small model's products are too short for the packed bf16
kernels to pay for their conversions. Where the model is known (`choose(..., model=folder)`), a CPU with the
instructions decides by the model's own product shapes (`Shapes`: hidden x intermediate, hidden x a block of the
vocabulary: float32 where the low precision measures clearly slower, `SLOWER`), timed once per machine and shape
(`speedup`) and kept in a small JSON file under the user's cache
folder (`cache_file`), so a second run, a resumed half and every process of a run on this machine read the same
answer instead of a timing of their own (one timing of a busy machine could flip the choice, and with it the run's
numbers, if every run timed again). A run keeps the choice in its folder too (`rft.runtime.run_choice`), so its
resumed half computes as it did on another machine. A config that names float32 where bf16 measures several times
faster (`SEVERAL`) gets one line saying so. `RFT_CPU_PRECISION` overrides all of it: `auto` (the default;
`measure`, its earlier name, is the same), `requested` (compute in the named precision however slow: for checking
numerics) or `float32`; neither of the last two times anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rft.config.errors import ConfigError
from rft.runtime import cpu_flags, cpu_model, run_choice

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


def decide(dtype: torch.dtype, shapes: Shapes | None = None) -> tuple[str, str]:
    """(what a CPU pass asked to compute in `dtype` computes in, why): `MODE_ENV`, then the CPU's instructions, then,
    for a model of known `shapes`, whether `dtype` measures faster than float32 at them (`speedup`)."""
    mode = _mode()
    if mode != "auto":
        return SHORT[dtype if mode == "requested" else torch.float32], f"{MODE_ENV}={mode}"
    has = [name for name in FAST_WITH[dtype] if has_instructions(name)]
    if not has:
        return "fp32", f"this CPU has no {' or '.join(FAST_WITH[dtype])} instructions: {SHORT[dtype]} would be emulated"
    why = f"this CPU has {has[0]} instructions"
    if shapes is None:
        return SHORT[dtype], why
    ratio = speedup(shapes, dtype)
    measured = f"{SHORT[dtype]} measured {ratio:.2g}x float32's speed at this model's shapes ({shapes.label})"
    return (SHORT[dtype], f"{why}; {measured}") if ratio >= SLOWER else ("fp32", f"{why}, but {measured}")


def _mode() -> str:
    mode = os.environ.get(MODE_ENV) or "auto"
    mode = "auto" if mode == "measure" else mode
    if mode not in MODES:
        raise ConfigError(f"{MODE_ENV}={mode!r}: valid values are {', '.join(MODES)}")
    return mode


def run_choices(models: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    """This process's answers for a run's record (`rft.runtime.fix_run_choices`): what bf16 and fp16 compute in, and
    at the shapes of each model folder in `models` (those whose shapes config.json tells)."""
    choices = {_choice_name(dtype): decide(dtype) for dtype in FAST_WITH}
    for shapes in {s for s in map(shapes_of, models) if s is not None}:
        choices.update({_choice_name(dtype, shapes): decide(dtype, shapes) for dtype in FAST_WITH})
    return choices


def _choice_name(dtype: torch.dtype, shapes: Shapes | None = None) -> str:
    return f"{SHORT[dtype]} on the CPU" + (f" at {shapes.label}" if shapes is not None else "")


# ------------------------------------------------------------------------------------------- the measurement
TOKENS = 128
"""Token positions of the measured products: a micro-batch's slice, long enough for the packed kernels' blocks."""
VOCAB_BLOCK = 16384
"""The vocabulary columns of the measured head product (the chunked LM head's products are blocks of it)."""
REPEATS = 3
SLOWER = 0.9
"""A low precision whose products measure below this share of float32's speed computes in float32 instead. Not
1.0: near it either precision runs as fast, and it is where two timings of a busy machine would choose apart."""
SEVERAL = 3.0
"""A config naming float32 where bf16 measures at least this many times its speed gets a line saying so."""


@dataclass(frozen=True)
class Shapes:
    """A decoder's product shapes: the MLP's hidden x intermediate and the LM head's hidden x vocabulary."""

    hidden: int
    intermediate: int
    vocab: int

    @property
    def label(self) -> str:
        return f"hidden {self.hidden}, intermediate {self.intermediate}, vocabulary {self.vocab}"

    def products(self) -> list[tuple[int, int, int]]:
        """(tokens, in, out) of each measured product."""
        return [(TOKENS, self.hidden, self.intermediate), (TOKENS, self.hidden, min(self.vocab, VOCAB_BLOCK))]


def shapes_of(folder: str | Path | None) -> Shapes | None:
    """The shapes of the model folder `folder` from its config.json (a vision-language model's text model); None
    where it has none to read."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text()) if folder else None
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    hidden = text.get("hidden_size") or text.get("n_embd") or text.get("d_model")
    inner = text.get("intermediate_size") or text.get("n_inner") or text.get("ffn_dim") or (hidden and 4 * hidden)
    vocab = text.get("vocab_size") or config.get("vocab_size")
    if not all(isinstance(x, int) and x > 0 for x in (hidden, inner, vocab)):
        return None
    return Shapes(hidden, inner, vocab)


def cache_file() -> Path:
    """Where measured speeds are kept: `$RFT_CACHE_DIR/precision.json`, by default `$XDG_CACHE_HOME/rft` (`~/.cache`)."""
    folder = os.environ.get("RFT_CACHE_DIR")
    if not folder:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rft"
    return Path(folder) / "precision.json"


def machine_key() -> str:
    """What a measured speed holds for: the CPU, the kernels torch picks on it, its threads and torch's version."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{cpu_model()}; {capability}; {torch.get_num_threads()} threads; torch {torch.__version__}"


def speedup(shapes: Shapes, dtype: torch.dtype) -> float:
    """`dtype`'s speed over float32's on `shapes`' products on this machine: from `cache_file` where measured before,
    else measured now and kept there (written under a temporary name and renamed; the measurement under an flock,
    so the processes of one run measure once and read the same answer)."""
    from rft.fsutil import write_text_atomic

    path, entry = cache_file(), f"{SHORT[dtype]} at {shapes.label}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            cached = json.loads(path.read_text())
        except (OSError, ValueError):
            cached = {}
        cached = cached if isinstance(cached, dict) else {}
        machine = cached.setdefault(machine_key(), {})
        if not isinstance(machine.get(entry), (int, float)):
            machine[entry] = round(measure(shapes, dtype), 3)
            write_text_atomic(path, json.dumps(cached, indent=1, sort_keys=True) + "\n")
            log.info("rft: %s measured %.2gx float32's speed on this CPU (kept in %s)", entry, machine[entry], path)
        return float(machine[entry])


def measure(shapes: Shapes, dtype: torch.dtype) -> float:
    """float32's time over `dtype`'s for `shapes`' products, the best of `REPEATS` rounds, the two precisions
    timed in turn so that a load that comes and goes weighs on both."""
    g = torch.Generator().manual_seed(0)
    operands = [(torch.randn(t, k, generator=g), torch.randn(n, k, generator=g)) for t, k, n in shapes.products()]
    low = [(x.to(dtype), w.to(dtype)) for x, w in operands]
    best = {torch.float32: float("inf"), dtype: float("inf")}
    for _ in range(REPEATS + 1):  # the first round warms the kernels up
        for which, pairs in ((torch.float32, operands), (dtype, low)):
            start = time.perf_counter()
            for x, w in pairs:
                torch.nn.functional.linear(x, w)
            best[which] = min(best[which], time.perf_counter() - start)
    return best[torch.float32] / max(best[dtype], 1e-9)


# ------------------------------------------------------------------------------------------------ the choice
@dataclass(frozen=True)
class Choice:
    """A precision decided for one key: `dtype` what runs, `reason` why (empty where it is what was asked)."""

    dtype: torch.dtype
    asked: str
    reason: str = ""
    master: torch.dtype = torch.float32
    """The dtype of the model's weights, gradients and optimizer state (`fsdp_config.model_dtype`, `kept_in`)."""


def choose(name: str, device: torch.device, model: str | Path | None = None, key: str | None = None) -> Choice:
    """The dtype a pass computes in for the config's `name` on `device` (see the module docstring). 'auto' is the
    fastest of bf16 and float32 here (bf16 on a GPU). `model`: the model folder, whose shapes decide on a CPU with
    the instructions; `key`: the config key that names `name`, for the line said where float32 is named and bf16
    measures `SEVERAL` times faster."""
    asked = dtype_of(name)
    if device.type != "cpu":
        return Choice(asked or torch.bfloat16, name)
    shapes = shapes_of(model)
    if asked == torch.float32:
        _note_slow_float32(key, shapes)
        return Choice(torch.float32, name)
    want = asked or torch.bfloat16
    runs, why = run_choice(_choice_name(want, shapes), lambda: decide(want, shapes))
    return Choice(NAMES[runs], name, why)


_noted: set[str] = set()


def _note_slow_float32(key: str | None, shapes: Shapes | None) -> None:
    """One line, once per key and process, where `key` names float32 and bf16 measures `SEVERAL` times its speed at
    the model's `shapes` (the default mode only: an override times nothing)."""
    if key is None or shapes is None or key in _noted or _mode() != "auto":
        return
    if not any(has_instructions(name) for name in FAST_WITH[torch.bfloat16]):
        return
    ratio = speedup(shapes, torch.bfloat16)
    if ratio >= SEVERAL:
        _noted.add(key)
        log.warning("rft: %s names float32, and bf16 measures %.1fx its speed at this model's shapes on this CPU "
                    "(%s): set %s=auto to compute in bf16 (master weights and optimizer state stay float32), "
                    "unless float32 is what you need", key, ratio, shapes.label, key)


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
    low_master = [what for what, c in choices.items() if c.master != MASTER]
    masters = (f"; master weights and optimizer state {', '.join(f'{w} {SHORT[choices[w].master]}' for w in low_master)}"
               ", fp32 otherwise" if low_master else "; master weights and optimizer state fp32")
    return (f"precision: {', '.join(parts)}" + (f" ({'; '.join(reasons)})" if reasons else "")
            + (masters if lowp else ""))


def kept_in(choice: Choice, model_dtype: str, key: str, trained: bool = True) -> Choice:
    """`choice` for a model whose weights, gradients and optimizer state are kept in `model_dtype` (verl's
    `fsdp_config.model_dtype`, the dtype the model is loaded in; `key` names it). A pass never computes above its
    weights' dtype (autocast only lowers), so bf16 weights compute in bf16 even where float32 was chosen for the
    passes (on a CPU without bf16 instructions: emulated, slower), which the reason says. `trained`: False for a pass
    that only reads the weights of another (the hf engine's generation with the policy's), whose `master` stays."""
    master = dtype_of(model_dtype) or MASTER
    if master == MASTER:
        return choice
    kept = master if trained else choice.master
    if choice.dtype.itemsize <= master.itemsize:
        return Choice(choice.dtype, choice.asked, choice.reason, kept)
    return Choice(master, choice.asked, f"the weights are {SHORT[master]} ({key}={model_dtype})", kept)


# ------------------------------------------------------------------------------------------------ the passes
MASTER = torch.float32
"""The dtype of the trained weights and the optimizer state, unless fsdp_config.model_dtype names another (`kept_in`)."""
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
    # autocast only lowers: weights kept below float32 (fsdp_config.model_dtype) compute in their own dtype
    if dtype == param.dtype or not param.is_floating_point() or dtype.itemsize > param.dtype.itemsize:
        return contextlib.nullcontext()
    return torch.autocast(param.device.type, dtype=dtype)
