"""`rft studio` as a real server for the tests: started on 127.0.0.1 on a free port by the test, stopped by it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

TOKENS: dict[str, str] = {}
"""The token of each running studio, by base URL: `get` and `post` send it (`Authorization: token ...`)."""


@contextmanager
def studio(runs_dir: Path, cwd: Path):
    """The base URL of a running `rft studio --port 0 --runs runs_dir` (cwd `cwd`); its token is `TOKENS[url]`."""
    process = subprocess.Popen([sys.executable, "-m", "rft", "studio", "--host", "127.0.0.1", "--port", "0",
                                "--runs", str(runs_dir)], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+)/config\?token=([\w-]+)", line)
        assert match, f"rft studio printed {line!r}"
        TOKENS[match[1]] = match[2]
        yield match[1]
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stdout.close()


def _auth(url: str) -> dict[str, str]:
    return next(({"Authorization": f"token {t}"} for base, t in TOKENS.items() if url.startswith(base)), {})


def get(url: str) -> dict:
    with urllib.request.urlopen(urllib.request.Request(url, headers=_auth(url)), timeout=60) as response:
        return json.loads(response.read())


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json",
                                                                      **_auth(url)})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_for(predicate, timeout: float = 240.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"still not true after {timeout} s")
        time.sleep(every)
