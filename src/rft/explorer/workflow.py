"""Workflows: how a task becomes experiences (Trinity-RFT's workflow API).

A workflow class is registered by name (`@register_workflow("name")`; built-ins below, user classes from a Python
file: `workflow.path`) and constructed per task attempt as `cls(task=..., model=..., auxiliary_models=[...])`;
`run()` returns the task's experiences (`model.chat` / `model.generate` completions, or `Conversation`s turned into
experiences, or `model.extract_experience_from_history()`), each with its reward. The runner (`runner.py`) sets
their group (one per task), model version and bookkeeping, and cuts, retries or skips a workflow that hangs,
raises or returns something that is not a list of experiences.

Built-ins:
* `simple_workflow`: one chat turn, `repeat_times` samples, the task's reward function on each (today's
  single-turn behaviour; the explorer runs it as one batched generation over the step's tasks).
* `math_workflow`: the same with a reasoning system prompt (think / answer tags) when the task has none, as
  DeepSeek-R1 and Trinity-RFT's math workflow prompt.
* `tool_call_workflow`: multi-turn tool use: the model's reply is parsed for tool calls (workflow args
  `tool_call_parser`: hermes | pythonic | mistral | llama3_json | deepseek_v3, by default the model family's);
  each call runs (built-in tools or `tools_path`, a time limit `tool_timeout`), its result goes back as the
  family expects it (a `tool` message with the call's id, or Gemma's user turn), until a reply without calls or
  `max_turns`. With verl's interactions (`Task.interactions`, `rft.explorer.interactions`) a reply without calls
  is answered by the row's interaction as the user, until it says the conversation ends. One experience per
  conversation, the loss on the model's tokens only: the next prompt is always the sampled tokens and the
  template's rendering of the new turns (`rft.explorer.turns`).
* `math_boxed_workflow`, `simple_mm_workflow`, `math_ruler_workflow`, `on_policy_distill_math_workflow`,
  `rubric_judge_workflow`, `toolcall_workflow` (Tool-N1 on ToolACE rows), `frozen_lake_workflow` (gymnasium's
  FrozenLake, `rft.explorer.frozen_lake`), `sciworld_workflow` (AllenAI's ScienceWorld, `rft.explorer.sciworld`),
  `alfworld_workflow`, `step_wise_alfworld_workflow`, `RAFT_alfworld_workflow` and `RAFT_reflect_alfworld_workflow`
  (ALFWorld's households, `rft.explorer.alfworld`):
  Trinity-RFT's workflows of those names (their classes below).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rft.data.dataset import Prompt
from rft.data.images import filled_image_parts
from rft.experience import Experience
from rft.explorer.agentscope import GSM8K_SYSTEM_PROMPT as GSM8K_AGENT_PROMPT
from rft.explorer.alfworld import MAX_ENV_STEPS as MAX_ALFWORLD_STEPS
from rft.explorer.alfworld import RAFT_MAX_ENV_STEPS
from rft.explorer.frozen_lake import SYSTEM_PROMPT as FROZEN_LAKE_PROMPT
from rft.explorer.frozen_lake import Lake, generate_map, observation_message, parse_action, require_gymnasium
from rft.explorer.model import Completion, Conversation, ModelHandle, WorkflowError
from rft.registry import Registry
from rft.rewards.judge import question_of
from rft.rewards.scoring import score_responses

WORKFLOWS: Registry[type] = Registry("workflow")


def register_workflow(name: str) -> Callable[[type], type]:
    """Class decorator registering a workflow under `name`. A user file imported again (a second run in the same
    process) registers its classes anew; a built-in name cannot be taken."""
    def wrap(cls: type) -> type:
        existing = WORKFLOWS._items.get(name)
        if existing is not None and existing.__module__.startswith("rft_workflow_") \
                and cls.__module__.startswith("rft_workflow_"):
            del WORKFLOWS._items[name]
        return WORKFLOWS.register(name)(cls)
    return wrap


@dataclass
class Task:
    """One task as a workflow gets it."""

    prompt: Prompt
    """The prompt: its chat `messages` (system prompt included), `tools`, `ground_truth` (the reference:
    reward_model.ground_truth or data.response_key), `data_source`, `extra_info`, and the raw `row`."""
    index: int = 0
    """The task's place in its step (its group)."""
    repeat_times: int = 1
    """Responses wanted (actor_rollout_ref.rollout.n; validation: val_kwargs.n)."""
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn: Callable[..., Any] | None = None
    """verl's signature: (data_source, solution_str, ground_truth, extra_info) -> float | dict with score."""
    is_eval: bool = False
    interactions: dict[str, Any] = field(default_factory=dict)
    """verl's interactions by name (workflow.interaction_config_path), which tool_call_workflow asks for the user's
    turn after each reply without tool calls; a row names its own in extra_info.interaction_kwargs."""
    reward_failures: list[str] = field(default_factory=list)
    """What `score` scored 0 (custom_reward_function.on_error=zero): each failed response's message, which the
    explorer reads to stop a step whose every response failed."""

    @property
    def messages(self) -> list[dict]:
        """The prompt's messages; a row's images in their image parts ({"type": "image", "image": <bytes>}), which
        the model handle of a vision-language model reads."""
        return filled_image_parts(self.prompt.messages, self.prompt.images)

    @property
    def raw_task(self) -> dict:
        return self.prompt.row

    @property
    def truth(self) -> Any:
        return self.prompt.ground_truth

    def score(self, response: str, extra_info: dict | None = None) -> tuple[float, dict[str, float]]:
        """(the reward of `response`, its named parts) from the task's reward function (time limit, checks and
        failure policy as for any reward function); `extra_info`: entries added to the row's for this response
        (verl's turn_scores of an interaction)."""
        if self.reward_fn is None:
            raise WorkflowError("this task has no reward function")
        info = {**(self.prompt.extra_info or {}), **extra_info} if extra_info else self.prompt.extra_info
        scores, extras = score_responses(self.reward_fn, [self.prompt.data_source], [response],
                                         [self.prompt.ground_truth], [info], self.reward_failures)
        return scores[0], {k: v[0] for k, v in extras.items()}


class Workflow:
    """Subclass, implement `run`, register with `@register_workflow("name")`."""

    ARGS: frozenset[str] | None = None
    """The workflow args (`workflow.args`) it reads; a config naming others is refused. None: any (a user
    workflow reads what it likes)."""

    def __init__(self, *, task: Task, model: ModelHandle, auxiliary_models: list[ModelHandle] | None = None):
        self.task, self.model, self.auxiliary_models = task, model, list(auxiliary_models or [])
        self.args = dict(task.workflow_args)

    def run(self) -> list[Experience]:
        """The task's experiences. A workflow written as Trinity-RFT's async ones (`is_async = True`, `async def
        run_async`) is run to completion here, in its attempt's thread, on an event loop of its own."""
        if type(self).run_async is not Workflow.run_async:
            import asyncio

            return asyncio.run(self.run_async())
        raise NotImplementedError(f"{type(self).__name__} defines neither run() nor run_async()")

    async def run_async(self) -> list[Experience]:
        raise NotImplementedError


