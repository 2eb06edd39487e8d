"""Tasksets: where the explorer's tasks come from (Trinity-RFT's taskset storage types).

* `file`: parquet / jsonl files (`data.train_files`), sampled without replacement each epoch (`PromptSampler`).
* `sql`: a database table (`data.train_files` a SQLAlchemy URL, table `data.task_table`) read whole when the run
  starts and sampled like files.
* `queue`: the same kind of table read as a stream: tasks in id order, each once, the explorer waiting for
  producers to add more (up to experience_buffer.max_read_timeout). Its position (the last id read) is part of the
  explorer's state, written with each step's experiences, so a restarted explorer neither skips nor repeats tasks.

A task table has an integer primary key `id` and a text column `task` holding one row in verl's format as JSON
(`write_tasks` fills one).
"""

from __future__ import annotations

import json
import time

from rft.buffer.base import database_url
from rft.data.curriculum import UserSampler, build_sampler
from rft.data.dataset import Prompt, PromptDataset, PromptSampler
from rft.data.selectors import build_selector

STORAGE_TYPES = ("file", "sql", "queue")


def task_table(name: str):
    import sqlalchemy as sa  # loaded only for database tasksets

    return sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("task", sa.Text, nullable=False))


def write_tasks(url: str, table: str, rows: list[dict]) -> None:
    """Append `rows` (verl's row format) to the task table `table` of the database `url` (created if missing)."""
    from rft.buffer.sql import make_engine

    engine = make_engine(database_url(url))
    t = task_table(table)
    t.metadata.create_all(engine, checkfirst=True)
    with engine.begin() as conn:
        conn.execute(t.insert(), [{"task": json.dumps(r)} for r in rows])
    engine.dispose()


def read_tasks(url: str, table: str, after: int = 0, limit: int | None = None) -> list[tuple[int, dict]]:
    """(id, row) of the tasks with id > `after`, in id order, at most `limit`."""
    import sqlalchemy as sa

    from rft.buffer.sql import make_engine

    engine = make_engine(database_url(url))
    t = task_table(table)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(table):
                return []
            query = sa.select(t.c.id, t.c.task).where(t.c.id > after).order_by(t.c.id)
            rows = conn.execute(query.limit(limit) if limit else query).all()
    finally:
        engine.dispose()
    return [(i, json.loads(task)) for i, task in rows]


def generation_batch(data) -> tuple[int, str]:
    """(prompts per generation batch, the key that sets it): data.train_batch_size, or with DAPO's dynamic
    sampling verl's data.gen_batch_size where set (its dataloader's batch size: a taskset's batches, epochs and
    sampler state count generation batches; the config checks refuse it elsewhere)."""
    if data.gen_batch_size is not None and data.gen_batch_size != data.train_batch_size:
        return data.gen_batch_size, "data.gen_batch_size"
    return data.train_batch_size, "data.train_batch_size"


