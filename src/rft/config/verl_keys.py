"""verl's keys that no rft schema field holds, each one known by one table (`VERL_KEYS`): never "unknown".

verl's own configs (ppo_trainer.yaml with its hydra defaults, the flat _generated_ppo_trainer.yaml, sft_trainer.yaml)
carry keys of parts rft does not have or does not need: profilers, Ray and NCCL plumbing, engine knobs of engines
not in use, the Megatron backend. A row of the table says what each such key is here:

* NOOP: no effect on what rft computes, at any value (a profiler, a timeout of a process group rft does not make, a
  memory knob of an engine not in use): accepted, and named in one note line per reason.
* DEFAULT: a feature rft does not have: accepted at verl's default values (`ok`; an interpolation `${...}` is verl's
  own wiring between its keys), which switch it off, and named in the notes; any other value is refused with `why`.
* ALIAS: verl's other name of an rft key: the value moves there (`fn` converts it), said in the notes.
* SAME: a key verl copies from another one (`to`, an rft key): accepted while it equals that key's value, else
  refused with `why`.
* REFUSE: a feature rft does not have, at any value: refused with `why`.

`_target_` (the class verl instantiates a section as) is a marker, not a setting: dropped, and named in the notes
too. A row's pattern is matched (fnmatch) against the dotted key; the first matching row wins. A key that is a schema
field is never looked up here. `schema` names the config a row is for: "rl" (`rft train`, RFTConfig) or "sft"
(`rft sft`, SFTConfig).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rft.config.errors import ConfigError

log = logging.getLogger("rft")

NOOP, DEFAULT, ALIAS, SAME, REFUSE = "noop", "default", "alias", "same", "refuse"


@dataclasses.dataclass(frozen=True)
class VerlKey:
    pattern: str
    kind: str
    why: str
    ok: tuple = ()
    to: str | None = None
    schema: str = "rl"
    fn: Callable[[Any, Mapping[str, Any]], Any] | None = None


MEGATRON = "verl's Megatron backend (Megatron-LM parallelism and its options) is not in rft; use actor.strategy fsdp / fsdp2"
SGLANG = "SGLang is not an rft rollout engine; set actor_rollout_ref.rollout.name=vllm (or hf)"
NPU = "an NPU (Ascend) knob; rft runs on CUDA or CPU"
ROUTING_REPLAY = "MoE routing replay (recording the rollout's expert routing and replaying it in training) is not in rft"
PROFILER = "a profiler's setting (verl's nsys / torch / NPU profilers): rft runs no profiler, so it changes nothing"
PLUMBING = "verl's process and Ray plumbing (NCCL timeouts, worker implementation, node redundancy): rft starts its own processes"
ENGINE = "a knob of how verl's rollout engine runs (server mode, weight sync, memory, logging), not of what it samples"
MULTI_TURN = ("verl's agent loops other than its multi-turn tool rollout are not in rft; that one is "
              "actor_rollout_ref.rollout.multi_turn.enable=true, rft's workflow.type=tool_call_workflow "
              "(docs/workflows.md)")
REWARD_LOOP = ("verl's reward loop runs the same reward function / reward model in separate workers (the reward model "
               "served by an inference engine); rft runs them in process, with the same scores")
FSDP_ENGINE = ("a knob of verl's FSDP engine that changes memory or speed, not the numbers (use_orig_params, "
               "reshard_after_forward, torch.compile, entropy chunking)")

LIGER = ("Liger's fused kernels (RMSNorm, RoPE, SwiGLU, cross-entropy) compute what the model's own modules compute, "
         "with less memory: rft runs the model's own modules")
TRITON = "verl's Triton kernels of the fused log-probs compute what rft's torch ones compute: rft runs its own"


def _sft_micro(value: Any, flat: Mapping[str, Any]) -> Any:
    """verl's deprecated global SFT micro-batch (rows per micro step over all processes) as rows per process."""
    processes = int(flat.get("trainer.nnodes", 1) or 1) * int(flat.get("trainer.n_gpus_per_node", 1) or 1)
    return max(1, int(value) // processes) if value is not None else None


A, R, RO, C, RM = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic",
                   "reward_model")
