"""The three component interfaces (rft_trainer, verl_trainer_component, group_relative_policy_optimization): every
spec input lands on its canonical key or is refused by name (a table per spec, below), the DeepSpeed mapping, the
pip override, the Azure ML YAMLs agree with the CLI, and each component trains 2 steps from its documented command
line and writes every output it declares."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from cli_helpers import rft_here

from rft.components import ComponentError, components, get_component
from rft.components.amlyaml import component_yaml
from rft.components.run import resolve

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
SPECS = REPO.parent / "shared" / "spec"
SPEC_FILES = {"rft_trainer": "component_rft_trainer.md", "verl_trainer_component": "component_verl_trainer.md",
              "group_relative_policy_optimization": "component_grpo.md"}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
       "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"}
REFUSED = "REFUSED"
INERT = "INERT"  # a vLLM setting at its spec default: accepted, reported as unused by the hf engine


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """m (tiny model), d/{train,val}.parquet and .jsonl (a `problem` column), ds.json, a model-import folder
    holding the model one level down, a dataset folder, a reward file."""
    from rft.data.io import read_rows
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("components")
    init_model("tiny", root / "m", seed=0)
    write_arithmetic(root / "d", n_train=64, n_val=8, seed=0)
    for split in ("train", "val"):
        with (root / "d" / f"{split}.jsonl").open("w") as f:
            for row in read_rows(root / "d" / f"{split}.parquet"):
                row = dict(row)
                row["problem"] = row.pop("prompt")[0]["content"]
                f.write(json.dumps(row, default=str) + "\n")
    (root / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
        "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto", "loss_scale": 0},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                              "stage3_gather_16bit_weights_on_model_save": True},
        "steps_per_print": 10, "wall_clock_breakdown": False}))
    shutil.copytree(root / "m", root / "import" / "artifacts")
    (root / "hfdata").mkdir()
    shutil.copy(root / "d" / "train.jsonl", root / "hfdata" / "train.jsonl")
    shutil.copy(root / "d" / "val.jsonl", root / "hfdata" / "validation.jsonl")
    (root / "reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                                    "    return float(solution_str.strip() == str(ground_truth))\n")
    return root


def base_values(comp: str, w: Path) -> dict:
    """The smallest inputs of `comp` that validate on this machine."""
    if comp == "group_relative_policy_optimization":
        return {"model_name_or_path": str(w / "m"), "dataset_train_split": str(w / "d/train.jsonl"),
                "dataset_validation_split": str(w / "d/val.jsonl"), "deepspeed_config": str(w / "ds.json")}
    v = {"actor_model_path": str(w / "m"), "data_train_files": str(w / "d/train.parquet"),
         "data_val_files": str(w / "d/val.parquet"), "trainer_n_gpus_per_node": 1,
         "actor_model_use_remove_padding": False, "data_train_batch_size": 4, "rollout_n": 2}
    if comp == "rft_trainer":
        v.update(actor_rft_mini_batch_size=4, actor_rft_micro_batch_size_per_gpu=4)
    else:
        v.update(ENGINE="hf", rollout_name="hf", actor_ppo_mini_batch_size=4, actor_ppo_micro_batch_size_per_gpu=4)
    return v


def outputs_of(comp: str, w: Path) -> dict:
    if comp == "group_relative_policy_optimization":
        return {"output_model_path": str(w / "never" / "grpo")}
    return {"model_output": str(w / "never" / "model")}


def canonical(cfg, key: str):
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def resolved(comp: str, w: Path, **values):
    return resolve(get_component(comp), {**base_values(comp, w), **values}, outputs_of(comp, w))


# ------------------------------------------------------------------------------- the tables (one per spec)
R, V, G = "rft_trainer", "verl_trainer_component", "group_relative_policy_optimization"
AR, AA, AM, RO = "actor_rollout_ref.ref", "actor_rollout_ref.actor", "actor_rollout_ref.model", \
    "actor_rollout_ref.rollout"
W = "<work>"  # replaced by the fixture folder

# (input, value, canonical key, expected value) or (input, value, REFUSED, message needle); a dict of further
# inputs may follow. CPU: offload keys hold (everything is in host memory); on CUDA with one process they are
# refused. Process counts land on their keys: on CPU that many gloo processes (the batch sizes must split evenly).
VERL_SHARED = [
    ("algorithm_use_kl_in_reward", True, "algorithm.use_kl_in_reward", True),
    ("trainer_n_gpus_per_node", 1, "trainer.n_gpus_per_node", 1),
    ("trainer_n_gpus_per_node", 2, "trainer.n_gpus_per_node", 2),
    ("trainer_n_gpus_per_node", 8, REFUSED, "multiple of the number of processes"),  # 4 prompts over 8
    ("trainer_n_gpus_per_node", 0, REFUSED, "must be a positive integer"),
    ("trainer_nnodes", 1, "trainer.nnodes", 1),
    ("trainer_nnodes", 2, "trainer.nnodes", 2),  # torchrun on each node; `rft component` alone refuses it (below)
    ("trainer_nnodes", 0, REFUSED, "--trainer_nnodes=0 must be a positive integer"),
    ("trainer_save_freq", 3, "trainer.save_freq", 3),
    ("trainer_test_freq", 2, "trainer.test_freq", 2),
    ("trainer_total_epochs", 2, "trainer.total_epochs", 2),
    ("total_training_steps", 7, "trainer.total_training_steps", 7),
    ("data_train_files", f"{W}/d/train.jsonl", "data.train_files", f"{W}/d/train.jsonl"),
    ("data_train_files", f"{W}/d/missing.parquet", REFUSED, "does not exist"),
    ("data_val_files", f"{W}/d/val.jsonl", "data.val_files", f"{W}/d/val.jsonl"),
    ("data_train_batch_size", 8, "data.train_batch_size", 8),
    ("data_max_prompt_length", 64, "data.max_prompt_length", 64),
    ("data_max_response_length", 16, "data.max_response_length", 16),
    ("data_filter_overlong_prompts", False, "data.filter_overlong_prompts", False),
    ("data_truncation", "left", "data.truncation", "left"),
    ("actor_model_path", f"{W}/import", f"{AM}.path", f"{W}/import/artifacts"),
    ("actor_model_path", f"{W}/d", REFUSED, "no Hugging Face model folder"),
    ("actor_optim_lr", 1e-5, f"{AA}.optim.lr", 1e-5),
    ("actor_model_use_remove_padding", False, f"{AM}.use_remove_padding", False),
    ("actor_model_use_remove_padding", True, f"{AM}.use_remove_padding", True),  # packed passes (issue 16)
    ("actor_strategy", "fsdp", f"{AA}.strategy", "fsdp"),
    ("actor_strategy", "fsdp2", f"{AA}.strategy", "fsdp2"),
    ("actor_fsdp_config_offload_policy", True, f"{AA}.fsdp_config.offload_policy", True),
    ("actor_fsdp_config_offload_policy", False, f"{AA}.fsdp_config.offload_policy", False),
    ("actor_model_lora_rank", 8, f"{AM}.lora_rank", 8),
    ("actor_model_lora_alpha", 16, f"{AM}.lora_alpha", 16),
    ("actor_model_target_modules", "[q_proj,v_proj]", f"{AM}.target_modules", "[q_proj,v_proj]"),
    ("actor_use_kl_loss", False, f"{AA}.use_kl_loss", False),
    ("actor_kl_loss_coef", 0.05, f"{AA}.kl_loss_coef", 0.05),
    ("actor_kl_loss_type", "mse", f"{AA}.kl_loss_type", "mse"),
    ("actor_model_enable_gradient_checkpointing", False, f"{AM}.enable_gradient_checkpointing", False),
    ("actor_fsdp_param_offload", True, f"{AA}.fsdp_config.param_offload", True),
    ("actor_fsdp_optimizer_offload", True, f"{AA}.fsdp_config.optimizer_offload", True),
    ("rollout_log_prob_micro_batch_size_per_gpu", 4, f"{RO}.log_prob_micro_batch_size_per_gpu", 4),
    ("rollout_tensor_model_parallel_size", 2, INERT, None),  # the spec default: accepted, no effect
    ("rollout_tensor_model_parallel_size", 1, f"{RO}.tensor_model_parallel_size", 1),  # what the hf engine does
    ("rollout_tensor_model_parallel_size", 4, REFUSED, "vLLM engine"),
    ("rollout_dtype", "float32", f"{RO}.dtype", "float32"),
    ("rollout_gpu_memory_utilization", 0.6, INERT, None),
    ("rollout_gpu_memory_utilization", 0.9, REFUSED, "--rollout_gpu_memory_utilization=0.9 configures the vLLM"),
    ("rollout_enable_chunked_prefill", False, INERT, None),
    ("rollout_enable_chunked_prefill", True, REFUSED, "vLLM engine"),
    ("rollout_enforce_eager", False, INERT, None),
    ("rollout_enforce_eager", True, REFUSED, "vLLM engine"),
    ("rollout_free_cache_engine", False, INERT, None),
    ("rollout_free_cache_engine", True, REFUSED, "vLLM engine"),
    ("rollout_n", 4, f"{RO}.n", 4),
    ("ref_log_prob_micro_batch_size_per_gpu", 4, f"{AR}.log_prob_micro_batch_size_per_gpu", 4),
    ("ref_fsdp_param_offload", True, f"{AR}.fsdp_config.param_offload", True),
    ("ref_fsdp_param_offload", False, f"{AR}.fsdp_config.param_offload", False),
]
TABLE: dict[str, list[tuple]] = {
    R: VERL_SHARED + [
        ("algorithm_adv_estimator", "reinforce_plus_plus", "algorithm.adv_estimator", "reinforce_plus_plus"),
        ("algorithm_adv_estimator", "rloo", REFUSED, "not one of"),
        ("trainer_val_before_train", False, "trainer.val_before_train", False),
        ("data_truncation", "middle", "data.truncation", "middle"),
        ("actor_rft_mini_batch_size", 2, f"{AA}.ppo_mini_batch_size", 2),
        ("actor_rft_mini_batch_size", 3, REFUSED, "--actor_rft_mini_batch_size"),
        ("actor_rft_micro_batch_size_per_gpu", 2, f"{AA}.ppo_micro_batch_size_per_gpu", 2),
        ("actor_rft_micro_batch_size_per_gpu", 3, REFUSED, "--actor_rft_micro_batch_size_per_gpu"),
        ("actor_entropy_coeff", 0.001, f"{AA}.entropy_coeff", 0.001),
        ("rollout_dtype", "auto", f"{RO}.dtype", "auto"),
        ("rollout_temperature", 0.8, f"{RO}.temperature", 0.8),
        ("rollout_top_p", 0.9, f"{RO}.top_p", 0.9),
        ("rollout_top_k", 20, f"{RO}.top_k", 20),
        ("rollout_do_sample", False, f"{RO}.do_sample", False),
        ("rollout_val_temperature", 0.5, f"{RO}.val_kwargs.temperature", 0.5),
        ("rollout_val_temperature", 0.5, f"{RO}.val_kwargs.do_sample", True),
        ("rollout_val_temperature", 0.0, f"{RO}.val_kwargs.do_sample", False),
        ("rollout_val_top_p", 0.8, f"{RO}.val_kwargs.top_p", 0.8),
        ("rollout_val_top_k", 5, f"{RO}.val_kwargs.top_k", 5),
        ("pypi_packages_override", "transformers", "pip", ["transformers"]),
    ],
    V: VERL_SHARED + [
        ("ENGINE", "hf", f"{RO}.name", "hf"),
        ("ENGINE", "vllm", REFUSED, "--ENGINE='vllm': vLLM is not installed here; install it with `make vllm`"),
        ("ENGINE", "sglang", REFUSED, "--ENGINE='sglang'", {"rollout_name": "sglang"}),
        ("rollout_name", "hf", f"{RO}.name", "hf"),
        ("rollout_name", "vllm", REFUSED, "--rollout_name='vllm': vLLM is not installed"),
        ("data_image_key", "pictures", "data.image_key", "pictures"),
        ("actor_ppo_mini_batch_size", 2, f"{AA}.ppo_mini_batch_size", 2),
        ("actor_ppo_mini_batch_size", 3, REFUSED, "--actor_ppo_mini_batch_size"),
        ("actor_ppo_micro_batch_size_per_gpu", 2, f"{AA}.ppo_micro_batch_size_per_gpu", 2),
        ("actor_model_exclude_modules", ".*mlp.*", f"{AM}.exclude_modules", ".*mlp.*"),
        ("actor_kl_loss_type", "nope", REFUSED, "--actor_kl_loss_type"),
        ("actor_entropy_coeff", 1, f"{AA}.entropy_coeff", 1.0),
        ("actor_entropy_coeff", "0.001", REFUSED, "not a valid integer"),
        ("rollout_dtype", "bfloat16", f"{RO}.dtype", "bfloat16"),
        ("rollout_disable_mm_preprocessor_cache", True, INERT, None),
        ("rollout_disable_mm_preprocessor_cache", False, REFUSED, "vLLM engine"),
        ("algorithm_adv_estimator", "rloo", "algorithm.adv_estimator", "rloo"),
        ("algorithm_adv_estimator", "remax", "algorithm.adv_estimator", "remax"),
        ("trainer_critic_warmup", 0, "trainer.critic_warmup", 0),
    ],
    G: [
        ("dataset_train_split", f"{W}/d/val.jsonl", "data.train_files", f"{W}/d/val.jsonl"),
        ("dataset_train_split", f"{W}/d/missing.jsonl", REFUSED, "does not exist"),
        ("dataset_validation_split", f"{W}/d/train.jsonl", "data.val_files", f"{W}/d/train.jsonl"),
        ("model_name_or_path", f"{W}/import", f"{AM}.path", f"{W}/import/artifacts"),
        ("deepspeed_config", f"{W}/ds.json", f"{AA}.strategy", "fsdp2"),
        ("deepspeed_config", f"{W}/missing.json", REFUSED, "--deepspeed_config="),
        ("dataset_name", f"{W}/hfdata", "data.train_files", [f"{W}/hfdata/train.jsonl"],
         {"dataset_train_split": None, "dataset_validation_split": None}),
        ("dataset_name", f"{W}/hfdata", "data.val_files", [f"{W}/hfdata/validation.jsonl"],
         {"dataset_train_split": None, "dataset_validation_split": None}),
        ("dataset_name", "openai/gsm8k", REFUSED, "not a local folder",
         {"dataset_train_split": None, "dataset_validation_split": None}),
        ("dataset_name", f"{W}/hfdata", REFUSED, "--dataset_name=", {}),  # both splits given: unused
        ("dataset_prompt_column", "question", "data.prompt_key", "question"),
        ("apply_lora", "true", f"{AM}.lora_rank", 16),
        ("apply_lora", "true", f"{AM}.target_modules", ["q_proj", "k_proj", "v_proj"]),
        ("apply_lora", "false", f"{AM}.lora_rank", 0),
        ("beta", 0.04, f"{AA}.kl_loss_coef", 0.04),
        ("beta", 0.04, f"{AA}.use_kl_loss", True),
        ("beta", 0.0, f"{AA}.use_kl_loss", False),
        ("epsilon", 0.3, f"{AA}.clip_ratio_low", 0.3),
        ("epsilon", 0.3, f"{AA}.clip_ratio_high", 0.3),
        ("num_iterations", 2, f"{AA}.ppo_epochs", 2),
        ("num_generations", 2, f"{RO}.n", 2),
        ("num_generations", 2, "data.train_batch_size", 4),
        ("num_generations", 3, REFUSED, "not a multiple of num_generations=3"),
        ("num_train_epochs", 2, "trainer.total_epochs", 2),
        ("num_train_epochs", 1.5, "trainer.total_training_steps", 48),  # ceil(1.5 x 64 rows / 2 prompts)
        ("max_steps", 6, "trainer.total_training_steps", 2),  # 6 optimizer steps / num_iterations 3
        ("max_steps", 5, REFUSED, "not a multiple of num_iterations=3"),
        ("per_device_train_batch_size", 4, f"{AA}.ppo_micro_batch_size_per_gpu", 4),
        ("per_device_train_batch_size", 4, "data.train_batch_size", 1),
        ("per_device_train_batch_size", 6, REFUSED, "--per_device_train_batch_size"),
        ("per_device_eval_batch_size", 16, "data.val_batch_size", 4, {"eval_strategy": "steps"}),
        ("per_device_eval_batch_size", 6, REFUSED, "--per_device_eval_batch_size", {"eval_strategy": "steps"}),
        ("gradient_accumulation_steps", 2, "data.train_batch_size", 4),
        ("gradient_accumulation_steps", 2, f"{AA}.ppo_mini_batch_size", 4),
        ("learning_rate", 1e-5, f"{AA}.optim.lr", 1e-5),
        ("warmup_ratio", 0.2, f"{AA}.optim.lr_warmup_steps_ratio", 0.2),
        ("max_grad_norm", 0.5, f"{AA}.grad_clip", 0.5),
        ("optim", "adamw_torch", f"{AA}.optim.optimizer", "adamw_torch"),
        ("optim", "adamw_torch_fused", f"{AA}.optim.optimizer", "adamw_torch_fused"),
        ("optim", "adafactor", f"{AA}.optim.optimizer", "adafactor"),
        ("optim", "sgd", f"{AA}.optim.optimizer", "sgd"),
        ("optim", "adagrad", f"{AA}.optim.optimizer", "adagrad"),
        ("optim", "rmsprop", f"{AA}.optim.optimizer", "rmsprop"),
        ("optim", "ademamix", REFUSED, "bitsandbytes"),
        ("optim", "galore_adamw", REFUSED, "GaLore"),
        ("optim", "lomo", REFUSED, "LOMO"),
        ("optim", "adalomo", REFUSED, "AdaLomo"),
        ("optim", "grokadamw", REFUSED, "grokadamw package"),
        ("optim", "schedule_free_sgd", REFUSED, "schedule-free"),
        *[("lr_scheduler_type", name, f"{AA}.optim.lr_scheduler_type", name)
          for name in ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                       "inverse_sqrt")],
        ("lr_scheduler_type", "reduce_lr_on_plateau", f"{AA}.optim.lr_scheduler_type", "reduce_lr_on_plateau",
         {"eval_strategy": "steps"}),
        ("lr_scheduler_type", "reduce_lr_on_plateau", REFUSED, "--lr_scheduler_type"),  # no evaluation
        ("max_prompt_length", 64, "data.max_prompt_length", 64),
        ("max_prompt_length", 64, "data.truncation", "left"),
        ("max_completion_length", 16, "data.max_response_length", 16),
        ("temperature", 0.7, f"{RO}.temperature", 0.7),
        ("temperature", 0.7, f"{RO}.val_kwargs.temperature", 0.7, {"eval_strategy": "steps"}),
        ("top_p", 0.9, f"{RO}.top_p", 0.9),
        ("do_eval", True, "trainer.test_freq", 128),  # once, after the last of 4 epochs x 32 steps
        ("do_eval", True, REFUSED, "--do_eval=True", {"dataset_validation_split": None}),
        ("do_eval", False, "trainer.test_freq", -1),
        ("eval_strategy", "steps", "trainer.test_freq", 1),  # eval_steps 1 -> every step
        ("eval_strategy", "epoch", "trainer.test_freq", 32),
        ("eval_strategy", "steps", f"{RO}.val_kwargs.n", 4),
        ("eval_strategy", "no", "trainer.test_freq", -1),
        ("eval_steps", 6, "trainer.test_freq", 2, {"eval_strategy": "steps"}),
        ("logging_steps", 7, "trainer.log_freq", 3),
        ("logging_steps", 0.5, "trainer.log_freq", 64),  # half of 128 steps x 3 optimizer steps, / 3
        ("save_steps", 9, "trainer.save_freq", 3),
        ("save_total_limit", 3, "trainer.max_actor_ckpt_to_keep", 3),
        ("save_total_limit", 0, "trainer.max_actor_ckpt_to_keep", None),
        ("shuffle_dataset", False, "data.shuffle", False),
        ("use_liger_kernel", False, f"{AM}.use_liger", False),
        ("use_liger_kernel", True, REFUSED, "Liger kernels"),
        ("vllm_gpu_memory_utilization", 0.3, INERT, None),
        ("vllm_gpu_memory_utilization", 0.9, REFUSED, "vLLM is not installed here: install it with `make vllm`"),
        ("vllm_tensor_parallel_size", 1, INERT, None),
        ("vllm_tensor_parallel_size", 2, REFUSED, "vLLM engine"),
        ("epsilon_high", 0.28, f"{AA}.clip_ratio_high", 0.28),
        ("loss_type", "grpo", f"{AA}.loss_agg_mode", "seq-mean-token-mean"),
        ("loss_type", "dr_grpo", f"{AA}.loss_agg_mode", "seq-mean-token-sum-norm"),
        ("scale_rewards", "batch", "algorithm.scale_rewards", "batch"),
        ("num_processes", 1, "trainer.n_gpus_per_node", 1),
        ("num_processes", 2, "trainer.n_gpus_per_node", 2),  # several processes (tests/test_scale.py runs them)
        ("num_processes", 0, REFUSED, "must be an integer >= 1"),
        ("reward_function", f"{W}/reward.py", "custom_reward_function.path", f"{W}/reward.py"),
    ],
}
CPU_ONLY = {f"{AA}.fsdp_config.offload_policy", f"{AA}.fsdp_config.param_offload",
            f"{AA}.fsdp_config.optimizer_offload", f"{AR}.fsdp_config.param_offload"}


def _sub(value, w: Path):
    if isinstance(value, str):
        return value.replace(W, str(w))
    if isinstance(value, list):
        return [_sub(x, w) for x in value]
    return value


CASES = [pytest.param(comp, *row[:4], row[4] if len(row) > 4 else {}, id=f"{comp}-{row[0]}={row[1]!r}-{i}")
         for comp, rows in TABLE.items() for i, row in enumerate(rows)]


@pytest.mark.parametrize("comp, name, value, key, expected, extra", CASES)
def test_input_lands_on_its_key_or_is_refused(work, comp, name, value, key, expected, extra):
    more = {k: _sub(v, work) for k, v in extra.items()}
    values = {name: _sub(value, work), **more}
    if key in CPU_ONLY and expected is True and _cuda():
        key, expected = REFUSED, "on cuda"
    if name == "trainer_n_gpus_per_node" and key != REFUSED and _cuda():
        import torch

        if value > torch.cuda.device_count():
            key, expected = REFUSED, "CUDA device"
    if key == REFUSED:
        with pytest.raises(ComponentError) as err:
            resolved(comp, work, **values)
        assert expected in str(err.value), str(err.value)
        assert f"--{name}" in str(err.value) or name in str(err.value), str(err.value)
        return
    cfg, plan = resolved(comp, work, **values)
    if key == INERT:
        assert f"{name}={value!r}" in plan.inert and any(name in note for note in plan.notes)
        return
    if key == "pip":
        from rft.components.pip import parse_requirements

        assert parse_requirements(plan.values[name]) == expected
        return
    assert canonical(cfg, key) == _sub(expected, work), (key, canonical(cfg, key))


@pytest.mark.parametrize("comp", list(TABLE))
def test_every_input_has_a_row(comp):
    covered = {row[0] for row in TABLE[comp]}
    assert {i.name for i in get_component(comp).inputs} - covered == set()


def _spec_tables(text: str) -> tuple[list[dict], list[dict]]:
    """(input rows, output rows) of a component spec markdown."""
    inputs, outputs, section = [], [], None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if not line.startswith("|") or set(line) <= set("|- ") or line.startswith("| Name"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section == "Inputs" and len(cells) == 6:
            inputs.append(dict(zip(("name", "description", "type", "default", "optional", "enum"), cells)))
        elif section == "Outputs" and len(cells) == 3:
            outputs.append(dict(zip(("name", "description", "type"), cells)))
    return inputs, outputs


def _demojibake(text: str) -> str:
    """The spec's UTF-8 read as Latin-1 in places ('Î¼' for 'μ')."""
    try:
        return text.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return text


