"""Multi-stage runs: sft then grpo, each from the previous stage's model; a resumed run skips finished stages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import rft_here
from omegaconf import OmegaConf

from rft.config import ConfigError
from rft.models.tiny import init_model
from rft.tasks import write_arithmetic
from rft.trainer.stages import build_stages, load_stages

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "arithmetic_sft_grpo.yaml"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("stages")
    init_model("tiny", cwd / "m", seed=0)
    write_arithmetic(cwd / "d", n_train=200, n_val=16, seed=0)
    return cwd


def args(out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rft", "train", str(EXAMPLE), "actor_rollout_ref.model.path=m",
            "data.train_files=d/train.parquet", "data.val_files=d/val.parquet", f"trainer.default_local_dir={out}",
            "stages.0.trainer.total_training_steps=6", "stages.1.trainer.total_training_steps=10",
            "stages.1.trainer.save_freq=1", "stages.1.trainer.test_freq=-1", *extra]


def test_sigkill_in_the_second_stage_does_not_redo_the_first(workdir):
    out = workdir / "run"
    proc = subprocess.Popen(args("run"), cwd=workdir, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (out / "grpo" / "checkpoints" / "global_step_2").is_dir():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / "sft" / "STAGE_DONE").is_file() and not (out / "grpo" / "STAGE_DONE").exists()
    sft_model = out / "sft" / "model" / "model.safetensors"
    stamp = sft_model.stat().st_mtime_ns
    sft_lines = (out / "sft" / "metrics.jsonl").read_text()

    again = rft_here(*args("run")[3:], cwd=workdir)  # the rerun, in this process (tests/cli_helpers.py)
    assert "stage 'sft' already finished" in again.stdout
    assert "resumed from" in again.stdout
    assert sft_model.stat().st_mtime_ns == stamp and (out / "sft" / "metrics.jsonl").read_text() == sft_lines
    steps = [json.loads(x)["step"] for x in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))
    assert (out / "grpo" / "STAGE_DONE").is_file() and (out / "grpo" / "model" / "config.json").is_file()
    # the grpo stage started from the sft stage's model
    assert "path: run/sft/model" in (out / "grpo" / "config.yaml").read_text()
    # each stage's log in its folder; the rerun continues the killed stage's
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.log")) == ["grpo/log/trainer.log",
                                                                                  "sft/log/trainer.log"]
    grpo_log = (out / "grpo" / "log" / "trainer.log").read_text().splitlines()
    resumed = [i for i, line in enumerate(grpo_log) if line.startswith("INFO ") and "rft: resumed from" in line]
    assert len(resumed) == 1 and resumed[0] > 0  # after the killed run's lines


def _raw(workdir: Path, **stage_changes):
    raw = OmegaConf.load(EXAMPLE)
    raw.actor_rollout_ref.model.path = str(workdir / "m")
    raw.data.train_files = str(workdir / "d" / "train.parquet")
    raw.data.val_files = str(workdir / "d" / "val.parquet")
    raw.trainer.default_local_dir = str(workdir / "unused")
    for key, value in stage_changes.items():
        OmegaConf.update(raw, key.replace("__", "."), value, force_add=True)
    return raw


def test_stages_are_built_and_chained(workdir):
    sft, grpo = build_stages(_raw(workdir))
    assert (sft.kind, grpo.kind) == ("sft", "rl")
    assert sft.cfg.model.partial_pretrain == str(workdir / "m")
    assert grpo.cfg.actor_rollout_ref.model.path == str(sft.out / "model")
    assert grpo.out == workdir / "unused" / "grpo"
    assert sft.cfg.optim.lr == 3.0e-3 and grpo.cfg.actor_rollout_ref.actor.optim.lr == 3.0e-4


@pytest.mark.parametrize("change, message", [
    ({"stages__0__optim__lrr": 1.0}, "stages[0]: unknown config key 'optim.lrr'"),
    ({"stages__1__actor_rollout_ref__actor__ppo_epochs": 0}, "ppo_epochs must be a positive integer"),
    ({"stages__1__stage_name": "sft"}, "must be unique"),
    ({"stages__0__actor_rollout_ref": {"model": {"path": "x"}}}, "stages[0]: unknown config key 'actor_rollout_ref'"),
    ({"stages__1__synchronizer": {"sync_interval": 2}}, "stages[1]: trainer.mode='both', synchronizer.sync_interval=2"),
    ({"trainer__n_gpus_per_node": 2, "stages__1__workflow": {"type": "math_workflow"}},
     "stages[1]: workflow.type='math_workflow' beside 2 trainer processes (trainer.nnodes x trainer.n_gpus_per_node"),
])
def test_a_bad_stage_is_refused_before_anything_runs(workdir, change, message):
    with pytest.raises(ConfigError) as err:
        build_stages(_raw(workdir, **change))
    assert message in str(err.value)
    assert not (workdir / "unused").exists()


@pytest.mark.parametrize("stage", ["5", "-1", "sfft"])
def test_an_override_of_a_stage_that_is_not_there_is_a_config_error(workdir, stage):
    """A stage override is addressed by index 0..N-1 or stage_name; any other is refused as a config error naming
    the override and the stages there are (it was OmegaConf's ConfigIndexError / TypeError, reported as a bug)."""
    bad = rft_here(*args("unused")[3:7], f"stages.{stage}.trainer.total_training_steps=2", cwd=workdir, check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        f"rft: error: override 'stages.{stage}.trainer.total_training_steps=2': there is no stage '{stage}'; the "
        "config has 2 stage(s), addressed by index 0..1 or by stage_name (0=sft, 1=grpo), e.g. "
        "stages.0.trainer.total_training_steps=2"
    )
    assert not (workdir / "unused").exists()


def test_a_stage_override_may_name_the_stage(workdir):
    sft, grpo = load_stages(EXAMPLE, ["stages.sft.trainer.total_training_steps=3",
                                      "stages.grpo.trainer.total_training_steps=4"], validate_paths=False)
    assert (sft.cfg.trainer.total_training_steps, grpo.cfg.trainer.total_training_steps) == (3, 4)
    with pytest.raises(ConfigError, match=r"stages\[1\]: command line \(trainer.nosuch=1\): unknown config key"):
        load_stages(EXAMPLE, ["stages.grpo.trainer.nosuch=1"], validate_paths=False)


def test_stages_whose_runs_finished_before_their_done_file_are_done_on_the_rerun(workdir):
    """A kill after a stage's run finished (model/ written) but before its STAGE_DONE file: the rerun's stage says
    its run is complete and the staged run goes on. The SFT stage trained again from step 0 (its model/ replaced),
    and the RL stage's 'complete; nothing to do' ended the whole command there, its STAGE_DONE never written."""
    out = workdir / "done_run"
    argv = args("done_run", "stages.1.trainer.total_training_steps=2")[3:]
    rft_here(*argv, cwd=workdir)
    sft_model = out / "sft" / "model" / "model.safetensors"
    stamp = sft_model.stat().st_mtime_ns
    for stage in ("sft", "grpo"):
        (out / stage / "STAGE_DONE").unlink()
    again = rft_here(*argv, cwd=workdir)
    assert f"rft: {Path('done_run') / 'sft'} is complete (6/6 steps" in again.stdout, again.stdout
    assert f"rft: {Path('done_run') / 'grpo'} is complete (2/2 steps" in again.stdout, again.stdout
    assert "rft: all stages finished" in again.stdout
    assert sft_model.stat().st_mtime_ns == stamp
    assert (out / "sft" / "STAGE_DONE").is_file() and (out / "grpo" / "STAGE_DONE").is_file()
