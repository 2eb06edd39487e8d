"""SFT: rows to batches, the loss mask, micro-batch invariance, exact resume, and real learning."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from sft_helpers import max_weight_difference, stop_after_two_steps_then_resume
from transformers import AutoTokenizer

from rft.data.dataset import DataError
from rft.data.io import write_parquet
from rft.data.sft import SFTDataset
from rft.explorer.evaluate import eos_token_ids, evaluate
from rft.models.load import load_causal_lm
from rft.models.tiny import init_model
from rft.rewards import default_compute_score
from rft.rollout import HFRollout, SamplingParams
from rft.tasks import write_arithmetic
from rft.trainer.configure import load_sft_config
from rft.trainer.sft import SFTTrainer

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    init_model("tiny", root / "model", seed=0)
    write_arithmetic(root / "data", n_train=80, n_val=20, seed=0, max_digits=1)
    return root


def make_cfg(assets: Path, out: Path, *overrides: str):
    return load_sft_config(None, sft_args(assets, out, *overrides))


def sft_args(assets: Path, out: Path, *overrides: str) -> list[str]:
    """The overrides of `make_cfg`, as `rft sft` takes them."""
    return [
        f"model.partial_pretrain={assets / 'model'}",
        f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"data.val_files={assets / 'data' / 'val.parquet'}",
        "data.response_key=extra_info", "data.response_dict_keys=[answer]",
        "data.train_batch_size=16", "data.micro_batch_size_per_gpu=16", "data.max_length=32",
        "optim.lr=3e-3", "optim.weight_decay=0.0", "trainer.total_training_steps=2", "trainer.logger=[]",
        f"trainer.default_local_dir={out}", *overrides,
    ]


def greedy_accuracy(model_dir: Path, val_file: Path) -> float:
    from rft.data.dataset import PromptDataset

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load_causal_lm(str(model_dir), torch.float32, torch.device("cpu"))
    rollout = HFRollout(model, eos_token_ids(model, tok), tok.pad_token_id)
    params = SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=6)
    metrics, _ = evaluate(rollout, tok, PromptDataset(val_file, tok), default_compute_score, params)
    return metrics["val-core/arithmetic/reward/mean@1"]


def test_sft_lowers_val_loss_and_beats_the_untrained_model(assets, tmp_path):
    trainer = SFTTrainer(make_cfg(assets, tmp_path, "trainer.total_training_steps=150", "trainer.test_freq=150",
                                  "data.train_batch_size=32", "data.micro_batch_size_per_gpu=32"))
    start_loss = trainer.val_loss()
    trainer.fit()
    assert trainer.val_loss() < 0.5 * start_loss
    val = assets / "data" / "val.parquet"
    before, after = greedy_accuracy(assets / "model", val), greedy_accuracy(tmp_path / "model", val)
    assert before == 0.0 and after >= 0.3, (before, after)


def test_single_turn_rows_mask_only_the_response(assets):
    tok = AutoTokenizer.from_pretrained(assets / "model")
    cfg = make_cfg(assets, Path("unused"))
    ds = SFTDataset(assets / "data" / "train.parquet", tok, cfg.data)
    ex = ds.examples[0]
    assert tok.decode(ex.prompt_ids).startswith("<|im_start|>user\n") and tok.decode(ex.prompt_ids).endswith(
        "<|im_start|>assistant\n")
    assert tok.decode(ex.response_ids).endswith("<|im_end|>") and all(ex.loss_mask)
    batch = ds.batch([0, 1, 2], tok.pad_token_id)
    assert torch.equal(batch.loss_mask, batch.response_mask)


def test_multiturn_loss_covers_every_assistant_turn(tmp_path, assets):
    tok = AutoTokenizer.from_pretrained(assets / "model")
    messages = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"},
                {"role": "user", "content": "and 2+2?"}, {"role": "assistant", "content": "4"}]
    write_parquet([{"messages": messages}], tmp_path / "chat.parquet")
    cfg = load_sft_config(None, [f"model.partial_pretrain={assets / 'model'}",
                                 f"data.train_files={tmp_path / 'chat.parquet'}", "data.multiturn.enable=true"])
    ex = SFTDataset(tmp_path / "chat.parquet", tok, cfg.data).examples[0]
    learned = [t for t, m in zip(ex.response_ids, ex.loss_mask) if m]
    assert tok.decode(learned) == "2<|im_end|>4<|im_end|>"
    # Trinity-RFT's messages rows without enable_concatenated_multi_turn: the last assistant turn only
    cfg.data.multiturn.last_turn_only = True
    ex = SFTDataset(tmp_path / "chat.parquet", tok, cfg.data).examples[0]
    assert tok.decode([t for t, m in zip(ex.response_ids, ex.loss_mask) if m]) == "4<|im_end|>"
    # a messages column under another name: the key to set, and the columns there are
    cfg.data.multiturn.messages_key = "message"
    with pytest.raises(DataError, match=r"no column 'message' \(data.multiturn.messages_key\); did you mean "
                                        r"data.multiturn.messages_key=messages\? the rows have the columns messages: "
                                        r"set data.multiturn.messages_key=<one of them>"):
        SFTDataset(tmp_path / "chat.parquet", tok, cfg.data)


def test_trl_prompt_completion_rows_standard_and_conversational(tmp_path, assets):
    """TRL's prompt-completion SFT rows: a string completion is its text and EOS; a conversational one (a message
    list) is the assistant turn's text and closing EOS from the chat template, never the list's Python repr."""
    tok = AutoTokenizer.from_pretrained(assets / "model")
    rows = [{"prompt": [{"role": "user", "content": "1+1="}], "completion": [{"role": "assistant", "content": "2"}]},
            {"prompt": "3+4=", "completion": "7"}]
    (tmp_path / "trl.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    cfg = load_sft_config(None, [f"model.partial_pretrain={assets / 'model'}",
                                 f"data.train_files={tmp_path / 'trl.jsonl'}", "data.response_key=completion"])
    conversational, standard = SFTDataset(tmp_path / "trl.jsonl", tok, cfg.data).examples
    assert tok.decode(conversational.prompt_ids) == "<|im_start|>user\n1+1=<|im_end|>\n<|im_start|>assistant\n"
    # the template's newline after <|im_end|> is in the sequence, without loss
    assert tok.decode(conversational.response_ids) == "2<|im_end|>\n"
    assert tok.decode([t for t, m in zip(conversational.response_ids, conversational.loss_mask) if m]) == \
        "2<|im_end|>"
    assert tok.decode(standard.response_ids) == "7<|im_end|>" and all(standard.loss_mask)
    # without data.response_key, the line names it
    cfg.data.response_key = "response"
    with pytest.raises(DataError, match=r"no column 'response' \(data.response_key\); did you mean "
                                        r"data.response_key=completion\? \(TRL's prompt-completion format\)"):
        SFTDataset(tmp_path / "trl.jsonl", tok, cfg.data)


def test_trl_conversational_and_text_rows_name_what_to_set(tmp_path, assets):
    tok = AutoTokenizer.from_pretrained(assets / "model")
    write_parquet([{"messages": [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]}],
                  tmp_path / "chat.parquet")
    write_parquet([{"text": "1+1=2"}], tmp_path / "text.parquet")
    cfg = load_sft_config(None, [f"model.partial_pretrain={assets / 'model'}",
                                 f"data.train_files={tmp_path / 'chat.parquet'}"])
    with pytest.raises(DataError, match=r"chat.parquet row 0: no column 'prompt' \(data.prompt_key\), but chat "
                                        r"conversations in 'messages' \(TRL's conversational format\): set "
                                        r"data.multiturn.enable=true to train on their assistant turns$"):
        SFTDataset(tmp_path / "chat.parquet", tok, cfg.data)
    with pytest.raises(DataError, match=r"text.parquet row 0: no column 'prompt' \(data.prompt_key\), but a 'text' "
                                        r"column \(TRL's language-modeling format\), which rft sft does not train on"):
        SFTDataset(tmp_path / "text.parquet", tok, cfg.data)
    # a row with its prompt and no response: the response key, whatever else it holds
    write_parquet([{"prompt": "1+1=", "messages": [{"role": "user", "content": "1+1="}]}], tmp_path / "half.parquet")
    with pytest.raises(DataError, match=r"half.parquet row 0: no column 'response' \(data.response_key\); the rows "
                                        r"have the columns "):
        SFTDataset(tmp_path / "half.parquet", tok, cfg.data)


def test_a_training_set_smaller_than_one_step_names_rows_and_no_rl_key(assets, tmp_path, capsys):
    """rft sft with verl's default data.train_batch_size (256) on 80 rows: one line in rows, naming the SFT key to
    lower and no RL key (it said "prompts" and actor_rollout_ref.actor.ppo_mini_batch_size, which rft sft has not)."""
    from rft.cli import main

    assert main(["sft", f"model.partial_pretrain={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", "data.response_key=extra_info",
                 "data.response_dict_keys=[answer]", f"trainer.default_local_dir={tmp_path / 'out'}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "rft: error: the training set has 80 rows, fewer than data.train_batch_size=256 (the rows of one step): lower "
        "data.train_batch_size to at most 80, or add rows")


def test_rows_past_gpt2s_position_table_are_one_line_before_the_model_loads(tmp_path, capsys):
    """GPT-2's learned positions (512 in rft's two-layer family model) and rows of 600+ tokens under the default
    data.max_length (1024): rft sft and rft dpo say the data.max_length that fits, where the forward pass stopped on
    'unexpected IndexError'; with it (and data.truncation=right) the run trains."""
    from rft.cli import main
    from rft.models.families import init_family_model

    model = init_family_model("gpt2", tmp_path / "gpt2", tokenizer="base")
    long = "1 2 3 " * 100  # the base tokenizer: a token per byte
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps({"prompt": "count:", "response": long}) + "\n"
                                                for _ in range(4)))
    (tmp_path / "dpo.jsonl").write_text("".join(json.dumps({"prompt": "count:", "chosen": long, "rejected": "x"}) +
                                                "\n" for _ in range(4)))
    for command, unit in (("sft", "row"), ("dpo", "pair")):
        args = [command, f"model.partial_pretrain={model}", f"data.train_files={tmp_path / (command + '.jsonl')}",
                "data.train_batch_size=4", "data.micro_batch_size_per_gpu=4", "trainer.total_training_steps=1",
                "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / command}"]
        assert main(args) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"rft: error: the longest {unit} of data.train_files / val_files has {1 + 6 + 600 + 1} tokens, more than "
            f"the 512 positions of {model} (a learned position table, which has no position past it): set "
            f"data.max_length=512 (data.truncation then says what happens to longer {unit}s), or shorten them")
        assert main([*args, "data.max_length=512", "data.truncation=right"]) == 0
        assert (tmp_path / command / "model" / "model.safetensors").is_file()


def test_data_errors_name_the_row_and_key(tmp_path, assets):
    tok = AutoTokenizer.from_pretrained(assets / "model")
    write_parquet([{"prompt": "1+1=", "extra_info": {"question": "1+1="}}], tmp_path / "rows.parquet")
    cfg = make_cfg(assets, tmp_path)
    with pytest.raises(DataError, match="has no key 'answer'"):
        SFTDataset(tmp_path / "rows.parquet", tok, cfg.data)
    long = load_sft_config(None, [f"model.partial_pretrain={assets / 'model'}", "data.max_length=4",
                                  f"data.train_files={assets / 'data' / 'train.parquet'}",
                                  "data.response_key=extra_info", "data.response_dict_keys=[answer]"])
    with pytest.raises(DataError, match="data.max_length=4"):
        SFTDataset(assets / "data" / "train.parquet", tok, long.data)


def test_rows_over_max_length_are_judged_together_with_fixes_that_work(tmp_path, assets, caplog):
    """One message for every row over data.max_length: how many, the longest, the max_length that keeps them all,
    and what each truncation would cut and drop; right / left then drop the rows they cannot fit, with a count.
    The tiny tokenizer: a prompt of k characters is 8 + k tokens, a response of m characters m + 1 (its EOS)."""
    tok = AutoTokenizer.from_pretrained(assets / "model")
    rows = tmp_path / "rows.parquet"
    write_parquet([{"prompt": "1+1=", "response": "2"},  # 12 + 2: fits
                   {"prompt": "1+1=", "response": "2" * 15},  # 12 + 16: right and left cut it
                   {"prompt": "a" * 14, "response": "2"},  # 22 + 2: the prompt alone exceeds: right drops it
                   {"prompt": "1+1=", "response": "3" * 25}],  # 12 + 26: the response alone exceeds: left drops it
                  rows)
    data = lambda truncation: make_cfg(assets, tmp_path, "data.response_key=response", "data.response_dict_keys=null",
                                       "data.max_length=20", f"data.truncation={truncation}").data
    exceed = f"{rows}: 3 of 4 rows exceed data.max_length=20 tokens (the longest: 38 tokens, {rows} row 3)"
    with pytest.raises(DataError) as e:
        SFTDataset(rows, tok, data("error"))
    assert str(e.value) == (
        f"{exceed}; set data.max_length=38 to keep every row whole, or data.truncation=right (cuts the responses' "
        "ends of 2, drops 1 row with no response token within the limit) or data.truncation=left (cuts the "
        "prompts' starts of 2, drops 1 row with a response that alone reaches the limit)")
    with caplog.at_level("WARNING", logger="rft"):
        right = SFTDataset(rows, tok, data("right"))
    assert caplog.messages == [f"rft: note: {exceed}; data.truncation=right cut the responses' ends of 2, dropped 1 "
                               "row with no response token within the limit; data.max_length=38 would keep every row "
                               "whole"]
    assert [len(x.prompt_ids) + len(x.response_ids) for x in right.examples] == [14, 20, 20]
    assert [len(x.prompt_ids) for x in SFTDataset(rows, tok, data("left")).examples] == [12, 4, 18]
    write_parquet([{"prompt": "a" * 14, "response": "2"}], rows)
    with pytest.raises(DataError) as e:
        SFTDataset(rows, tok, data("right"))
    assert str(e.value) == (f"{rows}: 1 of 1 row exceeds data.max_length=20 tokens (the longest: 24 tokens, {rows} "
                            "row 0), and data.truncation=right fits none of them (all have no response token within "
                            "the limit); set data.max_length=24")


def test_val_max_samples_validates_on_the_first_rows_and_a_large_validation_says_so(assets, tmp_path, caplog,
                                                                                  monkeypatch):
    """data.val_max_samples (verl's sft_trainer.yaml key and meaning): a validation reads the first N rows of
    data.val_files; uncapped, a run validating on more than 300 rows says how many and the key, once."""
    write_arithmetic(tmp_path / "big", n_train=4, n_val=301, seed=1)
    val = tmp_path / "big" / "val.parquet"
    cfg = lambda *extra: make_cfg(assets, tmp_path / "out", f"data.val_files={val}", "trainer.total_training_steps=1",
                                  *extra)
    note = ("rft: note: each validation computes val/loss over all 301 rows of data.val_files; set "
            "data.val_max_samples=N to validate on N of them")
    for extra, notes in ((["trainer.test_freq=1"], [note]), (["trainer.test_freq=-1"], []),
                         (["trainer.test_freq=1", "data.val_max_samples=5"], [])):
        caplog.clear()
        with caplog.at_level("WARNING", logger="rft"):
            trainer = SFTTrainer(cfg(*extra))
        assert caplog.messages == notes, extra
    every = SFTDataset(val, trainer.tokenizer, trainer.cfg.data).examples
    evaluated = []  # the rows validation batches, as (prompt, response) token ids
    batch = trainer.val_set.batch
    monkeypatch.setattr(trainer.val_set, "batch", lambda indices, pad_id: (evaluated.extend(
        (trainer.val_set.examples[i].prompt_ids, trainer.val_set.examples[i].response_ids) for i in indices),
        batch(indices, pad_id))[1])
    assert math.isfinite(trainer.fit()["val/loss"])  # one step, validated once
    assert evaluated == [(x.prompt_ids, x.response_ids) for x in every[:5]]


def test_micro_batch_size_does_not_change_the_gradient(assets, tmp_path):
    grads = []
    for micro in (15, 3):
        trainer = SFTTrainer(make_cfg(assets, tmp_path, f"data.micro_batch_size_per_gpu={micro}",
                                      "data.train_batch_size=15"))
        batch = trainer.train_set.batch(list(range(15)), trainer.tokenizer.pad_token_id)
        trainer.optimizer.zero_grad()
        n = float(batch.loss_mask.sum())
        for mb in batch.split(micro):
            (trainer._nll_sum(mb) / n).backward()
        grads.append(torch.cat([p.grad.flatten() for p in trainer.params]))
    assert (grads[0] - grads[1]).abs().max() <= 1e-6


def test_sft_resume_with_a_changed_key_is_refused_before_the_model_loads(assets, tmp_path):
    """`rft sft` holds its folder through run_folder too: a rerun that changes optim.lr (which the checkpoint's
    optimizer and scheduler would override) is refused; more steps resume."""
    from rft.errors import RftError
    from rft.trainer.checkpoint import checkpoint_to_resume
    from rft.trainer.run_folder import check_resume_matches

    SFTTrainer(make_cfg(assets, tmp_path, "trainer.total_training_steps=1", "trainer.save_freq=1")).fit()
    changed = make_cfg(assets, tmp_path, "optim.lr=1e-2", "trainer.save_freq=1")
    with pytest.raises(RftError, match=r"from global_step_1 with changed keys optim.lr \(0.003 -> 0.01\): "):
        check_resume_matches(changed, checkpoint_to_resume(changed))
    longer = make_cfg(assets, tmp_path, "trainer.total_training_steps=3", "trainer.test_freq=1")
    check_resume_matches(longer, checkpoint_to_resume(longer))


@pytest.mark.parametrize("save_freq", [1, -1], ids=["checkpoints", "no_checkpoint"])
def test_rerunning_a_finished_sft_run_says_it_is_complete_and_trains_nothing(assets, tmp_path, save_freq):
    """`rft sft` again after its run finished, as `rft train` does: the line saying it is complete, exit 0, model/
    not rewritten. With checkpoints the completeness check read trainer.val_only, a key of rft train's alone, and
    the command ended in 'unexpected AttributeError'; without (trainer.save_freq=-1, the default) the run trained
    again from step 0 and replaced model/ and metrics.jsonl without a word, and with another key it does so only
    when told (trainer.resume_mode=disable)."""
    from cli_helpers import rft_here

    out = tmp_path / "out"
    argv = ["sft", *sft_args(assets, out, "trainer.total_training_steps=1", f"trainer.save_freq={save_freq}")]
    rft_here(*argv, cwd=tmp_path)
    weights = out / "model" / "model.safetensors"
    written = weights.stat().st_mtime_ns
    again = rft_here(*argv, cwd=tmp_path)
    done = (f"rft: {out} is complete (1/1 steps, model in {out / 'model'}); nothing to do" if save_freq > 0 else
            f"rft: {out} is complete (model in {out / 'model'}; trainer.save_freq=-1 wrote no checkpoint); nothing "
            "to do")
    assert done in again.stdout and "rft sft: model written" not in again.stdout, again.stdout
    assert weights.stat().st_mtime_ns == written
    if save_freq > 0:
        return
    other = rft_here(*argv, "optim.lr=1e-2", cwd=tmp_path, check=False)
    assert other.returncode == 2 and other.stderr.startswith(
        f"rft: error: {out} holds a finished run (model in {out / 'model'}) with other keys: optim.lr (0.003 -> "
        "0.01); it wrote no checkpoint (trainer.save_freq=-1)"), other.stderr
    assert weights.stat().st_mtime_ns == written


def test_an_sft_run_stopped_among_skipped_steps_stops_where_the_straight_run_stops(assets, tmp_path, monkeypatch):
    """Issue 60, `rft sft` (and `rft dpo`, whose loop it is): optim.lr=1e10 skips every step, so bad_update_limit=2
    stops the run at step 3 with exit 2. Stopped after checkpoint 2 and run again, it counted from 0 again and ended
    with exit 0 and the starting model; the checkpoint holds the guard's count now."""
    from cli_helpers import rft_here, sigterm_after_checkpoint

    common = ("optim.lr=1e10", "trainer.total_training_steps=4", "trainer.save_freq=1", "trainer.bad_update_limit=2")
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    first = rft_here("sft", *sft_args(assets, straight, *common), cwd=tmp_path, check=False)
    line = [x for x in first.stderr.splitlines() if x.startswith("rft: error:")]
    assert first.returncode == 2 and len(line) == 1 and "3 optimizer steps in a row were skipped" in line[0]
    sigterm_after_checkpoint(monkeypatch, 2)
    assert rft_here("sft", *sft_args(assets, stopped, *common), cwd=tmp_path, check=False).returncode == 143
    monkeypatch.undo()
    again = rft_here("sft", *sft_args(assets, stopped, *common), cwd=tmp_path, check=False)
    assert "resumed from" in again.stdout and not (stopped / "model").exists(), again.stdout
    assert again.returncode == 2 and line[0].replace(str(straight), str(stopped)) in again.stderr.splitlines()
    metrics = [json.loads(x) for x in (stopped / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in metrics] == [1, 2] and all(x["train/skipped_updates"] == 1.0 for x in metrics)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_sft_resume_is_exact_and_moves_every_parameter(assets, tmp_path, lora):
    """4 steps in one run == a 4-step run stopped after 2 saved steps, then resumed (same cosine schedule)."""
    extra = ["model.lora_rank=4", "model.lora_alpha=8"] if lora else []
    one = SFTTrainer(make_cfg(assets, tmp_path / "one", "trainer.total_training_steps=4", *extra))
    start = {n: p.detach().clone() for n, p in one.model.named_parameters() if p.requires_grad}
    one.fit()
    after = {n: p.detach() for n, p in one.model.named_parameters() if p.requires_grad}
    if not lora:  # LoRA's A moves from the second step on; the merged export is compared below
        assert not [n for n in start if torch.equal(start[n], after[n])]
    stop_after_two_steps_then_resume(
        SFTTrainer, lambda: make_cfg(assets, tmp_path / "two", "trainer.total_training_steps=4", *extra))
    assert max_weight_difference(tmp_path / "one" / "model", tmp_path / "two" / "model") <= 1e-6
    assert max_weight_difference(assets / "model", tmp_path / "one" / "model") > 1e-4  # the export moved
