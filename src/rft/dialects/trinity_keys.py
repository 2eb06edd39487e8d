"""Trinity-RFT's own config keys at each place of its YAML: the fields of its config dataclasses
(trinity/common/config.py, the versions its configuration guide documents and the later ones; the fields marked
"DO NOT SET" too, since a copied config may hold them) and of the guide
(../shared/spec/trinity_config_reference.md).

The dialect (`rft.dialects.trinity`) reads them to tell a key that is not Trinity-RFT's at all (a misspelling:
`buffer.total_step`, `model.model_pth`), which it calls unknown and answers with the nearest key ("did you mean"),
from a Trinity-RFT key that rft cannot honour, which it refuses with the reason. Places hold no values: a
taskset's keys are the same under `taskset`, `tasksets[i]` and `eval_tasksets[i]`.
"""

from __future__ import annotations

import re


def _fields(spec: str) -> dict[str, str | None]:
    """{field: its type} of a config class written "name:type ...": int, float, bool or str, "?" after the type
    for an Optional one; a bare name is a section, a list or a mapping (not a scalar to type)."""
    return {name: kind or None for name, kind in re.findall(r"(\w+)(?::(\w+\??))?", spec)}


_STORAGE = _fields(  # TasksetConfig, ExperienceBufferConfig and their common StorageConfig
    "name:str storage_type:str path:str? repeat_times:int? mm_data_kwargs index:int split:str subset_name:str? "
    "format capacity:int max_read_timeout:float use_priority_queue:bool reuse_cooldown_time:float? replay_buffer "
    "replay_buffer_kwargs max_retry_times:int max_retry_interval:int default_workflow_type:str? "
    "default_eval_workflow_type:str? default_reward_fn_type:str? rollout_args workflow_args reward_fn_args "
    "data_selector task_selector enable_progress_bar:bool? ray_namespace:str? wrap_in_ray:bool schema_type:str? "
    "total_epochs:int total_steps:int? batch_size:int tokenizer_path:str? is_eval:bool")
_FORMAT = _fields(
    "prompt_type:str prompt_key:str response_key:str system_prompt_key:str? system_prompt:str? messages_key:str "
    "tools_key:str image_key:str? video_key:str? reply_prefix:str? workflow_key:str reward_fn_key:str chosen_key:str "
    "rejected_key:str enable_concatenated_multi_turn:bool chat_template:str? enable_thinking:bool?")
_GENERATION = _fields("temperature:float? top_p:float? top_k:int logprobs:int? max_tokens:int? n:int")
_INFERENCE_MODEL = _fields(  # InferenceModelConfig: the rollout model and each auxiliary model
    "model_path:str? name:str? trust_remote_code:bool engine_type:str engine_num:int tensor_parallel_size:int "
    "data_parallel_size:int pipeline_parallel_size:int enable_expert_parallel:bool gpu_per_engine:int "
    "extra_engine_args use_v1:bool enforce_eager:bool enable_prefix_caching:bool enable_chunked_prefill:bool "
    "gpu_memory_utilization:float dtype:str seed:int temperature:float? top_p:float? top_k:int? logprobs:int? "
    "max_model_len:int? max_prompt_tokens:int? max_response_tokens:int? min_response_tokens:int? "
    "enable_prompt_truncation:bool? repetition_penalty:float? ignore_eos:bool enable_multimodal:bool "
    "chat_template:str? enable_thinking:bool? enable_history:bool enable_openai_api:bool enable_log_requests:bool "
    "base_port:int? api_key:str enable_auto_tool_choice:bool tool_call_parser:str? reasoning_parser:str? "
    "external_model_config nnodes:int node_rank:int enable_return_routed_experts:bool weight_sync_buffer_size:int "
    "bundle_indices:str engine_id:int ray_namespace:str? ray_actor_name:str? sync_method:str? "
    "checkpoint_job_dir:str? cuda_visible_devices:str? enable_lora:bool enable_runtime_lora_updating:bool "
    "lora_modules lora_kwargs rope_scaling rope_theta:float?")

