"""A DeepSpeed JSON config, read the way transformers' DeepSpeed integration reads it, mapped onto rft's keys.

* Batch and clipping values (`train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`, `train_batch_size`,
  `gradient_clipping`) are `"auto"` (taken from the training arguments) or must equal them, as transformers
  requires (a mismatch is an error there too).
* `bf16` / `fp16` choose the dtype (`actor_rollout_ref.rollout.dtype` and the actor's `fsdp_config.mixed_precision.
  param_dtype`; a CPU computes in a low precision only where it is faster there: docs/performance.md).
* `zero_optimization.stage` 1-3 shard over the processes: FSDP2 (`actor.strategy=fsdp2`, `fsdp_size=-1`, all
  processes: one here). `offload_optimizer` / `offload_param` with device cpu are FSDP's offload keys.
* `optimizer` / `scheduler` sections replace the `optim` / `lr_scheduler_type` inputs (as in transformers) when
  their type has a torch / transformers equivalent and their parameters are `"auto"` or agree.
* Knobs that only tune communication between processes, and monitors that are off, have nothing to act on in one
  process and are accepted (`ACCEPTED_*` below). Any other key is refused by name.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rft.components.spec import Plan

AUTO = "auto"
INPUT = "deepspeed_config"
A = "actor_rollout_ref.actor"

# top-level keys with nothing to do in one process (logging cadence, profiler output, communication dtypes)
ACCEPTED_TOP = {
    "steps_per_print": "progress printing cadence of DeepSpeed's own logger",
    "wall_clock_breakdown": "DeepSpeed's timer printout",
    "memory_breakdown": "DeepSpeed's memory printout",
    "dump_state": "DeepSpeed's start-up printout",
    "zero_allow_untested_optimizer": "an allowance for optimizers DeepSpeed has not tested",
    "zero_force_ds_cpu_optimizer": "which CPU Adam kernel DeepSpeed uses for offload",
    "communication_data_type": "dtype of inter-process gradient reduction (no reduction in one process)",
    "prescale_gradients": "scaling before the inter-process reduction (no reduction in one process)",
    "gradient_predivide_factor": "scaling around the inter-process reduction (cancels out in one process)",
}
# zero_optimization keys that tune inter-process communication or bucketing (nothing to communicate in one process)
ACCEPTED_ZERO = {
    "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "reduce_scatter", "allgather_partitions",
    "allgather_bucket_size", "sub_group_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "round_robin_gradients", "load_from_fp32_weights",
    "elastic_checkpoint", "ignore_unused_parameters", "use_multi_rank_bucket_allreduce", "memory_efficient_linear",
    "stage3_module_granularity_threshold", "use_all_reduce_for_fetch_params",
}
ACCEPTED_OFFLOAD = {"device", "pin_memory", "buffer_count", "fast_init", "ratio", "buffer_size", "max_in_cpu"}
# blocks accepted only while switched off
OFF_BLOCKS = ("tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler", "comms_logger", "aio",
              "activation_checkpointing", "autotuning", "elasticity", "compression_training", "data_efficiency")
FP16_SCALER_KEYS = {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
                    "consecutive_hysteresis", "auto_cast", "fp16_master_weights_and_grads"}
DS_SCHEDULERS = {"WarmupLR": "constant_with_warmup", "WarmupDecayLR": "linear", "WarmupCosineLR": "cosine"}


def read_deepspeed(path: str) -> dict:
    text = Path(path).expanduser().read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the file must hold a JSON object")
    return data


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _enabled(block: Any, default: bool) -> Any:
    """The `enabled` of a {enabled: ...} block (True / False / "auto"), `default` when absent."""
    if isinstance(block, dict):
        return block.get("enabled", default)
    return default


def plan_deepspeed(p: Plan, path: str | None) -> None:
    """Write the DeepSpeed config at `path` onto `p` (overrides, refusals naming `deepspeed_config.<key>`)."""
    if not path:
        return
    if not Path(path).expanduser().is_file():
        if p.check_paths:
            p.refuse(INPUT, f"={path!r}: file does not exist")
        return
    try:
        ds = read_deepspeed(path)
    except (OSError, ValueError) as e:
        p.refuse(INPUT, f"={path!r} is not a DeepSpeed JSON config: {e}")
        return
    p.extra["deepspeed"] = ds
    v = p.values

    def refuse(key: str, reason: str) -> None:
        p.refuse(INPUT, f": {key}{reason}")

    def agree(key: str, input_name: str, expected: Any) -> None:
        value = ds.get(key, AUTO)
        if value != AUTO and not _equal(value, expected):
            refuse(key, f"={value!r} differs from {input_name}={expected!r}; set it to \"auto\" or {expected!r} "
                        "(transformers' DeepSpeed integration refuses the mismatch too)")

    world = p.extra.get("processes", 1)
    rows = v["per_device_train_batch_size"] * v["gradient_accumulation_steps"] * world
    agree("train_micro_batch_size_per_gpu", "per_device_train_batch_size", v["per_device_train_batch_size"])
    agree("gradient_accumulation_steps", "gradient_accumulation_steps", v["gradient_accumulation_steps"])
    agree("train_batch_size", f"per_device_train_batch_size x gradient_accumulation_steps x {world} process"
                              f"{'es' if world > 1 else ''}", rows)
    agree("gradient_clipping", "max_grad_norm", v["max_grad_norm"])

    _dtype(p, ds, refuse)
    _zero(p, ds.get("zero_optimization"), refuse)
    _optimizer(p, ds.get("optimizer"), refuse)
    _scheduler(p, ds.get("scheduler"), refuse)

    known = {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
             "gradient_clipping", "bf16", "bfloat16", "fp16", "zero_optimization", "optimizer", "scheduler",
             *ACCEPTED_TOP, *OFF_BLOCKS}
    for key, value in ds.items():
        if key in OFF_BLOCKS and _enabled(value, False) not in (False, None):
            refuse(key, f".enabled={_enabled(value, False)!r}: rft does not run DeepSpeed's {key}; remove it or "
                        "set enabled to false (rft writes metrics.jsonl)")
        elif key not in known:
            refuse(key, " is not a DeepSpeed setting rft can honour; remove it")


def _dtype(p: Plan, ds: dict, refuse) -> None:
    bf16 = _enabled(ds.get("bf16", ds.get("bfloat16")), AUTO)
    fp16_block = ds.get("fp16")
    fp16 = _enabled(fp16_block, AUTO)
    # "auto" takes the training arguments: the Azure component trains in bf16 (--bf16 true), never fp16
    bf16 = True if bf16 == AUTO else bf16
    fp16 = False if fp16 == AUTO else fp16
    if not isinstance(bf16, bool) or not isinstance(fp16, bool):
        refuse("bf16/fp16", ".enabled must be true, false or \"auto\"")
        return
    if bf16 and fp16:
        if "bf16" in ds or "bfloat16" in ds:
            refuse("fp16", ".enabled=true together with bf16.enabled=true: choose one")
            return
        bf16 = False  # bf16 only by the "auto" default; fp16 named explicitly
    if fp16:
        from rft.components.common import has_cuda

        if has_cuda():
            refuse("fp16", ".enabled=true: DeepSpeed trains fp16 with a loss scaler, which rft does not have; use "
                           "bf16")
            return
        dtype = "float16"
    else:
        dtype = "bfloat16" if bf16 else "float32"
    p.set("actor_rollout_ref.rollout.dtype", dtype, INPUT)
    p.set("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", dtype, INPUT)
    if isinstance(fp16_block, dict):
        unknown = set(fp16_block) - FP16_SCALER_KEYS - {"enabled"}
        for key in sorted(unknown):
            refuse(f"fp16.{key}", " is not a DeepSpeed fp16 setting rft knows; remove it")


def _zero(p: Plan, zero: Any, refuse) -> None:
    if zero is None:
        return
    if not isinstance(zero, dict):
        refuse("zero_optimization", " must be an object")
        return
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        refuse("zero_optimization.stage", f"={stage!r} must be 0, 1, 2 or 3")
    elif stage > 0:
        # ZeRO-1/2/3 shard optimizer state / gradients / parameters over the processes: FSDP2's full sharding is
        # ZeRO-3, and over one process every stage is the unsharded update
        p.set(f"{A}.strategy", "fsdp2", f"{INPUT}.zero_optimization.stage")
        p.set(f"{A}.fsdp_config.fsdp_size", -1, f"{INPUT}.zero_optimization.stage")
    for name, key in (("offload_optimizer", "optimizer_offload"), ("offload_param", "param_offload")):
        block = zero.get(name)
        if block is None:
            continue
        if not isinstance(block, dict):
            refuse(f"zero_optimization.{name}", " must be an object")
            continue
        device = block.get("device", "none")
        if device == "cpu":
            if name == "offload_param" and stage != 3:
                refuse(f"zero_optimization.{name}", f": DeepSpeed offloads parameters only with stage 3 (stage "
                                                     f"{stage})")
                continue
            p.set(f"{A}.fsdp_config.{key}", True, f"{INPUT}.zero_optimization.{name}")
            if name == "offload_param":  # the reference shares the setting (FSDP offloads both models)
                p.set("actor_rollout_ref.ref.fsdp_config.param_offload", True, f"{INPUT}.zero_optimization.{name}")
        elif device == "nvme":
            refuse(f"zero_optimization.{name}.device", "='nvme': rft has no NVMe offload; use cpu or none")
        elif device not in ("none", None):
            refuse(f"zero_optimization.{name}.device", f"={device!r} must be cpu, nvme or none")
        for sub_key in sorted(set(block) - ACCEPTED_OFFLOAD):
            refuse(f"zero_optimization.{name}.{sub_key}", " is not honoured by rft; remove it")
    if zero.get("cpu_offload"):  # the old spelling of offload_optimizer.device=cpu
        p.set(f"{A}.fsdp_config.optimizer_offload", True, f"{INPUT}.zero_optimization.cpu_offload")
    for key in sorted(set(zero) - ACCEPTED_ZERO - {"stage", "offload_optimizer", "offload_param", "cpu_offload"}):
        refuse(f"zero_optimization.{key}", " is not honoured by rft (it is not a communication knob a single "
                                           "process can ignore); remove it")


def _optimizer(p: Plan, block: Any, refuse) -> None:
    if block is None:
        return
    v = p.values
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        refuse("optimizer", " must be an object with a type")
        return
    kind = block["type"].lower()
    params = block.get("params") or {}
    if kind not in ("adam", "adamw"):
        refuse("optimizer.type", f"={block['type']!r}: rft has no such optimizer; remove the section (the optim "
                                 "input chooses) or use AdamW")
        return
    if kind == "adam" and params.get("adam_w_mode", True) is False and params.get("weight_decay", AUTO) not in (
            AUTO, 0, 0.0):
        refuse("optimizer.params.adam_w_mode", "=false (L2-regularised Adam) is not available; use AdamW")
    expected = {"lr": v["learning_rate"], "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    for key, value in params.items():
        if key in ("adam_w_mode", "torch_adam", "fused"):
            continue
        if key not in expected:
            refuse(f"optimizer.params.{key}", " is not honoured by rft; remove it")
        elif value != AUTO and not _equal(value, expected[key]):
            refuse(f"optimizer.params.{key}", f"={value!r} differs from the training arguments ({expected[key]!r}; "
                                              "lr is learning_rate); set it to \"auto\"")
    if v["optim"] != "adamw_torch":
        p.refuse("optim", f"={v['optim']!r} is unused: the deepspeed_config's optimizer section ({block['type']}) "
                          "replaces it, as in transformers; remove one of the two")
    p.set(f"{A}.optim.optimizer", "adamw_torch", f"{INPUT}.optimizer")


def _scheduler(p: Plan, block: Any, refuse) -> None:
    if block is None:
        return
    v = p.values
    if not isinstance(block, dict) or block.get("type") not in DS_SCHEDULERS:
        kind = block.get("type") if isinstance(block, dict) else block
        refuse("scheduler.type", f"={kind!r}: rft maps only {sorted(DS_SCHEDULERS)} (to transformers' "
                                 f"{sorted(set(DS_SCHEDULERS.values()))}); remove the section (lr_scheduler_type "
                                 "chooses)")
        return
    params = block.get("params") or {}
    for key, value in params.items():
        if key == "warmup_min_lr" and value in (AUTO, 0, 0.0):
            continue
        if key == "warmup_max_lr" and (value == AUTO or _equal(value, v["learning_rate"])):
            continue
        if key in ("warmup_num_steps", "total_num_steps") and value == AUTO:
            continue  # from warmup_ratio and the number of steps, as transformers fills them
        if key == "warmup_type" and value == "linear":
            continue
        refuse(f"scheduler.params.{key}", f"={value!r}: only \"auto\" (or the value the training arguments give) is "
                                          "honoured")
    name = DS_SCHEDULERS[block["type"]]
    default = "cosine"
    if v["lr_scheduler_type"] not in (default, name):
        p.refuse("lr_scheduler_type", f"={v['lr_scheduler_type']!r} is unused: the deepspeed_config's scheduler "
                                      f"({block['type']} = {name}) replaces it, as in transformers; remove one")
    p.set(f"{A}.optim.lr_scheduler_type", name, f"{INPUT}.scheduler")
