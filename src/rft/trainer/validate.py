"""What `rft train`, `rft sft`, `rft dpo`, `rft generate` and `rft eval` check before any model loads, in order: each line one owner's check.

A check lives beside what it protects (`rft/<owner>/checks.py`) and is registered under `<owner>.<what>` in
`rft.config.checks.CHECKS`; this module is the one place that says which run kinds run which checks, and in which
order (the first problem is the one reported). A new check is registered beside its code and named here; a check
registered and named nowhere fails tests/test_layers.py.
"""

from __future__ import annotations

# Each subsystem's checks, registered on import.
import rft.algorithms.checks
import rft.buffer.checks
import rft.config.validate
import rft.data.checks
import rft.data_processor.checks
import rft.explorer.checks
import rft.models.checks
import rft.rewards.checks
import rft.rollout.checks
import rft.sync.checks
import rft.trainer.checks
import rft.workers.checks  # noqa: F401
from rft.config.checks import CheckContext, processes, run_checks, unused_keys
from rft.config.schema import RFTConfig

UNUSED_RL = (
    "rewards.reward_model",           # reward_model.* without reward_model.enable
    "rewards.sandbox_fusion",         # the sandbox's keys with another reward function than the built-in scorer
    "buffer.train_batch_size",        # a trainer's read, in mode bench
    "workers.critic",                 # critic.* when the run builds no critic
    "workers.reference",              # actor_rollout_ref.ref.* without a KL term
    "algorithms.kl",                  # kl_ctrl.*, kl_penalty without use_kl_in_reward; kl_loss_* without use_kl_loss
    "algorithms.distillation",        # distillation.* without distillation.enabled
    "algorithms.pf_ppo",              # pf_ppo.* without use_pf_ppo; use_pf_ppo without gae
    "algorithms.entropy_clip",        # entropy_clip.* without a mode; max_frac with clipb
    "data.selector",                  # data.shuffle / data.seed under a task selector
    "rollout.vllm",                   # the vLLM engine's keys with another engine
    "trainer.mix",                    # algorithm.mix.*, data.expert.* without mix
    "trainer.checkpoints",            # default_hdfs_dir, checkpoints kept, when save_freq <= 0 saves none
    "trainer.resume",                 # resume_from_path without resume_mode=resume_path
    "data_processor.data_juicer",     # where Data-Juicer runs, without a data_juicer operator
    "explorer.ground_truth",          # the response columns under a workflow that reads no reference answer
    "explorer.external_model",        # training keys under a bench of a model behind an API
)
"""The parts an RL run may not build: their keys have no effect (named in a note, never refused)."""

RL = (
    "config.schema",
    "models.hub_ids",                 # a Hugging Face Hub id: its folder in the local cache                  # choices, refused values; the unused parts' keys noted
    "data.inputs",                    # the model folder, the prompt files
    "explorer.external_model",        # a model behind an API: mode bench, a single-turn workflow
    "data.selector",                  # data.selector: its features and arguments, the runs it follows
    "trainer.sampler",                # data.sampler: a class of the user's, in the synchronous loop
    "data.template_kwargs",           # the chat template's variables
    "rewards.function",               # custom_reward_function: file, typed reward, names and weights
    "algorithms.names",               # estimator, policy loss, KL estimators registered
    "rollout.engine",                 # an engine rft has; vLLM installed, its keys in range
    "trainer.runtime",                # processes, device, loggers, resume
    "trainer.ray",                    # ray_init: an address or rft's own Ray instance, Ray installed
    "workers.sequence_parallel",      # sp divides the processes and the heads; what it cannot run with
    "config.processes",               # the batch splits over the processes
    "config.sizes",                   # positive sizes, mini / micro divisibility, one prompt / response length
    "algorithms.estimator",           # the group size and options an estimator needs
    "rollout.sampling",               # top_p, temperature, do_sample
    "rollout.kv_cache",               # the hf engine's KV cache fits in the memory free
    "workers.memory",                 # the weights, gradients and optimizer state fit in the memory free
    "algorithms.clip",                # clip ratios, dual clip
    "workers.actor_optim",            # learning rate, warm-up, an optimizer that runs here
    "workers.model_dtype",            # fsdp_config.model_dtype: a LoRA reference in the policy's
    "workers.offload",                # FSDP offload on cuda
    "workers.fsdp_layout",            # fsdp_size divides the processes; min_num_params >= 0
    "workers.activation_offload",     # enable_activation_offload noted on CPU
    "models.lora",                    # LoRA rank
    "workers.actor_checkpoint",       # what a checkpoint saves and loads
    "algorithms.loss_options",        # policy-loss options, loss scales, KL controller
    "algorithms.distillation",        # the distillation loss's options
    "models.teacher",                 # the teacher: a causal LM of the student's tokenizer
    "rewards.overlong_buffer",        # DAPO's overlong penalty
    "rewards.sandbox_fusion",         # the code scorer's sandbox URL and limits
    "explorer.filter_groups",         # DAPO's dynamic sampling
    "algorithms.rollout_correction",  # IS / rejection options, bypass mode
    "algorithms.pf_ppo",              # PF-PPO's resampling in one process
    "algorithms.entropy_clip",        # the entropy filter's bound and cap, the old pass it reads
    "workers.critic",                 # the critic's section, critic_warmup
    "rewards.reward_model",           # a reward model folder, its weights
    "explorer.taskset",               # a taskset stream or table
    "explorer.streaming",             # async_training: streaming through the engine server
    "sync.synchronizer",              # sync_interval, sync_offset, sync_timeout
    "buffer.experience_buffer",       # read time-out, priority replay, staleness
    "explorer.explorers",             # several explorers share a database buffer
    "explorer.selector",              # difficulty_based's feedback in one explorer process
    "trainer.modes",                  # trainer.mode with sync_method and the buffer
    "trainer.mix",                    # mix's expert rows
    "explorer.workflow",              # workflows, their arguments and tools
    "data_processor.task_pipeline",   # task operators rft has, their args, a file taskset
    "data_processor.experience_pipeline",  # experience operators rft has, their args
    "models.override_config",         # Megatron's MoE config refused
    "models.fused_kernels",           # the fused kernels' torch backend
    "rewards.reward_manager",         # the overlong buffer's manager, a reward time limit
    "trainer.checkpoint_copies",      # mirror folder, checkpoints kept
    "workers.entropy",                # one entropy setting
    "workers.schedule",               # the schedules' length
    "workers.guard",                  # bad optimizer steps before stopping
    "workers.token_budgets",          # use_dynamic_bsz's budgets hold a row
    "models.tokenizer",               # the tokenizer files
    "models.positions",               # a prompt and its response fit a learned position table
    "workers.vision",                 # what a vision-language policy does not run with yet
)
"""`rft train` (and every RL stage)."""

