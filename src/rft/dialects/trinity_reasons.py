"""What rft says of each Trinity-RFT key its translation (`rft.dialects.trinity`) does not map: the reason it is
refused (`REFUSED`), or, for a key that changes nothing here, the note it is accepted with (`NO_EFFECT`).

Places are `rft.dialects.trinity_keys.place`'s. A key the translation maps is in neither table; a key of Trinity's
that is in neither table and not mapped is a gap this module must fill (tests/test_trinity.py walks every key of
`trinity_keys.KEYS`): no refusal falls back to a general wording.
"""

from __future__ import annotations

import re

from rft.dialects.trinity_keys import place

DO_NOT_SET = "Trinity-RFT sets it itself (its config class marks it DO NOT SET); remove it"
RAY_ACTORS = ("a setting of Trinity-RFT's Ray actors; rft starts no Ray actors of that kind (cluster.ray_address "
              "places its processes through Ray: docs/cluster.md); remove it")
SERVE_MODE = "a setting of Trinity-RFT's serve mode (its model proxy), which rft has not (mode: both, explore, train, bench)"
QUEUE_ONLY = "a setting of a queue buffer; this one is read from files, where Trinity-RFT ignores it too; remove it"
SQL_RETRIES = ("how often Trinity-RFT retries an SQL statement; rft's SQL buffer retries a statement whose answer "
               "was lost until it commits once (docs/architecture.md), without a count")
LORA_RUNTIME = "Trinity-RFT sets it from model.lora_configs itself (DO NOT SET); remove it"
THINKING = ("an argument Trinity-RFT passes to an auxiliary model's chat template (Qwen3's enable_thinking); rft "
            "renders an auxiliary model's prompts with its template's defaults (data.apply_chat_template_kwargs, "
            "where model.enable_thinking lands, is the policy's): remove it, or give that model's folder a template "
            "that fixes it")
REPLAY = "the replay buffer of the experience buffer (buffer.trainer_input.experience_buffer.replay_buffer)"