MARKER = "hydra's class markers (_target_: the class verl builds a section as)"
VERL_KEYS: tuple[VerlKey, ...] = (
    *(VerlKey(p, NOOP, MARKER, schema=s) for p in ("_target_", "*._target_") for s in ("rl", "sft")),
    # --- the backends rft does not have, named first (a Megatron config is refused for Megatron)
    *(VerlKey(f"{s}.megatron.*", REFUSE, MEGATRON) for s in (A, R, C)),
    *(VerlKey(f"{s}.optim.override_optimizer_config.*", REFUSE, MEGATRON + " (its optimizer's CPU offload)")
      for s in (A, C)),
    VerlKey("actor_rollout_ref.model.lora.*", REFUSE, MEGATRON + " (its LoRA block); with FSDP set "
            "actor_rollout_ref.model.lora_rank / lora_alpha"),
    VerlKey("actor_rollout_ref.model.mtp.enable*", DEFAULT, "multi-token prediction (MTP) training and speculative "
            "rollout are not in rft", ok=(False,)),
    VerlKey("actor_rollout_ref.model.mtp.*", NOOP, "MTP settings, without actor_rollout_ref.model.mtp.enable"),
    *(VerlKey(f"{s}.router_replay.mode", DEFAULT, ROUTING_REPLAY, ok=("disabled",)) for s in (A, R)),
    *(VerlKey(f"{s}.router_replay.*", DEFAULT, ROUTING_REPLAY, ok=(None,)) for s in (A, R)),
    VerlKey(f"{RO}.enable_rollout_routing_replay", DEFAULT, ROUTING_REPLAY, ok=(False,)),
    VerlKey(f"{RO}.sglang_rollout_mode", NOOP, "SGLang's own setting; " + SGLANG),
    VerlKey("*.profiler.tool_config.npu.*", NOOP, NPU + " (its profiler)"),
    VerlKey(f"{R}.use_torch_compile", NOOP, "torch.compile of the reference (speed only; verl's NPU examples turn it "
            "off)"),
    # --- profilers, markers, plumbing: no effect here at any value
    VerlKey("global_profiler.*", NOOP, PROFILER),
    VerlKey("*.profiler.*", NOOP, PROFILER),
    VerlKey("actor_rollout_ref.nccl_timeout", NOOP, PLUMBING),
    VerlKey("trainer.esi_redundant_time", NOOP, PLUMBING),
    VerlKey("trainer.use_legacy_worker_impl", NOOP, PLUMBING),
    # verl's fully-async recipe: staleness_threshold, partial_rollout and the sync cadence are rft's async_training
    # section (streaming in mode async, docs/rollout.md); these have no counterpart
    VerlKey("async_training.checkpoint_engine.*", REFUSE, "verl's checkpoint-engine broadcast (NCCL buckets between "
            "Ray workers) is not in rft: the engine server loads each sync's weights from a file"),
    VerlKey("async_training.use_trainer_do_validate", REFUSE, "rft validates with the engine that explores"),
    VerlKey("async_training.use_rollout_log_probs", REFUSE, "rft's losses take the rollout log-probs through "
            "algorithm.rollout_correction (and the old log-probs recomputed by the trainer where a step has several "
            "mini-batches), not through this switch"),
    VerlKey("async_training.compute_prox_log_prob", REFUSE, "decoupled PPO's proximal log-probs are not in rft "
            "yet; algorithm.rollout_correction corrects for the staleness"),
    VerlKey("transfer_queue.enable", DEFAULT, "verl's transfer queue (a data plane between Ray workers) is not in "
            "rft, which has no Ray workers to feed", ok=(False,)),
    VerlKey("ray_kwargs.ray_init.*", ALIAS, "rft's Ray settings are the top-level ray_init section",
            to="ray_init.{leaf}"),
    VerlKey("ray_kwargs.timeline_json_file", ALIAS, "rft's Ray settings are the top-level ray_init section",
            to="ray_init.timeline_json_file"),
    # --- the actor's and the reference's engine
    *(VerlKey(f"{s}.fsdp_config.{k}", NOOP, FSDP_ENGINE) for s in (A, R, "critic.model")
      for k in ("reshard_after_forward", "use_orig_params", "entropy_from_logits_with_chunking", "use_torch_compile",
                "entropy_checkpointing", "forward_only")),
    *(VerlKey(f"{s}.fsdp_config.dtype", DEFAULT, f"rft's compute dtype is {s}.fsdp_config.mixed_precision.param_dtype "
              "(auto: bf16 on a GPU, verl's default): set that", ok=("bfloat16", "bf16")) for s in (A, R, "critic.model")),
    *(VerlKey(f"{s}.fsdp_config.strategy", SAME, "the FSDP version is the section's strategy key in rft: set that",
              to=f"{s.replace('.model', '')}.strategy" if s != R else f"{A}.strategy") for s in (A, R, "critic.model")),
    # fsdp_config.model_dtype is rft's key with verl's meaning (the dtype the model is loaded and kept in)
    *(VerlKey(f"{s}.fsdp_config.seed", DEFAULT, "rft seeds from data.seed: set that", ok=(42,))
      for s in (A, R, "critic.model")),
    *(VerlKey(f"{s}.fsdp_config.full_determinism", DEFAULT, "rft sets no global deterministic-algorithms mode",
              ok=(False,)) for s in (A, R, "critic.model")),
    *(VerlKey(f"{s}.fsdp_config.ulysses_sequence_parallel_size", SAME, "rft's sequence parallelism is "
              f"{A}.ulysses_sequence_parallel_size: set that", to=f"{A}.ulysses_sequence_parallel_size")
      for s in (A, R)),
    VerlKey("critic.model.fsdp_config.ulysses_sequence_parallel_size", DEFAULT, "rft's is "
            "critic.ulysses_sequence_parallel_size: set that", ok=(1,)),
    *(VerlKey(f"{s}.rollout_n", SAME, "verl copies actor_rollout_ref.rollout.n here: set that",
              to=f"{RO}.n") for s in (A, R)),
    VerlKey(f"{A}.use_fused_kernels", SAME, "verl copies actor_rollout_ref.model.use_fused_kernels here: set that",
            to="actor_rollout_ref.model.use_fused_kernels"),
    VerlKey(f"{A}.use_remove_padding", SAME, "verl copies actor_rollout_ref.model.use_remove_padding here: set that",
            to="actor_rollout_ref.model.use_remove_padding"),
    VerlKey(f"{R}.strategy", SAME, "the reference is sharded as the actor is: set actor_rollout_ref.actor.strategy",
            to=f"{A}.strategy"),
    VerlKey(f"{A}.freeze_vision_tower", ALIAS, "rft's key", to="actor_rollout_ref.model.freeze_vision_tower"),
    VerlKey(f"{A}.calculate_entropy", NOOP, "a metric switch of verl's engine worker (rft computes the entropy where "
            "its loss or metrics need it)"),
    VerlKey(f"{A}.use_prefix_grouper", NOOP, "verl's prefix grouper computes a group's shared prompt once: rft's "
            "packed passes (actor_rollout_ref.model.use_remove_padding) already do"),
    VerlKey(f"{A}.sum_pi_squared_checkpointing", NOOP, "a memory knob of verl's optimal-token-baseline pass"),
    VerlKey("*.checkpoint.async_save", NOOP, "rft's saves are synchronous (written, then renamed): async_save "
            "changes when a checkpoint is written, not what"),
    *(VerlKey(f"{s}.optim.clip_grad", SAME, f"verl's FSDP engine reads the clip here, its legacy worker {s}.grad_clip; "
              f"rft has one: set {s}.grad_clip", to=f"{s}.grad_clip") for s in (A, C)),
    *(VerlKey(f"{s}.optim.optimizer_impl", DEFAULT, "rft's optimizers are transformers' (optim.optimizer names "
              "them)", ok=("torch.optim",)) for s in (A, C)),
    *(VerlKey(f"{s}.optim.override_optimizer_config", DEFAULT, MEGATRON, ok=(None, {})) for s in (A, C)),
    VerlKey("critic.data_loader_seed", DEFAULT, "rft's critic reads the actor's batches: there is no critic data "
            "loader to seed", ok=(42, None)),
    # --- the model
    VerlKey("actor_rollout_ref.model.custom_chat_template", ALIAS, "rft's key", to="data.chat_template"),
    VerlKey("actor_rollout_ref.model.hf_config_path", DEFAULT, "rft reads the model's config from its folder "
            "(actor_rollout_ref.model.path)", ok=(None,)),
    VerlKey("actor_rollout_ref.model.tokenizer_path", ALIAS, "rft's key", to="data.tokenizer"),
    VerlKey("*.model.tiled_mlp.enabled", DEFAULT, "tiled MLP computation (a memory knob of long sequences) is not "
            "in rft", ok=(False,)),
    VerlKey("*.model.tiled_mlp.num_shards", NOOP, "tiled MLP settings, without tiled_mlp.enabled"),
    VerlKey("actor_rollout_ref.model.torch_dtype", REFUSE, "not a key of verl's model config either (verl's hydra "
            "refuses it); the passes' dtype: actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"),
    # --- the rollout
    VerlKey(f"{RO}.agent.default_agent_loop", DEFAULT, MULTI_TURN, ok=("single_turn_agent",)),
    VerlKey(f"{RO}.agent.agent_loop_config_path", DEFAULT, MULTI_TURN, ok=(None,)),
    VerlKey(f"{RO}.agent.custom_async_server.*", DEFAULT, "a custom rollout server class is not in rft", ok=(None,)),
    VerlKey(f"{RO}.agent.num_workers", NOOP, ENGINE),
    VerlKey(f"{RO}.calculate_log_probs", NOOP, "verl's rollout also returns the engine's log-probs of the sampled "
            "tokens; rft's trainer computes the old log-probs itself (rollout correction: algorithm.rollout_correction)"),
    VerlKey(f"{RO}.logprobs_mode", DEFAULT, "rft's log-probs are those of the processed logits (logits / temperature)",
            ok=("processed_logprobs",)),
    *(VerlKey(f"{RO}.{k}", DEFAULT, "the rollout engine spread over several devices this way is not in rft (its vLLM "
              "runs in each process, tensor_model_parallel_size wide): needs more devices than one engine has",
              ok=(1, None)) for k in ("data_parallel_size", "pipeline_model_parallel_size")),
    VerlKey(f"{RO}.expert_parallel_size", DEFAULT, "expert parallelism of a MoE model in the rollout engine is not "
            "in rft", ok=(1, None)),
    VerlKey(f"{RO}.over_sample_rate", NOOP, "read by no code of verl 0.7 / 0.8: its one reader, the SGLang SPMD "
            "rollout that aborted the slowest over_sample_rate share of a step's requests, was retired (verl "
            "#4422); every response is generated to its end, as in verl's agent loop"),
    VerlKey(f"{RO}.skip_rollout", DEFAULT, "replaying dumped rollouts (skip_rollout) is not in rft", ok=(False,)),
    VerlKey(f"{RO}.quantization", DEFAULT, "a quantized rollout engine (FP8) is not in rft", ok=(None,)),
    VerlKey(f"{RO}.quantization_config_file", DEFAULT, "a quantized rollout engine (FP8) is not in rft", ok=(None,)),
    VerlKey(f"{RO}.prometheus.enable", DEFAULT, "exporting the engine's metrics to Prometheus is not in rft",
            ok=(False,)),
    *(VerlKey(f"{RO}.{k}", NOOP, ENGINE) for k in (
        "layered_summon", "multi_stage_wake_up", "cudagraph_capture_sizes", "scheduling_policy", "disable_log_stats",
        "skip_dump_dir", "skip_tokenizer_init", "checkpoint_engine.*", "server.*", "trace.*", "prometheus.*", "mtp",
        "limit_images")),
    VerlKey("*.model.use_shm", NOOP, "verl copies the model to shared memory to load it faster: rft loads it from "
            "its folder, the same weights"),
    VerlKey("data.filter_overlong_prompts_workers", NOOP, "worker processes of verl's overlong filter: rft filters in "
            "process, the same prompts"),
    VerlKey("*.fsdp_config.forward_prefetch", NOOP, FSDP_ENGINE),
    VerlKey(f"{RO}.update_weights_bucket_megabytes", NOOP, ENGINE),  # verl 0.7's name (0.8: checkpoint_engine.*)
    *(VerlKey(f"algorithm.rollout_correction.{k}", DEFAULT, "verl 0.7's rollout-correction key, gone in 0.8: set "
              "algorithm.rollout_correction's 0.8 keys", ok=(None,))
      for k in ("rollout_rs_threshold_lower", "rollout_token_veto_threshold")),
    # --- data
    VerlKey("data.dataloader_num_workers", NOOP, "worker processes of verl's DataLoader: rft reads and tokenizes the "
            "prompts once, in process"),
    VerlKey("data.return_multi_modal_inputs", NOOP, "rft passes a row's images to the model whenever it has them"),
    VerlKey("data.use_shm", DEFAULT, "shared-memory loading is not in rft", ok=(False,)),
    VerlKey("data.train_max_samples", DEFAULT, "capping the training rows is not in rft yet: cut the file instead",
            ok=(-1, None)),
    VerlKey("data.reward_fn_key", DEFAULT, "rft reads the data source from data_source (data.data_source_key in "
            "rft eval)", ok=("data_source",)),
    VerlKey("data.tool_config_path", DEFAULT, "verl's dataset counts this file's tool schemas in a prompt's length "
            "(filter_overlong_prompts), which rft does not; rft's tools file is actor_rollout_ref.rollout.multi_turn."
            "tool_config_path", ok=(None,)),
    VerlKey("data.image_patch_size", NOOP, "the image processor's patch size comes from the model's processor"),
    VerlKey("data.video_key", NOOP, "the column of a row's videos, which rft does not read (its multimodal rows are "
            "images: data.image_key)"),
    VerlKey("data.validation_shuffle", DEFAULT, "rft validates on its prompts in file order (data.val_max_samples "
            "draws a sample)", ok=(False,)),
    VerlKey("data.datagen.*", DEFAULT, "a dynamic data generator class is not in rft", ok=(None,)),
    # --- reward
    VerlKey("reward_model.reward_kwargs.overlong_buffer_cfg.*", ALIAS, "DAPO's overlong punishment is rft's "
            "reward_model.overlong_buffer", to="reward_model.overlong_buffer.{leaf}"),
    VerlKey("reward_model.reward_kwargs.max_resp_len", SAME, "rft's overlong buffer counts from "
            "data.max_response_length: set max_resp_len equal to it, or remove it", to="data.max_response_length"),
    VerlKey("reward_model.use_reward_loop", NOOP, REWARD_LOOP),
    VerlKey("reward_model.num_workers", NOOP, REWARD_LOOP),
    VerlKey("reward_model.rollout.*", NOOP, REWARD_LOOP),
    VerlKey("reward_model.reward_loop_*", DEFAULT, "a custom reward loop class is not in rft; a reward function is "
            "custom_reward_function", ok=(None, "register")),
    VerlKey("reward_model.launch_reward_fn_async", NOOP, REWARD_LOOP),
    VerlKey("reward_model.enable_resource_pool", DEFAULT, "a separate pool of devices for the reward model is not "
            "in rft (it runs beside the policy)", ok=(False,)),
    VerlKey("reward_model.n_gpus_per_node", NOOP, "the reward model's own device pool (enable_resource_pool)"),
    VerlKey("reward_model.nnodes", NOOP, "the reward model's own device pool (enable_resource_pool)"),
    VerlKey("reward_model.strategy", DEFAULT, "rft's reward model runs whole in each process", ok=("fsdp", "fsdp2")),
    VerlKey("reward_model.ulysses_sequence_parallel_size", DEFAULT, "sequence parallelism of the reward model is "
            "not in rft", ok=(1,)),
    VerlKey("reward_model.micro_batch_size", DEFAULT, "set reward_model.micro_batch_size_per_gpu", ok=(None,)),
    VerlKey("reward_model.use_dynamic_bsz", NOOP, "micro-batching of the reward model's pass (speed only)"),
    VerlKey("reward_model.forward_max_token_len_per_gpu", NOOP, "micro-batching of the reward model's pass "
            "(speed only)"),
    VerlKey("reward_model.model.fsdp_config.param_offload", NOOP, "the reward model's parameters kept in host memory "
            "between its passes (GPU memory, not the scores): rft keeps its reward model on the device"),
    *(VerlKey(p, NOOP, LIGER, schema=s) for p, s in (("actor_rollout_ref.model.use_liger", "rl"),
                                                     ("model.use_liger", "sft"))),
    VerlKey("reward_model.model.use_shm", DEFAULT, "shared-memory model loading is not in rft", ok=(False,)),
    VerlKey("reward_model.model.use_remove_padding", NOOP, "packing of the reward model's pass (the same scores)"),
    VerlKey("reward_model.model.use_fused_kernels", NOOP, "fused kernels of the reward model's pass (the same scores)"),
    VerlKey("reward_model.model.override_config", DEFAULT, "overriding the reward model's config is not in rft",
            ok=({}, None)),
    VerlKey("reward_manager.name", SAME, "verl copies reward_model.reward_manager here: set that",
            to="reward_model.reward_manager"),
    VerlKey("reward_manager.source", DEFAULT, "a reward manager from a module is not in rft; a reward function is "
            "custom_reward_function", ok=("register",)),
    VerlKey("reward_manager.module.*", DEFAULT, "a reward manager from a module is not in rft; a reward function is "
            "custom_reward_function", ok=(None, "custom_reward_manager")),
    # --- algorithm, trainer
    VerlKey("trainer.rollout_data_dir", DEFAULT, "rft's rollouts of each step are in its experience buffer and "
            "metrics (trainer.log_val_generations for samples); dumping them as JSONL is not in rft", ok=(None,)),
    VerlKey("trainer.validation_data_dir", DEFAULT, "dumping validation generations as JSONL is not in rft "
            "(trainer.log_val_generations logs samples)", ok=(None,)),
    # --- the SFT trainer (verl's fsdp_sft_trainer and the engine-based sft_trainer)
    VerlKey("data.micro_batch_size", ALIAS, "verl's deprecated global micro-batch, per process",
            to="data.micro_batch_size_per_gpu", schema="sft", fn=_sft_micro),
    VerlKey("model.path", ALIAS, "rft's key (verl's fsdp_sft_trainer name)", to="model.partial_pretrain",
            schema="sft"),
    VerlKey("model.use_remove_padding", ALIAS, "rft's key", to="use_remove_padding", schema="sft"),
    VerlKey("optim.lr_warmup_steps_ratio", ALIAS, "rft's key", to="optim.warmup_steps_ratio", schema="sft"),
    VerlKey("optim.warmup_style", ALIAS, "rft's key", to="optim.lr_scheduler", schema="sft"),
    VerlKey("engine", DEFAULT, MEGATRON, ok=("fsdp", "fsdp2"), schema="sft"),
    VerlKey("engine.strategy", ALIAS, "rft's key", to="model.strategy", schema="sft"),
    VerlKey("engine.ulysses_sequence_parallel_size", ALIAS, "rft's key", to="ulysses_sequence_parallel_size",
            schema="sft"),
    VerlKey("engine.fsdp_size", DEFAULT, "rft shards over every process (hybrid sharding groups are not in rft)",
            ok=(-1,), schema="sft"),
    VerlKey("engine.*", NOOP, FSDP_ENGINE, schema="sft"),
    VerlKey("data.use_dynamic_bsz", NOOP, "token-budget micro-batches (speed only: rft's SFT loss is normalised over "
            "the whole step, so micro-batches of data.micro_batch_size_per_gpu rows give the same gradient)",
            schema="sft"),
    VerlKey("data.max_token_len_per_gpu", NOOP, "token-budget micro-batches (speed only)", schema="sft"),
    VerlKey("data.pad_mode", NOOP, "padding or packing (the same loss: rft's use_remove_padding chooses)",
            schema="sft"),
    VerlKey("data.train_max_samples", DEFAULT, "capping the training rows is not in rft yet: cut the file instead",
            ok=(-1, None), schema="sft"),
    VerlKey("model.use_shm", DEFAULT, "shared-memory model loading is not in rft", ok=(False,), schema="sft"),
    VerlKey("*checkpoint.save_contents", DEFAULT, "the SFT trainer's checkpoints hold the model, the optimizer and the "
            "loop's state (extra); hf_model is written with the last", ok=(["model", "optimizer", "extra"],
                                                                          ["model", "optimizer", "extra", "hf_model"]),
            schema="sft"),
    VerlKey("*checkpoint.load_contents", DEFAULT, "the SFT trainer resumes the model, the optimizer and the loop's state",
            ok=(["model", "optimizer", "extra"],), schema="sft"),
    VerlKey("*.profiler.*", NOOP, PROFILER, schema="sft"),
    # verl's SFT configs composed with their defaults lists: optim/fsdp.yaml, model/hf_model.yaml, engine/fsdp.yaml,
    # profiler/profiler.yaml (sft_trainer.yaml, and the engine trainer's sft_trainer_engine.yaml)
    VerlKey("optim.optimizer", DEFAULT, "the SFT trainer's optimizer is AdamW (torch's)", ok=("AdamW", "adamw"), schema="sft"),
    VerlKey("optim.optimizer_impl", DEFAULT, "the SFT trainer's optimizer is AdamW (torch's)", ok=("torch.optim",),
            schema="sft"),
    VerlKey("optim.total_training_steps", DEFAULT, "the SFT trainer's schedule runs over the run's steps "
            "(trainer.total_training_steps)", ok=(-1, None), schema="sft"),
    VerlKey("optim.lr_warmup_steps", DEFAULT, "the SFT trainer's warmup is optim.warmup_steps_ratio: set that",
            ok=(-1, None), schema="sft"),
    VerlKey("optim.num_cycles", DEFAULT, "the SFT trainer's cosine decays once, to min_lr_ratio", ok=(0.5,), schema="sft"),
    VerlKey("optim.lr_scheduler_type", ALIAS, "rft's key", to="optim.lr_scheduler", schema="sft"),
    VerlKey("optim.override_optimizer_config", DEFAULT, MEGATRON, ok=(None, {}), schema="sft"),
    VerlKey("model.hf_config_path", DEFAULT, "rft reads the model's config from its folder (model.partial_pretrain)",
            ok=(None,), schema="sft"),
    VerlKey("model.tokenizer_path", DEFAULT, "the SFT trainer reads the tokenizer from the model's folder", ok=(None,),
            schema="sft"),
    VerlKey("model.custom_chat_template", ALIAS, "rft's key", to="data.chat_template", schema="sft"),
    VerlKey("model.enable_activation_offload", DEFAULT, "activation offload is not in the SFT trainer", ok=(False,),
            schema="sft"),
    VerlKey("model.lora_adapter_path", DEFAULT, "starting from a saved LoRA adapter is not in rft yet; merge it into "
            "the model folder first", ok=(None,), schema="sft"),
    VerlKey("model.use_fused_kernels", NOOP, "fused log-prob kernels (the same loss)", schema="sft"),
    VerlKey("model.fused_kernel_options.impl_backend", NOOP, TRITON, schema="sft"),
    VerlKey("model.tiled_mlp.enabled", DEFAULT, "tiled MLP computation is not in rft", ok=(False,), schema="sft"),
    VerlKey("model.tiled_mlp.*", NOOP, "tiled MLP settings, without tiled_mlp.enabled", schema="sft"),
    VerlKey("model.mtp.enable*", DEFAULT, "multi-token prediction (MTP) training is not in rft", ok=(False,),
            schema="sft"),
    VerlKey("model.mtp.*", NOOP, "MTP settings, without model.mtp.enable", schema="sft"),
    VerlKey("profiler.*", NOOP, PROFILER, schema="sft"),
    VerlKey("trainer.profile_interval", NOOP, PROFILER, schema="sft"),
    VerlKey("data.messages_key", ALIAS, "rft's key", to="data.multiturn.messages_key", schema="sft"),
    VerlKey("data.tools_key", ALIAS, "rft's key", to="data.multiturn.tools_key", schema="sft"),
    VerlKey("data.enable_thinking_key", ALIAS, "rft's key", to="data.multiturn.enable_thinking_key", schema="sft"),
    VerlKey("data.ignore_input_ids_mismatch", DEFAULT, "the SFT trainer tokenizes each conversation once, so there is no "
            "mismatch to ignore", ok=(False,), schema="sft"),
    VerlKey("global_profiler.*", NOOP, PROFILER, schema="sft"),
)
"""Every key of verl's own trainer configs (ppo_trainer.yaml, _generated_ppo_trainer.yaml, sft_trainer.yaml) that no
rft field holds, and the keys verl's example launches add. docs/config.md lists them (`rft config reference`)."""

