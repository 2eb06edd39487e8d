"""`rft_trainer` (../shared/spec/component_rft_trainer.md): verl's GRPO / REINFORCE++ trainer with rft's names for
the PPO batch sizes (`actor_rft_*`). Each input is written to the verl key it names."""

from __future__ import annotations

from rft.components.common import verl_checks, verl_inputs
from rft.components.spec import Component, Output, Plan, vllm_installed

A = "actor_rollout_ref.actor"
M = "actor_rollout_ref.model"
R = "actor_rollout_ref.rollout"
VLLM = {"vllm": True}

ROWS = [
    # group, name, type, default, optional, enum, canonical key, description
    ("Algorithm Configuration", "algorithm_adv_estimator", "string", "grpo", False, ["grpo", "reinforce_plus_plus"],
     "algorithm.adv_estimator", "Advantage estimator algorithm. Valid values: grpo (Group Relative Policy "
     "Optimization), reinforce_plus_plus (REINFORCE++ with global advantage normalization)"),
    ("Algorithm Configuration", "algorithm_use_kl_in_reward", "boolean", False, True, None,
     "algorithm.use_kl_in_reward", "Add KL divergence penalty to reward signal (classic PPO approach with adaptive "
     "KL). Set false for GRPO which uses kl_loss in actor loss instead"),
    ("Trainer Configuration", "trainer_n_gpus_per_node", "integer", 8, True, None, "trainer.n_gpus_per_node",
     "Number of GPUs per node"),
    ("Trainer Configuration", "trainer_nnodes", "integer", 1, True, None, "trainer.nnodes", "Number of nodes"),
    ("Trainer Configuration", "trainer_save_freq", "integer", 20, True, None, "trainer.save_freq",
     "Checkpoint save frequency in epochs. The trainer saves model state (HuggingFace-compatible model) every N "
     "epochs", {"lands_on": "`trainer.save_freq`: every N training steps, verl's unit (the spec's text says "
                            "epochs), and at the last step"}),
    ("Trainer Configuration", "trainer_test_freq", "integer", 5, True, None, "trainer.test_freq",
     "Validation frequency in epochs. For example, test_freq=5 means validation runs at epochs 5, 10, 15, etc",
     {"lands_on": "`trainer.test_freq`: every N training steps, verl's unit (the spec's text says epochs), and "
                  "after the last step"}),
    ("Trainer Configuration", "trainer_val_before_train", "boolean", True, True, None, "trainer.val_before_train",
     "Run validation before training starts. When enabled, the trainer evaluates the model on the validation set "
     "before any training occurs"),
    ("Trainer Configuration", "trainer_total_epochs", "integer", 7, True, None, "trainer.total_epochs",
     "Total epochs"),
    ("Trainer Configuration", "total_training_steps", "integer", None, True, None, "trainer.total_training_steps",
     "Total number of training steps"),
    ("Data Configuration", "data_train_files", "uri_file", None, False, None, "data.train_files",
     "Path to the training parquet or jsonl file"),
    ("Data Configuration", "data_val_files", "uri_file", None, False, None, "data.val_files",
     "Path to the validation parquet or jsonl file"),
    ("Data Configuration", "data_train_batch_size", "integer", 512, True, None, "data.train_batch_size",
     "Training batch size"),
    ("Data Configuration", "data_max_prompt_length", "integer", 1024, True, None, "data.max_prompt_length",
     "Maximum prompt length"),
    ("Data Configuration", "data_max_response_length", "integer", 2048, True, None, "data.max_response_length",
     "Maximum response length"),
    ("Data Configuration", "data_filter_overlong_prompts", "boolean", True, True, None,
     "data.filter_overlong_prompts", "Filter overlong prompts"),
    ("Data Configuration", "data_truncation", "string", "error", False, ["error", "left", "right", "middle"],
     "data.truncation", "Truncation strategy. Options: 'error', 'left', 'right', 'middle'"),
    ("Actor Model Configuration", "actor_model_path", "uri_folder", None, False, None, None,
     "Output folder of model import component containing model artifacts",
     {"lands_on": f"`{M}.path` (the Hugging Face folder in it, or the one folder below it with a config.json)"}),
    ("Actor Model Configuration", "actor_optim_lr", "number", 3e-6, True, None, f"{A}.optim.lr",
     "Actor optimizer learning rate"),
    ("Actor Model Configuration", "actor_model_use_remove_padding", "boolean", True, True, None,
     f"{M}.use_remove_padding", "Enables sequence packing optimization, which removes padding tokens from inputs "
     "during training to save computation",
     {"lands_on": f"`{M}.use_remove_padding` (packed update and log-prob passes, rft.workers.packing)"}),
    ("Actor Model Configuration", "actor_strategy", "string", "fsdp2", True, ["fsdp", "fsdp2"], f"{A}.strategy",
     "Actor training strategy. Valid values: fsdp (Fully Sharded Data Parallel v1), fsdp2 (Fully Sharded Data "
     "Parallel v2)"),
    ("Actor Model Configuration", "actor_fsdp_config_offload_policy", "boolean", True, True, None,
     f"{A}.fsdp_config.offload_policy", "FSDP config offload policy (params/optimizers/gradients) to reduce memory "
     "usage"),
    ("Actor Model Configuration", "actor_rft_mini_batch_size", "integer", 128, True, None, f"{A}.ppo_mini_batch_size",
     "The global batch size for splitting sampled data into multiple sub-batches during training"),
    ("Actor Model Configuration", "actor_rft_micro_batch_size_per_gpu", "integer", 10, True, None,
     f"{A}.ppo_micro_batch_size_per_gpu", "The per-GPU batch size for each forward and backward pass during training"),
    ("Actor Model Configuration", "actor_model_lora_rank", "integer", 64, True, None, f"{M}.lora_rank",
     "LoRA rank to control the capacity of the low-rank adaptation. Higher values increase model adaptability but "
     "also computational cost and memory usage"),
    ("Actor Model Configuration", "actor_model_lora_alpha", "integer", 32, True, None, f"{M}.lora_alpha",
     "LoRA alpha to scale the LoRA updates. Higher values increase the influence of the LoRA layers on the overall "
     "model output"),
    ("Actor Model Configuration", "actor_model_target_modules", "string", "all-linear", True, None,
     f"{M}.target_modules", "Target modules for LoRA. Options: 'all-linear', '[q_proj,k_proj,v_proj,o_proj]', "
     "'[q_proj,v_proj]', '.*_proj' (Regex pattern)"),
    ("Actor Model Configuration", "actor_use_kl_loss", "boolean", True, True, None, f"{A}.use_kl_loss",
     "If True, KL penalty is added to actor loss which is computed during training, else KL penalty is added to "
     "reward during rollout"),
    ("Actor Model Configuration", "actor_kl_loss_coef", "number", 0.01, True, None, f"{A}.kl_loss_coef",
     "Controls the strength of the KL penalty. Higher values encourage the model to stay closer to the reference "
     "policy"),
    ("Actor Model Configuration", "actor_kl_loss_type", "string", "low_var_kl", True,
     ["low_var_kl", "kl", "abs", "mse"], f"{A}.kl_loss_type",
     "Types of KL divergence loss calculation. Valid values: 'low_var_kl', 'kl', 'abs', 'mse'"),
    ("Actor Model Configuration", "actor_entropy_coeff", "number", 0.0, True, None, f"{A}.entropy_coeff",
     "Entropy regularization coefficient in loss. Default 0.0 (disabled) is recommended for most cases including "
     "GRPO and math/reasoning tasks"),
    ("Actor Model Configuration", "actor_model_enable_gradient_checkpointing", "boolean", True, True, None,
     f"{M}.enable_gradient_checkpointing", "Trades off compute for memory by saving only a subset of activations "
     "during the forward pass and recomputing them during the backward pass"),
    ("Actor Model Configuration", "actor_fsdp_param_offload", "boolean", False, True, None,
     f"{A}.fsdp_config.param_offload", "In FSDP strategy, offload model parameters to CPU memory when not in use to "
     "reduce GPU memory consumption"),
    ("Actor Model Configuration", "actor_fsdp_optimizer_offload", "boolean", False, True, None,
     f"{A}.fsdp_config.optimizer_offload", "In FSDP strategy, we offload optimizer state to CPU"),
    ("Rollout Configuration", "rollout_log_prob_micro_batch_size_per_gpu", "integer", 20, True, None,
     f"{R}.log_prob_micro_batch_size_per_gpu", "Rollout log prob micro batch size per GPU"),
    ("Rollout Configuration", "rollout_tensor_model_parallel_size", "integer", 2, True, None,
     f"{R}.tensor_model_parallel_size", "Rollout tensor model parallel size", VLLM),
    ("Rollout Configuration", "rollout_dtype", "string", "bfloat16", True, ["float16", "bfloat16", "float32", "auto"],
     f"{R}.dtype", "Rollout data type for model inference. Valid values: float16, bfloat16, float32, auto"),
    ("Rollout Configuration", "rollout_gpu_memory_utilization", "number", 0.6, True, None,
     f"{R}.gpu_memory_utilization", "Rollout GPU memory utilization", VLLM),
    ("Rollout Configuration", "rollout_enable_chunked_prefill", "boolean", False, True, None,
     f"{R}.enable_chunked_prefill", "Enable chunked prefill. A feature for rollout in vLLM which allows to chunk "
     "large prefills into smaller chunks", VLLM),
    ("Rollout Configuration", "rollout_enforce_eager", "boolean", False, True, None, f"{R}.enforce_eager",
     "Disable CUDA graphs and use eager execution in vLLM. Set to true for NPU/Ascend/non-NVIDIA hardware or "
     "debugging", VLLM),
    ("Rollout Configuration", "rollout_free_cache_engine", "boolean", False, True, None, f"{R}.free_cache_engine",
     "Free vLLM KV cache and offload model to CPU between rollout steps", VLLM),
    ("Rollout Configuration", "rollout_n", "integer", 5, True, None, f"{R}.n",
     "Number of responses to sample per prompt during rollout. Critical for GRPO (requires n > 1)"),
    ("Rollout Configuration", "rollout_temperature", "number", 1.0, True, None, f"{R}.temperature",
     "Sampling temperature for rollout generation. Controls randomness during generation. Range: [0.1, 2.0]"),
    ("Rollout Configuration", "rollout_top_p", "number", 1.0, True, None, f"{R}.top_p",
     "Nucleus sampling threshold. Samples from smallest set of tokens with cumulative probability > top_p. Range: "
     "[0.0, 1.0]"),
    ("Rollout Configuration", "rollout_top_k", "integer", -1, True, None, f"{R}.top_k",
     "Top-k sampling limit. Use -1 (disabled) for vLLM rollout, 0 for HuggingFace rollout"),
    ("Rollout Configuration", "rollout_do_sample", "boolean", True, True, None, f"{R}.do_sample",
     "Enable sampling during generation. Use true for RL training (stochastic sampling), false for greedy decoding"),
    ("Rollout Configuration", "rollout_val_temperature", "number", 0.7, True, None, f"{R}.val_kwargs.temperature",
     "Temperature for validation/evaluation generation. Lower than training temperature for more deterministic and "
     "reproducible evaluation",
     {"lands_on": f"`{R}.val_kwargs.temperature`, and `{R}.val_kwargs.do_sample` = (value > 0)"}),
    ("Rollout Configuration", "rollout_val_top_p", "number", 0.7, True, None, f"{R}.val_kwargs.top_p",
     "Top-p for validation/evaluation. Lower than training for more focused sampling during evaluation"),
    ("Rollout Configuration", "rollout_val_top_k", "integer", -1, True, None, f"{R}.val_kwargs.top_k",
     "Top-k for validation. Use -1 (disabled) for vLLM"),
    ("Reference Policy Configuration", "ref_log_prob_micro_batch_size_per_gpu", "integer", 20, True, None,
     "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "Per-GPU micro batch size for computing reference "
     "policy log probabilities. Used when use_kl_loss or use_kl_in_reward is enabled"),
    ("Reference Policy Configuration", "ref_fsdp_param_offload", "boolean", True, True, None,
     "actor_rollout_ref.ref.fsdp_config.param_offload", "Offload reference policy model parameters to CPU to save "
     "GPU memory. Strongly recommended to enable (true) as reference model is read-only"),
    ("Miscellaneous", "pypi_packages_override", "string", None, True, None, None,
     "Comma-separated list of PyPI packages to override before starting the run (e.g., "
     "transformers==4.30.0,torch==2.3.1)",
     {"lands_on": "installed with pip (and rft's constraints) into the running environment before anything loads; "
                  "a failed install stops the run"}),
]

