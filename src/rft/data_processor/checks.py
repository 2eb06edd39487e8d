"""The checks of data_processor: every operator one rft has, its args what it takes, before any model loads."""

from __future__ import annotations

from pathlib import Path

from rft.config.checks import CHECKS, UNUSED, CheckContext
from rft.config.errors import ConfigError
from rft.data_processor.experience import ExperiencePipeline
from rft.data_processor.tasks import pipeline_operators

EXPERIENCE = "data_processor.experience_pipeline"
TASKS = "data_processor.task_pipeline"


@UNUSED.register("data_processor.data_juicer")
def unused_data_juicer_keys(cfg) -> dict[str, str]:
    from rft.data_processor.tasks import TASK_OPERATORS

    ops = cfg.data_processor.experience_pipeline.operators or []
    if any(isinstance(op, dict) and op.get("name") == "data_juicer" for op in ops):
        return {}
    tasks = cfg.data_processor.task_pipeline.operators or []
    if any(isinstance(op, dict) and op.get("name") not in TASK_OPERATORS for op in tasks):
        return {}
    return {"data_processor.data_juicer.": "no Data-Juicer operator in data_processor's pipelines"}


@CHECKS.register("data_processor.experience_pipeline")
def check_experience_pipeline(ctx: CheckContext) -> None:
    """The operators are built once here (as the explorer builds them), so a bad name or argument is one line."""
    try:
        pipeline = ExperiencePipeline.from_config(ctx.cfg)
    except ValueError as e:
        raise ConfigError(f"{EXPERIENCE}.{e}") from None
    if pipeline is not None:
        for i, (name, op) in enumerate(pipeline.operators):
            try:
                if hasattr(op, "check"):
                    op.check()
            except ValueError as e:
                raise ConfigError(f"{EXPERIENCE}.operators[{i}] ({name}): {e}") from None


@CHECKS.register("data_processor.task_pipeline")
def check_task_pipeline(ctx: CheckContext) -> None:
    """rft's operators built, Data-Juicer's loaded where Data-Juicer runs (2-8 s), before any model loads."""
    cfg = ctx.cfg
    tp = cfg.data_processor.task_pipeline
    try:
        operators = pipeline_operators(cfg)
    except ValueError as e:
        raise ConfigError(f"{TASKS}.{e}") from None
    if tp.num_process is not None:
        if isinstance(tp.num_process, bool) or not isinstance(tp.num_process, int) or tp.num_process < 1:
            raise ConfigError(f"{TASKS}.num_process={tp.num_process!r} must be an integer >= 1")
        if not any(hasattr(op, "run") for _, op in operators):
            raise ConfigError(f"{TASKS}.num_process={tp.num_process} sets the processes of the pipeline's "
                              "Data-Juicer operators, and it has none (rft's own run in the process that loads the "
                              "taskset): remove it")
    if not tp.operators:
        return
    if cfg.data.task_storage != "file":
        raise ConfigError(f"{TASKS} reads task files: data.task_storage={cfg.data.task_storage} is a database; "
                          "use files (data.task_storage=file) or remove the operators")
    if tp.output is not None and Path(tp.output).suffix not in (".parquet", ".jsonl"):
        raise ConfigError(f"{TASKS}.output={tp.output!r} must be a .parquet or .jsonl file")
    for i, (name, op) in enumerate(operators):
        if hasattr(op, "check"):
            try:
                op.check()
            except ValueError as e:
                raise ConfigError(f"{TASKS}.operators[{i}] ({name}): {e}") from None
