"""Who shares a database buffer, and on what terms.

A buffer belongs to one run: the first process to open it (an explorer or the trainer, whichever starts first)
records the run's *layout* in `rft_meta` (how many explorers take turns at its steps, how many responses a group
holds, which model generated them), and every later process compares its own against it, so a trainer told of one
explorer beside two, an explorer started on another model, or a new run with another `rollout.n` pointed at an old
buffer is refused before it trains on what it cannot read right.

Each role of a run (explorer k, the trainer) is *held* by one process: its holder record (host, pid, a token and
a heartbeat a thread renews every HEARTBEAT_S) says so. A second process asking for a held role watches the
heartbeat: one that moves is a live holder and the second process stops with one line; one that stands still for
WATCH_S (or whose process is gone, on the same host) belongs to a killed process, whose rerun takes the role over
as it resumes.

A buffer also records the run that *owns* it (`OWNER_KEY`: the run id its output folder holds, `.rft-run-id`,
written by the first process of the run; see `rft.trainer.run_folder.claim_buffer`): a database buffer in rft_meta,
a file buffer in its folder. An explorer or trainer of another run is refused (`owner_refusal`) instead of taking
that run's experiences, its position or its reads as its own (a new run's explorer on a finished run's buffer said
"all steps already written" and exited 0).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid

import sqlalchemy as sa

from rft.errors import RftError
from rft.fsutil import host_id, machine_of, process_alive

log = logging.getLogger("rft")
HEARTBEAT_S = 1.0
WATCH_S = 4.0
"""How long a heartbeat that does not move means its process is gone (several beats missed)."""
LAYOUT_KEY = "run"
HOLDER_KEY = "holder/"
OWNER_KEY = "owner"
"""rft_meta's record of the run that owns the buffer (`owner_refusal`): {"run": its id, "folder": its output
folder, "host": `host_id()` of the process that recorded it}."""


def meta_value(conn, table: sa.Table, key: str) -> str | None:
    """The value of `key` in the buffer's rft_meta `table`, within the transaction of `conn`."""
    return conn.execute(sa.select(table.c.value).where(table.c.key == key)).scalar()


def _describe_model(model: dict) -> str:
    return (f"{model.get('model_type')}, hidden_size {model.get('hidden_size')}, {model.get('num_hidden_layers')} "
            f"layers, vocabulary {model.get('vocab_size')}, tokenizer {str(model.get('tokenizer'))[:12]}")


def layout_mismatch(recorded: dict, mine: dict, where: str) -> str | None:
    """The one line for a process whose layout `mine` differs from the buffer's `recorded` one; None if they agree
    (a key either lacks is not compared: buffers of earlier versions record less)."""
    def differs(key: str) -> bool:
        return key in recorded and key in mine and recorded[key] != mine[key]

    if differs("explorer_num"):
        return (f"experience_buffer.path {where} is shared by trainer.explorer_num={recorded['explorer_num']} "
                f"explorers (as its run began); this process has trainer.explorer_num={mine['explorer_num']}: give "
                "the trainer and every explorer of the run the same value (Trinity-RFT: "
                "explorer.rollout_model.engine_num)")
    if differs("rollout_n"):
        return (f"experience_buffer.path {where} belongs to a run with actor_rollout_ref.rollout.n={recorded['rollout_n']} "
                f"(groups of that many responses); this run has rollout.n={mine['rollout_n']}: a new run needs a buffer of "
                "its own (another experience_buffer.path, or move the old one aside), a resumed one the n it began with")
    if differs("model"):
        return (f"experience_buffer.path {where} belongs to a run of another model ({_describe_model(recorded['model'])})"
                f" than this process's actor_rollout_ref.model.path ({_describe_model(mine['model'])}): the explorers "
                "and the trainer of a run start from the same model; a new run needs a buffer of its own")
    return None


def owner_refusal(owner: dict, folder: str, where: str) -> str:
    """The one line for a process whose run (output folder `folder`) is not `owner`, the run that owns the buffer
    `where`."""
    host = f" on {machine_of(owner['host'])}" if owner.get("host") else ""
    return (f"experience_buffer.path {where} belongs to another run (run {str(owner.get('run'))[:8]}, output folder "
            f"{owner.get('folder')}{host}), and this run (output folder {folder}) would take that run's experiences "
            "as its own: give this run a buffer of its own (another experience_buffer.path, or move that one aside), "
            f"or resume that run with trainer.default_local_dir={owner.get('folder')}")


def _host(holder: dict) -> str:
    return machine_of(holder.get("host"))


def role_name(role: str) -> str:
    return "the trainer" if role == "trainer" else f"explorer {role.removeprefix('explorer/')}"


