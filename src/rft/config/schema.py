"""The one typed config schema. Key names are verl's (`ppo_trainer.yaml`), the canonical keys of rft.

Every field carries a help text (`rft config reference` prints them). Two more metadata entries drive validation:
* `choices`: the allowed values.
* `unsupported`: the field exists so a verl config loads, but rft does not honour it yet; any value other than the
  default (and the values in `also`, which describe what rft does anyway) is refused with this reason, never
  silently ignored.

A key of a part the run does not build (the critic without gae, the reward model while reward_model.enable is false,
the reference without a KL term) has no effect, as in verl: its `unsupported` values are not refused then, and a
non-default value is named in one note line before training (the `UNUSED` rules of `rft.config.checks`).

Batch sizes: `train_batch_size` and `ppo_mini_batch_size` are global and counted in prompts (algorithmic);
`*_per_gpu` sizes are per process and counted in rows (performance knobs that do not change the result).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def fld(default: Any, help: str, *, choices: tuple | None = None, unsupported: str | None = None,
        also: tuple = (), model: str | None = None) -> Any:
    """A config field. `model`: the field names a model and may be a Hugging Face Hub id (`rft.models.hub`):
    "policy" (the trained model: a later stage's starts from a folder not written yet), "folder" (another model),
    "tokenizer" (a tokenizer's folder), "list:<key>" (a list of mappings whose <key> names a model)."""
    meta: dict[str, Any] = {"help": help}
    if model is not None:
        meta["model"] = model
    if choices is not None:
        meta["choices"] = choices
    if unsupported is not None:
        meta["unsupported"] = unsupported
    if also:
        meta["also"] = also
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def sub(cls: type, help: str) -> Any:
    return field(default_factory=cls, metadata={"help": help})


class _AnyValue:
    """An `also` entry that every value equals: a key with no effect here at any value (named in a note)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "any value"


ANY_VALUE = _AnyValue()

VLLM_KEYS = ("gpu_memory_utilization", "free_cache_engine", "enable_chunked_prefill",
             "enable_prefix_caching", "load_format", "tensor_model_parallel_size", "max_model_len",
             "max_num_batched_tokens", "max_num_seqs", "engine_kwargs")
"""The rollout keys only the vLLM engine reads."""
HDFS_HELP = ("A second copy of every checkpoint (verl's HDFS copy): a local or mounted folder gets "
             "<dir>/global_step_N/ copied in after each save (atomically), made when the run starts; null: "
             "none. With save_freq <= 0 (no checkpoints): no effect, no folder made.")
BAD_UPDATES_HELP = ("Optimizer steps skipped in a row (non-finite loss or gradient norm, non-finite weights after the "
                    "step, or an update larger than the weights themselves; each skipped step restores the weights "
                    "and optimizer state from a copy taken before it and is counted in <prefix>/skipped_updates) "
                    "before the run stops with an error; 0: stop at the first. rft train's explore steps that give no "
                    "experience (every workflow task failed) count against the same limit.")
MULTI_PROCESS = ("rft's SFT shards every decoder layer over the processes (FSDP2 / FSDP1, model.strategy) with each "
                 "rank taking a contiguous share of the step's rows; other FSDP settings are not implemented for it")
CPU_ONLY_OFFLOAD = ("On CPU a no-op (everything already lives in host memory); on cuda it needs a sharded model, i.e. "
                    "several processes (one process on cuda is refused).")
ACTIVATION_OFFLOAD_HELP = (
    "Keep the activations the update's forward passes save for backward in host memory (torch.autograd.graph."
    "save_on_cpu, pinned), copied back for the backward pass: less GPU memory, more host traffic. On CPU a no-op "
    "(noted once in the log). The cuda path has not been run yet (the test suite runs on CPU).")
STRATEGY_HELP = ("How the model is sharded over several processes (docs/scaling.md): fsdp2 (torch's fully_shard on "
                 "every decoder layer, then the root) or fsdp (FSDP1, FullyShardedDataParallel with the decoder "
                 "layers as units); one process uses neither, unless a model names fsdp2 (a process group of "
                 "one, as verl on one GPU).")
DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
# The names registered in rft.algorithms.ADV_ESTIMATORS (a test keeps the two equal): verl 0.9.1's (less its
# grpo_vectorized / rloo_vectorized implementation variants) and Trinity-RFT's opmd, asymre, reinforce, rec, raft.
ADV_ESTIMATOR_NAMES = ("gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo",
                       "grpo_passk", "gpg", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline", "opmd",
                       "asymre", "reinforce", "rec", "raft")
# The names registered in rft.algorithms.POLICY_LOSSES / KL_ESTIMATORS and LOSS_AGG_MODES (a test keeps them equal).
POLICY_LOSS_NAMES = ("vanilla", "gspo", "gpg", "cispo", "sapo", "geo_mean", "clip_cov", "kl_cov", "m2po", "opmd", "dro",
                     "dppo_tv", "dppo_kl", "bypass_mode", "topr", "sppo", "rec", "importance_sampling", "sft")
KL_ESTIMATOR_NAMES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "kl+", "k1+", "abs+", "mse+", "k2+",
                      "low_var_kl+", "k3+", "full")
# transformers' TrainingArguments.optim names and get_scheduler names (rft.workers.optim builds them).
OPTIMIZER_NAMES = ("adamw_torch", "adamw_torch_fused", "adafactor", "ademamix", "sgd", "adagrad", "rmsprop",
                   "galore_adamw", "lomo", "adalomo", "grokadamw", "schedule_free_sgd")
DEFAULT_OPTIMIZER = "adamw_torch_fused"  # transformers' TrainingArguments.optim default
SCHEDULER_NAMES = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                   "inverse_sqrt", "reduce_lr_on_plateau")
LOSS_AGG_MODE_NAMES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                       "seq-mean-token-sum-norm", "seq-mean-token-sum-maxlen")
# trainer.logger names (verl's) rft has, the package each imports and the extra that installs it (rft.monitor builds
# them; a test keeps the two equal); the names verl has that rft refuses, with the reason; trainer.monitor_args keys
# (Trinity-RFT's) and the logger each belongs to.
LOGGERS = {"console": None, "file": None, "tensorboard": ("tensorboardX", "tensorboard"), "mlflow": ("mlflow", "mlflow"),
           "wandb": ("wandb", "wandb")}
REFUSED_LOGGERS = {
    "swanlab": "not shipped: its package pins protobuf < 7 (mlflow and wandb need 7) and brings a dashboard's "
               "dependencies; use tensorboard, mlflow or wandb",
    "vemlp_wandb": "Volcengine's hosted W&B is not implemented; use wandb (base_url / api_key in trainer.monitor_args)",
    "clearml": "not implemented; use tensorboard, mlflow or wandb",
    "trackio": "not implemented; use tensorboard, mlflow or wandb",
}
_MEGATRON = "a key of verl's Megatron optimizer (actor.strategy megatron); rft's optimizer is the FSDP one"
_FOR_EACH_OPTIM = {
    "lr_warmup_init": f"{_MEGATRON}, whose warmup starts from 0: remove it",
    "lr_decay_steps": f"{_MEGATRON}, whose schedule runs over optim.total_training_steps (default: the run's "
                      "steps): remove it, or set <section>.optim.total_training_steps",
    "lr_decay_style": f"{_MEGATRON}: set <section>.optim.warmup_style (constant, cosine) or lr_scheduler_type (linear, "
                      "cosine, ...) instead",
    "min_lr": f"{_MEGATRON}: set <section>.optim.min_lr_ratio (min_lr / lr, with warmup_style cosine) instead",
    "weight_decay_incr_style": f"{_MEGATRON}, whose weight decay is constant (optim.weight_decay): remove it",
    "lr_wsd_decay_style": f"{_MEGATRON}, which has no warmup-stable-decay schedule: remove it, or choose "
                          "<section>.optim.lr_scheduler_type",
    "lr_wsd_decay_steps": f"{_MEGATRON}, which has no warmup-stable-decay schedule: remove it",
    "use_checkpoint_opt_param_scheduler": f"{_MEGATRON}, whose checkpoints always hold the schedule's state (resumed "
                                          "with it): remove it",
}
REFUSED_KEYS = {
    **{f"{section}.optim.{key}": why.replace("<section>", section) for section in ("actor_rollout_ref.actor", "critic")
       for key, why in _FOR_EACH_OPTIM.items()},
    "actor_rollout_ref.model.external_libs": "verl's config page spells external_lib so in its prose; the key "
                                             "(verl's and rft's) is actor_rollout_ref.model.external_lib: set that",
}
"""Keys of verl's config reference (../shared/spec/verl_config_reference.rst) that no rft schema field holds, each
refused by name with the reason and what to set instead (not as an unknown key)."""
MONITOR_ARGS = {"uri": "mlflow", "username": "mlflow", "password": "mlflow", "base_url": "wandb", "api_key": "wandb"}
LOGGER_HELP = (
    "Monitors, a list of names or one name (verl's names; Trinity-RFT's monitor.monitor_type): console (progress bar, or a line every log_freq "
    "steps), file (metrics.jsonl; always written, naming it changes nothing), tensorboard (event files under "
    "<out>/monitor/tensorboard; extra rft[tensorboard]), mlflow (tracking URI from monitor_args.uri, else "
    "MLFLOW_TRACKING_URI, else the SQLite store <out>/monitor/mlflow.db; params: the resolved config; extra "
    "rft[mlflow]), wandb (offline under <out>/monitor/wandb unless an API key is set in WANDB_API_KEY or "
    "monitor_args.api_key, or WANDB_MODE says otherwise; extra rft[wandb]). Metric names are the same everywhere "
    "(MLflow allows no '@': there mean@1 reads mean_at_1). docs/monitors.md.")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_LEVEL_HELP = (
    "The lowest level written to each process's log file, <default_local_dir>/log/<role>.log (Trinity-RFT's "
    "log.level; roles: trainer, trainer_1, ... for the other trainer ranks, explorer, explorer_1, ..., bench; a "
    "staged run's in each stage's folder). The file holds the lines the process shows on its console (`rft: error:` "
    "lines at ERROR, Python warnings at WARNING, the rest at INFO) and its log records, each with its level and "
    "time, and ends with the error that stopped the run; DEBUG adds every step's metrics and the process's "
    "command. The console is unchanged (docs/monitors.md).")
LOG_GROUP_BY_NODE_HELP = ("Log files under log/<node_ip>/ (Trinity-RFT's log.group_by_node): one folder per machine "
                          "of a several-node run, the address found as Ray finds it (127.0.0.1 without a network).")
MONITOR_ARGS_HELP = (
    "Settings of the monitors (Trinity-RFT's monitor_args): mlflow: uri (tracking URI), username / password (set "
    "MLFLOW_TRACKING_USERNAME / PASSWORD); wandb: base_url (WANDB_BASE_URL), api_key (WANDB_API_KEY: logs online). A "
    "key of a monitor trainer.logger does not name is refused.")


# --------------------------------------------------------------------------------------------------- data
CHAT_TEMPLATE_KWARGS_HELP = (
    "Variables of the chat template, passed to every rendering of it as verl passes them to the tokenizer's "
    "apply_chat_template, e.g. {enable_thinking: false} (Qwen3), {reasoning_effort: medium} (gpt-oss); Trinity-RFT's "
    "enable_thinking lands here. RL: the prompts, validation, the workflows' conversations and the "
    "OpenAI-compatible endpoint (a request's own chat_template_kwargs over them), algorithm.mix's expert rows; SFT "
    "and DPO: the rows; generation: the prompts. A variable the template does not read changes nothing (Jinja "
    "ignores it, as in transformers); a model without a chat template renders plain text and reads none. "
    "apply_chat_template's own arguments (tokenize, tools, add_generation_prompt, ...) are refused: rft sets them.")


@dataclass
class CustomClsConfig:
    path: Optional[str] = fld(
        None, "A Python file defining the dataset class that reads train_files and val_files instead of rft (verl's "
        "custom_cls): a torch.utils.data.Dataset built as verl builds it, cls(data_files=<the files>, tokenizer, "
        "processor, config=<this data section>). Each row it returns (dataset[i]) must follow rft's row contract: a "
        "mapping with the prompt (data.prompt_key: chat messages [{role, content}, ...] or a string) and optionally "
        "data_source, reward_model {ground_truth} and extra_info, a verl data file's row before tokenization "
        "(docs/data.md); checked row by row when the data loads, before the model. Needs task_storage file; null: "
        "rft reads the files (parquet / jsonl) itself.")
    name: Optional[str] = fld(None, "The dataset class in custom_cls.path (required with it).")


@dataclass
class SamplerConfig:
    class_path: Optional[str] = fld(
        None, "The sampler class of yours that orders the training prompts (verl's data.sampler, e.g. a curriculum): "
        "a Python file (file:// optional) or pkg://<module>, as verl loads it. Built as verl builds it, "
        "cls(data_source=<the training prompts>, data_config=<this data section>), a torch.utils.data.Sampler "
        "yielding prompt indices; each step takes data.train_batch_size of them (an epoch: len(sampler) // that "
        "many steps). A sampler with update(batch) (verl's AbstractCurriculumSampler) gets each trained step's "
        "batch (docs/data.md); one with state_dict / load_state_dict is checkpointed with the run. null: rft's "
        "seeded shuffle (data.shuffle, data.seed).")
    class_name: Optional[str] = fld(None, "The sampler class in class_path (required with it).")


@dataclass
class SelectorConfig:
    selector_type: Optional[str] = fld(
        None, "Which training tasks each explore step takes (Trinity-RFT's data_selector; rft.data.selectors, "
        "docs/data.md): random (distinct tasks drawn anew each step, numpy's default_rng(seed + tasks drawn)), "
        "offline_easy2hard (sorted by feature_keys, highest first), difficulty_based (BOTS: the tasks whose "
        "estimated pass rate is nearest kwargs.target_reward, the estimates updated from each step's rewards and "
        "two reference pass rates per task, feature_keys). null: data.shuffle / data.sampler.",
        choices=(None, "random", "offline_easy2hard", "difficulty_based"))
    seed: int = fld(42, "The selector's seed (Trinity-RFT's default 42).")
    feature_keys: List[str] = fld(
        [], "offline_easy2hard: the columns to sort by; difficulty_based: two columns, a weak and a strong "
        "reference model's pass rate of each task.")
    kwargs: Dict[str, Any] = fld(
        {}, "difficulty_based: m (responses a task, 16), lamb (the estimates' decay, 0.2), rho (the reference "
        "rates' weight, 0.2), adaptive_rho (false), target_reward (1.0), tau (softmax temperature; 0 the best ones, "
        "1.0), do_sample (draw from the Beta estimates, false): Trinity-RFT's defaults.")


@dataclass
class ExpertDataConfig:
    files: Any = fld(None, "algorithm.mix: the expert (SFT) rows mixed into each RL step, one parquet/jsonl file or a "
                            "list (Trinity-RFT's auxiliary buffer): a prompt and a response column, or a messages "
                            "column.")
    prompt_key: str = fld("prompt", "Column of the prompt: a chat message list or a string (as rft sft's).")
    response_key: str = fld("response", "Column of the response: a string, or a chat message list "
                                        "continuing the prompt (TRL's conversational completion: loss on its "
                                        "assistant turns); may be nested, see response_dict_keys. TRL's "
                                        "prompt-completion rows: response_key=completion.")
    prompt_dict_keys: Optional[List[str]] = fld(None, "Keys to follow into a nested prompt column.")
    response_dict_keys: Optional[List[str]] = fld(None, "Keys to follow into a nested response column, e.g. "
                                                        "[answer] with response_key=extra_info.")
    messages_key: Optional[str] = fld(None, "A column of chat messages instead of prompt / response: the loss "
                                            "covers every assistant turn (rft sft's multiturn); null: prompt / "
                                            "response columns.")
    last_turn_only: bool = fld(False, "With messages_key: the loss covers the last assistant turn only (as rft sft's "
                                      "data.multiturn.last_turn_only).")
    image_key: str = fld("images", "Column of an expert row's images (as data.image_key): with a vision-language "
                                   "policy they go into its prompt through the processor, as rft sft's do; a text "
                                   "policy refuses rows that have images.")
    max_length: int = fld(1024, "Maximum tokens of prompt + response of an expert row.")
    truncation: str = fld("error", "Expert rows over max_length: as rft sft's data.truncation (error; right: cut the "
                          "response's end; left: the prompt's start; a row they cannot fit dropped and counted).",
                          choices=("error", "left", "right"))


@dataclass
class DataConfig:
    tokenizer: Optional[str] = fld(None, "Tokenizer folder; default: the policy model's folder.", model="tokenizer")
    train_files: Any = fld(None, "Training prompts: one parquet/jsonl file or a list of them (verl row format); "
                                 "with task_storage sql / queue a SQLAlchemy URL or a SQLite file.")
    task_storage: str = fld(
        "file",
        "Where the training tasks come from (Trinity-RFT's taskset storage types): file (train_files), sql (the "
        "table task_table of the database train_files names, read whole at the start and sampled like files), "
        "queue (that table read as a stream: tasks in id order, each once, waiting up to "
        "experience_buffer.max_read_timeout for more; needs trainer.total_training_steps).",
        choices=("file", "sql", "queue"),
    )
    task_table: str = fld("tasks", "sql / queue tasksets: the table (columns id, and task: a verl row as JSON; "
                                   "rft.explorer.taskset.write_tasks fills one).")
    system_prompt: Optional[str] = fld(None, "A system message put before every prompt that has none (Trinity-RFT's "
                                             "format.system_prompt).")
    system_prompt_key: Optional[str] = fld(None, "The column holding each row's system message (wins over "
                                                 "system_prompt; Trinity's format.system_prompt_key).")
    reply_prefix: Optional[str] = fld(
        None, "Text every reply starts with (Trinity-RFT's format.reply_prefix, e.g. '<think>'): put after the chat "
              "template's generation prompt as the start of the assistant's message, which the model continues; the "
              "response (sampled, scored, trained) is what follows it. One-turn workflows (simple_workflow, "
              "math_workflow, math_boxed_workflow, simple_mm_workflow, your own that chat the task's messages).")
    response_key: Optional[str] = fld(None, "The column holding each row's reference answer, given to the reward "
                                            "function as ground_truth instead of reward_model.ground_truth "
                                            "(Trinity's format.response_key).")
    tools_key: Optional[str] = fld(None, "The column holding each row's tools (OpenAI function schemas), rendered "
                                         "by the chat template and called in tool_call_workflow (Trinity's "
                                         "format.tools_key).")
    chat_template: Optional[str] = fld(None, "A Jinja chat template used instead of the tokenizer's (Trinity's "
                                             "format.chat_template).")
    apply_chat_template_kwargs: Dict[str, Any] = fld({}, CHAT_TEMPLATE_KWARGS_HELP)
    val_files: Any = fld(None, "Validation prompts: one parquet/jsonl file or a list; null disables validation.")
    val_data_sources: Optional[List[Optional[str]]] = fld(
        None, "The data_source of the rows of each val_files entry (in order) that have none, the label of their "
        "val-core/<data_source>/... metrics (Trinity-RFT: each eval taskset's name); null, or a null entry: "
        "'unknown' (verl's).")
    val_prompt_keys: Optional[List[Optional[str]]] = fld(
        None, "The prompt column of each val_files entry (in order), where a file has its own (Trinity-RFT: each "
        "eval taskset's format.prompt_key); null, or a null entry: data.prompt_key.")
    val_response_keys: Optional[List[Optional[str]]] = fld(
        None, "The reference-answer column of each val_files entry (in order), where a file has its own "
        "(Trinity-RFT: each eval taskset's format.response_key); null, or a null entry: data.response_key.")
    val_max_samples: int = fld(
        -1, "Validate on at most this many prompts of val_files (verl's key and meaning): with data.shuffle a "
        "sample drawn once with data.seed (numpy's default_rng(seed).choice, the rows verl picks when no prompt is "
        "filtered), else the first ones; the same prompts at every validation. -1 (any value <= 0): all of them, "
        "and a run that validates on more than 300 says so in a note.")
    prompt_key: Optional[str] = fld(
        "prompt", "Column holding the prompt: a chat message list, or a plain string. null: the rows hold no prompt, "
        "for a workflow that writes every message itself (frozen_lake_workflow: its rows are a map's seed, size, p).")
    max_prompt_length: int = fld(512, "Maximum prompt length in tokens (after the chat template).")
    max_response_length: int = fld(512, "Maximum number of generated tokens per response.")
    train_batch_size: int = fld(1024, "Prompts per training step (global); each is sampled rollout.n times.")
    gen_batch_size: Optional[int] = fld(
        None, "verl's DAPO recipe: prompts per generation batch of dynamic sampling (algorithm.filter_groups; "
        "global); null: data.train_batch_size. Each batch draws this many prompts until train_batch_size groups are "
        "kept; epochs count generation batches (total steps from epochs: training prompts // gen_batch_size x "
        "total_epochs, as verl). Another value than train_batch_size needs the filter, and with several processes "
        "a multiple of actor.ppo_mini_batch_size.")
    val_batch_size: Optional[int] = fld(None, "Prompts per validation generation call; null: all at once.")
    return_raw_input_ids: bool = fld(
        False, "verl: keep the prompt ids before the chat template, for a reward model with another template.",
        unsupported="rft keeps each prompt's chat messages in every batch and re-templates them for the reward "
        "model when reward_model.model.input_tokenizer is set: set that instead"
    )
    return_raw_chat: bool = fld(
        False, "verl: keep the chat messages before the template (its agent loop and a reward model's "
        "re-templating need them; verl 0.8's examples set true). rft keeps each prompt's chat messages in every "
        "batch whatever the value, so true asks for what rft does.",
        unsupported="rft keeps each prompt's chat messages in every batch and re-templates them for the reward "
        "model when reward_model.model.input_tokenizer is set: set that instead", also=(True,)
    )
    return_full_prompt: bool = fld(False, "Keep the templated prompt text.",
                                   unsupported="the templated prompt text is not kept in rft's Batch")
    shuffle: bool = fld(True, "Shuffle the training prompts each epoch (seeded by data.seed).")
    dataloader_num_workers: Optional[int] = fld(
        None, "verl: worker processes of the torch DataLoader that reads the training prompts.",
        unsupported="rft has no DataLoader: it reads and tokenizes the prompts once, in the trainer's own process, "
        "before the model loads, so there are no loader workers to start", also=(ANY_VALUE,))
    seed: int = fld(1, "Seed of the training-prompt shuffle.")
    filter_overlong_prompts: bool = fld(False, "Drop prompts longer than max_prompt_length when loading.")
    filter_overlong_prompts_workers: int = fld(
        1, "Worker processes for the overlong filter.", unsupported="parallel filtering (rft filters in-process)",
        also=(ANY_VALUE,))
    truncation: str = fld(
        "error",
        "A prompt over max_prompt_length (when not filtered): error; left: cut tokens from the left (keep the "
        "end); right: cut from the right (keep the start); middle: keep both ends, cut the middle.",
        choices=("error", "left", "right", "middle"),
    )
    image_key: str = fld("images", "Column of a row's images (a list: {bytes} / {path} as parquet stores them, paths "
                         "relative to the data file, or PIL images); `<image>` in the prompt marks where each goes "
                         "(none: first). Needs a vision-language model (docs/multimodal.md).")
    trust_remote_code: bool = fld(False, "Allow a tokenizer folder's own Python code.")
    custom_cls: CustomClsConfig = sub(CustomClsConfig, "A dataset class of yours that reads the files (verl's "
                                                       "custom_cls; docs/data.md).")
    sampler: SamplerConfig = sub(SamplerConfig, "A sampler class of yours for the training prompts (verl's "
                                                "data.sampler; curriculum learning, docs/data.md).")
    expert: ExpertDataConfig = sub(ExpertDataConfig, "The expert rows of algorithm.mix (Trinity-RFT's mix).")
    selector: SelectorConfig = sub(SelectorConfig, "A task selector rft has (Trinity-RFT's data_selector): random, "
                                                   "easy to hard, or by estimated difficulty (rft's own keys).")


# ------------------------------------------------------------------------------------------- actor / model
@dataclass
class ModelConfig:
    path: Optional[str] = fld(None, "Hugging Face model folder of the policy, or a Hub id (org/name: its folder in the "
                                    "local Hugging Face cache, downloaded there unless HF_HUB_OFFLINE=1) (required).",
                              model="policy")
    external_lib: Optional[str] = fld(None, "Python module imported before loading (registers custom models).")
    override_config: Dict[str, Any] = fld(
        {}, "Attributes set on the model's config when loading (e.g. attention_dropout); a nested "
        "`model_config` mapping is merged in as well."
    )
    enable_gradient_checkpointing: bool = fld(False, "Recompute activations in the backward pass to save memory.")
    enable_activation_offload: bool = fld(False, ACTIVATION_OFFLOAD_HELP)
    trust_remote_code: bool = fld(False, "Allow the model folder's own Python code.")
    use_remove_padding: bool = fld(
        True,
        "Run the update and log-prob passes on packed tokens (verl's remove padding): the rows' real tokens in one "
        "sequence, a prompt that several rows hold (a group's) once, the attention per row, the LM head only where "
        "response tokens are predicted; the same gradient as the padded pass (to float rounding). On by default "
        "(verl's default is false; its examples turn it on): it is exact and faster (docs/performance.md). On CPU "
        "through rft's own packed SDPA attention (rft.workers.packing); an architecture that cannot take a packed "
        "call runs padded, with the reason printed.",
    )
    freeze_vision_tower: bool = fld(
        True, "A vision-language model's vision tower (and its projector into the language model) left out of "
        "training (verl's key; its default is false, rft's true: small image data rarely improves a pretrained "
        "vision encoder, and freezing it saves its gradients and optimizer state). Without a vision tower: no effect.")
    use_liger: bool = fld(False, "Liger kernels: verl patches the model's RMSNorm, RoPE, SwiGLU and cross-entropy "
                          "with Liger's fused kernels, for memory and speed; they compute the same functions, so rft "
                          "runs the model's own modules at any value (named in a note).",
                          unsupported="Liger's kernels: rft runs the model's own modules", also=(ANY_VALUE,))
    use_fused_kernels: bool = fld(
        False,
        "verl's fused log-prob / entropy kernels: the log-probs and entropies computed from the LM head's input in "
        "chunks of tokens, never holding a micro-batch's (tokens x vocabulary) logits (verl's torch backend). rft "
        "does this whatever the value, wherever it reproduces the model's logits (rft.workers.lm_head; a model "
        "whose head it does not reproduce uses its full logits, logged): true and false give the same numbers.")
    fused_kernel_options: Dict[str, Any] = fld(
        {}, "Options of the fused kernels: impl_backend 'torch' (rft's, above); 'triton', verl's Triton kernels of "
            "the same log-probs, is accepted and runs rft's (named in a note).")
    use_shm: bool = fld(False, "Copy the model to shared memory first (verl: faster loading).",
                        unsupported="shared-memory model loading", also=(ANY_VALUE,))
    lora_rank: int = fld(0, "LoRA rank; 0 trains all parameters, > 0 trains a peft LoRA adapter.")
    lora_alpha: int = fld(16, "LoRA alpha (the adapter is scaled by alpha / rank).")
    lora_adapter_path: Optional[str] = fld(
        None, "A saved peft LoRA adapter folder (adapter_config.json, adapter_model.safetensors) the policy starts "
        "from, as verl's key: the adapter's weights are loaded and trained on, and its r, lora_alpha and "
        "target_modules are lora_rank, lora_alpha and target_modules (set there, they must match the adapter's).")
    target_modules: Any = fld(
        "all-linear", "LoRA target modules: 'all-linear', a list of module names, or a regex string."
    )
    exclude_modules: Any = fld(None, "Modules excluded from LoRA: a list of names or a regex string.")


@dataclass
class OptimConfig:
    lr: float = fld(1e-6, "Peak learning rate of AdamW.")
    lr_warmup_steps: int = fld(-1, "Warmup steps; negative: use lr_warmup_steps_ratio.")
    lr_warmup_steps_ratio: float = fld(0.0, "Warmup steps as a fraction of the total training steps.")
    min_lr_ratio: float = fld(0.0, "cosine only: the final lr as a fraction of lr.")
    num_cycles: float = fld(0.5, "cosine only: number of cosine cycles after warmup (0.5: decay to min once).")
    warmup_style: str = fld(
        "constant", "Schedule after the linear warmup.", choices=("constant", "cosine")
    )
    total_training_steps: int = fld(
        -1, "Length of the learning-rate schedule in steps (the warmup ratio and the decay count from it); -1: the "
        "run's total training steps (what verl fills in). Set it to train fewer steps on a longer schedule.")
    weight_decay: float = fld(0.01, "AdamW weight decay.")
    betas: List[float] = fld([0.9, 0.999], "AdamW betas.")
    eps: float = fld(1e-8, "AdamW epsilon.")
    optimizer: str = fld(
        DEFAULT_OPTIMIZER,
        "Optimizer by transformers' TrainingArguments.optim name (lr, betas, eps, weight_decay above): "
        "adamw_torch_fused (the default, as transformers' TrainingArguments.optim: torch's AdamW in one fused kernel, "
        "5-6x faster than adamw_torch's per-tensor loop on a CPU, the same update within float rounding), "
        "adamw_torch, adafactor, sgd, adagrad, rmsprop; ademamix / grokadamw when their package is installed; "
        "galore_adamw, lomo, adalomo, schedule_free_sgd are refused (rft.workers.optim says why).",
        choices=OPTIMIZER_NAMES,
    )
    lr_scheduler_type: Optional[str] = fld(
        None,
        "transformers' get_scheduler by name, with the warmup above (replaces warmup_style); reduce_lr_on_plateau "
        "steps on the validation reward (needs validation, in the one-process loop). null: warmup_style.",
        choices=(None, *SCHEDULER_NAMES),
    )


@dataclass
class WrapPolicyConfig:
    min_num_params: int = fld(
        0, "Size-based wrapping (several processes): besides the decoder layers, every submodule whose parameters not "
        "already in a unit below it number at least this many becomes an FSDP unit, children first (torch's "
        "size_based_auto_wrap_policy; ModuleList / ModuleDict and a module sharing a tied parameter never); 0: off. "
        "verl uses the size rule instead of the layer classes when this is > 0; rft keeps the layers as units too.")
    transformer_layer_cls_to_wrap: Optional[Any] = fld(
        None, "Class names of the modules sharded as FSDP units (several processes); null: the model's decoder layer "
        "(its _no_split_modules, e.g. Qwen2DecoderLayer).")


PRECISION_HELP = ("On a CPU a low precision is used only where this CPU has the instructions that compute it faster "
                  "than float32 (bf16: AMX-BF16 or AVX512-BF16; else float32, with the reason in the log; recorded in "
                  "the run's numerics.json: docs/performance.md) and it measures faster at the model's shapes "
                  "(timed once per machine and shape, kept in ~/.cache/rft/precision.json). auto (the "
                  "default): bf16 on a GPU, as verl's default, and on a CPU where it is faster; else float32, with "
                  "nothing to say about it, as nothing was asked.")


@dataclass
class MixedPrecisionConfig:
    param_dtype: str = fld("auto", "The dtype the model's forward and backward passes compute in (torch.autocast: "
                           "matmuls in it, softmaxes, norms and losses in float32); the master weights and the "
                           "optimizer state stay float32. " + PRECISION_HELP, choices=DTYPES)
    reduce_dtype: str = fld("fp32", "The dtype the gradients are reduced in across processes (FSDP2's "
                            "MixedPrecisionPolicy; one process reduces nothing).", choices=DTYPES)
    buffer_dtype: str = fld("fp32", "The dtype of the model's floating buffers (rotary frequencies, ...) while it "
                            "computes in a low precision.", choices=DTYPES)


@dataclass
class FSDPConfig:
    wrap_policy: WrapPolicyConfig = sub(WrapPolicyConfig, "FSDP wrap policy.")
    mixed_precision: MixedPrecisionConfig = sub(MixedPrecisionConfig, "Mixed precision (verl's FSDP "
                                                "mixed_precision: param, reduce and buffer dtypes).")
    param_offload: bool = fld(False, "Keep the parameter shards in host memory (FSDP1's CPUOffload, FSDP2's "
                              "CPUOffloadPolicy). " + CPU_ONLY_OFFLOAD)
    optimizer_offload: bool = fld(False, "Keep the optimizer state in host memory: with param_offload or "
                                  "offload_policy the optimizer steps on the host shards. " + CPU_ONLY_OFFLOAD)
    offload_policy: bool = fld(False, "FSDP2's CPUOffloadPolicy (parameters, gradients and the optimizer step in "
                               "host memory). " + CPU_ONLY_OFFLOAD)
    model_dtype: str = fld("fp32", "The dtype the model is loaded and kept in (verl's fsdp_config.model_dtype): its "
                           "master weights, their gradients and the optimizer state. bf16 halves their memory at "
                           "bf16's rounding of every update; the passes then compute in bf16 too (mixed_precision."
                           "param_dtype cannot raise them above the weights' dtype). fp16 weights (no loss scaling) "
                           "are refused.", choices=("fp32", "float32", "bf16", "bfloat16"))
    forward_prefetch: bool = fld(False, "FSDP's forward prefetch of the next unit's parameters (GPU overlap).",
                                 unsupported="FSDP forward prefetch (a GPU communication overlap)", also=(ANY_VALUE,))
    fsdp_size: int = fld(
        -1, "Processes one copy of the model is sharded over (several processes): -1 or the number of processes "
        "(or more, as in verl) shards over all of them; a divisor of it is hybrid sharding, a (processes / fsdp_size, fsdp_size) device "
        "mesh: groups of fsdp_size processes each hold a sharded copy, the groups replicate it and all-reduce the "
        "gradients (FSDP2 fully_shard over the 2-D mesh, FSDP1 HYBRID_SHARD; 1, a whole copy per process, needs "
        "fsdp2: torch's FSDP1 makes a one-process group NO_SHARD, without the all-reduce). Memory per process grows "
        "as the group shrinks; the gradient and the result do not change.")


@dataclass
class RecLossConfig:
    clip_mode: str = fld("none", "Tokens that keep their gradient: none (all), one-side, gspo-one-side (one-side on "
                                 "the sequence's ratio), two-side, ring (two-side plus the far sides, the *_prime "
                                 "bounds).", choices=("none", "one-side", "gspo-one-side", "two-side", "ring"))
    weight: str = fld("none", "What multiplies the advantage: none, importance_sampling (the token's ratio), "
                              "gspo_importance_sampling (the sequence's ratio), advantage (exp(A / temp)).",
                      choices=("none", "importance_sampling", "gspo_importance_sampling", "advantage"))
    regularizer: str = fld("none", "none, k2 (+ regularizer_coef * log-ratio^2), forward-kl (- regularizer_coef * "
                                   "log p).", choices=("none", "k2", "forward-kl"))
    regularizer_coef: float = fld(0.0, "The regularizer's coefficient (>= 0).")
    temp: float = fld(1.0, "weight=advantage: the temperature (> 0).")
    clip_ratio_low_prime: float = fld(0.6, "ring: a token with A >= 0 and ratio <= 1 - this keeps its gradient.")
    clip_ratio_high_prime: float = fld(2.0, "ring: a token with A <= 0 and ratio >= 1 + this keeps its gradient.")


@dataclass
class PolicyLossConfig:
    loss_mode: str = fld(
        "vanilla",
        "Policy loss (formulas, papers: docs/algorithms.md): vanilla (dual-clip PPO), gspo (sequence ratio; the "
        "paper aggregates with loss_agg_mode=seq-mean-token-mean), gpg (-logp * A), cispo (clipped ratio as a stop-gradient weight), sapo (soft "
        "gate, tau_pos / tau_neg; always seq-mean-token-mean), geo_mean (GMPO; mean over sequences), clip_cov, "
        "kl_cov (covariance-selected tokens), m2po (M2PO: the mini-batch's largest squared log-ratios dropped, "
        "m2_threshold), opmd (Trinity-RFT; divided by 1 + tau), dro (quadratic log-ratio "
        "penalty, dro_beta), dppo_tv / dppo_kl (DPPO: a trust region on the probability change or the binary KL, "
        "clip_ratio_low / high its thresholds, clip_ratio_c the IS truncation), bypass_mode (verl's bypass-mode "
        "loss: needs algorithm.rollout_correction.bypass_mode=true and reads its options there); Trinity-RFT's "
        "topr (truncated ratio on negative examples), sppo (clipped ratio inside a log: range [1 / (1 + "
        "clip_ratio_low), 1 + clip_ratio_high]), rec (policy_loss.rec.*), importance_sampling (-A * ratio, no "
        "clip), sft (-log p of the loss tokens; adv_estimator raft picks them).",
        choices=POLICY_LOSS_NAMES,
    )
    clip_cov_ratio: float = fld(0.0002, "clip_cov: fraction of the mini-batch's valid tokens whose gradient is cut (> 0).")
    clip_cov_lb: float = fld(1.0, "clip_cov: a candidate token's covariance must exceed this.")
    clip_cov_ub: float = fld(5.0, "clip_cov: a candidate token's covariance must stay below this.")
    kl_cov_ratio: float = fld(0.0002, "kl_cov: fraction of the mini-batch's valid tokens (largest covariance) "
                                      "that get the ppo_kl_coef * |log-ratio| penalty (> 0).")
    ppo_kl_coef: float = fld(0.1, "kl_cov: coefficient of the |log-ratio| penalty (>= 0).")
    m2_threshold: float = fld(0.04, "m2po: bound on the mean squared log-ratio of the mini-batch's trust-region "
                                    "tokens; the tokens of largest squared log-ratio are dropped until it holds (>= 0).")
    log_ratio_clip: float = fld(20.0, "m2po: the log-ratio is clamped to +-this in the loss's value (its gradient "
                                      "unclamped) (> 0).")
    tau: float = fld(1.0, "opmd: regularisation strength (Trinity-RFT's tau, >= 0); the loss is divided by 1 + tau.")
    dro_beta: Optional[float] = fld(None, "dro: coefficient of the quadratic log-ratio penalty; required (> 0) with "
                                          "loss_mode=dro.")
    topr_advantage_threshold: float = fld(
        0.0, "topr: a token whose advantage is at most this is weighted by the truncated ratio min(1, ratio).")
    topr_ratio_level: str = fld(
        "token", "topr: that ratio per token (Trinity-RFT's) or per sequence (the TOPR paper's).",
        choices=("token", "sequence"))
    rec: RecLossConfig = sub(RecLossConfig, "rec: which tokens keep their gradient and what weights the advantage "
                                            "(Trinity-RFT's rec policy_loss_fn_args; its epsilon_low / "
                                            "epsilon_high are actor.clip_ratio_low / clip_ratio_high).")


@dataclass
class ActorCheckpointConfig:
    save_contents: List[str] = fld(
        ["model", "optimizer", "extra"],
        "What a checkpoint holds: model, optimizer, extra (scheduler, RNG, data position), hf_model.",
    )
    load_contents: List[str] = fld(
        "${.save_contents}", "What a resume restores (a subset of save_contents); by default what save_contents "
        "holds (verl's ${.save_contents})."
    )


@dataclass
class ActorConfig:
    strategy: str = fld("fsdp", STRATEGY_HELP, choices=("fsdp", "fsdp2"))
    ppo_mini_batch_size: int = fld(256, "Prompts per optimizer step (global); train_batch_size must divide by it.")
    ppo_micro_batch_size: Optional[int] = fld(
        None, "Deprecated global micro batch in rows; use ppo_micro_batch_size_per_gpu."
    )
    ppo_micro_batch_size_per_gpu: Optional[int] = fld(
        None, "Rows per forward/backward pass in one process (gradient accumulation); null: the whole mini-batch."
    )
    use_dynamic_bsz: bool = fld(
        False, "Form micro-batches by token count (at most ppo_max_token_len_per_gpu real tokens each, balanced) instead of ppo_micro_batch_size_per_gpu rows; a performance knob: the gradient is unchanged."
    )
    ppo_max_token_len_per_gpu: int = fld(
        16384, "Real tokens (prompt + response) per forward/backward pass with use_dynamic_bsz, per process; at "
        "least the longest sequence (data.max_prompt_length + data.max_response_length)."
    )
    grad_clip: float = fld(1.0, "Clip the global gradient norm to this value (<= 0: no clipping).")
    clip_ratio: float = fld(0.2, "PPO clip range epsilon (both sides unless clip_ratio_low/high are set).")
    clip_ratio_low: Optional[float] = fld(None, "Lower clip epsilon: ratio >= 1 - clip_ratio_low; null: clip_ratio.")
    clip_ratio_high: Optional[float] = fld(None, "Upper clip epsilon: ratio <= 1 + clip_ratio_high; null: clip_ratio.")
    clip_ratio_c: float = fld(3.0, "Dual-clip constant: for A < 0 the loss is capped at -A * clip_ratio_c.")
    loss_agg_mode: str = fld(
        "token-mean",
        "How a per-token loss is reduced, with the mini-batch's global normaliser (verl 0.9.1's agg_loss): "
        "token-mean (sum / tokens), token-sum (the sum itself), seq-mean-token-sum (sum / sequences), "
        "seq-mean-token-mean (mean of per-sequence token means), seq-mean-token-sum-norm (sum / (sequences x "
        "loss_scale_factor): Dr. GRPO, TRL's dr_grpo), seq-mean-token-sum-maxlen (rft's earlier name for "
        "seq-mean-token-sum-norm).",
        choices=LOSS_AGG_MODE_NAMES,
    )
    loss_scale_factor: Optional[int] = fld(
        None, "seq-mean-token-sum-norm: the constant each sequence's token sum is divided by (> 0); null: "
        "data.max_response_length."
    )
    policy_loss: PolicyLossConfig = sub(PolicyLossConfig, "Policy loss function.")
    tau_pos: float = fld(1.0, "sapo: gate temperature of tokens with a positive advantage (> 0).")
    tau_neg: float = fld(1.05, "sapo: gate temperature of tokens with a zero or negative advantage (> 0).")
    entropy_coeff: float = fld(0.0, "Entropy bonus: loss -= entropy_coeff * entropy.")
    calculate_sum_pi_squared: bool = fld(
        False, "Compute sum_v pi_v^2 of the policy at each response token in the old log-prob pass (forces that "
        "pass); required by adv_estimator=optimal_token_baseline / tir_optimal_token_baseline."
    )
    use_kl_loss: bool = fld(False, "Add kl_loss_coef * KL(policy || reference) to the actor loss (GRPO style).")
    use_torch_compile: bool = fld(
        False, "torch.compile every decoder layer of the policy (and the reference) for the update and the log-prob "
        "passes (dynamic shapes; the first passes compile); generation runs the layers eagerly (a decode step's "
        "shapes change every token: compiled, it recompiled per layer and ran slower, docs/performance.md). Where "
        "the backend cannot compile (no C++ compiler on CPU, ...) rft runs eagerly and prints why. verl's default "
        "is true; rft's false: on CPU compiling costs more than it returns on short runs (bench/RESULTS.md).")
    entropy_from_logits_with_chunking: bool = fld(
        True, "Compute the entropy (and the full KL) 1024 token positions at a time, so no (tokens, vocabulary) "
        "softmax is held at once; false: all positions at once (more memory, the same result). rft's default is "
        "true (verl's false).")
    entropy_checkpointing: bool = fld(
        True, "Recompute the entropy's softmax in the backward instead of keeping it. rft's entropy always does (its "
        "backward keeps no softmax): false is accepted, changes nothing (the same result, less memory than asked) "
        "and is said so in a note before training.")
    kl_loss_coef: float = fld(0.001, "Coefficient of the KL loss.")
    kl_loss_type: str = fld(
        "low_var_kl",
        "KL estimator of the KL loss: kl/k1, abs, mse/k2, low_var_kl/k3; a '+' suffix (k3+, ...) keeps the value "
        "and takes k2's gradient; full: the exact KL over the vocabulary (runs the reference on every micro-batch).",
        choices=KL_ESTIMATOR_NAMES,
    )
    ppo_epochs: int = fld(1, "Passes over one batch of rollouts.")
    data_loader_seed: Optional[int] = fld(None, "Seed of the mini-batch shuffle (actor.shuffle); null: trainer.seed.")
    shuffle: bool = fld(False, "Shuffle groups between mini-batches each ppo epoch.")
    ulysses_sequence_parallel_size: int = fld(
        1, "Ulysses sequence parallelism: groups of this many processes hold the same data and split each sequence "
        "between them (attention heads exchanged all-to-all); the data-parallel world is the processes / this. "
        "Must divide the processes, and the model's attention heads (its KV heads divide it or by it).")
    optim: OptimConfig = sub(OptimConfig, "Optimizer and learning-rate schedule.")
    fsdp_config: FSDPConfig = sub(FSDPConfig, "FSDP settings.")
    checkpoint: ActorCheckpointConfig = sub(ActorCheckpointConfig, "Checkpoint contents.")


@dataclass
class RefConfig:
    fsdp_config: FSDPConfig = sub(FSDPConfig, "FSDP settings of the reference.")
    log_prob_micro_batch_size: Optional[int] = fld(None, "Deprecated; use log_prob_micro_batch_size_per_gpu.")
    log_prob_micro_batch_size_per_gpu: Optional[int] = fld(
        None, "Rows per reference forward pass; null: the whole batch."
    )
    log_prob_use_dynamic_bsz: Optional[bool] = fld(
        None, "Token-budget micro-batches for this no-gradient log-prob pass (log_prob_max_token_len_per_gpu real "
        "tokens each); null: actor.use_dynamic_bsz (verl's interpolation).")
    log_prob_max_token_len_per_gpu: Optional[int] = fld(
        None, "Real tokens per log-prob pass with log_prob_use_dynamic_bsz, per process; null: "
        "actor.ppo_max_token_len_per_gpu (verl's interpolation).")
    ulysses_sequence_parallel_size: Optional[int] = fld(
        None, "The reference's sequence parallelism: the actor's (null, verl's interpolation) or 1 (each process of "
        "a group computes the whole sequences).")
    entropy_from_logits_with_chunking: Optional[bool] = fld(
        None, "The reference computes no entropy; when set it must equal the actor's (verl interpolates it from "
        "there).")
    entropy_checkpointing: Optional[bool] = fld(
        None, "The reference computes no entropy; when set it must equal the actor's (verl interpolates it from "
        "there).")


@dataclass
class ValKwargsConfig:
    top_k: int = fld(-1, "Validation top-k; -1 or 0 disables.")
    top_p: float = fld(1.0, "Validation nucleus threshold.")
    temperature: float = fld(0.0, "Validation temperature; 0 is greedy.")
    n: int = fld(1, "Responses per validation prompt (metrics are reported as mean@n).")
    do_sample: bool = fld(False, "Sample during validation; false is greedy.")


@dataclass
class RolloutConfig:
    name: str = fld("hf", "Rollout engine: hf (transformers with a KV cache) or vllm (vLLM in each trainer "
                          "process; `make vllm` installs it; docs/rollout.md); sglang and trtllm (TensorRT-LLM) are "
                          "refused by name (no such engine in rft).", choices=("hf", "vllm", "sglang", "trtllm"))
    mode: str = fld(
        "sync", "verl's rollout mode: sync (the engine generates the step's batch in the trainer's process) or async "
        "(verl 0.8's default: server-mode engines). async runs the engine's stream (continuous batching: the hf "
        "engine's, or vLLM's request-level API with name vllm) in an "
        "`rft serve` process the run starts, the trainer's weights sent at every sync; steps stay on-policy, as in "
        "verl's PPO trainer (the update waits for the batch), unless synchronizer.sync_offset puts the explorer "
        "ahead. Where that server cannot serve the run (LoRA, a workflow, several processes, mode bench) it "
        "runs in process, the same samples, and a note says why (docs/rollout.md). verl's multi-turn tool rollout is its own key, rollout.multi_turn.enable (rft's tool_call_workflow).",
        choices=("sync", "async"))
    temperature: float = fld(1.0, "Sampling temperature (log-probs are computed on logits / temperature).")
    top_k: int = fld(-1, "Top-k sampling; -1 or 0 disables.")
    top_p: float = fld(1.0, "Nucleus sampling threshold in (0, 1].")
    do_sample: bool = fld(True, "Sample; false is greedy decoding.")
    n: int = fld(1, "Responses sampled per prompt (the group size; > 1 for GRPO).")
    ignore_eos: bool = fld(False, "Keep generating after EOS up to max_response_length.")
    prompt_length: Optional[int] = fld(None, "Must equal data.max_prompt_length when set.")
    response_length: Optional[int] = fld(None, "Must equal data.max_response_length when set.")
    micro_batch_size: Optional[int] = fld(None, "Rows per generation call of the hf engine; null: all at once.")
    dtype: str = fld(
        "auto", "The dtype generation computes in (the hf engine under torch.autocast over float32 weights; "
        "vLLM's dtype). Where it differs from the actor's param_dtype the old log-probs are recomputed in the "
        "training precision every step and the gap logged (training/rollout_probs_diff_*). " + PRECISION_HELP,
        choices=DTYPES)
    log_prob_micro_batch_size: Optional[int] = fld(None, "Deprecated; use log_prob_micro_batch_size_per_gpu.")
    log_prob_micro_batch_size_per_gpu: Optional[int] = fld(
        None, "Rows per forward pass when recomputing old log-probs; null: the whole batch."
    )
    log_prob_use_dynamic_bsz: Optional[bool] = fld(
        None, "Token-budget micro-batches for this no-gradient log-prob pass (log_prob_max_token_len_per_gpu real "
        "tokens each); null: actor.use_dynamic_bsz (verl's interpolation).")
    log_prob_max_token_len_per_gpu: Optional[int] = fld(
        None, "Real tokens per log-prob pass with log_prob_use_dynamic_bsz, per process; null: "
        "actor.ppo_max_token_len_per_gpu (verl's interpolation).")
    # the vLLM engine's keys (rollout.name=vllm; docs/rollout.md): with the hf engine they have no effect, as in
    # verl, and a value other than the default is named in a note line (an `UNUSED` rule)
    gpu_memory_utilization: float = fld(
        0.5, "vLLM: the share of the device's memory the engine takes (weights, activations, KV cache). On CPU "
        "vLLM reads it as a share of host memory; rft sizes the KV cache to what the run's batches hold at once, "
        "within that share.")
    enforce_eager: bool = fld(
        True, "Eager execution. vLLM: false captures CUDA graphs / compiles. hf engine: false compiles the decode step "
        "with static shapes (torch.compile over a static KV cache; finished rows leave the passes as in the eager "
        "loop; the first generation of each shape compiles; eager, with the reason logged, when the model is "
        "sharded over processes, has recurrent layers or ALiBi, or torch.compile does not work on the machine).")
    free_cache_engine: bool = fld(
        True, "vLLM: sleep between rollouts (KV cache freed, weights offloaded) while the trainer updates. vLLM's "
        "sleep mode needs CUDA: on CPU the engine keeps its memory, and the log says so once.")
    enable_chunked_prefill: bool = fld(False, "vLLM: split long prefills into chunks of max_num_batched_tokens.")
    enable_prefix_caching: bool = fld(
        True, "vLLM: reuse the KV cache of shared prompt prefixes (the n samples of a prompt); cleared at every "
        "weight update.")
    load_format: str = fld(
        "dummy_dtensor", "vLLM: how the engine gets its first weights. dummy_* (verl's default): random weights, "
        "then the actor's weights are loaded into it before the first rollout; auto / safetensors / pt: read "
        "from actor_rollout_ref.model.path (then the actor's weights, which equal them at step 0).")
    tensor_model_parallel_size: int = fld(
        2, "vLLM tensor parallel size (verl's default 2). rft runs the engine in the trainer's process: 1. 2 is "
        "accepted on a machine without CUDA (verl's default; one engine, said in the log); more than 1 with CUDA "
        "is refused until rft shards its engine.", also=(1,))
    max_model_len: Optional[int] = fld(
        None, "vLLM: the longest sequence the engine holds; null: data.max_prompt_length + "
        "data.max_response_length (a multi-turn workflow's whole conversation: workflow.max_model_len).")
    max_num_batched_tokens: Optional[int] = fld(
        8192, "vLLM: the scheduler's token budget per engine step; null: vLLM's own (a Trinity-RFT config, which has "
        "no such key, takes that).")
    max_num_seqs: int = fld(1024, "vLLM: the most sequences in one engine step.")
    engine_kwargs: Dict[str, Any] = fld(
        {}, "More engine arguments by engine: engine_kwargs.vllm.<name> goes to vllm.LLM as it is (null: vLLM's "
        "default); engine_kwargs.sglang is refused (rft has no sglang engine).")
    val_kwargs: ValKwargsConfig = sub(ValKwargsConfig, "Sampling for validation.")


@dataclass
class ActorRolloutRefConfig:
    hybrid_engine: bool = fld(True, "Actor and rollout share the process (the only mode).", choices=(True,))
    model: ModelConfig = sub(ModelConfig, "The policy model.")
    actor: ActorConfig = sub(ActorConfig, "The policy update.")
    ref: RefConfig = sub(RefConfig, "The reference policy (built only when a KL term needs it).")
    rollout: RolloutConfig = sub(RolloutConfig, "Generation.")


# ----------------------------------------------------------------------------------------- reward / algo
@dataclass
class RewardModelInnerConfig:
    input_tokenizer: Optional[str] = fld(
        None, "The policy's tokenizer, when the reward model's chat template differs from the policy's: the response "
        "is decoded with it and the conversation re-templated with the reward model's tokenizer (its folder needs "
        "tokenizer files and a chat template, checked before loading); null: the policy's token ids go to the "
        "reward model as they are (same vocabulary and template).",
        model="tokenizer")
    path: Optional[str] = fld(
        None, "Reward model folder: an AutoModelForSequenceClassification with one label (e.g. `rft init-model "
        "--preset tiny-rm`); required with enable. A generative model's folder (only *ForCausalLM architectures in "
        "its config.json) or a classifier of 2 or more labels is refused before it loads.",
        model="folder")
    external_lib: Optional[str] = fld(None, "Python module imported before loading (registers custom models).")
    trust_remote_code: bool = fld(False, "Allow the model folder's own Python code.")
    fsdp_config: Dict[str, Any] = fld(
        {}, "FSDP settings; verl's documented block (min_num_params 0, param_offload false), which asks for what rft "
        "does, is accepted, and so is param_offload true (a memory knob, named in a note).", unsupported="sharding the reward model (each process holds a whole copy)",
        also=({"min_num_params": 0, "param_offload": False}, {"param_offload": False},
              {"min_num_params": 0, "param_offload": True}, {"param_offload": True}))


@dataclass
class OverlongBufferConfig:
    enable: bool = fld(False, "DAPO's soft overlong punishment: add min(0, -(L - (max_response_length - len)) / len "
                              "* penalty_factor) to the score of a response of L tokens.")
    len: int = fld(0, "Length of the buffer before data.max_response_length where the penalty ramps up (> 0 and <= "
                      "data.max_response_length when enabled).")
    penalty_factor: float = fld(1.0, "Penalty at max_response_length (>= 0).")
    log: bool = fld(False, "Log reward_extra/overlong_reward/mean and reward_extra/overlong/mean (share penalised).")


@dataclass
class SandboxFusionConfig:
    url: Optional[str] = fld(
        None, "A SandboxFusion service's run_code URL (verl's): the built-in scorer of the code data sources "
        "(codecontests, apps, codeforces, taco) runs each test case there; null: in a fresh Python process on this "
        "machine (verl's prime_code fallback). Read by the built-in scorer only (docs/rewards.md, Code).")
    max_concurrent: int = fld(64, "Requests to the sandbox at once, over the whole run (verl's semaphore).")
    memory_limit_mb: int = fld(1024, "Memory of one test case's run in MB (the sandbox's memory_limit_MB; on this "
                                     "machine the process's address space).")


@dataclass
class RewardModelConfig:
    enable: bool = fld(
        False, "Score responses with a reward model: score = reward_weight x the model's score + rule_weight x the "
        "reward function's score, on the last response token."
    )
    model: RewardModelInnerConfig = sub(RewardModelInnerConfig, "The reward model.")
    micro_batch_size_per_gpu: Optional[int] = fld(None, "Rows per reward-model forward pass; null: the whole batch.")
    max_length: Optional[int] = fld(
        None, "Longest reward-model input in tokens; a longer prompt + response keeps its last max_length tokens; "
        "null: no limit. A reward model with a learned position table (GPT-2, OPT) needs max_length within its "
        "positions, unless data.max_prompt_length + data.max_response_length fit them (without input_tokenizer)."
    )
    reward_weight: float = fld(1.0, "Weight of the reward model's score in a response's score (rft's key); 0: the "
                               "reward model is neither loaded nor run.")
    rule_weight: float = fld(
        0.0, "Weight of the reward function's score (custom_reward_function, else the built-in scorer of the "
        "data_source) when a reward model is enabled (rft's key); 0: the model's score alone and no reward function "
        "runs (verl's behaviour)."
    )
    reward_manager: str = fld(
        "naive", "How rule rewards are run, in process row by row (with custom_reward_function.timeout / on_error): "
        "naive; dapo (verl's DAPO recipe): the same plus the overlong buffer below, which only dapo applies (as in "
        "verl); prime (verl's PrimeRewardManager, PRIME's parallel verification): a row whose reward function raises "
        "or overruns custom_reward_function.timeout scores 0 (on_error zero, whatever on_error says); verl's runs the "
        "calls in a process pool, rft in this process (num_workers for the typed rewards): the same scores.",
        choices=("naive", "dapo", "prime"),
    )
    overlong_buffer: OverlongBufferConfig = sub(OverlongBufferConfig, "DAPO's soft overlong punishment (verl's "
                                                                      "DAPO recipe keys).")
    sandbox_fusion: SandboxFusionConfig = sub(SandboxFusionConfig, "Where the built-in code scorer runs the "
                                                                     "responses' programs (verl's keys).")


@dataclass
class CustomRewardConfig:
    path: Optional[str] = fld(None, "Python file defining the reward function; null: built-in scorers by data_source.")
    name: Any = fld(
        "compute_score",
        "Function in that file: (data_source, solution_str, ground_truth, extra_info), called with the four by "
        "name as verl calls it (and reward_kwargs as keywords); one that cannot take that call is refused before the "
        "model loads. A list of names combines several functions (TRL's reward_funcs): the score is their weighted sum, "
        "each logged as reward_extra/<name>.",
    )
    reward_weights: Optional[List[float]] = fld(
        None, "Weights of the reward functions, one per name (TRL's reward_weights); null: all 1.0."
    )
    timeout: Optional[float] = fld(
        60.0, "Seconds one call of the reward function (the built-in scorers too) may take, per response; a call "
        "that overruns is a failure (on_error). In the main thread the call is interrupted (SIGALRM); null or <= "
        "0: no limit."
    )
    on_error: str = fld(
        "error", "A row whose reward function raises, overruns the timeout, or returns a non-number / NaN: error "
        "(stop with one line naming the function, its file, the row and its data_source); zero (score it 0 and "
        "count it: reward_extra/reward_failed/mean, the share of failed rows, and a warning per step or validation; "
        "a step or validation whose every row fails stops the run all the same, naming the first failure: a broken "
        "function, not a model with nothing to learn).", choices=("error", "zero"),
    )
    # The names registered in rft.rewards.REWARD_FN_TYPES (a test keeps the two equal).
    reward_fn_type: Optional[str] = fld(
        None, "A reward function by type, rft's own implementation of Trinity-RFT's default_reward_fn_type under its "
        "names: math_reward (math-verify equivalence of the answer + a +-0.1 think/answer format score), "
        "accuracy_reward (math-verify, LaTeX answers), math_boxed_reward / math_dapo_reward (the last \\boxed{}), "
        "math_verify_reward (RM-Gallery's: math-verify on the whole response), bots_math_boxed_reward (Trinity's BOTS "
        "example: the answer its math grader reads, checked with math-verify), math_boxed_reward_naive_dapo (its GURU "
        "benchmark's: the last \\boxed{} after </think>, math-verify), "
        "format_reward (+-0.1 for <think>/<answer> tags), countdown_reward (the Countdown equation: 1.0 / 0.1 / 0). "
        "Its parts are logged as reward_extra/<part>/mean; the data_source is not read. null: the built-in scorer by "
        "data_source, or path / name. Not with path (one reward function per run); reward_weights then holds one "
        "weight; llm_judge: a judge model's verdict (one of workflow.auxiliary_models, settings in reward_kwargs). "
        "Rules and where rft differs from Trinity: docs/rewards.md.",
        choices=(None, "math_reward", "accuracy_reward", "math_boxed_reward", "math_dapo_reward", "math_verify_reward",
                 "bots_math_boxed_reward", "math_boxed_reward_naive_dapo", "format_reward", "countdown_reward",
                 "llm_judge"),
    )
    reward_kwargs: Dict[str, Any] = fld(
        {}, "Keyword arguments of the reward function (verl's custom_reward_function.reward_kwargs): passed on every "
        "call of the functions of path, overriding what the call passes. llm_judge's settings: model (the index in "
        "workflow.auxiliary_models, 0) or base_url (a served judge's OpenAI-compatible endpoint, with model_name, "
        "max_tokens 16, timeout: seconds per call, a cut call counted in judge_timeout), template (with {question}, "
        "{reference}, {response}), scoring (yes_no | scale), max_score (scale: the top of the scale, 10), "
        "judge_weight (1.0) and rule_weight (0.0: the built-in scorer of the row's data_source, added with it)."
    )
    num_workers: Optional[int] = fld(
        None, "Processes that score a batch's rows side by side, for the typed rewards whose calls cost milliseconds "
        "(the math-verify ones; every other reward function runs in the trainer's process), each call under timeout; "
        "used when a batch gives each process at least 16 rows. null: the CPU cores this process may use, at most 8; "
        "1: in process."
    )


@dataclass
class KLCtrlConfig:
    type: str = fld("fixed", "In-reward KL controller.", choices=("fixed", "adaptive"))
    kl_coef: float = fld(0.001, "(Initial) coefficient of the in-reward KL penalty.")
    horizon: int = fld(10000, "adaptive: steps over which the coefficient moves.")
    target_kl: float = fld(0.1, "adaptive: the KL the controller steers to.")


@dataclass
class FilterGroupsConfig:
    enable: bool = fld(False, "DAPO's dynamic sampling: drop the groups whose metric values all agree and keep "
                              "generating batches until data.train_batch_size groups are kept.")
    metric: Optional[str] = fld(None, "Per-response value a group must vary in: score (the reward function's score), "
                                      "seq_reward / seq_final_reward (score plus the overlong penalty), or a numeric "
                                      "key the reward function returns (e.g. acc). Required when enabled.")
    max_num_gen_batches: int = fld(0, "Generation batches per step before giving up with an error; <= 0: no limit "
                                      "(verl's semantics).")


@dataclass
class PFPPOConfig:
    reweight_method: str = fld(
        "pow", "How a row's score weighs its draw: pow (|score| ** weight_pow), max_min (only the batch's best and "
        "worst scores), max_random (the best 0.4, the others 0.1); verl's names.", choices=("pow", "max_min",
                                                                                          "max_random"))
    weight_pow: float = fld(2.0, "The exponent of reweight_method=pow.")


@dataclass
class RolloutCorrectionConfig:
    rollout_is: Optional[str] = fld(
        None, "Importance weights pi_old / pi_rollout multiplied into the policy loss: token (per token) or sequence "
        "(the product over the response, on each of its tokens); null: none. Needs the rollout's log-probs (the hf "
        "engine records them) and makes the old log-probs be computed (docs/algorithms.md).",
        choices=(None, "token", "sequence"),
    )
    rollout_is_threshold: Any = fld(
        2.0, "A number (or a number as a string): the weights are truncated at it (TIS); a 'lower_upper' string "
        "(e.g. '0.5_5.0'): weights outside [lower, upper] become 0 (IcePop)."
    )
    rollout_is_batch_normalize: bool = fld(
        False, "Divide the weights by their mean over the batch (token level: over the tokens; sequence level: over "
        "the sequences), so they average 1."
    )
    rollout_rs: Optional[str] = fld(
        None, "Rejection sampling: tokens or sequences whose divergence from the rollout passes a threshold leave the "
        "loss. Comma separated options: token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3, seq_max_k2/k3 "
        "(k1 = -log ratio, k2 = (log ratio)^2 / 2, k3 = ratio - 1 - log ratio); null: none."
    )
    rollout_rs_threshold: Any = fld(
        None, "Thresholds of rollout_rs, one per option (comma separated) or one for all: a k1 option takes ratio "
        "bounds 'lower_upper' or one number u for (1/u, u); k2 / k3 options one upper bound. Required with rollout_rs."
    )
    bypass_mode: bool = fld(
        False, "Skip the old log-prob pass: the rollout's log-probs are the old ones, and the policy loss is verl's "
        "bypass_mode (policy_loss.loss_mode vanilla or bypass_mode), which computes the weights and the rejection "
        "above against the current policy in each micro-batch."
    )
    loss_type: str = fld(
        "ppo_clip", "bypass_mode's loss: ppo_clip (PPO's clipped ratio to the rollout; the weights are not applied) "
        "or reinforce (-A * weight * logp, no clip).", choices=("ppo_clip", "reinforce"),
    )


@dataclass
class EntropyClipConfig:
    mode: Optional[str] = fld(
        None, "An entropy-guided token filter after the advantages (Trinity-RFT's clipb / clipv advantage "
        "functions, arXiv:2602.03392; docs/algorithms.md): some response tokens of negative advantage leave the loss "
        "and its normaliser, chosen by the old policy's entropy statistics at each token (so the old log-prob pass "
        "runs and computes them). clipb: the tokens whose S = p (H + log p) lies more than mu stds below the "
        "batch's mean; clipv: those whose N - S (N the expected S under the token's distribution) exceeds mu stds, "
        "capped at max_frac of the tokens. null: no filter.", choices=(None, "clipb", "clipv"))
    mu: Optional[float] = fld(
        None, "The bound in stds (> 0); null: the mode's default (Trinity-RFT's: clipb 2.5, clipv 8.5).")
    max_frac: float = fld(
        1e-4, "clipv: the most tokens it drops, as a share of the batch's response tokens (at least one token).")


@dataclass
class MixConfig:
    enable: bool = fld(
        False, "Trinity-RFT's mix: each mini-batch of experiences gets expert rows (data.expert) at expert_data_ratio; "
        "loss = (1 - mu) * policy loss (on the experiences) + mu * SFT loss (on the expert rows), each with the "
        "mini-batch's normaliser of its own rows (docs/algorithms.md). The entropy and KL terms cover the experiences.")
    mu: float = fld(0.1, "The SFT loss's weight, in [0, 1] (Trinity-RFT's policy_loss_fn_args.mu).")
    expert_data_ratio: float = fld(
        0.5, "The expert rows' share of each mini-batch, in [0, 1): a mini-batch of U experiences gets "
        "E = ceil(ratio * U / (1 - ratio)) expert rows, so E = ceil(ratio * (U + E)) as in Trinity-RFT's mix "
        "sample strategy.")
    sft_loss_agg_mode: str = fld(
        "token-mean", "The SFT loss's aggregation over the mini-batch's expert rows: token-mean (Trinity-RFT's "
        "use_token_level_loss_in_sft=true) or seq-mean-token-mean (false).",
        choices=("token-mean", "seq-mean-token-mean"))
    mu_valley: Optional[float] = fld(
        None, "CHORD (Trinity-RFT's mix_chord): mu follows a schedule instead of staying constant: from 0 up to mu "
        "(the peak) linearly over mu_warmup_steps, then a cosine decay to mu_valley over mu_decay_steps, then "
        "mu_valley (step: the trainer step, from 1; docs/algorithms.md). null: mu is constant.")
    mu_warmup_steps: int = fld(0, "CHORD: the steps of mu's linear warm-up (needs mu_valley).")
    mu_decay_steps: int = fld(0, "CHORD: the steps of mu's cosine decay from mu to mu_valley (needs mu_valley).")
    sft_token_weight: str = fld(
        "none", "The SFT loss's per-token weight on the expert rows: none (-log p) or phi (CHORD-phi: -log p x "
        "p (1 - p), p detached, which downweights the tokens the policy is already sure or hopeless about; "
        "Trinity-RFT's enable_phi_function).", choices=("none", "phi"))


@dataclass
class AlgorithmConfig:
    gamma: float = fld(1.0, "Discount factor of returns.")
    lam: float = fld(1.0, "GAE lambda.")
    adv_estimator: str = fld(
        "grpo",
        "Advantage estimator (formulas and papers: docs/algorithms.md). gae builds a critic (critic.*); gdpo needs "
        "gdpo_reward_keys; optimal_token_baseline / tir_optimal_token_baseline need "
        "actor_rollout_ref.actor.calculate_sum_pi_squared=true.",
        choices=ADV_ESTIMATOR_NAMES,
    )
    norm_adv_by_std_in_grpo: bool = fld(
        True, "grpo, grpo_passk, gdpo (each reward dimension), rec (the population std): divide by the group std + "
        "1e-6 (false: Dr. GRPO's mean-centred advantage; verl's trainer does not pass it to gdpo, "
        "docs/algorithms.md)."
    )
    scale_rewards: Optional[str] = fld(
        None,
        "grpo with TRL's GRPOTrainer semantics: (score - group mean) / (std + 1e-4), the std taken over the group "
        "(group), over the whole batch (batch), or no division (none); null: verl's grpo "
        "(norm_adv_by_std_in_grpo, 1e-6).",
        choices=(None, "group", "batch", "none"),
    )
    opmd_baseline: str = fld(
        "mean", "opmd: the group baseline, the mean or tau * log mean exp(score / tau) (Trinity-RFT's names).",
        choices=("mean", "logavgexp"),
    )
    tau: float = fld(1.0, "opmd with opmd_baseline=logavgexp: the temperature (> 0).")
    baseline_shift: float = fld(-0.1, "asymre: baseline = group mean + baseline_shift (Trinity-RFT's default -0.1).")
    std_threshold: Optional[float] = fld(
        None, "grpo: the groups whose score std is at most this (and groups of one) are left out of the loss "
        "(Trinity-RFT's std_threshold); null: every group trains.")
    std_cal_level: str = fld(
        "group", "grpo (verl's semantics): divide by the group's std, or by the std of the whole batch's scores "
        "(batch; Trinity-RFT's std_cal_level); the mean is the group's either way.", choices=("group", "batch"))
    use_kl_in_reward: bool = fld(False, "Subtract kl_ctrl.kl_coef * KL from the token rewards (classic PPO).")
    kl_penalty: str = fld(
        "kl",
        "KL estimator of the in-reward penalty (names as actor.kl_loss_type; full is computed in the ref phase).",
        choices=KL_ESTIMATOR_NAMES,
    )
    kl_ctrl: KLCtrlConfig = sub(KLCtrlConfig, "In-reward KL controller.")
    filter_groups: FilterGroupsConfig = sub(FilterGroupsConfig, "DAPO's dynamic sampling (verl's DAPO recipe keys).")
    use_pf_ppo: bool = fld(
        False, "PF-PPO (policy filtration, arXiv:2409.06957): after the advantages, the batch is resampled with "
        "replacement, each row weighted by its score (pf_ppo), and the critic and the actor update on the draw. As "
        "in verl, only adv_estimator=gae resamples (another estimator: no effect, noted); one process only.")
    pf_ppo: PFPPOConfig = sub(PFPPOConfig, "PF-PPO's weighting (verl's keys).")
    rollout_correction: RolloutCorrectionConfig = sub(
        RolloutCorrectionConfig, "Off-policy correction between the rollout policy and the trained one (verl's keys).")
    gdpo_reward_keys: Optional[List[str]] = fld(
        None, "gdpo: the reward dimensions, keys of the reward function's returned dict (or the names of several "
        "reward functions, custom_reward_function.name); each is normalised in its group on its own. Required with "
        "adv_estimator=gdpo."
    )
    gdpo_reward_weights: Optional[List[float]] = fld(
        None, "gdpo: one weight per gdpo_reward_keys entry for the sum of the normalised dimensions; null: all 1."
    )
    mix: MixConfig = sub(MixConfig, "RL experiences plus expert SFT rows (Trinity-RFT's mix algorithm).")
    entropy_clip: EntropyClipConfig = sub(
        EntropyClipConfig, "Entropy-guided token filters (Trinity-RFT's clipb / clipv; rft's own keys).")


@dataclass
class CriticModelConfig:
    path: Optional[str] = fld(
        None, "Hugging Face folder the value model starts from: a causal LM (its backbone, plus a new one-label head), "
        "a saved rft critic or a reward model (their head loads too); null: the policy's path.",
        model="folder")
    tokenizer_path: Optional[str] = fld(
        None, "Tokenizer saved with the exported critic; null: the policy's. The critic reads the policy's token ids, "
        "so a tokenizer given here must have the policy's vocabulary (checked when loading).",
        model="tokenizer")
    external_lib: Optional[str] = fld(None, "Python module imported before loading (registers custom models).")
    override_config: Dict[str, Any] = fld({}, "Attributes set on the value model's config when loading.")
    enable_gradient_checkpointing: bool = fld(False, "Recompute activations in the backward pass to save memory.")
    enable_activation_offload: bool = fld(False, ACTIVATION_OFFLOAD_HELP)
    trust_remote_code: bool = fld(False, "Allow the model folder's own Python code.")
    use_remove_padding: bool = fld(True, "The critic's passes on packed tokens (as actor_rollout_ref.model."
                                   "use_remove_padding, on by default as that is): the same values and gradient as "
                                   "the padded passes.")
    use_shm: bool = fld(False, "Copy the model to shared memory first (verl: faster loading).",
                        unsupported="shared-memory model loading", also=(ANY_VALUE,))
    lora_rank: int = fld(0, "LoRA rank; 0 trains all parameters, > 0 trains a LoRA adapter and the value head in full.")
    lora_alpha: int = fld(16, "LoRA alpha (the adapter is scaled by alpha / rank).")
    target_modules: Any = fld(
        "all-linear", "LoRA target modules: 'all-linear', a list of module names, or a regex string (never the head)."
    )
    exclude_modules: Any = fld(None, "Modules excluded from LoRA: a list of names or a regex string.")
    freeze_vision_tower: Optional[bool] = fld(
        None, "A vision-language value model's vision tower (and its projector) left out of the critic's training "
        "(rft's key; verl's critic has none); null: actor_rollout_ref.model.freeze_vision_tower. Without a vision "
        "tower: no effect.")
    fsdp_config: FSDPConfig = sub(FSDPConfig, "FSDP settings of the critic.")


@dataclass
class CriticOptimConfig(OptimConfig):
    lr: float = fld(1e-5, "Peak learning rate of the critic's AdamW.")


@dataclass
class CriticConfig:
    enable: Optional[bool] = fld(
        None, "Build a critic (value model): null: when the advantage estimator needs values (gae); true: always "
        "(trained on the estimator's returns); false: never (refused with gae)."
    )
    strategy: str = fld("fsdp", STRATEGY_HELP + " The critic's own setting.", choices=("fsdp", "fsdp2"))
    rollout_n: Optional[int] = fld(None, "Must equal actor_rollout_ref.rollout.n when set (verl's interpolation).")
    optim: CriticOptimConfig = sub(CriticOptimConfig, "The critic's optimizer and learning-rate schedule.")
    model: CriticModelConfig = sub(CriticModelConfig, "The value model.")
    ppo_mini_batch_size: Optional[int] = fld(
        None, "Prompts per critic optimizer step (global); null: actor.ppo_mini_batch_size."
    )
    ppo_micro_batch_size: Optional[int] = fld(
        None, "Deprecated global micro batch in rows; use ppo_micro_batch_size_per_gpu."
    )
    ppo_micro_batch_size_per_gpu: Optional[int] = fld(
        None, "Rows per critic forward/backward pass in one process (gradient accumulation); null: the whole "
        "mini-batch."
    )
    forward_micro_batch_size: Optional[int] = fld(
        None, "Deprecated; use forward_micro_batch_size_per_gpu."
    )
    forward_micro_batch_size_per_gpu: Optional[int] = fld(
        None, "Rows per no-gradient value pass (the old values); null: ppo_micro_batch_size_per_gpu."
    )
    use_dynamic_bsz: bool = fld(False, "Critic micro-batches by token count (ppo_max_token_len_per_gpu per update "
                                "pass, forward_max_token_len_per_gpu per value pass); the gradient is unchanged.")
    ppo_max_token_len_per_gpu: int = fld(32768, "Real tokens per critic forward/backward pass with use_dynamic_bsz.")
    forward_max_token_len_per_gpu: int = fld(32768, "Real tokens per no-gradient value pass with use_dynamic_bsz.")
    ulysses_sequence_parallel_size: Optional[int] = fld(
        None, "The critic's sequence parallelism: the actor's (null) or 1 (each process of the actor's groups "
        "computes the whole sequences; the critic trains on the actor's data split).")
    ppo_epochs: Optional[int] = fld(None, "Passes over one batch of rollouts; null: actor.ppo_epochs.")
    shuffle: Optional[bool] = fld(None, "Shuffle groups between mini-batches each epoch; null: actor.shuffle.")
    grad_clip: float = fld(1.0, "Clip the critic's global gradient norm to this value (<= 0: no clipping).")
    cliprange_value: float = fld(
        0.5, "Value clip range c (> 0): loss = 0.5 * max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2)."
    )
    loss_agg_mode: Optional[str] = fld(
        None, "Aggregation of the value loss (names as actor.loss_agg_mode, the mini-batch's normaliser); null: "
        "actor.loss_agg_mode.", choices=(None, *LOSS_AGG_MODE_NAMES),
    )
    loss_scale_factor: Optional[int] = fld(
        None, "seq-mean-token-sum-norm of the value loss: the constant each sequence's token sum is divided by "
        "(> 0); null: actor.loss_scale_factor (verl's interpolation), else data.max_response_length."
    )
    checkpoint: ActorCheckpointConfig = sub(
        ActorCheckpointConfig, "What the critic's part of a checkpoint (global_step_N/critic/) holds: model, "
        "optimizer, extra (its scheduler), hf_model."
    )


@dataclass
class TrainerConfig:
    total_epochs: int = fld(30, "Passes over the training prompts (bounded by total_training_steps).")
    total_training_steps: Optional[int] = fld(None, "Stop after this many steps; null: total_epochs worth.")
    project_name: str = fld("rft", "Project name (loggers).")
    experiment_name: str = fld("run", "Experiment name (loggers).")
    logger: List[str] = fld(["console"], LOGGER_HELP)
    monitor_args: Dict[str, Any] = fld({}, MONITOR_ARGS_HELP)
    log_val_generations: int = fld(
        0, "Validation samples (prompt, response, score) logged per validation as a table by every monitor (file: "
        "val_generations.jsonl; console: printed; tensorboard: text; mlflow: val_generations.json; wandb: a Table "
        "val/generations).")
    log_freq: Optional[int] = fld(
        None, "Print a metrics line every N steps when the console is not a terminal; null: about 20 over the run. "
        "metrics.jsonl always holds every step."
    )
    log_level: str = fld("INFO", LOG_LEVEL_HELP, choices=LOG_LEVELS)
    log_group_by_node: bool = fld(False, LOG_GROUP_BY_NODE_HELP)
    nnodes: int = fld(1, "Nodes; > 1 needs torchrun on every node (docs/scaling.md).")
    n_gpus_per_node: int = fld(
        1, "Processes per node, one per GPU (NCCL); without CUDA as many CPU processes (gloo, one thread each). "
        "nnodes x n_gpus_per_node > 1: `rft train` starts them itself on one node (torch's elastic launcher); "
        "data.train_batch_size and ppo_mini_batch_size stay global."
    )
    device: str = fld("auto", "auto (cuda when available), cpu or cuda.", choices=("auto", "cpu", "cuda"))
    seed: int = fld(0, "Seed of sampling, initialisation and mini-batch shuffles.")
    save_freq: int = fld(-1, "Save a checkpoint every N steps and at the last step; <= 0: no checkpoints (the final model is still written).")
    val_before_train: bool = fld(True, "Validate before the first step.")
    val_only: bool = fld(
        False, "Validate the model the run starts from (the starting model, or the checkpoint it resumes from) on "
        "data.val_files, write the metrics to <default_local_dir>/val_only.json and stop without training (verl's "
        "key and meaning: its validation before training, then exit; needs val_before_train and data.val_files). "
        "The one-loop run only (trainer.mode both, synchronizer.sync_interval 1, sync_offset 0); trainer.mode bench "
        "evaluates a run's checkpoints.")
    test_freq: int = fld(-1, "Validate every N steps and after the last step; <= 0: never during training.")
    critic_warmup: int = fld(
        0, "The first critic_warmup steps train only the critic; the actor is updated from step critic_warmup + 1."
    )
    default_hdfs_dir: Optional[str] = fld(None, HDFS_HELP + " hdfs:// URLs are refused (no Hadoop client).")
    default_local_dir: str = fld(
        "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
        "Output root: checkpoints/, model/, metrics.jsonl, config.yaml, numerics.json.",
    )
    resume_mode: str = fld(
        "auto", "auto: resume from the latest checkpoint if any; disable; resume_path: from resume_from_path.",
        choices=("auto", "disable", "resume_path"),
    )
    resume_from_path: Optional[str] = fld(None, "A global_step_N folder (with resume_mode=resume_path).")
    remove_previous_ckpt_in_save: bool = fld(False, "Keep only the newest checkpoint.")
    del_local_ckpt_after_load: bool = fld(False, "Delete the checkpoint folder after resuming from it.")
    max_actor_ckpt_to_keep: Optional[int] = fld(None, "Keep at most this many checkpoints; null: all.")
    max_critic_ckpt_to_keep: Optional[int] = fld(
        None, "Critic checkpoints to keep. The critic is saved inside each global_step_N folder (critic/), so "
        "max_actor_ckpt_to_keep keeps both: when set, it must equal max_actor_ckpt_to_keep."
    )
    ray_wait_register_center_timeout: int = fld(
        300, "With Ray (ray_init): seconds to wait for the cluster to grant the run's placement (docs/cluster.md). "
             "Without Ray: no effect.")
    balance_batch: bool = fld(
        True, "Several processes: deal each mini-batch's prompts to the ranks so that their prompt tokens are "
        "balanced (longest first to the rank with the fewest, equal counts per rank), instead of contiguous "
        "shares. Every mini-batch keeps its set of prompts, so the gradient is unchanged. verl balances after "
        "generation by prompt + response length; rft balances before, by prompt length. One process: nothing to "
        "balance.")
    bad_update_limit: int = fld(3, BAD_UPDATES_HELP.replace("<prefix>", "actor|critic"))
    mode: str = fld(
        "both",
        "What this command runs (Trinity-RFT's modes): both (explorer and trainer; in one process when synchronizer."
        "sync_interval is 1 and sync_offset 0, else as two processes, the explorer running ahead); explore (only "
        "write experiences to the experience buffer); train (only read them); bench (evaluate the starting model "
        "and the saved checkpoints on data.val_files, metrics in <out>/bench/metrics.jsonl).",
        choices=("both", "explore", "train", "bench"),
    )
    bench_on_latest_checkpoint: bool = fld(
        False, "mode bench: evaluate only the newest checkpoint (and the starting model with val_before_train)."
    )
    explorer_num: int = fld(
        1, "Explorers writing to one buffer (Trinity-RFT's explorer.rollout_model.engine_num): explore step n is "
           "explorer (n - 1) % explorer_num's, so each task is drawn by exactly one. Mode both starts that many "
           "explorer processes; with mode explore, run one command per explorer_rank (on any machines) against one "
           "SQL buffer. > 1 needs a database buffer and file tasksets; mode both's weights go by sync files "
           "(sync_method checkpoint, the default) or a broadcast to each explorer (gloo / nccl) (docs/scaling.md).")
    explorer_rank: int = fld(
        0, "Which of the explorer_num explorers this command is (mode explore; mode both sets it for its explorer "
           "processes). Explorer 0 also runs the validation.")


# ------------------------------------------------------------------------------- explorer / buffer / synchronizer
@dataclass
class ExperienceBufferConfig:
    storage_type: str = fld(
        "queue",
        "Where experiences go from the explorer to the trainer (Trinity-RFT's storage types): queue (FIFO; in "
        "memory in one process, in a SQLite file when path is set or explorer and trainer are two processes), sql "
        "(SQLAlchemy: a SQLite file or any database URL, e.g. PostgreSQL for several machines), file (jsonl, "
        "written by mode explore for people to read; not read back).",
        choices=("queue", "sql", "file"),
    )
    path: Optional[str] = fld(
        None,
        "queue / sql: a SQLAlchemy URL (sqlite:///buffer.db, postgresql://user@host/db) or a SQLite file path; "
        "null: queue in memory (one process) or <out>/buffer.sqlite. file: a folder for experiences.jsonl "
        "(null: <out>/experiences).",
    )
    max_read_timeout: float = fld(
        1800.0, "Seconds the trainer waits for a full batch of experiences; after it, the rows that arrived train "
                "as a partial batch (counted in buffer/partial_reads). > 0.")
    train_batch_size: Optional[int] = fld(
        None, "Experiences one trainer step reads from the buffer (Trinity-RFT's buffer.train_batch_size: workflows "
              "that make several experiences a task, one per turn or per agent); whole groups, so a step may read a "
              "few more. null: every experience of an explore step (data.train_batch_size x rollout.n). Set, mode "
              "both runs the explorer as a process of its own (as Trinity does) and the steps of the two count "
              "apart: a trainer step waits for its experiences (max_read_timeout, then a partial read), and each "
              "explore step (mode explore too: give its command the same value) takes the newest weights published, "
              "through sync files (Trinity-RFT's explorer_driven).")
    use_priority_queue: bool = fld(
        False, "Read groups by priority instead of FIFO: model_version - priority_decay x times read (Trinity-RFT's "
               "linear_decay), highest first.")
    reuse_cooldown_time: Optional[float] = fld(
        None, "With use_priority_queue: seconds after which a group that was read may be read again (experience "
              "replay); null: every experience is read once.")
    priority_decay: float = fld(2.0, "With use_priority_queue: how much each read lowers a group's priority (>= 0).")
    priority_use_count_limit: Optional[int] = fld(
        None, "With reuse_cooldown_time: a group read this many times is not read again (Trinity-RFT's "
              "decay_limit_randomization use_count_limit); null: no limit.")
    priority_sigma: float = fld(
        0.0, "With use_priority_queue: the standard deviation of Gaussian noise added to a group's priority, one "
             "draw each time it enters the queue (written, or back after a read; Trinity-RFT's "
             "decay_limit_randomization sigma); 0: none.")
    max_staleness: Optional[int] = fld(
        None, "Groups generated by weights more than this many trainer steps older than the trainer's are "
              "dropped (stale_policy drop, counted in rollout/staleness/dropped) or down-weighted; null: no bound.")
    stale_policy: str = fld(
        "drop", "What max_staleness does to a group s > max_staleness steps stale: drop it (it is consumed, not "
                "trained), or downweight its loss by max_staleness / s.", choices=("drop", "downweight"))


@dataclass
class SynchronizerConfig:
    sync_method: Optional[str] = fld(
        None,
        "How weights travel from trainer to explorer: memory (one process: the explorer samples from the trained "
        "model itself), checkpoint (the trainer writes them under <out>/sync/, the explorer loads the version it "
        "needs: modes explore / train, or both as two processes), gloo (a torch.distributed broadcast between the "
        "two processes of mode both, over a gloo group through host memory, on GPUs too). nccl: Trinity-RFT's name "
        "for a GPU-to-GPU NCCL broadcast, which rft does not have: it runs gloo and says so. null: memory in one "
        "process, gloo for two processes of mode both, checkpoint for modes explore / train. With sync_interval 1 "
        "and sync_offset 0 explorer and trainer take strict turns, which rft runs in one process sharing the model "
        "whatever is named here (the same weights every step, nothing copied).",
        choices=(None, "memory", "checkpoint", "gloo", "nccl"),
    )
    sync_interval: int = fld(
        1, "The trainer publishes its weights every sync_interval steps; the explorer takes them after its steps "
           "sync_offset + k x sync_interval. 1 with sync_offset 0: on-policy, explorer and trainer in one process.")
    sync_offset: int = fld(
        0, "Explore steps the explorer runs ahead before the first sync (>= 0): the experiences of explore step n "
           "are (n - 1) - v(n) trainer steps stale, v(n) = sync_interval x floor((n - sync_offset - 1) / "
           "sync_interval).")
    sync_timeout: float = fld(
        1200.0, "Seconds either side waits for the other at a sync (the explorer for new weights, the trainer for "
                "the explorer to take them) before stopping with an error. > 0.")


@dataclass
class AsyncTrainingConfig:
    """verl's fully-async recipe (recipe.fully_async_policy), read with actor_rollout_ref.rollout.mode=async: the
    explorer streams groups through the engine server (docs/rollout.md, "Streaming in training")."""
    staleness_threshold: Optional[float] = fld(
        None, "verl's freshness bound: with actor_rollout_ref.rollout.mode=async the explorer streams, keeping up to "
              "(1 + staleness_threshold) x data.train_batch_size groups started and not yet trained (verl: samples "
              "before a parameter sync), new tasks sent as groups finish; each step trains the first "
              "data.train_batch_size complete groups. null: no streaming (each step generates its own batch). >= 0.")
    partial_rollout: bool = fld(
        True, "verl's: requests still running when the weights change go on with the new weights from their next "
              "decode step, each token keeping the version that drew it; false: the sync waits for them to finish. "
              "rollout.name vllm takes false only (vLLM cannot reload its weights under requests in flight).")
    deterministic: bool = fld(
        False, "rft's own (verl and Trinity-RFT have none): groups trained in task order, not completion order; each "
               "step's new tasks go to the server as one seeded request, finished before the weights change (no "
               "partial rollouts), so two runs with one seed are bitwise equal and a resumed run ends with the "
               "uninterrupted one's weights. Costs the rows that finish early waiting for their step's request.")
    trigger_parameter_sync_step: int = fld(
        1, "verl's: trainer steps between two parameter syncs.",
        unsupported="rft syncs the engine server after every trainer step")
    require_batches: int = fld(
        1, "verl's: ppo mini-batches the trainer fetches at once.",
        unsupported="a streaming step trains data.train_batch_size groups, its mini-batches as a step's")


@dataclass
class WorkflowConfig:
    type: str = fld(
        "simple_workflow",
        "How a task becomes experiences (Trinity-RFT's default_workflow_type): simple_workflow (one chat turn per "
        "sample: rft's batched default), math_workflow (the same with a think / answer system prompt), "
        "tool_call_workflow (multi-turn tool use), or a workflow registered in the file `path`.",
    )
    path: Optional[str] = fld(None, "A Python file whose classes register workflows (rft.explorer.workflow."
                                    "register_workflow), or a folder of them (Trinity-RFT's plugin folder; the "
                                    "Trinity dialect reads TRINITY_PLUGIN_DIRS); loaded in the explorer.")
    args: Dict[str, Any] = fld({}, "The workflow's arguments (Trinity's workflow_args): tool_call_workflow takes "
                                   "max_turns, max_user_turns, tool_call_parser, tools_path, tool_timeout; "
                                   "simple_workflow and math_workflow none; others are refused for built-in "
                                   "workflows (a user workflow reads what it likes).")
    runner_per_model: int = fld(8, "Workflows run at once (threads; their model calls batch together).")
    max_timeout: float = fld(900.0, "Seconds a workflow may run on one task before it is cut (then retried).")
    max_retry_times: int = fld(2, "Retries of a task whose workflow timed out, raised or returned garbage, before "
                                  "the task is skipped (counted in workflow/skipped_tasks).")
    env_vars: Dict[str, str] = fld({}, "Environment variables set in the explorer's process, where the workflows "
                                       "run, before the first one starts.")
    enable_history: bool = fld(
        False, "Record every model call of a workflow (its own or through the OpenAI-compatible endpoint) for "
               "model.extract_experience_from_history(); turns the endpoint on (Trinity's rollout_model."
               "enable_history).")
    endpoint: bool = fld(False, "Serve the explorer's model on 127.0.0.1 as an OpenAI-compatible API for the "
                                "workflows (model.get_openai_client()); on with enable_history.")
    endpoint_port: int = fld(0, "The endpoint's port; 0: a free one.")
    tool_call_parser: Optional[str] = fld(
        None, "How tool calls are found in a reply: the endpoint's for `tools` requests, and tool_call_workflow's "
              "unless workflow.args names its own; null: the model's family, read from its chat template and tokens "
              "(docs/workflows.md).",
        choices=(None, "hermes", "pythonic", "mistral", "llama3_json", "deepseek_v3"))
    reasoning_parser: Optional[str] = fld(
        None, "vLLM's reasoning parser for the endpoint's chat replies: the thinking (`<think>...</think>`) returned "
              "apart as the message's `reasoning` / `reasoning_content`, the rest as its `content` (tool calls are "
              "read from the rest). deepseek_r1: a reply without `</think>` is all thinking (its template opens "
              "the thinking); qwen3: a reply without `</think>` is all content. null: the whole reply is the "
              "content.", choices=(None, "deepseek_r1", "qwen3"))
    tool_config_path: Optional[str] = fld(
        None, "A YAML file of tools in verl's tool-config format (verl's actor_rollout_ref.rollout.multi_turn."
              "tool_config_path: `tools:` a list of {class_name, config, tool_schema}); tool_call_workflow declares "
              "each tool_schema (an OpenAI function schema) to the model on every task, after the row's own tools, "
              "and runs a call with rft's tool of that function name (built in, or in workflow.args.tools_path); a "
              "tool rft has no function for is refused by its class_name before the model loads.")
    interaction_config_path: Optional[str] = fld(
        None, "A YAML file of verl's interactions (verl's actor_rollout_ref.rollout.multi_turn."
              "interaction_config_path: `interaction:` a list of {name, class_name, config}): tool_call_workflow "
              "asks the row's interaction (extra_info.interaction_kwargs.name) for the user's turn after each reply "
              "without tool calls; its scores reach the reward function as extra_info['turn_scores'] "
              "(docs/workflows.md).")
    auxiliary_models: List[Any] = fld(
        [], "Further local models the workflows and the llm_judge reward use (Trinity's explorer.auxiliary_models): "
            "a list of {model_path, temperature?, max_tokens?}; each is served by the same hf engine, frozen. "
            "temperature: a number >= 0 (default 0, greedy); max_tokens: new tokens per reply, an integer >= 1 below "
            "the model's positions (default data.max_response_length), checked before any model loads.",
        model="list:model_path")


@dataclass
class ExperiencePipelineConfig:
    operators: List[Any] = fld(
        [], "Operators run in order over each explore step's experiences, after the rewards and before the buffer, so "
            "the trainer reads what they make of them (Trinity-RFT's experience_pipeline): a list of {name, args}. "
            "reward_shaping_mapper (args.reward_shaping_configs: a list of {stats_key, op_type ADD | SUB | MUL | DIV, "
            "weight}; the stat is the experience's info[stats_key], else its named reward value), "
            "pass_rate_calculator (each experience's info.pass_rate: its group's mean reward), data_juicer "
            "(Data-Juicer's filters: args.operators or args.config_path; their stats in info, the experiences they "
            "reject dropped). Each experience's info.operators names the operators it went through "
            "(docs/workflows.md).")


@dataclass
class TaskPipelineConfig:
    operators: List[Any] = fld(
        [], "Operators run in order over the tasks before exploring (Trinity-RFT's task_pipeline, Data-Juicer's "
            "operator names and arguments): a list of {name, args}. text_length_filter (args min_len 10, max_len, "
            "text_key: keep the tasks whose text has min_len <= characters <= max_len) runs in rft; any other name "
            "is a Data-Juicer filter run by Data-Juicer (data_processor.data_juicer: its environment), e.g. "
            "llm_difficulty_score_filter, whose api_or_hf_model a local model folder rft serves on 127.0.0.1. They "
            "read data.train_files (Trinity-RFT's task_pipeline.inputs) and write `output`, which the explorer reads "
            "as its taskset.")
    num_process: Optional[int] = fld(
        None, "Trinity-RFT's / Data-Juicer's np: the processes each Data-Juicer operator of the pipeline runs with "
              "(its num_proc unless its args name one; Data-Juicer lowers it to the CPUs and memory it finds). null: "
              "Data-Juicer's default. Refused for a pipeline without Data-Juicer operators.")
    target_fields: List[str] = fld(
        [], "The task fields the operators read (Data-Juicer's text_keys): the first is an operator's text unless "
            "its args name text_key; empty: data.prompt_key. A field holding chat messages reads as their contents "
            "joined by newlines.")
    output: Optional[str] = fld(
        None, "Where the kept tasks are written, a .parquet or .jsonl file; null: <default_local_dir>/task_pipeline/"
              "tasks.parquet.")


@dataclass
class DataJuicerServiceConfig:
    python: Optional[str] = fld(
        None, "The Python interpreter of the environment that holds py-data-juicer (`make data-juicer` builds "
              ".venv-dj); null: $RFT_DATA_JUICER_PYTHON. Data-Juicer cannot share rft's environment "
              "(docs/workflows.md).")
    server_url: Optional[str] = fld(
        None, "Trinity-RFT's service.data_juicer.server_url: the data_juicer operators send their rows to the "
              "Data-Juicer server there (rft's worker in its HTTP mode, `python -I .../dj_worker.py --port PORT`, "
              "run in the Data-Juicer environment). null: a worker process of the run, over pipes.")
    auto_start: bool = fld(
        False, "Trinity-RFT's service.data_juicer.auto_start: the run starts the Data-Juicer server itself on "
               "127.0.0.1:port and stops it when it ends; server_url, when given, must be that address.")
    port: int = fld(5005, "With auto_start: the port of the server the run starts (Trinity-RFT's default 5005).")


@dataclass
class DataProcessorConfig:
    task_pipeline: TaskPipelineConfig = sub(TaskPipelineConfig, "Operators over the tasks before exploring.")
    experience_pipeline: ExperiencePipelineConfig = sub(
        ExperiencePipelineConfig, "Operators over each explore step's experiences before they reach the buffer.")
    data_juicer: DataJuicerServiceConfig = sub(
        DataJuicerServiceConfig, "Where the data_juicer operators run Data-Juicer (Trinity-RFT's service.data_juicer).")


@dataclass
class RayInitConfig:
    address: Optional[str] = fld(
        None, "Run on a Ray cluster (docs/cluster.md; `pip install 'rft[ray]'`): `auto` (the cluster started on "
              "this machine, or RAY_ADDRESS) or HOST:PORT (the head's GCS port); ray.init's own argument, which verl "
              "passes through (Trinity-RFT: cluster.ray_address). null: no Ray, rft starts its processes itself.")
    num_cpus: Optional[int] = fld(
        None, "verl's key: without an address, rft starts a Ray instance of this many CPUs on this machine for the "
              "run; with an address it is refused (a running cluster's CPUs are `ray start --num-cpus`). null: no "
              "Ray of rft's own.")
    connect_timeout: float = fld(
        10.0, "With an address: seconds to reach the cluster before the run stops with one line; during the run, how "
              "long the cluster's head (its GCS) may stay silent before the run stops with one line (rft's key). > 0.")
    timeline_json_file: Optional[str] = fld(None, "Ray's timeline file.", unsupported="a Ray timeline")


@dataclass
class ExternalModelConfig:
    enable: bool = fld(
        False, "Mode bench evaluates a model behind an OpenAI-compatible API instead of a model folder (Trinity-RFT's "
        "model.external_model): no weights load, no tokenizer; each task of data.val_files sends its messages to the "
        "API's chat completions (val_kwargs' n, temperature, top_p; data.max_response_length new tokens) and the "
        "workflow scores the replies (a single-turn workflow: simple_workflow, math_workflow, math_boxed_workflow, "
        "bots_math_boxed_workflow); workflow.runner_per_model requests at a time, max_timeout seconds each, "
        "max_retry_times retries. `pip install 'rft[agents]'` (the openai client). trainer.mode bench only.")
    model_name: Optional[str] = fld(None, "The model the API serves (its `model` field); null: "
                                          "actor_rollout_ref.model.path, then a name, not a folder.")
    base_url_env: str = fld("OPENAI_BASE_URL", "The environment variable that holds the API's base URL (.../v1).")
    api_key_env: str = fld("OPENAI_API_KEY", "The environment variable that holds the API's key (unset: EMPTY, as "
                                             "a local vLLM server takes).")


@dataclass
class DistillationLossConfig:
    loss_mode: str = fld(
        "k1", "The per-token divergence of the student (the policy) from the teacher on the student's own samples: "
        "k1 (log p_student - log p_teacher of the sampled token: Thinking Machines' reverse-KL estimator), k3 "
        "(Schulman's low-variance estimator of the same KL), full (the exact reverse KL over the vocabulary), "
        "jsd (GKD's generalised Jensen-Shannon divergence with jsd_beta; docs/algorithms.md) or token_jsd (the "
        "sampled token's JSD estimate with jsd_beta, Trinity-RFT's jsd advantage; a per-token reward only).",
        choices=("k1", "k3", "full", "jsd", "token_jsd"))
    jsd_beta: float = fld(0.5, "jsd: GKD's beta in [0, 1] (TRL's GKDConfig.beta): 0 is the forward KL(teacher || "
                               "student), 1 the reverse KL(student || teacher), between them the JSD to the mixture.")
    use_policy_gradient: bool = fld(
        True, "true: the divergence is a per-token reward, -distillation_loss_coef x divergence added to each token's "
        "advantage (Thinking Machines' recipe; the policy loss carries it); false: it is a loss of its own, "
        "differentiated through the student's logits (GKD), added to the policy loss with distillation_loss_coef.")
    in_reward: bool = fld(
        False, "With use_policy_gradient: the -coef x divergence term goes into the token rewards before the "
        "advantage estimator (beside the task reward) instead of into the advantages after it (an rft key).")
    use_task_rewards: bool = fld(
        True, "Whether the task reward (reward function, reward model) also trains the policy; false: the teacher "
        "is the only signal (rft distill's default). The reward is still computed and logged.")
    distillation_loss_coef: float = fld(1.0, "The distillation term's weight.")


@dataclass
class TeacherModelConfig:
    model_path: Optional[str] = fld(
        None, "The teacher: a causal LM folder with the student's tokenizer (same vocabulary), frozen, run on each "
        "step's responses in one batched pass as the reference model is.", model="folder")


@dataclass
class DistillationConfig:
    enabled: bool = fld(False, "On-policy distillation: the student (the policy) samples, the teacher scores every "
                               "sampled token (verl's distillation section; docs/algorithms.md).")
    teacher_model: TeacherModelConfig = sub(TeacherModelConfig, "The teacher model.")
    distillation_loss: DistillationLossConfig = sub(DistillationLossConfig, "How the teacher's scores train the "
                                                                            "student.")


@dataclass
class RFTConfig:
    data: DataConfig = sub(DataConfig, "Prompts.")
    actor_rollout_ref: ActorRolloutRefConfig = sub(ActorRolloutRefConfig, "Policy, rollout and reference.")
    critic: CriticConfig = sub(CriticConfig, "Value model (PPO with gae). Defaults of null follow the actor.")
    reward_model: RewardModelConfig = sub(RewardModelConfig, "Model-based reward.")
    custom_reward_function: CustomRewardConfig = sub(CustomRewardConfig, "User reward function.")
    algorithm: AlgorithmConfig = sub(AlgorithmConfig, "Advantages and in-reward KL.")
    distillation: DistillationConfig = sub(DistillationConfig, "On-policy distillation from a teacher model.")
    trainer: TrainerConfig = sub(TrainerConfig, "The loop, logging and checkpoints.")
    experience_buffer: ExperienceBufferConfig = sub(
        ExperienceBufferConfig, "Where the explorer's experiences wait for the trainer (rft keys, Trinity-RFT's names).")
    synchronizer: SynchronizerConfig = sub(
        SynchronizerConfig, "When and how weights travel from trainer to explorer (rft keys, Trinity-RFT's names).")
    workflow: WorkflowConfig = sub(WorkflowConfig, "How the explorer turns tasks into experiences (rft keys, "
                                                   "Trinity-RFT's names).")
    data_processor: DataProcessorConfig = sub(
        DataProcessorConfig, "Operators over the tasks and over the experiences (rft keys, Trinity-RFT's names).")
    ray_init: RayInitConfig = sub(RayInitConfig, "Ray as the launcher (verl's section; docs/cluster.md).")
    external_model: ExternalModelConfig = sub(
        ExternalModelConfig, "A model behind an OpenAI-compatible API, evaluated in mode bench (rft keys, Trinity-RFT's "
                             "model.external_model; docs/modes.md).")
    async_training: AsyncTrainingConfig = sub(
        AsyncTrainingConfig, "Streaming rollouts in async mode (verl's fully-async recipe keys; docs/rollout.md).")
