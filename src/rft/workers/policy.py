"""The policy worker: log-probs and PPO-style updates with mini- and micro-batches.

It does not know which algorithm runs: it gets a Batch with advantages and the names of a policy loss, a KL
estimator and an aggregation mode. Mini-batches are counted in prompts (global), micro-batches in rows (per process);
each micro-batch's loss is aggregated with the whole mini-batch's normaliser, so the micro-batch size changes the
memory used, never the gradient.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from rft.algorithms import (
    AggNorm,
    PolicyLossInputs,
    agg_loss,
    compute_policy_loss,
    entropy_from_logits,
    kl_penalty,
    logprobs_from_logits,
)
from rft.batch import Batch


def forward_logprobs(
    model: nn.Module, batch: Batch, temperature: float, with_entropy: bool = False, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, R) of the response tokens under softmax(logits / temperature), and their entropy (B, R).

    Columns that are padding in every row are trimmed first, and the LM head runs only on the positions that
    predict response tokens (`logits_to_keep`).
    """
    P, R = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    p_len = int(batch.prompt_mask.sum(-1).max())
    r_len = max(1, int(batch.response_mask.sum(-1).max()))
    device = next(model.parameters()).device
    ids = torch.cat([batch.prompt_ids[:, P - p_len:], batch.response_ids[:, :r_len]], dim=1).to(device)
    attn = torch.cat([batch.prompt_mask[:, P - p_len:], batch.response_mask[:, :r_len]], dim=1).to(device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False,
                   logits_to_keep=r_len + 1).logits[:, :-1].float()  # (B, r_len, V)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logprobs = logprobs_from_logits(logits, ids[:, p_len:])
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    pad = (0, R - r_len)
    return (torch.nn.functional.pad(logprobs, pad),
            torch.nn.functional.pad(entropy, pad) if entropy is not None else None)


@torch.no_grad()
def compute_logprobs(model: nn.Module, batch: Batch, temperature: float, micro_rows: int | None) -> torch.Tensor:
    """(B, R) log-probs without gradients, `micro_rows` rows per forward pass."""
    was_training = model.training
    model.eval()
    parts = [forward_logprobs(model, mb, temperature)[0].cpu() for mb in batch.split(micro_rows or len(batch))]
    model.train(was_training)
    return torch.cat(parts) * batch.response_mask


def build_optimizer(params: Iterable[nn.Parameter], optim_cfg) -> torch.optim.Optimizer:
    """AdamW over `params` from a config with lr, betas, eps and weight_decay."""
    return torch.optim.AdamW(
        list(params), lr=optim_cfg.lr, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps,
        weight_decay=optim_cfg.weight_decay,
    )


def build_scheduler(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int,
                    num_cycles: float = 0.5, min_lr_ratio: float = 0.0):
    """transformers' schedulers after a linear warmup: constant, cosine (down to min_lr_ratio * lr), or wsd
    (warmup-stable-decay: stable until the last 10% of the post-warmup steps, then a cosine decay)."""
    from transformers import (
        get_constant_schedule_with_warmup,
        get_cosine_with_min_lr_schedule_with_warmup,
        get_wsd_schedule,
    )

    if kind == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup_steps)
    if kind == "cosine":
        return get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, warmup_steps, total_steps, num_cycles=num_cycles, min_lr_rate=min_lr_ratio)
    if kind == "wsd":
        decay = max(1, int(0.1 * (total_steps - warmup_steps)))
        return get_wsd_schedule(optimizer, warmup_steps, decay, num_training_steps=total_steps,
                                min_lr_ratio=min_lr_ratio, num_cycles=num_cycles)
    raise ValueError(f"unknown lr schedule {kind!r}; valid: constant, cosine, wsd")


def clipped_step(optimizer: torch.optim.Optimizer, params: list[nn.Parameter], grad_clip: float) -> tuple[float, bool]:
    """Clip the global gradient norm to `grad_clip` (<= 0: no clipping), then step. A non-finite norm skips the
    step and drops the gradients rather than write NaNs into the weights. Returns (norm before clipping, stepped)."""
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf")))
    if math.isfinite(grad_norm):
        optimizer.step()
        return grad_norm, True
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, False


@dataclass
class UpdateSettings:
    """What one update needs to know beyond the Batch (taken from the actor config by the trainer)."""

    n: int  # rollout.n: rows per prompt
    ppo_mini_batch_size: int  # prompts per optimizer step
    micro_rows: int | None  # rows per forward/backward pass; None: the whole mini-batch
    ppo_epochs: int
    shuffle: bool
    seed: int
    temperature: float
    max_response_length: int
    loss_mode: str
    loss_agg_mode: str
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float
    grad_clip: float
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str


