"""Per-token KL estimators between the current policy and a reference policy.

From J. Schulman, "Approximating KL Divergence" (2020), with d = ref_logprobs - logprobs = log(p_ref / p),
samples drawn from the current policy p:
  k1 (``kl``):         logp - ref            unbiased, high variance, can be negative
  ``abs``:             |logp - ref|
  k2 (``mse``):        0.5 * (logp - ref)^2  biased, low variance
  k3 (``low_var_kl``): exp(d) - d - 1        unbiased, low variance, always >= 0
Every estimator maps (B, R), (B, R) -> (B, R), unmasked; the caller masks and aggregates.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rft.registry import Registry

KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

KL_ESTIMATORS: Registry[KLEstimator] = Registry("kl estimator")


@KL_ESTIMATORS.register("kl", "k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1: ``logp - ref``."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("abs")
def kl_abs(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """``|logp - ref|``."""
    return (logprobs - ref_logprobs).abs()


@KL_ESTIMATORS.register("mse", "k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2: ``0.5 * (logp - ref)^2``."""
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_ESTIMATORS.register("low_var_kl", "k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3: ``d = clamp(ref - logp, -20, 20); clamp(exp(d) - d - 1, -10, 10)``.

    The first clamp keeps ``exp`` finite; the second bounds the penalty of a single token (as verl does).
    """
    d = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate (B, R) by registered name: one of ``KL_ESTIMATORS.names()``."""
    return KL_ESTIMATORS.get(kind)(logprobs, ref_logprobs)
