"""Data-Juicer's filters in the experience pipeline (Trinity-RFT's `data_juicer` operator): each explore step's
experiences become rows (`text`: the response; `prompt`, `response`, `reward`), Data-Juicer's filters compute their
stats and say which to keep; the stats land in each experience's `info` (where a later reward_shaping_mapper reads
them: `stats_key: text_len`), the experiences a filter drops leave the step.

Data-Juicer runs in an environment of its own, through a worker process of the run (`dj_worker.py`, JSON lines
over its stdin / stdout, started at the first step and ended with the run; or the same worker as an HTTP server,
Trinity-RFT's service.data_juicer: started by the run with auto_start, or already running at server_url):
py-data-juicer 1.6.1 installs packages into the running environment when it misses one and declares dependencies
it does not install (docs/workflows.md has the measurements). Its interpreter is `args.python`, else
data_processor.data_juicer.python, else $RFT_DATA_JUICER_PYTHON; `make data-juicer` builds one (.venv-dj).

A bad argument or recipe is a ValueError where the operator is built (the config check's one line); what goes
wrong where Data-Juicer runs (no interpreter, an unknown operator, a worker that ends, a server that does not
answer) is a `DataJuicerError`: the config check's line when the check meets it, the run's when a run does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from rft.data_processor.experience import EXPERIENCE_OPERATORS
from rft.data_processor.llm import Serve, check_llm_args, unserved, with_served_models
from rft.errors import RftError
from rft.experience import Experience

PYTHON_ENV = "RFT_DATA_JUICER_PYTHON"
WORKER = Path(__file__).with_name("dj_worker.py")
OFFLINE = {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1"}
"""Belt and braces beside the worker's own refusal: no package index for any install Data-Juicer might attempt."""
SERVER_START_S = 120
"""How long a server the run starts (auto_start) may take to answer: Data-Juicer's imports take 2-8 s here."""
REQUEST_S = 600
"""One step's rows through a server: the bound on its answer."""
PROBE_S = 5
"""Whether a server at server_url is there (a connection, where the config is checked): the bound."""


class DataJuicerError(RftError, ValueError):
    """Data-Juicer, where it runs, refused or failed: the user's environment or operators, not a bug in rft."""


