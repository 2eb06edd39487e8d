"""Rebuilds tests/assets/sloppy_sft.safetensors: the weights of the demo's SFT stage (orchestration/demo.py, seed 0,
its 1600 steps on the teacher who forgets the units carry in 75% of the carrying additions) in bfloat16.

tests/test_dpo.py starts its SFT -> DPO done-when test from these weights instead of spending five to seven
minutes of `make test` on the SFT stage, whose outcome is a lottery the CPU's rounding decides (orchestration/demo.py):
recorded once, the DPO stage starts from a model that learned to add on every machine. The file was written on a
2-core x86-64 machine (AVX2 kernels, one thread): held-out greedy accuracy 0.565 in float32, as recorded below.

    .venv/bin/python tests/assets/make_sloppy_sft.py     # about 6 minutes on one core
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

from rft.models.tiny import init_model
from rft.orchestration import demo
from rft.orchestration.stages import run_stages
from rft.tasks import write_arithmetic
from rft.trainer.stages import build_stages

OUT = Path(__file__).resolve().parent / "sloppy_sft.safetensors"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        init_model("tiny", tmp / "m", seed=0)
        data = write_arithmetic(tmp / "d", n_train=2000, n_val=200, seed=0, max_digits=2,
                                carry_slip=demo.CARRY_SLIP, preferences=True)
        raw = demo.demo_config(tmp / "m", data, tmp / "run", seed=0)
        raw["trainer"]["logger"] = []
        sft = raw["stages"][0]
        sft["trainer"] = {"total_training_steps": demo.SFT_STEPS}  # no checkpoints
        raw["stages"] = [sft]
        (stage,) = build_stages(OmegaConf.create(raw))
        run_stages([stage])
        weights = load_file(stage.model_dir / "model.safetensors")
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}, OUT,
                  metadata={"recipe": "trainer/demo.py SFT stage, seed 0, 1600 steps; tests/assets/make_sloppy_sft.py"})
        print(f"float32 held-out accuracy {demo.held_out_accuracy(stage.model_dir, data['val'], max_tokens=5):.3f}; "
              f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
