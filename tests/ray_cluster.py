"""A real Ray cluster of two nodes on 127.0.0.1 for the tests: a head (`ray start --head`) and a second node (`ray
start --address`), each a `ray start --block` process in a session of its own, with 2 CPUs (as Ray counts them) and
a custom resource naming it (`node0`, `node1`), so an actor can be pinned to either. Stopped by signalling those two
sessions, never by `ray stop` (it stops every Ray process of the user on the machine: another test's cluster too)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rft.sync.process_group import free_port

RAY = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]
"""The `ray` command of this interpreter's Ray (its script may not be on PATH)."""
TEST_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
"""No usage reports, and no token authentication: a token in ~/.ray (which a Ray instance of rft's own writes, as
Ray does for any new local instance) turns it on for a head, and the second node then fails to join it."""
STARTED = "Ray runtime started"
"""What `ray start` prints once its node is up (with --block it then stays, watching the node's processes)."""


def _start(args: list[str], log: Path, timeout_s: float, cpus: int) -> subprocess.Popen:
    """`ray start --block <args>` in a session of its own, returned once its node is up."""
    env = {**os.environ, **TEST_ENV}
    with log.open("w") as out:
        proc = subprocess.Popen([*RAY, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus),
                                 "--num-gpus", "0", "--disable-usage-stats", *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while STARTED not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"ray start {' '.join(args)} did not start within {timeout_s} s:\n{log.read_text()}")
        time.sleep(0.2)
    return proc


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the node's session (`ray start --block` and the processes it started), SIGKILL after
    `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the node started and left in its session


@contextlib.contextmanager
def local_cluster(root: Path, timeout_s: float = 60.0, cpus: int = 2) -> Iterator[str]:
    """Yield the address (127.0.0.1:PORT) of a two-node cluster that is stopped when the block ends, however it
    ends. Logs go to `root`; each node's temp folder is a short one of its own under /tmp, removed at the end: Ray
    puts its AF_UNIX sockets at <temp>/session_<date>_<pid>/sockets/..., and a socket path is at most 107 bytes
    (pytest's tmp paths, /tmp/pytest-of-<user>/pytest-N/popen-gwN/..., leave too little of them)."""
    port = free_port()
    nodes: list[subprocess.Popen] = []
    temps = [tempfile.mkdtemp(prefix="rft-ray-", dir="/tmp") for _ in range(2)]  # two nodes on one machine: one
    # folder would have each node's log monitor pass each line of the other's processes on too
    saved = {k: os.environ.get(k) for k in TEST_ENV}
    os.environ.update(TEST_ENV)  # the test's own process connects as a driver
    try:
        nodes.append(_start(["--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", temps[0],
                             "--resources", json.dumps({"node0": 1})], root / "head.log", timeout_s, cpus))
        nodes.append(_start(["--address", f"127.0.0.1:{port}", "--temp-dir", temps[1],
                             "--resources", json.dumps({"node1": 1})],
                            root / "node1.log", timeout_s, cpus))
        yield f"127.0.0.1:{port}"
    finally:
        for proc in reversed(nodes):
            _stop(proc)
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
