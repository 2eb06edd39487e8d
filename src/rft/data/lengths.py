"""SFT rows and preference pairs over `max_length`, judged all at once.

A row over the limit is cut by `truncation` (right: the response's end; left: the prompt's start) or refused. The
rows are judged together, not one by one, so that one message says how many exceed, the longest, and a fix that
works for every row (the `max_length` that holds them all; what each truncation would cut and drop). A row that
its truncation cannot fit is dropped, and the run says how many (verl's SFT keeps such a row, truncated to no
response token at all, and says nothing): right truncation keeps no token that carries loss when the prompt alone
reaches the limit; left truncation needs one prompt token left, and never cuts a prompt with images.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from rft.console import counted
from rft.data.dataset import DataError

log = logging.getLogger("rft")

CUTS = {"right": "the responses' ends", "left": "the prompts' starts"}
LEFT_OVER = {"right": "no response token within the limit", "left": "a response that alone reaches the limit"}


@dataclass(frozen=True)
class Span:
    """One row's lengths in tokens: what `max_length` and `truncation` judge."""

    where: str  # the file and row, for messages
    prompt: int  # the prompt's tokens (what left truncation cuts)
    total: int  # prompt + response (a pair: prompt + the longer response)
    first_loss: int  # position of the first token carrying loss (right truncation must keep it)
    whole_prompt: bool = False  # a prompt never cut (its image tokens stay whole)

    def fits(self, max_length: int, truncation: str) -> bool:
        """Whether the row fits `max_length`, as it is or cut by `truncation`."""
        if self.total <= max_length:
            return True
        if truncation == "right":
            return self.first_loss < max_length
        if truncation == "left":
            return not self.whole_prompt and self.total - max_length < self.prompt
        return False


def judge_lengths(spans: Sequence[Span], max_length: int, truncation: str, *, source: str, unit: str = "rows",
                  key: str = "data") -> list[bool]:
    """Which rows to keep (True: as they are or cut by `truncation`; False: dropped, counted in a note).

    `truncation=error` with rows over `max_length` is a DataError naming how many, the longest, and what each fix
    would do; so is a truncation that would drop every row. `source`: the files, for messages; `unit`: "rows" or
    "pairs"; `key`: where max_length / truncation are set ("data", "data.expert")."""
    over = [s for s in spans if s.total > max_length]
    if not over:
        return [True] * len(spans)
    longest = max(over, key=lambda s: s.total)
    exceed = (f"{source}: {len(over)} of {counted(len(spans), unit[:-1], unit)} exceed{'s' if len(over) == 1 else ''} "
              f"{key}.max_length={max_length} tokens (the longest: {longest.total} tokens, {longest.where})")
    fit_all = f"{key}.max_length={longest.total}"
    if truncation == "error":
        options = " or ".join(f"{key}.truncation={t} ({_outcome(over, max_length, t, unit)})" for t in CUTS)
        raise DataError(f"{exceed}; set {fit_all} to keep every {unit[:-1]} whole, or {options}")
    keep = [s.fits(max_length, truncation) for s in spans]
    if not any(keep):
        raise DataError(f"{exceed}, and {key}.truncation={truncation} fits none of them (all have "
                        f"{_why_dropped(over, truncation)}); set {fit_all}")
    log.warning("rft: note: %s; %s.truncation=%s %s; %s would keep every %s whole", exceed, key, truncation,
                _outcome(over, max_length, truncation, unit, done=True), fit_all, unit[:-1])
    return keep


def _outcome(over: Sequence[Span], max_length: int, truncation: str, unit: str, done: bool = False) -> str:
    """What `truncation` does to the rows `over` the limit: how many it cuts, how many it drops and why."""
    dropped = [s for s in over if not s.fits(max_length, truncation)]
    parts = []
    if len(dropped) < len(over):
        parts.append(f"{'cut' if done else 'cuts'} {CUTS[truncation]} of {len(over) - len(dropped)}")
    if dropped:
        parts.append(f"{'dropped' if done else 'drops'} {counted(len(dropped), unit[:-1], unit)} with "
                     f"{_why_dropped(dropped, truncation)}")
    return ", ".join(parts)


def _why_dropped(dropped: Sequence[Span], truncation: str) -> str:
    why = LEFT_OVER[truncation]
    if truncation == "left" and any(s.whole_prompt for s in dropped):
        why += " or a prompt with images (never cut)"
    return why


