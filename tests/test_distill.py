"""On-policy distillation: the divergences by hand (k1, k3, the full reverse KL, GKD's generalised JSD at its beta),
one training step of each form on the tiny model (the divergence as the advantage, in the reward, as a loss), the
teacher's batched pass against the two models' log-probs, `rft distill`, and the teachers refused by name before
any model loads (a reward model, another vocabulary, another tokenizer)."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest
import torch
from cli_helpers import rft_here
from rl_helpers import assert_all_moved, make_assets, rl_config, trainable

from rft.algorithms import distill_divergence
from rft.config.load import ConfigError
from rft.models.tiny import init_model
from rft.monitor import Timer
from rft.orchestration.run import SyncRun
from rft.workers.policy import compute_logprobs

os.environ["HF_HUB_OFFLINE"] = "1"

# ------------------------------------------------------------------------------------------ by hand
# One position, two tokens: student p = (1/2, 1/2), teacher q = (1/4, 3/4).
P, Q = torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75])


def _divergence(mode: str, beta: float = 0.5) -> float:
    logits, teacher = P.log().view(1, 1, 2), Q.log().view(1, 1, 2)
    return float(distill_divergence(mode, torch.zeros(1, 1), None, logits=logits, teacher_logits=teacher, beta=beta))


def test_sampled_divergences_by_hand():
    # sampled token 0: log p - log q = log(0.5 / 0.25) = log 2 (k1); k3 with d = log q - log p = -log 2:
    # exp(d) - d - 1 = 0.5 + log 2 - 1 = log 2 - 0.5
    lp, lq = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    assert float(distill_divergence("k1", lp, lq)) == pytest.approx(math.log(2))
    assert float(distill_divergence("k3", lp, lq)) == pytest.approx(math.log(2) - 0.5)


def test_full_reverse_kl_by_hand():
    # KL(p || q) = 0.5 log(0.5 / 0.25) + 0.5 log(0.5 / 0.75) = 0.5 log 2 + 0.5 log(2/3) = 0.143841
    assert _divergence("full") == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), abs=1e-6)


def test_generalised_jsd_by_hand():
    # beta = 0.5: m = 0.5 q + 0.5 p = (0.375, 0.625)
    #   KL(q || m) = 0.25 log(0.25 / 0.375) + 0.75 log(0.75 / 0.625) = -0.101366 + 0.136741 = 0.035375
    #   KL(p || m) = 0.5 log(0.5 / 0.375) + 0.5 log(0.5 / 0.625) = 0.143841 - 0.111572 = 0.032269
    #   JSD = 0.5 x 0.035375 + 0.5 x 0.032269 = 0.033822
    kl_qm = 0.25 * math.log(0.25 / 0.375) + 0.75 * math.log(0.75 / 0.625)
    kl_pm = 0.5 * math.log(0.5 / 0.375) + 0.5 * math.log(0.5 / 0.625)
    assert _divergence("jsd", 0.5) == pytest.approx(0.5 * kl_qm + 0.5 * kl_pm, abs=1e-6)
    assert _divergence("jsd", 0.5) == pytest.approx(0.033822, abs=1e-6)
    # beta = 0.25: m = 0.25 q + 0.75 p = (0.4375, 0.5625); JSD = 0.25 KL(q || m) + 0.75 KL(p || m)
    m = 0.25 * Q + 0.75 * P
    expected = 0.25 * float((Q * (Q / m).log()).sum()) + 0.75 * float((P * (P / m).log()).sum())
    assert _divergence("jsd", 0.25) == pytest.approx(expected, abs=1e-6)
    # the end points as TRL defines them: beta 0 the forward KL(q || p) = 0.25 log 0.5 + 0.75 log 1.5 = 0.130812,
    # beta 1 the reverse KL(p || q)
    assert _divergence("jsd", 0.0) == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-6)
    assert _divergence("jsd", 1.0) == pytest.approx(_divergence("full"), abs=1e-6)


def test_logit_divergences_are_zero_at_the_teacher_and_differentiable():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    for mode in ("full", "jsd"):
        same = distill_divergence(mode, torch.zeros(2, 3), None, logits=logits, teacher_logits=logits.detach())
        assert same.abs().max() < 1e-6
        other = distill_divergence(mode, torch.zeros(2, 3), None, logits=logits, teacher_logits=torch.randn(2, 3, 5))
        (grad,) = torch.autograd.grad(other.sum(), logits)
        assert grad.abs().sum() > 0


# ------------------------------------------------------------------------------------- on the tiny model
@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = make_assets(tmp_path_factory.mktemp("distill"))
    init_model("tiny", root / "teacher", seed=1)  # another model, the student's tokenizer
    return root


def distill_cfg(assets, out, *overrides: str):
    return rl_config(assets, out, "distillation.enabled=true",
                     f"distillation.teacher_model.model_path={assets / 'teacher'}", *overrides)


def test_k1_as_the_advantage_is_thinking_machines_reverse_kl(assets, tmp_path):
    """use_policy_gradient, no task reward: each token's advantage is -(log p_student - log p_teacher) of its
    sampled token, the teacher's pass equal to the two models' log-probs taken apart."""
    run = SyncRun(distill_cfg(assets, tmp_path, "distillation.distillation_loss.use_task_rewards=false",
                              "distillation.distillation_loss.distillation_loss_coef=0.5"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    run.explorer.rewards.score(batch)
    trainer = run.trainer
    trainer.set_token_rewards(batch)
    student = compute_logprobs(trainer.model, batch, 1.0, None)
    teacher = compute_logprobs(trainer.teacher, batch, 1.0, None)
    metrics = trainer.score_with_teacher(batch)
    torch.testing.assert_close(batch.teacher_kl, (student - teacher) * batch.response_mask, atol=1e-5, rtol=1e-4)
    assert metrics["distill/divergence"] != 0
    trainer.compute_advantages(batch)
    torch.testing.assert_close(batch.advantages, -0.5 * batch.teacher_kl * batch.response_mask)


@pytest.mark.parametrize("mode", ["k1", "full", "jsd"])
def test_the_divergence_as_the_advantage_trains(assets, tmp_path, mode):
    run = SyncRun(distill_cfg(assets, tmp_path, f"distillation.distillation_loss.loss_mode={mode}"))
    before, timer = trainable(run.trainer.model), Timer()
    metrics = run.train_step(1, timer)
    assert metrics["distill/divergence"] > 0 and "teacher" in timer.times
    assert_all_moved(before, run.trainer.model)


@pytest.mark.parametrize("mode", ["k3", "full", "jsd"])
def test_the_divergence_as_a_loss_trains(assets, tmp_path, mode):
    """use_policy_gradient false (GKD): the divergence is differentiated through the student; with no task reward
    the policy loss is 0 and the distillation loss alone moves every parameter."""
    run = SyncRun(distill_cfg(assets, tmp_path, f"distillation.distillation_loss.loss_mode={mode}",
                              "distillation.distillation_loss.use_policy_gradient=false",
                              "distillation.distillation_loss.use_task_rewards=false"))
    before = trainable(run.trainer.model)
    metrics = run.train_step(1, Timer())
    assert metrics["actor/distill_loss"] > 0 and metrics["actor/pg_loss"] == 0
    assert_all_moved(before, run.trainer.model)


def test_the_teacher_as_itself_teaches_nothing(assets, tmp_path):
    run = SyncRun(rl_config(assets, tmp_path, "distillation.enabled=true",
                            f"distillation.teacher_model.model_path={assets / 'model'}",
                            "distillation.distillation_loss.loss_mode=full"))
    assert run.train_step(1, Timer())["distill/divergence"] == pytest.approx(0, abs=1e-6)


def test_the_divergence_in_the_reward_beside_the_task_reward(assets, tmp_path):
    """in_reward: -coef x divergence joins the token rewards before the estimator: the rewards' row sums are the
    task scores less coef x the row's divergence."""
    run = SyncRun(distill_cfg(assets, tmp_path, "distillation.distillation_loss.in_reward=true",
                              "distillation.distillation_loss.distillation_loss_coef=2.0",
                              "algorithm.adv_estimator=reinforce_plus_plus"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    run.explorer.rewards.score(batch)
    run.trainer.set_token_rewards(batch)
    task = batch.token_rewards.sum(-1).clone()
    run.trainer.score_with_teacher(batch)
    run.trainer.compute_advantages(batch)
    torch.testing.assert_close(batch.token_rewards.sum(-1), task - 2.0 * batch.teacher_kl.sum(-1))
    assert batch.teacher_kl.abs().sum() > 0


def test_rft_distill_runs_without_the_task_reward(assets, tmp_path):
    out = tmp_path / "out"
    proc = rft_here("distill", f"actor_rollout_ref.model.path={assets / 'model'}",
             f"data.train_files={assets / 'data' / 'train.parquet'}",
             f"distillation.teacher_model.model_path={assets / 'teacher'}",
             "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=4",
             "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2",
             "trainer.total_training_steps=1", "trainer.val_before_train=false", f"trainer.default_local_dir={out}",
             "trainer.logger=[console,file]", "trainer.save_freq=-1", cwd=tmp_path)
    (record,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                 if "distill/divergence" in line]
    assert record["distill/divergence"] != 0
    # no task reward: the estimator saw only zero rewards; the advantages logged are the teacher's, and the step is
    # not said to have nothing to learn
    assert record["critic/rewards/mean"] == 0
    assert record["critic/advantages/min"] < 0 < record["critic/advantages/max"]
    assert "nothing to learn" not in proc.stdout + proc.stderr
    assert (out / "model" / "config.json").is_file()


# ------------------------------------------------------------------------------------------ refused
def _refusal(assets, tmp_path, teacher, *overrides: str) -> str:
    proc = rft_here("distill", f"actor_rollout_ref.model.path={assets / 'model'}",
                    f"data.train_files={assets / 'data' / 'train.parquet'}",
                    f"distillation.teacher_model.model_path={teacher}", f"trainer.default_local_dir={tmp_path / 'o'}",
                    *overrides, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rft: error: distillation."), proc.stderr
    assert not (tmp_path / "o").exists()  # refused before the run folder, before any model loads
    return lines[0]


def test_a_reward_model_teacher_is_refused_by_name(assets, tmp_path):
    rm = init_model("tiny-rm", tmp_path / "rm")
    line = _refusal(assets, tmp_path, rm)
    assert f"model_path='{rm}' is a reward model (Qwen2ForSequenceClassification)" in line


def test_a_teacher_of_another_vocabulary_is_refused_by_name(assets, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(assets / "teacher", other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "vocab_size": 300}))
    line = _refusal(assets, tmp_path, other)
    assert "has a vocabulary of 300 tokens" in line and "one of 275" in line


def test_a_teacher_of_another_tokenizer_is_refused_by_name(assets, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(assets / "teacher", other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = "0", "1"  # two digits swap ids: the same size, other tokens
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tok))
    (other / "vocab.json").write_text(json.dumps(vocab))
    assert "has another tokenizer than the student's" in _refusal(assets, tmp_path, other)


@pytest.mark.parametrize("overrides, message", [
    (["distillation.distillation_loss.loss_mode=k1", "distillation.distillation_loss.use_policy_gradient=false"],
     "loss_mode=k1 with use_policy_gradient=false"),
    (["distillation.distillation_loss.loss_mode=token_jsd", "distillation.distillation_loss.use_policy_gradient=false"],
     "loss_mode=token_jsd with use_policy_gradient=false"),
    (["distillation.distillation_loss.jsd_beta=1.5"], "jsd_beta=1.5 is outside [0, 1]"),
    (["distillation.distillation_loss.in_reward=true", "distillation.distillation_loss.use_policy_gradient=false",
      "distillation.distillation_loss.loss_mode=full"], "in_reward=true"),
    (["distillation.teacher_model.model_path=null"], "distillation.enabled=true needs "
                                                    "distillation.teacher_model.model_path"),
])
def test_distillation_options_refused(assets, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        rl_config(assets, assets / "never", "distillation.enabled=true",
                  f"distillation.teacher_model.model_path={assets / 'teacher'}", *overrides)


def test_a_distillation_loss_step_is_not_said_to_learn_nothing():
    """With the teacher as a loss and no task reward every advantage is 0 by design, and the step still trains:
    the nothing-to-learn note (for a model whose responses all score alike) is not given."""
    from rft.monitor.notes import NothingToLearn

    zero = {"critic/advantages/min": 0.0, "critic/advantages/max": 0.0, "critic/score/min": 0.0,
            "critic/score/max": 1.0}
    assert NothingToLearn().note(1, zero) is not None
    assert NothingToLearn().note(1, {**zero, "actor/distill_loss": 0.3}) is None
