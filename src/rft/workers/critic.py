"""The critic: a value model V(s_t) for every response token, trained towards the returns with PPO's clipped
value loss (verl's DataParallelPPOCritic).

The model is the decoder backbone with a scalar head on each position's last hidden state
(`rft.models.load.load_value_model`). The value of response token t is read at the position that predicts it
(p - 1 + t, the state before the token is chosen), the same window the policy's log-probs use
(`response_window`). A vision-language value model (the policy's family: its backbone, vision tower included,
under the same head) gets the rows' pixels and token types in its padded and packed passes as the policy does
(`rft.workers.policy.forward_logits`). The update loop (epochs, group-shuffled mini-batches, micro-batches
aggregated with the mini-batch's normaliser, clipped optimizer step, scheduler) is the policy's
(`workers/minibatch.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rft.algorithms import AggNorm, value_loss
from rft.batch import Batch
from rft.models.load import device_of
from rft.models.precision import autocast
from rft.models.vision import forward_function, vision_of
from rft.workers.minibatch import MiniBatchWorker, loss_tokens
from rft.workers.packing import forward_packed, packs
from rft.workers.policy import (
    UpdateSettings,
    _pad,
    eval_passes,
    packed_window,
    padded_inputs,
    response_window,
)
from rft.workers.ulysses import sequence_parallel, split_outputs


def forward_values(model: nn.Module, batch: Batch) -> torch.Tensor:
    """(B, R) values of the response tokens (0 past each row's last one), with gradients if enabled; in the
    critic's compute precision (models/precision.py)."""
    with autocast(model):
        return _forward_values(model, batch)


def _forward_values(model: nn.Module, batch: Batch) -> torch.Tensor:
    R = batch.response_ids.shape[1]
    if sequence_parallel(model) is not None:  # each process reads the values its slice holds
        ids, attn, positions, p_len, _ = response_window(batch, device_of(model))
        values = split_outputs(model, ids, attn, positions, p_len, lambda out, labels: out[:, :1].float(), 1,
                               packed=packs(model), lm=False)[..., 0]
        return _pad(values, R) * batch.response_mask.to(values.device)
    vision = vision_of(model) if any(batch.images) else None
    if packs(model) and (vision is None or vision.packs):  # use_remove_padding: the real tokens packed, the value
        # read before each response token; a prompt's images go with its packed tokens, as in the policy's passes
        share = vision is None or not vision.has_image_tokens(batch.response_ids)  # later turns' images: unshared
        window = packed_window(batch, device_of(model), share)
        target = (window.t >= 0).nonzero().flatten()
        extra = {} if vision is None else vision.packed_kwargs(
            model, batch.images, window.ids, window.attn, window.tokens.row, window.col, window.owner,
            forward_function(model))
        out = forward_packed(model, window.tokens, None, **extra)[window.before, 0].float()  # (N,)
        values = out.new_zeros(batch.response_mask.shape).index_put((window.tokens.row[target], window.t[target]),
                                                                    out)
        return values * batch.response_mask.to(values.device)
    # padded; rows with images of a family that does not pack them (`rft.models.vision`)
    inputs, p_len, r_len = padded_inputs(model, batch, vision)
    out = model(**inputs, use_cache=False).logits  # (B, L, 1)
    values = out[:, p_len - 1:p_len - 1 + r_len, 0].float()  # (B, r)
    return _pad(values, R) * batch.response_mask.to(values.device)


@dataclass
class CriticSettings:
    """What one critic update needs beyond the Batch (from the critic config, defaults from the actor's)."""

    n: int  # rollout.n: rows per prompt
    ppo_mini_batch_size: int  # prompts per optimizer step
    micro_rows: int | None  # rows per forward/backward pass; None: the whole mini-batch
    forward_micro_rows: int | None  # rows per no-gradient value pass; None: the whole batch
    ppo_epochs: int
    shuffle: bool
    seed: int
    max_response_length: int
    loss_agg_mode: str
    grad_clip: float
    cliprange_value: float
    bad_update_limit: int = 3  # trainer.bad_update_limit: skipped optimizer steps in a row before the run stops
    loss_scale_factor: int | None = None  # seq-mean-token-sum-norm's constant; None: max_response_length
    max_token_len: int | None = None  # use_dynamic_bsz: real tokens per forward/backward pass (else micro_rows)
    forward_max_token_len: int | None = None  # use_dynamic_bsz: real tokens per no-gradient value pass
    activation_offload: bool = False  # critic.model.enable_activation_offload (workers/minibatch.py)

    @classmethod
    def from_config(cls, cfg, actor: UpdateSettings) -> CriticSettings:
        """The critic section of an RL config; its null sizes follow the actor's (`actor`: the actor's settings)."""
        c, a = cfg.critic, cfg.actor_rollout_ref.actor
        micro = c.ppo_micro_batch_size_per_gpu or c.ppo_micro_batch_size
        return cls(
            n=actor.n, ppo_mini_batch_size=c.ppo_mini_batch_size or a.ppo_mini_batch_size, micro_rows=micro,
            forward_micro_rows=c.forward_micro_batch_size_per_gpu or c.forward_micro_batch_size or micro,
            ppo_epochs=c.ppo_epochs or a.ppo_epochs, shuffle=a.shuffle if c.shuffle is None else c.shuffle,
            seed=actor.seed, max_response_length=cfg.data.max_response_length,
            loss_agg_mode=c.loss_agg_mode or a.loss_agg_mode, grad_clip=c.grad_clip, cliprange_value=c.cliprange_value,
            bad_update_limit=cfg.trainer.bad_update_limit,
            loss_scale_factor=c.loss_scale_factor or a.loss_scale_factor,
            max_token_len=c.ppo_max_token_len_per_gpu if c.use_dynamic_bsz else None,
            forward_max_token_len=c.forward_max_token_len_per_gpu if c.use_dynamic_bsz else None,
            activation_offload=c.model.enable_activation_offload,
        )


class CriticWorker(MiniBatchWorker):
    """`CriticWorker(model, CriticSettings, critic.optim, total_steps[, dist])`."""

    prefix = "critic"

    def compute_values(self, batch: Batch) -> torch.Tensor:
        """(B, R) values without gradients (the old values of an update), `forward_micro_rows` rows per pass."""
        return eval_passes(self.model, batch, self.s.forward_micro_rows, lambda mb: forward_values(self.model, mb),
                           max_tokens=self.s.forward_max_token_len, dist=self.dist,
                           key="critic.forward_max_token_len_per_gpu")

    def _micro_loss(self, mb: Batch, norm: AggNorm) -> tuple[torch.Tensor, dict[str, float]]:
        vpreds = forward_values(self.model, mb)
        device = vpreds.device
        mask = loss_tokens(mb).to(device).float()
        out = value_loss(vpreds, mb.values.to(device), mb.returns.to(device), mask, self.s.cliprange_value,
                         self.s.loss_agg_mode, norm)
        share = float(mask.sum()) / max(norm.num_tokens, 1.0)  # token share of this micro-batch
        vpred_mean = float((vpreds.detach() * mask).sum() / mask.sum().clamp(min=1.0))
        return out.loss, {"critic/vf_loss": float(out.loss.detach()), "critic/vf_clipfrac": float(out.clipfrac) * share,
                          "critic/vpred_mean": vpred_mean * share}

    def backward_mini_batch(self, mini: Batch, seed: int = 0) -> dict[str, float]:
        """Accumulate the gradient of one mini-batch's value loss (targets `returns`, old values `values`)."""
        if mini.values is None or mini.returns is None:
            raise ValueError("the critic update needs Batch.values (old values) and Batch.returns (targets)")
        norm = self.norm(mini)
        return self.accumulate(mini, lambda rows, mb: self._micro_loss(mb, norm),
                               plan=self.plan(mini, sync=bool(self.s.max_token_len)))

    budget_key = "critic.ppo_max_token_len_per_gpu"
