"""Trinity-RFT's mix: expert (SFT) rows from an auxiliary dataset join each RL step's batch (algorithm.mix).

`ExpertRows` reads `data.expert` like `rft sft` reads its rows (`SFTDataset`; a vision-language policy's images
through its processor) and draws a fixed number of them per
step with a seeded, resumable sampler (its state travels in the trainer's checkpoints). `attach` puts them after the
step's experiences with `Batch.expert_mask` set: the worker gives the expert rows the SFT loss and the experiences
the policy loss (workers/policy.py), and splits a batch so that every mini-batch holds its share of both
(workers/minibatch.py). The rows are added just before the actor update: reward metrics, old / reference
log-probs, values and advantages concern the experiences only.

How many: a mini-batch of U = ppo_mini_batch_size x rollout.n experiences gets E = ceil(r U / (1 - r)) expert rows
(r = expert_data_ratio), the smallest E with E >= r (U + E); it is Trinity-RFT's ceil(r T) with T = U + E the rows
the trainer reads. A step of k mini-batches reads k E. With several processes every rank draws the same k E rows
and trains on its share of each mini-batch's E (E / processes rows, the first E % processes ranks one more:
`step_shard`; Trinity-RFT splits the whole read batch over its ranks likewise), and the expert rows' normaliser is
summed over the ranks (`workers.minibatch.mini_batch_norm`), so the loss is one process's.

CHORD (Trinity-RFT's mix_chord; Zhang et al. 2025, "On-Policy RL Meets Off-Policy Experts"): the SFT loss's weight
mu follows `workers.policy.mu_at` (warm-up, cosine decay to a valley) instead of staying constant, and with
sft_token_weight phi each expert token's -log p is weighted by p (1 - p) (the policy worker).
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import torch

from rft.batch import Batch, concat_batches
from rft.console import counted
from rft.data.dataset import PromptSampler
from rft.data.io import DataError
from rft.data.sft import SFTDataset
from rft.distributed import SINGLE, Dist, step_shard
from rft.models.vision import vision_for

# the (B, R) fields: per response token (the others are per row, or (B, K))
_PER_TOKEN = ("old_logprobs", "ref_logprobs", "rollout_logprobs", "values", "token_rewards", "ref_kl", "advantages",
              "returns", "loss_mask", "action_mask", "rollout_is_weights", "sum_pi_squared")


def expert_rows_per_mini_batch(experiences: int, ratio: float) -> int:
    """E = ceil(ratio * U / (1 - ratio)) for U = `experiences` (0 <= ratio < 1). The product is rounded to 1e-9
    first, so a ratio written in decimal (0.2 x 12 / 0.8 = 3.0000000000000004) gives the E it means."""
    return math.ceil(round(ratio * experiences / (1.0 - ratio), 9))


def too_few_expert_rows(have: int, per_mini_batch: int, mini_batches: int, experiences: int, ratio: float) -> str:
    """The error for data.expert's `have` rows, fewer than a step reads (`per_mini_batch` x `mini_batches`): in the
    expert keys' terms (the sampler's said 'prompts' and data.train_batch_size / ppo_mini_batch_size), with the
    largest algorithm.mix.expert_data_ratio the rows hold."""
    fits = have // mini_batches  # expert rows per mini-batch the file holds: E <= fits iff ratio <= fits / (U + fits)
    lower = (f"lower algorithm.mix.expert_data_ratio to at most {math.floor(fits / (experiences + fits) * 1e4) / 1e4}, "
             "or " if fits else "")
    return (f"data.expert.files has {counted(have, 'row')} (after data.expert.max_length / truncation), fewer than "
            f"the {per_mini_batch * mini_batches} expert rows of one step ({per_mini_batch} per mini-batch of "
            f"{experiences} experiences at algorithm.mix.expert_data_ratio={ratio}, x {mini_batches} "
            f"mini-batch{'es' if mini_batches != 1 else ''}): {lower}add expert rows")


class ExpertRows:
    def __init__(self, cfg, tokenizer, dist: Dist = SINGLE):
        """`dist`: this process's rank; every rank draws the same rows and keeps its share of each mini-batch's."""
        expert, arr = cfg.data.expert, cfg.actor_rollout_ref
        self.dist = dist
        self.pad_id = tokenizer.pad_token_id
        self.dataset = SFTDataset(expert.files, tokenizer, SimpleNamespace(
            prompt_key=expert.prompt_key, response_key=expert.response_key, image_key=expert.image_key,
            prompt_dict_keys=expert.prompt_dict_keys, response_dict_keys=expert.response_dict_keys,
            multiturn=SimpleNamespace(enable=expert.messages_key is not None, messages_key=expert.messages_key,
                                      last_turn_only=expert.last_turn_only, tools_key=None,
                                      enable_thinking_key=None),
            max_length=expert.max_length, truncation=expert.truncation,
            apply_chat_template_kwargs=cfg.data.apply_chat_template_kwargs),
            vision=vision_for(arr.model.path), keys="data.expert")
        mini_batches = cfg.data.train_batch_size // arr.actor.ppo_mini_batch_size
        self.per_mini_batch = expert_rows_per_mini_batch(arr.actor.ppo_mini_batch_size * arr.rollout.n,
                                                         cfg.algorithm.mix.expert_data_ratio)
        self.rows = self.per_mini_batch * mini_batches
        if len(self.dataset) < self.rows:
            raise DataError(too_few_expert_rows(len(self.dataset), self.per_mini_batch, mini_batches,
                                                arr.actor.ppo_mini_batch_size * arr.rollout.n,
                                                cfg.algorithm.mix.expert_data_ratio))
        self.sampler = PromptSampler(len(self.dataset), self.rows, shuffle=True, seed=cfg.trainer.seed,
                                     unit="expert row", mini_batch_key=None) if self.rows else None

    def attach(self, batch: Batch) -> Batch:
        """`batch` (the step's experiences) followed by the next `rows` expert rows, `expert_mask` marking them.
        Every field the experiences carry is given a neutral value on the expert rows (0; IS weights 1); their
        `loss_mask` is the SFT dataset's (the response tokens it trains on), and so is their `action_mask` when the
        experiences carry one (multi-turn rows). The experiences keep their own `loss_mask`, else their action mask
        (the policy's tokens: tool turns carry no loss), else the response mask."""
        if not self.rows:
            return dataclasses.replace(batch, expert_mask=torch.zeros(len(batch), dtype=torch.bool))
        drawn = self.sampler.next_batch()  # the step's rows, mini-batch after mini-batch: this rank's share of each
        mine = step_shard(self.rows, self.per_mini_batch, self.dist.rank, self.dist.world_size, equal=False)
        expert = self.dataset.batch([drawn[i] for i in mine], self.pad_id)
        n, width = len(expert), expert.response_ids.shape[1]
        fills: dict = {}
        for f in dataclasses.fields(Batch):
            mine, theirs = getattr(batch, f.name), getattr(expert, f.name)
            if mine is None or (theirs is not None and not isinstance(theirs, list)):
                continue
            if isinstance(mine, torch.Tensor):
                shape = (n, width) if f.name in _PER_TOKEN else (n, *mine.shape[1:])
                fills[f.name] = (torch.ones if f.name == "rollout_is_weights" else torch.zeros)(shape, dtype=mine.dtype)
            elif not mine:  # a per-row list the experiences leave empty
                fills[f.name] = []
            else:
                fills[f.name] = [{k: 0.0 for k in mine[0]} for _ in range(n)] if f.name == "reward_rows" else [None] * n
        if batch.action_mask is not None:  # the expert's tokens are the ones it "wrote": those the SFT loss is on
            fills["action_mask"] = expert.loss_mask.to(batch.action_mask.dtype)
        own = batch.loss_mask if batch.loss_mask is not None else \
            batch.action_mask if batch.action_mask is not None else batch.response_mask
        images = {}
        if batch.images or expert.images:  # each row's list (possibly empty) on both sides, when either has any
            images = {"images": batch.images or [[] for _ in range(len(batch))]}
            fills["images"] = expert.images or [[] for _ in range(n)]
        expert = dataclasses.replace(expert, **fills, expert_mask=torch.ones(n, dtype=torch.bool))
        experiences = dataclasses.replace(batch, loss_mask=own.clone(), **images,
                                          expert_mask=torch.zeros(len(batch), dtype=torch.bool))
        return concat_batches([experiences, expert], self.pad_id)

    def state_dict(self) -> dict:
        return self.sampler.state_dict() if self.sampler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.sampler is not None:
            self.sampler.load_state_dict(state)
