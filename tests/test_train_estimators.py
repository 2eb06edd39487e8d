"""One RL step on the tiny model for every selectable advantage estimator (each moves every trainable parameter);
ReMax's greedy baseline reaching the advantages; several reward functions combined with weights."""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch
from rl_helpers import SHAPED_REWARD, assert_all_moved, make_assets, rl_config, trainable

from rft.algorithms import ADV_ESTIMATORS
from rft.explorer.evaluate import rollout_batch
from rft.monitor import Timer
from rft.orchestration.run import SyncRun
from rft.rewards import load_custom_reward, score_responses
from rft.rollout import SamplingParams

os.environ["HF_HUB_OFFLINE"] = "1"

# A shaped reward (as tests/test_trainer.py): an untrained model's samples differ in it, so every estimator's
# advantages (and gradients) are non-zero. `length` is a second reward function for the weighted-sum test;
# `per_prompt` adds a term that differs between prompts, so the greedy baselines of different prompts differ.
REWARD = SHAPED_REWARD + '''

def length(data_source, solution_str, ground_truth, extra_info=None):
    return float(len(solution_str))


def per_prompt(data_source, solution_str, ground_truth, extra_info=None):
    return compute_score(data_source, solution_str, ground_truth)["score"] + int(ground_truth) / 100
'''

# every estimator trains (gae with the critic it builds: tests/test_ppo.py tests the critic itself)
TRAINABLE = sorted(ADV_ESTIMATORS.names())
# what an estimator needs besides its name: gdpo the reward dimensions (two keys of the shaped reward's dict), the
# optimal token baselines the policy's sum of squared probabilities
ESTIMATOR_OPTIONS = {"gdpo": ["algorithm.gdpo_reward_keys=[score,digits]", "algorithm.gdpo_reward_weights=[1.0,0.5]"],
                     "optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"],
                     "tir_optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"]}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"), REWARD)


make_cfg = rl_config


def spy_on_advantages(run: SyncRun) -> list:
    """The batches `compute_advantages` sees (with their advantages once it returns)."""
    seen, original = [], run.trainer.compute_advantages

    def spy(batch, *rest):
        seen.append(batch)
        return original(batch, *rest)

    run.trainer.compute_advantages = spy
    return seen


@pytest.mark.parametrize("estimator", TRAINABLE)
def test_one_step_moves_every_trainable_parameter(assets, tmp_path, estimator):
    cfg = make_cfg(assets, tmp_path, f"algorithm.adv_estimator={estimator}",
                   "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.1",
                   *ESTIMATOR_OPTIONS.get(estimator, []))
    run = SyncRun(cfg)
    seen = spy_on_advantages(run)
    before = trainable(run.trainer.model)
    metrics = run.train_step(1, Timer())
    assert all(torch.isfinite(torch.tensor(v)) for k, v in metrics.items() if k.startswith("actor/"))
    assert metrics["actor/grad_norm"] > 0
    assert_all_moved(before, run.trainer.model)
    assert metrics["critic/score/max"] > metrics["critic/score/min"]
    batch = seen[0]
    valid = batch.response_mask.bool()
    assert batch.advantages[valid].abs().max() > 1e-3  # the estimator gave a learning signal
    assert (batch.advantages[~valid] == 0).all()


