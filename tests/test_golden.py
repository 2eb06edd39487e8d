"""The explorer / buffer / trainer split reproduces the synchronous loop it replaced: mode both with
sync_interval 1 and sync_offset 0 reruns the golden 3-step runs of examples/arithmetic_grpo.yaml and
arithmetic_ppo.yaml (recorded by tests/golden/record.py before the split), metrics and weights.

The bounds come from how far another machine's float32 rounding moves these runs, measured with
tests/golden/variation.py (PyTorch's AVX2 and default kernels, MKL's AVX2 path, 2 threads, on the AMD EPYC the goldens
were recorded on, and on an Intel Xeon with AVX-512, where MKL's AVX2 path and 2 threads move grpo most), times ~3:

| quantity | measured at most | bound |
| --- | --- | --- |
| a metric, relative to max(1, its size) | 3.6e-6 (ppo, Xeon) | 1e-5 |
| a sampled weight, absolute | 1.3e-5 (grpo, EPYC), 4.6e-5 (grpo, Xeon) | 1.5e-4 |
| a tensor's sum | 1.3e-4 absolute (EPYC), 3.2e-3 (Xeon: 3.2e-5 of max(100, sum)) | 1e-5 relative + 1e-2 |
| a tensor's sum of squares | 2.9e-6 of the o_proj's 6.6 | 1e-5 relative + 1e-6 |

The weights move most where Adam's step is a sign: an entry whose gradient rounds to either side of 0 moves by
twice the learning rate, so a few such entries move a tensor's sum by 1e-3 while every metric stays within 1e-6.

(The sum of squares of a bias that starts at 0 is ~1e-14 after three steps: only the absolute term means anything
there; a 1e-6 relative bound failed on another machine by 1.23e-6.) A lost step or a changed formula moves far more:
the step's metrics (loss, score, KL) change at the 1e-2 level, 1,000 times their bound, and one Adam step at the
examples' lr moves every weight by ~1e-4 (a 128 x 512 matrix's sum by ~1e-2, its sum of squares by far more than
1e-5 of it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import record


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("golden")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(record.EXAMPLES))
def test_golden_run_is_reproduced(workdir, name):
    golden = json.loads((record.HERE / f"{name}.json").read_text())
    now = record.record(record.run_example(name, workdir), name)
    assert len(now["metrics"]) == len(golden["metrics"]) == 3
    for old, new in zip(golden["metrics"], now["metrics"]):
        missing = set(old) - set(new)
        assert not missing, f"step {old['step']}: metrics no longer logged: {sorted(missing)}"
        for key, value in old.items():
            assert new[key] == pytest.approx(value, rel=1e-5, abs=1e-5), (old["step"], key)
    assert golden["weights"].keys() == now["weights"].keys()
    for part, tensors in golden["weights"].items():
        assert tensors.keys() == now["weights"][part].keys()
        for tensor, fp in tensors.items():
            got = now["weights"][part][tensor]
            assert got["index"] == fp["index"]
            assert max(abs(a - b) for a, b in zip(got["values"], fp["values"])) <= 1.5e-4, (part, tensor)
            assert abs(got["sum"] - fp["sum"]) <= 1e-5 * abs(fp["sum"]) + 1e-2, (part, tensor)
            assert abs(got["sumsq"] - fp["sumsq"]) <= 1e-5 * fp["sumsq"] + 1e-6, (part, tensor)
