"""Rollout correction in the RL loop on the tiny model: with the rollout's log-probs equal to the run's the
gradient is the plain one; a hand-made mismatch gives the hand-computed weights and kept tokens, and the gradient of
the weighted loss; one training step in decoupled mode and in bypass mode moves every trainable parameter."""

from __future__ import annotations

import math
import os

import pytest
import torch
from rl_helpers import assert_all_moved, make_assets, rl_config, score, trainable

from rft.monitor import Timer
from rft.orchestration.run import SyncRun
from rft.trainer.rollout_correction import apply_rollout_correction

os.environ["HF_HUB_OFFLINE"] = "1"

RC = "algorithm.rollout_correction"
DECOUPLED = [f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold=2.0", f"{RC}.rollout_rs=token_k1",
             f"{RC}.rollout_rs_threshold=0.5_2.0"]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


@pytest.fixture(scope="module")
def scored(assets, tmp_path_factory):
    """A run with token TIS + token_k1 rejection, and one scored batch with its old log-probs (advantages
    from the plain response mask)."""
    run = SyncRun(rl_config(assets, tmp_path_factory.mktemp("run"), *DECOUPLED,
                                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    score(run, batch)
    batch.old_logprobs = run.trainer.logprobs(batch, run.trainer.model, run.cfg.actor_rollout_ref.rollout)
    run.trainer.compute_advantages(batch)
    return run, batch


def _grads(run, batch) -> list[torch.Tensor]:
    run.trainer.worker.optimizer.zero_grad(set_to_none=True)
    run.trainer.worker.backward_mini_batch(batch, seed=3)
    return [p.grad.detach().clone() for p in run.trainer.worker.params]


def _copy(batch):
    return batch.select(list(range(len(batch))))


def test_no_mismatch_gives_the_plain_gradient(scored):
    run, batch = scored
    plain = _grads(run, batch)
    corrected = _copy(batch)
    corrected.rollout_logprobs = corrected.old_logprobs.clone()  # the rollout agrees with the run
    metrics = apply_rollout_correction(corrected, run.cfg.algorithm.rollout_correction)
    valid = batch.response_mask.bool()
    assert (corrected.rollout_is_weights[valid] == 1).all()  # exp(0), under the truncation
    assert torch.equal(corrected.loss_mask, batch.response_mask)  # nothing rejected
    assert metrics["rollout_corr/kl"] == 0 and metrics["training/rollout_probs_diff_max"] == 0
    grads = _grads(run, corrected)
    assert max(float((a - b).abs().max()) for a, b in zip(plain, grads)) == 0.0
    assert max(float(g.abs().max()) for g in plain) > 1e-4


def test_hand_made_mismatch(scored):
    """The rollout's log-probs are the run's minus ln 3 on every third valid token and minus ln 1.5 on the
    tokens after those: ratios 3 (TIS at 2 -> weight 2; -l = -ln 3 < ln 0.5 -> rejected) and 1.5 (weight 1.5,
    kept), 1 elsewhere. At the start of the update the current policy is the old one (ratio 1), so vanilla's
    gradient is the plain one with each kept token's advantage times its weight."""
    run, batch = scored
    valid = batch.response_mask.bool()
    order = valid.flatten().cumsum(0).view_as(valid) - 1  # index of each valid token
    third = valid & (order % 3 == 0)
    after = valid & (order % 3 == 1)
    log_ratio = torch.where(third, math.log(3.0), torch.where(after, math.log(1.5), 0.0))
    corrected = _copy(batch)
    corrected.rollout_logprobs = corrected.old_logprobs - log_ratio
    apply_rollout_correction(corrected, run.cfg.algorithm.rollout_correction)
    weights = torch.where(third, 2.0, torch.where(after, 1.5, 1.0)) * batch.response_mask
    torch.testing.assert_close(corrected.rollout_is_weights, weights.float(), atol=1e-6, rtol=0)
    kept = batch.response_mask * (~third).long()
    assert torch.equal(corrected.loss_mask, kept)

    reference = _copy(batch)  # no correction: advantages times the weights on the kept tokens
    reference.loss_mask = kept
    reference.advantages = batch.advantages * weights
    a, b = _grads(run, corrected), _grads(run, reference)
    assert max(float((x - y).abs().max()) for x, y in zip(a, b)) < 1e-6
    plain = _grads(run, batch)
    assert max(float((x - y).abs().max()) for x, y in zip(a, plain)) > 1e-5  # the correction changes it


def test_decoupled_step_computes_old_logprobs_and_moves_every_parameter(assets, tmp_path):
    # one optimizer step per batch would skip the old log-probs; rollout correction needs them
    run = SyncRun(rl_config(assets, tmp_path, *DECOUPLED, f"{RC}.rollout_is_batch_normalize=true",
                                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"))
    assert run.trainer.needs_old_logprobs
    before = trainable(run.trainer.model)
    timer = Timer()
    metrics = run.train_step(1, timer)
    assert "timing_s/old_log_prob" in timer.metrics()
    for key in ("rollout_corr/rollout_is_mean", "rollout_corr/rollout_is_batch_norm_factor",
                "rollout_corr/rollout_rs_masked_fraction", "rollout_corr/kl", "rollout_corr/chi2_seq",
                "training/rollout_probs_diff_mean", "training/rollout_probs_diff_max",
                "training/rollout_probs_diff_std"):
        assert key in metrics and math.isfinite(metrics[key]), key
    # the hf engine's log-probs are the run's up to float noise: almost nothing is rejected
    assert metrics["training/rollout_probs_diff_max"] < 1e-3
    assert metrics["actor/grad_norm"] > 0
    assert_all_moved(before, run.trainer.model)


@pytest.mark.parametrize("loss_type", ["ppo_clip", "reinforce"])
def test_bypass_step_uses_the_rollout_logprobs_and_moves_every_parameter(assets, tmp_path, loss_type):
    run = SyncRun(rl_config(assets, tmp_path, f"{RC}.bypass_mode=true", f"{RC}.loss_type={loss_type}",
                                  f"{RC}.rollout_is=sequence", f"{RC}.rollout_rs=seq_mean_k3",
                                  f"{RC}.rollout_rs_threshold=0.5", "actor_rollout_ref.actor.ppo_epochs=2"))
    assert not run.trainer.needs_old_logprobs and run.trainer.settings.loss_mode == "bypass_mode"
    before = trainable(run.trainer.model)
    seen = []
    original = run.trainer.worker.update
    run.trainer.worker.update = lambda batch, step: (seen.append(batch), original(batch, step))[1]
    timer = Timer()
    metrics = run.train_step(1, timer)
    assert "timing_s/old_log_prob" not in timer.metrics()  # no old-policy forward pass
    assert torch.equal(seen[0].old_logprobs, seen[0].rollout_logprobs)
    for key in ("rollout_corr/kl", "rollout_corr/rollout_is_mean", "rollout_corr/rollout_rs_masked_fraction"):
        assert key in metrics and math.isfinite(metrics[key]), key
    assert metrics["actor/grad_norm"] > 0
    assert_all_moved(before, run.trainer.model)
