"""The `rft` command line as a user runs it: the backbone's end-to-end command, a SIGKILL mid-training and a
resume, and bad input refused before any model loads."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import rft_here

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "arithmetic_grpo.yaml"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def rft(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rft", *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"rft {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("cli")
    rft_here("init-model", "--preset", "tiny", "m", cwd=cwd)
    rft_here("data", "arithmetic", "d", cwd=cwd)
    return cwd


def train_args(out: str, *extra: str) -> list[str]:
    return ["train", str(EXAMPLE), "actor_rollout_ref.model.path=m", "data.train_files=d/train.parquet",
            "data.val_files=d/val.parquet", f"trainer.default_local_dir={out}", *extra]


def test_end_to_end_three_steps(workdir):
    run = rft(*train_args("out", "trainer.total_training_steps=3"), cwd=workdir)
    # the console of the quick start: a random model, which answers nothing right, told once why nothing trains; no
    # precision it did not ask for, no library's FutureWarning (transformers' on past_key_values, every step)
    printed = run.stdout.splitlines()
    assert [line for line in printed if "nothing to learn" in line] == [
        "rft: step 1: all rewards equal (0): no advantage, nothing to learn this step (a model that answers every "
        "prompt wrong, as a random one does, or every one right, has no better answer to learn from); this note is "
        "not repeated"]
    assert "rft: precision: fp32" in printed and "asked" not in run.stdout
    assert "Warning" not in run.stderr and "precision" not in run.stderr, run.stderr
    out = workdir / "out"
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3]
    for key in ("critic/score/mean", "critic/advantages/mean", "response_length/mean", "actor/pg_loss",
                "actor/pg_clipfrac", "actor/ppo_kl", "actor/kl_loss", "actor/entropy", "actor/grad_norm",
                "actor/lr", "timing_s/gen", "timing_s/update_actor", "timing_s/step"):
        assert all(key in x for x in lines), key
    assert "val-core/arithmetic/reward/mean@1" in lines[-1]  # validation after the last step
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["global_step_2", "global_step_3", "latest"]  # save_freq 1, keep 2
    assert {p.name for p in (out / "checkpoints" / "global_step_3").iterdir()} >= {
        "policy.safetensors", "optimizer.pt", "extra.pt", "trainer_state.json"}
    code = ("import torch, sys; from transformers import AutoModelForCausalLM, AutoTokenizer;"
            "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]); t = AutoTokenizer.from_pretrained(sys.argv[1]);"
            "ids = t('<|im_start|>user\\n1+2=<|im_end|>\\n<|im_start|>assistant\\n', return_tensors='pt').input_ids;"
            "out = m.generate(ids, max_new_tokens=3, do_sample=False); print(out.shape[1] - ids.shape[1])")
    proc = subprocess.run([sys.executable, "-c", code, str(out / "model")], env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip().splitlines()[-1]) >= 1


@pytest.mark.longest
def test_sigkill_mid_training_then_resume(workdir):
    args = train_args("killed", "trainer.total_training_steps=8", "trainer.test_freq=-1",
                      "trainer.val_before_train=false")
    out = workdir / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "rft", *args], cwd=workdir, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = out / "checkpoints" / "latest"  # written (atomically) after the checkpoint's folder is in place

    def latest_step() -> int:
        return int(latest.read_text().strip().split("_")[-1]) if latest.is_file() else 0

    deadline = time.time() + 300
    while latest_step() < 2:  # not the folder: a kill between its rename and `latest` found step 1 there
        assert proc.poll() is None, "training ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "model").exists(), "the run finished before the kill: nothing was tested"
    killed_at = latest_step()
    assert 2 <= killed_at < 8

    again = rft_here(*args, cwd=workdir)
    assert "resumed from" in again.stdout and f"at step {killed_at}" in again.stdout
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))  # each step logged once: the repeated ones were rewritten
    assert (out / "model" / "model.safetensors").is_file()
    # a third run finds the work done: it says so and trains nothing more
    third = rft_here(*args, cwd=workdir)
    assert "is complete (8/8 steps" in third.stdout and "resumed from" not in third.stdout, third.stdout
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == steps
    # and the killed run is the uninterrupted one: each step's metrics and the final weights
    from safetensors.torch import load_file

    rft_here(*train_args("whole", *args[-3:]), cwd=workdir)
    killed, whole = ([json.loads(x) for x in (workdir / d / "metrics.jsonl").read_text().splitlines()]
                     for d in ("killed", "whole"))
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert [x[key] for x in killed] == pytest.approx([x[key] for x in whole], abs=1e-6), key
    a, b = (load_file(workdir / d / "model" / "model.safetensors") for d in ("killed", "whole"))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


def test_a_closed_console_pipe_does_not_end_the_run(workdir):
    """`rft train ... 2>&1 | head -1`: the reader closes the pipe after the first line; the run carries on (its
    console output dropped) and ends as it would have, exit 0, checkpoint and model written, the log file noting it."""
    args = train_args("piped", "trainer.total_training_steps=2", "trainer.test_freq=-1",
                      "trainer.val_before_train=false")
    proc = subprocess.Popen([sys.executable, "-m", "rft", *args], cwd=workdir, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` exits
    assert first and proc.wait(timeout=600) == 0
    out = workdir / "piped"
    assert (out / "checkpoints" / "global_step_2" / "trainer_state.json").is_file()
    assert (out / "model" / "model.safetensors").is_file()
    assert not (out / "failed.json").exists()
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    log_text = (out / "log" / "trainer.log").read_text()
    assert "the console's pipe was closed (stdout and stderr); the run carries on" in log_text
    assert "model written to" in log_text  # console lines after the close still reach the log


@pytest.mark.parametrize("text, message", [
    ("data:\n  train_batch_size: 4\n  train_batch_size: 8\n",
     "at line 3, column 3: the key 'train_batch_size' appears twice at the same level (the mapping that starts at "
     "line 2, column 3); keep one of them"),
    ("data:\n  train_batch_size: 4\n\tval_files: v.parquet\n",
     "at line 3, column 1: a tab character, which YAML does not allow in indentation; indent with spaces"),
    ("data:\n  train_files: \"t.parquet\n  val_files: v.parquet\n",
     "at line 2, column 16: a quoted value opened here is not closed (found unexpected end of stream at line 4, "
     "column 1); close the quote"),
], ids=["duplicate-key", "tab", "unclosed-quote"])
def test_an_invalid_yaml_file_is_one_line_naming_the_file_line_and_column(tmp_path, text, message):
    """yaml's own error is four lines (each printed as an `rft: error:` line): one line says where and what."""
    (tmp_path / "bad.yaml").write_text(text)
    for command in (["train", "bad.yaml"], ["config", "show", "bad.yaml"]):
        proc = rft_here(*command, cwd=tmp_path, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.splitlines() == [f"rft: error: config file 'bad.yaml' is not valid YAML {message}"], proc.stderr


@pytest.mark.parametrize("override, message", [
    ("data.foo=1", "unknown config key 'data.foo'"),
    ("actor_rollout_ref.rollout.name=sglang", "rollout.name='sglang'"),
    ("algorithm.adv_estimator=nope", "adv_estimator"),
    ("data.train_files=missing.parquet", "does not exist"),
    # a mistyped path is missing whatever its name ends in (it was "not a .parquet or .jsonl file"); an existing
    # file of another kind is not a data file
    ("data.train_files=/no/such/file", "data.train_files: file '/no/such/file' does not exist, nor does its folder"),
    ("data.val_files=d/val", "data.val_files: file 'd/val' does not exist; did you mean 'd/val.parquet'?"),
    ("data.train_files=d/train.csv", "data.train_files: file 'd/train.csv' does not exist ('d' holds train.parquet, "
                                     "val.parquet)"),
    ("data.train_files=m/config.json", "data.train_files: 'm/config.json' is not a .parquet or .jsonl file"),
    # a folder: the data files it holds and the one to set (it was "not a .parquet or .jsonl file")
    ("data.train_files=d", "data.train_files: 'd' is a folder, not a .parquet or .jsonl file; it holds "
                           "train.parquet, val.parquet: set data.train_files=d/train.parquet"),
    ("data.val_files=d", "set data.val_files=d/val.parquet"),
    ("data.train_files=m", "data.train_files: 'm' is a folder, and it holds no .parquet or .jsonl file"),
    ("actor_rollout_ref.model.path=nowhere", "not a Hugging Face model folder"),
])
def test_bad_config_is_refused_before_anything_loads(workdir, override, message):
    proc = rft_here(*train_args("refused", override), cwd=workdir, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (workdir / "refused").exists()


def test_rft_data_calculator_writes_the_task_and_refuses_bad_options(tmp_path):
    """`rft data calculator OUT` takes one folder, like `rft data arithmetic` (it was read as gsm8k's SRC OUT)."""
    from rft.data.io import read_rows

    out = rft_here("data", "calculator", "c", "--n-train", "20", "--n-val", "5", "--tool-share", "0.5", cwd=tmp_path)
    assert [line.split(":")[0] for line in out.stdout.splitlines()] == ["train", "val", "sft", "copy", "for rft train"]
    assert len(read_rows(tmp_path / "c" / "train.parquet")) == 20 and len(read_rows(tmp_path / "c" / "val.parquet")) == 5
    bad = rft_here("data", "calculator", "c2", "--tool-share", "1.5", cwd=tmp_path, check=False)
    assert bad.returncode != 0 and bad.stderr.strip() == "rft: error: rft data calculator: tool_share=1.5 must be in [0, 1]"
    assert not (tmp_path / "c2").exists()
    bad = rft_here("data", "calculator", "c3", "--copy-rows", "-1", cwd=tmp_path, check=False)
    assert bad.returncode != 0 and bad.stderr.strip() == "rft: error: rft data calculator: copy_rows=-1 must be >= 0"
    assert not (tmp_path / "c3").exists()


def test_rft_data_gsm8k_names_its_split_files_and_a_missing_one_names_them_too(workdir, tmp_path):
    """`rft data gsm8k` writes verl's train.parquet / test.parquet and says which keys read them; a data file given
    under the synthetic tasks' name (val.parquet) is refused with the file that is there; GSM8K's own jsonl given
    to `rft train` is refused with the `rft data gsm8k` command that converts it."""
    src = tmp_path / "src"
    src.mkdir()
    row = {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"}
    for split in ("train", "test"):
        (src / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    out = rft_here("data", "gsm8k", str(src), "g", cwd=workdir)
    assert out.stdout.splitlines() == ["train: g/train.parquet", "test: g/test.parquet",
                                       "for rft train: data.train_files=g/train.parquet data.val_files=g/test.parquet"]
    bad = rft_here(*train_args("refused", "data.train_files=g/train.parquet", "data.val_files=g/val.parquet"),
                   cwd=workdir, check=False)
    assert bad.returncode == 2 and bad.stderr.splitlines() == [
        "rft: error: data.val_files: file 'g/val.parquet' does not exist; did you mean 'g/test.parquet'? ('g' holds "
        "test.parquet, train.parquet)"]
    bad = rft_here(*train_args("refused", "data.train_files=g/trian.parquet"), cwd=workdir, check=False)
    assert "file 'g/trian.parquet' does not exist; did you mean 'g/train.parquet'?" in bad.stderr
    # GSM8K's own rows given as they are (verl wants its rows): the `rft data` command that writes them, not
    # "set data.prompt_key=<one of them>" (question: then no data source, no ground truth)
    bad = rft_here(*train_args("raw", f"data.train_files={src / 'train.jsonl'}", "data.val_files=null"),
                   cwd=workdir, check=False)
    assert bad.returncode == 2 and bad.stderr.splitlines() == [
        f"rft: error: {src / 'train.jsonl'} row 0: no column 'prompt' (data.prompt_key): the rows are GSM8K's own "
        f"(question, answer), not verl's; `rft data gsm8k {src} OUT` writes them as verl's rows (OUT/train.parquet, "
        "OUT/test.parquet): set data.train_files / data.val_files to those"]
    bad = rft_here(*train_args("refused", "data.train_files=nowhere/train.parquet"), cwd=workdir, check=False)
    assert bad.stderr.splitlines() == [
        "rft: error: data.train_files: file 'nowhere/train.parquet' does not exist, nor does its folder 'nowhere': "
        "set data.train_files to a .parquet or .jsonl file of verl's rows (`rft data --help`: the commands that "
        "write them)"]
    assert not (workdir / "refused").exists()


def sft_args(out: str, *extra: str) -> list[str]:
    return ["sft", "model.partial_pretrain=m", "data.train_files=d/train.parquet", "data.response_key=extra_info",
            "data.response_dict_keys=[answer]", "data.train_batch_size=8", "data.micro_batch_size_per_gpu=8",
            "data.max_length=32", "trainer.total_training_steps=1", "trainer.save_freq=1", "trainer.logger=[console]",
            f"trainer.default_local_dir={out}", *extra]


def _folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_another_trainer_refuses_a_run_folders_checkpoints_and_leaves_the_folder_as_it_was(workdir):
    """`rft sft` into an `rft train` run's folder would resume from the GRPO checkpoint (its weights, its step),
    overwrite config.yaml and mix its metrics.jsonl: it is refused before any model loads, and the refusal leaves
    the other run's folder as it was (no failed.json, no line in its log); the same the other way round, for
    checkpoints written before they named their trainer, and for a checkpoint named in trainer.resume_from_path."""
    from rft.trainer.checkpoint import check_resume_kind, checkpoint_to_resume, write_manifest
    from rft.trainer.configure import load_dpo_config

    run = rft_here(*train_args("rx", "trainer.total_training_steps=1", "trainer.test_freq=-1",
                               "trainer.val_before_train=false"), cwd=workdir)
    assert "rft: 1 step on cpu, 2000 train prompts, output rx" in run.stdout.splitlines()  # not "1 steps"
    rx = workdir / "rx"
    state_file = rx / "checkpoints" / "global_step_1" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert (state["trainer"], state["algorithm"]) == ("train", "grpo")
    before = _folder_files(rx)
    refused = rft_here(*sft_args("rx"), cwd=workdir, check=False)
    assert refused.returncode != 0 and refused.stderr.splitlines() == [
        "rft: error: rx holds an rft train (grpo) run's checkpoints; rft sft would resume from them: use another "
        "trainer.default_local_dir, or trainer.resume_mode=disable to start fresh there"]
    assert "resumed" not in refused.stdout
    after = _folder_files(rx)
    assert after.pop(".rft.lock") == b"" and before.pop(".rft.lock") == b""  # taken and given back
    assert after == before  # no failed.json, config.yaml, metrics.jsonl and log/trainer.log untouched

    # a checkpoint of before trainer_state.json named its trainer: an RL one by its kl_coef, its algorithm by the
    # run's config.yaml
    del state["trainer"], state["algorithm"]
    state_file.write_text(json.dumps(state))
    write_manifest(state_file.parent)  # whole as written
    refused = rft_here(*sft_args("rx"), cwd=workdir, check=False)
    assert "rx holds an rft train (grpo) run's checkpoints; rft sft would resume from them" in refused.stderr
    named = rft_here(*sft_args("elsewhere", "trainer.resume_mode=resume_path",
                               f"trainer.resume_from_path={state_file.parent}"), cwd=workdir, check=False)
    assert named.returncode != 0 and "is an rft train (grpo) run's checkpoint; rft sft would resume from it" in \
        named.stderr
    assert not (workdir / "elsewhere" / "failed.json").exists()

    run = rft_here(*sft_args("sx"), cwd=workdir)
    assert "rft sft: 1 step on cpu, 2000 rows, output sx" in run.stdout.splitlines()
    sx = workdir / "sx"
    assert json.loads((sx / "checkpoints" / "global_step_1" / "trainer_state.json").read_text())["trainer"] == "sft"
    refused = rft_here(*train_args("sx"), cwd=workdir, check=False)
    assert refused.returncode != 0 and refused.stderr.splitlines() == [
        "rft: error: sx holds an rft sft run's checkpoints; rft train would resume from them: use another "
        "trainer.default_local_dir, or trainer.resume_mode=disable to start fresh there"]
    assert not (sx / "failed.json").exists()
    dpo = load_dpo_config(None, ["model.partial_pretrain=m", "data.train_files=p.parquet",
                                 f"trainer.default_local_dir={sx}"], validate_paths=False)
    with pytest.raises(Exception, match="holds an rft sft run's checkpoints; rft dpo would resume from them"):
        check_resume_kind(dpo, checkpoint_to_resume(dpo))
    dpo.trainer.resume_mode = "disable"
    check_resume_kind(dpo, checkpoint_to_resume(dpo))  # starting fresh there is the user's choice


@pytest.mark.parametrize("command", ["train", "sft", "dpo"])
def test_a_training_command_with_nothing_given_says_what_it_takes(command, capsys):
    """`rft train` alone (a newcomer's first try) says what the command takes and where an example is, not that a
    model key deep in the config is missing."""
    from rft.cli import main

    assert main([command]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rft: error: rft {command} takes a YAML config and/or section.key=value overrides, "), err
    assert "`rft example " in err and f"rft {command} --help" in err and len(err.splitlines()) == 1


def test_init_model_prints_its_one_line_without_transformers_progress_bars(tmp_path):
    """`rft init-model --preset tiny m`, the README's first rft command: one line saying what it wrote, not
    transformers' 'Writing model shards' / 'Loading weights' bars on stderr (shown even when it is not a terminal)."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()  # as a fresh process starts: another test may have turned them off
    run = rft_here("init-model", "--preset", "tiny", "m", cwd=tmp_path)
    assert run.stderr == "", run.stderr
    assert run.stdout == "wrote tiny model (1,020,416 parameters) to m\n"


def test_version_prints_the_installed_version_which_is_the_packages_own(tmp_path):
    """`rft --version`: one line, the version pip installed, the same as pyproject.toml's and `rft.__version__`."""
    import re
    from importlib.metadata import version

    import rft

    run = rft_here("--version", cwd=tmp_path)
    assert run.stdout == f"rft {version('rft')}\n" and run.stderr == ""
    declared = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert version("rft") == declared == rft.__version__


def test_init_model_over_a_folder_names_the_command_lines_flag(tmp_path):
    """`rft init-model m` over a non-empty m says to pass --overwrite (it said the library's overwrite=True), leaves
    the folder as it was, and --overwrite replaces it."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "notes.txt").write_text("mine")
    refused = rft_here("init-model", "m", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        "rft: error: m exists and is not empty; pass --overwrite to replace it"]
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["notes.txt"]
    rft_here("init-model", "m", "--overwrite", cwd=tmp_path)
    assert (tmp_path / "m" / "model.safetensors").is_file() and not (tmp_path / "m" / "notes.txt").exists()


@pytest.mark.parametrize("flag", ["--n-train", "--n-val"])
def test_rft_data_refuses_a_split_of_no_rows(tmp_path, flag):
    """`rft data arithmetic d --n-train 0` wrote d/train.parquet with no rows (which rft train then refuses)."""
    bad = rft_here("data", "arithmetic", "d", flag, "0", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and bad.stderr.splitlines() == [
        f"rft: error: rft data arithmetic: {flag} 0: a split needs at least 1 row (rft train refuses an empty data "
        "file)"]
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("args, takes", [
    (["arithmetic", "a", "b"], "rft data arithmetic takes OUT (the folder to write), got 2 (a b)"),
    (["shapes"], "rft data shapes takes OUT (the folder to write), got none"),
    (["gsm8k", "g"], "rft data gsm8k takes SRC OUT (the local copy to convert, the folder to write), got 1 (g)"),
    (["geometry3k", "a", "b", "c"], "rft data geometry3k takes SRC OUT"),
])
def test_rft_data_with_a_wrong_count_of_folders_says_what_the_task_takes(tmp_path, args, takes):
    """`rft data arithmetic a b` exited 1 with a bare `usage: ...` line, not rft's one error line."""
    bad = rft_here("data", *args, cwd=tmp_path, check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
    assert bad.stderr.startswith(f"rft: error: {takes}") and f"e.g. rft data {args[0]} " in bad.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, said", [
    (["arithmetic", "d", "--tool-share", "0.5"], "rft data arithmetic: --tool-share applies to calculator only"),
    (["shapes", "d", "--carry-slip", "0.5"], "rft data shapes: --carry-slip applies to arithmetic only"),
    (["calculator", "d", "--rejected", "mistakes"], "rft data calculator: --rejected applies to arithmetic only"),
    (["gsm8k", "src", "d", "--n-train", "5"], "rft data gsm8k: --n-train applies to arithmetic and calculator and "
                                              "shapes only"),
])
def test_rft_data_refuses_an_option_its_task_does_not_take(tmp_path, args, said):
    """An option of another task was silently ignored (`rft data arithmetic d --tool-share 0.5` wrote the usual
    data and exited 0)."""
    bad = rft_here("data", *args, cwd=tmp_path, check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith(f"rft: error: {said}"), bad.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, said", [
    (["arithmetic", "f"], "rft data arithmetic: OUT 'f' is a file; OUT is the folder to write the task's files into: "
                          "name a folder"),
    (["shapes", "f/d"], "rft data shapes: 'f' (on OUT's path 'f/d') is a file; OUT is the folder"),
    (["gsm8k", "g/train.jsonl", "out"], "rft data gsm8k: SRC 'g/train.jsonl' is a file; SRC is the folder holding "
                                        "train.jsonl and test.jsonl: 'g' probably (rft data gsm8k g out)"),
    (["geometry3k", "geo/data/train-00000-of-00001.parquet", "out"],
     "rft data geometry3k: SRC 'geo/data/train-00000-of-00001.parquet' is a file; SRC is the folder holding "
     "data/<split>-*.parquet (or <split>.parquet / <split>.jsonl): 'geo' probably (rft data geometry3k geo out)"),
])
def test_rft_data_refuses_a_file_where_a_folder_goes_naming_the_folder(tmp_path, args, said):
    """OUT an existing file was a raw '[Errno 17] File exists' line; SRC a file of the source (the newcomer's
    `rft data gsm8k .../train.jsonl gsm8k`) was "no such GSM8K file: '.../train.jsonl/train.jsonl'"."""
    (tmp_path / "f").write_text("mine\n")
    _gsm8k_source(tmp_path / "g")
    (tmp_path / "geo" / "data").mkdir(parents=True)
    (tmp_path / "geo" / "data" / "train-00000-of-00001.parquet").write_bytes(b"")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    bad = rft_here("data", *args, cwd=tmp_path, check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith(f"rft: error: {said}"), bad.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def _stamped(folder: Path) -> dict[str, tuple[bytes, int]]:
    """The files of `folder` (hidden ones too) with their bytes and modification times, the times first set to one
    moment long ago, so that a file written again shows a new time whatever the file system's clock resolution."""
    for path in folder.iterdir():
        os.utime(path, ns=(10**18, 10**18))
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def _gsm8k_source(folder: Path) -> None:
    folder.mkdir()
    row = {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"}
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text(json.dumps(row) + "\n")


@pytest.mark.parametrize("args", [["arithmetic", "--preferences"], ["calculator", "--copy-rows", "3"], ["shapes"],
                                  ["gsm8k"]], ids=["arithmetic", "calculator", "shapes", "gsm8k-into-its-source"])
def test_rft_data_run_again_as_it_was_leaves_the_data_and_succeeds(tmp_path, args):
    """The README and the examples' headers run `rft data TASK OUT` into a folder again with the same options: the
    same task and options write the same bytes, so the second run says the data is there and exits 0, touching no
    file (it was refused, exit 2). gsm8k converted into its own source folder too."""
    if args[0] == "gsm8k":
        _gsm8k_source(tmp_path / "g")
        argv = ["data", "gsm8k", "g", "g"]
    else:
        argv = ["data", args[0], "g", *args[1:], "--n-train", "6", "--n-val", "3"]
    rft_here(*argv, cwd=tmp_path)
    before = _stamped(tmp_path / "g")
    again = rft_here(*argv, cwd=tmp_path, check=False)
    assert again.returncode == 0 and again.stderr == "" and len(again.stdout.splitlines()) == 1
    assert again.stdout.startswith(f"rft data {args[0]}: g already holds train.parquet, ")
    assert again.stdout.rstrip().endswith(", byte for byte as these options write them: nothing written")
    # the same files, bytes and times: no staging folder left behind either
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted((tmp_path / "g").iterdir())} == before


def test_rft_data_writes_only_the_files_a_folder_lacks(tmp_path):
    """`rft data arithmetic d` after `... d --preferences` (train / val the same bytes) leaves everything; the other
    way round it adds the preference files and leaves train / val as they were."""
    rft_here("data", "arithmetic", "d", "--n-train", "6", "--n-val", "3", cwd=tmp_path)
    before = _stamped(tmp_path / "d")
    out = rft_here("data", "arithmetic", "d", "--n-train", "6", "--n-val", "3", "--preferences", cwd=tmp_path)
    assert "preference_train: d/preference_train.parquet" in out.stdout
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted((tmp_path / "d").iterdir())}
    assert sorted(after) == ["preference_train.parquet", "preference_val.parquet", "train.parquet", "val.parquet"]
    assert {name: after[name] for name in before} == before
    assert "nothing written" in rft_here("data", "arithmetic", "d", "--n-train", "6", "--n-val", "3",
                                         cwd=tmp_path).stdout


def test_rft_data_refuses_other_data_without_overwrite_and_replaces_it_with(tmp_path):
    """Like `rft init-model`, `rft data` leaves what a folder holds unless told --overwrite: a second `rft data
    arithmetic d` with other options (other rows) said nothing and replaced the data a run had trained on. The
    refusal names the files that differ (--carry-slip changes only the training demonstrations, so train.parquet),
    writes nothing, not even the files the folder lacks; --overwrite replaces those alone, by rename, and leaves
    the files of the same bytes and the user's own files as they were."""
    rft_here("data", "arithmetic", "d", "--n-train", "8", "--n-val", "4", cwd=tmp_path)
    (tmp_path / "d" / "notes.txt").write_text("mine")
    before = _stamped(tmp_path / "d")
    other = ["data", "arithmetic", "d", "--n-train", "8", "--n-val", "4", "--carry-slip", "1", "--preferences"]
    bad = rft_here(*other, cwd=tmp_path, check=False)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.splitlines() == [
        "rft: error: rft data arithmetic: d already holds train.parquet with other data than these options write; "
        "pass --overwrite to write over them, or choose another folder"]
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted((tmp_path / "d").iterdir())} == before
    rft_here(*other, "--overwrite", cwd=tmp_path)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted((tmp_path / "d").iterdir())}
    assert sorted(after) == ["notes.txt", "preference_train.parquet", "preference_val.parquet", "train.parquet",
                             "val.parquet"]
    assert after["notes.txt"] == before["notes.txt"] and after["val.parquet"] == before["val.parquet"]
    assert after["train.parquet"][0] != before["train.parquet"][0]
    assert "nothing written" in rft_here(*other, cwd=tmp_path).stdout  # the data it wrote is now what is there
    # gsm8k converted into its source folder, the source changed since
    _gsm8k_source(tmp_path / "g")
    rft_here("data", "gsm8k", "g", "g", cwd=tmp_path)
    (tmp_path / "g" / "train.jsonl").write_text((tmp_path / "g" / "train.jsonl").read_text().replace("3 apples",
                                                                                                     "5 apples"))
    assert "rft data gsm8k: g already holds train.parquet with other data" in rft_here(
        "data", "gsm8k", "g", "g", cwd=tmp_path, check=False).stderr


def test_rft_data_that_fails_leaves_no_folder(tmp_path):
    """Options checked by the task's writer (--max-count) fail before any file is in place: the folder the
    staging made for it is removed again."""
    bad = rft_here("data", "shapes", "new/s", "--max-count", "12", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "max_count must be in 1..9" in bad.stderr
    assert list(tmp_path.iterdir()) == []


def test_rft_data_removes_the_staging_folder_of_a_killed_process_not_of_a_live_one(tmp_path):
    """A SIGKILLed `rft data` left its `.staging.tmp-*` folder in OUT for good. The staging folder names its
    process: the next `rft data` into OUT removes the killed one's (said in a line) and leaves the one of a process
    still writing there."""
    holder = ("import sys, time\nfrom rft.fsutil import staging_in\n\nwith staging_in(sys.argv[1]) as staging:\n"
              "    print(staging, flush=True)\n    time.sleep(600)\n")

    def hold() -> tuple[subprocess.Popen, Path]:
        proc = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path / "d")], env=ENV, stdout=subprocess.PIPE,
                                text=True)
        return proc, Path(proc.stdout.readline().strip())

    killed, left = hold()
    killed.kill()
    killed.wait()
    live, held = hold()
    try:
        assert left.is_dir() and held.is_dir() and left != held
        out = rft_here("data", "arithmetic", "d", "--n-train", "6", "--n-val", "3", cwd=tmp_path)
        assert not left.exists() and held.is_dir()
        assert f"rft data: an earlier rft data was interrupted: removed {Path('d') / left.name} (its process, pid {killed.pid}, is " \
               "gone)" in out.stdout.splitlines(), out.stdout
        assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted([held.name, "train.parquet",
                                                                             "val.parquet"])
    finally:
        live.kill()
        live.wait()


