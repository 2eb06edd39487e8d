"""Experiences and the buffers between explorer and trainer: the record round-trips exactly, a Batch is made from
experiences and back, reads take whole groups FIFO or by priority, every experience is read once (unless replay is
asked for) across a trainer that resumes, and the sync schedule gives the staleness Trinity-RFT's settings imply."""

from __future__ import annotations

import os
import threading
import time
import types
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from rft.batch import Batch
from rft.buffer import BufferClosed, FileBuffer, MemoryQueue, SQLBuffer, database_url
from rft.experience import Experience, from_batch, to_batch
from rft.sync.schedule import published_versions, required_version, staleness, versions_after


def exp(group: str, version: int = 0, step: int = 1, reward: float = 1.0, response=(7, 8, 2)) -> Experience:
    return Experience(tokens=torch.tensor([1, 5, 6, *response]), prompt_length=3,
                      action_mask=torch.ones(len(response), dtype=torch.long),
                      logprobs=torch.tensor([-0.5, -1.25, -0.125][:len(response)] + [-2.0] * (len(response) - 3)),
                      reward=reward, group=group, model_version=version, rewards={"acc": 1.0},
                      info={"explore_step": step, "data_source": "arithmetic", "ground_truth": "12"})


def groups_of(experiences) -> list[str]:
    return [e.group for e in experiences]


# ------------------------------------------------------------------------------------------- Experience
def test_experience_round_trips_exactly():
    e = exp("g", version=3)
    e.logprobs = torch.tensor([-0.1234567, -1e-8, -30.5])
    for back in (Experience.from_bytes(e.to_bytes()), Experience.from_json(e.to_json())):
        assert back.id == e.id and back.group == "g" and back.model_version == 3 and back.prompt_length == 3
        assert torch.equal(back.tokens, e.tokens) and torch.equal(back.action_mask, e.action_mask)
        assert torch.equal(back.logprobs, e.logprobs)  # float32 exact
        assert back.rewards == {"acc": 1.0} and back.info["ground_truth"] == "12"


def test_per_token_versions_round_trip_through_the_buffers_and_the_batch(tmp_path):
    """A streamed response spans weight updates: each token's version goes from the batch into the experience,
    through the binary (SQL) and JSON (file) forms, and back into the batch; a row without them reads as its
    model_version."""
    spanning = exp("a", version=2, response=(7, 8, 2))
    spanning.versions = torch.tensor([2, 3, 3])
    image = exp("b", version=3, response=(4, 2))
    image.images = [b"\x89PNG-ish"]  # the images follow the versions in the binary form
    image.versions = torch.tensor([3, 3])
    plain = exp("c", version=1, response=(5,))
    for e in (spanning, image):
        for back in (Experience.from_bytes(e.to_bytes()), Experience.from_json(e.to_json())):
            assert torch.equal(back.versions, e.versions) and back.images == e.images
            assert torch.equal(back.logprobs, e.logprobs)
    assert Experience.from_bytes(plain.to_bytes()).versions is None
    buffer = SQLBuffer(database_url(str(tmp_path / "b.sqlite")))
    buffer.write([spanning, image, plain])
    read = buffer.read(3, 1).experiences
    buffer.close()
    batch = to_batch(read, pad_token_id=0)
    assert batch.rollout_versions.tolist() == [[2, 3, 3], [3, 3, 0], [1, 0, 0]]
    batch.scores = torch.tensor([1.0, 0.0, 0.5])
    again = from_batch(batch, ["a", "a", "b"], model_version=2)
    assert [e.versions.tolist() for e in again] == [[2, 3, 3], [3, 3], [1]]


def test_batch_from_experiences_and_back():
    a1 = exp("a", response=(7, 2))
    a2 = exp("a", response=(7, 8, 9))
    b1 = exp("b", version=2, response=(4,))
    b1.tokens = torch.tensor([9, 4])  # a shorter prompt: left padding
    b1.prompt_length = 1
    b1.logprobs = torch.tensor([-3.0])
    batch = to_batch([a1, a2, b1], pad_token_id=0)
    # prompts left-padded to 3, responses right-padded to 3
    assert batch.prompt_ids.tolist() == [[1, 5, 6], [1, 5, 6], [0, 0, 9]]
    assert batch.prompt_mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1]]
    assert batch.response_ids.tolist() == [[7, 2, 0], [7, 8, 9], [4, 0, 0]]
    assert batch.response_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert batch.rollout_logprobs.tolist() == [[-0.5, -1.25, 0.0], [-0.5, -1.25, -0.125], [-3.0, 0.0, 0.0]]
    assert batch.group.tolist() == [0, 0, 1] and batch.model_version.tolist() == [0, 0, 2]
    assert batch.reward_rows == [{"acc": 1.0}] * 3 and batch.data_source == ["arithmetic"] * 3
    # and back: the same experiences (ids aside)
    batch.scores = torch.tensor([1.0, 1.0, 1.0])
    back = from_batch(batch, ["a", "a", "b"], 2)
    for original, again in zip([a1, a2, b1], back):
        assert torch.equal(original.tokens, again.tokens) and original.prompt_length == again.prompt_length
        assert torch.equal(original.logprobs, again.logprobs)


# ---------------------------------------------------------------------------------------------- buffers
def sql_buffer(tmp_path, **kwargs) -> SQLBuffer:
    return SQLBuffer(database_url(str(tmp_path / "b.sqlite")), **kwargs)


@pytest.fixture(scope="module")
def pg_url():
    from pg_server import postgres

    with postgres() as url:
        yield url


