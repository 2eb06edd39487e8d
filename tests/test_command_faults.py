"""Faults in the commands other than `rft train` (tests/test_robustness.py has train's): a full disk, a stop by
Ctrl-C / SIGTERM and a kill in `rft init-model`, `rft generate` and `rft merge`, each in a real process: one line
`rft: error: ...` (or `rft: stopped ...`) that says what the same command does next, and no output or temporary
file left half written."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.data.io import read_rows, write_parquet
from rft.models.tiny import init_model

pytestmark = pytest.mark.slow
STARTS_AGAIN = "the same command starts again (it has nothing to resume)"  # rft.errors.STARTS_AGAIN, as printed
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def rft(*args: str, cwd: Path, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """`rft <args>` in a process of its own; `limit_bytes`: no file it writes may grow past it (RLIMIT_FSIZE, a
    full disk as a process sees it)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    # no .pyc written under the limit: CPython would write a truncated one (a short write it does not check)
    env = {**ENV, "PYTHONDONTWRITEBYTECODE": "1"} if limit_bytes else ENV
    return subprocess.run([sys.executable, "-m", "rft", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit if limit_bytes else None)


def only_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_full_disk_in_init_model_and_generate_is_one_line_naming_the_output(tmp_path):
    """init-model's safetensors writer hides the errno: the line called it a bug in rft. generate's parquet
    writer names no file: the line said 'while writing a file'. Both said a run's checkpoint would be resumed."""
    proc = rft("init-model", "m", cwd=tmp_path, limit_bytes=100_000)  # model.safetensors is ~4 MB
    assert proc.returncode == 2
    assert only_line(proc.stderr) == (
        "rft: error: file too large for this file system or process limit while writing 'm': free space on that file "
        f"system (or raise the limit); files rft writes are whole or absent, and {STARTS_AGAIN}")
    assert sorted(p.name for p in tmp_path.iterdir()) == []

    init_model("tiny", tmp_path / "m")
    prompts = write_parquet([{"prompt": [{"role": "user", "content": f"{i}+1="}]} for i in range(8)],
                            tmp_path / "prompts.parquet")
    proc = rft("generate", f"data.path={prompts}", "model.path=m", "data.output_path=out/responses.parquet",
               "data.n_samples=64", "rollout.response_length=16", "rollout.prompt_length=32", cwd=tmp_path,
               limit_bytes=4096)
    assert proc.returncode == 2, proc.stderr
    assert only_line(proc.stderr) == (
        "rft: error: file too large for this file system or process limit while writing 'out/responses.parquet': "
        f"free space on that file system (or raise the limit); files rft writes are whole or absent, and "
        f"{STARTS_AGAIN}")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_stopped_generate_says_it_starts_again_and_leaves_no_output(tmp_path):
    """Ctrl-C in rft generate (which holds no run) said the same command resumes from the run's last checkpoint."""
    init_model("tiny", tmp_path / "m")
    prompts = write_parquet([{"prompt": [{"role": "user", "content": f"{i}+1="}]} for i in range(400)],
                            tmp_path / "prompts.parquet")
    proc = subprocess.Popen([sys.executable, "-m", "rft", "generate", f"data.path={prompts}", "model.path=m",
                             "data.output_path=out/responses.parquet", "data.batch_size=4", "data.n_samples=2",
                             "rollout.response_length=8", "rollout.prompt_length=32"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(2000):  # its first progress line: generation has started
        if proc.stdout.readline().startswith("rft generate: 4/400 prompts"):
            break
        assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert only_line(err) == f"rft: stopped by SIGINT; files rft writes are whole or absent, so {STARTS_AGAIN}"
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def _generating(args: list[str], cwd: Path) -> subprocess.Popen:
    """`rft generate <args>` started, returned once it printed its first progress line (it holds its output)."""
    proc = subprocess.Popen([sys.executable, "-m", "rft", "generate", *args], cwd=cwd, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(2000):
        if proc.stdout.readline().startswith("rft generate: 4/"):
            return proc
        assert proc.poll() is None, proc.communicate()
    raise AssertionError("no progress line")


def test_a_second_generate_into_one_output_is_refused_and_a_killed_ones_leftovers_do_not_block(tmp_path):
    """Two rft generate into one output file at once both exited 0 and said they had written it; the file held
    the last one's rows. The first now holds the output (`.responses.parquet.lock` beside it, naming its pid:
    fsutil.sole_writer) from its check to its rename: the second is one line naming the output and the first's
    pid, exit 2, and writes nothing; the file holds the first's responses. A generate killed mid-run leaves its
    lock file (no process holds it) and a killed write's temporary files: the rerun is not blocked, removes them
    with a note each, and writes the output."""
    from rft.offline.generate import recorded_inputs

    init_model("tiny", tmp_path / "m")
    prompts = write_parquet([{"prompt": [{"role": "user", "content": f"{i}+1="}]} for i in range(40)],
                            tmp_path / "prompts.parquet")
    args = [f"data.path={prompts}", "model.path=m", "data.output_path=out/responses.parquet", "data.batch_size=4",
            "data.n_samples=2", "rollout.response_length=8", "rollout.prompt_length=32"]
    first = _generating(args, tmp_path)
    first.send_signal(signal.SIGSTOP)  # still generating while the second runs, however fast the machine
    try:
        second = rft("generate", *args, "trainer.seed=1", cwd=tmp_path)
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 2 and only_line(second.stderr).startswith(
        f"rft: error: rft generate: another process is writing 'out/responses.parquet' now (pid {first.pid} on "), \
        second.stderr
    assert only_line(second.stderr).endswith(
        "the same command twice at once: the last to end would replace the first one's output); wait for it to "
        "end, or name another data.output_path"), second.stderr
    assert "rft generate: 40 prompts x 2 responses" not in second.stdout
    assert recorded_inputs(tmp_path / "out" / "responses.parquet")["trainer.seed"] == "0"  # the first's
    assert sorted(os.listdir(tmp_path / "out")) == ["responses.parquet"]  # its lock went with it

    killed = _generating([*args[:2], "data.output_path=out/killed.parquet", *args[3:]], tmp_path)
    killed.kill()
    killed.communicate(timeout=60)
    assert (tmp_path / "out" / ".killed.parquet.lock").is_file()  # left, naming a process that is gone
    leftovers = [".killed.parquet.tmp-0123abcd", f".killed.parquet.{'ab' * 16}.tmp"]  # write_parquet's, then older
    for name in leftovers:
        (tmp_path / "out" / name).write_bytes(b"PAR1 half a file")
    rerun = rft("generate", *args[:2], "data.output_path=out/killed.parquet", *args[3:], cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    for name in sorted(leftovers):
        assert (f"rft: note: an earlier write of out/killed.parquet was killed: removed {name}, the file it was "
                "writing") in rerun.stdout.splitlines(), rerun.stdout
    assert sorted(os.listdir(tmp_path / "out")) == ["killed.parquet", "responses.parquet"]
    assert len(read_rows(tmp_path / "out" / "killed.parquet")) == 40


def test_a_killed_init_model_leaves_a_staging_folder_the_next_write_removes(tmp_path):
    """SIGKILL while rft init-model writes: the model folder is absent (never half written), and its model-sized
    staging folder `.m.tmp-*` stayed for good beside it (no run folder's lock, nothing cleaned there); the same
    command again removes it, says so, and writes the model."""
    proc = subprocess.Popen([sys.executable, "-m", "rft", "init-model", "--preset", "small", "m"], cwd=tmp_path,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(6000):  # its staging folder, with a file in it: writing has begun
        staging = [p for p in tmp_path.iterdir() if p.name.startswith(".m.tmp-") and any(p.iterdir())]
        if staging or proc.poll() is not None:
            break
        time.sleep(0.005)
    proc.kill()
    proc.communicate(timeout=60)
    assert staging and proc.returncode == -signal.SIGKILL, "it finished before the kill"
    assert list((tmp_path / "m").iterdir()) == []  # the folder its lock was on (fsutil.sole_writer), empty
    quiet = time.time() - 60  # a live writer's folder is never taken: nothing in it changed for a while
    for path in [staging[0], *staging[0].rglob("*")]:
        os.utime(path, (quiet, quiet))
    proc = rft("init-model", "m", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"rft: note: an earlier write of m was killed: removed {staging[0].name}, the folder it was writing" in \
        proc.stdout, proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert (tmp_path / "m" / "model.safetensors").is_file()


def test_a_second_init_model_into_a_folder_being_written_is_refused(tmp_path):
    """Two rft init-model into one new folder at once both wrote it, and the last to end replaced the first one's
    model without a word. The first holds an flock on the folder while it writes (fsutil.sole_writer): the second
    is one line, exit 2, and touches nothing; once the first has ended, the folder holds its model."""
    first = subprocess.Popen([sys.executable, "-m", "rft", "init-model", "--preset", "small", "m"], cwd=tmp_path,
                             env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(6000):  # its staging folder, with a file in it: writing has begun
        if any(p.name.startswith(".m.tmp-") and any(p.iterdir()) for p in tmp_path.iterdir()) or \
                first.poll() is not None:
            break
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # still writing while the second runs, however fast the machine
    assert first.poll() is None, "it finished before the second started"
    try:
        second = rft("init-model", "--seed", "1", "m", cwd=tmp_path)
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 2 and only_line(second.stderr) == (
        "rft: error: rft init-model: another process is writing 'm' now (the same command twice at once: the last to "
        "end would replace the first one's output); wait for it to end, or name another folder"), second.stderr
    assert second.stdout == ""
    from rft.models.tiny import init_model

    expected = init_model("small", tmp_path / "expected", seed=0)  # the first's model, not the second's (seed 1)
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == (expected / "model.safetensors").read_bytes()
    # the lock itself, as the first holds it: a folder that exists, or one the second would have made
    import fcntl

    for out in (tmp_path / "held", tmp_path / "new" / "held"):
        out.mkdir(parents=True)
        held = os.open(out, os.O_RDONLY)
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            proc = rft("init-model", str(out), cwd=tmp_path)
        finally:
            os.close(held)
        assert proc.returncode == 2 and "another process is writing" in only_line(proc.stderr)
        assert list(out.iterdir()) == []


def test_clean_abandoned_leaves_a_live_writers_folder_and_puts_back_a_model_moved_aside(tmp_path):
    """A staging folder its writer holds (an flock) stays; one nobody holds, quiet for a while, goes; a model a
    kill left moved aside between replace_dir's two renames is put back."""
    from rft.fsutil import _flock, clean_abandoned

    final = tmp_path / "m"
    live, dead = tmp_path / ".m.tmp-0000000a", tmp_path / ".m.tmp-0000000b"
    for folder in (live, dead):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x")
        quiet = time.time() - 60
        for path in (folder, folder / "model.safetensors"):
            os.utime(path, (quiet, quiet))
    (tmp_path / ".m.old-0000000c").mkdir()
    (tmp_path / ".m.old-0000000c" / "config.json").write_text("{}")
    held = _flock(live)
    try:
        assert clean_abandoned(final) == [f"removed {dead}, the folder it was writing"]  # m missing, a writer lives
        assert live.is_dir() and not dead.exists()
    finally:
        os.close(held)
    assert clean_abandoned(final) == [f"removed {live}, the folder it was writing",
                                      f"restored {final} from .m.old-0000000c"]
    assert (final / "config.json").read_text() == "{}"
    (tmp_path / ".m.old-0000000d").mkdir()
    assert clean_abandoned(final) == [f"removed {tmp_path / '.m.old-0000000d'}, the earlier m it was replacing"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_init_model_into_this_folder_or_under_a_file_is_one_line(tmp_path):
    """`rft init-model --overwrite .` ended in 'unexpected ValueError ... a bug in rft' (and a folder holding this
    one would have been replaced, cwd and all); an OUT under a file in a raw '[Errno 17] File exists'."""
    from cli_helpers import rft_here

    (tmp_path / "mine.txt").write_text("mine")
    for out, line in ((".", "rft: error: '.' is this folder or one that holds it, which the model would replace; "
                            "name a new folder"),
                      ("..", "rft: error: '..' is this folder or one that holds it, which the model would replace; "
                             "name a new folder"),
                      ("mine.txt/m", "rft: error: 'mine.txt' (on the path 'mine.txt/m') is a file, not a folder; name "
                                     "a folder to write the model into")):
        proc = rft_here("init-model", "--overwrite", out, cwd=tmp_path, check=False)
        assert proc.returncode == 2 and proc.stderr == line + "\n", proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"] and (tmp_path / "mine.txt").read_text() == "mine"


def test_a_full_disk_in_rft_data_names_the_file_in_out_and_leaves_nothing(tmp_path):
    """The line named the file's staging copy ('d/.staging-<pid>@<host>.tmp-<hex>/train.parquet'), a path the user
    never sees; OUT, made by the command, is gone again."""
    proc = rft("data", "arithmetic", "d", cwd=tmp_path, limit_bytes=20_000)  # train.parquet is ~40 kB
    assert proc.returncode == 2
    assert only_line(proc.stderr) == (
        "rft: error: file too large for this file system or process limit while writing 'd/train.parquet': free "
        f"space on that file system (or raise the limit); files rft writes are whole or absent, and {STARTS_AGAIN}")
    assert list(tmp_path.iterdir()) == []
