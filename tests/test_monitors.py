"""Monitors: each writes what its own library reads back (TensorBoard's event reader, MLflow's client on the SQLite
store, W&B's offline transaction log), chosen by verl's trainer.logger and by Trinity-RFT's monitor section; the
validation samples as each one's table; the refusals and the missing-extra errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from cli_helpers import rft_here
from rl_helpers import make_assets

from rft.cli import main
from rft.config import ConfigError
from rft.dialects.trinity import translate
from rft.monitor import GENERATIONS, ConsoleMonitor, Tracker, format_duration, time_left, validations_after
from rft.monitor.backends import RunInfo, mlflow_name
from rft.trainer.configure import load_config

os.environ["HF_HUB_OFFLINE"] = "1"
REWARD = "critic/score/mean"
VAL = "val-core/arithmetic/reward/mean@1"


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("monitor_assets"))


@pytest.fixture
def offline_wandb(monkeypatch):
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def _train_args(assets: Path, out: Path, *extra: str) -> list[str]:
    return ["train", f"actor_rollout_ref.model.path={assets / 'model'}",
            f"data.train_files={assets / 'data' / 'train.parquet'}", f"data.val_files={assets / 'data' / 'val.parquet'}",
            f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
            "data.max_response_length=4", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=2", "trainer.test_freq=1",
            "trainer.val_before_train=false", "trainer.log_val_generations=2", f"trainer.default_local_dir={out}",
            *extra]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------- readers
def read_tensorboard(logdir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[tuple[int, str]]]]:
    """({tag: [(step, value)]}, {text tag: [(step, markdown)]}) with TensorBoard's own event reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    texts = {tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]
             for tag in acc.Tags()["tensors"]}
    return scalars, texts


def read_wandb(folder: Path) -> tuple[list[dict], dict]:
    """(history rows {key: value}, config) of the one offline run under `folder`, with W&B's own datastore
    reader and record protobuf."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    files = sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    store = datastore.DataStore()
    store.open_for_scan(str(files[0]))
    history, config = [], {}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind in ("run", "config"):  # the config given to wandb.init, then any later updates
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({item.key: json.loads(item.value_json) for item in items})
    return history, config


def read_mlflow(uri: str, experiment: str):
    """(the run, {metric: [(step, value)]}, the client) of the one run in `experiment`, with MLflow's client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1
    run = runs[0]
    history = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
               for key in run.data.metrics}
    return run, history, client


# ------------------------------------------------------------------------------------------------- the run
def test_rft_train_writes_all_four_monitors_each_read_back_by_its_library(assets, tmp_path, offline_wandb):
    out = tmp_path / "run"
    code = main(_train_args(assets, out, "trainer.logger=[console,tensorboard,mlflow,wandb]",
                            "trainer.project_name=mon", "trainer.experiment_name=all4"))
    assert code == 0
    file_rows = _jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in file_rows] == [1, 2]
    expected = {(r["step"], key): value for r in file_rows for key, value in r.items()
                if key != "step" and isinstance(value, float)}
    samples = _jsonl(out / "val_generations.jsonl")
    assert [s["step"] for s in samples] == [1, 2] and all(len(s["samples"]) == 2 for s in samples)

    # TensorBoard: every scalar of metrics.jsonl at its step, the samples as a text table
    scalars, texts = read_tensorboard(out / "monitor" / "tensorboard")
    got = {(step, tag): value for tag, points in scalars.items() for step, value in points}
    assert got.keys() == expected.keys()
    assert all(got[k] == pytest.approx(expected[k], rel=1e-6, abs=1e-6) for k in expected)
    table = dict(texts[GENERATIONS])[2]
    assert samples[1]["samples"][0]["response"].replace("|", "\\|") in table and "| step | prompt |" in table

    # MLflow: the default SQLite store in the run folder, params = the resolved config, metrics by step
    run, history, client = read_mlflow(f"sqlite:///{out.resolve() / 'monitor' / 'mlflow.db'}", "mon")
    assert run.info.run_name == "all4" and run.info.status == "FINISHED"
    assert run.data.params["actor_rollout_ref.rollout.n"] == "2"
    assert run.data.params["trainer.logger"] == str(["console", "tensorboard", "mlflow", "wandb"])
    for (step, key), value in expected.items():
        assert dict(history[mlflow_name(key)])[step] == pytest.approx(value, rel=1e-6, abs=1e-6)
    assert mlflow_name(VAL) == "val-core/arithmetic/reward/mean_at_1" and mlflow_name(VAL) in history
    table_file = client.download_artifacts(run.info.run_id, "val_generations.json", str(tmp_path / "dl"))
    table = json.loads(Path(table_file).read_text())
    assert table["columns"] == ["step", "prompt", "response", "score"] and len(table["data"]) == 4

    # W&B: offline files under the run folder, read with W&B's own reader
    wb_history, wb_config = read_wandb(out / "monitor")
    by_step = {}
    for row in wb_history:
        by_step.setdefault(row["_step"], {}).update(row)
    for (step, key), value in expected.items():
        assert by_step[step][key] == pytest.approx(value, rel=1e-6, abs=1e-6)
    assert by_step[2][f"{GENERATIONS}/_type"] == "table-file" and by_step[2][f"{GENERATIONS}/nrows"] == 2
    assert wb_config["actor_rollout_ref"]["rollout"]["n"] == 2


