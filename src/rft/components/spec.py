"""The shape of a component interface: inputs and outputs as an Azure ML command component declares them, and the
plan that maps their values onto rft's canonical (verl) config keys.

One `Component` per spec holds the table (`inputs`, `outputs`) that the command line (`rft component NAME`), its
`--help`, the generated Azure ML YAML (`components/<name>.yaml`) and the docs are all made from, and a `plan`
function that turns the parsed values into canonical overrides. Nothing here imports torch: a component's
`pypi_packages_override` is installed before anything heavy is imported.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rft.config.load import ConfigError

TYPES = ("string", "integer", "number", "boolean", "uri_file", "uri_folder")
OUTPUT_TYPES = ("uri_folder", "mlflow_model")


class ComponentError(ConfigError):
    """Inputs a component refuses, each named, before anything loads."""


@dataclass(frozen=True)
class Input:
    """One input row of a component spec. `default` None: the spec gives none ('-').

    How the value is honoured: `key` (the canonical key it is written to, unchanged), or the component's plan
    function for anything else (`lands_on` then says what it does, for --help and the docs). `vllm`: a setting of
    the vLLM engine, written to its key where the component's inputs pick that engine (`Component.engine`); with
    the hf engine only the spec default (no effect) or what the hf engine does is accepted.
    `extension`: not in the spec, an rft addition (said so in its description)."""

    name: str
    type: str
    description: str
    default: Any = None
    optional: bool = True
    enum: tuple | None = None
    group: str = ""
    key: str | None = None
    lands_on: str = ""
    vllm: bool = False
    extension: bool = False

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"input {self.name}: unknown type {self.type!r}")
        if self.default is not None:
            object.__setattr__(self, "default", parse_value(self, self.default))

    @property
    def required(self) -> bool:
        """Must be given: not optional and without a default (Azure ML's semantics)."""
        return not self.optional and self.default is None

    @property
    def mapping(self) -> str:
        if self.vllm:
            hf = "".join(f", or {v!r} (what the hf engine does)" for v in _schema_also(self.key))
            if self.key is None:
                return "vLLM setting rft's engines do not take: only the default (no effect) is accepted"
            return (f"vLLM setting: `{self.key}` where the component generates with vLLM; with the hf engine only "
                    f"the default (no effect){hf} is accepted")
        return self.lands_on or (f"`{self.key}`" if self.key else "")


@dataclass(frozen=True)
class Output:
    name: str
    type: str
    description: str
    lands_on: str = ""

    def __post_init__(self) -> None:
        if self.type not in OUTPUT_TYPES:
            raise ValueError(f"output {self.name}: unknown type {self.type!r}")


_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}


def parse_value(inp: Input, raw: Any) -> Any:
    """`raw` (a command-line string or a Python value) as the input's type; ValueError names the input."""
    t = inp.type
    try:
        if t == "boolean":
            if isinstance(raw, bool):
                value: Any = raw
            elif str(raw).strip().lower() in _TRUE:
                value = True
            elif str(raw).strip().lower() in _FALSE:
                value = False
            else:
                raise ValueError
        elif t == "integer":
            if isinstance(raw, bool):
                raise ValueError
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            value = int(str(raw).strip()) if not isinstance(raw, (int, float)) else int(raw)
        elif t == "number":
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        else:
            value = str(raw)
    except (TypeError, ValueError):
        raise ValueError(f"--{inp.name}: {raw!r} is not a valid {t}") from None
    if inp.enum is not None and value not in inp.enum:
        raise ValueError(f"--{inp.name}: {value!r} is not one of {list(inp.enum)}")
    return value


