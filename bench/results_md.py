"""bench/RESULTS.md: each bench script appends its measurements as a section of its own."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def append_section(title: str, lines: list[str]) -> None:
    """Append `## <date time> — <title>` and `lines` (a table, usually) to bench/RESULTS.md."""
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    with RESULTS.open("a", encoding="utf-8") as f:
        f.write(f"\n## {stamp} — {title}\n\n" + "\n".join(lines) + "\n")