REFUSED: dict[str, dict[str, str]] = {
    "": {
        "checkpoint_job_dir": DO_NOT_SET,
    },
    "algorithm": {
        "enable_router_replay": "replays the rollout's MoE routing in training (router replay), which rft's "
                                "engines do not record; remove it or set it false",
        "bypass_old_logprobs": "rft computes the old log-probs where the update needs them and corrects for the "
                               "rollout's with algorithm.rollout_correction (trainer.trainer_config); remove it",
    },
    "model": {
        "fully_sharded_loras": "a vLLM LoRA kernel setting; rft's vLLM engine serves the policy with its LoRA merged, "
                               "so it has no LoRA kernels; remove it",
        "max_cpu_loras": "a vLLM LoRA cache setting; rft's vLLM engine serves the policy with its LoRA merged; "
                         "remove it",
        "tinker": "Tinker (Thinking Machines' hosted training service) as the backend: rft trains the model itself "
                  "(FSDP); remove it or set tinker.enable false",
    },
    "model.lora_configs[]": {
        "path": "starts from a trained LoRA adapter, which rft cannot load (it trains a new adapter, "
                "actor_rollout_ref.model.lora_rank); merge the adapter into the model folder (rft merge) and remove it",
        "lora_dtype": "the adapter's dtype in vLLM; rft's vLLM engine serves the policy with its LoRA merged, in "
                      "the rollout's dtype (explorer.rollout_model.dtype); remove it",
        "is_dummy": DO_NOT_SET,
    },
    "cluster": {key: ("Trinity-RFT computes it from node_num, gpu_per_node and the engines (DO NOT SET); rft's "
                      "processes are nnodes x n_gpus_per_node; remove it")
                for key in ("total_gpu_num", "rollout_gpu_num", "auxiliary_model_gpu_num", "explorer_gpu_num",
                            "trainer_gpu_num", "trainer_node_num", "trainer_gpu_num_per_node")},
    "buffer": {
        "max_retry_times": SQL_RETRIES,
        "max_retry_interval": SQL_RETRIES,
        **{key: DO_NOT_SET for key in ("explorer_output", "tokenizer_path", "pad_token_id", "cache_dir")},
    },
    "buffer.trainer_input": {
        "sft_warmup_dataset": "Trinity-RFT's earlier SFT warm-up before RL; write it as an SFT stage "
                              "(stages: [{algorithm: {algorithm_type: sft}, ...}, ...])",
        "sft_warmup_steps": "Trinity-RFT's earlier SFT warm-up before RL; write it as an SFT stage "
                            "(stages: [{algorithm: {algorithm_type: sft}, ...}, ...])",
    },
    "explorer": {
        "mode": DO_NOT_SET,
        "runner_num": "Trinity-RFT's deprecated count of runners (its guide says: use runner_per_model); set "
                      "explorer.runner_per_model",
        **{key: SERVE_MODE for key in ("proxy_port", "listen_address", "service_status_check_interval",
                                       "min_running_model_num", "db_url")},
    },
    "explorer.rollout_model": {
        "model_path": "Trinity-RFT sets it from model.model_path (DO NOT SET); set model.model_path",
        "use_v1": "asks for vLLM's V0 engine, which the vLLM versions rft runs have not (V1 only); remove it",
        **{key: DO_NOT_SET for key in ("gpu_per_engine", "temperature", "top_p", "top_k", "logprobs", "nnodes",
                                       "node_rank", "enable_return_routed_experts", "bundle_indices", "engine_id",
                                       "ray_namespace", "ray_actor_name", "sync_method", "checkpoint_job_dir",
                                       "cuda_visible_devices", "external_model_config", "rope_scaling", "rope_theta")},
        **{key: LORA_RUNTIME for key in ("enable_lora", "enable_runtime_lora_updating", "lora_modules",
                                         "lora_kwargs")},
        "api_key": "the key of Trinity-RFT's OpenAI-compatible server; rft's endpoint listens on 127.0.0.1 only "
                   "and takes any key; remove it",
    },
    "trainer": {
        "trust_remote_code": "Trinity-RFT sets it from model.trust_remote_code (DO NOT SET); set that",
        "megatron": "Megatron-Core parallelism of Trinity-RFT's Megatron backend; rft trains with FSDP (trainer_"
                    "strategy fsdp / fsdp2); remove it",
    },
    "monitor": {
        "cache_dir": DO_NOT_SET,
    },
    "log": {},
    "synchronizer": {
        "explorer_world_size": DO_NOT_SET,
        "ray_namespace": DO_NOT_SET,
    },
}
"""(place -> {key: why rft refuses it}) for every Trinity-RFT key the translation neither maps nor accepts."""
for _place in ("buffer.explorer_input.taskset", "buffer.trainer_input.experience_buffer",
               "buffer.trainer_input.auxiliary_buffers.*"):
    REFUSED[_place] = {
        **{key: DO_NOT_SET for key in ("index", "wrap_in_ray", "total_steps", "batch_size", "tokenizer_path",
                                       "is_eval")},
        "ray_namespace": "reads a buffer of another Trinity-RFT experiment (its Ray namespace); rft reads a "
                         "database buffer by its URL (path); remove it",
        "max_retry_times": SQL_RETRIES,
        "max_retry_interval": SQL_RETRIES,
        "mm_data_kwargs": "Trinity-RFT's earlier multimodal processor arguments; rft's vision-language models take "
                          "their processor's defaults (docs/multimodal.md); remove it",
        "replay_buffer_kwargs": f"Trinity-RFT's earlier name for the settings of {REPLAY}; write them there",
        "default_eval_workflow_type": "set on buffer.explorer_input, where Trinity-RFT reads it",
    }
