"""Continuous batching for the hf engine: requests in, each response out as it finishes (`HFRollout.stream`).

At most `max_num_seqs` rows run at once (verl's `rollout.max_num_seqs`); a finished row's slot takes the next
waiting request at the next step. The running rows share one `PreallocatedCache`, laid out as `generate()` lays out
its prompts: each row's latest position in the last filled column, a row shorter than the longest padded on the
left and hidden by the padding mask, its position ids (RoPE's) counting its own tokens only. One `step`:

1. one decode forward pass of the running rows, each feeding the token it drew last;
2. waiting requests take the free slots: their prompts prefilled together, in a cache of their own;
3. every row draws its next token (rows grouped by their sampling parameters) and records it, its behaviour
   log-prob and the engine's `version`, the weights of the pass whose logits it was drawn from;
4. where rows finished or came in, one regroup of the cache: the unfinished rows, the width cut to the longest
   one's (the padding never outgrows the rows in flight), room for the most tokens any of them may still take.

Between two steps the stream is paused at a decode-step boundary: a weight update there is what every row computes
with from its next token on (partial rollouts, as AReaL's interruptible generation and verl's fully-async trainer).
The rows in flight keep their KV cache, computed by the weights of the step that fed each position; with
`recompute_on_update` the first step after an update recomputes it (prompt and response so far) with the new
weights first, as verl and AReaL do, so every token is then a plain forward pass of its version's weights.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from rft.data.dataset import left_pad
from rft.models.load import device_of
from rft.rollout.base import SamplingParams, StreamRequest, StreamResponse
from rft.rollout.cache import PreallocatedCache


@dataclass
class _Row:
    """A running request: what it fed into the cache and what it drew."""
    request: StreamRequest
    prompt: torch.Tensor  # (P,) long, on the CPU
    length: int  # its positions in the cache: the prompt, then each drawn token fed back but the last
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    @property
    def params(self) -> SamplingParams:
        return self.request.params

    @property
    def room(self) -> int:
        """The most positions this row may still add to the cache."""
        return self.params.max_tokens - len(self.tokens)


class HFStream:
    """The hf engine's `RolloutStream` (`rft.rollout.base`); see the module docstring. `engine`: the `HFRollout`
    that made it, whose model, prefill and sampling it runs."""

    def __init__(self, engine, max_num_seqs: int, generator: torch.Generator | None,
                 recompute_on_update: bool):
        self.engine = engine
        self.max_num_seqs = max_num_seqs
        self.generator = generator
        self.recompute_on_update = recompute_on_update
        self.waiting: deque[StreamRequest] = deque()
        self.rows: list[_Row] = []  # the running rows, in the cache's order
        self.cache: PreallocatedCache | None = None
        self.width = 0  # the cache's filled positions
        self.cache_version = engine.version  # the weights of the cache's latest positions
        self._ids: set = set()
        self._layers = engine.model.config.num_hidden_layers
        self._eos = set(engine.eos_ids.tolist())

    @property
    def pending(self) -> int:
        return len(self.waiting) + len(self.rows)

    def submit(self, request: StreamRequest) -> None:
        where = f"stream request {request.request_id!r}"
        if request.params.n != 1:
            raise ValueError(f"{where}: params.n={request.params.n}; a stream request is one sample: submit one "
                             "request a sample")
        if request.params.max_tokens < 1:
            raise ValueError(f"{where}: params.max_tokens={request.params.max_tokens}, it must be 1 or more")
        if len(request.prompt_ids) == 0:
            raise ValueError(f"{where}: the prompt is empty")
        if request.request_id in self._ids:
            raise ValueError(f"{where}: a request of this id is already waiting or running")
        self._ids.add(request.request_id)
        self.waiting.append(request)

    def __iter__(self) -> Iterator[StreamResponse]:
        while self.pending:
            yield from self.step()

    @torch.no_grad()
    def step(self) -> list[StreamResponse]:
        if not self.pending:
            return []
        engine = self.engine
        with engine._generating(fast=True):
            if self.rows and self.recompute_on_update and self.cache_version != engine.version:
                self._recompute()
            self.cache_version = engine.version
            logits = [self._decode()] if self.rows else []
            new_rows, new_cache, new_logits = self._admit()
            if new_rows:
                logits.append(new_logits)
            rows = self.rows + new_rows
            tokens, logprobs = self._draw(torch.cat(logits), rows)
        done, keep = [], []
        for i, (row, token, logprob) in enumerate(zip(rows, tokens, logprobs)):
            row.tokens.append(token)
            row.logprobs.append(logprob)
            row.versions.append(engine.version)
            if token in self._eos and not row.params.ignore_eos:
                done.append(self._response(row, "stop"))
            elif len(row.tokens) == row.params.max_tokens:
                done.append(self._response(row, "length"))
            else:
                keep.append(i)
        if done or new_rows:
            self._regroup(rows, keep, new_cache)
        return done

    def _decode(self) -> torch.Tensor:
        """One forward pass of the running rows over the token each drew last; their next-token logits (B, V)."""
        device = device_of(self.engine.model)
        token = torch.tensor([[row.tokens[-1]] for row in self.rows], device=device)  # (B, 1)
        lengths = torch.tensor([row.length for row in self.rows], device=device)  # (B,)
        # (B, width + 1): a row attends its own last `length` positions and the new one
        mask = (torch.arange(self.width + 1, device=device) >= (self.width - lengths)[:, None]).long()
        out = self.engine.model(input_ids=token, attention_mask=mask, position_ids=lengths[:, None], use_cache=True,
                                **{self.engine.cache_kwarg: self.cache})
        self.width += 1
        for row in self.rows:
            row.length += 1
        return out.logits[:, -1, :].float()

    def _admit(self) -> tuple[list[_Row], PreallocatedCache | None, torch.Tensor | None]:
        """Waiting requests into the free slots: their rows, their prefilled cache and first-token logits."""
        free = min(self.max_num_seqs - len(self.rows), len(self.waiting))
        if free <= 0:
            return [], None, None
        rows = []
        for _ in range(free):
            request = self.waiting.popleft()
            prompt = torch.as_tensor(request.prompt_ids, dtype=torch.long).flatten().cpu()
            rows.append(_Row(request, prompt, length=len(prompt)))
        logits, cache = self._prefill([row.prompt for row in rows], capacity=max(row.length for row in rows))
        return rows, cache, logits

    def _prefill(self, seqs: list[torch.Tensor], capacity: int) -> tuple[torch.Tensor, PreallocatedCache]:
        """`seqs` left-padded into one forward pass (the engine's prefill) in a cache of `capacity` positions."""
        device = device_of(self.engine.model)
        ids, attn = left_pad([s.tolist() for s in seqs], self.engine.pad_token_id)
        cache = PreallocatedCache(self._layers, capacity)
        logits, _ = self.engine._prefill(ids.to(device), attn.to(device), torch.arange(len(seqs), device=device),
                                         cache)
        return logits, cache

    def _recompute(self) -> None:
        """The running rows' cache computed afresh with the engine's current weights."""
        seqs = [torch.cat([row.prompt, torch.tensor(row.tokens[:-1], dtype=torch.long)]) for row in self.rows]
        self.width = max(row.length for row in self.rows)
        _, self.cache = self._prefill(seqs, capacity=self.width + max(row.room for row in self.rows))

    def _draw(self, logits: torch.Tensor, rows: list[_Row]) -> tuple[list[int], list[float]]:
        """Each row's next token from its logits (B, V) and its log-prob, the rows of one set of sampling parameters
        drawn together."""
        groups: dict[SamplingParams, list[int]] = {}
        for i, row in enumerate(rows):
            groups.setdefault(row.params, []).append(i)
        tokens = torch.empty(len(rows), dtype=torch.long, device=logits.device)
        logprobs = torch.empty(len(rows), dtype=logits.dtype, device=logits.device)
        for params, members in groups.items():
            index = torch.tensor(members, device=logits.device)
            tokens[index], logprobs[index] = self.engine._sample_rows(logits[index], params, self.generator)
        return tokens.tolist(), logprobs.tolist()

    def _regroup(self, rows: list[_Row], keep: list[int], new_cache: PreallocatedCache | None) -> None:
        """The rows `keep` of `rows` (the running ones, then the ones admitted this step) become the running rows,
        their cache regrouped into one."""
        old = len(self.rows)
        self.rows = [rows[i] for i in keep]
        if not self.rows:
            self.cache, self.width = None, 0
            return
        parts = []
        for cache, index in ((self.cache, [i for i in keep if i < old]),
                             (new_cache, [i - old for i in keep if i >= old])):
            if index:
                parts.append((cache, torch.tensor(index, device=device_of(self.engine.model))))
        self.width = max(row.length for row in self.rows)
        capacity = self.width + max(row.room for row in self.rows)
        target = self.cache if self.cache is not None else PreallocatedCache(self._layers, capacity)
        target.regroup(parts, self.width, capacity)
        self.cache = target

    def _response(self, row: _Row, reason: str) -> StreamResponse:
        self._ids.discard(row.request.request_id)
        return StreamResponse(
            request_id=row.request.request_id, prompt_ids=row.prompt,
            response_ids=torch.tensor(row.tokens, dtype=torch.long),
            logprobs=torch.tensor(row.logprobs, dtype=torch.float32),
            versions=torch.tensor(row.versions, dtype=torch.long), finish_reason=reason)
