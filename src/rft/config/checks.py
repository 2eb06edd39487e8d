"""The registry of config checks, and the small helpers they share.

Each subsystem checks its own config section beside its code (`rft/<subsystem>/checks.py`) and registers each check
here under `<owner>.<what>` (`@CHECKS.register("rollout.engine")`), the way `algorithms/` registers estimators;
`UNUSED` holds, the same way, which keys have no effect when a part is not built (a critic, a reward model, ...).
config/ knows none of them: the order in which they run is declared once, above them, in `rft/trainer/validate.py`
(and `rft/offline/validate.py` for `rft generate` / `rft eval`). A check raises `ConfigError` naming the key and
what to set; it runs before any model loads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rft.config.errors import ConfigError
from rft.registry import Registry


@dataclass(frozen=True)
class CheckContext:
    """What a check sees: the typed config and how far to look. `check_paths`: files and folders must exist;
    `check_model_path`: the model folder too (a later stage's model does not exist yet); `world_size`: the number
    of processes the batch sizes are checked against; `inactive`: {key or key prefix ending in '.': why} of the
    parts this run does not build (their keys have no effect)."""

    cfg: Any
    check_paths: bool = True
    check_model_path: bool = True
    world_size: int = 1
    inactive: Mapping[str, str] = field(default_factory=dict)
    sp: int = 1
    """The actor's sequence-parallel size when it divides world_size (groups of sp processes hold the same data)."""
    config_json_problems: dict[Path, str | None] = field(default_factory=dict, compare=False, repr=False)
    """{model folder: what is wrong with its config.json (`config_json_problem`), None: nothing}, kept by
    `check_model_dir`: a folder several keys name (the critic's is often the policy's) is read by transformers once
    per validation; the next validation reads it again."""

    @property
    def data_parallel(self) -> int:
        """The ranks the data is split over: the processes / sp."""
        return self.world_size // self.sp


Check = Callable[[CheckContext], None]
UnusedKeys = Callable[[Any], dict[str, str]]

CHECKS: Registry[Check] = Registry("config check")
"""`<owner>.<what>` -> check(ctx): raises ConfigError, or returns None."""
UNUSED: Registry[UnusedKeys] = Registry("unused-keys rule")
"""`<owner>.<part>` -> rule(cfg) -> {key or key prefix ending in '.': why}: the keys of a part the run does not build."""


def run_checks(names: Iterable[str], ctx: CheckContext) -> None:
    """Run the named checks in the order given (the first problem raises)."""
    for name in names:
        CHECKS.get(name)(ctx)


def unused_keys(names: Iterable[str], cfg: Any) -> dict[str, str]:
    """The inactive keys of `cfg` by the named rules, in their order."""
    out: dict[str, str] = {}
    for name in names:
        out.update(UNUSED.get(name)(cfg))
    return out


# ------------------------------------------------------------------------------------------------- helpers
def processes(t: Any) -> int:
    """The number of processes a trainer section asks for: nnodes x n_gpus_per_node."""
    return t.nnodes * t.n_gpus_per_node


def valid_size(total: int, near: int, multiple_of: int = 1) -> int | None:
    """The size to suggest instead of a refused `near` that must divide `total` (and be a multiple of
    `multiple_of`): the largest such divisor at most `near`, else the smallest; None when there is none."""
    fits = [d for d in range(1, total + 1) if total % d == 0 and d % multiple_of == 0]
    below = [d for d in fits if d <= near]
    return below[-1] if below else (fits[0] if fits else None)


def suggest_divisor(key: str, total: int, near: int, multiple_of: int = 1) -> str:
    """"set <key> to a divisor of <total>, e.g. <the nearest valid one>" (what to do about a size that does not
    divide)."""
    what = f"a divisor of {total}" + (f" and a multiple of {multiple_of}" if multiple_of > 1 else "")
    size = valid_size(total, near, multiple_of)
    return f"set {key} to {what}" + (f", e.g. {key}={size}" if size is not None else "")


def suggest_multiple(key: str, of: int, near: int) -> str:
    """"set <key> to a multiple of <of>, e.g. <the largest at most `near`, else `of`>" (what to do about a size that
    must divide by `of`)."""
    return f"set {key} to a multiple of {of}, e.g. {key}={max(of, near - near % of)}"


def positive(key: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")


def check_int(key: str, value: Any, low: int, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{key} must be an integer >= {low} ({what}), got {value!r}")


def all_null(value: Any) -> bool:
    """An engine_kwargs-style mapping whose nested values are all null (or the string 'None'): the default."""
    if isinstance(value, dict):
        return all(all_null(v) for v in value.values())
    return value is None or value == "None"


def data_files(value: Any, key: str) -> list[str]:
    """The parquet / jsonl paths of a files key (one path or a list)."""
    if value is None:
        return []
    files = [value] if isinstance(value, str) else list(value)
    for f in files:
        if not isinstance(f, str):
            raise ConfigError(f"{key} must be a file path or a list of paths, got {f!r}")
        if Path(f).suffix not in (".parquet", ".jsonl"):
            if not Path(f).expanduser().exists():  # a mistyped path: that it is missing, not that its name is wrong
                raise missing_file(key, f)
            if Path(f).expanduser().is_dir():
                raise folder_given(key, f)
            raise ConfigError(f"{key}: {f!r} is not a .parquet or .jsonl file{_conversion(f)}")
    return files


def _conversion(f: str) -> str:
    """How to turn the .json or .csv data file `f` (what Hugging Face datasets' json and csv loaders read) into one
    rft reads: a .json of JSON objects one per line is JSON Lines by another name; a JSON array and a CSV are
    written out by a one-line command (the standard library's json, pyarrow's csv reader). "" for other files."""
    path = Path(f)
    stem = str(path.with_suffix(""))
    if path.suffix == ".csv":
        return (f"; write it as parquet, e.g. python -c \"import pyarrow.csv as c, pyarrow.parquet as p; "
                f"p.write_table(c.read_csv('{f}'), '{stem}.parquet')\", and set {stem}.parquet")
    if path.suffix != ".json":
        return ""
    try:
        with path.expanduser().open(encoding="utf-8", errors="replace") as file:
            start = file.read(4096).lstrip()[:1]
            file.seek(0)
            first = next((line for line in file if line.strip()), "")
        one_row = isinstance(json.loads(first), dict)
    except (OSError, ValueError):  # a pretty-printed object (a model's config.json) is no row per line
        one_row = False
    if one_row:
        return f"; its lines are JSON objects (JSON Lines): rename it {stem}.jsonl and set that"
    if start == "[":
        return (f"; it is a JSON array: write it as JSON Lines, e.g. python -c \"import json; out = open('{stem}.jsonl', "
                f"'w'); [out.write(json.dumps(row) + chr(10)) for row in json.load(open('{f}'))]\", and set "
                f"{stem}.jsonl")
    return ""


def check_files_exist(key: str, files: list[str]) -> None:
    for f in files:
        if not Path(f).expanduser().is_file():
            raise missing_file(key, f)


HELD_OUT_SPLITS = ("val", "valid", "validation", "test", "dev", "eval")
"""The names one held-out split goes by: verl's GSM8K preprocessing (and `rft data gsm8k`) writes test.parquet,
rft's synthetic tasks (`rft data arithmetic`, ...) val.parquet."""
SHOWN_FILES = 8


def missing_file(key: str, path: str) -> ConfigError:
    """The error for `key`'s data file `path`, which does not exist: it names the data files its folder holds and
    the one likeliest meant (the same split under another name, test.parquet for val.parquet, or a close spelling)."""
    folder = Path(path).expanduser().parent
    todo = f"set {key} to a .parquet or .jsonl file of verl's rows (`rft data --help`: the commands that write them)"
    if not folder.is_dir():
        return ConfigError(f"{key}: file {path!r} does not exist, nor does its folder {str(folder)!r}: {todo}")
    present = sorted(p.name for p in folder.iterdir() if p.suffix in (".parquet", ".jsonl") and p.is_file())
    if not present:
        return ConfigError(f"{key}: file {path!r} does not exist, and {str(folder)!r} holds no .parquet or .jsonl "
                           f"file: {todo}")
    meant = _likeliest(Path(path).name, present)
    hint = f"; did you mean {str(Path(path).parent / meant)!r}?" if meant else ""
    shown = ", ".join(present[:SHOWN_FILES]) + (f", ... ({len(present)} in all)" if len(present) > SHOWN_FILES else "")
    return ConfigError(f"{key}: file {path!r} does not exist{hint} ({str(folder)!r} holds {shown})")


def folder_given(key: str, path: str) -> ConfigError:
    """The error for `key` set to the folder `path` rather than a file in it: the data files it holds and the one
    to set (the split the key names: train.parquet for train_files, val.parquet or test.parquet for val_files)."""
    folder = Path(path).expanduser()
    present = sorted(p.name for p in folder.iterdir() if p.suffix in (".parquet", ".jsonl") and p.is_file())
    if not present:
        return ConfigError(f"{key}: {path!r} is a folder, and it holds no .parquet or .jsonl file: set {key} to a data "
                           "file (`rft data ...` writes them)")
    wanted = "val.parquet" if key.endswith("val_files") else "train.parquet"
    meant = _likeliest(wanted, present) or present[0]
    shown = ", ".join(present[:SHOWN_FILES]) + (f", ... ({len(present)} in all)" if len(present) > SHOWN_FILES else "")
    return ConfigError(f"{key}: {path!r} is a folder, not a .parquet or .jsonl file; it holds {shown}: set "
                       f"{key}={Path(path) / meant}")


def _likeliest(name: str, present: list[str]) -> str | None:
    import difflib

    wanted = Path(name)
    if wanted.stem in HELD_OUT_SPLITS:
        splits = [p for p in present if Path(p).stem in HELD_OUT_SPLITS]
        if splits:
            return min(splits, key=lambda p: Path(p).suffix != wanted.suffix)  # the same format first
    close = difflib.get_close_matches(name, present, n=1, cutoff=0.8)
    return close[0] if close else None


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
"""The weight files transformers loads a model folder from (one of them; an index lists its shards)."""


class ConfigJsonError(ValueError):
    """What is wrong with a model folder's config.json (`read_config_json`): the message completes "its config.json
    ...". `remote_code`: it names code of its own (auto_map), which transformers runs only with trust_remote_code."""

    def __init__(self, problem: str, remote_code: bool = False):
        super().__init__(problem)
        self.remote_code = remote_code


def read_config_json(folder: Path, trust_remote_code: bool = False):
    """The transformers config of the model folder `folder`, read as transformers reads it (AutoConfig); what is
    wrong with its config.json is a `ConfigJsonError` (e.g. "has an invalid value (Field 'vocab_size' expected int,
    got str ...)"). Without `trust_remote_code`, config.json is read first: invalid JSON, not an object, or code of
    its own (auto_map, for a model_type transformers does not know) is said before transformers reads it. Shared by
    the config's model-folder check (`check_model_dir`) and the model's loading (`rft.models.load`)."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    remote = "maps the model to Python code in the folder (auto_map)"
    file = folder / "config.json"
    if not trust_remote_code and file.is_file():
        try:
            raw = json.loads(file.read_text())
        except ValueError as e:
            raise ConfigJsonError(f"is not valid JSON ({e})") from None
        if not isinstance(raw, dict):
            raise ConfigJsonError(f"is not a JSON object (it holds a {type(raw).__name__})")
        if raw.get("auto_map") and raw.get("model_type") not in CONFIG_MAPPING:
            raise ConfigJsonError(remote, remote_code=True)
    try:
        return AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    except StrictDataclassError as e:  # a value of the wrong type (transformers' configs are strict dataclasses)
        cause = e.__cause__ if e.__cause__ is not None else e
        raise ConfigJsonError(f"has an invalid value ({' '.join(str(cause).split())[:200]})") from None
    except (ValueError, TypeError, KeyError) as e:
        if "trust_remote_code" in str(e):
            raise ConfigJsonError(remote, remote_code=True) from None
        raise ConfigJsonError(f"is not one transformers can read ({' '.join(str(e).split())[:200]})") from None


def config_json_problem(folder: Path) -> str | None:
    """What is wrong with the config.json of the model folder `folder` (`read_config_json`); None when it reads, or
    when it names code of its own (auto_map), which only the model's loading may run (with trust_remote_code)."""
    try:
        read_config_json(folder)
    except ConfigJsonError as e:
        return None if e.remote_code else str(e)
    return None


def check_model_dir(key: str, path: str, ctx: CheckContext) -> None:
    """The folder `path` (set by `key`) is a Hugging Face model folder transformers can load, told before any model
    loads: a config.json transformers reads (a wrong value in it was a bug in rft's report; read once per folder in
    the validation of `ctx`) and a weights file (its absence was transformers' message, which names no key)."""
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"{key}={path!r} is not a Hugging Face model folder (no config.json); set it to a model folder, or to a "
            "Hugging Face Hub id (org/name, from the local Hugging Face cache)"
        )
    seen = folder.resolve()
    if seen not in ctx.config_json_problems:
        ctx.config_json_problems[seen] = config_json_problem(folder)
    problem = ctx.config_json_problems[seen]
    if problem:
        raise ConfigError(f"{key}={path!r}: its config.json {problem}; fix {str(folder / 'config.json')!r}, "
                          "or copy or download the model again")
    if not any((folder / name).is_file() for name in WEIGHT_FILES) and not any(folder.glob("*.safetensors")):
        raise ConfigError(
            f"{key}={path!r} has a config.json but no weights file (none of {', '.join(WEIGHT_FILES)}); copy the "
            f"model's weight files into it, or set {key} to a complete model folder"
        )
