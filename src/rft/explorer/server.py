"""The explorer's engine as an OpenAI-compatible endpoint on 127.0.0.1, so agent code written against the `openai`
client (any framework) runs as a workflow: `/v1/models`, `/v1/chat/completions` (with `logprobs`, `n`, `tools`),
`/v1/completions`.

The server is the standard library's threading HTTP server (no web framework to install): each request is served
on its own thread and its generation joins the batches of the generation server. A workflow's calls carry its key
(`ModelHandle.api_key`, the bearer token its `get_openai_client()` sends), so they batch as that workflow's and,
with `enable_history`, are recorded for `extract_experience_from_history()`. A request with another key is served
on its own (no history).

A conversation keeps its tokens across calls: each chat reply is remembered with the ids of its prompt and of what
the model sampled, keyed by the request's messages plus the reply as the endpoint returned it (its tool calls and
their ids) under the caller's key. A later request whose messages begin with such a conversation continues those ids
with the chat template's rendering of what came after (`turns.continuation`, as the workflows' conversations do), so
an agent that sends its history back unchanged prompts the model with exactly the tokens it sampled, whatever the
template would make of them (a template that drops earlier reasoning, trims whitespace, or renders another
end-of-turn token). Tool calls are parsed from the reply's raw text (`turns.raw_reply`: the family's call markers
are special tokens), with the ids `tools.parse_tool_calls` gives them, as the tool workflow does. A history the client changed
is rendered from its text from the first message that differs; the endpoint counts such calls
(`workflow/endpoint_rerendered`) and says once why its tokens may differ from the sampled ones.

What the engine cannot do is refused with HTTP 400 and an OpenAI-style error body (never ignored): streaming, stop
sequences, top-logprobs alternatives, a prompt or max_tokens past the model's context, and an unknown model name
(404). A chat request's `chat_template_kwargs` (vLLM's extension, e.g. {"enable_thinking": false}) are variables of
the chat template, over the run's data.apply_chat_template_kwargs.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import uuid
import weakref
from array import array
from collections import Counter, OrderedDict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rft.data.chat import render
from rft.data.images import IMAGE_PART_TYPES
from rft.explorer.model import ModelHandle, WorkflowError
from rft.explorer.tools import parse_tool_calls
from rft.explorer.turns import TurnError, continuation, raw_reply

log = logging.getLogger("rft")

_ACCEPTED = {"model", "messages", "prompt", "n", "temperature", "top_p", "top_k", "max_tokens",
             "max_completion_tokens", "logprobs", "top_logprobs", "tools", "tool_choice", "stream", "stop", "user",
             "seed", "parallel_tool_calls", "echo", "presence_penalty", "frequency_penalty", "ignore_eos",
             "chat_template_kwargs", "continue_final_message"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _text(content) -> str:
    """An OpenAI message content: a string or a list of parts (their text joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        kinds = {p.get("type") if isinstance(p, dict) else type(p).__name__ for p in content} - {"text"}
        if kinds - set(IMAGE_PART_TYPES):
            raise ApiError(400, f"message content parts of type {sorted(map(str, kinds))}: text and image_url "
                                "parts are taken")
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise ApiError(400, "message content must be a string or a list of text parts")


def _image_parts(content) -> list[dict]:
    """The image parts of an OpenAI message content (image_url with a data URL), in order."""
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, dict) and p.get("type") in IMAGE_PART_TYPES]