class PolicyWorker:
    def __init__(self, model: nn.Module, settings: UpdateSettings, optim_cfg, total_steps: int):
        self.model = model
        self.s = settings
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, optim_cfg)
        warmup = (optim_cfg.lr_warmup_steps if optim_cfg.lr_warmup_steps >= 0
                  else int(optim_cfg.lr_warmup_steps_ratio * total_steps))
        self.scheduler = build_scheduler(self.optimizer, optim_cfg.warmup_style, warmup, total_steps,
                                         optim_cfg.num_cycles, optim_cfg.min_lr_ratio)

    def _micro_loss(self, mb: Batch, norm: AggNorm) -> tuple[torch.Tensor, dict[str, float]]:
        s = self.s
        logprobs, entropy = forward_logprobs(self.model, mb, s.temperature, with_entropy=True,
                                             entropy_grad=s.entropy_coeff != 0)
        mask = mb.response_mask.to(logprobs.device).float()
        old = mb.old_logprobs.to(logprobs.device) if mb.old_logprobs is not None else logprobs.detach()
        out = compute_policy_loss(s.loss_mode, PolicyLossInputs(
            logprobs=logprobs, old_logprobs=old, advantages=mb.advantages.to(logprobs.device), response_mask=mask,
            clip_ratio_low=s.clip_ratio_low, clip_ratio_high=s.clip_ratio_high, clip_ratio_c=s.clip_ratio_c,
            loss_agg_mode=s.loss_agg_mode, agg_norm=norm,
        ))
        loss = out.loss
        share = float(mask.sum()) / max(norm.num_tokens, 1.0)  # token share of this micro-batch
        metrics = {f"actor/{k}": v * share for k, v in out.metrics.items()}
        metrics["actor/pg_loss"] = float(out.loss.detach())
        entropy_term = agg_loss(entropy, mask, s.loss_agg_mode, norm)
        metrics["actor/entropy"] = float(entropy_term.detach())
        if s.entropy_coeff:
            loss = loss - s.entropy_coeff * entropy_term
        if s.use_kl_loss:
            kl = kl_penalty(logprobs, mb.ref_logprobs.to(logprobs.device), s.kl_loss_type)
            kl_term = agg_loss(kl, mask, s.loss_agg_mode, norm)
            loss = loss + s.kl_loss_coef * kl_term
            metrics["actor/kl_loss"] = float(kl_term.detach())
            metrics["actor/kl_coef"] = s.kl_loss_coef * share
        return loss, metrics

    def _row_order(self, batch: Batch, step: int, epoch: int) -> list[int] | None:
        """Rows with whole groups shuffled (a group never straddles mini-batches), or None to keep the order."""
        if not self.s.shuffle:
            return None
        g = torch.Generator().manual_seed(self.s.seed * 1_000_003 + step * 1_009 + epoch)
        groups = torch.unique_consecutive(batch.group)
        order = groups[torch.randperm(len(groups), generator=g)]
        return [i for gid in order.tolist() for i in (batch.group == gid).nonzero().flatten().tolist()]

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """ppo_epochs passes over `batch`, one optimizer step per mini-batch, then one scheduler step."""
        s = self.s
        self.model.train()
        rows_per_mini = s.ppo_mini_batch_size * s.n
        history: dict[str, list[float]] = defaultdict(list)
        for epoch in range(s.ppo_epochs):
            order = self._row_order(batch, step, epoch)
            data = batch.select(order) if order is not None else batch
            for mini in data.split(rows_per_mini):
                norm = AggNorm(num_tokens=float(mini.response_mask.sum()), num_seqs=float(len(mini)),
                               max_len=s.max_response_length)
                self.optimizer.zero_grad(set_to_none=True)
                sums: dict[str, float] = defaultdict(float)
                for mb in mini.split(s.micro_rows or rows_per_mini):
                    loss, metrics = self._micro_loss(mb, norm)
                    loss.backward()
                    for k, v in metrics.items():
                        sums[k] += v
                grad_norm, stepped = clipped_step(self.optimizer, self.params, s.grad_clip)
                if not stepped:
                    history["actor/nonfinite_grad_steps"].append(1.0)
                sums["actor/grad_norm"] = grad_norm
                for k, v in sums.items():
                    history[k].append(v)
        history["actor/lr"] = [self.optimizer.param_groups[0]["lr"]]
        self.scheduler.step()
        return {k: sum(v) / len(v) for k, v in history.items()}