def test_the_test_server_starts_from_a_venv_in_a_folder_only_its_owner_enters(tmp_path):
    """A clone (and its venv) in root's 0700 home: as root the server runs as another user, which cannot
    reach the wheel's programs there (initdb: PermissionError); pg_server runs a copy it can read. pgserver
    is imported from a copy under a 0700 folder, as such a venv would hold it."""
    import shutil
    import subprocess
    import sys

    import pgserver

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    home.chmod(0o700)
    site = Path(pgserver.__file__).parent.parent
    for name in ("pgserver", "pgserver.libs"):
        if (site / name).exists():
            shutil.copytree(site / name, home / "site" / name, symlinks=True)
    script = ("import pgserver, sqlalchemy as sa; from pg_server import postgres\n"
              f"assert pgserver.__file__.startswith({str(home)!r}), pgserver.__file__\n"
              "with postgres() as url:\n"
              "    with sa.create_engine(url).connect() as c:\n"
              "        print('answer', c.execute(sa.text('select 41+1')).scalar())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(home / "site"), str(Path(__file__).parent)])}
    done = subprocess.run([sys.executable, "-c", script], cwd=home, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "answer 42" in done.stdout, done.stderr[-3000:]


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server of `server_url`."""
    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def test_processes_that_create_the_tables_at_once_all_succeed(pg_url):
    """Explorer and trainer open a fresh PostgreSQL buffer at the same moment: both find the tables missing, and
    the second CREATE used to fail on the catalog's unique index (a flaky test_modes run); the creation now holds an
    advisory lock. Eight openers at once, three times."""
    import threading

    def open_buffer(url: str, start: threading.Barrier, errors: list[str]) -> None:
        start.wait()
        try:
            SQLBuffer(url).engine.dispose()
        except Exception as e:  # the failure is the finding
            errors.append(f"{type(e).__name__}: {e}")

    for _ in range(3):
        url, start, errors = fresh_database(pg_url), threading.Barrier(8), []
        threads = [threading.Thread(target=open_buffer, args=(url, start, errors)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def buffer(request, tmp_path):
    if request.param == "memory":
        return MemoryQueue()
    if request.param == "sqlite":
        return sql_buffer(tmp_path)
    return SQLBuffer(fresh_database(request.getfixturevalue("pg_url")))


def test_reads_take_whole_groups_in_order(buffer):
    buffer.write([exp("a"), exp("a"), exp("b"), exp("b")], {"step": 1})
    buffer.write([exp("c"), exp("c")], {"step": 2})
    first = buffer.read(3, step=1, timeout=0.2)  # 3 rows asked: group b is not split
    assert groups_of(first.experiences) == ["a", "a", "b", "b"] and not first.partial
    second = buffer.read(2, step=2, timeout=0.2)
    assert groups_of(second.experiences) == ["c", "c"]
    assert buffer.explorer_state() == {"step": 2}
    with pytest.raises(TimeoutError):
        buffer.read(2, step=3, timeout=0.1)
    buffer.finish()
    with pytest.raises(BufferClosed):
        buffer.read(2, step=3, timeout=0.1)


def test_release_after_gives_back_the_reads_of_later_steps(buffer):
    buffer.write([exp("a"), exp("b"), exp("c")])
    ids = [e.id for e in buffer.read(1, 1, 0.1).experiences + buffer.read(1, 2, 0.1).experiences]
    buffer.read(1, 3, 0.1)
    buffer.release_after(1)  # a trainer resuming from its checkpoint of step 1
    again = buffer.read(2, 2, 0.1).experiences
    assert [e.id for e in again][:1] == ids[1:] and groups_of(again) == ["b", "c"]


def test_partial_read_after_the_timeout(buffer):
    buffer.write([exp("a"), exp("a")])
    start = time.monotonic()
    read = buffer.read(4, step=1, timeout=0.3)
    assert read.partial and groups_of(read.experiences) == ["a", "a"]
    assert time.monotonic() - start >= 0.25  # it waited for the rest (the partial read itself says it gave up)


def test_stale_groups_are_dropped_and_counted(buffer):
    buffer.write([exp("old", version=0), exp("old", version=0), exp("new", version=3)])
    read = buffer.read(1, step=5, timeout=0.1, min_version=2)
    assert groups_of(read.experiences) == ["new"] and read.dropped == 2


def test_a_reader_waits_for_the_writer(buffer):
    def later():
        time.sleep(0.3)
        buffer.write([exp("a"), exp("a")])

    threading.Thread(target=later).start()
    read = buffer.read(2, step=1, timeout=10)
    assert groups_of(read.experiences) == ["a", "a"] and read.waited_s >= 0.2


def test_watch_stops_a_wait(buffer):
    def dead():
        raise RuntimeError("the explorer process exited")

    with pytest.raises(RuntimeError, match="explorer process exited"):
        buffer.read(2, step=1, timeout=30, watch=dead)


def test_truncate_after_forgets_later_explore_steps(buffer):
    buffer.write([exp("a", step=1)])
    buffer.write([exp("b", step=2)])
    buffer.truncate_after(1)
    buffer.finish()
    assert groups_of(buffer.read(5, 1, 0.1).experiences) == ["a"]


@pytest.mark.parametrize("where", ["sqlite", "postgres"])
def test_several_explorers_are_read_in_explore_step_order_whoever_wrote_first(tmp_path, where, request):
    """Two explorers (explorer k writes steps k+1, k+3, ...): explorer 1's step 2 lands first, but the trainer's
    step 1 waits for step 1 and reads it, then step 2; so a rerun reads what the first run read, whatever the
    explorers' pace."""
    url = (database_url(str(tmp_path / "b.sqlite")) if where == "sqlite"
           else fresh_database(request.getfixturevalue("pg_url")))
    first, second = SQLBuffer(url, explorers=2, explorer=0), SQLBuffer(url, explorers=2, explorer=1)
    trainer = SQLBuffer(url, explorers=2)
    second.write([exp("s2", step=2), exp("s2", step=2)], {"step": 2})
    with pytest.raises(TimeoutError):  # step 2 is there, step 1 not: nothing is read
        trainer.read(2, step=1, timeout=0.3)
    first.write([exp("s1", step=1), exp("s1", step=1)], {"step": 1})
    assert groups_of(trainer.read(2, step=1, timeout=5).experiences) == ["s1", "s1"]
    assert groups_of(trainer.read(2, step=2, timeout=5).experiences) == ["s2", "s2"]
    second.write([exp("s4", step=4)], {"step": 4})  # step 3 missing: explorer 0 is behind
    with pytest.raises(TimeoutError):
        trainer.read(1, step=3, timeout=0.2)
    first.finish()  # explorer 0 is done (it had no step 3 to write after all): step 4 is next
    assert groups_of(trainer.read(1, step=3, timeout=5).experiences) == ["s4"]


def test_a_write_and_a_read_retried_after_their_commits_answer_was_lost_count_once(pg_url, monkeypatch):
    """The connection drops after the database committed but before it said so: the retried write finds its
    rows there and adds none (it used to fail on the unique id), the retried read returns the claim it made
    (which used to be lost: claimed by the step, never trained on)."""
    import sqlalchemy as sa

    buffer = SQLBuffer(fresh_database(pg_url))
    lost = sa.exc.OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))

    def answer_lost_once(method):
        calls = []

        def once(*args, **kwargs):
            result = method(*args, **kwargs)
            calls.append(1)
            if len(calls) == 1:
                raise lost
            return result

        return once

    monkeypatch.setattr(buffer, "_write", answer_lost_once(buffer._write))
    buffer.write([exp("a"), exp("a"), exp("b")], {"step": 1})
    assert buffer.counts() == {"rows": 3, "consumed": 0, "reads": 0} and buffer.explorer_state() == {"step": 1}
    monkeypatch.setattr(buffer, "_read_once", answer_lost_once(buffer._read_once))
    read = buffer.read(1, step=1, timeout=1)
    assert groups_of(read.experiences) == ["a", "a"] and not read.partial
    assert buffer.counts() == {"rows": 3, "consumed": 2, "reads": 2}
    assert groups_of(buffer.read(1, step=2, timeout=1).experiences) == ["b"]


