"""Per-token KL estimators between the current policy p and a reference policy q.

From J. Schulman, "Approximating KL Divergence" (2020), with d = ref_logprobs - logprobs = log(q / p) on the
sampled token (samples drawn from p):
  k1 (``kl``):         logp - ref            unbiased, high variance, can be negative
  ``abs``:             |logp - ref|
  k2 (``mse``):        0.5 * (logp - ref)^2  biased, low variance
  k3 (``low_var_kl``): exp(d) - d - 1        unbiased, low variance, always >= 0
  ``<name>+``:         the value of ``<name>``, the gradient of k2 (straight-through): k1 and k3 are unbiased
                       estimates of KL's value but their gradients are not unbiased estimates of KL's gradient,
                       k2's is (verl's ``k3+`` etc.)
  ``full``:            the exact KL(p || q) = sum_v p_v (log p_v - log q_v) over the whole vocabulary, from the
                       logits of both policies (not an estimate; needs the reference's logits)
One signature for the family: ``KLInputs -> (B, R)``, unmasked; the caller masks and aggregates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.algorithms.utils import LOGIT_CHUNK_TOKENS, _chunks
from rft.registry import Registry


@dataclass
class KLInputs:
    logprobs: torch.Tensor
    """(B, R) log-probs of the sampled tokens under the current policy."""
    ref_logprobs: torch.Tensor | None
    """(B, R) log-probs of the same tokens under the reference; unused (may be None) for ``full``."""
    logits: torch.Tensor | None = None
    """(B, R, V) temperature-scaled logits of the current policy at those positions; ``full`` only."""
    ref_logits: torch.Tensor | None = None
    """(B, R, V) temperature-scaled logits of the reference; ``full`` only."""
    chunk_size: int | None = LOGIT_CHUNK_TOKENS
    """Token positions per chunk of the vocabulary-wide computation (``full``); None: all at once."""


KLEstimator = Callable[[KLInputs], torch.Tensor]

KL_ESTIMATORS: Registry[KLEstimator] = Registry("kl estimator")


def _log_ratio(inputs: KLInputs) -> torch.Tensor:
    if inputs.ref_logprobs is None:
        raise ValueError("this KL estimator needs the reference log-probs (KLInputs.ref_logprobs)")
    return inputs.logprobs - inputs.ref_logprobs


@KL_ESTIMATORS.register("kl", "k1")
def kl_k1(inputs: KLInputs) -> torch.Tensor:
    """k1: ``logp - ref``."""
    return _log_ratio(inputs)


@KL_ESTIMATORS.register("abs")
def kl_abs(inputs: KLInputs) -> torch.Tensor:
    """``|logp - ref|``."""
    return _log_ratio(inputs).abs()


@KL_ESTIMATORS.register("mse", "k2")
def kl_k2(inputs: KLInputs) -> torch.Tensor:
    """k2: ``0.5 * (logp - ref)^2``."""
    return 0.5 * _log_ratio(inputs).square()


@KL_ESTIMATORS.register("low_var_kl", "k3")
def kl_k3(inputs: KLInputs) -> torch.Tensor:
    """k3: ``d = clamp(ref - logp, -20, 20); clamp(exp(d) - d - 1, -10, 10)``.

    The first clamp keeps ``exp`` finite; the second bounds the penalty of a single token (as verl does).
    """
    d = (-_log_ratio(inputs)).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


def _straight_through(base: KLEstimator, name: str) -> KLEstimator:
    def estimator(inputs: KLInputs) -> torch.Tensor:
        value = base(inputs)
        k2 = kl_k2(inputs)
        return value.detach() + (k2 - k2.detach())

    estimator.__name__ = f"kl_{name.replace('+', '_plus')}"
    estimator.__doc__ = (f"``{name}``: forward value of ``{name[:-1]}``, gradient of k2 "
                         f"(``value.detach() + k2 - k2.detach()``).")
    return estimator


for _name in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"):
    KL_ESTIMATORS.register(f"{_name}+")(_straight_through(KL_ESTIMATORS.get(_name), f"{_name}+"))


class _FullKL(torch.autograd.Function):
    """KL(softmax(z) || softmax(zr)) per row of (N, V) logits, chunked over rows forward and backward.

    Saves only the two logit matrices (alive in the caller anyway) and the (N,) result; the softmaxes are
    recomputed chunk by chunk in the backward:
      dKL/dz_j  = p_j (log p_j - log q_j - KL)
      dKL/dzr_j = q_j - p_j
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ref_logits: torch.Tensor, chunk_size: int | None) -> torch.Tensor:
        out = logits.new_empty(logits.shape[0])
        for start, end in _chunks(logits.shape[0], chunk_size):
            logp = torch.log_softmax(logits[start:end], dim=-1)
            logq = torch.log_softmax(ref_logits[start:end].to(logp.dtype), dim=-1)
            out[start:end] = (logp.exp() * (logp - logq)).sum(-1)
        ctx.save_for_backward(logits, ref_logits, out)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, ref_logits, kl = ctx.saved_tensors
        want_p, want_q = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_p = torch.empty_like(logits) if want_p else None
        grad_q = torch.empty_like(ref_logits) if want_q else None
        for start, end in _chunks(logits.shape[0], ctx.chunk_size):
            g = grad_out[start:end].unsqueeze(-1)
            logp = torch.log_softmax(logits[start:end], dim=-1)
            logq = torch.log_softmax(ref_logits[start:end].to(logp.dtype), dim=-1)
            p = logp.exp()
            if want_p:
                grad_p[start:end] = g * p * (logp - logq - kl[start:end].unsqueeze(-1))
            if want_q:
                grad_q[start:end] = (g * (logq.exp() - p)).to(grad_q.dtype)
        return grad_p, grad_q, None


