"""PF-PPO (verl's algorithm.use_pf_ppo, issue 63): the weights by hand, the seeded draw, the trainer's resampled
batch, the config's notes and refusal, and two steps from the CLI."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here
from rl_helpers import make_assets, rl_config, score

from rft.algorithms.pf_ppo import pf_ppo_resample, pf_ppo_weights
from rft.config import ConfigError
from rft.orchestration.run import SyncRun
from rft.trainer.configure import load_config

os.environ["HF_HUB_OFFLINE"] = "1"
REPO = Path(__file__).resolve().parents[1]
SCORES = torch.tensor([1.0, -2.0, 0.0, 3.0])


@pytest.mark.parametrize("method, expected", [
    ("pow", [1.0, 4.0, 0.0, 9.0]),        # |s| ** 2
    ("max_min", [0.0, 1.0, 0.0, 1.0]),    # the min (-2) and the max (3)
    ("max_random", [0.1, 0.1, 0.1, 0.4]),  # the max 0.4, the others 0.1
])
def test_weights_by_hand(method, expected):
    weights = pf_ppo_weights(SCORES, method, 2.0)
    assert torch.allclose(weights, torch.tensor(expected) + 1e-8, rtol=0, atol=1e-12), weights
    with pytest.raises(ValueError, match="reweight_method"):
        pf_ppo_weights(SCORES, "nope", 2.0)


def test_the_draw_is_seeded_sorted_and_follows_the_weights():
    def draw(seed, scores=SCORES, method="max_min"):
        return pf_ppo_resample(scores, method, 2.0, torch.Generator().manual_seed(seed))

    rows = draw(0)
    assert rows.tolist() == sorted(rows.tolist()) and len(rows) == 4
    assert set(rows.tolist()) <= {1, 3}  # max_min: rows 0 and 2 weigh 1e-8 against 1
    assert torch.equal(draw(0), rows)  # the same seed draws the same rows (a resumed step)
    # pow 2 on [0, 0, 5, 0]: 25 against 1e-8, every draw is row 2
    assert draw(1, torch.tensor([0.0, 0.0, 5.0, 0.0]), "pow").tolist() == [2, 2, 2, 2]
    # max_random over many rows: the max row drawn 0.4 / (0.4 + 99 * 0.1) of the time, ~3.9% against ~1%
    many = torch.zeros(100)
    many[7] = 1.0
    counts = torch.bincount(pf_ppo_resample(many.repeat(100), "max_random", 2.0, torch.Generator().manual_seed(2)),
                            minlength=10_000).view(100, 100).sum(0)
    assert counts[7] > 2 * counts.float().mean()


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("pf_ppo_assets"))


def test_the_trainer_updates_on_the_draw(assets, tmp_path):
    run = SyncRun(rl_config(assets, tmp_path, "algorithm.adv_estimator=gae", "algorithm.use_pf_ppo=True",
                            "algorithm.pf_ppo.reweight_method=max_min"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    score(run, batch)
    batch.scores = torch.arange(len(batch), dtype=torch.float32)  # the max is the last row, the min the first
    batch.advantages = torch.randn(batch.response_mask.shape)
    drawn = run.trainer.pf_ppo_draw(batch, step=3)
    assert len(drawn) == len(batch)
    assert set(drawn.scores.tolist()) <= {0.0, float(len(batch) - 1)}
    first = [i for i in range(len(batch)) if drawn.scores[i] == 0.0]
    assert torch.equal(drawn.advantages[first], batch.advantages[[0] * len(first)])  # whole rows, advantages too
    assert torch.equal(run.trainer.pf_ppo_draw(batch, step=3).scores, drawn.scores)  # seeded by data.seed, step
    # grpo: verl resamples only with gae, so the batch is left as it is
    grpo = SyncRun(rl_config(assets, tmp_path / "grpo", "algorithm.use_pf_ppo=True"))
    assert grpo.trainer.pf_ppo_draw(batch, step=3) is batch


def test_config_notes_and_refusal(caplog):
    base = ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet", "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2"]
    caplog.set_level(logging.WARNING, "rft")
    cfg = load_config(None, [*base, "algorithm.adv_estimator=gae", "algorithm.use_pf_ppo=True",
                             "algorithm.pf_ppo.reweight_method=pow", "algorithm.pf_ppo.weight_pow=3"],
                      validate_paths=False)
    assert (cfg.algorithm.use_pf_ppo, cfg.algorithm.pf_ppo.weight_pow) == (True, 3.0)
    load_config(None, [*base, "algorithm.use_pf_ppo=True"], validate_paths=False)  # grpo
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "verl resamples for PF-PPO only with gae" in said and "algorithm.use_pf_ppo=True" in said, said
    with pytest.raises(ConfigError, match="not allowed"):
        load_config(None, [*base, "algorithm.pf_ppo.reweight_method=median"], validate_paths=False)
    with pytest.raises(ConfigError, match="algorithm.use_pf_ppo=true with 2 processes"):
        load_config(None, [*base, "algorithm.adv_estimator=gae", "algorithm.use_pf_ppo=True",
                           "trainer.n_gpus_per_node=2", "trainer.device=cpu"], validate_paths=False)


def test_two_steps_from_the_cli(assets, tmp_path):
    rft_here("train", str(REPO / "examples" / "arithmetic_ppo.yaml"),
             f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
             "data.val_files=null", f"custom_reward_function.path={assets / 'reward.py'}", "data.train_batch_size=4",
             "data.max_response_length=6", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4",
             "algorithm.use_pf_ppo=True", "algorithm.pf_ppo.reweight_method=max_random",
             "trainer.total_training_steps=2", "trainer.default_local_dir=out", "trainer.logger=[]", cwd=tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert math.isfinite(lines[1]["actor/pg_loss"]) and math.isfinite(lines[1]["critic/vf_loss"])  # critic_warmup 1
