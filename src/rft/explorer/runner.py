"""Workflow runners: a step's tasks run through their workflow, `runner_per_model` at a time, none able to stall
or kill the run.

Each attempt runs in a thread of its own with a server client of its own (so its model calls batch with the other
attempts'). An attempt that outlives `max_timeout` is cut: its client is cancelled (its next model call raises
`Cancelled`), an asynchronous exception is raised in its thread (a pure-Python loop stops at its next bytecode; a
call blocked in C, such as a long sleep, is abandoned in a daemon thread), and the runner moves on. An attempt that
raises, or returns anything but a non-empty list of experiences with consistent fields, fails the same way. A
failed task is retried up to `max_retry_times` times, then skipped; the metrics count it
(`workflow/timeouts`, `workflow/errors`, `workflow/bad_results`, `workflow/retries`, `workflow/skipped_tasks`), and
the multi-turn conversations' turns that a full rendering would have changed and those that could not continue
(`workflow/render_mismatch`, `workflow/ended_conversations`).
An `RftError` is not a task's failure but the setup's (rft's API saying what to fix, such as a package to
install): the step starts no more attempts and the run stops with its line.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.explorer.model import PATIENCE, Cancelled, Completion, GenerationServer, ModelHandle
from rft.explorer.trinity_api import run_workflow
from rft.explorer.workflow import Task

log = logging.getLogger("rft")


def _raise_in(thread: threading.Thread, exc: type[BaseException]) -> None:
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc))


def as_experiences(out):
    """A workflow's result with each completion it returned as it came from `model.chat` / `generate`, its reward
    set (`Completion.reward`: Trinity-RFT's workflows set the reward of what its chat returns), made an experience;
    one whose reward is not set stays, for `check_experiences` to refuse."""
    if not isinstance(out, list):
        return out
    return [x.to_experience() if isinstance(x, Completion) and x.reward is not None else x for x in out]


def check_experiences(out) -> str | None:
    """Why `out` is not a workflow's usable result (None: it is)."""
    if not isinstance(out, list) or not out:
        return f"returned {type(out).__name__ if not isinstance(out, list) else 'an empty list'}, not a list of experiences"
    for e in out:
        if isinstance(e, Completion):
            return ("returned a completion whose reward is not set (set `.reward` on each completion it returns, or "
                    "return experiences: `completion.to_experience(reward)`)")
        if not isinstance(e, Experience):
            return f"returned a list holding {type(e).__name__}, not Experience"
        r = len(e.tokens) - e.prompt_length
        if r <= 0 or e.prompt_length <= 0 or len(e.action_mask) != r or len(e.logprobs) != r:
            return (f"returned an experience whose lengths disagree (tokens {len(e.tokens)}, prompt {e.prompt_length}, "
                    f"action mask {len(e.action_mask)}, log-probs {len(e.logprobs)})")
        if not torch.is_tensor(e.action_mask) or not (bool(e.action_mask.any()) or e.info.get("kept") is False):
            return ("returned an experience with no token of the model's (its action mask is all 0; one kept for "
                    "its reward alone says so: info['kept'] = False)")
        if not isinstance(e.reward, (int, float)) or e.reward != e.reward:
            return f"returned an experience whose reward is {e.reward!r}"
    names = {tuple(sorted(e.rewards)) for e in out}
    if len(names) > 1:
        return f"returned experiences with different reward values named {sorted(names)}"
    return None


@dataclass
class RunnerSettings:
    runner_per_model: int = 8
    max_timeout: float = 900.0
    max_retry_times: int = 2


_mismatch_described = threading.Event()


def conversation_metrics(experiences: list[Experience]) -> dict[str, float]:
    """`workflow/render_mismatch`: the turns whose tokens differ from the chat template's full rendering of their
    conversation (the sampled tokens were kept: `rft.explorer.turns`), the first described in the log once per
    process; `workflow/ended_conversations`: the conversations the template refused to continue (ended, scored)."""
    mismatches = sum(int(e.info.get("render_mismatch", 0)) for e in experiences)
    example = next((e.info["render_mismatch_example"] for e in experiences if "render_mismatch_example" in e.info),
                   None)
    if example is not None and not _mismatch_described.is_set():
        _mismatch_described.set()
        log.warning("rft: the chat template renders a conversation differently from the tokens its model sampled "
                    "(it is not append-only); the sampled tokens are trained as they are and each such turn is "
                    "counted in workflow/render_mismatch (said once): %s", example)
    return {"workflow/render_mismatch": float(mismatches),
            "workflow/ended_conversations": float(sum(int(e.info.get("ended_early", 0)) for e in experiences))}


class _Attempt(BaseException):
    """Raised into a cut attempt's thread."""


class WorkflowRunner:
    def __init__(self, workflow_cls: type, server: GenerationServer, make_handle: Callable[[], ModelHandle],
                 settings: RunnerSettings, auxiliary: list[ModelHandle] | None = None):
        """`make_handle()`: a fresh model handle for an attempt (the runner sets its server client)."""
        self.workflow_cls, self.server, self.make_handle = workflow_cls, server, make_handle
        self.s, self.auxiliary = settings, list(auxiliary or [])
        # a workflow that hangs holds the others' batch no longer than a quarter of their own time limit
        server.patience = min(PATIENCE, settings.max_timeout / 4)

    def run(self, tasks: list[Task]) -> tuple[list[list[Experience]], dict[str, float]]:
        """Each task's experiences ([] for a skipped task), in task order, and the runner's metrics."""
        results: list[list[Experience]] = [[] for _ in tasks]
        counts = {"timeouts": 0, "errors": 0, "bad_results": 0, "retries": 0, "skipped_tasks": 0}
        durations: list[float] = []
        lock = threading.Lock()
        queue = list(range(len(tasks)))
        fatal: list[RftError] = []

        def worker() -> None:
            try:
                work()
            finally:  # this thread opens no more clients
                self.server.expect(-1)

        def work() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    i = queue.pop(0)
                for attempt in range(self.s.max_retry_times + 1):
                    if attempt:
                        with lock:
                            counts["retries"] += 1
                    started = time.monotonic()
                    out, failure = self._attempt(tasks[i], attempt)
                    if failure is not None and failure[0] == "fatal":
                        with lock:
                            fatal.append(failure[1])
                            queue.clear()
                        return
                    if failure is None:
                        with lock:
                            results[i] = out
                            durations.append(time.monotonic() - started)
                        break
                    with lock:
                        counts[failure[0]] += 1
                    log.warning("rft: workflow %s on task %d (%s), attempt %d of %d: %s",
                                self.workflow_cls.__name__, tasks[i].index, tasks[i].prompt.origin, attempt + 1,
                                self.s.max_retry_times + 1, failure[1])
                else:
                    with lock:
                        counts["skipped_tasks"] += 1

        threads = [threading.Thread(target=worker, name=f"rft-runner-{k}", daemon=True)
                   for k in range(max(1, min(self.s.runner_per_model, len(tasks))))]
        self.server.expect(len(threads))  # each thread's next client: no batch runs before they have all started
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if fatal:
            raise fatal[0]
        metrics = {f"workflow/{k}": float(v) for k, v in counts.items()}
        metrics["workflow/tasks"] = float(len(tasks))
        metrics.update(conversation_metrics([e for out in results for e in out]))
        if durations:
            metrics["workflow/run_s/mean"] = sum(durations) / len(durations)
            metrics["workflow/run_s/max"] = max(durations)
        return results, metrics

    def _attempt(self, task: Task, attempt: int) -> tuple[list[Experience], tuple[str, object] | None]:
        """One attempt in a thread of its own: (experiences, None) or ([], (kind, why)); kind "fatal": the
        RftError the attempt raised."""
        try:
            handle = self.make_handle()
            handle.client = self.server.open((task.index, attempt), expected=True)
        except Exception as e:  # the runner's own setup: the attempt fails like the workflow's error
            return [], ("errors", f"could not set up the attempt: {type(e).__name__}: {e}")
        box: dict = {}

        def target() -> None:
            try:
                box["out"] = run_workflow(self.workflow_cls, task, handle, self.auxiliary)
            except _Attempt:
                pass
            except Cancelled:
                pass
            except RftError as e:  # rft's API refusing the setup: no attempt can succeed
                box["fatal"] = e
            except BaseException as e:  # the workflow's own error: reported, retried
                box["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            finally:  # the runner's thread opens its next client or says it will not (expect(-1))
                self.server.close(handle.client, expect_another=True)

        thread = threading.Thread(target=target, name=f"rft-workflow-{task.index}-{attempt}", daemon=True)
        thread.start()
        thread.join(self.s.max_timeout)
        if thread.is_alive():
            self.server.close(handle.client, cancelled=True, expect_another=True)
            _raise_in(thread, _Attempt)
            return [], ("timeouts", f"cut after workflow.max_timeout={self.s.max_timeout:g} s")
        if "fatal" in box:
            return [], ("fatal", box["fatal"])
        if "error" in box:
            return [], ("errors", f"raised {box['error']}")
        out = as_experiences(box.get("out"))
        why = check_experiences(out)
        if why is not None:
            return [], ("bad_results", why)
        return out, None
