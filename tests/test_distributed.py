"""Several processes on CPU (gloo): the split of a step's prompts, the collectives, and `rft train` with
trainer.n_gpus_per_node=2 through the real command line (torch's elastic launcher): with FSDP2 and FSDP1 the same
loss and gradient norm as one process, three steps, a 2-process checkpoint resumed by one process; PPO with a critic
and a LoRA actor, and a one-process checkpoint resumed by two processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here
from rl_helpers import DENSE_REWARD

from rft.distributed import padded_shard, shard_bounds, step_shard

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
for _key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    ENV.pop(_key, None)

BF16 = os.environ.get("RFT_CPU_PRECISION") == "requested"
"""`make test-bf16` (tests/conftest.py): the runs compute in the precision their configs name, bf16 by verl's defaults;
one process and two then sum in other orders and round differently in bf16 (a gradient norm of 7.8 agreed to 1.5e-4
relative, a policy loss of 0.055 to 1e-4 after 3 steps; sequence parallel's gradient norm of 6.3 to 1.8e-3), so
`close` allows 5e-3: still far below what a lost or doubled gradient moves (a factor)."""

APART = 1e-2 if BF16 else 1e-4
"""How far two runs that should agree may end apart (`weights_apart`): bf16's one- and two-process runs end 0.16% of
the movement apart (measured); a hybrid mesh's all-reduce and a 1-D mesh's reduce-scatter round their sums apart the
same way."""


def close(a: float, b: float, tol: float = 1e-5) -> bool:
    """Equal to `tol`, relative for values above 1 (a gradient norm of 8 agrees to ~4e-7 relative here); 5e-3 at
    least in bf16 (BF16)."""
    tol = max(tol, 5e-3) if BF16 else tol
    return abs(a - b) <= tol * max(1.0, abs(a))


def weights_apart(a: dict, b: dict, start: dict) -> float:
    """How far apart two runs' final weights are: the largest difference of an element in float32 runs; in bf16 the
    difference's norm over the norm of what training moved (`start` -> `a`). Adam moves an element by about lr
    whatever its gradient's size, so an element whose gradient is near 0 and rounds to the other sign in one run ends
    2 lr from the other run's: the largest element says nothing there, the share of the movement does."""
    if not BF16:
        return max(float((a[k] - b[k]).abs().max()) for k in a)
    apart = sum(float((a[k] - b[k]).double().pow(2).sum()) for k in a) ** 0.5
    moved = sum(float((a[k] - start[k]).double().pow(2).sum()) for k in a) ** 0.5
    return apart / moved


# ------------------------------------------------------------------------------------------ the split, pure
def test_shard_bounds_cover_every_item_once():
    for n in range(0, 11):
        for world in range(1, 5):
            parts = [shard_bounds(n, r, world) for r in range(world)]
            assert [i for lo, hi in parts for i in range(lo, hi)] == list(range(n))
            assert max(hi - lo for lo, hi in parts) - min(hi - lo for lo, hi in parts) <= 1


def test_step_shard_takes_a_share_of_every_mini_batch():
    # 8 prompts, mini-batches of 4, 2 ranks: rank 0 holds 0,1 of the first mini-batch and 4,5 of the second
    assert step_shard(8, 4, 0, 2) == [0, 1, 4, 5]
    assert step_shard(8, 4, 1, 2) == [2, 3, 6, 7]
    assert step_shard(8, 8, 1, 2) == [4, 5, 6, 7]
    assert step_shard(6, 6, 0, 1) == list(range(6))
    # every prompt once, and rank r's j-th local mini-batch is its share of global mini-batch j
    for world in (1, 2, 4):
        shards = [step_shard(16, 8, r, world) for r in range(world)]
        assert sorted(i for s in shards for i in s) == list(range(16))
        per = 8 // world
        for j in range(2):
            assert sorted(i for s in shards for i in s[j * per:(j + 1) * per]) == list(range(j * 8, j * 8 + 8))
    with pytest.raises(ValueError, match="do not split evenly"):
        step_shard(8, 3, 0, 2)


def test_padded_shard_gives_every_rank_the_same_number_of_prompts():
    # 7 validation prompts over 2 ranks: 4 each, rank 1's last one a repeat to drop
    assert padded_shard(7, 0, 2) == ([0, 1, 2, 3], 4)
    assert padded_shard(7, 1, 2) == ([4, 5, 6, 6], 3)
    assert padded_shard(1, 1, 2) == ([0], 0)


# --------------------------------------------------------------------------- the collectives, 2 gloo processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collectives(rank: int, world: int, port: int, results) -> None:
    """One rank: checks of Dist's collectives and of the batch-wide math against one process (all in float64)."""
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        from rft.algorithms import AdvantageInputs, compute_advantages
        from rft.batch import Batch
        from rft.distributed import Dist
        from rft.workers.minibatch import mini_batch_norm

        dist = Dist(rank=rank, world_size=world)
        out = {}
        # rows differ per rank (3 and 2), gathered in rank order; bool survives gloo
        x = torch.arange(6, dtype=torch.float64).view(3, 2)[: 3 - rank] + 10 * rank
        out["gather"] = dist.gather_rows(x).tolist()
        out["gather_bool"] = dist.gather_rows(torch.tensor([rank == 0, True])).tolist()
        out["sum_metrics"] = dist.sum_metrics({"a": 1.0 + rank, "b": 0.5})
        out["all_true"] = (dist.all_true(True), dist.all_true(rank == 0))
        out["max_int"] = dist.max_int(3 + rank)
        out["objects"] = dist.gather_objects({"rank": rank})
        # the AggNorm of a mini-batch split over the ranks counts every rank's tokens and rows
        g = torch.Generator().manual_seed(0)
        mask = (torch.rand(8, 5, generator=g) > 0.3).long()
        rewards = torch.randn(8, 5, generator=g, dtype=torch.float64) * mask
        group = torch.arange(4).repeat_interleave(2)
        lo, hi = shard_bounds(8, rank, world)
        mine = Batch(prompt_ids=torch.zeros(hi - lo, 1, dtype=torch.long), prompt_mask=torch.ones(hi - lo, 1),
                     response_ids=torch.zeros(hi - lo, 5, dtype=torch.long), response_mask=mask[lo:hi],
                     group=group[lo:hi])
        norm = mini_batch_norm(mine, 5, dist)
        out["norm"] = (norm.num_tokens, norm.num_seqs) == (float(mask.sum()), 8.0)
        # batch-wide advantages: each rank's rows of the estimator run on the gathered inputs equal one process's
        for name, extra in (("reinforce_plus_plus", {}), ("reinforce_plus_plus_baseline", {}), ("gpg", {}),
                            ("grpo", {"scale_rewards": "batch"}),
                            ("gae", {"values": torch.randn(8, 5, generator=g, dtype=torch.float64)})):
            whole = compute_advantages(name, AdvantageInputs(token_rewards=rewards, response_mask=mask, group=group,
                                                             **extra)).advantages
            opt = {k: dist.gather_rows(v[lo:hi]) for k, v in extra.items() if isinstance(v, torch.Tensor)}
            gathered = compute_advantages(name, AdvantageInputs(
                token_rewards=dist.gather_rows(rewards[lo:hi]), response_mask=dist.gather_rows(mask[lo:hi]),
                group=dist.gather_rows(group[lo:hi]), **{**extra, **opt})).advantages
            out[f"adv/{name}"] = float((gathered[lo:hi] - whole[lo:hi]).abs().max())
        results[rank] = out
    finally:
        torch.distributed.destroy_process_group()


def test_collectives_over_two_gloo_processes():
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_collectives, args=(2, _free_port(), results), nprocs=2, join=True)
        results = dict(results)
    for rank in (0, 1):
        r = results[rank]
        assert r["gather"] == [[0, 1], [2, 3], [4, 5], [10, 11], [12, 13]]
        assert r["gather_bool"] == [True, True, False, True]
        assert r["sum_metrics"] == {"a": 3.0, "b": 1.0}
        assert r["all_true"] == (True, False)
        assert r["max_int"] == 4
        assert r["objects"] == [{"rank": 0}, {"rank": 1}]
        assert r["norm"]
        for key, diff in r.items():
            if key.startswith("adv/"):
                assert diff < 1e-12, (rank, key, diff)


