"""verl's fsdp_config.model_dtype: the dtype a model is loaded and kept in (verl's fsdp_workers load it with
torch_dtype=model_dtype and FSDP keeps the parameters it was given), so the master weights, their gradients and the
AdamW state are in it; the passes compute in it too (autocast only lowers)."""

from __future__ import annotations

import pytest
import torch

from rft.config.errors import ConfigError
from rft.models import precision
from rft.models.precision import describe
from tests.rl_helpers import assert_all_moved, make_assets, rl_config, trainable

A = "actor_rollout_ref.actor.fsdp_config"
# lr 1e-2: an AdamW step of ~lr on a norm weight of 1.0 must exceed half bf16's spacing there (2^-8); at rl_config's
# 1e-3 bf16 rounds the norms' updates away (what verl's float32 default for the actor is for)
BF16 = (f"{A}.model_dtype=bfloat16", "actor_rollout_ref.rollout.dtype=float32", "trainer.save_freq=1",
        "actor_rollout_ref.actor.optim.lr=1e-2")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


def _weights(run) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in run.trainer.model.named_parameters()}


def test_a_grpo_run_with_bf16_weights_keeps_them_and_adamw_in_bf16_and_resumes_exactly(assets, tmp_path, monkeypatch):
    """2 GRPO steps with model_dtype=bfloat16 on a CPU that computes in float32 (RFT_CPU_PRECISION=float32): the
    weights, gradients and AdamW moments are bf16, the passes compute in bf16 (the log line says why), every
    trainable parameter moves; a run stopped after step 1's checkpoint resumes to the same step 2, to the bit; the
    exported model is in the folder's saved dtype (float32)."""
    from safetensors.torch import load_file

    from rft.orchestration.run import SyncRun

    monkeypatch.setenv(precision.MODE_ENV, "float32")
    whole = SyncRun(rl_config(assets, tmp_path / "whole", *BF16, "trainer.total_training_steps=2"))
    line = describe(whole.trainer.precision)
    assert line == ("precision: rollout bf16 (float32 asked), actor bf16 (the weights are bf16 "
                    f"({A}.model_dtype=bfloat16)); master weights and optimizer state actor bf16, fp32 otherwise"), line
    model = whole.trainer.model
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert precision.autocast(model).__class__ is precision.contextlib.nullcontext
    before = trainable(model)
    grads = {}
    for p in model.parameters():  # the gradients as the optimizer sees them
        p.register_hook(lambda g, p=p: grads.setdefault(id(p), g.dtype) and g)
    whole.fit()
    assert_all_moved(before, model)
    assert grads and set(grads.values()) == {torch.bfloat16}
    state = whole.trainer.worker.optimizer.state
    moments = [v for s in state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]
    assert moments and all(v.dtype == torch.bfloat16 for v in moments)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())

    # stopped after step 1's checkpoint, then the same config for 2 steps: it resumes and ends where `whole` did
    SyncRun(rl_config(assets, tmp_path / "resumed", *BF16, "trainer.total_training_steps=1")).fit()
    resumed = SyncRun(rl_config(assets, tmp_path / "resumed", *BF16, "trainer.total_training_steps=2"))
    resumed.fit()
    assert resumed.global_step == 2
    a, b = _weights(whole), _weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert all(v.dtype == torch.bfloat16 for s in resumed.trainer.worker.optimizer.state.values()
               for k, v in s.items() if k in ("exp_avg", "exp_avg_sq"))

    whole.trainer.export_final(lambda _: None)
    exported = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    assert {t.dtype for t in exported.values()} == {torch.float32}  # the folder's saved dtype, as documented


def test_the_default_keeps_float32_weights(assets, tmp_path, monkeypatch):
    from rft.orchestration.run import SyncRun

    monkeypatch.setenv(precision.MODE_ENV, "float32")
    run = SyncRun(rl_config(assets, tmp_path / "out", "actor_rollout_ref.rollout.dtype=float32"))
    assert all(p.dtype == torch.float32 for p in run.trainer.model.parameters())
    assert describe(run.trainer.precision) == "precision: fp32"


def test_fp16_weights_and_a_lora_reference_of_another_dtype_are_refused_by_name(assets, tmp_path):
    with pytest.raises(ConfigError, match=f"{A}.model_dtype"):
        rl_config(assets, tmp_path / "out", f"{A}.model_dtype=fp16")
    with pytest.raises(ConfigError) as err:
        rl_config(assets, tmp_path / "out", f"{A}.model_dtype=bf16", "actor_rollout_ref.model.lora_rank=4",
                  "actor_rollout_ref.actor.use_kl_loss=true")
    assert "actor_rollout_ref.ref.fsdp_config.model_dtype=fp32: with LoRA the reference is the policy" in str(err.value)
