"""The critic's loss: PPO's clipped value loss (Schulman et al. 2017, arXiv:1707.06347; verl's compute_value_loss)
and the explained variance of the values it was trained towards.

Dimension names: B rows, R response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rft.algorithms.aggregation import AggNorm, agg_loss


@dataclass
class ValueLossOutputs:
    loss: torch.Tensor
    """Scalar: this micro-batch's share of the mini-batch loss (see ``agg_loss``)."""
    clipfrac: torch.Tensor
    """Share of this micro-batch's valid tokens whose clipped term was the larger one (masked mean, no grad)."""


def value_loss(vpreds: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, response_mask: torch.Tensor,
               cliprange_value: float, loss_agg_mode: str, norm: AggNorm | None = None) -> ValueLossOutputs:
    """Clipped value loss, all (B, R) inputs:

      v_clip = clip(v, v_old - c, v_old + c)                 c = cliprange_value
      l_t    = max((v_t - G_t)^2, (v_clip_t - G_t)^2)        G = returns (the critic's targets)
      loss   = 0.5 * agg_loss(l, mask, loss_agg_mode, norm)

    The max keeps the larger error, so a prediction that moved more than c from the old value gets no gradient
    from the tokens where clipping would help it. With ``norm`` (the whole mini-batch's ``AggNorm``) the losses of
    a mini-batch's micro-batches sum to the mini-batch's loss, in value and gradient. Masked tokens are never read.
    """
    mask = response_mask.to(vpreds.dtype)
    old_values, returns = old_values.to(vpreds), returns.to(vpreds)
    vclipped = torch.clamp(vpreds, old_values - cliprange_value, old_values + cliprange_value)
    unclipped = (vpreds - returns).square()
    clipped = (vclipped - returns).square()
    loss = 0.5 * agg_loss(torch.maximum(unclipped, clipped), mask, loss_agg_mode, norm)
    with torch.no_grad():
        clipfrac = ((clipped > unclipped).to(mask.dtype) * mask).sum() / mask.sum().clamp(min=1.0)
    return ValueLossOutputs(loss=loss, clipfrac=clipfrac)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, response_mask: torch.Tensor) -> float:
    """1 - Var(G - V) / (Var(G) + 1e-5) over the valid tokens, unbiased variances (verl's critic/vf_explained_var):
    1 is a perfect critic, 0 one no better than the mean return. NaN with fewer than 2 valid tokens."""
    valid = response_mask.bool()
    g, v = returns[valid].double(), values[valid].double()
    if g.numel() < 2:
        return float("nan")
    return float(1.0 - (g - v).var() / (g.var() + 1e-5))
