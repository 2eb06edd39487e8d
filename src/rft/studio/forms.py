"""The config generator's side of the studio: forms from the schema, values to overrides, the same validation as
`rft train` / `rft sft`, the YAML to write.

No field is written by hand: `fields` walks the schema (RFTConfig for `rft train`, SFTConfig for `rft sft`) and
gives each leaf its key, input type, default, choices, help text and, when rft does not honour it yet, the reason.
`BEGINNER` only names which keys the beginner view shows.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import yaml

KINDS = {"rl": ("rft.config.schema", "RFTConfig", "train"), "sft": ("rft.config.sft_schema", "SFTConfig", "sft")}
BEGINNER = {
    "rl": ("actor_rollout_ref.model.path", "data.train_files", "data.val_files", "algorithm.adv_estimator",
           "actor_rollout_ref.rollout.n", "data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size",
           "data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.actor.optim.lr",
           "actor_rollout_ref.model.lora_rank", "custom_reward_function.path", "trainer.total_training_steps",
           "trainer.test_freq", "trainer.save_freq", "trainer.default_local_dir", "trainer.logger"),
    "sft": ("model.partial_pretrain", "data.train_files", "data.val_files", "data.prompt_key", "data.response_key",
            "data.train_batch_size", "data.max_length", "optim.lr", "model.lora_rank", "trainer.total_training_steps",
            "trainer.test_freq", "trainer.save_freq", "trainer.default_local_dir", "trainer.logger"),
}


def schema_of(kind: str) -> type:
    import importlib

    if kind not in KINDS:
        raise ValueError(f"unknown config kind {kind!r}; one of {list(KINDS)}")
    module, name, _ = KINDS[kind]
    return getattr(importlib.import_module(module), name)


def _input_type(f: dataclasses.Field, default: Any) -> tuple[str, bool]:
    """(bool | int | float | str | yaml, nullable) from the field's annotation."""
    annotation = str(f.type)
    nullable = annotation.startswith("Optional[") or default is None
    inner = annotation.removeprefix("Optional[").removesuffix("]") if annotation.startswith("Optional[") else annotation
    if "choices" in f.metadata or (inner == "bool" and nullable):  # a null bool: null, true or false
        return "choice", nullable
    return (inner if inner in ("bool", "int", "float", "str") else "yaml"), nullable


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _walk(obj: Any, prefix: str = ""):
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield ("section", f"{prefix}{f.name}", f, value)
            yield from _walk(value, f"{prefix}{f.name}.")
        else:
            yield ("field", f"{prefix}{f.name}", f, value)


def form(kind: str) -> dict:
    """The form of `kind`: its sections ({key, help}) and fields ({key, section, type, nullable, default, choices,
    help, unsupported, beginner}), in schema order."""
    schema = schema_of(kind)
    sections, fields = [], []
    for what, key, f, value in _walk(schema()):
        if what == "section":
            sections.append({"key": key, "help": f.metadata.get("help", "")})
            continue
        input_type, nullable = _input_type(f, value)
        fields.append({
            "key": key, "section": key.rsplit(".", 1)[0] if "." in key else "", "type": input_type,
            "nullable": nullable, "default": _plain(value), "help": f.metadata.get("help", ""),
            "choices": _plain(list(f.metadata["choices"])) if "choices" in f.metadata
            else [None, True, False] if input_type == "choice" else None,
            "unsupported": f.metadata.get("unsupported"), "beginner": key in BEGINNER[kind],
        })
    return {"kind": kind, "command": f"rft {KINDS[kind][2]}", "sections": sections, "fields": fields}


def _defaults(kind: str) -> dict[str, Any]:
    return {field["key"]: field for field in form(kind)["fields"]}


def unknown_key(kind: str, key: str) -> str:
    """The error for a `key` the schema of `kind` lacks, as `rft train` words it: the first part of it that is
    unknown, the nearest key at that place and every key there (rft.config.suggest)."""
    from rft.config.suggest import key_hint

    page = form(kind)
    names = [*(s["key"] for s in page["sections"]), *(f["key"] for f in page["fields"])]
    parts = key.split(".")
    first = next(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) not in names)
    parent = first.rpartition(".")[0]
    return f"unknown config key '{key}'; " + key_hint(first, [name.rpartition(".")[2] for name in names
                                                              if name.rpartition(".")[0] == parent])


def overrides(kind: str, values: dict[str, Any]) -> list[str]:
    """`key=value` overrides (what `rft train a=b` takes) of the values that differ from the defaults. A value is
    the field's own type, or for yaml fields the YAML text typed into the form; "" or None is null."""
    known = _defaults(kind)
    out = []
    for key, value in values.items():
        if key not in known:
            raise ValueError(unknown_key(kind, key))
        field = known[key]
        if field["type"] == "yaml" and isinstance(value, str):
            text = value.strip()
            parsed = yaml.safe_load(text) if text else None
            if parsed == field["default"]:
                continue
            out.append(f"{key}={text if text else 'null'}")
            continue
        if value == "" or value is None:
            value = None
        if value == field["default"]:
            continue
        out.append(f"{key}={json.dumps(value)}")
    return out


def nested(items: list[str]) -> dict:
    """The nested mapping of `key=value` overrides, values parsed as the command line parses them (the YAML a
    file holds)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.from_dotlist(items)) if items else {}


class _Notes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def check(kind: str, values: dict[str, Any], check_paths: bool = True) -> dict:
    """Validate `values` as `rft train` / `rft sft` does: {ok, error (the `rft: error:` line), notes, overrides,
    yaml (the changed keys, nested), command}."""
    from rft.errors import RftError
    from rft.trainer.configure import load_config, load_sft_config

    try:
        items = overrides(kind, values)
    except (ValueError, yaml.YAMLError) as e:
        return {"ok": False, "error": " ".join(str(e).split()), "notes": [], "overrides": [], "yaml": ""}
    notes = _Notes()
    logger = logging.getLogger("rft")
    logger.addHandler(notes)
    error = None
    try:
        (load_config if kind == "rl" else load_sft_config)(None, items, validate_paths=check_paths)
    except RftError as e:
        error = str(e)
    finally:
        logger.removeHandler(notes)
    text = yaml.safe_dump(nested(items), sort_keys=False) if items else ""
    return {"ok": error is None, "error": error, "notes": notes.lines, "overrides": items, "yaml": text,
            "command": f"rft {KINDS[kind][2]} " + " ".join(items)}
