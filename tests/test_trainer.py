"""The RL loop on a real tiny model: one step per estimator moves every trainable parameter, exact resume,
checkpoints that survive a crash, an exported model that loads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from rl_helpers import assert_all_moved, make_assets, rl_config, score, trainable
from safetensors.torch import load_file

from rft.errors import CheckpointError
from rft.monitor import Timer
from rft.orchestration.run import SyncRun
from rft.trainer.checkpoint import CheckpointManager

os.environ["HF_HUB_OFFLINE"] = "1"

@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


def make_cfg(assets: Path, out: Path, *overrides: str):
    return rl_config(assets, out, *overrides, with_val=True)


@pytest.mark.parametrize("estimator", ["grpo", "reinforce_plus_plus"])
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_training_moves_every_trainable_parameter(assets, tmp_path, estimator, lora):
    extra = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"] if lora else []
    cfg = make_cfg(assets, tmp_path, f"algorithm.adv_estimator={estimator}",
                   "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.1", *extra)
    run = SyncRun(cfg)
    before = trainable(run.trainer.model)
    if lora:
        assert before and all("lora_" in n for n in before)
    # LoRA's B starts at zero, so A gets its first gradient on the second step.
    for step in (1, 2) if lora else (1,):
        metrics = run.train_step(step, Timer())
        assert all(torch.isfinite(torch.tensor(v)) for k, v in metrics.items() if k.startswith("actor/"))
        assert metrics["actor/grad_norm"] > 0
    assert_all_moved(before, run.trainer.model)
    assert metrics["critic/score/max"] > metrics["critic/score/min"]
    assert "reward_extra/digits/mean" in metrics


def test_reference_is_the_untrained_policy(assets, tmp_path):
    """LoRA: reference = base with the adapter disabled; full fine-tuning: a frozen copy of the start."""
    for extra in ([], ["actor_rollout_ref.model.lora_rank=4"]):
        cfg = make_cfg(assets, tmp_path, "actor_rollout_ref.actor.use_kl_loss=true", *extra)
        run = SyncRun(cfg)
        batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
        start = batch.ref_logprobs = run.trainer.ref_logprobs(batch)
        score(run, batch)
        run.trainer.compute_advantages(batch)
        for step in (1, 2):
            run.trainer.worker.update(batch, step)
        current = run.trainer.logprobs(batch, run.trainer.model, cfg.actor_rollout_ref.rollout)
        assert (current - start).abs().max() > 1e-4  # the policy moved
        assert torch.allclose(run.trainer.ref_logprobs(batch), start, atol=1e-6)  # the reference did not


def test_no_reference_or_old_logprob_pass_unless_needed(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path))
    assert run.trainer.ref_model is None and not run.trainer.needs_ref and not run.trainer.needs_old_logprobs
    metrics = run.train_step(1, Timer())
    assert "timing_s/ref" not in metrics and "timing_s/old_log_prob" not in metrics
    # old log-probs are the detached current ones: the ratio is exactly 1
    assert metrics["actor/ppo_kl"] == 0.0 and metrics["actor/pg_clipfrac"] == 0.0
    several = SyncRun(make_cfg(assets, tmp_path, "actor_rollout_ref.actor.ppo_epochs=2"))
    assert several.trainer.needs_old_logprobs


def _final_weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model" / "model.safetensors")


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_resume_is_exact(assets, tmp_path, lora):
    """4 steps in one run == 2 steps, then a resumed run to 4 (several mini-batches, epochs, shuffling)."""
    common = ["actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_epochs=2",
              "actor_rollout_ref.actor.shuffle=true", "actor_rollout_ref.actor.use_kl_loss=true",
              "trainer.save_freq=1", "data.val_files=null"]
    if lora:
        common += ["actor_rollout_ref.model.lora_rank=4"]
    SyncRun(make_cfg(assets, tmp_path / "one", "trainer.total_training_steps=4", *common)).fit()
    SyncRun(make_cfg(assets, tmp_path / "two", "trainer.total_training_steps=2", *common)).fit()
    resumed = SyncRun(make_cfg(assets, tmp_path / "two", "trainer.total_training_steps=4", *common))
    resumed.fit()
    one, two = _final_weights(tmp_path / "one"), _final_weights(tmp_path / "two")
    assert one.keys() == two.keys()
    diff = max(float((one[k] - two[k]).abs().max()) for k in one)
    assert diff <= 1e-6, diff
    steps = [json.loads(line)["step"] for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    initial = load_file(assets / "model" / "model.safetensors")
    assert max(float((one[k] - initial[k]).abs().max()) for k in one if k in initial) > 1e-4  # it trained


def test_fit_writes_outputs_and_model_loads(assets, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = make_cfg(assets, tmp_path, "trainer.total_training_steps=2", "trainer.save_freq=1",
                   "trainer.val_before_train=true", "trainer.test_freq=1", "trainer.max_actor_ckpt_to_keep=1",
                   "actor_rollout_ref.model.lora_rank=4", "trainer.log_val_generations=2")
    run = SyncRun(cfg)
    run.fit()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    for key in ("critic/score/mean", "critic/advantages/mean", "response_length/mean", "actor/pg_loss",
                "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm", "actor/lr",
                "timing_s/gen", "timing_s/update_actor", "timing_s/step", "val-core/arithmetic/reward/mean@1"):
        assert all(key in x for x in lines), key
    assert "val-core/arithmetic/reward/mean@1" in json.loads((tmp_path / "val_before_train.json").read_text())
    assert len((tmp_path / "val_generations.jsonl").read_text().splitlines()) == 3  # before, step 1, step 2
    assert CheckpointManager(tmp_path / "checkpoints").steps() == [2]  # retention kept one
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "global_step_2"
    assert (tmp_path / "config.yaml").is_file()
    # the exported folder is a plain (merged) HF model whose outputs equal the trained LoRA model's
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    tok = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert not any("lora" in n for n, _ in exported.named_parameters())
    text = tok.apply_chat_template([{"role": "user", "content": "12+34="}], add_generation_prompt=True,
                                   tokenize=False)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        assert torch.allclose(exported(ids).logits, run.trainer.model(ids).logits, atol=1e-4)
    out = exported.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids.shape[1]


def test_val_only_validates_and_stops_without_training(assets, tmp_path, capsys):
    # verl's trainer.val_only: the validation before training, then exit; nothing trained, saved or exported, and
    # the config.yaml of a run already in the folder (what rft merge and a resume's checks read) left as it was
    cfg = make_cfg(assets, tmp_path, "trainer.val_only=true", "trainer.val_before_train=true",
                   "trainer.total_training_steps=2", "trainer.save_freq=1")
    (tmp_path / "config.yaml").write_text("the run's own: 1\n")
    run = SyncRun(cfg)
    before = trainable(run.trainer.model)
    metrics = run.fit()
    assert (tmp_path / "config.yaml").read_text() == "the run's own: 1\n"
    assert "rft: validation only (trainer.val_only) at step 0 on" in capsys.readouterr().out
    assert "val-core/arithmetic/reward/mean@1" in metrics
    assert json.loads((tmp_path / "val_only.json").read_text()) == metrics
    assert run.global_step == 0 and not (tmp_path / "metrics.jsonl").read_text().strip()  # no training step
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "model").exists()
    assert all(torch.equal(before[n], p) for n, p in trainable(run.trainer.model).items())


def test_crash_while_saving_keeps_the_previous_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path, max_to_keep=None)
    manager.save(1, lambda d: (d / "w").write_text("one"))

    def crash(d: Path) -> None:
        (d / "w").write_text("half")
        raise RuntimeError("killed mid-save")

    with pytest.raises(RuntimeError):
        manager.save(2, crash)
    assert manager.latest() == tmp_path / "global_step_1"
    assert (tmp_path / "global_step_1" / "w").read_text() == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_1", "latest"]


def test_checkpoint_retention(tmp_path):
    manager = CheckpointManager(tmp_path, max_to_keep=2)
    for step in range(1, 5):
        manager.save(step, lambda d: (d / "w").write_text("x"))
    assert manager.steps() == [3, 4] and manager.latest().name == "global_step_4"


def test_kl_in_reward_with_adaptive_controller(assets, tmp_path):
    cfg = make_cfg(assets, tmp_path, "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                   "algorithm.kl_ctrl.kl_coef=0.5", "algorithm.kl_ctrl.target_kl=0.01",
                   "algorithm.kl_ctrl.horizon=100", "algorithm.kl_penalty=kl", "trainer.total_training_steps=3")
    run = SyncRun(cfg)
    assert run.trainer.needs_ref and run.trainer.needs_old_logprobs
    run.train_step(1, Timer())  # the policy moves away from the reference
    coef = run.trainer.kl_ctrl.value
    metrics = run.train_step(2, Timer())
    assert metrics["actor/reward_kl_penalty_coeff"] == coef
    kl = metrics["actor/reward_kl_penalty"]
    expected = coef * (1 + min(max(kl / 0.01 - 1, -0.2), 0.2) * 16 / 100)  # 16 rows measured
    assert run.trainer.kl_ctrl.value == pytest.approx(expected)


@pytest.mark.parametrize("target, exclude, expected", [
    ("all-linear", None, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
    ("[q_proj,v_proj]", None, {"q_proj", "v_proj"}),
    ("'.*\\.(q|k)_proj'", None, {"q_proj", "k_proj"}),
    ("all-linear", "[down_proj,up_proj,gate_proj]", {"q_proj", "k_proj", "v_proj", "o_proj"}),
])
def test_lora_target_and_exclude_modules(assets, tmp_path, target, exclude, expected):
    extra = [f"actor_rollout_ref.model.exclude_modules={exclude}"] if exclude else []
    run = SyncRun(make_cfg(assets, tmp_path, "actor_rollout_ref.model.lora_rank=2",
                                 f"actor_rollout_ref.model.target_modules={target}", *extra))
    adapted = {n.split(".")[-4] for n in trainable(run.trainer.model) if "lora_A" in n}  # ...q_proj.lora_A.default.weight
    assert adapted == expected


def test_gradient_checkpointing_gives_the_same_update(assets, tmp_path):
    results = []
    for flag in ("false", "true"):
        torch.manual_seed(0)
        run = SyncRun(make_cfg(assets, tmp_path / flag,
                                     f"actor_rollout_ref.model.enable_gradient_checkpointing={flag}"))
        assert run.trainer.model.is_gradient_checkpointing == (flag == "true")
        metrics = run.train_step(1, Timer())
        results.append((metrics["actor/grad_norm"], trainable(run.trainer.model)))
    (norm_a, w_a), (norm_b, w_b) = results
    assert norm_a > 0 and norm_a == pytest.approx(norm_b, rel=1e-4)
    assert max(float((w_a[k] - w_b[k]).abs().max()) for k in w_a) < 1e-5


def test_resume_modes(assets, tmp_path):
    common = ["trainer.save_freq=1", "data.val_files=null"]
    SyncRun(make_cfg(assets, tmp_path / "a", "trainer.total_training_steps=2", *common)).fit()
    # disable: starts from step 0 although checkpoints exist
    fresh = SyncRun(make_cfg(assets, tmp_path / "a", "trainer.total_training_steps=2",
                               "trainer.resume_mode=disable", *common))
    fresh.resume()
    assert fresh.global_step == 0
    # resume_path: from the named folder, into another output root
    ckpt = tmp_path / "a" / "checkpoints" / "global_step_1"
    other = SyncRun(make_cfg(assets, tmp_path / "b", "trainer.total_training_steps=2",
                               "trainer.resume_mode=resume_path", f"trainer.resume_from_path={ckpt}", *common))
    other.resume()
    assert other.global_step == 1 and other.explorer.taskset.sampler.batch_in_epoch == 1
    saved = load_file(ckpt / "policy.safetensors")
    assert all(torch.equal(saved[n], p) for n, p in trainable(other.trainer.model).items())
    bad = SyncRun(make_cfg(assets, tmp_path / "c", "trainer.resume_mode=resume_path",
                             f"trainer.resume_from_path={tmp_path}", *common))
    with pytest.raises(CheckpointError, match="not a whole rft checkpoint .no trainer_state.json"):
        bad.resume()


def test_a_kill_between_checkpoint_and_metrics_line_loses_no_line(assets, tmp_path):
    common = ["trainer.save_freq=1", "data.val_files=null"]
    SyncRun(make_cfg(assets, tmp_path, "trainer.total_training_steps=2", *common)).fit()
    metrics = tmp_path / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    step2 = json.loads(lines[1])
    metrics.write_text(lines[0] + "\n")  # the process died after saving step 2, before logging it
    SyncRun(make_cfg(assets, tmp_path, "trainer.total_training_steps=3", *common)).fit()
    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[1]["critic/score/mean"] == step2["critic/score/mean"]


def test_stale_rows_are_downweighted(assets, tmp_path):
    """experience_buffer.stale_policy=downweight: a row s > max_staleness steps stale keeps max_staleness / s of
    its advantage; fresher rows keep all of it."""
    run = SyncRun(make_cfg(assets, tmp_path, "experience_buffer.max_staleness=1",
                           "experience_buffer.stale_policy=downweight"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    score(run, batch)
    run.trainer.compute_advantages(batch)
    plain = batch.advantages.clone()
    batch.model_version = torch.tensor([4, 3, 2, 0] * (len(batch) // 4))  # at step 5: stale 0, 1, 2, 4
    metrics = run.trainer.downweight_stale(batch, step=5)
    weight = torch.tensor([1.0, 1.0, 0.5, 0.25] * (len(batch) // 4))
    torch.testing.assert_close(batch.advantages, plain * weight[:, None])
    assert metrics == {"rollout/staleness/downweighted": len(batch) / 2}
