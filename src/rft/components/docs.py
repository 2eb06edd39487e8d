"""The generated parts of docs/components.md: one input -> canonical key table per component, between
`<!-- generated: NAME -->` and `<!-- end generated -->` markers (a test keeps them current).

Regenerate: python -m rft.components.docs docs/components.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rft.components import components
from rft.components.spec import Component

_REGION = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def wrapped_example(comp: Component, width: int = 100) -> str:
    """The documented command line, wrapped with shell continuations."""
    lines, current = [], ""
    tokens = comp.example.split(" ")
    groups = []  # an option with its value stays on one line
    for token in tokens:
        if groups and not token.startswith("--") and groups[-1].startswith("--") and " " not in groups[-1]:
            groups[-1] += " " + token
        else:
            groups.append(token)
    for token in groups:
        if current and len(current) + 1 + len(token) > width:
            lines.append(current + " \\")
            current = "    " + token
        else:
            current = f"{current} {token}" if current else token
    return "\n".join([*lines, current])


def input_table(comp: Component) -> str:
    lines = ["```bash", *comp.setup, wrapped_example(comp), "```", "",
             "| input | type | default | rft: where it lands |", "| --- | --- | --- | --- |"]
    for inp in comp.inputs:
        default = "required" if inp.required else ("-" if inp.default is None else f"`{inp.default!r}`")
        name = f"`{inp.name}`" + (" (extension)" if inp.extension else "")
        enum = " (" + ", ".join(map(str, inp.enum)) + ")" if inp.enum else ""
        lines.append(f"| {name} | {inp.type}{enum} | {default} | {_cell(inp.mapping)} |")
    lines += ["", "| output | type | rft |", "| --- | --- | --- |"]
    lines += [f"| `{o.name}` | {o.type} | {_cell(o.lands_on)} |" for o in comp.outputs]
    return "\n".join(lines) + "\n"


def refresh(text: str) -> str:
    table = components()
    return _REGION.sub(lambda m: m.group(1) + input_table(table[m.group(2)]) + m.group(4), text)


if __name__ == "__main__":
    path = Path(sys.argv[1])
    path.write_text(refresh(path.read_text()))
