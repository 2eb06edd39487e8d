"""The loss catalogue on the real tiny model: one training step per policy loss and per KL estimator moves every
trainable parameter; the micro-batch size never changes a mini-batch's gradient (every loss, every aggregation
mode, through PolicyWorker); the full KL in the loss and in the reward; DAPO's overlong penalty and dynamic
sampling in the RL loop; the new config keys are validated."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from rl_helpers import assert_all_moved, make_assets, rl_config, score, stand_in_explorer, trainable

from rft.algorithms import LOSS_AGG_MODES, full_kl_from_logits, overlong_penalty
from rft.config.load import ConfigError
from rft.config.schema import POLICY_LOSS_NAMES
from rft.monitor import Timer
from rft.orchestration.run import SyncRun
from rft.workers.policy import compute_logit_kl, forward_logits

os.environ["HF_HUB_OFFLINE"] = "1"

# A shaped reward: an untrained model's samples differ in it, so advantages (and gradients) are non-zero.
# `acc` (exact answers) is 0 for every sample of an untrained model; `even_only` is the shaped score for
# prompts whose answer is even and 0 for the others (dynamic sampling drops those groups).
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    digits = sum(c.isdigit() for c in solution_str)
    shaped = digits / (1 + len(solution_str))
    exact = float(solution_str.strip() == str(ground_truth))
    even = int(str(ground_truth)[-1]) % 2 == 0
    return {"score": exact + shaped, "acc": exact, "even_only": shaped if even else 0.0}
'''


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"), REWARD)


make_cfg = rl_config



# ------------------------------------------------------------------------------ one step per loss / KL


# what a loss needs besides its name: dro its beta, bypass_mode verl's bypass mode (here with REINFORCE and
# batch-normalised sequence weights, which take the whole mini-batch's statistics)
LOSS_OPTIONS = {"dro": ["actor_rollout_ref.actor.policy_loss.dro_beta=0.5"],
                "bypass_mode": ["algorithm.rollout_correction.bypass_mode=true",
                                "algorithm.rollout_correction.loss_type=reinforce",
                                "algorithm.rollout_correction.rollout_is=sequence",
                                "algorithm.rollout_correction.rollout_is_batch_normalize=true"]}


@pytest.mark.parametrize("loss_mode", POLICY_LOSS_NAMES)
def test_one_step_of_every_loss_moves_every_parameter(assets, tmp_path, loss_mode):
    # micro-batches of 8 rows: clip_cov / kl_cov take their token choice from the whole mini-batch
    run = SyncRun(make_cfg(assets, tmp_path, f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                                 "actor_rollout_ref.actor.entropy_coeff=0.01", *LOSS_OPTIONS.get(loss_mode, [])))
    before = trainable(run.trainer.model)
    metrics = run.train_step(1, Timer())
    assert all(torch.isfinite(torch.tensor(v)) for k, v in metrics.items() if k.startswith("actor/"))
    assert metrics["actor/grad_norm"] > 0
    assert metrics["actor/entropy"] > 0
    assert metrics["critic/score/max"] > metrics["critic/score/min"]
    assert_all_moved(before, run.trainer.model)


@pytest.mark.parametrize("kl_type", ["low_var_kl", "k3+", "abs", "full"])
def test_kl_loss_types_train_and_measure_the_drift(assets, tmp_path, kl_type):
    run = SyncRun(make_cfg(assets, tmp_path, "actor_rollout_ref.actor.use_kl_loss=true",
                                 f"actor_rollout_ref.actor.kl_loss_type={kl_type}",
                                 "actor_rollout_ref.actor.kl_loss_coef=0.1",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"))
    assert run.trainer.needs_ref and run.trainer.needs_ref_logprobs == (kl_type != "full")
    before = trainable(run.trainer.model)
    first = run.train_step(1, Timer())
    assert abs(first["actor/kl_loss"]) < 1e-6  # the policy is still the reference (up to float noise)
    assert_all_moved(before, run.trainer.model)
    second = run.train_step(2, Timer())
    assert second["actor/kl_loss"] > 1e-6  # it moved away


def test_full_kl_loss_with_lora_uses_the_adapterless_model(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "actor_rollout_ref.actor.use_kl_loss=true",
                                 "actor_rollout_ref.actor.kl_loss_type=full", "actor_rollout_ref.actor.kl_loss_coef=0.1",
                                 "actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"))
    assert run.trainer.ref_model is None
    before = trainable(run.trainer.model)
    kls = [run.train_step(step, Timer())["actor/kl_loss"] for step in (1, 2)]
    assert abs(kls[0]) < 1e-6  # LoRA's B starts at zero: the policy is the adapterless model
    assert kls[1] > 1e-6  # step 1 moved B: the reference (adapter disabled) no longer equals the policy
    assert_all_moved(before, run.trainer.model)
    assert run.trainer.model.training  # the reference pass switched the adapter back on, and train mode


def test_compute_logit_kl_is_the_exact_kl_of_both_models(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "actor_rollout_ref.actor.use_kl_loss=true",
                                 "actor_rollout_ref.actor.kl_loss_type=full"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    with torch.no_grad():
        for p in run.trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
        logits, _ = forward_logits(run.trainer.model, batch, 1.0)
        ref_logits, _ = forward_logits(run.trainer.ref_model, batch, 1.0)
    expected = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=logits), torch.distributions.Categorical(logits=ref_logits))
    got = compute_logit_kl(run.trainer.model, run.trainer.ref_model, batch, 1.0, micro_rows=5, kind="full")
    mask = batch.response_mask.bool()[:, : expected.shape[1]]
    assert got.shape == batch.response_mask.shape
    torch.testing.assert_close(got[:, : expected.shape[1]][mask], expected[mask], atol=1e-5, rtol=1e-4)
    assert (got[~batch.response_mask.bool()] == 0).all() and expected[mask].min() > 0


def test_full_kl_in_the_reward(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=full",
                                 "algorithm.kl_ctrl.kl_coef=0.5"))
    assert run.trainer.reward_kl_from_logits and not run.trainer.needs_ref_logprobs
    first = run.train_step(1, Timer())
    assert first["actor/reward_kl_penalty"] == 0.0 and first["actor/reward_kl_penalty_coeff"] == 0.5
    second = run.train_step(2, Timer())
    assert second["actor/reward_kl_penalty"] > 1e-6
    # the rewards carry -0.5 * KL: the token rewards summed per row are the scores minus 0.5 * the row's KL sum
    assert second["critic/rewards/mean"] < second["critic/score/mean"]


# ----------------------------------------------------------------------------- micro-batch invariance


@pytest.fixture(scope="module")
def mini_batch(assets, tmp_path_factory):
    """A scored 16-row mini-batch (4 prompts x 4) with old log-probs off the current ones (ratios != 1) and a
    reference that differs from the policy (the policy's weights were nudged after the frozen copy)."""
    out = tmp_path_factory.mktemp("mini")
    run = SyncRun(make_cfg(assets, out, "actor_rollout_ref.actor.use_kl_loss=true"))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in run.trainer.model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    score(run, batch)
    current = run.trainer.logprobs(batch, run.trainer.model, run.cfg.actor_rollout_ref.rollout)
    gen = torch.Generator().manual_seed(2)
    batch.old_logprobs = (current + 0.3 * torch.randn(current.shape, generator=gen)) * batch.response_mask
    batch.ref_logprobs = run.trainer.ref_logprobs(batch)
    run.trainer.compute_advantages(batch)
    return run, batch


def _mini_batch_grads(run, batch, micro_rows) -> list[torch.Tensor]:
    run.trainer.worker.s.micro_rows = micro_rows
    run.trainer.worker.optimizer.zero_grad(set_to_none=True)
    run.trainer.worker.backward_mini_batch(batch, seed=123)
    return [p.grad.detach().clone() for p in run.trainer.worker.params]


@pytest.mark.parametrize("loss_mode", POLICY_LOSS_NAMES)
def test_micro_batch_size_never_changes_the_gradient(mini_batch, loss_mode):
    """Every aggregation mode, with the entropy bonus and a KL loss: the gradient of one mini-batch with micro
    batches of 4 rows equals the one with the whole mini-batch at once (max abs diff <= 2e-6 of the largest
    gradient entry, or absolute below 1: opmd reached 1.1e-6 of its 4.05 under PyTorch's AVX2 kernels on an Intel
    Xeon; a micro-batch normalised by its own tokens or rows would be off by tens of percent)."""
    run, batch = mini_batch
    s = run.trainer.worker.s
    s.loss_mode, s.entropy_coeff, s.kl_loss_coef, s.kl_loss_type = loss_mode, 0.01, 0.1, "low_var_kl"
    s.clip_cov_ratio, s.kl_cov_ratio = 0.05, 0.05  # a few tokens in 16 short rows
    s.clip_cov_lb, s.clip_cov_ub = -10.0, 10.0  # most tokens are candidates: the random choice matters
    s.dro_beta = 0.3
    for mode in LOSS_AGG_MODES:
        s.loss_agg_mode = mode
        whole = _mini_batch_grads(run, batch, None)
        split = _mini_batch_grads(run, batch, 4)
        diff = max(float((a - b).abs().max()) for a, b in zip(whole, split))
        largest = max(float(g.abs().max()) for g in whole)
        assert diff <= 2e-6 * max(1.0, largest), (mode, diff)  # float32: relative once token-sum grows it
        assert largest > 1e-4


@pytest.mark.parametrize("kl_type", ["full", "k3+"])
def test_micro_batch_size_never_changes_the_kl_gradient(mini_batch, kl_type):
    run, batch = mini_batch
    s = run.trainer.worker.s
    s.loss_mode, s.loss_agg_mode, s.entropy_coeff = "vanilla", "seq-mean-token-mean", 0.0
    s.kl_loss_type, s.kl_loss_coef = kl_type, 1.0
    whole = _mini_batch_grads(run, batch, None)
    split = _mini_batch_grads(run, batch, 4)
    assert max(float((a - b).abs().max()) for a, b in zip(whole, split)) <= 1e-6
    s.kl_loss_coef = 0.0
    without = _mini_batch_grads(run, batch, None)
    assert max(float((a - b).abs().max()) for a, b in zip(whole, without)) > 1e-4  # the KL term counts


def test_micro_batch_size_never_changes_a_training_step(assets, tmp_path):
    """End to end through RLTrainer (same seed, same rollouts): micro 4 vs the whole mini-batch."""
    results = []
    for micro in ("4", "null"):
        run = SyncRun(make_cfg(assets, tmp_path / micro, "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
                                     f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
                                     "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
                                     "actor_rollout_ref.actor.optim.lr=1e-4"))
        metrics = run.train_step(1, Timer())
        results.append((metrics["actor/grad_norm"], trainable(run.trainer.model)))
    (norm_a, w_a), (norm_b, w_b) = results
    assert norm_a > 0 and norm_a == pytest.approx(norm_b, rel=1e-5, abs=1e-7)
    assert max(float((w_a[k] - w_b[k]).abs().max()) for k in w_a) < 1e-6


def test_loss_scale_factor_is_the_dr_grpo_constant(assets, tmp_path):
    """seq-mean-token-sum-norm divides by sequences x loss_scale_factor (verl's key), by default
    data.max_response_length; the critic's null follows the actor's."""
    run = SyncRun(make_cfg(assets, tmp_path / "a", "actor_rollout_ref.actor.loss_scale_factor=3",
                                 "critic.enable=true"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    assert run.trainer.worker.norm(batch).max_len == 3 and run.trainer.critic.norm(batch).max_len == 3
    own = SyncRun(make_cfg(assets, tmp_path / "b", "critic.enable=true", "critic.loss_scale_factor=5"))
    assert own.trainer.worker.norm(batch).max_len == 6 and own.trainer.critic.norm(batch).max_len == 5  # 6: max_response_length
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.loss_scale_factor must be a positive integer"):
        make_cfg(assets, tmp_path / "c", "actor_rollout_ref.actor.loss_scale_factor=0")


# ------------------------------------------------------------------------------------------------ DAPO


def test_overlong_penalty_is_added_to_the_score(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "reward_model.overlong_buffer.enable=true",
                                 "reward_model.overlong_buffer.len=4", "reward_model.overlong_buffer.penalty_factor=2.0",
                                 "reward_model.overlong_buffer.log=true", "reward_model.reward_manager=dapo"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    rows = run.explorer.rewards.score(batch)
    metrics = run.trainer.reward_metrics(batch)
    lengths = batch.response_mask.sum(-1)
    penalty = overlong_penalty(lengths, 6, 4, 2.0)  # expected length 2: -(L - 2) / 4 * 2 for L > 2
    assert penalty.min() < 0  # some responses are longer than 2 tokens
    torch.testing.assert_close(batch.scores, rows["score"] + penalty)
    torch.testing.assert_close(penalty, (-(lengths.float() - 2) / 2).clamp(max=0))
    assert metrics["reward_extra/overlong_reward/mean"] == pytest.approx(float(penalty.mean()))
    assert metrics["reward_extra/overlong/mean"] == pytest.approx(float((penalty < 0).float().mean()))
    assert metrics["critic/score/mean"] == pytest.approx(float(batch.scores.mean()))


def test_dynamic_sampling_keeps_only_informative_groups(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "algorithm.filter_groups.enable=true",
                                 "algorithm.filter_groups.metric=even_only",
                                 "algorithm.filter_groups.max_num_gen_batches=20"))
    batch, metrics = run.explorer.dynamic_sampling(*run.explorer.generate_and_score(Timer()), Timer())
    metrics.update(run.trainer.reward_metrics(batch))
    assert len(batch) == 16 and len(torch.unique(batch.group)) == 4  # exactly train_batch_size groups
    assert all(int(str(gt)[-1]) % 2 == 0 for gt in batch.ground_truth)  # odd answers: even_only is always 0
    assert metrics["train/num_kept_groups"] >= 4
    assert metrics["train/num_generated_groups"] > metrics["train/num_kept_groups"]  # some groups were dropped
    assert metrics["train/num_gen_batches"] == metrics["train/num_generated_groups"] / 4
    assert metrics["critic/score/mean"] == pytest.approx(float(batch.scores.mean()))
    # rows of one group stay adjacent: the worker's mini-batches and the advantages rely on it
    assert (batch.group[1:] >= batch.group[:-1]).all()
    step = run.train_step(1, Timer())
    assert step["train/num_gen_batches"] >= 1 and step["actor/grad_norm"] > 0


def test_dynamic_sampling_gives_up_after_max_num_gen_batches(assets, tmp_path):
    # an untrained model never answers exactly: acc is 0 in every group, every group is dropped
    run = SyncRun(make_cfg(assets, tmp_path, "algorithm.filter_groups.enable=true",
                                 "algorithm.filter_groups.metric=acc", "algorithm.filter_groups.max_num_gen_batches=2"))
    with pytest.raises(RuntimeError, match=re.escape("max_num_gen_batches=2")):
        run.train_step(1, Timer())
    assert run.explorer.taskset.sampler.batch_in_epoch == 2  # two generation batches were drawn
    unknown = SyncRun(make_cfg(assets, tmp_path, "algorithm.filter_groups.enable=true",
                                 "algorithm.filter_groups.metric=accuracy"))
    with pytest.raises(ValueError, match=r"accuracy.*available: \['acc', 'even_only', 'score'"):
        unknown.train_step(1, Timer())


# --------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("overrides, key", [
    (["actor_rollout_ref.actor.policy_loss.loss_mode=ppo"], "actor_rollout_ref.actor.policy_loss.loss_mode"),
    (["actor_rollout_ref.actor.kl_loss_type=k4"], "actor_rollout_ref.actor.kl_loss_type"),
    (["algorithm.kl_penalty=k3++"], "algorithm.kl_penalty"),
    (["actor_rollout_ref.actor.loss_agg_mode=sum"], "actor_rollout_ref.actor.loss_agg_mode"),
    (["actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0"], "actor_rollout_ref.actor.policy_loss.clip_cov_ratio"),
    (["actor_rollout_ref.actor.policy_loss.kl_cov_ratio=-1"], "actor_rollout_ref.actor.policy_loss.kl_cov_ratio"),
    (["actor_rollout_ref.actor.policy_loss.clip_cov_lb=6"], "actor_rollout_ref.actor.policy_loss.clip_cov_lb"),
    (["actor_rollout_ref.actor.policy_loss.ppo_kl_coef=-0.1"], "actor_rollout_ref.actor.policy_loss.ppo_kl_coef"),
    (["actor_rollout_ref.actor.policy_loss.tau=-2"], "actor_rollout_ref.actor.policy_loss.tau"),
    (["actor_rollout_ref.actor.tau_neg=0"], "actor_rollout_ref.actor.tau_neg"),
    (["algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0"], "algorithm.kl_ctrl.target_kl"),
    (["reward_model.overlong_buffer.enable=true"], "reward_model.overlong_buffer.len"),
    (["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=7"],
     "reward_model.overlong_buffer.len"),
    (["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=2",
      "reward_model.overlong_buffer.penalty_factor=-1"], "reward_model.overlong_buffer.penalty_factor"),
    (["algorithm.filter_groups.enable=true"], "algorithm.filter_groups.metric"),
    (["reward_model.reward_manager=batch"], "reward_model.reward_manager"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=dro"], "actor_rollout_ref.actor.policy_loss.dro_beta"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"], "algorithm.rollout_correction.bypass_mode"),
    (["algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"],
     "algorithm.rollout_correction.bypass_mode"),
    (["algorithm.rollout_correction.loss_type=reinforce"], "algorithm.rollout_correction.loss_type"),
    (["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=0.0_1.0"],
     "algorithm.rollout_correction"),
    (["algorithm.rollout_correction.rollout_is_batch_normalize=true"], "algorithm.rollout_correction.rollout_is"),
    (["algorithm.rollout_correction.rollout_rs=seq_mean_k3"], "rollout_rs_threshold"),
    (["algorithm.rollout_correction.rollout_rs=seq_max_k1", "algorithm.rollout_correction.rollout_rs_threshold=2"],
     "seq_max_k1"),
    (["algorithm.rollout_correction.rollout_rs=token_k3", "algorithm.rollout_correction.rollout_rs_threshold=1.0_2.0"],
     "token_k3"),
    (["algorithm.rollout_correction.rollout_rs_threshold=2"], "algorithm.rollout_correction.rollout_rs"),
])
def test_bad_loss_options_are_refused_by_name(assets, tmp_path, overrides, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        make_cfg(assets, tmp_path, *overrides)


DAPO = ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=even_only",
        "algorithm.filter_groups.max_num_gen_batches=20")


