"""DPO (`rft dpo`, `algorithm: dpo` stages): preference rows to batches, the loss against a hand computation, the
micro-batch invariance, the reference, exact resume with every parameter moving, the arithmetic preference set,
and the done-when: DPO raises held-out accuracy over the demo's sloppy SFT model."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from cli_helpers import one_and_two_processes, rft_here
from omegaconf import OmegaConf
from sft_helpers import PROCESSES_APART, max_weight_difference, stop_after_two_steps_then_resume
from transformers import AutoTokenizer

from rft.config import ConfigError
from rft.data.dataset import DataError
from rft.data.io import read_rows, write_parquet
from rft.data.preference import PreferenceDataset
from rft.models.tiny import init_model
from rft.tasks import write_arithmetic
from rft.trainer.configure import load_dpo_config
from rft.trainer.dpo import DPOTrainer
from rft.trainer.stages import build_stages
from rft.workers.policy import forward_logprobs

os.environ["HF_HUB_OFFLINE"] = "1"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dpo")
    init_model("tiny", root / "model", seed=0)
    write_arithmetic(root / "data", n_train=64, n_val=16, seed=0, preferences=True)
    return root


def make_cfg(assets: Path, out: Path, *overrides: str):
    return load_dpo_config(None, [
        f"model.partial_pretrain={assets / 'model'}",
        f"data.train_files={assets / 'data' / 'preference_train.parquet'}",
        f"data.val_files={assets / 'data' / 'preference_val.parquet'}",
        "data.train_batch_size=8", "data.micro_batch_size_per_gpu=8", "data.max_length=32",
        "optim.lr=1e-3", "optim.weight_decay=0.0", "trainer.total_training_steps=2", "trainer.logger=[]",
        f"trainer.default_local_dir={out}", *overrides,
    ])


# ------------------------------------------------------------------------------------------ data
def test_arithmetic_preferences_pair_the_answer_with_the_wrong_carry(assets):
    """Where the units digits carry, the rejected answer forgets the carry (the sloppy teacher's slip); where they
    do not, it adds one."""
    train = read_rows(assets / "data" / "train.parquet")
    pairs = read_rows(assets / "data" / "preference_train.parquet")
    assert len(pairs) == len(train)
    carries = [sum(int(x) % 10 for x in r["extra_info"]["question"][:-1].split("+")) >= 10 for r in train]
    assert 0 < sum(carries) < len(train)
    for pair, row, carry in zip(pairs, train, carries):
        assert pair["prompt"] == row["prompt"] and pair["chosen"] == row["extra_info"]["answer"]
        assert int(pair["chosen"]) - int(pair["rejected"]) == (10 if carry else -10)
        assert pair["extra_info"]["carries"] == carry
    val_questions = {r["extra_info"]["question"] for r in read_rows(assets / "data" / "val.parquet")}
    assert {p["extra_info"]["question"] for p in read_rows(assets / "data" / "preference_val.parquet")} <= val_questions


def test_rft_data_arithmetic_preferences_cli(tmp_path):
    out = rft_here("data", "arithmetic", str(tmp_path / "d"), "--n-train", "40", "--n-val", "20", "--preferences",
                   cwd=tmp_path)
    assert "preference_train: " in out.stdout and (tmp_path / "d" / "preference_val.parquet").is_file()


def test_pairs_become_interleaved_rows_in_plaintext_and_messages_formats(assets, tmp_path):
    tok = AutoTokenizer.from_pretrained(assets / "model")
    rows = [{"q": "1+1=", "good": "2", "bad": "3", "sys": "be exact"},
            {"q": [{"role": "user", "content": "2+2="}], "good": [{"role": "assistant", "content": "4"}],
             "bad": [{"role": "assistant", "content": "22"}], "sys": "unused for message prompts"}]
    write_parquet(rows[:1], tmp_path / "plain.parquet")
    write_parquet(rows[1:], tmp_path / "chat.parquet")
    cfg = make_cfg(assets, tmp_path, "data.prompt_key=q", "data.chosen_key=good", "data.rejected_key=bad",
                   "data.system_prompt_key=sys")
    data = PreferenceDataset([tmp_path / "plain.parquet", tmp_path / "chat.parquet"], tok, cfg.data)
    plain, chat = data.examples
    assert tok.decode(plain.prompt_ids).startswith("<|im_start|>system\nbe exact<|im_end|>")
    assert tok.decode(plain.chosen_ids) == "2<|im_end|>" and all(plain.chosen_mask)
    # a message-list response: the template after the prompt, the loss on the turn's text and EOS (no newline)
    learned = [t for t, m in zip(chat.rejected_ids, chat.rejected_mask) if m]
    assert tok.decode(learned) == "22<|im_end|>"
    batch = data.batch([0, 1], tok.pad_token_id)
    assert batch.group.tolist() == [0, 0, 1, 1] and len(batch) == 4
    assert tok.decode(batch.response_ids[2][batch.loss_mask[2].bool()]) == "4<|im_end|>"  # pair 1's chosen
    assert tok.decode(batch.response_ids[3][batch.loss_mask[3].bool()]) == "22<|im_end|>"  # pair 1's rejected


def test_trls_implicit_prompt_rows_are_the_explicit_rows_they_spell(assets, tmp_path):
    """TRL's implicit-prompt preference rows (no prompt column; chosen and rejected each a whole conversation): the
    messages both begin with are the prompt, the rest each response, the same tokens and masks as the explicit row;
    rows whose conversations share no first message, or do not differ after it, are one line each."""
    tok = AutoTokenizer.from_pretrained(assets / "model")
    system, user = {"role": "system", "content": "be exact"}, {"role": "user", "content": "2+2="}
    good, bad = {"role": "assistant", "content": "4"}, {"role": "assistant", "content": "22"}
    write_parquet([{"chosen": [system, user, good], "rejected": [system, user, bad]}], tmp_path / "implicit.parquet")
    write_parquet([{"prompt": [system, user], "chosen": [good], "rejected": [bad]}], tmp_path / "explicit.parquet")
    cfg = make_cfg(assets, tmp_path)
    implicit = PreferenceDataset(tmp_path / "implicit.parquet", tok, cfg.data).examples
    assert implicit == PreferenceDataset(tmp_path / "explicit.parquet", tok, cfg.data).examples
    assert tok.decode(implicit[0].prompt_ids).endswith("2+2=<|im_end|>\n<|im_start|>assistant\n")
    for chosen, rejected, what in (([user, good], [{"role": "user", "content": "3+3="}, bad], "share no first message"),
                                   ([user, good], [user, good], "do not differ after the messages they share")):
        write_parquet([{"chosen": chosen, "rejected": rejected}], tmp_path / "bad.parquet")
        with pytest.raises(DataError) as e:
            PreferenceDataset(tmp_path / "bad.parquet", tok, cfg.data)
        assert str(e.value) == (f"{tmp_path / 'bad.parquet'} row 0: no column 'prompt' (data.prompt_key), and "
                                f"'chosen' and 'rejected' are conversations that {what} to be the prompt (TRL's "
                                "implicit prompt): give each row its prompt in a column (data.prompt_key)")
    write_parquet([{"chosen": "2+2=4", "rejected": "2+2=22"}], tmp_path / "text.parquet")
    with pytest.raises(DataError, match=r"text.parquet row 0: no column 'prompt' \(data.prompt_key\), and 'chosen' "
                                        r"and 'rejected' are strings: TRL's implicit prompt as text, which rft does "
                                        r"not split"):
        PreferenceDataset(tmp_path / "text.parquet", tok, cfg.data)


def test_data_and_config_errors_name_the_key(assets, tmp_path):
    tok = AutoTokenizer.from_pretrained(assets / "model")
    write_parquet([{"prompt": "1+1=", "chosen": "2"}], tmp_path / "half.parquet")
    with pytest.raises(DataError, match=r"no column 'rejected' \(data.rejected_key\)"):
        PreferenceDataset(tmp_path / "half.parquet", tok, make_cfg(assets, tmp_path).data)
    write_parquet([{"prompt": "1+1=", "chosen": "2", "rejected": "3", "sys": "Add."}], tmp_path / "sys.parquet")
    with pytest.raises(DataError, match=r"no column 'system' \(data.system_prompt_key\); .*the rows have the columns "
                                        r".*sys.*: set data.system_prompt_key=<one of them>"):
        PreferenceDataset(tmp_path / "sys.parquet", tok, make_cfg(assets, tmp_path, "data.system_prompt_key=system").data)
    with pytest.raises(DataError, match="data.max_length=4"):
        PreferenceDataset(assets / "data" / "preference_train.parquet", tok,
                          make_cfg(assets, tmp_path, "data.max_length=4").data)
    # prompt 12 tokens, responses 2 and 6 (the tiny tokenizer: 8 + characters, characters + EOS)
    write_parquet([{"prompt": "1+1=", "chosen": "2", "rejected": "22222"}] * 2, tmp_path / "pairs.parquet")
    with pytest.raises(DataError) as e:
        PreferenceDataset(tmp_path / "pairs.parquet", tok, make_cfg(assets, tmp_path, "data.max_length=13").data)
    pairs = tmp_path / "pairs.parquet"
    assert str(e.value) == (
        f"{pairs}: 2 of 2 pairs exceed data.max_length=13 tokens (the longest: 18 tokens, {pairs} row 0); set "
        "data.max_length=18 to keep every pair whole, or data.truncation=right (cuts the responses' ends of 2) or "
        "data.truncation=left (cuts the prompts' starts of 2)")
    for change, message in (("algorithm.loss_type=kto", "algorithm.loss_type='kto' is not allowed"),
                            ("algorithm.label_smoothing=0.1", None),
                            ("algorithm.beta=0", "algorithm.beta must be > 0"),
                            ("data.micro_batch_size_per_gpu=3", "must be a multiple of data.micro_batch_size_per_gpu"),
                            ("algorithm.kl_loss_coef=0.5", "has no effect with algorithm.use_kl_loss=false")):
        if message is None:
            make_cfg(assets, tmp_path, change)  # sigmoid reads label_smoothing (cDPO)
            with pytest.raises(ConfigError, match="read by loss_type sigmoid and robust only"):
                make_cfg(assets, tmp_path, change, "algorithm.loss_type=ipo")
            continue
        with pytest.raises(ConfigError, match=message):
            make_cfg(assets, tmp_path, change)


def test_a_training_set_smaller_than_one_step_is_counted_in_pairs(assets, tmp_path):
    with pytest.raises(DataError) as e:
        DPOTrainer(make_cfg(assets, tmp_path, "data.train_batch_size=128", "data.micro_batch_size_per_gpu=8"))
    assert str(e.value) == ("the training set has 64 pairs, fewer than data.train_batch_size=128 (the pairs of one "
                            "step): lower data.train_batch_size to at most 64, or add pairs")


def test_val_max_samples_validates_on_the_first_pairs_and_a_large_validation_says_so(assets, tmp_path, caplog,
                                                                                   monkeypatch):
    """data.val_max_samples (as rft sft's, verl's sft_trainer.yaml key): a validation reads the first N pairs of
    data.val_files; uncapped, a run validating on more than 300 pairs says how many and the key, once."""
    val = write_parquet([{"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": str(i)} for i in range(301)],
                        tmp_path / "big.parquet")
    cfg = lambda *extra: make_cfg(assets, tmp_path / "out", f"data.val_files={val}", "trainer.total_training_steps=1",
                                  *extra)
    note = ("rft: note: each validation computes val/loss and val/rewards/* over all 301 pairs of data.val_files; "
            "set data.val_max_samples=N to validate on N of them")
    for extra, notes in ((["trainer.test_freq=1"], [note]), (["trainer.test_freq=-1"], []),
                         (["trainer.test_freq=1", "data.val_max_samples=7"], [])):
        caplog.clear()
        with caplog.at_level("WARNING", logger="rft"):
            trainer = DPOTrainer(cfg(*extra))
        assert caplog.messages == notes, extra
    evaluated = []  # the pairs validation batches, as their prompts' token ids
    batch = trainer.val_set.batch
    monkeypatch.setattr(trainer.val_set, "batch", lambda indices, pad_id: (evaluated.extend(
        trainer.val_set.examples[i].prompt_ids for i in indices), batch(indices, pad_id))[1])
    metrics = trainer.fit()  # one step, validated once
    assert math.isfinite(metrics["val/loss"]) and math.isfinite(metrics["val/rewards/accuracies"])
    every = PreferenceDataset(val, trainer.tokenizer, trainer.cfg.data).examples
    assert evaluated == [x.prompt_ids for x in every[:7]]


# ------------------------------------------------------------------------------------------ the step
def test_the_step_is_the_hand_computed_dpo_loss_and_the_micro_batch_size_does_not_change_it(assets, tmp_path):
    """Full fine-tuning: the reference is a frozen copy of the starting weights. The gradient of one step equals
    the gradient of mean_i -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))) + kl_coef * token-mean k3,
    computed here in one forward pass, for micro-batches of 8 pairs and of 3 pairs."""
    grads, metrics = [], []
    for micro in (8, 2):
        trainer = DPOTrainer(make_cfg(assets, tmp_path, f"data.micro_batch_size_per_gpu={micro}",
                                      "optim.clip_grad=0", "algorithm.beta=0.5", "algorithm.use_kl_loss=true",
                                      "algorithm.kl_loss_type=k3", "algorithm.kl_loss_coef=0.1"))
        with torch.no_grad():  # move the policy away from its reference, so the log-ratios are not 0
            for p in trainer.model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        batch = trainer.train_set.batch(list(range(8)), trainer.tokenizer.pad_token_id)
        metrics.append(trainer.train_step(batch))
        grads.append(torch.cat([p.grad.flatten() for p in trainer.params]))
    assert (grads[0] - grads[1]).abs().max() <= 1e-6
    assert all(abs(metrics[0][k] - metrics[1][k]) <= 1e-6 for k in metrics[0] if k.startswith(("rewards", "train/l")))

    # the same loss by hand, on the perturbed weights before the step
    trainer = DPOTrainer(make_cfg(assets, tmp_path))
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    batch = trainer.train_set.batch(list(range(8)), trainer.tokenizer.pad_token_id)
    logps, _ = forward_logprobs(trainer.model, batch, 1.0)
    with torch.no_grad():
        ref, _ = forward_logprobs(trainer.ref_model, batch, 1.0)
    mask = batch.loss_mask.float()
    seq, ref_seq = (logps * mask).sum(-1), (ref * mask).sum(-1)
    logits = (seq[0::2] - seq[1::2]) - (ref_seq[0::2] - ref_seq[1::2])
    log_r = ref - logps
    k3 = ((log_r.exp() - 1 - log_r) * mask).sum() / mask.sum()
    expected = -torch.nn.functional.logsigmoid(0.5 * logits).mean() + 0.1 * k3
    trainer.model.zero_grad()
    expected.backward()
    by_hand = torch.cat([p.grad.flatten() for p in trainer.params])
    assert (by_hand - grads[0]).abs().max() <= 1e-5
    assert metrics[0]["train/loss"] == pytest.approx(float(expected.detach()), abs=1e-5)
    chosen, rejected = 0.5 * (seq[0::2] - ref_seq[0::2]), 0.5 * (seq[1::2] - ref_seq[1::2])
    assert metrics[0]["rewards/margins"] == pytest.approx(float((chosen - rejected).mean()), abs=1e-5)
    assert metrics[0]["rewards/accuracies"] == pytest.approx(float((chosen > rejected).float().mean()))


def test_lora_reference_is_the_model_with_its_adapter_disabled(assets, tmp_path):
    trainer = DPOTrainer(make_cfg(assets, tmp_path, "model.lora_rank=4"))
    assert trainer.ref_model is None
    batch = trainer.train_set.batch([0, 1], trainer.tokenizer.pad_token_id)
    first = trainer.train_step(batch)  # LoRA's B starts at 0: the policy is its reference, the log-ratios are 0
    assert first["rewards/margins"] == 0.0 and first["train/loss"] == pytest.approx(math.log(2))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_dpo_resume_is_exact_and_moves_every_parameter(assets, tmp_path, lora):
    """4 steps in one run == a run stopped after 2 saved steps, then resumed (the reference stays the start)."""
    extra = ["model.lora_rank=4", "model.lora_alpha=8"] if lora else []
    extra += ["trainer.test_freq=4"]
    one = DPOTrainer(make_cfg(assets, tmp_path / "one", "trainer.total_training_steps=4", *extra))
    start = {n: p.detach().clone() for n, p in one.model.named_parameters() if p.requires_grad}
    last = one.fit()
    unmoved = [n for n, p in one.model.named_parameters() if p.requires_grad and torch.equal(start[n], p)]
    assert not unmoved, f"parameters that did not move: {unmoved}"
    assert "val/rewards/accuracies" in last and "val/loss" in last
    stop_after_two_steps_then_resume(
        DPOTrainer, lambda: make_cfg(assets, tmp_path / "two", "trainer.total_training_steps=4", *extra))
    assert max_weight_difference(tmp_path / "one" / "model", tmp_path / "two" / "model") <= 1e-6
    lines = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [3, 4]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU processes (gloo)")
@pytest.mark.parametrize("lora", [False, pytest.param(True, marks=pytest.mark.heavy)], ids=["full", "lora"])
def test_dpo_on_two_processes_matches_one(assets, tmp_path, lora):
    """Issue 65: `rft dpo` with trainer.n_gpus_per_node=2 (FSDP2 over two gloo processes, the frozen reference
    sharded too, each rank with its half of every step's pairs, the KL term's token count over both; 15 held-out
    pairs, so one rank validates a padding pair that counts for nothing) equals one process: every step's metrics
    (relative for the gradient norm and the log-probs, ~20) and the exported weights to 1e-6. It refused several
    processes before ("rft dpo runs one process for now")."""
    args = [f"model.partial_pretrain={assets / 'model'}",
            f"data.train_files={assets / 'data' / 'preference_train.parquet'}",
            f"data.val_files={assets / 'data' / 'preference_val.parquet'}", "data.val_max_samples=15",
            "data.train_batch_size=8", "data.micro_batch_size_per_gpu=2", "data.max_length=32", "optim.lr=1e-3",
            "algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.1", "trainer.total_training_steps=2",
            "trainer.save_freq=2", "trainer.test_freq=2", "trainer.logger=[]", "trainer.device=cpu",
            "model.strategy=fsdp2", *(["model.lora_rank=4", "model.lora_alpha=8"] if lora else [])]
    one_m, two_m = one_and_two_processes("dpo", args, tmp_path)
    for step in (1, 2):
        for key in ("train/loss", "train/preference_loss", "rewards/accuracies", "rewards/margins", "logps/chosen",
                    "actor/kl_loss", "train/grad_norm", "train/pairs", "train/tokens"):
            assert one_m[step][key] == pytest.approx(two_m[step][key], rel=1e-6, abs=1e-6), (step, key)
    for key in ("val/loss", "val/rewards/accuracies", "val/rewards/margins", "val/logps/rejected",
                "val/actor/kl_loss"):
        assert one_m[2][key] == pytest.approx(two_m[2][key], rel=1e-6, abs=1e-6), key  # log-probs ~20: relative
    assert (tmp_path / "two" / "checkpoints" / "global_step_2" / "policy_dcp").is_dir()
    assert max_weight_difference(tmp_path / "one" / "model", tmp_path / "two" / "model") <= PROCESSES_APART


@pytest.mark.heavy  # two runs of rft train, one on two processes: make test-heavy
@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU processes (gloo)")
def test_a_dpo_stage_on_two_processes_matches_one(assets, tmp_path):
    """A staged run's DPO stage on trainer.n_gpus_per_node=2 shards its pairs as rft dpo does (the stage was built
    without the run's ranks: each process a one-process DPO of its own, writing the same folder)."""
    import subprocess
    import sys

    from test_distributed import ENV

    staged = {"actor_rollout_ref": {"model": {"path": str(assets / "model")}},
              "data": {"train_files": str(assets / "data" / "train.parquet")},
              "trainer": {"logger": [], "device": "cpu"},
              "stages": [{"stage_name": "dpo", "algorithm": {"algorithm_type": "dpo", "beta": 0.5},
                          "data": {"train_files": str(assets / "data" / "preference_train.parquet"),
                                   "train_batch_size": 8, "micro_batch_size_per_gpu": 2, "max_length": 32},
                          "optim": {"lr": 1e-3, "weight_decay": 0.0},
                          "model": {"strategy": "fsdp2"},
                          "trainer": {"total_training_steps": 2, "save_freq": -1}}]}
    path = tmp_path / "staged.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(staged)))
    rft_here("train", str(path), f"trainer.default_local_dir={tmp_path / 'one'}", cwd=tmp_path)
    two = subprocess.run([sys.executable, "-m", "rft", "train", str(path), "trainer.n_gpus_per_node=2",
                          f"trainer.default_local_dir={tmp_path / 'two'}"], env=ENV, capture_output=True, text=True,
                         timeout=600)
    assert two.returncode == 0, two.stderr[-4000:]
    assert "2 steps on 2 processes" in two.stdout
    one_m, two_m = ({x["step"]: x for x in map(json.loads, (tmp_path / run / "dpo" / "metrics.jsonl").read_text()
                                                 .splitlines())} for run in ("one", "two"))
    # step 1 to 1e-6; after Adam's first step a reduction done in another order moves a near-zero gradient's weight
    # by a share of lr (2.7e-6 relative in step 2's gradient norm measured here, as test_rm's two-process note says)
    for step, tol in ((1, 1e-6), (2, 1e-5)):
        for key in ("train/loss", "rewards/margins", "train/grad_norm", "train/pairs"):
            assert one_m[step][key] == pytest.approx(two_m[step][key], rel=tol, abs=tol), (step, key)
    assert max_weight_difference(tmp_path / "one" / "dpo" / "model", tmp_path / "two" / "dpo" / "model") <= PROCESSES_APART


