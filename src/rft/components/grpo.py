"""`group_relative_policy_optimization` (../shared/spec/component_grpo.md): TRL's GRPOTrainer with transformers'
training arguments and a DeepSpeed config, mapped onto rft's verl keys with TRL's semantics.

Batches: a TRL optimizer step takes num_processes x per_device_train_batch_size x gradient_accumulation_steps
completions (num_processes: the launcher's WORLD_SIZE, or the num_processes input, with which rft starts the
processes itself), num_generations per prompt, and each generation batch is reused for num_iterations optimizer steps.
rft's step is one generation batch: data.train_batch_size = ppo_mini_batch_size = rows / num_generations prompts,
ppo_micro_batch_size_per_gpu = per_device_train_batch_size, ppo_epochs = num_iterations. TRL counts steps in
optimizer steps, so max_steps, save_steps, eval_steps and logging_steps are divided by num_iterations (rft steps
are rounds of num_iterations optimizer steps; max_steps must be a multiple, the others round up).
"""

from __future__ import annotations

import math
from pathlib import Path

from rft.components.common import check_liger, resolve_model_folder
from rft.components.deepspeed import plan_deepspeed
from rft.components.spec import Component, Input, Output, Plan, vllm_installed

A = "actor_rollout_ref.actor"
M = "actor_rollout_ref.model"
R = "actor_rollout_ref.rollout"
# TRL's ModelConfig LoRA (r 16, alpha 32) on the Azure component's target modules
LORA = {"lora_rank": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj"]}
TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SPLIT_NAMES = {"train": ("train",), "validation": ("validation", "valid", "val", "test")}
_STEPS = "TRL steps are optimizer steps; rft's are rounds of num_iterations of them"


def _i(name, type_, default, description, group, *, optional=True, enum=None, key=None, lands_on="", vllm=False,
       extension=False) -> Input:
    return Input(name=name, type=type_, description=description, default=default, optional=optional,
                 enum=tuple(enum) if enum else None, group=group, key=key, lands_on=lands_on, vllm=vllm,
                 extension=extension)


D, L, G, T, X, E, S, MISC = ("Dataset and Model Inputs", "LoRA Parameters", "GRPO Algorithm Parameters",
                             "Training Parameters", "Text Generation Parameters", "Evaluation Parameters",
                             "Logging and Saving Parameters", "Miscellaneous Parameters")
EXT = "rft extension (TRL GRPOConfig), not in the spec"

INPUTS = (
    _i("dataset_train_split", "uri_file", None, "Path to the training dataset in JSONL format", D,
       lands_on="`data.train_files` (rows: the prompt column, data_source and reward_model.ground_truth)"),
    _i("dataset_validation_split", "uri_file", None, "Path to the validation dataset in JSONL format", D,
       lands_on="`data.val_files`"),
    _i("model_name_or_path", "uri_folder", None, "output folder of model import component containing model "
       "artifacts and a metadata file.", D, optional=False,
       lands_on=f"`{M}.path` (the Hugging Face folder in it, or the one folder below it with a config.json)"),
    _i("deepspeed_config", "uri_file", None, "Path to a custom DeepSpeed configuration file in JSON format", D,
       optional=False, lands_on="read and mapped key by key (docs/components.md): batch sizes, clipping, dtype, "
       "ZeRO stage -> FSDP2, offload -> FSDP offload, optimizer / scheduler; anything else refused by name"),
    _i("dataset_name", "string", "", "Name of the Hugging Face dataset to pull in", D,
       lands_on="a local dataset folder ({split}.jsonl / .parquet, or data/{split}-*.parquet): its train and "
                "validation (or test) splits; a hub id is refused (rft does not download)"),
    _i("dataset_prompt_column", "string", "problem", "Column in the dataset containing the prompt for the chat "
       "completion template", D, optional=False, key="data.prompt_key"),
    _i("apply_lora", "string", "true", 'If "true" enables LoRA fine tuning.', L, enum=["true", "false"],
       lands_on=f"`{M}.lora_rank`=16, `lora_alpha`=32, `target_modules`=[q_proj,k_proj,v_proj] (TRL's LoRA with "
                "the Azure component's modules); false: lora_rank 0"),
    _i("beta", "number", 0.0, "The beta parameter controls the strength of the KL divergence penalty in the "
       "objective function", G, lands_on=f"`{A}.kl_loss_coef` (k3 = low_var_kl), `{A}.use_kl_loss` = beta > 0 "
                                         "(0: no KL term, no reference model)"),
    _i("epsilon", "number", 0.5, "Epsilon value for clipping", G,
       lands_on=f"`{A}.clip_ratio_low` (and `clip_ratio_high` unless epsilon_high), no dual clip"),
    _i("num_iterations", "integer", 3, "Number of iterations per batch (denoted as μ in the algorithm).", G,
       key=f"{A}.ppo_epochs"),
    _i("num_generations", "integer", 4, "Number of generations to sample.The effective batch size (num_processes*"
       "per_device_batch_size*gradient_accumulation_steps) must be evenly divisible by this value.", G,
       key=f"{R}.n"),
    _i("num_train_epochs", "number", 4.0, "Number of training epochs.", T,
       lands_on="`trainer.total_epochs` (a fractional value: `trainer.total_training_steps` = ceil(epochs x "
                "steps per epoch)); max_steps > 0 overrides it"),
    _i("max_steps", "integer", -1, "If set to a positive number, this will override num_train_epochs and train for "
       "exactly this many steps. Set to -1 to disable (default).", T,
       lands_on="`trainer.total_training_steps` = max_steps / num_iterations (" + _STEPS + "; must divide)"),
    _i("per_device_train_batch_size", "integer", 8, "Per device batch size used for training", T,
       lands_on=f"`{A}.ppo_micro_batch_size_per_gpu` and the log-prob micro batches; with gradient_accumulation_"
                "steps and num_generations: `data.train_batch_size` = `ppo_mini_batch_size` = per_device x GAS / "
                "num_generations (must divide)"),
    _i("per_device_eval_batch_size", "integer", 8, "Per device batch size used for evaluation.", T,
       lands_on="`data.val_batch_size` = per_device_eval_batch_size / num_generations prompts (must divide when "
                "evaluating)"),
    _i("gradient_accumulation_steps", "integer", 1, "Number of steps before performing a backward/update pass to "
       "accumulate gradients.", T, lands_on="see per_device_train_batch_size (rows per optimizer step)"),
    _i("learning_rate", "number", 3e-06, "Learning rate for training.", T, key=f"{A}.optim.lr"),
    _i("warmup_ratio", "number", 0.1, "Ratio of total training steps used for a linear warmup from 0 to "
       "`learning_rate`.", T, key=f"{A}.optim.lr_warmup_steps_ratio"),
    _i("max_grad_norm", "number", 1.0, "Maximum gradient norm for gradient clipping.", T, key=f"{A}.grad_clip"),
    _i("optim", "string", "adamw_torch", "The optimizer to use.", T,
       enum=["adamw_torch", "adamw_torch_fused", "adafactor", "ademamix", "sgd", "adagrad", "rmsprop",
             "galore_adamw", "lomo", "adalomo", "grokadamw", "schedule_free_sgd"], key=f"{A}.optim.optimizer",
       lands_on=f"`{A}.optim.optimizer` (torch / transformers optimizers; one that cannot run here is refused by "
                "name)"),
    _i("lr_scheduler_type", "string", "cosine", "The scheduler type to use for learning rate scheduling.", T,
       enum=["linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
             "inverse_sqrt", "reduce_lr_on_plateau"], key=f"{A}.optim.lr_scheduler_type",
       lands_on=f"`{A}.optim.lr_scheduler_type` (transformers' get_scheduler; reduce_lr_on_plateau follows the "
                "validation reward)"),
    _i("max_prompt_length", "integer", 512, "Maximum length of the prompt. If the prompt is longer than this value, "
       "it will be truncated left.", X, key="data.max_prompt_length",
       lands_on="`data.max_prompt_length` with `data.truncation`=left"),
    _i("max_completion_length", "integer", 256, "Maximum length of the generated completion.", X,
       key="data.max_response_length"),
    _i("temperature", "number", 1.0, "Temperature for sampling. The higher the temperature, the more random the "
       "completions.", X, key=f"{R}.temperature", lands_on=f"`{R}.temperature` (and the evaluation's)"),
    _i("top_p", "number", 1.0, "Float that controls the cumulative probability of the top tokens to consider. Must "
       "be in (0, 1]. Set to `1.0` to consider all tokens.", X, key=f"{R}.top_p",
       lands_on=f"`{R}.top_p` (and the evaluation's)"),
    _i("do_eval", "boolean", False, "Whether to run evaluation on the validation set or not. Will be set to True if "
       'eval_strategy is different from "no"', E,
       lands_on="with eval_strategy=no: one validation after the last step (`trainer.test_freq`)"),
    _i("eval_strategy", "string", "no", "Evaluation strategy to use during training. Options are 'no', 'steps', "
       "or 'epoch'.", E, enum=["no", "steps", "epoch"],
       lands_on="`trainer.test_freq`: steps: eval_steps / num_iterations; epoch: the steps of an epoch; no: -1"),
    _i("eval_steps", "integer", 1, "Number of steps between evaluations", E,
       lands_on="`trainer.test_freq` = ceil(eval_steps / num_iterations) with eval_strategy=steps"),
    _i("logging_steps", "number", 5.0, "Number of steps between logging updates.", S,
       lands_on="`trainer.log_freq` = ceil(logging_steps / num_iterations) (< 1: a fraction of all steps)"),
    _i("save_steps", "integer", 100, "Number of steps between saving checkpoints.", S,
       lands_on="`trainer.save_freq` = ceil(save_steps / num_iterations), checkpoints in output_model_path"),
    _i("save_total_limit", "integer", 20, "Maximum number of checkpoints to keep.", S,
       lands_on="`trainer.max_actor_ckpt_to_keep` (<= 0: all)"),
    _i("shuffle_dataset", "boolean", True, "Whether to shuffle the training dataset.", MISC, key="data.shuffle"),
    _i("use_liger_kernel", "boolean", False, "Whether to use the Liger kernel.", MISC, key=f"{M}.use_liger",
       lands_on=f"`{M}.use_liger`; true is refused (no Triton here / not implemented)"),
    _i("vllm_gpu_memory_utilization", "number", 0.3, "Control the GPU memory utilization for vLLM.", MISC,
       vllm=True, key=f"{R}.gpu_memory_utilization"),
    _i("vllm_tensor_parallel_size", "integer", 1, "Control the tensor parallel size for vLLM.", MISC, vllm=True,
       key=f"{R}.tensor_model_parallel_size"),
    # ---- rft extensions: TRL GRPOConfig options the spec fixes at TRL's defaults
    _i("epsilon_high", "number", None, f"Upper clipping epsilon (TRL's epsilon_high; default: epsilon). {EXT}.", G,
       extension=True, lands_on=f"`{A}.clip_ratio_high`"),
    _i("loss_type", "string", "dapo", f"TRL's loss normalisation: grpo, bnpo, dr_grpo or dapo. {EXT}.", G,
       enum=TRL_LOSS_TYPES, extension=True, lands_on=f"`{A}.loss_agg_mode` (rft.algorithms.trl_loss_agg_mode)"),
    _i("scale_rewards", "string", "group", f"TRL's advantage scaling: group, batch or none. {EXT}.", G,
       enum=["group", "batch", "none"], extension=True, key="algorithm.scale_rewards"),
    _i("num_processes", "integer", 1, "Processes (devices) to train on, accelerate's --num_processes: TRL's "
       "effective batch is num_processes x per_device_train_batch_size x gradient_accumulation_steps. Under a "
       f"launcher (torchrun, accelerate launch) its WORLD_SIZE. {EXT}.", T, extension=True,
       lands_on="`trainer.n_gpus_per_node` (`trainer.nnodes` from the launcher's LOCAL_WORLD_SIZE): one process "
                "per device, on a machine without CUDA CPU processes with gloo; rft starts them itself when no "
                "launcher did"),
    _i("reward_function", "uri_file", None, "Python file defining compute_score(data_source, solution_str, "
       "ground_truth, extra_info); default: rft's built-in scorers by data_source. rft extension, not in the spec.",
       D, extension=True, key="custom_reward_function.path"),
)

OUTPUTS = (
    Output("mlflow_model_folder", "mlflow_model", "output folder containing _best_ model as defined by "
           "_metric_for_best_model_. Along with the best model, output folder contains checkpoints saved after "
           "every evaluation which is defined by the _evaluation_strategy_. Each checkpoint contains the model "
           "weight(s), config, tokenizer, optimzer, scheduler and random number states.",
           "an MLflow model (transformers flavour, text-generation) of the final model; needs `pip install "
           "rft[mlflow]`"),
    Output("output_model_path", "uri_folder", "Path to the output model folder containing the checkpoints",
           "`trainer.default_local_dir`: checkpoints/global_step_N every save_steps (at most save_total_limit), "
           "model/ (final, LoRA merged), metrics.jsonl"),
)


def _rounds(steps: float, mu: int) -> int:
    return max(1, math.ceil(steps / mu))


def _split_files(folder: Path, split: str) -> list[str]:
    for name in SPLIT_NAMES[split]:
        for pattern in (f"{name}.jsonl", f"{name}.parquet", f"{name}-*.parquet", f"{name}-*.jsonl",
                        f"data/{name}.jsonl", f"data/{name}.parquet", f"data/{name}-*.parquet",
                        f"data/{name}-*.jsonl", f"*/{name}-*.parquet", f"{name}/*.parquet", f"{name}/*.jsonl"):
            found = sorted(str(p) for p in folder.glob(pattern) if p.is_file())
            if found:
                return found
    return []


def _datasets(p: Plan) -> tuple[list[str] | str | None, list[str] | str | None]:
    """(train files, validation files) from the split inputs and dataset_name."""
    v = p.values
    train, val, name = v["dataset_train_split"], v["dataset_validation_split"], v["dataset_name"]
    if name and train and val:
        p.refuse("dataset_name", f"={name!r} is unused: dataset_train_split and dataset_validation_split are both "
                                 "given; remove one")
        return train, val
    if name and (not train or not val):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            p.refuse("dataset_name", f"={name!r} is not a local folder; rft does not download from the Hugging "
                                     "Face hub (no network at run time): download the dataset and pass its folder, "
                                     "or pass dataset_train_split / dataset_validation_split (JSONL)")
            return train, val
        if not train:
            train = _split_files(folder, "train") or None
            if train is None:
                p.refuse("dataset_name", f"={name!r} holds no train split (train.jsonl, train.parquet, "
                                         "data/train-*.parquet, ...)")
        if not val:
            val = _split_files(folder, "validation") or None
        p.notes.append(f"dataset_name: train {train}, validation {val}")
    if not train and not name:
        p.refuse("dataset_train_split", "is required (or dataset_name, a local dataset folder)")
    return train, val


def _count_rows(p: Plan, files) -> int | None:
    """The number of training rows (None: not readable); without a reward_function, in a run (`check_paths`),
    each row must name a built-in scorer."""
    from rft.data.io import raw_task, read_rows
    from rft.rewards.scorers import SCORERS, known_sources, meant_source

    try:
        rows = [row for f in ([files] if isinstance(files, str) else files) for row in read_rows(f)]
    except Exception:  # a missing or bad file: the config validation names it
        return None
    if p.values["reward_function"] is None and p.check_paths:
        bad = sorted({str(r.get("data_source")) for r in rows if r.get("data_source") not in SCORERS})
        if bad:
            listed = ", ".join(f"{src!r}{f' ({meant})' if (meant := meant_source(src)) else ''}" for src in bad[:5])
            given = "dataset_train_split" if p.values["dataset_train_split"] else "dataset_name"  # the rows' input
            listed_files = [files] if isinstance(files, str) else list(files)
            where, folder = ", ".join(map(str, listed_files)), Path(str(listed_files[0])).parent
            found = raw_task(rows[0], folder) if rows else None
            raw = f"; {found[0]}: {found[1]}: pass those" if found else ""
            p.refuse(given, f"={p.values[given]!r}: rows with data_source {listed} have no built-in reward scorer "
                            f"({known_sources(bad[0])}) in {where}; give each row a built-in data_source and "
                            f"reward_model.ground_truth, or a reward_function file{raw}")
    return len(rows)


def _processes(p: Plan) -> int | None:
    """The number of processes (TRL's num_processes): the launcher's WORLD_SIZE when one started this process,
    else the num_processes input; lands on trainer.nnodes / n_gpus_per_node. None (and a refusal) when invalid."""
    import os

    from rft.components.common import check_processes
    from rft.distributed import launched

    asked = p.values["num_processes"]
    if launched():
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        if asked not in (1, world):
            p.refuse("num_processes", f"={asked} differs from the launcher's WORLD_SIZE={world}; leave it at 1 or "
                                      "set it to the launcher's count")
            return None
        p.set("trainer.nnodes", max(1, world // local), "num_processes")
        p.set("trainer.n_gpus_per_node", local, "num_processes")
        p.extra["processes"] = world
        return world
    if not isinstance(asked, int) or asked < 1:
        p.refuse("num_processes", f"={asked!r} must be an integer >= 1")
        return None
    check_processes(p, "num_processes", asked)
    p.set("trainer.n_gpus_per_node", asked, "num_processes")
    p.extra["processes"] = asked
    return asked


def plan(p: Plan) -> None:
    v = p.values
    mu, n = v["num_iterations"], v["num_generations"]
    if mu < 1:  # refused, then planned as 1 so that the other inputs are checked in the same run
        p.refuse("num_iterations", f"={mu} must be >= 1")
        mu = 1
    if n < 1:
        p.refuse("num_generations", f"={n} must be >= 1")
        n = 1

    # ---- data and model
    train, val = _datasets(p)
    if train:
        p.set("data.train_files", train, "dataset_train_split" if v["dataset_train_split"] else "dataset_name")
    if val:
        p.set("data.val_files", val, "dataset_validation_split" if v["dataset_validation_split"] else "dataset_name")
    p.set("data.truncation", "left", "max_prompt_length")  # TRL truncates prompts from the left
    p.set("data.filter_overlong_prompts", False, "max_prompt_length")
    path = v["model_name_or_path"]
    if p.check_paths:
        path = resolve_model_folder(p, "model_name_or_path", path)
    if path is not None:
        p.set(f"{M}.path", path, "model_name_or_path")
    lora = LORA if v["apply_lora"] == "true" else {"lora_rank": 0}
    for key, value in lora.items():
        p.set(f"{M}.{key}", value, "apply_lora")
    check_liger(p, "use_liger_kernel", v["use_liger_kernel"])

    # ---- TRL's loss and advantages
    from rft.algorithms import trl_actor_settings

    p.set("algorithm.adv_estimator", "grpo")
    for key, value in trl_actor_settings(v["loss_type"], v["epsilon"], v["epsilon_high"], v["beta"]).items():
        if not v["beta"] and key in ("kl_loss_coef", "kl_loss_type"):
            continue  # beta 0 (the spec default): no KL term, so keys that would be noted as without effect
        src = {"loss_agg_mode": "loss_type", "clip_ratio_high": "epsilon_high" if v["epsilon_high"] is not None
               else "epsilon", "clip_ratio_low": "epsilon", "use_kl_loss": "beta", "kl_loss_coef": "beta",
               "kl_loss_type": "beta"}.get(key, "epsilon")
        p.set(f"{A}.{key}", value, src)

    # ---- processes and batches: TRL's rows per optimizer step over all processes
    world = _processes(p) or 1  # a refused count: the rest planned for one process
    rows = v["per_device_train_batch_size"] * v["gradient_accumulation_steps"] * world
    prompts = 1  # what the steps below count when the batch inputs are refused
    if v["per_device_train_batch_size"] < 1 or v["gradient_accumulation_steps"] < 1:
        p.refuse("per_device_train_batch_size", "and gradient_accumulation_steps must be >= 1")
    elif rows % n:
        p.refuse("per_device_train_batch_size", f"x gradient_accumulation_steps x processes = "
                 f"{v['per_device_train_batch_size']} x {v['gradient_accumulation_steps']} x {world} = {rows} "
                 f"completions per step is not a multiple of num_generations={n}")
    else:
        prompts = rows // n
        p.set("data.train_batch_size", prompts, "per_device_train_batch_size", "gradient_accumulation_steps",
              "num_generations")
        p.set(f"{A}.ppo_mini_batch_size", prompts, "per_device_train_batch_size", "gradient_accumulation_steps",
              "num_generations")
        ref = ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",) if v["beta"] else ()  # beta 0: no ref
        for key in (f"{A}.ppo_micro_batch_size_per_gpu", f"{R}.log_prob_micro_batch_size_per_gpu", *ref):
            p.set(key, v["per_device_train_batch_size"], "per_device_train_batch_size")

    # ---- how long: TRL steps are optimizer steps (num_iterations per rft step)
    num_rows = _count_rows(p, train) if train else None  # (rft config show too: steps of a fractional epoch)
    per_epoch = num_rows // prompts if num_rows is not None else None
    total: int | None = None
    if v["max_steps"] > 0:
        if v["max_steps"] % mu:
            p.refuse("max_steps", f"={v['max_steps']} is not a multiple of num_iterations={mu}: rft generates once "
                                  f"every num_iterations optimizer steps ({_STEPS}); set a multiple")
        else:
            total = v["max_steps"] // mu
            p.set("trainer.total_training_steps", total, "max_steps")
    else:
        epochs = v["num_train_epochs"]
        if epochs <= 0:
            p.refuse("num_train_epochs", f"={epochs} must be > 0 (or set max_steps)")
        elif float(epochs).is_integer():
            p.set("trainer.total_epochs", int(epochs), "num_train_epochs")
            total = per_epoch * int(epochs) if per_epoch is not None else None
        elif per_epoch is not None:
            total = max(1, math.ceil(epochs * per_epoch))
            p.set("trainer.total_training_steps", total, "num_train_epochs")
        else:
            p.refuse("num_train_epochs", f"={epochs}: a fractional epoch count needs the training rows counted "
                                         "(the dataset is not readable here)")

    # ---- evaluation (TRL: sampled like training, num_generations per prompt)
    evaluating = v["do_eval"] or v["eval_strategy"] != "no"
    p.set("trainer.val_before_train", False, "eval_strategy")
    if evaluating and not val:
        asker = "eval_strategy" if v["eval_strategy"] != "no" else "do_eval"
        p.refuse(asker, f"={v[asker]!r} evaluates on the validation split: give dataset_validation_split (or a "
                        "dataset_name folder with a validation split)")
    elif evaluating:
        if v["eval_strategy"] == "steps":
            p.set("trainer.test_freq", _rounds(v["eval_steps"], mu), "eval_steps", "eval_strategy")
        elif v["eval_strategy"] == "epoch":
            p.set("trainer.test_freq", max(1, per_epoch or 1), "eval_strategy")
        else:  # do_eval alone: one evaluation when training ends
            p.set("trainer.test_freq", total or 10**9, "do_eval")
        if v["per_device_eval_batch_size"] % n:
            p.refuse("per_device_eval_batch_size", f"={v['per_device_eval_batch_size']} is not a multiple of "
                                                   f"num_generations={n} (evaluation samples num_generations per prompt)")
        else:
            p.set("data.val_batch_size", max(1, v["per_device_eval_batch_size"] // n), "per_device_eval_batch_size")
        p.set(f"{R}.val_kwargs.n", n, "num_generations")
        p.set(f"{R}.val_kwargs.do_sample", v["temperature"] > 0, "temperature")
        p.set(f"{R}.val_kwargs.temperature", v["temperature"], "temperature")
        p.set(f"{R}.val_kwargs.top_p", v["top_p"], "top_p")
    else:
        p.set("trainer.test_freq", -1, "eval_strategy")

    # ---- logging and saving
    logging = v["logging_steps"]
    if logging <= 0:
        p.refuse("logging_steps", f"={logging} must be > 0")
    else:
        if logging < 1:  # transformers: a fraction of all (optimizer) steps
            logging = math.ceil(logging * total * mu) if total else 1
        p.set("trainer.log_freq", _rounds(logging, mu), "logging_steps")
    if v["save_steps"] <= 0:
        p.refuse("save_steps", f"={v['save_steps']} must be > 0")
    else:
        p.set("trainer.save_freq", _rounds(v["save_steps"], mu), "save_steps")
    p.set("trainer.max_actor_ckpt_to_keep", v["save_total_limit"] if v["save_total_limit"] > 0 else None,
          "save_total_limit")
    counted = ("save_steps", "logging_steps", *(("eval_steps",) if v["eval_strategy"] == "steps" else ()))
    rounded = [k for k in counted if mu > 1 and v[k] >= 1 and v[k] % mu]
    if rounded:
        p.notes.append(f"{', '.join(rounded)} rounded up to whole rft steps of num_iterations={mu} optimizer steps")

    # ---- transformers' TrainingArguments defaults the spec does not expose
    p.set("trainer.seed", 42)
    p.set("data.seed", 42)
    p.set(f"{A}.optim.weight_decay", 0.0)
    p.set("trainer.logger", ["console"])
    p.set("trainer.project_name", "group_relative_policy_optimization")
    if p.check_paths and not p.outputs.get("mlflow_model_folder") and not p.outputs.get("output_model_path"):
        p.refuse("output_model_path", "or mlflow_model_folder is required: nothing would be written")
    plan_deepspeed(p, v["deepspeed_config"])


EXAMPLE = ("rft component group_relative_policy_optimization --model_name_or_path m --dataset_train_split "
           "d/train.parquet --dataset_validation_split d/val.parquet --dataset_prompt_column prompt "
           "--deepspeed_config ds.json --per_device_train_batch_size 8 --num_generations 2 --num_iterations 1 "
           "--max_steps 2 --max_prompt_length 32 --max_completion_length 6 --save_steps 1 --eval_strategy steps "
           "--eval_steps 2 --output_model_path out/grpo --mlflow_model_folder out/mlflow")
# the files EXAMPLE reads: a tiny model, the arithmetic rows (verl's: the prompt, data_source, reward_model), and
# the DeepSpeed config the spec requires
SETUP = ("rft init-model m", "rft data arithmetic d --n-train 64 --n-val 8",
         "rft component group_relative_policy_optimization --emit-deepspeed-config > ds.json")
DEEPSPEED_TEMPLATE = {  # the shape of the Azure ML fine-tuning components' ZeRO-3 file; "auto": from the inputs
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
    "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto", "loss_scale": 0},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                          "stage3_gather_16bit_weights_on_model_save": True},
    "steps_per_print": 10, "wall_clock_breakdown": False}

def _engine(values: dict) -> str:
    asked = any(values[i.name] != i.default for i in INPUTS if i.vllm)
    return "vllm" if asked and vllm_installed() else "hf"


COMPONENT = Component(
    name="group_relative_policy_optimization", version="0.0.1", display_name="Group Relative Policy Optimization",
    description="Component to run Group Relative Policy optimization. Supports PyTorch distributed training with "
                "DeepSpeed optimizations.",
    inputs=INPUTS, outputs=OUTPUTS, plan_fn=plan, example=EXAMPLE, engine=_engine, setup=SETUP,
    deepspeed_template=DEEPSPEED_TEMPLATE,
    engine_rule="TRL generates with vLLM when asked (use_vllm, which the spec lacks): a vllm_* input away from its "
                "default asks for vLLM, where vLLM is installed",
)
