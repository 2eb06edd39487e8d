"""The explorer's model as workflows see it: a handle that chats, generates and continues conversations, served in
batches from many workflow threads (and the OpenAI-compatible endpoint) by one generation server.

`GenerationServer` owns the rollout engine. Every caller is a *client* (a workflow attempt, an HTTP request); a
client's call blocks until every open client is waiting on the server, then all waiting requests run as one batch
(one engine call per distinct sampling setting), rows ordered by client and call, so a step's generation is as
batched as the workflows allow and as deterministic as they are. A runner also announces the clients it is about
to open (`expect`): a worker thread between two attempts counts as one, so the first batch of a step does not run
before the last workflow thread has started, whatever the threads' timing. A client busy elsewhere for longer than
`PATIENCE` seconds (a slow tool, a workflow about to be cut) no longer holds the others up: the waiting requests
run without it (its later call joins the next batch); nor does a client that was closed or cancelled.

`Conversation` keeps a multi-turn exchange as the exact tokens the model saw: the prompt, each generated turn (its
tokens in the action mask, with their log-probs) and what came between turns (tool results, environment or user
messages: rendered by the chat template after the sampled tokens, never re-tokenizing them (`turns.py`), masked
out). `ModelHandle` is what a workflow holds.

A vision-language model's handle (`ModelHandle.vision`) takes images in the messages: image parts holding their
image (`Task.messages` fills them from the row) or OpenAI's `image_url` parts with a data URL
(`rft.data.images.message_images`). The processor expands them into the prompt's image tokens, the images travel with
the request to the engine, and a conversation's or completion's experience carries them, in order (images a later
turn brings too).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from rft.data.chat import render, render_prompt, reply_prefix_of
from rft.data.dataset import left_pad
from rft.data.images import message_images
from rft.errors import RftError
from rft.experience import Experience
from rft.explorer.turns import TurnError, continuation, mismatch, raw_reply
from rft.rollout import SamplingParams

PATIENCE = 10.0
"""Seconds the waiting requests wait for the open clients that are busy elsewhere before they run without them: a
slow tool or remote service, not a loaded machine. At 0.5 s a workflow thread that a busy machine left unscheduled
that long (its own work between two calls takes milliseconds) missed its batch, and the step's samples, drawn per
batch, then depended on the machine's load. A runner shortens it to a quarter of its workflows' time limit
(`WorkflowRunner`): a hanging workflow must not hold the others until they are cut too."""


class WorkflowError(RftError):
    """A workflow did something the explorer cannot turn into experiences."""


class UnextendableReply(TurnError):
    """No message can follow the model's last reply in this conversation (the template refuses it, or cannot be
    aligned with it: `rft.explorer.turns`): a fault of the sample, not of the workflow nor the run, so the
    conversation ends and is scored as it stands."""


class Cancelled(Exception):
    """Raised in a workflow whose attempt was cut (timeout): its model calls stop."""


@dataclass
class Completion:
    text: str
    """The generated text, special tokens (EOS) removed."""
    prompt_ids: list[int]
    token_ids: list[int]
    """The generated tokens, EOS included when the response ended."""
    logprobs: list[float]
    """Each generated token's log-prob under softmax(logits / temperature) (the behaviour policy)."""
    finish_reason: str
    """stop (EOS) or length (max tokens)."""
    images: list[bytes] = field(default_factory=list)
    """The prompt's images (encoded), for a vision-language model."""
    versions: list[int] = field(default_factory=list)
    """The weight version that drew each generated token, where the server records it (the engine server's
    stream); empty otherwise."""
    reward: float | None = None
    """Set by a workflow that returns its completions as they are (Trinity-RFT's chat returns experiences, whose
    reward a workflow sets): the runner makes each an experience of that reward (`to_experience`)."""

    @property
    def response_text(self) -> str:
        """`text` under Trinity-RFT's name (its chat returns experiences whose reply is `response_text`)."""
        return self.text

    @property
    def tokens(self) -> torch.Tensor:
        """The prompt's ids then the generated ones (Trinity-RFT's experience's `tokens`)."""
        return torch.tensor(self.prompt_ids + self.token_ids, dtype=torch.long)

    @property
    def prompt_length(self) -> int:
        return len(self.prompt_ids)

    def to_experience(self, reward: float | None = None, rewards: dict[str, float] | None = None) -> Experience:
        """This single-turn completion as an experience: every generated token the model's (`Experience`'s default
        action mask), `reward` (else the one a workflow set, `self.reward`; 0.0 where neither is), `rewards` its
        named parts."""
        reward = reward if reward is not None else self.reward if self.reward is not None else 0.0
        return Experience(tokens=self.tokens, prompt_length=self.prompt_length, logprobs=self.logprobs, reward=reward,
                          rewards=dict(rewards or {}), info={"response_text": self.text}, images=list(self.images))


