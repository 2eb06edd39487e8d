"""The config reference (docs/config.md), generated from the schema's help texts."""

from __future__ import annotations

import dataclasses

from rft.config.schema import RFTConfig


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
            help_text += f" **Not supported yet** ({f.metadata['unsupported']}): only the default is accepted."
        rows.append(f"| `{key}` | `{value!r}` | {help_text.replace('|', '/')} |")
    return rows


def reference_markdown() -> str:
    lines = [
        "# Config reference",
        "",
        "Generated from the schema's help texts by `rft config reference` (a test keeps this file in step).",
        "Keys are verl's nested names; set them in YAML or as `dotted.key=value` overrides.",
        "",
    ]
    for f in dataclasses.fields(RFTConfig):
        section = type(getattr(RFTConfig(), f.name))
        lines += [f"## `{f.name}`", "", f.metadata.get("help", ""), "", "| key | default | meaning |",
                  "| --- | --- | --- |", *_rows(section, f.name + "."), ""]
    return "\n".join(lines)