def test_sql_buffer_is_shared_by_two_connections(tmp_path):
    writer, reader = sql_buffer(tmp_path), sql_buffer(tmp_path)  # two processes' views of one file
    writer.write([exp("a"), exp("a")], {"step": 1})
    assert reader.explorer_state() == {"step": 1}
    assert len(reader.read(2, 1, 1.0).experiences) == 2
    assert writer.counts() == {"rows": 2, "consumed": 2, "reads": 2}
    assert all(steps == [1] for steps in writer.reads_by_id().values())


def test_priority_queue_reads_newest_first_and_replays_after_the_cooldown(tmp_path):
    buffer = sql_buffer(tmp_path, use_priority_queue=True, reuse_cooldown_time=0.3, priority_decay=2.0)
    buffer.write([exp("v0", version=0), exp("v1", version=1)])
    buffer.write([exp("v2", version=2)])
    assert groups_of(buffer.read(1, 1, 0.1).experiences) == ["v2"]  # priority 2 - 2 x 0
    assert groups_of(buffer.read(1, 2, 0.1).experiences) == ["v1"]  # v2 cools down
    time.sleep(0.35)
    # v2 was read once: 2 - 2 x 1 = 0 ties with v0 (0 - 0); the older row first
    assert groups_of(buffer.read(1, 3, 0.1).experiences) == ["v0"]
    assert groups_of(buffer.read(1, 4, 0.1).experiences) == ["v2"]
    assert sorted(len(s) for s in buffer.reads_by_id().values()) == [1, 1, 2]


def test_priority_queue_without_cooldown_reads_each_once(tmp_path):
    buffer = sql_buffer(tmp_path, use_priority_queue=True)
    buffer.write([exp("v0", version=0)])
    buffer.write([exp("v1", version=1)])
    buffer.finish()
    assert groups_of(buffer.read(1, 1, 0.1).experiences) == ["v1"]
    assert groups_of(buffer.read(1, 2, 0.1).experiences) == ["v0"]
    with pytest.raises(BufferClosed):
        buffer.read(1, 3, 0.1)


def test_use_count_limit_stops_the_replays_and_sigma_draws_once_per_entry(tmp_path):
    """Trinity-RFT's decay_limit_randomization: a group read use_count_limit times is not put back (limit 2: read
    twice, then consumed); sigma adds Gaussian noise to the priority, one draw per entry into the queue, the same at
    every read of that entry."""
    buffer = sql_buffer(tmp_path, use_priority_queue=True, reuse_cooldown_time=0.0, use_count_limit=2)
    buffer.write([exp("a", version=0)])
    buffer.finish()
    assert groups_of(buffer.read(1, 1, 0.1).experiences) == ["a"]
    assert groups_of(buffer.read(1, 2, 0.1).experiences) == ["a"]
    with pytest.raises(BufferClosed):  # read twice: consumed
        buffer.read(1, 3, 0.1)
    assert buffer.counts() == {"rows": 1, "consumed": 1, "reads": 2}
    noisy = SQLBuffer(database_url(str(tmp_path / "n.sqlite")), use_priority_queue=True, priority_sigma=2.0)
    row = types.SimpleNamespace(seq=7, model_version=3, use_count=1)
    first = noisy.priority_of(row)
    assert noisy.priority_of(row) == first  # the entry's one draw
    assert first == pytest.approx(3 - 2.0 + 2.0 * np.random.default_rng([7, 1]).standard_normal())
    assert noisy.priority_of(types.SimpleNamespace(seq=7, model_version=3, use_count=2)) != first - 2.0


def test_file_buffer_writes_json_lines(tmp_path):
    buffer = FileBuffer(tmp_path / "x")
    buffer.write([exp("a", step=1), exp("a", step=1)], {"step": 1})
    buffer.write([exp("b", step=2)])
    buffer.truncate_after(1)
    lines = (tmp_path / "x" / "experiences.jsonl").read_text().splitlines()
    assert [Experience.from_json(x).group for x in lines] == ["a", "a"]
    assert buffer.explorer_state() == {"step": 1}
    with pytest.raises(NotImplementedError):
        buffer.read(1, 1)


