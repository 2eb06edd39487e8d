"""Streaming in training (`actor_rollout_ref.rollout.mode=async` with verl's `async_training.staleness_threshold`):
the explorer keeps groups in flight on its engine server under the bound and each step trains the first complete
ones; with `async_training.deterministic` groups go in task order and two runs with one seed are bitwise equal, and a
run stopped after a checkpoint resumes to the uninterrupted run's weights. `GroupStream` (the client's groups in
flight) on a scripted engine; what streaming cannot honour refused by name."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from cli_helpers import rft_here, sigterm_after_checkpoint
from test_async_rollout import ASYNC, assert_same_run, metrics, overrides, weights

from rft.config.errors import ConfigError
from rft.experience import Experience
from rft.rollout.base import SamplingParams

os.environ["HF_HUB_OFFLINE"] = "1"

STREAM = "async_training.staleness_threshold=1"
DETERMINISTIC = "async_training.deterministic=true"


class ScriptedServer:
    """`RemoteRollout`'s calls a `GroupStream` makes; a request of prompt [k] is answered once `release(k)` is called,
    its rows [k] * n tokens long."""

    def __init__(self):
        self.max_concurrency = 8
        self.gates: dict[int, threading.Event] = {}
        self.seeds: list[int | None] = []

    def request_body(self, params):
        return {"n": params.n}

    def release(self, k: int) -> None:
        self.gates.setdefault(k, threading.Event()).set()

    def _complete(self, body, seed=None):
        self.seeds.append(seed)
        prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
        for p in prompts:
            assert self.gates.setdefault(p[0], threading.Event()).wait(10)
        choices = [{"index": i * body["n"] + j, "rft": {"token_ids": [p[0]], "logprobs": [0.0], "versions": [0]}}
                   for i, p in enumerate(prompts) for j in range(body["n"])]
        return {"choices": choices}


def test_a_group_stream_hands_out_groups_as_they_finish_or_in_task_order():
    from rft.rollout.remote import GroupStream

    server = ScriptedServer()
    stream = GroupStream(server, SamplingParams(n=2))
    for k in range(4):
        stream.submit([f"g{k}"], [[k]])
    for k in (2, 0):
        server.release(k)
    taken = stream.take(2, in_order=False)  # the first two answered, whatever was sent before them
    assert [key for key, _ in taken] == ["g0", "g2"] and [len(rows) for _, rows in taken] == [2, 2]
    assert taken[1][1][0]["token_ids"] == [2] and stream.outstanding == 2
    server.release(3)
    in_order = threading.Thread(target=lambda: out.extend(stream.take(2, in_order=True)))
    out: list = []
    in_order.start()
    in_order.join(0.5)
    assert in_order.is_alive()  # task order waits for g1, sent first, though g3 is answered
    server.release(1)
    in_order.join(10)
    assert [key for key, _ in out] == ["g1", "g3"] and stream.outstanding == 0
    # several groups in one seeded request, each handed out alone; a checkpoint's group put back first
    stream.put("old", [{"token_ids": [9], "logprobs": [0.0], "versions": [0]}] * 2)
    stream.submit(["a", "b"], [[5], [6]], seed=7)
    server.release(5)
    server.release(6)
    stream.drain()
    assert list(stream.answered()) == ["old", "a", "b"] and server.seeds[-1] == 7
    assert [[r["token_ids"] for r in rows] for _, rows in stream.take(3, in_order=True)] == [[[9]] * 2, [[5]] * 2,
                                                                                            [[6]] * 2]
    stream.close()


def test_the_endpoint_queues_a_burst_of_connections_a_request_a_group():
    """A streaming explorer opens a connection per group at once: 64 are queued before the server accepts any
    (socketserver's backlog of 5 reset or dropped them: bench/streaming.py --trainer's runs died of it)."""
    import socket
    from http.server import BaseHTTPRequestHandler

    from rft.explorer.server import _listen

    server = _listen(0, BaseHTTPRequestHandler)
    clients = []
    try:
        for _ in range(64):
            clients.append(socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=3))
    finally:
        for c in clients:
            c.close()
        server.server_close()
    assert len(clients) == 64


@pytest.mark.parametrize("keys, message", [
    ([STREAM], r"async_training.staleness_threshold=1 streams the rollout through the engine server .* "
               r"actor_rollout_ref.rollout.mode='sync'"),
    ([ASYNC, STREAM, "synchronizer.sync_offset=1"], r"synchronizer.sync_interval=1, sync_offset=1 \(streaming bounds"),
    ([ASYNC, "async_training.staleness_threshold=-1"], r"staleness_threshold=-1: it must be 0 or more"),
    ([ASYNC, DETERMINISTIC], r"async_training.deterministic=True has no effect: streaming is off"),
    ([ASYNC, STREAM, "async_training.trigger_parameter_sync_step=2"], r"trigger_parameter_sync_step"),
    ([ASYNC, "async_training.checkpoint_engine.enable=true"], r"checkpoint-engine"),
    ([ASYNC, STREAM, "actor_rollout_ref.rollout.name=vllm"],
     r"async_training.partial_rollout=true with actor_rollout_ref.rollout.name='vllm': vLLM cannot reload its "
     r"weights under requests in flight .* set async_training.partial_rollout=false"),
])
def test_what_streaming_cannot_honour_is_refused_by_name(keys, message):
    from rft.trainer.configure import load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet",
                           "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                           "actor_rollout_ref.rollout.n=2", *keys], validate_paths=False)


def train(assets: Path, out: Path, *more: str, check: bool = True):
    return rft_here("train", *overrides(assets, out, ASYNC, STREAM, *more), cwd=out.parent, check=check)


def buffer_rows(out: Path) -> list[Experience]:
    with sqlite3.connect(out / "buffer.sqlite") as db:
        return [Experience.from_bytes(p) for (p,) in db.execute("SELECT payload FROM rft_experiences ORDER BY seq")]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    from rl_helpers import make_assets

    return make_assets(tmp_path_factory.mktemp("assets"))


@pytest.fixture(scope="module")
def deterministic(assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("stream") / "run"
    train(assets, out, DETERMINISTIC)
    return out


@pytest.mark.slow
def test_a_streaming_run_trains_the_first_complete_groups_within_the_bound(assets, tmp_path):
    """Completion order, partial rollouts: every step trains 4 complete groups of 4, at most 4 more outstanding
    (staleness_threshold 1 x train_batch_size 4); every token carries the version that drew it, no newer than the
    step's weights, and a row's age is its oldest token's."""
    out = tmp_path / "run"
    train(assets, out)
    lines = metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3, 4]
    assert all(m["rollout/stream/outstanding_groups"] <= 4 for m in lines)
    rows = buffer_rows(out)
    assert len(rows) == 4 * 16
    for e in rows:
        step = e.info["explore_step"]
        assert e.versions is not None and len(e.versions) == len(e.response)
        assert int(e.versions.max()) <= step - 1 and e.model_version == int(e.versions.min())
    assert len({e.group for e in rows}) == 16 and all(len(v) == 4 for v in _groups(rows).values())


