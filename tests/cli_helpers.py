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
