"""What to say about a key (or input) nobody knows: the nearest known one ("did you mean") and the known ones at
that place, nearest first. The one place close matches are computed, for every unknown-key message: the verl-style
schemas (`rft.config.load`), the Trinity-RFT dialect, the components' inputs and the studio's live check.

Close means difflib's ratio of at least 0.6 (`difflib.get_close_matches`' default): `total_step` finds
`total_steps`, `lrr` finds `lr`, `foo` finds nothing under `data` and the message lists the keys alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence

CUTOFF = 0.6


def nearest_first(name: str, known: Sequence[str]) -> list[str]:
    """`known` with its close matches to `name` first (closest first), then the rest in their own order."""
    close = difflib.get_close_matches(name, list(known), n=len(known), cutoff=CUTOFF)
    return [*close, *(k for k in known if k not in close)]


def did_you_mean(name: str, known: Sequence[str], spell: Callable[[str], str] = lambda k: f"'{k}'") -> str:
    """"did you mean 'x'?" naming the closest of `known` to `name` (as `spell` writes it), or "" when none is
    close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=CUTOFF)
    return f"did you mean {spell(close[0])}?" if close else ""


def key_hint(key: str, known: Sequence[str], listed_as: str = "Allowed keys") -> str:
    """The rest of the one line about the unknown dotted `key`, whose last part is none of `known` (the names valid
    beside it): "did you mean 'trainer.total_training_steps'? Allowed keys under 'trainer': total_training_steps,
    total_epochs, ...", every known name listed, the nearest first."""
    parent, _, leaf = key.rpartition(".")
    place = f"under '{parent}'" if parent else "at the top level"
    hint = did_you_mean(leaf, known, lambda k: f"'{parent}.{k}'" if parent else f"'{k}'")
    listed = f"{listed_as} {place}: {', '.join(nearest_first(leaf, known))}" if known else f"no keys {place}"
    return f"{hint} {listed}" if hint else listed


def override_key(item: str) -> str:
    """The dotted key of a command-line override `key=value` (`+key=value` too)."""
    return item.split("=", 1)[0].lstrip("+")


def origin(key: str, overrides: Sequence[str] = (), path: str | None = None) -> str:
    """Where the dotted `key` came from: "command line (key=value)" when an override set it (or a section holding
    it, or a key below it), else the file `path` ("" when there is none)."""
    for item in overrides:
        given = override_key(item)
        if given == key or key.startswith(given + ".") or given.startswith(key + "."):
            return f"command line ({item})"
    return str(path) if path else ""