@pytest.mark.skipif(not SPECS.is_dir(), reason="the specs live in ../shared/spec")
@pytest.mark.parametrize("comp", list(SPEC_FILES))
def test_table_matches_the_spec(comp):
    """Every spec row is in the component's table with its name, type, default, optional and enum."""
    from rft.components.spec import parse_value

    component = get_component(comp)
    rows, outs = _spec_tables((SPECS / SPEC_FILES[comp]).read_text())
    assert rows and outs
    spec_names = [r["name"] for r in rows]
    assert spec_names == [i.name for i in component.inputs if not i.extension]
    for row in rows:
        inp = component.input(row["name"])
        assert inp.type == row["type"], row["name"]
        assert inp.optional == (row["optional"] == "True"), row["name"]
        assert inp.enum == (None if row["enum"] == "NA" else tuple(ast.literal_eval(row["enum"]))), row["name"]
        default = {"-": None, "''": ""}.get(row["default"], row["default"])
        assert inp.default == (parse_value(inp, default) if default not in (None, "") else default), row["name"]
        assert inp.description == _demojibake(row["description"]), row["name"]
    assert [(o["name"], o["type"]) for o in outs] == [(o.name, o.type) for o in component.outputs]


def test_spec_defaults_run_as_given(work):
    """rft_trainer with only its required inputs: the spec's default actor_model_use_remove_padding=true lands on
    its key (packed passes); the 8 GPUs given (as Azure ML gives every input) are honoured (on CPU: 8 gloo
    processes, with a note)."""
    values = {k: v for k, v in base_values(R, work).items() if k in ("actor_model_path", "data_train_files",
                                                                      "data_val_files")}
    cfg, plan = resolve(get_component(R), {**values, "trainer_n_gpus_per_node": 8}, outputs_of(R, work))
    assert cfg.actor_rollout_ref.model.use_remove_padding is True
    assert cfg.trainer.n_gpus_per_node == 8


