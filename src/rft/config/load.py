"""Read a config: verl-style nested YAML plus dotted `key=value` overrides, merged onto a schema (typed, unknown keys
refused). Errors are `ConfigError`s that name the key and say what is allowed. Checking the typed config is the
checks' job (`rft.config.checks`), and loading and checking together `rft.trainer.configure`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from rft.config.errors import ConfigError
from rft.config.schema import REFUSED_KEYS, RFTConfig
from rft.config.suggest import key_hint, origin, trl_key
from rft.config.verl_keys import MEGATRON, SCHEMAS, sort_out

__all__ = ["ConfigError", "flatten", "merge_layers", "parse_overrides", "read_verl_yaml", "read_yaml", "to_dict",
           "to_yaml"]


ONE_OR_MORE = ("trainer.logger",)
"""List keys that take one name for a list of it (`trainer.logger=console`: [console]), as verl's Tracking does."""


def _node_fields(cls: type, dotted: str) -> list[str]:
    """Field names of the dataclass found at `dotted` below `cls` (for 'allowed keys' messages), [] where none is."""
    dotted = ".".join(p for p in dotted.split(".") if p)
    node = _field_type(cls, dotted) if dotted else cls
    return [f.name for f in dataclasses.fields(node)] if isinstance(node, type) and dataclasses.is_dataclass(node) else []


def _explain(err: OmegaConfBaseException, schema: type = RFTConfig, overrides: Iterable[str] = (),
             path: str | None = None) -> ConfigError:
    """One line for OmegaConf's `err`; an unknown key is named with where it came from (the file `path` or the
    command line's `overrides`), the nearest allowed key and every allowed key at that place."""
    full_key = getattr(err, "full_key", None) or ""
    if isinstance(err, ConfigKeyError) or "not in" in str(err):
        parent = full_key.rsplit(".", 1)[0] if "." in full_key else ""
        source = origin(full_key, list(overrides), path)
        if schema is RFTConfig and full_key in REFUSED_KEYS:
            return ConfigError(f"{source + ': ' if source else ''}'{full_key}' is a verl key rft does not have: "
                               + REFUSED_KEYS[full_key])
        return ConfigError(f"{source + ': ' if source else ''}unknown config key '{full_key}'; "
                           + trl_key(schema.__name__, full_key) + key_hint(full_key, _node_fields(schema, parent)))
    msg = str(err).split("\n")[0]
    if not full_key:
        return ConfigError(f"bad config: {msg}; sections such as 'data' hold keys, not values")
    expected = _expected_at(schema, full_key)
    if expected is not None:  # a value OmegaConf cannot convert: 'four' for an integer, ...
        value = getattr(err, "value", None)
        source = origin(full_key, list(overrides)[::-1], path)  # the last override of a key is the one merged
        return ConfigError(_wrong_type(schema, full_key, expected, value, source))
    return ConfigError(f"bad value for config key '{full_key}': {msg}")


def _field_type(schema: type, dotted: str) -> Any:
    """The declared type of the field at the dotted key below the dataclass `schema`, or None where the key is not
    a field (unknown, or inside a free-form mapping)."""
    cls: Any = schema
    hint: Any = None
    for part in dotted.split("."):
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            return None
        hints = _fields_of(cls)
        if part not in hints:
            return None
        cls = hint = hints[part]
    return hint


@functools.cache
def _fields_of(cls: type) -> dict[str, Any]:
    """{field name: its type} of the dataclass `cls` (the annotations evaluated once per class)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """(the type inside Optional[...], whether null is allowed)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Any), True
    return hint, False


