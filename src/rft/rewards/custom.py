"""User reward functions loaded from a Python file (verl's custom_reward_function.path / .name)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

from rft.errors import RewardError
from rft.userfile import load_user_module


def load_custom_reward(path: str | Path, name: str = "compute_score") -> Callable:
    """Import the Python file at `path` and return its attribute `name`.

    The function is called as ``fn(data_source, solution_str, ground_truth, extra_info)`` (verl's signature)
    and returns a float, or a dict with the reward under "score" and numeric metrics under other keys.
    The module is registered in sys.modules under a name unique to the resolved path, so two files that share
    a file name do not collide; a file is imported once per process while it is unchanged (`reward_module`).
    """
    return load_custom_rewards(path, [name])[0]


def load_custom_rewards(path: str | Path, names: list[str]) -> list[Callable]:
    """The functions `names` of the Python file at `path`, imported once (see `load_custom_reward`)."""
    if not names or not all(names):
        raise RewardError(f"custom_reward_function.name is empty; name a function defined in {str(path)!r}")
    module = reward_module(path)
    file, module_name = Path(module.__file__), module.__name__
    return [_function(module, module_name, file, name) for name in names]


_MODULES: dict[Path, tuple[int, int, ModuleType]] = {}  # resolved path -> (mtime_ns, size, module)


def reward_module(path: str | Path) -> ModuleType:
    """The module of the reward file at `path`, imported once per process for each version of the file (resolved
    path, modification time, size): the config check imports it to check its functions' signatures before any
    model loads, and `build_reward_fn` builds each stage's reward from it, so its import-time side effects (a
    model or a table it loads, a line it logs) happen once; a file changed since is imported again."""
    file = Path(path).expanduser().resolve()
    try:
        stat = file.stat()
    except OSError:
        stat = None  # load_user_module says what is wrong with it
    cached = _MODULES.get(file)
    if stat is not None and cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
        return cached[2]
    module = load_user_module(path, "custom_reward_function.path", "rft_custom_reward", RewardError)
    if stat is not None:
        _MODULES[file] = (stat.st_mtime_ns, stat.st_size, module)
    return module


def load_callable_rewards(path: str | Path, names: list[str], reward_kwargs: Mapping | None = None
                          ) -> list[Callable]:
    """`load_custom_rewards`, each function checked against the call rft makes (`check_call`): what the config check
    runs before any model loads, and `build_reward_fn` again when it builds the run's reward."""
    functions = load_custom_rewards(path, names)
    for name, fn in zip(names, functions):
        check_call(fn, name, path, reward_kwargs)
    return functions


VERL_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
"""The arguments a reward function of `custom_reward_function.path` is called with, by these names."""


def check_call(fn: Callable, name: str, path: str | Path, reward_kwargs: Mapping | None = None) -> None:
    """RewardError when `fn` cannot take the call rft makes (`combine.VerlCall`), verl's reward managers' call:
    ``fn(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)``, the four by name.

    Checked with `inspect.Signature.bind`, so defaults, ``*args``, ``**kwargs`` and keyword-only parameters count as
    they would in the call (a callable object's ``__call__``, a class's ``__init__``); a callable whose signature
    Python cannot read (some builtins) is not checked. Such a function would fail on every row, and with
    custom_reward_function.on_error=zero score every row 0 instead of stopping. So would an ``async def`` (or an
    object whose ``__call__`` is one): rft's call is synchronous, and it would return a coroutine, not a score.
    """
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):  # a function, an object
        raise RewardError(
            f"custom_reward_function.name: {name!r} in {str(path)!r} is an async function: rft calls reward "
            "functions synchronously, so it would return a coroutine, not a score, on every row; make it a plain "
            f"def {name}(...) (run anything it awaits inside it, e.g. with asyncio.run)"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    kwargs = dict(reward_kwargs or {})
    try:
        signature.bind(**{**dict.fromkeys(VERL_ARGS), **kwargs})
    except TypeError as e:
        trl = trl_signature(fn, name, path, signature)
        if trl is not None:
            raise trl from None
        keywords = (f" and the keyword arguments {', '.join(map(str, kwargs))} (custom_reward_function.reward_kwargs)"
                    if kwargs else "")
        raise RewardError(
            f"custom_reward_function.name: {name!r} in {str(path)!r} has the signature {name}{signature}, which "
            f"cannot take rft's call {name}({', '.join(f'{a}=...' for a in VERL_ARGS)}){keywords}, the four passed "
            f"by name as verl passes them ({e}); give it parameters of those names, e.g. def {name}(data_source, "
            "solution_str, ground_truth, extra_info=None, **kwargs)"
        ) from None


TRL_ARGS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
"""The arguments TRL's GRPOTrainer passes a reward function by name besides the dataset's columns."""


def trl_signature(fn: Callable, name: str, path: str | Path, signature: inspect.Signature) -> RewardError | None:
    """The error for a function written for TRL's GRPOTrainer, ``f(prompts, completions, **kwargs) -> list[float]``
    (a parameter named `completions` or `prompts` tells one): how to write it for rft's per-response call, and the
    key that hands it the dataset column it reads (data.response_key); None for any other function."""
    params = signature.parameters
    if "completions" not in params and "prompts" not in params:
        return None
    columns = [p for p, v in params.items() if p not in TRL_ARGS and p not in VERL_ARGS
               and v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL)]
    column = (f" (or the column data.response_key names: data.response_key={columns[0]} for the {columns[0]!r} "
              "this function reads)") if len(columns) == 1 else " (or the column data.response_key names)"
    return RewardError(
        f"custom_reward_function.name: {name!r} in {str(path)!r} has TRL's batched signature {name}{signature} (lists "
        "of completions in, a list of floats out); rft calls a reward function once per response, as verl does: "
        f"write def {name}(data_source, solution_str, ground_truth, extra_info=None, **kwargs) returning a float, "
        f"solution_str the response's text, ground_truth the row's reward_model.ground_truth{column}, extra_info the "
        "row's extra_info (docs/rewards.md)"
    )


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
        fix = (f": set custom_reward_function.name={defined[0]}" if len(defined) == 1 else
               ": set custom_reward_function.name to one of them (or a list of them)" if defined else "")
        raise RewardError(
            f"custom_reward_function.name: {str(file)!r} defines no {name!r}; "
            f"callables it defines: {', '.join(defined) or '(none)'}{fix}"
        )
    fn = getattr(module, name)
    if not callable(fn):
        raise RewardError(
            f"custom_reward_function.name: {name!r} in {str(file)!r} is a {type(fn).__name__}, not a callable"
        )
    return fn