def test_grpo_at_its_spec_defaults_notes_no_key_it_set_itself(work, caplog):
    """beta 0 (the spec default) has no KL term, hence no reference model: the plan wrote kl_loss_coef and the
    reference's micro batch anyway, and every default run printed two notes naming rft keys the user never set
    ("these keys have no effect: actor_rollout_ref.actor.kl_loss_coef=0.0, ...")."""
    caplog.set_level("WARNING", logger="rft")
    cfg, _ = resolved(G, work, per_device_train_batch_size=4)
    assert cfg.actor_rollout_ref.actor.use_kl_loss is False
    assert "have no effect" not in caplog.text, caplog.text
    cfg, _ = resolved(G, work, per_device_train_batch_size=4, beta=0.04)
    assert cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 4
    assert cfg.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"

@pytest.mark.parametrize("comp", [R, V])
def test_a_process_count_not_given_is_this_machines(work, comp, monkeypatch):
    """Issue 42: the spec's default of 8 GPUs per node made a first run on a laptop start 8 CPU processes (and
    fail on a batch size that does not split over 8). Not given, it is one process per CUDA device, else one; the
    offload defaults (true) that one CUDA process cannot honour are left false, each with a note."""
    import rft.components.common as common

    values = {k: v for k, v in base_values(comp, work).items() if k != "trainer_n_gpus_per_node"}
    cfg, plan = resolve(get_component(comp), values, outputs_of(comp, work))  # 4 prompts x 2: not over 8
    if not _cuda():
        assert cfg.trainer.n_gpus_per_node == 1
        assert ("trainer_n_gpus_per_node not given: 1 process, as this machine has no CUDA device (the spec default "
                "8 describes an 8-GPU node); give --trainer_n_gpus_per_node N for N processes") in plan.notes
    monkeypatch.setattr(common, "has_cuda", lambda: True)  # the plan on a machine with one GPU
    monkeypatch.setattr(common, "devices_here", lambda: 1)
    plan = get_component(comp).plan(values, check_paths=False)
    assert plan.overrides["trainer.n_gpus_per_node"] == 1
    assert plan.overrides[f"{AA}.fsdp_config.offload_policy"] is False
    assert plan.overrides[f"{AR}.fsdp_config.param_offload"] is False
    assert "actor_fsdp_config_offload_policy, ref_fsdp_param_offload not given: false" in " ".join(plan.notes)
    given = get_component(comp).plan({**values, "ref_fsdp_param_offload": True}, check_paths=False)
    assert given.overrides[f"{AR}.fsdp_config.param_offload"] is True  # given: the config check refuses it


