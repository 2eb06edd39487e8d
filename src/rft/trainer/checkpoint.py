"""Checkpoints: `checkpoints/global_step_N/` folders written atomically, a `latest` pointer, retention.

A folder is written under a temporary name and renamed only when complete, and `latest` is replaced atomically
after that: a crash mid-save leaves the previous checkpoint whole and `latest` pointing at it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from rft.fsutil import atomic_dir

_STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointManager:
    def __init__(self, root: str | Path, max_to_keep: int | None = None):
        self.root = Path(root)
        self.max_to_keep = max_to_keep

    def path(self, step: int) -> Path:
        return self.root / f"global_step_{step}"

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir())

    def latest(self) -> Path | None:
        """The newest complete checkpoint: the one `latest` names, else the highest step folder."""
        pointer = self.root / "latest"
        if pointer.is_file():
            target = self.root / pointer.read_text().strip()
            if target.is_dir():
                return target
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        final = self.path(step)
        with atomic_dir(final) as tmp:
            write(tmp)
        tmp_pointer = self.root / ".latest.tmp"
        tmp_pointer.write_text(final.name + "\n")
        os.replace(tmp_pointer, self.root / "latest")
        self._prune(keep=step)
        return final

    def _prune(self, keep: int) -> None:
        if not self.max_to_keep:
            return
        for step in self.steps()[: -self.max_to_keep]:
            if step != keep:
                shutil.rmtree(self.path(step), ignore_errors=True)


def step_of(path: str | Path) -> int:
    m = _STEP_DIR.match(Path(path).name)
    if not m:
        raise ValueError(f"{str(path)!r} is not a global_step_N checkpoint folder")
    return int(m.group(1))
