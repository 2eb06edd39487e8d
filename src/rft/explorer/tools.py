"""Tools of multi-turn workflows: tool calls parsed out of a model's reply, tools run with a time limit, their
results (or errors) as tool messages.

Two call formats (the parsers of vLLM's tool-calling servers, by the same names):
* `hermes` (Qwen2.5, Hermes, many instruct models): `<tool_call>{"name": "calc", "arguments": {"e": "2*3"}}</tool_call>`,
  one JSON object per tag;
* `pythonic` (Llama 3.2 / 4 style): `[calc(e="2*3"), search(q="x")]`, a Python list of calls with keyword
  arguments of literal values (parsed with `ast`, never evaluated).

A tool is a Python callable taking the call's arguments as keyword arguments and returning something `str()`-able.
Built in: `calc` (`calculator`), arithmetic on integers and decimals through an `ast` walk (no `eval`). A task's
tools are declared in its row (`data.tools_key`, OpenAI function schemas) and implemented by name from the built-ins
or a Python file (`workflow.args.tools_path`).
"""

from __future__ import annotations

import ast
import json
import operator
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError

PARSERS = ("hermes", "pythonic")
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


def parse_tool_calls(text: str, parser: str = "hermes") -> tuple[list[ToolCall], str]:
    """(the tool calls in `text`, the text outside them). A call that does not parse is no call: the reply is then
    the model's answer (and a malformed call simply earns what the reward gives it)."""
    if parser == "hermes":
        calls = []
        for body in _HERMES.findall(text):
            try:
                obj = json.loads(body.strip())
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("name"), str):
                args = obj.get("arguments") or {}
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        args = {}
                calls.append(ToolCall(obj["name"], args if isinstance(args, dict) else {}, f"call_{len(calls)}"))
        return calls, _HERMES.sub("", text).strip()
    if parser == "pythonic":
        stripped = text.strip()
        start, end = stripped.find("["), stripped.rfind("]")
        if start < 0 or end < start:
            return [], text
        try:
            tree = ast.parse(stripped[start:end + 1], mode="eval").body
        except SyntaxError:
            return [], text
        if not isinstance(tree, ast.List) or not all(isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                                                     for c in tree.elts):
            return [], text
        calls = []
        for i, c in enumerate(tree.elts):
            try:
                args = {k.arg: ast.literal_eval(k.value) for k in c.keywords if k.arg}
            except ValueError:
                return [], text
            calls.append(ToolCall(c.func.id, args, f"call_{i}"))
        return calls, (stripped[:start] + stripped[end + 1:]).strip()
    raise ValueError(f"unknown tool call parser {parser!r}; choose one of {list(PARSERS)}")


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
