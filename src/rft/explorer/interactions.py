"""verl's interactions (actor_rollout_ref.rollout.multi_turn.interaction_config_path; rft's
workflow.interaction_config_path): a class that answers the model as the user after each reply without tool calls.

verl's format, as its examples write it:

    interaction:
      - name: gsm8k                      # optional: the class's name, lower case, without "Interaction"
        class_name: my_pkg.gsm8k_interaction.Gsm8kInteraction
        config: {}

Each class is verl's `BaseInteraction` (duck-typed: rft does not import verl): built once per run as
`cls(config={**config, "name": name})`, then per conversation `start_interaction(instance_id, **interaction_kwargs)`,
after each reply `generate_response(instance_id, messages, **interaction_kwargs) -> (terminate, text, score,
metadata)` (the text is the next user turn, the score one of the conversation's `turn_scores`) and
`finalize_interaction(instance_id)` when it ends; methods may be coroutines, as verl's are. A row picks its
interaction by `extra_info.interaction_kwargs.name` (verl's `interaction_kwargs`, all of which the methods get).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from rft.config.errors import ConfigError

KEY = "workflow.interaction_config_path"


def read_interaction_config(path: str) -> list[tuple[str, str, dict]]:
    """(name, class_name, config) of each interaction of the file, verl's default names filled in; a file that is not
    verl's format is a ConfigError naming what is wrong where."""
    from rft.explorer.verl_tools import read_verl_list

    items = read_verl_list(KEY, path, "interaction")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{KEY}={path!r} holds no `interaction:` list (verl's interaction config: interaction: "
                          "[{name, class_name, config}])")
    out: list[tuple[str, str, dict]] = []
    for i, item in enumerate(items):
        class_name = item.get("class_name") if isinstance(item, dict) else None
        if not isinstance(class_name, str) or "." not in class_name:
            raise ConfigError(f"{KEY}={path!r}: interaction[{i}] needs a class_name, module.Class")
        config = item.get("config") or {}
        if not isinstance(config, dict):
            raise ConfigError(f"{KEY}={path!r}: interaction[{i}].config must be a mapping, got {config!r}")
        simple = class_name.rsplit(".", 1)[1]  # verl's default name: Gsm8kInteraction -> gsm8k
        name = str(item.get("name") or (simple[:-len("Interaction")] if simple.endswith("Interaction")
                                         else simple).lower())
        if any(name == n for n, _, _ in out):
            raise ConfigError(f"{KEY}={path!r}: two interactions are named {name!r}; give each its own name")
        out.append((name, class_name, config))
    return out


def _import(module_name: str, folder: Path):
    """`module_name` from the Python path (as verl finds it), else from `folder` (the config file's)."""
    top = module_name.split(".")[0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != top or not ((folder / f"{top}.py").exists() or (folder / top).is_dir()):
            raise
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(str(folder))


def interaction_class(class_name: str, path: str) -> type:
    """The class `module.Class`, its module imported from the Python path (as verl finds it) or, failing that, from
    the interaction config's folder."""
    module_name, attr = class_name.rsplit(".", 1)
    try:
        module = _import(module_name, Path(path).expanduser().resolve().parent)
    except Exception as e:  # any failure of the user's module is the config's
        raise ConfigError(f"{KEY}={path!r}: cannot import {module_name!r} for {class_name} ({type(e).__name__}: "
                          f"{e}); put the folder that holds it on PYTHONPATH, or the module beside the file") from None
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ConfigError(f"{KEY}={path!r}: {module_name} has no class {attr!r}")
    missing = [m for m in ("start_interaction", "generate_response") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"{KEY}={path!r}: {class_name} has no {', '.join(missing)} (verl's BaseInteraction)")
    return cls


def load_interactions(path: str) -> dict[str, Any]:
    """name -> an instance of each interaction of the file (verl's `initialize_interactions_from_config`)."""
    return {name: interaction_class(class_name, path)(config={**config, "name": name})
            for name, class_name, config in read_interaction_config(path)}


def call(method, *args, **kwargs) -> Any:
    """`method(*args, **kwargs)`, run to its end if it is a coroutine (verl's interactions are async; a workflow runs
    on a thread of its own, with no event loop)."""
    out = method(*args, **kwargs)
    return asyncio.run(out) if inspect.isawaitable(out) else out


class Session:
    """One conversation's interaction: started with the row's interaction_kwargs, asked after each reply."""

    def __init__(self, interactions: dict[str, Any], kwargs: Any, instance_id: str):
        if not isinstance(kwargs, dict) or "name" not in kwargs:
            raise ConfigError(f"{KEY} is set and a row's extra_info.interaction_kwargs is {kwargs!r}: each row needs "
                              f"interaction_kwargs with the name of its interaction ({', '.join(interactions)})")
        if kwargs["name"] not in interactions:
            raise ConfigError(f"a row's extra_info.interaction_kwargs.name={kwargs['name']!r} is not an interaction "
                              f"of {KEY}, which has {', '.join(interactions)}")
        self.interaction, self.kwargs, self.id = interactions[kwargs["name"]], dict(kwargs), instance_id
        self.scores: list[float] = []
        """The score of each of its turns (verl's turn_scores), which the reward function gets in extra_info."""
        call(self.interaction.start_interaction, instance_id, **self.kwargs)

    def respond(self, messages: list[dict]) -> tuple[bool, str]:
        """(whether the conversation ends, the user's next turn) after the model's last reply in `messages`."""
        terminate, text, score, _ = call(self.interaction.generate_response, self.id, messages, **self.kwargs)
        if score is not None:
            self.scores.append(float(score))
        return bool(terminate), str(text)

    def finish(self) -> None:
        finalize = getattr(self.interaction, "finalize_interaction", None)
        if callable(finalize):
            call(finalize, self.id, **self.kwargs)
