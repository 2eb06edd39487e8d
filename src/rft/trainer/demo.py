"""`rft demo`: the whole job on the embedded default, nothing needed but the package.

Builds the tiny model and the arithmetic task offline, runs GRPO on CPU and reports held-out greedy accuracy
before and after, leaving the model as a Hugging Face folder, the config it used and demo.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rft.config import load_config
from rft.models.tiny import init_model
from rft.tasks import write_arithmetic


def run_demo(output: str | Path, seed: int = 0, steps: int = 20) -> dict:
    start = time.perf_counter()
    out = Path(output)
    model_dir = out / "base_model"
    if not (model_dir / "config.json").is_file():
        init_model("tiny", model_dir, seed=seed)
    data = write_arithmetic(out / "data", n_train=2000, n_val=200, seed=seed, max_digits=2)
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={data['train']}",
        f"data.val_files={data['val']}",
        f"trainer.default_local_dir={out / 'grpo'}",
        f"trainer.total_training_steps={steps}",
        f"trainer.seed={seed}",
        f"data.seed={seed}",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    ]
    example = Path(__file__).resolve().parents[3] / "examples" / "arithmetic_grpo.yaml"
    cfg = load_config(example if example.is_file() else None, overrides)
    from rft.trainer.rl import RLTrainer

    trainer = RLTrainer(cfg)
    before = trainer.validate()
    trainer.fit()
    after = trainer.validate()
    key = "val-core/arithmetic/reward/mean@1"
    result = {"accuracy_before": before[key], "accuracy_after": after[key],
              "seconds": round(time.perf_counter() - start, 1), "steps": steps, "seed": seed,
              "model": str(out / "grpo" / "model")}
    (out / "demo.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"held-out greedy accuracy: {before[key]:.3f} before, {after[key]:.3f} after {steps} GRPO steps "
          f"({result['seconds']} s); model in {result['model']}")
    return result