def test_rft_data_removes_an_older_rfts_unnamed_staging_folder_once_an_hour_went_by_without_a_change(tmp_path):
    """An rft from before staging folders named their process left `.staging.tmp-*` folders, which no later
    `rft data` removed. They name no process to ask, so time decides: one in which nothing changed for two hours is
    removed (said in a line); one a file in it was written to a minute ago (an older rft still writing) is left."""
    out = tmp_path / "d"
    old, busy = out / ".staging.tmp-0123abcd", out / ".staging.tmp-89abcdef"
    for folder in (old, busy):
        folder.mkdir(parents=True)
        (folder / "train.parquet").write_bytes(b"half")
    hours_ago, minute_ago = time.time() - 2 * 3600, time.time() - 60
    for path in (old / "train.parquet", old, busy):
        os.utime(path, (hours_ago, hours_ago))
    os.utime(busy / "train.parquet", (minute_ago, minute_ago))  # the folder is old, a file in it is being written
    run = rft_here("data", "arithmetic", "d", "--n-train", "6", "--n-val", "3", cwd=tmp_path)
    assert not old.exists() and (busy / "train.parquet").read_bytes() == b"half"
    assert (f"rft data: an earlier rft data was interrupted: removed {Path('d') / old.name} (it names no process, as "
            "an older rft data made it, and nothing in it changed for 2.0 hours)") in run.stdout.splitlines(), run.stdout
    assert sorted(p.name for p in out.iterdir()) == [busy.name, "train.parquet", "val.parquet"]


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_staging_folders_name_their_host_as_the_run_lock_does_and_only_this_ones_are_tested(tmp_path):
    """A staging folder names its host as the run lock and the buffer's holders do: `host_id`, the machine and its
    PID namespace (as a file-name part, `host_tag`), not the bare hostname two containers of one machine share. The
    next `rft data` removes the folder of a dead pid named for this host_id and leaves one named for another
    container of the same hostname, whose pids it cannot see."""
    import socket

    from rft.fsutil import clean_stale_staging, host_tag, staging_in

    with staging_in(tmp_path) as staging:
        assert staging.name.startswith(f".staging-{os.getpid()}@{host_tag()}.tmp-"), staging.name
    dead = _dead_pid()
    mine = tmp_path / f".staging-{dead}@{host_tag()}.tmp-0123abcd"
    other = tmp_path / f".staging-{dead}@{socket.gethostname()}_pid_1.tmp-89abcdef"
    for folder in (mine, other):
        folder.mkdir()
    assert clean_stale_staging(tmp_path) == [f"removed {mine} (its process, pid {dead}, is gone)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name]


@pytest.mark.parametrize(("argv", "start"), [
    (["trian", "x.yaml"], "rft: error: unknown command 'trian' (did you mean 'train'?); the commands are "),
    (["exmaple", "arithmetic_grpo"], "rft: error: unknown command 'exmaple' (did you mean 'example'?); "),
    (["xyzzy"], "rft: error: unknown command 'xyzzy'; the commands are init-model, data, example, train, "),
])
def test_a_mistyped_command_is_one_line_with_the_nearest_command(argv, start, tmp_path):
    """argparse answered `rft trian` with its usage and an `invalid choice` line listing every command; rft's own
    line names the nearest command (none when nothing is close) and lists them, exit 2, nothing written."""
    run = rft_here(*argv, cwd=tmp_path, check=False)
    assert run.returncode == 2 and run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(start) and "(rft --help says what each does)" in run.stderr, run.stderr
    assert "did you mean" not in run.stderr or argv[0] != "xyzzy"
    assert list(tmp_path.iterdir()) == []


def test_counts_in_what_rft_prints_are_singular_for_one():
    """One helper words the counts of console lines and messages ("1 steps", "1 prompts" before)."""
    from rft.console import counted
    from rft.data.dataset import DataError, PromptSampler

    assert [counted(1, "step"), counted(0, "step"), counted(2, "process", "processes")] == [
        "1 step", "0 steps", "2 processes"]
    with pytest.raises(DataError, match=r"^the training set has 1 prompt, fewer than data.train_batch_size=2 .*"
                                        r"lower data.train_batch_size to at most 1"):
        PromptSampler(1, 2)


def _epilog_commands(text: str) -> list[list[str]]:
    """The command lines of an epilog's examples (indented `rft ...`, continuation lines joined, comments cut)."""
    import shlex

    lines = text.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.startswith("  rft ")]