# --------------------------------------------------------------------------------------------- schedule
def test_sync_schedule_matches_trinity():
    # interval 1, offset 0: every explore step uses the newest weights: on-policy
    assert [required_version(n, 1, 0) for n in range(1, 6)] == [0, 1, 2, 3, 4]
    assert {staleness(n, 1, 0) for n in range(1, 20)} == {0}
    # interval 2, offset 1: explorer syncs after its steps 3, 5, 7 (n > 1 and (n - 1) % 2 == 0) to versions 2, 4, 6
    assert [required_version(n, 2, 1) for n in range(1, 9)] == [0, 0, 0, 2, 2, 4, 4, 6]
    assert [staleness(n, 2, 1) for n in range(1, 7)] == [0, 1, 2, 1, 2, 1]
    assert published_versions(6, 2, 1) == [2, 4]
    # interval 1, offset 1: one step off-policy (verl's one-step-off recipe)
    assert [staleness(n, 1, 1) for n in range(1, 6)] == [0, 1, 1, 1, 1]
    assert max(staleness(n, 4, 3) for n in range(1, 50)) == 4 + 3 - 1


def test_the_trainer_keeps_the_versions_later_explore_steps_use():
    """sync_interval 2, offset 1 over 6 steps: explore steps 1..6 use versions 0, 0, 0, 2, 2, 4. An explorer
    resumed after step 3 needs 2 and 4; the trainer at step s keeps the versions steps after s use, and a
    checkpoint at s saves those older than s."""
    from rft.orchestration.modes import KeptVersions

    assert versions_after(0, 6, 2, 1) == [0, 2, 4]
    assert versions_after(3, 6, 2, 1) == [2, 4] and versions_after(5, 6, 2, 1) == [4] and not versions_after(6, 6, 2, 1)
    # two explorers taking turns: explorer 0 generates steps 1, 3, 5 (versions 0, 0, 2), explorer 1 steps 2, 4, 6
    # (0, 2, 4); of one step, explorer 1 has none, so the trainer sends it nothing
    assert versions_after(0, 6, 2, 1, 0, 2) == [0, 2] and versions_after(0, 6, 2, 1, 1, 2) == [0, 2, 4]
    assert versions_after(3, 6, 2, 1, 0, 2) == [2] and not versions_after(0, 1, 1, 0, 1, 2)
    kept, w = KeptVersions(6, 2, 1, {}), torch.zeros(2)
    held = []
    for step in range(0, 7):
        w += 1  # the trainer's weights after step s are s + 1
        kept.after_step(step, {"w": w})
        held.append(({v: float(x["w"][0]) for v, x in kept.kept.items()}, sorted(kept.before(step))))
    assert held == [({0: 1.0}, []), ({0: 1.0}, [0]), ({0: 1.0, 2: 3.0}, [0]), ({2: 3.0}, [2]),
                    ({2: 3.0, 4: 5.0}, [2]), ({4: 5.0}, [4]), ({4: 5.0}, [4])]
    # a resumed trainer starts from what its checkpoint saved
    assert KeptVersions(6, 2, 1, {2: {"w": torch.ones(1)}}).kept.keys() == {2}


@pytest.mark.parametrize("explored, saved, sent, later, note", [
    (2, {1}, [1, 2], {3}, False),  # the explorer resumes at step 3, which its schedule runs on version 1
    (4, {1}, [], {3}, False),  # an explorer ahead of the checkpoint waits for versions the trainer redoes
    (2, set(), [2], {3}, True),  # a checkpoint without version 1 (an older rft): the newest, and a line saying so
])
def test_a_restarted_trainer_sends_the_versions_the_explorer_resumes_with(monkeypatch, explored, saved, sent, later,
                                                                          note):
    """Trainer resumed at step 2 of 5, sync_interval 1, offset 1 (explore step n uses version n - 2): what it sends
    the explorer that joined at step `explored` before training on, and which versions it sends after their steps."""
    from types import SimpleNamespace

    import rft.sync.process_group as pg
    from rft.orchestration.modes import KeptVersions, TrainLoop

    published = []
    sender = SimpleNamespace(explorer=0, explorer_step=explored, versions=set(),
                             publish=lambda weights, version: published.append((version, float(weights["w"]))))
    monkeypatch.setattr(pg, "ProcessGroupBroadcast", lambda explorers, timeout, alive=None: SimpleNamespace(
        senders=[sender]))
    loop = object.__new__(TrainLoop)
    loop.cfg = SimpleNamespace(synchronizer=SimpleNamespace(sync_interval=1, sync_offset=1, sync_timeout=1.0),
                               trainer=SimpleNamespace(explorer_num=1))
    loop.total_steps = 5
    loop.trainer = SimpleNamespace(trainable_weights=lambda: {"w": torch.tensor(2.0)})  # the checkpoint's
    kept = KeptVersions(5, 1, 1, {v: {"w": torch.tensor(float(v))} for v in saved})
    kept.after_step(2, loop.trainer.trainable_weights())
    lines = []
    _, publish_at = loop._broadcaster(2, kept, lines.append)
    assert published == [(v, float(v)) for v in sent] and publish_at == later
    assert sender.versions == set(sent) | later  # what the broadcast hands this explorer's sender
    assert bool(lines) == note and (not note or "not an exact replay" in lines[0])


def test_batch_is_made_from_one_experience_per_row():
    batch = Batch(prompt_ids=torch.tensor([[1, 2]]), prompt_mask=torch.ones(1, 2, dtype=torch.long),
                  response_ids=torch.tensor([[3, 0]]), response_mask=torch.tensor([[1, 0]]),
                  group=torch.tensor([0]), rollout_logprobs=torch.tensor([[-1.0, 0.0]]),
                  scores=torch.tensor([0.5]), reward_rows=[{"acc": 0.0}])
    (e,) = from_batch(batch, ["g"], model_version=4)
    assert e.tokens.tolist() == [1, 2, 3] and e.prompt_length == 2 and e.reward == 0.5
    assert e.logprobs.tolist() == [-1.0] and e.model_version == 4 and e.rewards == {"acc": 0.0}


