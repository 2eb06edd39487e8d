"""The task pipeline (Trinity-RFT's data_processor.task_pipeline): operators over the raw tasks before exploring,
whose output file is the explorer's taskset.

Trinity-RFT runs these through Data-Juicer; rft runs text_length_filter as its own code under Data-Juicer's name,
arguments and defaults (a task is a row; its text is the first of target_fields, Data-Juicer's text_keys, unless an
operator's args name text_key), and any other operator through Data-Juicer itself (`data_juicer.py`: its dataset
path, num_process processes; an LLM operator's local model folder served by the run, `llm.py`). The pipeline runs
where the taskset is loaded, once: the first process of the run to get there filters and writes the kept rows
atomically, in their order; the others wait for it and read them (the same rows, so the step counts agree, and an
LLM operator asks its model about each task once, not once per process)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from rft.data.io import DataError, read_rows, write_parquet
from rft.data_processor.data_juicer import DataJuicerError
from rft.data_processor.experience import build_operators
from rft.data_processor.llm import Serve
from rft.fsutil import taken_in_turn, write_text_atomic
from rft.registry import Registry

log = logging.getLogger("rft")

TASK_OPERATORS: Registry = Registry("task operator")
"""name -> operator class (Data-Juicer's operator names)."""

OUTPUT = Path("task_pipeline") / "tasks.parquet"
"""The pipeline's output inside the run folder, unless data_processor.task_pipeline.output names a file."""


def text_of(value) -> str:
    """A task field as text: a string as it is, chat messages as their contents joined by newlines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return "\n".join(str(m.get("content", "")) for m in value)
    return "" if value is None else str(value)


@TASK_OPERATORS.register("text_length_filter")
class TextLengthFilter:
    """Data-Juicer's text_length_filter: keep the tasks whose text has min_len <= len(text) <= max_len characters
    (its defaults: 10 and sys.maxsize)."""

    def __init__(self, min_len: int = 10, max_len: int = sys.maxsize, text_key: str | None = None):
        for name, value in (("min_len", min_len), ("max_len", max_len)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}={value!r} must be an integer >= 0")
        self.min_len, self.max_len, self.text_key = min_len, max_len, text_key

    def process(self, rows: list[dict], text_key: str) -> list[dict]:
        key = self.text_key or text_key
        return [r for r in rows if self.min_len <= len(text_of(r.get(key))) <= self.max_len]


DATA_JUICER_KIND = "a Data-Juicer operator"
"""How an error names an operator of the task pipeline that Data-Juicer runs."""


def task_operators(specs, num_process: int | None = None, text_key: str | None = None,
                   service=None) -> list[tuple[str, object]]:
    """(name, operator) of data_processor.task_pipeline.operators: rft's own by name (TASK_OPERATORS), any other
    a Data-Juicer filter run by Data-Juicer (`DataJuicerOperator`; num_proc from `num_process`, text_key from
    `text_key` unless its args name them; `service`: data_processor.data_juicer). A bad one is a ValueError
    naming its index."""
    from rft.data_processor.data_juicer import DataJuicerOperator

    defaults = {k: v for k, v in (("num_proc", num_process), ("text_key", text_key)) if v is not None}

    def data_juicer(name: str, args: dict) -> DataJuicerOperator:
        op = DataJuicerOperator(operators=[{name: {**defaults, **args}}])
        if service is not None:
            op.configure(service)
        return op

    return build_operators(specs, TASK_OPERATORS, {}, other=(DATA_JUICER_KIND, data_juicer))


def pipeline_operators(cfg) -> list[tuple[str, object]]:
    """The task pipeline's operators as `cfg` builds them."""
    tp = cfg.data_processor.task_pipeline
    return task_operators(tp.operators, tp.num_process, text_key_of(cfg), cfg.data_processor.data_juicer)


def text_key_of(cfg) -> str:
    tp = cfg.data_processor.task_pipeline
    return tp.target_fields[0] if tp.target_fields else cfg.data.prompt_key


def output_path(cfg) -> Path:
    tp = cfg.data_processor.task_pipeline
    return Path(tp.output) if tp.output else Path(cfg.trainer.default_local_dir) / OUTPUT


def run_task_pipeline(cfg, serve: Serve | None = None) -> str | None:
    """Run data_processor.task_pipeline over data.train_files (Trinity-RFT's task_pipeline.inputs) and write the
    kept tasks to its output; returns that file (None without operators). `serve`: how the run serves a local model
    folder a Data-Juicer LLM operator names (`rft.data_processor.llm`). No task kept is a DataError."""
    tp = cfg.data_processor.task_pipeline
    if not tp.operators:
        return None
    files = cfg.data.train_files
    files = [files] if isinstance(files, str) else list(files)
    out = output_path(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    # every process of the run that loads the taskset comes here: the first filters, the others wait and reuse
    with taken_in_turn(out.with_name(f".{out.name}.lock"), f"rft: task pipeline: another process is writing {out}; "
                       "waiting for it"):
        key = _made_from(cfg, files)
        stamp = out.with_name(out.name + ".made-from")
        if out.is_file() and stamp.is_file() and stamp.read_text() == key:
            log.info("rft: task pipeline: %s was made from the same files and operators; reused", out)
            return str(out)
        _filter(cfg, files, out, serve)
        write_text_atomic(stamp, key)
    return str(out)


def _filter(cfg, files: list[str], out: Path, serve: Serve | None) -> None:
    """The pipeline's operators over the rows of `files`, the kept rows written to `out`."""
    rows = [row for path in files for row in read_rows(path)]
    text_key = text_key_of(cfg)
    counts = []
    for i, (name, op) in enumerate(pipeline_operators(cfg)):
        before = len(rows)
        if hasattr(op, "run"):  # Data-Juicer's
            op.serve = serve
            try:
                answer = op.run(rows, tasks=True)
            except DataJuicerError as e:
                raise DataJuicerError(f"data_processor.task_pipeline.operators[{i}] ({name}): {e}; the pipeline "
                                      "wrote nothing: run the same command again") from None
            finally:
                op.close()
            rows = [r for r, keep in zip(rows, answer["keep"]) if keep]
            counts.append(f"{name} dropped {before - len(rows)}{_stats_line(answer['stats'])}")
        else:
            rows = op.process(rows, text_key)
            counts.append(f"{name} dropped {before - len(rows)}")
    if not rows:
        raise DataError(f"data_processor.task_pipeline kept no task ({', '.join(counts)}): loosen its operators' "
                        "args")
    if out.suffix == ".jsonl":
        write_text_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
    else:
        write_parquet(rows, out)
    log.info("rft: task pipeline: %d tasks kept (%s), written to %s", len(rows), ", ".join(counts), out)


def _made_from(cfg, files: list[str]) -> str:
    """What the pipeline's output depends on: its operators and fields, and each input file's size and time. A
    rerun (a resume, each process of a run) whose inputs match reuses the output instead of filtering again (an LLM
    operator asks a model about every task)."""
    import hashlib

    tp = cfg.data_processor.task_pipeline
    stat = [(str(Path(f).resolve()), Path(f).stat().st_size, Path(f).stat().st_mtime_ns) for f in files]
    made = {"operators": tp.operators, "target_fields": tp.target_fields, "num_process": tp.num_process,
            "prompt_key": cfg.data.prompt_key, "files": stat}
    return hashlib.sha256(json.dumps(made, sort_keys=True, default=str).encode()).hexdigest() + "\n"


def _stats_line(stats: list[dict]) -> str:
    """`; <stat> mean X` for each numeric stat Data-Juicer computed over the tasks."""
    means = []
    for key in sorted({k for s in stats for k in s}):
        values = [s[key] for s in stats if isinstance(s.get(key), (int, float)) and not isinstance(s.get(key), bool)]
        if values:
            means.append(f"; {key} mean {sum(values) / len(values):.3g}")
    return "".join(means)