def test_every_refusal_of_a_command_line_is_reported_at_once(work, tmp_path):
    """Issue 42: refusals arrived one per run (an unknown input, a bad value or a missing input stopped at the
    first). One `rft: error:` line each, exit status 2 once."""
    args = ["--actor_model_pat", str(work / "m"), "--data_train_files", str(work / "d/train.parquet"),
            "--rollout_n", "two", "--use_liger_kernel", "true", "--trainer_nnodes", "2", "--model_output", "o"]
    proc = rft_here("component", R, *args, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    *lines, launch = proc.stderr.splitlines()
    assert launch.startswith("rft: error: rft_trainer: --trainer_nnodes=2: rft starts the processes of one node itself")
    assert lines == [
        "rft: error: rft_trainer: --actor_model_pat is not an input of this component; did you mean "
        "--actor_model_path?",
        "rft: error: rft_trainer: --use_liger_kernel is not an input of this component; rft component rft_trainer "
        "--help lists them",
        "rft: error: rft_trainer: --rollout_n='two' is not a valid integer",
        "rft: error: rft_trainer: --data_val_files is required",
        "rft: error: rft_trainer: --actor_model_path is required",
    ]
    with pytest.raises(ComponentError) as err:  # a plan refusal, the canonical config's problem and the launch's
        from rft.components.run import run

        run(get_component(V), {**base_values(V, work), "ENGINE": "sglang", "rollout_name": "sglang",
                               "data_train_batch_size": 3, "trainer_nnodes": 2}, outputs_of(V, work))
    engine, name, sizes, launch = str(err.value).splitlines()
    assert engine.startswith("verl_trainer_component: --ENGINE='sglang': rft has no SGLang engine")
    assert name.startswith("verl_trainer_component: --rollout_name='sglang': rft has no SGLang engine")
    assert "--data_train_batch_size" in sizes and "give an invalid config: " in sizes, sizes
    assert launch.startswith("verl_trainer_component: --trainer_nnodes=2: rft starts the processes of one node")


def test_the_documented_grpo_commands_run_from_an_empty_folder(tmp_path):
    """Issue 42: the GRPO example read d/train.jsonl with a `problem` column and a ds.json that no documented
    command wrote. The commands docs/components.md shows, as they stand, in an empty folder (the example cut to
    one step without evaluation or MLflow, to stay quick)."""
    docs = (REPO / "docs" / "components.md").read_text()
    comp = get_component(G)
    for command in comp.setup:
        assert command in docs, command
        argv, _, out = (part.strip() for part in command.partition(">"))
        proc = rft_here(*shlex.split(argv)[1:], cwd=tmp_path)
        if out:
            (tmp_path / out).write_text(proc.stdout)
    argv = _documented(G)
    i = argv.index("--mlflow_model_folder")
    rft_here(*argv[:i], *argv[i + 2:], "--max_steps", "1", "--eval_strategy", "no", cwd=tmp_path)
    out = tmp_path / "out" / "grpo"
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (out / "model" / "model.safetensors").is_file()


def test_grpo_names_the_data_source_a_mistyped_one_meant(work, tmp_path):
    """Rows whose data_source no built-in scorer knows (and no reward_function): the refusal lists them with the
    closest built-in one (config.suggest's did_you_mean, as rft train's check says it) and the built-in sources
    closest first; it listed the names without a suggestion."""
    from rft.data.io import read_rows

    rows = [dict(row) for row in read_rows(work / "d" / "train.jsonl")]
    with (tmp_path / "train.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps({**row, "data_source": "arithmetik"}, default=str) + "\n")
    with pytest.raises(ComponentError) as err:
        resolved(G, work, dataset_train_split=str(tmp_path / "train.jsonl"))
    message = str(err.value)
    assert "rows with data_source 'arithmetik' (did you mean 'arithmetic'?) have no built-in reward scorer " \
           "(built-in: arithmetic, " in message, message
    assert "reward_function" in message, message
    assert message.startswith(f"group_relative_policy_optimization: --dataset_train_split='{tmp_path}/train.jsonl': ")
    (tmp_path / "named").mkdir()  # the same rows from dataset_name: the refusal named dataset_train_split, not given
    shutil.copy(tmp_path / "train.jsonl", tmp_path / "named" / "train.jsonl")
    with pytest.raises(ComponentError) as err:
        resolved(G, work, dataset_train_split=None, dataset_name=str(tmp_path / "named"))
    assert str(err.value).startswith(f"group_relative_policy_optimization: --dataset_name='{tmp_path}/named': rows "
                                     "with data_source 'arithmetik'"), str(err.value)
    assert f"in {tmp_path}/named/train.jsonl;" in str(err.value)
    (tmp_path / "gsm8k").mkdir()  # GSM8K as published: the command that converts it
    (tmp_path / "gsm8k" / "train.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    with pytest.raises(ComponentError) as err:
        resolved(G, work, dataset_train_split=str(tmp_path / "gsm8k" / "train.jsonl"))
    assert str(err.value).endswith(f"the rows are GSM8K's own (question, answer): `rft data gsm8k {tmp_path}/gsm8k "
                                   "OUT` writes them as verl's rows (OUT/train.parquet, OUT/test.parquet): pass those")


def test_config_show_resolves_a_fractional_epoch_count(work):
    """`rft config show` (no file checks) refused --num_train_epochs 1.5 as if the dataset were not readable; it
    counts the rows as the run does: ceil(1.5 x 64 rows / 4 prompts per step) = 24 steps."""
    values = {**base_values(G, work), "num_train_epochs": 1.5, "per_device_train_batch_size": 8,
              "num_generations": 2}
    cfg, _ = resolve(get_component(G), values, outputs_of(G, work), for_run=False)
    assert cfg.trainer.total_training_steps == 24
    assert resolve(get_component(G), values, outputs_of(G, work))[0].trainer.total_training_steps == 24

def test_processes_on_cpu_and_several_nodes(work):
    """n_gpus_per_node on a machine without CUDA: that many CPU processes (a note says so); nnodes > 1 needs torchrun
    on every node, so a run started without a launcher is refused before anything loads."""
    from rft.components.run import run

    if not _cuda():
        _, plan = resolved(R, work, trainer_n_gpus_per_node=2)
        assert any("2 CPU processes (gloo)" in note for note in plan.notes), plan.notes
    with pytest.raises(ComponentError, match="torchrun --nnodes 2") as err:
        run(get_component(R), {**base_values(R, work), "trainer_nnodes": 2}, outputs_of(R, work))
    assert f"-m rft component {R} ...`" in str(err.value) and "rft train" not in str(err.value), err.value


def test_a_config_error_of_one_input_says_gives(work):
    with pytest.raises(ComponentError) as err:
        resolved(R, work, data_train_batch_size=-4)
    assert str(err.value) == ("rft_trainer: --data_train_batch_size gives an invalid config: --data_train_batch_size "
                              "must be a positive integer, got -4")


def test_config_errors_and_notes_name_the_inputs_not_rfts_keys(work, caplog):
    """A component user sets inputs, not rft's keys: an error or note told them to "set
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=N", a key they cannot give. Each key an input sets as given
    is named by the input (`--actor_rft_micro_batch_size_per_gpu=2`), its shortened forms too (`rollout.n`)."""
    with pytest.raises(ComponentError) as err:
        resolved(R, work, actor_rft_micro_batch_size_per_gpu=3)
    assert str(err.value) == (
        "rft_trainer: --actor_rft_micro_batch_size_per_gpu gives an invalid config: a mini-batch holds "
        "--actor_rft_mini_batch_size x --rollout_n = 4 x 2 = 8 rows per process, which is not a multiple of "
        "--actor_rft_micro_batch_size_per_gpu (3): set --actor_rft_micro_batch_size_per_gpu to a divisor of 8, e.g. "
        "--actor_rft_micro_batch_size_per_gpu=2")
    with pytest.raises(ComponentError) as err:
        resolved(V, work, data_train_batch_size=3)
    message = str(err.value)
    assert "set --actor_ppo_mini_batch_size to a divisor of 3, e.g. --actor_ppo_mini_batch_size=3" in message
    assert "--data_train_batch_size (3) must be a multiple of --actor_ppo_mini_batch_size (4)" in message
    assert "ppo_mini_batch_size " not in message.replace("--actor_ppo_mini_batch_size", "")
    assert "data.train_batch_size" not in message
    caplog.set_level("WARNING", logger="rft")
    resolved(R, work, actor_use_kl_loss=False, actor_kl_loss_coef=0.5)
    note = next(r.getMessage() for r in caplog.records if "kl_loss_coef" in r.getMessage())
    assert note == "rft: note: --actor_use_kl_loss=false (no KL loss), so these keys have no effect: " \
                   "--actor_kl_loss_coef=0.5", note


def test_a_key_no_input_sets_as_given_stays_named(work):
    """A key an input sets to something computed (GRPO's mini batch: per_device_train_batch_size x
    gradient_accumulation_steps x processes / num_generations) keeps its name, as its value is not the input's; one
    no input of the component sets ends the line saying so; one an input can set in other cases is not said to be
    unsettable (max_steps sets trainer.total_training_steps)."""
    _, plan = resolved(G, work, per_device_train_batch_size=4)
    assert plan.in_input_terms("set actor_rollout_ref.actor.ppo_mini_batch_size=3 or ppo_micro_batch_size_per_gpu=2"
                               ) == "set actor_rollout_ref.actor.ppo_mini_batch_size=3 or --per_device_train_batch_size=2"
    assert plan.in_input_terms("start a new run (or trainer.resume_mode=disable); raise trainer.total_training_steps"
                               ) == ("start a new run (or trainer.resume_mode=disable); raise "
                                     "trainer.total_training_steps; group_relative_policy_optimization has no input "
                                     "that sets trainer.resume_mode")
    assert plan.in_input_terms("w/actor_rollout_ref.actor.optim.lr.txt; actor_rollout_ref.actor.optim.lr.") == \
        "w/actor_rollout_ref.actor.optim.lr.txt; --learning_rate."  # a path is not a key


def test_required_inputs_and_outputs(work):
    with pytest.raises(ComponentError, match="--actor_model_path"):
        resolve(get_component(R), {"data_train_files": "x.parquet", "data_val_files": "y.parquet"})
    with pytest.raises(ComponentError, match="--model_output is required"):
        resolve(get_component(R), base_values(R, work), {})
    with pytest.raises(ComponentError, match="--output_model_path or mlflow_model_folder"):
        resolve(get_component(G), base_values(G, work), {})


def test_an_output_that_would_replace_other_files_is_refused_before_training(work, tmp_path):
    """A model output replaces its folder whole: given an existing file, a folder of other files or the model input
    itself, the run trained and then deleted them without a word (the file became the model folder). Refused before
    anything loads; an earlier run's model_output, an empty folder, or a run folder with other files are fine."""
    import importlib.util

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "papers").mkdir()
    (tmp_path / "papers" / "a.pdf").write_text("mine")
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()

    def refusals(comp: str, **outputs) -> list[str]:
        try:
            resolve(get_component(comp), base_values(comp, work), {**outputs_of(comp, work), **outputs})
        except ComponentError as e:
            return str(e).splitlines()
        return []

    t = str(tmp_path)
    assert refusals(R, model_output=f"{t}/notes.txt", intermediate_folder=f"{t}/notes.txt") == [
        f"rft_trainer: --model_output='{t}/notes.txt' is a file, not a folder; give a new or empty folder",
        f"rft_trainer: --intermediate_folder='{t}/notes.txt' is a file, not a folder; give a new folder, or an "
        "earlier run's to resume it"]
    assert refusals(V, model_output=f"{t}/papers") == [
        f"verl_trainer_component: --model_output='{t}/papers' holds other files (a.pdf), not an earlier run's "
        "model_output (no config.json); the output replaces its folder whole, so give a new or empty folder"]
    assert refusals(R, model_output=str(work / "m")) == [
        f"rft_trainer: --model_output='{work}/m' holds the model folder of --actor_model_path, which this output "
        "would replace; give another folder"]
    assert refusals(R, model_output=f"{t}/out", intermediate_folder=f"{t}/out/work") == [
        f"rft_trainer: --model_output='{t}/out' holds --intermediate_folder ({t}/out/work), which this output would "
        "replace; give another folder"]
    assert refusals(R, model_output=f"{t}/out/work/model", intermediate_folder=f"{t}/out/work") == []
    if importlib.util.find_spec("mlflow") is not None:  # (without it the output is refused as such)
        assert refusals(G, output_model_path=f"{t}/papers", mlflow_model_folder=f"{t}/earlier") == [
            f"group_relative_policy_optimization: --mlflow_model_folder='{t}/earlier' holds other files "
            "(config.json), not an earlier run's mlflow_model_folder (no MLmodel); the output replaces its folder "
            "whole, so give a new or empty folder"]
    assert refusals(R, model_output=f"{t}/earlier", intermediate_folder=f"{t}/papers") == []
    assert refusals(V, model_output=f"{t}/empty") == []
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "papers" / "a.pdf").is_file()

def test_mlflow_output_without_mlflow_is_refused(work, monkeypatch):
    import rft.components.outputs as outputs

    monkeypatch.setattr(outputs.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ComponentError, match="mlflow_model_folder: mlflow is not installed.*rft\\[mlflow\\]"):
        resolve(get_component(G), base_values(G, work), {"mlflow_model_folder": str(work / "never")})


def test_the_mlflow_model_of_a_local_folder_asks_no_hub_and_warns_nothing(work, tmp_path, monkeypatch, capfd):
    """MLflow fetched the model card and license files from the Hub under the model's name, a local folder: with
    the network up it retried ~20 s, and every component run warned twice ("model card could not be retrieved",
    "Unable to find license information"). The folder's own README (its license) is the card; no Hub request."""
    import socket

    import huggingface_hub
    import mlflow.pyfunc

    from rft.components.outputs import write_mlflow_model

    connects = []  # every connection or name lookup the save tries
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: connects.append(address) or _refused())
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: connects.append(host) or _refused())
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # as a user's shell has it
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    model = tmp_path / "model"
    shutil.copytree(work / "m", model)
    (model / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a model of mine\n")
    write_mlflow_model(model, tmp_path / "mlflow")
    said = capfd.readouterr()
    assert "WARNING" not in said.err + said.out, said.err  # MLflow's own handler writes to the console
    assert "a model of mine" in (tmp_path / "mlflow" / "model_card.md").read_text()
    assert "apache-2.0" in (tmp_path / "mlflow" / "model_card_data.yaml").read_text()
    assert connects == []
    assert type(mlflow.pyfunc.load_model(str(tmp_path / "mlflow"))).__name__ == "PyFuncModel"


def _refused():
    raise OSError("no network in this test")


# ----------------------------------------------------------------------------------------------- DeepSpeed
DS_CASES = [
    ({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "train_batch_size": 8,
      "gradient_clipping": 1.0}, f"{AA}.ppo_micro_batch_size_per_gpu", 8),
    ({"train_micro_batch_size_per_gpu": 4}, REFUSED, "train_micro_batch_size_per_gpu=4 differs"),
    ({"gradient_accumulation_steps": 2}, REFUSED, "gradient_accumulation_steps=2 differs"),
    ({"train_batch_size": 16}, REFUSED, "train_batch_size=16 differs"),
    ({"gradient_clipping": 0.5}, REFUSED, "gradient_clipping=0.5 differs from max_grad_norm=1.0"),
    ({"bf16": {"enabled": False}}, f"{RO}.dtype", "float32"),
    ({"bf16": {"enabled": True}}, f"{RO}.dtype", "bfloat16"),
    ({"bf16": {"enabled": "auto"}}, f"{RO}.dtype", "bfloat16"),
    ({"bf16": {"enabled": True}}, f"{AA}.fsdp_config.mixed_precision.param_dtype", "bfloat16"),
    ({"bf16": {"enabled": False}}, f"{AA}.fsdp_config.mixed_precision.param_dtype", "float32"),
    ({"bf16": {"enabled": True}, "fp16": {"enabled": True}}, REFUSED, "fp16.enabled=true together with bf16"),
    ({"zero_optimization": {"stage": 0}}, f"{AA}.strategy", "fsdp"),
    ({"zero_optimization": {"stage": 2}}, f"{AA}.strategy", "fsdp2"),
    ({"zero_optimization": {"stage": 5}}, REFUSED, "zero_optimization.stage=5"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
     f"{AA}.fsdp_config.optimizer_offload", True),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}, f"{AA}.fsdp_config.param_offload",
     True),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}, f"{AR}.fsdp_config.param_offload",
     True),
    ({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}, REFUSED, "only with stage 3"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x"}}}, REFUSED,
     "zero_optimization.offload_param.device='nvme'"),
    ({"zero_optimization": {"stage": 3, "zero_quantized_weights": True}}, REFUSED,
     "zero_optimization.zero_quantized_weights"),
    ({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"}},
     f"{AA}.strategy", "fsdp2"),
    ({"foo": 1}, REFUSED, "deepspeed_config: foo is not a DeepSpeed setting"),
    ({"tensorboard": {"enabled": True, "output_path": "tb"}}, REFUSED, "tensorboard.enabled=True"),
    ({"tensorboard": {"enabled": False}}, f"{AA}.strategy", "fsdp"),
    ({"optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                 "weight_decay": "auto"}}}, f"{AA}.optim.optimizer", "adamw_torch"),
    ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}, REFUSED, "optimizer.params.lr=0.001"),
    ({"optimizer": {"type": "Lamb"}}, REFUSED, "optimizer.type='Lamb'"),
    ({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto", "total_num_steps": "auto"}}},
     f"{AA}.optim.lr_scheduler_type", "linear"),
    ({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto"}}},
     f"{AA}.optim.lr_scheduler_type", "constant_with_warmup"),
    ({"scheduler": {"type": "WarmupCosineLR"}}, f"{AA}.optim.lr_scheduler_type", "cosine"),
    ({"scheduler": {"type": "OneCycle"}}, REFUSED, "scheduler.type='OneCycle'"),
    ({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}}, REFUSED,
     "scheduler.params.warmup_num_steps=10"),
]


@pytest.mark.parametrize("ds, key, expected", DS_CASES, ids=[f"ds{i}" for i in range(len(DS_CASES))])
def test_deepspeed_config_is_honoured_or_refused_by_key(work, tmp_path, ds, key, expected):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds))
    if key == REFUSED:
        with pytest.raises(ComponentError) as err:
            resolved(G, work, deepspeed_config=str(path))
        assert "--deepspeed_config" in str(err.value) and expected in str(err.value), str(err.value)
        return
    cfg, _ = resolved(G, work, deepspeed_config=str(path))
    assert canonical(cfg, key) == expected


