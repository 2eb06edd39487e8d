"""User reward functions loaded from a Python file (verl's custom_reward_function.path / .name)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rft.errors import RewardError
from rft.userfile import load_user_module


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
    if not names or not all(names):
        raise RewardError(f"custom_reward_function.name is empty; name a function defined in {str(path)!r}")
    module = load_user_module(path, "custom_reward_function.path", "rft_custom_reward", RewardError)
    file, module_name = Path(module.__file__), module.__name__
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
