"""A process's role in a run of several (trainer.mode both, explore, train; Ray's placed processes), as it crosses the
process boundary: the launcher (`rft.orchestration.modes.run_both_async`, `rft.orchestration.cluster`) sets these environment
variables on a child's command, and the child reads them once, at its start (`ProcessRole.from_env`, in
`rft.orchestration.launch.run_rl`): below that the role is an object passed along, never read from the environment again.
Below both, so that neither imports the other for them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rft.errors import RftError

ROLE_ENV = "RFT_ROLE"
EXPLORER_RANK_ENV = "RFT_EXPLORER_RANK"  # mode both: which of trainer.explorer_num explorers a child is
EXPLORER_DIR = "explorer"


def explorer_folder(out: Path, rank: int) -> Path:
    """Where explorer `rank` logs: <out>/explorer, <out>/explorer_1, ..."""
    return out / (EXPLORER_DIR if rank == 0 else f"{EXPLORER_DIR}_{rank}")


@dataclass(frozen=True)
class ProcessRole:
    """This process's role, as its launcher gave it: `explorer_child`, an explorer started by mode both's trainer
    or by Ray's driver (RFT_ROLE=explorer), which is no rank of the trainer's processes and logs to its folder, not
    the console; `explorer_rank`, which of trainer.explorer_num explorers it is (RFT_EXPLORER_RANK; None: the
    config's)."""

    explorer_child: bool = False
    explorer_rank: str | None = None

    @classmethod
    def from_env(cls) -> ProcessRole:
        """The role the environment gives this process: read once, where a command starts."""
        return cls(os.environ.get(ROLE_ENV) == "explorer", os.environ.get(EXPLORER_RANK_ENV))

    def apply_rank(self, cfg) -> None:
        """The explorer rank given, where given, as cfg's trainer.explorer_rank (mode both sets it for its
        children; an `explore` command of any dialect may too)."""
        value = self.explorer_rank
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


OWN_PROCESS = ProcessRole()
"""The role of a process no launcher started: the run's only (or main) one."""
