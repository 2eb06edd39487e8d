"""Importing a user's Python file by its path (custom reward functions, workflows, tools): a module name unique to
the resolved path (two files sharing a file name do not collide; loading the file again re-executes it), and an
import that fails reported in one line naming the config key."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from rft.errors import RftError


def load_user_module(path: str | Path, key: str, prefix: str = "rft_user", error: type[RftError] = RftError
                     ) -> ModuleType:
    """The module of the Python file at `path`; `key`: the config key naming it (for messages)."""
    file = Path(path).expanduser()
    if not file.exists():
        raise error(f"{key}: {str(file)!r} does not exist")
    if not file.is_file() or file.suffix != ".py":
        raise error(f"{key}: {str(file)!r} is not a .py file")
    file = file.resolve()
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:16]
    module_name = f"{prefix}_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise error(f"{key}: cannot import {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # sys.exit() at import is the file's failure, not rft's exit
        del sys.modules[module_name]
        raise error(f"{key}: importing {str(file)!r} raised {type(e).__name__}: {' '.join(str(e).split())[:200]}; "
                    "fix the file") from e
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
