"""verl's tool-config files (actor_rollout_ref.rollout.multi_turn.tool_config_path; rft's workflow.tool_config_path)
for rft's tool workflow.

verl's format, as its examples write it:

    tools:
      - class_name: verl.tools.gsm8k_tool.Gsm8kTool
        config: {type: native}
        tool_schema: {type: function, function: {name: calc_gsm8k_reward, description: ..., parameters: {...}}}

verl instantiates `class_name` (its BaseTool) and declares `tool_schema` to the model. rft declares the same schemas
and runs a call with its own tool of the schema's function name (the built-ins or the functions of
workflow.args.tools_path): a verl class is Python rft does not run, so a tool rft has no function for is refused,
naming its class, before the model loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rft.config.errors import ConfigError

KEY = "workflow.tool_config_path"


def read_verl_list(key: str, path: str, section: str) -> Any:
    """The `section:` value of verl's YAML file at `path` (named by the config key `key`), None where the file has
    no such section; a file that cannot be read or is not YAML is a ConfigError naming `key`. verl's tool and
    interaction configs are both such files."""
    import yaml

    file = Path(path).expanduser()
    try:
        tree = yaml.safe_load(file.read_text())
    except OSError as e:
        raise ConfigError(f"{key}={path!r}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{key}={path!r} is not YAML: {str(e).splitlines()[0]}") from None
    return tree.get(section) if isinstance(tree, dict) else None


def read_tool_config(path: str) -> list[tuple[str, dict]]:
    """(class_name, tool_schema) of each tool of the file; a file that is not verl's format is a ConfigError naming
    what is wrong where."""
    tools = read_verl_list(KEY, path, "tools")
    if not isinstance(tools, list):
        raise ConfigError(f"{KEY}={path!r} holds no `tools:` list (verl's tool config: tools: [{{class_name, "
                          "config, tool_schema}}])")
    out = []
    for i, tool in enumerate(tools):
        schema = tool.get("tool_schema") if isinstance(tool, dict) else None
        function = schema.get("function") if isinstance(schema, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ConfigError(f"{KEY}={path!r}: tools[{i}] needs a tool_schema with function.name (an OpenAI "
                              "function schema)")
        out.append((str(tool.get("class_name") or ""), {**schema, "type": schema.get("type", "function")}))
    return out


def check_tool_config(path: str, tools: dict) -> None:
    """Every tool of the file has an rft function of its name among `tools` (name -> callable)."""
    for class_name, schema in read_tool_config(path):
        name = schema["function"]["name"]
        if name not in tools:
            raise ConfigError(f"{KEY}={path!r}: the tool {name!r} (verl's class {class_name or '?'}) has no function "
                              f"in rft (its tools: {', '.join(sorted(tools))}): write a function {name}(...) in a "
                              "Python file and set workflow.args.tools_path to it")


def with_tools(declared: list[dict] | None, schemas: list[dict]) -> list[dict]:
    """A task's own tools, then those of the file it does not declare (by function name)."""
    declared = list(declared or [])
    names = {(t.get("function") or {}).get("name") for t in declared if isinstance(t, dict)}
    return declared + [s for s in schemas if s["function"]["name"] not in names]