@pytest.mark.parametrize("command", ["train", "sft", "dpo", "rm", "demo", "data"])
def test_help_ends_with_examples_that_run_and_the_docs_of_the_keys(workdir, tmp_path, command):
    """`rft train --help` had no example and no pointer to the keys: each main command's help ends with command
    lines, and they run as shown, in order, in a fresh folder without the repository's examples/ (`rft example`
    writes the config there; the training commands run through their config's validation, paths included; the demo
    through the parser; the model is the workdir's tiny one), and the documents they name exist."""
    import re

    from rft.cli import EPILOGS, build_parser
    from rft.trainer.configure import load_config, load_dpo_config, load_rm_config, load_sft_config

    shown = rft_here(command, "--help", cwd=tmp_path)
    assert EPILOGS[command] in shown.stdout
    for doc in re.findall(r"\b(?:docs/[a-z_]+|README)\.md\b", EPILOGS[command]):
        assert (REPO / doc).is_file(), doc
    if command in ("train", "sft", "dpo", "rm"):
        assert "docs/config.md" in EPILOGS[command]
    (tmp_path / "tests").symlink_to(REPO / "tests")  # the GSM8K rows of `rft data gsm8k tests/data/gsm8k`
    loaders = {"train": load_config, "sft": load_sft_config, "dpo": load_dpo_config, "rm": load_rm_config}
    ran = []
    for argv in _epilog_commands(EPILOGS[command]):
        assert argv[0] == "rft"
        args = build_parser().parse_args(argv[1:])  # every option as shown exists
        if args.command == "init-model":
            (tmp_path / args.out).symlink_to(workdir / "m")
        elif args.command in ("data", "example"):
            rft_here(*argv[1:], cwd=tmp_path)
        elif args.command in loaders:
            with contextlib.chdir(tmp_path):
                loaders[args.command](args.config, args.overrides)
        ran.append(args.command)
    assert command in ran
