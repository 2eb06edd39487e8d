"""Read a config in any dialect, type it, and check it: what every command loads before anything else.

`rft.config.load` reads YAML and dotted overrides onto a schema (typed, unknown keys refused); `rft.dialects`
maps other projects' keys onto rft's; `rft.trainer.validate` checks the result in its declared order. The
functions here put the three together, one per kind of config.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rft.config.dpo_schema import DPOConfig
from rft.config.errors import ConfigError
from rft.config.load import merge_layers, parse_overrides, read_verl_yaml, read_yaml
from rft.config.offline_schema import EvalConfig, GenerationConfig
from rft.config.rm_schema import RMConfig
from rft.config.schema import RFTConfig
from rft.config.sft_schema import SFTConfig
from rft.config.suggest import origin
from rft.dialects.trinity import (
    in_trinity_terms,
    notes_given,
    prompt_truncation_off,
    translate,
    trinity_spelling,
)
from rft.trainer.stages import build_stages
from rft.trainer.validate import (
    validate,
    validate_dpo,
    validate_eval,
    validate_generation,
    validate_rm,
    validate_sft,
)


def _layers(path: str | Path | None) -> list:
    """The file's layers as hydra composes it (its `defaults:` list; `rft.config.load.read_verl_yaml`)."""
    return read_verl_yaml(path) if path is not None else []


_OUT_OF_RANGE = re.compile(r"([a-z_]+(?:\.[a-z_0-9]+)+) must ")
"""A refused value's message: "<dotted key> must be > 0, got -1.0" (the checks' range refusals)."""
_UNSET = object()


@contextlib.contextmanager
def located(path: str | Path | None, layers: list, overrides: Iterable[str]):
    """A check's refusal of a value ("optim.lr must be > 0, got -1.0") with where the value came from put first, as
    the loader's own refusals say it: "command line (optim.lr=-1): ..." or the YAML file that sets the key
    (`layers`: what was read from it); a default's refusal, or a message naming no key first, as it is."""
    try:
        yield
    except ConfigError as e:
        found = _OUT_OF_RANGE.match(str(e))
        if found is None:
            raise
        key = found.group(1)
        where = origin(key, list(overrides)[::-1]) or next(  # the last override of a key is the one merged
            (str(path) for layer in layers if OmegaConf.select(layer, key, default=_UNSET) is not _UNSET), "")
        if not where:
            raise
        raise ConfigError(f"{where}: {e}") from None


def _load(schema, validate_fn, path, overrides, validate_paths: bool, layers: list | None = None):
    """The `schema` config from a YAML file (optional, or its `layers` already read) and dotted overrides, checked by
    `validate_fn` with each error located in the file or the override that set the key."""
    layers = _layers(path) if layers is None else layers
    cfg = merge_layers(schema, layers, overrides, path)
    with located(path, layers, overrides):
        validate_fn(cfg, check_paths=validate_paths)
    return cfg


def load_config(path: str | Path | None = None, overrides: Iterable[str] = (), validate_paths: bool = True):
    """The validated RL config (`RFTConfig`) from a YAML file (optional) and dotted overrides."""
    layers = _layers(path)
    if layers and "stages" in layers[0]:
        raise ConfigError(f"{str(path)!r} lists stages: run it with `rft train` (rft.trainer.stages.load_stages)")
    return _load(RFTConfig, validate, path, overrides, validate_paths, layers)


def load_sft_config(path: str | Path | None = None, overrides: Iterable[str] = (), validate_paths: bool = True):
    """The validated SFT config (`SFTConfig`, verl's sft_trainer.yaml keys)."""
    return _load(SFTConfig, validate_sft, path, overrides, validate_paths)


def load_dpo_config(path: str | Path | None = None, overrides: Iterable[str] = (), validate_paths: bool = True):
    """The validated DPO config (`DPOConfig`: the SFT sections plus the preference loss)."""
    return _load(DPOConfig, validate_dpo, path, overrides, validate_paths)


def load_rm_config(path: str | Path | None = None, overrides: Iterable[str] = (), validate_paths: bool = True):
    """The validated reward-model config (`RMConfig`: rft dpo's sections plus the Bradley-Terry loss's options)."""
    return _load(RMConfig, validate_rm, path, overrides, validate_paths)


def load_generation_config(path=None, overrides=(), validate_paths: bool = True) -> GenerationConfig:
    """The validated `rft generate` config (verl's generation.yaml keys)."""
    return _load(GenerationConfig, validate_generation, path, overrides, validate_paths)


def load_eval_config(path=None, overrides=(), validate_paths: bool = True) -> EvalConfig:
    """The validated `rft eval` config (verl's evaluation.yaml keys)."""
    return _load(EvalConfig, validate_eval, path, overrides, validate_paths)