def _message(m: dict, parser: str, replies: dict[str, str] | None = None) -> dict:
    """An OpenAI chat message as the chat template's {role, content}: an assistant's structured tool calls written
    back as the reply the endpoint parsed them from (`replies`: the raw text by tool-call id, so the next prompt
    holds the tokens the model wrote), or else in the model's call format; a tool message's content as text."""
    if not isinstance(m, dict) or "role" not in m:
        raise ApiError(400, "every message needs a role")
    text = _text(m.get("content"))
    raw = (replies or {}).get(str((m.get("tool_calls") or [{}])[0].get("id")))
    if m["role"] == "assistant" and raw is not None:
        text = raw
    elif m["role"] == "assistant" and m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            f = c.get("function", {})
            args = f.get("arguments", "{}")
            args = json.loads(args) if isinstance(args, str) else args
            if parser == "hermes":
                calls.append("<tool_call>" + json.dumps({"name": f.get("name"), "arguments": args}) + "</tool_call>")
            else:
                calls.append(f"{f.get('name')}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")")
        text = text + ("".join(calls) if parser == "hermes" else "[" + ", ".join(calls) + "]")
    out = {"role": m["role"], "content": text}
    thinking = m.get("reasoning_content") or m.get("reasoning")
    if m["role"] == "assistant" and isinstance(thinking, str):  # for the templates that render it (Qwen3's)
        out["reasoning_content"] = thinking
    if m.get("tool_call_id"):
        out["tool_call_id"] = str(m["tool_call_id"])
    if m["role"] != "assistant" and _image_parts(m.get("content")):  # text and images in their order, the
        # images read by the model handle
        out["content"] = [p if p.get("type") != "text" else {"type": "text", "text": p.get("text", "")}
                          for p in m["content"]]
    if m.get("name"):
        out["name"] = m["name"]
    return out


def split_reasoning(text: str, parser: str | None) -> tuple[str | None, str | None]:
    """(thinking, content) of a reply as vLLM's reasoning parser `parser` returns them: the text after `<think>`
    (when the reply has one) up to `</think>` is the thinking, what follows the content (None when nothing
    follows). A reply without `</think>`: deepseek_r1 reads it as thinking that never ended (the model's template
    opened it), qwen3 as content without thinking. `parser` None: (None, text)."""
    if parser is None:
        return None, text
    before, mark, after = text.partition("<think>")
    body = after if mark else before
    if "</think>" not in body:
        return (body, None) if parser == "deepseek_r1" else (None, text)
    thinking, _, content = body.partition("</think>")
    return thinking, content or None


def _arguments(value):
    """A tool call's arguments as an object: a client sends back the JSON text it got, spaced its own way."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _structured(m: dict) -> dict:
    """An OpenAI message as transformers' chat templates take it: text content, tool calls with their ids and their
    arguments as an object, a tool message's tool_call_id and name. Also what a kept conversation is looked up by,
    so a client's own spelling of the same message (content null or "", arguments re-spaced, extra null fields)
    finds it."""
    if not isinstance(m, dict) or "role" not in m:
        raise ApiError(400, "every message needs a role")
    out = {"role": m["role"], "content": _text(m.get("content"))}
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": str(c.get("id") or ""), "type": "function",
                              "function": {"name": (c.get("function") or {}).get("name"),
                                           "arguments": _arguments((c.get("function") or {}).get("arguments", "{}"))}}
                             for c in m["tool_calls"] if isinstance(c, dict)]
    for key in ("tool_call_id", "name"):
        if m.get(key):
            out[key] = str(m[key])
    return out


@dataclass
class _Kept:
    """A conversation as the model saw it up to the end of a reply the endpoint served."""

    ids: array
    """The reply's prompt ids and the ids the model sampled."""
    ended: bool
    """The reply ended with an end-of-turn token the model sampled (else the template's closing follows it)."""


def _eos_ids(handle: ModelHandle) -> list[int]:
    """The served model's end-of-turn ids (the engine's, else the tokenizer's EOS)."""
    eos = handle.eos_ids
    return eos if eos is not None else [i for i in [handle.tokenizer.eos_token_id] if i is not None]


class _Listener(ThreadingHTTPServer):
    """socketserver's listen backlog is 5: a streaming explorer's burst of requests (a request a group) overflowed
    it, and the kernel reset the connections it could not queue."""

    request_queue_size = 1024


def _listen(port: int, handler, port_key: str = "workflow.endpoint_port") -> ThreadingHTTPServer:
    """The server on 127.0.0.1:`port`; a port it cannot have is the config's fault, said in one line naming
    the key (the OS error alone read "Address already in use ... check the path and the file system")."""
    import errno

    try:
        return _Listener(("127.0.0.1", port), handler)
    except OSError as e:
        from rft.config import ConfigError

        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"{port_key}={port}: port {port} on 127.0.0.1 is in use by "
                              f"another program (another run's endpoint?); set {port_key}=0 to "
                              "pick a free port, or another port") from None
        raise ConfigError(f"{port_key}={port}: the endpoint cannot listen on 127.0.0.1:{port} "
                          f"({e.strerror or e}); set {port_key}=0 to pick a free port, or "
                          "another port") from None


