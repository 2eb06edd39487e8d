"""The one step loop of every RL mode (rft.orchestration.step_loop): when it validates and checkpoints, how a step's line
is written, and `StepLoop` with a recording role (the order of a step's hooks, skipped steps, a stop). The modes
themselves (SyncRun, TrainLoop, ExploreLoop) run through it in test_golden.py, test_modes.py and
test_streaming_training.py; the process role read once from the environment."""

from __future__ import annotations

from types import SimpleNamespace

from rft.monitor import Timer
from rft.orchestration.roles import OWN_PROCESS, ProcessRole
from rft.orchestration.step_loop import Cadence, StepLog, StepLoop


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


class Recorder:
    """A tracker that keeps the lines."""

    def __init__(self):
        self.lines, self.written = [], []

    def log(self, step, metrics):
        self.lines.append((step, dict(metrics)))

    def write(self, text):
        self.written.append(text)

    def close(self):
        pass


class Role:
    def __init__(self, validates=True, checkpoints=True, skip=(), stop_at=None):
        self.validates, self.checkpoints = validates, checkpoints
        self.skipped, self.stop_at, self.calls = set(skip), stop_at, []

    def owns(self, step):
        return step not in self.skipped

    def skip(self, step):
        self.calls.append(("skip", step))

    def step(self, step, timer):
        if step == self.stop_at:
            self.calls.append(("stop", step))
            return None
        self.calls.append(("step", step))
        with timer("work"):
            pass
        return {"x": float(step)}

    def validate_step(self, step, metrics):
        self.calls.append(("validate", step))
        metrics["val"] = 1.0

    def save(self, step, metrics):
        self.calls.append(("save", step, sorted(metrics)))

    def end_step(self, step, metrics, timer):
        self.calls.append(("end", step))


def test_a_step_runs_its_hooks_in_order_at_the_cadences_steps():
    tracker, role = Recorder(), Role()
    done = StepLoop(Cadence(total_steps=4, test_freq=2, save_freq=3), StepLog(tracker, notes=False)).run(role, 1)
    assert done == 4
    assert role.calls == [
        ("step", 1), ("end", 1),
        ("step", 2), ("validate", 2), ("end", 2),
        # the checkpoint holds the step's metrics so far, its timings included
        ("step", 3), ("save", 3, ["timing_s/work", "x"]), ("end", 3),
        ("step", 4), ("validate", 4), ("save", 4, ["timing_s/testing", "timing_s/work", "val", "x"]), ("end", 4),
    ]
    assert [step for step, _ in tracker.lines] == [1, 2, 3, 4]
    assert tracker.lines[1][1]["val"] == 1.0 and "timing_s/step" in tracker.lines[1][1]
    assert "timing_s/testing" in tracker.lines[1][1] and "timing_s/save_checkpoint" in tracker.lines[2][1]


def test_a_role_that_neither_validates_nor_checkpoints_skips_and_stops():
    tracker = Recorder()
    role = Role(validates=False, checkpoints=False, skip={3}, stop_at=5)
    done = StepLoop(Cadence(total_steps=6, test_freq=1, save_freq=1), StepLog(tracker, notes=False)).run(role, 2)
    assert done == 4  # step 5 stopped the run: no line for it, none for 6
    assert role.calls == [("step", 2), ("end", 2), ("skip", 3), ("step", 4), ("end", 4), ("stop", 5)]
    assert [step for step, _ in tracker.lines] == [2, 4]


def test_a_resumed_loop_starts_after_its_last_step_and_a_done_one_runs_none():
    role = Role()
    assert StepLoop(Cadence(3, 0, 0), StepLog(Recorder(), notes=False)).run(role, 4) == 3
    assert role.calls == []


def test_the_process_role_is_read_once_from_the_environment(monkeypatch):
    monkeypatch.setenv("RFT_ROLE", "explorer")
    monkeypatch.setenv("RFT_EXPLORER_RANK", "1")
    role = ProcessRole.from_env()
    monkeypatch.delenv("RFT_ROLE")  # what the process was told at its start is what it keeps
    assert role == ProcessRole(explorer_child=True, explorer_rank="1") and not OWN_PROCESS.explorer_child

    class T:
        explorer_num, explorer_rank = 2, 0

    cfg = type("C", (), {"trainer": T()})()
    role.apply_rank(cfg)
    assert cfg.trainer.explorer_rank == 1
