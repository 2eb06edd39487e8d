"""`sync_method: checkpoint`: the trainer writes its weights of a version to a folder, the explorer loads the
newest one that is new enough (modes explore / train, which are separate commands, or the two processes of mode
both). Files are written under a temporary name and renamed, so a reader never sees half a file; the two newest
versions are kept."""

from __future__ import annotations

import re
import time
from pathlib import Path

import torch

from rft.fsutil import write_text_atomic

_FILE = re.compile(r"^v(\d+)\.safetensors$")
KEEP = 2


class CheckpointSync:
    def __init__(self, folder: str | Path, timeout: float):
        self.folder = Path(folder)
        self.timeout = timeout

    # trainer side
    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        from safetensors.torch import save_file

        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"v{version:08d}.safetensors"
        tmp = final.with_name(f".{final.name}.tmp")
        save_file({k: v.detach().cpu().contiguous() for k, v in weights.items()}, tmp)
        tmp.replace(final)
        write_text_atomic(self.folder / "latest", f"{version}\n")
        for old in self.versions()[:-KEEP]:
            (self.folder / f"v{old:08d}.safetensors").unlink(missing_ok=True)

    def versions(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.folder.iterdir() if (m := _FILE.match(p.name)))

    # explorer side
    def receive(self, need: int) -> tuple[dict[str, torch.Tensor], int]:
        """The newest published weights of a version >= `need` and that version; waits up to the sync timeout."""
        from safetensors.torch import load_file

        start, delay = time.monotonic(), 0.05
        while True:
            newest = self.versions()
            if newest and newest[-1] >= need:
                try:
                    return load_file(self.folder / f"v{newest[-1]:08d}.safetensors"), newest[-1]
                except FileNotFoundError:  # pruned between the listing and the load: look again
                    continue
            if time.monotonic() - start > self.timeout:
                raise TimeoutError(
                    f"no trainer weights of version >= {need} appeared in {self.folder} within "
                    f"synchronizer.sync_timeout={self.timeout} s: is the trainer running (trainer.mode=train with "
                    "the same trainer.default_local_dir)?"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def close(self) -> None:
        pass