class Endpoint:
    def __init__(self, make_handle, model_name: str, tool_call_parser: str = "hermes", port: int = 0,
                 routes: dict | None = None, token_details: bool = False, port_key: str = "workflow.endpoint_port",
                 reasoning_parser: str | None = None):
        """`make_handle()`: a model handle for requests that are no workflow's (ad-hoc clients, no history).
        `routes`: more routes, {("GET" or "POST", path): function(body or None) -> JSON reply, raising `ApiError`}
        (the engine server's /health and weight updates). `token_details`: each choice also carries `rft`, its
        prompt and response token ids, behaviour log-probs and per-token weight versions (`details`)."""
        self.make_handle, self.model_name, self.parser = make_handle, model_name, tool_call_parser
        self.reasoning_parser = reasoning_parser  # workflow.reasoning_parser (`split_reasoning`)
        self.routes, self.token_details = routes or {}, token_details
        self._keys: dict[str, weakref.ref] = {}
        self._replies: dict[str, str] = {}  # the raw replies behind the tool calls served, newest last
        self._kept: OrderedDict[str, _Kept] = OrderedDict()  # conversations by caller and messages, newest last
        self._counts: Counter = Counter()
        self._said: set[str] = set()
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _fail(self, e: ApiError) -> None:
                self._send(e.status, {"error": {"message": e.message, "type": e.kind, "code": e.status}})

            def do_GET(self) -> None:
                route = self.path.rstrip("/")
                if route == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": endpoint.model_name, "object": "model",
                                                                 "created": 0, "owned_by": "rft"}]})
                elif ("GET", route) in endpoint.routes:
                    try:
                        self._send(200, endpoint.routes["GET", route](None))
                    except ApiError as e:
                        self._fail(e)
                else:
                    self._fail(ApiError(404, f"no route {self.path}"))

            def do_POST(self) -> None:
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    try:
                        body = json.loads(self.rfile.read(length) or b"{}")
                    except ValueError:
                        raise ApiError(400, "the request body is not JSON") from None
                    key = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
                    route = self.path.rstrip("/")
                    if route == "/v1/chat/completions":
                        self._send(200, endpoint.chat(body, key))
                    elif route == "/v1/completions":
                        self._send(200, endpoint.complete(body, key))
                    elif ("POST", route) in endpoint.routes:
                        self._send(200, endpoint.routes["POST", route](body))
                    else:
                        raise ApiError(404, f"no route {self.path}")
                except ApiError as e:
                    self._fail(e)
                except Exception as e:  # a bug or a cancelled workflow: the client gets a 500, not a hang
                    self._fail(ApiError(500, f"{type(e).__name__}: {e}", "server_error"))

        self.httpd = _listen(port, Handler, port_key)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.api_base = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="rft-openai-endpoint", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------------- keys
    def key_for(self, handle: ModelHandle) -> str:
        with self._lock:
            for key, ref in self._keys.items():
                if ref() is handle:
                    return key
            key = "rft-" + secrets.token_hex(12)
            self._keys[key] = weakref.ref(handle)
            return key

    def _handle(self, key: str) -> ModelHandle:
        with self._lock:
            ref = self._keys.get(key)
        handle = ref() if ref is not None else None
        return handle if handle is not None else self.make_handle()

    # --------------------------------------------------------------------------------------------- routes
    def _check(self, body: dict) -> None:
        unknown = set(body) - _ACCEPTED
        if unknown:
            raise ApiError(400, f"unsupported parameters {sorted(unknown)}")
        if body.get("model") not in (None, self.model_name):
            raise ApiError(404, f"The model `{body.get('model')}` does not exist; this endpoint serves "
                                f"`{self.model_name}`", "model_not_found")
        if body.get("stream"):
            raise ApiError(400, "stream=true is not supported: rft's endpoint returns whole responses")
        if body.get("stop"):
            raise ApiError(400, "stop sequences are not supported by rft's engine (it stops at EOS or max_tokens)")
        if body.get("echo"):
            raise ApiError(400, "echo is not supported")
        if body.get("top_logprobs") or (isinstance(body.get("logprobs"), int) and not isinstance(
                body.get("logprobs"), bool) and body.get("logprobs") > 1):
            raise ApiError(400, "top-logprobs alternatives are not returned: ask for logprobs of the sampled tokens")
        for key in ("presence_penalty", "frequency_penalty"):
            if body.get(key):
                raise ApiError(400, f"{key} is not supported by rft's engine")

    def _sampling(self, body: dict, handle: ModelHandle, prompts: list[list[int]]) -> dict:
        """The call's sampling settings; a prompt or `max_tokens` past the model's context is refused as OpenAI
        refuses it (400, context_length_exceeded), and the default number of new tokens ends at the context."""
        out = {}
        for key in ("temperature", "top_p", "top_k", "ignore_eos"):
            if body.get(key) is not None:
                out[key] = body[key]
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ApiError(400, f"max_tokens must be a positive integer, got {limit!r}")
            out["max_tokens"] = limit
        if out.get("temperature") == 0:
            out["do_sample"] = False
        context = _context_length(handle)
        if context is not None:
            longest = max((len(p) for p in prompts), default=0)
            wanted = out.get("max_tokens", handle.sampling.max_tokens)
            if longest + (wanted if limit is not None else 1) > context:
                raise ApiError(400, f"This model's maximum context length is {context} tokens. However, you requested "
                                    f"{longest + wanted} tokens ({longest} in the messages, {wanted} in the "
                                    "completion). Please reduce the length of the messages or completion.")
            if limit is None and longest + wanted > context:
                out["max_tokens"] = context - longest
        return out

    REMEMBERED = 4096
    """Replies kept, the tokens of each conversation and the raw text of those with tool calls (the oldest are
    forgotten first)."""

    def _remember(self, call_id: str, text: str) -> None:
        with self._lock:
            self._replies[call_id] = text
            while len(self._replies) > self.REMEMBERED:
                del self._replies[next(iter(self._replies))]

    def chat(self, body: dict, key: str) -> dict:
        self._check(body)
        raw = body.get("messages") or []
        if not isinstance(raw, list) or not raw:
            raise ApiError(400, "messages must be a non-empty list")
        tools = body.get("tools") or None
        choice = body.get("tool_choice")
        if choice not in (None, "auto", "none", "required"):
            raise ApiError(400, "tool_choice must be auto, none or required (a named function needs guided "
                                "decoding, which rft's engines have not)")
        if choice == "required" and not tools:
            raise ApiError(400, "tool_choice=required needs tools")
        handle = self._handle(key).with_template_kwargs(_template_kwargs(body))
        n = int(body.get("n") or 1)
        scope = json.dumps([key, tools, handle.template_kwargs], sort_keys=True, default=str)
        keeps = handle.vision is None and not any(_image_parts(m.get("content")) for m in raw if isinstance(m, dict))
        history = [_structured(m) for m in raw] if keeps else []
        prompt = self._kept_prompt(scope, history, tools, handle) if keeps else None
        if prompt is not None:
            completions = handle.generate_ids([prompt], n=n, **self._sampling(body, handle, [prompt]))[0]
        else:
            with self._lock:
                replies = dict(self._replies)
            messages = [_message(m, self.parser, replies) for m in raw]
            # vLLM's server: a last assistant message is a finished turn unless the request asks to continue it
            extend = bool(body.get("continue_final_message", False))
            try:
                prompt, _ = handle.prompt(messages, tools, extend)
            except WorkflowError as e:  # images for a text model, an image_url that is no data URL, ...
                raise ApiError(400, str(e)) from None
            completions = handle.chat(messages, n=n, tools=tools, continue_final_message=extend,
                                      **self._sampling(body, handle, [prompt]))
        eos = set(_eos_ids(handle))
        choices = []
        for i, c in enumerate(completions):
            thinking, content = split_reasoning(c.text, self.reasoning_parser)
            message: dict = {"role": "assistant", "content": content}
            finish = c.finish_reason
            if tools and body.get("tool_choice") != "none":
                raw = raw_reply(handle.tokenizer, c.token_ids, eos)  # the family's call markers are special tokens
                calls, rest = parse_tool_calls(split_reasoning(raw, self.reasoning_parser)[1] or "", self.parser)
                if calls:  # ids of 9 letters and digits (`tools.call_id`): Mistral's template refuses any other
                    message = {"role": "assistant", "content": rest or None, "tool_calls": [
                        {"id": t.id, "type": "function",
                         "function": {"name": t.name, "arguments": json.dumps(t.arguments)}} for t in calls]}
                    finish = "tool_calls"
                    self._remember(calls[0].id, raw)
                elif choice == "required":
                    self._count("required_unmet", "tool_choice=required is not enforced here: rft's engines sample "
                                "without the guided decoding vLLM's server forces a tool call with, so a reply "
                                "without one is returned as it is (an agent such as AgentScope's asks again); "
                                "counted in workflow/endpoint_required_unmet")
            if thinking is not None:  # vLLM's field, and its earlier name (which most clients read)
                message["reasoning"] = message["reasoning_content"] = thinking
            if keeps:
                ended = bool(c.token_ids) and c.token_ids[-1] in eos
                self._keep(scope, history + [_structured(message)], _Kept(array("q", c.prompt_ids + c.token_ids),
                                                                          ended))
            choice = {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [
                    {"token": handle.tokenizer.decode([t]), "logprob": lp,
                     "bytes": list(token_bytes(handle.tokenizer, t)), "top_logprobs": []}
                    for t, lp in zip(c.token_ids, c.logprobs)]}
            choices.append(self._with_details(choice, c))
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.model_name, "choices": choices, "usage": _usage(completions)}

    # ------------------------------------------------------------------------------- kept conversations
    def _keep(self, scope: str, messages: list[dict], kept: _Kept) -> None:
        with self._lock:
            key = scope + json.dumps(messages, sort_keys=True)
            self._kept[key] = kept
            self._kept.move_to_end(key)
            while len(self._kept) > self.REMEMBERED:
                self._kept.popitem(last=False)

    def _kept_prompt(self, scope: str, messages: list[dict], tools, handle: ModelHandle) -> list[int] | None:
        """The prompt continuing the longest conversation served here that `messages` begin with: its ids as the
        model saw and sampled them, then the template's rendering of the messages after it. None where no assistant
        message of `messages` is a reply served here (a new conversation is rendered whole); a history that differs
        from the replies served is counted and said."""
        replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not replies:
            return None
        with self._lock:
            found = next(((i, self._kept[k]) for i in reversed(replies)
                          if (k := scope + json.dumps(messages[:i + 1], sort_keys=True)) in self._kept), None)
        if found is None or found[0] != replies[-1]:
            self._count("rerendered", "an OpenAI client sent a conversation whose assistant messages are not the "
                        "replies this endpoint returned (it changed them, or they came from elsewhere): from the "
                        "first that differs, the prompt holds the chat template's rendering of their text, whose "
                        "tokens may differ from those the model sampled (counted in workflow/endpoint_rerendered)")
        if found is None:
            return None
        i, kept = found
        self._count("kept")
        return list(kept.ids) + self._continuation(handle, messages[:i + 1], messages[i + 1:], tools, kept.ended)

    def _continuation(self, handle: ModelHandle, before: list[dict], new: list[dict], tools, ended: bool) -> list[int]:
        """The ids that follow a kept reply (`turns.continuation`: the template's closing of the reply where the
        model did not sample its end-of-turn token, then its rendering of the `new` messages and the generation
        prompt); a template that renders `before` otherwise once more messages follow is counted."""
        def rendered(messages: list[dict], generation_prompt: bool) -> str:
            return render(handle.tokenizer, messages, generation_prompt=generation_prompt, tools=tools,
                          chat_template=handle.chat_template, template_kwargs=handle.template_kwargs)

        try:
            more = continuation(handle.tokenizer, rendered, before, new, ended, _eos_ids(handle))
        except TurnError as e:  # the template's own refusal (roles, tool call ids)
            raise ApiError(400, str(e)) from None
        if more.rewritten:
            self._count("template_rewrites", "the chat template renders the earlier turns of a conversation "
                        "otherwise once more messages follow (it drops reasoning, trims whitespace, moves the tools, "
                        "dates its system prompt): the endpoint keeps the tokens the model saw and sampled and "
                        "appends the template's rendering of the new messages only (counted in "
                        "workflow/endpoint_template_rewrites)")
        return more.ids

    def _count(self, what: str, note: str | None = None) -> None:
        """One more call of kind `what`; `note` is said once per endpoint."""
        with self._lock:
            self._counts[what] += 1
            first = note is not None and what not in self._said
            self._said.add(what)
        if first:
            log.warning("rft: note: %s", note)

    COUNTED = ("kept", "rerendered", "template_rewrites", "required_unmet")

    def take_counts(self) -> dict[str, float]:
        """The calls counted since the last take, as `workflow/endpoint_*` metrics: kept (continued from the tokens
        of a reply served here), rerendered (a history the client changed, rendered from its text),
        template_rewrites (a template that renders earlier turns otherwise once more messages follow), required_unmet
        (a reply without a tool call to a request with tool_choice=required)."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
        return {f"workflow/endpoint_{k}": float(counts[k]) for k in self.COUNTED}

    def _with_details(self, choice: dict, c) -> dict:
        """`choice` with `rft` (`token_details`): what a trainer needs of a response and the text cannot give."""
        if self.token_details:
            choice["rft"] = {"prompt_token_ids": list(c.prompt_ids), "token_ids": list(c.token_ids),
                             "logprobs": list(c.logprobs), "versions": list(c.versions)}
        return choice

    def complete(self, body: dict, key: str) -> dict:
        """`prompt`: a string, a list of token ids, or a list of either (OpenAI's four forms)."""
        self._check(body)
        prompts = body.get("prompt")
        prompts = [prompts] if isinstance(prompts, str) or _token_ids(prompts) else prompts
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) or _token_ids(p)
                                                                    for p in prompts):
            raise ApiError(400, "prompt must be a string, a list of token ids, or a non-empty list of either")
        handle = self._handle(key)
        ids = [p if _token_ids(p) else handle.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        vocab = len(handle.tokenizer)
        if any(not 0 <= t < vocab for p in ids for t in p):
            raise ApiError(400, f"a prompt token id is outside the tokenizer's vocabulary (0 to {vocab - 1})")
        out = handle.generate_ids(ids, n=int(body.get("n") or 1), **self._sampling(body, handle, ids))
        choices, flat = [], []
        for completions in out:
            for c in completions:
                choice = {"index": len(choices), "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}
                if body.get("logprobs"):
                    tokens = [handle.tokenizer.decode([t]) for t in c.token_ids]
                    offsets = [sum(len(x) for x in tokens[:k]) for k in range(len(tokens))]
                    choice["logprobs"] = {"tokens": tokens, "token_logprobs": c.logprobs, "top_logprobs": None,
                                          "text_offset": offsets}
                choices.append(self._with_details(choice, c))
                flat.append(c)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.model_name, "choices": choices, "usage": _usage(flat)}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _template_kwargs(body: dict) -> dict:
    """A chat request's `chat_template_kwargs` (vLLM's extension: variables of the chat template, over the run's
    data.apply_chat_template_kwargs), checked as the config's are."""
    from rft.data.chat import template_kwargs_problem

    extra = body.get("chat_template_kwargs") or {}
    problem = template_kwargs_problem(extra)
    if problem is not None:
        raise ApiError(400, f"chat_template_kwargs: {problem}")
    return dict(extra)


def _token_ids(prompt) -> bool:
    """Whether `prompt` is a non-empty list of token ids (ints, not bools)."""
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(t, int) and not isinstance(t, bool)
                                                             for t in prompt)


_BYTE_DECODER: dict[str, int] | None = None


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes a token stands for (a byte-level BPE token may hold part of a UTF-8 character, which its decoded
    text cannot show)."""
    global _BYTE_DECODER
    if _BYTE_DECODER is None:
        from rft.models.tiny import (
            bytes_to_unicode,  # GPT-2's byte-level alphabet, which byte-level BPEs share
        )

        _BYTE_DECODER = {c: b for b, c in bytes_to_unicode().items()}
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if isinstance(piece, str) and piece not in tokenizer.all_special_tokens and all(c in _BYTE_DECODER for c in piece):
        return bytes(_BYTE_DECODER[c] for c in piece)
    return tokenizer.decode([token_id]).encode()


def _usage(completions) -> dict:
    prompt = sum(len(c.prompt_ids) for c in completions[:1])
    completion = sum(len(c.token_ids) for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _context_length(handle: ModelHandle) -> int | None:
    """The positions the served model holds (its config's max_position_embeddings), None when it does not say."""
    model = getattr(handle.server.engine, "model", None)
    value = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None