def test_rft_merge_rebuilds_a_dpo_runs_checkpoint(assets, tmp_path, capsys):
    """rft merge reads a DPO run's config.yaml (the SFT sections plus algorithm) and merges its LoRA checkpoint into
    the weights the run exported."""
    from safetensors.torch import load_file

    from rft.cli import main

    DPOTrainer(make_cfg(assets, tmp_path / "run", "model.lora_rank=4", "model.lora_alpha=8",
                        "trainer.total_training_steps=2", "trainer.save_freq=2")).fit()
    assert main(["merge", str(tmp_path / "run"), str(tmp_path / "merged")]) == 0
    assert "LoRA merged" in capsys.readouterr().out
    a, b = load_file(tmp_path / "run" / "model" / "model.safetensors"), load_file(tmp_path / "merged" / "model.safetensors")
    assert set(a) == set(b) and max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    base = load_file(assets / "model" / "model.safetensors")
    assert max(float((a[k] - base[k]).abs().max()) for k in a) > 0  # the steps moved the weights

def test_rft_dpo_cli_runs_the_example(assets, tmp_path):
    rft_here("dpo", str(REPO / "examples" / "arithmetic_dpo.yaml"), f"model.partial_pretrain={assets / 'model'}",
             f"data.train_files={assets / 'data' / 'preference_train.parquet'}",
             f"data.val_files={assets / 'data' / 'preference_val.parquet'}", "data.train_batch_size=8",
             "data.micro_batch_size_per_gpu=4", "trainer.total_training_steps=2",
             f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert (tmp_path / "out" / "model" / "config.json").is_file()
    line = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"} <= set(line)


def test_a_finished_dpo_run_without_checkpoints_is_complete_and_rft_sft_there_is_refused(assets, tmp_path):
    """A DPO run that saved no checkpoint (the default): the same command says it is complete; `rft sft` into its
    folder, which no checkpoint names as a DPO run's, trained from step 0 and replaced the DPO model without a
    word: it is refused, naming the run there, and the folder is left as it was."""
    out = tmp_path / "out"
    dpo = ["dpo", *(f"{k}={v}" for k, v in (("model.partial_pretrain", assets / "model"),
                                             ("data.train_files", assets / "data" / "preference_train.parquet"),
                                             ("data.val_files", assets / "data" / "preference_val.parquet"),
                                             ("data.train_batch_size", 8), ("data.micro_batch_size_per_gpu", 8),
                                             ("data.max_length", 32), ("trainer.total_training_steps", 1),
                                             ("trainer.default_local_dir", out)))]
    rft_here(*dpo, cwd=tmp_path)
    weights = out / "model" / "model.safetensors"
    written, metrics = weights.stat().st_mtime_ns, (out / "metrics.jsonl").read_text()
    again = rft_here(*dpo, cwd=tmp_path).stdout
    assert f"rft: {out} is complete (model in {out / 'model'}; trainer.save_freq=-1" in again, again
    sft = rft_here("sft", f"model.partial_pretrain={assets / 'model'}",
                   f"data.train_files={assets / 'data' / 'train.parquet'}", "data.response_key=extra_info",
                   "data.response_dict_keys=[answer]", "data.train_batch_size=8", "data.micro_batch_size_per_gpu=8",
                   "data.max_length=32", "trainer.total_training_steps=1", f"trainer.default_local_dir={out}",
                   cwd=tmp_path, check=False)
    assert sft.returncode == 2 and sft.stderr == (
        f"rft: error: {out} holds a finished rft dpo run (model in {out / 'model'}) that wrote no checkpoint; rft sft "
        "would start there from step 0 and replace its model/ and metrics.jsonl: use another "
        "trainer.default_local_dir, or set trainer.resume_mode=disable to replace that run\n")
    assert weights.stat().st_mtime_ns == written and (out / "metrics.jsonl").read_text() == metrics
    assert not (out / "failed.json").exists()


def test_a_dpo_stage_is_built_from_its_algorithm_mapping(assets, tmp_path):
    raw = OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": str(assets / "model")}},
        "data": {"train_files": str(assets / "data" / "train.parquet")},
        "trainer": {"default_local_dir": str(tmp_path / "run"), "seed": 7},
        "stages": [{"stage_name": "sft", "algorithm": "sft",
                    "data": {"train_files": str(assets / "data" / "train.parquet"), "response_key": "extra_info",
                             "response_dict_keys": ["answer"]}},
                   {"stage_name": "dpo", "algorithm": {"algorithm_type": "dpo", "beta": 0.3, "loss_type": "ipo"},
                    "data": {"train_files": str(assets / "data" / "preference_train.parquet")}},
                   {"stage_name": "grpo", "algorithm": {"adv_estimator": "grpo"}}]})
    sft, dpo, grpo = build_stages(raw)
    assert (sft.kind, dpo.kind, grpo.kind) == ("sft", "dpo", "rl")
    assert dpo.cfg.model.partial_pretrain == str(sft.model_dir) and dpo.cfg.trainer.seed == 7
    assert (dpo.cfg.algorithm.beta, dpo.cfg.algorithm.loss_type) == (0.3, "ipo")
    assert grpo.cfg.actor_rollout_ref.model.path == str(dpo.model_dir)
    raw.stages[1].algorithm.betta = 1.0
    with pytest.raises(ConfigError, match=r"stages\[1\]: unknown config key 'algorithm.betta'"):
        build_stages(raw)


