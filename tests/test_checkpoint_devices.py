"""A checkpoint resumes on the resuming run's device, whatever device wrote it (issue 66): a GPU run's checkpoint
resumes where no GPU is. The torch files here are written as a GPU run writes them, each storage tagged with a CUDA
device this machine lacks (`written_on_a_missing_gpu`); every loader must still resume them on the CPU. Safetensors
files record no device (their loaders copy into the parameters where they live), DCP loads into the model's own
tensors; the one format that names a device is torch's, and every `torch.load` in rft maps it (a walk of the
source checks that no loader is left out)."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn

from rft.trainer.checkpoint import (
    load_module_state,
    load_training_state,
    save_module_state,
    save_training_state,
)

SRC = Path(__file__).resolve().parent.parent / "src" / "rft"
MISSING_GPU = f"cuda:{torch.cuda.device_count() + 7}"
"""A device index no machine running the tests has (none on a CPU machine; one past the last on a GPU one)."""
CONTENTS = {"model", "optimizer", "extra"}


@contextlib.contextmanager
def written_on_a_missing_gpu():
    """torch.save records every storage as living on MISSING_GPU, as a run on that GPU would."""
    real = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: MISSING_GPU
    try:
        yield
    finally:
        torch.serialization.location_tag = real


def trained(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """A small model after two AdamW steps (so the optimizer has state), with its scheduler."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    for _ in range(2):
        model(torch.randn(3, 4)).square().sum().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return model, optimizer, scheduler


def assert_claims_the_missing_gpu(file: Path) -> None:
    """The file really names a device this machine lacks: torch.load without a map_location refuses it."""
    with pytest.raises(RuntimeError, match="CUDA|cuda"):
        torch.load(file, weights_only=False)


def assert_same_state(model, optimizer, scheduler, saved_model, saved_optimizer, saved_scheduler) -> None:
    for (name, p), q in zip(model.named_parameters(), saved_model.parameters()):
        assert p.device.type == "cpu" and torch.equal(p, q), name
    for p, q in zip(model.parameters(), saved_model.parameters()):
        mine, theirs = optimizer.state[p], saved_optimizer.state[q]
        assert mine["exp_avg"].device.type == "cpu" and torch.equal(mine["exp_avg"], theirs["exp_avg"])
        assert torch.equal(mine["exp_avg_sq"], theirs["exp_avg_sq"]) and int(mine["step"]) == int(theirs["step"]) == 2
    assert scheduler.state_dict() == saved_scheduler.state_dict()


def test_a_gpu_runs_checkpoint_resumes_on_the_cpu(tmp_path):
    """The policy's part (policy.safetensors, optimizer.pt, extra.pt with the RNG states) and a critic's part
    (critic/: model.safetensors, optimizer.pt, scheduler.pt), one process."""
    policy, critic = trained(0), trained(1)
    sampling = torch.Generator().manual_seed(5)
    with written_on_a_missing_gpu():
        save_training_state(tmp_path, contents=CONTENTS, model=policy[0], optimizer=policy[1], scheduler=policy[2],
                            generators={"sampling": sampling}, state={"global_step": 2})
        save_module_state(tmp_path / "critic", contents=CONTENTS, model=critic[0], optimizer=critic[1],
                          scheduler=critic[2])
    for name in ("optimizer.pt", "extra.pt", "critic/optimizer.pt"):  # scheduler.pt holds numbers, no tensors
        assert_claims_the_missing_gpu(tmp_path / name)
    expected = torch.rand(3, generator=sampling)

    fresh_policy, fresh_critic, fresh_sampling = trained(2), trained(3), torch.Generator().manual_seed(6)
    state = load_training_state(tmp_path, contents=CONTENTS, model=fresh_policy[0], optimizer=fresh_policy[1],
                                scheduler=fresh_policy[2], generators={"sampling": fresh_sampling})
    load_module_state(tmp_path / "critic", contents=CONTENTS, model=fresh_critic[0], optimizer=fresh_critic[1],
                      scheduler=fresh_critic[2])
    assert state["global_step"] == 2
    assert_same_state(*fresh_policy, *policy)
    assert_same_state(*fresh_critic, *critic)
    assert torch.equal(torch.rand(3, generator=fresh_sampling), expected)


def test_a_gpu_runs_one_process_checkpoint_resumes_into_a_sharded_model_on_the_cpu(tmp_path):
    """The other branch of the loader: a one-process checkpoint loaded whole into FSDP2 shards (`load_full`), here
    in a process group of one (gloo)."""
    from torch.distributed.fsdp import fully_shard

    from rft.distributed import init_group_of_one, shutdown

    policy = trained(0)
    with written_on_a_missing_gpu():
        save_training_state(tmp_path, contents=CONTENTS, model=policy[0], optimizer=policy[1], scheduler=policy[2],
                            generators={}, state={})
    assert_claims_the_missing_gpu(tmp_path / "optimizer.pt")
    dist = init_group_of_one("cpu")
    try:
        model, optimizer, scheduler = trained(2)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # over the sharded parameters
        model(torch.randn(3, 4)).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
        load_training_state(tmp_path, contents=CONTENTS, model=model, optimizer=optimizer, scheduler=scheduler,
                            generators={}, dist=dist)
        for p, q in zip(model.parameters(), policy[0].parameters()):
            assert torch.equal(p.full_tensor(), q)
            state, saved = optimizer.state[p], policy[1].state[q]
            assert torch.equal(state["exp_avg"].full_tensor(), saved["exp_avg"])
            assert state["exp_avg"].device.type == "cpu" and int(state["step"]) == 2
    finally:
        shutdown()


def torch_loads(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "load" and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"]


def test_every_torch_load_in_rft_maps_its_tensors_to_the_cpu():
    """Every loader of a torch file in rft (checkpoints, and any added later) passes a map_location: without one
    a tensor written on a GPU is loaded back onto that GPU, which the resuming machine may lack."""
    calls = {}
    for file in sorted(SRC.rglob("*.py")):
        for call in torch_loads(ast.parse(file.read_text())):
            calls[f"{file.relative_to(SRC)}:{call.lineno}"] = {k.arg for k in call.keywords}
    assert calls, "the walk found no torch.load at all: it looks in the wrong place"
    unmapped = [where for where, keywords in calls.items() if "map_location" not in keywords]
    assert not unmapped, f"torch.load without map_location (use rft.trainer.checkpoint.load_pt): {unmapped}"
