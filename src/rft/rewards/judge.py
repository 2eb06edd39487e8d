"""An LLM judge: a reward read from a second model's verdict (`reward_fn_type: llm_judge`).

The judge is one of `workflow.auxiliary_models`, served by the explorer's engine (frozen, greedy unless its spec
says otherwise), or a model served behind an OpenAI-compatible endpoint (`base_url`: `rft serve`, vLLM's server;
verl's reward loop calls its generative reward model the same way, over HTTP). For each response it is asked, as one
chat turn, the template below (the rubric) with the question (the task's last user message), the reference answer
(the ground truth) and the response, and its reply is read as

* `yes_no`: the first of yes / no / correct / incorrect in the reply (case-insensitive): 1.0 or 0.0;
* `scale`: the first number in the reply divided by `max_score`, clipped to [0, 1].

A reply with no verdict scores 0.0; every row reports `judge_parsed` (1.0 when the reply had one), so a judge
that does not follow the format shows up in the metrics (reward_extra/judge_parsed/mean) instead of as a
silent zero. A batch's rows go to the judge in one engine call (a served judge: one request per row, all in flight
together, which the server batches).

A served judge's call is cut at `timeout` seconds of wall clock: the row scores 0 as the judge's part and reports
`judge_timeout` 1.0 (reward_extra/judge_timeout/mean), and the step goes on. With `rule_weight` the row's score is
`judge_weight x judge + rule_weight x rule`, the rule being the built-in scorer of the row's data_source
(rft.rewards.scorers); each part is reported on its own (judge_score, rule_score).
"""

from __future__ import annotations

import http.client
import json
import math
import re
import string
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
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
LOCAL = ("model",)
SERVED = ("base_url", "model_name", "max_tokens", "timeout")
SETTINGS = (*LOCAL, *SERVED, "template", "scoring", "max_score", "judge_weight", "rule_weight")
"""The judge's reward_kwargs. model: its index in workflow.auxiliary_models; or base_url: an OpenAI-compatible
endpoint serving it (model_name: the name it serves, default the first of its /models; max_tokens: a reply's
length, default 16; timeout: seconds of wall clock per call, null: none); judge_weight (1.0) and rule_weight (0.0):
the weights of the judge's score and of the built-in rule scorer's in the row's score."""
MAX_CONCURRENT = 64
"""Judge requests in flight at once (a step's rows beyond it wait for a free slot)."""

