"""Explorer and trainer as two processes (1 thread each) against the synchronous one-process loop (2 threads), the
same total steps, on the small preset (issue 12's benchmark).

    python bench/decoupled.py [--preset small|tiny] [--steps N] [--no-write]

Both runs are `rft train` commands on the same model, data and shape (GRPO, 16 prompts x 8 samples, 64 new tokens,
ignore_eos, one optimizer step per batch, no KL term): one with mode both and sync_interval 1 / sync_offset 0 (one
process, explorer and trainer taking turns on 2 threads), one with sync_offset 1 (the explorer one step ahead in a
process of its own, weights over a gloo process group, 1 thread each). The steady-state time per step is taken from
when the trainer's metrics lines appear (steps 2..N: model loading and the first step's start-up are left out);
the whole command's wall time is reported too.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import RESULTS, busy_s, cpu_name, own_cpu_s, wait_idle  # noqa: E402

RESPONSE = {"tiny": 16, "small": 64}


def watch_lines(path: Path, stamps: dict[int, float], stop: threading.Event) -> None:
    """Record when each step's line appears in `path` (metrics.jsonl)."""
    while not stop.is_set():
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    stamps.setdefault(json.loads(line)["step"], time.monotonic())
        time.sleep(0.02)


def run(model: Path, data: Path, out: Path, preset: str, steps: int, offset: int) -> dict:
    args = [f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", "data.max_prompt_length=32",
            f"data.max_response_length={RESPONSE[preset]}", "data.train_batch_size=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.rollout.ignore_eos=true", "actor_rollout_ref.actor.optim.lr=1e-5",
            "trainer.val_before_train=false", f"trainer.total_training_steps={steps}", "trainer.save_freq=-1",
            f"trainer.default_local_dir={out}", "trainer.logger=[]", f"synchronizer.sync_offset={offset}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_NUM_THREADS", None)  # the synchronous run takes every core; the decoupled one halves them itself
    stamps: dict[int, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch_lines, args=(out / "metrics.jsonl", stamps, stop), daemon=True)
    watcher.start()
    busy0, own0, start = busy_s(), own_cpu_s(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rft", "train", *args], env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    stop.set()
    watcher.join()
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"rft train failed (sync_offset={offset}, exit {proc.returncode})")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steady = (stamps[steps] - stamps[1]) / (steps - 1)
    foreign = (busy_s() - busy0 - (own_cpu_s() - own0)) / wall  # children count as foreign: informational
    return {"offset": offset, "wall_s": wall, "steady_s": steady, "score": lines[-1]["critic/score/mean"],
            "staleness": sum(x.get("rollout/staleness/mean", 0.0) for x in lines) / len(lines),
            "cores": foreign}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=("tiny", "small"), default="small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--wait-idle", type=float, default=60.0)
    args = ap.parse_args()
    from transformers.utils import logging as hf_logging

    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    hf_logging.disable_progress_bar()
    machine = f"{cpu_name()}, nproc {os.cpu_count()}, CPU, fp32"
    print(f"rft decoupled bench: {machine}; {args.preset} preset, {args.steps} steps")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rft-decoupled-") as tmp:
        tmp = Path(tmp)
        data = write_arithmetic(tmp / "data", n_train=2000, n_val=10, seed=0)["train"]
        model = init_model(args.preset, tmp / "model", seed=0)
        for offset in (0, 1):
            wait_idle(args.wait_idle)
            r = run(model, data, tmp / f"out{offset}", args.preset, args.steps, offset)
            rows.append(r)
            print(f"  sync_offset={offset}: {r['steady_s']:.2f} s/step steady, {r['wall_s']:.1f} s wall", flush=True)
    sync, ahead = rows
    table = "\n".join([
        "| layout | threads | steady s/step | wall s (whole command) | mean staleness | score at the end |",
        "|---|---|---|---|---|---|",
        f"| one process (mode both, sync_offset 0) | 2 | {sync['steady_s']:.2f} | {sync['wall_s']:.1f} | "
        f"{sync['staleness']:.2f} | {sync['score']:.3f} |",
        f"| explorer + trainer processes (sync_offset 1, nccl/gloo) | 1 + 1 | {ahead['steady_s']:.2f} | "
        f"{ahead['wall_s']:.1f} | {ahead['staleness']:.2f} | {ahead['score']:.3f} |",
        "",
        f"Decoupled / synchronous steady time per step: {ahead['steady_s'] / sync['steady_s']:.2f} "
        f"({sync['steady_s'] / ahead['steady_s']:.2f}x); whole command {ahead['wall_s'] / sync['wall_s']:.2f}. "
        f"Shape: {args.preset} preset, GRPO 16 prompts x 8, {RESPONSE[args.preset]} new tokens (ignore_eos), "
        f"{args.steps} steps, no KL, one optimizer step per batch. Steady s/step: from the first trainer step's "
        "metrics line to the last, over the steps between.",
    ])
    print()
    print(table)
    if not args.no_write:
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        existing = RESULTS.read_text()
        RESULTS.write_text(existing.rstrip("\n") + f"\n\n## {stamp} — explorer and trainer apart (bench/decoupled.py)"
                           f" — {machine}\n\n" + table + "\n")
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
