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

_STORAGE = (  # TasksetConfig, ExperienceBufferConfig and their common StorageConfig
    "name", "storage_type", "path", "repeat_times", "mm_data_kwargs", "index", "split", "subset_name", "format",
    "capacity", "max_read_timeout", "use_priority_queue", "reuse_cooldown_time", "replay_buffer",
    "replay_buffer_kwargs", "max_retry_times", "max_retry_interval", "default_workflow_type",
    "default_eval_workflow_type", "default_reward_fn_type", "rollout_args", "workflow_args", "reward_fn_args",
    "data_selector", "task_selector", "enable_progress_bar", "ray_namespace", "wrap_in_ray", "schema_type",
    "total_epochs", "total_steps", "batch_size", "tokenizer_path", "is_eval")
_FORMAT = (
    "prompt_type", "prompt_key", "response_key", "system_prompt_key", "system_prompt", "messages_key", "tools_key",
    "image_key", "video_key", "reply_prefix", "workflow_key", "reward_fn_key", "chosen_key", "rejected_key",
    "enable_concatenated_multi_turn", "chat_template", "enable_thinking")
_GENERATION = ("temperature", "top_p", "top_k", "logprobs", "max_tokens", "n")

KEYS: dict[str, tuple[str, ...]] = {
    "": ("project", "group", "name", "mode", "checkpoint_root_dir", "checkpoint_job_dir", "ray_namespace",
         "continue_from_checkpoint", "ignore_validator_suggestions", "algorithm", "data_processor", "model",
         "cluster", "buffer", "explorer", "trainer", "monitor", "synchronizer", "service", "log", "stages"),
    "stages[]": ("stage_name", "mode", "algorithm", "buffer", "data_processor", "explorer", "trainer"),
    "algorithm": ("algorithm_type", "repeat_times", "optimizer", "sample_strategy", "sample_strategy_args",
                  "advantage_fn", "advantage_fn_args", "kl_penalty_fn", "kl_penalty_fn_args", "policy_loss_fn",
                  "policy_loss_fn_args", "kl_loss_fn", "kl_loss_fn_args", "entropy_loss_fn", "entropy_loss_fn_args",
                  "loss_agg_mode", "enable_router_replay", "bypass_old_logprobs", "rollout_correction",
                  "use_token_level_loss"),
    "algorithm.optimizer": ("lr", "lr_warmup_steps", "lr_warmup_steps_ratio", "min_lr_ratio", "warmup_style",
                            "lr_scheduler_type", "optimizer_type", "betas", "weight_decay", "clip_grad"),
    "model": ("model_path", "trust_remote_code", "critic_model_path", "custom_chat_template", "chat_template_path",
              "temperature", "top_p", "top_k", "logprobs", "max_model_len", "max_prompt_tokens",
              "max_response_tokens", "min_response_tokens", "enable_prompt_truncation", "repetition_penalty",
              "enable_thinking", "lora_configs", "fully_sharded_loras", "max_cpu_loras", "rope_scaling",
              "rope_theta", "tinker", "external_model"),
    "cluster": ("ray_address", "node_num", "gpu_per_node", "total_gpu_num", "rollout_gpu_num",
                "auxiliary_model_gpu_num", "explorer_gpu_num", "trainer_gpu_num", "trainer_node_num",
                "trainer_gpu_num_per_node"),
    "buffer": ("batch_size", "train_batch_size", "total_epochs", "total_steps", "explorer_input", "trainer_input",
               "default_workflow_type", "default_reward_fn_type", "system_prompt", "max_retry_times",
               "max_retry_interval", "explorer_output", "tokenizer_path", "pad_token_id", "cache_dir"),
    "buffer.explorer_input": ("taskset", "tasksets", "eval_tasksets", "default_workflow_type",
                              "default_eval_workflow_type", "default_reward_fn_type", "system_prompt",
                              "reply_prefix"),
    "buffer.explorer_input.taskset": _STORAGE,
    "buffer.explorer_input.taskset.format": _FORMAT,
    "buffer.explorer_input.taskset.rollout_args": _GENERATION,
    "buffer.trainer_input": ("experience_buffer", "auxiliary_buffers", "sft_warmup_dataset", "sft_warmup_steps"),
    "buffer.trainer_input.experience_buffer": _STORAGE,
    "buffer.trainer_input.experience_buffer.format": _FORMAT,
    "buffer.trainer_input.auxiliary_buffers.*": _STORAGE,
    "buffer.trainer_input.auxiliary_buffers.*.format": _FORMAT,
    "explorer": ("name", "mode", "runner_per_model", "runner_prepare_concurrency", "runner_prepare_max_retries",
                 "max_timeout", "max_retry_times", "env_vars", "concurrent_mode", "max_repeat_times_per_runner",
                 "runner_num", "rollout_model", "auxiliary_models", "eval_interval", "eval_on_startup",
                 "bench_on_latest_checkpoint", "proxy_port", "listen_address", "service_status_check_interval",
                 "min_running_model_num", "db_url", "over_rollout", "dynamic_timeout",
                 "runner_state_report_interval", "max_inflight_batches"),
    "explorer.rollout_model": (
        "model_path", "name", "trust_remote_code", "engine_type", "engine_num", "tensor_parallel_size",
        "data_parallel_size", "pipeline_parallel_size", "enable_expert_parallel", "gpu_per_engine",
        "extra_engine_args", "use_v1", "enforce_eager", "enable_prefix_caching", "enable_chunked_prefill",
        "gpu_memory_utilization", "dtype", "seed", "temperature", "top_p", "top_k", "logprobs", "max_model_len",
        "max_prompt_tokens", "max_response_tokens", "min_response_tokens", "enable_prompt_truncation",
        "repetition_penalty", "ignore_eos", "enable_multimodal", "chat_template", "enable_thinking",
        "enable_history", "enable_openai_api", "enable_log_requests", "base_port", "api_key",
        "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "external_model_config", "nnodes",
        "node_rank", "enable_return_routed_experts", "weight_sync_buffer_size", "bundle_indices", "engine_id",
        "ray_namespace", "ray_actor_name", "sync_method", "checkpoint_job_dir", "cuda_visible_devices",
        "enable_lora", "enable_runtime_lora_updating", "lora_modules", "lora_kwargs", "rope_scaling",
        "rope_theta"),
    "trainer": ("name", "trainer_type", "trainer_strategy", "save_interval", "enable_preview", "total_steps",
                "save_hf_checkpoint", "grad_clip", "actor_grad_clip", "use_dynamic_bsz", "use_remove_padding",
                "balance_batch", "critic_warmup", "max_token_len_per_gpu", "ulysses_sequence_parallel_size",
                "fix_actor_microbatch_loss_scale", "param_offload", "optimizer_offload", "grad_offload",
                "offload_policy", "save_strategy", "max_checkpoints_to_keep", "megatron", "trust_remote_code",
                "trainer_config", "trainer_config_path"),
    "monitor": ("monitor_type", "monitor_args", "detailed_stats", "enable_ray_timeline", "cache_dir"),
    "log": ("level", "group_by_node", "save_dir"),
    "synchronizer": ("sync_method", "sync_style", "sync_interval", "explorer_sync_interval",
                     "trainer_sync_interval", "sync_offset", "sync_timeout", "group_name", "wait_for_checkpoint",
                     "explorer_world_size", "ray_namespace"),
    "data_processor": ("task_pipeline", "experience_pipeline"),
    "data_processor.task_pipeline": ("operators", "num_process", "config_path", "inputs", "output", "target_fields",
                                     "priority_weights", "top_k"),
    "data_processor.experience_pipeline": ("operators", "save_input", "input_save_path", "inputs", "output"),
}
for _place in ("tasksets[]", "eval_tasksets[]"):  # every taskset has a training taskset's keys
    for _tail in ("", ".format", ".rollout_args"):
        KEYS[f"buffer.explorer_input.{_place}{_tail}"] = KEYS[f"buffer.explorer_input.taskset{_tail}"]


def place(where: str) -> str:
    """The place of the dotted `where` in `KEYS`: without a leading `stages[i].`, list indices as `[]`, an
    auxiliary buffer's own name as `*`."""
    where = re.sub(r"^stages\[\d+\]\.?", "", where)
    where = re.sub(r"\[\d+\]", "[]", where)
    return re.sub(r"^(buffer\.trainer_input\.auxiliary_buffers)\.[^.]+", r"\1.*", where)


def trinity_keys(where: str) -> tuple[str, ...] | None:
    """Trinity-RFT's keys under the dotted `where` ("" the top level, "stages[0]" a stage), or None where this
    table does not know the place (a function's arguments, a mapping of any keys)."""
    if re.fullmatch(r"stages\[\d+\]", where):
        return KEYS["stages[]"]
    return KEYS.get(place(where))