_VERDICT = re.compile(r"\b(yes|no|correct|incorrect)\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_verdict(reply: str, scoring: str = "yes_no", max_score: float = 10.0) -> float | None:
    """The score a judge's `reply` gives, or None when it has no verdict."""
    if scoring == "yes_no":
        m = _VERDICT.search(reply)
        return None if m is None else float(m.group(1).lower() in ("yes", "correct"))
    m = _NUMBER.search(reply)
    return None if m is None else min(max(float(m.group(0)) / max_score, 0.0), 1.0)


def check_settings(kwargs: dict, n_models: int, where: str = "custom_reward_function.reward_kwargs") -> int | None:
    """The judge's settings (reward_kwargs) checked before any model loads; returns the judge's auxiliary model
    index (None: a served judge)."""
    unknown = set(kwargs) - set(SETTINGS)
    if unknown:
        raise ConfigError(f"{where}: {sorted(unknown)} are not llm_judge settings; it takes {list(SETTINGS)}")
    if kwargs.get("base_url") is not None:
        return _check_served(kwargs, where)
    local_only = sorted(k for k in SERVED if kwargs.get(k) is not None)
    if local_only:
        raise ConfigError(f"{where}: {local_only} are settings of a served judge; set {where}.base_url to its "
                          "endpoint (rft serve, a vLLM server), or remove them (a local judge's max_tokens is its "
                          "workflow.auxiliary_models entry's; its generation, in the explorer's process, cannot be "
                          "cut at a timeout)")
    _check_common(kwargs, where)
    index = kwargs.get("model", 0)
    if n_models == 0:
        raise ConfigError(f"custom_reward_function.reward_fn_type={JUDGE!r} needs a judge model: list its folder in "
                          "workflow.auxiliary_models (Trinity: explorer.auxiliary_models)")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_models:
        raise ConfigError(f"{where}.model={index!r}: the judge is one of the {n_models} workflow.auxiliary_models, "
                          f"an index from 0 to {n_models - 1}")
    return index


def _check_served(kwargs: dict, where: str) -> None:
    """A served judge's settings: its endpoint's URL, no auxiliary-model index, a positive reply length and limit."""
    url = kwargs["base_url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.base_url={url!r}: the judge's OpenAI-compatible endpoint, e.g. "
                          "http://127.0.0.1:8000/v1 (rft serve prints it)")
    if "model" in kwargs:
        raise ConfigError(f"{where}: model (an auxiliary model's index) and base_url (a served judge) are both set; "
                          "choose one")
    _number(kwargs, "timeout", where, "seconds of wall clock per judge call", allow_none=True)
    tokens = kwargs.get("max_tokens", 16)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ConfigError(f"{where}.max_tokens={tokens!r} must be an integer >= 1 (tokens of a verdict)")
    if not isinstance(kwargs.get("model_name", ""), str):
        raise ConfigError(f"{where}.model_name={kwargs['model_name']!r} must be the name the endpoint serves")
    _check_common(kwargs, where)


def _number(kwargs: dict, key: str, where: str, what: str, allow_none: bool = False, minimum: float = 0.0,
            strict: bool = True) -> None:
    value = kwargs.get(key)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            (value <= minimum if strict else value < minimum):
        raise ConfigError(f"{where}.{key}={value!r}: it must be a number {'>' if strict else '>='} {minimum:g} "
                          f"({what})")


def _check_common(kwargs: dict, where: str) -> None:
    """The settings of either judge: the parsing, the template and the parts' weights."""
    for key in ("judge_weight", "rule_weight"):
        if key in kwargs:
            _number(kwargs, key, where, "the weight of its part of the score", strict=False)
    scoring = kwargs.get("scoring", "yes_no")
    if scoring not in SCORINGS:
        raise ConfigError(f"{where}.scoring={scoring!r}: choose one of {list(SCORINGS)}")
    max_score = kwargs.get("max_score", 10.0)
    if isinstance(max_score, bool) or not isinstance(max_score, (int, float)) or not max_score > 0:
        raise ConfigError(f"{where}.max_score={max_score!r}: it must be a number > 0")
    if kwargs.get("template") is not None:
        check_template(str(kwargs["template"]), f"{where}.template")


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


def _reset(error: BaseException) -> bool:
    """A connection the server dropped without a reply (reset, closed), which a repeat of the call may get."""
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    return isinstance(reason, (ConnectionResetError, http.client.RemoteDisconnected))


class ServedJudge:
    """A judge model behind an OpenAI-compatible endpoint (`base_url`), asked greedily (temperature 0) with the
    standard library's HTTP client: no client package, and the call's socket gives up at the limit by itself."""

    def __init__(self, base_url: str, model_name: str | None = None, max_tokens: int = 16,
                 timeout: float | None = None):
        self.base_url, self.max_tokens, self.timeout = base_url.rstrip("/"), int(max_tokens), timeout
        self.model_name = model_name or self._served_name()

    def _served_name(self) -> str:
        """The first model the endpoint lists (`GET /models`), the name a request must give."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=self.timeout or 60) as reply:
                return json.load(reply)["data"][0]["id"]
        except (OSError, ValueError, KeyError, IndexError) as e:
            from rft.errors import RewardError

            raise RewardError(f"custom_reward_function.reward_kwargs.base_url={self.base_url!r}: the judge's "
                              f"endpoint did not list its model ({e}); start it (rft serve MODEL) or set "
                              "reward_kwargs.model_name") from None

    def _reply(self, messages: list[dict]) -> str:
        """The judge's reply to `messages`; a connection the server reset before replying is asked again (a greedy
        call is safe to repeat) for up to the call's limit, or 30 s without one."""
        from rft.retry import retrying

        body = json.dumps({"model": self.model_name, "messages": messages, "max_tokens": self.max_tokens,
                           "temperature": 0.0}).encode()
        request = urllib.request.Request(f"{self.base_url}/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})

        def call() -> str:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return json.load(reply)["choices"][0]["message"]["content"] or ""

        return retrying(call, f"a judge call to {self.base_url}", _reset, self.timeout or 30.0, first_pause_s=0.05)

    def replies(self, conversations: list[list[dict]]) -> list[str | None]:
        """Each conversation's reply, all requests in flight together (at most `MAX_CONCURRENT`); None for a call
        cut at `timeout` seconds of wall clock, counted from when it was sent."""
        if not conversations:
            return []
        pool = ThreadPoolExecutor(min(len(conversations), MAX_CONCURRENT), thread_name_prefix="rft-judge")
        started: dict[int, float] = {}

        def call(i: int) -> str:
            started[i] = time.monotonic()
            return self._reply(conversations[i])

        futures = [pool.submit(call, i) for i in range(len(conversations))]
        out: list[str | None] = []
        try:
            for i, future in enumerate(futures):
                try:
                    if self.timeout is None:
                        out.append(future.result())
                        continue
                    while i not in started:  # waiting for a free slot does not count
                        time.sleep(0.005)
                    out.append(future.result(max(0.0, started[i] + self.timeout - time.monotonic())))
                except (FutureTimeout, TimeoutError):
                    out.append(None)
                except urllib.error.URLError as e:
                    if not isinstance(e.reason, TimeoutError):
                        raise self._failed(e) from None
                    out.append(None)
                except (OSError, ValueError, KeyError, IndexError) as e:
                    raise self._failed(e) from None
        finally:  # a cut call's thread ends at its socket's own timeout; nobody waits for it
            pool.shutdown(wait=False, cancel_futures=True)
        return out

    def _failed(self, error: Exception):
        from rft.errors import RewardError

        return RewardError(f"custom_reward_function.reward_kwargs.base_url={self.base_url!r}: the judge's call "
                           f"failed: {error}; check that the endpoint is up and serves {self.model_name!r}")


class LLMJudge:
    """Scores responses with a judge model (a local `ModelHandle` or a `ServedJudge`), plus the built-in rule scorer
    with `rule_weight`; see the module docstring."""

    def __init__(self, handle, template: str | None = None, scoring: str = "yes_no", max_score: float = 10.0,
                 judge_weight: float = 1.0, rule_weight: float = 0.0):
        """`handle`: the judge model; the settings as `check_settings` accepts them."""
        self.template = DEFAULT_TEMPLATE if template is None else str(template)
        self.handle, self.scoring, self.max_score = handle, scoring, float(max_score)
        self.judge_weight, self.rule_weight = float(judge_weight), float(rule_weight)

    @classmethod
    def from_settings(cls, settings: dict, auxiliary: list) -> LLMJudge:
        """The judge of custom_reward_function.reward_kwargs (checked by `check_settings`): served at base_url,
        else the auxiliary model of index `model`."""
        settings = dict(settings)
        served = {key: settings.pop(key) for key in SERVED if key in settings}
        index = settings.pop("model", 0)
        handle = ServedJudge(**served) if served.get("base_url") else auxiliary[index]
        return cls(handle, **settings)

    def prompt(self, question: str, response: str, reference: Any) -> str:
        return self.template.format(question=question, reference=reference, response=response)

    def _replies(self, conversations: list[list[dict]]) -> list[str | None]:
        if isinstance(self.handle, ServedJudge):
            return self.handle.replies(conversations)
        return [c[0].text for c in self.handle.chat_batch(conversations, n=1)] if conversations else []

    def score_batch(self, questions: list[str], responses: list[str], references: list[Any],
                    data_sources: list[str] | None = None) -> tuple[list[float], dict[str, list[float]]]:
        """(scores, per-row parts) of every row, the judge called once for the batch: judge_parsed, and with a
        served judge's limit judge_timeout, with rule_weight judge_score and rule_score (`data_sources`: the rows',
        which choose the rule scorer)."""
        conversations = [[{"role": "user", "content": self.prompt(q, r, ref)}]
                         for q, r, ref in zip(questions, responses, references)]
        replies = self._replies(conversations)
        verdicts = [None if reply is None else parse_verdict(reply, self.scoring, self.max_score)
                    for reply in replies]
        judged = [0.0 if v is None else v for v in verdicts]
        extra = {"judge_parsed": [float(v is not None) for v in verdicts]}
        if isinstance(self.handle, ServedJudge) and self.handle.timeout is not None:
            extra["judge_timeout"] = [float(reply is None) for reply in replies]
        if self.rule_weight == 0 and self.judge_weight == 1:
            return judged, extra
        from rft.rewards.scorers import default_compute_score
        from rft.rewards.scoring import score_responses

        rule = [0.0] * len(judged)
        if self.rule_weight != 0:
            rule, rule_extra = score_responses(default_compute_score, data_sources or [""] * len(judged),
                                               responses, references, [None] * len(judged))
            extra.update({f"rule/{k}": v for k, v in rule_extra.items()}, rule_score=rule)
        extra["judge_score"] = judged
        return [self.judge_weight * j + self.rule_weight * r for j, r in zip(judged, rule)], extra

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                 question: str = "") -> dict[str, float]:
        """verl's reward-function signature, for one row (`question`: the task's, bound by the caller)."""
        scores, extra = self.score_batch([question], [solution_str], [ground_truth], [data_source])
        return {"score": scores[0], **{k: v[0] for k, v in extra.items()}}


def question_of(messages: list[dict]) -> str:
    """The question a judge is shown: the last user message of the prompt (text parts joined)."""
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content", "")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content)
    return ""


__all__ = ["DEFAULT_TEMPLATE", "JUDGE", "LLMJudge", "ServedJudge", "check_settings", "check_template", "parse_verdict", "question_of"]
