"""Ready for a GPU (issue 66): `make gpu-check`'s script (bench/gpu_check.sh) dry-runs its stages on a machine
without CUDA, so CI keeps it working for the first GPU at hand; and `make test` says which device and precision it
computes in, the golden runs staying CPU float32 runs on a GPU machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
STAGES = ["env", "install", "data", "bf16", "resume", "cpu_resume", "fsdp2", "fsdp2_resume", "gputests", "compile",
          "q05", "q05c", "fsdp2_offload", "both", "refuse2"]
GPU_ONLY = ["compile", "q05c", "refuse2"]
"""Left out of the CPU's dry run: the compiled paths (inductor compiles for minutes on a loaded CPU; the heavy compile
tests cover it there) and two processes on one GPU."""


@pytest.mark.heavy  # 4-20 minutes on 2 cores (load 2-20): make test-heavy
@pytest.mark.timeout(3600)
def test_gpu_check_dry_runs_every_stage_green_without_cuda(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT", "STAGES")}
    env.update(GPUCHECK_DIR=str(tmp_path / "w"), OUT=str(tmp_path / "out"), PY=sys.executable, OMP_NUM_THREADS="1",
               SCALE="6", BUDGET="3600")
    proc = subprocess.run(["bash", str(REPO / "bench" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=3600)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = dict(re.findall(r"^(\S+)\s+(rc=\d+|SKIPPED)", summary, re.M))
    gpu = torch.cuda.is_available()
    assert list(stages) == [name for name in STAGES if gpu or name not in GPU_ONLY], summary
    if not gpu:
        assert re.findall(r"^(\S+)\s+left out of the CPU dry run$", summary, re.M) == GPU_ONLY, summary
    red = {name: said for name, said in stages.items() if said != "rc=0" and name != "refuse2"}
    assert not red, f"{red}\n{summary}\n{(tmp_path / 'out' / 'all.log').read_text()[-6000:]}"
    # the sharded stages ran rft's own one-process FSDP (no patch): DCP checkpoints, resumed
    sharded = tmp_path / "w" / "fsdp2" / "checkpoints"
    assert (sharded / "global_step_3" / "policy_dcp" / ".metadata").is_file()
    assert "resumed from" in (tmp_path / "w" / "fsdp2_resume.log").read_text()


def test_make_test_states_its_device_and_precision(monkeypatch):
    import conftest

    line = conftest.device_header()
    if not torch.cuda.is_available():
        assert line.startswith(f"rft tests: device cpu (no CUDA device, torch {torch.__version__}); CPU runs "
                               f"compute in {conftest.TEST_PRECISION}"), line
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    line = conftest.device_header()
    assert line.startswith("rft tests: device cuda (1 x NVIDIA H200, torch "), line
    assert "golden runs on the CPU in float32" in line and "the CUDA-marked tests on cuda" in line, line


def test_make_test_prints_the_line_first_under_q():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_gpu_check.py",
                           "-k", "no_test_has_this_name"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.stdout.splitlines()[0].startswith("rft tests: device "), proc.stdout


def test_the_golden_runs_compute_on_the_cpu_in_float32():
    """On a GPU machine the golden runs stay CPU float32 runs: their command names trainer.device=cpu, and the suite
    computes CPU runs in float32 (conftest; make test-bf16 leaves the golden tests out)."""
    assert "\"trainer.device=cpu\"," in (REPO / "tests" / "golden" / "record.py").read_text()
    assert os.environ["RFT_CPU_PRECISION"] == "float32"
