"""Several CPU processes (gloo) where rft ran one before: `rft sft`, a staged run (the demo's own config), DAPO's
dynamic sampling and the group_relative_policy_optimization component, each through the real command line and
equal to one process at step 1 (loss, gradient norm, metrics)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here
from rl_helpers import DENSE_REWARD
from test_distributed import ENV, _free_port, close, metrics_of

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU processes (gloo)")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("scale")
    init_model("tiny", root / "model", seed=0)
    write_arithmetic(root / "data", n_train=64, n_val=7, seed=0, carry_slip=0.5)
    (root / "reward.py").write_text(DENSE_REWARD)
    return root


def rft(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rft", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"rft {args[0]} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


# -------------------------------------------------------------------------------------------------- rft sft
def _sft_args(assets: Path) -> list[str]:
    return [f"model.partial_pretrain={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"data.val_files={assets / 'data' / 'val.parquet'}", "data.response_key=extra_info",
            "data.response_dict_keys=[demonstration]", "data.train_batch_size=16", "data.micro_batch_size_per_gpu=4",
            "data.max_length=32", "optim.lr=3e-3", "trainer.total_training_steps=2", "trainer.save_freq=2",
            "trainer.test_freq=2", "trainer.logger=[]", "trainer.device=cpu", "model.strategy=fsdp2"]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


def _max_weight_difference(a: Path, b: Path) -> float:
    """Between two runs' exported models."""
    wa, wb = _weights(a / "model"), _weights(b / "model")
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def test_sft_on_two_processes_matches_one(assets, tmp_path):
    args = _sft_args(assets)
    rft_here("sft", *args, f"trainer.default_local_dir={tmp_path / 'one'}", cwd=tmp_path)
    proc = rft("sft", *args, f"trainer.default_local_dir={tmp_path / 'two'}", "trainer.n_gpus_per_node=2")
    assert "2 steps on 2 processes" in proc.stdout
    one, two = metrics_of(tmp_path / "one"), metrics_of(tmp_path / "two")
    for step in (1, 2):
        for key in ("train/loss", "train/grad_norm", "train/tokens"):
            assert close(one[step][key], two[step][key]), (step, key, one[step][key], two[step][key])
    assert one[1]["train/grad_norm"] > 1
    assert close(one[2]["val/loss"], two[2]["val/loss"])  # 7 rows over 2 ranks, the padding row left out
    assert (tmp_path / "two" / "checkpoints" / "global_step_2" / "policy_dcp").is_dir()
    assert _max_weight_difference(tmp_path / "one", tmp_path / "two") < 1e-4


@pytest.mark.parametrize("packed", [True, False])
def test_sft_with_sequence_parallelism_on_two_processes_matches_one(assets, tmp_path, packed):
    """verl's sft_trainer ulysses_sequence_parallel_size=2 on 2 processes: one group holding every row, each
    process running half of each micro-batch's tokens; the losses, gradient norms and weights of the one-process
    run (use_remove_padding: the packed tokens or the padded rows split)."""
    args = [*_sft_args(assets), f"use_remove_padding={packed}"]
    rft_here("sft", *args, f"trainer.default_local_dir={tmp_path / 'one'}", cwd=tmp_path)
    proc = rft("sft", *args, f"trainer.default_local_dir={tmp_path / 'sp'}", "trainer.n_gpus_per_node=2",
               "ulysses_sequence_parallel_size=2")
    assert "2 steps on 2 processes in sequence-parallel groups of 2" in proc.stdout
    one, sp = metrics_of(tmp_path / "one"), metrics_of(tmp_path / "sp")
    for step in (1, 2):
        for key in ("train/loss", "train/grad_norm", "train/tokens"):
            assert close(one[step][key], sp[step][key]), (step, key, one[step][key], sp[step][key])
    assert one[1]["train/grad_norm"] > 1
    assert close(one[2]["val/loss"], sp[2]["val/loss"])
    before, after = _weights(assets / "model"), _weights(tmp_path / "sp" / "model")
    assert all(not torch.equal(before[k], after[k]) for k in before)  # every parameter moved
    assert _max_weight_difference(tmp_path / "one", tmp_path / "sp") < 1e-4


