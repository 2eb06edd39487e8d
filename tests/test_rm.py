"""Reward-model training (`rft rm`): the Bradley-Terry step against a hand computation with the scorer rft train
uses, margins and centring, micro-batch invariance, exact resume with every parameter moving (full and LoRA), the
families of the matrix, the export loaded as reward_model.model.path, two processes equal to one, the bad input
(pairs whose responses are the same, a backbone outside the matrix, a causal LM as a reward model), and the
done-when: held-out pairwise accuracy on the arithmetic preference pairs."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cli_helpers import one_and_two_processes, rft_here
from sft_helpers import PROCESSES_APART, max_weight_difference, stop_after_two_steps_then_resume

from rft.config import ConfigError
from rft.data.dataset import DataError
from rft.data.io import read_rows, write_parquet
from rft.models.families import init_family_model
from rft.models.load import load_reward_model, load_tokenizer
from rft.models.tiny import init_model
from rft.rewards.model import RewardModel
from rft.tasks import arithmetic_rows, preference_rows, write_arithmetic
from rft.tasks.arithmetic import MISTAKES
from rft.trainer.configure import load_rm_config
from rft.trainer.rm import RMTrainer

os.environ["HF_HUB_OFFLINE"] = "1"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rm")
    init_model("tiny", root / "model", seed=0)
    write_arithmetic(root / "data", n_train=64, n_val=15, seed=0, preferences=True)
    return root


def make_cfg(assets: Path, out: Path, *overrides: str, model: Path | None = None):
    return load_rm_config(None, [
        f"model.partial_pretrain={model or assets / 'model'}",
        f"data.train_files={assets / 'data' / 'preference_train.parquet'}",
        f"data.val_files={assets / 'data' / 'preference_val.parquet'}",
        "data.train_batch_size=8", "data.micro_batch_size_per_gpu=8", "data.max_length=32",
        "optim.lr=1e-3", "optim.weight_decay=0.0", "trainer.total_training_steps=2", "trainer.logger=[]",
        f"trainer.default_local_dir={out}", *overrides,
    ])


def scorer_scores(model, tokenizer, dataset, indices: list[int]) -> torch.Tensor:
    """(2N,) scores of the pairs' chosen / rejected rows by rft train's reward-model scorer (`RewardModel`)."""
    return RewardModel(model).score(dataset.batch(indices, tokenizer.pad_token_id))


# ------------------------------------------------------------------------------------------ the loss
def test_the_step_is_the_hand_computed_bradley_terry_loss_and_the_micro_batch_size_does_not_change_it(assets,
                                                                                                      tmp_path):
    """train/loss = mean_i -log sigmoid(r_c - r_r - m_i) + c * mean_i (r_c + r_r)^2, with the scores read as rft
    train's reward-model scorer reads them (the last real token); the gradient is the same in one micro-batch of 4
    pairs or in four of 1."""
    rows = read_rows(assets / "data" / "preference_train.parquet")[:4]
    write_parquet([{**r, "m": float(i) / 2} for i, r in enumerate(rows)], tmp_path / "m.parquet")
    grads = []
    for micro in (4, 1):
        cfg = make_cfg(assets, tmp_path / f"micro{micro}", f"data.train_files={tmp_path / 'm.parquet'}",
                       "data.val_files=null", "data.train_batch_size=4", f"data.micro_batch_size_per_gpu={micro}",
                       "data.margin_key=m",
                       "algorithm.center_rewards_coefficient=0.5", "optim.clip_grad=0")
        trainer = RMTrainer(cfg)
        scores = scorer_scores(trainer.model, trainer.tokenizer, trainer.train_set, [0, 1, 2, 3])
        chosen, rejected = scores[0::2], scores[1::2]
        margins = torch.tensor([0.0, 0.5, 1.0, 1.5])
        expected = (-F.logsigmoid(chosen - rejected - margins) + 0.5 * (chosen + rejected) ** 2).mean()
        assert trainer.train_set.examples[3].margin == 1.5
        trainer.guard.step = lambda *a, **k: (0.0, None)  # the gradient of the first step, no update
        metrics = trainer.train_step(trainer.next_batch([0, 1, 2, 3]))
        assert metrics["train/loss"] == pytest.approx(float(expected), abs=1e-5)
        assert metrics["train/accuracy"] == pytest.approx(float((chosen > rejected).float().mean()))
        assert metrics["train/margin"] == pytest.approx(float((chosen - rejected).mean()), abs=1e-5)
        grads.append(torch.cat([p.grad.flatten() for p in trainer.params]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_rm_resume_is_exact_moves_every_parameter_and_exports_a_reward_model(assets, tmp_path, lora):
    """4 steps in one run == a run stopped after 2 saved steps, then resumed; every trainable parameter moves (with
    LoRA the adapters and the score head, trained in full); `model/` loads as reward_model.model.path loads it and
    scores the held-out pairs as the trainer's validation did."""
    extra = ["model.lora_rank=4", "model.lora_alpha=8"] if lora else []
    extra += ["trainer.test_freq=4"]
    probe = RMTrainer(make_cfg(assets, tmp_path / "probe", *extra))
    start = {n: p.detach().clone() for n, p in probe.model.named_parameters() if p.requires_grad}
    assert any("score" in n for n in start) and (not lora or any("lora_" in n for n in start))
    for _ in range(2):
        probe.train_step(probe.next_batch(probe.sampler.next_batch()))
    unmoved = [n for n, p in probe.model.named_parameters() if p.requires_grad and torch.equal(start[n], p)]
    assert not unmoved, f"parameters that did not move: {unmoved}"
    last = RMTrainer(make_cfg(assets, tmp_path / "one", "trainer.total_training_steps=4", *extra)).fit()
    stop_after_two_steps_then_resume(
        RMTrainer, lambda: make_cfg(assets, tmp_path / "two", "trainer.total_training_steps=4", *extra))
    assert max_weight_difference(tmp_path / "one" / "model", tmp_path / "two" / "model") <= 1e-6
    lines = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [3, 4]
    tok = load_tokenizer(str(tmp_path / "one" / "model"))
    exported = load_reward_model(str(tmp_path / "one" / "model"), torch.float32, torch.device("cpu"), tokenizer=tok)
    val_set = probe.val_set
    scores = scorer_scores(exported, tok, val_set, list(range(len(val_set))))
    assert last["val/accuracy"] == pytest.approx(float((scores[0::2] > scores[1::2]).float().mean()))
    assert last["val/margin"] == pytest.approx(float((scores[0::2] - scores[1::2]).mean()), abs=1e-5)