SCHEMAS = {"RFTConfig": "rl", "SFTConfig": "sft"}
VALUE_ALIASES = {("*.optim.optimizer", "AdamW"): "adamw_torch_fused"}
"""verl's values of rft fields that rft spells otherwise (verl: a torch.optim class name; rft: transformers' name of
the same optimizer), read as rft's, said in the notes."""
UNSET_BY_NULL = ("*.optim.warmup_style", "data.seed")
"""rft fields whose verl counterpart is deprecated and null in verl's own configs (its replacement decides:
optim.lr_scheduler_type; data.seed: the sampler seed, 1 when unset): a null there is rft's default, said in the notes."""


def row_of(schema: str, key: str) -> VerlKey | None:
    return next((r for r in VERL_KEYS if r.schema == schema and fnmatch.fnmatchcase(key, r.pattern)), None)


def _is_field(field_type: Callable[[str], Any], key: str) -> bool:
    """Whether `key` is a schema field, or inside a free-form one (a mapping, Any)."""
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        hint = field_type(".".join(parts[:i]))
        if hint is not None:
            return i == len(parts) or not (isinstance(hint, type) and dataclasses.is_dataclass(hint))
    return False


def _leaves(tree: Mapping, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out += _leaves(v, key + ".")
        else:
            out.append((key, v))
    return out


def _pop(tree: dict, key: str, field_type: Callable[[str], Any]) -> None:
    """Delete `key`, then each parent left empty that is no schema field."""
    parts = key.split(".")
    chain = [tree]
    for p in parts[:-1]:
        chain.append(chain[-1][p])
    del chain[-1][parts[-1]]
    for i in range(len(parts) - 1, 0, -1):
        if chain[i] or field_type(".".join(parts[:i])) is not None:
            break
        del chain[i - 1][parts[i - 1]]


def _put(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        tree = tree.setdefault(p, {})
    tree[parts[-1]] = value


def _get(tree: Any, key: str, missing: Any = None) -> Any:
    for p in key.split("."):
        if not isinstance(tree, Mapping) or p not in tree:
            return missing
        tree = tree[p]
    return tree


def _wired(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


class Sorted:
    """What the table made of a config's layers: the notes to say, and the SAME keys to check once it is merged."""

    def __init__(self) -> None:
        self.notes: dict[str, list[str]] = {}
        self.same: list[tuple[str, Any, VerlKey, str]] = []

    def note(self, why: str, key: str) -> None:
        keys = self.notes.setdefault(why, [])
        if key not in keys:
            keys.append(key)

    def say(self) -> None:
        """One note line per reason, naming every key (once in the log, before the run starts)."""
        for why, keys in self.notes.items():
            log.warning("rft: note: verl keys with no rft field of their name (%s): %s", why, ", ".join(keys))

    def check(self, cfg: Any) -> None:
        """The SAME keys against the merged config `cfg`."""
        for key, value, row, where in self.same:
            node = cfg
            for part in row.to.split("."):
                node = getattr(node, part)
            if value != node and str(value) != str(node):
                raise ConfigError(f"{where + ': ' if where else ''}{key}={value!r} differs from {row.to}={node!r}; "
                                  f"{row.why}")
            self.note(f"the same as {row.to}", key)


MT = f"{RO}.multi_turn"
TOOL_WORKFLOW = "tool_call_workflow"
WHOLE_RESPONSES = ("rft's tool_call_workflow runs every tool call of a reply and passes each tool's whole response "
                   "back (verl runs the first max_parallel_calls and cuts a response past max_tool_response_length "
                   "characters); remove it")


MULTI_TURN_KEYS = {
    "enable": "read as `workflow.type=tool_call_workflow` (without max_assistant_turns, `workflow.args.max_turns` "
              "at its verl default, null)",
    "max_assistant_turns": "read as `workflow.args.max_turns` (the model's turns; null: verl's max_model_len // 3, "
                           "rollout.max_model_len or data.max_prompt_length + data.max_response_length)",
    "format": "read as `workflow.tool_call_parser` (qwen, qwen25: hermes; llama3: llama3_json; deepseekv3: "
              "deepseek_v3; rft's own parser names as they are); other formats refused",
    "tool_config_path": "read as `workflow.tool_config_path` (verl's tool-config YAML)",
    "max_user_turns": "read as `workflow.args.max_user_turns` (the turns between the model's: tool results and "
                      "interaction answers; null: none)",
    "interaction_config_path": "read as `workflow.interaction_config_path` (verl's interaction-config YAML)",
    "use_inference_chat_template": "accepted at `False` (rft keeps the sampled tokens), else refused",
    "tokenization_sanity_check_mode": "accepted, no effect here (rft keeps the sampled tokens: nothing to compare)",
    "max_parallel_calls": "refused: " + WHOLE_RESPONSES,
    "max_tool_response_length": "refused: " + WHOLE_RESPONSES,
    "tool_response_truncate_side": "refused: " + WHOLE_RESPONSES,
    "num_repeat_rollouts": "accepted at `None`, else refused",
}
"""What rft does with each key of verl's multi_turn section while multi_turn.enable is true (`_multi_turn`); without
it every key is accepted with no effect (named in a note). docs/config.md lists them."""
TOOL_CALL_FORMATS = {"qwen": "hermes", "qwen25": "hermes", "llama3": "llama3_json", "deepseekv3": "deepseek_v3"}
"""verl's multi_turn.format values (SGLang's tool-call parser names) that are rft parsers by another name: SGLang's
qwen / qwen25 parser reads `<tool_call>{json}</tool_call>` (hermes), its llama3 the JSON object of Llama 3.1-3.3
(llama3_json), its deepseekv3 DeepSeek-V3's call tokens (deepseek_v3); its mistral and pythonic are rft's by the
same name. Its others (llama4, deepseekv31, kimi_k2, glm, gpt-oss, ...) write formats rft does not parse."""


def _max_turns(value: Any, flat: Mapping[str, Any]) -> int:
    """verl's max_assistant_turns as the tool workflow's max_turns: null is verl's max_model_len // 3
    (rollout.max_model_len, else the prompt's and the response's lengths, verl's defaults 512 each)."""
    if value is None:
        length = flat.get(f"{RO}.max_model_len") or (int(flat.get("data.max_prompt_length") or 512)
                                                      + int(flat.get("data.max_response_length") or 512))
        return int(length) // 3
    return value


def _move(layer: dict, flat: Mapping[str, Any], done: Sorted, key: str, said: str, to: str, value: Any) -> None:
    """verl's `key` (as `said`) put in `layer` as rft's `to`=`value`, unless the config sets `to` otherwise."""
    given = flat.get(to, _put)
    if given is not _put and given != value:
        raise ConfigError(f"{said} is verl's {to}={value!r} here, and {to}={given!r} is set too: set one")
    _put(layer, to, value)
    done.note("verl's multi-turn rollout, read as rft's tool workflow", f"{key} -> {to}={value!r}")


def _multi_turn(layers: list[dict], flat: Mapping[str, Any], done: Sorted, field_type: Callable[[str], Any],
                where: Callable[[str, int], str]) -> None:
    """verl's multi-turn rollout (`actor_rollout_ref.rollout.multi_turn`) onto rft's tool workflow, in place, with
    verl's meaning: enable -> workflow.type=tool_call_workflow (the model's tool calls run, their results go back
    as tool messages, the loss on the model's tokens only); max_assistant_turns -> workflow.args.max_turns (the
    model's turns; null: max_model_len // 3, as verl); format -> workflow.tool_call_parser; tool_config_path ->
    workflow.tool_config_path (verl's tool-config YAML: its schemas declared to the model, each run by rft's tool of
    that name); interaction_config_path -> workflow.interaction_config_path (verl's interactions answer as the
    user); max_user_turns -> workflow.args.max_user_turns (tool results and interaction answers, as verl's tool
    agent loop counts them); use_inference_chat_template false and tokenization_sanity_check_mode are what rft does
    (it keeps the sampled tokens: there is no re-tokenization to check); the cuts rft's workflow does not make
    (max_parallel_calls, max_tool_response_length, tool_response_truncate_side) are refused by name. Without enable the section is
    verl's defaults of an unused feature: noted."""
    from rft.config.schema import WorkflowConfig

    enabled = flat.get(f"{MT}.enable", False) is True
    parsers = [p for p in next(f for f in dataclasses.fields(WorkflowConfig)
                               if f.name == "tool_call_parser").metadata["choices"] if p]
    for i, layer in enumerate(layers):
        section = _get(layer, MT)
        if section is None:
            continue
        for key, value in _leaves(section, MT + ".") if isinstance(section, Mapping) else [(MT, section)]:
            leaf, source = key[len(MT) + 1:], where(key, i)
            said = f"{source + ': ' if source else ''}{key}={value!r}"
            move = functools.partial(_move, layer, flat, done, key, said)

            if leaf == "_target_":
                done.note(MARKER, key)
            elif leaf == "enable":
                if not isinstance(value, bool):
                    raise ConfigError(f"{said} must be true or false")
                if value and enabled:
                    move("workflow.type", TOOL_WORKFLOW)
                    if f"{MT}.max_assistant_turns" not in flat and "workflow.args.max_turns" not in flat:
                        move("workflow.args.max_turns", _max_turns(None, flat))  # verl's default, null
                else:
                    done.note("verl's default, which leaves off a feature rft does not have", key)
            elif not enabled:
                done.note("verl's multi-turn settings, without rollout.multi_turn.enable", key)
            elif leaf == "max_assistant_turns":
                turns = _max_turns(value, flat)
                if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
                    raise ConfigError(f"{said} must be an integer >= 1 (the model's turns), or null")
                move("workflow.args.max_turns", turns)
            elif leaf == "format":
                parser = TOOL_CALL_FORMATS.get(value, value)
                if parser not in parsers:
                    raise ConfigError(f"{said}: rft's tool workflow parses tool calls as {list(parsers)} "
                                      f"(workflow.tool_call_parser; SGLang's names read as them: "
                                      f"{', '.join(f'{k} -> {v}' for k, v in TOOL_CALL_FORMATS.items())}); "
                                      "set one of them")
                move("workflow.tool_call_parser", parser)
            elif leaf == "tool_config_path":
                if value is not None:
                    move("workflow.tool_config_path", value)
            elif leaf == "interaction_config_path":
                if value is not None:
                    move("workflow.interaction_config_path", value)
            elif leaf == "max_user_turns":
                if value is not None:
                    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                        raise ConfigError(f"{said} must be an integer >= 1 (the turns between the model's), or null")
                    move("workflow.args.max_user_turns", value)
            elif leaf in ("max_parallel_calls", "max_tool_response_length", "tool_response_truncate_side"):
                raise ConfigError(f"{said} is a verl setting rft does not have: {WHOLE_RESPONSES}")
            elif leaf == "use_inference_chat_template":
                if value is not False:
                    raise ConfigError(f"{said}: rft's tool workflow keeps the tokens the model sampled and renders "
                                      "only the turns it did not write (verl's false); re-rendering earlier turns "
                                      "with the template is not in rft; remove it")
                done.note("verl's multi-turn settings that are what rft does (the sampled tokens kept)", key)
            elif leaf == "tokenization_sanity_check_mode":
                if value not in ("strict", "disable", "ignore_strippable"):
                    raise ConfigError(f"{said} must be strict, disable or ignore_strippable (verl's values)")
                done.note("verl's check of its turn-by-turn tokenization against a whole rendering: rft keeps the "
                          "tokens the model saw, so there is nothing to compare", key)
            elif leaf == "num_repeat_rollouts" and value is None:
                done.note("verl's default, which leaves off a feature rft does not have", key)
            else:
                raise ConfigError(f"{said} is not a key of verl's multi_turn section, which has "
                                  f"{', '.join(MULTI_TURN_KEYS)}; remove it")
        _pop(layer, MT, field_type)


ADAPTER = "actor_rollout_ref.model"
ADAPTER_KEYS = {"lora_rank": "r", "lora_alpha": "lora_alpha", "target_modules": "target_modules"}
"""rft's LoRA keys and the adapter_config.json entries verl reads them from when it starts from a saved adapter."""


def _lora_adapter(layers: list[dict], flat: Mapping[str, Any], done: Sorted) -> None:
    """verl's `model.lora_adapter_path`: the adapter's own r, lora_alpha and target_modules (adapter_config.json,
    which peft's PeftModel.from_pretrained in verl's worker reads) become rft's LoRA keys, in the last layer (over any
    other); verl ignores its lora_rank / lora_alpha / target_modules then, so a value the config gives
    them is replaced, said in the note. A folder without adapter_config.json is left to the models.lora check."""
    path = flat.get(f"{ADAPTER}.lora_adapter_path")
    if not isinstance(path, str) or _wired(path):
        return
    config = Path(path).expanduser() / "adapter_config.json"
    if not config.is_file():
        return
    adapter = json.loads(config.read_text())
    for key, entry in ADAPTER_KEYS.items():
        value, given = adapter.get(entry), flat.get(f"{ADAPTER}.{key}", _put)
        value = sorted(value) if isinstance(value, (set, tuple, list)) else value
        _put(layers[-1], f"{ADAPTER}.{key}", value)
        done.note("verl's LoRA settings, the adapter's own (adapter_config.json of lora_adapter_path)",
                  f"{ADAPTER}.{key}={value!r}" + (f" (not {given!r})" if given is not _put and given != value else ""))


def sort_out(schema: str, layers: list[dict], field_type: Callable[[str], Any],
             where: Callable[[str, int], str]) -> Sorted:
    """Each layer's keys that the table knows, in place: removed (NOOP, DEFAULT at its default, SAME: checked later),
    moved (ALIAS), or refused (ConfigError naming the key, where it came from and why). `where(key, layer index)`
    says where a key came from."""
    done = Sorted()
    flat: dict[str, Any] = {}
    for layer in layers:
        flat.update(dict(_leaves(layer)))
    for i, layer in enumerate(layers):  # a Megatron config is refused for Megatron, before any of its keys
        for key in (f"{A}.strategy", f"{R}.strategy", "critic.strategy"):
            if _get(layer, key) == "megatron":
                source = where(key, i)
                raise ConfigError(f"{source + ': ' if source else ''}{key}='megatron': {MEGATRON}")
    if schema == "rl":
        _multi_turn(layers, flat, done, field_type, where)
        _lora_adapter(layers, flat, done)
    for i, layer in enumerate(layers):
        for key, value in _leaves(layer):
            if _is_field(field_type, key):
                alias = next((v for (p, given), v in VALUE_ALIASES.items()
                              if value == given and fnmatch.fnmatchcase(key, p)), None)
                if alias is not None:
                    _put(layer, key, alias)
                    done.note("verl's values read as rft's", f"{key}={value} -> {alias}")
                if value == "" and field_type(key) is bool:  # hydra's empty value (key=): the empty string
                    _put(layer, key, False)
                    done.note("hydra's empty values (key=, the empty string), false in verl's code (its config "
                              "classes are built without type checks, and '' is false where read)", key)
                if value == "???":  # hydra's "required" marker: verl asks for a value, rft has a default
                    _pop(layer, key, field_type)
                    done.note("verl's required-value markers (???), rft's default", key)
                row = row_of(schema, key)
                if row is not None and row.kind == NOOP and value is not None:
                    done.note(row.why, key)
                if value is None and any(fnmatch.fnmatchcase(key, p) for p in UNSET_BY_NULL):
                    _pop(layer, key, field_type)
                    done.note("verl's deprecated keys left null, rft's default", key)
                continue
            row = row_of(schema, key)
            if row is None:
                continue
            source = where(key, i)
            prefix = f"{source}: " if source else ""
            if value == "???":  # hydra's "required" marker (reward_model.strategy in verl's ppo_trainer.yaml)
                _pop(layer, key, field_type)
                done.note("verl's required-value markers (???), unset here", key)
                continue
            if row.kind == REFUSE or (row.kind == DEFAULT and not _wired(value) and value not in row.ok):
                raise ConfigError(f"{prefix}{key}={value!r} is a verl setting rft does not have: {row.why}"
                                  + ("" if row.kind == REFUSE else f"; remove it or set it to {row.ok[0]!r}"))
            _pop(layer, key, field_type)
            if row.kind == ALIAS and value is None:  # verl's "unset" (data.micro_batch_size: null)
                done.note("verl's names of rft keys, left null", key)
            elif row.kind == ALIAS:
                to = row.to.replace("{leaf}", key.rsplit(".", 1)[-1])
                if _get(layer, to, _pop) is not _pop and _get(layer, to) != value:
                    raise ConfigError(f"{prefix}{key}={value!r} and {to}={_get(layer, to)!r} set the same thing "
                                      f"({key} is verl's name of {to}): set only {to}")
                _put(layer, to, row.fn(value, flat) if row.fn else value)
                done.note("verl's names of rft keys, read as those", f"{key} -> {to}")
            elif row.kind == SAME:
                if not _wired(value):
                    done.same.append((key, value, row, source))
                else:
                    done.note(f"verl's copies of rft keys ({row.why})", key)
            elif row.kind == DEFAULT:
                done.note("verl's default, which leaves off a feature rft does not have", key)
            else:
                done.note(row.why, key)
    return done
