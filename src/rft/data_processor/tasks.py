"""The task pipeline (Trinity-RFT's data_processor.task_pipeline): operators over the raw tasks before exploring,
whose output file is the explorer's taskset.

Trinity-RFT runs these through Data-Juicer; rft runs its own code under Data-Juicer's operator names, arguments and
defaults (a task is a row; its text is the first of target_fields, Data-Juicer's text_keys, unless an operator's
args name text_key). The pipeline runs where the taskset is loaded (every process that loads it gets the same
rows, so the step counts agree) and writes the kept rows atomically, in their order.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from rft.data.io import DataError, read_rows, write_parquet
from rft.data_processor.experience import build_operators
from rft.fsutil import write_text_atomic
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


NOT_BUILT = {
    "llm_difficulty_score_filter": "a Data-Juicer operator scoring each task with an LLM; rft has not built it "
                                   "(Data-Juicer's own needs the py-data-juicer package, which rft does not ship: "
                                   "docs/workflows.md)",
}
"""Data-Juicer operators Trinity-RFT's documentation shows for tasks, refused by name with the reason."""


def task_operators(specs) -> list[tuple[str, object]]:
    """(name, operator) of data_processor.task_pipeline.operators; a bad one is a ValueError naming its index."""
    return build_operators(specs, TASK_OPERATORS, NOT_BUILT)


def output_path(cfg) -> Path:
    tp = cfg.data_processor.task_pipeline
    return Path(tp.output) if tp.output else Path(cfg.trainer.default_local_dir) / OUTPUT


def run_task_pipeline(cfg) -> str | None:
    """Run data_processor.task_pipeline over data.train_files (Trinity-RFT's task_pipeline.inputs) and write the
    kept tasks to its output; returns that file (None without operators). No task kept is a DataError."""
    tp = cfg.data_processor.task_pipeline
    if not tp.operators:
        return None
    files = cfg.data.train_files
    rows = [row for path in ([files] if isinstance(files, str) else files) for row in read_rows(path)]
    text_key = tp.target_fields[0] if tp.target_fields else cfg.data.prompt_key
    counts = []
    for name, op in task_operators(tp.operators):
        before = len(rows)
        rows = op.process(rows, text_key)
        counts.append(f"{name} dropped {before - len(rows)}")
    if not rows:
        raise DataError(f"data_processor.task_pipeline kept no task ({', '.join(counts)}): loosen its operators' "
                        "args")
    out = output_path(cfg)
    if out.suffix == ".jsonl":
        write_text_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
    else:
        write_parquet(rows, out)
    log.info("rft: task pipeline: %d tasks kept (%s), written to %s", len(rows), ", ".join(counts), out)
    return str(out)