@dataclass
class _Request:
    client: str
    order: tuple
    prompts: list[list[int]]
    params: SamplingParams
    images: list[list[bytes]]
    result: list[list[Completion]] | None = None
    error: BaseException | None = None
    since: float = field(default_factory=time.monotonic)


class GenerationServer:
    def __init__(self, engine, tokenizer, generator: torch.Generator | None = None):
        self.engine, self.tokenizer, self.generator = engine, tokenizer, generator
        self._cond = threading.Condition()
        self._clients: dict[str, tuple] = {}  # open client -> its order key
        self._cancelled: set[str] = set()
        self._pending: list[_Request] = []
        self._running = False
        self._expected = 0  # clients announced by a runner and not open yet (`expect`)
        self._ids = itertools.count()
        self.calls = 0  # engine calls made (batches)
        self.patience = PATIENCE

    # --------------------------------------------------------------------------------------------- clients
    def expect(self, count: int) -> None:
        """`count` more (or, negative, fewer) clients are about to open: batches wait for them as for open ones
        (up to `patience`)."""
        with self._cond:
            self._expected = max(0, self._expected + count)
            self._cond.notify_all()

    def open(self, order: tuple = (), expected: bool = False) -> str:
        """A new client; `order` sorts its rows within a batch (e.g. (task index, attempt)); `expected`: one of the
        clients announced with `expect`."""
        with self._cond:
            client = f"c{next(self._ids)}"
            self._clients[client] = (*order, client)
            if expected:
                self._expected = max(0, self._expected - 1)
            return client

    def close(self, client: str, cancelled: bool = False, expect_another: bool = False) -> None:
        """`expect_another`: the caller opens a client again (or calls `expect(-1)`), so batches wait for it."""
        with self._cond:
            if self._clients.pop(client, None) is not None and expect_another:
                self._expected += 1
            if cancelled:
                self._cancelled.add(client)
                for r in self._pending:
                    if r.client == client:
                        r.error = Cancelled(f"client {client} was cancelled")
                self._pending = [r for r in self._pending if r.client != client]
            self._cond.notify_all()

    # ---------------------------------------------------------------------------------------------- calls
    def submit(self, client: str, prompts: list[list[int]], params: SamplingParams,
               images: list[list[bytes]] | None = None) -> list[list[Completion]]:
        """`params.n` completions of each prompt (token ids; `images`: each prompt's, for a vision-language model),
        once every open client waits too."""
        with self._cond:
            if client in self._cancelled:
                raise Cancelled(f"client {client} was cancelled")
            ad_hoc = client not in self._clients
            if ad_hoc:
                self._clients[client] = (float("inf"), client)
            request = _Request(client, self._clients[client], prompts, params, images or [[] for _ in prompts])
            self._pending.append(request)
            self._cond.notify_all()
            try:
                while request.result is None and request.error is None:
                    if not self._running and self._ready():
                        batch, self._pending, self._running = self._pending, [], True
                        self._cond.release()
                        try:
                            self._run(batch)
                        finally:
                            self._cond.acquire()
                            self._running = False
                            self._cond.notify_all()
                    else:
                        self._cond.wait(0.05)
            finally:
                if ad_hoc:
                    self._clients.pop(client, None)
                    self._cond.notify_all()
            if request.error is not None:
                raise request.error
            return request.result

    def _ready(self) -> bool:
        if not self._pending:
            return False
        waiting = {r.client for r in self._pending}
        everyone = not self._expected and waiting >= set(self._clients)
        return everyone or time.monotonic() - self._pending[0].since >= self.patience

    def _run(self, batch: list[_Request]) -> None:
        """One engine call per distinct sampling setting; rows in client order."""
        batch.sort(key=lambda r: r.order)
        groups: dict[SamplingParams, list[_Request]] = {}
        for r in batch:
            groups.setdefault(dataclasses.replace(r.params, n=1), []).append(r)
        for params, requests in groups.items():
            try:
                rows = [(r, i, p) for r in requests for i, p in enumerate(r.prompts) for _ in range(r.params.n)]
                outs = self._generate([p for _, _, p in rows], params, [r.images[i] for r, i, _ in rows])
                for r in requests:
                    r.result = [[] for _ in r.prompts]
                for (r, i, _), out in zip(rows, outs):
                    r.result[i].append(out)
            except BaseException as e:  # every caller of this group hears it
                for r in requests:
                    r.result, r.error = None, e

    def _generate(self, prompts: list[list[int]], params: SamplingParams,
                  images: list[list[bytes]]) -> list[Completion]:
        self.calls += 1
        ids, mask = left_pad(prompts, self.tokenizer.pad_token_id)
        with_images = {"images": images} if any(images) else {}
        out = self.engine.generate(ids, mask, params, self.generator, **with_images)
        completions = []
        for prompt, pictures, tokens, valid, logprobs in zip(prompts, images, out.response_ids, out.response_mask,
                                                             out.logprobs):
            tokens = tokens[valid.bool()].tolist()
            ended = bool(tokens) and tokens[-1] in self.engine.eos_ids.tolist()
            completions.append(Completion(
                text=self.tokenizer.decode(tokens, skip_special_tokens=True), prompt_ids=list(prompt),
                token_ids=tokens, logprobs=logprobs[: len(tokens)].tolist(),
                finish_reason="stop" if ended and not params.ignore_eos else "length", images=list(pictures)))
        return completions


