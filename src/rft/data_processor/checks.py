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
    pipeline = ExperiencePipeline.from_config(cfg)
    return [line for where, operators in ((EXPERIENCE, pipeline.operators if pipeline is not None else []),
                                          (TASKS, pipeline_operators(cfg)))
            for line in _unavailable(where, operators).values()]


def _unavailable(where: str, operators: list) -> dict[int, str]:
    """{index: the line naming it and why} of the `operators` of pipeline `where` that cannot run here."""
    kind = "" if where == EXPERIENCE else DATA_JUICER
    problems = {i: (name, op.unavailable()) for i, (name, op) in enumerate(operators) if hasattr(op, "unavailable")}
    return {i: f"{where}.operators[{i}] ({name}{kind}): {problem}" for i, (name, problem) in problems.items()
            if problem is not None}


def _loadable(ctx: CheckContext, where: str, operators: list) -> list:
    """(index, name, operator) of `operators` whose operators are loaded where Data-Juicer runs now, each one's
    unavailability asked once: a run refuses the first that cannot run here (before Data-Juicer loads anything),
    `rft config show` leaves those out (its note says why)."""
    unavailable = _unavailable(where, operators)
    if unavailable and ctx.check_paths:
        raise ConfigError(next(iter(unavailable.values())))
    return [(i, name, op) for i, (name, op) in enumerate(operators) if hasattr(op, "check") and i not in unavailable]


@CHECKS.register("data_processor.experience_pipeline")
def check_experience_pipeline(ctx: CheckContext) -> None:
    """The operators are built once here (as the explorer builds them), so a bad name or argument is one line."""
    try:
        pipeline = ExperiencePipeline.from_config(ctx.cfg)
    except ValueError as e:
        raise ConfigError(f"{EXPERIENCE}.{e}") from None
    if pipeline is not None:
        for i, name, op in _loadable(ctx, EXPERIENCE, pipeline.operators):
            try:
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
    for i, name, op in _loadable(ctx, TASKS, operators):
        try:
            op.check()
        except ValueError as e:
            raise ConfigError(f"{TASKS}.operators[{i}] ({name}{DATA_JUICER}): {e}") from None
