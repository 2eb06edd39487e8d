"""How far the golden runs move when the float32 rounding is another machine's: both examples rerun under PyTorch's
other CPU kernels (`ATEN_CPU_CAPABILITY=avx2|default`), MKL's AVX2 matmul path and two threads, each compared with
tests/golden/*.json the way tests/test_golden.py compares them. The largest difference of each kind, over every
setting, is what the golden test's bounds are set from (docs in tests/test_golden.py).

    python tests/golden/variation.py         # ~5 minutes on 2 cores
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record

SETTINGS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "avx2+mkl": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "2 threads": {"OMP_NUM_THREADS": "2"},
}


def differences(golden: dict, now: dict) -> dict[str, float]:
    """The largest difference of each kind the golden test bounds: a metric's relative difference (to 1e-6 of
    its size at least), a sampled weight's absolute difference, a tensor's sum and sum of squares relatively."""
    out = {"metric_rel": 0.0, "weight_abs": 0.0, "sum_rel": 0.0, "sumsq_rel": 0.0}
    for old, new in zip(golden["metrics"], now["metrics"]):
        for key, value in old.items():
            if isinstance(value, (int, float)) and key in new:
                scale = max(abs(value), 1.0)
                out["metric_rel"] = max(out["metric_rel"], abs(new[key] - value) / scale)
    for part, tensors in golden["weights"].items():
        for name, fp in tensors.items():
            got = now["weights"][part][name]
            out["weight_abs"] = max(out["weight_abs"], *(abs(a - b) for a, b in zip(got["values"], fp["values"])))
            out["sum_rel"] = max(out["sum_rel"], abs(got["sum"] - fp["sum"]) / max(abs(fp["sum"]), 1e2))
            out["sumsq_rel"] = max(out["sumsq_rel"], abs(got["sumsq"] - fp["sumsq"]) / abs(fp["sumsq"]))
    return out


def main() -> None:
    print("| setting | example | metric (rel) | sampled weight (abs) | tensor sum (rel) | sum of squares (rel) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for setting, env in SETTINGS.items():
        record.ENV = {**record.ENV, **env}
        with tempfile.TemporaryDirectory() as tmp:
            for name in record.EXAMPLES:
                golden = json.loads((record.HERE / f"{name}.json").read_text())
                d = differences(golden, record.record(record.run_example(name, Path(tmp)), name))
                print(f"| {setting} | {name} | {d['metric_rel']:.2e} | {d['weight_abs']:.2e} | {d['sum_rel']:.2e} | "
                      f"{d['sumsq_rel']:.2e} |", flush=True)


if __name__ == "__main__":
    main()
