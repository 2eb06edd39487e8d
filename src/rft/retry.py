"""Riding out a brief outage of what a run shares with other processes (a database restarting, a shared folder
unwritable for a moment): the operation is retried with a growing pause, a warning says so once, and only an outage
longer than its limit becomes the run's error."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("rft")


def retrying(fn: Callable[[], T], what: str, transient: Callable[[BaseException], bool], limit_s: float,
             first_pause_s: float = 0.2) -> T:
    """`fn()`, called again while it raises an error that `transient` accepts, for up to `limit_s` seconds (then the
    last error is raised). Safe only for an `fn` that either happens whole or not at all (a transaction, a file
    written to a temporary name and renamed)."""
    start, pause, warned = time.monotonic(), first_pause_s, False
    while True:
        try:
            result = fn()
        except Exception as e:
            if not transient(e) or time.monotonic() - start + pause > limit_s:
                raise
            if not warned:
                log.warning("rft: %s failed (%s); retrying for up to %.0f s", what, " ".join(str(e).split())[:200],
                            limit_s)
                warned = True
            time.sleep(pause)
            pause = min(pause * 2, 5.0)
            continue
        if warned:
            log.warning("rft: %s succeeded after %.1f s of retries", what, time.monotonic() - start)
        return result