def test_deepspeed_sections_replace_the_inputs_they_duplicate(work, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"optimizer": {"type": "AdamW"}, "scheduler": {"type": "WarmupCosineLR"}}))
    with pytest.raises(ComponentError) as err:
        resolved(G, work, deepspeed_config=str(path), optim="sgd", lr_scheduler_type="linear")
    assert "--optim='sgd' is unused" in str(err.value) and "--lr_scheduler_type='linear' is unused" in str(err.value)


# ------------------------------------------------------------------------- optimizers and schedules, for real
@pytest.mark.parametrize("name", ["adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop"])
def test_each_available_optimizer_steps(name):
    import torch

    from rft.config.schema import OptimConfig
    from rft.workers.policy import build_optimizer

    p = torch.nn.Parameter(torch.ones(4, 4))
    opt = build_optimizer([p], OptimConfig(lr=0.1, weight_decay=0.0), name)
    (p ** 2).sum().backward()
    opt.step()
    assert float(p.detach().abs().max()) < 1.0
    default = build_optimizer([p], OptimConfig())
    assert isinstance(default, torch.optim.AdamW)


@pytest.mark.parametrize("name", ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                                  "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau"])
def test_each_scheduler_builds_with_warmup(name):
    import torch

    from rft.workers.optim import is_plateau, make_named_scheduler, plateau_step

    p = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = make_named_scheduler(opt, name, warmup_steps=2, total_steps=10)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        if is_plateau(sched):
            plateau_step(sched, {"val-core/arithmetic/reward/mean@1": 0.0})
        else:
            opt.step()
            sched.step()
    if name in ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant_with_warmup", "inverse_sqrt"):
        assert lrs[0] == 0.0 and lrs[1] == 0.5  # linear warmup from 0
    if name == "constant":
        assert lrs == [1.0] * 4
    if name == "reduce_lr_on_plateau":
        assert lrs[0] == 1.0