def test_config_show_prints_a_dpo_config(capsys):
    from rft.cli import main

    assert main(["config", "show", str(REPO / "examples" / "arithmetic_dpo.yaml")]) == 0
    out = capsys.readouterr().out
    assert "an rft dpo config" in out and "loss_type: sigmoid" in out and "chosen_key: chosen" in out


# ------------------------------------------------------------------------------------------ Trinity's dpo
def trinity_dpo(assets: Path, out: Path, **algorithm) -> dict:
    return {"project": "p", "name": "dpo", "mode": "train", "checkpoint_root_dir": str(out),
            "algorithm": {"algorithm_type": "dpo", **algorithm},
            "model": {"model_path": str(assets / "model"), "max_model_len": 32},
            "buffer": {"train_batch_size": 16, "total_steps": 2, "trainer_input": {"experience_buffer": {
                "name": "pairs", "storage_type": "file", "path": str(assets / "data" / "preference_train.parquet"),
                "format": {"prompt_type": "plaintext", "prompt_key": "prompt", "chosen_key": "chosen",
                           "rejected_key": "rejected"}}}},
            "trainer": {"trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 4}},
                                           "trainer": {"logger": []}}}}


def test_trinity_dpo_keys_land_on_the_dpo_stage(assets, tmp_path):
    from rft.dialects.trinity import translate

    out = translate(trinity_dpo(assets, tmp_path, policy_loss_fn_args={"beta": 0.2, "label_smoothing": 0.1},
                                kl_loss_fn="low_var_kl", kl_loss_fn_args={"kl_coef": 0.05},
                                entropy_loss_fn_args={"entropy_coef": 0.01}, sample_strategy="warmup"))
    (stage,) = out["stages"]
    assert stage["algorithm"] == {"algorithm_type": "dpo", "beta": 0.2, "label_smoothing": 0.1, "use_kl_loss": True,
                                  "kl_loss_type": "low_var_kl", "kl_loss_coef": 0.05, "entropy_coeff": 0.01}
    # 16 experiences are 8 pairs; a micro-batch of 4 rows is 2 pairs
    assert stage["data"]["train_batch_size"] == 8 and stage["data"]["micro_batch_size_per_gpu"] == 2
    assert stage["data"]["train_files"] == str(assets / "data" / "preference_train.parquet")
    assert stage["data"]["max_length"] == 32
    # Trinity's default kl_loss_fn for dpo is k2 with kl_coef 0.001; none is honoured as none
    default = translate(trinity_dpo(assets, tmp_path))["stages"][0]["algorithm"]
    assert (default["use_kl_loss"], default["kl_loss_type"], default["kl_loss_coef"]) == (True, "k2", 0.001)
    assert translate(trinity_dpo(assets, tmp_path, kl_loss_fn="none"))["stages"][0]["algorithm"]["use_kl_loss"] is False
    # the messages format: the prompt is the messages_key column (Trinity's default name: message)
    cfg = trinity_dpo(assets, tmp_path)
    cfg["buffer"]["trainer_input"]["experience_buffer"]["format"] = {"prompt_type": "messages"}
    assert translate(cfg)["stages"][0]["data"]["prompt_key"] == "message"
    for algorithm, needle in (({"repeat_times": 4}, "algorithm.repeat_times: DPO reads pairs"),
                              ({"advantage_fn": "grpo"}, "algorithm.advantage_fn: DPO computes no advantages"),
                              ({"policy_loss_fn": "ppo"}, "algorithm.policy_loss_fn='ppo': the dpo algorithm"),
                              ({"kl_penalty_fn": "k1"}, "algorithm.kl_penalty_fn: DPO has no reward")):
        with pytest.raises(ConfigError, match=needle):
            translate(trinity_dpo(assets, tmp_path, **algorithm))
    with pytest.raises(ConfigError, match="mode='both': the dpo algorithm runs in mode train"):
        translate({**trinity_dpo(assets, tmp_path), "mode": "both"})