def test_a_multi_turn_experience_keeps_its_action_mask_in_the_batch():
    e = exp("a", response=(7, 8, 2))
    e.action_mask = torch.tensor([1, 0, 1])  # the middle token is a tool's
    plain = exp("b", response=(5, 2))
    batch = to_batch([e, plain], pad_token_id=0)
    assert batch.response_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch.action_mask.tolist() == [[1, 0, 1], [1, 1, 0]] and batch.loss_mask.tolist() == [[1, 0, 1], [1, 1, 0]]
    assert to_batch([plain], 0).action_mask is None  # single-turn rows: no separate mask


def test_a_database_that_cannot_be_used_is_one_line_naming_it(tmp_path):
    """A server refusing connections, one that accepts and never answers (connect timeout), a damaged SQLite file
    and a missing driver: each an RftError naming the URL (password hidden), none a hang or a bug report."""
    import socket
    import threading
    import time

    from rft.buffer.sql import CONNECT_TIMEOUT_S
    from rft.errors import RftError

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(RftError, match=r"'postgresql\+psycopg://u:\*\*\*@127.0.0.1:\d+/db': cannot reach the database"):
        SQLBuffer(f"postgresql+psycopg://u:secret@127.0.0.1:{port}/db")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(silent.accept()) for _ in range(8)], daemon=True).start()
    start = time.monotonic()
    with pytest.raises(RftError, match="cannot reach the database .*timeout"):
        SQLBuffer(f"postgresql+psycopg://u@127.0.0.1:{silent.getsockname()[1]}/db")
    assert time.monotonic() - start < CONNECT_TIMEOUT_S * 6  # cut by the connect timeout: not the 120 s statement one
    silent.close()
    (tmp_path / "bad.db").write_bytes(b"not sqlite " * 500)
    with pytest.raises(RftError, match="not a database the buffer can open"):
        SQLBuffer(f"sqlite:///{tmp_path / 'bad.db'}")
    with pytest.raises(RftError, match="its driver 'pymysql' is not installed"):
        SQLBuffer("mysql+pymysql://u@127.0.0.1/db")


def test_a_sync_folder_refusing_writes_for_a_moment_is_waited_out(tmp_path, monkeypatch, caplog):
    """CheckpointSync.publish: a shared folder that refuses writes (EACCES, as an NFS mount whose permissions are
    being fixed) for its first two attempts is retried, with one warning, and the version lands whole; a path
    that cannot be a folder is not retried."""
    import errno

    import safetensors.torch

    from rft.sync.checkpoint import CheckpointSync

    real, calls = safetensors.torch.save_file, []

    def flaky(tensors, path, *args, **kwargs):
        calls.append(path)
        if len(calls) <= 2:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save_file", flaky)
    sync = CheckpointSync(tmp_path / "sync", timeout=30)
    with caplog.at_level("WARNING", logger="rft"):
        sync.publish({"w": torch.ones(3)}, 2)
    assert len(calls) == 3 and sync.versions() == [2]
    assert torch.equal(sync.receive(2)[0]["w"], torch.ones(3))
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 1
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):  # not transient: raised at once
        CheckpointSync(tmp_path / "file", timeout=30).publish({"w": torch.ones(3)}, 1)


def test_an_announcing_explorer_says_it_waits_and_reminds_while_it_waits(tmp_path, monkeypatch, caplog):
    """CheckpointSync(announce=True) (mode explore): one line when its first wait starts, naming the version, the
    folder, the command to start and the timeout; a reminder every REMIND_EVERY s; later waits start silently;
    announce=False (mode both, whose trainer is its own parent) prints nothing."""
    from rft.sync import checkpoint

    monkeypatch.setattr(checkpoint, "REMIND_EVERY", 0.3)
    sync = checkpoint.CheckpointSync(tmp_path / "sync", timeout=1.0, announce=True)
    with caplog.at_level("WARNING", logger="rft"), pytest.raises(TimeoutError):
        sync.receive(1)
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith(f"rft: waiting for the trainer's weights of version 1 in {tmp_path / 'sync'} (start "
                              "trainer.mode=train"), said
    assert "gives up after synchronizer.sync_timeout=1 s" in said[0], said
    assert 2 <= len(said) <= 5 and all(line.startswith("rft: still (") for line in said[1:]), said
    caplog.clear()
    monkeypatch.setattr(checkpoint, "REMIND_EVERY", 60.0)
    with caplog.at_level("WARNING", logger="rft"), pytest.raises(TimeoutError):
        sync.receive(2)  # not the first wait: a step's routine wait for the trainer
    with caplog.at_level("WARNING", logger="rft"), pytest.raises(TimeoutError):
        checkpoint.CheckpointSync(tmp_path / "sync", timeout=0.2).receive(1)
    assert caplog.records == []


HOLD_LOCK = """import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
connection.execute("COMMIT")
"""


