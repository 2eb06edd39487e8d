"""Reading and writing task rows (verl's row format) as parquet or jsonl."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROW_SUFFIXES = (".parquet", ".jsonl")


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    """Write `rows` to `path` atomically: into a temporary file beside it, then os.replace, so a reader never
    sees a half-written file and a failed write leaves any existing file untouched.
    Creates parent directories."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows)
    # A fresh name rather than mkstemp, so the file gets the usual permissions instead of mkstemp's 0600.
    tmp_path = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def read_rows(path: str | Path) -> list[dict]:
    """All rows of a .parquet or .jsonl file, as dicts (blank jsonl lines are skipped)."""
    path = Path(path)
    if path.suffix not in ROW_SUFFIXES:
        raise ValueError(f"cannot read rows from {str(path)!r}: expected one of {', '.join(ROW_SUFFIXES)}")
    if not path.is_file():
        raise FileNotFoundError(f"no such data file: {str(path)!r}")
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [value for _, value in iter_jsonl(path)]


def iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, value) per non-blank line of the jsonl file `path`; `where` ("'<path>' line N") names the line for
    the caller's own errors. A line that is not JSON raises ValueError naming it."""
    with path.open(encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{str(path)!r} line {line_number}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: invalid JSON ({error})") from None
            yield where, value
