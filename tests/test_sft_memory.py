"""rft sft and rft dpo at a real model's memory: the LM head computed in chunks of tokens (never a micro-batch's
tokens x vocabulary logits; `workers/lm_head.py`), equal to the full logits' loss and gradients, and the freed memory
handed back between and inside the passes as the RL update does it (`workers/minibatch.py`). The peak memory these
save at Qwen2.5-0.5B's shape is measured by bench/lm_head_memory.py --trainer sft|dpo (bench/RESULTS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rft.algorithms import utils
from rft.models.tiny import init_model
from rft.tasks import write_arithmetic
from rft.trainer.configure import load_dpo_config, load_sft_config
from rft.trainer.dpo import DPOTrainer
from rft.trainer.sft import SFTTrainer
from rft.workers import lm_head


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sft_memory")
    init_model("tiny", root / "model", seed=0)
    write_arithmetic(root / "data", n_train=32, n_val=8, seed=0, max_digits=2, preferences=True)
    return root


def _common(assets: Path, out: Path) -> list[str]:
    return [f"model.partial_pretrain={assets / 'model'}", "data.train_batch_size=8", "data.micro_batch_size_per_gpu=4",
            "data.max_length=32", "optim.lr=1e-3", "optim.weight_decay=0.0", "trainer.total_training_steps=1",
            "trainer.logger=[]", f"trainer.default_local_dir={out}"]


def sft(assets: Path, out: Path) -> SFTTrainer:
    return SFTTrainer(load_sft_config(None, [*_common(assets, out), f"data.train_files={assets / 'data' / 'train.parquet'}",
                                             "data.response_key=extra_info", "data.response_dict_keys=[answer]"]))


def dpo(assets: Path, out: Path) -> DPOTrainer:
    return DPOTrainer(load_dpo_config(None, [*_common(assets, out),
                                             f"data.train_files={assets / 'data' / 'preference_train.parquet'}"]))


def _loss_and_grads(trainer, batch) -> tuple[float, list[torch.Tensor]]:
    trainer.model.zero_grad(set_to_none=True)
    if isinstance(trainer, DPOTrainer):
        loss, _ = trainer._pair_losses(batch, trainer._norm(batch, len(batch) // 2), len(batch) // 2)
    else:
        loss = trainer._nll_sum(batch) / batch.loss_mask.sum()
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in trainer.model.parameters() if p.requires_grad]


@pytest.mark.parametrize("make", [sft, dpo], ids=["sft", "dpo"])
def test_the_chunked_lm_head_gives_the_full_logits_loss_and_gradients(assets, tmp_path, monkeypatch, make):
    """Chunks of 8 token positions (the tiny model's logits would otherwise fit in one) against the model's own full
    logits: the loss and every gradient equal to 1e-6 in float32."""
    trainer = make(assets, tmp_path / "out")
    batch = trainer.train_set.batch(list(range(4)), trainer.tokenizer.pad_token_id)
    vocab = trainer.model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(utils, "LINEAR_CHUNK_ELEMENTS", 8 * vocab)
    chunks = []
    real = lm_head.head_logprobs
    monkeypatch.setattr("rft.workers.policy.head_logprobs", lambda *a, **k: chunks.append(1) or real(*a, **k))
    chunked, chunked_grads = _loss_and_grads(trainer, batch)
    assert chunks  # the head's input went through the chunked head
    assert lm_head.lm_head(trainer.model) is not None
    monkeypatch.setattr(trainer.model, lm_head._HEAD_ATTR, None)  # the model's full logits, as before
    if getattr(trainer, "ref_model", None) is not None:
        monkeypatch.setattr(trainer.ref_model, lm_head._HEAD_ATTR, None)
    chunks.clear()
    full, full_grads = _loss_and_grads(trainer, batch)
    assert not chunks
    assert abs(chunked - full) <= 1e-6 * max(1.0, abs(full))
    assert max(float((a - b).abs().max()) for a, b in zip(chunked_grads, full_grads)) <= 1e-6


@pytest.mark.parametrize("make", [sft, dpo], ids=["sft", "dpo"])
def test_a_step_hands_freed_memory_back_as_the_rl_update_does(assets, tmp_path, monkeypatch, make):
    """Before each micro-batch's backward, inside the backward (the hooks of `trim_in_backward`), before and after
    the optimizer step. Counted through a stand-in for
    `release_freed_memory`, which trims only a process that holds a large share of the machine."""
    from rft.workers import minibatch

    calls = []
    monkeypatch.setattr("rft.trainer.sft.release_freed_memory", lambda: calls.append("between"))
    monkeypatch.setattr(minibatch, "release_freed_memory", lambda: calls.append("backward"))
    trainer = make(assets, tmp_path / "out")
    trainer.train_step(trainer.train_set.batch(list(range(8)), trainer.tokenizer.pad_token_id))
    micro_batches = 2  # 8 rows (DPO: 8 pairs, 16 rows) in micro-batches of 4 (DPO: 4 pairs)
    assert calls.count("between") == micro_batches + 2
    assert calls.count("backward") == micro_batches * trainer._trim_hooks > 0
