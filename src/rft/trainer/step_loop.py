"""What every RL step loop does the same way, written once: when it validates and checkpoints (`Cadence`), and how a
step ends (`StepLog`: the step's timings on its metrics line, the line to the tracker, the note of a run with nothing
to learn) and how the run ends (the final export). The loops (`rft.trainer.run.SyncRun`, `rft.trainer.modes`'
`TrainLoop` and `ExploreLoop`) keep what differs: what a step does, and where validation and checkpoints happen in
it (docs/architecture.md, "The step loops")."""

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
