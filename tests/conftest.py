"""Collection order: the tests marked `longest` run first, so that under `pytest -n 2` (make test) none of them
starts last and runs alone while the other worker idles.

Skips: a test may skip only for a reason in `ALLOWED_SKIPS` (no CUDA device; Chromium and a Java runtime, system
packages that .ci/run installs; torch.compile on a machine without a compiler). Any other skip (a package `make test`'s setup should have
installed, a data folder that is missing) fails the run, so a missing install step cannot hide again."""

from __future__ import annotations

import getpass
import importlib.util
import os
import tempfile
from pathlib import Path

import pytest

if os.environ.get("ATEN_CPU_CAPABILITY"):
    # inductor's on-disk cache is not keyed on ATEN_CPU_CAPABILITY: a run under another capability (the rounding of
    # another machine) reused kernels compiled for this CPU's own and got NaN or a C++ build error. One cache each.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_{os.environ['ATEN_CPU_CAPABILITY']}"))

# Tests stay offline: a model key that reads as a Hugging Face Hub id (org/name) is looked up in the local cache only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The suite computes in float32 whatever a config names (models/precision.py), as on a CPU without fast bf16, so the
# golden files and exact comparisons hold on every machine; tests/test_precision.py sets its own mode per test.
# `make test-bf16` runs the multi-process tests with RFT_TEST_CPU_PRECISION=requested: each config's own precision
# (verl's defaults name bf16), as a user's run computes on a CPU where bf16 is faster.
os.environ["RFT_CPU_PRECISION"] = os.environ.get("RFT_TEST_CPU_PRECISION", "float32")
TEST_PRECISION = os.environ["RFT_CPU_PRECISION"]

ALLOWED_SKIPS = ("needs a CUDA device", "needs Debian's chromium", "needs a Java runtime", "torch.compile does not work here",
                 "CPU processes (gloo)", "on CPU the component's 2 devices are 2 gloo processes",
                 "no valid token drawn")
"""Substrings of the skip reasons that are allowed. The last three: tests of the CPU path skipped on a GPU
machine, and a randomised case whose draw holds nothing to test."""
_unexpected: list[str] = []

HAS_VLLM = importlib.util.find_spec("vllm") is not None
"""tests/with_vllm runs where vLLM is: `make test-vllm` (its own venv; .ci/run runs it after `make test`)."""


def device_header() -> str:
    """The line `make test` opens with: the device the machine offers and what the tests compute on. On a CUDA
    machine the golden runs still compute on the CPU in float32 (tests/golden/record.py names trainer.device=cpu;
    RFT_CPU_PRECISION above), the CUDA-marked tests on the GPU; other runs take the config's device."""
    import torch

    if torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        device = f"cuda ({gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__})"
        rest = "the CUDA-marked tests on cuda, other runs on their config's device (auto: cuda)"
    else:
        device = f"cpu (no CUDA device, torch {torch.__version__})"
        rest = "every run on the CPU; the CUDA-marked tests skip"
    return (f"rft tests: device {device}; CPU runs compute in {TEST_PRECISION} (RFT_CPU_PRECISION); golden runs "
            f"on the CPU in float32, {rest}")


def pytest_sessionstart(session) -> None:
    """`device_header` first, under -q too (make test's), once (not in xdist's workers)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(session.config, "workerinput"):
        reporter.write_line(device_header())


def pytest_ignore_collect(collection_path, config):
    """Leave tests/with_vllm out of a collection of tests/ where vLLM is not installed (make test's venv)."""
    if collection_path == Path(__file__).parent / "with_data_juicer" and not os.environ.get("RFT_DATA_JUICER_PYTHON"):
        return True  # Data-Juicer's environment of its own: make test-data-juicer
    if collection_path == Path(__file__).parent / "with_alfworld" and importlib.util.find_spec("alfworld") is None:
        return True  # ALFWorld's venv of its own (its planner builds from source): make test-alfworld
    if collection_path == Path(__file__).parent / "with_agentscope" and importlib.util.find_spec("agentscope") is None:
        return True  # AgentScope's venv of its own: make test-agentscope
    return True if not HAS_VLLM and collection_path == Path(__file__).parent / "with_vllm" else None


def pytest_runtest_logreport(report) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if not any(allowed in reason for allowed in ALLOWED_SKIPS):
            _unexpected.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter) -> None:
    if _unexpected:
        terminalreporter.section("skips that are not allowed (tests/conftest.py ALLOWED_SKIPS)")
        for line in _unexpected:
            terminalreporter.line(line)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _unexpected and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config, items) -> None:
    items.sort(key=lambda item: item.get_closest_marker("longest") is None)  # stable: the rest keep their order


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    """family -> its tiny vision-language model folder (`rft init-model --family`), built once per module."""
    from rft.models.vision_families import init_vision_model

    root = tmp_path_factory.mktemp("vlm")
    return lambda family: (root / family if (root / family).exists()
                           else init_vision_model(family, root / family, seed=0))
