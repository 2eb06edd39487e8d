"""A trained model sharded over the ranks: FSDP2 (`fully_shard` on every decoder layer, then the root) or FSDP1
(`FullyShardedDataParallel` with the same layers as units); one process uses neither. Also what sharding changes
around the model: the gradient norm of sharded gradients, sharded state dicts (torch.distributed.checkpoint) and the
full weights gathered for a Hugging Face export.

Gradients: FSDP averages the gradients over the ranks, while rft's loss on a rank is that rank's share of the
global mini-batch loss (every normaliser is global, `AggNorm`), whose gradient is the SUM over ranks. `wrap`
therefore sets FSDP2's divide factor to 1 (sum reductions), and `loss_scale` asks the worker to multiply FSDP1's loss
by the world size, so the reduced gradient equals the one-process gradient.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
from torch import nn

from rft.distributed import Dist
from rft.models.arch import layer_classes

STRATEGIES = ("fsdp", "fsdp2")


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    return isinstance(model, (FSDPModule, FullyShardedDataParallel))


def _fsdp1(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(model, FullyShardedDataParallel)


def wrap(model: nn.Module, strategy: str, fsdp_cfg, dist: Dist, device: torch.device) -> nn.Module:
    """`model` sharded over all ranks with `strategy` (fsdp2 / fsdp), or `model` itself with one process.

    `fsdp_cfg` (an FSDPConfig): `wrap_policy.transformer_layer_cls_to_wrap` names the unit classes;
    `offload_policy` (FSDP2) and `param_offload` (FSDP1's CPUOffload, FSDP2's CPUOffloadPolicy) keep parameters in
    host memory on cuda. On CPU they already live there: the settings are accepted and change nothing."""
    if not dist.enabled:
        return model
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {STRATEGIES}")
    from rft.models.load import COMPUTE_DEVICE_ATTR

    classes = layer_classes(model, getattr(fsdp_cfg.wrap_policy, "transformer_layer_cls_to_wrap", None))
    if not any(type(m).__name__ in classes for m in model.modules()):
        raise ValueError(f"fsdp_config.wrap_policy.transformer_layer_cls_to_wrap={sorted(classes)}: "
                         f"{type(model).__name__} has no module of these classes")
    offload = device.type == "cuda" and (fsdp_cfg.offload_policy or fsdp_cfg.param_offload)
    if offload:  # the shards live in host memory; inputs still go to the GPU
        setattr(model, COMPUTE_DEVICE_ATTR, device)
    if strategy == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard

        mesh = init_device_mesh(device.type, (dist.processes,))
        policy = CPUOffloadPolicy(pin_memory=True) if offload else OffloadPolicy()
        for module in list(model.modules()):
            if type(module).__name__ in classes:
                fully_shard(module, mesh=mesh, offload_policy=policy)
        fully_shard(model, mesh=mesh, offload_policy=policy)
        # sum over ranks (each rank's loss is its share of the global loss), with SUM collectives (gloo has no AVG)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        return model
    from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    # FSDP1's state-dict code warns about its own deprecated internals (ShardedTensor, a gloo device lookup)
    for message in (".*ShardedTensor.*", ".*_get_pg_default_device.*", ".*Multiple backends are registered.*"):
        warnings.filterwarnings("ignore", message=message)

    units = {type(m) for m in model.modules() if type(m).__name__ in classes}
    wrapped = FullyShardedDataParallel(
        model, auto_wrap_policy=ModuleWrapPolicy(units), sharding_strategy=ShardingStrategy.FULL_SHARD,
        cpu_offload=CPUOffload(offload_params=bool(offload)), use_orig_params=True, device_id=device,
    )
    if offload:
        setattr(wrapped, COMPUTE_DEVICE_ATTR, device)
    return wrapped


def loss_scale(model: nn.Module, dist: Dist) -> float:
    """What a rank's loss is multiplied by before backward so that the reduced gradient is the sum over ranks:
    the world size under FSDP1 (which averages), 1 otherwise (FSDP2's divide factor is set to 1 by `wrap`). With
    sequence-parallel groups (`dist.sp`), a model that computes whole sequences on each process of a group (the
    critic with ulysses_sequence_parallel_size 1) counts each group's gradient sp times: 1 / sp of it."""
    from rft.workers.ulysses import sequence_parallel

    scale = float(dist.processes) if dist.enabled and _fsdp1(model) else 1.0
    return scale / dist.sp if dist.sp > 1 and sequence_parallel(model) is None else scale


def clip_grad_norm(model: nn.Module, params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip the global gradient norm of `params` (over every rank's shard) to `max_norm`; returns the norm before
    clipping, the same number on every rank."""
    if _fsdp1(model):
        return model.clip_grad_norm_(max_norm)
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


@contextlib.contextmanager
def gathered_for_generation(model: nn.Module) -> Iterator[None]:
    """FSDP2: keep each layer's gathered parameters after its first forward pass until the block ends, so a decode
    loop gathers the weights once instead of once per token (the memory of the full model meanwhile). Without FSDP2
    nothing changes (FSDP1 gathers per forward pass; the decode loop keeps the ranks in step)."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        yield
        return
    layers = [m for m in model.modules() if isinstance(m, FSDPModule) and m is not model]  # the root keeps its own
    for m in layers:
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for m in [*layers, model]:
            m.reshard()
        for m in layers:
            m.set_reshard_after_forward(True, recurse=False)


# ------------------------------------------------------------------------------------------ state dicts
def _options(**kwargs):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kwargs)


def save_sharded(folder, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Every rank writes its shard of the trainable parameters (and of the optimizer state, once the optimizer has
    stepped) into `folder` with torch.distributed.checkpoint; any number of processes (one included) can load it
    (`load_sharded`)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    opts = _options(ignore_frozen_params=True)
    # an optimizer that never stepped (the actor during critic warmup) has no state to save; get_state_dict would
    # create it with a step of lr 0, which shifts Adam's step count
    if optimizer is not None and optimizer.state:
        model_sd, optim_sd = get_state_dict(model, optimizer, options=opts)
        state = {"model": model_sd, "optimizer": optim_sd}
    else:
        state = {"model": get_model_state_dict(model, options=opts)}
    dcp.save(state, checkpoint_id=str(folder))


def _has_optimizer(folder) -> bool:
    from torch.distributed.checkpoint import FileSystemReader

    return any(k.startswith("optimizer.") for k in FileSystemReader(str(folder)).read_metadata().state_dict_metadata)


def load_sharded(folder, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Restore what `save_sharded` wrote, resharded to this run's processes (or into an unsharded model)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    opts = _options(ignore_frozen_params=True)
    if optimizer is not None and _has_optimizer(folder):
        model_sd, optim_sd = get_state_dict(model, optimizer, options=opts)
        state = {"model": model_sd, "optimizer": optim_sd}
        dcp.load(state, checkpoint_id=str(folder))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                       options=opts)
    else:
        state = {"model": get_model_state_dict(model, options=opts)}
        dcp.load(state, checkpoint_id=str(folder))
        set_model_state_dict(model, state["model"], options=opts)


def load_full(model: nn.Module, optimizer: torch.optim.Optimizer | None, weights: dict[str, torch.Tensor],
              optim_state: dict | None) -> None:
    """Load full (unsharded) trainable weights and a one-process optimizer state dict (parameters numbered in the
    order of the model's trainable parameters) into a sharded `model` and its optimizer: a checkpoint written by one
    process resumed by several."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if set(weights) != set(names):
        raise ValueError("the checkpoint does not match the model: different trainable parameters "
                         "(LoRA settings changed?)")
    set_model_state_dict(model, weights, options=_options(full_state_dict=True, strict=False))
    if optimizer is not None and optim_state is not None and optim_state.get("state"):
        by_name = {
            "state": {names[i]: s for i, s in optim_state["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in optim_state["param_groups"]],
        }
        set_optimizer_state_dict(model, optimizer, by_name, options=_options(full_state_dict=True))


def unwrapped_name(name: str) -> str:
    """A parameter's name in the unsharded model: FSDP1's and activation checkpointing's wrapper modules dropped
    (as `get_model_state_dict` names them; FSDP2 keeps the names)."""
    for wrapper in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod."):
        name = name.replace(wrapper, "")
    return name


def full_state_dict(model: nn.Module, dist: Dist, everywhere: bool = False) -> dict[str, torch.Tensor]:
    """All weights of a sharded `model` (frozen ones too), gathered on CPU on rank 0 (empty elsewhere; on every
    rank with `everywhere`, on its device). Every rank must call it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    # cpu_offload: gathered into host memory on rank 0 only; on CPU every rank gathers in place (FSDP1's offload
    # path crashes on CPU tensors) and the others drop their copy
    on_gpu = next(model.parameters()).device.type != "cpu"
    state = get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=on_gpu and not everywhere))
    return state if dist.is_main or everywhere else {}
