"""The checks of data_processor: every operator one rft has, its args what it takes, before any model loads."""

from __future__ import annotations

from pathlib import Path

from rft.config.checks import CHECKS, UNUSED, CheckContext
from rft.config.errors import ConfigError
from rft.data_processor.experience import ExperiencePipeline
from rft.data_processor.tasks import DATA_JUICER_KIND, pipeline_operators

EXPERIENCE = "data_processor.experience_pipeline"
TASKS = "data_processor.task_pipeline"
DATA_JUICER = f", {DATA_JUICER_KIND}"


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


def unavailable_operators(cfg) -> list[str]:
    """Each Data-Juicer operator of `cfg`'s pipelines that cannot run here (no Data-Juicer environment, its server
    not answering, an LLM operator no model server answers for: `DataJuicerOperator.unavailable`), as one line
    naming where it is: refused by a run, noted by `rft config show` (what is missing may be there where the run
    starts)."""
    lines = []
    for where, operators in ((EXPERIENCE, _experience_operators(cfg)), (TASKS, pipeline_operators(cfg))):
        for i, (name, op) in enumerate(operators):
            problem = op.unavailable() if hasattr(op, "unavailable") else None
            if problem is not None:
                lines.append(f"{where}.operators[{i}] ({name}{'' if where == EXPERIENCE else DATA_JUICER}): {problem}")
    return lines


def _experience_operators(cfg) -> list:
    pipeline = ExperiencePipeline.from_config(cfg)
    return pipeline.operators if pipeline is not None else []


def _refuse_unavailable(ctx: CheckContext, where: str) -> None:
    if ctx.check_paths:
        problem = next((line for line in unavailable_operators(ctx.cfg) if line.startswith(where + ".")), None)
        if problem is not None:
            raise ConfigError(problem)


def _checked(ctx: CheckContext, op) -> bool:
    """Whether `op`'s operators are loaded where Data-Juicer runs now: a run's (the unavailable are refused
    first), `rft config show`'s where Data-Juicer is there (else noted)."""
    return hasattr(op, "check") and (ctx.check_paths or not op.unavailable())


@CHECKS.register("data_processor.experience_pipeline")
def check_experience_pipeline(ctx: CheckContext) -> None:
    """The operators are built once here (as the explorer builds them), so a bad name or argument is one line."""
    try:
        pipeline = ExperiencePipeline.from_config(ctx.cfg)
    except ValueError as e:
        raise ConfigError(f"{EXPERIENCE}.{e}") from None
    if pipeline is not None:
        _refuse_unavailable(ctx, EXPERIENCE)  # before Data-Juicer loads its operators
        for i, (name, op) in enumerate(pipeline.operators):
            try:
                if _checked(ctx, op):
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
    _refuse_unavailable(ctx, TASKS)  # before Data-Juicer loads its operators
    for i, (name, op) in enumerate(operators):
        if _checked(ctx, op):
            try:
                op.check()
            except ValueError as e:
                raise ConfigError(f"{TASKS}.operators[{i}] ({name}{DATA_JUICER}): {e}") from None
