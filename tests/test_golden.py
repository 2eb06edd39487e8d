"""The explorer / buffer / trainer split reproduces the synchronous loop it replaced: mode both with
sync_interval 1 and sync_offset 0 reruns the golden 3-step runs of examples/arithmetic_grpo.yaml and
arithmetic_ppo.yaml (recorded by tests/golden/record.py before the split) to 1e-6, metrics and weights."""

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
            assert new[key] == pytest.approx(value, rel=1e-6, abs=1e-6), (old["step"], key)
    assert golden["weights"].keys() == now["weights"].keys()
    for part, tensors in golden["weights"].items():
        assert tensors.keys() == now["weights"][part].keys()
        for tensor, fp in tensors.items():
            got = now["weights"][part][tensor]
            assert got["index"] == fp["index"]
            assert max(abs(a - b) for a, b in zip(got["values"], fp["values"])) <= 1e-6, (part, tensor)
            assert got["sum"] == pytest.approx(fp["sum"], rel=1e-6, abs=1e-4), (part, tensor)
            assert got["sumsq"] == pytest.approx(fp["sumsq"], rel=1e-6), (part, tensor)
