"""The config reference (docs/config.md), generated from the schema's help texts."""

from __future__ import annotations

import dataclasses

from rft.config.schema import REFUSED_KEYS, RFTConfig


def _rows(cls: type, prefix: str = "") -> list[str]:
    rows = []
    instance = cls()
    for f in dataclasses.fields(cls):
        value = getattr(instance, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            rows += _rows(type(value), key + ".")
            continue
        help_text = f.metadata.get("help", "")
        if "choices" in f.metadata:
            help_text += " One of: " + ", ".join(f"`{c}`" for c in f.metadata["choices"]) + "."
        if "unsupported" in f.metadata:
            also = "".join(f" (or `{v!r}`)" for v in f.metadata.get("also", ()))
            help_text += f" **Not supported yet** ({f.metadata['unsupported']}): only the default{also} is accepted."
        rows.append(f"| `{key}` | `{value!r}` | {help_text.replace('|', '/')} |")
    return rows


def _sections(schema: type, title: str) -> list[str]:
    lines = [f"# {title}", ""]
    for f in dataclasses.fields(schema):
        value = getattr(schema(), f.name)
        if not dataclasses.is_dataclass(value):
            lines += [f"## `{f.name}`", "", "| key | default | meaning |", "| --- | --- | --- |",
                      *_rows_of_field(f, value), ""]
            continue
        lines += [f"## `{f.name}`", "", f.metadata.get("help", ""), "", "| key | default | meaning |",
                  "| --- | --- | --- |", *_rows(type(value), f.name + "."), ""]
    return lines


def _rows_of_field(f, value) -> list[str]:
    help_text = f.metadata.get("help", "")
    if "unsupported" in f.metadata:
        help_text += f" **Not supported yet** ({f.metadata['unsupported']}): only the default is accepted."
    return [f"| `{f.name}` | `{value!r}` | {help_text.replace('|', '/')} |"]


def reference_markdown() -> str:
    from rft.config.dpo_schema import DPOConfig
    from rft.config.sft_schema import SFTConfig

    lines = [
        "# Config reference",
        "",
        "Generated from the schemas' help texts by `rft config reference` (a test keeps this file in step).",
        "Keys are verl's nested names; set them in YAML or as `dotted.key=value` overrides. `rft train` takes the",
        "RL keys (verl's ppo_trainer.yaml), `rft sft` the SFT keys (verl's sft_trainer.yaml), `rft dpo` the DPO",
        "keys (the SFT sections plus TRL's DPO loss names; verl has no DPO trainer), `rft rm` the DPO sections with",
        "TRL's reward-model loss options, `rft generate` and `rft eval`",
        "those of verl's generation.yaml and evaluation.yaml; a `stages:` list in an `rft train` config runs RL, SFT",
        "and DPO stages in order (docs/overview.md). A Trinity-RFT YAML (`rft train`) and",
        "the component interfaces (`rft component NAME`) are translated to these keys (docs/components.md).",
        "",
    ]
    lines += _sections(RFTConfig, "RL training (`rft train`)")
    lines += ["## verl keys rft does not have", "", "Keys of verl's config reference that no section above holds: "
              "each is refused by name, with the reason and what to set instead.", "", "| key | why, and what to do |",
              "| --- | --- |", *(f"| `{key}` | {why} |" for key, why in REFUSED_KEYS.items()), ""]
    lines += _verl_keys()
    lines += _sections(SFTConfig, "SFT (`rft sft`, and `algorithm: sft` stages)")
    lines += _sections(DPOConfig, "DPO (`rft dpo`, and `algorithm: dpo` stages)")
    from rft.config.rm_schema import RMConfig

    lines += _sections(RMConfig, "Reward model (`rft rm`)")
    from rft.config.offline_schema import EvalConfig, GenerationConfig

    lines += _sections(GenerationConfig, "Generation (`rft generate`, verl's generation.yaml)")
    lines += _sections(EvalConfig, "Evaluation (`rft eval`, verl's evaluation.yaml)")
    return "\n".join(lines)


def _verl_keys() -> list[str]:
    """The table of verl's keys that no field holds (`rft.config.verl_keys`), as it decides them."""
    from rft.config.verl_keys import ALIAS, DEFAULT, MT, MULTI_TURN_KEYS, NOOP, SAME, VERL_KEYS

    said = {NOOP: "accepted, no effect here (named in a note)", ALIAS: "read as `{to}`",
            SAME: "accepted while equal to `{to}`", DEFAULT: "accepted at {ok} (named in a note), else refused"}
    rows = [f"| `{MT}.{leaf}` | rl | {what} | verl's multi-turn tool rollout, rft's tool_call_workflow "
            "(docs/workflows.md); without multi_turn.enable: accepted, no effect (named in a note) |"
            for leaf, what in MULTI_TURN_KEYS.items()]
    for row in VERL_KEYS:
        what = said.get(row.kind, "refused").format(to=row.to, ok=" / ".join(f"`{v!r}`" for v in row.ok))
        rows.append(f"| `{row.pattern}` | {row.schema} | {what} | {row.why} |")
    return ["## verl keys without an rft field", "",
            "Every key of verl's own trainer configs (ppo_trainer.yaml and its defaults list, _generated_ppo_trainer"
            ".yaml, sft_trainer.yaml) that no section above holds, matched by pattern (first match wins); rl: the "
            "RL trainer, sft: the SFT trainer. A config file's hydra `defaults:` list is composed as hydra does (files "
            "beside it; verl's own groups are rft's defaults), `+key=` / `++key=` overrides set a key, `~key` removes "
            "one (rft's default applies), `key=` sets hydra's empty string (on a true / false key: false, as verl's "
            "code reads it), and "
            "`_target_` (the class verl builds a section as) is a marker, not a setting.", "",
            "| key | for | what rft does | why |", "| --- | --- | --- | --- |", *rows, ""]