@pytest.mark.parametrize("family", ["qwen2", "llama", "gpt2"])
def test_every_family_of_the_matrix_trains_as_a_backbone(assets, tmp_path, family):
    """A causal LM of the family gets a one-label score head, trains two steps with every parameter moving, and the
    export is a sequence classifier of that family whose scores are the trained model's. (The centring term is on:
    without it a shift common to every score, GPT-2's final layer-norm bias, cancels out of r_c - r_r and has no
    gradient.)"""
    model = init_family_model(family, tmp_path / family, tokenizer="no-pad")
    trainer = RMTrainer(make_cfg(assets, tmp_path / "out", "trainer.test_freq=2",
                                 "algorithm.center_rewards_coefficient=0.1", model=model))
    start = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    last = trainer.fit()
    assert not [n for n, p in trainer.model.named_parameters() if torch.equal(start[n], p)]
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert config["architectures"][0].endswith("ForSequenceClassification") and len(config["id2label"]) == 1
    assert config["model_type"] == family and config["pad_token_id"] == trainer.tokenizer.pad_token_id
    exported = load_reward_model(str(tmp_path / "out" / "model"), torch.float32, torch.device("cpu"))
    scores = scorer_scores(exported, trainer.tokenizer, trainer.val_set, list(range(len(trainer.val_set))))
    assert last["val/rewards/chosen"] == pytest.approx(float(scores[0::2].mean()), abs=1e-5)


