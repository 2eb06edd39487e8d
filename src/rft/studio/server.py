"""The studio's HTTP server: Python's ThreadingHTTPServer, the page and a JSON API, on 127.0.0.1 by default.

    GET  /config, /run          the page (static/index.html; the script picks the view by the path)
    GET  /static/<file>         its script and style sheet
    GET  /api/form?kind=rl|sft  the form of a config kind (forms.form)
    POST /api/validate          {kind, values} -> forms.check (rft train / rft sft's validation)
    POST /api/write             {kind, values, path} -> the YAML of the changed keys, written atomically (valid only)
    POST /api/start             {kind, path} -> `rft train|sft <path>` started, its output in <run>/studio.log
    GET  /api/run?dir=...       runs.read_run
    GET  /api/runs              the run folders under --runs
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from rft.studio import forms, runs

STATIC = {"studio.js": "text/javascript", "studio.css": "text/css", "index.html": "text/html"}


class Studio:
    """What the handlers share: the folder of runs to list, the runs this server started."""

    def __init__(self, runs_dir: str | Path):
        self.runs_dir = Path(runs_dir)
        self.started: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()

    def start(self, kind: str, path: str) -> dict:
        from rft.config import load_config, load_sft_config

        if kind not in forms.KINDS:
            raise ValueError(f"unknown config kind {kind!r}")
        cfg = (load_config if kind == "rl" else load_sft_config)(path)  # what the run will refuse, refused now
        out = Path(cfg.trainer.default_local_dir)
        out.mkdir(parents=True, exist_ok=True)
        with self.lock:
            running = self.started.get(str(out.resolve()))
            if running is not None and running.poll() is None:
                raise ValueError(f"this studio already runs a command in {out} (pid {running.pid})")
            log = (out / runs.LOG).open("w", encoding="utf-8")
            process = subprocess.Popen([sys.executable, "-m", "rft", forms.KINDS[kind][2], str(path)],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
            log.close()
            self.started[str(out.resolve())] = process
        return {"run_dir": str(out), "pid": process.pid}

    def run_view(self, folder: str) -> dict:
        view = runs.read_run(folder)
        process = self.started.get(str(Path(folder).expanduser().resolve()))
        if process is not None:
            code = process.poll()
            view["process"] = {"pid": process.pid, "exit_code": code}
            if code is None and view["status"] != "failed":
                view["status"] = "running"
            elif code not in (None, 0) and view["status"] != "failed":
                view["status"] = "failed"
        return view

    def stop(self) -> None:
        for process in self.started.values():
            if process.poll() is None:
                process.terminate()


def _static(name: str) -> bytes:
    return resources.files("rft.studio").joinpath("static", name).read_bytes()


def make_handler(studio: Studio) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "rft-studio"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the page polls every few seconds
            pass

        def _send(self, body: bytes, content_type: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type + "; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, value: Any, status: int = 200) -> None:
            self._send(json.dumps(value).encode(), "application/json", status)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            try:
                if url.path in ("/", "/config", "/run"):
                    self._send(_static("index.html"), "text/html")
                elif url.path.startswith("/static/") and url.path.removeprefix("/static/") in STATIC:
                    name = url.path.removeprefix("/static/")
                    self._send(_static(name), STATIC[name])
                elif url.path == "/api/form":
                    self._json(forms.form(query.get("kind", "rl")))
                elif url.path == "/api/run":
                    self._json(studio.run_view(query.get("dir", "")))
                elif url.path == "/api/runs":
                    self._json({"root": str(studio.runs_dir), "runs": runs.list_runs(studio.runs_dir)})
                else:
                    self._json({"error": f"no such page: {url.path}"}, HTTPStatus.NOT_FOUND)
            except (ValueError, OSError) as e:
                self._json({"error": str(e)}, HTTPStatus.BAD_REQUEST)

        def do_POST(self) -> None:
            url = urlparse(self.path)
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                kind = body.get("kind", "rl")
                if url.path == "/api/validate":
                    self._json(forms.check(kind, body.get("values") or {}))
                elif url.path == "/api/write":
                    self._json(self._write(kind, body.get("values") or {}, body.get("path") or ""))
                elif url.path == "/api/start":
                    self._json(studio.start(kind, body.get("path") or ""))
                else:
                    self._json({"error": f"no such action: {url.path}"}, HTTPStatus.NOT_FOUND)
            except Exception as e:  # the page shows the line; the server keeps serving
                from rft.errors import describe_failure

                self._json({"error": describe_failure(e)}, HTTPStatus.BAD_REQUEST)

        def _write(self, kind: str, values: dict, path: str) -> dict:
            from rft.fsutil import write_text_atomic

            if not path.endswith((".yaml", ".yml")):
                raise ValueError(f"the config file must end in .yaml, got {path!r}")
            result = forms.check(kind, values)
            if not result["ok"]:
                raise ValueError(f"not written: the config is not valid ({result['error']})")
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            header = f"# written by rft studio; run it with: {forms.form(kind)['command']} {path}\n"
            write_text_atomic(Path(path).expanduser(), header + result["yaml"])
            return {"path": path, "yaml": result["yaml"]}

    return Handler


def make_server(host: str = "127.0.0.1", port: int = 0, runs_dir: str | Path = "runs") -> ThreadingHTTPServer:
    """The studio's server, bound (port 0: a free port, `server.server_address[1]`) but not serving yet."""
    studio = Studio(runs_dir)
    server = ThreadingHTTPServer((host, port), make_handler(studio))
    server.daemon_threads = True
    server.studio = studio  # type: ignore[attr-defined]
    return server


def serve(host: str = "127.0.0.1", port: int = 8501, runs_dir: str | Path = "runs", open_browser: bool = False) -> None:
    forms.check("rl", {}, check_paths=False)  # imports the validation now, not on the first request
    server = make_server(host, port, runs_dir)
    url = f"http://{host}:{server.server_address[1]}"
    print(f"rft studio: {url}/config (config generator), {url}/run (run view of {Path(runs_dir).resolve()}); "
          "Ctrl-C stops it", flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(f"{url}/config")
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # the runs it started go on (their own sessions); their folders show them
        print("rft studio: stopped", flush=True)
    finally:
        server.server_close()
