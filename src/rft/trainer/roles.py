"""A process's role in a run of several (trainer.mode both, explore, train; Ray's placed processes), as it crosses the
process boundary: the launcher (`rft.trainer.modes.run_both_async`, `rft.trainer.cluster`) sets these environment
variables on a child's command, the child reads them once at its start. Below both, so that neither imports the
other for them."""

from __future__ import annotations

import os
from pathlib import Path

from rft.errors import RftError

ROLE_ENV = "RFT_ROLE"
EXPLORER_RANK_ENV = "RFT_EXPLORER_RANK"  # mode both: which of trainer.explorer_num explorers a child is
EXPLORER_DIR = "explorer"


def explorer_folder(out: Path, rank: int) -> Path:
    """Where explorer `rank` logs: <out>/explorer, <out>/explorer_1, ..."""
    return out / (EXPLORER_DIR if rank == 0 else f"{EXPLORER_DIR}_{rank}")


def explorer_rank_from_env(cfg) -> None:
    """RFT_EXPLORER_RANK, where set, is this explorer's trainer.explorer_rank (mode both sets it for its children;
    an `explore` command of any dialect may too)."""
    value = os.environ.get(EXPLORER_RANK_ENV)
    if value is None:
        return
    t = cfg.trainer
    if not value.isdigit() or not int(value) < t.explorer_num:
        raise RftError(f"{EXPLORER_RANK_ENV}={value!r} must be an explorer rank in [0, trainer.explorer_num="
                       f"{t.explorer_num}) (Trinity-RFT: explorer.rollout_model.engine_num)")
    t.explorer_rank = int(value)


def explorer_role(cfg) -> str:
    """The run-folder role (its lock) of explorer trainer.explorer_rank: explorer, explorer_1, ..."""
    return explorer_folder(Path("."), cfg.trainer.explorer_rank).name