# ------------------------------------------------------------------------------------------------------ pip
def test_requirements_parsing_and_constraints():
    from importlib import metadata

    from rft.components.pip import constraints_text, parse_requirements, pip_command

    assert parse_requirements("transformers==4.30.0,torch==2.3.1") == ["transformers==4.30.0", "torch==2.3.1"]
    assert parse_requirements(" a>=1,<2 , b ,") == ["a>=1,<2", "b"]
    assert f"torch=={metadata.version('torch')}" in constraints_text()
    cmd = pip_command(["x"], "c.txt")
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"] and "--constraint" in cmd and cmd[-1] == "x"


def test_failed_install_stops_the_run_with_pips_message(work, tmp_path):
    args = [*_cli_args(R, work), "--pypi_packages_override", "./no/such/package", "--model_output",
            str(tmp_path / "model"), "--intermediate_folder", str(tmp_path / "work")]
    proc = rft_here("component", R, *args, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "pypi_packages_override: pip install ./no/such/package failed" in proc.stderr
    assert "does not exist" in proc.stderr or "Invalid requirement" in proc.stderr  # pip's own words
    assert not (tmp_path / "work").exists() and not (tmp_path / "model").exists()


def _wheel(folder: Path, name: str) -> Path:
    """A minimal pure-Python wheel (no build backend, no network)."""
    path = folder / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{k},,\n" for k in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return path


def test_override_installs_into_the_running_environment(tmp_path):
    import importlib

    from rft.components.pip import install_requirements

    name = "rft_override_probe"
    wheel = _wheel(tmp_path, name)
    try:
        assert install_requirements(str(wheel)) == [str(wheel)]
        assert importlib.import_module(name).VALUE == 42
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], capture_output=True)
        sys.modules.pop(name, None)