def test_rft_rm_cli_runs_the_example_and_rft_train_scores_with_its_model(assets, tmp_path):
    """The shipped example through the command line; its model/ is refused by no check of rft train's
    reward_model section (a sequence classifier with one label)."""
    from rft.trainer.configure import load_config

    rft_here("rm", str(REPO / "examples" / "arithmetic_rm.yaml"), f"model.partial_pretrain={assets / 'model'}",
             f"data.train_files={assets / 'data' / 'preference_train.parquet'}",
             f"data.val_files={assets / 'data' / 'preference_val.parquet'}", "data.train_batch_size=8",
             "data.micro_batch_size_per_gpu=8", "trainer.total_training_steps=2", "trainer.test_freq=2",
             "trainer.save_freq=2", "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert (tmp_path / "out" / "checkpoints" / "global_step_2").is_dir()
    cfg = load_config(REPO / "examples" / "rm_grpo.yaml", [
        f"actor_rollout_ref.model.path={assets / 'model'}", f"reward_model.model.path={tmp_path / 'out' / 'model'}",
        f"data.train_files={assets / 'data' / 'train.parquet'}", f"data.val_files={assets / 'data' / 'val.parquet'}"])
    assert cfg.reward_model.model.path == str(tmp_path / "out" / "model")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU processes (gloo)")
def test_rm_on_two_processes_matches_one(assets, tmp_path):
    """`rft rm` with trainer.n_gpus_per_node=2 (FSDP2 over two gloo processes, each with its half of every step's
    pairs; 15 held-out pairs, so one rank validates a padding pair that counts for nothing): every step's metrics
    equal one process's to 1e-6 (relative for the gradient norm, ~20 here), the exported reward model to 1e-5."""
    args = [f"model.partial_pretrain={assets / 'model'}",
            f"data.train_files={assets / 'data' / 'preference_train.parquet'}",
            f"data.val_files={assets / 'data' / 'preference_val.parquet'}", "data.train_batch_size=8",
            "data.micro_batch_size_per_gpu=2", "data.max_length=32", "optim.lr=1e-3",
            "algorithm.center_rewards_coefficient=0.1", "trainer.total_training_steps=2", "trainer.save_freq=2",
            "trainer.test_freq=2", "trainer.logger=[]", "trainer.device=cpu", "model.strategy=fsdp2"]
    one_m, two_m = one_and_two_processes("rm", args, tmp_path)
    for step in (1, 2):
        for key in ("train/loss", "train/accuracy", "train/margin", "train/grad_norm", "train/pairs"):
            assert one_m[step][key] == pytest.approx(two_m[step][key], rel=1e-6, abs=1e-6), (step, key)
    for key in ("val/loss", "val/accuracy", "val/margin", "val/rewards/chosen"):
        assert one_m[2][key] == pytest.approx(two_m[2][key], abs=1e-6), key
    assert (tmp_path / "two" / "checkpoints" / "global_step_2" / "policy_dcp").is_dir()
    assert max_weight_difference(tmp_path / "one" / "model", tmp_path / "two" / "model") <= PROCESSES_APART
    config = json.loads((tmp_path / "two" / "model" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForSequenceClassification"] and config["pad_token_id"] is not None


def test_rft_merge_rebuilds_an_rm_runs_lora_checkpoint_as_the_reward_model_it_exports(assets, tmp_path, capsys):
    """rft merge reads an rm run's config.yaml (the reward model's loss options) and rebuilds its LoRA checkpoint
    as the sequence classifier the run's model/ is, weights equal."""
    from rft.cli import main

    RMTrainer(make_cfg(assets, tmp_path / "run", "model.lora_rank=4", "model.lora_alpha=8",
                       "trainer.save_freq=2")).fit()
    assert main(["merge", str(tmp_path / "run" / "checkpoints" / "global_step_2"), str(tmp_path / "merged")]) == 0
    config = json.loads((tmp_path / "merged" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForSequenceClassification"]
    assert max_weight_difference(tmp_path / "run" / "model", tmp_path / "merged") <= 1e-6


# ------------------------------------------------------------------------------------------ bad input
def test_pairs_whose_chosen_is_their_rejected_are_counted_and_refused_in_one_line(assets, tmp_path):
    """TRL keeps such pairs (a constant log 2 in the loss, no gradient, a miss in the accuracy); rft refuses them,
    counted, naming the first, before any model loads (rft dpo reads the same pairs and refuses them too)."""
    rows = read_rows(assets / "data" / "preference_train.parquet")[:5]
    rows[1]["rejected"], rows[3]["rejected"] = rows[1]["chosen"], rows[3]["chosen"]
    write_parquet(rows, tmp_path / "same.parquet")
    run = rft_here("rm", f"model.partial_pretrain={assets / 'model'}", f"data.train_files={tmp_path / 'same.parquet'}",
                   "data.train_batch_size=2", "data.micro_batch_size_per_gpu=2", "trainer.logger=[]",
                   f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path, check=False)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"rft: error: 2 of 5 preference pairs have the same chosen and rejected response "
                                 f"(first: {tmp_path / 'same.parquet'} row 1)")
    assert "remove them" in run.stderr and "model written" not in run.stdout
    dpo = rft_here("dpo", f"model.partial_pretrain={assets / 'model'}", f"data.train_files={tmp_path / 'same.parquet'}",
                   "data.train_batch_size=2", "data.micro_batch_size_per_gpu=2", "trainer.logger=[]",
                   f"trainer.default_local_dir={tmp_path / 'dpo'}", cwd=tmp_path, check=False)
    assert dpo.returncode == 2 and "2 of 5 preference pairs have the same chosen" in dpo.stderr


def test_a_margin_column_that_is_missing_or_not_a_number_is_one_line(assets, tmp_path):
    rows = read_rows(assets / "data" / "preference_train.parquet")[:2]
    write_parquet([{**r, "m": "big"} for r in rows], tmp_path / "m.parquet")
    with pytest.raises(DataError, match=r"m.parquet row 0: data.margin_key column 'm' holds 'big'; a margin is a "
                                        r"finite number"):
        RMTrainer(make_cfg(assets, tmp_path / "out", f"data.train_files={tmp_path / 'm.parquet'}",
                           "data.val_files=null", "data.margin_key=m", "data.train_batch_size=2",
                           "data.micro_batch_size_per_gpu=2"))
    with pytest.raises(ConfigError, match="data.margin_key='chosen' names the prompt or a response column"):
        make_cfg(assets, tmp_path / "out", "data.margin_key=chosen")


def test_a_backbone_outside_the_model_family_matrix_is_refused_by_name_before_it_loads(assets, tmp_path):
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         vocab_size=400)).save_pretrained(tmp_path / "bert")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "bert" / name).write_bytes((assets / "model" / name).read_bytes())
    run = rft_here("rm", f"model.partial_pretrain={tmp_path / 'bert'}",
                   f"data.train_files={assets / 'data' / 'preference_train.parquet'}", "data.train_batch_size=8",
                   "data.micro_batch_size_per_gpu=8", f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path,
                   check=False)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"rft: error: model.partial_pretrain={str(tmp_path / 'bert')!r} is a 'bert' model, "
                                 "which is not in rft's model-family matrix; rft rm trains a score head over the "
                                 "families it tests (")
    assert "qwen2" in run.stderr and not (tmp_path / "out").exists()