# --------------------------------------------------------------------------------------------- Trinity
def _trinity(assets: Path, root: Path, monitor: dict) -> Path:
    cfg = {
        "project": "tri", "name": "mon", "checkpoint_root_dir": str(root),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": str(assets / "model"), "max_prompt_tokens": 32, "max_response_tokens": 4},
        "buffer": {"batch_size": 2, "total_steps": 1,
                   "explorer_input": {"taskset": {"path": str(assets / "data" / "train.parquet")}}},
        "trainer": {"trainer_config": {"custom_reward_function": {"path": str(assets / "reward.py")}}},
        "monitor": monitor,
    }
    path = root / "trinity.yaml"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_trinity_monitor_type_tensorboard_runs_and_logs(assets, tmp_path):
    assert main(["train", str(_trinity(assets, tmp_path, {"monitor_type": "tensorboard"}))]) == 0
    scalars, _ = read_tensorboard(tmp_path / "tri" / "mon" / "monitor" / "tensorboard")
    assert [step for step, _ in scalars[REWARD]] == [1]


def test_trinity_monitor_type_mlflow_with_its_uri_runs_and_logs(assets, tmp_path, offline_wandb):
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    path = _trinity(assets, tmp_path, {"monitor_type": "mlflow", "monitor_args": {"uri": uri}})
    assert main(["train", str(path)]) == 0
    run, history, _ = read_mlflow(uri, "tri")
    assert run.info.run_name == "mon" and [step for step, _ in history[REWARD]] == [1]
    assert not (tmp_path / "tri" / "mon" / "monitor" / "mlflow.db").exists()  # the given URI, not the default


def test_trinity_monitor_section_maps_onto_logger_and_monitor_args():
    base = {"project": "p", "name": "n", "model": {"model_path": "m"}, "algorithm": {"algorithm_type": "grpo"}}
    out = translate({**base, "monitor": {"monitor_type": "wandb",
                                         "monitor_args": {"base_url": "http://localhost:8080", "api_key": "k"}}})
    assert out["trainer"]["logger"] == ["console", "wandb"]
    assert out["trainer"]["monitor_args"] == {"base_url": "http://localhost:8080", "api_key": "k"}
    assert translate({**base, "monitor": {"monitor_type": ["tensorboard", "mlflow"]}})["trainer"]["logger"] == [
        "console", "tensorboard", "mlflow"]
    for monitor, needle in (({"monitor_type": "swanlab"}, "monitor.monitor_type='swanlab': not shipped"),
                            ({"monitor_type": "mlflow", "monitor_args": {"token": "x"}}, "monitor.monitor_args.token"),
                            ({"enable_ray_timeline": True}, "monitor.enable_ray_timeline")):
        with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
            translate({**base, "monitor": monitor}, "t.yaml")


# ------------------------------------------------------------------------------------------ validation
def _load(assets: Path, *overrides: str):
    return load_config(None, [f"actor_rollout_ref.model.path={assets / 'model'}",
                              f"data.train_files={assets / 'data' / 'train.parquet'}", *overrides])