# ---------------------------------------------------------------------------------------- Azure ML YAMLs
@pytest.mark.parametrize("comp", list(TABLE))
def test_component_yaml_is_current(comp):
    path = REPO / "components" / f"{comp}.yaml"
    assert path.read_text() == component_yaml(get_component(comp)), \
        f"{path} is stale: run `rft component {comp} --emit-yaml > components/{comp}.yaml`"


def _aml_command(doc: dict, values: dict, outputs: dict) -> list[str]:
    """The command Azure ML runs: ${{inputs.x}} substituted, $[[...]] blocks without a value dropped."""
    text = doc["command"]

    def optional(m: re.Match) -> str:
        name = re.search(r"inputs\.(\w+)", m.group(1)).group(1)
        return m.group(1) if values.get(name) is not None else ""

    text = re.sub(r"\$\[\[(.*?)\]\]", optional, text)
    text = re.sub(r"\$\{\{inputs\.(\w+)\}\}", lambda m: str(values[m.group(1)]), text)
    text = re.sub(r"\$\{\{outputs\.(\w+)\}\}", lambda m: str(outputs[m.group(1)]), text)
    return shlex.split(text)


@pytest.mark.parametrize("comp", list(TABLE))
def test_yaml_and_cli_agree(comp):
    """Each YAML input is a CLI option with the same type, default and enum, its command line names every input and
    output, and the command Azure ML would run (every input at its default) parses back to the same values."""
    component = get_component(comp)
    doc = yaml.safe_load(component_yaml(component))
    assert doc["name"] == comp and doc["type"] == "command" and doc["version"] == component.version
    parser = component.parser()
    actions = {a.dest: a for a in parser._actions}
    assert list(doc["inputs"]) == [i.name for i in component.inputs]
    for name, entry in doc["inputs"].items():
        action, inp = actions[name], component.input(name)
        assert action.option_strings == [f"--{name}"]
        assert entry["type"] == inp.type and action.type.__name__ == inp.type
        assert entry.get("default") == action.default == inp.default
        assert entry.get("enum") == (list(inp.enum) if inp.enum else None)
        assert entry["optional"] == inp.optional and action.required == inp.required
        assert f"inputs.{name}" in doc["command"]
    assert list(doc["outputs"]) == [o.name for o in component.outputs]
    for name, entry in doc["outputs"].items():
        assert entry["type"] == next(o.type for o in component.outputs if o.name == name)
        assert f"--{name} '${{{{outputs.{name}}}}}'" in doc["command"]
    # Azure ML gives the defaults (booleans as True/False) and test values to the required inputs
    values = {n: (e.get("default") if "default" in e else (None if e["optional"] else f"/mnt/{n}"))
              for n, e in doc["inputs"].items()}
    argv = _aml_command(doc, values, {n: f"/mnt/out/{n}" for n in doc["outputs"]})
    assert argv[:3] == ["rft", "component", comp]
    parsed = parser.parse_args(argv[3:])
    for name, value in values.items():
        assert getattr(parsed, name) == value, name


def test_emit_yaml_from_the_command_line(tmp_path):
    proc = rft_here("component", G, "--emit-yaml", cwd=tmp_path)
    assert proc.stdout == component_yaml(get_component(G))


# ------------------------------------------------------------------------------------------ the command line
def _cli_args(comp: str, w: Path) -> list[str]:
    out = []
    for k, v in base_values(comp, w).items():
        out += [f"--{k}", str(v)]
    return out


def test_help_shows_each_input_with_its_description_and_default():
    for comp in components().values():
        text = " ".join(comp.parser().format_help().split())
        for inp in comp.inputs:
            assert f"--{inp.name} {inp.type.upper()}" in text
            assert " ".join(inp.description.split())[:40] in text, inp.name
            assert ("default: " + ("none" if inp.default is None else repr(inp.default))) in text, inp.name


def test_config_show_prints_the_canonical_config(work, tmp_path):
    args = ["config", "show", R, *_cli_args(R, work), "--actor_rft_mini_batch_size", "2"]
    proc = rft_here(*args, cwd=tmp_path)
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 2
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 2
    assert "# vLLM settings at their spec defaults" in proc.stdout


