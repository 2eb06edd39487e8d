"""A real PostgreSQL server for the tests, from the binaries of the `pgserver` wheel (no root, no system install):
initdb into a temporary folder, listen on 127.0.0.1 at a free port, stopped (immediate) when the test is done.
As root the server runs as an unprivileged user (PostgreSQL refuses root), which pgserver's helpers create;
that user runs a world-readable copy of the wheel's binaries in the temporary folder (`_binaries`), since the
venv may lie under a home folder only root can enter (mode 0700, as in most containers)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binaries(user: str | None) -> Path:
    """The folder of the PostgreSQL programs `user` runs: the wheel's own for the current user; for another, a
    copy made once (per wheel) in the temporary folder, readable by all and writable by root only, so that no
    folder on the way to the venv has to be opened up (`chmod o+x` of a home folder)."""
    from pgserver._commands import POSTGRES_BIN_PATH

    if user is None:
        return POSTGRES_BIN_PATH
    package = POSTGRES_BIN_PATH.parent.parent  # site-packages/pgserver; its programs find their libraries
    parts = [package / "pginstall", package.parent / "pgserver.libs"]  # in ../../../pgserver.libs (rpath)
    key = hashlib.sha256((POSTGRES_BIN_PATH / "postgres").read_bytes()).hexdigest()[:16]  # one copy per build
    target = Path(tempfile.gettempdir()) / f"rft-pginstall-{key}"
    if not _trusted(target):
        staging = Path(tempfile.mkdtemp(prefix=".rft-pginstall-", dir=target.parent))
        try:
            for part in parts:
                if part.exists():
                    shutil.copytree(part, staging / part.relative_to(package.parent), symlinks=True)
            for path in [staging, *staging.rglob("*")]:
                if not path.is_symlink():  # folders and programs r-x for all, other files r--
                    mode = path.stat().st_mode
                    readable = 0o555 if path.is_dir() or mode & stat.S_IXUSR else 0o444
                    path.chmod(stat.S_IMODE(mode) | readable)
            staging.rename(target)  # atomic: a concurrent test process either wins or finds the whole copy
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not _trusted(target):
                raise
    return target / "pgserver" / "pginstall" / "bin"


def _trusted(folder: Path) -> bool:
    """`folder` exists, is a real folder owned by root that only root can write (not another user's)."""
    try:
        st = folder.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022


def _command(binaries: Path, program: str, args: list[str], pgdata: Path, user: str | None,
             timeout: float = 120) -> None:
    """Run a PostgreSQL program on `pgdata` (as `user`); a failure raises with its output. Files, not pipes,
    take the output: pg_ctl's server keeps inherited pipes open (pgserver's note). The working folder is the
    server's own: `user` may not be able to enter the caller's."""
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run([str(binaries / program), "-D", str(pgdata), *args], stdout=out, stderr=out,
                                text=True, user=user, cwd=pgdata.parent, timeout=timeout)
        if result.returncode:
            out.seek(0)
            raise RuntimeError(f"{program} {' '.join(args)} exited {result.returncode}: {out.read()}")


class ServerURL(str):
    """The server's SQLAlchemy URL, with `restart(down_s)`: the server stopped, down for `down_s` seconds, started
    again on the same port and data."""

    restart: object


@contextlib.contextmanager
def postgres(max_connections: int = 100) -> Iterator[str]:
    """Yield a SQLAlchemy URL (psycopg) of a fresh database server on 127.0.0.1 (`max_connections`: the server's
    limit; PostgreSQL's default is 100)."""
    from pgserver.utils import ensure_prefix_permissions, ensure_user_exists

    root = Path(tempfile.mkdtemp(prefix="rft-pg-"))
    data, sockets = root / "data", root / "sock"
    user = None
    try:  # the folder goes whatever fails (a failed initdb left one per test)
        data.mkdir()
        sockets.mkdir()
        if os.geteuid() == 0:
            import pwd

            user = "pgserver"
            ensure_user_exists(user)
            ensure_prefix_permissions(root)
            entry = pwd.getpwnam(user)
            for path in (root, data, sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        binaries = _binaries(user)

        def pg_ctl(*args: str) -> None:
            _command(binaries, "pg_ctl", ["-w", *args], data, user)

        _command(binaries, "initdb", ["--auth=trust", "--auth-local=trust", "-U", "postgres",
                                      "--encoding=utf8"], data, user)
        port = _free_port()
        options = f"-h 127.0.0.1 -p {port} -k {sockets} -c max_connections={max_connections}"
        pg_ctl("-o", options, "-l", str(root / "log"), "start")

        def restart(down_s: float = 0.0) -> None:  # stop (dropping every connection), wait, start again
            pg_ctl("-m", "fast", "stop")
            time.sleep(down_s)
            pg_ctl("-o", options, "-l", str(root / "log"), "start")

        url = ServerURL(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres")
        url.restart = restart
        try:
            yield url
        finally:
            pg_ctl("-m", "immediate", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
