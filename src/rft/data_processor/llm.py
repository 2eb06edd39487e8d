"""Data-Juicer's LLM operators (llm_difficulty_score_filter, llm_quality_score_filter, ...) with a model rft serves.

Those operators ask an OpenAI-compatible server (`api_or_hf_model` names the model; `model_params.base_url`, else
$OPENAI_BASE_URL, says where it is), or load the model themselves (`is_hf_model` / `enable_vllm`, in Data-Juicer's
environment). Trinity-RFT's documented example names a hosted model. Here `api_or_hf_model` may be a local model
folder instead: the run serves it with rft's `hf` engine on 127.0.0.1 (the explorer's OpenAI-compatible endpoint,
`rft.explorer.server`) for as long as the pipeline runs, and the operator is pointed there. A name that is neither a
local folder nor reachable through a base URL is refused where a run's config is checked, before any model loads
(`unserved`; `rft config show` notes it, as the base URL's variable may be set where the run starts).

Every request such an operator makes is bounded: the OpenAI client's own `timeout`, which Data-Juicer passes on from
`model_params` (rft's default DEFAULT_TIMEOUT_S where it is not given; the client's would be 600 s, tried 3 times, and
Data-Juicer tries each row 3 times and scores an unanswered one 0). A request that gets no answer within it ends the
operator's run with one line naming the server and that key (`dj_worker.py`), not rows scored 0 one after another.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

MODEL_ARG = "api_or_hf_model"
BASE_URL_ENV = ("OPENAI_BASE_URL", "OPENAI_API_URL", "DASHSCOPE_BASE_URL")
"""Where Data-Juicer's API models find their server when model_params names none (its own order)."""

DEFAULT_MODEL = "gpt-4o"
"""Data-Juicer's default api_or_hf_model for its llm_* operators (a hosted model: no server here answers for it)."""

TIMEOUT_ARG = "timeout"
"""The key of model_params that bounds each request (the OpenAI client's constructor argument)."""
DEFAULT_TIMEOUT_S = 120.0
"""rft's default for model_params.timeout: seconds a model server may take to answer one request of an LLM
operator (a judge's verdict: a short reply), each try of the client's max_retries + 1."""

Serve = Callable[[str], str]
"""A local model folder -> the base URL (http://127.0.0.1:PORT/v1) of an OpenAI-compatible endpoint serving it
under that folder's name as given."""


def _api_mode(args: dict) -> bool:
    return not args.get("is_hf_model") and not args.get("enable_vllm")


def asks_a_server(name: str, args: dict) -> bool:
    """The operator asks an OpenAI-compatible server (an LLM operator not loading the model itself)."""
    return (MODEL_ARG in args or name.startswith("llm_")) and _api_mode(args)


def served_folder(args: dict) -> str | None:
    """The local model folder rft serves for this operator's args, None when it asks a server of its own or loads
    the model itself."""
    model = args.get(MODEL_ARG)
    params = args.get("model_params") or {}
    if not isinstance(model, str) or not _api_mode(args) or params.get("base_url"):
        return None
    return model if (Path(model) / "config.json").is_file() else None


def check_llm_args(name: str, args: dict) -> None:
    """An LLM operator whose model_params is no mapping, or whose model_params.timeout is no positive number, is a
    ValueError (one line). Whether a server answers for its model depends on where it runs: `unserved`."""
    if not asks_a_server(name, args):
        return
    params = args.get("model_params") or {}
    if not isinstance(params, dict):
        raise ValueError(f"{name}: model_params must be a mapping, got {params!r}")
    timeout = params.get(TIMEOUT_ARG, DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"{name}: model_params.{TIMEOUT_ARG}={timeout!r} must be a number of seconds > 0 (each "
                         f"request to the model server; default {DEFAULT_TIMEOUT_S:g})")


def unserved(name: str, args: dict) -> str | None:
    """Why no server will answer this LLM operator's model here (its name is no local model folder, no base URL in
    model_params, none of BASE_URL_ENV set), in one line; None where one will. A run refuses it before any model
    loads; `rft config show` notes it (the variable may be set where the run starts)."""
    if not asks_a_server(name, args):
        return None
    model = args.get(MODEL_ARG, DEFAULT_MODEL)
    params = args.get("model_params") or {}
    if served_folder(args) or (isinstance(params, dict) and params.get("base_url")) or any(
            os.environ.get(v) for v in BASE_URL_ENV):
        return None
    hint = (f" ({model} is a folder without config.json)" if isinstance(model, str) and Path(model).is_dir()
            else "")
    default = "" if MODEL_ARG in args else " (Data-Juicer's default)"
    return (f"{name}: {MODEL_ARG}={model!r}{default} is no local model folder{hint} and no OpenAI-compatible server "
            f"is named for it (model_params.base_url, or ${BASE_URL_ENV[0]}): give a model folder (rft serves it on "
            "127.0.0.1 with its hf engine) or the address of a server that serves that model")


def with_served_models(process: list[dict], serve: Serve | None) -> list[dict]:
    """Data-Juicer's process list as the run sends it: each served folder's operator pointed at rft's endpoint for
    it, and each request of an operator that asks a server bounded (model_params.timeout, DEFAULT_TIMEOUT_S unless
    given)."""
    out = []
    for spec in process:
        (name, args), = spec.items()
        problem = unserved(name, args)
        if problem is not None:
            raise ValueError(problem)
        folder = served_folder(args)
        if folder is not None:
            if serve is None:
                raise ValueError(f"{name}: {MODEL_ARG}={folder!r} is served by the run, which is not serving models "
                                 "here")
            params = {**(args.get("model_params") or {}), "base_url": serve(folder), "api_key": "rft"}
            args = {**args, "model_params": params}
        if asks_a_server(name, args):
            args = {**args, "model_params": {TIMEOUT_ARG: DEFAULT_TIMEOUT_S, **(args.get("model_params") or {})}}
        out.append({name: args})
    return out
