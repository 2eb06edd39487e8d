"""The explorer: tasks in, experiences out (generation with a rollout engine, rewards, validation)."""

from rft.explorer.explorer import Explorer, load_taskset

__all__ = ["Explorer", "load_taskset"]