TYPES: dict[str, dict[str, str | None]] = {
    "": _fields("project:str group:str name:str mode:str checkpoint_root_dir:str checkpoint_job_dir:str "
                "ray_namespace:str continue_from_checkpoint:bool ignore_validator_suggestions:bool algorithm "
                "data_processor model cluster buffer explorer trainer monitor synchronizer service log stages"),
    "stages[]": _fields("stage_name:str mode:str algorithm buffer data_processor explorer trainer"),
    "algorithm": _fields(
        "algorithm_type:str repeat_times:int optimizer sample_strategy:str? sample_strategy_args advantage_fn:str? "
        "advantage_fn_args kl_penalty_fn:str? kl_penalty_fn_args policy_loss_fn:str? policy_loss_fn_args "
        "kl_loss_fn:str? kl_loss_fn_args entropy_loss_fn:str? entropy_loss_fn_args loss_agg_mode:str? "
        "enable_router_replay:bool bypass_old_logprobs:bool rollout_correction use_token_level_loss:bool"),
    "algorithm.optimizer": _fields(
        "lr:float lr_warmup_steps:int lr_warmup_steps_ratio:float min_lr_ratio:float warmup_style:str? "
        "lr_scheduler_type:str optimizer_type:str betas weight_decay:float clip_grad:float"),
    "model": _fields(
        "model_path:str trust_remote_code:bool critic_model_path:str custom_chat_template:str? "
        "chat_template_path:str? temperature:float top_p:float top_k:int logprobs:int max_model_len:int? "
        "max_prompt_tokens:int? max_response_tokens:int? min_response_tokens:int enable_prompt_truncation:bool "
        "repetition_penalty:float enable_thinking:bool? lora_configs fully_sharded_loras:bool max_cpu_loras:int? "
        "rope_scaling rope_theta:float? tinker external_model"),
    "model.lora_configs[]": _fields(
        "name:str? path:str? base_model_name:str? lora_rank:int lora_alpha:int lora_dtype:str target_modules "
        "exclude_modules is_dummy:bool"),
    "model.tinker": _fields("enable:bool rank:int seed:int? train_mlp:bool train_attn:bool train_unembed:bool "
                            "base_url:str?"),
    "model.external_model": _fields("enable:bool base_url_env:str api_key_env:str model_name:str?"),
    "cluster": _fields(
        "ray_address:str node_num:int gpu_per_node:int total_gpu_num:int rollout_gpu_num:int "
        "auxiliary_model_gpu_num:int explorer_gpu_num:int trainer_gpu_num:int trainer_node_num:int "
        "trainer_gpu_num_per_node:int"),
    "buffer": _fields(
        "batch_size:int train_batch_size:int total_epochs:int total_steps:int? explorer_input trainer_input "
        "default_workflow_type:str? default_reward_fn_type:str? system_prompt:str? max_retry_times:int "
        "max_retry_interval:int explorer_output tokenizer_path:str? pad_token_id:int? cache_dir:str?"),
    "buffer.explorer_input": _fields(
        "taskset tasksets eval_tasksets default_workflow_type:str? default_eval_workflow_type:str? "
        "default_reward_fn_type:str? system_prompt:str? reply_prefix:str?"),
    "buffer.explorer_input.taskset": _STORAGE,
    "buffer.explorer_input.taskset.format": _FORMAT,
    "buffer.explorer_input.taskset.rollout_args": _GENERATION,
    "buffer.explorer_input.taskset.data_selector": _fields("selector_type:str? seed:int feature_keys kwargs"),
    "buffer.trainer_input": _fields("experience_buffer auxiliary_buffers sft_warmup_dataset sft_warmup_steps:int"),
    "buffer.trainer_input.experience_buffer": _STORAGE,
    "buffer.trainer_input.experience_buffer.format": _FORMAT,
    "buffer.trainer_input.experience_buffer.replay_buffer": _fields(
        "enable:bool priority_fn:str reuse_cooldown_time:float? priority_fn_args"),
    "buffer.trainer_input.auxiliary_buffers.*": _STORAGE,
    "buffer.trainer_input.auxiliary_buffers.*.format": _FORMAT,
    "explorer": _fields(
        "name:str mode:str runner_per_model:int runner_prepare_concurrency:int runner_prepare_max_retries:int "
        "max_timeout:int max_retry_times:int env_vars concurrent_mode:str max_repeat_times_per_runner:int? "
        "runner_num:int? rollout_model auxiliary_models eval_interval:int eval_on_startup:bool "
        "bench_on_latest_checkpoint:bool proxy_port:int listen_address:str service_status_check_interval:int "
        "min_running_model_num:int db_url:str? over_rollout dynamic_timeout runner_state_report_interval:int "
        "max_inflight_batches:int"),
    "explorer.rollout_model": _INFERENCE_MODEL,
    "explorer.auxiliary_models[]": _INFERENCE_MODEL,
    "explorer.over_rollout": _fields("ratio:float wait_after_min:float return_partial_tasks:bool"),
    "explorer.dynamic_timeout": _fields("enable:bool warmup_min_steps:int ratio:float"),
    "trainer": _fields(
        "name:str trainer_type:str trainer_strategy:str save_interval:int enable_preview:bool total_steps:int? "
        "save_hf_checkpoint:str grad_clip:float actor_grad_clip:float? use_dynamic_bsz:bool use_remove_padding:bool "
        "balance_batch:bool critic_warmup:int max_token_len_per_gpu:int? ulysses_sequence_parallel_size:int "
        "fix_actor_microbatch_loss_scale:bool param_offload:bool optimizer_offload:bool grad_offload:bool "
        "offload_policy:bool save_strategy:str max_checkpoints_to_keep:int megatron trust_remote_code:bool "
        "trainer_config trainer_config_path:str"),
    "monitor": _fields("monitor_type monitor_args detailed_stats:bool enable_ray_timeline:bool cache_dir:str"),
    "log": _fields("level:str group_by_node:bool save_dir:str"),
    "synchronizer": _fields(
        "sync_method:str sync_style:str sync_interval:int explorer_sync_interval:int? trainer_sync_interval:int? "
        "sync_offset:int sync_timeout:int group_name:str wait_for_checkpoint:bool explorer_world_size:int? "
        "ray_namespace:str"),
    "service": _fields("data_juicer"),
    "service.data_juicer": _fields("server_url:str? auto_start:bool port:int?"),
    "data_processor": _fields("task_pipeline experience_pipeline"),
    "data_processor.task_pipeline": _fields(
        "operators num_process:int config_path:str? inputs output target_fields priority_weights top_k:int"),
    "data_processor.experience_pipeline": _fields("operators save_input:bool input_save_path:str? inputs output"),
}
"""Trinity-RFT's fields at each place of its YAML with their types (what OmegaConf's merge onto its config classes
makes of a value: "96" from an ${oc.env:...} interpolation is the integer 96 in an int field)."""
for _place in ("tasksets[]", "eval_tasksets[]"):  # every taskset has a training taskset's keys
    for _tail in ("", ".format", ".rollout_args", ".data_selector"):
        TYPES[f"buffer.explorer_input.{_place}{_tail}"] = TYPES[f"buffer.explorer_input.taskset{_tail}"]
