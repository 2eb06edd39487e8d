"""Streaming in training: `actor_rollout_ref.rollout.mode=async` with `async_training.staleness_threshold` set
(verl's fully-async recipe, run in rft's async path: one process, the engine in its `rft serve` process).

The explorer keeps up to (1 + staleness_threshold) x data.train_batch_size groups outstanding (sent and not yet
trained: verl's freshness bound), drawing a new generation batch whenever one fits under the bound; the server's
stream refills its slots as rows finish (continuous batching), so a long response holds its own slot only. A step
trains the first data.train_batch_size groups answered (a group: one task's n samples, answered whole), while the
others go on generating in the server during the update. With `partial_rollout` the sync loads the new weights while
they run: their next tokens are the new version's, each token tagged with the version that drew it; without, the sync
waits for them first.

`deterministic` (rft's own key): groups are trained in task order; the tasks drawn at a step go to the server as one
request, seeded from the explorer's generator, and every request is finished before the weights change, a validation
or a checkpoint: with nothing else in flight the server's samples depend on the seed and the weights only, so two runs
with one seed are bitwise equal. A checkpoint holds the groups answered and not yet trained (their tokens, log-probs
and versions) and the tasks' dataset positions, so a resumed run trains what the uninterrupted one would.
"""

from __future__ import annotations

import torch

from rft.batch import Batch
from rft.data.dataset import Prompt
from rft.explorer.evaluate import output_batch
from rft.rollout.base import SamplingParams
from rft.rollout.remote import GroupStream, RemoteRollout


class StreamingRollout:
    """The explorer's groups in flight on its engine server, under the staleness bound (see the module docstring)."""

    def __init__(self, cfg, engine: RemoteRollout, taskset, params: SamplingParams, generator: torch.Generator):
        a = cfg.async_training
        self.batch_size = cfg.data.train_batch_size
        self.bound = max(self.batch_size, int((1 + a.staleness_threshold) * self.batch_size))  # groups outstanding
        self.deterministic = a.deterministic
        self.partial = a.partial_rollout and not a.deterministic
        self.engine, self.taskset, self.generator = engine, taskset, generator
        self.groups = GroupStream(engine, params)
        self.tasks: dict[int, int] = {}  # outstanding group -> its task's dataset position
        self.next_key = 0
        self.metrics: dict[str, float] = {}  # the last `take`'s

    def fill(self) -> None:
        """New generation batches sent while one fits under the bound: each task its own request, or (deterministic)
        all of them in one seeded request."""
        keys: list[int] = []
        while self.groups.outstanding + len(keys) + self.batch_size <= self.bound:
            for index in self.taskset.next_indices():
                self.tasks[self.next_key] = index
                keys.append(self.next_key)
                self.next_key += 1
        if not keys:
            return
        prompts = [self.taskset.dataset[self.tasks[k]].ids for k in keys]
        if self.deterministic:
            self.groups.submit(keys, prompts, seed=int(torch.randint(0, 2**62, (1,), generator=self.generator)))
        else:
            for key, prompt in zip(keys, prompts):
                self.groups.submit([key], [prompt])

    def take(self, tokenizer) -> tuple[list[Prompt], Batch]:
        """A step's groups (sent first, filled up to the bound): their prompts and their batch; `metrics` then
        says the groups left outstanding and the rows whose tokens span more than one weight version."""
        self.fill()
        groups = self.groups.take(self.batch_size, in_order=self.deterministic)
        prompts = [self.taskset.dataset[self.tasks.pop(key)] for key, _ in groups]
        rows = [row for _, group in groups for row in group]
        batch = output_batch(tokenizer, prompts, self.engine.padded(rows), len(groups[0][1]))
        spanning = sum(len(set(row["versions"])) > 1 for row in rows)
        self.metrics = {"rollout/stream/outstanding_groups": float(self.groups.outstanding),
                        "rollout/stream/partial_rows": float(spanning)}
        return prompts, batch

    def before_sync(self) -> None:
        """Without partial rollouts (or deterministic), the requests in flight finish with the weights they began."""
        if not self.partial:
            self.groups.drain()

    def drain(self) -> None:
        self.groups.drain()

    def state_dict(self) -> dict:
        """The groups answered and not yet trained, after every request in flight is answered."""
        self.groups.drain()
        return {"next_key": self.next_key,
                "groups": [[key, self.tasks[key], rows] for key, rows in self.groups.answered().items()]}

    def load_state_dict(self, state: dict) -> None:
        self.next_key = state["next_key"]
        for key, index, rows in state["groups"]:
            self.tasks[key] = index
            self.groups.put(key, rows)

    def close(self) -> None:
        self.groups.close()
