"""Policy-gradient losses. Each registered loss maps ``PolicyLossInputs`` to ``PolicyLossOutputs``: it
builds an unreduced per-token loss matrix (B, R) and reduces it once with ``agg_loss``.

Dimension names: B rows (= prompts x n responses), R response tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.algorithms.aggregation import AggNorm, agg_loss
from rft.algorithms.utils import masked_mean
from rft.registry import Registry


@dataclass
class PolicyLossInputs:
    logprobs: torch.Tensor
    """(B, R) log-probs of the sampled tokens under the current policy (requires grad)."""
    old_logprobs: torch.Tensor
    """(B, R) log-probs under the policy that sampled the rollout."""
    advantages: torch.Tensor
    """(B, R) per-token advantages, 0 on masked tokens."""
    response_mask: torch.Tensor
    """(B, R) 0/1, 1 on response tokens that take part in the loss."""
    clip_ratio_low: float = 0.2
    """PPO lower clip: the ratio is clipped below at 1 - clip_ratio_low."""
    clip_ratio_high: float = 0.2
    """PPO upper clip: the ratio is clipped above at 1 + clip_ratio_high (DAPO's clip-higher when > low)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound (> 1): for A < 0 the per-token loss is capped at -A * clip_ratio_c."""
    loss_agg_mode: str = "token-mean"
    """One of ``LOSS_AGG_MODES``."""
    agg_norm: AggNorm | None = None
    """Normalisers of the whole mini-batch; None when this batch is the whole mini-batch."""


@dataclass
class PolicyLossOutputs:
    loss: torch.Tensor
    """Scalar, already aggregated with ``agg_loss(..., loss_agg_mode, agg_norm)``."""
    metrics: dict[str, float]
    """Detached python floats, masked token means over this micro-batch."""


PolicyLossFn = Callable[[PolicyLossInputs], PolicyLossOutputs]

POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")


def compute_policy_loss(name: str, inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """Look up the policy loss registered as ``name`` and apply it to ``inputs``."""
    return POLICY_LOSSES.get(name)(inputs)


@POLICY_LOSSES.register("vanilla")
def vanilla_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """Clipped-surrogate PPO loss (Schulman et al. 2017) with dual clip (Ye et al. 2020), as in verl.

    Per token, with log-ratio ``l = clamp(logp - old_logp, -20, 20)`` and ``rho = exp(l)``:
      pg1 = -A * rho
      pg2 = -A * clamp(rho, 1 - clip_ratio_low, 1 + clip_ratio_high)
      clip1 = max(pg1, pg2)                                   (the PPO pessimistic bound)
      pg3 = -A * clip_ratio_c
      loss = min(pg3, clip1) if A < 0 else clip1              (dual clip: caps the loss of A < 0 tokens)
    then aggregated with ``agg_loss(loss, mask, loss_agg_mode, agg_norm)``.
    Metrics (masked means over valid tokens of this micro-batch):
      pg_clipfrac = mean[pg2 > pg1], pg_clipfrac_lower = mean[(clip1 > pg3) & (A < 0)], ppo_kl = mean[-l].
    """
    if inputs.clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for the dual clip, got {inputs.clip_ratio_c}")
    mask = inputs.response_mask
    adv = inputs.advantages

    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)  # (B, R)
    ratio = torch.exp(log_ratio)  # (B, R)
    pg1 = -adv * ratio  # (B, R)
    pg2 = -adv * ratio.clamp(1.0 - inputs.clip_ratio_low, 1.0 + inputs.clip_ratio_high)  # (B, R)
    clip1 = torch.maximum(pg1, pg2)  # (B, R)
    pg3 = -adv * inputs.clip_ratio_c  # (B, R)
    clip2 = torch.minimum(pg3, clip1)  # (B, R)
    negative = adv < 0
    loss_mat = torch.where(negative, clip2, clip1)  # (B, R)

    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    with torch.no_grad():
        dtype = loss_mat.dtype
        # One device-to-host copy for all three metrics.
        values = torch.stack(
            [
                masked_mean((pg2 > pg1).to(dtype), mask),
                masked_mean(((clip1 > pg3) & negative).to(dtype), mask),
                masked_mean(-log_ratio, mask),
            ]
        ).tolist()
    metrics = dict(zip(("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"), values))
    return PolicyLossOutputs(loss=loss, metrics=metrics)