def test_verls_dapo_gen_batch_size_needs_the_filter_and_with_processes_whole_mini_batches(assets, tmp_path):
    """verl's DAPO recipe sets data.gen_batch_size (its default: ${data.train_batch_size}; its run scripts 3x).
    Another value than train_batch_size is dynamic sampling's generation batch: without the filter verl's main
    trainer would train on all of its prompts a step, so rft refuses it saying so; with several processes it must
    be a multiple of ppo_mini_batch_size (it was refused there at any value)."""
    cfg = make_cfg(assets, tmp_path, *DAPO)
    same = make_cfg(assets, tmp_path, *DAPO, f"data.gen_batch_size={cfg.data.train_batch_size}")
    assert same.data.gen_batch_size == cfg.data.train_batch_size
    assert make_cfg(assets, tmp_path, *DAPO, "data.gen_batch_size=12").data.gen_batch_size == 12
    assert make_cfg(assets, tmp_path, "data.gen_batch_size=4").data.gen_batch_size == 4  # train_batch_size
    with pytest.raises(ConfigError) as err:
        make_cfg(assets, tmp_path, "data.gen_batch_size=12")
    assert str(err.value).startswith("data.gen_batch_size=12 (verl's DAPO recipe")
    assert "without algorithm.filter_groups.enable: verl's main trainer would then train on gen_batch_size" \
        in str(err.value)
    with pytest.raises(ConfigError, match=r"data.gen_batch_size=0 must be a whole number of prompts >= 1"):
        make_cfg(assets, tmp_path, *DAPO, "data.gen_batch_size=0")
    two = ("trainer.n_gpus_per_node=2", "trainer.device=cpu", "actor_rollout_ref.actor.strategy=fsdp2")
    assert make_cfg(assets, tmp_path, *DAPO, "data.gen_batch_size=8", *two).data.gen_batch_size == 8
    with pytest.raises(ConfigError) as err:  # each process shares every mini-batch of 4 prompts of it
        make_cfg(assets, tmp_path, *DAPO, "data.gen_batch_size=6", *two)
    assert str(err.value) == ("data.gen_batch_size=6 with 2 processes must be a multiple of actor_rollout_ref.actor."
                              "ppo_mini_batch_size=4: each process generates its share of every mini-batch of a "
                              "generation batch's prompts; set it to 8")
    from rft.data.dataset import DataError

    with pytest.raises(DataError, match=re.escape("the training set has 64 prompts, fewer than data.gen_batch_size="
                                                  "128 (the prompts of one generation batch): lower data.gen_batch_size "
                                                  "to at most 64, or add prompts")):
        SyncRun(make_cfg(assets, tmp_path, *DAPO, "data.gen_batch_size=128"))


