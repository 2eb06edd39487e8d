"""The studio's HTTP server: Python's ThreadingHTTPServer, the page and a JSON API, on 127.0.0.1 by default.

    GET  /config, /run          the page (static/index.html; the script picks the view by the path)
    GET  /static/<file>         its script and style sheet
    GET  /api/form?kind=rl|sft  the form of a config kind (forms.form)
    POST /api/validate          {kind, values} -> forms.check (rft train / rft sft's validation)
    POST /api/write             {kind, values, path} -> the YAML of the changed keys, written atomically (valid only)
    POST /api/start             {kind, path} -> `rft train|sft <path>` started, its output in <run>/studio.log
    GET  /api/run?dir=...       runs.read_run
    GET  /api/runs              the run folders under --runs

Any web page the user opens can send requests to a server on 127.0.0.1, so the studio defends itself as Jupyter does
(docs/monitors.md, "Studio security"): a secret token made at each start, in the URL it prints, required on every
page and API call (the page's request sets it as a SameSite=Strict cookie the page's own calls then carry; a client
may send `Authorization: token <token>`); the Host header must name the bound address or localhost (DNS rebinding);
an Origin header, when sent, must be the studio's own; a POST body must be `application/json` (a form or text/plain
POST, which a page can send without asking, is refused); configs are written only under the folder the studio was
started in, runs start and are shown only under --runs.
"""

from __future__ import annotations

import hmac
import json
import secrets
import subprocess
import sys
import threading
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from rft.studio import forms, runs

STATIC = {"studio.js": "text/javascript", "studio.css": "text/css", "index.html": "text/html"}


COOKIE = "rft_studio_token"
LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


class Forbidden(Exception):
    """A request the studio refuses (403): no token, a foreign Host or Origin, a path outside its folders."""


class BadRequest(ValueError):
    """A request that cannot be served as sent (400, its message as is): a body that is not a JSON object,
    an unknown config kind, a path that is not a YAML file. The client's fault, never called a bug in rft."""


def _inside(path: str | Path, root: Path) -> Path:
    """`path` resolved, when it lies under `root`; else Forbidden."""
    resolved = Path(path).expanduser().resolve()
    if resolved != root and root not in resolved.parents:
        raise Forbidden(f"{str(path)!r} is outside {str(root)!r}, the only folder this studio uses for that")
    return resolved