def load_trinity(path, overrides=(), validate_paths: bool = True):
    """("rl", RFTConfig) or ("stages", [Stage]) of the Trinity YAML at `path`; dotted overrides use Trinity's keys
    (e.g. buffer.total_steps=3) and apply before the translation."""
    cfg = _resolved_trinity(path, overrides)
    overrides = parse_overrides(overrides)
    out = translate(copy.deepcopy(cfg), str(path), overrides=overrides)
    # what the translation leaves unknown are verl keys of trainer.trainer_config
    where, verl = f"{path} (trainer.trainer_config)", "trainer.trainer_config."
    given = [item.removeprefix(verl) for item in overrides if item.startswith(verl)]
    try:
        if "stages" in out:
            return "stages", build_stages(OmegaConf.create(out), check_paths=validate_paths, path=where,
                                          overrides=given)
        rl = merge_layers(RFTConfig, [out], path=where, applied=given)
        validate(rl, check_paths=validate_paths)
    except ConfigError as e:  # it names rft's keys: the Trinity keys that set them go first
        raise in_trinity_terms(e, cfg, out, str(path), overrides) from None
    return "rl", rl


def trinity_said_as(path, overrides=()) -> Callable[[str], str | None]:
    """How a run of the Trinity YAML at `path` (with its dotted `overrides`) names rft's keys in its messages
    (`rft.config.spelling.spelling_keys`): by the Trinity keys that set them (`rft.dialects.trinity.trinity_spelling`).
    A config the translation refuses is said by `load_trinity`: the keys it did map are named here."""
    cfg = _resolved_trinity(path, overrides)
    said_as: dict[str, str] = {}
    with notes_given(), contextlib.suppress(ConfigError):
        translate(copy.deepcopy(cfg), str(path), refusals=[], overrides=parse_overrides(overrides), said_as=said_as)
    return trinity_spelling(said_as)


def trinity_run_error(error: Exception, path, overrides=(), stage: int | None = None) -> ConfigError:
    """A run's `error` about its data (a prompt over data.max_prompt_length, ...) in the Trinity YAML's terms: the
    Trinity keys that set the rft keys it names go first; a key rft has and Trinity-RFT has not is named where a
    Trinity YAML sets it (trainer.trainer_config.data.filter_overlong_prompts); data.truncation, where the YAML's
    enable_prompt_truncation=false chose it, by that key. `stage`: the index of the stage that raised it (from
    `load_trinity`'s stages): its keys, and the stage by name, where the YAML lists stages (stages[1].model...)."""
    cfg = _resolved_trinity(path, overrides)
    with notes_given():
        out = translate(copy.deepcopy(cfg), str(path), overrides=parse_overrides(overrides))
    staged = stage is not None and bool(cfg.get("stages"))  # an SFT / DPO run without stages is one stage
    within = f"stages[{stage}]." if staged else ""
    message, off = str(error), prompt_truncation_off(cfg, stage if staged else None)
    if off:  # the key that chose data.truncation=error
        message = message.replace("data.truncation to left|right|middle", f"{off}=true to cut its start (rft "
                                  "cannot send a prompt over the limit whole, as false asks)")
    message = re.sub(r"(?<![\w.])data\.(filter_overlong_prompts|truncation)\b",
                     rf"{within}trainer.trainer_config.data.\1", message)
    if staged:
        message = f"stage {out['stages'][stage]['stage_name']!r} (stages[{stage}]): {message}"
    return in_trinity_terms(ConfigError(message), cfg, out, str(path), parse_overrides(overrides), stage)


def _rooted(tree, prefix: str):
    """`tree` (an inline trainer_config, unresolved) with its interpolations of its own keys written from the file's
    root (${trainer.trainer_config.critic.x}, as Trinity-RFT's examples write them) written from its own root
    (${critic.x}), where it resolves."""
    if isinstance(tree, dict):
        return {k: _rooted(v, prefix) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_rooted(v, prefix) for v in tree]
    return tree.replace("${" + prefix, "${") if isinstance(tree, str) else tree


def _resolved_trinity(path, overrides=()) -> dict:
    """The Trinity YAML at `path`, its dotted overrides applied and its interpolations resolved."""
    raw = read_yaml(path)
    overrides = parse_overrides(overrides)
    try:
        for item in overrides:
            key, value = item.split("=", 1)
            OmegaConf.update(raw, key, OmegaConf.from_dotlist([f"v={value}"]).v, force_add=True)
        # an inline trainer_config is a verl config of its own: its interpolations (${actor_rollout_ref...}) resolve
        # within it, as those of a trainer_config_path file do
        inline = {}
        for where, section in [("", raw), *((f"stages.{i}.", st) for i, st in enumerate(raw.get("stages") or []))]:
            trainer = section.get("trainer") if hasattr(section, "get") else None
            if hasattr(trainer, "get") and hasattr(trainer.get("trainer_config"), "keys"):
                inline[where] = _rooted(OmegaConf.to_container(trainer.trainer_config, resolve=False),
                                        f"{where}trainer.trainer_config.")
                trainer.trainer_config = None
        cfg = OmegaConf.to_container(raw, resolve=True)
        for where, verl in inline.items():
            node = cfg
            for part in where.split(".")[:-1]:
                node = node[int(part)] if isinstance(node, list) else node[part]
            node["trainer"]["trainer_config"] = OmegaConf.to_container(OmegaConf.create(verl), resolve=True)
    except OmegaConfBaseException as e:
        # the key whose value did not resolve (OmegaConf's full_key), so the line says which one to fix
        key = f"{e.full_key}: " if getattr(e, "full_key", None) else ""
        raise ConfigError(f"{path}: {key}{str(e).splitlines()[0]}; for a variable: set it in the environment, or "
                          "replace the ${...} by its value") from None
    return cfg