@EXPERIENCE_OPERATORS.register("data_juicer")
class DataJuicerOperator:
    """Trinity-RFT's data_juicer experience operator: `operators` (Data-Juicer's process list, [{name: {args}}])
    or `config_path` (a Data-Juicer recipe whose `process` is that list); `python`: the interpreter of the
    environment that holds py-data-juicer (rft's key; else data_processor.data_juicer.python, else
    $RFT_DATA_JUICER_PYTHON). Where Data-Juicer runs is data_processor.data_juicer (`configure`): a worker process
    over pipes (the default), a server the run starts (auto_start), or one already running (server_url)."""

    def __init__(self, operators: list[dict] | None = None, config_path: str | None = None,
                 python: str | None = None):
        self.worker: subprocess.Popen | None = None
        if (operators is None) == (config_path is None):
            raise ValueError("give one of operators (Data-Juicer's process list) or config_path (a Data-Juicer "
                             "recipe)")
        self.process_list = _process_list(operators, config_path)
        for spec in self.process_list:
            check_llm_args(*next(iter(spec.items())))
        self.python, self.url, self.port = python, None, None
        self.serve: Serve | None = None
        """Serves a local model folder an LLM operator names (`rft.data_processor.llm`); set by the run."""
        self._sent = self.process_list  # what Data-Juicer was given: with the addresses of the models served

    def unavailable(self) -> str | None:
        """Why this operator cannot run here, in one line: an LLM operator no model server answers for (`rft.
        data_processor.llm.unserved`), no Data-Juicer environment (its interpreter), or the server at server_url
        not answering; None when it can. A run refuses it before any model loads; `rft config show` notes it."""
        problem = next(filter(None, (unserved(*next(iter(spec.items()))) for spec in self.process_list)), None)
        if problem is not None:
            return problem
        if self.url is None or self.port is not None:  # Data-Juicer runs in a process the run starts
            try:
                self._interpreter()
            except DataJuicerError as e:
                return str(e)
            return None
        from urllib.parse import urlsplit

        where = urlsplit(self.url)  # a server already running, at server_url
        try:
            socket.create_connection((where.hostname, where.port or 80), timeout=PROBE_S).close()
        except OSError as e:
            return (f"the Data-Juicer server at {self.url} does not answer ({e}): start it (`python -I "
                    ".../rft/data_processor/dj_worker.py --port PORT` in the Data-Juicer environment) or set "
                    "data_processor.data_juicer.auto_start")
        return None

    def configure(self, service) -> None:
        """data_processor.data_juicer: the interpreter, and whether Data-Juicer is a server (started here with
        auto_start, or at server_url)."""
        self.python = self.python or service.python
        if service.auto_start:
            own = f"http://127.0.0.1:{service.port}"
            if service.server_url not in (None, own, own + "/"):
                raise ValueError(f"data_processor.data_juicer.auto_start starts the server at {own}, but server_url="
                                 f"{service.server_url!r}: give that address, or auto_start false to use a running "
                                 "server")
            self.url, self.port = own, service.port
        elif service.server_url:
            self.url = service.server_url.rstrip("/")

    def _interpreter(self) -> str:
        python = self.python or os.environ.get(PYTHON_ENV)
        if not python:
            raise DataJuicerError(f"Data-Juicer runs in a Python environment of its own (py-data-juicer cannot share "
                                  f"rft's, docs/workflows.md): build one (`make data-juicer`, or pip install "
                                  f"py-data-juicer aiohttp ray in a venv) and set {PYTHON_ENV} (or "
                                  "data_processor.data_juicer.python) to its python")
        if not Path(python).is_file():
            raise DataJuicerError(f"the Data-Juicer interpreter {python} does not exist (data_processor.data_juicer."
                                  f"python / {PYTHON_ENV})")
        return python

    # ------------------------------------------------------------------------------------- the worker
    def _start(self, check: bool = False) -> None:
        """Start (or reach) where Data-Juicer runs; `check`: only to load the operators (no model is served)."""
        self._sent = self.process_list if check else with_served_models(self.process_list, self.serve)
        if self.url is not None and self.port is None:  # a server already running: nothing to start
            self._post([])
            return
        # -I: isolated, so the worker's folder (this one, which holds data_juicer.py) does not shadow the package
        server = ["--port", str(self.port), "--with-parent"] if self.port else []
        command = [self._interpreter(), "-I", str(WORKER), *server]
        self.worker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       env={**os.environ, **OFFLINE})
        if self.port is None:
            self._ask({"cmd": "load", "process": self._sent})
            return
        deadline = time.monotonic() + SERVER_START_S
        while True:  # the server is up once it answers
            try:
                self._post([], starting=True)
                return
            except ConnectionError:
                if self.worker.poll() is not None or time.monotonic() > deadline:
                    code = self.worker.poll()
                    self.close()
                    raise DataJuicerError(f"the Data-Juicer server the run started on 127.0.0.1:{self.port} did not "
                                          f"answer within {SERVER_START_S} s (" + (f"it exited with code {code}; its "
                                          "output is above" if code is not None else "still starting") + ")") from None
                time.sleep(0.5)

    def _post(self, rows: list[dict], tasks: bool = False, starting: bool = False) -> dict:
        """One request to the Data-Juicer server: its answer; `starting` (the server the run starts): a
        ConnectionError while nothing answers there yet."""
        import urllib.error
        import urllib.request

        body = json.dumps({"process": self._sent, "rows": rows, "tasks": tasks}, default=str).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_S) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            raise DataJuicerError(json.loads(e.read()).get("error", str(e))) from None
        except (urllib.error.URLError, OSError) as e:
            if starting:
                raise ConnectionError(str(e)) from None
            why = f"no answer within {REQUEST_S} s" if isinstance(e, TimeoutError) else getattr(e, "reason", e)
            if self.port is not None:  # the run's own server, which answered when it started
                raise DataJuicerError(f"the Data-Juicer server the run started at {self.url} stopped answering "
                                      f"({why}); its output is above") from None
            raise DataJuicerError(f"the Data-Juicer server at {self.url} does not answer ({why}): start it (`python -I "
                                  ".../rft/data_processor/dj_worker.py --port PORT` in the Data-Juicer environment) or "
                                  "set data_processor.data_juicer.auto_start") from None

    def _ask(self, request: dict) -> dict:
        assert self.worker is not None and self.worker.stdin is not None and self.worker.stdout is not None
        try:
            self.worker.stdin.write(json.dumps(request, default=str) + "\n")
            self.worker.stdin.flush()
            line = self.worker.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            code = self.worker.wait()
            raise DataJuicerError(f"the Data-Juicer worker ({self.worker.args[0]}) ended with exit code {code}; its "
                                       "output is above")
        answer = json.loads(line)
        if "error" in answer:
            self.close()
            raise DataJuicerError(answer["error"])
        return answer

    def check(self) -> None:
        """Load the operators where Data-Juicer runs, then stop what was started: an unknown name or bad
        arguments are one line before any model loads (2-8 s: the worker's imports)."""
        try:
            self._start(check=True)
        finally:
            self.close()

    def close(self) -> None:
        if self.worker is not None:
            if self.worker.poll() is None:
                if self.port is not None:
                    self.worker.terminate()
                self.worker.stdin.close()
                try:
                    self.worker.wait(10)
                except subprocess.TimeoutExpired:
                    self.worker.kill()
                    self.worker.wait()
            self.worker = None

    def __del__(self):
        self.close()

    # ---------------------------------------------------------------------------------- the operator
    def run(self, rows: list[dict], tasks: bool = False) -> dict:
        """Data-Juicer's {"stats", "keep"} over `rows`; `tasks`: through its dataset path with each operator's
        num_proc processes (a taskset), else in the worker's process (a step's experiences)."""
        if self.worker is None and (self.url is None or self.port is not None):  # nothing started yet
            self._start()
        if self.url is not None:
            return self._post(rows, tasks)
        return self._ask({"cmd": "tasks" if tasks else "run", "rows": rows})

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        if not experiences:
            return experiences, {}
        rows = [{"text": e.info.get("response_text", ""), "prompt": _prompt(e), "response":
                 e.info.get("response_text", ""), "reward": e.reward} for e in experiences]
        answer = self.run(rows)
        kept = []
        for e, stats, keep in zip(experiences, answer["stats"], answer["keep"]):
            e.info.update(stats)
            if keep:
                kept.append(e)
        return kept, {"data_juicer/kept": float(len(kept)), "data_juicer/dropped": float(len(experiences) - len(kept))}


