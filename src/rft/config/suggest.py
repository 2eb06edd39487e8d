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
_STEPS = ("total_training_steps", "total_steps")
_EPOCHS = ("total_epochs",)
ALIASES: dict[str, tuple[str, ...]] = {
    "total_steps": _STEPS, "total_step": _STEPS, "max_steps": _STEPS, "num_steps": _STEPS, "train_steps": _STEPS,
    "num_train_steps": _STEPS, "num_training_steps": _STEPS, "training_steps": _STEPS, "steps": _STEPS,
    "epochs": _EPOCHS, "num_epochs": _EPOCHS, "num_train_epochs": _EPOCHS, "max_epochs": _EPOCHS,
    "learning_rate": ("lr",),
}
"""Other trainers' names (Trinity-RFT's, Hugging Face Trainer's and TRL's) for a key whose own name spells further
from them than a key that means something else: `total_steps` is closer to `total_epochs` than to
`total_training_steps` by difflib's ratio. The first of a name's targets present among the known keys is suggested
before any close spelling."""


def _close(name: str, known: Sequence[str], n: int) -> list[str]:
    """Up to `n` of `known` nearest `name`: its alias present there, then difflib's close matches, closest first."""
    alias = [k for k in ALIASES.get(name, ()) if k in known and k != name][:1]
    close = difflib.get_close_matches(name, list(known), n=n, cutoff=CUTOFF)
    return [*alias, *(k for k in close if k not in alias)][:n]


def nearest_first(name: str, known: Sequence[str]) -> list[str]:
    """`known` with its close matches to `name` first (closest first), then the rest in their own order."""
    close = _close(name, known, len(known))
    return [*close, *(k for k in known if k not in close)]


def did_you_mean(name: str, known: Sequence[str], spell: Callable[[str], str] = lambda k: f"'{k}'") -> str:
    """"did you mean 'x'?" naming the closest of `known` to `name` (as `spell` writes it; another trainer's name
    for it first, `ALIASES`), or "" when none is close."""
    close = _close(name, known, 1)
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
