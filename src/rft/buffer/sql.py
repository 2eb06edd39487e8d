"""`sql` (and `queue` with a path): experiences in a database through SQLAlchemy, a SQLite file by default or any
SQLAlchemy URL (PostgreSQL for explorer and trainer on different machines).

Three tables: `rft_experiences` (one row per experience: its group, explore step, model version, how often it was
read, when it may be read again, whether it is used up, and the experience itself as bytes), `rft_reads` (which
trainer step read which experience, so a resumed trainer can put back the reads after its checkpoint) and
`rft_meta` (the explorer's state, written in the same transaction as the experiences of its step, and whether it
finished). Every write and every read is one transaction, so a process killed at any point leaves either all of
a step's experiences or none, and a read either claimed whole groups or nothing: each experience is trained on
exactly once across crashes of either side (unless replay is asked for: `use_priority_queue` with
`reuse_cooldown_time`). Both are idempotent under a retry whose first commit's answer was lost: a write whose rows
are in adds none, a step's read returns the claim it made.

With several explorers (explorer k writes explore steps k + 1, k + 1 + K, ...) reads go in explore-step order and
take only steps every earlier one of which is in, so the trainer reads what an uninterrupted run would have read.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from rft import interrupts
from rft.buffer.base import BufferClosed, Read
from rft.buffer.sharing import LAYOUT_KEY, OWNER_KEY, Holders, layout_mismatch, meta_value
from rft.errors import RftError
from rft.experience import Experience

log = logging.getLogger("rft")
_meta = sa.MetaData()
EXPERIENCES = sa.Table(
    "rft_experiences", _meta,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(64), nullable=False, unique=True),
    sa.Column("group_id", sa.String(128), nullable=False, index=True),
    sa.Column("explore_step", sa.Integer, nullable=False, index=True),
    sa.Column("model_version", sa.Integer, nullable=False),
    sa.Column("use_count", sa.Integer, nullable=False, default=0),
    sa.Column("available_at", sa.Float, nullable=False, default=0.0),
    sa.Column("consumed", sa.Boolean, nullable=False, default=False, index=True),
    sa.Column("payload", sa.LargeBinary, nullable=False),
)
READS = sa.Table(
    "rft_reads", _meta,
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("dropped", sa.Boolean, nullable=False, default=False),
)
META = sa.Table(
    "rft_meta", _meta,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


TRAINER_RUN_KEY = "trainer_run"
"""rft_meta's record of the run whose trainer read the buffer, as an earlier rft wrote it: that run owns the buffer
(`SQLBuffer.own`)."""
LOCK_WAIT_S = 120.0
"""How long a SQLite buffer waits for a lock another process holds (explorer and trainer take turns in
milliseconds; a transaction held open longer is another program's) before the run stops naming the file."""
BUSY_SLICE_S = 0.5
"""SQLite's own busy wait per attempt: short, so the wait returns to Python (signals, notice, limit)."""
LOCK_NOTICE_S = 5.0


def make_engine(url: str) -> sa.Engine:
    """An engine for `url`; SQLite in WAL mode, waiting BUSY_SLICE_S for a lock at each attempt (`SQLBuffer`
    retries up to LOCK_WAIT_S), so one writer and one reader in two processes wait for each other instead of
    failing."""
    if url.startswith("sqlite"):
        if url not in ("sqlite://", "sqlite:///:memory:"):
            Path(url.split("sqlite:///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(url, connect_args={"timeout": BUSY_SLICE_S})
        else:  # one in-memory database shared by the threads of this process
            engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool,
                                      connect_args={"check_same_thread": False})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection, _record):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={int(BUSY_SLICE_S * 1000)}")
            cursor.close()

        return engine
    connect_args = {}
    if url.startswith("postgresql"):  # a server that accepts and never answers must not hang the run
        connect_args = {"connect_timeout": CONNECT_TIMEOUT_S,
                        "options": f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}"}
    try:
        return sa.create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    except ModuleNotFoundError as e:  # the database's driver
        extra = " (pip install 'rft[postgres]')" if url.startswith("postgresql") else ""
        raise RftError(f"experience_buffer.path {_shown(url)}: its driver {e.name!r} is not installed{extra}") from None
    except sa.exc.ArgumentError as e:
        raise RftError(f"experience_buffer.path {_shown(url)} is not a database URL SQLAlchemy reads ({e})") from None


CONNECT_TIMEOUT_S = 10
STATEMENT_TIMEOUT_S = 120
OUTAGE_S = 120
"""How long a database server may be unreachable (restarting, failing over) before the run stops: each write and
read is one transaction, retried whole."""


def _lost_connection(e: BaseException) -> bool:
    """A server that went away or is not accepting connections yet; not a refused statement (SQLite's own
    errors, a missing table, a constraint) which a retry would only repeat."""
    if not isinstance(e, sa.exc.OperationalError | sa.exc.InterfaceError):
        return False
    if isinstance(e, sa.exc.DBAPIError) and e.connection_invalidated:
        return True
    text = str(e.orig or e).lower()
    return any(s in text for s in ("connection", "terminating", "server closed", "shutting down", "starting up",
                                   "the database system is", "could not connect"))


def _locked(e: BaseException) -> bool:
    """SQLite's "database is locked" (SQLITE_BUSY: another connection holds the lock past the busy wait) or
    "database table is locked"."""
    return isinstance(e, sa.exc.OperationalError) and "locked" in str(e.orig or e).lower()


def _created_beside(e: BaseException) -> bool:
    """SQLite's "table ... already exists": another process created the table between this one's look and its
    CREATE (explorer and trainer open the buffer at the same moment); the next attempt sees it."""
    return isinstance(e, sa.exc.OperationalError) and "already exists" in str(e.orig or e).lower()


def _wait_for_lock(fn, url: str, what: str, also: Callable[[BaseException], bool] = lambda e: False):
    """`fn()` (one transaction), tried again while another process holds the SQLite file's lock (or `also`
    accepts the error), up to LOCK_WAIT_S: a notice after LOCK_NOTICE_S, a Ctrl-C / SIGTERM honoured between
    attempts (the transaction has not happened; the same command resumes), then one line naming the file."""
    start, noticed = time.monotonic(), False
    while True:
        try:
            return fn()
        except sa.exc.OperationalError as e:
            if not (_locked(e) or also(e)):
                raise
        waited = time.monotonic() - start
        where = _shown(url)
        if waited >= LOCK_WAIT_S:
            raise RftError(f"experience_buffer.path {where}: another process has held a lock on the "
                           f"database file for more than {LOCK_WAIT_S:.0f} s ({what}; an sqlite3 shell or "
                           "viewer with an open transaction, or another run on the same file?); end it, then "
                           "run the same command again") from None
        if not noticed and waited >= LOCK_NOTICE_S:
            log.warning("rft: the experience buffer %s is locked by another process; waiting up to %.0f s "
                        "(Ctrl-C stops)", where, LOCK_WAIT_S)
            noticed = True
        interrupts.check_while_waiting(f"waiting for the experience buffer {where}, which another process "
                                       "locks")
        time.sleep(0.05)


def _shown(url: str) -> str:
    """`url` with its password masked, for messages."""
    try:
        return repr(sa.engine.make_url(url).render_as_string(hide_password=True))
    except Exception:
        return repr(url)


DDL_LOCK = 0x7266745F  # "rft_": the PostgreSQL advisory lock that serialises the tables' creation


def create_tables(engine: sa.Engine) -> None:
    """The buffer's tables, unless they exist. On PostgreSQL under a transaction-scoped advisory lock: two processes
    that both find the tables missing would otherwise both create them, and the second fails on the catalog's
    unique index (UniqueViolation on pg_class / pg_type), `IF NOT EXISTS` notwithstanding. SQLite serialises
    writers itself (a locked database is retried by the caller)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": DDL_LOCK})
        _meta.create_all(conn, checkfirst=True)


class SQLBuffer:
    def __init__(self, url: str, *, use_priority_queue: bool = False, reuse_cooldown_time: float | None = None,
                 priority_decay: float = 2.0, poll_s: float = 0.05, explorers: int = 1, explorer: int = 0,
                 use_count_limit: int | None = None, priority_sigma: float = 0.0):
        """`explorers`: how many explorers write (explore step n is explorer (n - 1) % explorers'); `explorer`:
        which one this process is (its state and its rows are its own)."""
        self.url, self.where = url, _shown(url)
        self.explorers, self.explorer = explorers, explorer
        self.engine = make_engine(url)
        try:
            if self.engine.dialect.name == "sqlite":  # explorer and trainer may create the tables at once
                _wait_for_lock(lambda: create_tables(self.engine), url, "opening the experience buffer",
                               also=_created_beside)
            else:
                create_tables(self.engine)
        except sa.exc.OperationalError as e:
            if self.engine.dialect.name != "sqlite":  # a server refusing, unreachable or silent
                reason = " ".join(str(e.orig or e).split())[:200]
                raise RftError(f"experience_buffer.path {_shown(url)}: cannot reach the database ({reason}); "
                               "start it or fix the URL") from None
            raise
        except sa.exc.DatabaseError as e:  # SQLite: not a database file
            raise RftError(f"experience_buffer.path {_shown(url)}: not a database the buffer can open "
                           f"({' '.join(str(e.orig or e).split())[:120]}); move it aside or name another "
                           "file") from None
        self.priority = use_priority_queue
        self.reuse_cooldown_time = reuse_cooldown_time if use_priority_queue else None
        self.decay = priority_decay
        self.use_count_limit, self.sigma = use_count_limit, priority_sigma
        self.poll_s = poll_s
        self.holders = Holders(self.engine, META, _shown(url), explorers, self._retried, self._set)

    def join(self, layout: dict, roles: list[str]) -> None:
        """Take part in the buffer's run (see `rft.buffer.sharing`): `layout` (explorer_num, rollout_n, model)
        recorded when the buffer is new, else compared with the recorded one (one line where they differ); then
        hold `roles` (explorer/<k>, trainer) while this process runs."""
        recorded = self._record_once(LAYOUT_KEY, json.dumps(layout, sort_keys=True), "recording the experience "
                                     "buffer's run")
        why = layout_mismatch(json.loads(recorded), layout, self.where)
        if why is not None:
            raise RftError(why)
        self.hold(roles)

    def hold(self, roles: list[str]) -> None:
        """Hold `roles` (explorer/<k>, trainer) while this process runs (`sharing.Holders`)."""
        for role in roles:
            self.holders.take(role)

    def owner(self) -> dict | None:
        """The run that owns the buffer (`sharing.OWNER_KEY`; an earlier rft's record of the run whose trainer
        read it), or None while none is recorded."""
        value = self._get(OWNER_KEY) or self._get(TRAINER_RUN_KEY)
        return json.loads(value) if value is not None else None

    def own(self, run: dict) -> dict:
        """Record `run` as the buffer's owner unless one is recorded (a buffer an earlier rft wrote: the run whose
        trainer read it); returns the owner."""
        earlier = self._get(TRAINER_RUN_KEY)
        return json.loads(self._record_once(OWNER_KEY, earlier or json.dumps(run), "recording the experience "
                                            "buffer's owner"))

    def _record_once(self, key: str, value: str, what: str) -> str:
        """`value` recorded at `key` in rft_meta unless a value is there; returns the recorded one (of processes
        recording at once, the first's)."""
        def record() -> str:
            with self.engine.begin() as conn:
                found = meta_value(conn, META, key)
                if found is None:
                    conn.execute(META.insert().values(key=key, value=value))
                return found or value

        try:
            return self._retried(record, what)
        except sa.exc.IntegrityError:  # another process recorded it between this one's look and its insert
            return self._get(key)

    # --------------------------------------------------------------------------------------- explorer side
    def _retried(self, fn, what: str):
        """`fn()` (one transaction), retried while the database server is unreachable, up to OUTAGE_S (a
        SQLite file: while another process locks it, up to LOCK_WAIT_S)."""
        from rft.retry import retrying

        if self.engine.dialect.name == "sqlite":  # a local file: no outages; its locks are waited for
            return _wait_for_lock(fn, self.url, what)
        try:
            return retrying(fn, f"{what} ({_shown(self.url)})", _lost_connection, OUTAGE_S)
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as e:
            if not _lost_connection(e):
                raise
            raise RftError(f"experience_buffer.path {_shown(self.url)}: the database was unreachable for more "
                           f"than {OUTAGE_S} s ({' '.join(str(e.orig or e).split())[:160]}); start it, then run the "
                           "same command again to resume") from None

    def write(self, experiences: list[Experience], explorer_state: dict | None = None) -> None:
        self.holders.check()
        self._retried(lambda: self._write(experiences, explorer_state), "writing to the experience buffer")

    def _write(self, experiences: list[Experience], explorer_state: dict | None = None) -> None:
        rows = [{"id": e.id, "group_id": e.group, "explore_step": int(e.info.get("explore_step", 0)),
                 "model_version": e.model_version, "use_count": 0, "available_at": 0.0, "consumed": False,
                 "payload": e.to_bytes()} for e in experiences]
        with self.engine.begin() as conn:
            # a retry after a commit whose answer was lost (the connection dropped): the rows are in already
            there = rows and conn.execute(sa.select(EXPERIENCES.c.seq).where(EXPERIENCES.c.id == rows[0]["id"])).first()
            if rows and not there:
                conn.execute(EXPERIENCES.insert(), rows)
            if explorer_state is not None:
                self._set(conn, self._key("explorer_state"), json.dumps(explorer_state))
                if "step" in explorer_state:  # the step the readers wait for (several explorers), kept small
                    self._set(conn, self._key("explored"), str(int(explorer_state["step"])))

    def _key(self, name: str, explorer: int | None = None) -> str:
        """An explorer's key in rft_meta: explorer 0's is the name itself (as with one explorer)."""
        explorer = self.explorer if explorer is None else explorer
        return name if explorer == 0 else f"{name}/{explorer}"

    def finish(self) -> None:
        def mark() -> None:
            with self.engine.begin() as conn:
                self._set(conn, self._key("explorer_finished"), "1")

        self._retried(mark, "marking the explorer finished")

    def explorer_state(self) -> dict | None:
        value = self._get(self._key("explorer_state"))
        return json.loads(value) if value is not None else None

    def finished(self) -> bool:
        """Every explorer has written its last step."""
        return all(self._get(self._key("explorer_finished", i)) == "1" for i in range(self.explorers))

    # ---------------------------------------------------------------------------------------- trainer side
    def read(self, rows: int, step: int, timeout: float | None = None, min_version: int | None = None,
             watch: Callable[[], None] | None = None) -> Read:
        self.holders.check()
        start = time.monotonic()
        out = Read()
        delay = self.poll_s
        while True:
            finished = self.finished()  # before the read: whatever the explorer wrote before finishing is seen
            done = self._retried(functools.partial(self._read_once, out, rows, step, min_version, finished, start,
                                                   timeout), "reading the experience buffer")
            if done:
                break
            if watch is not None:
                watch()
            # a Ctrl-C / SIGTERM stops the wait now (nothing was claimed: the rerun reads this step again)
            interrupts.check_while_waiting(f"waiting for experiences in the experience buffer {_shown(self.url)}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        out.waited_s = time.monotonic() - start
        if not out.experiences:
            if finished:
                raise BufferClosed(f"the explorer finished and every experience in {self.url} was read")
            raise TimeoutError(
                f"no experience arrived in {self.url} within experience_buffer.max_read_timeout={timeout} s: is the "
                "explorer running (trainer.mode=explore with the same experience_buffer.path)?"
            )
        for e in out.experiences:
            e.info["use_count"] = e.info.get("use_count", 0) + 1
        return out

    def _read_once(self, out: Read, rows: int, step: int, min_version: int | None, finished: bool, start: float,
                   timeout: float | None) -> bool:
        """One look at the buffer, one transaction: claim the step's groups (and drop the too stale ones) when
        enough are there, the explorer finished or the wait timed out; True then. `out` changes only after the
        transaction committed (a retried one counts once)."""
        with self.engine.begin() as conn:
            claimed = conn.execute(sa.select(READS.c.seq).where((READS.c.step == step) & (READS.c.dropped == sa.false()))
                                   .order_by(READS.c.seq)).scalars().all()
            if claimed:  # a retry after a commit whose answer was lost: this step's read happened, return it
                payloads = dict(conn.execute(sa.select(EXPERIENCES.c.seq, EXPERIENCES.c.payload).where(
                    EXPERIENCES.c.seq.in_(claimed))).all())
                out.experiences, out.partial = [Experience.from_bytes(payloads[s]) for s in claimed], False
                return True
            take, drop, taken = [], [], set()
            count = 0
            while True:  # stale groups dropped make room among the candidates: look again at once
                dropped_now = []
                for group, members in self._candidates(conn, rows).items():
                    if min_version is not None and members[0].model_version < min_version:
                        dropped_now += members
                        continue
                    if count >= rows:
                        break
                    if group not in taken:
                        taken.add(group)
                        take += members
                        count += len(members)
                if not dropped_now:
                    break
                self._claim(conn, dropped_now, step, dropped=True)
                drop += dropped_now
            timed_out = timeout is not None and time.monotonic() - start >= timeout
            done = count >= rows or finished or timed_out
            experiences = []
            if done and take:
                self._claim(conn, take, step, dropped=False)
                payloads = dict(conn.execute(sa.select(EXPERIENCES.c.seq, EXPERIENCES.c.payload).where(
                    EXPERIENCES.c.seq.in_([r.seq for r in take]))).all())
                experiences = [Experience.from_bytes(payloads[r.seq]) for r in take]
        out.dropped += len(drop)
        if done:
            out.experiences, out.partial = experiences, count < rows
        return done

    def _candidates(self, conn, rows: int) -> OrderedDict[str, list]:
        """The readable experiences, grouped, groups in reading order (FIFO, or by priority). FIFO: only the first
        `rows` groups (each holds at least one experience, so enough for a read of `rows`), chosen by the database,
        so a read costs the same however many experiences wait (many explorers ahead of the trainer); the priority
        order needs every group."""
        c = EXPERIENCES.c
        readable = (c.consumed == sa.false()) & (c.available_at <= time.time())
        if self.explorers > 1:  # in explore-step order, whichever explorer wrote first: the same run every time
            readable = readable & (c.explore_step <= self._written_through(conn))
        if not self.priority:
            first = sa.select(c.group_id).where(readable).group_by(c.group_id).order_by(
                sa.func.min(c.explore_step), sa.func.min(c.seq)).limit(max(rows, 1))
            readable = readable & c.group_id.in_(first.scalar_subquery())
        found = conn.execute(sa.select(c.seq, c.group_id, c.model_version, c.use_count).where(readable)
                             .order_by(c.explore_step, c.seq)).all()
        groups: OrderedDict[str, list] = OrderedDict()
        for r in found:
            groups.setdefault(r.group_id, []).append(r)
        if self.priority:  # Trinity-RFT's linear_decay: newest weights first, each read lowers a group's priority
            order = sorted(groups.items(), key=lambda kv: -self.priority_of(kv[1][0]))
            groups = OrderedDict(order)
        return groups

    def priority_of(self, row) -> float:
        """A group's priority from its first row: model_version - decay x times read (Trinity-RFT's linear_decay),
        plus with sigma one Gaussian draw (x sigma) per entry into the queue (decay_limit_randomization draws at each
        put: the write, then each return after a read), the same draw at every read of that entry: seeded by the
        row and its read count."""
        priority = row.model_version - self.decay * row.use_count
        if self.sigma:
            priority += self.sigma * float(np.random.default_rng([row.seq, row.use_count]).standard_normal())
        return priority

    def _written_through(self, conn) -> int:
        """The explore step through which every step is in the buffer. Explorer k writes steps k + 1, k + 1 + K, ...
        in order and records each with its rows, so step n is there once its explorer has recorded n or finished."""
        keys = dict(conn.execute(sa.select(META.c.key, META.c.value).where(
            META.c.key.like("explored%") | META.c.key.like("explorer_finished%"))).all())
        first_missing = 2 ** 31 - 1
        for k in range(self.explorers):
            if keys.get(self._key("explorer_finished", k)) != "1":
                done = int(keys.get(self._key("explored", k), 0))
                first_missing = min(first_missing, done + 1 + (k - done) % self.explorers)
        return first_missing - 1

    def _claim(self, conn, rows: list, step: int, dropped: bool) -> None:
        c = EXPERIENCES.c
        seqs = [r.seq for r in rows]
        if self.reuse_cooldown_time is not None and not dropped:
            # replay: readable again after the cooldown; with use_count_limit (decay_limit_randomization) only while
            # read fewer than that many times, consumed at the limit
            limit = self.use_count_limit
            again = [r.seq for r in rows if limit is None or r.use_count + 1 < limit]
            conn.execute(EXPERIENCES.update().where(c.seq.in_(again)).values(
                use_count=c.use_count + 1, available_at=time.time() + self.reuse_cooldown_time))
            if len(again) < len(seqs):
                kept = set(again)
                conn.execute(EXPERIENCES.update().where(c.seq.in_([s for s in seqs if s not in kept])).values(
                    use_count=c.use_count + 1, consumed=True))
        else:
            conn.execute(EXPERIENCES.update().where(c.seq.in_(seqs)).values(
                use_count=c.use_count + (0 if dropped else 1), consumed=True))
        conn.execute(READS.insert(), [{"step": step, "seq": s, "dropped": dropped} for s in seqs])

    def check_reader(self, start: int) -> None:
        """The trainer of the buffer's run (`own`), resuming after step `start`, reads this buffer: one line when the
        buffer holds no read of steps 1..start (it is not the one the run trained on: replaced, emptied or another
        path)."""
        def look() -> bool:
            with self.engine.connect() as conn:
                return conn.execute(sa.select(READS.c.step).where(READS.c.step <= start).limit(1)).first() is not None

        if start > 0 and not self._retried(look, "checking the experience buffer's reads"):
            raise RftError(f"experience_buffer.path {self.where} holds no read of trainer steps 1..{start}, yet the "
                           f"trainer resumes from its checkpoint of step {start}: it is not the buffer this run "
                           "trained on (replaced, emptied, or another path); restore that one, or start a new run in "
                           "another trainer.default_local_dir")

    def release_after(self, step: int) -> None:
        c = EXPERIENCES.c

        def run() -> None:
            with self.engine.begin() as conn:
                reads = conn.execute(sa.select(READS.c.seq, READS.c.dropped).where(READS.c.step > step)).all()
                for seq, dropped in reads:
                    conn.execute(EXPERIENCES.update().where(c.seq == seq).values(
                        consumed=False, available_at=0.0, use_count=c.use_count - (0 if dropped else 1)))
                conn.execute(READS.delete().where(READS.c.step > step))

        self._retried(run, "putting back the reads after a checkpoint")

    def truncate_after(self, explore_step: int) -> None:
        """Delete what this explorer wrote after its step `explore_step` (a killed explorer's partial writes)."""
        c = EXPERIENCES.c
        mine = c.explore_step > explore_step
        if self.explorers > 1:  # the other explorers' steps are theirs
            mine = mine & ((c.explore_step - 1) % self.explorers == self.explorer)

        def run() -> None:
            with self.engine.begin() as conn:
                later = sa.select(c.seq).where(mine)
                conn.execute(READS.delete().where(READS.c.seq.in_(later)))
                conn.execute(EXPERIENCES.delete().where(mine))

        self._retried(run, "removing a killed explorer's partial step")

    # --------------------------------------------------------------------------------------------- misc

    def counts(self) -> dict[str, int]:
        """rows: experiences stored; consumed: used up; reads: (step, experience) reads recorded."""
        with self.engine.connect() as conn:
            n = conn.execute(sa.select(sa.func.count()).select_from(EXPERIENCES)).scalar()
            used = conn.execute(sa.select(sa.func.count()).select_from(EXPERIENCES).where(
                EXPERIENCES.c.consumed == sa.true())).scalar()
            reads = conn.execute(sa.select(sa.func.count()).select_from(READS)).scalar()
        return {"rows": int(n), "consumed": int(used), "reads": int(reads)}

    def reads_by_id(self) -> dict[str, list[int]]:
        """Every experience id -> the trainer steps that read it (dropped reads excluded)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(EXPERIENCES.c.id, READS.c.step).join(
                READS, READS.c.seq == EXPERIENCES.c.seq).where(READS.c.dropped == sa.false())).all()
            ids = conn.execute(sa.select(EXPERIENCES.c.id)).scalars().all()
        out: dict[str, list[int]] = {i: [] for i in ids}
        for i, step in rows:
            out[i].append(step)
        return out

    def _set(self, conn, key: str, value: str) -> None:
        conn.execute(META.delete().where(META.c.key == key))
        conn.execute(META.insert().values(key=key, value=value))

    def _get(self, key: str) -> str | None:
        def get() -> str | None:
            with self.engine.connect() as conn:
                return meta_value(conn, META, key)

        return self._retried(get, "reading the experience buffer's state")

    def close(self) -> None:
        self.holders.release()
        self.engine.dispose()
