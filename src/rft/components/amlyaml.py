"""The Azure ML command-component YAML of a component, generated from its table (`components/<name>.yaml`).

The command line calls `rft component NAME`: required inputs always, optional ones inside `$[[...]]` (left out when
the job gives no value), every output. A test keeps the files in the repository equal to this output and checks that
the YAML and the CLI agree on every input's name, type, default and enum.
"""

from __future__ import annotations

from typing import Any

import yaml

from rft.components.spec import Component, Input

SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json"
ENVIRONMENT = "azureml:rft@latest"  # an environment with rft installed (pip install 'rft[mlflow]')


def _input_entry(inp: Input) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": inp.type}
    if inp.enum:
        entry["enum"] = list(inp.enum)
    if inp.default is not None:
        entry["default"] = inp.default
    entry["optional"] = inp.optional
    entry["description"] = inp.description
    return entry


def command_line(comp: Component) -> list[str]:
    lines = [f"rft component {comp.name}"]
    for inp in comp.inputs:
        arg = f"--{inp.name} '${{{{inputs.{inp.name}}}}}'"
        lines.append(arg if not inp.optional else f"$[[{arg}]]")
    lines += [f"--{o.name} '${{{{outputs.{o.name}}}}}'" for o in comp.outputs]
    return lines


def component_yaml(comp: Component) -> str:
    doc: dict[str, Any] = {
        "$schema": SCHEMA,
        "name": comp.name,
        "version": comp.version,
        "type": "command",
        "display_name": comp.display_name,
        "description": comp.description,
        "environment": ENVIRONMENT,
        "inputs": {inp.name: _input_entry(inp) for inp in comp.inputs},
        "outputs": {o.name: {"type": o.type, "description": o.description} for o in comp.outputs},
    }
    head = (f"# Generated from rft's table of the {comp.name} interface by `rft component {comp.name} --emit-yaml`;"
            " do not edit.\n")
    body = yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)
    command = "command: >-\n" + "".join(f"  {line}\n" for line in command_line(comp))
    return head + body + command