def test_a_trinity_dpo_yaml_trains(assets, tmp_path):
    import yaml

    from rft.orchestration.stages import run_stages
    from rft.trainer.configure import load_trinity

    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(trinity_dpo(assets, tmp_path / "ck")))
    kind, stages = load_trinity(path)
    assert kind == "stages" and [s.kind for s in stages] == ["dpo"]
    run_stages(stages)
    lines = [json.loads(x) for x in (stages[0].out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2] and all("rewards/margins" in x for x in lines)
    assert (stages[0].out / "model" / "config.json").is_file()


# ------------------------------------------------------------------------------------------ done-when
# The DPO stage: a constant lr of 1e-4 with beta 0.5 for 60 steps of 32 pairs (about one pass over the 2000 pairs).
# Measured on 2 CPU cores (seed 0): with lr 1e-3 both responses' log-probs collapse (greedy accuracy 0.53 -> 0.15);
# with 1e-4 and beta 0.1 the margins hardly move in 30 steps.
DPO_STEPS, DPO_LR, DPO_BETA = 60, 1e-4, 0.5


def pair_log_ratios(model_dir: Path, pairs: Path, data_cfg) -> torch.Tensor:
    """(N,) log p(chosen) - log p(rejected) of each pair in `pairs` under the model in `model_dir` (sums over the
    responses' tokens): > 0 where the model prefers the chosen answer."""
    from rft.algorithms import sequence_logps
    from rft.models.load import load_causal_lm, load_tokenizer

    tok = load_tokenizer(str(model_dir))
    model = load_causal_lm(str(model_dir), torch.float32, torch.device("cpu"))
    data = PreferenceDataset(pairs, tok, data_cfg)
    batch = data.batch(list(range(len(data))), tok.pad_token_id)
    with torch.no_grad():
        logps, _ = forward_logprobs(model, batch, 1.0)
    seq = sequence_logps(logps, batch.loss_mask.float())
    return seq[0::2] - seq[1::2]


SLOPPY_SFT = REPO / "tests" / "assets" / "sloppy_sft.safetensors"


def sloppy_sft_model(out: Path) -> Path:
    """The demo's SFT stage's model (tests/assets/make_sloppy_sft.py: seed 0, 1600 steps on the teacher who forgets
    the units carry in 75% of the carrying additions; held-out greedy accuracy 0.565 where it was recorded): the
    tiny preset's config and tokenizer with the recorded weights, stored in bfloat16, loaded as float32."""
    from safetensors.torch import load_file, save_file

    init_model("tiny", out, seed=0)
    save_file({k: v.float() for k, v in load_file(SLOPPY_SFT).items()}, out / "model.safetensors")
    return out


@pytest.mark.heavy  # ~60 s: make test-heavy (make test had reached 20 minutes under load)
def test_dpo_raises_the_margin_and_held_out_accuracy_over_the_sloppy_sft_model(tmp_path):
    """From the demo's SFT stage's model, which learned to add but copies the teacher's slips, a DPO stage on the
    arithmetic preference set (each addition's answer preferred to the one with the units carry wrong): every
    parameter moves, the implicit reward margin grows from 0, on held-out pairs too, the model prefers the chosen
    answer of more held-out pairs, and its held-out greedy accuracy rises.

    The SFT stage itself is recorded (its 1600 steps took five to seven of `make test`'s minutes, and whether it
    learns to add is a lottery of the CPU's rounding: orchestration/demo.py). Measured from the recorded model, seed 0,
    one thread, the same to three places under this CPU's AVX2 kernels, under ATEN_CPU_CAPABILITY=default with
    MKL_ENABLE_INSTRUCTIONS=SSE4_2 and on two threads: greedy accuracy 0.565 -> 0.810, held-out pairs preferred
    0.585 -> 0.835, mean log-ratio 2.46 -> 4.58, val/rewards/margins 1.062, val/rewards/accuracies 0.895."""
    from safetensors.torch import load_file

    from rft.orchestration import demo

    base = sloppy_sft_model(tmp_path / "sft")
    data = write_arithmetic(tmp_path / "d", n_train=2000, n_val=200, seed=0, max_digits=2,
                            carry_slip=demo.CARRY_SLIP, preferences=True)
    cfg = load_dpo_config(None, [
        f"model.partial_pretrain={base}", f"data.train_files={data['preference_train']}",
        f"data.val_files={data['preference_val']}", "data.train_batch_size=32", "data.micro_batch_size_per_gpu=32",
        "data.max_length=32", f"algorithm.beta={DPO_BETA}", f"optim.lr={DPO_LR}", "optim.weight_decay=0.0",
        "optim.warmup_steps_ratio=0.0", "optim.lr_scheduler=constant", f"trainer.total_training_steps={DPO_STEPS}",
        f"trainer.test_freq={DPO_STEPS}", "trainer.logger=[]", "trainer.seed=0",
        f"trainer.default_local_dir={tmp_path / 'dpo'}"])
    DPOTrainer(cfg).fit()
    tuned = tmp_path / "dpo" / "model"
    accuracy = {"sft": demo.held_out_accuracy(base, data["val"], max_tokens=5),
                "dpo": demo.held_out_accuracy(tuned, data["val"], max_tokens=5)}

    before, after = load_file(base / "model.safetensors"), load_file(tuned / "model.safetensors")
    assert set(before) == set(after)
    unmoved = [k for k in before if torch.equal(before[k], after[k])]
    assert not unmoved, f"parameters DPO did not move: {unmoved}"

    lines = [json.loads(x) for x in (tmp_path / "dpo" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, DPO_STEPS + 1))
    # on the held-out pairs, the model itself (not its ratio to the reference) prefers the right answer more often
    sft_ratios = pair_log_ratios(base, data["preference_val"], cfg.data)
    dpo_ratios = pair_log_ratios(tuned, data["preference_val"], cfg.data)
    pair_accuracy = {"sft": float((sft_ratios > 0).float().mean()), "dpo": float((dpo_ratios > 0).float().mean())}
    print(f"held-out greedy accuracy: sft {accuracy['sft']:.3f}, dpo {accuracy['dpo']:.3f}; held-out pairs "
          f"preferred: sft {pair_accuracy['sft']:.3f}, dpo {pair_accuracy['dpo']:.3f}; mean log-ratio: sft "
          f"{float(sft_ratios.mean()):.3f}, dpo {float(dpo_ratios.mean()):.3f}; val/rewards/margins "
          f"{lines[-1]['val/rewards/margins']:.3f}, val/rewards/accuracies {lines[-1]['val/rewards/accuracies']:.3f}")
    assert accuracy["sft"] >= 0.5, accuracy  # the recorded model adds (and copies the slips)
    # the first step's policy is its reference: every margin 0; then the chosen answers pull ahead, held out too
    assert lines[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    assert lines[-1]["val/rewards/margins"] > 0.3 and lines[-1]["val/rewards/accuracies"] >= 0.75
    assert pair_accuracy["dpo"] >= pair_accuracy["sft"] + 0.05, pair_accuracy
    assert float(dpo_ratios.mean()) > float(sft_ratios.mean()) + 0.5
    assert accuracy["dpo"] >= accuracy["sft"] + 0.1, accuracy  # DPO moves the mass to the right answer
