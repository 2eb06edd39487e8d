"""`pypi_packages_override`: install requirements into the running environment before the run starts.

pip runs with rft's constraints (the repository's constraints.txt when rft runs from a checkout, and always the
installed torch pinned), so an override can add or change packages but never replace torch. A failed install
stops the run with pip's own message.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from rft.components.spec import ComponentError

_CONTINUATION = re.compile(r"^\s*(<|>|=|!|~)")


def parse_requirements(text: str | None) -> list[str]:
    """'a==1,b>=2,<3' -> ['a==1', 'b>=2,<3']: a comma-separated list where a piece that starts with a version
    operator continues the previous requirement's specifier."""
    out: list[str] = []
    for piece in (text or "").split(","):
        if not piece.strip():
            continue
        if out and _CONTINUATION.match(piece):
            out[-1] += "," + piece.strip()
        else:
            out.append(piece.strip())
    return out


def constraints_text() -> str:
    lines: list[str] = []
    repo_file = Path(__file__).resolve().parents[3] / "constraints.txt"
    if repo_file.is_file():
        lines += [x for x in repo_file.read_text().splitlines() if x.strip() and not x.lstrip().startswith("#")]
    with contextlib.suppress(metadata.PackageNotFoundError):
        lines.append(f"torch=={metadata.version('torch')}")
    return "\n".join(lines) + "\n"


def pip_command(requirements: list[str], constraints: str) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
            "--constraint", constraints, *requirements]


def install_requirements(text: str | None, name: str = "pypi_packages_override") -> list[str]:
    """pip-install the requirements in `text` (comma-separated); ComponentError with pip's output on failure."""
    requirements = parse_requirements(text)
    if not requirements:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(constraints_text())
        cmd = pip_command(requirements, str(constraints))
        print(f"rft: {name}: installing {requirements} (pip, constraints: torch stays)", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        message = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise ComponentError(f"{name}: pip install {' '.join(requirements)} failed (exit {proc.returncode}); the run "
                             f"did not start. pip said:\n{message}")
    importlib.invalidate_caches()
    return requirements