def _prompt(e: Experience) -> str:
    raw = e.info.get("raw_prompt")
    if isinstance(raw, list):
        return "\n".join(str(m.get("content", "")) for m in raw if isinstance(m, dict))
    return str(raw or "")


def _process_list(operators: Any, config_path: str | None) -> list[dict]:
    """Data-Juicer's process list: `operators`, or the `process` of the recipe at `config_path`; each entry one
    {operator name: {args}}."""
    where = "operators"
    if config_path is not None:
        import yaml

        where = f"config_path {config_path}"
        try:
            recipe = yaml.safe_load(Path(config_path).read_text())
        except OSError as e:
            raise ValueError(f"{where}: cannot be read ({e.strerror})") from None
        except yaml.YAMLError as e:
            raise ValueError(f"{where} does not parse as YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(recipe, dict) or not isinstance(recipe.get("process"), list):
            raise ValueError(f"{where} has no `process` list (Data-Juicer's operators)")
        operators = recipe["process"]
    if not isinstance(operators, list) or not operators:
        raise ValueError(f"{where}: a non-empty list of Data-Juicer operators, each {{name: {{args}}}}")
    for i, op in enumerate(operators):
        if not (isinstance(op, dict) and len(op) == 1 and isinstance(next(iter(op)), str)
                and isinstance(next(iter(op.values())) or {}, dict)):
            raise ValueError(f"{where}[{i}] must be one {{operator name: {{args}}}}, got {op!r}")
    return [{name: args or {}} for op in operators for name, args in op.items()]