@dataclass
class Plan:
    """What a component's inputs turn into: canonical overrides (dotted key -> value), with the inputs that set
    each key (for error messages), refusals (input, reason), notes printed at start-up, and the outputs."""

    component: str
    values: dict[str, Any]
    outputs: dict[str, str | None]
    overrides: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)
    refusals: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    inert: list[str] = field(default_factory=list)
    given: frozenset[str] = frozenset()
    """The inputs named on the command line (Azure ML names them all); the others are at their spec defaults."""
    keys: dict[str, str | None] = field(default_factory=dict)
    """{input: the canonical key its table row writes it to (None: the plan function decides)}."""
    reachable: frozenset[str] = frozenset()
    """The canonical keys some input or output of the component can set (its table key, or a key its row's `lands_on`
    names), with values other than these; a key outside them is one no input sets."""
    check_paths: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # component-specific facts for the run (e.g. DS config)

    def set(self, key: str, value: Any, *inputs: str) -> None:
        self.overrides[key] = value
        for name in inputs:
            if name not in self.sources.setdefault(key, []):
                self.sources[key].append(name)

    def refuse(self, name: str, reason: str) -> None:
        self.refusals.append((name, reason))


    def nested(self, without: set[str] | frozenset[str] = frozenset()) -> dict:
        """The overrides as a nested mapping (one OmegaConf layer); `without`: leave out the keys these inputs
        set."""
        out: dict = {}
        for key, value in self.overrides.items():
            if without & set(self.sources.get(key, ())):
                continue
            node = out
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        return out

    def inputs_of(self, message: str) -> list[str]:
        """The inputs behind the canonical keys that `message` names (longest keys first)."""
        import re

        names: list[str] = []
        for key in sorted(self.sources, key=len, reverse=True):
            if re.search(re.escape(key) + r"(?![\w.])", message):
                names += [n for n in self.sources[key] if n not in names]
        return names

    def input_for(self, key: str) -> str | None:
        """The one input (or run folder output) whose value `key` holds as given, so that "set `key`=V" reads
        "set --input=V"; None where no input sets `key`, or where one sets it to something computed from it (a
        batch size from three inputs, `val_kwargs.do_sample` from a temperature)."""
        sources = self.sources.get(key, [])
        if len(sources) != 1 or key not in self.overrides:
            return None
        name = sources[0]
        given = {**self.outputs, **self.values}
        if name not in given:
            return None
        value, held = given[name], self.overrides[key]
        return name if self.keys.get(name) == key or (type(value) is type(held) and value == held) else None

    def in_input_terms(self, message: str) -> str:
        """`message` (a run's error or note, in rft's canonical keys) as a component user reads it: each key an
        input sets as given named by that input (`actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2` ->
        `--actor_rft_micro_batch_size_per_gpu=2`), also where the message shortens it to its last parts
        (`ppo_mini_batch_size`, `rollout.n`, `total_epochs`) that no other key set here ends with; a key no input
        sets stays, and where no input of the component can set it (`reachable`), the message ends saying so."""
        import re

        from rft.config.schema import RFTConfig
        from rft.config.validate import walk

        by_key = {key: name for key in self.sources if (name := self.input_for(key)) is not None}
        by_tail: dict[str, set[str]] = {}
        for key in self.sources:  # a shortened key names an input only where it names one key of the plan
            parts = key.split(".")
            for i in range(1, len(parts)):
                tail = ".".join(parts[i:])
                if "." in tail or "_" in tail:  # not one plain word ('n', 'lr', 'path'), which text uses as words
                    by_tail.setdefault(tail, set()).add(key)
        schema = {key for key, _, _ in walk(RFTConfig())}
        unset: list[str] = []

        def named(m: re.Match) -> str:
            token = m.group(0)
            tails = by_tail.get(token, set())
            key = token if token in schema else next(iter(tails)) if len(tails) == 1 else None
            if key in by_key:
                return f"--{by_key[key]}"
            if token in schema and token not in self.sources and token not in self.reachable and token not in unset:
                unset.append(token)
            return token

        out = re.sub(r"(?<![\w./-])[A-Za-z_]\w*(?:\.\w+)*(?!\.?[\w/-])", named, message)
        if unset:
            out += f"; {self.component} has no input that sets {', '.join(unset)}"
        return out


def vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def vllm_install_hint() -> str:
    from rft.rollout.vllm_engine import INSTALL_HINT

    return INSTALL_HINT


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    display_name: str
    description: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    plan_fn: Callable[[Plan], None]
    example: str = ""  # the documented command line (docs, --help epilog)
    engine: Callable[[dict[str, Any]], str] = lambda values: "hf"
    """The rollout engine the inputs pick: 'vllm' writes the inputs marked `vllm` to their keys."""
    engine_rule: str = "it has no input that picks vLLM"
    """How the engine is picked, for the messages and the docs."""
    setup: tuple[str, ...] = ()
    """The commands that write the files the documented command line (`example`) reads, run before it."""
    deepspeed_template: dict | None = None
    """A DeepSpeed config for a deepspeed_config input, printed by --emit-deepspeed-config."""

    def __post_init__(self) -> None:
        names = [i.name for i in self.inputs] + [o.name for o in self.outputs]
        if len(set(names)) != len(names):
            raise ValueError(f"component {self.name}: duplicate input/output names")

    def input(self, name: str) -> Input:
        for inp in self.inputs:
            if inp.name == name:
                return inp
        raise KeyError(name)

    def reachable_keys(self) -> frozenset[str]:
        """The canonical keys the inputs and outputs can set: each row's key and the `keys` its `lands_on` names."""
        import re

        rows = [(i.key, i.mapping) for i in self.inputs] + [(None, o.lands_on) for o in self.outputs]
        return frozenset(key for own, text in rows
                         for key in ([own] if own else []) + re.findall(r"`([A-Za-z_][\w.]*\.\w+)`", text))

    def defaults(self) -> dict[str, Any]:
        return {i.name: i.default for i in self.inputs}

    def plan(self, values: dict[str, Any], outputs: dict[str, str | None] | None = None,
             check_paths: bool = True) -> Plan:
        """The plan of `values`, the inputs given (the others take their defaults): every refusal is collected,
        not raised. An unknown input, a value that does not parse (planned at its default) and a missing required
        input are refusals too, so that one run names them all."""
        from rft.config.suggest import did_you_mean

        names = [i.name for i in self.inputs]
        refusals = [(name, "is not an input of this component; " + (did_you_mean(name, names, lambda n: f"--{n}")
                     or f"rft component {self.name} --help lists them")) for name in values if name not in names]
        full = {**self.defaults(), **{k: v for k, v in values.items() if k in names}}
        for inp in self.inputs:
            if full[inp.name] is not None:
                try:
                    full[inp.name] = parse_value(inp, full[inp.name])
                except ValueError as e:
                    refusals.append((inp.name, "=" + str(e).split(": ", 1)[1]))
                    full[inp.name] = inp.default
        refusals += [(i.name, "is required") for i in self.inputs if i.required and full[i.name] in (None, "")]
        plan = Plan(self.name, full, {o.name: (outputs or {}).get(o.name) for o in self.outputs},
                    given=frozenset(values) & set(names), keys={i.name: i.key for i in self.inputs},
                    refusals=refusals, check_paths=check_paths, reachable=self.reachable_keys())
        engine = self.engine(full)
        for inp in self.inputs:
            value = full[inp.name]
            if inp.vllm and engine == "vllm" and inp.key is not None:
                plan.set(inp.key, value, inp.name)  # the config's vLLM checks apply (ranges, TP on this machine)
            elif inp.vllm:
                hf_values = _schema_also(inp.key)  # values that say what the hf engine does (1: not sharded)
                if value != inp.default and value in hf_values:
                    plan.set(inp.key, value, inp.name)
                elif value != inp.default and engine == "vllm":  # a setting without an rft key
                    plan.refuse(inp.name, f"={value!r}: rft's vLLM engine does not take this setting (it generates "
                                          f"from text prompts only); only the spec default {inp.default!r} (no "
                                          "effect) is accepted")
                elif value != inp.default:
                    also = "".join(f" or {v!r} (what the hf engine does)" for v in hf_values)
                    missing = "" if vllm_installed() else f"; vLLM is not installed here: {vllm_install_hint()}"
                    plan.refuse(inp.name, f"={value!r} configures the vLLM engine, and this component generates "
                                          f"with the hf engine here ({self.engine_rule}{missing}); otherwise only "
                                          f"the spec default {inp.default!r} (no effect){also} is accepted")
                else:
                    plan.inert.append(f"{inp.name}={value!r}")
            elif inp.key is not None and value is not None:
                plan.set(inp.key, value, inp.name)
        if engine == "vllm" and "ENGINE" not in full:  # (verl_trainer's plan sets it from its engine inputs)
            plan.set("actor_rollout_ref.rollout.name", "vllm")
            plan.notes.append(f"rollout engine vLLM: {self.engine_rule}")
        self.plan_fn(plan)
        if plan.inert:
            unused = "not used by rft's hf engine" if engine == "hf" else "that rft's vLLM engine does not take"
            plan.notes.append(f"vLLM settings at their spec defaults, {unused}: " + ", ".join(plan.inert))
        return plan

    # ------------------------------------------------------------------------------------------ command line
    def parser(self, strict: bool = True) -> argparse.ArgumentParser:
        """The command line (and its --help). `strict` False: the values as given, unconverted, and only the
        inputs given (no defaults, nothing required, no abbreviations), for `plan` to refuse every bad one at
        once."""
        p = argparse.ArgumentParser(
            prog=f"rft component {self.name}", description=f"{self.display_name} ({self.name} "
            f"{self.version}): {self.description}", formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=("Example:\n  " + self.example) if self.example else None, allow_abbrev=strict)
        groups: dict[str, Any] = {}
        for inp in self.inputs:
            group = groups.get(inp.group)
            if group is None:
                group = groups[inp.group] = p.add_argument_group(inp.group or "inputs")
            checked = {"default": inp.default, "required": inp.required, "type": _converter(inp)} if strict else \
                {"default": argparse.SUPPRESS}
            group.add_argument(f"--{inp.name}", dest=inp.name, metavar=inp.type.upper(), help=input_help(inp),
                               **checked)
        out = p.add_argument_group("outputs")
        for o in self.outputs:
            out.add_argument(f"--{o.name}", dest=o.name, default=None, metavar="PATH",
                             help=f"{o.description} ({o.type}){'; ' + o.lands_on if o.lands_on else ''}")
        act = p.add_argument_group("actions")
        act.add_argument("--emit-yaml", action="store_true",
                         help="print the Azure ML command-component YAML of this interface and exit")
        act.add_argument("--show-config", action="store_true",
                         help="print the resolved canonical (verl-key) config and exit without training")
        if self.deepspeed_template:
            act.add_argument("--emit-deepspeed-config", action="store_true",
                             help="print a DeepSpeed config for deepspeed_config (ZeRO-3, every size 'auto': "
                                  "taken from the inputs) and exit")
        return p


