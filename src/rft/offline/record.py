"""What an offline output was made from, recorded with it (`rft generate`'s parquet: its schema metadata; `rft
merge`'s folder: `rft_merge.json` inside it, written in its staging folder), as a run folder records its
config.yaml: a rerun with the same inputs finds the output complete and says so (nothing redone), one with other
inputs is refused naming what changed (nothing replaced without a word).

A record is a flat {label: value} of strings: the config keys that decide the output (their values), the input
paths (resolved) and their contents (`file_digest`: a file's bytes; `folder_digest`: a model or checkpoint folder's
file names, sizes and modification times, which a rewrite changes, read without reading gigabytes of weights).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CONTENTS = " contents"
"""The suffix of a label whose value is a digest: a change says the contents changed, not two digests."""


def file_digest(path: str | Path) -> str:
    """The sha256 of the file `path`'s bytes ('missing' where there is none)."""
    path = Path(path).expanduser()
    if not path.is_file():
        return "missing"
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_digest(path: str | Path, skip: tuple[str, ...] = ()) -> str:
    """A digest of every file under the folder `path` (hidden ones and the names in `skip` left out): its relative
    name, size and modification time ('missing' where there is no folder)."""
    path = Path(path).expanduser()
    if not path.is_dir():
        return "missing"
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or name in skip:
                continue
            st = os.stat(os.path.join(root, name))
            digest.update(f"{os.path.relpath(os.path.join(root, name), path)}\0{st.st_size}\0{st.st_mtime_ns}\n"
                          .encode())
    return digest.hexdigest()


def resolved(path: str | Path | None) -> str:
    """`path` as a record holds it: absolute, links resolved (another spelling of the same file is the same input)."""
    return str(Path(path).expanduser().resolve()) if path else ""


def changes(recorded: dict, now: dict, defaults: dict | None = None) -> list[str]:
    """What differs between the record `recorded` and the inputs `now`, one phrase each ('rollout.temperature was
    1.0, now 0.7'; 'the contents of data.path changed'), in `now`'s order. `defaults`: each key's default (as
    `now` spells values); a key the record lacks that is at its default now is no change: an older rft, which had
    not that key, made the output as the default does."""
    out = []
    for label, value in now.items():
        old = recorded.get(label)
        if old == value or (label not in recorded and defaults is not None and defaults.get(label) == value):
            continue
        if label.endswith(CONTENTS):
            base = label.removesuffix(CONTENTS)
            if recorded.get(base) == now.get(base):  # another path is said once, by its own label
                out.append(f"the contents of {base} changed")
        else:
            out.append(f"{label} was {old if old is not None else '(not recorded)'}, now {value}")
    return out
