"""A trained model sharded over the ranks: FSDP2 (`fully_shard` on every decoder layer, then the root) or FSDP1
(`FullyShardedDataParallel` with the same layers as units); one process uses neither, unless its config names fsdp2
(`fsdp_alone`: a process group of one). Also what sharding changes
around the model: the gradient norm of sharded gradients, sharded state dicts (torch.distributed.checkpoint) and the
full weights gathered for a Hugging Face export.

Units (`fsdp_units`): every module of the decoder-layer classes, and with `wrap_policy.min_num_params` > 0 any other
submodule holding at least that many parameters not already in a unit below it (torch's `size_based_auto_wrap_policy`
or-ed with the layer classes; `ModuleList` / `ModuleDict` never, a module sharing a parameter with one outside it,
such as a tied embedding, never). The root is always the last unit.

Mesh (`shard_mesh`): `fsdp_size` -1 (or any size of at least the number of processes, as verl) shards over every
process, a 1-D mesh; any other
divisor of the number of processes is hybrid sharding, a 2-D mesh ("ddp", "fsdp") of world / fsdp_size groups of
fsdp_size processes: each group holds one copy of the model sharded over its processes, the groups replicate it
(FSDP2: `fully_shard(mesh=<2-D mesh>)`; FSDP1: ShardingStrategy.HYBRID_SHARD over the same mesh, not with
fsdp_size 1, which torch turns into NO_SHARD without the all-reduce across the groups: refused).

Gradients: FSDP averages the gradients over the ranks, while rft's loss on a rank is that rank's share of the
global mini-batch loss (every normaliser is global, `AggNorm`), whose gradient is the SUM over ranks. `wrap`
therefore sets FSDP2's divide factor to 1 (sum reductions: the reduce-scatter within a group and, under hybrid
sharding, the all-reduce across the groups both SUM, so each shard holds the sum over every rank), and `loss_scale`
asks the worker to multiply FSDP1's loss by the world size (FSDP1 divides by the world size, hybrid or not), so the
reduced gradient equals the one-process gradient.
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


def fsdp_units(model: nn.Module, classes: set[str], min_num_params: int = 0) -> list[nn.Module]:
    """The submodules of `model` that become FSDP units (the root, always the last unit, not among them), children
    before their parents: every module whose class name is in `classes`, and with `min_num_params` > 0 every other
    module whose parameters outside the units below it number at least `min_num_params` (torch's
    `size_based_auto_wrap_policy` or-ed with the layer classes, as FSDP1's `_recursive_wrap` walks them), except
    `ModuleList` / `ModuleDict` (torch's exclusions) and a module sharing a parameter with a module outside it (a
    tied embedding and LM head stay with the root: one parameter cannot live in two units)."""
    owners: dict[int, set[int]] = {}  # parameter -> the leaf-most modules registering it
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners.setdefault(id(p), set()).add(id(module))
    units: list[nn.Module] = []

    def visit(module: nn.Module) -> set[int]:
        """Post-order: the ids of the parameters below `module` that no unit holds yet."""
        loose = {id(p) for p in module.parameters(recurse=False)}
        for child in module.children():
            loose |= visit(child)
        if module is model:
            return loose
        if type(module).__name__ in classes:
            units.append(module)
            return set()
        if min_num_params > 0 and not isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            inside = {id(m) for m in module.modules()}
            numel = {id(p): p.numel() for p in module.parameters()}
            shared = any(owners[pid] - inside for pid in numel)
            if not shared and sum(numel[pid] for pid in loose) >= min_num_params:
                units.append(module)
                return set()
        return loose

    visit(model)
    return units


def shard_mesh(device_type: str, world_size: int, fsdp_size: int = -1):
    """The device mesh FSDP shards over: 1-D over the `world_size` processes when `fsdp_size` is negative or at
    least `world_size` (verl's create_device_mesh); otherwise hybrid sharding, 2-D (world_size // fsdp_size, fsdp_size) named ("ddp", "fsdp"): ranks
    [k * fsdp_size, (k + 1) * fsdp_size) shard one copy, the same position in every group holds the same shard.
    The config validation refuses a size that does not divide `world_size` (`rft.workers.checks`)."""
    from torch.distributed.device_mesh import init_device_mesh

    if fsdp_size < 0 or fsdp_size >= world_size:  # verl's create_device_mesh: every process
        return init_device_mesh(device_type, (world_size,))
    if fsdp_size < 1 or world_size % fsdp_size:
        raise ValueError(f"fsdp_size={fsdp_size} does not divide {world_size} processes")
    return init_device_mesh(device_type, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp"))


def wrap(model: nn.Module, strategy: str, fsdp_cfg, dist: Dist, device: torch.device) -> nn.Module:
    """`model` sharded over the ranks with `strategy` (fsdp2 / fsdp), or `model` itself without a process group
    (one process, unless `fsdp_alone`).

    `fsdp_cfg` (an FSDPConfig): `wrap_policy.transformer_layer_cls_to_wrap` names the unit classes,
    `wrap_policy.min_num_params` adds units by size (`fsdp_units`); `fsdp_size` shards within groups of that many
    processes (hybrid sharding, `shard_mesh`); `offload_policy` (FSDP2) and `param_offload` (FSDP1's CPUOffload,
    FSDP2's CPUOffloadPolicy) keep parameters in host memory on cuda. On CPU they already live there: the offload
    settings are accepted and change nothing."""
    if not dist.enabled:
        return model
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {STRATEGIES}")
    from rft.models.load import COMPUTE_DEVICE_ATTR

    classes = layer_classes(model, getattr(fsdp_cfg.wrap_policy, "transformer_layer_cls_to_wrap", None))
    if not any(type(m).__name__ in classes for m in model.modules()):
        raise ValueError(f"fsdp_config.wrap_policy.transformer_layer_cls_to_wrap={sorted(classes)}: "
                         f"{type(model).__name__} has no module of these classes")
    units = fsdp_units(model, classes, getattr(fsdp_cfg.wrap_policy, "min_num_params", 0))
    fsdp_size = getattr(fsdp_cfg, "fsdp_size", -1)
    hybrid = 0 < fsdp_size < dist.processes  # negative or at least the processes: every process (shard_mesh)
    offload = device.type == "cuda" and (fsdp_cfg.offload_policy or fsdp_cfg.param_offload)
    if offload:  # the shards live in host memory; inputs still go to the GPU
        setattr(model, COMPUTE_DEVICE_ATTR, device)
    from rft.models.precision import MASTER, REDUCE_ATTR

    reduce = getattr(model, REDUCE_ATTR, MASTER)  # mixed_precision.reduce_dtype (models/precision.py)
    if strategy == "fsdp2":
        from torch.distributed.fsdp import (
            CPUOffloadPolicy,
            FSDPModule,
            MixedPrecisionPolicy,
            OffloadPolicy,
            fully_shard,
        )

        mesh = shard_mesh(device.type, dist.processes, fsdp_size)
        policy = CPUOffloadPolicy(pin_memory=True) if offload else OffloadPolicy()
        mixed = MixedPrecisionPolicy(reduce_dtype=reduce if reduce != MASTER else None)
        for module in units:  # children before parents
            fully_shard(module, mesh=mesh, offload_policy=policy, mp_policy=mixed)
        fully_shard(model, mesh=mesh, offload_policy=policy, mp_policy=mixed)
        # sum over ranks (each rank's loss is its share of the global loss), with SUM collectives (gloo has no AVG)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        return model
    from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import CustomPolicy

    # FSDP1's state-dict code warns about its own deprecated internals (ShardedTensor, a gloo device lookup)
    for message in (".*ShardedTensor.*", ".*_get_pg_default_device.*", ".*Multiple backends are registered.*"):
        warnings.filterwarnings("ignore", message=message)

    if hybrid and fsdp_size == 1:  # FSDP1 clamps a one-process shard group to NO_SHARD: no all-reduce across
        raise ValueError("fsdp_size=1 under FSDP1 would not all-reduce the gradients; use fsdp2 or fsdp_size >= 2")
    unit_ids = {id(m) for m in units}
    wrapped = FullyShardedDataParallel(
        model, auto_wrap_policy=CustomPolicy(lambda m: id(m) in unit_ids),
        sharding_strategy=ShardingStrategy.HYBRID_SHARD if hybrid else ShardingStrategy.FULL_SHARD,
        device_mesh=shard_mesh(device.type, dist.processes, fsdp_size) if hybrid else None,
        cpu_offload=CPUOffload(offload_params=bool(offload)), use_orig_params=True, device_id=device,
        mixed_precision=MixedPrecision(reduce_dtype=reduce) if reduce != MASTER else None,
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
    # the root's own parameters gathered now, the root set up as the root first: a vision-language model's
    # generate() runs its vision tower (whose patch embedding and merger are the root's, whose blocks are units)
    # before any forward pass of the root, which would do both (a unit's forward first would take itself for the
    # root)
    model._get_fsdp_state()._lazy_init()
    model.unshard()
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

    # the frozen weights (a LoRA actor's base) are not in the folder and come from the model folder: not strict about
    # them. A trainable parameter the folder lacks still fails, in dcp.load's planner (LoRA settings changed)
    opts = _options(ignore_frozen_params=True, strict=False)
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
