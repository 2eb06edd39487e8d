"""Tasksets from a database (Trinity-RFT's sql and queue storage types): a table read whole and sampled like
files, or read as a stream in id order with a position that survives a restart; and a run that trains on them."""

from __future__ import annotations

import threading
import time

import pytest
from rl_helpers import make_assets, rl_config

from rft.data.io import read_rows
from rft.explorer import load_tasksets
from rft.explorer.taskset import FileTaskset, QueueTaskset, read_tasks, write_tasks
from rft.models.load import load_tokenizer
from rft.monitor import Timer


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


def rows(assets, n=None):
    return read_rows(assets / "data" / "train.parquet")[:n]


def test_task_table_round_trip(tmp_path, assets):
    url = f"sqlite:///{tmp_path / 't.db'}"
    write_tasks(url, "tasks", rows(assets, 3))
    write_tasks(url, "tasks", rows(assets)[3:5])
    got = read_tasks(url, "tasks")
    assert [i for i, _ in got] == [1, 2, 3, 4, 5] and [r for _, r in got] == rows(assets, 5)
    assert [i for i, _ in read_tasks(url, "tasks", after=3)] == [4, 5]
    assert read_tasks(url, "missing") == []


def test_sql_taskset_is_sampled_like_files(tmp_path, assets):
    url = f"sqlite:///{tmp_path / 't.db'}"
    write_tasks(url, "arith", rows(assets))
    tok = load_tokenizer(str(assets / "model"))
    from_files, _ = load_tasksets(rl_config(assets, tmp_path / "a"), tok)
    from_sql, _ = load_tasksets(rl_config(assets, tmp_path / "b", "data.task_storage=sql", f"data.train_files={url}",
                                          "data.task_table=arith"), tok)
    assert isinstance(from_sql, FileTaskset) and len(from_sql) == len(from_files) == 64
    for _ in range(3):  # the same seeded order over the same rows
        assert [p.ids for p in from_sql.next_batch()] == [p.ids for p in from_files.next_batch()]


def test_queue_taskset_streams_each_task_once_and_waits_for_more(tmp_path, assets):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    write_tasks(url, "tasks", rows(assets, 6))
    tok = load_tokenizer(str(assets / "model"))
    cfg = rl_config(assets, tmp_path / "o", "data.task_storage=queue", f"data.train_files={url}",
                    "trainer.total_training_steps=3", "experience_buffer.max_read_timeout=20")
    queue, _ = load_tasksets(cfg, tok)
    assert isinstance(queue, QueueTaskset)
    first = queue.next_batch()  # 4 a step
    assert [p.ground_truth for p in first] == [r["reward_model"]["ground_truth"] for r in rows(assets, 4)]
    state = queue.state_dict()
    assert state == {"position": 4}

    def producer():
        time.sleep(0.5)
        write_tasks(url, "tasks", rows(assets)[6:10])

    threading.Thread(target=producer).start()
    start = time.monotonic()
    second = queue.next_batch()  # 2 left, 2 arrive after 0.5 s
    assert time.monotonic() - start >= 0.4
    assert [p.ground_truth for p in second] == [r["reward_model"]["ground_truth"] for r in rows(assets)[4:8]]
    again, _ = load_tasksets(cfg, tok)  # a restarted explorer continues from its recorded position
    again.load_state_dict(state)
    assert [p.ids for p in again.next_batch()] == [p.ids for p in second]
    queue.timeout = 0.3
    with pytest.raises(TimeoutError, match="held 2 of the 4 new tasks"):
        queue.next_batch()


def test_a_run_trains_on_a_queue_taskset(tmp_path, assets):
    from rft.orchestration.run import SyncRun

    url = f"sqlite:///{tmp_path / 'q.db'}"
    write_tasks(url, "tasks", rows(assets, 8))
    run = SyncRun(rl_config(assets, tmp_path / "out", "data.task_storage=queue", f"data.train_files={url}",
                            "trainer.total_training_steps=2"))
    metrics = [run.train_step(step, Timer()) for step in (1, 2)]
    assert all(m["actor/grad_norm"] > 0 for m in metrics)
    assert run.explorer.taskset.state_dict() == {"position": 8}
