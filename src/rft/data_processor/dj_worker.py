"""Data-Juicer's filters in a process of their own: run by the interpreter of an environment that holds
py-data-juicer (never rft's: see docs/workflows.md), started by `rft.data_processor.data_juicer`. Imports nothing of
rft. One JSON object per line on stdin, one answer per line on stdout:

    {"cmd": "load", "process": [{"text_length_filter": {...}}, ...]}  ->  {"ops": ["text_length_filter", ...]}
    {"cmd": "run", "rows": [{"text": ..., ...}, ...]}                  ->  {"stats": [{...}, ...], "keep": [...]}
    {"cmd": "tasks", "rows": [...]}                                    ->  {"stats": [...], "keep": [...]}

("run": the experiences of a step, each operator's stats computed over the rows in this process; "tasks": a
taskset through Data-Juicer's own dataset path, `Filter.run`, with each operator's `num_proc` processes as
Data-Juicer runs a recipe)

or {"error": "..."}. With `--port PORT [--with-parent]` it serves the same over HTTP on 127.0.0.1 instead (Trinity-RFT's
service.data_juicer): POST a JSON {"process": [...], "rows": [...], "tasks": false} and get {"stats", "keep"} back (400 with
{"error"}); GET / answers {"ok": true}. Data-Juicer installs a package it misses at run time (its LazyLoader runs `uv pip install` /
`pip install` into the running environment, with no switch to turn it off): refused here, so a missing package
is an error line, not a download. A model server that leaves an LLM operator's request unanswered within its
model_params.timeout ends the operator's run with an error naming it (`_bound_requests`), where Data-Juicer would
score that row 0 and go on to the next."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _no_installs() -> None:
    from data_juicer.utils.lazy_loader import LazyLoader

    def refuse(cls, package_spec, pip_args=None):
        raise subprocess.CalledProcessError(1, ["rft: Data-Juicer's installs at run time are off", package_spec])

    LazyLoader._install_package = classmethod(refuse)


SILENT_ENV = "RFT_DJ_SILENT"
"""The file that records a model server which left a request unanswered, shared by the worker's processes
(Data-Juicer's num_proc processes inherit its path)."""


def _bound_requests() -> None:
    """Data-Juicer's LLM operators ask their server through `openai.OpenAI(**model_params)` and score a row whose
    request fails 0 (after try_num tries); a server that never answers would cost every row its timeouts. Here the
    first request that times out (the client's timeout and retries, model_params.timeout / max_retries) is
    recorded in SILENT_ENV's file, every later request gives up at once (an empty reply), and the worker answers
    with `_silent_error` instead of the scores."""
    import atexit
    import shutil

    try:
        import httpx
        import openai
    except ImportError:  # no LLM operator can run here: Data-Juicer says so when one is loaded
        return

    class Bounded(openai.OpenAI):
        def post(self, path, *, cast_to, **kwargs):
            if cast_to is not httpx.Response or kwargs.get("stream"):  # not the chat request of an LLM filter
                return super().post(path, cast_to=cast_to, **kwargs)
            mark = Path(os.environ[SILENT_ENV])
            if not mark.exists():
                try:
                    return super().post(path, cast_to=cast_to, **kwargs)
                except openai.APITimeoutError:
                    timeout = getattr(self.timeout, "read", self.timeout)
                    mark.write_text(json.dumps({"url": str(self.base_url).rstrip("/"), "timeout": timeout,
                                                "tries": self.max_retries + 1}))
            return httpx.Response(200, json={})

    openai.OpenAI = Bounded
    folder = tempfile.mkdtemp(prefix="rft-dj-")
    atexit.register(shutil.rmtree, folder, True)
    os.environ[SILENT_ENV] = os.path.join(folder, "silent")


def _silent_error(process: list[dict]) -> dict | None:
    """The error answer when a model server left a request of `process`'s operators unanswered (`_bound_requests`),
    naming the server, the operators that ask it and the key that bounds the wait; None otherwise."""
    mark = os.environ.get(SILENT_ENV)
    if not mark or not os.path.exists(mark):
        return None
    mark = Path(mark)
    silent = json.loads(mark.read_text())
    mark.unlink()
    default = os.environ.get("OPENAI_BASE_URL") or ""
    names = [name for spec in process for name, args in spec.items()
             if str((args.get("model_params") or {}).get("base_url") or default).rstrip("/") == silent["url"]]
    names = names or [name for spec in process for name in spec]
    timeout = silent["timeout"]
    within = f"{timeout:g} s" if isinstance(timeout, (int, float)) else str(timeout)
    return {"error": f"the model server at {silent['url']} did not answer {' / '.join(names)} within {within} "
                     f"({silent['tries']} tries: model_params.timeout, model_params.max_retries): check that it serves "
                     "that model, or raise model_params.timeout"}


class Filters:
    """Data-Juicer's filters of one process list, loaded once; `run` over rows."""

    def __init__(self, process: list[dict]):
        from data_juicer.ops import load_ops
        from data_juicer.ops.base_op import OPERATORS, Filter

        self.process = process
        self.names = [next(iter(spec)) for spec in process]
        for name in self.names:
            if name not in OPERATORS.modules:
                raise ValueError(f"Data-Juicer has no operator {name!r}")
        self.ops = load_ops(process)
        for name, op in zip(self.names, self.ops):
            if not isinstance(op, Filter):
                raise ValueError(f"{name} is a Data-Juicer {type(op).__mro__[1].__name__}, not a filter: rft runs "
                                 "Data-Juicer's filters over experiences (their stats, and which to keep); a changed "
                                 "text would have to become tokens again")

    def run(self, rows: list[dict]) -> dict:
        from data_juicer.utils.constant import Fields

        if not rows:  # a request that only loads the operators (rft's check)
            return {"stats": [], "keep": []}
        batch = {k: [r.get(k) for r in rows] for k in rows[0]}
        batch[Fields.stats] = [{} for _ in rows]
        keep = [True] * len(rows)
        for op in self.ops:
            batch = op.compute_stats_batched(batch)
            keep = [a and bool(b) for a, b in zip(keep, op.process_batched(batch))]
        return _silent_error(self.process) or {"stats": batch[Fields.stats], "keep": keep}

    def run_tasks(self, rows: list[dict]) -> dict:
        """Data-Juicer's dataset path (each filter's stats, then its selection, with its num_proc processes); the
        rows keep their index through it."""
        from data_juicer.core.data import NestedDataset
        from data_juicer.utils.constant import Fields

        if not rows:
            return {"stats": [], "keep": []}
        data = NestedDataset.from_list([{**r, ROW: i} for i, r in enumerate(rows)])
        for op in self.ops:
            data = op.run(data)
        stats = [{} for _ in rows]
        for i, s in zip(data[ROW], data[Fields.stats] if len(data) else []):
            stats[i] = s
        kept = set(data[ROW])
        return _silent_error(self.process) or {"stats": stats, "keep": [i in kept for i in range(len(rows))]}


ROW = "__rft_row__"
"""The column that carries a task's index through Data-Juicer's dataset path."""


def _error(e: Exception) -> dict:
    return {"error": str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"}


def serve(port: int, with_parent: bool) -> None:
    """The HTTP mode; `with_parent`: end when the process that started this one is gone (a run's own server,
    auto_start), so a run killed outright leaves no server holding its port."""
    import os
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    if with_parent:
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()

    loaded: dict[str, Filters] = {}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict) -> None:
            data = json.dumps(body, default=float).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer(200, {"ok": True})

        def do_POST(self):
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                key = json.dumps(req["process"], sort_keys=True)
                if key not in loaded:
                    loaded[key] = Filters(req["process"])
                filters = loaded[key]
                rows = req.get("rows", [])
                answer = filters.run_tasks(rows) if req.get("tasks") else filters.run(rows)
                self._answer(400 if "error" in answer else 200, answer)
            except Exception as e:
                self._answer(400, _error(e))

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    print(f"rft Data-Juicer server on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever Data-Juicer prints stays off the answer channel
    import logging

    for name in ("httpx", "httpx2", "openai"):  # a line per request an LLM operator makes
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        _no_installs()
        _bound_requests()
        import data_juicer.ops  # noqa: F401 - registers the operators
    except Exception as e:
        out.write(json.dumps({"error": f"Data-Juicer does not import here ({type(e).__name__}: {e})"}) + "\n")
        out.flush()
        return
    if len(sys.argv) >= 3 and sys.argv[1] == "--port":
        serve(int(sys.argv[2]), "--with-parent" in sys.argv[3:])
        return
    filters = None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["cmd"] == "load":
                filters = Filters(req["process"])
                answer = {"ops": filters.names}
            elif req["cmd"] == "tasks":
                answer = filters.run_tasks(req["rows"])
            else:
                answer = filters.run(req["rows"])
        except Exception as e:
            answer = _error(e)
        out.write(json.dumps(answer, default=float) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