@register_workflow("simple_workflow")
class SimpleWorkflow(Workflow):
    ARGS = frozenset()

    def run(self) -> list[Experience]:
        completions = self.model.chat(self.task.messages, n=self.task.repeat_times, tools=self.task.prompt.tools)
        return [c.to_experience(*self.task.score(c.text)) for c in completions]


R1_SYSTEM_PROMPT = (
    "You are a helpful assistant who solves the user's problem step by step. Think it through first, then answer: "
    "put your reasoning between <think> and </think> and your final answer between <answer> and </answer>, e.g. "
    "<think> reasoning </think> <answer> answer </answer>."
)


def with_system_prompt(task: Task, prompt: str, replace: bool = False) -> Task:
    """`task` with `prompt` as its system message: put first where the task has none, or in place of its own
    (`replace`)."""
    messages = task.prompt.messages
    if any(m["role"] == "system" for m in messages) and not replace:
        return task
    messages = [{"role": "system", "content": prompt}, *(m for m in messages if m["role"] != "system")]
    return dataclasses.replace(task, prompt=dataclasses.replace(task.prompt, messages=messages))


@register_workflow("math_workflow")
class MathWorkflow(SimpleWorkflow):
    """simple_workflow with a think / answer system prompt when the task brings none (DeepSeek-R1's format)."""

    def run(self) -> list[Experience]:
        self.task = with_system_prompt(self.task, R1_SYSTEM_PROMPT)
        return super().run()


BOXED_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
BOXED_THINK_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first thinks about the reasoning process in "
    "mind and then provides the user with the answer. You should present your reasoning process using the format: "
    "<think>\n ...your reasoning process here... </think>\n first. You should always include your final answer in "
    "\\boxed{} as closed-form results."
)
"""Trinity-RFT's system prompts of math_boxed_workflow (BOXED_THINK_PROMPT with with_think, and always for
simple_mm_workflow), word for word: the model sees the same text."""


@register_workflow("math_boxed_workflow")
class MathBoxedWorkflow(SimpleWorkflow):
    """Trinity-RFT's math_boxed_workflow: one turn answered in \\boxed{}, with Trinity's system prompt when the task
    has none (`BOXED_PROMPT`, or `BOXED_THINK_PROMPT` with with_think). The reward is the run's reward function
    (Trinity's default, math_boxed_reward, which the Trinity dialect sets where the taskset names none) plus, with
    with_think, math_boxed_reward's format part: -format_score_coef (0.1) for a reply without one
    <think>...</think> (`think_format_penalty`), logged as format_score (with_think with another reward function
    is refused: Trinity passes it to math_boxed_reward only). use_base: a base model's prompt, Trinity's plain "System:...\\nUser:\\n...\\nAssistant:\\n" text
    instead of the chat template."""

    ARGS = frozenset({"with_think", "format_score_coef", "use_base"})

    def run(self) -> list[Experience]:
        with_think = bool(self.args.get("with_think", False))
        self.task = with_system_prompt(self.task, BOXED_THINK_PROMPT if with_think else BOXED_PROMPT)
        if self.args.get("use_base", False):
            completions = self.model.generate([base_model_prompt(self.task.prompt.messages)],
                                              n=self.task.repeat_times)[0]
        else:
            completions = self.model.chat(self.task.messages, n=self.task.repeat_times, tools=self.task.prompt.tools)
        return self.scored(completions)

    def scored(self, completions: list[Completion]) -> list[Experience]:
        """The experiences of `completions`: the run's reward plus, with with_think, the think format part."""
        from rft.rewards.formats import think_format_penalty

        with_think = bool(self.args.get("with_think", False))
        out = []
        for c in completions:
            reward, rewards = self.task.score(c.text)
            fmt = think_format_penalty(c.text, self.args.get("format_score_coef", 0.1)) if with_think else 0.0
            out.append(c.to_experience(reward + fmt, {**rewards, "format_score": fmt}))
        return out


@register_workflow("bots_math_boxed_workflow")
class BOTSMathBoxedWorkflow(MathBoxedWorkflow):
    """Trinity-RFT's BOTS example workflow (`examples/bots`, registered by its plugin as bots_math_boxed_workflow):
    math_boxed_workflow on rows whose prompt is already a conversation (GURU's `prompt` column), sent as it is,
    with no system prompt added, even with with_think. Scored by the run's reward function (the Trinity dialect's
    default for it: bots_math_boxed_reward) plus, with with_think, the think format part."""

    ARGS = frozenset({"with_think", "format_score_coef"})

    def run(self) -> list[Experience]:
        return self.scored(self.model.chat(self.task.messages, n=self.task.repeat_times, tools=self.task.prompt.tools))


BOTS_REF_EVAL_LOG = "./bots_ref_eval_log.jsonl"
"""Where bots_ref_eval_collect_math_boxed_workflow appends its lines unless BOTS_REF_EVAL_LOG_FILE names a file
(Trinity-RFT's default, relative to the working directory)."""


@register_workflow("bots_ref_eval_collect_math_boxed_workflow")
class BOTSRefEvalCollectWorkflow(BOTSMathBoxedWorkflow):
    """Trinity-RFT's BOTS reference evaluation (`examples/bots/ref_eval_collect.yaml`, an explore-only run): the
    BOTS workflow, and for each task one JSON line {"model_version", "rewards", "question", "truth"} appended to
    $BOTS_REF_EVAL_LOG_FILE (`BOTS_REF_EVAL_LOG`), under an exclusive lock as Trinity writes it; BOTS turns the
    lines into each task's pass rate, the offline difficulty its selector reads (data.selector.feature_keys)."""

    def run(self) -> list[Experience]:
        import fcntl
        import json
        import os

        experiences = super().run()
        line = json.dumps({"model_version": self.model.server.engine.version,
                           "rewards": [e.reward for e in experiences], "question": self.task.prompt.messages,
                           "truth": self.task.prompt.ground_truth}) + "\n"
        path = os.environ.get("BOTS_REF_EVAL_LOG_FILE", BOTS_REF_EVAL_LOG)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line.encode())  # the whole line in one write, under the lock
        finally:
            os.close(fd)  # the lock goes with it
        return experiences


RULER_MATH_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e.,\n"
    "<think> reasoning process here </think>\n<answer> answer here </answer>.\n"
)
"""Trinity-RFT's math_ruler_workflow system prompt (its MathWorkflow's), word for word."""