def _kind(hint: Any) -> str | None:
    """What a field of type `hint` holds: 'section', 'list', 'mapping', 'int', 'float', 'bool', 'str'; None for
    anything (Any)."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "section"
    origin_ = typing.get_origin(hint) or hint
    if origin_ in (list, tuple):
        return "list"
    if origin_ is dict:
        return "mapping"
    return {int: "int", float: "float", bool: "bool", str: "str"}.get(origin_)


_SAID = {"section": "a section of keys", "list": "a list, e.g. [a, b]",
         "mapping": "a mapping of keys to values", "int": "an integer", "float": "a number", "bool": "true or false",
         "str": "a string"}


def _expected_at(schema: type, dotted: str) -> tuple[str, bool] | None:
    """(what the field at `dotted` holds, whether null is allowed), None where that is not known or is anything."""
    hint = _field_type(schema, dotted)
    if hint is None:
        return None
    inner, nullable = _unwrap(hint)
    kind = _kind(inner)
    return (kind, nullable) if kind is not None else None


def _given(value: Any) -> str:
    """The value as the message shows it: its kind in words, then the value."""
    if isinstance(value, Mapping):
        what = "a mapping"
    elif isinstance(value, (list, tuple)):
        what = "a list"
    elif value is None:
        return "null"
    elif isinstance(value, bool):
        what = "a boolean"
    elif isinstance(value, (int, float)):
        what = "a number"
    else:
        what = "a string"
    shown = repr(value if not isinstance(value, (Mapping, list, tuple)) else _plain(value))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{what} ({shown})"


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _wrong_type(schema: type, key: str, expected: tuple[str, bool], value: Any, source: str) -> str:
    """One line for `value` at `key`, which takes `expected` (`_expected_at`): where it came from, what the key
    takes, what it got, and what to write instead."""
    kind, nullable = expected
    takes = _SAID[kind] + (" or null" if nullable else "")
    if kind == "section":
        fields = [f"{key}.{name}" for name in _node_fields(schema, key)[:3]]
        todo = f"set the keys under it instead ({', '.join(fields)}, ...)"
    elif kind == "list" and not isinstance(value, (Mapping, list, tuple)) and value is not None:
        todo = f"set it to a list, e.g. [{value}]"
    else:
        todo = f"set it to {_SAID[kind].split(',')[0]}"
    return f"{source + ': ' if source else ''}config key '{key}' takes {takes}, not {_given(value)}; {todo}"


def _fits(kind: str, nullable: bool, value: Any) -> bool:
    """Whether `value` has the shape `kind` needs (scalars are left to OmegaConf's conversion: '4' for an
    integer is fine); an interpolation ${...} fits anything."""
    if isinstance(value, str) and "${" in value:
        return True
    if value is None:
        return nullable
    if kind == "section" or kind == "mapping":
        return isinstance(value, Mapping)
    if kind == "list":
        return isinstance(value, (list, tuple))
    return not isinstance(value, (Mapping, list, tuple))


def _check_shapes(schema: type, tree: Any, sources: Any, prefix: str = "") -> None:
    """Refuse a value whose shape the schema's field cannot hold (a list for an integer, a mapping for a list, a
    value for a section): OmegaConf's own errors for these name the wrong type or none (a TypeError). `sources`
    (dotted key -> where it was set) names the file or the command line. Unknown keys are left to the merge."""
    if not isinstance(tree, Mapping):
        return
    for name, value in tree.items():
        key = f"{prefix}{name}"
        expected = _expected_at(schema, key)
        if expected is None:
            continue
        kind, nullable = expected
        if not _fits(kind, nullable, value):
            raise ConfigError(_wrong_type(schema, key, expected, value, sources(key)))
        if kind == "section" and isinstance(value, Mapping):
            _check_shapes(schema, value, sources, key + ".")


def parse_overrides(overrides: Iterable[str]) -> list[str]:
    out = []
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override {item!r} is not of the form dotted.key=value")
        item = item.lstrip("+")  # hydra's +key= (add) and ++key= (add or override): rft's schema has every key
        if item.endswith("=") and item.count("=") == 1:  # hydra's key= is the empty string (YAML would read null)
            item += "''"
        try:
            OmegaConf.from_dotlist([item])
        except yaml.YAMLError as e:  # from_dotlist parses each value as YAML and lets yaml's errors through
            problem = " ".join(str(e).split())
            raise ConfigError(
                f"override {item!r}: the value is not valid YAML ({problem}); quote strings, and write "
                "mappings with a space after each ':', e.g. key='{a: {b: 1}}'"
            ) from None
        out.append(item)
    return out


def merge_layers(schema: type, layers: list, overrides: Iterable[str] = (), path: str | Path | None = None,
                 applied: Iterable[str] = ()) -> Any:
    """The typed config object: `schema` defaults, then each mapping in `layers`, then dotted overrides. An
    unknown key's error says where it came from: the command line (`overrides`, or `applied`: overrides already
    merged into the layers), else the file `path` the layers were read from."""
    overrides = list(overrides)
    removed = [item[1:].split("=", 1)[0] for item in overrides if item.startswith("~")]
    items = parse_overrides(item for item in overrides if not item.startswith("~"))
    try:
        layers = [*(OmegaConf.create(layer) for layer in layers), OmegaConf.from_dotlist(items)]
        for key in removed:  # hydra's ~key: the key leaves the config, i.e. rft's default applies
            if not any(_remove(layer, key) for layer in layers[:-1]):
                raise ConfigError(f"command line (~{key}): {key} is not in {path or 'the config'}, so there is "
                                  "nothing to remove (hydra's ~key removes a key the file sets)")
        for key in ONE_OR_MORE:
            if key.rpartition(".")[2] in _node_fields(schema, key.rpartition(".")[0]):
                for layer in layers:
                    value = OmegaConf.select(layer, key, default=None, throw_on_resolution_failure=False)
                    if isinstance(value, str):
                        OmegaConf.update(layer, key, [value], merge=False)
        file = str(path) if path is not None else None
        known = None
        if schema.__name__ in SCHEMAS:  # verl's keys that no field holds: known by the table (rft.config.verl_keys)
            trees = [OmegaConf.to_container(layer, resolve=False) for layer in layers]
            known = sort_out(SCHEMAS[schema.__name__], trees, functools.partial(_field_type, schema),
                             lambda key, i: origin(key, (items if i == len(trees) - 1 else list(applied))[::-1],
                                                   None if i == len(trees) - 1 else file))
            layers = [OmegaConf.create(tree) for tree in trees]
        for i, layer in enumerate(layers):  # the last layer is the command line's; `applied` are in the others
            command_line = i == len(layers) - 1
            given = (items if command_line else list(applied))[::-1]  # the last override of a key is merged
            _check_shapes(schema, OmegaConf.to_container(layer, resolve=False),
                          lambda key, given=given, file=None if command_line else file: origin(key, given, file))
        merged = OmegaConf.merge(OmegaConf.structured(schema), *layers)
        OmegaConf.resolve(merged)
        cfg = OmegaConf.to_object(merged)
        if known is not None:
            known.check(cfg)
            known.say()
        return cfg
    except OmegaConfBaseException as e:
        raise _explain(e, schema, [*items, *applied], str(path) if path is not None else None) from None


def _remove(layer: DictConfig, key: str) -> bool:
    """Delete the dotted `key` from `layer`: whether it was there."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(layer, parent, default=None) if parent else layer
    if isinstance(node, DictConfig) and leaf in node:
        del node[leaf]
        return True
    return False


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _char_at(path: str | Path, mark: Any) -> str:
    """The character of the file `path` at yaml's `mark` ('' where there is none)."""
    try:
        line = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()[mark.line]
    except (OSError, IndexError):
        return ""
    return line[mark.column] if mark.column < len(line) else ""