def test_the_launcher_exits_with_the_status_its_failed_ranks_share_and_notes_more_processes_than_cores(
        monkeypatch, capsys):
    """Every rank refusing the same config or data exits 2, and so does the command (it exited 1 whatever the ranks
    said); mixed or signal endings give 1. More processes than cores on a CPU get a note (a CPU's
    trainer.n_gpus_per_node=8 started 8 processes on 2 cores without a word)."""
    import torch.distributed.launcher.api as api
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from rft.distributed import launch

    def ending(*codes: int):
        def launcher(config, entrypoint):
            def run(*args):
                raise ChildFailedError("rft", {r: ProcessFailure(local_rank=r, pid=100 + r, exitcode=c, error_file="")
                                               for r, c in enumerate(codes)})
            return run
        return launcher

    for codes, status in (((2, 2), 2), ((2, 1), 1), ((-9, -9), 1), ((2,), 2)):
        monkeypatch.setattr(api, "elastic_launch", ending(*codes))
        assert launch(len(codes), ["train"]) == status, codes
    cores = len(os.sched_getaffinity(0))
    capsys.readouterr()
    monkeypatch.setattr(api, "elastic_launch", ending(2, 2, 2))
    launch(cores + 1, ["train"])
    assert f"rft: note: {cores + 1} processes on {cores} CPU cores" in capsys.readouterr().out
    launch(cores, ["train"])
    assert "rft: note:" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------- rft train, 2 processes