def test_refused_input_exits_2_before_anything_loads(work, tmp_path):
    args = [*_cli_args(V, work), "--ENGINE", "vllm", "--rollout_name", "vllm", "--model_output",
            str(tmp_path / "model")]
    proc = rft_here("component", V, *args, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "--ENGINE='vllm'" in proc.stderr and "--rollout_name='vllm'" in proc.stderr
    assert not (tmp_path / "model").exists()


# ------------------------------------------------------------------------ two steps from the documented lines
@pytest.fixture(scope="module")
def runs(work) -> Path:
    """A run folder with the files the documented command lines name (m, d/..., ds.json)."""
    root = work / "runs"
    root.mkdir()
    for name in ("m", "d", "ds.json"):
        (root / name).symlink_to(work / name)
    return root


def _documented(comp: str) -> list[str]:
    example = get_component(comp).example
    docs = (REPO / "docs" / "components.md").read_text()
    assert example in docs.replace("\\\n    ", ""), f"docs/components.md does not show the {comp} example"
    argv = shlex.split(example)
    assert argv[:3] == ["rft", "component", comp]
    return argv[1:]


@pytest.mark.slow
@pytest.mark.parametrize("comp", [R, V])
def test_verl_style_component_trains_two_steps_and_writes_its_outputs(runs, comp):
    rft_here(*_documented(comp), cwd=runs)
    out = runs / "out"
    assert (out / "model" / "model.safetensors").is_file() and (out / "model" / "tokenizer.json").is_file()
    if comp == R:  # intermediate_folder: the run folder with its checkpoints
        assert sorted(p.name for p in (out / "work" / "checkpoints").iterdir()) == [
            "global_step_1", "global_step_2", "latest"]
        steps = [json.loads(x)["step"] for x in (out / "work" / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2]
    shutil.rmtree(out)


@pytest.mark.slow
def test_grpo_component_trains_two_steps_and_writes_its_outputs(runs, monkeypatch):
    import importlib.util

    monkeypatch.setenv("MLFLOW_TRACKING_URI", ENV["MLFLOW_TRACKING_URI"])
    argv = _documented(G)
    have_mlflow = importlib.util.find_spec("mlflow") is not None
    if not have_mlflow:  # the MLflow output is tested where mlflow is installed (pip install 'rft[mlflow]')
        i = argv.index("--mlflow_model_folder")
        argv = argv[:i] + argv[i + 2:]
    rft_here(*argv, cwd=runs)
    out = runs / "out" / "grpo"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["global_step_1", "global_step_2", "latest"]
    assert (out / "model" / "model.safetensors").is_file()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert "val-core/arithmetic/reward/mean@2" in lines[-1]  # eval_steps 2: sampled num_generations per prompt
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["actor_rollout_ref"]["actor"]["strategy"] == "fsdp2"  # ds.json: ZeRO-3
    if have_mlflow:
        _check_mlflow_model(runs / "out" / "mlflow")


@pytest.mark.slow
def test_a_rerun_into_a_complete_run_writes_its_outputs_and_names_the_inputs(work, tmp_path):
    """A second run into a finished intermediate_folder ended with "nothing to do" (exit 0) and never wrote its
    model_output; it writes it from the run's model now. A run's own errors (a resume with a changed input, a
    prompt over the limit) named only rft's keys: the inputs behind them lead the line."""
    args = [*_cli_args(R, work), "--total_training_steps", "1", "--data_max_prompt_length", "32",
            "--data_max_response_length", "4", "--intermediate_folder", "work"]
    rft_here("component", R, *args, "--model_output", "first", cwd=tmp_path)
    again = rft_here("component", R, *args, "--model_output", "second", cwd=tmp_path)
    assert (tmp_path / "second" / "model.safetensors").read_bytes() == \
        (tmp_path / "work" / "model" / "model.safetensors").read_bytes()
    assert "rft rft_trainer: --total_training_steps, --trainer_total_epochs: work is complete (1/1 steps" in again.stdout
    assert "(raise --total_training_steps / --trainer_total_epochs to train on)" in again.stdout  # in input terms
    assert "trainer.total" not in again.stdout and " total_epochs" not in again.stdout
    assert "rft rft_trainer: model_output -> second" in again.stdout
    changed = rft_here("component", R, *args, "--model_output", "third", "--actor_optim_lr", "1e-4", cwd=tmp_path,
                       check=False)
    assert changed.returncode == 2 and not (tmp_path / "third").exists()
    assert changed.stderr.startswith("rft: error: rft_trainer: --actor_optim_lr, --intermediate_folder: resuming "
                                     "work from global_step_1 with changed keys --actor_optim_lr (3e-06 -> 0.0001)")
    assert "start a new run in another --intermediate_folder (or trainer.resume_mode=disable); rft_trainer has no " \
           "input that sets trainer.resume_mode\n" in changed.stderr
    assert "optim.lr" not in changed.stderr and "default_local_dir" not in changed.stderr
    long = rft_here("component", R, *_cli_args(R, work), "--data_max_prompt_length", "4",
                    "--data_filter_overlong_prompts", "false", "--model_output", "fourth", cwd=tmp_path, check=False)
    assert long.returncode == 2
    assert long.stderr.startswith("rft: error: rft_trainer: --data_filter_overlong_prompts, --data_max_prompt_length, "
                                  "--data_truncation: ")
    assert "> --data_max_prompt_length=4; raise it, set --data_filter_overlong_prompts=true, or set --data_truncation " \
           "to left|right|middle" in long.stderr
    assert "data." not in long.stderr.replace("d/train.parquet", "")


def test_a_killed_processs_scratch_folder_is_removed_by_the_next_and_a_live_ones_kept(tmp_path, monkeypatch):
    """The temporary run folder of a component run (`fsutil.held_scratch`) that a SIGKILL left is removed by the
    next `clean_abandoned` of its name; one a live process holds is left alone."""
    from rft import fsutil

    monkeypatch.setattr(fsutil, "ABANDONED_AFTER_S", 0.0)
    final = tmp_path / "rft-rft_trainer"
    code = ("import sys, time\nfrom rft.fsutil import held_scratch\n"
            "with held_scratch(sys.argv[1]) as d:\n    (d / 'f').write_text('x')\n    print(d, flush=True)\n"
            "    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(final)], env=ENV, stdout=subprocess.PIPE, text=True)
    killed = Path(proc.stdout.readline().strip())
    proc.kill()
    proc.wait()
    proc.stdout.close()
    assert killed.parent == tmp_path and killed.name.startswith(".rft-rft_trainer.tmp-")
    assert (killed / "f").is_file()  # SIGKILL: nothing ran to remove it
    with fsutil.held_scratch(final) as live:
        assert fsutil.clean_abandoned(final) == [f"removed {killed}, the folder it was writing"]
        assert sorted(tmp_path.iterdir()) == [live]
    assert not live.exists()


def test_the_first_line_of_a_run_in_a_temporary_folder_says_what_keeps_it():
    from rft.components.run import temporary_line

    said = {name: temporary_line(get_component(name), "/tmp/.rft-x.tmp-0") for name in (R, V, G)}
    assert said[V] == ("run folder /tmp/.rft-x.tmp-0: temporary, removed when this command ends (one a killed run "
                       "left is removed by the next component run); this component has no output that keeps it, so "
                       "a rerun starts from step 0")
    assert said[R].endswith("; give --intermediate_folder DIR to keep it, so that the same command resumes from its "
                            "last checkpoint after a stop or a kill")
    assert said[G].endswith("; give --output_model_path DIR to keep it, so that the same command resumes from its "
                            "last checkpoint after a stop or a kill")


@pytest.mark.slow
def test_a_killed_component_run_leaves_its_temporary_run_folder_to_the_next(work, tmp_path, monkeypatch):
    """Without --intermediate_folder the run folder was a tempfile.mkdtemp folder: a run killed (SIGKILL, OOM) left
    it, with its checkpoints, for good. The first line says where it is and how to keep it; the next component run
    removes the one a killed run left (nobody holds its lock), not one a live run holds."""
    import signal
    import tempfile

    from rft import fsutil

    temp = tmp_path / "tmp"
    temp.mkdir()
    args = [*_cli_args(R, work), "--data_max_prompt_length", "32", "--data_max_response_length", "4",
            "--trainer_save_freq", "1", "--trainer_test_freq", "-1", "--trainer_val_before_train", "false"]
    proc = subprocess.Popen([sys.executable, "-m", "rft", "component", R, *args, "--total_training_steps", "50",
                             "--model_output", "first"], cwd=tmp_path, env={**ENV, "TMPDIR": str(temp)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("step "):  # global_step_1 is saved
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    left = list(temp.glob(".rft-rft_trainer.tmp-*"))
    assert len(left) == 1 and (left[0] / "checkpoints" / "global_step_1").is_dir(), "".join(lines)
    assert next(x for x in lines if x.startswith("rft")) == (
        f"rft rft_trainer: run folder {left[0]}: temporary, removed when this command ends (one a killed run left is "
        "removed by the next component run); give --intermediate_folder DIR to keep it, so that the same command "
        "resumes from its last checkpoint after a stop or a kill\n")

    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(fsutil, "ABANDONED_AFTER_S", 0.0)  # (a killed run's folder: 10 s without a change)
    with fsutil.held_scratch(temp / "rft-rft_trainer") as live:  # a run in progress
        again = rft_here("component", R, *args, "--total_training_steps", "1", "--model_output", "second",
                         cwd=tmp_path)
        assert sorted(temp.glob(".rft-*")) == [live]
    assert f"rft rft_trainer: note: a component run was killed: removed {left[0]}, the folder it was writing\n" \
        in again.stdout
    assert (tmp_path / "second" / "model.safetensors").is_file()
    assert not list(temp.glob(".rft-*"))


@pytest.mark.slow
def test_a_stopped_component_run_says_it_starts_again(work, tmp_path):
    """SIGTERM stops a run without --intermediate_folder between phases and its temporary run folder is removed;
    the line said "the same command resumes from <that folder>/checkpoints/global_step_N", which no rerun could."""
    import signal

    temp = tmp_path / "tmp"
    temp.mkdir()
    args = [*_cli_args(R, work), "--data_max_prompt_length", "32", "--data_max_response_length", "4",
            "--trainer_save_freq", "1", "--trainer_test_freq", "-1", "--trainer_val_before_train", "false",
            "--total_training_steps", "50", "--model_output", "first"]
    proc = subprocess.Popen([sys.executable, "-m", "rft", "component", R, *args], cwd=tmp_path,
                            env={**ENV, "TMPDIR": str(temp)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("step "):
            proc.send_signal(signal.SIGTERM)
            break
    lines += proc.stdout.readlines()
    assert proc.wait() == 143, "".join(lines)
    folder = next(x for x in lines if x.startswith("rft rft_trainer: run folder ")).split()[4].rstrip(":")
    assert not list(temp.glob(".rft-*"))
    assert lines[-1].endswith(f"; the run folder {folder} was temporary and is removed, so the same command starts "
                              "the run again from step 0 (give --intermediate_folder DIR to keep a run folder to "
                              "resume from)\n"), "".join(lines)
    assert "resumes from" not in lines[-1].replace("to resume from", "")


def _check_mlflow_model(folder: Path) -> None:
    """The MLflow model loads offline with the transformers flavour and with pyfunc, and generates."""
    pytest.importorskip("mlflow")
    code = (
        "import sys, mlflow.transformers, mlflow.pyfunc\n"
        "pipe = mlflow.transformers.load_model(sys.argv[1])\n"
        "out = pipe('1+2=', max_new_tokens=3, do_sample=False)[0]['generated_text']\n"
        "assert out.startswith('1+2=') and len(out) > 4, out\n"
        "model = mlflow.pyfunc.load_model(sys.argv[1])\n"
        "pred = model.predict(['1+2='], params={'max_new_tokens': 3})\n"
        "assert len(pred) == 1 and pred[0].startswith('1+2='), pred\n"
        "print('ok', type(pipe).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(folder)], env=ENV, cwd=folder.parent,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok TextGenerationPipeline" in proc.stdout


def test_components_doc_tables_are_current():
    from rft.components.docs import refresh

    text = (REPO / "docs" / "components.md").read_text()
    assert refresh(text) == text, "docs/components.md is stale: run python -m rft.components.docs docs/components.md"
