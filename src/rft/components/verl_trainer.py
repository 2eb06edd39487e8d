"""`verl_trainer_component` (../shared/spec/component_verl_trainer.md): verl's PPO trainer script, one input per
verl key (`actor_ppo_mini_batch_size` -> actor_rollout_ref.actor.ppo_mini_batch_size, ...)."""

from __future__ import annotations

from rft.components.common import check_engine, verl_checks, verl_inputs
from rft.components.spec import Component, Output, Plan

A = "actor_rollout_ref.actor"
M = "actor_rollout_ref.model"
R = "actor_rollout_ref.rollout"
VLLM = {"vllm": True}
ENGINE_NOTE = {"lands_on": f"`{R}.name` (with rollout_name; the two must agree): 'vllm' where vLLM is installed "
                           "(refused with the install line where it is not), or 'hf'; sglang is refused (no such "
                           "engine)"}

ROWS = [
    ("Engine and Data Parameters", "ENGINE", "string", "vllm", True, None, None, "Engine type (default: vllm)",
     ENGINE_NOTE),
    ("Engine and Data Parameters", "data_train_files", "uri_file", None, False, None, "data.train_files",
     "Path to the training parquet file"),
    ("Engine and Data Parameters", "data_val_files", "uri_file", None, False, None, "data.val_files",
     "Path to the validation parquet file"),
    ("Engine and Data Parameters", "data_train_batch_size", "integer", 512, True, None, "data.train_batch_size",
     "Training batch size"),
    ("Engine and Data Parameters", "data_max_prompt_length", "integer", 1024, True, None, "data.max_prompt_length",
     "Maximum prompt length"),
    ("Engine and Data Parameters", "data_max_response_length", "integer", 2048, True, None,
     "data.max_response_length", "Maximum response length"),
    ("Engine and Data Parameters", "data_filter_overlong_prompts", "boolean", True, True, None,
     "data.filter_overlong_prompts", "Filter overlong prompts"),
    ("Engine and Data Parameters", "data_truncation", "string", "error", True, None, "data.truncation",
     "Truncation strategy"),
    ("Engine and Data Parameters", "data_image_key", "string", "images", True, None, "data.image_key",
     "Image key column"),
    ("Model Parameters", "actor_model_path", "uri_folder", None, False, None, None,
     "Output folder of model import component containing model artifacts and a metadata file.",
     {"lands_on": f"`{M}.path` (the Hugging Face folder in it, or the one folder below it with a config.json)"}),
    ("Actor Model Training Parameters", "actor_optim_lr", "number", 3e-6, True, None, f"{A}.optim.lr",
     "Actor optimizer learning rate"),
    ("Actor Model Training Parameters", "actor_model_use_remove_padding", "boolean", True, True, None,
     f"{M}.use_remove_padding", "Use remove padding in model",
     {"lands_on": f"`{M}.use_remove_padding` (packed update and log-prob passes, rft.workers.packing)"}),
    ("Actor Model Training Parameters", "actor_strategy", "string", "fsdp2", True, ["fsdp", "fsdp2"],
     f"{A}.strategy", "Actor training strategy. Valid values: fsdp (Fully Sharded Data Parallel), fsdp2 (FSDP "
     "version 2)"),
    ("Actor Model Training Parameters", "actor_fsdp_config_offload_policy", "boolean", True, True, None,
     f"{A}.fsdp_config.offload_policy", "FSDP config offload policy to reduce memory usage"),
    ("Actor Model Training Parameters", "actor_ppo_mini_batch_size", "integer", 128, True, None,
     f"{A}.ppo_mini_batch_size", "PPO mini batch size"),
    ("Actor Model Training Parameters", "actor_ppo_micro_batch_size_per_gpu", "integer", 10, True, None,
     f"{A}.ppo_micro_batch_size_per_gpu", "PPO micro batch size per GPU"),
    ("Actor Model Training Parameters", "actor_model_lora_rank", "integer", 64, True, None, f"{M}.lora_rank",
     "LoRA rank"),
    ("Actor Model Training Parameters", "actor_model_lora_alpha", "integer", 32, True, None, f"{M}.lora_alpha",
     "LoRA alpha"),
    ("Actor Model Training Parameters", "actor_model_target_modules", "string", "all-linear", True, None,
     f"{M}.target_modules", "Target modules for LoRA"),
    ("Actor Model Training Parameters", "actor_model_exclude_modules", "string", ".*visual.*", True, None,
     f"{M}.exclude_modules", "Exclude modules regex"),
    ("Actor Model Training Parameters", "actor_use_kl_loss", "boolean", True, True, None, f"{A}.use_kl_loss",
     "Use KL loss"),
    ("Actor Model Training Parameters", "actor_kl_loss_coef", "number", 0.01, True, None, f"{A}.kl_loss_coef",
     "KL loss coefficient"),
    ("Actor Model Training Parameters", "actor_kl_loss_type", "string", "low_var_kl", True, None,
     f"{A}.kl_loss_type", "KL loss type"),
    ("Actor Model Training Parameters", "actor_entropy_coeff", "integer", 0, True, None, f"{A}.entropy_coeff",
     "Entropy coefficient"),
    ("Actor Model Training Parameters", "actor_model_enable_gradient_checkpointing", "boolean", True, True, None,
     f"{M}.enable_gradient_checkpointing", "Enable gradient checkpointing"),
    ("Actor Model Training Parameters", "actor_fsdp_param_offload", "boolean", False, True, None,
     f"{A}.fsdp_config.param_offload", "FSDP param offload"),
    ("Actor Model Training Parameters", "actor_fsdp_optimizer_offload", "boolean", False, True, None,
     f"{A}.fsdp_config.optimizer_offload", "FSDP optimizer offload"),
    ("Rollout Parameters", "rollout_log_prob_micro_batch_size_per_gpu", "integer", 20, True, None,
     f"{R}.log_prob_micro_batch_size_per_gpu", "Rollout log prob micro batch size per GPU"),
    ("Rollout Parameters", "rollout_tensor_model_parallel_size", "integer", 2, True, None,
     f"{R}.tensor_model_parallel_size", "Rollout tensor model parallel size", VLLM),
    ("Rollout Parameters", "rollout_name", "string", "vllm", True, None, None, "Rollout name (engine)", ENGINE_NOTE),
    ("Rollout Parameters", "rollout_dtype", "string", "float16", True, ["float16", "bfloat16", "float32"],
     f"{R}.dtype", "Rollout data type for model inference. Valid values: float16 (half precision), bfloat16 (brain "
     "floating point), float32 (full precision)"),
    ("Rollout Parameters", "rollout_disable_mm_preprocessor_cache", "boolean", True, True, None, None,
     "Disable MM preprocessor cache", VLLM),
    ("Rollout Parameters", "rollout_gpu_memory_utilization", "number", 0.6, True, None, f"{R}.gpu_memory_utilization",
     "Rollout GPU memory utilization", VLLM),
    ("Rollout Parameters", "rollout_enable_chunked_prefill", "boolean", False, True, None,
     f"{R}.enable_chunked_prefill", "Enable chunked prefill", VLLM),
    ("Rollout Parameters", "rollout_enforce_eager", "boolean", False, True, None, f"{R}.enforce_eager",
     "Enforce eager execution", VLLM),
    ("Rollout Parameters", "rollout_free_cache_engine", "boolean", False, True, None, f"{R}.free_cache_engine",
     "Free cache engine", VLLM),
    ("Rollout Parameters", "rollout_n", "integer", 5, True, None, f"{R}.n", "Rollout n"),
    ("Reference Model Parameters", "ref_log_prob_micro_batch_size_per_gpu", "integer", 20, True, None,
     "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "Ref log prob micro batch size per GPU"),
    ("Reference Model Parameters", "ref_fsdp_param_offload", "boolean", True, True, None,
     "actor_rollout_ref.ref.fsdp_config.param_offload", "Ref FSDP param offload"),
    ("Algorithm Parameters", "algorithm_adv_estimator", "string", "grpo", True,
     ["gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo", "grpo_passk",
      "gpg"], "algorithm.adv_estimator",
     "Advantage estimator algorithm. Valid values: gae (Generalized Advantage Estimation), grpo (Group Relative "
     "Policy Optimization), reinforce_plus_plus (REINFORCE++), reinforce_plus_plus_baseline (REINFORCE++ with "
     "baseline), remax (ReMax algorithm), rloo (Reinforcement Learning with Leave-One-Out), opo (Outcome Policy "
     "Optimization), grpo_passk (GRPO for Pass@k evaluation), gpg (Generalized Policy Gradient)"),
    ("Algorithm Parameters", "algorithm_use_kl_in_reward", "boolean", False, True, None, "algorithm.use_kl_in_reward",
     "Use KL in reward"),
    ("Trainer Parameters", "trainer_critic_warmup", "integer", 0, True, None, "trainer.critic_warmup",
     "Critic warmup"),
    ("Trainer Parameters", "trainer_n_gpus_per_node", "integer", 8, True, None, "trainer.n_gpus_per_node",
     "Number of GPUs per node"),
    ("Trainer Parameters", "trainer_nnodes", "integer", 1, True, None, "trainer.nnodes", "Number of nodes"),
    ("Trainer Parameters", "trainer_save_freq", "integer", 20, True, None, "trainer.save_freq", "Save frequency"),
    ("Trainer Parameters", "trainer_test_freq", "integer", 5, True, None, "trainer.test_freq", "Test frequency"),
    ("Trainer Parameters", "trainer_total_epochs", "integer", 15, True, None, "trainer.total_epochs", "Total epochs"),
    ("Trainer Parameters", "total_training_steps", "integer", None, True, None, "trainer.total_training_steps",
     "Total number of training steps"),
]

OUTPUTS = (
    Output("model_output", "uri_folder", "Directory containing the trained model artifacts",
           "the final Hugging Face folder, LoRA merged (checkpoints go to a temporary folder, removed afterwards)"),
)


def plan(p: Plan) -> None:
    verl_checks(p)
    v = p.values
    for name in ("ENGINE", "rollout_name"):
        check_engine(p, name, v[name])
    if v["ENGINE"] != v["rollout_name"]:
        p.refuse("ENGINE", f"={v['ENGINE']!r} and rollout_name={v['rollout_name']!r} name different engines; both "
                           "set actor_rollout_ref.rollout.name: give them the same value")
    else:
        p.set(f"{R}.name", v["ENGINE"], "ENGINE", "rollout_name")


EXAMPLE = ("rft component verl_trainer_component --ENGINE hf --rollout_name hf --actor_model_path m "
           "--data_train_files d/train.parquet --data_val_files d/val.parquet --trainer_n_gpus_per_node 1 "
           "--actor_model_use_remove_padding false --actor_fsdp_config_offload_policy false "
           "--ref_fsdp_param_offload false --data_train_batch_size 4 --actor_ppo_mini_batch_size 4 "
           "--actor_ppo_micro_batch_size_per_gpu 4 --rollout_n 2 --data_max_prompt_length 32 "
           "--data_max_response_length 6 --total_training_steps 2 --trainer_save_freq 1 --trainer_test_freq 2 "
           "--model_output out/model")
SETUP = ("rft init-model m", "rft data arithmetic d --n-train 64 --n-val 8")  # the files EXAMPLE reads

COMPONENT = Component(
    name="verl_trainer_component", version="0.0.1", display_name="Verl Trainer Component",
    description="Component for Verl Finetuning. Supports reinforcement learning algorithms including GRPO (Group "
                "Relative Policy Optimization) with PyTorch distributed training using FSDP.",
    inputs=verl_inputs(ROWS), outputs=OUTPUTS, plan_fn=plan, example=EXAMPLE, setup=SETUP,
    engine=lambda v: "vllm" if v["ENGINE"] == v["rollout_name"] == "vllm" else "hf",
    engine_rule="--ENGINE and --rollout_name vllm pick vLLM",
)
