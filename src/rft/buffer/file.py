"""`file`: experiences as JSON lines for people to read (Trinity-RFT: for debugging, in mode explore). Written,
never read back by a trainer (the config refuses it for the modes that train)."""

from __future__ import annotations

import json
from pathlib import Path

from rft.experience import Experience
from rft.fsutil import write_text_atomic, write_text_once

OWNER_FILE = "owner.json"
"""The run that owns the folder's experiences (`rft.buffer.sharing.OWNER_KEY`)."""


class FileBuffer:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.where = repr(str(self.folder))
        self.file = self.folder / "experiences.jsonl"
        self.state_file = self.folder / "explorer_state.json"

    def owner(self) -> dict | None:
        """The run that owns the folder, or None while none is recorded (a folder an earlier rft wrote too)."""
        path = self.folder / OWNER_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    def own(self, run: dict) -> dict:
        """Record `run` as the folder's owner unless one is recorded; returns the owner."""
        return json.loads(write_text_once(self.folder / OWNER_FILE, json.dumps(run) + "\n"))

    def write(self, experiences: list[Experience], explorer_state: dict | None = None) -> None:
        """Append the experiences (one JSON object a line: Experience.to_json), then the explorer's state; a
        restarted explorer drops the lines of a step whose state was not recorded (`truncate_after`)."""
        with self.file.open("a", encoding="utf-8") as f:
            f.writelines(e.to_json() + "\n" for e in experiences)
            f.flush()
        if explorer_state is not None:
            write_text_atomic(self.state_file, json.dumps(explorer_state))

    def explorer_state(self) -> dict | None:
        return json.loads(self.state_file.read_text()) if self.state_file.is_file() else None

    def truncate_after(self, explore_step: int) -> None:
        if not self.file.is_file():
            return
        lines = self.file.read_text(encoding="utf-8").splitlines()
        keep = [x for x in lines if x.strip() and json.loads(x)["info"].get("explore_step", 0) <= explore_step]
        write_text_atomic(self.file, "".join(x + "\n" for x in keep))

    def read(self, *args, **kwargs):
        raise NotImplementedError("the file experience buffer is written for people to read, not read by a trainer")

    def release_after(self, step: int) -> None:
        pass

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass
