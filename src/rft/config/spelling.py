"""A run's messages in the keys its config was written in.

A run of another project's config (a Trinity-RFT YAML: `rft.dialects.trinity`) is checked and run as rft's
canonical keys, but its user set the other project's: while `spelling_keys` holds, `said` writes each canonical key a
message names as that config sets it. It applies to every note logged on the "rft" logger, to the errors the run
raises (`reworded`), and to the lines a run prints instead of training (complete, nothing to do). The renaming is
the dialect's (it knows which of its keys set which of rft's); this module only finds the keys in the text. A
component run (`rft.components`) rewords its messages the same way with a rewording of its own (`spelling`: its
inputs for the keys they set, `Plan.in_input_terms`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator

Rename = Callable[[str], "str | None"]
Reword = Callable[[str], str]

# a dotted key, with its list items (workflow.auxiliary_models[0].model_path): not part of a path or a longer
# key, or a message already naming rft's key as such ("(rft's data.max_prompt_length)",
# `rft.dialects.trinity.in_trinity_terms`); a sentence's full stop may follow it
_KEY = re.compile(r"(?<![\w./\-\[])(?<!rft's )([a-z_]+(?:\.[a-z_0-9]+)+(?:\[\d+\](?:\.[a-z_0-9]+)*)*)"
                  r"(?![\w/\-\[]|\.\w)")

_reword: Reword | None = None


def said(text: str) -> str:
    """`text` in the terms of the config being run: each canonical key named as that config sets it (unchanged
    outside `spelling` / `spelling_keys`, and for a key the renaming leaves alone)."""
    reword = _reword
    return text if reword is None else reword(text)


def keys_renamed(rename: Rename) -> Reword:
    """The rewording that names each canonical key a text names as `rename(key)` (None: as it is)."""
    return lambda text: _KEY.sub(lambda m: rename(m.group(1)) or m.group(1), text)


def reworded(error: BaseException) -> BaseException:
    """`error` with its message `said`, for an error of one message (the run's RftError, RunComplete)."""
    if len(error.args) == 1 and isinstance(error.args[0], str):
        error.args = (said(error.args[0]),)
    return error


class _SaidNotes(logging.Filter):
    """The notes and warnings of the "rft" logger, `said`."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # arguments that do not fit the format: the handler reports it, as before
            return True
        spelt = said(message)
        if spelt != message:
            record.msg, record.args = spelt, ()
        return True


@contextlib.contextmanager
def spelling(reword: Reword) -> Iterator[None]:
    """While this holds, `said` is `reword`, and the "rft" logger's records are `said`."""
    global _reword
    before, _reword = _reword, reword
    notes, log = _SaidNotes(), logging.getLogger("rft")
    log.addFilter(notes)
    try:
        yield
    finally:
        log.removeFilter(notes)
        _reword = before


def spelling_keys(rename: Rename) -> contextlib.AbstractContextManager[None]:
    """While this holds, `said` names a canonical key `key` as `rename(key)` (None: as it is), and the "rft" logger's
    records are `said`."""
    return spelling(keys_renamed(rename))