def _schema_also(key: str | None) -> tuple:
    """The `also` values of the canonical key's schema field (values rft accepts besides its default)."""
    if not key:
        return ()
    import dataclasses

    from rft.config.schema import RFTConfig

    cls: Any = RFTConfig
    *parents, leaf = key.split(".")
    for part in parents:
        f = {f.name: f for f in dataclasses.fields(cls)}.get(part)
        if f is None:
            return ()
        cls = type(f.default_factory())  # type: ignore[misc]
    f = {f.name: f for f in dataclasses.fields(cls)}.get(leaf)
    return tuple(f.metadata.get("also", ())) if f is not None else ()


def _converter(inp: Input) -> Callable[[str], Any]:
    def convert(raw: str) -> Any:
        try:
            return parse_value(inp, raw)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).split(": ", 1)[-1]) from None

    convert.__name__ = inp.type  # argparse names the type in its messages
    return convert


def input_help(inp: Input) -> str:
    text = inp.description.replace("%", "%%")
    parts = [text]
    if inp.enum:
        parts.append("one of: " + ", ".join(str(e) for e in inp.enum))
    parts.append("default: " + ("none" if inp.default is None else repr(inp.default)))
    if inp.required:
        parts.append("required")
    if inp.mapping:
        parts.append("rft: " + inp.mapping.replace("%", "%%"))
    return " | ".join(parts)


def path_or_none(value: Any) -> Path | None:
    return Path(value).expanduser() if value not in (None, "") else None
