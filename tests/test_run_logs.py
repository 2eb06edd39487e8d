"""Each process's log file (trainer.log_level / log_group_by_node, Trinity-RFT's log section): what `run_log` copies
into it at each level (tier 1), the file a one-step run writes where Trinity lays it out (tier 2), and the Trinity
keys' mapping. The several-process runs' files (one per trainer rank and explorer) are checked beside those runs in
tests/test_modes.py, a staged run's in tests/test_stages.py."""

from __future__ import annotations

import logging
import re
import sys
import warnings

import pytest
from cli_helpers import rft_here
from rl_helpers import make_assets

from rft.config import ConfigError
from rft.dialects.trinity import translate
from rft.monitor.logfile import log_path, node_ip, run_log

LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d (.*)$")


def entries(path) -> list[tuple[str, str]]:
    """(level, message) of each line of a log file."""
    out = []
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        assert match, f"not a log line: {line!r}"
        out.append((match[1], match[2]))
    return out


@pytest.fixture
def rft_logger():
    """rft's logger at INFO, as the command line sets it up (pytest leaves the root logger at WARNING)."""
    logger = logging.getLogger("rft")
    level = logger.level
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(level)


def _a_process(logger) -> None:
    """What a process shows and logs: a progress line (a carriage-return redraw), a note on stderr, a warning,
    records of each level, an error line."""
    print("step 1/2: score=0.5\rstep 2/2: score=0.75")
    print("rft: note: something to know", file=sys.stderr)
    sys.stderr.write(warnings.formatwarning(UserWarning("careful"), UserWarning, "/x/y.py", 3))  # showwarning's
    logger.debug("rft: a debug record")
    logger.info("rft: an info record")
    logger.warning("rft: a warning record")
    print("rft: error: a refusal", file=sys.stderr)


EVERYTHING = [("INFO", "step 2/2: score=0.75"), ("INFO", "rft: note: something to know"),
              ("WARNING", "/x/y.py:3: UserWarning: careful"), ("DEBUG", "rft: a debug record"),
              ("INFO", "rft: an info record"), ("WARNING", "rft: a warning record"), ("ERROR", "rft: error: a refusal")]
RANK = {"DEBUG": 0, "INFO": 1, "WARNING": 2, "ERROR": 3}


@pytest.mark.parametrize("level", ["DEBUG", "INFO", "WARNING", "ERROR"])
def test_the_log_file_holds_the_console_lines_and_records_at_its_level_and_above(tmp_path, capsys, rft_logger,
                                                                                  level):
    path = tmp_path / "log" / "trainer.log"
    with run_log(path, level):
        _a_process(rft_logger)
    got = entries(path)
    if level == "DEBUG":  # the process's pid, host and command first
        assert got[0][0] == "DEBUG" and got[0][1].startswith("rft: log of pid "), got[0]
        got = got[1:]
    assert got == [e for e in EVERYTHING if RANK[e[0]] >= RANK[level]]
    # the console is as it was: the printed lines once each, no debug record, the streams given back
    out, err = capsys.readouterr()
    assert out == "step 1/2: score=0.5\rstep 2/2: score=0.75\n"
    assert err.splitlines()[0] == "rft: note: something to know" and err.endswith("rft: error: a refusal\n")
    assert "debug" not in out + err
    assert rft_logger.level == logging.INFO
    assert type(sys.stdout).__name__ != "_Copied" and type(sys.stderr).__name__ != "_Copied"


def test_the_error_that_ends_a_process_is_the_last_line_of_its_log(tmp_path, rft_logger):
    from rft.errors import RftError

    path = tmp_path / "explorer.log"
    with pytest.raises(RftError), run_log(path, "INFO"):
        print("a line without its newline", end="")
        raise RftError("data.custom_cls Rows (rows.py): row 0 has no key 'prompt'")
    assert entries(path) == [("INFO", "a line without its newline"),
                             ("ERROR", "rft: error: data.custom_cls Rows (rows.py): row 0 has no key 'prompt'")]


def test_group_by_node_puts_the_file_under_the_machines_address(tmp_path):
    assert log_path(tmp_path, "trainer_1") == tmp_path / "log" / "trainer_1.log"
    assert log_path(tmp_path, "explorer", group_by_node=True) == tmp_path / "log" / node_ip() / "explorer.log"
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", node_ip())


# ------------------------------------------------------------------------------------------- Trinity's keys
BASE = {"project": "p", "name": "n", "checkpoint_root_dir": "/tmp/ckpt", "mode": "both",
        "algorithm": {"algorithm_type": "grpo"}, "model": {"model_path": "m"}}


def test_trinity_log_section_maps_to_the_trainer_keys():
    out = translate({**BASE, "log": {"level": "debug", "group_by_node": True}}, "t.yaml")
    assert out["trainer"]["log_level"] == "DEBUG" and out["trainer"]["log_group_by_node"] is True
    assert out["trainer"]["default_local_dir"] == "/tmp/ckpt/p/n"


@pytest.mark.parametrize("log, message", [
    ({"level": "VERBOSE"}, "t.yaml: log.level='VERBOSE': one of DEBUG, INFO, WARNING, ERROR"),
    ({"save_dir": "/x"}, "t.yaml: log.save_dir='/x': set by Trinity-RFT itself, not in a config; rft writes each "
                         "process's log under <checkpoint_root_dir>/<project>/<name>/log"),
    ({"group_by_nodes": True}, "t.yaml: log.group_by_nodes: unknown Trinity-RFT key; did you mean"),
])
def test_a_log_key_rft_cannot_take_is_refused_by_name(log, message):
    with pytest.raises(ConfigError) as err:
        translate({**BASE, "log": log}, "t.yaml")
    assert str(err.value).startswith(message), str(err.value)


# ------------------------------------------------------------------------------------------- a run
def test_a_one_step_run_writes_its_log_under_the_node_with_every_step_at_debug(tmp_path):
    """A one-step run (one process) with trainer.log_level=DEBUG and log_group_by_node: its one file,
    <default_local_dir>/log/<node_ip>/trainer.log, holds every line the console showed and the step's metrics."""
    import json

    assets = make_assets(tmp_path / "assets")
    out = tmp_path / "out"
    proc = rft_here("train", f"actor_rollout_ref.model.path={assets / 'model'}",
                    f"data.train_files={assets / 'data' / 'train.parquet'}",
                    f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
                    "data.max_response_length=6", "data.train_batch_size=4",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
                    "trainer.val_before_train=false", "trainer.total_training_steps=1", "trainer.logger=[console]",
                    f"trainer.default_local_dir={out}", "trainer.log_level=DEBUG", "trainer.log_group_by_node=true",
                    cwd=tmp_path)
    assert [p.relative_to(out / "log").as_posix() for p in (out / "log").rglob("*")] == [
        node_ip(), f"{node_ip()}/trainer.log"]
    got = entries(out / "log" / node_ip() / "trainer.log")
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    step = [json.loads(m.removeprefix("rft: step 1: ")) for _, m in got if m.startswith("rft: step 1: {")]
    assert step == [{k: v for k, v in metrics.items() if k != "step"}]
    console = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert any(line.startswith("step 1/1: ") for line in console)
    assert [("INFO", line) for line in console] == [e for e in got if e[1] in console]
