"""`rft` commands run in the test's own process."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
from pathlib import Path


def rft_here(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """`rft <args>` from the folder `cwd`, run by the command line's own entry point (`rft.cli.main`) in this
    process, as `subprocess.run([sys.executable, "-m", "rft", *args])` would run it but without starting an
    interpreter that imports torch and transformers again: about 10 s of CPU a command on the 2-core machine,
    most of what a short run costs. For single-process commands whose exit status, output and files are what the
    test reads; tests of processes, signals and kills start real ones (and `test_cli.py` runs `python -m rft`
    end to end). `check`: assert exit status 0."""
    from rft.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    proc = subprocess.CompletedProcess(["rft", *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"rft {' '.join(args)} exited {code}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def one_and_two_processes(command: str, args: list[str], tmp_path: Path) -> tuple[dict, dict]:
    """`rft <command> <args>` in this process into `tmp_path/one` and on two processes (trainer.n_gpus_per_node=2,
    real ones) into `tmp_path/two`: each run's metrics.jsonl records by step."""
    import json
    import sys

    from test_distributed import ENV

    rft_here(command, *args, f"trainer.default_local_dir={tmp_path / 'one'}", cwd=tmp_path)
    two = subprocess.run([sys.executable, "-m", "rft", command, *args, f"trainer.default_local_dir={tmp_path / 'two'}",
                          "trainer.n_gpus_per_node=2"], env=ENV, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-4000:]
    assert "2 steps on 2 processes" in two.stdout
    return tuple({x["step"]: x for x in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())}
                 for run in ("one", "two"))


def sigterm_after_checkpoint(monkeypatch, step: int) -> None:
    """A SIGTERM to this process as soon as checkpoint `step` is whole: a run in this process (`rft_here`, `main`)
    stops before its next phase, as a `kill` after that checkpoint stops it, at a moment the test names (a real
    kill races the steps after it). `monkeypatch.undo()` ends it."""
    from rft.trainer.checkpoint import CheckpointManager

    save = CheckpointManager.save

    def save_then_stop(self, n, write, *args, **kwargs):
        folder = save(self, n, write, *args, **kwargs)
        if n == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return folder

    monkeypatch.setattr(CheckpointManager, "save", save_then_stop)
