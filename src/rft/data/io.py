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

from rft.errors import RftError
from rft.fsutil import checked_write

ROW_SUFFIXES = (".parquet", ".jsonl")


class DataError(RftError, ValueError):
    """A data file that cannot be used as it is, with the file and the row named."""


TRL_COLUMNS = {"response": ("completion", "TRL's prompt-completion format")}
"""TRL's name for a column whose verl (rft) name differs, and the format it is TRL's name in."""


_ABSENT = object()


def column_value(row: dict, column: str, default: Any = _ABSENT) -> Any:
    """`row`'s value of `column`: the column of that name, else, for a dotted name, the nested field
    ("reward_model.ground_truth": the ground_truth of the reward_model mapping, as Trinity-RFT's BOTS workflow
    reads its rows); `default` where there is neither (without one: KeyError)."""
    if column in row:
        return row[column]
    if "." in column:
        value: Any = row
        for part in column.split("."):
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            return value
    if default is _ABSENT:
        raise KeyError(column)
    return default


def has_column(row: dict, column: str) -> bool:
    """Whether `row` has `column` (`column_value`'s nested fields too)."""
    try:
        column_value(row, column)
    except KeyError:
        return False
    return True


def missing_column(where: str, column: str, key: str, row: dict) -> DataError:
    """The error for the row at `where` (a file and row) without the column `column` that the config key `key`
    names: the row's columns, the closest first (TRL's name for it first, `TRL_COLUMNS`), and the key to set to
    one of them."""
    from rft.config.suggest import did_you_mean, nearest_first

    columns = nearest_first(column, sorted(map(str, row)))
    hint = did_you_mean(column, columns, lambda c: f"{key}={c}")
    trl, fmt = TRL_COLUMNS.get(column, (None, ""))
    if trl in columns:
        columns = [trl, *(c for c in columns if c != trl)]
        hint = f"did you mean {key}={trl}? ({fmt})"
    return DataError(f"{where}: no column {column!r} ({key}); {hint + ' ' if hint else ''}the rows have the columns "
                     f"{', '.join(columns)}: set {key}=<one of them>")


RAW_TASKS = {"gsm8k": ("GSM8K's", ("question", "answer"), "OUT/train.parquet, OUT/test.parquet")}
"""Datasets as their publishers ship them, which `rft data TASK SRC OUT` turns into verl's rows: the columns that
tell one, and the files it writes."""


def raw_task(row: dict, folder: Any) -> tuple[str, str] | None:
    """For a dataset's own row (`RAW_TASKS`: GSM8K's question / answer) read from `folder`: ("the rows are GSM8K's own
    (question, answer)", "`rft data gsm8k FOLDER OUT` writes them as verl's rows (...)"); None for any other row."""
    for task, (whose, columns, writes) in RAW_TASKS.items():
        if set(columns) <= set(map(str, row)):
            return (f"the rows are {whose} own ({', '.join(columns)})",
                    f"`rft data {task} {folder} OUT` writes them as verl's rows ({writes})")
    return None


def raw_rows(where: str, file: Any, column: str, key: str, row: dict) -> DataError | None:
    """The error for a row at `where` of `file` without the prompt column `column` (`key`: data.prompt_key) that is
    a dataset's own row, not verl's (`raw_task`): the `rft data` command that converts it; None for any other row."""
    found = None if key != "data.prompt_key" or isinstance(file, tuple) else raw_task(row, Path(str(file)).parent)
    if found is None:
        return None
    whose, convert = found
    return DataError(f"{where}: no column {column!r} ({key}): {whose}, not verl's; {convert}: set data.train_files / "
                     "data.val_files to those")


def write_parquet(rows: list[dict], path: str | Path, metadata: dict[bytes, str] | None = None) -> Path:
    """Write `rows` to `path` atomically: into a temporary file beside it, then os.replace, so a reader never
    sees a half-written file and a failed write leaves any existing file untouched.
    Creates parent directories. The columns are every row's keys (a row without one holds null there; pyarrow alone
    would take the first row's keys and drop the others). `metadata`: entries of the schema's metadata, written in
    the same file (`rft generate`'s record of its inputs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    table = pa.Table.from_pylist([{key: row.get(key) for key in columns} for row in rows])
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    # A fresh name rather than mkstemp, so the file gets the usual permissions instead of mkstemp's 0600.
    tmp_path = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")  # fsutil's name: a killed write's is known
    try:
        checked_write(lambda: pq.write_table(table, tmp_path), path)  # a full disk's error names no file
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def read_rows(path: str | Path, key: str = "data.train_files / val_files") -> list[dict]:
    """All rows of a .parquet or .jsonl file, as dicts (blank jsonl lines are skipped). A file that is not what
    its suffix says (a corrupt parquet, a jsonl line that is not a JSON object) is a DataError naming the file
    and, for jsonl, the line; `key`: the config key that names the file, which a damaged parquet's line says to
    point at another."""
    path = Path(path).expanduser()
    if path.suffix not in ROW_SUFFIXES:
        raise DataError(f"cannot read rows from {str(path)!r}: expected one of {', '.join(ROW_SUFFIXES)}")
    if not path.is_file():
        raise DataError(f"no such data file: {str(path)!r}")
    if path.suffix == ".parquet":
        try:
            with pq.ParquetFile(path) as f:  # one file: read_table's dataset layer imports pandas where it is (0.7 s)
                return f.read().to_pylist()
        except (pa.ArrowException, OSError) as e:  # ArrowInvalid: not parquet, truncated, bad footer
            raise DataError(f"data file {str(path)!r} is not a readable parquet file ({_one_line(e)}); "
                            f"write it again (e.g. `rft data ...`) or point {key} at another file") from None
    rows = []
    for where, value in iter_jsonl(path):
        if not isinstance(value, dict):
            raise DataError(f"{where}: a row must be a JSON object {{...}}, got {type(value).__name__}; fix the line")
        rows.append(value)
    return rows


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, value) per non-blank line of the jsonl file `path`; `where` ("'<path>' line N") names the line for
    the caller's own errors. A line that is not JSON (or not UTF-8) raises DataError naming it."""
    with path.open(encoding="utf-8") as lines:
        line_number = 0
        try:
            for line_number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                where = f"{str(path)!r} line {line_number}"
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as error:
                    raise DataError(f"{where}: invalid JSON ({error}); fix or remove the line") from None
                yield where, value
        except UnicodeDecodeError as error:
            raise DataError(f"{str(path)!r} line {line_number + 1}: not UTF-8 text ({error.reason} at byte "
                            f"{error.start}); a jsonl file holds one UTF-8 JSON object per line") from None
