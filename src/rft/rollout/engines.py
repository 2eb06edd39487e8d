"""The engines a run generates with, by `actor_rollout_ref.rollout.name`: each registered with what the trainer
asks of it (`EngineSpec`), the way estimators declare what they need. `hf` and `vllm` are rft's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from rft.registry import Registry

log = logging.getLogger("rft")


@dataclass(frozen=True)
class EngineSpec:
    """An engine and what the trainer asks of it. `build(cfg, model, tokenizer, eos_ids, all_done, distributed,
    weights)` makes it (see `build_engine`); `own_numerics`: its log-probs are not the trainer's (another kernel
    library), so the gap is logged each step (`training/rollout_probs_diff_*`: from the old-log-prob pass where one
    runs, else from the update's own passes, `PolicyWorker.rollout_drift`); `replica_per_rank`: with several
    trainer processes each rank runs an engine of its own over an unsharded copy of the policy that every sync
    fills with the gathered weights (verl's hybrid engine), instead of generating with the sharded model."""

    build: Callable
    own_numerics: bool = False
    replica_per_rank: bool = False


ENGINES: Registry[EngineSpec] = Registry("rollout engine")


def engine_spec(name: str) -> EngineSpec:
    return ENGINES.get(name)


def build_engine(cfg, model: nn.Module, tokenizer, all_done: Callable[[bool], bool] | None = None,
                 distributed: bool = False, weights=None):
    """The rollout engine serving `model` (the trained model itself, or the explorer's copy of it).
    `all_done`: the hf engine's check across the processes of a sharded model (`HFRollout`). An engine with
    `replica_per_rank`: `distributed`, one engine in each of the run's torch.distributed processes (each generates
    its rank's share); `weights`, what `model` takes before the engine first loads from it."""
    from rft.rollout.base import eos_token_ids

    eos = eos_token_ids(model, tokenizer)
    return engine_spec(cfg.actor_rollout_ref.rollout.name).build(cfg, model, tokenizer, eos, all_done, distributed,
                                                                 weights)


def _hf(cfg, model, tokenizer, eos, all_done, distributed, weights):
    from rft.models.load import device_of
    from rft.models.precision import choose
    from rft.rollout.hf import HFRollout

    ro = cfg.actor_rollout_ref.rollout
    return HFRollout(model, eos, tokenizer.pad_token_id, ro.micro_batch_size, all_done,
                     compiled=compiled_decode(ro.enforce_eager, model, all_done is not None),
                     dtype=choose(ro.dtype, device_of(model), cfg.actor_rollout_ref.model.path).dtype)


def _vllm(cfg, model, tokenizer, eos, all_done, distributed, weights):
    from rft.rollout.vllm_engine import VLLMRollout

    options = vllm_options(cfg, model)
    options.distributed = distributed
    engine = VLLMRollout(model, cfg.actor_rollout_ref.model.path, eos, tokenizer.pad_token_id, options)
    engine.update_weights(weights, 0)  # the served model's weights (a dummy load, LoRA, a resumed checkpoint)
    return engine


def unserved_reason(cfg, world_size: int) -> str | None:
    """Why a run with rollout.mode=async cannot have its engine in a server process (`served_engine`), so that it
    runs the in-process rollout instead; None where it has (mode async, and everything below as the server and the
    explorer need it: the one-process loop's, or the explorer process's of an explorer ahead of the trainer)."""
    from rft.models.vision import is_vision_folder

    ro, t = cfg.actor_rollout_ref.rollout, cfg.trainer
    path = cfg.actor_rollout_ref.model.path
    if ro.mode != "async":
        return f"actor_rollout_ref.rollout.mode={ro.mode!r}"
    return (f"actor_rollout_ref.rollout.name={ro.name!r} (the engine server, rft serve, runs hf or vllm)"
            if ro.name not in ("hf", "vllm") else
            f"trainer.mode={t.mode!r} (the server serves an explorer: trainer.mode both or explore)"
            if t.mode not in ("both", "explore") else
            f"{world_size} trainer processes (the server serves one)" if world_size > 1 else
            f"workflow.type={cfg.workflow.type!r} (the server serves simple_workflow's batched rollout)"
            if cfg.workflow.type != "simple_workflow" else
            f"actor_rollout_ref.model.lora_rank={cfg.actor_rollout_ref.model.lora_rank} (the server takes whole "
            "weights, not a LoRA adapter)" if cfg.actor_rollout_ref.model.lora_rank > 0 else
            "actor_rollout_ref.rollout.enforce_eager=false (the server's stream decodes eager)"
            if not ro.enforce_eager else
            "a vision-language model (the server takes text only)" if path and is_vision_folder(path) else
            "workflow.auxiliary_models (they are served in the engine's process)"
            if cfg.workflow.auxiliary_models else
            f"data.tokenizer={cfg.data.tokenizer!r} (the server reads the model folder's tokenizer)"
            if cfg.data.tokenizer not in (None, path) else None)


def served_engine(cfg, model: nn.Module, log_name: str = "engine_server.log"):
    """rollout.mode=async, verl's server-mode engine: the rollout engine's stream (continuous batching: the hf
    engine's, or vLLM's request-level API for rollout.name=vllm) in an `rft serve` process of its own, started here
    from the model folder (its log `<out>/log/<log_name>`), and the client over it (`RemoteRollout`, which stops it
    on `close`). Its weights are the trainer's after every sync (the synchronizer sends them); each step's prompts
    go in as one seeded request, so runs are reproducible."""
    import dataclasses
    from pathlib import Path

    import torch

    from rft.models.load import device_of
    from rft.models.precision import choose
    from rft.rollout.remote import RemoteRollout, start_server, stop_process

    ro, path = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model.path
    logs = Path(cfg.trainer.default_local_dir) / "log"
    logs.mkdir(parents=True, exist_ok=True)
    dtype = "bfloat16" if choose(ro.dtype, device_of(model)).dtype == torch.bfloat16 else "float32"
    # vLLM built from the rollout keys as the in-process engine is (`vllm_options`)
    options = dataclasses.asdict(vllm_options(cfg, model)) if ro.name == "vllm" else None
    process, url = start_server(path, seed=cfg.trainer.seed, max_num_seqs=ro.max_num_seqs, dtype=dtype,
                                log_path=str(logs / log_name), engine=ro.name, vllm_options=options)
    try:
        engine = RemoteRollout(url, Path(path).expanduser().resolve().name)
    except BaseException:
        stop_process(process)
        raise
    engine.owned.append(process)
    log.info("rft: actor_rollout_ref.rollout.mode=async: the %s engine serves from its own process at %s", ro.name,
             url)
    return engine


ENGINES.register("hf")(EngineSpec(_hf))
ENGINES.register("vllm")(EngineSpec(_vllm, own_numerics=True, replica_per_rank=True))


def vllm_options(cfg, model: nn.Module):
    """`VLLMOptions` from the rollout keys (schema.RolloutConfig documents each)."""
    import torch

    from rft.rollout.vllm_engine import VLLMOptions

    data, ro, t = cfg.data, cfg.actor_rollout_ref.rollout, cfg.trainer
    from rft.models.precision import choose

    cuda = torch.cuda.is_available()
    dtype = choose(ro.dtype, torch.device("cuda" if cuda else "cpu"), cfg.actor_rollout_ref.model.path).dtype
    if not cuda:
        if ro.free_cache_engine:
            log.info("rft: rollout.free_cache_engine: vLLM's sleep mode needs CUDA; on CPU the engine keeps its "
                     "memory between rollouts")
        if ro.tensor_model_parallel_size > 1:
            log.info("rft: rollout.tensor_model_parallel_size=%d (verl's default) on a machine without CUDA: one "
                     "unsharded vLLM engine in the trainer's process", ro.tensor_model_parallel_size)
    length = data.max_prompt_length + data.max_response_length
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 32768
    if ro.max_model_len is not None:
        max_model_len = ro.max_model_len
    elif cfg.workflow.type in ("simple_workflow", "math_workflow"):
        max_model_len = length
        if length > positions:  # vLLM refuses a longer max_model_len than the model's positions
            log.info("rft: the vLLM engine holds %d positions (the model's max_position_embeddings), fewer than "
                     "data.max_prompt_length + data.max_response_length = %d: a response ends there", positions,
                     length)
            max_model_len = positions
    else:  # a multi-turn conversation: as long as the model holds
        max_model_len = min(positions, 32768)
    rows = max(data.train_batch_size * ro.n, (data.val_batch_size or 0) * ro.val_kwargs.n, 64)
    extra = {k: v for k, v in ((ro.engine_kwargs or {}).get("vllm") or {}).items() if v is not None}
    return VLLMOptions(
        dtype=str(dtype).removeprefix("torch."), seed=t.seed, max_model_len=max_model_len,
        gpu_memory_utilization=ro.gpu_memory_utilization,
        kv_cache_tokens=max(min(rows, ro.max_num_seqs) * length, max_model_len),
        enforce_eager=ro.enforce_eager, enable_prefix_caching=ro.enable_prefix_caching,
        enable_chunked_prefill=ro.enable_chunked_prefill, max_num_batched_tokens=ro.max_num_batched_tokens,
        max_num_seqs=ro.max_num_seqs,
        load_format="dummy" if ro.load_format.startswith("dummy") else ro.load_format, engine_kwargs=extra,
        tokenizer=data.tokenizer)


def compiled_decode(enforce_eager: bool, model: nn.Module, sharded: bool) -> bool:
    """Whether the hf engine compiles its decode step: `rollout.enforce_eager=false` asks for it (as it asks vLLM
    for captured graphs). A model sharded over processes or one with recurrent / linear-attention layers decodes
    eager, and so does one with ALiBi (its biases come from the padding mask, which a static cache's steps do not
    give it), and every model where torch.compile's backend does not work (no C++ compiler, ...); the log says
    why."""
    from rft.models.arch import attention_only, uses_alibi
    from rft.workers.packing import compile_backend_works

    if enforce_eager:
        return False
    why = ("its model is sharded over the run's processes" if sharded else
           "its model has layers whose cache is not keys and values" if not attention_only(model) else
           "its model's ALiBi biases come from the padding mask" if uses_alibi(model) else None)
    if why is None and not compile_backend_works()[0]:
        why = f"torch.compile does not work here ({compile_backend_works()[1]})"
    if why:
        log.info("rft: actor_rollout_ref.rollout.enforce_eager=false: the hf engine decodes eager, since %s", why)
        return False
    log.info("rft: actor_rollout_ref.rollout.enforce_eager=false: the hf engine's decode step is compiled with static "
             "shapes (the first generation of each shape compiles it)")
    return True
