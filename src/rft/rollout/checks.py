"""The checks of the rollout section: an engine rft has and what it needs, the sampling ranges; the vLLM keys
have no effect with another engine. And `rft generate`'s config (verl's generation.yaml)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rft.config.checks import CHECKS, UNUSED, CheckContext, all_null, check_model_dir, missing_file
from rft.config.errors import ConfigError
from rft.config.schema import VLLM_KEYS
from rft.errors import RftError

log = logging.getLogger("rft")


@UNUSED.register("rollout.vllm")
def unused_vllm_keys(cfg: Any) -> dict[str, str]:
    if cfg.actor_rollout_ref.rollout.name == "vllm":
        return {}
    why = f"actor_rollout_ref.rollout.name={cfg.actor_rollout_ref.rollout.name!r} (these are the vLLM engine's)"
    return {f"actor_rollout_ref.rollout.{key}": why for key in VLLM_KEYS}


@CHECKS.register("rollout.engine")
def check_engine(ctx: CheckContext) -> None:
    """rollout.name: an engine rft has; vLLM's keys usable here (vLLM installed: only where the run's files are
    checked too, not for `rft config show`, which shows the config and runs nothing)."""
    rollout = ctx.cfg.actor_rollout_ref.rollout
    if rollout.mode == "async":
        _note_async(ctx)
    if rollout.name in ("sglang", "trtllm"):
        engine = {"sglang": "SGLang", "trtllm": "TensorRT-LLM"}[rollout.name]
        raise ConfigError(f"actor_rollout_ref.rollout.name={rollout.name!r}: rft has no {engine} engine; use 'vllm' "
                          "or 'hf' (transformers generation with a KV cache)")
    if rollout.name == "vllm":
        from rft.rollout.vllm_engine import image_refusal

        path = ctx.cfg.actor_rollout_ref.model.path
        refusal = image_refusal(path) if path else None
        if refusal:
            raise ConfigError(f"actor_rollout_ref.rollout.name='vllm': {refusal}")
        if ctx.check_paths:
            vllm_problem = missing_vllm()
            if vllm_problem:
                raise ConfigError(vllm_problem)
        _check_vllm(rollout)


def _note_async(ctx: CheckContext) -> None:
    """rollout.mode=async (verl's server-mode engine): the hf engine's stream in an `rft serve` process the run
    starts, or, where that server or the one-process loop cannot serve the run (`unserved_reason`), the in-process
    rollout: verl's PPO step waits for the whole batch in both modes, so the samples are the same. Said either way."""
    from rft.rollout.engines import unserved_reason

    why = unserved_reason(ctx.cfg, ctx.world_size)
    if why is None:
        log.warning("rft: note: actor_rollout_ref.rollout.mode=async: the %s engine serves the rollout from an rft "
                    "serve process the run starts (verl's server mode; on-policy steps, the trainer's weights sent "
                    "at every sync)", ctx.cfg.actor_rollout_ref.rollout.name)
    else:
        log.warning("rft: note: actor_rollout_ref.rollout.mode=async runs as rft's in-process rollout with %s "
                    "(verl's PPO step waits for the whole batch in both modes, so the samples and the update are "
                    "the same)", why)


def missing_vllm() -> str | None:
    """Why the vLLM engine cannot start here (one line naming the extra and the hf engine), None where it can."""
    from rft.rollout.vllm_engine import require_vllm

    r = "actor_rollout_ref.rollout"
    try:
        require_vllm(f"{r}.name=vllm")
    except RftError as e:
        return f"{e}; or set {r}.name=hf, which runs without it"
    return None


def _check_vllm(rollout) -> None:
    """rollout.name=vllm: its keys' values usable here."""
    import torch

    r = "actor_rollout_ref.rollout"
    tp = rollout.tensor_model_parallel_size
    if tp < 1 or (tp > 1 and torch.cuda.is_available()):
        raise ConfigError(f"{r}.tensor_model_parallel_size={tp}: rft runs its vLLM engine unsharded in the "
                          "trainer's process; set 1")
    if tp > 2:
        raise ConfigError(f"{r}.tensor_model_parallel_size={tp} needs {tp} devices and this machine has no CUDA; "
                          "set 1 (2, verl's default, is accepted and runs one engine)")
    if not 0 < rollout.gpu_memory_utilization <= 1:
        raise ConfigError(f"{r}.gpu_memory_utilization={rollout.gpu_memory_utilization} must be in (0, 1]")
    for key in ("max_num_batched_tokens", "max_num_seqs", "max_model_len"):
        value = getattr(rollout, key)
        if value is not None and value < 1:
            raise ConfigError(f"{r}.{key}={value} must be >= 1")
    kwargs = rollout.engine_kwargs or {}
    unknown = sorted(set(kwargs) - {"vllm", "sglang"})
    if unknown:
        raise ConfigError(f"{r}.engine_kwargs: {unknown} are not engines; the keys are vllm (arguments of vllm.LLM) "
                          "and sglang")
    if not all_null(kwargs.get("sglang") or {}):
        raise ConfigError(f"{r}.engine_kwargs.sglang: rft has no SGLang engine; remove it")
    if not isinstance(kwargs.get("vllm") or {}, dict):
        raise ConfigError(f"{r}.engine_kwargs.vllm must be a mapping of vllm.LLM arguments")


@CHECKS.register("rollout.kv_cache")
def check_kv_cache(ctx: CheckContext) -> None:
    """The hf engine on CPU preallocates keys and values for every row it generates at once and every position of
    prompt + response: one that cannot fit in the memory free now is refused before the model loads (it failed
    in the allocator, as a bug)."""
    import json
    from types import SimpleNamespace

    from rft.models.load import resolve_device
    from rft.rollout.cache import kv_bytes_per_token
    from rft.runtime import available_memory

    cfg = ctx.cfg
    ro, data = cfg.actor_rollout_ref.rollout, cfg.data
    if ro.name != "hf" or not (ctx.check_paths and ctx.check_model_path):
        return
    if resolve_device(cfg.trainer.device).type != "cpu":
        return
    try:
        raw = json.loads((Path(cfg.actor_rollout_ref.model.path).expanduser() / "config.json").read_text())
        text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
        per_token = kv_bytes_per_token(SimpleNamespace(**text))
    except (OSError, ValueError, TypeError, AttributeError, ZeroDivisionError):
        return  # the model's own checks say what is wrong with its folder
    free = available_memory()
    rows = ro.micro_batch_size or data.train_batch_size * ro.n
    positions = data.max_prompt_length + data.max_response_length
    need = rows * positions * per_token
    if free is not None and need > free:
        raise ConfigError(
            f"actor_rollout_ref.rollout: the hf engine's KV cache for {rows} rows x {positions:,} positions "
            f"(data.max_prompt_length {data.max_prompt_length:,} + data.max_response_length "
            f"{data.max_response_length:,}) of this model needs {need / 2**30:.1f} GiB in float32, more than the "
            f"{free / 2**30:.1f} GiB of memory free now; lower data.max_response_length or the rows generated at "
            "once (actor_rollout_ref.rollout.micro_batch_size)")


@CHECKS.register("rollout.sampling")
def check_sampling(ctx: CheckContext) -> None:
    """top_p, temperature and do_sample, for training and validation."""
    rollout = ctx.cfg.actor_rollout_ref.rollout
    if not 0 < rollout.top_p <= 1 or not 0 < rollout.val_kwargs.top_p <= 1:
        raise ConfigError("actor_rollout_ref.rollout.top_p and val_kwargs.top_p must be in (0, 1]")
    if rollout.temperature < 0 or rollout.val_kwargs.temperature < 0:
        raise ConfigError("actor_rollout_ref.rollout.temperature and val_kwargs.temperature must be >= 0")
    if rollout.do_sample and rollout.temperature == 0:
        raise ConfigError("actor_rollout_ref.rollout.temperature=0 with do_sample=true: set do_sample=false for greedy")


@CHECKS.register("rollout.generation")
def check_generation(ctx: CheckContext) -> None:
    """rft generate (verl's generation.yaml): the prompt file, the output parquet, the model, sizes, sampling."""
    cfg = ctx.cfg
    d, r = cfg.data, cfg.rollout
    for key, value in (("data.path", d.path), ("data.output_path", d.output_path), ("model.path", cfg.model.path)):
        if not value:
            raise ConfigError(f"{key} is required")
    for key, value in (("data.n_samples", d.n_samples), ("data.batch_size", d.batch_size),
                       ("rollout.prompt_length", r.prompt_length), ("rollout.response_length", r.response_length)):
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    if not d.output_path.endswith(".parquet"):
        raise ConfigError(f"data.output_path={d.output_path!r} must be a .parquet file (what rft eval reads)")
    if Path(d.output_path).expanduser().resolve() == Path(d.path).expanduser().resolve():
        raise ConfigError(f"data.output_path={d.output_path!r} is data.path: the prompts would be replaced by the "
                          "responses; name another .parquet file")
    if r.do_sample and r.temperature <= 0:
        raise ConfigError("rollout.temperature must be > 0 when rollout.do_sample=true (set do_sample=false for "
                          "greedy decoding)")
    if not 0 < r.top_p <= 1:
        raise ConfigError(f"rollout.top_p must be in (0, 1], got {r.top_p}")
    if r.name == "vllm":
        _check_generation_on_vllm(cfg, ctx.check_paths)
    if ctx.check_paths:
        if not Path(d.path).expanduser().is_file():
            raise missing_file("data.path", d.path)
        check_model_dir("model.path", cfg.model.path, ctx)


def _check_generation_on_vllm(cfg: Any, check_paths: bool) -> None:
    """rft generate on vLLM: a text model (its engine takes no transformers model to hold a vision-language
    model's processor), and vLLM installed (where the files are checked too)."""
    from rft.rollout.vllm_engine import require_vllm

    try:
        config = json.loads((Path(cfg.model.path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        config = {}  # the model folder's own check says what is wrong with it
    if isinstance(config, dict) and config.get("vision_config"):
        raise ConfigError(f"rollout.name='vllm': rft generate runs vLLM on text models; {cfg.model.path!r} is a "
                          "vision-language model: use rollout.name=hf")
    if cfg.rollout.micro_batch_size is not None:
        raise ConfigError(f"rollout.micro_batch_size={cfg.rollout.micro_batch_size}: rows per pass of the hf engine; "
                          "vLLM schedules its own (data.batch_size prompts per call): remove it, or use "
                          "rollout.name=hf")
    if check_paths:
        try:
            require_vllm("rollout.name=vllm")
        except RftError as e:
            raise ConfigError(str(e)) from None
