"""`sync_method: memory`: explorer and trainer in one process share the policy itself, so a sync moves only the
engine's version (no copy). With the trainer sharded over several processes and the vLLM engine beside each rank,
the sync gathers the policy's full weights on every rank (`gather`) and the engine loads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch


class MemorySync:
    def __init__(self, engine, gather: Callable[[], Mapping[str, torch.Tensor]] | None = None) -> None:
        self.engine, self.gather = engine, gather

    def publish(self, weights, version: int, changed: bool = True) -> None:
        """The trainer's weights of `version` (its step): the engine's model is the trained one, or (`gather`) a
        whole copy of it that takes the gathered weights. `changed` False: the weights are those the engine holds
        (a step that did not move them), so it only takes the version: an engine with weights of its own (vLLM)
        would reload every tensor for nothing."""
        if not changed:
            self.engine.version = version
            return
        self.engine.update_weights(self.gather() if self.gather is not None else None, version)

    def close(self) -> None:
        pass
