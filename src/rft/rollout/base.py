"""The rollout protocol: prompts in, responses out, and new weights in. Engines: hf (transformers forward passes with
a KV cache); a second engine (vLLM) is one more class with these three members."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_k: int = -1  # -1 or 0: disabled
    top_p: float = 1.0
    do_sample: bool = True
    max_tokens: int = 512
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


@dataclass
class RolloutOutput:
    response_ids: torch.Tensor  # (B, R) right-padded with pad_token_id, B = prompts x n (rows of a prompt adjacent)
    response_mask: torch.Tensor  # (B, R) 1 up to and including the first EOS
    logprobs: torch.Tensor  # (B, R) log-prob of each sampled token under softmax(logits / temperature)


class RolloutEngine(Protocol):
    version: int
    """The trainer step whose weights the engine generates with (0: the starting model)."""
    eos_ids: torch.Tensor
    """The token ids that end a response (sorted, long)."""

    def generate(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> RolloutOutput: ...

    def update_weights(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None:
        """Load `weights` (parameter name -> tensor, a subset of the model's: e.g. the trainable ones) and take
        `version`; None: the engine shares the trained model itself (one process), so only the version moves."""


def eos_token_ids(model, tokenizer) -> list[int]:
    """The ids that end a response: the generation config's EOS ids (one or a list, as Llama 3 lists three) and the
    tokenizer's EOS, which SFT puts at the end of every demonstration."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = list(eos) if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]
    return ids + [i for i in [tokenizer.eos_token_id] if i is not None and i not in ids]
