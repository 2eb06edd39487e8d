"""Reduce a per-token loss matrix (B, R) to a scalar: one named setting, implemented once (verl's agg_loss).

Every mode is a sum over rows divided by a constant of the whole mini-batch, so the loss of a micro-batch is
its exact share: summing ``agg_loss`` over the micro-batches of a mini-batch (each given the same global
``AggNorm``) equals ``agg_loss`` of the whole mini-batch, in value and in gradient. That is what makes
gradient accumulation and data parallelism (gradients summed over ranks) equal to one big batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class AggNorm:
    """Normalisers of the whole mini-batch, shared by all of its micro-batches."""

    num_tokens: float
    """Valid response tokens in the whole mini-batch (all micro-batches, all ranks)."""
    num_seqs: float
    """Rows in the whole mini-batch (all micro-batches, all ranks), including rows with no valid token."""
    max_len: int
    """R, the configured maximum response length."""


def agg_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, norm: AggNorm | None = None
) -> torch.Tensor:
    """This micro-batch's contribution to the mini-batch loss; ``loss_mat`` and ``mask`` are (B, R).

    With l the per-token loss and m the 0/1 mask:
      token-mean:              sum_{i,t} l*m / num_tokens
      seq-mean-token-sum:      sum_i (sum_t l*m) / num_seqs
      seq-mean-token-mean:     sum_i (sum_t l*m / max(1, sum_t m)) / num_seqs
      seq-mean-token-sum-norm: sum_{i,t} l*m / max_len   (Dr. GRPO, Liu et al. 2025: a constant normaliser,
                               so no length bias; divided by max_len only, NOT by the number of sequences)
    ``norm=None`` takes the normalisers from this batch alone (it is the whole mini-batch): num_tokens =
    sum(m) (at least 1), num_seqs = B, max_len = R = ``loss_mat.shape[-1]``.
    Masked-out entries of ``loss_mat`` are never read. Raises ValueError on an unknown ``mode``.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid: {', '.join(LOSS_AGG_MODES)}")
    valid = mask.bool()
    masked = torch.where(valid, loss_mat, torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device))

    if mode == "token-mean":
        num_tokens = valid.sum().to(loss_mat.dtype).clamp(min=1.0) if norm is None else norm.num_tokens
        return masked.sum() / num_tokens
    if mode == "seq-mean-token-sum-norm":
        max_len = loss_mat.shape[-1] if norm is None else norm.max_len
        return masked.sum() / max_len

    num_seqs = loss_mat.shape[0] if norm is None else norm.num_seqs
    seq_losses = masked.sum(dim=-1)  # (B,)
    if mode == "seq-mean-token-mean":
        seq_losses = seq_losses / valid.sum(dim=-1).to(loss_mat.dtype).clamp(min=1.0)
    return seq_losses.sum() / num_seqs