def test_dynamic_sampling_draws_gen_batch_size_prompts_per_generation_batch(assets, tmp_path):
    """data.gen_batch_size=8 with train_batch_size=4: every generation batch is the sampler's next 8 prompts, and
    the first 4 kept groups train, in the order their prompts were drawn."""
    run = SyncRun(make_cfg(assets, tmp_path, *DAPO, "data.gen_batch_size=8"))
    sampler = run.explorer.taskset.sampler
    assert sampler.batch_size == 8 and sampler.batches_per_epoch == 64 // 8
    batch, metrics = run.explorer.dynamic_sampling(*run.explorer.generate_and_score(Timer()), Timer())
    gen_batches = int(metrics["train/num_gen_batches"])
    assert sampler.batch_in_epoch == gen_batches  # one sampler batch per generation batch
    assert metrics["train/num_generated_groups"] == 8 * gen_batches
    assert metrics["train/num_kept_groups"] >= 4
    assert len(batch) == 16 and len(torch.unique(batch.group)) == 4  # exactly train_batch_size groups
    assert (batch.group[1:] >= batch.group[:-1]).all()  # rows of a group adjacent, in drawn order
    assert all(int(str(gt)[-1]) % 2 == 0 for gt in batch.ground_truth)  # odd answers: even_only is always 0
    # the kept groups' prompts are among the 8 x gen_batches prompts drawn, in the order they were drawn
    drawn = [run.explorer.taskset.dataset[i].ids for i in sampler._order(0)[:8 * gen_batches].tolist()]
    places = []
    for g in torch.unique(batch.group).tolist():
        row = int((batch.group == g).nonzero()[0, 0])
        places.append(drawn.index(batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()))
    assert places == sorted(places) and len(set(places)) == 4
    step = run.train_step(1, Timer())
    assert step["actor/grad_norm"] > 0


