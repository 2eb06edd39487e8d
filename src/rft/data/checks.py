"""The checks of the data keys: the model folder and the data files a trainer reads, the preference columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rft.config.checks import CHECKS, UNUSED, CheckContext, check_files_exist, check_model_dir, data_files
from rft.config.errors import ConfigError


def check_inputs(model_key: str, model_path: str | None, data: Any, ctx: CheckContext,
                 require_train: bool = True) -> None:
    """The model folder and the data files both trainers need (`data` has train_files / val_files), as far as `ctx`
    looks; `require_train`: data.train_files must be set."""
    check_paths, check_model_path = ctx.check_paths, ctx.check_model_path
    if not model_path:
        raise ConfigError(f"{model_key} is required: a Hugging Face model folder")
    if getattr(data, "task_storage", "file") != "file":  # a database: tasks of a table
        if not isinstance(data.train_files, str) or not data.train_files:
            raise ConfigError(f"data.task_storage={data.task_storage}: data.train_files must be one SQLAlchemy URL "
                              f"or SQLite file, got {data.train_files!r}")
        data_files(data.val_files, "data.val_files")
        if check_paths:
            check_files_exist("data.val_files", data_files(data.val_files, "data.val_files"))
            if check_model_path:
                check_model_dir(model_key, model_path, ctx)
        return
    train_files = data_files(data.train_files, "data.train_files")
    val_files = data_files(data.val_files, "data.val_files")
    if not train_files and require_train:
        raise ConfigError("data.train_files is required: a parquet/jsonl file or a list of them")
    if check_paths:
        if check_model_path:
            check_model_dir(model_key, model_path, ctx)
        check_files_exist("data.train_files", train_files)
        check_files_exist("data.val_files", val_files)


@CHECKS.register("data.inputs")
def check_rl_inputs(ctx: CheckContext) -> None:
    """The policy's folder and the prompt files; a trainer reading experiences needs no tasks when told how many
    steps to take, and bench evaluates only."""
    cfg, trainer = ctx.cfg, ctx.cfg.trainer
    require_train = not (trainer.mode == "bench" or (trainer.mode == "train" and trainer.total_training_steps))
    check_val_file_keys(cfg.data)
    if cfg.external_model.enable:  # a model behind an API (rft.explorer.external): no folder, the eval files only
        if not (cfg.external_model.model_name or cfg.actor_rollout_ref.model.path):
            raise ConfigError("external_model.enable: external_model.model_name (or actor_rollout_ref.model.path) "
                              "names the model the API serves")
        val_files = data_files(cfg.data.val_files, "data.val_files")
        if not val_files:
            raise ConfigError("external_model.enable: data.val_files is required: the tasks the API model is "
                              "evaluated on")
        if ctx.check_paths:
            check_files_exist("data.val_files", val_files)
        return
    if cfg.data.custom_cls.path is not None or cfg.data.custom_cls.name is not None:
        check_custom_cls(ctx, require_train)
        return
    check_inputs("actor_rollout_ref.model.path", cfg.actor_rollout_ref.model.path, cfg.data, ctx, require_train)


def check_val_file_keys(data: Any) -> None:
    """data.val_prompt_keys / val_response_keys: one entry per val_files entry, read by rft's own loader (a
    data.custom_cls reads the files as it likes)."""
    entries = [data.val_files] if isinstance(data.val_files, str) else list(data.val_files or [])
    for key in ("data.val_prompt_keys", "data.val_response_keys"):
        given = getattr(data, key.split(".")[1])
        if not given:
            continue
        if data.custom_cls.path is not None:
            raise ConfigError(f"{key}={given!r}: data.custom_cls reads data.val_files itself, so rft's per-file "
                              "columns are not read; remove it (or give the columns to your class)")
        if len(given) != len(entries):
            raise ConfigError(f"{key} has {len(given)} entries for the {len(entries)} of data.val_files: give one "
                              "per file, in order (null: the shared column)")


def check_custom_cls(ctx: CheckContext, require_train: bool) -> None:
    """data.custom_cls: a Python file and a class name; its class reads train_files / val_files as it likes (verl
    passes them on as they are), so those are not checked as rft's parquet / jsonl files. The class is imported and
    its rows checked when the data loads, with the tokenizer it is built with, before the model
    (`rft.data.custom`)."""
    data, custom, model = ctx.cfg.data, ctx.cfg.data.custom_cls, ctx.cfg.actor_rollout_ref.model.path
    if not custom.path:
        raise ConfigError(f"data.custom_cls.name={custom.name!r} needs data.custom_cls.path: the .py file defining it")
    if not custom.name:
        raise ConfigError(f"data.custom_cls.path={custom.path!r} needs data.custom_cls.name: the dataset class in it")
    if not model:
        raise ConfigError("actor_rollout_ref.model.path is required: a Hugging Face model folder")
    if data.task_storage != "file":
        raise ConfigError(f"data.custom_cls reads data.train_files through its class, so it needs "
                          f"data.task_storage=file, got {data.task_storage!r}")
    if require_train and not data.train_files:
        raise ConfigError("data.train_files is required: what the class data.custom_cls.name reads")
    if ctx.check_paths:
        if ctx.check_model_path:
            check_model_dir("actor_rollout_ref.model.path", model, ctx)
        if not Path(custom.path).expanduser().is_file() or Path(custom.path).suffix != ".py":
            raise ConfigError(f"data.custom_cls.path: {custom.path!r} is not a Python file (.py)")


@CHECKS.register("data.template_kwargs")
def check_template_kwargs(ctx: CheckContext) -> None:
    """data.apply_chat_template_kwargs: template variables by name, none of them an argument of
    apply_chat_template itself (`rft.data.chat.template_kwargs_problem`)."""
    from rft.data.chat import template_kwargs_problem

    problem = template_kwargs_problem(ctx.cfg.data.apply_chat_template_kwargs)
    if problem is not None:
        raise ConfigError(f"data.apply_chat_template_kwargs: {problem}")


@CHECKS.register("data.preference_columns")
def check_preference_columns(ctx: CheckContext) -> None:
    data = ctx.cfg.data
    if len({data.prompt_key, data.chosen_key, data.rejected_key}) < 3:
        raise ConfigError(f"data.prompt_key, chosen_key and rejected_key must name three different columns, got "
                          f"{data.prompt_key!r}, {data.chosen_key!r}, {data.rejected_key!r}")


@CHECKS.register("data.selector")
def check_selector(ctx: CheckContext) -> None:
    """data.selector (`rft.data.selectors`): its features and arguments, and the runs whose task draws it can
    follow (a file or table taskset; difficulty_based's feedback, each step's rewards, in one explorer process)."""
    from rft.data.selectors import DIFFICULTY_DEFAULTS

    cfg = ctx.cfg
    sel, key = cfg.data.selector, "data.selector"
    kind = sel.selector_type
    if kind is None:
        return
    if cfg.data.sampler.class_path:
        raise ConfigError(f"{key}.selector_type={kind} and data.sampler.class_path={cfg.data.sampler.class_path!r} "
                          "both draw the training tasks: keep one")
    if cfg.data.task_storage == "queue":
        raise ConfigError(f"{key}.selector_type={kind}: data.task_storage=queue reads tasks as a stream, in id order, "
                          "each once; use task_storage file or sql, or remove the selector")
    keys, kwargs = list(sel.feature_keys), dict(sel.kwargs)
    if kind == "random" and (keys or kwargs):
        raise ConfigError(f"{key}.feature_keys / kwargs are read by offline_easy2hard and difficulty_based, not by "
                          "random; remove them")
    if kind == "offline_easy2hard":
        if not keys:
            raise ConfigError(f"{key}.selector_type=offline_easy2hard sorts the tasks by {key}.feature_keys: name "
                              "the columns (highest first)")
        if kwargs:
            raise ConfigError(f"{key}.kwargs={kwargs}: offline_easy2hard takes none; remove them")
    if kind != "difficulty_based":
        return
    if len(keys) != 2:
        raise ConfigError(f"{key}.feature_keys={keys}: difficulty_based takes two columns, a weak and a strong "
                          "reference model's pass rate of each task")
    unknown = sorted(set(kwargs) - set(DIFFICULTY_DEFAULTS))
    if unknown:
        raise ConfigError(f"{key}.kwargs: {unknown} are not difficulty_based's (it takes {sorted(DIFFICULTY_DEFAULTS)})")
    o = {**DIFFICULTY_DEFAULTS, **kwargs}
    for name, ok, what in (("m", isinstance(o["m"], int) and o["m"] >= 1, "an integer >= 1"),
                           ("lamb", _number(o["lamb"]) and 0 <= o["lamb"] <= 1, "in [0, 1]"),
                           ("rho", _number(o["rho"]) and 0 <= o["rho"] <= 1, "in [0, 1]"),
                           ("target_reward", _number(o["target_reward"]), "a number"),
                           ("tau", _number(o["tau"]) and o["tau"] >= 0, ">= 0 (0: the best tasks)"),
                           ("do_sample", isinstance(o["do_sample"], bool), "true or false"),
                           ("adaptive_rho", isinstance(o["adaptive_rho"], bool), "true or false")):
        if not ok:
            raise ConfigError(f"{key}.kwargs.{name}={o[name]!r} must be {what}")
    why = uneven_draws(cfg)  # the explorer's processes: explorer.checks' explorer.selector
    if why is not None:
        raise difficulty_based_refusal(why)


def difficulty_based_refusal(why: str) -> ConfigError:
    """The refusal of data.selector.selector_type=difficulty_based where its feedback cannot be had: `why`."""
    return ConfigError("data.selector.selector_type=difficulty_based learns from each step's rewards of the tasks it "
                       f"drew, which rft feeds back in one explorer process, but {why}; use another selector")


def uneven_draws(cfg) -> str | None:
    """Why a step's tasks are not one drawn batch trained as it was drawn (DAPO's dynamic sampling, streaming), the
    reason a sampler or selector that learns from each step's batch is refused; None where they are."""
    if cfg.algorithm.filter_groups.enable:
        return "algorithm.filter_groups.enable=true (DAPO's dynamic sampling) draws several batches a step"
    if cfg.async_training.staleness_threshold is not None:
        return "async_training.staleness_threshold streams groups across steps"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@UNUSED.register("data.selector")
def unused_selector_keys(cfg) -> dict[str, str]:
    """rft's task order (data.shuffle, data.seed) under a selector, which draws the tasks itself."""
    kind = cfg.data.selector.selector_type
    if kind is None:
        return {}
    why = f"data.selector.selector_type={kind} draws the training tasks (seeded by data.selector.seed)"
    return {"data.shuffle": why, "data.seed": why}
