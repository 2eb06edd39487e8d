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


PROCESSES_APART = 1e-5
"""How far one process's and two processes' exported weights may end apart in float32 (`max_weight_difference`).
Adam divides each gradient by its own running scale, so where a weight's gradient is near zero the last bit of a
reduction summed in another order moves it by a share of lr (1e-3 in these tests): 2.3e-6 measured for rft rm and
1.1e-6 for mix under ATEN_CPU_CAPABILITY=avx2, under 1e-6 with this CPU's own kernels; a wrong shard or a lost
pair moves weights by ~lr. The metrics are compared to 1e-6."""


def max_weight_difference(a: Path, b: Path) -> float:
    """The largest absolute difference between two exported models' weights (model.safetensors in each folder)."""
    from safetensors.torch import load_file

    wa, wb = load_file(Path(a) / "model.safetensors"), load_file(Path(b) / "model.safetensors")
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)