def test_several_explorers_with_dynamic_sampling_never_draw_one_task_twice(assets, tmp_path):
    """Issue 60: trainer.explorer_num explorers take turns at the steps, each stepping over the others'. With dynamic
    sampling a step draws as many generation batches as it needs, while stepping over a step drew one: explorer
    1 generated tasks explorer 0 had drawn for its step 1, and the explorers' streams drifted apart. Explorer r now
    takes the taskset's generation batches b with b % explorer_num == r (with one batch a step: step n's batch
    n - 1, the tasks one explorer draws), so no task is drawn by two and none's tasks depend on the others' draws."""
    from rft.explorer.taskset import FileTaskset

    generated = {}
    for rank in (0, 1):
        cfg = make_cfg(assets, tmp_path, *DAPO, "trainer.mode=explore", "trainer.explorer_num=2",
                       f"trainer.explorer_rank={rank}", "synchronizer.sync_interval=2")
        explorer = stand_in_explorer(cfg, varies=lambda task: task % 3 == 0)
        for step in range(1, 7):  # ExploreLoop's turns
            if (step - 1) % 2 != rank:
                explorer.skip_step()
            else:
                explorer.generate_step(Timer())
        generated[rank] = explorer.generated
        assert explorer.step == 6
    assert sum(len(batches) for batches in generated.values()) > 6  # some steps drew several batches
    order = FileTaskset(list(range(96)), 4, True, cfg.data.seed).sampler._order(0).tolist()
    for rank, batches in generated.items():  # explorer r's batches: r, r + 2, r + 4, ... of the one stream
        assert batches == [order[4 * b:4 * b + 4] for b in range(rank, 2 * len(batches), 2)], rank
    assert not {t for b in generated[0] for t in b} & {t for b in generated[1] for t in b}


