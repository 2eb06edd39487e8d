"""`actor_rollout_ref.rollout.mode=async` (verl's server-mode engine): GRPO trains with the hf engine's stream in an
`rft serve` process the run starts; every response token carries its weight version into the buffer's rows; the
trainer / engine log-prob gap stays at the on-policy level; two runs with one seed are bitwise equal, and a run
stopped after a checkpoint resumes to the same weights. What the server cannot serve runs in process, said in a note."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import rft_here, sigterm_after_checkpoint
from rl_helpers import make_assets

from rft.experience import Experience

os.environ["HF_HUB_OFFLINE"] = "1"
pytestmark = pytest.mark.slow

STEPS = 4


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


def overrides(assets: Path, out: Path, *more: str) -> list[str]:
    """GRPO, 4 steps of 4 prompts x 4 responses, two mini-batches a step (so the sync loop computes the old
    log-probs too, and logs the gap), a checkpoint every 2 steps, the experiences in an SQLite buffer."""
    return [
        f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"custom_reward_function.path={assets / 'reward.py'}", "algorithm.adv_estimator=grpo",
        "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.optim.lr=1e-3", "trainer.val_before_train=false",
        f"trainer.total_training_steps={STEPS}", "trainer.save_freq=2", f"trainer.default_local_dir={out}",
        "trainer.logger=[console,file]", "experience_buffer.storage_type=sql",
        f"experience_buffer.path={out / 'buffer.sqlite'}", *more]


def train(assets: Path, out: Path, *more: str, check: bool = True):
    return rft_here("train", *overrides(assets, out, *more), cwd=out.parent, check=check)


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def weights(out: Path) -> bytes:
    return (out / "model" / "model.safetensors").read_bytes()


def assert_same_run(one: Path, two: Path) -> None:
    """Two runs bitwise equal: the exported weights and every metric but the clocks'."""
    assert weights(one) == weights(two)
    drop = lambda m: {k: v for k, v in m.items() if not k.startswith(("timing_s/", "perf/", "timing_per_token"))}
    assert [drop(m) for m in metrics(one)] == [drop(m) for m in metrics(two)]


ASYNC = "actor_rollout_ref.rollout.mode=async"


