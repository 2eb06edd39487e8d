"""Helpers of the tests of the SFT loop's trainers (rft sft's SFTTrainer, rft dpo's DPOTrainer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def stop_after_two_steps_then_resume(trainer_cls: type, make: Callable[[], object]) -> None:
    """Steps 1 and 2 of a run (`trainer_cls(make())`), each saved as `fit` saves it, then "killed"; a new trainer on
    the same config resumes the run and finishes it."""
    stopped = trainer_cls(make())
    for step in (1, 2):
        stopped.global_step = step
        stopped.train_step(stopped.next_batch(stopped.sampler.next_batch()))
        stopped.ckpt.save(step, stopped._write_checkpoint)
    trainer_cls(make()).fit()


def max_weight_difference(a: Path, b: Path) -> float:
    """The largest absolute difference between two exported models' weights (model.safetensors in each folder)."""
    from safetensors.torch import load_file

    wa, wb = load_file(Path(a) / "model.safetensors"), load_file(Path(b) / "model.safetensors")
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)