# --------------------------------------------------------------------------------------- the demo's stages
def test_the_demos_staged_config_on_two_processes_matches_one(assets, tmp_path):
    """`rft demo`'s own staged config (SFT, then GRPO), shortened, greedy rollouts so one process and two generate
    the same responses, and reinforce_plus_plus in the RL stage so identical responses still get a gradient."""
    from omegaconf import OmegaConf

    from rft.orchestration.demo import demo_config

    data = {"train": assets / "data" / "train.parquet", "val": assets / "data" / "val.parquet"}
    runs = {}
    for n in (1, 2):
        out = tmp_path / f"p{n}"
        cfg = demo_config(assets / "model", data, out, seed=0)
        path = tmp_path / f"demo{n}.yaml"
        path.write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
        args = ["train", str(path), f"trainer.n_gpus_per_node={n}", "trainer.device=cpu", "trainer.logger=[]",
                "actor_rollout_ref.rollout.do_sample=false", "trainer.test_freq=-1", "trainer.save_freq=-1",
                "stages.0.trainer.total_training_steps=2", "stages.0.trainer.save_freq=-1",
                # the demo's SFT batch (128) is more than these 64 rows: a batch of all of them
                "stages.0.data.train_batch_size=64", "stages.0.data.micro_batch_size_per_gpu=64",
                "stages.1.trainer.total_training_steps=1", "stages.1.trainer.val_before_train=false",
                "stages.1.algorithm.adv_estimator=reinforce_plus_plus",
                f"custom_reward_function.path={assets / 'reward.py'}"]
        proc = rft_here(*args, cwd=tmp_path) if n == 1 else rft(*args)
        assert "all stages finished" in proc.stdout
        runs[n] = out
    for stage, keys in (("sft", ("train/loss", "train/grad_norm")),
                        ("grpo", ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/score/mean",
                                  "critic/advantages/max", "response_length/mean"))):
        one, two = metrics_of(runs[1] / stage), metrics_of(runs[2] / stage)
        for key in keys:
            assert close(one[1][key], two[1][key]), (stage, key, one[1][key], two[1][key])
    assert metrics_of(runs[2] / "grpo")[1]["actor/grad_norm"] > 0
    assert (runs[2] / "grpo" / "model" / "config.json").is_file() and (runs[2] / "sft" / "STAGE_DONE").is_file()


# ------------------------------------------------------------------------------------- DAPO dynamic sampling
def _kept_share(rank: int, world: int, port: int, results) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        from types import SimpleNamespace

        from rft.batch import Batch
        from rft.distributed import Dist, step_shard
        from rft.explorer.explorer import Explorer

        # two generation batches of 4 prompts x 2 rows; rank r holds prompts step_shard(4, 4, r, 2); kept groups
        # (labels generation * 4 + position): batch 0 keeps positions 1, 2; batch 1 keeps 0, 3
        kept_positions = {0: [1, 2], 1: [0, 3]}
        parts = []
        for gen, keep in kept_positions.items():
            mine = [p for p in step_shard(4, 4, rank, world) if p in keep]
            if mine:
                group = torch.tensor(mine).repeat_interleave(2) + gen * 4
                parts.append(Batch(prompt_ids=group[:, None].clone(), prompt_mask=torch.ones(len(group), 1),
                                   response_ids=torch.zeros(len(group), 3 + gen, dtype=torch.long),
                                   response_mask=torch.ones(len(group), 3 + gen, dtype=torch.long), group=group))
        cfg = SimpleNamespace(trainer=SimpleNamespace(balance_batch=False),
                              actor_rollout_ref=SimpleNamespace(actor=SimpleNamespace(ppo_mini_batch_size=4)))
        explorer = Explorer.__new__(Explorer)
        explorer.cfg, explorer.dist = cfg, Dist(rank=rank, world_size=world)
        explorer.tokenizer = SimpleNamespace(pad_token_id=0)
        out = explorer._kept_share(parts, want=4)
        results[rank] = (out.prompt_ids[:, 0].tolist(), out.group.tolist(), tuple(out.response_ids.shape))
    finally:
        torch.distributed.destroy_process_group()


