"""Same seed, same run: a small GRPO stage (the demo's GRPO settings on the tiny model) run twice at once beside a
busy loop, and once killed and resumed, gives bitwise-equal models and metrics.

What a run computes with where the machine decides (generation's kernel per shape, a CPU's precision) was chosen by
timing, so a busy machine could change it: the demo's interrupted-and-resumed GRPO stage and an uninterrupted one
parted at step 58. The choices now follow fixed rules and are recorded in the run folder (numerics.json), which
the resumed half reads back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.orchestration import demo
from tests.rl_helpers import make_assets

STEPS = 6
TIMING = ("timing_s/", "perf/")  # wall-clock metrics: the only ones that may differ


def _args(assets: Path, out: Path) -> list[str]:
    return ["train", f"actor_rollout_ref.model.path={assets / 'model'}",
            f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"custom_reward_function.path={assets / 'reward.py'}",
            "data.max_prompt_length=32", "data.max_response_length=5", "data.train_batch_size=16", "data.seed=0",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.rollout.n=8",
            f"actor_rollout_ref.actor.optim.lr={demo.RL_LR}", "actor_rollout_ref.actor.optim.weight_decay=0.0",
            f"actor_rollout_ref.actor.optim.warmup_style={demo.RL_SCHEDULE}", "algorithm.adv_estimator=grpo",
            f"trainer.total_training_steps={STEPS}", "trainer.save_freq=2", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.seed=0", "trainer.logger=[file]",
            f"trainer.default_local_dir={out}"]


def _env() -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for chosen_by_rft in ("RFT_CPU_PRECISION", "RFT_DECODE_KERNEL"):  # as a user's run: bf16 where it is fast, ...
        env.pop(chosen_by_rft, None)
    return env


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """`rft <args>` as a process of its own, its output in `log`; RFT_CACHE_DIR, where rft kept the kernels it timed
    on a machine (up to 2026-11), one of its own: each process as on a machine where nothing was timed yet."""
    env = {**env, "RFT_CACHE_DIR": str(log.with_suffix(".cache"))}
    return subprocess.Popen([sys.executable, "-m", "rft", *args], env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen, log: Path) -> None:
    assert proc.wait(timeout=900) == 0, log.read_text()[-3000:]


def _run(out: Path) -> tuple[bytes, list[dict]]:
    """The run's exported weights (bytes) and its metrics without the wall-clock ones."""
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    metrics = [{k: v for k, v in line.items() if not k.startswith(TIMING)} for line in lines]
    return (out / "model" / "model.safetensors").read_bytes(), metrics


@pytest.mark.heavy  # 2-3 minutes on the loaded 2-core machine: make test-heavy
def test_one_seed_gives_one_run_under_load_and_across_a_kill(tmp_path):
    assets = make_assets(tmp_path / "assets")
    env = _env()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # a core kept busy beside the runs
    try:
        # two runs of one config at the same moment: each loads the machine while the other generates
        runs = {name: _start(_args(assets, tmp_path / name), env, tmp_path / f"{name}.log") for name in ("a", "b")}
        for name, proc in runs.items():
            _finish(proc, tmp_path / f"{name}.log")
        # a third killed once its first checkpoint is in, then the same command again
        killed = tmp_path / "killed"
        proc = _start(_args(assets, killed), env, tmp_path / "killed.log")
        latest, deadline = killed / "checkpoints" / "latest", time.monotonic() + 600
        while not latest.is_file():  # written (atomically) once the checkpoint's folder is in place
            assert proc.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (killed / "model").exists(), "the run finished before the kill: nothing was tested"
        record = json.loads((killed / "numerics.json").read_text())
        shape = "at hidden 128, intermediate 512, vocabulary 275"  # the tiny preset's: its precision by its shapes
        assert set(record) == {"decode kernel", "bf16 on the CPU", "fp16 on the CPU", f"bf16 on the CPU {shape}",
                               f"fp16 on the CPU {shape}"}
        _finish(_start(_args(assets, killed), env, tmp_path / "resumed.log"), tmp_path / "resumed.log")
        assert "resumed from" in (tmp_path / "resumed.log").read_text()
    finally:
        busy.kill()
        busy.wait()
    a, b, resumed = (_run(tmp_path / name) for name in ("a", "b", "killed"))
    assert [m["step"] for m in a[1]] == list(range(1, STEPS + 1))
    assert any(m["actor/pg_loss"] != 0 for m in a[1])  # the updates had something to learn
    assert a[1] == b[1] and a[0] == b[0], "two runs of one seed differ"
    assert a[1] == resumed[1] and a[0] == resumed[0], "the killed and resumed run differs from the straight one"
