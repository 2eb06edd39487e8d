"""The explorer: tasks in, experiences out (generation with a rollout engine, rewards, validation)."""

from rft.explorer.explorer import Explorer, load_prompts, load_tasksets

__all__ = ["Explorer", "load_prompts", "load_tasksets"]