def full_kl_from_logits(
    logits: torch.Tensor, ref_logits: torch.Tensor, chunk_size: int | None = LOGIT_CHUNK_TOKENS
) -> torch.Tensor:
    """Exact ``KL(p || q) = sum_v p_v (log p_v - log q_v)`` with p = softmax(logits), q = softmax(ref_logits).

    (..., V), (..., V) -> (...). Computed ``chunk_size`` token positions at a time (None: all at once) in the
    forward and in the backward (a custom autograd function), so the memory on top of the two logit tensors is
    (chunk_size, V) temporaries; value and gradient do not depend on ``chunk_size``. Differentiable in both
    arguments (the reference normally carries no gradient).
    """
    if logits.shape != ref_logits.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and ref_logits {tuple(ref_logits.shape)} differ in shape")
    V = logits.shape[-1]
    out = _FullKL.apply(logits.reshape(-1, V), ref_logits.reshape(-1, V), chunk_size)
    return out.reshape(logits.shape[:-1])


@KL_ESTIMATORS.register("full")
def kl_full(inputs: KLInputs) -> torch.Tensor:
    """``full``: exact per-position KL(p || q) over the vocabulary from both policies' logits (B, R, V).

    verl lists ``full`` but raises NotImplementedError; rft computes it (chunked, see ``full_kl_from_logits``).
    Raises ValueError when the logits are missing.
    """
    if inputs.logits is None or inputs.ref_logits is None:
        raise ValueError(
            "kl 'full' is computed from the logits of the policy and of the reference: pass KLInputs.logits "
            "and KLInputs.ref_logits (B, R, V)"
        )
    return full_kl_from_logits(inputs.logits, inputs.ref_logits, inputs.chunk_size)


kl_full.needs_logits = True  # type: ignore[attr-defined]


def kl_needs_logits(kind: str) -> bool:
    """Whether the estimator registered as ``kind`` is computed from logits (the caller must run the reference
    on the same positions) rather than from the sampled tokens' log-probs."""
    return bool(getattr(KL_ESTIMATORS.get(kind), "needs_logits", False))


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    kind: str,
    *,
    logits: torch.Tensor | None = None,
    ref_logits: torch.Tensor | None = None,
    chunk_size: int | None = LOGIT_CHUNK_TOKENS,
) -> torch.Tensor:
    """Per-token KL estimate (B, R) by registered name: one of ``KL_ESTIMATORS.names()``."""
    return KL_ESTIMATORS.get(kind)(KLInputs(logprobs, ref_logprobs, logits, ref_logits, chunk_size))
