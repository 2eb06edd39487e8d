"""A model behind an OpenAI-compatible API, evaluated in mode bench (`external_model`, Trinity-RFT's
model.external_model): no weights load and no tokenizer; each validation task's messages go to the API's chat
completions and the run's single-turn workflow scores the replies, as it scores a local model's.

`ApiModelHandle` is the part of a workflow's model handle (`rft.explorer.model.ModelHandle`) such a workflow calls:
`chat(messages, n, tools)`, each reply a `Completion` with its text and no tokens (an API returns none).
`evaluate_api` runs the validation tasks through the workflow, `runner_per_model` at a time, each attempt retried
`max_retry_times` times; a task that still fails scores 0, as a skipped task does in validation. Metrics:
`val-core/<data_source>/reward/mean@<n>`, as the validation of a local model, and `external/failed_tasks`."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rft.errors import RftError
from rft.explorer.model import Completion

log = logging.getLogger("rft")

EXTERNAL_WORKFLOWS = ("simple_workflow", "math_workflow", "math_boxed_workflow", "bots_math_boxed_workflow")
"""The workflows an API model can run: one chat turn of the task's messages, the replies scored by their text."""


def missing_api(section) -> str | None:
    """Why the API `section` (external_model) names cannot be called from here (its URL's variable unset, the
    openai client missing), in one line; None where it can, or with external_model off."""
    if not getattr(section, "enable", False):
        return None
    if not os.environ.get(section.base_url_env):
        return (f"external_model.base_url_env={section.base_url_env}: that environment variable is not set; export "
                "it to the API's base URL (https://.../v1)")
    try:
        import openai  # noqa: F401
    except ImportError:
        return "external_model calls the API with the openai client: pip install 'rft[agents]'"
    return None


def api_client(section, timeout: float):
    """An `openai.OpenAI` client on the API `section` (external_model) names through its environment variables."""
    problem = missing_api(section)
    if problem is not None:
        raise RftError(problem)
    import openai

    key = os.environ.get(section.api_key_env) or "EMPTY"
    return openai.OpenAI(base_url=os.environ[section.base_url_env], api_key=key, timeout=timeout, max_retries=0)


@dataclass
class ApiModelHandle:
    """What a single-turn workflow calls on its model, answered by the API's chat completions."""

    client: object
    model: str
    sampling: dict
    """The request's sampling fields: temperature, top_p, max_tokens (validation's)."""

    def chat(self, messages: list[dict], n: int = 1, tools: list[dict] | None = None, **sampling) -> list[Completion]:
        """`n` replies to `messages` (fewer in one answer, e.g. from an API without `n`: asked again for the rest)."""
        fields = {**self.sampling, **{k: v for k, v in sampling.items() if k in ("temperature", "top_p", "max_tokens")}}
        out: list[Completion] = []
        while len(out) < n:
            reply = self.client.chat.completions.create(model=self.model, messages=messages, n=n - len(out),
                                                        **({"tools": tools} if tools else {}), **fields)
            if not reply.choices:
                raise RftError(f"the API answered no choice for model {self.model!r}")
            out += [Completion(text=c.message.content or "", prompt_ids=[], token_ids=[], logprobs=[],
                               finish_reason="length" if c.finish_reason == "length" else "stop")
                    for c in reply.choices[:n - len(out)]]
        return out

    def chat_batch(self, conversations: list[list[dict]], n: int = 1, tools: list[dict] | None = None,
                   **sampling) -> list[list[Completion]]:
        return [self.chat(messages, n, tools, **sampling) for messages in conversations]


def evaluate_api(workflow_cls, tasks: list, handle: ApiModelHandle, n: int, concurrency: int,
                 retries: int) -> tuple[dict[str, float], list[dict]]:
    """(val-core/<data_source>/reward/mean@n and external/failed_tasks, samples) of `tasks` through
    `workflow_cls` on `handle` (`validation_metrics`, as a local model's validation through its workflow; responses
    whose reward failed under on_error=zero counted as there, `report_task_failures`)."""
    from rft.explorer.evaluate import report_task_failures, validation_metrics
    from rft.rewards.scoring import UNSCORED_VALIDATION

    def attempt(task):
        error = None
        for _ in range(retries + 1):
            try:
                return workflow_cls(task=task, model=handle).run(), None
            except Exception as e:  # an API error, a timeout, a reply the workflow cannot read: tried again
                error = e
        return [], error

    with ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="rft-api") as pool:
        attempts = list(pool.map(attempt, tasks))
    results = [experiences for experiences, _ in attempts]
    failed = [(task, error) for task, (_, error) in zip(tasks, attempts) if error is not None]
    if failed:
        task, error = failed[0]
        where, tries = task.prompt.origin or f"task {task.index}", "1 try" if not retries else f"{retries + 1} tries"
        if len(failed) == len(tasks):
            raise RftError(f"external model: every task failed after {tries} each; the first, {where}: {error}")
        log.warning("rft: external model: %d of %d tasks failed after %s each and score 0; the first, %s: %s",
                    len(failed), len(tasks), tries, where, error)
    report_task_failures(tasks, [e for experiences in results for e in experiences], "validation",
                         without=UNSCORED_VALIDATION)
    metrics, samples = validation_metrics(tasks, results, n, lambda task: task.prompt.messages)
    return {**metrics, "external/failed_tasks": float(len(failed))}, samples