class FileTaskset:
    """Tasks of files or of a table read whole, `batch_size` a generation batch (a step's, without dynamic
    sampling), a new seeded permutation each epoch."""

    def __init__(self, dataset: PromptDataset, batch_size: int, shuffle: bool, seed: int,
                 batch_key: str = "data.train_batch_size", user_sampler=None, selector=None):
        """`batch_key`: the key that set `batch_size`, named by the errors of a set or a checkpoint that differ;
        `user_sampler`: a sampler of the user's that draws the tasks instead (data.sampler, `rft.data.curriculum`);
        `selector`: one of rft's task selectors (data.selector, `rft.data.selectors`)."""
        self.dataset = dataset
        self.last: list[int] = []  # the dataset positions of the last batch drawn
        if selector is not None:
            self.sampler = selector
            return
        if user_sampler is not None:
            self.sampler = UserSampler(user_sampler, len(dataset), batch_size, batch_key)
            return
        self.sampler = PromptSampler(len(dataset), batch_size, shuffle, seed, batch_key=batch_key,
                                     mini_batch_key="actor_rollout_ref.actor.ppo_mini_batch_size"
                                     if batch_key == "data.train_batch_size" else None)

    @property
    def curriculum(self) -> UserSampler | None:
        """The user's sampler (data.sampler), whose update reads each trained step's batch; None: rft's."""
        return self.sampler if isinstance(self.sampler, UserSampler) else None

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def next_batch(self) -> list[Prompt]:
        return [self.dataset[i] for i in self.next_indices()]

    def next_indices(self) -> list[int]:
        """The next generation batch as dataset positions (a streaming explorer's checkpoint names its tasks so)."""
        self.last = list(self.sampler.next_batch())
        return self.last

    def feedback(self, positions: list[int], values: list[float]) -> None:
        """The pass rates (mean rewards) of the last batch's tasks at `positions` in it, for a selector that reads
        them (data.selector difficulty_based)."""
        if hasattr(self.sampler, "feedback"):
            self.sampler.feedback([self.last[p] for p in positions], values)

    @property
    def drawn(self) -> int:
        """Generation batches drawn so far, over every epoch."""
        return self.sampler.drawn

    def skip(self, batches: int) -> None:
        """Draw `batches` generation batches and leave them (another explorer's)."""
        for _ in range(batches):
            self.sampler.next_batch()

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


class QueueTaskset:
    """Tasks of a table as a stream: `batch_size` new ones a step, in id order, each once."""

    def __init__(self, url: str, table: str, make_prompts, batch_size: int, timeout: float):
        """`make_prompts(name, rows)`: Prompts of task rows (the data section's template and length settings)."""
        self.url, self.table, self.make_prompts = url, table, make_prompts
        self.batch_size, self.timeout = batch_size, timeout
        self.position = 0  # the id of the last task read

    def __len__(self) -> int:
        return 0  # a stream: no size

    @property
    def epoch(self) -> int:
        return 0

    def next_batch(self) -> list[Prompt]:
        start, delay = time.monotonic(), 0.05
        while True:
            tasks = read_tasks(self.url, self.table, self.position, self.batch_size)
            if len(tasks) == self.batch_size:
                break
            if time.monotonic() - start > self.timeout:
                raise TimeoutError(
                    f"the task queue {self.url} (table {self.table}) held {len(tasks)} of the {self.batch_size} new "
                    f"tasks a step needs after {self.timeout:.0f} s (experience_buffer.max_read_timeout): add tasks "
                    "(rft.explorer.taskset.write_tasks) or lower trainer.total_training_steps"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        self.position = tasks[-1][0]
        return self.make_prompts(f"{self.url}#{self.table}", [row for _, row in tasks]).prompts

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def make_taskset(cfg, make_prompts):
    """The training taskset of `cfg` (data.task_storage); `make_prompts(name_or_files, rows=None)` builds a
    PromptDataset of files or of named rows."""
    data = cfg.data
    size, key = generation_batch(data)
    if data.task_storage in ("file", "sql"):
        if data.task_storage == "file":
            dataset = make_prompts(data.train_files)
        else:
            url = database_url(data.train_files)
            rows = [row for _, row in read_tasks(url, data.task_table)]
            if not rows:
                from rft.data.dataset import DataError

                raise DataError(f"data.train_files={data.train_files!r}: the table {data.task_table!r} holds no tasks")
            dataset = make_prompts([(f"{url}#{data.task_table}", rows)])
        sampler = build_sampler(data, dataset) if data.sampler.class_path else None
        selector = build_selector(data.selector, [p.row for p in dataset], size, key, "data.train_files") \
            if data.selector.selector_type else None
        return FileTaskset(dataset, size, data.shuffle, data.seed, key, user_sampler=sampler, selector=selector)
    url = database_url(data.train_files)
    return QueueTaskset(url, data.task_table, lambda name, rows: make_prompts([(name, rows)]), size,
                        cfg.experience_buffer.max_read_timeout)