@pytest.mark.parametrize("overrides, needle", [
    (["trainer.logger=[console,swanlab]"], "'swanlab' is not supported by rft (not shipped"),
    (["trainer.logger=[console,nope]"], "'nope' is not a monitor; choose from"),
    (["trainer.logger=[tensorboard]", "trainer.monitor_args.uri=x"], "monitor_args.uri is a setting of the mlflow"),
    (["trainer.logger=[mlflow]", "trainer.monitor_args.token=x"], "monitor_args.token is not a monitor setting"),
])
def test_logger_and_monitor_args_refused_by_name(assets, overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        _load(assets, *overrides)


def test_missing_extra_is_named_before_anything_loads(assets, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"needs the wandb package.*pip install 'rft\[wandb\]'"):
        _load(assets, "trainer.logger=[console,wandb]")
    # the same line from the command line, exit 2
    assert main(["config", "show", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", "trainer.logger=[wandb]"]) == 2


# ----------------------------------------------------------------------------------------------- Tracker
def test_tracker_sends_scalars_and_tables_to_every_monitor_and_resumes_tensorboard(tmp_path):
    """A resumed TensorBoard log purges the steps the resume writes again, so each step has one value."""
    from rft.monitor.backends import TensorBoardMonitor

    info = RunInfo(folder=tmp_path, project="p", name="n")
    tracker = Tracker(tmp_path / "metrics.jsonl", 3, console=False, monitors=[TensorBoardMonitor(info)])
    for step in (1, 2, 3):
        tracker.log(step, {"x": float(step)})
    tracker.log_generations(3, [{"prompt": "1+1=", "response": "2", "score": 1.0}])
    tracker.close()
    resumed = RunInfo(folder=tmp_path, project="p", name="n", start_step=1)
    tracker = Tracker(tmp_path / "metrics.jsonl", 3, start_step=1, console=False,
                      monitors=[TensorBoardMonitor(resumed)])
    for step in (2, 3):
        tracker.log(step, {"x": 10.0 * step})
    tracker.close()
    scalars, texts = read_tensorboard(tmp_path / "monitor" / "tensorboard")
    assert scalars["x"] == [(1, 1.0), (2, 20.0), (3, 30.0)]
    assert [r["x"] for r in _jsonl(tmp_path / "metrics.jsonl")] == [1.0, 20.0, 30.0]
    assert _jsonl(tmp_path / "val_generations.jsonl") == [
        {"step": 3, "samples": [{"prompt": "1+1=", "response": "2", "score": 1.0}]}]
    assert dict(texts[GENERATIONS])[3].splitlines() == ["| step | prompt | response | score |", "|---|---|---|---|",
                                                        "| 3 | 1+1= | 2 | 1.0 |"]


def test_mode_bench_logs_to_the_monitors_too(assets, tmp_path):
    out = tmp_path / "run"
    assert main(_train_args(assets, out, "trainer.mode=bench", "trainer.val_before_train=true",
                            "trainer.logger=[tensorboard]")) == 0
    scalars, _ = read_tensorboard(out / "bench" / "monitor" / "tensorboard")
    (row,) = _jsonl(out / "bench" / "metrics.jsonl")
    assert scalars["bench/arithmetic/reward/mean@1"] == [(0, pytest.approx(row["bench/arithmetic/reward/mean@1"]))]


# ------------------------------------------------------------------------------------------------- console
def test_console_plain_lines_show_what_a_person_watches_and_the_time_left(capsys):
    """Not a terminal (pytest's capture): a plain line a step for a short run, with the loss or reward, the
    validation result, tokens/s (the step's prompt + response tokens over its time) and the time left at the mean
    step time so far: after step 1 of 4 at 2 s, 3 x 2 s; after step 2 at 4 s, 2 x 3 s."""
    console = ConsoleMonitor(total_steps=4)
    console.log(1, {"train/loss": 1.23456, "perf/total_num_tokens": 1000.0, "timing_s/step": 2.0})
    console.log(2, {"critic/score/mean": 0.5, "actor/pg_loss": -0.01, "response_length/mean": 12.0,
                    "val-core/openai/gsm8k/reward/mean@1": 0.25, "perf/total_num_tokens": 1000.0, "timing_s/step": 4.0})
    console.close()
    assert capsys.readouterr().out.splitlines() == [
        "step 1/4: loss=1.23 tok/s=500 s/step=2 left=6s",
        "step 2/4: score=0.5 pg_loss=-0.01 len=12 val_gsm8k=0.250 tok/s=250 s/step=4 left=6s"]
    assert [format_duration(s) for s in (0.4, 59, 61, 3599, 3660 * 2)] == ["0s", "59s", "1m01s", "59m59s", "2h02m"]


def test_time_left_counts_the_validations_to_come():
    """Validations every test_freq steps and after the last: 3 steps at test_freq 2 validate after steps 2 and 3;
    after step 1 at 5 s a step and 36 s the validation, 2 x 5 + 2 x 36 = 82 s (the trial's run said 5 s)."""
    assert [validations_after(s, 3, 2) for s in (0, 1, 2, 3)] == [2, 2, 1, 0]
    assert [validations_after(s, 6, 2) for s in (0, 1, 2, 5, 6)] == [3, 3, 2, 1, 0]  # 2, 4, 6
    assert [validations_after(s, 5, 1) for s in (0, 4)] == [5, 1]
    assert validations_after(0, 5, 0) == validations_after(0, 5, -1) == 0
    assert time_left(1, 3, [5.0], test_freq=2, validation_seconds=36.0) == 5 * 2 + 36 * 2
    assert time_left(1, 3, [5.0], test_freq=2) == 10  # no validation measured yet: none counted
    assert time_left(2, 3, [5.0, 7.0], test_freq=2, validation_seconds=30.0) == 6 + 30
    assert time_left(0, 3, [], test_freq=2, validation_seconds=30.0) is None


def test_console_time_left_takes_the_validation_out_of_the_step_time(capsys):
    """A step's `timing_s/step` holds its validation: after step 2 of 4 (2 s, then 3 s + a 10 s validation, every
    2 steps), 2 x mean(2, 3) + 1 validation (step 4) x 10 = 15 s."""
    console = ConsoleMonitor(total_steps=4, test_freq=2)
    console.log(1, {"timing_s/step": 2.0})
    console.log(2, {"timing_s/step": 13.0, "timing_s/testing": 10.0})
    console.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("left=6s") and lines[1].endswith("left=15s"), lines


def test_console_time_left_of_a_short_run_counts_its_validations(assets, tmp_path, monkeypatch, capsys):
    """The trial's run: 3 steps, test_freq 2, validation before training. Each validation made to take 1.5 s: the
    line after step 1 counts the two to come (after steps 2 and 3) at the before-training one's cost, >= 3 s."""
    import re
    import time

    from rft.orchestration.run import SyncRun

    validate = SyncRun.validate

    def slow_validate(self, *args, **kwargs):
        time.sleep(1.5)
        return validate(self, *args, **kwargs)

    monkeypatch.setattr(SyncRun, "validate", slow_validate)
    assert main(_train_args(assets, tmp_path / "run", "trainer.logger=[console]", "trainer.total_training_steps=3",
                            "trainer.test_freq=2", "trainer.val_before_train=true")) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    left = [re.search(r"left=(\d+)s$", line) for line in lines]
    assert len(lines) == 3 and all(left), lines
    assert int(left[0].group(1)) >= 3 and left[2].group(1) == "0", lines


def test_console_lines_of_short_rl_sft_and_dpo_runs(assets, tmp_path):
    """`rft train`, `rft sft` and `rft dpo` as a user runs them (logger console, output not a terminal): each
    step's line shows the reward (RL) or the loss (SFT, DPO), the validation result of the last step, tokens/s and
    the time left."""
    from rft.tasks import write_arithmetic

    data = assets / "data"
    write_arithmetic(tmp_path / "pref", n_train=8, n_val=4, seed=0, preferences=True)
    number = r"-?[\d.]+(e[-+]\d+)?"
    runs = {
        "rl": (_train_args(assets, tmp_path / "rl", "trainer.logger=[console]", "trainer.test_freq=2"),
               rf"score={number} pg_loss={number} len={number}", rf"val_arithmetic={number}"),
        "sft": (["sft", f"model.partial_pretrain={assets / 'model'}", f"data.train_files={data / 'train.parquet'}",
                 f"data.val_files={data / 'val.parquet'}", "data.response_key=extra_info",
                 "data.response_dict_keys=[answer]", "data.train_batch_size=4", "data.micro_batch_size_per_gpu=4",
                 "data.max_length=32", "trainer.total_training_steps=2", "trainer.test_freq=2",
                 "trainer.logger=[console]", f"trainer.default_local_dir={tmp_path / 'sft'}"],
                rf"loss={number}", rf"val_loss={number}"),
        "dpo": (["dpo", f"model.partial_pretrain={assets / 'model'}",
                 f"data.train_files={tmp_path / 'pref' / 'preference_train.parquet'}",
                 f"data.val_files={tmp_path / 'pref' / 'preference_val.parquet'}", "data.train_batch_size=4",
                 "data.micro_batch_size_per_gpu=4", "data.max_length=32", "trainer.total_training_steps=2",
                 "trainer.test_freq=2", "trainer.logger=[console]", f"trainer.default_local_dir={tmp_path / 'dpo'}"],
                rf"loss={number} acc={number}", rf"val_loss={number} val_acc={number}"),
    }
    import re

    for name, (args, watched, validation) in runs.items():
        out = rft_here(*args, cwd=tmp_path).stdout
        lines = [line for line in out.splitlines() if line.startswith("step ")]
        assert len(lines) == 2, (name, out)
        assert re.fullmatch(rf"step 1/2: {watched} tok/s=\d+ s/step={number} left=\d+s", lines[0]), (name, lines)
        assert re.fullmatch(rf"step 2/2: {watched}( len={number})? {validation} tok/s=\d+ s/step={number} left=0s",
                            lines[1]), (name, lines)


def test_console_lines_of_a_short_mix_run(assets, tmp_path):
    """Trinity-RFT's mix (`rft train` with algorithm.mix, expert rows from the arithmetic preference set's chosen
    answers, as examples/trinity_mix.yaml): each step's line shows the reward and the policy loss, the SFT loss on
    the expert rows, the validation reward of the last step, tokens/s and the time left."""
    import re

    from rft.tasks import write_arithmetic

    write_arithmetic(tmp_path / "pref", n_train=8, n_val=4, seed=0, preferences=True)
    args = _train_args(assets, tmp_path / "mix", "trainer.logger=[console]", "trainer.test_freq=2",
                       "algorithm.mix.enable=true", f"data.expert.files={tmp_path / 'pref' / 'preference_train.parquet'}",
                       "data.expert.response_key=chosen", "data.expert.max_length=48")
    out = rft_here(*args, cwd=tmp_path).stdout
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    number = r"-?[\d.]+(e[-+]\d+)?"
    watched = rf"score={number} pg_loss={number} sft_loss={number} len={number}"
    assert len(lines) == 2, out
    assert re.fullmatch(rf"step 1/2: {watched} tok/s=\d+ s/step={number} left=\d+s", lines[0]), lines
    assert re.fullmatch(rf"step 2/2: {watched} val_arithmetic={number} tok/s=\d+ s/step={number} left=0s",
                        lines[1]), lines


def test_a_monitor_that_will_not_start_is_one_line_naming_its_settings(tmp_path, offline_wandb, monkeypatch):
    # the spec's Trinity example gives monitor_args.api_key: your_api_key; W&B rejects it when the run starts
    from rft.errors import RftError
    from rft.monitor.backends import build_monitors

    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    for var in ("WANDB_API_KEY", "WANDB_BASE_URL"):  # the monitor sets them from monitor_args: undone after the test
        monkeypatch.setenv(var, "unset")
        monkeypatch.delenv(var)
    info = RunInfo(tmp_path, "p", "n", monitor_args={"api_key": "your_api_key"})
    with pytest.raises(RftError) as err:
        build_monitors(["console", "wandb"], info)
    message = str(err.value)
    assert message.startswith("trainer.logger: the wandb monitor could not start (AuthenticationError: "), message
    assert "API key must have 40+ characters" in message and "\n" not in message
    assert message.endswith("check trainer.monitor_args api_key / base_url (Trinity-RFT: monitor.monitor_args), "
                            "WANDB_API_KEY, or WANDB_MODE=offline to log without an account, or remove wandb from "
                            "trainer.logger")
