"""Generation's matrix products on whichever CPU kernel runs them faster on this machine.

A decode step multiplies the rows still generating (a few to a few hundred) by every weight matrix of the model:
products (M, k) x (k, n) with a small M, which read the whole weight for little arithmetic. PyTorch's `linear`
runs them through MKL's sgemm; oneDNN's inner product (`torch.ops.mkldnn._linear_pointwise`, the kernel inductor
calls for frozen CPU linears) is a second choice in the same build. Which is faster depends on the CPU: measured on
this project's AMD EPYC (AVX2, 2 threads), oneDNN took 61-85 ms against MKL's 182-235 ms for a Qwen2.5-0.5B LM head at
16 rows (16 x 896 x 151,936) and 1.9-2.7 ms against 3.1-4.5 ms for its MLP's gate projection; at 1,248 rows (a
training pass) MKL was the faster (bench/RESULTS.md, 2026-11-25). Nothing is assumed: the first time a generation
on this machine meets a shape (M rounded up to a power of two, k, n), both kernels are timed on it, alternately,
and the faster one serves that shape from then on, in this process and every later one on the machine (kept beside
the precision's measurement: `rft.runtime.measured_once`), so that a run and its resumed half, or two runs of one
config, compute with the same kernel (`RFT_DECODE_KERNEL=aten|onednn` fixes the choice instead). Both compute the
same product; oneDNN's sums round differently (~1e-6 relative): a choice timed anew in each process could flip on a
busy machine and move a resumed run's log-probs by that much.

Only plain float32 `nn.Linear` layers on the CPU outside autograd and autocast are routed (a sharded, quantised or cuda weight
keeps `linear`), and only inside `fast_linears`, which the hf engine's eager decode loop enters.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator

import torch
from torch import nn

log = logging.getLogger("rft")

KERNEL_ENV = "RFT_DECODE_KERNEL"
"""aten | onednn | measure (default): the kernel of generation's products, or timed per shape."""
LARGEST_ROWS = 512
"""Products with more rows than this stay on `linear` (MKL is at its best there; nothing is timed)."""
_choice: dict[tuple[int, int, int, bool], bool] = {}  # (rows bucket, k, n, bias) -> oneDNN is the faster


def _onednn_available() -> bool:
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    return op is not None and torch.backends.mkldnn.is_available()


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _bucket(rows: int) -> int:
    return 1 << max(0, rows - 1).bit_length()


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _measure(rows: int, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether oneDNN computes (rows, k) x weight.T faster than `linear` here, timed on `weight` itself (after a
    first call of each, which also checks that they agree: the best of two each, alternating, so that a slow spell
    of a shared machine hits both); False when oneDNN cannot serve it or disagrees."""
    x = torch.randn(rows, weight.shape[1], dtype=weight.dtype)
    try:
        ours, theirs = _onednn(x, weight, bias), torch.nn.functional.linear(x, weight, bias)
    except RuntimeError as e:  # a build or CPU oneDNN cannot serve
        log.debug("rft: oneDNN's inner product is unavailable (%s)", e)
        return False
    if not float((ours - theirs).abs().max()) <= 1e-4 * (float(theirs.abs().max()) or 1.0):
        return False
    aten = onednn = float("inf")
    for _ in range(2):
        aten = min(aten, _seconds(lambda: torch.nn.functional.linear(x, weight, bias)))
        onednn = min(onednn, _seconds(lambda: _onednn(x, weight, bias)))
    return onednn < 0.9 * aten


def use_onednn(rows: int, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether generation's product of `rows` rows with `weight` goes to oneDNN (see the module docstring)."""
    mode = os.environ.get(KERNEL_ENV, "measure")
    if mode == "aten" or rows > LARGEST_ROWS:
        return False
    if mode == "onednn":
        return True
    key = (_bucket(rows), weight.shape[1], weight.shape[0], bias is not None)
    if key not in _choice:
        from rft.runtime import measured_once

        label = f"decode kernel {key[0]}x{key[1]}x{key[2]}{' +bias' if key[3] else ''}: onednn faster"
        _choice[key] = measured_once(label, lambda: _measure(key[0], weight, bias), kinds=(bool,))
        log.debug("rft: generation's (%d x %d) x (%d x %d) products on %s", key[0], key[1], key[1], key[2],
                  "oneDNN" if _choice[key] else "MKL (torch.nn.functional.linear)")
    return _choice[key]


def _routable(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (type(module) is nn.Linear and isinstance(weight, torch.Tensor) and type(weight.data) is torch.Tensor
            and weight.dtype == torch.float32 and weight.device.type == "cpu")  # a DTensor's data is no Tensor


@contextlib.contextmanager
def fast_linears(model: nn.Module) -> Iterator[None]:
    """Within: `model`'s plain float32 CPU `nn.Linear` layers compute outside autograd on the faster kernel for
    their shape (`use_onednn`); with gradients, on another dtype or device, as before. Nothing changes where oneDNN
    is not in this build or `RFT_DECODE_KERNEL=aten`."""
    if os.environ.get(KERNEL_ENV, "measure") == "aten" or not _onednn_available():
        yield
        return
    layers = [m for m in model.modules() if _routable(m)]
    for layer in layers:
        layer.forward = _routed(layer)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def _routed(layer: nn.Linear):
    plain = nn.Linear.forward.__get__(layer)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if (torch.is_grad_enabled() or x.dtype != torch.float32 or x.device.type != "cpu"
                or torch.is_autocast_enabled("cpu")):  # autocast casts inside linear, not inside oneDNN's op
            return plain(x)
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows and use_onednn(rows, layer.weight, layer.bias):
            return _onednn(x, layer.weight, layer.bias)
        return plain(x)

    return forward
