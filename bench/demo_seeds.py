"""The demo's bar, checked for seeds 0, 1 and 2: `rft demo --seed N` must lift held-out greedy accuracy over the SFT
model by at least 15 points within 5 minutes on this machine (the arithmetic task), and `rft demo --task tools` by
at least 20 points within 6 minutes (the calculator task, multi-turn through the tool workflow).

    python bench/demo_seeds.py [--task arithmetic|tools] [--seeds 0 1 2] [--output DIR] [--no-write]

Each seed runs `rft demo` in its own child process (as `make demo` does, with the machine's default threads), one
after the other so their timings do not disturb each other. Prints one line per seed, appends a table to
bench/RESULTS.md (unless --no-write) and exits 1 if any seed misses the accuracy or the time bar.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
BARS = {"arithmetic": (0.15, 300.0), "tools": (0.20, 360.0)}  # (least lift, most seconds) per task


def run_seed(seed: int, out: Path, task: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "rft", "demo", "--task", task, "--seed", str(seed), "--output", str(out)],
                   check=True, env=env)
    return json.loads((out / "demo.json").read_text())


def verdict(result: dict, task: str) -> list[str]:
    """The bars a demo result misses (empty when it holds them all)."""
    min_lift, max_seconds = BARS[task]
    misses = []
    lift = result["rl_accuracy"] - result["sft_accuracy"]
    if lift < min_lift:
        misses.append(f"lift {lift:+.3f} < {min_lift}")
    if result["seconds"] > max_seconds:
        misses.append(f"{result['seconds']} s > {max_seconds:.0f} s")
    return misses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(BARS), default="arithmetic")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--output", help="keep each seed's run under DIR/seedN (default: a temporary folder)")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rft_demo_seeds_") as tmp:
        root = Path(args.output or tmp)
        rows = []
        for seed in args.seeds:
            result = run_seed(seed, root / f"seed{seed}", args.task)
            misses = verdict(result, args.task)
            rows.append((seed, result, misses))
            print(f"demo seed {seed}: sft {result['sft_accuracy']:.3f} -> grpo {result['rl_accuracy']:.3f} "
                  f"({result['rl_accuracy'] - result['sft_accuracy']:+.3f}) in {result['seconds']} s"
                  f"{'  MISSES: ' + '; '.join(misses) if misses else ''}", flush=True)

    if not args.no_write:
        import torch

        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        min_lift, max_seconds = BARS[args.task]
        lines = [f"\n## {stamp} — `rft demo --task {args.task}` for seeds {', '.join(map(str, args.seeds))} "
                 f"({platform.processor() or platform.machine()}, nproc {os.cpu_count()}, torch {torch.__version__})\n",
                 f"| seed | SFT accuracy | GRPO accuracy | lift | seconds | bar (lift >= {min_lift}, "
                 f"<= {max_seconds:.0f} s) |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for seed, r, misses in rows:
            lines.append(f"| {seed} | {r['sft_accuracy']:.3f} | {r['rl_accuracy']:.3f} | "
                         f"{r['rl_accuracy'] - r['sft_accuracy']:+.3f} | {r['seconds']} | "
                         f"{'held' if not misses else 'MISSED: ' + '; '.join(misses)} |")
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if any(misses for _, _, misses in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
