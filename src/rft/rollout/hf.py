"""The `hf` rollout engine: batched sampling with a transformers model and its KV cache.

A decode loop of our own rather than `generate()`: it draws from an explicit `torch.Generator` (so a checkpoint can
restore the sampling stream exactly and validation never perturbs it) and does only the work sampling needs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from rft.models.load import device_of
from rft.rollout.base import RolloutOutput, SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (B, V) logits outside the top-k tokens and outside the smallest nucleus with mass >= top_p."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass before it already reaches top_p; the first token always stays
        drop = (probs.cumsum(-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(-1, order, sorted_logits)
    return logits


def sample_next(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Next tokens (B,) from last-position logits (B, V)."""
    if params.greedy:
        return logits.argmax(-1)
    logits = filter_logits(logits / params.temperature, params.top_k, params.top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def response_mask_from(tokens: torch.Tensor, eos_ids: torch.Tensor, ignore_eos: bool) -> torch.Tensor:
    """(B, R) mask: 1 up to and including the first EOS of each row (everything when ignore_eos)."""
    if ignore_eos:
        return torch.ones_like(tokens)
    is_eos = torch.isin(tokens, eos_ids).long()
    eos_before = is_eos.cumsum(-1) - is_eos  # EOS tokens strictly before position t
    return (eos_before == 0).long()


class HFRollout:
    def __init__(self, model: nn.Module, eos_token_ids: list[int], pad_token_id: int, micro_batch_size: int | None = None,
                 all_done: Callable[[bool], bool] | None = None):
        """`all_done(finished_here)`: with a model sharded over several processes, whether every rank's rows have
        finished; the decode loop stops only then (each forward pass of a sharded model needs every rank), the
        finished rows of a rank emitting padding meanwhile. None: one process."""
        self.model = model
        self.eos_ids = torch.as_tensor(sorted(set(eos_token_ids)), dtype=torch.long)
        self.pad_token_id = pad_token_id
        self.micro_batch_size = micro_batch_size
        self.all_done = all_done
        self.version = 0

    @torch.no_grad()
    def update_weights(self, weights, version: int) -> None:
        """Copy `weights` (name -> tensor, named as the model's parameters) into the model; None: the model is the
        trained one itself (nothing to copy)."""
        if weights is not None:
            params = dict(self.model.named_parameters())
            unknown = sorted(set(weights) - set(params))
            if unknown:
                raise KeyError(f"update_weights: the rollout model has no parameters {unknown[:5]}")
            for name, value in weights.items():
                params[name].copy_(value.to(params[name].device, params[name].dtype))
        self.version = version

    @torch.no_grad()
    def generate(self, prompt_ids, prompt_mask, params: SamplingParams, generator=None) -> RolloutOutput:
        device = device_of(self.model)
        if generator is not None and generator.device.type != device.type:
            # torch.multinomial needs a generator on the logits' device. Seed one there from the caller's (CPU)
            # generator, so that generator's state, which checkpoints save, still fixes the samples.
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            generator = torch.Generator(device).manual_seed(seed)
        prompt_ids = prompt_ids.repeat_interleave(params.n, dim=0)
        prompt_mask = prompt_mask.repeat_interleave(params.n, dim=0)
        rows = self.micro_batch_size or prompt_ids.shape[0]
        parts = [
            self._generate(prompt_ids[i:i + rows], prompt_mask[i:i + rows], params, generator)
            for i in range(0, prompt_ids.shape[0], rows)
        ]
        width = max(p.response_ids.shape[1] for p in parts)
        return RolloutOutput(
            response_ids=torch.cat([_pad_right(p.response_ids, width, self.pad_token_id) for p in parts]),
            response_mask=torch.cat([_pad_right(p.response_mask, width, 0) for p in parts]),
            logprobs=torch.cat([_pad_right(p.logprobs, width, 0.0) for p in parts]),
        )

    def _generate(self, prompt_ids, prompt_mask, params: SamplingParams, generator) -> RolloutOutput:
        from transformers import DynamicCache

        was_training = self.model.training
        self.model.eval()
        device = device_of(self.model)
        ids, attn = prompt_ids.to(device), prompt_mask.to(device)
        eos_ids = self.eos_ids.to(device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, past_key_values=cache,
                         use_cache=True, logits_to_keep=1)
        next_pos = positions[:, -1:] + 1
        finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=device)
        tokens, logprobs = [], []
        for step in range(params.max_tokens):
            logits = out.logits[:, -1, :].float()
            token = sample_next(logits, params, generator).to(device)
            token = token.masked_fill(finished, self.pad_token_id)
            scaled = logits / params.temperature if params.temperature > 0 else logits
            logprobs.append(scaled.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1))
            tokens.append(token)
            if not params.ignore_eos:
                finished |= torch.isin(token, eos_ids)
                done = bool(finished.all())
                if self.all_done(done) if self.all_done is not None else done:
                    break
            if step + 1 == params.max_tokens:
                break
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            out = self.model(input_ids=token[:, None], attention_mask=attn, position_ids=next_pos,
                             past_key_values=cache, use_cache=True)
            next_pos = next_pos + 1
        self.model.train(was_training)
        response = torch.stack(tokens, dim=1).cpu()
        mask = response_mask_from(response, self.eos_ids, params.ignore_eos)
        response = response.masked_fill(mask == 0, self.pad_token_id)
        return RolloutOutput(response, mask, torch.stack(logprobs, dim=1).cpu() * mask)


def _pad_right(x: torch.Tensor, width: int, value) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)
