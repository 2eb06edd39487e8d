"""`sync_method: checkpoint`: the trainer writes its weights of a version to a folder, the explorer loads the
version it needs (modes explore / train, which are separate commands, or the two processes of mode both). Files
are written under a temporary name and renamed, so a reader never sees half a file. The trainer keeps as many
versions as the explorer can still ask for (it runs up to sync_offset steps behind the trainer's newest weights),
so the explorer takes exactly the version its schedule names and the experiences do not depend on timing; after a
restart it takes the newest one that is new enough."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import torch

from rft import interrupts
from rft.fsutil import write_text_atomic

_FILE = re.compile(r"^v(\d+)\.safetensors$")
REMIND_EVERY = 60.0  # seconds between the lines a waiting explorer prints while no trainer publishes
log = logging.getLogger("rft")


def _transient_os_error(e: BaseException) -> bool:
    """A file-system error that a shared folder may give for a moment (permissions being fixed, a full disk being
    cleared, NFS's stale handles and I/O errors); not a path that does not exist."""
    import errno

    return isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EIO, errno.ESTALE,
                                                  errno.EROFS, errno.EAGAIN)


class CheckpointSync:
    def __init__(self, folder: str | Path, timeout: float, interval: int = 1, offset: int = 0,
                 announce: bool = False):
        """`announce`: say so when the explorer waits (mode explore, whose trainer is another command that may not
        be running): one line when its first wait starts (later ones, a step's training, are routine), and one every
        REMIND_EVERY seconds while any wait lasts."""
        self.folder = Path(folder)
        self.timeout = timeout
        self.announce = announce
        self.announced = False
        self.keep = offset // interval + 2  # versions between the explorer's need and the trainer's newest, + 1

    # trainer side
    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Write version `version`; a folder that refuses writes for a moment (a shared file system's hiccup) is
        retried for up to the sync timeout."""
        from safetensors.torch import save_file

        from rft.retry import retrying

        tensors = {k: v.detach().cpu().contiguous() for k, v in weights.items()}

        def write() -> None:
            self.folder.mkdir(parents=True, exist_ok=True)
            final = self.folder / f"v{version:08d}.safetensors"
            tmp = final.with_name(f".{final.name}.tmp")
            save_file(tensors, tmp)
            tmp.replace(final)
            write_text_atomic(self.folder / "latest", f"{version}\n")
            for old in self.versions()[:-self.keep]:
                (self.folder / f"v{old:08d}.safetensors").unlink(missing_ok=True)

        retrying(write, f"writing weights version {version} to {self.folder}", _transient_os_error, self.timeout)

    def versions(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.folder.iterdir() if (m := _FILE.match(p.name)))

    # explorer side
    def receive(self, need: int) -> tuple[dict[str, torch.Tensor], int]:
        """The weights of version `need` (or, when it is gone, the newest one after it) and their version; waits
        up to the sync timeout for the trainer to publish them."""
        from safetensors.torch import load_file

        start, delay, said = time.monotonic(), 0.05, None
        while True:
            versions = self.versions()
            if versions and versions[-1] >= need:
                version = need if need in versions else versions[-1]
                try:
                    return load_file(self.folder / f"v{version:08d}.safetensors"), version
                except FileNotFoundError:  # pruned between the listing and the load: look again
                    continue
                except OSError as e:  # the folder unreadable for a moment: waited out like a late version
                    if not _transient_os_error(e) or time.monotonic() - start > self.timeout:
                        raise
            if time.monotonic() - start > self.timeout:
                raise TimeoutError(
                    f"no trainer weights of version >= {need} appeared in {self.folder} within "
                    f"synchronizer.sync_timeout={self.timeout} s: is the trainer running (trainer.mode=train with "
                    "the same trainer.default_local_dir)?"
                )
            since = time.monotonic() - (start if said is None else said)
            if self.announce and ((said is None and not self.announced) or since >= REMIND_EVERY):
                waited = "" if said is None else f"still ({time.monotonic() - start:.0f} s) "
                log.warning("rft: %swaiting for the trainer's weights of version %d in %s (start trainer.mode=train, "
                            "Trinity-RFT's mode: train, with the same trainer.default_local_dir and buffer); gives "
                            "up after synchronizer.sync_timeout=%g s", waited, need, self.folder, self.timeout)
                said, self.announced = time.monotonic(), True
            # a Ctrl-C / SIGTERM stops the wait now (the explorer resumes after its last step written)
            interrupts.check_while_waiting(f"waiting for the trainer's weights of version {need} in {self.folder}")
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def close(self) -> None:
        pass