# ------------------------------------------------------------------------------------------ conversations
class Conversation:
    """A conversation as the exact tokens the model saw (see the module docstring)."""

    def __init__(self, tokenizer, messages: list[dict], tools: list[dict] | None = None,
                 chat_template: str | None = None, vision=None, template_kwargs: dict | None = None,
                 eos_ids: list[int] | None = None, continue_final: bool = False):
        self.tokenizer, self.tools, self.chat_template, self.vision = tokenizer, tools, chat_template, vision
        self.template_kwargs = template_kwargs  # the template's variables (data.apply_chat_template_kwargs)
        # the ids that end a turn (the engine's: the generation config's list and the tokenizer's EOS)
        self.eos_ids = list(eos_ids) if eos_ids is not None else [i for i in [tokenizer.eos_token_id] if i is not None]
        self.mismatches: list[str] = []
        """Each `add` whose tokens differ from the template's full rendering: how (`turns.mismatch`)."""
        messages, self.images = _images_of(messages, vision)
        # `continue_final`: a last assistant message is the start of the first reply (data.reply_prefix)
        messages, prefix = reply_prefix_of(messages) if continue_final else (messages, "")
        self.messages = [dict(m) for m in messages]
        self.text = self.render(self.messages) + prefix
        self.ids = self._tokens(self.text, self.images)
        self.action = [0] * len(self.ids)
        self.logprobs = [0.0] * len(self.ids)
        self.prompt_length = len(self.ids)
        self.finish_reason: str | None = None
        self.last_completion: Completion | None = None
        """The model's last turn as sampled (another conversation may take it: `append_completion`)."""
        self.last_raw = self._last_reply = ""
        """The last reply's text with its special tokens (a family's tool-call tokens), its closing EOS left out."""
        self._reply_end: tuple[int, int, int, int] | None = None
        """Where the last reply ends (ids, text, images, mismatches): what `add` puts after it starts there."""

    def render(self, messages: list[dict], generation_prompt: bool = True) -> str:
        """`messages` as this conversation's chat template writes them."""
        if self.vision is not None:
            return self.vision.render(messages, self.chat_template, self.tools, generation_prompt=generation_prompt,
                                      template_kwargs=self.template_kwargs)
        return render(self.tokenizer, messages, tools=self.tools, chat_template=self.chat_template,
                      template_kwargs=self.template_kwargs, generation_prompt=generation_prompt)

    def _tokens(self, text: str, images: list[bytes]) -> list[int]:
        """`text`'s tokens, its images expanded into their image tokens by the processor."""
        if images:
            return self.vision.encode(text, images, "a workflow's conversation")
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def copy(self) -> Conversation:
        other = object.__new__(Conversation)
        other.__dict__.update(self.__dict__)
        other.messages = [dict(m) for m in self.messages]
        other.ids, other.action, other.logprobs = list(self.ids), list(self.action), list(self.logprobs)
        other.images, other.mismatches = list(self.images), list(self.mismatches)
        return other

    @property
    def last_reply(self) -> str:
        """The text of the model's last reply, special tokens removed ("" before the first)."""
        return self._last_reply

    @property
    def turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")

    def append_completion(self, completion: Completion) -> None:
        """The model's turn: its tokens (action mask 1, their log-probs) and its message."""
        self.ids += completion.token_ids
        self.action += [1] * len(completion.token_ids)
        self.logprobs += completion.logprobs
        self.messages.append({"role": "assistant", "content": completion.text})
        self.text += self.tokenizer.decode(completion.token_ids, skip_special_tokens=False)
        self.finish_reason, self.last_completion = completion.finish_reason, completion
        self.last_raw = raw_reply(self.tokenizer, completion.token_ids, self.eos_ids)
        self._last_reply = completion.text
        self._reply_end = (len(self.ids), len(self.text), len(self.images), len(self.mismatches))

    def set_last_reply(self, message: dict) -> None:
        """The last assistant message as the chat template should see it (its tool calls structured, as the
        family's protocol has them: `tools.assistant_message`); its tokens stay as sampled."""
        at = max(i for i, m in enumerate(self.messages) if m["role"] == "assistant")
        self.messages[at] = dict(message)

    def add(self, messages: list[dict]) -> None:
        """Messages the model did not write (tool results, environment, user), then the generation prompt, action
        mask 0: the chat template's rendering of them after the model's last turn, its sampled tokens kept
        (`rft.explorer.turns`), together with what earlier calls added since that turn. Before the first turn they
        are the prompt's. A rendering of the whole that differs is recorded in `mismatches`; a template that refuses
        the new messages raises `UnextendableReply` (the conversation ends there)."""
        messages, images = _images_of(messages, self.vision)
        messages = [dict(m) for m in messages]
        if self._reply_end is None:  # nothing sampled yet: the whole is the prompt, as the template writes it
            self.messages += messages
            self.images += images
            self.text = self.render(self.messages)
            self.ids = self._tokens(self.text, self.images)
            self.action, self.logprobs = [0] * len(self.ids), [0.0] * len(self.ids)
            self.prompt_length = len(self.ids)
            return
        n_ids, n_text, n_images, n_mismatches = self._reply_end
        last = max(i for i, m in enumerate(self.messages) if m["role"] == "assistant")
        history, new = self.messages[:last + 1], self.messages[last + 1:] + messages
        images = self.images[n_images:] + images
        encode = (lambda text: self._tokens(text, images)) if images else None
        try:
            more = continuation(self.tokenizer, self.render, history, new, self.finish_reason == "stop",
                                self.eos_ids, encode)
        except TurnError as e:
            raise UnextendableReply(str(e)) from None
        self.messages, self.images = history + new, self.images[:n_images] + images
        self.ids = self.ids[:n_ids] + more.ids
        self.action = self.action[:n_ids] + [0] * len(more.ids)
        self.logprobs = self.logprobs[:n_ids] + [0.0] * len(more.ids)
        self.text = self.text[:n_text] + more.text
        self.mismatches = self.mismatches[:n_mismatches]
        if not self.images:
            differs = mismatch(self.tokenizer, self.ids, more.full)
            if differs is not None:
                self.mismatches.append(differs)

    def to_experience(self, reward: float, rewards: dict[str, float] | None = None,
                      info: dict[str, Any] | None = None) -> Experience:
        """The conversation as one experience (the explorer sets its group and model version)."""
        p = self.prompt_length
        return Experience(
            tokens=torch.tensor(self.ids, dtype=torch.long), prompt_length=p,
            action_mask=torch.tensor(self.action[p:], dtype=torch.long),
            logprobs=torch.tensor(self.logprobs[p:], dtype=torch.float32), reward=float(reward), group="",
            rewards=dict(rewards or {}),
            info={"response_text": self.last_reply, "turns": self.turns, "render_mismatch": len(self.mismatches),
                  **({"render_mismatch_example": self.mismatches[0]} if self.mismatches else {}), **(info or {})},
            images=list(self.images),
        )