def test_dynamic_sampling_shares_the_first_kept_groups_evenly():
    """The first train_batch_size kept groups of all ranks, in the one-process order (generation batch, then
    position), relabelled 0..3 and dealt like a step's prompts: 2 groups (4 rows) to each rank."""
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_kept_share, args=(2, _free_port(), results), nprocs=2, join=True)
        results = dict(results)
    # one-process order of the kept groups: 1, 2 (batch 0), 4, 7 (batch 1) -> new labels 0, 1, 2, 3
    assert results[0] == ([1, 1, 2, 2], [0, 0, 1, 1], (4, 4))
    assert results[1] == ([4, 4, 7, 7], [2, 2, 3, 3], (4, 4))


GEN_BATCH = ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
             "algorithm.filter_groups.max_num_gen_batches=20", "data.train_batch_size=4", "data.gen_batch_size=8",
             "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2")


def _gen_batch_share(rank: int, world: int, port: int, config: list[str], results) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        from rl_helpers import stand_in_explorer

        from rft.distributed import Dist
        from rft.monitor import Timer
        from rft.trainer.configure import load_config

        explorer = stand_in_explorer(load_config(None, config), varies=lambda task: task % 3 == 0,
                                     dist=Dist(rank=rank, world_size=world))
        steps = []
        for _ in range(2):
            batch, metrics = explorer.dynamic_sampling(*explorer.generate_and_score(Timer()), Timer())
            steps.append((batch.prompt_ids[:, 0].tolist(), batch.group.tolist(), metrics))
        results[rank] = (steps, explorer.taskset.drawn)
    finally:
        torch.distributed.destroy_process_group()


def test_gen_batch_size_on_two_processes_trains_the_one_process_groups(assets, tmp_path):
    """data.gen_batch_size=8 with train_batch_size 4 on two gloo processes (it was refused there): each rank
    generates its share of every mini-batch of 2 prompts of each generation batch of 8, and trains its share of the
    first 4 kept groups of all ranks; those are the one-process run's, in its order, over two steps (engine and
    reward stood in, so both generate the same responses)."""
    import torch.multiprocessing as mp
    from rl_helpers import stand_in_explorer

    from rft.distributed import step_shard
    from rft.monitor import Timer
    from rft.trainer.configure import load_config

    config = [f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
              f"custom_reward_function.path={assets / 'reward.py'}", f"trainer.default_local_dir={tmp_path}",
              "trainer.n_gpus_per_node=2", "trainer.device=cpu", "actor_rollout_ref.actor.strategy=fsdp2", *GEN_BATCH]
    one = stand_in_explorer(load_config(None, config[:4] + list(GEN_BATCH)), varies=lambda task: task % 3 == 0)
    expected = []
    for _ in range(2):
        batch, metrics = one.dynamic_sampling(*one.generate_and_score(Timer()), Timer())
        tasks = batch.prompt_ids[:, 0].tolist()
        expected.append(([tasks[2 * g] for g in range(4)], metrics))  # n = 2 rows a group, groups 0..3
    assert expected[0][1]["train/num_gen_batches"] > 1  # the filter dropped groups: more batches were drawn
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_gen_batch_share, args=(2, _free_port(), config, results), nprocs=2, join=True)
        results = dict(results)
    for rank, (steps, drawn) in results.items():
        assert drawn == one.taskset.drawn  # every rank drew the one-process generation batches
        for (tasks, groups, metrics), (groups_tasks, one_metrics) in zip(steps, expected):
            mine = step_shard(4, 2, rank, 2)  # this rank's share of the 4 kept groups
            assert tasks == [groups_tasks[g] for g in mine for _ in range(2)], rank
            assert groups == [g for g in mine for _ in range(2)]
            assert metrics == one_metrics


def test_dynamic_sampling_on_two_processes_trains(assets, tmp_path):
    from test_distributed import train

    train(assets, tmp_path / "two", "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.do_sample=true",
          "actor_rollout_ref.rollout.n=4", "algorithm.filter_groups.enable=true",
          "algorithm.filter_groups.metric=score", "algorithm.adv_estimator=grpo", "trainer.total_training_steps=2",
          "trainer.save_freq=-1", "trainer.test_freq=-1", "data.val_files=null")
    m = metrics_of(tmp_path / "two")
    assert sorted(m) == [1, 2]
    assert m[1]["train/num_kept_groups"] >= 4 and m[1]["train/num_gen_batches"] >= 1
    assert m[1]["actor/grad_norm"] > 0 and m[1]["critic/score/max"] > m[1]["critic/score/min"]


