"""An LLM judge: a reward read from a second local model's verdict (`reward_fn_type: llm_judge`).

The judge is one of `workflow.auxiliary_models`, served by the explorer's engine (frozen, greedy unless its spec
says otherwise). For each response it is asked, as one chat turn, the template below with the question (the
task's last user message), the reference answer (the ground truth) and the response, and its reply is read as

* `yes_no`: the first of yes / no / correct / incorrect in the reply (case-insensitive): 1.0 or 0.0;
* `scale`: the first number in the reply divided by `max_score`, clipped to [0, 1].

A reply with no verdict scores 0.0; every row reports `judge_parsed` (1.0 when the reply had one), so a judge
that does not follow the format shows up in the metrics (reward_extra/judge_parsed/mean) instead of as a
silent zero. A batch's rows go to the judge in one engine call.
"""

from __future__ import annotations

import re
import string
from typing import Any

from rft.config.errors import ConfigError

DEFAULT_TEMPLATE = (
    "Grade an answer against the reference.\n"
    "Question: {question}\n"
    "Reference answer: {reference}\n"
    "Answer to grade: {response}\n"
    "Is the answer to grade correct? Reply with one word: yes or no."
)
JUDGE = "llm_judge"
"""The reward_fn_type of the judge."""
FIELDS = ("question", "reference", "response")
SCORINGS = ("yes_no", "scale")
SETTINGS = ("model", "template", "scoring", "max_score")
"""The judge's reward_kwargs (model: its index in workflow.auxiliary_models)."""

_VERDICT = re.compile(r"\b(yes|no|correct|incorrect)\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_verdict(reply: str, scoring: str = "yes_no", max_score: float = 10.0) -> float | None:
    """The score a judge's `reply` gives, or None when it has no verdict."""
    if scoring == "yes_no":
        m = _VERDICT.search(reply)
        return None if m is None else float(m.group(1).lower() in ("yes", "correct"))
    m = _NUMBER.search(reply)
    return None if m is None else min(max(float(m.group(0)) / max_score, 0.0), 1.0)


def check_settings(kwargs: dict, n_models: int, where: str = "custom_reward_function.reward_kwargs") -> int:
    """The judge's settings (reward_kwargs) checked before any model loads; returns the judge's model index."""
    unknown = set(kwargs) - set(SETTINGS)
    if unknown:
        raise ConfigError(f"{where}: {sorted(unknown)} are not llm_judge settings; it takes {list(SETTINGS)}")
    index = kwargs.get("model", 0)
    if n_models == 0:
        raise ConfigError(f"custom_reward_function.reward_fn_type={JUDGE!r} needs a judge model: list its folder in "
                          "workflow.auxiliary_models (Trinity: explorer.auxiliary_models)")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_models:
        raise ConfigError(f"{where}.model={index!r}: the judge is one of the {n_models} workflow.auxiliary_models, "
                          f"an index from 0 to {n_models - 1}")
    scoring = kwargs.get("scoring", "yes_no")
    if scoring not in SCORINGS:
        raise ConfigError(f"{where}.scoring={scoring!r}: choose one of {list(SCORINGS)}")
    max_score = kwargs.get("max_score", 10.0)
    if isinstance(max_score, bool) or not isinstance(max_score, (int, float)) or not max_score > 0:
        raise ConfigError(f"{where}.max_score={max_score!r}: it must be a number > 0")
    if kwargs.get("template") is not None:
        check_template(str(kwargs["template"]), f"{where}.template")
    return index


def check_template(template: str, where: str) -> None:
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        raise ConfigError(f"{where}: {e} in the judge template; write the fields as {{question}}, {{reference}}, "
                          "{response} and double other braces") from None
    unknown = names - set(FIELDS)
    if unknown:
        raise ConfigError(f"{where}: the judge template names {sorted(unknown)}; it may use {list(FIELDS)}")
    if "response" not in names:
        raise ConfigError(f"{where}: the judge template never shows the {{response}} it grades")


class LLMJudge:
    """Scores responses with a judge model (a `ModelHandle`); see the module docstring."""

    def __init__(self, handle, template: str | None = None, scoring: str = "yes_no", max_score: float = 10.0):
        """`handle`: the judge model (a ModelHandle); the settings as `check_settings` accepts them."""
        self.template = DEFAULT_TEMPLATE if template is None else str(template)
        self.handle, self.scoring, self.max_score = handle, scoring, float(max_score)

    def prompt(self, question: str, response: str, reference: Any) -> str:
        return self.template.format(question=question, reference=reference, response=response)

    def score_batch(self, questions: list[str], responses: list[str],
                    references: list[Any]) -> tuple[list[float], dict[str, list[float]]]:
        """(scores, {"judge_parsed": ...}) of every row, the judge called once for the batch."""
        conversations = [[{"role": "user", "content": self.prompt(q, r, ref)}]
                         for q, r, ref in zip(questions, responses, references)]
        replies = [c[0].text for c in self.handle.chat_batch(conversations, n=1)] if conversations else []
        verdicts = [parse_verdict(reply, self.scoring, self.max_score) for reply in replies]
        return ([0.0 if v is None else v for v in verdicts],
                {"judge_parsed": [float(v is not None) for v in verdicts]})

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                 question: str = "") -> dict[str, float]:
        """verl's reward-function signature, for one row (`question`: the task's, bound by the caller)."""
        scores, extra = self.score_batch([question], [solution_str], [ground_truth])
        return {"score": scores[0], "judge_parsed": extra["judge_parsed"][0]}


def question_of(messages: list[dict]) -> str:
    """The question a judge is shown: the last user message of the prompt (text parts joined)."""
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content", "")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content)
    return ""


__all__ = ["DEFAULT_TEMPLATE", "JUDGE", "LLMJudge", "check_settings", "check_template", "parse_verdict", "question_of"]
