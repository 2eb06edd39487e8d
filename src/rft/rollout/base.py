"""The rollout protocol: prompts in, responses out, and new weights in. Engines: hf (transformers forward passes with
a KV cache); a second engine (vLLM) is one more class with these three members.

`StreamingEngine` adds continuous batching (`stream`): requests in, each response out as it finishes, weights
updated between decode steps while rows are in flight. The hf engine has it; vLLM's engine does not yet. `rft serve`
serves it over HTTP (`rft.explorer.engine_server`, client `rft.rollout.remote`), which training uses with
`rollout.mode=async` (`rft.rollout.engines.served_engine`)."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

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
    versions: torch.Tensor | None = None
    """(B, R) the weight version that drew each token (0 on padding), where the engine records it per token (the
    engine-server client, `rft.rollout.remote`); None: every token is the engine's `version`."""


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


@dataclass(frozen=True)
class StreamRequest:
    """One response to generate: `prompt_ids` unpadded (P,), `params.n` must be 1 (submit one request a sample)."""
    request_id: Hashable
    prompt_ids: Sequence[int] | torch.Tensor
    params: SamplingParams


@dataclass
class StreamResponse:
    """A finished request. Every tensor (R,), R from 1 to `params.max_tokens`, no padding."""
    request_id: Hashable
    prompt_ids: torch.Tensor
    response_ids: torch.Tensor  # up to and including the EOS that ended it
    logprobs: torch.Tensor  # behaviour log-probs: of each token under softmax(logits / temperature), as generate's
    versions: torch.Tensor  # the engine's `version` in the forward pass whose logits each token was drawn from
    finish_reason: Literal["stop", "length"]  # an EOS id / max_tokens reached


class RolloutStream(Protocol):
    """Continuous batching over a fixed number of slots (`max_num_seqs`, as verl's `rollout.max_num_seqs`): each
    `step` first runs one decode step of the running rows, then prefills waiting requests into the free slots, then
    draws every row's next token. Between two steps is a decode-step boundary: `update_weights` there is what the
    rows in flight generate with from their next token on."""

    def submit(self, request: StreamRequest) -> None:
        """Queue `request`; it takes a slot at the first step that has one free (first come, first served)."""

    def step(self) -> list[StreamResponse]:
        """One decode step; the responses it finished, in the order of their slots."""

    def __iter__(self) -> Iterator[StreamResponse]:
        """`step` until nothing waits or runs, yielding each response as it finishes (the caller may update the
        weights or submit more between two responses: the stream is paused at a step boundary then)."""

    @property
    def pending(self) -> int:
        """Requests waiting or running."""


class StreamingEngine(RolloutEngine, Protocol):
    def stream(self, max_num_seqs: int, generator: torch.Generator | None = None,
               recompute_on_update: bool = False) -> RolloutStream:
        """A stream of at most `max_num_seqs` rows in flight, sampling from `generator`.
        `recompute_on_update`: at the first step after a weight update, the rows in flight recompute their KV cache
        (prompt and response so far) with the new weights, as verl and AReaL do; else their cache is kept, so a token
        after an update attends keys and values that the older weights computed."""


def eos_token_ids(model, tokenizer) -> list[int]:
    """The ids that end a response: the generation config's EOS ids (one or a list, as Llama 3 lists three) and the
    tokenizer's EOS, which SFT puts at the end of every demonstration."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = list(eos) if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]
    return ids + [i for i in [tokenizer.eos_token_id] if i is not None and i not in ids]