@pytest.mark.heavy  # three two-process runs, ~100 s: make test-heavy
def test_gen_batch_size_on_two_processes_resumes_exactly(assets, tmp_path):
    """`rft train` with data.gen_batch_size=8 on two processes: 2 steps straight == 1 step, then the same command
    resumed to 2 (the sampler counts generation batches of 8; each rank's sampling stream is drawn from the
    checkpointed generator)."""
    from test_distributed import train

    common = ("trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.do_sample=true", *GEN_BATCH,
              "algorithm.filter_groups.metric=score", "algorithm.adv_estimator=grpo", "trainer.save_freq=1",
              "trainer.test_freq=-1", "data.val_files=null")
    train(assets, tmp_path / "one", *common, "trainer.total_training_steps=2")
    train(assets, tmp_path / "two", *common, "trainer.total_training_steps=1")
    proc = train(assets, tmp_path / "two", *common, "trainer.total_training_steps=2")
    assert "resumed from" in proc.stdout and "on 2 processes" in proc.stdout
    one, two = metrics_of(tmp_path / "one"), metrics_of(tmp_path / "two")
    assert sorted(two) == [1, 2]
    for step in (1, 2):
        assert one[step]["train/num_generated_groups"] == 8 * one[step]["train/num_gen_batches"]
        for key in ("train/num_gen_batches", "train/num_kept_groups", "critic/score/mean", "actor/pg_loss",
                    "actor/grad_norm", "response_length/mean"):
            assert close(one[step][key], two[step][key]), (step, key, one[step][key], two[step][key])
    assert one[1]["actor/grad_norm"] > 0
    state = json.loads((tmp_path / "two" / "checkpoints" / "global_step_2" / "trainer_state.json").read_text())
    assert state["sampler"]["batch_size"] == 8
    drawn = state["sampler"]["epoch"] * 64 // 8 + state["sampler"]["batch_in_epoch"]  # epochs of 8 batches
    assert drawn == sum(one[s]["train/num_gen_batches"] for s in (1, 2))


# -------------------------------------------------------------------------- group_relative_policy_optimization
def test_grpo_component_on_two_processes_matches_one(assets, tmp_path):
    """TRL's num_processes (an rft extension input; under torchrun its WORLD_SIZE): 2 x 4 completions per step,
    the same 8 as one process with per_device_train_batch_size 8. Temperature 1e-6 (TRL has no greedy flag): both
    sample the argmax, so they generate the same responses: GRPO's advantages are then 0 in every group, the update's rows are left out and both take
    the same zero step; the metrics of step 1 agree."""
    from rft.data.io import read_rows

    with (tmp_path / "train.jsonl").open("w") as f:
        for r in read_rows(assets / "data" / "train.parquet"):
            f.write(json.dumps({"problem": r["prompt"][-1]["content"], "data_source": r["data_source"],
                                "reward_model": r["reward_model"]}) + "\n")
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                  "zero_optimization": {"stage": 3}}))
    common = ["--model_name_or_path", str(assets / "model"), "--dataset_train_split",
              str(tmp_path / "train.jsonl"), "--deepspeed_config", str(tmp_path / "ds.json"),
              "--num_generations", "4", "--num_iterations", "1", "--max_steps", "1", "--max_prompt_length", "32",
              "--max_completion_length", "6", "--temperature", "1e-6", "--apply_lora", "false", "--save_steps", "1",
              "--learning_rate", "1e-3"]
    rft_here("component", "group_relative_policy_optimization", *common, "--per_device_train_batch_size", "8",
             "--output_model_path", str(tmp_path / "one"), cwd=tmp_path)
    proc = rft("component", "group_relative_policy_optimization", *common, "--per_device_train_batch_size", "4",
               "--num_processes", "2", "--output_model_path", str(tmp_path / "two"))
    assert "on 2 processes" in proc.stdout
    one, two = metrics_of(tmp_path / "one"), metrics_of(tmp_path / "two")
    for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/grad_norm",
                "actor/zero_adv_rows", "prompt_length/mean"):
        assert close(one[1][key], two[1][key]), (key, one[1][key], two[1][key])
    assert (tmp_path / "two" / "model" / "config.json").is_file()
