"""The check of the monitor keys (trainer.logger, trainer.monitor_args), which every trainer section has."""

from __future__ import annotations

import importlib.util
from typing import Any

from rft.config.errors import ConfigError
from rft.config.schema import LOGGERS, MONITOR_ARGS, REFUSED_LOGGERS


def check_loggers(prefix: str, loggers: Any, monitor_args: Any) -> None:
    """trainer.logger: names rft has (a refused one with its reason), their packages installed (the error names the
    extra); trainer.monitor_args: known keys, each of a monitor the list names."""
    if isinstance(loggers, str) or not all(isinstance(x, str) for x in loggers):
        raise ConfigError(f"{prefix}.logger must be a list of names, e.g. [console, tensorboard], got {loggers!r}")
    for name in loggers:
        if name in REFUSED_LOGGERS:
            raise ConfigError(f"{prefix}.logger: {name!r} is not supported by rft ({REFUSED_LOGGERS[name]})")
        if name not in LOGGERS:
            raise ConfigError(f"{prefix}.logger: {name!r} is not a monitor; choose from {list(LOGGERS)}")
        needs = LOGGERS[name]
        if needs is not None and importlib.util.find_spec(needs[0]) is None:
            raise ConfigError(
                f"{prefix}.logger: {name!r} needs the {needs[0]} package, which is not installed: pip install "
                f"'rft[{needs[1]}]' (or remove {name!r} from {prefix}.logger)"
            )
    if not isinstance(monitor_args, dict):
        raise ConfigError(f"{prefix}.monitor_args must be a mapping, e.g. {{uri: sqlite:///mlflow.db}}")
    for key, value in monitor_args.items():
        if key not in MONITOR_ARGS:
            raise ConfigError(f"{prefix}.monitor_args.{key} is not a monitor setting; known: "
                              f"{', '.join(f'{k} ({m})' for k, m in MONITOR_ARGS.items())}")
        if MONITOR_ARGS[key] not in loggers:
            raise ConfigError(f"{prefix}.monitor_args.{key} is a setting of the {MONITOR_ARGS[key]} monitor, which "
                              f"{prefix}.logger={list(loggers)} does not name: add {MONITOR_ARGS[key]!r} or remove it")
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{prefix}.monitor_args.{key} must be a string, got {value!r}")