SFT = (
    "config.schema",
    "models.hub_ids",
    "trainer.sft",                    # model, data sizes, optimizer, trainer section
    "data.template_kwargs",
    "workers.sft_sequence_parallel",  # the groups divide the processes, the model's heads the group
    "config.sft_batch",               # the batch splits over processes and micro-batches
    "workers.sft_memory",             # the weights, gradients and optimizer state fit in the memory free
)
"""`rft sft` (and every SFT stage)."""

DPO = (
    "config.schema",
    "models.hub_ids",
    "trainer.dpo",                    # rft sft's sections, on one process
    "data.template_kwargs",
    "config.dpo_batch",               # pairs split into micro-batches
    "data.preference_columns",        # three different columns
    "algorithms.preference",          # beta, label smoothing, KL and entropy terms
    "workers.sft_memory",             # the weights, gradients, optimizer state and reference fit in the memory free
)
"""`rft dpo` (and every DPO stage)."""

RM = (
    "config.schema",
    "models.hub_ids",
    "trainer.rm",                     # rft sft's sections, the backbone's family, margin and centring
    "data.template_kwargs",
    "config.dpo_batch",               # pairs split into micro-batches on every process
    "data.preference_columns",        # three different columns
    "workers.sft_memory",             # the weights, gradients and optimizer state fit in the memory free
)
"""`rft rm`."""

GENERATE = (
    "config.schema",
    "models.hub_ids",
    "rollout.generation",             # prompts, output parquet, model, sizes, sampling
    "data.template_kwargs",
)
"""`rft generate`."""

EVAL = (
    "config.schema",
    "rewards.evaluation",             # the responses file, the reward function, pass@k
)
"""`rft eval`."""


EXTERNAL_BENCH = (
    "config.schema",
    "data.inputs",                    # the evaluation files (no model folder)
    "explorer.external_model",        # mode bench, a single-turn workflow, the API's address
    "data.template_kwargs",
    "rewards.function",               # the reward function that scores the replies
    "trainer.runtime",                # loggers
    "rollout.sampling",               # top_p, temperature
    "explorer.workflow",              # the workflow's arguments
)
"""`rft train` of a model behind an API (external_model): mode bench, nothing loads but the evaluation files."""


def validate(cfg: RFTConfig, check_paths: bool = True, world_size: int | None = None,
             check_model_path: bool = True) -> None:
    """The RL config, before any model loads. `world_size`: the number of processes the batch sizes are checked
    against; default trainer.nnodes x trainer.n_gpus_per_node."""
    world_size = processes(cfg.trainer) if world_size is None else world_size
    sp = cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size
    sp = sp if isinstance(sp, int) and sp >= 1 and world_size % sp == 0 else 1  # else refused by its check
    names = EXTERNAL_BENCH if cfg.external_model.enable else RL
    run_checks(names, CheckContext(cfg, check_paths, check_model_path, world_size, unused_keys(UNUSED_RL, cfg), sp))


def validate_sft(cfg, check_paths: bool = True, world_size: int | None = None, check_model_path: bool = True) -> None:
    """The SFT config (verl's sft_trainer.yaml keys), before any model loads. `world_size`: default
    trainer.nnodes x trainer.n_gpus_per_node."""
    world_size = processes(cfg.trainer) if world_size is None else world_size
    sp = cfg.ulysses_sequence_parallel_size
    sp = sp if isinstance(sp, int) and sp >= 1 and world_size % sp == 0 else 1  # else refused by its check
    run_checks(SFT, CheckContext(cfg, check_paths, check_model_path, world_size, sp=sp))


def validate_dpo(cfg, check_paths: bool = True, world_size: int = 1, check_model_path: bool = True) -> None:
    """The DPO config (rft's SFT sections plus the preference loss), before any model loads."""
    run_checks(DPO, CheckContext(cfg, check_paths, check_model_path, world_size))


def validate_rm(cfg, check_paths: bool = True, world_size: int | None = None, check_model_path: bool = True) -> None:
    """The reward-model config (rft dpo's sections, the Bradley-Terry loss's options), before any model loads."""
    world_size = processes(cfg.trainer) if world_size is None else world_size
    run_checks(RM, CheckContext(cfg, check_paths, check_model_path, world_size))


def validate_generation(cfg, check_paths: bool = True) -> None:
    """The `rft generate` config (verl's generation.yaml keys)."""
    run_checks(GENERATE, CheckContext(cfg, check_paths))


def validate_eval(cfg, check_paths: bool = True) -> None:
    """The `rft eval` config (verl's evaluation.yaml keys)."""
    run_checks(EVAL, CheckContext(cfg, check_paths))
