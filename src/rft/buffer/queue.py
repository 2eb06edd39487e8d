"""`queue` without a path: the in-process FIFO of a one-process run (explorer and trainer take turns)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from rft.buffer.base import BufferClosed, Read
from rft.experience import Experience


class MemoryQueue:
    """FIFO of experiences in this process's memory. Nothing survives the process: a one-process run keeps the
    explorer's position in its checkpoints instead and regenerates what a crash lost."""

    def __init__(self) -> None:
        self._items: deque[Experience] = deque()
        self._reads: dict[int, list[Experience]] = {}  # trainer step -> what it read (for release_after)
        self._state: dict | None = None
        self._finished = False
        self._cond = threading.Condition()

    def write(self, experiences: list[Experience], explorer_state: dict | None = None) -> None:
        with self._cond:
            self._items.extend(experiences)
            if explorer_state is not None:
                self._state = explorer_state
            self._cond.notify_all()

    def read(self, rows: int, step: int, timeout: float | None = None, min_version: int | None = None,
             watch: Callable[[], None] | None = None) -> Read:
        start = time.monotonic()
        out = Read()
        with self._cond:
            while True:
                while self._items and (len(out.experiences) < rows
                                       or self._items[0].group == out.experiences[-1].group):
                    e = self._items.popleft()
                    if min_version is not None and e.model_version < min_version:
                        out.dropped += 1
                        continue
                    out.experiences.append(e)
                if len(out.experiences) >= rows:
                    break
                left = None if timeout is None else timeout - (time.monotonic() - start)
                if self._finished or (left is not None and left <= 0):
                    out.partial = True
                    break
                self._cond.wait(left if watch is None else min(left or 1.0, 1.0))
                if watch is not None:
                    watch()
        out.waited_s = time.monotonic() - start
        if not out.experiences:
            if self._finished:
                raise BufferClosed("the explorer finished and every experience was read")
            raise TimeoutError(f"no experience arrived within {timeout} s")
        self._reads.setdefault(step, []).extend(out.experiences)
        return out

    def release_after(self, step: int) -> None:
        with self._cond:
            for s in sorted((s for s in self._reads if s > step), reverse=True):
                self._items.extendleft(reversed(self._reads.pop(s)))

    def truncate_after(self, explore_step: int) -> None:
        with self._cond:
            keep = lambda e: e.info.get("explore_step", 0) <= explore_step
            self._items = deque(e for e in self._items if keep(e))
            self._reads = {s: [e for e in r if keep(e)] for s, r in self._reads.items()}

    def explorer_state(self) -> dict | None:
        return self._state

    def finish(self) -> None:
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def close(self) -> None:
        pass
