"""The modes of an RL run through the command line, as a user starts them: mode both as two processes with the
staleness the sync settings imply (weights over a process group and through files), modes explore and train as two
commands on one SQLite or PostgreSQL buffer with every experience trained on exactly once, either side killed
mid-run (the explorer in its schedule's awkward place) and the rerun equal to the uninterrupted run, and mode bench
over a finished run's checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import rft_here
from rl_helpers import SHAPED_REWARD, make_assets
from safetensors.torch import load_file

from rft.buffer import SQLBuffer, database_url

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("assets"))


def overrides(assets: Path, out: Path, steps: int, *extra: str) -> list[str]:
    """4 prompts x 4 responses of up to 6 tokens a step, the shaped reward of rl_helpers, a checkpoint every step."""
    return [f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
            "data.max_response_length=6", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.val_before_train=false", f"trainer.total_training_steps={steps}", "trainer.save_freq=1",
            f"trainer.default_local_dir={out}", "trainer.logger=[]", "synchronizer.sync_timeout=300",
            "experience_buffer.max_read_timeout=300", *extra]


def start(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rft", *args], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 900) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{out}"
    return out


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def assert_each_read_once(url: str, steps: int, rows: int) -> dict[str, list[int]]:
    """Every experience in the buffer was read by exactly one trainer step; every step read `rows` of them."""
    reads = SQLBuffer(url).reads_by_id()
    assert len(reads) == steps * rows
    assert all(len(s) == 1 for s in reads.values()), [s for s in reads.values() if len(s) != 1][:3]
    per_step = [sum(1 for s in reads.values() if s == [k]) for k in range(1, steps + 1)]
    assert per_step == [rows] * steps
    return reads


# ------------------------------------------------------------------------------------------ mode both
GLOO_LINE = "rft trainer: the weights go to the explorer by broadcast over a gloo process group, through host memory"


@pytest.mark.parametrize("method", ["nccl", "checkpoint"])
def test_explorer_ahead_gives_the_staleness_the_settings_imply(assets, tmp_path, method):
    """Trinity-RFT's sync_method nccl runs the gloo broadcast (rft has no NCCL weight sync), and the trainer's log
    says so in one line (it said "(nccl)", a transport it does not run)."""
    out = tmp_path / "out"
    command = ("train", *overrides(assets, out, 6, "synchronizer.sync_interval=2", "synchronizer.sync_offset=1",
                                   f"synchronizer.sync_method={method}"))
    log = rft_here(*command, cwd=tmp_path).stdout
    if method == "nccl":
        assert GLOO_LINE + (", not NCCL: synchronizer.sync_method=nccl names Trinity-RFT's GPU-to-GPU NCCL "
                            "broadcast, which rft does not have (docs/scaling.md); gloo, the same broadcast through "
                            "host memory, runs instead") in log.splitlines(), log
    else:
        assert "gloo" not in log, log
    trainer = lines(out / "metrics.jsonl")
    explorer = lines(out / "explorer" / "metrics.jsonl")
    assert [x["step"] for x in trainer] == [1, 2, 3, 4, 5, 6] == [x["step"] for x in explorer]
    # explore step n generates with trainer version 2 * floor((n - 2) / 2): 0, 0, 0, 2, 2, 4
    assert [x["rollout/model_version"] for x in explorer] == [0, 0, 0, 2, 2, 4]
    # trained at step n from version n - 1: staleness 0, 1, 2, 1, 2, 1
    assert [x["rollout/staleness/max"] for x in trainer] == [0, 1, 2, 1, 2, 1]
    assert [x["rollout/staleness/mean"] for x in trainer] == [0, 1, 2, 1, 2, 1]
    assert all(x["actor/grad_norm"] > 0 for x in trainer)
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 6, 16)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out / "model")
    start = load_file(assets / "model" / "model.safetensors")
    trained = {n: p.detach() for n, p in model.named_parameters()}
    assert max(float((trained[n] - start[n]).abs().max()) for n in start if n in trained) > 1e-4
    # the same command again: complete, said before the explorer process is started or a model loads
    explored = (out / "explorer" / "metrics.jsonl").stat().st_mtime_ns
    again = rft_here(*command, cwd=tmp_path)
    assert f"rft: {out} is complete (6/6 steps, model in {out / 'model'})" in again.stdout, again.stdout
    assert "rft explorer" not in again.stdout and (out / "explorer" / "metrics.jsonl").stat().st_mtime_ns == explored


def test_a_trainer_step_reads_its_own_count_of_experiences_apart_from_the_explore_step(assets, tmp_path):
    """experience_buffer.train_batch_size (Trinity-RFT's buffer.train_batch_size) on the on-policy schedule: the
    explorer runs as a process of its own (16 experiences an explore step: 4 prompts x 4), each trainer step reads 8
    (two whole groups), the rest waits in the buffer for the next step; the trainer's log says how many it reads."""
    out = tmp_path / "out"
    log = rft_here("train", *overrides(assets, out, 3, "experience_buffer.train_batch_size=8"), cwd=tmp_path).stdout
    assert "reading 8 experiences a step" in log and "takes the newest weights published (sync files" in log, log
    trainer = lines(out / "metrics.jsonl")
    assert [x["step"] for x in trainer] == [1, 2, 3]
    assert [x["buffer/rows"] for x in trainer] == [8.0, 8.0, 8.0]
    assert all(x["actor/grad_norm"] > 0 for x in trainer)
    assert [x["step"] for x in lines(out / "explorer" / "metrics.jsonl")] == [1, 2, 3]  # its steps: 48 written
    reads = SQLBuffer(database_url(str(out / "buffer.sqlite"))).reads_by_id()
    assert len(reads) == 48 and sorted(s[0] for s in reads.values() if s) == [1] * 8 + [2] * 8 + [3] * 8


def test_the_weights_reach_an_explorer_that_generates_in_bf16(assets, tmp_path):
    """verl's rollout dtype bf16, computed as named (the suite computes in float32 elsewhere; a CPU with fast bf16
    picks it by default): the explorer's model is bf16, the trainer's master weights float32, and the gloo broadcast
    sends them in the explorer's dtype (it failed with gloo's size mismatch, 140800 against 70400 bytes). The
    trainer's log says what the broadcast runs over."""
    out = tmp_path / "out"
    env = {**ENV, "RFT_CPU_PRECISION": "requested"}
    proc = subprocess.Popen([sys.executable, "-m", "rft", "train", *overrides(
        assets, out, 3, "synchronizer.sync_offset=1", "synchronizer.sync_method=gloo",
        "actor_rollout_ref.rollout.dtype=bfloat16")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    log = finish(proc)
    assert "computing in bfloat16" in log, log
    assert GLOO_LINE in log.splitlines(), log
    explorer = lines(out / "explorer" / "metrics.jsonl")
    assert [x["rollout/model_version"] for x in explorer] == [0, 0, 1]  # version 1 came over the broadcast
    assert (out / "model" / "config.json").is_file()


TWO_TRAINERS = ("synchronizer.sync_interval=2", "trainer.n_gpus_per_node=2",
                "actor_rollout_ref.actor.ppo_epochs=2")  # epochs 2: old log-probs computed


@pytest.fixture(scope="module")
def two_trainers(assets, tmp_path_factory):
    """Mode both with trainer.n_gpus_per_node=2, uninterrupted, by sync method (each run once per module)."""
    runs: dict[str, tuple[Path, str]] = {}

    def run(method: str) -> tuple[Path, str]:
        if method not in runs:
            out = tmp_path_factory.mktemp(f"two_trainers_{method}") / "out"
            log = finish(start("train", *overrides(assets, out, 4, *TWO_TRAINERS, f"synchronizer.sync_method={method}"),
                               cwd=out.parent))
            runs[method] = out, log
        return runs[method]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("method", ["nccl", pytest.param("checkpoint", marks=pytest.mark.heavy)])  # the second
# weight-sync method's run in make test-heavy
def test_mode_both_with_two_trainer_processes_sends_the_gathered_weights_to_the_explorer(two_trainers, method):
    """Mode both with trainer.n_gpus_per_node=2: two FSDP trainer processes, rank 0 starting the explorer child
    and sending it the weights gathered from the shards (broadcast, or sync files). Explore steps 1 and 3 generate
    with versions 0 and 2, so they are on policy: the explorer's log-probs are the trainer's (fp32), which they are
    only if the gathered weights reached it; steps 2 and 4 are one update behind."""
    out, log = two_trainers(method)
    assert "on 2 processes" in log
    trainer, explorer = lines(out / "metrics.jsonl"), lines(out / "explorer" / "metrics.jsonl")
    assert [x["rollout/model_version"] for x in explorer] == [0, 0, 2, 2]
    assert [x["rollout/staleness/max"] for x in trainer] == [0, 1, 0, 1]
    diff = [x["training/rollout_probs_diff_max"] for x in trainer]
    assert diff[0] < 1e-4 and diff[2] < 1e-4 and diff[1] > 1e-4 and diff[3] > 1e-4, diff
    if method == "checkpoint":
        assert sorted(p.name for p in (out / "sync").iterdir()) == ["latest", "v00000002.safetensors"]
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert_logs(out, log, ["explorer.log", "trainer.log", "trainer_1.log"])


def assert_logs(out: Path, console: str, names: list[str]) -> None:
    """A log file per process (rft.monitor.logfile; rank 1 shows nothing at the default level, INFO), each line one
    the console showed (a substring: the processes share the console, and a print's line and its newline are two
    writes): the trainer's from its first line to the model it wrote, the explorer's to its last step."""
    assert sorted(p.name for p in (out / "log").iterdir()) == names
    messages = {}
    for name in names:
        messages[name] = [line.split(" ", 3)[3] for line in (out / "log" / name).read_text().splitlines()]
        assert all(m in console for m in messages[name]), (name, messages[name])
    assert messages["trainer.log"][0].startswith("rft trainer: steps 1..4 on 2 processes (cpu)")
    assert messages["trainer.log"][-1] == f"rft: model written to {out / 'model'}"
    assert messages["explorer.log"][-1] == "rft explorer: 4 steps written to the experience buffer"


@pytest.mark.heavy
def test_mode_both_with_two_trainer_processes_resumes_as_uninterrupted_after_a_rank_is_killed(assets, two_trainers,
                                                                                             tmp_path):
    """The nccl run above, its trainer rank 1 SIGKILLed once checkpoint 2 is written: the command fails (rank 0
    and the explorer child stop with it), and run again it resumes and trains as the uninterrupted run did, every
    experience read once."""
    reference, _ = two_trainers("nccl")
    out = tmp_path / "out"
    args = overrides(assets, out, 4, *TWO_TRAINERS, "synchronizer.sync_method=nccl")
    killed = start("train", *args, cwd=tmp_path)
    wait_for(lambda: checkpointed(out, 2) or killed.poll() is not None)
    os.kill(_descendant_with_rank(killed.pid, 1), signal.SIGKILL)
    log, _ = killed.communicate(timeout=180)
    assert killed.returncode != 0 and not (out / "model").exists(), log
    assert "resumed from" in finish(start("train", *args, cwd=tmp_path))
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert_same_training(out, reference)


def test_trinity_async_example_runs(assets, tmp_path):
    """examples/trinity_async.yaml (explorer one step ahead, nccl) with the test's model, data and size."""
    (tmp_path / "tasks").mkdir()
    shutil.copy(assets / "data" / "train.parquet", tmp_path / "tasks" / "train.parquet")
    shutil.copy(assets / "data" / "val.parquet", tmp_path / "tasks" / "val.parquet")
    example = Path(__file__).resolve().parents[1] / "examples" / "trinity_async.yaml"
    rft_here("train", str(example), f"model.model_path={assets / 'model'}", f"checkpoint_root_dir={tmp_path / 'ck'}",
             f"buffer.explorer_input.taskset.path={tmp_path / 'tasks'}",
             f"buffer.explorer_input.eval_tasksets.0.path={tmp_path / 'tasks'}", "buffer.batch_size=4",
             "algorithm.repeat_times=4", "buffer.total_steps=3", "explorer.eval_interval=3",
             "model.max_response_tokens=6", "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
             f"trainer.trainer_config.custom_reward_function.path={assets / 'reward.py'}", cwd=tmp_path)
    out = tmp_path / "ck" / "rft_examples" / "trinity_async"
    trainer = lines(out / "metrics.jsonl")
    assert [x["rollout/staleness/max"] for x in trainer] == [0, 1, 1]
    # the stale steps are corrected: old log-probs recomputed, truncated IS weights to the explorer's log-probs
    assert all("timing_s/old_log_prob" in x and "rollout_corr/rollout_is_mean" in x for x in trainer)
    assert trainer[0]["training/rollout_probs_diff_max"] < 1e-4  # on-policy: the same weights, fp32
    assert trainer[2]["training/rollout_probs_diff_max"] > 1e-4  # one step stale: the policy moved since
    explorer = lines(out / "explorer" / "metrics.jsonl")
    assert "val-core/arithmetic/reward/mean@1" in explorer[-1]
    assert (out / "explorer" / "val_before_train.json").is_file() and (out / "model" / "config.json").is_file()


# ------------------------------------------------------------------------------------ explore / train
def test_explore_without_a_trainer_says_what_it_waits_for(assets, tmp_path):
    """mode explore alone: its first step generates with the starting model, then it waits for the trainer's
    weights, says so in one line at once, and gives up after the sync timeout."""
    out = tmp_path / "out"
    proc = start("train", *overrides(assets, out, 3, "trainer.mode=explore"), "synchronizer.sync_timeout=3",
                 cwd=tmp_path)
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, log
    waiting = [x for x in log.splitlines() if "waiting for the trainer's weights" in x]
    assert waiting == [f"rft: waiting for the trainer's weights of version 1 in {out / 'sync'} (start "
                       "trainer.mode=train, Trinity-RFT's mode: train, with the same trainer.default_local_dir and "
                       "buffer); gives up after synchronizer.sync_timeout=3 s"], log
    assert "rft: error:" in log.splitlines()[-1] and "synchronizer.sync_timeout=3" in log.splitlines()[-1], log


def run_explore_and_train(assets: Path, tmp_path: Path, steps: int, *extra: str) -> Path:
    out = tmp_path / "out"
    common = overrides(assets, out, steps, "synchronizer.sync_interval=2", "synchronizer.sync_offset=1", *extra)
    trainer = start("train", *common, "trainer.mode=train", cwd=tmp_path)
    explorer = start("train", *common, "trainer.mode=explore", cwd=tmp_path)
    finish(explorer)
    finish(trainer)
    return out


def test_explore_and_train_as_two_commands_on_sqlite(assets, tmp_path):
    out = run_explore_and_train(assets, tmp_path, 4)
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert [x["step"] for x in lines(out / "metrics.jsonl")] == [1, 2, 3, 4]
    assert [x["rollout/model_version"] for x in lines(out / "explorer" / "metrics.jsonl")] == [0, 0, 0, 2]
    assert sorted(p.name for p in (out / "sync").iterdir()) == ["latest", "v00000002.safetensors"]
    # each command again: the trainer says the run is complete before a model loads, the explorer that its steps
    # are written, and neither writes anything (the explorer said "4 steps written" and rewrote its config.yaml)
    common = overrides(assets, out, 4, "synchronizer.sync_interval=2", "synchronizer.sync_offset=1")
    written = {p: p.stat().st_mtime_ns for p in out.rglob("*")  # SQLite's own files change as it opens and closes;
               if p.is_file() and not p.name.startswith((".rft", "buffer.sqlite", "explorer.log"))}  # a log, its lines
    trained = rft_here("train", *common, "trainer.mode=train", cwd=tmp_path)
    assert f"rft: {out} is complete (4/4 steps, model in {out / 'model'})" in trained.stdout, trained.stdout
    explored = rft_here("train", *common, "trainer.mode=explore", cwd=tmp_path)
    assert (f"rft explorer: all 4 steps already written to the experience buffer ({out / 'explorer'}); nothing to "
            "do (raise trainer.total_training_steps to explore on)") in explored.stdout.splitlines(), explored.stdout
    assert {p: p.stat().st_mtime_ns for p in written} == written


def test_explore_and_train_on_postgresql(assets, tmp_path):
    from pg_server import postgres

    with postgres() as url:
        out = run_explore_and_train(assets, tmp_path, 3, f"experience_buffer.path={url}",
                                    "experience_buffer.storage_type=sql")
        assert not (out / "buffer.sqlite").exists()
        assert_each_read_once(url, 3, 16)
    assert (out / "model" / "model.safetensors").is_file()


def _descendant_with_rank(pid: int, rank: int) -> int:
    """The pid of the `python -m rft` process below `pid` that a launcher started as `rank`."""
    children = {}
    for proc in Path("/proc").iterdir():
        try:
            children.setdefault(int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(proc.name))
        except (ValueError, OSError, IndexError):
            continue
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            env = (Path("/proc") / str(child) / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"LOCAL_RANK=" + str(rank).encode() in env:
            return child
        todo += children.get(child, [])
    raise AssertionError(f"no rank {rank} below {pid}")


@pytest.mark.heavy
def test_train_on_two_processes_trains_as_one_process_and_resumes_after_a_rank_is_killed(assets, tmp_path):
    """Four explore steps (the explorer alone; sync_interval 4: all with the starting weights) in a SQLite buffer,
    trained by `trainer.mode=train` on one process and on two (FSDP: rank 0 reads each step's 16 experiences once,
    every rank trains its contiguous half, the groups labelled over the whole step). Rank 1 of the two is killed
    once checkpoint 1 is written and the command run again: the same losses step by step as one process, the same
    final weights, and every experience read by exactly one step (the reads after the checkpoint read again)."""
    common = ("synchronizer.sync_interval=4", "synchronizer.sync_method=checkpoint")
    explored = tmp_path / "explored"
    rft_here("train", *overrides(assets, explored, 4, *common, "trainer.mode=explore"), cwd=tmp_path)
    runs = {n: tmp_path / f"train{n}" for n in (1, 2)}
    for run in runs.values():
        shutil.copytree(explored, run)
    rft_here("train", *overrides(assets, runs[1], 4, *common, "trainer.mode=train"), cwd=tmp_path)
    two_args = overrides(assets, runs[2], 4, *common, "trainer.mode=train", "trainer.n_gpus_per_node=2")
    killed = start("train", *two_args, cwd=tmp_path)
    wait_for(lambda: (runs[2] / "checkpoints" / "global_step_1").is_dir() or killed.poll() is not None)
    os.kill(_descendant_with_rank(killed.pid, 1), signal.SIGKILL)
    killed.communicate(timeout=120)
    assert killed.returncode != 0 and not (runs[2] / "model").exists()
    out = finish(start("train", *two_args, cwd=tmp_path))
    assert "on 2 processes" in out and "resum" in out.lower()
    one, two = lines(runs[1] / "metrics.jsonl"), lines(runs[2] / "metrics.jsonl")
    assert [x["step"] for x in two] == [1, 2, 3, 4]
    compared = [k for k in one[0] if k.startswith(("actor/", "critic/score", "critic/advantages"))]
    assert "actor/pg_loss" in compared and "actor/grad_norm" in compared
    for a, b in zip(one, two):
        assert {k: round(b[k], 5) for k in compared} == pytest.approx({k: round(a[k], 5) for k in compared},
                                                                      rel=1e-4, abs=1e-5)
    final = [load_file(run / "model" / "model.safetensors") for run in runs.values()]
    apart = {k: float((final[0][k] - final[1][k]).abs().max()) for k in final[0]}
    # float32 rounding of two ranks' summed gradients against one's, through 4 Adam steps: 1.5e-5 at most under
    # PyTorch's AVX2 kernels on an Intel Xeon (below 1e-5 natively); one step at this lr moves a weight by ~1e-3
    assert max(apart.values()) < 5e-5, sorted(apart.items(), key=lambda kv: -kv[1])[:3]
    assert_each_read_once(database_url(str(runs[2] / "buffer.sqlite")), 4, 16)


TWO_EXPLORERS = ("synchronizer.sync_interval=2", "trainer.explorer_num=2")


@pytest.fixture(scope="module")
def two_explorers(assets, tmp_path_factory) -> Path:
    """Trinity's engine_num 2 as trainer.explorer_num=2 in mode both, uninterrupted: the trainer starts two explorer
    processes, which take turns at the steps (sync files, the default with several explorers)."""
    out = tmp_path_factory.mktemp("two_explorers") / "out"
    finish(start("train", *overrides(assets, out, 4, *TWO_EXPLORERS), cwd=out.parent))
    return out


@pytest.mark.slow
def test_mode_both_with_two_explorer_processes(two_explorers):
    out = two_explorers
    assert [x["step"] for x in lines(out / "explorer" / "metrics.jsonl")] == [1, 3]
    assert [x["step"] for x in lines(out / "explorer_1" / "metrics.jsonl")] == [2, 4]
    assert [x["rollout/model_version"] for x in lines(out / "explorer_1" / "metrics.jsonl")] == [0, 2]
    assert [x["rollout/staleness/max"] for x in lines(out / "metrics.jsonl")] == [0, 1, 0, 1]
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 4, 16)
    assert sorted(p.name for p in (out / "log").iterdir()) == ["explorer.log", "explorer_1.log", "trainer.log"]


@pytest.mark.slow
def test_two_explorers_take_their_weights_by_broadcast_as_by_sync_files(assets, two_explorers, tmp_path):
    """Trinity-RFT's engine_num 4 with sync_method nccl (its toolace / agentscope examples): each explorer has a
    broadcast group of its own with the trainer, and takes exactly the versions its own steps generate with (explorer
    1 of 2, steps 2 and 4 at sync_interval 2: versions 0 and 2; explorer 0, steps 1 and 3: 0 and 2), so the run is
    the one the sync files give: the same model versions, metrics and final weights."""
    out = tmp_path / "out"
    log = finish(start("train", *overrides(assets, out, 4, *TWO_EXPLORERS, "synchronizer.sync_method=nccl"),
                       cwd=tmp_path))
    assert GLOO_LINE in (out / "log" / "trainer.log").read_text(), log
    assert not (out / "sync").exists()  # nothing went through files
    for name in ("explorer", "explorer_1"):
        assert ([x["rollout/model_version"] for x in lines(out / name / "metrics.jsonl")]
                == [x["rollout/model_version"] for x in lines(two_explorers / name / "metrics.jsonl")] == [0, 2])
    mine, files = lines(out / "metrics.jsonl"), lines(two_explorers / "metrics.jsonl")
    assert [x["actor/pg_loss"] for x in mine] == pytest.approx([x["actor/pg_loss"] for x in files], abs=1e-6)
    a, b = (load_file(o / "model" / "model.safetensors") for o in (out, two_explorers))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-6


@pytest.mark.heavy  # 70 s: make test-heavy (make test keeps under 20 minutes)
def test_two_explore_commands_and_a_trainer_on_postgresql_survive_kills_and_train_as_uninterrupted(
        assets, two_explorers, tmp_path):
    """Two `mode: explore` commands (explorer_num 2, ranks 0 and 1: as on two machines) and one `mode: train` on one
    PostgreSQL buffer. Explorer 0 generates steps 1 and 3, explorer 1 steps 2 and 4; explorer 1 is killed after its
    first step and started again, then the trainer after its first checkpoint. Every step's experiences come from
    its one explorer and carry its tag, no task is generated twice, the trainer reads every experience exactly
    once, in explore-step order whichever explorer wrote first: the metrics and final weights are those of the
    uninterrupted mode-both run with two explorers."""
    import sqlalchemy as sa
    from pg_server import postgres

    from rft.buffer.sql import EXPERIENCES
    from rft.experience import Experience

    out = tmp_path / "out"
    with postgres() as url:
        common = overrides(assets, out, 4, *TWO_EXPLORERS, f"experience_buffer.path={url}",
                           "experience_buffer.storage_type=sql")
        trainer = start("train", *common, "trainer.mode=train", cwd=tmp_path)
        explorers = [start("train", *common, "trainer.mode=explore", f"trainer.explorer_rank={i}", cwd=tmp_path)
                     for i in (0, 1)]
        wait_for(lambda: (out / "explorer_1" / "metrics.jsonl").is_file()
                 and (out / "explorer_1" / "metrics.jsonl").read_text().strip())
        explorers[1].kill()
        explorers[1].communicate(timeout=60)
        explorers[1] = start("train", *common, "trainer.mode=explore", "trainer.explorer_rank=1", cwd=tmp_path)
        wait_for(lambda: checkpointed(out, 1))
        trainer.kill()
        trainer.communicate(timeout=60)
        trainer = start("train", *common, "trainer.mode=train", cwd=tmp_path)
        for proc in (*explorers, trainer):
            finish(proc)
        assert_each_read_once(url, 4, 16)
        with SQLBuffer(url).engine.connect() as conn:
            rows = conn.execute(sa.select(EXPERIENCES.c.explore_step, EXPERIENCES.c.payload)).all()
    by_step: dict[int, set] = {}
    prompts: dict[int, set] = {}
    for step, payload in rows:
        e = Experience.from_bytes(payload)
        by_step.setdefault(step, set()).add(e.info["explorer"])
        prompts.setdefault(step, set()).add(json.dumps(e.info["raw_prompt"]))
    assert by_step == {1: {0}, 2: {1}, 3: {0}, 4: {1}}
    assert all(len(p) == 4 for p in prompts.values()) and len(set().union(*prompts.values())) == 16
    assert [x["step"] for x in lines(out / "explorer" / "metrics.jsonl")] == [1, 3]
    assert [x["step"] for x in lines(out / "explorer_1" / "metrics.jsonl")] == [2, 4]
    assert_same_training(out, two_explorers)


@pytest.mark.heavy  # ~45 s: make test-heavy
def test_the_database_restarting_under_a_running_explorer_and_trainer_loses_nothing(assets, tmp_path):
    """PostgreSQL stopped for 2 s and started again while `explore` and `train` run on it: both ride the outage out
    (each buffer transaction retried whole, a warning saying so), finish, and every experience is read exactly
    once."""
    from pg_server import postgres

    out = tmp_path / "out"
    with postgres() as url:
        common = overrides(assets, out, 6, "synchronizer.sync_interval=2", "synchronizer.sync_offset=1",
                           f"experience_buffer.path={url}", "experience_buffer.storage_type=sql")
        trainer = start("train", *common, "trainer.mode=train", cwd=tmp_path)
        explorer = start("train", *common, "trainer.mode=explore", cwd=tmp_path)
        wait_for(lambda: (out / "metrics.jsonl").is_file() and len(lines(out / "metrics.jsonl")) >= 2)
        url.restart(down_s=2.0)
        logs = finish(explorer) + finish(trainer)
        assert "retrying for up to" in logs and "succeeded after" in logs
        assert_each_read_once(url, 6, 16)
    assert [x["step"] for x in lines(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def checkpointed(out: Path, step: int) -> bool:
    """The checkpoint of `step` (or a later one) is committed: `latest` names it. Its folder appears, renamed whole,
    a moment before; a kill in between resumes from the previous one, as it should."""
    pointer = out / "checkpoints" / "latest"
    try:
        return int(pointer.read_text().strip().removeprefix("global_step_")) >= step
    except (FileNotFoundError, ValueError):
        return False


def wait_for(predicate, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


# ------------------------------------------------------------------------------- killed mid-schedule
# 0.05 s a response: an explore step takes ~1 s, so the test stops the explorer between two of its steps for sure
SLOW_REWARD = SHAPED_REWARD + """
import time

_score = compute_score


def compute_score(*args, **kwargs):
    time.sleep(0.05)
    return _score(*args, **kwargs)
"""


@pytest.fixture(scope="module")
def slow_assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("slow"), SLOW_REWARD)


def decoupled(assets: Path, out: Path, method: str) -> list[str]:
    """Mode both as two processes, the explorer one step ahead: explore step n generates with version n - 2."""
    return overrides(assets, out, 4, "synchronizer.sync_offset=1", f"synchronizer.sync_method={method}")


@pytest.fixture(scope="module")
def uninterrupted(slow_assets, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    rft_here("train", *decoupled(slow_assets, out, "nccl"), cwd=out.parent)
    return out


@pytest.mark.parametrize("method,victim", [pytest.param("nccl", "explorer", marks=pytest.mark.heavy),
                                           pytest.param("nccl", "both", marks=pytest.mark.heavy),
                                           ("checkpoint", "explorer")])
def test_decoupled_run_killed_mid_schedule_resumes_as_if_uninterrupted(slow_assets, uninterrupted, tmp_path, method,
                                                                       victim):
    """Mode both killed with the trainer's checkpoint at step 2 and the explorer's position at step 2, whose next
    step generates with version 1, older than the checkpoint: the rerun replays the explorer's schedule, and its
    versions, experiences and final weights are the uninterrupted run's (the nccl rerun generated step 3 with
    version 2 and ended 3e-4 away)."""
    out = tmp_path / "out"
    args = decoupled(slow_assets, out, method)
    trainer = start("train", *args, cwd=tmp_path)
    url = database_url(str(out / "buffer.sqlite"))
    wait_for(lambda: explored(out, url) >= 2)
    (child,) = Path(f"/proc/{trainer.pid}/task/{trainer.pid}/children").read_text().split()
    os.kill(int(child), signal.SIGSTOP)
    assert explored(out, url) == 2, "the explorer was stopped after its step 3 was written: the test's timing failed"
    wait_for(lambda: checkpointed(out, 2))
    if victim == "both":  # the machine went down
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    os.kill(int(child), signal.SIGKILL)
    log, _ = trainer.communicate(timeout=600)
    if victim == "explorer":  # the trainer saw its child die: one line, exit 2 (it was reported as a bug in rft)
        errors = [x for x in log.splitlines() if x.startswith("rft: error:")]
        assert trainer.returncode == 2 and len(errors) == 1, log
        assert "the explorer process exited with code -9" in errors[0] and "run the same command again" in errors[0]
    proc = rft_here("train", *args, cwd=tmp_path)
    assert "resumed from" in proc.stdout and "global_step_2" in proc.stdout
    assert_same_run(out, uninterrupted, url)


def explored(out: Path, url: str) -> int:
    """The explorer's step as its buffer records it (0 before the buffer exists)."""
    if not (out / "buffer.sqlite").exists():
        return 0
    return (SQLBuffer(url).explorer_state() or {}).get("step", 0)


def assert_same_run(out: Path, reference: Path, url: str) -> None:
    """The run in `out` explored and trained as the uninterrupted `reference`: each step's weights version,
    every experience read once, the same training metrics (1e-6) and final weights (1e-6)."""
    explorer = lines(out / "explorer" / "metrics.jsonl")
    assert [x["step"] for x in explorer] == [1, 2, 3, 4]
    assert [x["rollout/model_version"] for x in explorer] == [0, 0, 1, 2]
    assert_each_read_once(url, 4, 16)
    assert_same_training(out, reference)


def assert_same_training(out: Path, reference: Path) -> None:
    """The same training metrics step by step (1e-6) and final weights (1e-6) as `reference`'s."""
    trained, expected = lines(out / "metrics.jsonl"), lines(reference / "metrics.jsonl")
    assert [x["step"] for x in trained] == [x["step"] for x in expected]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
        assert [x[key] for x in trained] == pytest.approx([x[key] for x in expected], abs=1e-6), key
    a, b = load_file(out / "model" / "model.safetensors"), load_file(reference / "model" / "model.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


@pytest.mark.heavy  # 40 s: make test-heavy
def test_killed_explorer_and_trainer_of_two_commands_resume_as_if_uninterrupted(slow_assets, uninterrupted, tmp_path):
    """Modes explore and train as two commands: SIGKILL the explorer mid-run and start it again, then the trainer:
    the run finishes, every experience is read once, and versions, metrics and weights are those of the same
    schedule run uninterrupted (mode both, nccl)."""
    out = tmp_path / "out"
    args = decoupled(slow_assets, out, "checkpoint")
    url = database_url(str(out / "buffer.sqlite"))
    trainer = start("train", *args, "trainer.mode=train", cwd=tmp_path)
    explorer = start("train", *args, "trainer.mode=explore", cwd=tmp_path)
    wait_for(lambda: explored(out, url) >= 2)
    explorer.send_signal(signal.SIGKILL)
    explorer.wait()
    explorer = start("train", *args, "trainer.mode=explore", cwd=tmp_path)
    trained = lambda: len(lines(out / "metrics.jsonl")) if (out / "metrics.jsonl").exists() else 0
    wait_for(lambda: trained() >= 2)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    trainer = start("train", *args, "trainer.mode=train", cwd=tmp_path)
    finish(explorer)
    assert "resumed from" in finish(trainer)
    assert_same_run(out, uninterrupted, url)


# ------------------------------------------------------------------------------------ one buffer, one run
def test_processes_of_another_run_are_refused_by_the_buffer_in_one_line(assets, tmp_path):
    """A buffer explorer 0 of two began (explorer_num 2, rollout.n 4, the tiny model) refuses, each in one line
    before training: a trainer told of one explorer (it stopped after half the steps, exit 0), a run with another
    rollout.n (it trained on the first run's groups), an explorer on another model (it died in the update as a bug
    in rft). The same terms join: explorer 1 writes its step and the trainer reads both. Then an explorer and a
    trainer of another run (another output folder) on that finished buffer, and the run's trainer resuming on a
    buffer that is not its own, are refused too: the new run's explorer said "all 2 steps already written ...
    nothing to do" and exited 0, taking the old run's rows as its own; now the buffer names the run that owns it
    (`rft.trainer.run_folder.claim_buffer`)."""
    from rft.models.tiny import init_model

    out = tmp_path / "out"
    two = ("synchronizer.sync_interval=2", "trainer.explorer_num=2")
    rft_here("train", *overrides(assets, out, 2, *two), "trainer.mode=explore", cwd=tmp_path)
    buffer = f"experience_buffer.path={out / 'buffer.sqlite'}"
    init_model("small", tmp_path / "other", seed=0)
    cases = [
        (overrides(assets, tmp_path / "t", 2, "synchronizer.sync_interval=2", buffer, "trainer.mode=train"),
         "is shared by trainer.explorer_num=2 explorers (as its run began); this process has trainer.explorer_num=1"),
        (overrides(assets, tmp_path / "n", 2, *two, buffer, "trainer.mode=train", "actor_rollout_ref.rollout.n=2"),
         "belongs to a run with actor_rollout_ref.rollout.n=4 (groups of that many responses); this run has "
         "rollout.n=2"),
        (overrides(assets, tmp_path / "m", 2, *two, buffer, "trainer.mode=explore", "trainer.explorer_rank=1",
                   f"actor_rollout_ref.model.path={tmp_path / 'other'}"),
         "belongs to a run of another model (qwen2, hidden_size 128, 4 layers"),
    ]
    for args, said in cases:
        proc = rft_here("train", *args, cwd=tmp_path, check=False)
        errors = [x for x in proc.stderr.splitlines() if x.startswith("rft: error:")]
        assert proc.returncode == 2 and len(errors) == 1 and said in errors[0], proc.stderr
        assert "bug in rft" not in proc.stderr
    rft_here("train", *overrides(assets, out, 2, *two), "trainer.mode=explore", "trainer.explorer_rank=1",
             cwd=tmp_path)
    rft_here("train", *overrides(assets, out, 2, *two), "trainer.mode=train", cwd=tmp_path)
    assert_each_read_once(database_url(str(out / "buffer.sqlite")), 2, 16)
    # a new run's explorer and trainer (another folder) on the finished buffer, with the same terms: the explorer
    # took its steps as written, the trainer re-read every experience; the run's own trainer resuming on a buffer
    # moved away: it trained explore steps 1.. as its steps 3..
    (out / "buffer.sqlite").rename(tmp_path / "kept.sqlite")
    run = (out / ".rft-run-id").read_text().strip()
    owned = (f"experience_buffer.path {database_url(str(tmp_path / 'kept.sqlite'))!r} belongs to another run (run {run[:8]}, "
             f"output folder {out.resolve()} on {socket.gethostname()}), and this run (output folder "
             f"{(tmp_path / 'new').resolve()}) would take that run's experiences as its own: give this run a buffer "
             "of its own (another experience_buffer.path, or move that one aside), or resume that run with "
             f"trainer.default_local_dir={out.resolve()}")
    new = overrides(assets, tmp_path / "new", 2, *two, f"experience_buffer.path={tmp_path / 'kept.sqlite'}")
    later = [
        ([*new, "trainer.mode=explore"], owned),
        ([*new, "trainer.mode=train"], owned),
        (overrides(assets, out, 3, *two, "trainer.mode=train"), "holds no read of trainer steps 1..2, yet the "
                                                                 "trainer resumes from its checkpoint of step 2"),
    ]
    for args, said in later:
        proc = rft_here("train", *args, cwd=tmp_path, check=False)
        errors = [x for x in proc.stderr.splitlines() if x.startswith("rft: error:")]
        assert proc.returncode == 2 and len(errors) == 1 and said in errors[0], proc.stderr
        assert "already written" not in proc.stdout
    assert not (tmp_path / "new" / "explorer" / "metrics.jsonl").exists()


@pytest.mark.heavy
def test_a_second_explorer_of_the_same_rank_is_refused_while_the_first_runs(assets, tmp_path):
    """Two explore commands with one explorer_rank on one buffer (from two run folders): the second stops in one
    line (both used to exit 0, every task of their steps generated twice): another run's, it names the run that owns
    the buffer (the role's holder is refused by pid in tests/test_buffer.py). Once the first is killed, its rerun
    takes the rank over and resumes."""
    out = tmp_path / "out"
    url = database_url(str(out / "buffer.sqlite"))
    args = overrides(assets, out, 3, "synchronizer.sync_interval=1", "synchronizer.sync_timeout=600")
    first = start("train", *args, "trainer.mode=explore", cwd=tmp_path)  # waits at step 2 for the trainer's weights
    try:
        wait_for(lambda: explored(out, url) >= 1)
        proc = rft_here("train", *overrides(assets, tmp_path / "second", 3, f"experience_buffer.path={out / 'buffer.sqlite'}",
                                            "synchronizer.sync_interval=1"), "trainer.mode=explore",
                        cwd=tmp_path, check=False)
        errors = [x for x in proc.stderr.splitlines() if x.startswith("rft: error:")]
        assert proc.returncode == 2 and len(errors) == 1, proc.stderr
        assert f"belongs to another run (run {(out / '.rft-run-id').read_text()[:8]}, output folder" in errors[0]
    finally:
        first.kill()
        first.wait(60)
    rerun = start("train", *args, "trainer.mode=explore", cwd=tmp_path)
    trainer = start("train", *args, "trainer.mode=train", cwd=tmp_path)
    finish(rerun)
    finish(trainer)
    assert_each_read_once(url, 3, 16)


@pytest.mark.heavy  # 50 s: make test-heavy
def test_the_explorer_child_of_a_killed_mode_both_trainer_ends_and_the_rerun_starts(assets, tmp_path):
    """Mode both's trainer SIGKILLed while its explorer child waits for weights (sync files): the child, left
    behind, stops within seconds with one line (it waited out the sync timeout, holding its role and the run
    folder, so the command run again was refused); the command run again finishes."""
    out = tmp_path / "out"
    args = overrides(assets, out, 3, "synchronizer.sync_method=checkpoint", "synchronizer.sync_interval=1",
                     "synchronizer.sync_offset=1", "synchronizer.sync_timeout=600")
    trainer = start("train", *args, cwd=tmp_path)
    wait_for(lambda: (out / "explorer" / "metrics.jsonl").exists())
    children = Path(f"/proc/{trainer.pid}/task/{trainer.pid}/children").read_text().split()
    # the explorer child, not another child of the trainer's (a compile or reward worker)
    (child,) = [c for c in children if b"RFT_ROLE=explorer" in Path(f"/proc/{c}/environ").read_bytes()]
    trainer.send_signal(signal.SIGKILL)
    log, _ = trainer.communicate(timeout=60)  # the pipe ends when the child, which shares it, is exiting too

    def gone() -> bool:  # the kernel closes an exiting process's files before it turns zombie: a short wait
        try:
            return "zombie" in Path(f"/proc/{child}/status").read_text().lower()
        except FileNotFoundError:
            return True

    wait_for(gone, timeout=10)
    errors = [x for x in log.splitlines() if x.startswith("rft: error:")]
    assert errors == [f"rft: error: the trainer process (pid {trainer.pid}) that started this explorer is gone; "
                      "the explorer stops too: run the same command again to resume"], log
    finish(start("train", *args, cwd=tmp_path))
    assert [x["step"] for x in lines(out / "metrics.jsonl")][-1] == 3


# ------------------------------------------------------------------------------------------------ bench
def test_bench_evaluates_every_checkpoint(assets, tmp_path):
    out = tmp_path / "out"
    val = f"data.val_files={assets / 'data' / 'val.parquet'}"
    rft_here("train", *overrides(assets, out, 2, val, "trainer.val_before_train=true", "trainer.test_freq=2"), cwd=tmp_path)
    rft_here("train", *overrides(assets, out, 2, val, "trainer.mode=bench", "trainer.val_before_train=true"), cwd=tmp_path)
    rows = lines(out / "bench" / "metrics.jsonl")
    assert [(r["step"], r["checkpoint"]) for r in rows] == [(0, "start"), (1, "global_step_1"), (2, "global_step_2")]
    key = "arithmetic/reward/mean@1"
    # the starting model and the last checkpoint score what the run's own validation scored with them (greedy)
    assert rows[0][f"bench/{key}"] == json.loads((out / "val_before_train.json").read_text())[f"val-core/{key}"]
    assert rows[2][f"bench/{key}"] == lines(out / "metrics.jsonl")[-1][f"val-core/{key}"]
    rft_here("train", *overrides(assets, out, 2, val, "trainer.mode=bench", "trainer.bench_on_latest_checkpoint=true",
                                 "trainer.val_before_train=false"), cwd=tmp_path)
    assert [r["checkpoint"] for r in lines(out / "bench" / "metrics.jsonl")] == ["global_step_2"]
    # a torn weight file in the newest checkpoint: named and skipped before any evaluation (bench used to score the
    # others, then end in a SafetensorError); the newest whole one is the latest
    weights = out / "checkpoints" / "global_step_2" / "policy.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    proc = rft_here("train", *overrides(assets, out, 2, val, "trainer.mode=bench", "trainer.val_before_train=false"),
                    cwd=tmp_path)
    assert "global_step_2 is damaged" in proc.stdout
    assert [r["checkpoint"] for r in lines(out / "bench" / "metrics.jsonl")] == ["global_step_1"]


@pytest.mark.heavy
def test_an_explorer_that_dies_before_joining_stops_the_trainer_at_once(assets, tmp_path):
    """Mode both, nccl: the explorer child fails while it starts (its reward file raises on import there), before
    it joins the weight broadcast. The trainer, waiting for it to join, says so in one line and exits 2 (it used to
    wait in torch.distributed's rendezvous for the whole sync timeout, deaf to SIGTERM)."""
    reward = tmp_path / "reward.py"
    reward.write_text("import os\nif os.environ.get('RFT_ROLE') == 'explorer':\n    raise ImportError('no')\n"
                      + (assets / "reward.py").read_text())
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "rft", "train", *overrides(
        assets, out, 3, "synchronizer.sync_offset=1", "synchronizer.sync_method=nccl", "synchronizer.sync_timeout=900",
        f"custom_reward_function.path={reward}")], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("rft: error:")]
    assert any("the explorer process exited with code 2 at trainer step 0" in x for x in errors), proc.stderr
    assert "bug in rft" not in proc.stderr


def test_mode_both_whose_trainer_is_killed_leaves_an_explorer_that_says_so(assets, tmp_path):
    """The trainer of mode both SIGKILLed: its explorer child stops with one line naming the trainer and how to
    resume, whether its next weight broadcast breaks first or its watch on the parent process sees it gone first (it
    used to print gloo's error as a bug in rft)."""
    out = tmp_path / "out"
    trainer = start("train", *overrides(assets, out, 50, "synchronizer.sync_offset=1",
                                        "synchronizer.sync_method=nccl"), cwd=tmp_path)
    explorer_log = out / "explorer" / "metrics.jsonl"
    wait_for(lambda: explorer_log.exists() and len(lines(explorer_log)) >= 1)
    trainer.send_signal(signal.SIGKILL)
    log, _ = trainer.communicate(timeout=600)  # to the end of the pipe the explorer child shares: it has exited
    errors = [x for x in log.splitlines() if x.startswith("rft: error:")]
    # which the explorer sees first is the machine's timing: its next broadcast breaking, or (under load, when the
    # step it is in takes longer than the parent watch's poll) the trainer process gone; either names the trainer
    assert len(errors) == 1, log
    assert ("the weight broadcast from the trainer broke" in errors[0]
            or "the trainer process" in errors[0] and "is gone" in errors[0]), log
    assert "run the same command again to resume" in errors[0] and "bug in rft" not in log
