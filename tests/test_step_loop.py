"""What the step loops share (rft.trainer.step_loop): when they validate and checkpoint, how a step's line is
written."""

from __future__ import annotations

from types import SimpleNamespace

from rft.monitor import Timer
from rft.trainer.step_loop import Cadence, StepLog


def test_the_cadence_is_every_n_steps_and_the_last():
    c = Cadence(total_steps=7, test_freq=3, save_freq=2)
    assert [s for s in range(1, 8) if c.validates(s)] == [3, 6, 7]
    assert [s for s in range(1, 8) if c.saves(s)] == [2, 4, 6, 7]
    c = Cadence.of(SimpleNamespace(test_freq=1, save_freq=10), 3)
    assert [s for s in range(1, 4) if c.validates(s)] == [1, 2, 3]
    assert [s for s in range(1, 4) if c.saves(s)] == [3]


def test_a_frequency_of_zero_or_less_is_never_not_even_the_last_step():
    for freq in (0, -1):
        c = Cadence(total_steps=4, test_freq=freq, save_freq=freq)
        assert not any(c.validates(s) or c.saves(s) for s in range(1, 5))


class _Tracker:
    def __init__(self):
        self.lines, self.written, self.closed = [], [], False

    def log(self, step, metrics):
        self.lines.append((step, dict(metrics)))

    def write(self, text):
        self.written.append(text)

    def close(self):
        self.closed = True


def test_a_step_line_holds_the_timings_and_the_note_comes_once():
    tracker = _Tracker()
    steps = StepLog(tracker)
    zero = {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0}
    for step in (1, 2):
        timer = Timer()
        with timer("step"):
            pass
        steps.log(step, dict(zero), timer)
    assert [s for s, _ in tracker.lines] == [1, 2]
    assert all("timing_s/step" in m and m["critic/advantages/max"] == 0.0 for _, m in tracker.lines)
    assert len(tracker.written) == 1 and "step 1" in tracker.written[0]
    assert steps.last == tracker.lines[-1][1]
    exported = []
    assert steps.finish(SimpleNamespace(export_final=exported.append)) == steps.last
    assert exported == [tracker.write] and tracker.closed


def test_an_explorer_s_steps_carry_no_note():
    tracker = _Tracker()
    steps = StepLog(tracker, notes=False)
    steps.log(1, {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0}, Timer())
    assert tracker.written == [] and len(tracker.lines) == 1