class Holders:
    """The roles this process holds in the buffer of `engine`, kept by a heartbeat thread."""

    def __init__(self, engine: sa.Engine, table: sa.Table, where: str, explorers: int,
                 retried, setter) -> None:
        self.engine, self.table, self.where, self.explorers = engine, table, where, explorers
        self._retried, self._set = retried, setter
        self.token = uuid.uuid4().hex
        self.roles: list[str] = []
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self, role: str) -> dict | None:
        def get():
            with self.engine.connect() as conn:
                return meta_value(conn, self.table, HOLDER_KEY + role)

        value = self._retried(get, "reading who holds a role of the experience buffer")
        return json.loads(value) if value else None

    def _mine(self, beat: int) -> str:
        return json.dumps({"host": host_id(), "pid": os.getpid(), "token": self.token, "beat": beat,
                           "since": time.time()})

    def take(self, role: str) -> None:
        """Hold `role` (explorer/<k>, trainer): at once when it is free or its holder is gone, else one line."""
        holder = self._read(role)
        why = self._gone(role, holder) if holder is not None and holder["token"] != self.token else None
        if holder is not None and holder["token"] != self.token and why is None:
            raise RftError(self._conflict(role, holder))

        def claim() -> bool:
            with self.engine.begin() as conn:  # taken only if no one else took it meanwhile
                now = meta_value(conn, self.table, HOLDER_KEY + role)
                if now is not None and (holder is None or json.loads(now)["token"] != holder["token"]):
                    return False
                self._set(conn, HOLDER_KEY + role, self._mine(0))
                return True

        if not self._retried(claim, "taking a role of the experience buffer"):
            raise RftError(self._conflict(role, self._read(role) or {}))
        if holder is not None and holder["token"] != self.token:
            log.info("rft: %s of %s was held by pid %s on %s, %s; this process takes over", role_name(role),
                     self.where, holder.get("pid"), _host(holder), why)
        self.roles.append(role)
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="rft-buffer-heartbeat", daemon=True)
            self._thread.start()

    def _gone(self, role: str, holder: dict) -> str | None:
        """Why the process `holder` names no longer holds the role (None: it does): on this host, its pid ended;
        elsewhere (or a pid reused), its heartbeat stood still for WATCH_S (a process stopped or cut off)."""
        if holder.get("host") == host_id() and not process_alive(holder.get("pid")):
            return "which has ended"
        log.info("rft: %s of %s is held by pid %s on %s; watching its heartbeat for up to %.0f s",
                 role_name(role), self.where, holder.get("pid"), _host(holder), WATCH_S)
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            time.sleep(HEARTBEAT_S / 4)
            now = self._read(role)
            if now is None or now.get("token") != holder.get("token"):
                return "which released it" if now is None else None  # or another process took it: live
            if now.get("beat") != holder.get("beat"):
                return None
        return f"whose heartbeat stood still for {WATCH_S:.0f} s (ended, stopped or cut off)"

    def _conflict(self, role: str, holder: dict) -> str:
        who = f"pid {holder.get('pid')} on {_host(holder)}"
        if role == "trainer":
            return (f"experience_buffer.path {self.where} is read by another trainer ({who}): a buffer has one "
                    "trainer; stop that one, or give this run its own experience_buffer.path")
        return (f"experience_buffer.path {self.where}: trainer.explorer_rank={role.removeprefix('explorer/')} is "
                f"explored by another process ({who}); give each explore command its own trainer.explorer_rank in "
                f"[0, trainer.explorer_num={self.explorers}), or stop that one")

    def _beat(self) -> None:
        beat = 0
        while not self._stop.wait(HEARTBEAT_S):
            beat += 1
            try:
                self._beat_once(beat)
            except sa.exc.SQLAlchemyError as e:  # the database away for a moment: the next beat tries again
                log.debug("rft: buffer heartbeat skipped: %s", e)

    def _beat_once(self, beat: int) -> None:
        """Renew the records of the roles this process holds; one another process took over is `lost`."""
        with self.engine.begin() as conn:
            for role in self.roles:
                now = meta_value(conn, self.table, HOLDER_KEY + role)
                if now is None or json.loads(now)["token"] != self.token:
                    self.lost = role
                    continue
                conn.execute(self.table.update().where(self.table.c.key == HOLDER_KEY + role).values(
                    value=self._mine(beat)))

    def check(self) -> None:
        """Raise if another process took a role of this one's (it found the heartbeat stopped for WATCH_S)."""
        if self.lost is not None:
            holder = self._read(self.lost) or {}
            raise RftError(f"experience_buffer.path {self.where}: {role_name(self.lost)} was taken over by pid "
                           f"{holder.get('pid')} on {_host(holder)} while this process "
                           f"held it (its heartbeat stalled for {WATCH_S:.0f} s); stop one of them")

    def release(self) -> None:
        """Stop the heartbeat and free the roles (a rerun takes them at once)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

        def free() -> None:
            with self.engine.begin() as conn:
                for role in self.roles:
                    now = meta_value(conn, self.table, HOLDER_KEY + role)
                    if now is not None and json.loads(now)["token"] == self.token:
                        conn.execute(self.table.delete().where(self.table.c.key == HOLDER_KEY + role))

        try:
            self._retried(free, "freeing the roles of the experience buffer")
        except (RftError, sa.exc.SQLAlchemyError) as e:  # the heartbeat stopped: a rerun takes them over anyway
            log.debug("rft: buffer roles not freed: %s", e)
        self.roles = []