@pytest.fixture(scope="module")
def uninterrupted(assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("async") / "run"
    train(assets, out, ASYNC)
    return out


def test_grpo_trains_with_the_engine_in_a_server_process_and_every_token_carries_its_version(uninterrupted):
    lines = metrics(uninterrupted)
    assert [m["step"] for m in lines] == list(range(1, STEPS + 1))
    log = (uninterrupted / "log" / "engine_server.log").read_text()
    assert "weights of version 4 loaded" in log  # the server process took every step's weights
    with sqlite3.connect(uninterrupted / "buffer.sqlite") as db:
        rows = [Experience.from_bytes(p) for (p,) in db.execute("SELECT payload FROM rft_experiences ORDER BY seq")]
    assert len(rows) == STEPS * 16
    for e in rows:  # on-policy: explore step k samples every token with the weights of trainer step k - 1
        step = e.info["explore_step"]
        assert e.versions is not None and len(e.versions) == len(e.response)
        assert e.versions.tolist() == [step - 1] * len(e.response) and e.model_version == step - 1


def test_the_log_prob_gap_stays_at_the_on_policy_level(assets, uninterrupted, tmp_path):
    """The trainer's old log-probs against the server's behaviour log-probs (verl's training/rollout_probs_diff_*,
    logged where old log-probs are computed): within float rounding on every step, as the in-process engine's gap
    in the sync loop; a step's old weights would be a gap orders of magnitude larger (lr 1e-3)."""
    sync = tmp_path / "sync"
    train(assets, sync)
    gap = [m["training/rollout_probs_diff_max"] for m in metrics(uninterrupted)]
    in_process = [m["training/rollout_probs_diff_max"] for m in metrics(sync)]
    assert all(0 <= g < 1e-3 for g in gap), gap
    assert max(gap) <= 10 * max(in_process) + 1e-4, (gap, in_process)


def test_two_runs_with_one_seed_are_bitwise_equal(assets, uninterrupted, tmp_path):
    again = tmp_path / "again"
    train(assets, again, ASYNC)
    assert_same_run(again, uninterrupted)


@pytest.mark.longest
def test_a_run_stopped_after_a_checkpoint_resumes_to_the_uninterrupted_weights(assets, uninterrupted, tmp_path,
                                                                                 monkeypatch):
    out = tmp_path / "resumed"
    sigterm_after_checkpoint(monkeypatch, 2)
    stopped = train(assets, out, ASYNC, check=False)
    assert stopped.returncode != 0 and not (out / "model").exists()
    monkeypatch.undo()
    train(assets, out, ASYNC)
    assert weights(out) == weights(uninterrupted)


@pytest.mark.longest
def test_an_explorer_ahead_generates_through_its_server_within_the_staleness_bound(assets, tmp_path):
    """trainer.mode both with synchronizer.sync_offset 1 (Trinity-RFT's explorer one step ahead): the explorer
    process's engine is a server of its own, sent each version the schedule gives it over the gloo group; every token
    carries that version, the trainer reads each row once at staleness 0, 1, 1, 1 (the bound), and its on-policy
    first step's log-prob gap is at the in-process level while the stale steps' gaps are those of older weights."""
    out = tmp_path / "ahead"
    train(assets, out, ASYNC, "synchronizer.sync_offset=1", "trainer.save_freq=-1")
    assert "weights of version 2 loaded" in (out / "log" / "engine_server_0.log").read_text()
    with sqlite3.connect(out / "buffer.sqlite") as db:
        rows = [Experience.from_bytes(p) for (p,) in db.execute("SELECT payload FROM rft_experiences ORDER BY seq")]
    assert len(rows) == STEPS * 16
    # explore step n generates with version max(0, n - 2) (sync_interval 1, sync_offset 1)
    assert {e.info["explore_step"]: set(e.versions.tolist()) for e in rows} == {1: {0}, 2: {0}, 3: {1}, 4: {2}}
    trainer = metrics(out)
    assert [m["rollout/staleness/max"] for m in trainer] == [0, 1, 1, 1]
    gap = [m["training/rollout_probs_diff_max"] for m in trainer]
    assert gap[0] < 1e-3 and min(gap[1:]) > 10 * gap[0], gap


@pytest.mark.parametrize("setting, said", [
    ("trainer.mode=train", "trainer.mode='train' (the server serves an explorer: trainer.mode both or explore)"),
    ("workflow.type=math_workflow", "(the server serves simple_workflow's batched rollout)"),
    ("actor_rollout_ref.model.lora_rank=4", "(the server takes whole weights, not a LoRA adapter)"),
    ("data.tokenizer=/elsewhere/tokenizer", "data.tokenizer='/elsewhere/tokenizer' (the server reads the model "
                                            "folder's tokenizer)"),
])
def test_what_the_engine_server_cannot_serve_runs_in_process_and_the_note_says_why(assets, tmp_path, caplog, setting,
                                                                                  said):
    """verl's own configs set rollout.mode=async by default: a run the server cannot serve is not refused, it runs
    the in-process rollout (verl's PPO step samples the same in both modes), and the note names the key."""
    from rft.rollout.engines import unserved_reason
    from rft.trainer.configure import load_config
    from rft.trainer.validate import validate

    cfg = load_config(None, overrides(assets, tmp_path / "run", ASYNC, setting), validate_paths=False)
    validate(cfg, check_paths=False)
    note = next(r.getMessage() for r in caplog.records if "rollout.mode=async" in r.getMessage())
    assert note.startswith("rft: note: actor_rollout_ref.rollout.mode=async runs as rft's in-process rollout with ")
    assert said in note and said in unserved_reason(cfg, 1)


def test_a_server_that_does_not_start_is_one_line_quoting_its_log(tmp_path):
    from rft.rollout.remote import EngineServerError, start_server

    log = tmp_path / "engine_server.log"
    with pytest.raises(EngineServerError) as e:
        start_server(str(tmp_path / "no-model"), seed=0, max_num_seqs=4, dtype="float32", log_path=str(log))
    message = str(e.value)
    assert message.startswith(f"the engine server of {tmp_path / 'no-model'} (rft serve) did not start: rft: error: ")
    assert "is not a folder" in message and str(log) in message and "\n" not in message


def test_the_server_ends_with_the_run_that_started_it_even_when_killed(assets, tmp_path):
    """A run killed with SIGKILL cannot stop its server: the server gets SIGTERM from the kernel (PR_SET_PDEATHSIG)."""
    import signal
    import subprocess
    import sys
    import time

    script = (f"from rft.rollout.remote import start_server\n"
              f"p, url = start_server({str(assets / 'model')!r}, seed=0, max_num_seqs=4, dtype='float32', "
              f"log_path={str(tmp_path / 'server.log')!r})\n"
              "print(p.pid, flush=True)\nimport time; time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server = int(run.stdout.readline())
        assert Path(f"/proc/{server}").exists()
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(server):
        time.sleep(0.2)
    assert not _alive(server)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
