"""The example configs rft ships, and `rft example`, which writes one into a folder.

They are the repository's `examples/` folder, shipped as package data (`src/rft/examples` links to it, pyproject's
package-data takes it into the wheel): a user who installed rft with pip, in a folder of their own, has no
`examples/` beside them, as a verl or TRL user has none. `rft example` lists them, `rft example NAME [DEST]` writes
one byte for byte into DEST (the current folder by default), and a config path `examples/NAME.yaml` that does not
exist here is answered with that command (`missing_example_problem`, which `rft.cli` asks before loading it).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "examples"
"""The shipped examples: in a source tree a link to the repository's `examples/`, in a wheel the files."""


def shipped() -> dict[str, Path]:
    """{name: file} of every shipped example: a YAML config by its path under `examples/` without `.yaml`
    (`arithmetic_grpo`, `offline/eval`), a Python file it reads by its path with `.py`
    (`datasets/question_answer.py`); sorted by name."""
    files = [p for p in ROOT.rglob("*") if p.suffix in (".yaml", ".py") and "__pycache__" not in p.parts]
    names = {p.relative_to(ROOT).with_suffix("" if p.suffix == ".yaml" else p.suffix).as_posix(): p for p in files}
    return dict(sorted(names.items()))


def summary(path: Path) -> str:
    """What an example is, from its first comment line (a YAML's `#`, a Python file's docstring)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.strip().lstrip("#").strip().strip('"').strip()
        if text:
            return text.removesuffix(":")
    return ""


def header(text: str) -> list[str]:
    """An example's leading comment lines: what it is and the commands that run it."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def companions(name: str, text: str) -> list[str]:
    """The other shipped examples the config `text` reads by their repository path (`data.custom_cls.path:
    examples/datasets/question_answer.py`): paths in its values, not in its comments, which also name examples it
    only mentions (gsm8k_grpo_small's header names gsm8k_grpo, the recipe it shrinks); a Python example reads none."""
    if name.endswith(".py"):
        return []
    values = "\n".join(re.sub(r"(^|\s)#.*", "", line) for line in text.splitlines())
    known = shipped()
    found = []
    for path in re.findall(r"\bexamples/([\w./-]+\.(?:yaml|py))", values):
        other = path.removesuffix(".yaml")
        if other in known and other != name and other not in found:
            found.append(other)
    return found


def example_name(path: str | Path) -> str | None:
    """NAME of a config path written as the repository's `examples/NAME.yaml` (`./examples/offline/eval.yaml` ->
    `offline/eval`), else None."""
    parts = Path(path).parts
    if "examples" not in parts or Path(path).suffix not in (".yaml", ".yml"):
        return None
    after = parts[len(parts) - parts[::-1].index("examples"):]
    return Path(*after).with_suffix("").as_posix() if after else None


def missing_example_problem(path: str | Path) -> str | None:
    """The line for a config `path` written as the repository's `examples/NAME.yaml` that does not exist here: the
    `rft example` command that writes it (or, when no example has that name, that `rft example` lists them). None
    for a path that exists or is not such a path (`rft.config.load.read_yaml` says it is missing)."""
    name = example_name(path)
    if name is None or Path(path).exists():
        return None
    missing = f"config file {str(path)!r} does not exist here ({Path.cwd()})"
    if name not in shipped():
        return f"{missing}; no example is named {name!r} either: `rft example` lists them"
    return (f"{missing}; `rft example {name}` writes it into this folder as {Path(name).name}.yaml (`rft example "
            f"{name} {Path(path).parent.as_posix()}` writes it at that path; `rft example` lists the examples)")
