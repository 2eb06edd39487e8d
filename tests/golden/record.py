"""Record (or check) the golden 3-step runs of examples/arithmetic_grpo.yaml and arithmetic_ppo.yaml.

The golden files were written by the synchronous one-process loop before the explorer / buffer / trainer split
(issue 12); the split must reproduce them: `tests/test_golden.py` reruns both examples and compares every
non-timing metric and a fingerprint of the final weights (per tensor: float64 sum and sum of squares, and 64
entries at fixed positions) within bounds measured across machines' rounding (tests/golden/variation.py).

    python tests/golden/record.py            # rewrite tests/golden/*.json from the current code
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXAMPLES = {"grpo": "arithmetic_grpo.yaml", "ppo": "arithmetic_ppo.yaml"}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
       "RFT_CPU_PRECISION": "float32"}  # float32 runs: on a CPU that computes bf16 faster `auto` would pick bf16
SAMPLES = 64


def run_example(name: str, workdir: Path, *extra: str) -> Path:
    """Run the example `name` for 3 steps in `workdir` (tiny model and arithmetic data made there first); returns
    the output folder."""
    def rft(*args):
        proc = subprocess.run([sys.executable, "-m", "rft", *args], cwd=workdir, env=ENV, capture_output=True,
                              text=True, timeout=900)
        if proc.returncode:
            raise RuntimeError(f"rft {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    if not (workdir / "m").is_dir():
        rft("init-model", "--preset", "tiny", "m")
        rft("data", "arithmetic", "d")
    out = workdir / f"out_{name}"
    rft("train", str(REPO / "examples" / EXAMPLES[name]), "actor_rollout_ref.model.path=m",
        "data.train_files=d/train.parquet", "data.val_files=d/val.parquet", "trainer.total_training_steps=3",
        "trainer.device=cpu",  # the goldens are CPU float32 runs: a GPU machine's default device is cuda (bf16)
        f"trainer.default_local_dir={out}", *extra)
    return out


def fingerprint(file: Path) -> dict:
    import torch
    from safetensors.torch import load_file

    out = {}
    for name, t in sorted(load_file(file).items()):
        flat = t.detach().double().flatten()
        g = torch.Generator().manual_seed(sum(map(ord, name)))
        index = torch.randint(0, flat.numel(), (min(SAMPLES, flat.numel()),), generator=g)
        out[name] = {"sum": float(flat.sum()), "sumsq": float((flat * flat).sum()), "index": index.tolist(),
                     "values": flat[index].tolist()}
    return out


def metrics_of(out: Path) -> list[dict]:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in line.items() if not k.startswith(("timing_s/", "perf/"))} for line in lines]


def record(out: Path, name: str) -> dict:
    models = {"model": fingerprint(out / "model" / "model.safetensors")}
    if (out / "critic").is_dir():
        models["critic"] = fingerprint(out / "critic" / "model.safetensors")
    return {"example": EXAMPLES[name], "metrics": metrics_of(out), "weights": models}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for name in EXAMPLES:
            result = record(run_example(name, Path(tmp)), name)
            (HERE / f"{name}.json").write_text(json.dumps(result, indent=0) + "\n")
            print(f"{name}: {len(result['metrics'])} steps recorded")