def _images_of(messages: list[dict], vision) -> tuple[list[dict], list[bytes]]:
    """(`messages` with bare image parts, their images) (`message_images`); images for a text model are a
    `WorkflowError`."""
    try:
        messages, images = message_images(messages, "a workflow's messages")
    except ValueError as e:  # DataError
        raise WorkflowError(str(e)) from None
    if images and vision is None:
        raise WorkflowError(f"the messages hold {len(images)} image(s) and the model is a text model: it takes no "
                            "images")
    return messages, images


# --------------------------------------------------------------------------------------------------- handle
_SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_tokens", "do_sample", "ignore_eos"}


@dataclass
class ModelHandle:
    """What a workflow holds (Trinity-RFT's model wrapper): `chat`, `generate`, conversations, an OpenAI client
    when the endpoint is on, and the recorded calls (`enable_history`)."""

    server: GenerationServer
    tokenizer: Any
    sampling: SamplingParams
    """The task's sampling settings (the rollout config, or validation's); per-call keyword overrides."""
    chat_template: str | None = None
    template_kwargs: dict = field(default_factory=dict)
    """The chat template's variables (data.apply_chat_template_kwargs; `with_template_kwargs` adds a call's own)."""
    client: str | None = None
    """The server client of the running attempt (set by the runner)."""
    endpoint: Any = None
    """The OpenAI-compatible endpoint (rft.explorer.server.Endpoint) when enabled, else None."""
    enable_history: bool = False
    tool_call_parser: str = "hermes"
    """How tool calls are found in a reply (workflow.tool_call_parser): the endpoint's and tool_call_workflow's."""
    history: list[Experience] = field(default_factory=list)
    vision: Any = None
    """A vision-language model's `rft.models.vision.Vision` (its messages may hold images), else None."""
    max_prompt_tokens: int | None = None
    truncation: str = "error"
    """`chat` and `generate` cut a text prompt over `max_prompt_tokens` (data.max_prompt_length) as `truncation`
    (data.truncation: left, right, middle) says, as the dataset cuts its prompts and as Trinity-RFT's vLLM engine
    cuts every chat / generate call at max_prompt_tokens (math_workflow's system prompt made gsm8k's prompts ~480
    tokens with max_prompt_tokens 256); `error` (or None) sends it whole. Conversations (start / respond) are not
    cut: their tokens are the experience's."""

    def _cut(self, ids: list[int]) -> list[int]:
        if self.max_prompt_tokens is None or self.truncation not in ("left", "right", "middle"):
            return ids
        from rft.data.dataset import truncate

        return truncate(ids, self.max_prompt_tokens, self.truncation)

    def params(self, n: int = 1, **overrides) -> SamplingParams:
        """The sampling of a call: the handle's, with `overrides`; `logprobs` (vLLM's and Trinity-RFT's key) may
        ask for the sampled tokens' log-probs, which every completion has (0, None, a bool), not alternatives."""
        logprobs = overrides.pop("logprobs", None)
        if logprobs not in (None, 0) and not isinstance(logprobs, bool):
            raise TypeError(f"logprobs={logprobs!r}: a completion has the log-prob of each sampled token, not the "
                            "top alternatives; pass 0 or leave it out")
        unknown = set(overrides) - _SAMPLING_KEYS
        if unknown:
            raise TypeError(f"unknown sampling settings {sorted(unknown)}; known: {sorted(_SAMPLING_KEYS)}")
        return dataclasses.replace(self.sampling, n=n, **overrides)

    def _submit(self, prompts: list[list[int]], params: SamplingParams,
                images: list[list[bytes]] | None = None) -> list[list[Completion]]:
        client = self.client or self.server.open((float("inf"),))
        try:
            out = self.server.submit(client, prompts, params, images)
        finally:
            if self.client is None:
                self.server.close(client)
        if self.enable_history:
            for completions in out:
                for c in completions:
                    self.history.append(c.to_experience())
        return out

    def chat(self, messages: list[dict], n: int = 1, tools: list[dict] | None = None,
             continue_final_message: bool = True, **sampling) -> list[Completion]:
        """`n` completions of the next assistant turn after `messages` (rendered with the chat template; a last
        assistant message continued, `prompt`)."""
        return self.chat_batch([messages], n, tools, continue_final_message, **sampling)[0]

    def chat_batch(self, conversations: list[list[dict]], n: int = 1, tools: list[dict] | None = None,
                   continue_final_message: bool = True, **sampling) -> list[list[Completion]]:
        """`n` completions of the next assistant turn after each of `conversations`, in one call."""
        prompts = [self.prompt(messages, tools, continue_final_message) for messages in conversations]
        return self._submit([ids if images else self._cut(ids) for ids, images in prompts],
                            self.params(n, **sampling), [im for _, im in prompts])

    def prompt(self, messages: list[dict], tools: list[dict] | None = None,
               continue_final_message: bool = True) -> tuple[list[int], list[bytes]]:
        """(the token ids of `messages` with the assistant's generation prompt, their images). With
        `continue_final_message` (a workflow's chat, as Trinity-RFT's model wrapper chats) a last assistant message
        is the start of the reply, which the completion continues (data.reply_prefix); without it (the OpenAI
        endpoint, as vLLM's server by default) a new assistant turn follows it."""
        if self.vision is None and not any(isinstance(m.get("content"), list) for m in messages):
            kwargs = {"tools": tools, "chat_template": self.chat_template, "template_kwargs": self.template_kwargs}
            text = render_prompt(self.tokenizer, messages, **kwargs) if continue_final_message else \
                render(self.tokenizer, messages, **kwargs)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"], []
        conversation = self.start(messages, tools, continue_final_message)
        return conversation.ids, conversation.images

    def generate(self, prompts: list[str], n: int = 1, **sampling) -> list[list[Completion]]:
        """`n` completions of each raw text prompt (no chat template)."""
        return self.generate_ids([self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts], n,
                                 **sampling)

    def generate_ids(self, prompts: list[list[int]], n: int = 1, **sampling) -> list[list[Completion]]:
        """`n` completions of each prompt given as token ids (cut as `generate` cuts text prompts)."""
        return self._submit([self._cut(list(ids)) for ids in prompts], self.params(n, **sampling))

    @property
    def eos_ids(self) -> list[int] | None:
        """The served model's end-of-turn ids (its engine's: the tokenizer's EOS and the generation config's
        others), None where the engine has none."""
        eos = getattr(getattr(self.server, "engine", None), "eos_ids", None)
        return None if eos is None else [int(t) for t in eos.tolist()]

    def start(self, messages: list[dict], tools: list[dict] | None = None, continue_final: bool = False) -> Conversation:
        return Conversation(self.tokenizer, messages, tools, self.chat_template, self.vision, self.template_kwargs,
                            self.eos_ids, continue_final)

    def with_template_kwargs(self, extra: dict) -> ModelHandle:
        """This handle with `extra` template variables over its own (an OpenAI request's chat_template_kwargs, as
        vLLM's server takes them): the same server, client and history, so its calls batch and are recorded as
        this handle's."""
        if not extra:
            return self
        return dataclasses.replace(self, template_kwargs={**self.template_kwargs, **extra})

    def respond(self, conversations: list[Conversation], **sampling) -> None:
        """One assistant turn for each conversation (one batched call), appended to it."""
        if not conversations:
            return
        out = self._submit([c.ids for c in conversations], self.params(1, **sampling), [c.images for c in conversations])
        for conversation, (completion,) in zip(conversations, out):
            conversation.append_completion(completion)

    def sample(self, conversation: Conversation, n: int, **sampling) -> list[Conversation]:
        """`n` copies of `conversation`, each continued with its own sampled assistant turn."""
        copies = [conversation.copy() for _ in range(n)]
        self.respond(copies, **sampling)
        return copies

    # ------------------------------------------------------------------------------------- OpenAI client
    @property
    def api_base(self) -> str:
        if self.endpoint is None:
            raise WorkflowError("the OpenAI-compatible endpoint is off: set workflow.enable_history or "
                                "workflow.endpoint (Trinity: explorer.rollout_model.enable_history)")
        return self.endpoint.api_base

    @property
    def api_key(self) -> str:
        """The key that routes this attempt's HTTP calls to its server client (and its history)."""
        if self.endpoint is None:
            return self.api_base  # raises the explanation
        return self.endpoint.key_for(self)

    def get_openai_client(self):
        """An `openai.OpenAI` client on the endpoint, whose calls count as this workflow's."""
        return _openai().OpenAI(base_url=self.api_base, api_key=self.api_key, max_retries=0)

    def get_openai_async_client(self):
        """An `openai.AsyncOpenAI` client on the endpoint, whose calls count as this workflow's (Trinity-RFT's async
        workflows and AgentScope's agents take one); `model_path`: the name the endpoint serves the policy under,
        as Trinity's client carries it."""
        client = _openai().AsyncOpenAI(base_url=self.api_base, api_key=self.api_key, max_retries=0)
        client.model_path = self.endpoint.model_name
        return client

    async def chat_async(self, messages: list[dict], n: int = 1, tools: list[dict] | None = None,
                         **sampling) -> list[Completion]:
        """`chat` for an async workflow (Trinity-RFT's name): the call joins the batch as `chat` does, holding this
        attempt's event loop until its completions come."""
        return self.chat(messages, n, tools, **sampling)

    async def generate_async(self, prompts: list[str], n: int = 1, **sampling) -> list[list[Completion]]:
        """`generate` for an async workflow (Trinity-RFT's name), as `chat_async`."""
        return self.generate(prompts, n, **sampling)

    def extract_experience_from_history(self, clear: bool = True, clear_history: bool | None = None
                                        ) -> list[Experience]:
        """One experience per recorded model call (prompt and completion tokens, reward 0: the workflow sets it);
        `clear_history`: Trinity-RFT's name of `clear`."""
        out = list(self.history)
        if clear if clear_history is None else clear_history:
            self.history.clear()
        return out


def _openai():
    """The openai package, or the one line naming the extra that installs it."""
    try:
        import openai
    except ImportError:
        raise RftError("the OpenAI client needs the openai package: pip install 'rft[agents]'") from None
    return openai