@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("dist")
    init_model("tiny", root / "model", seed=0)
    write_arithmetic(root / "data", n_train=32, n_val=7, seed=0)
    (root / "reward.py").write_text(DENSE_REWARD)
    return root


def train(assets: Path, out: Path, *extra: str, timeout: int = 300, launcher: tuple[str, ...] = ()
          ) -> subprocess.CompletedProcess:
    """`rft train` as a user runs it (a one-process run in this process). Greedy sampling, so one process and two generate the same responses;
    reinforce_plus_plus (batch-wide whitening), a KL loss (the reference sharded too), two mini-batches of two
    prompts (old log-probs), micro-batches of 2 rows, a validation set of 7 prompts (uneven over 2 ranks)."""
    args = [
        f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"data.val_files={assets / 'data' / 'val.parquet'}", f"custom_reward_function.path={assets / 'reward.py'}",
        "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.do_sample=false",
        "algorithm.adv_estimator=reinforce_plus_plus", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.1", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.actor.strategy=fsdp2",
        "trainer.total_training_steps=3", "trainer.save_freq=2", "trainer.test_freq=3",
        "trainer.val_before_train=false", "trainer.logger=[]", "trainer.device=cpu",
        f"trainer.default_local_dir={out}", *extra,
    ]
    several = any(x.startswith("trainer.n_gpus_per_node=") and x != "trainer.n_gpus_per_node=1" for x in extra)
    if not launcher and not several:  # one process: this one (tests/cli_helpers.py)
        return rft_here("train", *args, cwd=out.parent)
    proc = subprocess.run([sys.executable, *launcher, "-m", "rft", "train", *args], env=ENV, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"rft train exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


def test_a_data_error_every_rank_meets_is_printed_once(assets, tmp_path):
    """Two processes refusing the same data row: one `rft: error:` line above the launcher's summary, not one per
    rank, and exit 2; each rank's own log still ends with it. Under load one rank may meet the row while the other
    is still loading: the launcher then stops the slower one (SIGTERM), and the run still ends with exit 2 and
    the first rank's line (the summary says which rank the launcher stopped, and that rank's log has no error)."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "rft", "train", f"actor_rollout_ref.model.path={assets / 'model'}",
                           f"data.train_files={assets / 'data' / 'train.parquet'}", "data.prompt_key=nope",
                           "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                           "trainer.n_gpus_per_node=2", "trainer.device=cpu", "trainer.logger=[]",
                           f"trainer.default_local_dir={out}"], env=ENV, capture_output=True, text=True, timeout=300)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("rft:")]
    said = "rft: error: " + str(assets / "data" / "train.parquet") + " row 0: no column 'nope' (data.prompt_key)"
    assert proc.returncode == 2 and len(lines) == 2 and lines[0].startswith(said), proc.stderr
    ended = dict(part.split(": ", 1) for part in
                 lines[1].removeprefix("rft: 2 processes started, some failed (").removesuffix(")").split("; "))
    assert set(ended) == {"rank 0", "rank 1"} and "exit code 2" in ended.values(), lines
    assert set(ended.values()) <= {"exit code 2", "stopped by the launcher (SIGTERM)"}, lines
    for rank, log in (("rank 0", "trainer.log"), ("rank 1", "trainer_1.log")):
        if ended[rank] == "exit code 2":
            assert (out / "log" / log).read_text().splitlines()[-1].endswith(f" {lines[0]}"), log


def metrics_of(out: Path) -> dict[int, dict]:
    return {x["step"]: x for x in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def runs(assets, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    train(assets, root / "one")
    two = train(assets, root / "two", "trainer.n_gpus_per_node=2")
    return root, two


STEP1 = ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl",
         "critic/score/mean", "critic/advantages/max", "critic/advantages/min", "response_length/mean")


def test_two_processes_match_one(runs):
    root, _ = runs
    one, two = metrics_of(root / "one"), metrics_of(root / "two")
    assert sorted(one) == sorted(two) == [1, 2, 3]  # both finish three steps
    for key in STEP1:
        assert close(one[1][key], two[1][key]), (key, one[1][key], two[1][key])
    assert two[1]["actor/grad_norm"] > 1 and two[1]["critic/advantages/max"] > 0  # a real gradient
    for key in ("actor/pg_loss", "actor/grad_norm"):  # and the steps after it
        assert close(one[3][key], two[3][key], 1e-4), (key, one[3][key], two[3][key])
    val = "val-core/arithmetic/reward/mean@1"
    assert val in two[3] and abs(one[3][val] - two[3][val]) <= 1e-6  # 7 prompts over 2 ranks, gathered


def test_fsdp1_matches_one_process(runs, assets):
    root, _ = runs
    train(assets, root / "fsdp1", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.strategy=fsdp",
          "trainer.total_training_steps=1")
    one, fsdp1 = metrics_of(root / "one"), metrics_of(root / "fsdp1")
    for key in STEP1:
        assert close(one[1][key], fsdp1[1][key]), (key, one[1][key], fsdp1[1][key])
    assert (root / "fsdp1" / "checkpoints" / "global_step_1" / "policy_dcp").is_dir()


def test_two_process_run_writes_sharded_checkpoints_and_a_loadable_model(runs, assets):
    from transformers import AutoModelForCausalLM

    root, proc = runs
    ckpt = root / "two" / "checkpoints" / "global_step_2"
    assert (ckpt / "policy_dcp").is_dir() and not (ckpt / "policy.safetensors").exists()
    assert json.loads((ckpt / "trainer_state.json").read_text())["processes"] == 2
    assert "2 processes" in proc.stdout
    two, one, start = (AutoModelForCausalLM.from_pretrained(p).state_dict()
                       for p in (root / "two" / "model", root / "one" / "model", assets / "model"))
    diff = weights_apart(one, two, start)
    assert diff < APART, diff


def test_two_process_checkpoint_resumes_in_one_process(runs, assets):
    root, _ = runs
    resumed = root / "resumed"
    shutil.copytree(root / "two", resumed)
    proc = train(assets, resumed, "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={resumed / 'checkpoints' / 'global_step_2'}")
    assert "resumed from" in proc.stdout and "at step 2" in proc.stdout
    again, two = metrics_of(resumed), metrics_of(root / "two")
    assert sorted(again) == [1, 2, 3]
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss"):
        assert close(again[3][key], two[3][key], 1e-4), (key, again[3][key], two[3][key])


def test_two_process_checkpoint_resumes_in_two_processes_exactly(runs, assets):
    """3 steps in one 2-process run == resumed at step 2 by another 2-process run (DCP into FSDP2 shards)."""
    from safetensors.torch import load_file

    root, _ = runs
    resumed = root / "resumed2"
    shutil.copytree(root / "two", resumed)
    train(assets, resumed, "trainer.n_gpus_per_node=2", "trainer.resume_mode=resume_path",
          f"trainer.resume_from_path={resumed / 'checkpoints' / 'global_step_2'}")
    assert metrics_of(resumed)[3]["actor/grad_norm"] == metrics_of(root / "two")[3]["actor/grad_norm"]
    a, b = load_file(root / "two" / "model" / "model.safetensors"), load_file(resumed / "model" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def final_weights_apart(a: Path, b: Path, assets: Path) -> float:
    """`weights_apart` of two runs' exported models, the starting model from `assets`: in float32 the largest
    difference of an element, in bf16 the share of the movement."""
    from safetensors.torch import load_file

    wa, wb = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    assert wa.keys() == wb.keys()
    return weights_apart(wa, wb, load_file(assets / "model" / "model.safetensors") if BF16 else {})



HYBRID = tuple(f"actor_rollout_ref.{s}.fsdp_config.fsdp_size=2" for s in ("actor", "ref"))
ONE_MINI_BATCH = ("actor_rollout_ref.actor.ppo_mini_batch_size=4",)  # 4 prompts: one each on 4 processes
SIZE_UNITS = tuple(f"actor_rollout_ref.{s}.fsdp_config.wrap_policy.min_num_params=100000" for s in ("actor", "ref"))
"""Each decoder layer's MLP (3 x 64 x 1024 = 196,608 parameters) becomes a unit of its own inside the layer's."""


@pytest.fixture(scope="module")
def one_mini(runs, assets) -> Path:
    """One process, one mini-batch of 4 prompts a step (so that 4 processes hold one prompt each)."""
    root, _ = runs
    train(assets, root / "one_mini", *ONE_MINI_BATCH)
    return root / "one_mini"


@pytest.mark.heavy  # four processes: make test-heavy (FSDP1's hybrid sharding test stays in make test)
def test_hybrid_sharding_on_four_processes_matches_one_process_and_its_checkpoint_resumes(runs, assets, one_mini):
    """fsdp_size=2 on 4 processes: a (2, 2) mesh, two groups each sharding a copy, the actor and the reference.
    The gradient summed within and across the groups is the one-process gradient: the metrics of every step and
    the final weights equal one process's; its checkpoint (DCP of 2-D DTensors) resumes in one process."""
    root, _ = runs
    train(assets, root / "hybrid", *ONE_MINI_BATCH, "trainer.n_gpus_per_node=4", *HYBRID, timeout=400)
    one, hybrid = metrics_of(one_mini), metrics_of(root / "hybrid")
    assert sorted(hybrid) == [1, 2, 3]
    for key in STEP1:
        assert close(one[1][key], hybrid[1][key]), (key, one[1][key], hybrid[1][key])
    assert hybrid[1]["actor/grad_norm"] > 1
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert close(one[3][key], hybrid[3][key], 1e-4), (key, one[3][key], hybrid[3][key])
    assert final_weights_apart(one_mini, root / "hybrid", assets) < APART
    resumed = root / "hybrid_resumed"
    shutil.copytree(root / "hybrid", resumed)
    proc = train(assets, resumed, *ONE_MINI_BATCH, "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={resumed / 'checkpoints' / 'global_step_2'}")
    assert "at step 2" in proc.stdout
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss"):
        assert close(metrics_of(resumed)[3][key], hybrid[3][key], 1e-4), key


def test_fsdp1_hybrid_shard_with_size_based_units_matches_one_process(runs, assets, one_mini):
    """FSDP1's HYBRID_SHARD over the same (2, 2) mesh, with min_num_params adding units: step 1 equals one
    process's."""
    root, _ = runs
    train(assets, root / "hybrid_fsdp1", *ONE_MINI_BATCH, "trainer.n_gpus_per_node=4", *HYBRID, *SIZE_UNITS,
          "actor_rollout_ref.actor.strategy=fsdp", "trainer.total_training_steps=1", timeout=400)
    one, fsdp1 = metrics_of(one_mini), metrics_of(root / "hybrid_fsdp1")
    for key in STEP1:
        assert close(one[1][key], fsdp1[1][key]), (key, one[1][key], fsdp1[1][key])


def test_hybrid_sharding_resumes_a_1d_checkpoint_with_size_based_units(runs, assets):
    """fsdp_size=1 on 2 processes (a (2, 1) mesh: each process a whole copy, the gradients all-reduced across,
    FSDP2), with min_num_params adding units, resumes the 1-D 2-process checkpoint: step 3 and the final weights
    equal the uninterrupted 2-process run's."""
    root, _ = runs
    resumed = root / "hybrid_1d"
    shutil.copytree(root / "two", resumed)
    train(assets, resumed, "trainer.n_gpus_per_node=2", *SIZE_UNITS,
          *(f"actor_rollout_ref.{s}.fsdp_config.fsdp_size=1" for s in ("actor", "ref")),
          "trainer.resume_mode=resume_path", f"trainer.resume_from_path={resumed / 'checkpoints' / 'global_step_2'}")
    again, two = metrics_of(resumed), metrics_of(root / "two")
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss"):
        assert close(again[3][key], two[3][key], 1e-4), (key, again[3][key], two[3][key])
    assert final_weights_apart(root / "two", resumed, assets) < APART


def test_activation_offload_on_cpu_changes_nothing_and_says_so_once(runs, assets, caplog):
    """actor_rollout_ref.model.enable_activation_offload on CPU: one note line naming the key,
    and the same numbers (the context is only entered on cuda: workers/minibatch.py)."""
    root, _ = runs
    proc = train(assets, root / "offload", "actor_rollout_ref.model.enable_activation_offload=true",
                 "trainer.total_training_steps=1")
    note = "actor_rollout_ref.model.enable_activation_offload=true changes nothing on CPU"
    said = [r.getMessage() for r in caplog.records] + (proc.stdout + proc.stderr).splitlines()
    assert sum(note in x for x in said) == 1, said
    one, offload = metrics_of(root / "one"), metrics_of(root / "offload")
    for key in STEP1:
        assert one[1][key] == offload[1][key], (key, one[1][key], offload[1][key])


PPO_LORA = ("algorithm.adv_estimator=gae", "actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
            "critic.strategy=fsdp2", "critic.optim.lr=1e-3", "trainer.total_training_steps=2", "trainer.save_freq=1",
            "data.val_files=null", "trainer.test_freq=-1")


@pytest.mark.heavy  # 60 s: make test-heavy (make test keeps under 20 minutes)
def test_ppo_with_a_lora_actor_matches_one_process_and_resumes_a_one_process_checkpoint(assets, tmp_path):
    """gae (the critic sharded too, its values and whitening over both ranks), a LoRA actor under FSDP2 (the
    reference: the adapter disabled). A one-process checkpoint (safetensors + optimizer.pt) resumes in 2 processes."""
    train(assets, tmp_path / "one", *PPO_LORA)
    train(assets, tmp_path / "two", *PPO_LORA, "trainer.n_gpus_per_node=2")
    one, two = metrics_of(tmp_path / "one"), metrics_of(tmp_path / "two")
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "critic/vf_loss", "critic/grad_norm",
                "critic/values/mean", "critic/advantages/max", "critic/vf_explained_var"):
        assert close(one[1][key], two[1][key]), (key, one[1][key], two[1][key])
    assert (tmp_path / "two" / "checkpoints" / "global_step_1" / "critic" / "model_dcp").is_dir()
    assert (tmp_path / "two" / "critic" / "config.json").is_file()  # the exported critic
    # one process wrote global_step_1 (policy.safetensors: the adapter; critic/model.safetensors): resume in two
    resumed = tmp_path / "resumed"
    proc = train(assets, resumed, *PPO_LORA, "trainer.n_gpus_per_node=2", "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={tmp_path / 'one' / 'checkpoints' / 'global_step_1'}")
    assert "at step 1" in proc.stdout
    again = metrics_of(resumed)
    for key in ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
        assert close(again[2][key], one[2][key], 1e-4), (key, again[2][key], one[2][key])