OUTPUTS = (
    Output("intermediate_folder", "uri_folder", "Intermediate directory for RL training checkpoints",
           "`trainer.default_local_dir`: checkpoints/global_step_N, metrics.jsonl, config.yaml (a rerun resumes)"),
    Output("model_output", "uri_folder", "Directory containing the trained model artifacts",
           "the final Hugging Face folder, LoRA merged"),
)


def plan(p: Plan) -> None:
    verl_checks(p)
    # validation sampling: verl samples only with val_kwargs.do_sample; a temperature is given to take effect
    p.set(f"{R}.val_kwargs.do_sample", p.values["rollout_val_temperature"] > 0, "rollout_val_temperature")


EXAMPLE = ("rft component rft_trainer --actor_model_path m --data_train_files d/train.parquet "
           "--data_val_files d/val.parquet --trainer_n_gpus_per_node 1 --actor_model_use_remove_padding false "
           "--actor_fsdp_config_offload_policy false --ref_fsdp_param_offload false "
           "--data_train_batch_size 4 --actor_rft_mini_batch_size 4 --actor_rft_micro_batch_size_per_gpu 4 "
           "--rollout_n 2 --data_max_prompt_length 32 --data_max_response_length 6 --total_training_steps 2 "
           "--trainer_save_freq 1 --trainer_test_freq 2 --intermediate_folder out/work --model_output out/model")
SETUP = ("rft init-model m", "rft data arithmetic d --n-train 64 --n-val 8")  # the files EXAMPLE reads

COMPONENT = Component(
    name="rft_trainer", version="0.0.1", display_name="RL Trainer",
    description="Component for Multi-Strategy Reinforcement Learning Training of Large Language Models. Supports "
                "GRPO (Group Relative Policy Optimization) and REINFORCE++ algorithms with distributed training "
                "capabilities.",
    inputs=verl_inputs(ROWS), outputs=OUTPUTS, plan_fn=plan, example=EXAMPLE, setup=SETUP,
    engine=lambda v: "vllm" if vllm_installed() else "hf",
    engine_rule="it has no input that picks the engine and generates with vLLM, verl's default engine, where vLLM "
                "is installed",
)