def _groups(rows: list[Experience]) -> dict[str, list[Experience]]:
    groups: dict[str, list[Experience]] = {}
    for e in rows:
        groups.setdefault(e.group, []).append(e)
    return groups


@pytest.mark.slow
def test_deterministic_streaming_carries_groups_across_steps_and_two_runs_are_bitwise_equal(
        assets, deterministic, tmp_path):
    """Task order: step 1 trains the first 4 of the 8 tasks sent at once; steps 2-4 train groups sent a step before
    (one version stale) while the next ones generate; a second run with the seed is bitwise the first."""
    rows = buffer_rows(deterministic)
    ages = [(e.info["explore_step"] - 1) - e.model_version for e in rows]
    assert ages[:16] == [0] * 16 and ages[16:] == [1] * 48
    again = tmp_path / "again"
    train(assets, again, DETERMINISTIC)
    assert_same_run(again, deterministic)


@pytest.mark.slow
@pytest.mark.longest
def test_a_deterministic_streaming_run_stopped_after_a_checkpoint_resumes_to_the_uninterrupted_weights(
        assets, deterministic, tmp_path, monkeypatch):
    out = tmp_path / "resumed"
    sigterm_after_checkpoint(monkeypatch, 2)
    stopped = train(assets, out, DETERMINISTIC, check=False)
    assert stopped.returncode != 0 and not (out / "model").exists()
    state = json.loads((out / "checkpoints" / "global_step_2" / "trainer_state.json").read_text())
    assert len(state["stream"]["groups"]) == 4  # the groups answered and not yet trained travel in the checkpoint
    monkeypatch.undo()
    train(assets, out, DETERMINISTIC)
    assert weights(out) == weights(deterministic)
