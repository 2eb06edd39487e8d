"""The sharding and memory keys beside the processes: which modules `wrap_policy.min_num_params` makes FSDP units
(hand-computed on the tiny model, and against torch's own FSDP1 auto-wrap walk), the config errors of `fsdp_size`
and `min_num_params`, and `enable_activation_offload`'s context around the update's forward passes. The runs on
several processes are in tests/test_distributed.py."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import nn

from rft.config.load import ConfigError
from rft.trainer.configure import load_config
from rft.workers import minibatch
from rft.workers.fsdp import fsdp_units

LAYER = {"Qwen2DecoderLayer"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> nn.Module:
    """The tiny Qwen2 (hidden 128, MLP 512, 4 layers, 275-token vocabulary, embedding tied to the LM head)."""
    from transformers import AutoModelForCausalLM

    from rft.models.tiny import init_model

    folder = tmp_path_factory.mktemp("tiny") / "model"
    init_model("tiny", folder, seed=0)
    return AutoModelForCausalLM.from_pretrained(folder)


def names(model: nn.Module, units: list[nn.Module]) -> list[str]:
    by_id = {id(m): n for n, m in model.named_modules()}
    return [by_id[id(m)] for m in units]


def test_size_based_units_by_hand(tiny):
    layers = [f"model.layers.{i}" for i in range(4)]
    # parameters: q_proj 128 x 128 + 128 = 16,512; k_proj, v_proj 128 x 64 + 64 = 8,256; o_proj 128 x 128 = 16,384:
    # self_attn 49,408. gate / up / down_proj 128 x 512 = 65,536 each: mlp 196,608. Two norms of 128: the layer
    # 246,272. embed_tokens 275 x 128 = 35,200, tied to lm_head; the final norm 128.
    assert names(tiny, fsdp_units(tiny, LAYER, 0)) == layers
    # 100,000: the MLP (196,608) becomes a unit inside each layer; the attention (49,408) stays with the layer
    assert names(tiny, fsdp_units(tiny, LAYER, 100_000)) == [x for lay in layers for x in (f"{lay}.mlp", lay)]
    # 60,000: each MLP projection (65,536) is a unit, so the MLP keeps 0 parameters and is none
    assert names(tiny, fsdp_units(tiny, LAYER, 60_000)) == [
        x for lay in layers for x in (f"{lay}.mlp.gate_proj", f"{lay}.mlp.up_proj", f"{lay}.mlp.down_proj", lay)]
    # 40,000: the attention (49,408) too; model.model keeps 35,200 + 128 < 40,000
    assert names(tiny, fsdp_units(tiny, LAYER, 40_000)) == [
        x for lay in layers for x in (f"{lay}.self_attn", f"{lay}.mlp.gate_proj", f"{lay}.mlp.up_proj",
                                      f"{lay}.mlp.down_proj", lay)]
    # 30,000: embed_tokens (35,200) would be one, but its weight is lm_head's too: it stays with the root, and so
    # does model.model (35,328 of its own), which holds that weight as well
    units = names(tiny, fsdp_units(tiny, LAYER, 30_000))
    assert "model.embed_tokens" not in units and "lm_head" not in units and "model" not in units
    assert "model.layers" not in names(tiny, fsdp_units(tiny, LAYER, 1))  # a ModuleList never


@pytest.mark.parametrize("min_num_params", [40_000, 60_000, 100_000, 300_000])
def test_size_based_units_are_torchs_auto_wrap(tiny, min_num_params):
    """The same units, in the same order, as FSDP1's own walk (`_recursive_wrap`) with the layer class policy or-ed
    with `size_based_auto_wrap_policy` (at thresholds above the tied embedding, which torch does not know of)."""
    from torch.distributed.fsdp.wrap import (
        _or_policy,
        _recursive_wrap,
        size_based_auto_wrap_policy,
        transformer_auto_wrap_policy,
    )

    model = copy.deepcopy(tiny)
    layer_cls = {type(m) for m in model.modules() if type(m).__name__ in LAYER}
    policy = functools.partial(_or_policy, policies=[
        functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer_cls),
        functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params)])
    wrapped: list[nn.Module] = []

    def record(module: nn.Module) -> nn.Module:
        wrapped.append(module)
        return module

    _recursive_wrap(model, policy, record, ignored_modules=set(), ignored_params=set(), only_wrap_children=True)
    assert names(model, wrapped) == names(model, fsdp_units(model, LAYER, min_num_params))


# ------------------------------------------------------------------------------------------ config errors
def load(*overrides: str):
    return load_config(None, ["actor_rollout_ref.model.path=m", "data.train_files=t.parquet", "data.train_batch_size=4",
                              "actor_rollout_ref.actor.ppo_mini_batch_size=4", *overrides], validate_paths=False)


@pytest.mark.parametrize("size", [3, 0])
def test_fsdp_size_that_does_not_divide_the_processes_is_refused_by_key(size):
    with pytest.raises(ConfigError) as err:
        load("trainer.n_gpus_per_node=4", f"actor_rollout_ref.actor.fsdp_config.fsdp_size={size}")
    msg = str(err.value)
    assert msg.startswith(f"actor_rollout_ref.actor.fsdp_config.fsdp_size={size} is not -1, a divisor of the 4 "
                          "processes") and "[1, 2, 4]" in msg and "\n" not in msg


def test_fsdp_size_accepted_values_and_the_other_sections():
    # -2 and 8 shard over every process, as verl's create_device_mesh (fsdp_size < 0 or >= the processes)
    for size in (-1, 2, 4, -2, 8, 32):
        load("trainer.n_gpus_per_node=4", f"actor_rollout_ref.actor.fsdp_config.fsdp_size={size}")
    load("trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.strategy=fsdp2",
         "actor_rollout_ref.actor.fsdp_config.fsdp_size=1")  # every process a whole copy (FSDP2 only)
    load("actor_rollout_ref.actor.fsdp_config.fsdp_size=1")  # one process: 1 is every process
    with pytest.raises(ConfigError, match=r"^critic\.model\.fsdp_config\.fsdp_size=3 "):
        load("trainer.n_gpus_per_node=4", "algorithm.adv_estimator=gae", "critic.model.fsdp_config.fsdp_size=3")
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.ref\.fsdp_config\.fsdp_size=3 "):
        load("trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.use_kl_loss=true",
             "actor_rollout_ref.ref.fsdp_config.fsdp_size=3")
    load("trainer.n_gpus_per_node=4", "critic.model.fsdp_config.fsdp_size=3")  # no critic: no effect, a note


def test_fsdp1_with_a_one_process_shard_group_is_refused():
    # torch's FSDP1 clamps a shard group of one process to NO_SHARD, which skips the all-reduce across the groups
    with pytest.raises(ConfigError, match=r"fsdp_size=1 with actor_rollout_ref\.actor\.strategy=fsdp: .* use "
                                          r"actor_rollout_ref\.actor\.strategy=fsdp2"):
        load("trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.strategy=fsdp",
             "actor_rollout_ref.actor.fsdp_config.fsdp_size=1")


def test_min_num_params_must_be_a_count():
    with pytest.raises(ConfigError, match=r"^command line \(actor_rollout_ref\.actor\.fsdp_config\.wrap_policy\."
                                          r"min_num_params=-1\): actor_rollout_ref\.actor\.fsdp_config\.wrap_policy\."
                                          r"min_num_params must be an integer >= 0"):
        load("actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=-1")
    load("actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=100000")


# ------------------------------------------------------------------------------------------ activation offload
def test_activation_offload_context_is_save_on_cpu_on_cuda_only():
    assert isinstance(minibatch.activation_offload_context(True, "cuda"), torch.autograd.graph.save_on_cpu)
    for enabled, device_type in ((True, "cpu"), (False, "cuda"), (False, "cpu")):
        assert not isinstance(minibatch.activation_offload_context(enabled, device_type),
                              torch.autograd.graph.saved_tensors_hooks)


class _Rows:
    """What `accumulate` reads of a mini-batch: its length and `select`."""

    def __init__(self, x: torch.Tensor):
        self.x = x

    def __len__(self) -> int:
        return len(self.x)

    def select(self, rows: list[int]) -> _Rows:
        return _Rows(self.x[rows])


def test_every_update_forward_pass_runs_in_the_offload_context(monkeypatch):
    """`accumulate` (the actor's and the critic's update) runs each micro-batch's forward pass, filler passes too,
    inside the context, and the backward outside it; the gradient is unchanged. On this CPU machine the context is
    replaced by hooks that pack saved tensors as save_on_cpu would (a copy) and count them."""
    calls, packed = [], []

    class Counting(torch.autograd.graph.saved_tensors_hooks):
        def __init__(self):
            super().__init__(lambda t: packed.append(1) or t.clone(), lambda t: t)

    def context(enabled: bool, device_type: str):
        calls.append((enabled, device_type))
        return Counting()

    def gradient(offload: bool) -> torch.Tensor:
        torch.manual_seed(0)
        worker = minibatch.MiniBatchWorker.__new__(minibatch.MiniBatchWorker)
        worker.model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        worker.loss_scale, worker.activation_offload = 1.0, offload
        rows = _Rows(torch.randn(4, 3))
        worker.accumulate(rows, lambda _, mb: (worker.model(mb.x).pow(2).sum(), {"n": 1.0}), plan=(None, [2, 2], 1))
        return worker.model[0].weight.grad.clone()

    plain = gradient(False)
    monkeypatch.setattr(minibatch, "activation_offload_context", context)
    assert torch.equal(gradient(True), plain)
    assert calls == [(True, "cpu")] and len(packed) >= 3 * 2  # 3 passes (one filler), >= 2 saved tensors each
