"""rft at real sizes on this machine: peak resident memory and time of runs on models of released checkpoints'
shapes (random weights, rft's tiny tokenizer: `bench.real_size_model`), as a user runs them (`rft train` /
`rft sft`, one process, CPU, fp32), each under `/usr/bin/time -v` (its "Maximum resident set size").

    python bench/real_sizes.py [--runs grpo-1k,sft,lora-1.5b] [--no-write]

Runs:
  grpo-1k    Qwen2.5-0.5B's shape, GRPO 4 prompts x 4 samples, 1,024 new tokens (ignore_eos), 1 step, one row per
             micro-batch with gradient checkpointing            goal: fits in 24 GB
  sft        Qwen2.5-0.5B's shape, SFT on GSM8K (../shared/data/gsm8k), 8 rows a step of at most 2,048 tokens (the
             tiny tokenizer spells most characters alone: a row is ~500-1,500 tokens), one per micro-batch, 2 steps
  lora-1.5b  Qwen2.5-1.5B's shape with a LoRA adapter (rank 32, all linear layers), GRPO 4 x 4, 64 new tokens,
             2 steps; the full fine-tune of this model is refused before it loads (its weights, gradients and Adam
             state need ~23 GiB: the check `workers.memory`), which the run first shows
The 64-token 0.5B GRPO run is side by side with TRL's GRPOTrainer in bench/vs_trl.py (workload Q05).

Beside each run's peak: its parameters' own bytes (float32 weights, and for a full fine-tune the gradients and
AdamW's two moments: 16 bytes a parameter), and the rest (activations, the KV cache, the allocator's slack).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k"
RFT = [sys.executable, "-m", "rft"]

GRPO = ["data.max_prompt_length=64", "data.train_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.optim.lr=1e-5", "algorithm.adv_estimator=grpo", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.resume_mode=disable", "trainer.device=cpu",
        "trainer.logger=[console]"]
RUNS = {
    "grpo-1k": dict(preset="qwen2.5-0.5b", command="train", keys=[
        *GRPO, "data.max_response_length=1024", "actor_rollout_ref.rollout.ignore_eos=true",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true", "trainer.total_training_steps=1"]),
    "sft": dict(preset="qwen2.5-0.5b", command="sft", keys=[
        "data.prompt_key=prompt", "data.response_key=extra_info", "data.response_dict_keys=[answer]",
        "data.train_batch_size=8", "data.micro_batch_size_per_gpu=1", "data.max_length=2048",
        "data.truncation=right", "optim.lr=1e-5", "trainer.total_training_steps=2", "trainer.logger=[console]",
        "trainer.device=cpu"]),
    "lora-1.5b": dict(preset="qwen2.5-1.5b", command="train", lora=True, keys=[
        *GRPO, "data.max_response_length=64", "actor_rollout_ref.model.lora_rank=32",
        "actor_rollout_ref.model.lora_alpha=32", "actor_rollout_ref.model.target_modules=all-linear",
        "actor_rollout_ref.actor.optim.lr=1e-4", "trainer.total_training_steps=2"]),
}


def timed(cmd: list[str], env: dict) -> tuple[int, float, int, str]:
    """(exit code, seconds, peak RSS bytes, output) of `cmd` under /usr/bin/time -v."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    return proc.returncode, seconds, int(peak.group(1)) * 1024 if peak else 0, proc.stdout + proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    wanted = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = set(wanted) - set(RUNS)
    if unknown:
        ap.error(f"--runs: no run {', '.join(sorted(unknown))} (the runs: {', '.join(RUNS)})")

    sys.path.insert(0, str(HERE))
    from bench import SHAPED_REWARD, append_results, cpu_name, real_size_model
    from rft.models.checks import saved_parameters
    from rft.tasks import convert_gsm8k, write_arithmetic

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    lines = []
    with tempfile.TemporaryDirectory(prefix="rft-real-sizes-") as tmp:
        tmp = Path(tmp)
        arithmetic = write_arithmetic(tmp / "arithmetic", n_train=200, n_val=10, seed=0)["train"]
        gsm8k = convert_gsm8k(GSM8K, tmp / "gsm8k")["train"]
        reward = tmp / "reward_shaped.py"  # the benchmarks' reward: every group's responses differ
        reward.write_text(SHAPED_REWARD)
        for name in wanted:
            run = RUNS[name]
            model = tmp / run["preset"]
            if not model.exists():
                real_size_model(run["preset"], model)
            params = saved_parameters(str(model))
            keys = [f"trainer.default_local_dir={tmp / name}", *run["keys"]]
            if run["command"] == "train":
                keys += [f"actor_rollout_ref.model.path={model}", f"data.train_files={arithmetic}",
                         f"custom_reward_function.path={reward}"]
            else:
                keys += [f"model.partial_pretrain={model}", f"data.train_files={gsm8k}"]
            if name == "lora-1.5b":  # the full fine-tune first: refused before it loads, in one line
                full = [k for k in keys if not k.startswith("actor_rollout_ref.model.lora")]
                code, seconds, peak, out = timed([*RFT, run["command"], *full], env)
                refusal = next((x for x in out.splitlines() if x.startswith("rft: error:")), out[-300:])
                print(f"{name} without LoRA: exit {code} in {seconds:.1f} s, peak {peak / 2**30:.2f} GiB: {refusal}",
                      flush=True)
                lines.append(f"- {run['preset']} trained in full: exit {code} after {seconds:.1f} s (peak RSS "
                             f"{peak / 2**30:.2f} GiB), `{refusal}`")
            code, seconds, peak, out = timed([*RFT, run["command"], *keys], env)
            if code != 0:
                sys.stderr.write(out[-6000:])
                raise SystemExit(f"{name}: exit {code}")
            trained = 0 if run.get("lora") else params
            own = 4 * params + 12 * trained
            step_s = [json.loads(x).get("timing_s/step") for x in (tmp / name / "metrics.jsonl").read_text()
                      .splitlines()] if (tmp / name / "metrics.jsonl").exists() else []
            step_s = [s for s in step_s if s is not None]
            print(f"{name}: {params:,} parameters, peak RSS {peak / 2**30:.2f} GiB (weights"
                  f"{', gradients and AdamW state' if trained else ''} {own / 2**30:.2f} GiB, the rest "
                  f"{(peak - own) / 2**30:.2f} GiB), {seconds:.0f} s in all, s/step {step_s}", flush=True)
            lines.append(f"- {name} ({run['preset']}, {params:,} parameters; `{' '.join(run['keys'])}`): peak RSS "
                         f"**{peak / 2**30:.2f} GiB**; the parameters' own bytes {own / 2**30:.2f} GiB (float32 "
                         f"weights{', gradients and AdamW moments' if trained else ''}), the rest "
                         f"{(peak - own) / 2**30:.2f} GiB; {seconds:.0f} s for the whole command, s/step "
                         f"{', '.join(f'{s:.1f}' for s in step_s) or '-'}")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        append_results(f"real sizes (`bench/real_sizes.py`); {os.uname().nodename}: {cpu_name()}, nproc "
                       f"{os.cpu_count()}, CPU, fp32, one process", text)


if __name__ == "__main__":
    main()
