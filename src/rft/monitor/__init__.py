"""Metrics out: a progress bar on the console and one JSON line per step in metrics.jsonl."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from rft import interrupts
from rft.fsutil import write_text_atomic

_BAR_KEYS = ("critic/score/mean", "actor/pg_loss", "response_length/mean", "timing_s/step")
_SHORT = {"critic/score/mean": "score", "actor/pg_loss": "pg_loss", "response_length/mean": "len",
          "timing_s/step": "s/step"}


class Timer:
    """Named phase timings (verl's marked_timer): `with timer("gen"): ...` adds to `timing_s/gen`. Entering a phase
    is where a Ctrl-C / SIGTERM received during the previous one stops the run (`rft.interrupts`)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        interrupts.check_between_phases(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] += time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"timing_s/{k}": v for k, v in self.times.items()}


class Tracker:
    """Writes `metrics.jsonl` (one line per step, flushed) and shows a tqdm bar on the console."""

    def __init__(self, path: str | Path, total_steps: int, start_step: int = 0, console: bool = True,
                 recovered: dict | None = None, log_every: int | None = None):
        """`recovered`: the resumed checkpoint's own step record, restored if the kill came between the
        checkpoint and its metrics line. `log_every`: steps between plain lines when the console is not a
        terminal (default: about 20 over the run)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(start_step, recovered)
        self._file = self.path.open("a", encoding="utf-8")
        self.bar = None
        self.plain_every = log_every or max(1, total_steps // 20)
        if console:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=start_step, desc="rft", unit="step", file=sys.stdout,
                            dynamic_ncols=True, disable=None)

    def _truncate_after(self, step: int, recovered: dict | None) -> None:
        """Keep only lines of steps <= `step`: a resumed run rewrites the steps it repeats."""
        if not self.path.exists() and not recovered:
            return
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
        if recovered and not any(json.loads(line).get("step") == step for line in kept):
            kept.append(json.dumps({"step": step, **{k: _plain(v) for k, v in sorted(recovered.items())}}))
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def log(self, step: int, metrics: dict[str, float], advance: bool = True) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self.bar is not None:
            shown = {_SHORT[k]: f"{metrics[k]:.3g}" for k in _BAR_KEYS if k in metrics}
            shown.update({k.split("/")[-3] if k.count("/") >= 3 else k: f"{v:.3f}"
                          for k, v in metrics.items() if k.startswith("val-core/")})
            self.bar.set_postfix(shown, refresh=False)
            if advance:
                self.bar.update(1)
            else:
                self.bar.refresh()
            if self.bar.disable and (step % self.plain_every == 0 or step == self.bar.total):
                # not a terminal: ~20 plain lines over the run instead of a bar
                print(f"step {step}: " + " ".join(f"{k}={v}" for k, v in shown.items()), flush=True)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text)

    def close(self) -> None:
        self._file.close()
        if self.bar is not None:
            self.bar.close()


class SilentTracker:
    """What the ranks other than 0 of a several-process run get instead of a `Tracker`: rank 0 alone logs."""

    def log(self, step: int, metrics: dict[str, float], advance: bool = True) -> None:
        pass

    def write(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def _plain(v):
    v = float(v)
    return v if math.isfinite(v) else str(v)