REFUSED["buffer.explorer_input.taskset"].update({
    "total_epochs": "Trinity-RFT sets it from buffer.total_epochs (DO NOT SET); set that",
    "subset_name": "a subset of a dataset read from files (a folder of that name); this taskset is a database "
                   "table (storage_type sql / queue); remove it",
    "capacity": QUEUE_ONLY, "max_read_timeout": QUEUE_ONLY, "use_priority_queue": QUEUE_ONLY,
    "reuse_cooldown_time": QUEUE_ONLY, "replay_buffer": QUEUE_ONLY,
})
REFUSED["buffer.trainer_input.experience_buffer"].update({
    "capacity": "the most experience groups Trinity-RFT's queue holds before it drops the lowest-priority one; "
                "rft's experience buffer keeps every group until it is read (a database, not a bounded queue); "
                "remove it",
    "total_epochs": "Trinity-RFT sets it from buffer.total_epochs (DO NOT SET); set that",
    "schema_type": DO_NOT_SET,
})
REFUSED["buffer.trainer_input.auxiliary_buffers.*"].update({
    "schema_type": "rft reads the auxiliary buffer as the mix algorithm's expert SFT rows (schema_type sft) only",
    "capacity": QUEUE_ONLY, "max_read_timeout": QUEUE_ONLY, "use_priority_queue": QUEUE_ONLY,
    "reuse_cooldown_time": QUEUE_ONLY, "replay_buffer": QUEUE_ONLY,
})
REFUSED["buffer.explorer_input.taskset.rollout_args"] = {
    "max_tokens": "a response limit of this taskset's own; rft has one for every taskset of a run: set "
                  "model.max_response_tokens (a max_tokens equal to it is taken as the same limit)",
    "n": "Trinity-RFT sets it from repeat_times (DO NOT SET); set algorithm.repeat_times (an eval taskset's own "
         "repeat_times)",
}
REFUSED["buffer.explorer_input.taskset.format"] = {}
TASKSET_ONLY = ("a setting of reading tasks (a taskset's); this experience buffer receives the explorer's "
                "experiences, which nothing reads from a dataset; remove it")
FROM_MODEL = "Trinity-RFT sets it from model.{key} (DO NOT SET); set model.{key}"
ONE_ENGINE = ("a vLLM parallelism of one engine; rft's vLLM engine is one process with tensor parallelism only "
              "(explorer.rollout_model.tensor_parallel_size); remove it")
REFUSED["algorithm"].update({
    "rollout_correction": "verl's rollout-correction options, which rft reads as verl's algorithm.rollout_correction: "
                          "write them there, under trainer.trainer_config",
    "use_token_level_loss": "Trinity-RFT's earlier switch, replaced by algorithm.loss_agg_mode (token-mean, "
                            "seq-mean-token-mean); set that",
})
REFUSED["buffer.explorer_input"] = {}
REFUSED["buffer.explorer_input.taskset"].update({
    "repeat_times": "Trinity-RFT sets a training taskset's from algorithm.repeat_times (DO NOT SET); set that",
    "schema_type": "the row schema of an experience buffer; a taskset holds tasks; remove it",
    "tasksets": "several training tasksets, whose tasks Trinity-RFT mixes; rft trains on one "
                "(buffer.explorer_input.taskset): put the tasks in one file",
})
REFUSED["buffer.explorer_input"]["tasksets"] = REFUSED["buffer.explorer_input.taskset"]["tasksets"]
REFUSED["buffer.explorer_input.taskset.format"].update({
    "chosen_key": "a key of a DPO experience buffer's preference pairs, not of a taskset; remove it",
    "rejected_key": "a key of a DPO experience buffer's preference pairs, not of a taskset; remove it",
    "enable_concatenated_multi_turn": "a setting of multi-turn SFT rows, not of a taskset; remove it",
    "messages_key": "rft reads a taskset's prompt from prompt_key, a string or a chat message list: point "
                    "prompt_key at the messages column and remove it",
    "reward_fn_key": "picks each task's reward function from a column of its row; rft has one reward function a "
                     "run (default_reward_fn_type)",
    "workflow_key": "picks each task's workflow from a column of its row; rft has one workflow a run "
                    "(default_workflow_type)",
    "video_key": "rft's vision-language models read images (image_key), no video; remove it",
})
REFUSED["buffer.trainer_input.experience_buffer"].update({
    key: TASKSET_ONLY for key in ("data_selector", "task_selector", "default_reward_fn_type", "default_workflow_type",
                                  "repeat_times", "reward_fn_args", "rollout_args", "workflow_args", "split",
                                  "subset_name", "format")})
