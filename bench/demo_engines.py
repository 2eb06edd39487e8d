"""The arithmetic demo's GRPO stage on the hf engine and on vLLM, side by side: `rft demo --engine hf|vllm` for each
seed, one run after the other in this venv (vLLM's: run it as `.venv-vllm/bin/python bench/demo_engines.py`, so
both engines see the same transformers and the same SFT model). Reports held-out greedy accuracy after SFT and
after GRPO, the GRPO stage's seconds per step (its `timing_s/step` mean, of it generation `timing_s/gen` and the weight sync
`timing_s/sync`),
and the largest engine / trainer log-prob difference the GRPO stage logged.

    .venv-vllm/bin/python bench/demo_engines.py [--seeds 0] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import mean

from results_md import append_section


def run(engine: str, seed: int, out: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "rft", "demo", "--seed", str(seed), "--engine", engine, "--output",
                    str(out)], check=True, env=env)
    result = json.loads((out / "demo.json").read_text())
    lines = [json.loads(x) for x in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    result["s_per_step"] = mean(x["timing_s/step"] for x in lines)
    result["gen_s_per_step"] = mean(x["timing_s/gen"] for x in lines if "timing_s/gen" in x)
    result["sync_s_per_step"] = mean(x.get("timing_s/sync", 0.0) for x in lines)
    diffs = [x["training/rollout_probs_diff_max"] for x in lines if "training/rollout_probs_diff_max" in x]
    result["probs_diff_max"] = max(diffs) if diffs else None
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rft_demo_engines_") as tmp:
        for seed in args.seeds:
            for engine in ("hf", "vllm"):
                r = run(engine, seed, Path(tmp) / f"{engine}{seed}")
                diff = "n/a" if r["probs_diff_max"] is None else f"{r['probs_diff_max']:.1e}"
                rows.append(f"| {seed} | {engine} | {r['sft_accuracy']:.3f} | {r['rl_accuracy']:.3f} | "
                            f"{r['rl_accuracy'] - r['sft_accuracy']:+.3f} | {r['s_per_step']:.3f} | "
                            f"{r['gen_s_per_step']:.3f} | {r['sync_s_per_step']:.3f} | {diff} | {r['seconds']} |")
                print(rows[-1], flush=True)
    table = ["| seed | engine | SFT | GRPO | lift | GRPO s/step | generation | weight sync | max log-prob diff | demo s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", *rows]
    print("\n".join(table))
    if not args.no_write:
        import torch
        import transformers

        append_section(f"`rft demo --engine hf|vllm`, the GRPO stage on each engine (`bench/demo_engines.py`; "
                       f"{platform.machine()}, nproc {os.cpu_count()}, torch {torch.__version__}, transformers "
                       f"{transformers.__version__})", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