def test_remax_greedy_baseline_reaches_the_advantages(assets, tmp_path):
    cfg = make_cfg(assets, tmp_path / "remax", "algorithm.adv_estimator=remax",
                   "custom_reward_function.name=per_prompt")
    run = SyncRun(cfg)
    n = cfg.actor_rollout_ref.rollout.n
    # The greedy response to each prompt of step 1 and its score, computed here before the policy moves.
    indices = copy.deepcopy(run.explorer.taskset.sampler).next_batch()
    greedy = rollout_batch(run.explorer.engine, run.tokenizer, [run.explorer.taskset.dataset[i] for i in indices],
                           SamplingParams(n=1, do_sample=False, max_tokens=6), generator=None)
    reward = load_custom_reward(assets / "reward.py", "per_prompt")
    greedy_scores, _ = score_responses(reward, greedy.data_source, greedy.response_text, greedy.ground_truth,
                                       greedy.extra_info)
    assert len(set(greedy_scores)) == len(indices)  # one baseline per prompt, all different
    expected_baselines = torch.tensor(greedy_scores).repeat_interleave(n)  # rows of a prompt are adjacent

    seen = spy_on_advantages(run)
    run.fit()
    batch = seen[0]
    assert len(batch) == len(indices) * n
    torch.testing.assert_close(batch.reward_baselines, expected_baselines)
    # the score sits on the last valid token and gamma = 1: every valid token's return is the row's score
    valid = batch.response_mask.bool()
    expected = torch.where(valid, (batch.scores - expected_baselines).unsqueeze(-1), torch.zeros(()))
    torch.testing.assert_close(batch.advantages, expected)
    assert batch.advantages[valid].abs().max() > 1e-3
    logged = json.loads((tmp_path / "remax" / "metrics.jsonl").read_text().splitlines()[0])
    assert logged["timing_s/gen_max"] > 0
    assert logged["critic/reward_baselines/mean"] == pytest.approx(float(expected_baselines.mean()))

    # the greedy rollout draws nothing from the sampling stream: it stays where a grpo step leaves it
    grpo = SyncRun(make_cfg(assets, tmp_path / "grpo", "algorithm.adv_estimator=grpo",
                              "custom_reward_function.name=per_prompt"))
    grpo.train_step(1, Timer())
    assert torch.equal(run.explorer.generator.get_state(), grpo.explorer.generator.get_state())


def test_estimators_without_a_baseline_need_no_greedy_rollout(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "algorithm.adv_estimator=rloo"))
    timer = Timer()
    run.train_step(1, timer)
    assert "timing_s/gen_max" not in timer.metrics()


def test_weighted_reward_functions(assets, tmp_path):
    cfg = make_cfg(assets, tmp_path, "custom_reward_function.name=[compute_score,length]",
                   "custom_reward_function.reward_weights=[2.0,-0.5]")
    run = SyncRun(cfg)
    seen = spy_on_advantages(run)
    metrics = run.train_step(1, Timer())
    batch = seen[0]
    reward = load_custom_reward(assets / "reward.py")
    shaped = torch.tensor([reward(None, text, gt)["score"] for text, gt in zip(batch.response_text, batch.ground_truth)])
    lengths = torch.tensor([float(len(text)) for text in batch.response_text])
    torch.testing.assert_close(batch.scores, 2.0 * shaped - 0.5 * lengths)
    # each function logged on its own (unweighted), its extra metrics under its name
    assert metrics["reward_extra/compute_score/mean"] == pytest.approx(float(shaped.mean()))
    assert metrics["reward_extra/length/mean"] == pytest.approx(float(lengths.mean()))
    assert "reward_extra/compute_score/digits/mean" in metrics


def test_optimal_token_baseline_gets_the_old_policy_pass(assets, tmp_path):
    """One optimizer step per batch needs no old log-probs, but the optimal token baseline reads them and the sum of
    squared probabilities, both from the one old-policy pass: sum pi^2 lies in [pi^2, 1] on every valid token."""
    run = SyncRun(make_cfg(assets, tmp_path, "algorithm.adv_estimator=optimal_token_baseline",
                                 "actor_rollout_ref.actor.calculate_sum_pi_squared=true"))
    assert run.trainer.needs_old_logprobs
    seen = spy_on_advantages(run)
    timer = Timer()
    run.train_step(1, timer)
    assert "timing_s/old_log_prob" in timer.metrics()
    batch = seen[0]
    valid = batch.response_mask.bool()
    pi = batch.old_logprobs.exp()[valid]
    sum_pi2 = batch.sum_pi_squared[valid]
    assert (sum_pi2 >= pi.square() - 1e-6).all() and (sum_pi2 <= 1 + 1e-6).all()
    assert (batch.sum_pi_squared[~valid] == 0).all()


def test_gdpo_reads_the_reward_dimensions(assets, tmp_path):
    """gdpo's inputs are the reward function's own values (score, digits), one column each, in row order."""
    run = SyncRun(make_cfg(assets, tmp_path, "algorithm.adv_estimator=gdpo",
                                 "algorithm.gdpo_reward_keys=[digits,score]"))
    seen = spy_on_advantages(run)
    run.train_step(1, Timer())
    batch = seen[0]
    reward = load_custom_reward(assets / "reward.py")
    values = [reward(None, text, gt) for text, gt in zip(batch.response_text, batch.ground_truth)]
    expected = torch.tensor([[v["digits"], v["score"]] for v in values])
    torch.testing.assert_close(batch.reward_components, expected)
