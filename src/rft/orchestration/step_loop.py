"""The one step loop of every RL mode (`StepLoop`) and what it is made of: when it validates and checkpoints
(`Cadence`), how a step ends (`StepLog`: the step's timings on its metrics line, the line to the tracker, the note of
a run with nothing to learn) and how the run ends (the final export). A mode is a role object (`StepRole`) that
supplies the per-step work only: `rft.orchestration.run.SyncRun` (mode both in one process), and `rft.orchestration.modes`'
`TrainLoop` (a trainer reading the buffer) and `ExploreLoop` (an explorer writing it); docs/architecture.md, "The
step loops"."""

from __future__ import annotations

from dataclasses import dataclass, field

from rft.monitor import SilentTracker, Timer, Tracker
from rft.monitor.notes import NothingToLearn


@dataclass(frozen=True)
class Cadence:
    """Steps 1..total_steps: validation every trainer.test_freq steps and at the last, a checkpoint every
    trainer.save_freq steps and at the last; a frequency <= 0: never (the final model is still exported)."""

    total_steps: int
    test_freq: int
    save_freq: int

    @classmethod
    def of(cls, trainer_cfg, total_steps: int) -> Cadence:
        return cls(total_steps, trainer_cfg.test_freq, trainer_cfg.save_freq)

    def _every(self, freq: int, step: int) -> bool:
        return freq > 0 and (step == self.total_steps or step % freq == 0)

    def validates(self, step: int) -> bool:
        return self._every(self.test_freq, step)

    def saves(self, step: int) -> bool:
        return self._every(self.save_freq, step)


@dataclass
class StepLog:
    """The metrics lines of a loop's steps. `notes`: say when a trained step had nothing to learn (the trainers; an
    explorer trains nothing)."""

    tracker: Tracker | SilentTracker
    notes: bool = True
    last: dict[str, float] = field(default_factory=dict)
    _nothing: NothingToLearn = field(default_factory=NothingToLearn)

    def log(self, step: int, metrics: dict[str, float], timer: Timer) -> None:
        """Step `step`'s line: its `metrics` with `timer`'s figures (the step's, its phases')."""
        metrics.update(timer.metrics())
        self.tracker.log(step, metrics)
        if self.notes and (note := self._nothing.note(step, metrics)) is not None:
            self.tracker.write(note)
        self.last = metrics

    def finish(self, trainer) -> dict[str, float]:
        """The run's end: `trainer`'s final model exported, the tracker closed; the last step's metrics."""
        trainer.export_final(self.tracker.write)
        self.tracker.close()
        return self.last


class StepRole:
    """What a mode does in `StepLoop`'s steps; a mode subclasses it and overrides what it does. The defaults: it
    runs every step, neither validates nor checkpoints (`validates` / `checkpoints`: whether its steps do at all;
    the cadence says when) and has nothing to close a step with."""

    validates: bool = False
    checkpoints: bool = False

    def owns(self, step: int) -> bool:
        """Whether this role runs `step` (an explorer of several runs only its own; `skip` passes the others)."""
        return True

    def skip(self, step: int) -> None:
        raise AssertionError(f"{type(self).__name__} runs every step")

    def step(self, step: int, timer: Timer) -> dict[str, float] | None:
        """The step's work and its metrics; None: the run stops before it (nothing left to read)."""
        raise NotImplementedError

    def validate_step(self, step: int, metrics: dict[str, float]) -> None:
        """Validation after the step (the cadence's steps), its figures added to `metrics`."""
        raise AssertionError(f"{type(self).__name__} does not validate")

    def save(self, step: int, metrics: dict[str, float]) -> None:
        """The step's checkpoint; `metrics` with the step's timings so far (kept for a kill before its line)."""
        raise AssertionError(f"{type(self).__name__} does not checkpoint")

    def end_step(self, step: int, metrics: dict[str, float], timer: Timer) -> None:
        """What closes the step before its metrics line (an explorer's buffer write)."""


@dataclass
class StepLoop:
    """Steps `first`..`cadence.total_steps` of a role: each timed, its work, then validation and the checkpoint as
    the cadence asks, then its line (`StepLog`). The same loop for every mode; the role supplies the work."""

    cadence: Cadence
    log: StepLog

    def run(self, role: StepRole, first: int) -> int:
        """Runs the steps from `first`; returns the last step run (first - 1 when the role stopped at once)."""
        done = first - 1
        for step in range(first, self.cadence.total_steps + 1):
            if not role.owns(step):
                role.skip(step)
                continue
            timer = Timer()
            with timer("step"):
                metrics = role.step(step, timer)
                if metrics is None:
                    return done
                if role.validates and self.cadence.validates(step):
                    with timer("testing"):
                        role.validate_step(step, metrics)
                if role.checkpoints and self.cadence.saves(step):
                    with timer("save_checkpoint"):
                        role.save(step, {**metrics, **timer.metrics()})
                role.end_step(step, metrics, timer)
            self.log.log(step, metrics, timer)
            done = step
        return done
