"""Reduce a per-token loss matrix (B, R) to a scalar: one named setting, implemented once (verl's agg_loss).

Every mode is a sum over rows divided by a constant of the whole mini-batch, so the loss of a micro-batch is
its exact share: summing ``agg_loss`` over the micro-batches of a mini-batch (each given the same global
``AggNorm``) equals ``agg_loss`` of the whole mini-batch, in value and in gradient. That is what makes
gradient accumulation and data parallelism (gradients summed over ranks) equal to one big batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "seq-mean-token-sum-maxlen",
)

TRL_LOSS_TYPES: dict[str, str] = {
    "grpo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dapo": "token-mean",
}
"""TRL GRPOTrainer's ``loss_type`` -> the rft ``loss_agg_mode`` with the same normaliser (see ``agg_loss``)."""


@dataclass(frozen=True)
class AggNorm:
    """Normalisers of the whole mini-batch, shared by all of its micro-batches."""

    num_tokens: float
    """Valid response tokens in the whole mini-batch (all micro-batches, all ranks)."""
    num_seqs: float
    """Rows in the whole mini-batch (all micro-batches, all ranks), including rows with no valid token."""
    max_len: int
    """The seq-mean-token-sum-norm constant: ``loss_scale_factor`` when set, else R, the configured maximum
    response length (verl's rule)."""


def agg_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, norm: AggNorm | None = None
) -> torch.Tensor:
    """This micro-batch's contribution to the mini-batch loss; ``loss_mat`` and ``mask`` are (B, R).

    With l the per-token loss and m the 0/1 mask (verl 0.9.1's ``agg_loss`` with its global-batch info):
      token-mean:              sum_{i,t} l*m / num_tokens
      token-sum:               sum_{i,t} l*m                     (no normaliser)
      seq-mean-token-sum:      sum_i (sum_t l*m) / num_seqs
      seq-mean-token-mean:     sum_i (sum_t l*m / max(1, sum_t m)) / num_seqs
      seq-mean-token-sum-norm: sum_{i,t} l*m / (num_seqs * max_len)   (Dr. GRPO, Liu et al. 2025,
                               arXiv:2503.20783: each sequence's token sum over a constant, averaged over the
                               sequences; verl >= 0.7; TRL's dr_grpo with max_len = max_completion_length)
      seq-mean-token-sum-maxlen: the same as seq-mean-token-sum-norm (rft's earlier name for it)
    ``norm=None`` takes the normalisers from this batch alone (it is the whole mini-batch): num_tokens =
    sum(m) (at least 1), num_seqs = B, max_len = R = ``loss_mat.shape[-1]``. num_seqs counts every row, those
    without a valid token too (verl's global_batch_size, the mini-batch's rows; their sums are 0).
    Masked-out entries of ``loss_mat`` are never read. Raises ValueError on an unknown ``mode``.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid: {', '.join(LOSS_AGG_MODES)}")
    valid = mask.bool()
    masked = torch.where(valid, loss_mat, torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device))

    if mode == "token-mean":
        num_tokens = valid.sum().to(loss_mat.dtype).clamp(min=1.0) if norm is None else norm.num_tokens
        return masked.sum() / num_tokens
    if mode == "token-sum":
        return masked.sum()
    num_seqs = loss_mat.shape[0] if norm is None else norm.num_seqs
    if mode in ("seq-mean-token-sum-norm", "seq-mean-token-sum-maxlen"):
        max_len = loss_mat.shape[-1] if norm is None else norm.max_len
        return masked.sum() / (num_seqs * max_len)
    seq_losses = masked.sum(dim=-1)  # (B,)
    if mode == "seq-mean-token-mean":
        seq_losses = seq_losses / valid.sum(dim=-1).to(loss_mat.dtype).clamp(min=1.0)
    return seq_losses.sum() / num_seqs


def trl_loss_agg_mode(loss_type: str) -> str:
    """The ``loss_agg_mode`` that reproduces TRL GRPOTrainer's ``loss_type`` normaliser.

      grpo    -> seq-mean-token-mean        (token mean per sequence, then mean over sequences)
      bnpo    -> token-mean                 (tokens of the local batch; one process: the mini-batch)
      dr_grpo -> seq-mean-token-sum-norm    (sum / (num_seqs * max_completion_length))
      dapo    -> token-mean                 (tokens of the global batch)
    TRL normalises bnpo / grpo / dr_grpo per micro-batch (then divides by gradient_accumulation_steps); rft
    uses the mini-batch's normaliser, equal to TRL's when every micro-batch has the same normaliser (always
    for grpo and dr_grpo, whose normalisers count rows; for bnpo only without gradient accumulation).
    Raises ValueError for another name.
    """
    try:
        return TRL_LOSS_TYPES[loss_type]
    except KeyError:
        raise ValueError(f"unknown TRL loss_type {loss_type!r}; valid: {', '.join(TRL_LOSS_TYPES)}") from None