REFUSED["explorer"].update({
    "dynamic_timeout": "Trinity-RFT's timeout of a task's run derived from the runs so far; rft's workflows run "
                       "under explorer.max_timeout; remove it",
    "over_rollout": "starts more tasks than batch_size and trains on the first to finish; rft waits for every "
                    "task of a step; remove it",
})
REFUSED["explorer.rollout_model"].update({
    **{key: FROM_MODEL.format(key=key) for key in ("max_prompt_tokens", "max_response_tokens",
                                                    "min_response_tokens", "trust_remote_code",
                                                    "repetition_penalty")},
    "base_port": "the port of Trinity-RFT's vLLM OpenAI server; rft's endpoint listens on a free port of "
                 "127.0.0.1 it picks itself; remove it",
    **{key: ONE_ENGINE for key in ("data_parallel_size", "pipeline_parallel_size", "enable_expert_parallel")},
    "extra_engine_args": "vLLM engine arguments passed through as they are; rft's vLLM engine takes its settings "
                         "by name (actor_rollout_ref.rollout.*, under trainer.trainer_config); remove it",
    "ignore_eos": "generates past the end of a reply up to max_tokens; rft's engines stop at EOS; remove it",
})
REFUSED["synchronizer"].update({
    key: "an interval of Trinity-RFT's explorer_driven / trainer_driven styles; rft synchronises every "
         "sync_interval steps (fixed); remove it" for key in ("explorer_sync_interval", "trainer_sync_interval")})
REFUSED["trainer"].update({
    "fix_actor_microbatch_loss_scale": "Trinity-RFT's rescaling of each micro-batch's loss; rft aggregates the "
                                       "loss over the whole mini-batch (loss_agg_mode), whatever its micro-batches; "
                                       "remove it",
    "grad_offload": "FSDP gradient offload; rft offloads the parameters and the optimizer state (param_offload, "
                    "optimizer_offload; FSDP2's offload_policy takes the gradients too); set false",
    "save_hf_checkpoint": "rft writes the Hugging Face model once, at the end of the run (<out>/model), Trinity-RFT's "
                          "last; set last",
})
REFUSED["explorer.auxiliary_models[]"] = dict(REFUSED["explorer.rollout_model"])
REFUSED["explorer.auxiliary_models[]"]["model_path"] = "is required (the auxiliary model's folder)"
REFUSED["explorer.auxiliary_models[]"]["enable_thinking"] = THINKING