for _place in ("taskset", "tasksets[]", "eval_tasksets[]"):  # data_selector's deprecated name
    TYPES[f"buffer.explorer_input.{_place}.task_selector"] = TYPES["buffer.explorer_input.taskset.data_selector"]
KEYS: dict[str, tuple[str, ...]] = {place: tuple(fields) for place, fields in TYPES.items()}
"""Trinity-RFT's keys at each place."""


def place(where: str) -> str:
    """The place of the dotted `where` in `KEYS`: without a leading `stages[i].`, list indices as `[]`, an
    auxiliary buffer's own name as `*`."""
    where = re.sub(r"^stages\[\d+\]\.?", "", where)
    where = re.sub(r"\[\d+\]", "[]", where)
    return re.sub(r"^(buffer\.trainer_input\.auxiliary_buffers)\.[^.]+", r"\1.*", where)


def trinity_type(where: str, key: str) -> str | None:
    """The type of Trinity-RFT's field `key` at the dotted `where` (`_fields`' names), None for a section, a list,
    a mapping or a place this table does not know."""
    return TYPES.get("stages[]" if re.fullmatch(r"stages\[\d+\]", where) else place(where), {}).get(key)


def trinity_keys(where: str) -> tuple[str, ...] | None:
    """Trinity-RFT's keys under the dotted `where` ("" the top level, "stages[0]" a stage), or None where this
    table does not know the place (a function's arguments, a mapping of any keys)."""
    if re.fullmatch(r"stages\[\d+\]", where):
        return KEYS["stages[]"]
    return KEYS.get(place(where))
