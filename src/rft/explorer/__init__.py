"""The explorer: tasks in, experiences out (generation with a rollout engine, rewards, validation)."""

from rft.explorer.explorer import Explorer, load_prompts, load_tasksets, load_val_prompts

__all__ = ["Explorer", "load_prompts", "load_tasksets", "load_val_prompts"]