def test_under_torchrun_rft_joins_instead_of_launching(runs, assets):
    """torchrun already started the processes (RANK / WORLD_SIZE set): rft joins their group, no second launch."""
    root, _ = runs
    proc = train(assets, root / "torchrun", "trainer.n_gpus_per_node=2", "trainer.total_training_steps=1",
                 launcher=("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"))
    assert proc.stdout.count("rft: 1 step on 2 processes") == 1  # rank 0 of one group of two
    one, under = metrics_of(root / "one"), metrics_of(root / "torchrun")
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert close(one[1][key], under[1][key]), (key, one[1][key], under[1][key])


def test_launcher_counts_must_match_the_config(monkeypatch):
    from rft.config import ConfigError, RFTConfig
    from rft.orchestration.launch import check_launch

    cfg = RFTConfig()
    cfg.trainer.n_gpus_per_node = 2
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=4 .* 1 x 2"):
        check_launch(cfg)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    cfg.trainer.nnodes = 2
    with pytest.raises(ConfigError, match="torchrun --nnodes 2 --nproc-per-node 2"):
        check_launch(cfg)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CPU the component's 2 devices are 2 gloo processes")
def test_component_trains_with_two_processes(assets, tmp_path):
    """verl_trainer_component with --trainer_n_gpus_per_node 2 on CPU: two gloo processes, the first writes the
    model output."""
    args = ["--ENGINE", "hf", "--rollout_name", "hf", "--actor_model_path", str(assets / "model"),
            "--data_train_files", str(assets / "data" / "train.parquet"),
            "--data_val_files", str(assets / "data" / "val.parquet"), "--trainer_n_gpus_per_node", "2",
            "--actor_model_use_remove_padding", "false", "--actor_fsdp_config_offload_policy", "false",
            "--ref_fsdp_param_offload", "false", "--data_train_batch_size", "4", "--actor_ppo_mini_batch_size", "4",
            "--actor_ppo_micro_batch_size_per_gpu", "4", "--rollout_n", "2", "--data_max_prompt_length", "32",
            "--data_max_response_length", "6", "--total_training_steps", "1", "--trainer_save_freq", "1",
            "--trainer_test_freq", "1", "--model_output", str(tmp_path / "model")]
    proc = subprocess.run([sys.executable, "-m", "rft", "component", "verl_trainer_component", *args], env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "2 CPU processes (gloo)" in proc.stdout and "1 step on 2 processes" in proc.stdout
    assert (tmp_path / "model" / "model.safetensors").is_file()


@pytest.mark.heavy  # ~60 s: make test-heavy
def test_a_killed_rank_and_a_sigterm_to_the_launcher_are_one_line_each(assets, tmp_path):
    """Rank 0 SIGKILLed: rank 1 says in one line that another process of the run died (gloo's "Connection
    reset by peer" read as a bug in rft); SIGTERM to the launcher: exit 143 and one `rft: stopped` line (it
    exited 1 with a line from every rank and the agent's SignalException reported as a bug)."""
    import signal
    import time

    from test_modes import _descendant_with_rank

    def start(out: Path) -> subprocess.Popen:
        args = [f"actor_rollout_ref.model.path={assets / 'model'}",
                f"data.train_files={assets / 'data' / 'train.parquet'}",
                f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
                "data.max_response_length=4", "data.train_batch_size=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
                "trainer.total_training_steps=200", "trainer.save_freq=1",
                "trainer.val_before_train=false", "trainer.logger=[]", "trainer.device=cpu",
                "trainer.n_gpus_per_node=2", f"trainer.default_local_dir={out}"]
        proc = subprocess.Popen([sys.executable, "-m", "rft", "train", *args], env=ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while not (out / "checkpoints" / "global_step_1").is_dir():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        return proc

    def rft_lines(stderr: str) -> list[str]:
        assert "bug in rft" not in stderr and "Traceback" not in stderr, stderr[-4000:]
        return [x for x in stderr.splitlines() if x.startswith("rft:")]

    killed = start(tmp_path / "killed")
    os.kill(_descendant_with_rank(killed.pid, 0), signal.SIGKILL)
    _, err = killed.communicate(timeout=120)
    lines = rft_lines(err)
    launcher = "rft: 2 processes started, some failed (rank 0: killed by SIGKILL"
    assert killed.returncode != 0 and lines[-1].startswith(launcher), err[-4000:]
    assert lines[:-1] == [x for x in lines if "another process of this run stopped or died" in x], err[-4000:]
    assert all(re.search(r"\(or the launcher's\); the same command resumes from .*global_step_\d+$", x)
               for x in lines[:-1]), lines
    # rank 1's own log (rank 0's ends where it was killed) ends with its line
    rank_1 = (tmp_path / "killed" / "log" / "trainer_1.log").read_text().splitlines()
    assert rank_1[-1].startswith("ERROR ") and rank_1[-1].endswith(f" {lines[0]}"), rank_1[-3:]

    stopped = start(tmp_path / "stopped")
    stopped.send_signal(signal.SIGTERM)
    _, err = stopped.communicate(timeout=120)
    lines = rft_lines(err)
    assert stopped.returncode == 143 and len(lines) == 1, err[-4000:]
    assert lines[0].startswith("rft: stopped by SIGTERM"), lines
    assert "the same command resumes from" in lines[0], lines


def test_sequence_parallel_on_two_processes_matches_one(runs, assets):
    """verl's ulysses_sequence_parallel_size=2 over 2 processes: one data-parallel rank, every sequence split
    between the two (packed), the reference too: the metrics of one process."""
    root, _ = runs
    train(assets, root / "sp", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
          "actor_rollout_ref.model.use_remove_padding=true")
    one, sp = metrics_of(root / "one"), metrics_of(root / "sp")
    assert sorted(sp) == [1, 2, 3]
    for key in STEP1:
        assert close(one[1][key], sp[1][key]), (key, one[1][key], sp[1][key])
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert close(one[3][key], sp[3][key], 1e-4), (key, one[3][key], sp[3][key])
    val = "val-core/arithmetic/reward/mean@1"
    assert abs(one[3][val] - sp[3][val]) <= 1e-6


def test_the_ranks_of_a_launcher_killed_outright_stop_within_seconds(assets, tmp_path):
    """torch's launcher starts each rank in a session of its own, so a SIGKILL to the launcher's process group (a
    machine's out-of-memory killer, a test's fault injection) does not reach them: each rank watches its launcher
    and stops with one line once it is gone, instead of training on beside a rerun."""
    import signal
    import time

    out = tmp_path / "out"
    args = [f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
            "data.max_response_length=6", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=200", "trainer.val_before_train=false",
            "trainer.logger=[]", "trainer.device=cpu", "trainer.n_gpus_per_node=2", f"trainer.default_local_dir={out}"]
    proc = subprocess.Popen([sys.executable, "-m", "rft", "train", *args], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    # returns once every rank has closed the pipe: they have all ended (the lines below say why, not a time)
    log, _ = proc.communicate(timeout=300)
    errors = [x for x in log.splitlines() if x.startswith("rft: error:")]
    # the first rank to see its launcher gone stops; the other stops the same way or on its peer's going
    gone = [x for x in errors if x.startswith("rft: error: the launcher (pid") and "is gone, so this rank stops" in x]
    assert gone and all(x in gone or "another process of this run stopped or died" in x for x in errors), log[-3000:]


def test_two_processes_whose_responses_end_at_different_lengths(assets, tmp_path):
    """Sampled responses that end (EOS) at different lengths, so each rank's rows are of a different width: the
    ranks pad them to the widest of all before the trainer gathers (B, R) tensors (the runs above all reach
    max_response_length, where every width is equal; this one crashed gloo with mismatched all_gather sizes)."""
    out = tmp_path / "out"
    train(assets, out, "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.do_sample=true",
          "data.max_response_length=256", "trainer.total_training_steps=1", "trainer.save_freq=0",
          "trainer.test_freq=0")
    m = metrics_of(out)[1]
    assert m["response_length/min"] < m["response_length/max"], m
