"""When a step runs the old-log-prob pass (verl's rules): only where the loss or a metric needs it. An engine of its
own numerics (vLLM) with one optimizer step per batch needs none: the loss is the same (the ratio is 1 either way)
and the engine / trainer gap verl logs comes from the update's own passes. Tested on the hf engine declared an engine
of its own numerics, so it runs without vLLM (tests/with_vllm runs it on vLLM)."""

from __future__ import annotations

import dataclasses

from rft.monitor import Timer
from rft.rollout.engines import engine_spec
from rft.trainer import rl
from tests.rl_helpers import make_assets, rl_config, trainable

DRIFT = ("training/rollout_probs_diff_valid", "training/rollout_probs_diff_max", "training/rollout_probs_diff_mean",
         "training/rollout_probs_diff_std", "training/rollout_actor_probs_pearson_corr")


def _step(monkeypatch, tmp_path, name: str, *overrides: str, old_pass: bool | None = None):
    """One GRPO step on an hf engine that says it has numerics of its own; `old_pass` forces the old-log-prob pass
    on or off. Returns (the trainer's choice, the step's metrics, the trained weights)."""
    from rft.orchestration.run import SyncRun

    own = dataclasses.replace(engine_spec("hf"), own_numerics=True)
    monkeypatch.setattr(rl, "engine_spec", lambda _name: own)
    run = SyncRun(rl_config(tmp_path / "assets", tmp_path / name, *overrides))
    needed = run.trainer.needs_old_logprobs
    if old_pass is not None:
        run.trainer.needs_old_logprobs = old_pass
        run.trainer.worker.rollout_drift = not old_pass
    timer = Timer()
    metrics = run.train_step(1, timer)
    return needed, {**metrics, **timer.metrics()}, trainable(run.trainer.model)


def test_an_engine_of_its_own_numerics_with_one_update_a_batch_runs_no_old_log_prob_pass(monkeypatch, tmp_path):
    make_assets(tmp_path / "assets")
    needed, metrics, weights = _step(monkeypatch, tmp_path, "skip")
    assert not needed and "timing_s/old_log_prob" not in metrics
    assert metrics["training/rollout_probs_diff_valid"] == 1
    assert 0 <= metrics["training/rollout_probs_diff_max"] < 1e-4  # the hf engine's numerics are the trainer's
    # the pass it leaves out changed nothing: the same weights and the same gap as a step that runs it
    _, with_pass, with_weights = _step(monkeypatch, tmp_path, "pass", old_pass=True)
    assert "timing_s/old_log_prob" in with_pass
    assert max(float((weights[k] - with_weights[k]).abs().max()) for k in weights) < 1e-6
    for key in DRIFT:
        assert abs(metrics[key] - with_pass[key]) < 1e-5, key


def test_more_than_one_update_a_batch_still_runs_it(monkeypatch, tmp_path):
    make_assets(tmp_path / "assets")
    needed, metrics, _ = _step(monkeypatch, tmp_path, "epochs", "actor_rollout_ref.actor.ppo_epochs=2")
    assert needed and "timing_s/old_log_prob" in metrics and metrics["training/rollout_probs_diff_valid"] == 1
