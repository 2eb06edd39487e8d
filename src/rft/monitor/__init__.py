"""Metrics out: phase timings (`Timer`) and the monitors every loop logs to (`Tracker`).

A monitor is a small class behind one interface (`Monitor`: log scalars, log a table, close). `trainer.logger`
(verl's list; Trinity-RFT's monitor.monitor_type) chooses them: `console` (a tqdm bar, or a plain line every
`log_freq` steps when the console is not a terminal), `file` (`metrics.jsonl`, one JSON line per step; always
written: resume, plots and `rft studio` read it), `tensorboard`, `mlflow`, `wandb` (`rft.monitor.backends`, each
behind its optional extra). `Tracker` is the composite the loops hold: every metric goes to every monitor under the
same name, and the validation samples (`trainer.log_val_generations`) go to each monitor's table.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rft import interrupts
from rft.fsutil import write_text_atomic

# What a person watches, in the order shown: RL's score and policy loss (mix: its SFT loss on the expert rows),
# SFT's and DPO's loss (DPO: how often the chosen response wins), the response length, the validation results; then
# tokens/s, s/step and the time left (`console_fields`).
_WATCHED = {"critic/score/mean": "score", "train/loss": "loss", "rewards/accuracies": "acc",
            "actor/pg_loss": "pg_loss", "actor/sft_loss": "sft_loss", "response_length/mean": "len",
            "val/loss": "val_loss", "val/rewards/accuracies": "val_acc"}
TOKENS = "perf/total_num_tokens"
"""verl's name: the prompt + response tokens of a training step's batch (every process's); tokens/s on the console."""
GENERATIONS = "val/generations"
"""The table of validation samples: columns step, prompt, response, score (one row per sample)."""
GENERATIONS_FILE = "val_generations.jsonl"
logger = logging.getLogger("rft")


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


class Monitor(Protocol):
    """Where metrics go. `log`: one step's scalars (verl's names); `log_table`: rows of one table (dicts with the
    same keys) at a step; `close`: flush and finish."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def close(self) -> None: ...


class FileMonitor:
    """`metrics.jsonl` (one line per step, flushed); tables as `<name>.jsonl` beside it, one line per call (`{"step",
    "samples"}`; the validation samples: `val_generations.jsonl`)."""

    def __init__(self, path: str | Path, start_step: int = 0, recovered: dict | None = None):
        """`recovered`: the resumed checkpoint's own step record, restored if the kill came between the checkpoint
        and its metrics line."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(start_step, recovered)
        self._file = self.path.open("a", encoding="utf-8")

    def _truncate_after(self, step: int, recovered: dict | None) -> None:
        """Keep only lines of steps <= `step`: a resumed run rewrites the steps it repeats."""
        if not self.path.exists() and not recovered:
            return
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
        if recovered and not any(json.loads(line).get("step") == step for line in kept):
            kept.append(json.dumps({"step": step, **{k: _plain(v) for k, v in sorted(recovered.items())}}))
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        file = self.path.parent / (GENERATIONS_FILE if name == GENERATIONS else name.replace("/", "_") + ".jsonl")
        samples = [{k: v for k, v in row.items() if k != "step"} for row in rows]
        with file.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "samples": samples}) + "\n")

    def close(self) -> None:
        self._file.close()


