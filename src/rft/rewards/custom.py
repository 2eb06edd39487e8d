"""User reward functions loaded from a Python file (verl's custom_reward_function.path / .name)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from rft.errors import RewardError


def load_custom_reward(path: str | Path, name: str = "compute_score") -> Callable:
    """Import the Python file at `path` and return its attribute `name`.

    The function is called as ``fn(data_source, solution_str, ground_truth, extra_info)`` (verl's signature)
    and returns a float, or a dict with the reward under "score" and numeric metrics under other keys.
    The module is registered in sys.modules under a name unique to the resolved path, so two files that share
    a file name do not collide, and loading the same file again re-executes it.
    """
    return load_custom_rewards(path, [name])[0]


def load_custom_rewards(path: str | Path, names: list[str]) -> list[Callable]:
    """The functions `names` of the Python file at `path`, imported once (see `load_custom_reward`)."""
    file = Path(path).expanduser()
    if not file.exists():
        raise RewardError(f"custom_reward_function.path: {str(file)!r} does not exist")
    if not file.is_file() or file.suffix != ".py":
        raise RewardError(f"custom_reward_function.path: {str(file)!r} is not a .py file")
    if not names or not all(names):
        raise RewardError(f"custom_reward_function.name is empty; name a function defined in {str(file)!r}")

    file = file.resolve()
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:16]
    module_name = f"rft_custom_reward_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise RewardError(f"custom_reward_function.path: cannot import {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise RewardError(f"custom_reward_function.path: importing {str(file)!r} raised {type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]}; fix the file") from e
    except BaseException:
        del sys.modules[module_name]
        raise

    return [_function(module, module_name, file, name) for name in names]


def _function(module, module_name: str, file: Path, name: str) -> Callable:
    if not hasattr(module, name):
        # What the file defines, not what it imports.
        defined = sorted(
            attr
            for attr, value in vars(module).items()
            if callable(value)
            and not attr.startswith("_")
            and getattr(value, "__module__", None) == module_name
        )
        raise RewardError(
            f"custom_reward_function.name: {str(file)!r} defines no {name!r}; "
            f"callables it defines: {', '.join(defined) or '(none)'}"
        )
    fn = getattr(module, name)
    if not callable(fn):
        raise RewardError(
            f"custom_reward_function.name: {name!r} in {str(file)!r} is a {type(fn).__name__}, not a callable"
        )
    return fn
