"""Fault injection into streaming training (`make test-faults`; `make test` leaves them out): a streaming run
(`actor_rollout_ref.rollout.mode=async`, `async_training.staleness_threshold=1`, the hf engine in its `rft serve`
child) SIGKILLed at seeded random moments, in turn the driver alone (its server child must end with it: no orphan
keeps serving), the server child alone (the driver must stop, non-zero, within a bounded time) and the whole
process group, and the same command run again each time until it finishes. With `async_training.deterministic` the
run that finishes exports the uninterrupted run's weights bit for bit; without, it finishes with every group the
checkpoints say were trained trained once, and nothing half-written is left in the buffer or the checkpoints.
tests/test_streaming_training.py stops a run at one chosen place; these kill wherever the clock says."""

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
from test_async_rollout import ASYNC, overrides, weights
from test_modes import ENV, assert_each_read_once, finish, lines
from test_streaming_training import DETERMINISTIC, STREAM, buffer_rows

from rft.buffer import database_url

pytestmark = [pytest.mark.faults, pytest.mark.slow]
STEPS = 4
TARGETS = ("driver", "server", "group")  # what each kill hits, in turn


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    from rl_helpers import make_assets

    return make_assets(tmp_path_factory.mktemp("assets"))


def args(assets: Path, out: Path, *more: str) -> list[str]:
    """test_async_rollout's 4 steps of 4 prompts x 4, streamed, a checkpoint every step."""
    return overrides(assets, out, ASYNC, STREAM, "trainer.save_freq=1", "trainer.logger=[file]", *more)


def start(argv: list[str], cwd: Path) -> subprocess.Popen:
    """`rft train` as the leader of a process group of its own (its server child in it)."""
    return subprocess.Popen([sys.executable, "-m", "rft", "train", *argv], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc; zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            stat = (entry / "stat").read_text()
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) == pid and state != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def trained_steps(out: Path) -> int:
    return len(lines(out / "metrics.jsonl")) if (out / "metrics.jsonl").exists() else 0


def kill_when(proc: subprocess.Popen, out: Path, after: int, seconds: float, target: str) -> bool:
    """SIGKILL `target` `seconds` after the run logged step `after` and its server child is up; False if the run
    finished first. A killed driver's server ends with it (PR_SET_PDEATHSIG), a killed server's driver stops on its
    own with a non-zero exit: both within 120 s."""
    deadline, server = None, None
    while deadline is None or time.monotonic() < deadline:
        if proc.poll() is not None:
            text, _ = proc.communicate()
            assert proc.returncode == 0, f"exited {proc.returncode} before its kill:\n{text}"
            return False
        if deadline is None and trained_steps(out) >= after and (kids := children(proc.pid)):
            server, deadline = kids[0], time.monotonic() + seconds
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):  # it ended this instant
        if target == "group":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(server if target == "server" else proc.pid, signal.SIGKILL)
    text, _ = proc.communicate(timeout=120)
    end = time.monotonic() + 120
    while alive(server) and time.monotonic() < end:
        time.sleep(0.1)
    assert not alive(server), f"the server child {server} outlived its driver ({target} killed):\n{text}"
    if target == "server" and proc.returncode != 0:  # (0: the run had ended as the kill landed)
        assert "rft: error:" in text and "Traceback" not in text, text
    return True


def killed_and_resumed(assets: Path, tmp_path: Path, seed: str, kills: int, *more: str) -> tuple[Path, list[str]]:
    out = tmp_path / "out"
    argv = args(assets, out, *more)
    rng = random.Random(seed)
    killed = []
    for i in range(kills):
        after, seconds, target = min(trained_steps(out) + rng.randint(0, 1), STEPS - 2), rng.uniform(0, 1.5), \
            TARGETS[i % len(TARGETS)]
        if not kill_when(start(argv, tmp_path), out, after, seconds, target):
            break
        killed.append(f"{target} at step {after} + {seconds:.1f} s")
    finish(start(argv, tmp_path))
    print(f"killed: {killed}")
    assert killed, "no kill landed"
    return out, killed


def assert_nothing_half_written(out: Path) -> None:
    """Every step trained once from 4 whole groups of 4, the buffer's rows each read by one step, no temporary
    file left beside the checkpoints and the export."""
    assert [m["step"] for m in lines(out / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), STEPS, 16)
    rows = buffer_rows(out)
    groups: dict[str, list] = {}
    for e in rows:
        groups.setdefault(e.group, []).append(e)
        assert e.versions is not None and len(e.versions) == len(e.response)
        assert int(e.versions.max()) <= e.info["explore_step"] - 1
    assert len(groups) == 4 * STEPS and all(len(g) == 4 for g in groups.values())
    assert not [p for p in out.rglob("*") if p.name.endswith((".tmp", ".partial")) or ".tmp." in p.name]
    assert (out / "checkpoints" / f"global_step_{STEPS}" / "trainer_state.json").exists()


def test_a_deterministic_streaming_run_killed_at_random_moments_ends_with_the_uninterrupted_weights(assets, tmp_path):
    """The driver, its server and both killed in turn, a random 0-1.5 s after a random logged step; the run that
    finishes is bitwise the uninterrupted one."""
    reference = tmp_path / "reference"
    finish(start(args(assets, reference, DETERMINISTIC), tmp_path))
    out, _ = killed_and_resumed(assets, tmp_path, "deterministic-0", 3, DETERMINISTIC)
    assert_nothing_half_written(out)
    assert weights(out) == weights(reference)


def test_a_streaming_run_killed_at_random_moments_resumes_and_trains_each_group_once(assets, tmp_path):
    """Completion order, partial rollouts: weights need not equal an uninterrupted run's, but the run finishes
    and no group is trained twice or lost."""
    out, _ = killed_and_resumed(assets, tmp_path, "completion-0", 2)
    assert_nothing_half_written(out)