class ConsoleMonitor:
    """A tqdm bar with the key metrics and its own estimate of the time left; when the console is not a terminal (a
    log file, a pipe, a test), a plain line every `log_every` steps (default about 20 over the run) with the same
    metrics and `left=` (`time_left`: the steps still to run and the validations still to come, every `test_freq`
    steps and after the last). Tables are printed one row a line."""

    def __init__(self, total_steps: int, start_step: int = 0, log_every: int | None = None, test_freq: int = 0):
        from tqdm import tqdm

        self.plain_every = log_every or max(1, total_steps // 20)
        self.bar = tqdm(total=total_steps, initial=start_step, desc="rft", unit="step", file=sys.stdout,
                        dynamic_ncols=True, disable=None)
        self.test_freq = test_freq
        self.step_seconds: list[float] = []  # each step's timing_s/step less its validation, logged by this process
        self.validation_seconds: float | None = None  # the last validation's time (None before one has run)

    def log(self, step: int, metrics: Mapping[str, float], advance: bool = True) -> None:
        testing = metrics.get("timing_s/testing")
        if testing is not None:
            self.validation_seconds = float(testing)
        if "timing_s/step" in metrics:
            self.step_seconds.append(float(metrics["timing_s/step"]) - float(testing or 0.0))
        shown = console_fields(metrics)
        self.bar.set_postfix(shown, refresh=False)
        if advance:
            self.bar.update(1)
        else:
            self.bar.refresh()
        if self.bar.disable and (step % self.plain_every == 0 or step == self.bar.total):
            # not a terminal: ~20 plain lines over the run instead of a bar
            left = self.time_left(step)
            shown.update({"left": format_duration(left)} if left is not None else {})
            print(f"step {step}/{self.bar.total}: " + " ".join(f"{k}={v}" for k, v in shown.items()), flush=True)

    def time_left(self, step: int) -> float | None:
        return time_left(step, self.bar.total, self.step_seconds, self.test_freq, self.validation_seconds)

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        for row in rows:
            self.write(f"[{name} step {step}] " + json.dumps({k: v for k, v in row.items() if k != "step"}))

    def write(self, text: str) -> None:
        self.bar.write(text)

    def close(self) -> None:
        self.bar.close()


def console_fields(metrics: Mapping[str, float]) -> dict[str, str]:
    """The console's fields of one step: what a person watches (`_WATCHED`; each validation data source's reward
    as `val_<source>`), tokens/s (prompt + response tokens of the step over its time; an explorer without a
    trainer: its generation's `gen_tok/s`) and s/step."""
    shown = {name: f"{metrics[k]:.3g}" for k, name in _WATCHED.items() if k in metrics}
    shown.update({f"val_{k.split('/')[-3]}": f"{v:.3f}" for k, v in metrics.items()
                  if k.startswith("val-core/") and k.count("/") >= 3})
    seconds = metrics.get("timing_s/step")
    if TOKENS in metrics and seconds:
        shown["tok/s"] = f"{metrics[TOKENS] / seconds:.0f}"
    elif "perf/gen_tokens_per_s" in metrics:
        shown["gen_tok/s"] = f"{metrics['perf/gen_tokens_per_s']:.0f}"
    if seconds is not None:
        shown["s/step"] = f"{seconds:.3g}"
    return shown


def validations_after(step: int, total_steps: int, test_freq: int) -> int:
    """How many validations the steps after `step` run: every `test_freq`-th step and the last (once where it is
    both); none with test_freq <= 0 (the validation before training comes before any step)."""
    if test_freq <= 0 or step >= total_steps:
        return 0
    return total_steps // test_freq - step // test_freq + (total_steps % test_freq != 0)


def time_left(step: int, total_steps: int, step_seconds: Sequence[float], test_freq: int = 0,
              validation_seconds: float | None = None) -> float | None:
    """Seconds the run still takes after `step`: the steps left at the mean of `step_seconds` (the steps' times
    without their validation), plus the validations still to come (`validations_after`) at `validation_seconds`
    each (the last one measured; none counted before one has run). None before any step."""
    if not step_seconds:
        return None
    left = sum(step_seconds) / len(step_seconds) * max(total_steps - step, 0)
    if validation_seconds is not None:
        left += validations_after(step, total_steps, test_freq) * validation_seconds
    return left


def format_duration(seconds: float) -> str:
    """`1h05m`, `4m09s`, `12s`: a time left as a person reads it."""
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Tracker:
    """The monitors of one loop: `metrics.jsonl` always, the console when asked, and the monitors of
    trainer.logger (`Tracker.for_run`). Every call goes to every monitor."""

    def __init__(self, path: str | Path, total_steps: int, start_step: int = 0, console: bool = True,
                 recovered: dict | None = None, log_every: int | None = None, monitors: Sequence[Monitor] = (),
                 test_freq: int = 0):
        self.file = FileMonitor(path, start_step, recovered)
        self.console = ConsoleMonitor(total_steps, start_step, log_every, test_freq) if console else None
        self.monitors: list[Monitor] = [self.file, *([self.console] if self.console else []), *monitors]

    @classmethod
    def for_run(cls, cfg: Any, folder: str | Path, total_steps: int, start_step: int = 0, *, role: str = "trainer",
                recovered: dict | None = None, console: bool = True) -> Tracker:
        """The tracker of a loop writing into `folder` (the run folder, or its explorer/ or bench/ sub-folder):
        the monitors of `cfg.trainer.logger`, with `role` telling the runs of one experiment apart."""
        from rft.monitor.backends import RunInfo, build_monitors

        t = cfg.trainer
        info = RunInfo(folder=Path(folder), project=t.project_name, name=t.experiment_name, role=role, config=cfg,
                       monitor_args=dict(t.monitor_args or {}), start_step=start_step)
        monitors = build_monitors(t.logger, info)
        return cls(Path(folder) / "metrics.jsonl", total_steps, start_step, console and "console" in t.logger,
                   recovered, getattr(t, "log_freq", None), monitors, getattr(t, "test_freq", 0))

    def log(self, step: int, metrics: dict[str, float], advance: bool = True) -> None:
        if logger.isEnabledFor(logging.DEBUG):  # every metric of every step, for the log file (trainer.log_level)
            logger.debug("rft: step %d: %s", step, json.dumps({k: _plain(v) for k, v in sorted(metrics.items())}))
        for monitor in self.monitors:
            if monitor is self.console:
                self.console.log(step, metrics, advance)
            else:
                monitor.log(step, metrics)

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            for monitor in self.monitors:
                monitor.log_table(name, step, rows)

    def log_generations(self, step: int, samples: Sequence[Mapping[str, Any]]) -> None:
        """Validation samples ({prompt, response, score}) as the `val/generations` table of every monitor."""
        self.log_table(GENERATIONS, step, [{"step": step, **sample} for sample in samples])

    def validated(self, seconds: float) -> None:
        """The time a validation outside the steps took (the one before training): the time left counts it for the
        validations to come until a step's own `timing_s/testing` replaces it."""
        if self.console is not None:
            self.console.validation_seconds = seconds

    def write(self, text: str) -> None:
        if self.console is not None:
            self.console.write(text)
        else:
            print(text)

    def close(self) -> None:
        for monitor in reversed(self.monitors):
            monitor.close()


class SilentTracker:
    """What the ranks other than 0 of a several-process run get instead of a `Tracker`: rank 0 alone logs."""

    def log(self, step: int, metrics: dict[str, float], advance: bool = True) -> None:
        pass

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        pass

    def log_generations(self, step: int, samples: Sequence[Mapping[str, Any]]) -> None:
        pass

    def validated(self, seconds: float) -> None:
        pass

    def write(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def _plain(v):
    v = float(v)
    return v if math.isfinite(v) else str(v)
