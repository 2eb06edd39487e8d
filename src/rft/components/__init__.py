"""The component interfaces (Azure ML command components): `rft component NAME --<input> VALUE ...`.

Each spec is one table (`rft.components.<module>.COMPONENT`): the command line, its --help, the Azure ML YAML
(`components/<name>.yaml`) and docs/components.md are generated from it, and its plan maps every input onto rft's
canonical verl keys, or refuses it by name before anything loads.
"""

from __future__ import annotations

from rft.components.spec import Component, ComponentError, Input, Output, Plan


def components() -> dict[str, Component]:
    from rft.components import grpo, rft_trainer, verl_trainer

    return {c.name: c for c in (rft_trainer.COMPONENT, verl_trainer.COMPONENT, grpo.COMPONENT)}


def get_component(name: str) -> Component:
    table = components()
    if name not in table:
        raise ComponentError(f"unknown component {name!r}; available: {', '.join(table)}")
    return table[name]


__all__ = ["Component", "ComponentError", "Input", "Output", "Plan", "components", "get_component"]