def yaml_problem(path: str | Path, e: yaml.YAMLError) -> str:
    """One line for yaml's error `e` reading the file `path` (yaml's own text is four lines): the file, the line and
    column, what is wrong and what to do. A duplicate key names both places, an unclosed quote where it opens."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    context, context_mark = getattr(e, "context", None) or "", getattr(e, "context_mark", None)
    if mark is None:
        return f"config file {str(path)!r} is not valid YAML: {' '.join(str(e).split())}"
    where, what, todo = mark, problem or "not valid YAML", "fix it (YAML: 'key: value', nested keys indented by spaces)"
    if "duplicate key" in what:
        key = what.rsplit(" ", 1)[-1]
        what = f"the key '{key}' appears twice at the same level" + (
            f" (the mapping that starts at {_at(context_mark)})" if context_mark is not None else "")
        todo = "keep one of them"
    elif "quoted scalar" in context and context_mark is not None:
        where, what = context_mark, f"a quoted value opened here is not closed ({what} at {_at(mark)})"
        todo = "close the quote"
    elif _char_at(path, mark) == "\t":
        what, todo = "a tab character, which YAML does not allow in indentation", "indent with spaces"
    return f"config file {str(path)!r} is not valid YAML at {_at(where)}: {what}; {todo}"


def read_yaml(path: str | Path) -> DictConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as e:
        raise ConfigError(yaml_problem(path, e)) from None
    except Exception as e:  # anything else OmegaConf's loader raises, e.g. an undecodable file
        raise ConfigError(f"config file {str(path)!r} cannot be read as YAML: {' '.join(str(e).split())}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections")
    return loaded


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Any) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """{dotted key: leaf} of a nested mapping (an empty mapping is a leaf)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


