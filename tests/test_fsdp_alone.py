"""FSDP on one process (issue 66): a one-process RL run whose config names fsdp2 shards its models as rank 0 of a
process group of one (gloo on CPU, NCCL on cuda), as verl does on one GPU, so the sharded path (fully_shard, its
collectives, DCP checkpoints) runs on a one-GPU machine. It computes what the unsharded run computes, and resumes
from its sharded checkpoint exactly. `fsdp`, verl's and rft's default, keeps one process unsharded (the golden
runs name no strategy). FSDP1 in a group of one is checked on the library (`wrap`), on the device the machine has:
make gpu-check runs this file on the GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here, sigterm_after_checkpoint
from rl_helpers import make_assets

A = "actor_rollout_ref"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("alone"))


def train(assets: Path, out: Path, *extra: str, check: bool = True):
    """Three GRPO steps of 4 prompts x 4 samples in two mini-batches, a KL loss (the reference sharded too), a
    checkpoint every step, on the CPU."""
    return rft_here(
        "train", f"{A}.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
        "data.max_response_length=6", "data.train_batch_size=4", f"{A}.rollout.n=4",
        f"{A}.actor.ppo_mini_batch_size=2", f"{A}.actor.ppo_micro_batch_size_per_gpu=4", f"{A}.actor.optim.lr=1e-3",
        f"{A}.actor.optim.weight_decay=0.0", f"{A}.actor.use_kl_loss=true", f"{A}.actor.kl_loss_coef=0.1",
        "trainer.total_training_steps=3", "trainer.save_freq=1", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.logger=[]", "trainer.device=cpu", f"trainer.default_local_dir={out}",
        *extra, cwd=out.parent, check=check)


def metrics(out: Path) -> dict[int, dict]:
    return {row["step"]: row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


def weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(out / "model" / "model.safetensors")


@pytest.fixture(scope="module")
def runs(assets, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    train(assets, root / "whole")
    train(assets, root / "fsdp2", f"{A}.actor.strategy=fsdp2")
    return root


def test_fsdp2_on_one_process_shards_and_equals_the_unsharded_run(runs):
    whole, fsdp2 = runs / "whole", runs / "fsdp2"
    assert (whole / "checkpoints" / "global_step_3" / "policy.safetensors").is_file()  # the default: unsharded
    sharded = fsdp2 / "checkpoints" / "global_step_3"
    assert (sharded / "policy_dcp" / ".metadata").is_file() and not (sharded / "policy.safetensors").exists()
    assert json.loads((sharded / "trainer_state.json").read_text())["processes"] == 1
    a, b = metrics(whole), metrics(fsdp2)
    assert sorted(a) == sorted(b) == [1, 2, 3]
    assert a[1]["actor/grad_norm"] > 0 and a[3]["actor/kl_loss"] > 0  # real updates, the reference used
    for step in a:
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy", "critic/score/mean",
                    "response_length/mean"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-6, abs=1e-6), (step, key)
    wa, wb = weights(whole), weights(fsdp2)
    assert wa.keys() == wb.keys()
    apart = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert apart <= 1e-6, apart


def test_fsdp2_on_one_process_resumes_from_its_sharded_checkpoint_exactly(runs, assets, monkeypatch):
    """Stopped (SIGTERM) right after step 2's checkpoint, the same command again: its step 3 and model are the
    uninterrupted run's, to the bit."""
    out = runs / "stopped"
    sigterm_after_checkpoint(monkeypatch, 2)
    stopped = train(assets, out, f"{A}.actor.strategy=fsdp2", check=False)
    monkeypatch.undo()
    assert stopped.returncode != 0 and sorted(metrics(out)) == [1, 2], stopped.stderr
    assert (out / "checkpoints" / "global_step_2" / "policy_dcp").is_dir()  # resumed from a sharded checkpoint
    rerun = train(assets, out, f"{A}.actor.strategy=fsdp2")
    assert "resumed from" in rerun.stdout and "at step 2" in rerun.stdout, rerun.stdout
    assert metrics(out)[3] == {**metrics(runs / "fsdp2")[3], **{k: v for k, v in metrics(out)[3].items()
                                                                  if k.startswith(("timing", "perf"))}}
    a, b = weights(runs / "fsdp2"), weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp2"])
def test_one_process_wraps_in_a_group_of_one_on_the_device(tmp_path, strategy):
    """`wrap` with a group of one (`init_group_of_one`): FSDP1 / FSDP2 units on the device this machine has, a
    gradient step equal to the unsharded model's, a DCP checkpoint that loads back."""
    from transformers import AutoModelForCausalLM

    from rft.config.schema import FSDPConfig
    from rft.distributed import init_group_of_one, shutdown
    from rft.models.tiny import init_model
    from rft.workers.fsdp import clip_grad_norm, is_sharded, load_sharded, save_sharded, wrap

    folder = init_model("tiny", tmp_path / "model", seed=0)
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0)).to(DEVICE)

    def stepped(model):
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        model(input_ids=ids, labels=ids).loss.backward()
        norm = clip_grad_norm(model, [p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        return optimizer, float(norm)

    plain = AutoModelForCausalLM.from_pretrained(folder).to(DEVICE)
    _, plain_norm = stepped(plain)
    dist = init_group_of_one(DEVICE)
    try:
        model = wrap(AutoModelForCausalLM.from_pretrained(folder).to(DEVICE), strategy, FSDPConfig(), dist,
                     torch.device(DEVICE))
        assert dist.enabled and dist.processes == 1 and is_sharded(model)
        optimizer, norm = stepped(model)
        assert norm == pytest.approx(plain_norm, rel=1e-5)
        from rft.workers.fsdp import full_state_dict

        full = full_state_dict(model, dist)
        for name, p in plain.state_dict().items():
            assert torch.allclose(full[name].to(p.device), p, atol=1e-6), name
        save_sharded(tmp_path / "dcp", model, optimizer)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        load_sharded(tmp_path / "dcp", model, optimizer)
        again = full_state_dict(model, dist)
        assert all(torch.equal(again[k], full[k]) for k in full)
    finally:
        shutdown()


def test_cpu_offload_on_one_gpu_needs_the_process_sharded(monkeypatch, assets):
    """FSDP's CPU offload on one cuda process: refused with the default strategy (nothing is sharded, nothing to
    offload), accepted with fsdp2 (sharded alone). The check is read as on a GPU machine."""
    import rft.models.load
    from rft.config.checks import CheckContext
    from rft.config.load import ConfigError
    from rft.trainer.configure import load_config
    from rft.workers.checks import check_offload

    keys = [f"{A}.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"{A}.actor.fsdp_config.offload_policy=true"]
    default, sharded = (load_config(None, [*keys, *extra])
                        for extra in ([], [f"{A}.actor.strategy=fsdp2"]))
    monkeypatch.setattr(rft.models.load, "resolve_device", lambda name: torch.device("cuda"))
    with pytest.raises(ConfigError, match=r"offload_policy=true: one process on cuda has no FSDP.*strategy=fsdp2"):
        check_offload(CheckContext(default))
    check_offload(CheckContext(sharded))