def hold_lock(path, seconds: float):
    """Another process holding an open write transaction on the SQLite file `path` for `seconds`."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_sqlite_buffer_another_process_locks_is_waited_for_then_one_line_naming_it(tmp_path, monkeypatch):
    """Another process's open transaction on the file: a short one is waited out; one held past LOCK_WAIT_S
    is one line naming the file and the other process (it used to wait 120 s per attempt, silently, then fail
    as a bug)."""
    from rft.buffer import sql
    from rft.errors import RftError, describe_failure

    buffer = sql_buffer(tmp_path)
    buffer.write([exp("a")], {"step": 1})
    monkeypatch.setattr(sql, "LOCK_WAIT_S", 20.0)
    holder = hold_lock(tmp_path / "b.sqlite", 1.0)
    buffer.write([exp("b")], {"step": 2})  # waits for the commit, then writes
    holder.wait(30)
    monkeypatch.setattr(sql, "LOCK_WAIT_S", 1.0)
    holder = hold_lock(tmp_path / "b.sqlite", 60.0)
    try:
        start = time.monotonic()
        with pytest.raises(RftError) as err:
            buffer.write([exp("c")], {"step": 3})
        assert time.monotonic() - start < 60  # LOCK_WAIT_S, not the holder's 60 s nor SQLite's 120 s a try
    finally:
        holder.kill()
        holder.wait(30)
    line = describe_failure(err.value)
    assert str(tmp_path / "b.sqlite") in line and "another process" in line and "\n" not in line, line
    buffer.write([exp("c")], {"step": 3})  # the lock gone: the same command goes on
    assert buffer.counts()["rows"] == 3 and buffer.explorer_state() == {"step": 3}


WAIT_FOR_LOCK = """import sys
from rft import interrupts
from rft.buffer import SQLBuffer, database_url, sql
sql.LOCK_WAIT_S = 300.0
buffer = SQLBuffer(database_url(sys.argv[1]))
try:
    with interrupts.handled():
        interrupts.check_between_phases("step")  # as in a run: training began, a signal waits for a boundary
        print("writing", flush=True)
        buffer.write([], {"step": 2})
except KeyboardInterrupt as e:
    print(getattr(e, "message", repr(e)), flush=True)
    sys.exit(getattr(e, "exit_code", 130))
