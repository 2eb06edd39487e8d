"""Tools of multi-turn workflows: tool calls parsed out of a model's reply, tools run with a time limit, their
results (or errors) as the messages the model's family expects.

The call formats (the parsers of vLLM's tool-calling servers, by the same names):
* `hermes` (Qwen2.5, Qwen3, Hermes, many instruct models): `<tool_call>{"name": "calc", "arguments": {"e": "2*3"}}
  </tool_call>`, one JSON object per tag;
* `pythonic` (Llama 3.2 / 4 style, Gemma's): `[calc(e="2*3"), search(q="x")]`, a Python list of calls with keyword
  arguments of literal values (parsed with `ast`, never evaluated), or the calls of a ```tool_code block, one a line,
  as Gemma writes them;
* `mistral` (Mistral v0.3): `[TOOL_CALLS] [{"name": "calc", "arguments": {...}}, ...]`, a JSON list after the token;
* `llama3_json` (Llama 3.1 / 3.2 / 3.3): the whole reply a JSON object `{"name": ..., "parameters": {...}}` (after an
  optional `<|python_tag|>`), several separated by `;`;
* `deepseek_v3` (DeepSeek-V3, R1 and its distillations): `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` and the
  arguments in a json code block, between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`.
Where the config names none, `parser_for` reads the model's chat template (and its tokenizer's tokens).

Each call gets an id of 9 letters and digits (Mistral's template refuses others; the model's own where it wrote one
of that form), derived from the reply, so a rerun gives the same ids. The reply goes back into the conversation
with its calls structured where the template writes them (`assistant_message`: OpenAI's tool_calls, the arguments
as the family's template joins them), the results as `tool` messages with their call's id, or, for a template
without a tool role (Gemma), as one user turn of ```tool_output blocks (`result_messages`; `tool_protocol` probes
the template).

A tool is a Python callable taking the call's arguments as keyword arguments and returning something `str()`-able.
Built in: `calc` (`calculator`), arithmetic on integers and decimals through an `ast` walk (no `eval`). A task's
tools are declared in its row (`data.tools_key`, OpenAI function schemas) and implemented by name from the built-ins
or a Python file (`workflow.args.tools_path`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
import re
import string
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError

PARSERS = ("hermes", "pythonic", "mistral", "llama3_json", "deepseek_v3")
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_TOOL_CODE = re.compile(r"```tool_code\s*\n(.*?)```", re.S)
_DEEPSEEK_CALLS = re.compile(r"<｜tool▁calls▁begin｜>(.*?)(?:<｜tool▁calls▁end｜>|$)", re.S)
_DEEPSEEK_CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁sep｜>(.*?)\n```(?:json)?\n(.*?)\n```\s*<｜tool▁call▁end｜>",
                            re.S)
_ID_CHARS = string.ascii_letters + string.digits


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


def parse_tool_calls(text: str, parser: str = "hermes") -> tuple[list[ToolCall], str]:
    """(the tool calls in `text`, the text outside them). A call that does not parse is no call: the reply is then
    the model's answer (and a malformed call simply earns what the reward gives it). Each call gets its id
    (`call_id`)."""
    try:
        parse = _PARSE[parser]
    except KeyError:
        raise ValueError(f"unknown tool call parser {parser!r}; choose one of {list(PARSERS)}") from None
    calls, rest = parse(text)
    for i, c in enumerate(calls):
        c.id = c.id if _is_id(c.id) else call_id(text, i)
    return calls, rest


def call_id(reply: str, index: int) -> str:
    """The id of the `index`-th call of `reply`: 9 letters and digits (the form Mistral's template demands) drawn
    from a hash of both, so the same reply always gets the same ids."""
    digest = hashlib.sha256(f"{index}:{reply}".encode()).digest()
    return "".join(_ID_CHARS[b % len(_ID_CHARS)] for b in digest[:9])


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 9 and value.isascii() and value.isalnum()


def _call_of(obj: Any, arguments_key: str = "arguments") -> ToolCall | None:
    """A call from its JSON object ({name, arguments (an object, or a JSON string of one)}), None if not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(arguments_key, obj.get("arguments")) or {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {}
    return ToolCall(obj["name"], args if isinstance(args, dict) else {}, str(obj.get("id") or ""))


def _hermes(text: str) -> tuple[list[ToolCall], str]:
    calls = []
    for body in _HERMES.findall(text):
        try:
            call = _call_of(json.loads(body.strip()))
        except ValueError:
            continue
        if call is not None:
            calls.append(call)
    return calls, _HERMES.sub("", text).strip()


def _python_calls(source: str) -> list[ToolCall] | None:
    """The calls of `source`: a list of calls, or calls one a line (a `print(...)` around one is looked through);
    None where it is anything else (never evaluated: literal arguments only)."""
    try:
        tree = ast.parse(source.strip(), mode="exec")
    except SyntaxError:
        return None
    nodes = [s.value for s in tree.body if isinstance(s, ast.Expr)]
    if len(nodes) != len(tree.body) or not nodes:
        return None
    if len(nodes) == 1 and isinstance(nodes[0], ast.List):
        nodes = list(nodes[0].elts)
    nodes = [n.args[0] if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
             and len(n.args) == 1 else n for n in nodes]
    if not all(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) for c in nodes):
        return None
    try:
        return [ToolCall(c.func.id, {k.arg: ast.literal_eval(k.value) for k in c.keywords if k.arg}) for c in nodes]
    except ValueError:
        return None


def _pythonic(text: str) -> tuple[list[ToolCall], str]:
    block = _TOOL_CODE.search(text)
    if block is not None:
        calls = _python_calls(block.group(1))
        return (calls, (text[:block.start()] + text[block.end():]).strip()) if calls else ([], text)
    stripped = text.strip()
    start, end = stripped.find("["), stripped.rfind("]")
    if start < 0 or end < start:
        return [], text
    calls = _python_calls(stripped[start:end + 1])
    if not calls:
        return [], text
    return calls, (stripped[:start] + stripped[end + 1:]).strip()


def _json_values(text: str) -> list[Any] | None:
    """The JSON values `text` holds one after another (separated by whitespace or `;`), None if it holds more."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and (text[at].isspace() or text[at] == ";"):
            at += 1
        if at == len(text):
            return values
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        values.append(value)


def _mistral(text: str) -> tuple[list[ToolCall], str]:
    head, marker, body = text.partition("[TOOL_CALLS]")
    if not marker:
        return [], text
    values = _json_values(body)
    if not values:
        return [], text
    objects = [o for v in values for o in (v if isinstance(v, list) else [v])]
    calls = [_call_of(o) for o in objects]
    return ([c for c in calls if c is not None], head.strip()) if all(calls) else ([], text)


def _llama3_json(text: str) -> tuple[list[ToolCall], str]:
    body = text.strip().removeprefix("<|python_tag|>")
    values = _json_values(body) if body.lstrip().startswith("{") else None
    calls = [_call_of(v, "parameters") for v in values or []]
    return (calls, "") if calls and all(calls) else ([], text)


def _deepseek(text: str) -> tuple[list[ToolCall], str]:
    block = _DEEPSEEK_CALLS.search(text)
    if block is None:
        return [], text
    calls = []
    for _, name, arguments in _DEEPSEEK_CALL.findall(block.group(1)):
        call = _call_of({"name": name.strip(), "arguments": arguments})
        if call is not None:
            calls.append(call)
    return calls, (text[:block.start()] + text[block.end():]).strip()


_PARSE: dict[str, Callable[[str], tuple[list[ToolCall], str]]] = {
    "hermes": _hermes, "pythonic": _pythonic, "mistral": _mistral, "llama3_json": _llama3_json,
    "deepseek_v3": _deepseek}


# ------------------------------------------------------------------------------------------ the families
_MARKERS = (("[TOOL_CALLS]", "mistral"), ("<｜tool▁calls▁begin｜>", "deepseek_v3"), ("<tool_call>", "hermes"),
            ("<|python_tag|>", "llama3_json"), ('"parameters"', "llama3_json"), ("<start_of_turn>", "pythonic"))


def parser_for(tokenizer, chat_template: str | None = None) -> str:
    """The tool-call parser of a model: the first family marker (`_MARKERS`) that its chat template writes or its
    tokenizer has as a token; hermes where none."""
    template = chat_template or getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # a tokenizer with named templates
        template = "\n".join(str(t) for t in template.values())
    vocab = set(getattr(tokenizer, "get_added_vocab", dict)())
    return next((name for marker, name in _MARKERS if marker in template or marker in vocab), "hermes")


def assistant_message(text: str, calls: list[ToolCall], rest: str, parser: str) -> dict:
    """The model's reply as the chat template should see it: with its `calls` structured as OpenAI's tool_calls
    (DeepSeek's template joins the arguments as text, the others write them as JSON themselves) and the text
    outside them as its content (a string: Qwen3's and DeepSeek's templates search it for reasoning)."""
    if not calls:
        return {"role": "assistant", "content": text}
    as_text = parser == "deepseek_v3"
    return {"role": "assistant", "content": rest,
            "tool_calls": [{"id": c.id, "type": "function",
                            "function": {"name": c.name,
                                         "arguments": json.dumps(c.arguments) if as_text else c.arguments}}
                           for c in calls]}


def result_messages(calls: list[ToolCall], results: list[str], tool_role: bool = True) -> list[dict]:
    """The messages that give the model its calls' `results`: a `tool` message per call with its id and name, or,
    for a template without a tool role (Gemma), one user turn of ```tool_output blocks (Gemma's convention)."""
    if tool_role:
        return [{"role": "tool", "content": r, "name": c.name, "tool_call_id": c.id} for c, r in zip(calls, results)]
    return [{"role": "user", "content": "\n".join(f"```tool_output\n{r}\n```" for r in results)}]


def tool_protocol(render: Callable[[list[dict]], str]) -> tuple[bool, bool]:
    """(whether a chat template takes a `tool` message after a call, whether it writes an assistant message's
    structured tool_calls), probed by rendering a call and its result (`render`: messages -> text). Gemma's refuses
    the tool message (roles must alternate user / model); a template that writes no tool_calls (rft's tiny one)
    keeps the reply's text as the model wrote it."""
    call = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "fq7w2", "arguments": "{}"}}
    probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]},
             {"role": "tool", "content": "r8x3k", "name": "fq7w2", "tool_call_id": call["id"]}]
    try:
        text = render(probe)
    except Exception:  # the template refuses it (jinja's TemplateError, or its own error)
        return False, False
    return "r8x3k" in text, "fq7w2" in text


# ----------------------------------------------------------------------------------------------- built-ins
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _arith(node) -> float | int:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _arith(node.left), _arith(node.right)
        if abs(left) > 1e12 or abs(right) > 1e12:
            raise ValueError("numbers too large")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.operand))
    raise ValueError("only numbers and + - * / // % ( ) are allowed")


def calculator(expression: str = "", **kwargs) -> str:
    """The value of an arithmetic expression (integers and decimals, + - * / // %, parentheses); the first
    argument is the expression whatever its name (e, expr, expression, ...)."""
    if not expression and kwargs:
        expression = str(next(iter(kwargs.values())))
    try:
        value = _arith(ast.parse(str(expression).strip(), mode="eval"))
    except ZeroDivisionError:
        return "error: division by zero"
    except (SyntaxError, ValueError, TypeError) as e:
        return f"error: {e}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


BUILTIN_TOOLS: dict[str, Callable[..., Any]] = {"calc": calculator, "calculator": calculator}


def load_tools(path: str | None) -> dict[str, Callable[..., Any]]:
    """The built-in tools, and the public callables of the Python file at `path` (by function name)."""
    tools = dict(BUILTIN_TOOLS)
    if path:
        from rft.userfile import load_user_module

        module = load_user_module(path, "workflow.args.tools_path", "rft_tools", ToolError)
        tools.update({name: fn for name, fn in vars(module).items()
                      if callable(fn) and not name.startswith("_") and getattr(fn, "__module__", "") == module.__name__})
    return tools


def run_tool(call: ToolCall, tools: dict[str, Callable[..., Any]], timeout: float) -> str:
    """The tool's result as text; an unknown tool, an error or a time-out become an `error: ...` text for the model
    (never an exception for the workflow)."""
    fn = tools.get(call.name)
    if fn is None:
        return f"error: unknown tool {call.name!r}; available: {', '.join(sorted(tools))}"
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn(**call.arguments)
        except BaseException as e:  # the model's call was wrong: it reads the error
            result["error"] = f"{type(e).__name__}: {e}"

    thread = threading.Thread(target=target, name=f"rft-tool-{call.name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return f"error: tool {call.name!r} took longer than {timeout:g} s"
    if "error" in result:
        return f"error: {result['error']}"
    return str(result.get("value"))


class ToolError(RftError):
    """A workflow's tool setup that cannot run (a tools file that does not load)."""
