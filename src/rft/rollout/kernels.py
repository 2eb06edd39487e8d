"""Generation's matrix products on the CPU kernel that suits their shape, by a fixed rule.

A decode step multiplies the rows still generating (a few to a few hundred) by every weight matrix of the model:
products (M, k) x (k, n) with a small M, which read the whole weight for little arithmetic. PyTorch's `linear`
runs them through MKL's sgemm; oneDNN's inner product (`torch.ops.mkldnn._linear_pointwise`, the kernel inductor
calls for frozen CPU linears) is a second choice in the same build. oneDNN reads a large weight faster: on this
project's AVX2 AMD EPYC (2 threads) it took 61-85 ms against MKL's 182-235 ms for a Qwen2.5-0.5B LM head at 16 rows
(16 x 896 x 151,936) and 1.9-2.7 ms against 3.1-4.5 ms for its MLP's gate projection; on its AVX-512 EPYC (one
thread) 1.03-1.8x faster from 4 to 256 rows for every weight of that model (3 MiB and more) but its 0.4 MiB key /
value projections, while for the tiny models' small weights (0.06-1 MiB) MKL was the faster below 64 rows (oneDNN's
~15 us a call), and for one row mostly MKL's matrix-vector kernel (bench/RESULTS.md, bench/decode_kernels.py). So the rule (`auto`, the default): oneDNN for products of 2 to LARGEST_ROWS rows whose weight
holds ONEDNN_MIN_WEIGHT_BYTES or more, MKL for the rest. `RFT_DECODE_KERNEL=aten|onednn` puts every product of up to
LARGEST_ROWS rows on one kernel.

The rule depends on shapes alone, never on a timing: both kernels compute the same product, but oneDNN's sums round
differently (~1e-6 relative), and a choice timed per shape (as rft did) could flip on a busy machine, so two runs of
one seed, or a run and its resumed half, sampled differently (the demo's GRPO runs parted at step 58). The choice is
a run's (`rft.runtime.run_choice`): recorded in its folder as it starts, and read back by its resumed half and its
other processes.

Only plain float32 `nn.Linear` layers on the CPU outside autograd and autocast are routed (a sharded, quantised or cuda
weight keeps `linear`), and only inside `fast_linears`, which the hf engine's eager decode loop enters.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import nn

from rft.config.errors import ConfigError
from rft.runtime import run_choice

KERNEL_ENV = "RFT_DECODE_KERNEL"
"""auto (default: by the products' shapes) | aten (MKL) | onednn: the kernel of generation's products."""
KERNEL_MODES = ("auto", "aten", "onednn")
LARGEST_ROWS = 512
"""Products with more rows than this stay on `linear` (MKL is at its best there)."""
ONEDNN_MIN_WEIGHT_BYTES = 2 << 20
"""`auto` puts a product of 2 to LARGEST_ROWS rows on oneDNN when its weight holds this many bytes or more."""
CHOICE = "decode kernel"
"""The name of the choice in a run's record (`rft.runtime.fix_run_choices`)."""


def _onednn_available() -> bool:
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    return op is not None and torch.backends.mkldnn.is_available()


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def decide() -> tuple[str, str]:
    """(mode, why): the kernel rule this process would choose (`KERNEL_ENV`, and whether oneDNN is in this build)."""
    mode = os.environ.get(KERNEL_ENV) or "auto"
    if mode not in KERNEL_MODES:
        raise ConfigError(f"{KERNEL_ENV}={mode!r}: valid values are {', '.join(KERNEL_MODES)} (auto, the default: by "
                       "the products' shapes)")
    if mode != "aten" and not _onednn_available():
        return "aten", "this PyTorch build has no oneDNN inner product"
    if mode != "auto":
        return mode, f"{KERNEL_ENV}={mode}"
    return "auto", (f"oneDNN for products of 2-{LARGEST_ROWS} rows with a weight of "
                    f"{ONEDNN_MIN_WEIGHT_BYTES >> 20} MiB or more, MKL for the rest")


def run_choices() -> dict[str, tuple[str, str]]:
    """This process's answer for a run's record (`rft.runtime.fix_run_choices`)."""
    return {CHOICE: decide()}


def kernel_mode() -> str:
    """The run's kernel rule (`decide`, as its record has it)."""
    return run_choice(CHOICE, decide)[0]


def use_onednn(rows: int, weight: torch.Tensor, mode: str = "auto") -> bool:
    """Whether generation's product of `rows` rows with `weight` goes to oneDNN under the rule `mode` (see the
    module docstring)."""
    if mode == "aten" or rows > LARGEST_ROWS:
        return False
    return mode == "onednn" or (rows >= 2 and weight.numel() * weight.element_size() >= ONEDNN_MIN_WEIGHT_BYTES)


def _routable(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (type(module) is nn.Linear and isinstance(weight, torch.Tensor) and type(weight.data) is torch.Tensor
            and weight.dtype == torch.float32 and weight.device.type == "cpu")  # a DTensor's data is no Tensor


@contextlib.contextmanager
def fast_linears(model: nn.Module) -> Iterator[None]:
    """Within: `model`'s plain float32 CPU `nn.Linear` layers compute outside autograd on the kernel the run's rule
    gives their shape (`use_onednn`); with gradients, on another dtype or device, as before. Nothing changes where oneDNN
    is not in this build or the rule is `aten`."""
    mode = kernel_mode()
    if mode == "aten" or not _onednn_available():
        yield
        return
    layers = [m for m in model.modules() if _routable(m)]
    for layer in layers:
        layer.forward = _routed(layer, mode)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def _routed(layer: nn.Linear, mode: str):
    plain = nn.Linear.forward.__get__(layer)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if (torch.is_grad_enabled() or x.dtype != torch.float32 or x.device.type != "cpu"
                or torch.is_autocast_enabled("cpu")):  # autocast casts inside linear, not inside oneDNN's op
            return plain(x)
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows and use_onednn(rows, layer.weight, mode):
            return _onednn(x, layer.weight, layer.bias)
        return plain(x)

    return forward
