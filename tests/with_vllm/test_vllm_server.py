"""`actor_rollout_ref.rollout.mode=async` with `rollout.name=vllm`: the vLLM engine in an `rft serve --engine vllm`
process the run starts, streaming through vLLM's request-level API, its weights reloaded in place at every sync.
GRPO trains 4 steps; every response token carries the version that sampled it; the trainer / engine log-prob gap
stays at the in-process vLLM engine's on-policy level; every trainable parameter moved. With streaming
(`async_training.staleness_threshold`), a weight update waits for the requests in flight (vLLM cannot reload under
them), so every row is of one version."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here
from rl_helpers import DENSE_REWARD, make_assets

from rft.experience import Experience

STEPS = 4
GAP = 1e-5
"""The on-policy bound on training/rollout_probs_diff_max (|the engine's probability - the trainer's| of the sampled
tokens, fp32 on CPU): measured 4e-9 on these steps; a row sampled by the previous step's weights (lr 1e-3) is 2e-3
and more (the streaming test checks that its stale steps are)."""


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The dense reward: the streaming test's second step tells stale rows by the first step's update, which the
    shaped reward leaves at zero when none of its 16 samples has a digit (the engine's seeds follow the requests'
    arrival, so that happens now and then)."""
    return make_assets(tmp_path_factory.mktemp("assets"), DENSE_REWARD)


def _train(assets: Path, out: Path, *more: str) -> list[dict]:
    """GRPO, 4 steps of 4 prompts x 4 responses, two mini-batches a step (the old log-prob pass runs, logging the
    gap), the experiences in an SQLite buffer; its metrics lines."""
    rft_here("train", f"actor_rollout_ref.model.path={assets / 'model'}",
             f"data.train_files={assets / 'data' / 'train.parquet'}", f"custom_reward_function.path={assets / 'reward.py'}",
             "algorithm.adv_estimator=grpo", "data.max_prompt_length=32", "data.max_response_length=6",
             "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=4",
             "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.weight_decay=0",
             "trainer.val_before_train=false", f"trainer.total_training_steps={STEPS}", f"trainer.default_local_dir={out}",
             "trainer.logger=[console,file]", "experience_buffer.storage_type=sql",
             f"experience_buffer.path={out / 'buffer.sqlite'}", "actor_rollout_ref.rollout.name=vllm",
             "actor_rollout_ref.rollout.mode=async", *more, cwd=out.parent)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _rows(out: Path) -> list[Experience]:
    with sqlite3.connect(out / "buffer.sqlite") as db:
        return [Experience.from_bytes(p) for (p,) in db.execute("SELECT payload FROM rft_experiences ORDER BY seq")]


def _all_moved(assets: Path, out: Path) -> None:
    from safetensors.torch import load_file

    before, after = load_file(assets / "model" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert [k for k in before if torch.equal(before[k], after[k])] == []


def test_grpo_trains_with_vllm_in_a_server_process_every_token_carrying_its_version(assets, tmp_path):
    out = tmp_path / "run"
    lines = _train(assets, out)
    assert [m["step"] for m in lines] == list(range(1, STEPS + 1))
    log = (out / "log" / "engine_server.log").read_text()
    assert "weights of version 4 loaded" in log and "vllm" in log.lower()  # the vLLM server took every step's weights
    rows = _rows(out)
    assert len(rows) == STEPS * 16
    for e in rows:  # on-policy: explore step k samples every token with the weights of trainer step k - 1
        step = e.info["explore_step"]
        assert e.versions is not None and len(e.versions) == len(e.response)
        assert e.versions.tolist() == [step - 1] * len(e.response) and e.model_version == step - 1
    gap = [m["training/rollout_probs_diff_max"] for m in lines]
    assert all(0 <= g <= GAP for g in gap), gap
    _all_moved(assets, out)


def test_streaming_on_vllm_finishes_the_requests_in_flight_before_each_update(assets, tmp_path):
    """staleness_threshold 1, partial_rollout false: up to 4 groups outstanding beyond a step's; each row sampled
    by one version no newer than the step's weights, the first (on-policy) step's gap at the in-process level."""
    out = tmp_path / "stream"
    lines = _train(assets, out, "async_training.staleness_threshold=1", "async_training.partial_rollout=false")
    assert [m["step"] for m in lines] == list(range(1, STEPS + 1))
    assert all(m["rollout/stream/partial_rows"] == 0 for m in lines)
    rows = _rows(out)
    assert len(rows) == STEPS * 16
    for e in rows:
        versions = e.versions.tolist()
        assert len(versions) == len(e.response) and len(set(versions)) == 1
        assert versions[0] <= e.info["explore_step"] - 1 and e.model_version == versions[0]
    gap = [m["training/rollout_probs_diff_max"] for m in lines]
    assert 0 <= gap[0] <= GAP
    stale = [g for g, m in zip(gap, lines) if m["rollout/staleness/max"] >= 1]
    assert stale and min(stale) > 100 * GAP, gap  # the gap tells an older version's rows apart
    _all_moved(assets, out)
