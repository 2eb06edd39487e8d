"""`rft demo`: the whole job on the embedded default, nothing needed but the package.

Builds the tiny model and the arithmetic task offline, writes the staged config it runs (an SFT warm-up, then
GRPO), runs it on CPU and prints held-out greedy accuracy after each stage. The SFT demonstrations come from a
sloppy teacher who forgets the carry out of the units digit in CARRY_SLIP of the additions that need one, so SFT
learns to add but copies the slips; GRPO, rewarded by the exact answer, then goes beyond its teacher. Leaves, under the output folder:
`config.yaml` (rerun or edit it with `rft train`), `sft/` and `grpo/` (metrics, checkpoints, models),
`demo.json` (`sft_accuracy`, `rl_accuracy`, `seconds`) and `curves.png`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from rft.fsutil import write_text_atomic
from rft.models.tiny import init_model
from rft.tasks import write_arithmetic

METRIC = "val-core/arithmetic/reward/mean@1"

# The demo's task and hyperparameters, tuned so GRPO lifts greedy accuracy well above the SFT model within minutes
# on 2 CPU cores (bench/RESULTS.md has the measurements behind them).
CARRY_SLIP = 0.75
SFT_STEPS, SFT_LR, SFT_BATCH, SFT_WARMUP = 1200, 3.0e-3, 64, 0.05
RL_STEPS, RL_LR, TEST_FREQ = 300, 1.0e-4, 50


def demo_config(model: Path, data: dict[str, Path], out: Path, seed: int) -> dict:
    """The staged config `rft demo` runs (verl keys plus Trinity-style stages)."""
    return {
        "data": {"train_files": str(data["train"]), "val_files": str(data["val"]), "max_prompt_length": 32,
                 "max_response_length": 5, "train_batch_size": 16, "seed": seed},
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "actor": {"ppo_mini_batch_size": 16, "optim": {"lr": RL_LR, "weight_decay": 0.0}},
            "rollout": {"n": 8, "temperature": 1.0, "dtype": "float32"},
        },
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"project_name": "rft_demo", "experiment_name": f"seed{seed}", "default_local_dir": str(out),
                    "seed": seed, "val_before_train": False, "test_freq": TEST_FREQ, "save_freq": 100,
                    "max_actor_ckpt_to_keep": 1, "log_val_generations": 4},
        "stages": [
            {"stage_name": "sft", "algorithm": "sft",
             "data": {"train_files": str(data["train"]), "response_key": "extra_info",
                      "response_dict_keys": ["demonstration"], "train_batch_size": SFT_BATCH,
                      "micro_batch_size_per_gpu": SFT_BATCH, "max_length": 32},
             "optim": {"lr": SFT_LR, "weight_decay": 0.0, "warmup_steps_ratio": SFT_WARMUP},
             "trainer": {"total_training_steps": SFT_STEPS, "save_freq": 200, "max_ckpt_to_keep": 1}},
            {"stage_name": "grpo", "algorithm": {"adv_estimator": "grpo"},
             "trainer": {"total_training_steps": RL_STEPS, "val_before_train": True}},
        ],
    }


def held_out_accuracy(model_dir: Path, val_file: Path, max_tokens: int) -> float:
    """Greedy accuracy of the model in `model_dir` on every validation prompt."""
    from rft.data.dataset import PromptDataset
    from rft.explorer.evaluate import eos_token_ids, evaluate
    from rft.models.load import load_causal_lm, load_tokenizer
    from rft.rewards import default_compute_score
    from rft.rollout import HFRollout, SamplingParams

    tokenizer = load_tokenizer(str(model_dir))
    model = load_causal_lm(str(model_dir), torch.float32, torch.device("cpu"))
    rollout = HFRollout(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id)
    params = SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=max_tokens)
    metrics, _ = evaluate(rollout, tokenizer, PromptDataset(val_file, tokenizer), default_compute_score, params)
    return metrics[METRIC]


def run_demo(output: str | Path, seed: int = 0) -> dict:
    from rft.monitor.plots import plot_curves
    from rft.runtime import configure_cpu_runtime
    from rft.trainer.stages import build_stages, run_stages

    start = time.perf_counter()
    configure_cpu_runtime()
    out = Path(output)
    model_dir = out / "base_model"
    if not (model_dir / "config.json").is_file():
        init_model("tiny", model_dir, seed=seed)
    data = write_arithmetic(out / "data", n_train=2000, n_val=200, seed=seed, max_digits=2, carry_slip=CARRY_SLIP)
    config_path = out / "config.yaml"
    write_text_atomic(config_path, OmegaConf.to_yaml(OmegaConf.create(demo_config(model_dir, data, out, seed))))
    print(f"rft demo: tiny model ({model_dir}), arithmetic task ({data['train'].parent}), config {config_path}")
    print(f"rft demo: SFT copies a teacher who forgets the units carry in {CARRY_SLIP:.0%} of carrying additions; "
          "GRPO is rewarded by the exact answer")

    accuracy: dict[str, float] = {}

    def report(stage) -> None:
        accuracy[stage.name] = held_out_accuracy(stage.model_dir, data["val"], max_tokens=5)
        print(f"rft demo: held-out greedy accuracy after {stage.name}: {accuracy[stage.name]:.3f}", flush=True)

    stages = build_stages(OmegaConf.load(config_path))
    final = run_stages(stages, after_stage=report)
    plot_curves([(s.name, s.out) for s in stages], out / "curves.png", title=f"rft demo (seed {seed})")
    result = {"sft_accuracy": accuracy["sft"], "rl_accuracy": accuracy["grpo"],
              "seconds": round(time.perf_counter() - start, 1), "seed": seed, "model": str(final),
              "config": str(config_path), "curves": str(out / "curves.png")}
    write_text_atomic(out / "demo.json", json.dumps(result, indent=1) + "\n")
    print(f"rft demo: accuracy {result['sft_accuracy']:.3f} after SFT -> {result['rl_accuracy']:.3f} after GRPO "
          f"({result['rl_accuracy'] - result['sft_accuracy']:+.3f}) in {result['seconds']} s; model in {final}, "
          f"curves in {out / 'curves.png'}")
    return result