def test_a_tokenizer_that_pads_with_the_token_ending_the_responses_is_refused_before_the_model_loads(assets,
                                                                                                      tmp_path):
    """A pad token equal to EOS: transformers' classifier would read each score a token early (the last token that
    is not the pad), where rft train's scorer reads the last real token; refused, naming the token."""
    import shutil

    shutil.copytree(assets / "model", tmp_path / "m")
    config = json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())
    (tmp_path / "m" / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": "<|im_end|>"}))
    with pytest.raises(DataError, match=r"a response ends with the tokenizer's pad token '<\|im_end\|>' \(id \d+\)"):
        RMTrainer(make_cfg(assets, tmp_path / "out", model=tmp_path / "m"))


def test_a_causal_lm_given_as_reward_model_path_is_refused_before_it_loads(assets):
    """reward_model.model.path names a folder without a score head (the policy's, a causal LM): one line."""
    from rft.trainer.configure import load_config

    with pytest.raises(ConfigError, match=r"reward_model.model.path=.* is a generative model \(Qwen2ForCausalLM\), "
                                          r"not a reward model: its score head would be random weights"):
        load_config(REPO / "examples" / "rm_grpo.yaml", [
            f"actor_rollout_ref.model.path={assets / 'model'}", f"reward_model.model.path={assets / 'model'}",
            f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"data.val_files={assets / 'data' / 'val.parquet'}"])


def test_rm_config_show_and_a_resume_by_another_trainer(assets, tmp_path, capsys):
    """`rft config show` reads an rm YAML as one; an rm run's checkpoints are rm's (rft dpo there is refused)."""
    from rft.cli import main

    assert main(["config", "show", str(REPO / "examples" / "arithmetic_rm.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {REPO / 'examples' / 'arithmetic_rm.yaml'}: an rft rm config")
    assert "center_rewards_coefficient: 0.01" in out
    RMTrainer(make_cfg(assets, tmp_path / "run", "trainer.save_freq=1", "trainer.total_training_steps=1")).fit()
    state = json.loads((tmp_path / "run" / "checkpoints" / "global_step_1" / "trainer_state.json").read_text())
    assert state["trainer"] == "rm"
    run = rft_here("dpo", f"model.partial_pretrain={assets / 'model'}",
                   f"data.train_files={assets / 'data' / 'preference_train.parquet'}", "data.train_batch_size=8",
                   "data.micro_batch_size_per_gpu=8", "trainer.logger=[]", "trainer.total_training_steps=3",
                   f"trainer.default_local_dir={tmp_path / 'run'}", cwd=tmp_path, check=False)
    assert run.returncode == 2 and "rft rm" in run.stderr, run.stderr


def test_mistake_pairs_reject_each_kind_of_wrong_answer_a_policy_makes(tmp_path):
    """`preference_rows(rejected="mistakes")`: every rejected answer is wrong, of the kind its pair names (the units
    carry, the units digit, off by one, the hundreds carry, a - b), every kind drawn; a question's pair does not
    depend on the rows around it. `rft data arithmetic --rejected` without --preferences is one line."""
    rows = arithmetic_rows(400, 0, "train")
    pairs = preference_rows(rows, rejected="mistakes")
    assert len(pairs) == len(rows) and {p["extra_info"]["mistake"] for p in pairs} == set(MISTAKES)
    for pair in pairs:
        a, b = (int(x) for x in pair["extra_info"]["question"][:-1].split("+"))
        chosen, wrong, kind = int(pair["chosen"]), int(pair["rejected"]), pair["extra_info"]["mistake"]
        assert chosen == a + b != wrong >= 0
        assert {"carry": abs(chosen - wrong) == 10, "units": chosen // 10 == wrong // 10,
                "off_by_one": abs(chosen - wrong) == 1, "hundreds": abs(chosen - wrong) == 100,
                "operation": wrong == abs(a - b)}[kind], pair
    assert preference_rows(rows[7:9], rejected="mistakes")[1]["rejected"] == pairs[8]["rejected"]
    assert [p["rejected"] for p in preference_rows(rows)] == [p["rejected"] for p in preference_rows(rows, "carry")]
    run = rft_here("data", "arithmetic", str(tmp_path / "d"), "--n-train", "4", "--rejected", "mistakes",
                   cwd=tmp_path, check=False)
    assert run.returncode == 2 and run.stderr.startswith("rft: error: rft data arithmetic: rejected='mistakes' "
                                                         "chooses the preference pairs' wrong answers")
    rft_here("data", "arithmetic", str(tmp_path / "p"), "--n-train", "40", "--n-val", "10", "--preferences",
             "--rejected", "mistakes", cwd=tmp_path)
    written = read_rows(tmp_path / "p" / "preference_train.parquet")
    assert written == preference_rows(arithmetic_rows(40, 0, "train"), rejected="mistakes")


def test_math_of_log2_for_equal_scores():
    """A pair scored equal costs log 2: what every pair costs at the start of a LoRA run (its score head is new)."""
    from rft.trainer.rm import bradley_terry_terms

    zero = torch.zeros(3)
    assert bradley_terry_terms(zero, zero, zero, None).tolist() == pytest.approx([math.log(2)] * 3)
    assert bradley_terry_terms(zero, zero, torch.ones(3), 1.0).tolist() == pytest.approx([math.log1p(math.e)] * 3)


# ------------------------------------------------------------------------------------------ done when
RM_PAIRS, RM_STEPS, RM_LR = 8000, 1500, 5e-4


@pytest.mark.heavy  # ~10 minutes on 2 quiet cores (1500 steps of 32 pairs): make test-heavy
@pytest.mark.timeout(3600)  # 15 minutes were not enough at load 20
def test_rm_reaches_90_percent_held_out_pairwise_accuracy_on_the_arithmetic_pairs(tmp_path):
    """Issue 65's bar: from the demo's SFT model (tests/test_dpo.py's recorded one, which copies the teacher's carry
    slips), `rft rm` on the arithmetic preference pairs ranks >= 90% of the 200 held-out pairs right: the answer
    over the one with the units carry wrong, which differ in their tens digit only, so the score must know whether
    the units carry. The loss sits near log 2 for some hundred steps, then falls (measured from the sweep's seed-0
    SFT model: val/accuracy 0.73 at step 500, 0.885 at 1000, 0.91 at 1500; from the recorded one 0.775, 0.995 and
    1.0, in 6 minutes on 2 cores at load 2)."""
    from test_dpo import sloppy_sft_model

    base = sloppy_sft_model(tmp_path / "sft")
    data = write_arithmetic(tmp_path / "d", n_train=RM_PAIRS, n_val=200, seed=0, preferences=True)
    cfg = load_rm_config(REPO / "examples" / "arithmetic_rm.yaml", [
        f"model.partial_pretrain={base}", f"data.train_files={data['preference_train']}",
        f"data.val_files={data['preference_val']}", f"optim.lr={RM_LR}", f"trainer.total_training_steps={RM_STEPS}",
        "trainer.test_freq=500", "trainer.save_freq=-1", "trainer.logger=[]",
        f"trainer.default_local_dir={tmp_path / 'rm'}"])
    last = RMTrainer(cfg).fit()
    assert last["val/accuracy"] >= 0.9, last

