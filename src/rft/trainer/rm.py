"""Reward-model training (`rft rm`): a sequence classifier with one label trained on preference pairs with the
Bradley-Terry loss (TRL's RewardTrainer, OpenRLHF's RewardModelTrainer).

The model is `AutoModelForSequenceClassification` (num_labels=1) over the backbone of model.partial_pretrain: its
score r(x, y) is the head on the last hidden state of the last token of prompt + response (`rft.models.load.
load_reward_backbone`: transformers reads the last token that is not the pad, the same token the reward-model scorer
of `rft train` reads, `rft.rewards.model`). The loss of a step over its N pairs (Ouyang et al. 2022; TRL's margin,
Touvron et al. 2023; TRL's centring, Eisenstein et al. 2023):

    L = mean_i -log sigmoid(r(x_i, y_chosen) - r(x_i, y_rejected) - m_i) + c * mean_i (r_chosen + r_rejected)^2

with m_i the pair's data.margin_key value (0 without) and c algorithm.center_rewards_coefficient (0 when null).
The pairs are the ones rft dpo reads (`rft.data.preference`), and the loop is `SFTTrainer`'s: the row sampler,
optimizer and schedule, the update guard, checkpoints with their exact resume, several processes (FSDP2 / FSDP1:
every normaliser is the step's global pair count, so the gradient summed over ranks is the one-process gradient),
and the export: `model/` is a folder `reward_model.model.path` loads as it is (LoRA merged, the head trained in
full as peft's modules_to_save).

Metrics (TRL's names where it has them): train/loss, train/accuracy (pairs with r_chosen > r_rejected), train/margin
(mean r_chosen - r_rejected), train/rewards/chosen, train/rewards/rejected; validation: val/loss, val/accuracy,
val/margin, val/rewards/* over every pair of data.val_files (at most data.val_max_samples of them: the first ones).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rft.data.dataset import DataError
from rft.data.preference import PairSequences, PreferenceDataset
from rft.distributed import padded_shard
from rft.models.load import load_trainable_model
from rft.models.precision import autocast
from rft.monitor import TOKENS
from rft.trainer.sft import SFTTrainer


def bradley_terry_terms(chosen: torch.Tensor, rejected: torch.Tensor, margins: torch.Tensor,
                        center: float | None) -> torch.Tensor:
    """(N,) per-pair losses: -log sigmoid(r_c - r_r - m) (+ center * (r_c + r_r)^2, TRL's center_rewards term)."""
    losses = -F.logsigmoid(chosen - rejected - margins)
    if center:
        losses = losses + center * (chosen + rejected) ** 2
    return losses


class RMTrainer(SFTTrainer):
    name = "rm"
    val_unit, val_metrics = "pairs", "val/accuracy and val/loss"

    def dataset(self, files):
        """The pairs of `files`; one whose response ends with the pad token is refused before the model loads:
        transformers' classifiers read the last token that is not the pad, which would be another token there."""
        pairs = PreferenceDataset(files, self.tokenizer, self.cfg.data)
        pad = self.tokenizer.pad_token_id
        if any(ids and ids[-1] == pad for x in pairs.examples for ids in (x.chosen_ids, x.rejected_ids)):
            raise DataError(f"{files}: a response ends with the tokenizer's pad token {self.tokenizer.pad_token!r} "
                            f"(id {pad}), before which transformers' sequence classifiers read the score; give "
                            "model.partial_pretrain's tokenizer a pad token of its own (tokenizer_config.json)")
        return pairs

    def load_model(self, device: torch.device, tokenizer=None):
        """The one-label sequence classifier over model.partial_pretrain's backbone (LoRA as model.lora_rank asks,
        the score head trained in full); its pad_token_id is always the run's tokenizer's."""
        m = self.cfg.model
        return load_trainable_model(m.partial_pretrain, m, self.dtype, device, key="model",
                                    tokenizer=self.tokenizer, reward_head=True)

    def _scores(self, pairs: PairSequences) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen, rejected) scores, (n,) each, float32, with gradients if enabled."""
        device = self.device
        with autocast(self.model):
            out = self.model(input_ids=pairs.input_ids.to(device), attention_mask=pairs.attention_mask.to(device),
                             use_cache=False).logits  # (2n, 1)
        scores = out[:, 0].float()
        return scores[0::2], scores[1::2]

    def _pair_sums(self, pairs: PairSequences, n_pairs: float, weights: torch.Tensor | None = None):
        """This micro-batch's share of the loss (its pairs' losses over the step's `n_pairs`) and the sums of its
        metrics; `weights` (n,) count padding pairs of a sharded validation as nothing."""
        chosen, rejected = self._scores(pairs)
        losses = bradley_terry_terms(chosen, rejected, pairs.margins.to(chosen.device),
                                     self.cfg.algorithm.center_rewards_coefficient)
        w = torch.ones_like(losses) if weights is None else weights.to(losses.device)
        loss = (losses * w).sum() / n_pairs
        with torch.no_grad():
            sums = torch.stack([(losses * w).sum(), ((chosen > rejected).float() * w).sum(),
                                ((chosen - rejected) * w).sum(), (chosen * w).sum(), (rejected * w).sum()])
        return loss, sums.double().cpu()

    @staticmethod
    def _metrics(prefix: str, sums: torch.Tensor, n_pairs: float) -> dict[str, float]:
        names = ("loss", "accuracy", "margin", "rewards/chosen", "rewards/rejected")
        return {f"{prefix}/{name}": float(v) / max(n_pairs, 1.0) for name, v in zip(names, sums)}

    def train_step(self, batch: PairSequences) -> dict[str, float]:
        """One optimizer step over this rank's pairs of the step, micro-batch by micro-batch
        (data.micro_batch_size_per_gpu pairs), each pair's loss over the step's pairs on every rank."""
        self.model.train()
        n_pairs = float(self.dist.sum(torch.tensor(float(len(batch)), dtype=torch.float64)))
        self.optimizer.zero_grad(set_to_none=True)
        sums = torch.zeros(5, dtype=torch.float64)
        for mb in batch.split(self.cfg.data.micro_batch_size_per_gpu):
            loss, mb_sums = self._pair_sums(mb, n_pairs)
            (loss * self.loss_scale if self.loss_scale != 1.0 else loss).backward()
            sums += mb_sums
        sums = self.dist.sum(sums)
        metrics = self._metrics("train", sums, n_pairs)
        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm, why = self.guard.step(self.cfg.optim.clip_grad, self.model if self.dist.enabled else None,
                                         losses=[metrics["train/loss"]])
        self.scheduler.step()
        tokens = float(self.dist.sum(batch.attention_mask.sum().double()))
        return {**metrics, "train/grad_norm": grad_norm, "train/lr": lr, "train/pairs": n_pairs,
                "train/tokens": tokens, TOKENS: tokens, "train/skipped_updates": float(why is not None)}

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """val/loss, val/accuracy, val/margin and val/rewards/* over every held-out pair (data.val_max_samples of
        them where set; each rank its share, padded to equal passes)."""
        self.model.eval()
        size = self.cfg.data.micro_batch_size_per_gpu
        indices, keep = padded_shard(len(self.val_set), self.dist.rank, self.dist.world_size)
        sums = torch.zeros(5, dtype=torch.float64)
        for start in range(0, max(len(indices), 1), size):
            chunk = indices[start:start + size] or [0]
            real = torch.tensor([float(start + i < keep) for i in range(len(chunk))])
            _, mb_sums = self._pair_sums(self.val_set.sequences(chunk, self.tokenizer.pad_token_id), 1.0, real)
            sums += mb_sums
        self.model.train()
        return self._metrics("val", self.dist.sum(sums), float(len(self.val_set)))

    def next_batch(self, rows: list[int]) -> PairSequences:
        return self.train_set.sequences(rows, self.tokenizer.pad_token_id)