class Studio:
    """What the handlers share: the folder of runs to list, the folder configs are written under, the token, the
    runs this server started."""

    def __init__(self, runs_dir: str | Path, workdir: str | Path | None = None, host: str = "127.0.0.1"):
        self.runs_dir = Path(runs_dir).expanduser().resolve()
        self.workdir = Path(workdir or Path.cwd()).expanduser().resolve()
        self.token = secrets.token_urlsafe(24)
        self.hosts = LOCAL_NAMES | {host.strip("[]")}
        self.started: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()

    def start(self, kind: str, path: str) -> dict:
        from rft.trainer.configure import load_config, load_sft_config

        if kind not in forms.KINDS:
            raise BadRequest(f"unknown config kind {kind!r}; one of {list(forms.KINDS)}")
        path = str(_inside(path, self.workdir))
        cfg = (load_config if kind == "rl" else load_sft_config)(path)  # what the run will refuse, refused now
        out = Path(cfg.trainer.default_local_dir)
        _inside(out, self.runs_dir)
        out.mkdir(parents=True, exist_ok=True)
        with self.lock:
            running = self.started.get(str(out.resolve()))
            if running is not None and running.poll() is None:
                raise BadRequest(f"this studio already runs a command in {out} (pid {running.pid}); wait "
                                 "for it to finish or stop it")
            log = (out / runs.LOG).open("w", encoding="utf-8")
            process = subprocess.Popen([sys.executable, "-m", "rft", forms.KINDS[kind][2], str(path)],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
            log.close()
            self.started[str(out.resolve())] = process
        return {"run_dir": str(out), "pid": process.pid}

    def run_view(self, folder: str) -> dict:
        _inside(folder, self.runs_dir)
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

        def _guard(self, query: dict, needs_token: bool = True) -> bool:
            """Refuse (403) a foreign Host or Origin and, where `needs_token`, a request without the token;
            returns whether the token came in the query (a page then sets it as a cookie)."""
            host = self.headers.get("Host") or ""
            name = urlparse(f"//{host}").hostname or ""
            if name not in studio.hosts:
                raise Forbidden(f"Host {host!r} is not this studio's address")
            origin = self.headers.get("Origin")
            if origin is not None and origin != f"http://{host}":
                raise Forbidden(f"Origin {origin!r} is not this studio's")
            if not needs_token:
                return False
            given = query.get("token")
            if given is None:
                auth = self.headers.get("Authorization") or ""
                given = auth[len("token "):] if auth.startswith("token ") else None
            from_query = given is not None
            if given is None:
                cookie = SimpleCookie(self.headers.get("Cookie") or "")
                given = cookie[COOKIE].value if COOKIE in cookie else None
            if given is None or not hmac.compare_digest(given, studio.token):
                raise Forbidden("no valid token: open the URL rft studio printed (it carries the token)")
            return from_query

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            try:
                page = url.path in ("/", "/config", "/run")
                if self._guard(query, needs_token=not url.path.startswith("/static/")) and page:
                    body = _static("index.html")
                    self.send_response(200)
                    self.send_header("Set-Cookie", f"{COOKIE}={studio.token}; Path=/; HttpOnly; SameSite=Strict")
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("Cache-Control", "no-store")
                    self.end_headers()
                    self.wfile.write(body)
                elif page:
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
            except Forbidden as e:
                self._json({"error": str(e)}, HTTPStatus.FORBIDDEN)
            except (ValueError, OSError) as e:
                self._json({"error": str(e)}, HTTPStatus.BAD_REQUEST)

        def do_POST(self) -> None:
            url = urlparse(self.path)
            try:
                self._guard({k: v[-1] for k, v in parse_qs(url.query).items()})
                if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
                    self._json({"error": "the request body must be JSON (Content-Type: application/json)"},
                               HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
                    return
                kind, values, path = self._body()
                if url.path == "/api/validate":
                    self._json(forms.check(kind, values))
                elif url.path == "/api/write":
                    self._json(self._write(kind, values, path))
                elif url.path == "/api/start":
                    self._json(studio.start(kind, path))
                else:
                    self._json({"error": f"no such action: {url.path}"}, HTTPStatus.NOT_FOUND)
            except Forbidden as e:
                self._json({"error": str(e)}, HTTPStatus.FORBIDDEN)
            except BadRequest as e:
                self._json({"error": str(e)}, HTTPStatus.BAD_REQUEST)
            except Exception as e:  # the page shows the line; the server keeps serving
                from rft.errors import describe_failure

                self._json({"error": describe_failure(e)}, HTTPStatus.BAD_REQUEST)

        def _body(self) -> tuple[str, dict, str]:
            """The POST body's {kind, values, path}, each of its type, or BadRequest saying what is wrong."""
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = self.headers.get("Content-Length")
                raise BadRequest(f"Content-Length {length!r} is not a number") from None
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError as e:
                raise BadRequest(f"the request body is not JSON ({e}); send a JSON object") from None
            if not isinstance(body, dict):
                raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
            kind, values, path = body.get("kind", "rl"), body.get("values") or {}, body.get("path") or ""
            if kind not in forms.KINDS:
                raise BadRequest(f"unknown config kind {kind!r}; one of {list(forms.KINDS)}")
            if not isinstance(values, dict) or not isinstance(path, str):
                raise BadRequest("'values' must be a JSON object of config keys and 'path' a string")
            return kind, values, path

        def _write(self, kind: str, values: dict, path: str) -> dict:
            from rft.fsutil import write_text_atomic

            if not path.endswith((".yaml", ".yml")):
                raise BadRequest(f"the config file must end in .yaml, got {path!r}")
            _inside(path, studio.workdir)
            result = forms.check(kind, values)
            if not result["ok"]:
                raise BadRequest(f"not written: the config is not valid ({result['error']})")
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            header = f"# written by rft studio; run it with: {forms.form(kind)['command']} {path}\n"
            write_text_atomic(Path(path).expanduser(), header + result["yaml"])
            return {"path": path, "yaml": result["yaml"]}

    return Handler


def make_server(host: str = "127.0.0.1", port: int = 0, runs_dir: str | Path = "runs") -> ThreadingHTTPServer:
    """The studio's server, bound (port 0: a free port, `server.server_address[1]`) but not serving yet."""
    studio = Studio(runs_dir, host=host)
    server = ThreadingHTTPServer((host, port), make_handler(studio))
    server.daemon_threads = True
    server.studio = studio  # type: ignore[attr-defined]
    return server


def beyond_this_machine(host: str) -> str | None:
    """How far a server bound to `host` reaches beyond this machine, for the line that says so: "every interface"
    (0.0.0.0, ::), "HOST" (an address or name that is not loopback), None for loopback."""
    import ipaddress

    name = host.strip("[]")
    if name in ("", "0.0.0.0", "::"):
        return f"every interface ({name or '0.0.0.0'})"
    try:
        return None if ipaddress.ip_address(name).is_loopback else name
    except ValueError:  # a host name
        return None if name == "localhost" else name


def serve(host: str = "127.0.0.1", port: int = 8501, runs_dir: str | Path = "runs", open_browser: bool = False) -> None:
    forms.check("rl", {}, check_paths=False)  # imports the validation now, not on the first request
    server = make_server(host, port, runs_dir)
    url = f"http://{host}:{server.server_address[1]}"
    token = server.studio.token  # type: ignore[attr-defined]
    print(f"rft studio: {url}/config?token={token} (config generator), {url}/run?token={token} (run view of "
          f"{Path(runs_dir).resolve()}); Ctrl-C stops it", flush=True)
    reach = beyond_this_machine(host)
    if reach:
        print(f"rft studio: serving {reach} on port {server.server_address[1]}: other machines that reach it can "
              "connect, and every request needs the token in the URLs above (keep them private)", flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(f"{url}/config?token={token}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # the runs it started go on (their own sessions); their folders show them
        print("rft studio: stopped", flush=True)
    finally:
        server.server_close()
