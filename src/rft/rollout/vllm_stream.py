"""`VLLMStream`: the `RolloutStream` of the `vllm` engine, over vLLM's request-level API (`LLMEngine.add_request` /
`step`), which batches continuously itself: a finished request's slot takes the next waiting one, new prompts'
prefills interleaved with the running requests' decode steps, at most the engine's `max_num_seqs` running.

Each `step` hands vLLM the requests submitted since the last one (each seeded from the stream's generator, drawn in
submission order at that step, so a re-seed between two steps fixes the samples of the requests after it), runs
one engine step, and adds each request's new tokens (vLLM's `DELTA` outputs) with their log-probs and the engine's
`version`.

Weight updates (`drains_for_updates`): vLLM's KV cache holds the keys and values of the old weights, and its reload
(`VLLMRollout.update_weights`) rebuilds each layer's kernel format and drops the prefix cache, which vLLM cannot do
under requests in flight. So a weight update waits until every request in flight has finished (the engine server
admits nothing new meanwhile): every response is of one version (verl's `partial_rollout=false`), and
`async_training.partial_rollout=true` with vLLM is refused by name (`rft.explorer.checks.check_streaming`).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

import torch

from rft.rollout.base import StreamRequest, StreamResponse


@dataclass
class _Row:
    """A request in vLLM: what it generated so far."""
    request: StreamRequest
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)


class VLLMStream:
    drains_for_updates = True  # see the module docstring

    def __init__(self, engine, max_num_seqs: int, generator: torch.Generator | None = None):
        if max_num_seqs < 1:
            raise ValueError(f"the vLLM engine's stream: max_num_seqs={max_num_seqs}, it must be 1 or more")
        self.engine, self.max_num_seqs = engine, max_num_seqs
        self.generator = generator if generator is not None else torch.Generator()
        self.waiting: deque[StreamRequest] = deque()
        self._running: dict[str, _Row] = {}
        self._ids = itertools.count()

    @property
    def rows(self) -> list[_Row]:
        return list(self._running.values())

    @property
    def pending(self) -> int:
        return len(self.waiting) + len(self._running)

    def submit(self, request: StreamRequest) -> None:
        if request.params.n != 1:
            raise ValueError(f"a stream request is one sample: params.n={request.params.n}")
        self.waiting.append(request)

    def abort(self) -> None:
        """Take every request out of vLLM (a failed step: the stream starts afresh)."""
        if self._running:
            self.engine.llm.llm_engine.abort_request(list(self._running))
        self._running.clear()
        self.waiting.clear()

    def step(self) -> list[StreamResponse]:
        from vllm.sampling_params import RequestOutputKind

        engine = self.engine.llm.llm_engine
        while self.waiting:
            request = self.waiting.popleft()
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator))
            params = self.engine.sampling_params(request.params, seed, output_kind=RequestOutputKind.DELTA)
            key = f"rft-{next(self._ids)}"
            ids = request.prompt_ids.tolist() if isinstance(request.prompt_ids, torch.Tensor) \
                else list(request.prompt_ids)
            engine.add_request(key, {"prompt_token_ids": ids}, params)
            self._running[key] = _Row(request)
        if not self._running:
            return []
        version = self.engine.version  # the weights this step's forward pass runs with
        done = []
        for out in engine.step():
            row = self._running.get(out.request_id)
            if row is None:
                continue
            c = out.outputs[0]
            new = list(c.token_ids)
            row.tokens += new
            row.logprobs += [step[t].logprob for step, t in zip(c.logprobs or [], new)]
            row.versions += [version] * len(new)
            if out.finished:
                del self._running[out.request_id]
                if len(row.logprobs) != len(row.tokens):
                    raise RuntimeError(f"vLLM returned {len(row.logprobs)} log-probs for {len(row.tokens)} tokens")
                done.append(StreamResponse(
                    row.request.request_id, torch.as_tensor(row.request.prompt_ids, dtype=torch.long),
                    torch.tensor(row.tokens, dtype=torch.long), torch.tensor(row.logprobs, dtype=torch.float32),
                    torch.tensor(row.versions, dtype=torch.long),
                    "length" if c.finish_reason == "length" else "stop"))
        return done

    def __iter__(self):
        while self.pending:
            yield from self.step()