NO_EFFECT: dict[str, dict[str, str]] = {
    "": {
        "ignore_validator_suggestions": "Trinity-RFT's GPU memory suggestions; rft prints none",
    },
    "buffer.explorer_input.taskset": {
        "enable_progress_bar": "a progress bar while Trinity-RFT reads the dataset; rft reads a taskset without one",
    },
    "buffer.explorer_input.taskset.rollout_args": {
        "logprobs": "how many of the most likely tokens' log-probs Trinity-RFT's engine returns beside the sampled "
                    "token's, for a workflow to read; rft's workflows read the sampled token's log-prob only",
    },
    "buffer.trainer_input.experience_buffer": {
        "enable_progress_bar": "a progress bar while Trinity-RFT reads the dataset; rft reads it without one",
    },
    "buffer.trainer_input.auxiliary_buffers.*": {
        "enable_progress_bar": "a progress bar while Trinity-RFT reads the dataset; rft reads it without one",
        "total_epochs": "the passes Trinity-RFT's reader makes over the expert rows before they run out (its run "
                        "then ends); rft draws the expert rows again, each pass reshuffled, until "
                        "buffer.total_steps: the same rows while a run stays within total_epochs passes",
    },
    "explorer": {
        "runner_prepare_concurrency": "how many of Trinity-RFT's runner actors start at once; rft's runners are "
                                      "threads of the explorer",
        "runner_prepare_max_retries": "how often Trinity-RFT restarts a runner actor that crashed while starting; "
                                      "rft's runners are threads of the explorer",
        "runner_state_report_interval": "how often Trinity-RFT logs its runners' states; rft logs the workflow/* "
                                        "metrics of each step",
        "max_inflight_batches": "how many steps' tasks Trinity-RFT's scheduler holds at once; rft runs one "
                                "explore step's tasks at a time",
        "max_repeat_times_per_runner": "how Trinity-RFT splits a task's repeat_times over its runners; rft runs "
                                       "each repeat as a workflow run of its own, batched by its generation server "
                                       "(docs/workflows.md): the same experiences",
        "concurrent_mode": "how a Trinity-RFT runner runs the repeats it holds; rft runs each as a workflow run "
                           "of its own, batched by its generation server (docs/workflows.md)",
    },
    "explorer.rollout_model": {
        "enable_auto_tool_choice": "vLLM's server parses tool calls from a reply only with it; rft's endpoint "
                                   "parses them (workflow.tool_call_parser) whenever a request gives tools",
        "enable_log_requests": "vLLM's API server logging each request; rft's endpoint logs none",
        "weight_sync_buffer_size": "the size of Trinity-RFT's NCCL weight-sync buffers; rft sends the weights "
                                   "whole (synchronizer.sync_method)",
        "name": "the name AgentScope's tuner gives the model; rft's endpoint answers any model name",
        "enable_multimodal": "rft reads a vision-language model's images whenever the model folder has a vision "
                             "config (docs/multimodal.md)",
    },
    "monitor": {
        "detailed_stats": "more statistics of Trinity-RFT's own metrics; rft logs verl's metrics and its own "
                          "(docs/monitors.md)",
    },
    "trainer": {
        "enable_preview": "Trinity-RFT's W&B table of the training rollouts; rft logs no training rollouts (its "
                          "monitors get validation samples: trainer.log_val_generations)",
    },
    "synchronizer": {
        "group_name": "the name of Trinity-RFT's NCCL weight-sync group; rft's gloo group has its own",
        "wait_for_checkpoint": "Trinity-RFT does not read it yet (its code marks it TODO)",
    },
}
"""(place -> {key: why it changes nothing here}) for the Trinity-RFT keys rft accepts with a note."""
NO_EFFECT["explorer.auxiliary_models[]"] = dict(NO_EFFECT["explorer.rollout_model"])
ACCEPTED_AT: dict[str, dict[str, object]] = {
    "buffer.trainer_input.auxiliary_buffers.*": {"schema_type": "sft"},
    "algorithm": {"enable_router_replay": False},
    "model": {"fully_sharded_loras": False, "max_cpu_loras": None},
    "model.lora_configs[]": {"lora_dtype": "auto", "is_dummy": False},
    "explorer.rollout_model": {"use_v1": True, "enable_thinking": None, "data_parallel_size": 1,
                               "pipeline_parallel_size": 1, "enable_expert_parallel": False, "ignore_eos": False,
                               "extra_engine_args": {}},
    "trainer": {"megatron": {}, "grad_offload": False, "fix_actor_microbatch_loss_scale": False,
                "save_hf_checkpoint": "last"},
}
"""(place -> {key: value}): the keys REFUSED refuses at any other value; at this one (Trinity-RFT's default) rft does
what Trinity-RFT does, so it is accepted without a word."""
ACCEPTED_AT["explorer.auxiliary_models[]"] = ACCEPTED_AT["explorer.rollout_model"]
NO_REASON = "a Trinity-RFT key rft's translation has no reason recorded for (a bug in rft: please report it)"


def _place(where: str) -> str:
    """`place(where)`, every taskset's place as the training taskset's (they have the same keys)."""
    return re.sub(r"^buffer\.explorer_input\.(tasksets|eval_tasksets)\[\]", "buffer.explorer_input.taskset",
                  place(where))


def refusal_reason(where: str, key: str) -> str:
    """Why rft refuses Trinity-RFT's `key` at the dotted `where` (`NO_REASON` where `REFUSED` has none)."""
    return REFUSED.get(_place(where), {}).get(key, NO_REASON)


def accepted_at(where: str, key: str) -> tuple[bool, object]:
    """(whether `ACCEPTED_AT` names a value for Trinity-RFT's `key` at the dotted `where`, that value)."""
    values = ACCEPTED_AT.get(_place(where), {})
    return key in values, values.get(key)


def no_effect(where: str, key: str) -> str | None:
    """Why Trinity-RFT's `key` at the dotted `where` changes nothing here, or None where it is not such a key."""
    return NO_EFFECT.get(_place(where), {}).get(key)
