"""Fault injection at random moments (`make test-faults`, run by .ci/run; `make test` leaves them out): a run of
several processes is killed whole, as a machine going down, at seeded random times, again and again, and the same
command run again each time; the run that finally finishes must be the uninterrupted one: every experience read
once, the same metrics step by step and the same final weights (1e-6). The scenarios are the subsystems whose
state spans processes: several explorers taking turns on one buffer (sync files), the trainer keeping the
versions its explorer resumes with (weights over a process group, sync_offset 1), and two trainer processes
(FSDP over gloo) beside their explorer. tests/test_modes.py kills each
at one chosen place; these kill wherever the clock says."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_modes import (
    ENV,
    TWO_TRAINERS,
    assert_each_read_once,
    assert_same_training,
    finish,
    lines,
    overrides,
)

from rft.buffer import database_url

pytestmark = [pytest.mark.faults, pytest.mark.slow]
KILLS = 4


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    from rl_helpers import make_assets

    return make_assets(tmp_path_factory.mktemp("assets"))


SCENARIOS = {
    "two_explorers": ("synchronizer.sync_interval=2", "trainer.explorer_num=2"),
    "kept_versions": ("synchronizer.sync_method=nccl", "synchronizer.sync_offset=1"),
    "two_trainer_processes": (*TWO_TRAINERS, "synchronizer.sync_offset=1"),
}


def start_session(args: list[str], cwd: Path) -> subprocess.Popen:
    """`rft train <args>` as the leader of a process group of its own (its explorer children in it)."""
    return subprocess.Popen([sys.executable, "-m", "rft", "train", *args], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def trained_steps(out: Path) -> int:
    return len(lines(out / "metrics.jsonl")) if (out / "metrics.jsonl").exists() else 0


def kill_group_when(proc: subprocess.Popen, ready, seconds: float) -> bool:
    """SIGKILL `proc` and every process of its group `seconds` after `ready()` holds; False if it finished before
    (exit 0, or the test fails with its output)."""
    deadline = None
    while deadline is None or time.monotonic() < deadline:
        if proc.poll() is not None:
            out, _ = proc.communicate()
            assert proc.returncode == 0, f"exited {proc.returncode} before its kill:\n{out}"
            return False
        if deadline is None and ready():
            deadline = time.monotonic() + seconds
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):  # the group ended this instant
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    return True


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_run_killed_whole_at_random_moments_ends_as_the_uninterrupted_one(assets, tmp_path, scenario):
    """Each kill lands a random 0-1 s after the trainer logged a random step up to 2 of 4 (0: while the processes
    start), the moment tied to the run's progress rather than to a clock the machine's load stretches (a step takes
    about a second here: with up to 3 s after step 3, a quiet machine's run had ended before its kill)."""
    extra = SCENARIOS[scenario]
    reference = tmp_path / "reference"
    finish(start_session(overrides(assets, reference, 4, *extra), tmp_path))
    out = tmp_path / "out"
    args = overrides(assets, out, 4, *extra)
    rng = random.Random(f"{scenario}-0")
    killed = []
    for _ in range(KILLS):
        after, seconds = min(trained_steps(out) + rng.randint(0, 1), 2), rng.uniform(0.0, 1.0)
        if not kill_group_when(start_session(args, tmp_path), lambda after=after: trained_steps(out) >= after, seconds):
            break
        killed.append(f"step {after} + {seconds:.1f} s")
    log = finish(start_session(args, tmp_path))
    assert killed, "no kill landed"
    print(f"{scenario}: killed at {killed}")
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert_same_training(out, reference)
    assert [x["step"] for x in lines(out / "metrics.jsonl")] == [1, 2, 3, 4], (killed, log)