def test_total_steps_from_epochs_count_generation_batches(assets, tmp_path):
    """verl's total_training_steps: len(dataloader) x total_epochs, the dataloader's batch being gen_batch_size:
    64 prompts // 16 x 3 epochs = 12 steps (64 // 4 x 3 = 48 without gen_batch_size)."""
    from rft.orchestration.run import total_training_steps

    epochs = ("trainer.total_training_steps=null", "trainer.total_epochs=3")
    assert total_training_steps(make_cfg(assets, tmp_path, *DAPO, *epochs), 64) == 48
    cfg = make_cfg(assets, tmp_path, *DAPO, *epochs, "data.gen_batch_size=16")
    assert total_training_steps(cfg, 64) == 12
    assert SyncRun(cfg).total_steps == 12


def test_a_run_with_gen_batch_size_resumes_exactly(assets, tmp_path, capsys):
    """rft train: 3 steps in one run == 1 step, then the same command resumed to 3. The sampler's state (in
    generation batches of 8) and the sampling stream are checkpointed, so the resumed steps draw the same prompts
    and responses; the resume check compares the checkpoint's sampler batch with data.gen_batch_size."""
    from rft.cli import main

    common = ["train", f"actor_rollout_ref.model.path={assets / 'model'}",
              f"data.train_files={assets / 'data' / 'train.parquet'}",
              f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
              "data.max_response_length=6", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "actor_rollout_ref.rollout.n=4", "trainer.val_before_train=false", "trainer.logger=[]",
              "trainer.save_freq=1", *DAPO, "data.gen_batch_size=8"]
    assert main([*common, f"trainer.default_local_dir={tmp_path / 'one'}", "trainer.total_training_steps=3"]) == 0
    assert main([*common, f"trainer.default_local_dir={tmp_path / 'two'}", "trainer.total_training_steps=1"]) == 0
    capsys.readouterr()
    assert main([*common, f"trainer.default_local_dir={tmp_path / 'two'}", "trainer.total_training_steps=3"]) == 0
    assert "resumed from" in capsys.readouterr().out
    one, two = ([json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
                for d in ("one", "two"))
    assert [x["step"] for x in two] == [1, 2, 3]
    state = json.loads((tmp_path / "two" / "checkpoints" / "global_step_3" / "trainer_state.json").read_text())
    assert state["sampler"]["batch_size"] == 8
    drawn = state["sampler"]["epoch"] * 64 // 8 + state["sampler"]["batch_in_epoch"]  # epochs of 8 batches
    assert drawn == sum(x["train/num_gen_batches"] for x in one)
    for a, b in zip(one, two):
        assert a["train/num_generated_groups"] == 8 * a["train/num_gen_batches"]
        for key in a:
            if not key.startswith(("timing_s/", "perf/")):
                assert b[key] == pytest.approx(a[key], abs=1e-6), (a["step"], key)


def test_choices_list_every_name(assets, tmp_path):
    with pytest.raises(ConfigError) as err:
        make_cfg(assets, tmp_path, "actor_rollout_ref.actor.kl_loss_type=k4")
    for name in ("'k3+'", "'low_var_kl+'", "'full'", "'abs'"):
        assert name in str(err.value)
    with pytest.raises(ConfigError) as err:
        make_cfg(assets, tmp_path, "actor_rollout_ref.actor.policy_loss.loss_mode=ppo")
    for name in POLICY_LOSS_NAMES:
        assert repr(name) in str(err.value)


def test_full_kl_chunking_in_the_worker_matches_unchunked(mini_batch):
    run, batch = mini_batch
    logits, _ = forward_logits(run.trainer.model, batch, 1.0)
    with torch.no_grad():
        ref_logits, _ = forward_logits(run.trainer.ref_model, batch, 1.0)
    a = full_kl_from_logits(logits.detach(), ref_logits, 7)
    b = full_kl_from_logits(logits.detach(), ref_logits, None)
    assert torch.equal(a, b) or float((a - b).abs().max()) < 1e-6