@register_workflow("math_ruler_workflow")
class MathRULERWorkflow(SimpleWorkflow):
    """Trinity-RFT's math_ruler_workflow (RULER, after OpenPipe ART's): the task's responses, under `RULER_MATH_PROMPT`
    when the task has no system prompt, are shown together to the judge, the first auxiliary model
    (workflow.auxiliary_models[0]), which gives each a score in [0, 1]; that score is the reward. The run's reward
    function (the Trinity dialect's default: math_reward) gives the gold reward, logged as gold_reward (and its
    parts), not trained on; judge_success is 0 where the judge's reply has no list of one number per response (every
    score is then 0, as Trinity's; a list of another length, which Trinity's would index past or leave unread, is a
    failure too)."""

    def run(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise WorkflowError("math_ruler_workflow needs a judge: workflow.auxiliary_models[0]")
        self.task = with_system_prompt(self.task, RULER_MATH_PROMPT)
        completions = self.model.chat(self.task.messages, n=self.task.repeat_times, tools=self.task.prompt.tools)
        gold = [self.task.score(c.text) for c in completions]
        question = question_of(self.task.prompt.messages)  # what the judge is shown
        reply = self.auxiliary_models[0].chat(ruler_messages(question, [c.text for c in completions]), n=1)[0].text
        scores = ruler_scores(reply, len(completions))
        return [c.to_experience(scores[i] if scores else 0.0,
                                {**parts, "gold_reward": reward, "judge_success": float(scores is not None)})
                for i, (c, (reward, parts)) in enumerate(zip(completions, gold))]


TRAINABLE_RULER_GOLD_SHARE = 0.2
"""math_trainable_ruler_workflow: the share of tasks whose ground truth the run may use (Trinity-RFT's
PROBABILITY_GROUND_TRUTH_AVAILABLE)."""


@register_workflow("math_trainable_ruler_workflow")
class MathTrainableRULERWorkflow(SimpleWorkflow):
    """Trinity-RFT's math_trainable_ruler_workflow: RULER with the policy itself as the judge, trained as a judge
    too. The task's responses (under `RULER_MATH_PROMPT` where the task has no system prompt) are scored by the run's
    reward function (the Trinity dialect's default: math_reward), the gold reward. Then, for a share
    `TRAINABLE_RULER_GOLD_SHARE` of the tasks (Trinity draws it with numpy's global generator; rft from the task's
    messages and its responses, so a resumed run draws the same), the ground truth counts as available: each response
    is rewarded with its gold reward, and the policy judges the group `repeat_times` times in the trainable RULER
    prompt, each judgement an experience of a group of its own (Trinity's task id "-ruler"), rewarded
    1 - mean |score - (gold + 0.1) / 1.2| where it parses (one number in [0, 1] per response), else 0. For the other
    tasks the policy judges once and each response is rewarded with its score (0 where the judgement does not parse),
    the judgement not trained. Logged: the gold reward and its parts and judge_success on the responses,
    reward_for_judger and judge_success on the judgements (each mean over the rows that carry it). Validation scores
    the responses with the gold reward alone (no judging)."""

    def run(self) -> list[Experience]:
        import json
        import random
        import zlib

        self.task = with_system_prompt(self.task, RULER_MATH_PROMPT)
        completions = self.model.chat(self.task.messages, n=self.task.repeat_times, tools=self.task.prompt.tools)
        gold = [self.task.score(c.text) for c in completions]
        texts = [c.text for c in completions]
        if self.task.is_eval:
            return [c.to_experience(reward, {**parts, "gold_reward": reward})
                    for c, (reward, parts) in zip(completions, gold)]
        draw = zlib.crc32(json.dumps([self.task.prompt.messages, texts], sort_keys=True, default=str).encode())
        with_truth = random.Random(draw).random() < TRAINABLE_RULER_GOLD_SHARE
        question = question_of(self.task.prompt.messages)  # what the judge is shown
        judgements = self.model.chat(ruler_messages(question, texts, trainable=True),
                                     n=self.task.repeat_times if with_truth else 1)
        parsed = [ruler_scores(j.text, len(texts)) for j in judgements]
        valid = [scores for scores in parsed if scores is not None]
        success = len(valid) / len(judgements) if judgements else 0.0
        mean = [sum(v[i] for v in valid) / len(valid) if valid else 0.0 for i in range(len(texts))]
        responses = [c.to_experience(reward if with_truth else mean[i],
                                     {**parts, "gold_reward": reward, "judge_success": success})
                     for i, (c, (reward, parts)) in enumerate(zip(completions, gold))]
        if not with_truth:
            return responses
        scaled = [(reward + 0.1) / 1.2 for reward, _ in gold]  # [-0.1, 1.1] onto [0, 1]
        judged = []
        for j, scores in zip(judgements, parsed):
            reward = 1.0 - sum(abs(a - b) for a, b in zip(scores, scaled)) / len(scaled) if scores else 0.0
            e = j.to_experience(reward, {"reward_for_judger": reward, "judge_success": success})
            e.group = "ruler"  # a group of its own beside the task's responses
            judged.append(e)
        return responses + judged


def ruler_messages(question: str, responses: list[str], trainable: bool = False) -> list[dict]:
    """Trinity-RFT's RULER judge prompt for `question` and its candidate `responses`, word for word: math_ruler's
    (its last line names solution n + 1, as Trinity's does), or with `trainable` math_trainable_ruler's (single
    line breaks between its parts, the last solution numbered n)."""
    n = len(responses)
    system = (f"You are a fair judge. The user will provide a question and {n} candidate solutions to it. Your task is "
              "to compare the solutions, see how well they resolve the question, and assign a score within the range "
              "[0, 1] for each solution.")
    question_prompt = (f"Question: {question}\n\nSolution format requirement: first thinks about the reasoning process "
                       "in the mind and then provides the final answer. The reasoning process and answer are enclosed "
                       "within <think> </think> and <answer> </answer> tags, respectively, i.e.,\n<think> reasoning "
                       "process here </think>\n<answer> answer here </answer>.")
    solutions = "\n\n".join(f"Candidate solution {i + 1}: {r}" for i, r in enumerate(responses))
    if trainable:
        user = (f"\nBelow is a question and several candidate solutions.\n{question_prompt}\n{solutions}\n"
                "Please assign a score within the range [0, 1] for each of them, reflecting how well they solve the "
                "question.\nYou may compare them against each other and think step by step before returning your "
                "final scores, but keep your reasoning process brief and concise when possible.\nConclude your "
                "response with a list of scores, in the following format: [score for solution 1, score for solution "
                f"2, ..., score for solution {n}]\n")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    user = (f"\nBelow is a question and several candidate solutions.\n\n{question_prompt}\n\n{solutions}\n\n"
            "Please assign a score within the range [0, 1] for each of them, reflecting how well they solve the "
            "question.\nYou may compare them against each other and think step by step before returning your final "
            "scores, but keep your reasoning process brief and concise when possible.\n\nConclude your response with "
            "a list of scores, in the following format: [score for solution 1, score for solution 2, ..., score for "
            f"solution {n + 1}]\n")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def ruler_scores(reply: str, n: int) -> list[float] | None:
    """The judge's scores: the last [...] of `reply` read as a Python list, each clipped to [0, 1]; None where there
    is none, it does not parse, or it holds other than `n` numbers."""
    import ast

    start, end = reply.rfind("["), reply.rfind("]")
    if start == -1 or end == -1 or start > end:
        return None
    try:
        scores = ast.literal_eval(reply[start:end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(scores, (list, tuple)) or len(scores) != n or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores):
        return None
    return [max(0.0, min(1.0, float(s))) for s in scores]


RUBRIC_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer.\n    ")
"""Trinity-RFT's rubric_judge_workflow system prompt where the task has none, word for word (its trailing newline and
indent included)."""
RUBRIC_JUDGE_PROMPT = (
    "You are an expert evaluator. Given a user prompt, a generated response, and a list of quality rubrics, please "
    "rate the overall quality of the response on a scale of 1 to 10 based on how well it satisfies the rubrics.\n"
    "Consider all rubrics holistically when determining your score. A response that violates multiple rubrics should "
    "receive a lower score, while a response that satisfies all rubrics should receive a higher score.\n"
    "Start your response with a valid JSON object that starts with \"```json\" and ends with \"```\". The JSON object "
    "should contain\na single key \"rating\" and the value should be an integer between 1 and 10.\nExample response:\n"
    "```json\n{\n\"rating\": 7\n}```")
"""Trinity-RFT's rubric judge system prompt (after RaR-Implicit, arXiv:2507.17746), word for word."""


def rubric_judge_messages(question: str, response: str, rubric: list) -> list[dict]:
    """Trinity-RFT's rubric judge prompt for one response: the question, the response and the row's rubrics
    ("Rubric i (weight: w): description"), word for word."""
    rubrics = "\n".join(f"Rubric {i} (weight: {r['weight']}): {r['description']}" for i, r in enumerate(rubric)) \
        if rubric else "Rubrics are not provided."
    user = ("Given the following prompt, response, and rubrics, please rate the overall quality of the response on a "
            f"scale of 1 to 10 based\non how well it satisfies the rubrics.\n<prompt>\n{question}\n</prompt>\n<response>"
            f"\n{response}\n</response>\n<rubrics>\n{rubrics}\n</rubrics>\nYour JSON Evaluation:")
    return [{"role": "system", "content": RUBRIC_JUDGE_PROMPT}, {"role": "user", "content": user}]


def rubric_rating(reply: str) -> float | None:
    """The judge's rating (1-10) normalised to [0, 1], (rating - 1) / 9, from the reply's first ```json block (or
    first ``` block); None where there is none, it is no JSON, or the rating is not a number in [1, 10]."""
    import json

    start = reply.find("```json")
    if start == -1:
        start = reply.find("```")
    end = reply.find("```", start + 3)
    if start == -1 or end == -1:
        return None
    body = reply[start:end].strip()
    body = body.replace("```json", "", 1) if "```json" in body else body.replace("```", "", 1)
    try:
        rating = json.loads(body.strip()).get("rating")
    except (json.JSONDecodeError, AttributeError):
        return None
    if isinstance(rating, bool) or not isinstance(rating, (int, float)) or not 1 <= rating <= 10:
        return None
    return (rating - 1) / 9


@register_workflow("rubric_judge_workflow")
class RubricJudgeWorkflow(SimpleWorkflow):
    """Trinity-RFT's rubric_judge_workflow (rubrics as rewards, RaR, arXiv:2507.17746): one chat turn, under
    `RUBRIC_SYSTEM_PROMPT` where the task has no system prompt; each response is rated 1-10 by the judge, the first
    auxiliary model (workflow.auxiliary_models[0], greedy), against the row's `rubric` column (a list of {weight,
    description}) in Trinity's prompt (`rubric_judge_messages`); the reward is (rating - 1) / 9, 0 where the judge's
    reply holds no valid rating. judge_success (the group's share of valid ratings) is logged. No reward function is
    read: the judge is the reward."""

    ARGS = frozenset()

    def run(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise WorkflowError("rubric_judge_workflow needs a judge: workflow.auxiliary_models[0]")
        self.task = with_system_prompt(self.task, RUBRIC_SYSTEM_PROMPT)
        completions = self.model.chat(self.task.messages, n=self.task.repeat_times, tools=self.task.prompt.tools)
        question = question_of(self.task.prompt.messages)  # what the judge is shown
        rubric = list((self.task.raw_task or {}).get("rubric") or [])
        replies = self.auxiliary_models[0].chat_batch(
            [rubric_judge_messages(question, c.text, rubric) for c in completions], n=1, do_sample=False)
        ratings = [rubric_rating(r[0].text) for r in replies]
        success = sum(r is not None for r in ratings) / max(len(ratings), 1)
        return [c.to_experience(r if r is not None else 0.0, {"judge_success": success})
                for c, r in zip(completions, ratings)]


LEARN2ASK_PROMPT = """
# Task
You are a medical assistant. Your task is to understand the ongoing conversation and continue the medical inquiry in English.

## Guidelines
- Each response must contain exactly one clear and concise medical question with 2 to 3 answer choices.
- Do not repeat any previous question.
- Your response must be a single sentence.
- If enough information has been gathered to make a medication suggestion, output only: <stop />
"""
LEARN2ASK_PROMPT_RA = """
# Task
You are a medical assistant. Your task is to understand the ongoing conversation and continue the medical inquiry in English.

## Guidelines
- Each response must contain exactly one clear and concise medical question with 2 to 3 answer choices.
- Do not repeat any previous question.
- Your response must be a single sentence.
"""
LEARN2ASK_JUDGE_PROMPT = """
# Task
You are an evaluation assistant. The user will provide a dialogue history between a doctor and a patient. You must analyze the dialogue and evaluate the doctor's last message.

# Grading Policy
## Format Score
- 1.0: The doctor's last message contains exactly **one question**.
- 0.5: The doctor's last message contains **two questions**.
- 0.0: The doctor's last message contains **three or more questions**.

## Content Score
- 1.0: The question(s) **directly ask about** any item in the Reference Information.
- 0.5: The question(s) are **highly relevant** to, but not directly asking about, any item in the Reference Information.
- 0.0: The question(s) are **irrelevant** to all items in the Reference Information.

# Reference Information
{}

# Output Format
<think>Explain your reasoning for the format and content scores clearly and concisely.</think>
<format_score>Insert only the format score as a float (e.g., 1.0, 0.5, 0.0)</format_score>
<content_score>Insert only the content score as a float (e.g., 1.0, 0.5, 0.0)</content_score>

> ✅ Important:
> - Output **exactly** the three tags shown above.
> - Do **not** include any additional text, explanation, or formatting outside the tags.
> - Scores must be based **only** on the doctor's **last message** and the provided Reference Information.
> - Ensure clarity and precision in your evaluation reasoning within the `<think>` tag.
"""
"""Trinity-RFT's Learn2Ask prompts (its example plugin's prompt_learn2ask: the doctor's system prompt, the one of
train_mode Ra, and the judge's, a str.format template of the row's info_truth), word for word."""
LEARN2ASK_JUDGE_TRIES = 6  # Trinity's: a first call and up to 5 retries when the judge's scores do not parse


def learn2ask_scores(reply: str) -> dict[str, float] | None:
    """The judge's format_score and content_score, read as Trinity reads them (every `<tag>value</tag>` on one line;
    a missing score is 0.0); None where a value is no number (Trinity asks the judge again)."""
    import re

    tags = dict(re.findall(r"<(\w+)>(.*?)</\1>", reply))
    try:
        return {key: float(tags.get(key, 0.0)) for key in ("format_score", "content_score")}
    except ValueError:
        return None


def learn2ask_reward(action: str, truth: str, scores: dict[str, float] | None, train_mode: str, fusion: str,
                     response: str) -> float:
    """Trinity-RFT's Learn2Ask reward of a `response` whose decision is `action` ("stop": it holds `<stop />`,
    else "continue") against the row's decision_truth: R_s = 1 for the right decision; for a right "continue" the
    judge's content (R_a) and format (P) scores (`scores`; None: 0, 0), for a right "stop" R_a = 1 and P = 1 only
    for a reply that is exactly `<stop />`; a wrong decision scores 0 for all three. Ra+Rs: R_s (1 + 2 R_a) + P
    (fusion sum: R_s + R_a + P); Ra: 2 R_a + P; Rs: 3 R_s + P."""
    if action != truth:
        action_score = format_score = content_score = 0.0
    elif truth == "continue":
        action_score = 1.0
        format_score, content_score = (scores["format_score"], scores["content_score"]) if scores else (0.0, 0.0)
    else:
        action_score, content_score, format_score = 1.0, 1.0, 1.0 if response == "<stop />" else 0.0
    if train_mode == "Ra+Rs":
        return action_score * (1 + 2 * content_score) + format_score if fusion != "sum" else \
            action_score + content_score + format_score
    if train_mode == "Ra":
        return 2 * content_score + format_score
    return action_score * 3 + format_score


@register_workflow("learn2ask_workflow")
class Learn2AskWorkflow(SimpleWorkflow):
    """Trinity-RFT's Learn2Ask example (its plugin examples.learn_to_ask...Learn2AskWorkflow, registered there as
    learn2ask_workflow): the model, a doctor, continues the row's dialogue (its prompt, a message list) with one
    question, or `<stop />` once it knows enough; the first auxiliary model judges each right "continue" against the
    row's info_truth (`learn2ask_reward`). Arguments: train_mode (Ra+Rs, Ra, Rs) and fusion_mode (default, sum).
    The row's decision_truth (default "continue") and info_truth (default "None") come from its columns. No reward
    function is read: the judge and the decision are the reward."""

    ARGS = frozenset({"train_mode", "fusion_mode"})

    def run(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise WorkflowError("learn2ask_workflow needs a judge: workflow.auxiliary_models[0]")
        args, row = self.task.workflow_args or {}, self.task.raw_task or {}
        train_mode, fusion = args.get("train_mode", "Ra+Rs"), args.get("fusion_mode", "default")
        dialogue = [m for m in self.task.prompt.messages if m["role"] != "system"]
        system = LEARN2ASK_PROMPT_RA if train_mode == "Ra" else LEARN2ASK_PROMPT
        completions = self.model.chat([{"role": "system", "content": system}, *dialogue], n=self.task.repeat_times)
        truth, info = row.get("decision_truth", "continue"), row.get("info_truth", "None")
        actions = ["stop" if "<stop />" in c.text else "continue" for c in completions]
        judged = {i for i, a in enumerate(actions) if a == truth == "continue"}
        scores: dict[int, dict | None] = {i: None for i in judged}
        history = "".join(f"{'patient' if m['role'] == 'user' else 'doctor'}: {m['content']}\n"
                          for m in dialogue if m["role"] in ("user", "assistant"))
        for _ in range(LEARN2ASK_JUDGE_TRIES):
            ask = [i for i in sorted(judged) if scores[i] is None]
            if not ask:
                break
            replies = self.auxiliary_models[0].chat_batch(
                [[{"role": "system", "content": LEARN2ASK_JUDGE_PROMPT.format(info)},
                  {"role": "user", "content": f"{history}doctor: {completions[i].text}\n"}] for i in ask], n=1)
            for i, reply in zip(ask, replies):
                scores[i] = learn2ask_scores(reply[0].text)
        return [c.to_experience(learn2ask_reward(a, truth, scores.get(i), train_mode, fusion, c.text),
                                {"judge_success": float(scores.get(i) is not None)} if i in judged else {})
                for i, (c, a) in enumerate(zip(completions, actions))]


TOOL_N1_PROMPT = """# Tool

<tools>
{tools}
</tools>

In each action step, you MUST:
1. Think about the reasoning process in the mind and enclosed your reasoning within <think> </think> XML tags.
2. Then, provide a json object with function names and arguments within <tool_call></tool_call> XML tags. i.e., <tool_call>[{{"name": <function-name>, "arguments": <args-json-object>}}, {{"name": <function-name2>, "arguments": <args-json-object2>}}, ...]</tool_call>
3. Make sure both the reasoning and the tool call steps are included together in one single reply.
A complete reply example is: <think>To address the query, I need to send the email to Bob and then buy the banana through walmart. </think> <tool_call> [{{"name": "email", "arguments": {{"receiver": "Bob", "content": "I will bug banana through walmart"}}}}, {{"name": "walmart", "arguments": {{"input": "banana"}}}}]</tool_call>. Please make sure the type of the arguments is correct.
"""
"""Tool-N1's tool prompt (arXiv:2505.00024) as Trinity-RFT's toolcall_workflow appends it to the row's system prompt,
word for word (a str.format template: {tools} the row's tools, one JSON function schema a line)."""
TOOL_N1_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                 "observation": "tool", "tool": "tool", "function_call": "assistant"}


def toolcall_messages(row: dict) -> list[dict]:
    """Trinity-RFT's toolcall_workflow prompt of a ToolACE row (Tool-N1's construct_prompt): the row's raw_system
    and the tool prompt with its tools (a JSON list of function schemas), then its conversations (from human / gpt /
    observation / function_call, whose value is written as JSON)."""
    import json

    tools = "\n".join(json.dumps({"type": "function", "function": tool}) for tool in json.loads(row["tools"]))
    messages = [{"role": "system", "content": row["raw_system"] + TOOL_N1_PROMPT.format(tools=tools)}]
    for turn in row["conversations"]:
        role = TOOL_N1_ROLES.get(turn["from"])
        if role is not None:
            value = turn["value"]
            messages.append({"role": role, "content": json.dumps(value) if turn["from"] == "function_call" else value})
    return messages


def toolcall_reward(solution: str, ground_truth: Any) -> float:
    """Tool-N1's reward (Trinity-RFT's compute_toolcall_reward): 1 where the reply has one <think>...</think> before
    its last <tool_call>...</tool_call>, whose JSON (a call or a list of calls, each with name and arguments) makes
    the same calls as the answer (names and arguments, in any order; none against none); 0 otherwise."""
    import json
    import re
    from collections import Counter

    answer = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if isinstance(answer, str):
        answer = json.loads(answer)
    calls = re.findall(r"<tool_call>(.*?)</tool_call>", solution, flags=re.DOTALL)
    try:
        result = json.loads(calls[-1].strip()) if calls else None
        if isinstance(result, str):
            result = json.loads(result)
    except json.JSONDecodeError:
        result = None
    result = [result] if isinstance(result, dict) else result
    if result is None or solution.count("<think>") != 1 or solution.count("</think>") != 1:
        return 0.0
    start = solution.find("<tool_call>")
    if start != -1 and solution.find("</think>") > start:
        return 0.0
    if not isinstance(result, list) or not all(isinstance(c, dict) and "name" in c and "arguments" in c
                                               for c in result):
        return 0.0
    if not result or not answer:
        return float(len(result) == len(answer))
    try:
        same = Counter((c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in result) == \
            Counter((c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in answer)
    except (TypeError, KeyError):
        return 0.0
    return float(same)


@register_workflow("toolcall_workflow")
class ToolN1Workflow(Workflow):
    """Trinity-RFT's toolcall_workflow (Tool-N1's single turn on ToolACE rows): the prompt from the row's
    raw_system, tools and conversations (`toolcall_messages`; the rows need no prompt column), `repeat_times` replies,
    each rewarded by `toolcall_reward` against the row's answer (0 for a row without one). No reward function is
    read. Not rft's multi-turn tool_call_workflow, which runs the tools."""

    ARGS = frozenset()

    def run(self) -> list[Experience]:
        row = self.task.raw_task or {}
        try:
            messages = toolcall_messages(row)
        except (KeyError, TypeError, ValueError) as e:
            raise WorkflowError(f"toolcall_workflow reads a ToolACE row (raw_system, tools as a JSON list, "
                                f"conversations of from / value): {type(e).__name__}: {e}") from None
        completions = self.model.chat(messages, n=self.task.repeat_times)
        answer = row.get("answer")
        return [c.to_experience(toolcall_reward(c.text, answer) if answer is not None else 0.0, {})
                for c in completions]


QWEN_MATH_SYSTEM_PROMPT = "You are a helpful assistant."


@register_workflow("on_policy_distill_math_workflow")
class OnPolicyDistillMathWorkflow(SimpleWorkflow):
    """Trinity-RFT's on_policy_distill_math_workflow: Qwen2.5-Math's prompt in place of the task's messages (the
    system prompt `QWEN_MATH_SYSTEM_PROMPT`; the question, then `BOXED_PROMPT` on a line of its own), word for word,
    scored by the run's reward function (the Trinity dialect's default: math_boxed_reward, the boxed answer against
    the truth, as Trinity's verify_math_answer). Its teacher is rft's distillation section, which scores every
    sampled token in the trainer: with on_policy_distill the reward is logged and trains nothing."""

    def run(self) -> list[Experience]:
        question = next(m["content"] for m in reversed(self.task.prompt.messages) if m["role"] == "user")
        messages = [{"role": "system", "content": QWEN_MATH_SYSTEM_PROMPT},
                    {"role": "user", "content": f"{question}\n{BOXED_PROMPT}"}]
        self.task = dataclasses.replace(self.task, prompt=dataclasses.replace(self.task.prompt, messages=messages))
        return super().run()


def base_model_prompt(messages: list[dict]) -> str:
    """Trinity-RFT's prompt for a base model (math_boxed_workflow's use_base): "System:<system>\\nUser:\\n<the
    question>\\nAssistant:\\n", the question being the last user message."""
    system = next((m["content"] for m in messages if m["role"] == "system"), None)
    question = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return (f"System:{system}\n" if system else "") + f"User:\n{question}\nAssistant:\n"


@register_workflow("simple_mm_workflow")
class SimpleMMWorkflow(SimpleWorkflow):
    """Trinity-RFT's simple_mm_workflow: simple_workflow on a vision-language task (the row's images, data.image_key,
    go with the prompt as for any workflow) under Trinity's fixed system prompt (`BOXED_THINK_PROMPT`, in place of
    the task's own, as Trinity's does), scored by the run's reward function."""

    def run(self) -> list[Experience]:
        self.task = with_system_prompt(self.task, BOXED_THINK_PROMPT, replace=True)
        return super().run()


@register_workflow("tool_call_workflow")
class ToolCallWorkflow(Workflow):
    """Multi-turn tool use (see the module docstring). Workflow args: max_turns (default 4: model turns),
    max_user_turns (verl's: the turns between the model's, tool results and an interaction's answers, after which
    the conversation ends; default none), tool_call_parser (default: workflow.tool_call_parser, else the model's
    family: `tools.parser_for`), tools_path (a Python file whose functions are tools), tool_timeout (seconds, 10).
    Each reply's calls and their results go back as the family's template has them (`tools.assistant_message`,
    `tools.result_messages`); a reply without calls is answered by the row's interaction, where the task has them
    (verl's tool agent loop: its scores reach the reward function as extra_info["turn_scores"]). A conversation the
    template refuses to continue (Llama-3.1's one call per turn) ends there, scored on its last reply and counted
    (`ended_early`)."""

    ARGS = frozenset({"max_turns", "max_user_turns", "tool_call_parser", "tools_path", "tool_timeout"})

    def run(self) -> list[Experience]:
        from rft.explorer.model import UnextendableReply
        from rft.explorer.tools import (
            assistant_message,
            load_tools,
            parse_tool_calls,
            result_messages,
            run_tool,
            tool_protocol,
        )

        a = self.args
        max_turns, parser = int(a.get("max_turns", 4)), a.get("tool_call_parser", self.model.tool_call_parser)
        tools, timeout = load_tools(a.get("tools_path")), float(a.get("tool_timeout", 10.0))
        start = self.model.start(self.task.messages, tools=self.task.prompt.tools)
        tool_role, writes_calls = tool_protocol(lambda messages: start.render(messages, False))
        max_user_turns = a.get("max_user_turns")
        conversations = self.model.sample(start, self.task.repeat_times)
        active = list(conversations)
        tool_calls = {id(c): 0 for c in conversations}
        ended = {id(c): 0 for c in conversations}
        user_turns = {id(c): 0 for c in conversations}
        sessions = self._sessions(conversations)
        for _ in range(max_turns - 1):
            pending = []
            for c in active:
                if c.finish_reason != "stop" or max_user_turns and user_turns[id(c)] >= max_user_turns:
                    continue
                calls, rest = parse_tool_calls(c.last_raw, parser)
                if calls:
                    tool_calls[id(c)] += len(calls)
                    if tool_role and writes_calls:
                        c.set_last_reply(assistant_message(c.last_reply, calls, rest, parser))
                    new = result_messages(calls, [run_tool(call, tools, timeout) for call in calls], tool_role)
                elif id(c) in sessions:  # verl's interaction answers as the user
                    done, text = sessions[id(c)].respond([dict(m) for m in c.messages])
                    if done:
                        continue
                    new = [{"role": "user", "content": text}]
                else:
                    continue
                user_turns[id(c)] += 1
                try:
                    c.add(new)
                except UnextendableReply:  # the template refuses to go on: the conversation ends, scored as it is
                    ended[id(c)] = 1
                    continue
                pending.append(c)
            if not pending:
                break
            self.model.respond(pending)
            active = pending
        out = []
        for c in conversations:
            session = sessions.get(id(c))
            reward, rewards = self.task.score(c.last_reply, {"turn_scores": session.scores} if session else None)
            if session:
                session.finish()
            out.append(c.to_experience(reward, {**rewards, "tool_calls": float(tool_calls[id(c)])},
                                       {"ended_early": ended[id(c)], "user_turns": user_turns[id(c)],
                                        **({"turn_scores": session.scores} if session else {})}))
        return out

    def _sessions(self, conversations: list) -> dict:
        """id(conversation) -> its interaction session, where the task has interactions (verl starts one per
        sample, with the row's interaction_kwargs)."""
        if not self.task.interactions:
            return {}
        from uuid import uuid4

        from rft.explorer.interactions import Session

        kwargs = (self.task.prompt.extra_info or {}).get("interaction_kwargs")
        return {id(c): Session(self.task.interactions, kwargs, uuid4().hex) for c in conversations}


@register_workflow("frozen_lake_workflow")
class FrozenLakeWorkflow(Workflow):
    """Trinity-RFT's frozen_lake_workflow (`rft.explorer.frozen_lake` says how it plays; its rows need no prompt
    column). Workflow args: env_max_steps (8: the longest path a generated map may need), agent_max_steps (10: the
    model's turns), is_slippery (false), desc (a map of its own, rows of S F H G)."""

    ARGS = frozenset({"env_max_steps", "agent_max_steps", "is_slippery", "desc"})

    def run(self) -> list[Experience]:
        require_gymnasium()
        a, row = self.args, self.task.raw_task or {}
        env_max_steps, agent_max_steps = int(a.get("env_max_steps", 8)), int(a.get("agent_max_steps", 10))
        seed = int(row.get("seed", 42))
        desc = list(a["desc"]) if a.get("desc") is not None else generate_map(
            int(row.get("size", 1)), float(row.get("p", 0.8)), seed, env_max_steps)
        budget = self.model.sampling.max_tokens
        lakes = [Lake(desc, bool(a.get("is_slippery", False)), seed) for _ in range(self.task.repeat_times)]
        first = observation_message(0, lakes[0].render(), False, agent_max_steps)
        conversations = [self.model.start([{"role": "system", "content": FROZEN_LAKE_PROMPT},
                                           {"role": "user", "content": first}]) for _ in lakes]
        state: list[dict[str, Any]] = [{"rewards": [], "done": False, "over": False, "truncated": False,
                                        "steps": 0, "last": None, "current": lakes[0].render()} for _ in lakes]
        for turn in range(agent_max_steps):
            asking: dict[int, list[int]] = {}  # max_tokens -> the episodes asked with it
            for i, (c, s) in enumerate(zip(conversations, state)):
                if s["over"]:
                    continue
                if turn > 0:
                    before = c.copy()
                    c.add([{"role": "user", "content": observation_message(
                        s["steps"], s["current"], s["last"] == s["current"], agent_max_steps - s["steps"])}])
                    if budget - (len(c.ids) - c.prompt_length) <= 0:  # no tokens left: without that last turn
                        conversations[i] = before
                        s["rewards"].append(0.0)
                        s["over"] = s["truncated"] = True
                        continue
                asking.setdefault(budget - (len(c.ids) - c.prompt_length), []).append(i)
            if not asking:
                break
            for max_tokens, episodes in asking.items():
                self.model.respond([conversations[i] for i in episodes], max_tokens=max_tokens)
            for episodes in asking.values():
                for i in episodes:
                    s, lake = state[i], lakes[i]
                    reward, done = lake.step(parse_action(conversations[i].last_reply))
                    s["last"], s["current"] = s["current"], lake.render()
                    s["rewards"].append(reward)
                    s["steps"] += 1
                    s["done"] = s["over"] = done
        out = []
        for c, s in zip(conversations, state):
            reward = float(sum(s["rewards"]))
            out.append(c.to_experience(reward, {"env_done": float(s["done"])},
                                       {"env_steps": s["steps"], "truncated": int(s["truncated"])}))
        return out


@register_workflow("sciworld_workflow")
class SciWorldWorkflow(Workflow):
    """Trinity-RFT's sciworld_workflow (`rft.explorer.sciworld` says how it plays): `repeat_times` episodes, one after
    another on one simulator (reset between them, as Trinity's), each a conversation of observations ("Observation:
    \n..." user turns, the first led by "Task Description: ...") and the model's replies, whose <action> the
    simulator steps; at most 30 turns; reward: the best running total of the simulator's scores / 100. Logged:
    env_done, env_rounds (the last turn's index), golden_rounds (the gold path's length). No reward function."""

    ARGS = frozenset()

    def run(self) -> list[Experience]:
        from rft.explorer.sciworld import (
            MAX_ENV_STEPS,
            SYSTEM_PROMPT,
            close_env,
            open_env,
            parse_action,
            task_config,
        )

        question = next(m["content"] for m in reversed(self.task.prompt.messages) if m["role"] == "user")
        env = open_env(task_config(question))
        try:
            golden = len(env.get_gold_action_sequence())
            out = []
            for _ in range(self.task.repeat_times):
                observation, _ = env.reset()
                observation = f"Task Description: {env.get_task_description()}\n{observation}"
                conversation = self.model.start([{"role": "system", "content": SYSTEM_PROMPT},
                                                 {"role": "user", "content": f"Observation: \n{observation}"}])
                total = best = 0.0
                done, rounds = False, 0
                for rounds in range(MAX_ENV_STEPS):
                    if rounds:
                        conversation.add([{"role": "user", "content": f"Observation: \n{observation}"}])
                    self.model.respond([conversation])
                    observation, reward, done, _ = env.step(parse_action(conversation.last_reply))
                    total += reward
                    best = max(best, total)
                    if done:
                        break
                out.append(conversation.to_experience(best / 100.0, {"env_done": float(done)},
                                                      {"env_rounds": rounds, "golden_rounds": golden}))
            return out
        finally:
            close_env(env)


@register_workflow("alfworld_workflow")
class AlfworldWorkflow(Workflow):
    """Trinity-RFT's alfworld_workflow (`rft.explorer.alfworld` says how it plays): `repeat_times` episodes of the
    row's game (its prompt: the game file's path), one after another on one environment (reset between them), each
    a conversation of observations and the model's replies, whose <action> the game steps; at most max_env_steps
    turns (30); reward: the game's score when it ends (1: won), else -0.1. Logged: env_done, env_rounds. No reward
    function."""

    ARGS = frozenset({"max_env_steps"})
    MAX_STEPS = MAX_ALFWORLD_STEPS  # max_env_steps' default

    def run(self) -> list[Experience]:
        from rft.explorer.alfworld import game_file, open_env

        steps = int((self.task.workflow_args or {}).get("max_env_steps", self.MAX_STEPS))
        env = open_env(game_file(question_of(self.task.prompt.messages)))
        try:
            return self.play(env, steps)
        finally:
            env.close()

    def play(self, env, steps: int) -> list[Experience]:
        """The task's repeat_times episodes of its game `env`, at most `steps` turns each."""
        from rft.explorer.alfworld import play

        return play(self.model, env, self.task.repeat_times, steps)


@register_workflow("step_wise_alfworld_workflow")
class StepWiseAlfworldWorkflow(AlfworldWorkflow):
    """Trinity-RFT's step_wise_alfworld_workflow: the same episodes. Trinity writes each turn as an experience of
    its own (the history so far its prompt) that carries the episode's reward; rft writes the episode's
    conversation, whose policy tokens are those turns' (multi_step_grpo's step-wise advantage is then GRPO's on the
    episodes: docs/algorithms.md)."""


@register_workflow("RAFT_alfworld_workflow")
class RaftAlfworldWorkflow(AlfworldWorkflow):
    """Trinity-RFT's RAFT_alfworld_workflow (`rft.explorer.alfworld.raft_episode`): `repeat_times` episodes of the
    row's game under the RAFT prompt (replies with <experience>, <think> and <action>), at most max_env_steps turns
    (50). An episode that scored 1 with every reply well formed is learnt (its conversation, the model's tokens);
    any other is an experience without a token to learn (Trinity's empty experience), its reward logged. Logged:
    success, steps. No reward function."""

    MAX_STEPS = RAFT_MAX_ENV_STEPS

    def play(self, env, steps: int) -> list[Experience]:
        return [self.attempt(env, steps) for _ in range(self.task.repeat_times)]

    def attempt(self, env, steps: int) -> Experience:
        from rft.explorer.alfworld import raft_episode, raft_kept

        episode = raft_episode(self.model, env, steps)
        return _raft_experience(episode, raft_kept(episode), {})


@register_workflow("RAFT_reflect_alfworld_workflow")
class RaftReflectAlfworldWorkflow(RaftAlfworldWorkflow):
    """Trinity-RFT's RAFT_reflect_alfworld_workflow: a first attempt as RAFT_alfworld_workflow's; a won one is
    learnt as there, one won with a reply malformed is not, any other is followed by a second attempt
    (`rft.explorer.alfworld.reflect_episode`: the model plays again after its first conversation and a note on
    how it went, and learns the clean conversation: the system prompt, the observations and its new replies), learnt
    when well formed and better (a higher reward, or a win in fewer turns). Logged besides success: first_reward,
    first_steps, second_reward, second_steps (an episode played once: its own), improvement. Trinity writes each
    task's attempts to JSON files in the working directory as well; rft does not (the experience holds each
    attempt's reward and turns). Validation plays the first attempt only."""

    def attempt(self, env, steps: int) -> Experience:
        from rft.explorer.alfworld import raft_episode, raft_kept, reflect_episode, reflect_kept

        first = raft_episode(self.model, env, steps)
        if first.reward >= 1 or self.task.is_eval:  # validation plays once, as Trinity's
            return _raft_experience(first, raft_kept(first), _attempts(first, first))
        second = reflect_episode(self.model, env, first, steps)
        return _raft_experience(second, reflect_kept(first, second), _attempts(first, second))


def _attempts(first, second) -> dict[str, float]:
    """What the reflecting workflow logs of its attempts (an episode played once: its own figures twice), the same
    names on every experience."""
    return {"first_reward": first.reward, "first_steps": float(first.steps), "second_reward": second.reward,
            "second_steps": float(second.steps), "improvement": float(second.reward > first.reward)}


def _raft_experience(episode, kept: bool, logged: dict[str, float]) -> Experience:
    """The episode's conversation as an experience, its tokens learnt only when `kept` (action mask 0 otherwise:
    Trinity-RFT's empty experience, which trains nothing); its reward the game's."""
    exp = episode.conversation.to_experience(episode.reward, {"success": float(episode.won), **logged},
                                             {"steps": episode.steps, "kept": kept})
    if not kept:
        exp.action_mask = exp.action_mask * 0
    return exp


class _AgentScopeReAct(Workflow):
    """Trinity-RFT's AgentScope ReAct workflows (`rft.explorer.agentscope`): for each of the task's repeat_times a
    fresh agent answers its question through the endpoint (workflow.enable_history); every model call it made is an
    experience paid the answer's reward (`accuracy`), `react_memory_length` in its info."""

    ARGS = frozenset()
    PROMPT = ""
    PYTHON_TOOL = False
    AGENT = "react_agent"

    async def run_async(self) -> list[Experience]:
        from rft.explorer.agentscope import boxed_answer_reward, memory_length, react_agent, solve

        out = []
        for _ in range(self.task.repeat_times):
            agent = react_agent(self.model, self.PROMPT, python_tool=self.PYTHON_TOOL, name=self.AGENT)
            rewards = boxed_answer_reward(await solve(agent, question_of(self.task.prompt.messages)), self.task.truth)
            length = await memory_length(agent)
            for e in self.model.extract_experience_from_history(clear_history=True):
                e.reward, e.rewards = sum(rewards.values()), dict(rewards)
                e.info["react_memory_length"] = length
                out.append(e)
        return out


@register_workflow("agentscope_react_workflow")
class AgentScopeReActWorkflow(_AgentScopeReAct):
    """Trinity-RFT's agentscope_react_workflow (as_react_workflow) with its GSM8K template (workflow args: type,
    gsm8k only): a ReAct agent with AgentScope's meta tool and no tool of its own."""

    ARGS = frozenset({"type"})
    PROMPT = GSM8K_AGENT_PROMPT


@register_workflow("agentscope_react_math_workflow")
class AgentScopeReActMathWorkflow(_AgentScopeReAct):
    """Trinity-RFT's agentscope_react_math_workflow: the agent has AgentScope's execute_python_code tool (the model's
    code runs in a Python subprocess of this machine) and Trinity's prompt between two line breaks."""

    PROMPT = "\n" + GSM8K_AGENT_PROMPT + "\n"
    PYTHON_TOOL = True
    AGENT = "math_react_agent"


__all__ = ["WORKFLOWS", "Conversation", "FrozenLakeWorkflow", "MathBoxedWorkflow", "RubricJudgeWorkflow", "ToolN1Workflow", "SciWorldWorkflow", "AlfworldWorkflow", "StepWiseAlfworldWorkflow", "RaftAlfworldWorkflow",
           "RaftReflectAlfworldWorkflow", "AgentScopeReActWorkflow",
           "AgentScopeReActMathWorkflow", "Learn2AskWorkflow", "MathWorkflow", "SimpleMMWorkflow", "SimpleWorkflow", "Task", "ToolCallWorkflow", "Workflow",
           "register_workflow"]
