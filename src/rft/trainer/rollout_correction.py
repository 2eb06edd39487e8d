"""The trainer's rollout-correction step (verl's ``algorithm.rollout_correction``), one call after the old
log-probs: ``apply_rollout_correction``. The math is ``rft.algorithms.rollout_correction``'s; this module decides
what a batch gets from a config section and stores it on the ``Batch``:

* bypass mode: the rollout's log-probs become the old ones (no old-policy forward pass); the policy loss
  (``bypass_mode``) computes the weights and the rejection itself, against the current policy;
* decoupled mode (the old log-probs were computed): IS weights into ``Batch.rollout_is_weights`` (the policy loss
  multiplies them in), the tokens rejection sampling keeps into ``Batch.loss_mask`` (the losses and their
  normalisers run on it; ``response_mask`` stays the attention mask and the advantages' mask), and verl's
  ``rollout_corr/...`` and ``training/rollout_probs_diff_...`` metrics.
"""

from __future__ import annotations

import torch

from rft.algorithms.rollout_correction import compute_rollout_correction, rollout_probs_diff_metrics
from rft.batch import Batch
from rft.distributed import SINGLE, Dist


def corrects_rollout(section) -> bool:
    """Whether ``section`` (``algorithm.rollout_correction``) asks for IS weights or rejection sampling computed
    against recomputed old log-probs (decoupled mode), so the old log-probs must be computed."""
    return not section.bypass_mode and (section.rollout_is is not None or section.rollout_rs is not None)


def apply_rollout_correction(batch: Batch, section, dist: Dist = SINGLE) -> dict[str, float]:
    """Rollout correction of ``batch`` per ``section`` (``algorithm.rollout_correction``); returns its metrics.

    Bypass mode: ``old_logprobs := rollout_logprobs``, nothing else. Otherwise, when the batch has both old and
    rollout log-probs: the metrics, and (``rollout_is``) ``batch.rollout_is_weights``, (``rollout_rs``)
    ``batch.loss_mask = response_mask * keep``. A batch without old log-probs (one optimizer step per batch and no
    correction asked: the update uses the detached current log-probs) is left alone. With several processes the
    statistics span every rank's rows (batch normalisation, metrics) and each rank keeps its own.
    """
    if section.bypass_mode:
        if batch.rollout_logprobs is None:
            raise ValueError("algorithm.rollout_correction.bypass_mode needs the rollout's log-probs "
                             "(Batch.rollout_logprobs), which this batch does not have")
        batch.old_logprobs = batch.rollout_logprobs
        return {}
    if batch.old_logprobs is None or batch.rollout_logprobs is None:
        return {}
    from rft.workers.minibatch import loss_tokens

    mask = loss_tokens(batch).float()  # the policy's tokens (a tool turn's have no rollout log-prob)
    old, rollout, all_mask = (dist.gather_rows(x) for x in (batch.old_logprobs.float(),
                                                            batch.rollout_logprobs.float(), mask))
    metrics = rollout_probs_diff_metrics(old, rollout, all_mask)
    if not all_mask.bool().any():
        return metrics
    corr = compute_rollout_correction(old, rollout, all_mask, section.rollout_is, section.rollout_is_threshold,
                                      section.rollout_is_batch_normalize, section.rollout_rs,
                                      section.rollout_rs_threshold)
    lo = sum(dist.gather_sizes(len(batch))[: dist.rank]) if dist.enabled else 0
    mine = slice(lo, lo + len(batch))
    if corr.weights is not None:
        batch.rollout_is_weights = corr.weights[mine].to(torch.float32)
    if section.rollout_rs is not None:
        batch.loss_mask = loss_tokens(batch) * corr.keep[mine].to(batch.response_mask.dtype)
    return {**metrics, **corr.metrics}