"""


def test_sigterm_stops_a_wait_for_a_sqlite_lock(tmp_path):
    """SIGTERM while another process locks the buffer's file: the wait stops, saying why, while the lock is still
    held (SQLite's busy wait of 120 s used to hold the signal until it ended). Told by the exit status and the line,
    not by a time: on a loaded machine the stop took 8 s."""
    import signal
    import subprocess
    import sys

    sql_buffer(tmp_path).write([exp("a")], {"step": 1})
    holder = hold_lock(tmp_path / "b.sqlite", 120.0)
    waiter = subprocess.Popen([sys.executable, "-c", WAIT_FOR_LOCK, str(tmp_path / "b.sqlite")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert waiter.stdout.readline().strip() == "writing"
        time.sleep(1.0)
        waiter.send_signal(signal.SIGTERM)
        try:  # within the holder's 120 s: a wait that ignored the signal would end when the lock does, exit 0
            out, _ = waiter.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("the wait for the lock ignored SIGTERM")
    finally:
        for process in (waiter, holder):
            process.kill()
            process.wait(30)
    assert waiter.returncode == 143, out
    assert "stopped by SIGTERM while waiting for the experience buffer" in out, out


def test_a_table_another_process_creates_at_the_same_moment_is_taken_as_it_is(tmp_path, monkeypatch):
    """Explorer and trainer open one SQLite buffer at once: the one that loses the race to CREATE a table gets
    "table ... already exists" and opens the buffer on its next attempt (a race test_modes' kill tests met)."""
    import sqlalchemy as sa

    from rft.buffer import sql

    real, calls = sql.create_tables, []

    def racing(engine):
        calls.append(1)
        if len(calls) == 1:
            real(engine)  # the other process's CREATE lands first
            raise sa.exc.OperationalError("CREATE TABLE rft_reads", {},
                                          Exception("table rft_reads already exists"))
        real(engine)

    monkeypatch.setattr(sql, "create_tables", racing)
    buffer = SQLBuffer(database_url(str(tmp_path / "b.sqlite")))
    assert len(calls) == 2 and buffer.engine.dialect.name == "sqlite"


# ------------------------------------------------------------------------------------ sharing a buffer
LAYOUT = {"explorer_num": 2, "rollout_n": 4,
          "model": {"model_type": "qwen2", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 2,
                    "tokenizer": "ab" * 32}}


@pytest.mark.parametrize("key, value, said", [
    ("explorer_num", 1, "is shared by trainer.explorer_num=2 explorers (as its run began); this process has "
                        "trainer.explorer_num=1"),
    ("rollout_n", 8, "belongs to a run with actor_rollout_ref.rollout.n=4 (groups of that many responses); this run "
                     "has rollout.n=8: a new run needs a buffer of its own"),
    ("model", {**LAYOUT["model"], "hidden_size": 256}, "belongs to a run of another model (qwen2, hidden_size 64, "
                                                       "2 layers, vocabulary 300"),
    ("model", {**LAYOUT["model"], "tokenizer": "cd" * 32}, "tokenizer abababababab) than this process's"),
])
def test_a_process_of_another_run_layout_is_refused_in_one_line(tmp_path, key, value, said):
    """The first process records the run's layout; one that differs in explorers, group size or model is refused
    (a trainer without explorer_num beside two explorers stopped after half the steps; another model's samples
    broke the update; another rollout.n trained on the first run's groups), one that agrees joins."""
    from rft.errors import RftError, describe_failure

    url = database_url(str(tmp_path / "b.sqlite"))
    first = SQLBuffer(url, explorers=2)
    first.join(LAYOUT, [])
    SQLBuffer(url, explorers=2).join(dict(LAYOUT), [])  # the same terms: joins
    with pytest.raises(RftError) as err:
        SQLBuffer(url).join({**LAYOUT, key: value}, [])
    line = describe_failure(err.value)
    assert said in line and str(tmp_path / "b.sqlite") in line and "\n" not in line, line


def test_a_role_held_by_a_live_process_is_refused_and_a_dead_holders_is_taken_over(tmp_path, caplog):
    """Explorer 0 of a buffer held by a live process (its heartbeat moves): a second one is refused naming the
    holder (two explore commands with one explorer_rank both generated every task of their steps). A killed
    holder's role is taken at once by its rerun; a released one too."""
    import json
    import signal
    import subprocess
    import sys

    from rft.errors import RftError, describe_failure

    url = database_url(str(tmp_path / "b.sqlite"))
    holder = SQLBuffer(url, explorers=2)
    holder.join(LAYOUT, ["explorer/0"])
    others = SQLBuffer(url, explorers=2)
    others.join(LAYOUT, ["explorer/1", "trainer"])  # other roles are free
    with pytest.raises(RftError) as err:  # the heartbeat moved (one that stood still for WATCH_S is taken over)
        SQLBuffer(url, explorers=2).join(LAYOUT, ["explorer/0"])
    line = describe_failure(err.value)
    assert f"trainer.explorer_rank=0 is explored by another process (pid {os.getpid()}" in line, line
    assert "give each explore command its own trainer.explorer_rank in [0, trainer.explorer_num=2)" in line
    holder.close()  # released: taken at once
    others.close()
    again = SQLBuffer(url, explorers=2)
    again.join(LAYOUT, ["explorer/0"])
    again.close()
    child = subprocess.Popen([sys.executable, "-c", HOLD_ROLE, str(tmp_path / "b.sqlite"), json.dumps(LAYOUT)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "holding"
        with pytest.raises(RftError, match=f"read by another trainer \\(pid {child.pid} on"):
            SQLBuffer(url, explorers=2).join(LAYOUT, ["trainer"])
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        with caplog.at_level("INFO", logger="rft"):
            SQLBuffer(url, explorers=2).join(LAYOUT, ["trainer"])  # its process is gone: taken over
        said = [r.getMessage() for r in caplog.records]
        assert any("which has ended; this process takes over" in x for x in said), said
        assert not any("watching its heartbeat" in x for x in said), said  # at once: its pid tells
    finally:
        child.kill()
        child.wait(30)


HOLD_ROLE = """import json, sys, time
from rft.buffer import SQLBuffer, database_url
SQLBuffer(database_url(sys.argv[1]), explorers=2).join(json.loads(sys.argv[2]), ["trainer"])
print("holding", flush=True)
time.sleep(120)
"""


def test_a_holder_on_another_host_is_watched_and_a_still_heartbeat_taken_over(tmp_path, monkeypatch, caplog):
    """A holder recorded by another machine (its pid means nothing here): its heartbeat is watched for WATCH_S,
    and one that stood still (the machine went down) is taken over; the process that lost its role says so at its
    next write."""
    import json

    import sqlalchemy as sa

    from rft.buffer import sharing, sql
    from rft.errors import RftError

    monkeypatch.setattr(sharing, "WATCH_S", 1.0)
    url = database_url(str(tmp_path / "b.sqlite"))
    first = SQLBuffer(url, explorers=2)
    first.join(LAYOUT, ["explorer/1"])
    first.holders._stop.set()  # its machine stops (the heartbeat with it)
    first.holders._thread.join()
    with first.engine.begin() as conn:
        record = json.loads(conn.execute(sa.select(sql.META.c.value).where(
            sql.META.c.key == "holder/explorer/1")).scalar())
        conn.execute(sql.META.update().where(sql.META.c.key == "holder/explorer/1").values(
            value=json.dumps({**record, "host": "elsewhere"})))
    start = time.monotonic()
    second = SQLBuffer(url, explorers=2)
    with caplog.at_level("INFO", logger="rft"):
        second.join(LAYOUT, ["explorer/1"])
    assert time.monotonic() - start >= 1.0  # watched for WATCH_S, then taken over because it stood still:
    assert any("whose heartbeat stood still for 1 s" in r.getMessage() for r in caplog.records)
    first.holders._beat_once(1)  # its machine back: it finds the role taken
    with pytest.raises(RftError, match="explorer 1 was taken over by pid"):
        first.write([exp("a")], {"step": 2})
    second.close()


# ------------------------------------------------------------------------------- the run that owns a buffer
@pytest.fixture(params=["sqlite", "postgres", "file"])
def kept_buffer(request, tmp_path):
    """Buffers that outlive their process: a function opening the one named `name` (again, as each process of a
    run does)."""
    databases: dict[str, str] = {}

    def open_buffer(name: str = "b"):
        if request.param == "file":
            return FileBuffer(tmp_path / name)
        if request.param == "sqlite":
            return SQLBuffer(database_url(str(tmp_path / f"{name}.sqlite")))
        if name not in databases:
            databases[name] = fresh_database(request.getfixturevalue("pg_url"))
        return SQLBuffer(databases[name])

    return open_buffer


def test_a_buffer_belongs_to_the_run_that_claimed_it_first_and_refuses_another(kept_buffer, tmp_path):
    """The first run to claim a buffer records itself (its id, written in its output folder, the folder, the
    host); the same run again (its other role, a resume: the same folder) goes on; a process of another run is one
    line naming the buffer, the run that owns it and what to do (a new run's explorer took a finished run's steps
    as its own and exited 0). A new run in the owner's folder path, the folder made again, is another run too."""
    import shutil
    import socket

    from rft.errors import RftError, describe_failure
    from rft.fsutil import host_id
    from rft.trainer.run_folder import claim_buffer

    first, other = tmp_path / "first", tmp_path / "other"
    first.mkdir()
    other.mkdir()
    buffer = kept_buffer()
    claim_buffer(buffer, first)
    run = (first / ".rft-run-id").read_text().strip()
    assert len(run) == 32 and buffer.owner() == {"run": run, "folder": str(first.resolve()), "host": host_id()}
    claim_buffer(kept_buffer(), first)
    assert (first / ".rft-run-id").read_text().strip() == run
    with pytest.raises(RftError) as err:
        claim_buffer(kept_buffer(), other)
    assert describe_failure(err.value) == (
        f"experience_buffer.path {buffer.where} belongs to another run (run {run[:8]}, output folder "
        f"{first.resolve()} on {socket.gethostname()}), and this run (output folder {other.resolve()}) would take "
        "that run's experiences as its own: give this run a buffer of its own (another experience_buffer.path, or "
        f"move that one aside), or resume that run with trainer.default_local_dir={first.resolve()}")
    shutil.rmtree(first)
    first.mkdir()
    with pytest.raises(RftError, match="belongs to another run"):
        claim_buffer(kept_buffer(), first)
    assert buffer.owner()["run"] == run


def _claim_at_once(buffer, folder: Path, start: threading.Barrier, errors: list[str]) -> None:
    from rft.trainer.run_folder import claim_buffer

    start.wait()
    try:
        claim_buffer(buffer, folder)
    except Exception as e:  # the failure is the finding
        errors.append(f"{type(e).__name__}: {e}")


def test_the_processes_of_a_new_run_starting_at_once_are_one_run(kept_buffer, tmp_path):
    """The explorer and the trainer of a new run claim a new buffer at the same moment (four processes, three
    times): each would have made an id of its own, and the later ones been refused; the folder's id is written
    once, and all agree."""
    for round in range(3):
        folder = tmp_path / f"run{round}"
        folder.mkdir()
        start, errors = threading.Barrier(4), []
        buffers = [kept_buffer(f"b{round}") for _ in range(4)]
        threads = [threading.Thread(target=_claim_at_once, args=(b, folder, start, errors)) for b in buffers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert kept_buffer(f"b{round}").owner()["run"] == (folder / ".rft-run-id").read_text().strip()


def test_the_same_folder_on_another_machine_is_the_same_run(kept_buffer, tmp_path):
    """docs/scaling.md's two machines without a shared file system, each with the run's folder at one path: the
    trainer's machine recorded the buffer's owner; the explorer's folder (the same path, no id there) takes that
    run's id, also when both started at once (this machine found no owner yet and made an id of its own)."""
    from rft.trainer.run_folder import claim_buffer

    folder = tmp_path / "run"
    folder.mkdir()
    kept_buffer().own({"run": "a" * 32, "folder": str(folder.resolve()), "host": "trainer-machine"})
    claim_buffer(kept_buffer(), folder)
    assert (folder / ".rft-run-id").read_text().strip() == "a" * 32
    (folder / ".rft-run-id").unlink()
    racing = kept_buffer()
    racing.owner = lambda: None  # its look came before the trainer's machine recorded itself
    claim_buffer(racing, folder)
    assert (folder / ".rft-run-id").read_text().strip() == "a" * 32


def test_a_buffer_an_earlier_rft_read_belongs_to_the_run_whose_trainer_read_it(tmp_path):
    """An earlier rft recorded only the run whose trainer read a database buffer (`trainer_run`): that run owns
    it, and a process of another run is refused naming its folder."""
    import json

    from rft.buffer import sql
    from rft.errors import RftError
    from rft.trainer.run_folder import claim_buffer

    buffer = sql_buffer(tmp_path)
    with buffer.engine.begin() as conn:
        conn.execute(sql.META.insert().values(key=sql.TRAINER_RUN_KEY, value=json.dumps(
            {"run": "b" * 32, "folder": "/runs/old"})))
    (tmp_path / "new").mkdir()
    with pytest.raises(RftError, match="belongs to another run \\(run bbbbbbbb, output folder /runs/old\\), and "):
        claim_buffer(sql_buffer(tmp_path), tmp_path / "new")


WAIT_FOR_DATA = """import sys
from rft import interrupts
from rft.buffer import SQLBuffer, database_url
from rft.sync.checkpoint import CheckpointSync
what = sys.argv[2]
try:
    with interrupts.handled():
        interrupts.check_between_phases("step")  # as in a run: a first signal waits for a phase boundary
        print("waiting", flush=True)
        if what == "read":
            SQLBuffer(database_url(sys.argv[1])).read(4, step=1, timeout=300)
        else:
            CheckpointSync(sys.argv[1], 300, 1, 0).receive(1)
except KeyboardInterrupt as e:
    print(getattr(e, "message", repr(e)), flush=True)
    sys.exit(getattr(e, "exit_code", 130))
"""


@pytest.mark.parametrize("what", ["read", "receive"])
def test_one_ctrl_c_stops_a_wait_for_experiences_or_weights(tmp_path, what):
    """A trainer waiting for experiences, an explorer waiting for the trainer's weights: one SIGINT stops the wait,
    saying what it was waiting for (it used to wait on, up to the 300-1200 s time-out,
    holding its role and its run folder)."""
    import signal
    import subprocess
    import sys

    target = str(tmp_path / "b.sqlite") if what == "read" else str(tmp_path / "sync")
    waiter = subprocess.Popen([sys.executable, "-c", WAIT_FOR_DATA, target, what], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert waiter.stdout.readline().strip() == "waiting"
        time.sleep(1.0)
        waiter.send_signal(signal.SIGINT)
        out, _ = waiter.communicate(timeout=120)  # does not hang: the wait's own time-out is 300-1200 s
    finally:
        waiter.kill()
        waiter.wait(30)
    assert waiter.returncode == 130, out
    said = "waiting for experiences in the experience buffer" if what == "read" else "waiting for the trainer's weights"
    assert f"stopped by SIGINT while {said}" in out, out


def test_the_trainer_waits_for_a_late_explorer_without_c10d_warnings(capfd, monkeypatch):
    """The trainer's side of sync_method nccl polls for the explorer while its model loads: quietly (a timed-out
    1 s store.wait printed two '[c10d] waitForInput ... timed out' lines to stderr every second), and both join."""
    import threading
    import time

    import rft.sync.process_group as pg

    monkeypatch.setenv(pg.PORT_ENV, str(pg.free_port()))
    joined = {}

    def explorer():
        time.sleep(2.5)  # the explorer loading its model
        joined["explorer"] = pg._Group(pg._store(False, 30.0), 1, 0, 30.0)

    thread = threading.Thread(target=explorer)
    thread.start()
    trainer = pg._Group(pg._store(True, 30.0), 0, 0, 30.0)
    thread.join()
    assert "explorer" in joined and trainer.group is not None
    assert "waitForInput" not in capfd.readouterr().err