VERL_GROUPS = ("actor", "data", "reward_manager", "ref", "rollout", "model", "critic", "reward_model", "algorithm",
               "optim", "engine", "ppo_trainer", "sft_trainer", "npu_profile", "profiler")
"""verl's own hydra config groups (verl/trainer/config/<group>/): a defaults-list entry naming one whose file is not
beside the config means verl's defaults, which are rft's schema defaults."""


def read_verl_yaml(path: str | Path) -> list[DictConfig]:
    """The layers of a config file as hydra composes it: its `defaults:` list in order, the file itself where
    `_self_` stands (last without one), its `hydra:` block (hydra's own settings: search path, run folder) dropped.
    An entry `group@package: option` (or `name`) is the file `<group>/<option>.yaml` (`<name>.yaml`) beside the
    config, read the same way and put under `package`; an entry of verl's own groups (`VERL_GROUPS`) with no such
    file is verl's default config of that part, which rft's defaults are; a Megatron one is refused by name."""
    path = Path(path)
    loaded = read_yaml(path)
    defaults = loaded.pop("defaults", None)
    loaded.pop("hydra", None)
    if defaults is None:
        return [loaded]
    if not isinstance(OmegaConf.to_container(defaults), list):
        raise ConfigError(f"{path}: defaults must be a list of hydra config names (e.g. [ppo_trainer, _self_])")
    layers: list[DictConfig] = []
    placed_self = False
    for entry in OmegaConf.to_container(defaults):
        if entry == "_self_":
            layers.append(loaded)
            placed_self = True
            continue
        group, option = (next(iter(entry.items())) if isinstance(entry, dict) and len(entry) == 1
                         else (entry, None) if isinstance(entry, str) else (None, None))
        if group is None:
            raise ConfigError(f"{path}: defaults entry {entry!r} is not a hydra config name")
        group = str(group).lstrip("+").removeprefix("override ").strip()
        if option is None:  # `name` / `group@package`: the config `name.yaml` / `group.yaml`
            name, _, package = group.partition("@")
            file = path.parent / f"{name}.yaml"
        else:
            name, _, package = group.partition("@")
            package = package or name
            file = path.parent / name / f"{option}.yaml"
        if "megatron" in str(option or name):
            raise ConfigError(f"{path}: defaults entry {entry!r}: {MEGATRON}")
        if file.is_file():
            for layer in read_verl_yaml(file):
                layers.append(OmegaConf.create(_nest(package, layer)) if package else layer)
        elif name.split("/")[0] not in VERL_GROUPS:
            raise ConfigError(f"{path}: defaults entry {entry!r} names {file}, which does not exist; put that file "
                              "beside the config, or remove the entry")
    if not placed_self:
        layers.append(loaded)
    return layers


def _nest(package: str, layer: DictConfig) -> dict:
    tree: Any = OmegaConf.to_container(layer, resolve=False)
    for part in reversed(package.split(".")):
        tree = {part: tree}
    return tree
