"""`sync_method: memory`: explorer and trainer in one process share the policy itself, so a sync moves only the
engine's version (no copy)."""

from __future__ import annotations


class MemorySync:
    def __init__(self, engine) -> None:
        self.engine = engine

    def publish(self, weights, version: int) -> None:
        """The trainer's weights of `version` (its step): the engine's model is the trained one."""
        self.engine.update_weights(None, version)

    def close(self) -> None:
        pass
