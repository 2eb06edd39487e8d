"""Direct preference optimisation (`rft dpo`, and `algorithm: dpo` stages; Trinity-RFT's algorithm_type dpo).

The SFT trainer's loop with another step: its dataset machinery (preference pairs instead of SFT rows), the
optimizer / scheduler builders, the update guard, checkpoints with the exact resume, the monitor and the export
are `SFTTrainer`'s. The reference policy is the starting model: a frozen copy with full fine-tuning, the model with
its LoRA adapter disabled with LoRA (`reference_of`); its log-probs are computed on each micro-batch, without
gradient. The loss (`rft.algorithms.preference`) is the mean over the step's pairs, plus Trinity-RFT's optional KL
and entropy terms aggregated over the step's response tokens; the micro-batch size never changes the gradient.

With a vision-language model, pairs may hold images (`rft.data.preference`; docs/multimodal.md): both rows of a pair
carry the prompt's images, so the policy's and the reference's passes (`forward_logprobs`) get the same pixel
inputs; the vision tower is frozen as for SFT (model.freeze_vision_tower).

Metrics: train/loss, rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins (TRL's names),
logps/chosen, logps/rejected (mean sequence log-probs), actor/kl_loss and actor/entropy when those terms are on;
train/preference_loss (the loss without those terms); validation: the same names under val/ (val/loss,
val/rewards/accuracies, ...) over every pair of data.val_files (at most data.val_max_samples of them: the first ones).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from rft.algorithms import (
    AggNorm,
    PreferenceLossInputs,
    agg_loss,
    compute_preference_loss,
    kl_penalty,
    preference_loss_spec,
    preference_metrics,
    sequence_logps,
)
from rft.batch import Batch
from rft.data.preference import PreferenceDataset
from rft.distributed import SINGLE, Dist, padded_shard
from rft.models.load import frozen_copy, is_peft
from rft.models.vision import vision_for
from rft.monitor import TOKENS
from rft.trainer.sft import SFTTrainer
from rft.workers.policy import forward_logprobs, reference_of


class DPOTrainer(SFTTrainer):
    name = "dpo"
    val_unit, val_metrics = "pairs", "val/loss and val/rewards/*"

    def __init__(self, cfg, dist: Dist = SINGLE):
        super().__init__(cfg, dist)
        self.spec = preference_loss_spec(cfg.algorithm.loss_type)

    def reference_model(self, model):
        """The starting weights, before a resume loads the trained ones (fit): a frozen copy with full fine-tuning,
        none with LoRA (the model with its adapter disabled, `reference_of`)."""
        return None if is_peft(model) else frozen_copy(model)

    def dataset(self, files):
        return PreferenceDataset(files, self.tokenizer, self.cfg.data,
                                 vision=vision_for(self.cfg.model.partial_pretrain, "model"))

    def _pair_losses(self, mb: Batch, norm: AggNorm, n_pairs: float,
                     weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """This micro-batch's share of the step's loss (its pairs' losses over the step's `n_pairs` on every rank,
        its tokens' KL / entropy terms with the step's `norm`) and its share of the metrics; `weights` (n,) count
        the padding pairs of a sharded validation as nothing."""
        algo = self.cfg.algorithm
        with torch.no_grad(), reference_of(self.model, self.ref_model) as ref:
            ref_logprobs, _ = forward_logprobs(ref, mb, temperature=1.0)  # (2n, R)
        logprobs, entropy = forward_logprobs(self.model, mb, temperature=1.0, with_entropy=algo.entropy_coeff != 0,
                                             entropy_grad=True)
        mask = mb.loss_mask.to(logprobs.device)
        seq = sequence_logps(logprobs, mask, self.spec.length_normalized)  # (2n,)
        ref_seq = sequence_logps(ref_logprobs.to(logprobs.device), mask, self.spec.length_normalized)
        out = compute_preference_loss(algo.loss_type, PreferenceLossInputs(
            chosen_logps=seq[0::2], rejected_logps=seq[1::2], ref_chosen_logps=ref_seq[0::2],
            ref_rejected_logps=ref_seq[1::2], beta=algo.beta, label_smoothing=algo.label_smoothing))
        w = torch.ones_like(out.losses) if weights is None else weights.to(out.losses.device)  # (n,)
        loss = (out.losses * w).sum() / n_pairs
        metrics = {k: float((v * w).sum()) / n_pairs for k, v in preference_metrics(out).items()}
        metrics["logps/chosen"] = float((seq[0::2].detach() * w).sum()) / n_pairs
        metrics["logps/rejected"] = float((seq[1::2].detach() * w).sum()) / n_pairs
        metrics["train/preference_loss"] = float(loss.detach())
        if algo.use_kl_loss:
            kl = agg_loss(kl_penalty(logprobs, ref_logprobs.to(logprobs.device), algo.kl_loss_type), mask,
                          algo.loss_agg_mode, norm)
            loss = loss + algo.kl_loss_coef * kl
            metrics["actor/kl_loss"] = float(kl.detach())
        if algo.entropy_coeff:
            entropy_term = agg_loss(entropy, mask, algo.loss_agg_mode, norm)
            loss = loss - algo.entropy_coeff * entropy_term
            metrics["actor/entropy"] = float(entropy_term.detach())
        metrics["train/loss"] = float(loss.detach())
        return loss, metrics

    def _norm(self, batch: Batch, n_pairs: float) -> AggNorm:
        """The step's normalisers of the KL / entropy terms: the loss tokens of every rank's rows, its `n_pairs`
        pairs' rows and the widest response of any rank's."""
        return AggNorm(num_tokens=float(self.dist.sum(batch.loss_mask.sum().double())), num_seqs=2.0 * n_pairs,
                       max_len=self.dist.max_int(batch.response_ids.shape[1]))

    def _sums(self, passes) -> dict[str, float]:
        """The metrics of `passes` ((loss, metrics) per micro-batch, after each one's backward where it trains)
        summed, then summed over the ranks."""
        sums: dict[str, float] = defaultdict(float)
        for _, metrics in passes:
            for k, v in metrics.items():
                sums[k] += v
        return self.dist.sum_metrics(sums)

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimizer step over this rank's pairs of the step (chosen rows even, rejected rows odd), micro-batch
        by micro-batch (data.micro_batch_size_per_gpu pairs), each pair's loss over the step's pairs on every rank
        (so neither the micro-batch size nor the number of processes changes the gradient)."""
        self.model.train()
        n_pairs = float(self.dist.sum(torch.tensor(len(batch) // 2, dtype=torch.float64)))
        norm = self._norm(batch, n_pairs)
        self.optimizer.zero_grad(set_to_none=True)

        def passes():
            for mb in batch.split(2 * self.cfg.data.micro_batch_size_per_gpu):
                loss, metrics = self._pair_losses(mb, norm, n_pairs)
                self._backward(loss)
                yield loss, metrics

        sums = self._sums(passes())
        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm, why = self._optimizer_step([sums["train/loss"]])
        return {**sums, "train/grad_norm": grad_norm, "train/lr": lr, "train/pairs": n_pairs,
                "train/tokens": float(self.dist.sum(batch.loss_mask.sum().double())), TOKENS: self._all_tokens(batch),
                "train/skipped_updates": float(why is not None)}

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """val/loss and val/rewards/* (and val/logps/*) over every held-out pair (data.val_max_samples of them where
        set; each rank its share, padded to equal passes), without gradient."""
        self.model.eval()
        indices, keep = padded_shard(len(self.val_set), self.dist.rank, self.dist.world_size)
        indices = indices or [0]
        real = torch.tensor([float(i < keep) for i in range(len(indices))])  # (n,) pairs
        batch = self.val_set.batch(indices, self.tokenizer.pad_token_id)
        batch.loss_mask = batch.loss_mask * real.repeat_interleave(2)[:, None]  # the padding pairs count for nothing
        n_pairs = float(len(self.val_set))
        norm = self._norm(batch, n_pairs)
        size = self.cfg.data.micro_batch_size_per_gpu
        sums = self._sums(self._pair_losses(mb, norm, n_pairs, real[i * size:(i + 1) * size])
                          for i, mb in enumerate(batch.split(2 * size)))
        self.model.train()
        return {f"val/{k.split('/', 1)[1] if k.startswith('train/') else k}": v for k, v in sums.items()}
