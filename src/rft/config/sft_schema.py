"""The SFT config: verl's `sft_trainer.yaml` keys (data, model, optim, trainer), same conventions as schema.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from rft.config.schema import (
    ANY_VALUE,
    BAD_UPDATES_HELP,
    CHAT_TEMPLATE_KWARGS_HELP,
    HDFS_HELP,
    LOG_GROUP_BY_NODE_HELP,
    LOG_LEVEL_HELP,
    LOG_LEVELS,
    LOGGER_HELP,
    MONITOR_ARGS_HELP,
    MULTI_PROCESS,
    fld,
    sub,
)

VAL_MAX_SAMPLES_HELP = (
    "Validate on at most this many <unit> of val_files (verl's sft_trainer.yaml key and meaning): the first ones "
    "(verl's SFT config has no data.shuffle, so its SFTDataset keeps the first rows), counted after data.truncation "
    "drops any; the same ones at every validation. -1 (any value <= 0): all of them, and a run that validates on "
    "more than 300 says so in a note.")


@dataclass
class SFTCustomClsConfig:
    path: Optional[str] = fld(None, "File defining a custom dataset class.", unsupported="custom SFT dataset classes "
                              "(rft train's data.custom_cls reads RL prompts)")
    name: Optional[str] = fld(None, "Name of the custom dataset class.", unsupported="custom SFT dataset classes "
                              "(rft train's data.custom_cls reads RL prompts)")


@dataclass
class MultiturnConfig:
    enable: bool = fld(False, "Train on a messages column: the loss covers every assistant turn.")
    messages_key: str = fld("messages", "Column holding the chat messages [{role, content}, ...].")
    last_turn_only: bool = fld(False, "The loss covers the last assistant turn only (Trinity-RFT's messages format "
                               "without enable_concatenated_multi_turn); false: every assistant turn (verl's).")
    tools_key: Optional[str] = fld(None, "Column holding each conversation's tools (OpenAI function schemas), "
                                         "rendered by the chat template; null: none.")
    enable_thinking_key: Optional[str] = fld(
        "enable_thinking", "Column of a conversation's own enable_thinking template variable (true / false; verl's "
        "key and default), over data.apply_chat_template_kwargs.enable_thinking for that row; a file without the "
        "column, or a null in it, leaves the row to data.apply_chat_template_kwargs.")


@dataclass
class SFTDataConfig:
    train_files: Any = fld(None, "Training rows: one parquet/jsonl file or a list of them.")
    val_files: Any = fld(None, "Validation rows (val/loss); null disables validation.")
    val_max_samples: int = fld(-1, VAL_MAX_SAMPLES_HELP.replace("<unit>", "rows"))
    prompt_key: str = fld("prompt", "Column of the prompt: a chat message list or a string.")
    response_key: str = fld("response", "Column of the response: a string, or a chat message list "
                                       "continuing the prompt (TRL's conversational completion: loss on its "
                                       "assistant turns); may be nested, see response_dict_keys. TRL's "
                                       "prompt-completion rows: response_key=completion.")
    prompt_dict_keys: Optional[List[str]] = fld(None, "Keys to follow into a nested prompt column, e.g. [question].")
    response_dict_keys: Optional[List[str]] = fld(
        None, "Keys to follow into a nested response column, e.g. [answer] with response_key=extra_info."
    )
    multiturn: MultiturnConfig = sub(MultiturnConfig, "Multi-turn conversations.")
    image_key: str = fld("images", "Column of a row's images (as rft train's data.image_key: docs/multimodal.md); "
                         "needs a vision-language model, single-turn rows.")
    micro_batch_size_per_gpu: int = fld(4, "Rows per forward/backward pass (gradient accumulation; performance only).")
    train_batch_size: int = fld(256, "Rows per optimizer step (global).")
    max_length: int = fld(1024, "Maximum tokens of prompt + response.")
    truncation: str = fld(
        "error", "Rows over max_length: error (one message for all of them: how many, the longest, what each "
        "truncation would do), cut the response's end (right) or the prompt's start (left). A row they cannot fit "
        "is dropped, with a note counting them (right: no response token within max_length; left: the response "
        "alone reaches it, or the prompt has images); none left is an error.", choices=("error", "left", "right"))
    balance_dp_token: bool = fld(False, "Balance tokens across processes.", unsupported=MULTI_PROCESS)
    chat_template: Optional[str] = fld(None, "Override the tokenizer's chat template.", unsupported="template overrides")
    apply_chat_template_kwargs: Dict[str, Any] = fld({}, CHAT_TEMPLATE_KWARGS_HELP)
    custom_cls: SFTCustomClsConfig = sub(SFTCustomClsConfig, "A custom dataset class.")
    use_shm: bool = fld(False, "Copy data to shared memory.", unsupported="shared-memory loading")


@dataclass
class SFTFSDPConfig:
    model_dtype: str = fld("fp32", "The dtype the forward and backward passes compute in (torch.autocast; the "
                           "weights and the optimizer state stay float32, as verl's mixed precision keeps them). On a "
                           "CPU a low precision is used only where this CPU has the instructions that compute it "
                           "faster than float32 (bf16: AMX-BF16 or AVX512-BF16; else float32, with the reason in the "
                           "log; recorded in the run's numerics.json).",
                           choices=("fp32", "bf16", "fp16", "float32", "bfloat16", "float16"))
    wrap_policy: dict = fld({"min_num_params": 0}, "FSDP wrap policy.", unsupported=MULTI_PROCESS)
    cpu_offload: bool = fld(False, "FSDP CPU offload.", unsupported=MULTI_PROCESS)
    offload_params: bool = fld(False, "FSDP parameter offload.", unsupported=MULTI_PROCESS)


@dataclass
class SFTModelConfig:
    partial_pretrain: Optional[str] = fld(None, "Hugging Face model folder to fine-tune, or a Hub id (org/name: its "
                                                "folder in the local Hugging Face cache) (required).", model="policy")
    fsdp_config: SFTFSDPConfig = sub(SFTFSDPConfig, "dtype and FSDP settings.")
    external_lib: Optional[str] = fld(None, "Python module imported before loading.")
    override_config: dict = fld({}, "Attributes set on the model's config when loading.")
    enable_gradient_checkpointing: bool = fld(False, "Recompute activations in the backward pass.")
    trust_remote_code: bool = fld(False, "Allow the model folder's own Python code.")
    freeze_vision_tower: bool = fld(True, "A vision-language model's vision tower and projector left out of "
                                    "training (as actor_rollout_ref.model.freeze_vision_tower).")
    lora_rank: int = fld(0, "LoRA rank; 0 trains all parameters.")
    lora_alpha: int = fld(16, "LoRA alpha.")
    target_modules: Any = fld("all-linear", "LoRA target modules: 'all-linear', a list, or a regex.")
    exclude_modules: Any = fld(None, "Modules excluded from LoRA.")
    use_liger: bool = fld(False, "Liger kernels: verl patches the model's RMSNorm, RoPE, SwiGLU and cross-entropy "
                          "with Liger's fused kernels, for memory and speed; they compute the same functions, so rft "
                          "runs the model's own modules at any value (named in a note).",
                          unsupported="Liger's kernels: rft runs the model's own modules", also=(ANY_VALUE,))
    strategy: str = fld("fsdp2", "Training strategy; one process uses neither FSDP version.", choices=("fsdp", "fsdp2"))


@dataclass
class SFTOptimConfig:
    lr: float = fld(1e-5, "Peak learning rate of AdamW.")
    betas: List[float] = fld([0.9, 0.95], "AdamW betas.")
    eps: float = fld(1e-8, "AdamW epsilon.")
    weight_decay: float = fld(0.01, "AdamW weight decay.")
    warmup_steps_ratio: float = fld(0.1, "Warmup steps as a fraction of the total steps.")
    clip_grad: float = fld(1.0, "Clip the global gradient norm (<= 0: no clipping).")
    lr_scheduler: str = fld("cosine", "cosine: decay after warmup; wsd: warmup-stable-decay (last 10% decays); "
                            "constant: constant after warmup.", choices=("cosine", "wsd", "constant"))
    min_lr_ratio: float = fld(0.0, "Final lr as a fraction of lr.")


@dataclass
class SFTTrainerConfig:
    default_local_dir: str = fld("checkpoints/${trainer.project_name}/${trainer.experiment_name}",
                                 "Output root: checkpoints/, model/, metrics.jsonl, config.yaml, numerics.json.")
    default_hdfs_dir: Optional[str] = fld(None, HDFS_HELP + " hdfs:// URLs are refused (no Hadoop client).")
    resume_mode: str = fld("auto", "auto | disable | resume_path.", choices=("auto", "disable", "resume_path"))
    resume_from_path: Optional[str] = fld(None, "A global_step_N folder (with resume_mode=resume_path).")
    project_name: str = fld("rft-sft", "Project name.")
    experiment_name: str = fld("run", "Experiment name.")
    total_epochs: int = fld(4, "Passes over the training rows (bounded by total_training_steps).")
    total_training_steps: Optional[int] = fld(None, "Stop after this many optimizer steps.")
    logger: List[str] = fld(["console"], LOGGER_HELP)
    monitor_args: Dict[str, Any] = fld({}, MONITOR_ARGS_HELP)
    log_level: str = fld("INFO", LOG_LEVEL_HELP, choices=LOG_LEVELS)
    log_group_by_node: bool = fld(False, LOG_GROUP_BY_NODE_HELP)
    seed: int = fld(1, "Seed of the row shuffle and initialisation.")
    save_freq: int = fld(-1, "Checkpoint every N steps and at the last; <= 0: none.")
    test_freq: int = fld(-1, "val/loss every N steps and at the last; <= 0: never.")
    nnodes: int = fld(1, "Nodes.")
    n_gpus_per_node: int = fld(1, "Devices (processes) per node.")
    max_ckpt_to_keep: Optional[int] = fld(None, "Keep at most this many checkpoints.")
    device: str = fld("auto", "auto (cuda when available), cpu or cuda.", choices=("auto", "cpu", "cuda"))
    bad_update_limit: int = fld(3, BAD_UPDATES_HELP.replace("<prefix>", "train"))


@dataclass
class SFTConfig:
    data: SFTDataConfig = sub(SFTDataConfig, "Rows to imitate.")
    model: SFTModelConfig = sub(SFTModelConfig, "The model.")
    optim: SFTOptimConfig = sub(SFTOptimConfig, "Optimizer and schedule.")
    ulysses_sequence_parallel_size: int = fld(
        1, "Processes per sequence-parallel group (Ulysses, as the RL actor's): the processes of a group hold the "
        "same rows and each runs the model on its slice of every sequence; it divides the processes, and the "
        "rows of a step are split over the processes / this many groups.")
    use_remove_padding: bool = fld(False, "Forward passes on packed tokens (as the RL actor's "
                                   "model.use_remove_padding): the same loss and gradient as the padded pass.")
    trainer: SFTTrainerConfig = sub(SFTTrainerConfig, "The loop, logging and checkpoints.")
