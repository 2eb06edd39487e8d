"""A real PostgreSQL server for the tests, from the binaries of the `pgserver` wheel (no root, no system install):
initdb into a temporary folder, listen on 127.0.0.1 at a free port, stopped (immediate) when the test is done.
As root the server runs as an unprivileged user (PostgreSQL refuses root), which pgserver's helpers create."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerURL(str):
    """The server's SQLAlchemy URL, with `restart(down_s)`: the server stopped, down for `down_s` seconds, started
    again on the same port and data."""

    restart: object


@contextlib.contextmanager
def postgres(max_connections: int = 100) -> Iterator[str]:
    """Yield a SQLAlchemy URL (psycopg) of a fresh database server on 127.0.0.1 (`max_connections`: the server's
    limit; PostgreSQL's default is 100)."""
    from pgserver._commands import POSTGRES_BIN_PATH, initdb, pg_ctl
    from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    root = Path(tempfile.mkdtemp(prefix="rft-pg-"))
    data, sockets = root / "data", root / "sock"
    data.mkdir()
    sockets.mkdir()
    user = None
    if os.geteuid() == 0:
        import pwd
        import stat

        user = "pgserver"
        ensure_user_exists(user)
        ensure_prefix_permissions(root)
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
        entry = pwd.getpwnam(user)
        for path in (root, data, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    initdb(["--auth=trust", "--auth-local=trust", "-U", "postgres", "--encoding=utf8"], pgdata=data, user=user)
    port = _free_port()
    options = f"-h 127.0.0.1 -p {port} -k {sockets} -c max_connections={max_connections}"
    pg_ctl(["-w", "-o", options, "-l", str(root / "log"), "start"], pgdata=data,
           user=user, timeout=60)
    def restart(down_s: float = 0.0) -> None:  # stop (dropping every connection), wait, start on the same port
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user, timeout=60)
        time.sleep(down_s)
        pg_ctl(["-w", "-o", options, "-l", str(root / "log"), "start"], pgdata=data, user=user, timeout=60)

    url = ServerURL(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres")
    url.restart = restart
    try:
        yield url
    finally:
        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, user=user, timeout=60)
        import shutil

        shutil.rmtree(root, ignore_errors=True)
