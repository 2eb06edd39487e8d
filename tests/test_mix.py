"""Trinity-RFT's mix (algorithm.mix, data.expert; Trinity's algorithm_type mix): expert SFT rows join each RL
update at expert_data_ratio; the expert rows get mu times the SFT loss and the experiences (1 - mu) times the policy
loss, each with the mini-batch's normaliser of its own rows; a Trinity YAML with algorithm_type mix trains and
resumes exactly."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from rl_helpers import assert_all_moved, make_assets, rl_config, trainable
from safetensors.torch import load_file

from rft.batch import Batch
from rft.config import ConfigError
from rft.data.dataset import DataError, PromptDataset, left_pad
from rft.data.io import read_rows
from rft.dialects.trinity import translate
from rft.distributed import step_shard
from rft.models.load import load_tokenizer
from rft.orchestration.run import SyncRun
from rft.trainer.configure import load_trinity
from rft.trainer.mix import ExpertRows, expert_rows_per_mini_batch
from rft.trainer.rl import RLTrainer
from rft.workers.policy import forward_logprobs


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = make_assets(tmp_path_factory.mktemp("mix"))
    rows = read_rows(root / "data" / "train.parquet")
    (root / "expert.jsonl").write_text("".join(  # Trinity's plaintext SFT rows: a question and its answer
        json.dumps({"question": r["extra_info"]["question"], "answer": r["extra_info"]["answer"]}) + "\n"
        for r in rows))
    return root


def mix_cfg(assets: Path, out: Path, *overrides: str):
    return rl_config(assets, out, "algorithm.mix.enable=true", f"data.expert.files={assets / 'expert.jsonl'}",
                     "data.expert.prompt_key=question", "data.expert.response_key=answer", "data.expert.max_length=48",
                     *overrides)


def test_expert_rows_per_mini_batch_is_trinitys_ceil_of_the_ratio_of_all_rows():
    # E = ceil(r U / (1 - r)): U = 192, r = 0.25 -> 64 (Trinity's mix_math example: 64 expert + 192 usual of 256);
    # U = 16, r = 0.2 -> 4 (0.2 x 16 / 0.8 = 4.000...04 in floats); U = 10, r = 0.3 -> ceil(4.29) = 5
    assert [expert_rows_per_mini_batch(u, r) for u, r in ((192, 0.25), (16, 0.2), (10, 0.3), (16, 0.5), (8, 0.0))] \
        == [64, 4, 5, 16, 0]
    for u, r in ((192, 0.25), (10, 0.3), (7, 0.6)):  # E = ceil(r (U + E)), the share Trinity reads
        e = expert_rows_per_mini_batch(u, r)
        assert e == -(-round(r * (u + e) * 1e9) // 10**9)


def _experiences(trainer: RLTrainer, tok, assets: Path) -> Batch:
    """4 prompts x 4 responses with random advantages (the step's experiences before the update)."""
    prompts = PromptDataset(assets / "data" / "train.parquet", tok).prompts[:4]
    texts = ["12", "7", "123", "4"]
    responses = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts] * 4
    prompt_ids, prompt_mask = left_pad([p.ids for p in prompts for _ in range(4)], tok.pad_token_id)
    width = max(len(r) for r in responses)
    response_ids = torch.full((16, width), tok.pad_token_id)
    response_mask = torch.zeros((16, width), dtype=torch.long)
    for i, r in enumerate(responses):
        response_ids[i, :len(r)], response_mask[i, :len(r)] = torch.tensor(r), 1
    advantages = torch.randn((16, width), generator=torch.Generator().manual_seed(0)) * response_mask
    return Batch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                 response_mask=response_mask, group=torch.arange(4).repeat_interleave(4), advantages=advantages,
                 returns=advantages.clone(), scores=torch.zeros(16), data_source=["arithmetic"] * 16)


@pytest.fixture(scope="module")
def setup(assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("mixrun")
    cfg = mix_cfg(assets, out, "algorithm.mix.mu=0.3", "algorithm.mix.expert_data_ratio=0.2",
                  "actor_rollout_ref.actor.grad_clip=0")
    tok = load_tokenizer(str(assets / "model"))
    trainer = RLTrainer(cfg, tok, total_steps=1)
    batch = _experiences(trainer, tok, assets)
    return trainer, batch, trainer.expert.attach(batch)


def test_attach_adds_the_expert_rows_with_neutral_rl_fields(setup):
    trainer, batch, mixed = setup
    assert trainer.expert.rows == 4 and len(mixed) == 20  # 16 experiences + ceil(0.2 x 16 / 0.8) expert rows
    assert mixed.expert_mask.tolist() == [False] * 16 + [True] * 4
    expert = mixed.select(list(range(16, 20)))
    assert expert.advantages.abs().sum() == 0 and expert.scores.tolist() == [0.0] * 4
    assert torch.equal(expert.loss_mask, expert.response_mask)  # the SFT rows' response tokens carry loss
    assert len(set(mixed.group.tolist())) == 8  # each expert row a group of its own
    assert torch.equal(mixed.select(list(range(16))).advantages[:, :batch.advantages.shape[1]], batch.advantages)


def _step_gradient(trainer: RLTrainer, mixed: Batch, micro_rows: int | None) -> tuple[torch.Tensor, dict]:
    trainer.worker.s.micro_rows = micro_rows
    trainer.worker.optimizer.zero_grad(set_to_none=True)
    metrics = trainer.worker.backward_mini_batch(mixed)
    return torch.cat([p.grad.flatten() for p in trainer.worker.params]), metrics


def test_expert_rows_get_the_sft_loss_and_experiences_the_policy_loss_with_the_global_normalisers(setup):
    """loss = (1 - mu) * sum_{experience tokens} -A * ratio / (experience tokens of the mini-batch)
            + mu * sum_{expert tokens} -log p / (expert tokens of the mini-batch),
    computed here in one forward pass over all 20 rows (ratio = exp(logp - sg(logp)) = 1: one update per batch);
    the worker gives the same loss parts and gradient for any micro-batch size."""
    trainer, _, mixed = setup
    whole, metrics = _step_gradient(trainer, mixed, None)
    split, metrics_split = _step_gradient(trainer, mixed, 3)  # micro-batches of 3 rows mix both kinds
    assert (whole - split).abs().max() <= 1e-6

    model = trainer.model
    model.zero_grad(set_to_none=True)
    logprobs, _ = forward_logprobs(model, mixed, trainer.settings.temperature)
    experience = (mixed.loss_mask * ~mixed.expert_mask[:, None]).float()
    expert = (mixed.loss_mask * mixed.expert_mask[:, None]).float()
    ratio = torch.exp(logprobs - logprobs.detach())
    pg_loss = (-mixed.advantages * ratio * experience).sum() / experience.sum()
    sft_loss = (-logprobs * expert).sum() / expert.sum()
    (0.7 * pg_loss + 0.3 * sft_loss).backward(retain_graph=True)
    by_hand = torch.cat([p.grad.flatten() for p in trainer.worker.params])
    assert (by_hand - whole).abs().max() <= 1e-5
    for m in (metrics, metrics_split):
        assert m["actor/pg_loss"] == pytest.approx(float(pg_loss.detach()), abs=1e-5)
        assert m["actor/sft_loss"] == pytest.approx(float(sft_loss.detach()), abs=1e-5)
    # the weights: mu = 0 leaves only the experiences' policy loss, mu = 1 only the expert rows' SFT loss
    for mu, expected in ((0.0, pg_loss), (1.0, sft_loss)):
        trainer.worker.mu = mu  # the step's weight (algorithm.mix.mu, or CHORD's schedule at the step)
        model.zero_grad(set_to_none=True)
        expected_grad = torch.autograd.grad(expected, trainer.worker.params, retain_graph=True)
        got, _ = _step_gradient(trainer, mixed, 3)
        assert (torch.cat([g.flatten() for g in expected_grad]) - got).abs().max() <= 1e-5
    trainer.worker.mu = 0.3
    # Trinity's use_token_level_loss_in_sft=false: the mean over the expert rows of their token means
    trainer.worker.s.mix_sft_agg = "seq-mean-token-mean"
    _, seq_metrics = _step_gradient(trainer, mixed, 3)
    per_row = (-logprobs * expert).sum(-1)[16:] / expert.sum(-1)[16:]
    assert seq_metrics["actor/sft_loss"] == pytest.approx(float(per_row.mean().detach()), abs=1e-5)
    trainer.worker.s.mix_sft_agg = "token-mean"



def test_chord_mu_schedule_is_a_warm_up_then_a_cosine_to_the_valley():
    """CHORD's mu by hand: warm-up 4 steps to the peak 0.5, decay over 4 steps to 0.1, then 0.1."""
    from rft.workers.policy import mu_at

    got = [mu_at(step, 0.5, 0.1, 4, 4) for step in range(0, 10)]
    cos = lambda k: 0.1 + 0.4 * 0.5 * (1 + math.cos(math.pi * k / 4))
    expected = [0.0, 0.125, 0.25, 0.375, 0.5, cos(1), cos(2), cos(3), 0.1, 0.1]
    assert got == pytest.approx(expected, abs=1e-12)
    assert expected[6] == pytest.approx(0.3) and expected[5] == pytest.approx(0.1 + 0.2 * (1 + math.sqrt(0.5)))
    assert mu_at(7, 0.3, None, 4, 4) == 0.3  # no valley: mu constant
    assert mu_at(0, 0.1, 0.1, 0, 0) == 0.1  # Trinity's defaults: peak = valley, no warm-up or decay


def test_chord_phi_weights_each_expert_tokens_nll_by_p_times_1_minus_p(setup):
    """sft_token_weight phi: the SFT term is sum -log p * sg(p (1 - p)) / expert tokens, by hand; with CHORD's
    schedule the worker's update reports the step's mu."""
    trainer, _, mixed = setup
    model, s = trainer.model, trainer.worker.s
    model.zero_grad(set_to_none=True)
    logprobs, _ = forward_logprobs(model, mixed, trainer.settings.temperature)
    experience = (mixed.loss_mask * ~mixed.expert_mask[:, None]).float()
    expert = (mixed.loss_mask * mixed.expert_mask[:, None]).float()
    p = logprobs.detach().exp()
    sft_phi = (-logprobs * p * (1 - p) * expert).sum() / expert.sum()
    ratio = torch.exp(logprobs - logprobs.detach())
    pg_loss = (-mixed.advantages * ratio * experience).sum() / experience.sum()
    s.mix_phi, trainer.worker.mu = True, 0.4
    try:
        expected = torch.autograd.grad(0.6 * pg_loss + 0.4 * sft_phi, trainer.worker.params, retain_graph=True)
        got, metrics = _step_gradient(trainer, mixed, 3)
    finally:
        s.mix_phi, trainer.worker.mu = False, s.mix_mu
    assert (torch.cat([g.flatten() for g in expected]) - got).abs().max() <= 1e-5
    assert metrics["actor/sft_loss"] == pytest.approx(float(sft_phi.detach()), abs=1e-6)
    plain = float(((-logprobs * expert).sum() / expert.sum()).detach())
    assert 0 < metrics["actor/sft_loss"] < plain / 3  # p (1 - p) <= 1/4


def test_multi_turn_experiences_keep_their_action_mask_beside_the_expert_rows(setup):
    """Experiences with tool tokens inside their responses (action mask 0 there; `to_batch` makes the action mask
    the loss mask): the policy loss and its normaliser cover the policy's tokens only, the expert rows get the SFT
    loss on their response tokens, which are their action mask too."""
    trainer, batch, _ = setup
    action = batch.response_mask.clone()
    action[:, 1] = 0  # the second response token of every row is a tool's
    action = action * batch.response_mask
    assert 0 < int(action.sum()) < int(batch.response_mask.sum())
    multi = Batch(**{**{k: getattr(batch, k) for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                                          "group", "scores", "data_source")},
                     "advantages": batch.advantages * action, "returns": batch.returns * action,
                     "action_mask": action, "loss_mask": action.clone()})
    mixed = trainer.expert.attach(multi)
    assert mixed.expert_mask.tolist() == [False] * 16 + [True] * 4
    width = action.shape[1]
    assert torch.equal(mixed.action_mask[:16, :width], action) and mixed.action_mask[:16, width:].sum() == 0
    assert torch.equal(mixed.loss_mask[:16, :width], action)
    assert torch.equal(mixed.action_mask[16:], mixed.loss_mask[16:]) and mixed.action_mask[16:].sum() > 0
    assert torch.equal(mixed.loss_mask[16:], mixed.response_mask[16:])
    # and without a loss mask, the experiences' action mask is their loss mask (the next expert rows are others)
    no_loss_mask = trainer.expert.attach(Batch(**{**multi.__dict__, "loss_mask": None}))
    assert torch.equal(no_loss_mask.loss_mask[:16, :width], action)

    whole, metrics = _step_gradient(trainer, mixed, None)
    split, _ = _step_gradient(trainer, mixed, 3)
    assert (whole - split).abs().max() <= 1e-6
    model = trainer.model
    model.zero_grad(set_to_none=True)
    logprobs, _ = forward_logprobs(model, mixed, trainer.settings.temperature)
    is_expert = mixed.expert_mask[:, None]
    experience = (mixed.action_mask * ~is_expert).float()  # the policy's tokens: no tool token, no expert row
    expert = (mixed.response_mask * is_expert).float()
    ratio = torch.exp(logprobs - logprobs.detach())
    pg_loss = (-mixed.advantages * ratio * experience).sum() / experience.sum()
    sft_loss = (-logprobs * expert).sum() / expert.sum()
    (0.7 * pg_loss + 0.3 * sft_loss).backward()
    by_hand = torch.cat([p.grad.flatten() for p in trainer.worker.params])
    assert (by_hand - whole).abs().max() <= 1e-5
    assert metrics["actor/pg_loss"] == pytest.approx(float(pg_loss.detach()), abs=1e-5)
    assert metrics["actor/sft_loss"] == pytest.approx(float(sft_loss.detach()), abs=1e-5)
    # the normaliser is the policy's tokens: over all response tokens the loss would differ
    over_response = (-mixed.advantages * (mixed.response_mask * ~is_expert).float()).sum() / \
        (mixed.response_mask * ~is_expert).sum()
    assert float(over_response) != pytest.approx(float(pg_loss.detach()), abs=1e-4)


def test_each_mini_batch_gets_its_share_of_the_expert_rows(assets, tmp_path):
    cfg = mix_cfg(assets, tmp_path, "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.shuffle=true",
                  "algorithm.mix.expert_data_ratio=0.2")
    tok = load_tokenizer(str(assets / "model"))
    trainer = RLTrainer(cfg, tok, total_steps=1)
    assert trainer.expert.per_mini_batch == 2 and trainer.expert.rows == 4  # ceil(0.2 x 8 / 0.8) per 8 experiences
    mixed = trainer.expert.attach(_experiences(trainer, tok, assets))
    minis = trainer.worker.mini_batches(mixed, step=1, epoch=0)
    assert [m.expert_mask.tolist() for m in minis] == [[False] * 8 + [True] * 2] * 2
    groups = [g for m in minis for g in m.group.tolist()]
    assert sorted(groups) == sorted(mixed.group.tolist())  # every row once, whole groups


def test_a_missing_expert_column_names_the_data_expert_key(assets, tmp_path):
    """The expert rows' columns are data.expert's keys; the message named data.prompt_key (the prompts' key)."""
    tok = load_tokenizer(str(assets / "model"))
    with pytest.raises(DataError, match=r"no column 'questions' \(data.expert.prompt_key\); did you mean "
                                        r"data.expert.prompt_key=question\? .*set data.expert.prompt_key=<one of them>"):
        ExpertRows(mix_cfg(assets, tmp_path, "data.expert.prompt_key=questions"), tok)
    with pytest.raises(DataError, match=r"no column 'messages' \(data.expert.messages_key\)"):
        ExpertRows(mix_cfg(assets, tmp_path, "data.expert.messages_key=messages"), tok)


def test_expert_rows_errors_say_rows_and_the_expert_keys(assets, tmp_path):
    """Fewer expert rows than a step reads said 'the training set has 3 prompts, fewer than
    data.train_batch_size=16 (the prompts of one step): lower data.train_batch_size ... (and
    actor_rollout_ref.actor.ppo_mini_batch_size ...), or add prompts', the RL prompts' error; an empty expert file
    said 'no SFT rows'. Now: rows, the expert keys and the ratio that fits."""
    tok = load_tokenizer(str(assets / "model"))
    few = tmp_path / "few.jsonl"
    few.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(3)))
    # 16 experiences a mini-batch (4 prompts x 4), ratio 0.5: 16 expert rows; 3 rows hold ratio 3 / 19 at most
    with pytest.raises(DataError) as e:
        ExpertRows(mix_cfg(assets, tmp_path, f"data.expert.files={few}"), tok)
    assert str(e.value) == ("data.expert.files has 3 rows (after data.expert.max_length / truncation), fewer than "
                            "the 16 expert rows of one step (16 per mini-batch of 16 experiences at "
                            "algorithm.mix.expert_data_ratio=0.5, x 1 mini-batch): lower "
                            "algorithm.mix.expert_data_ratio to at most 0.1578, or add expert rows")
    assert ExpertRows(mix_cfg(assets, tmp_path, f"data.expert.files={few}", "algorithm.mix.expert_data_ratio=0.1578"),
                      tok).rows == 3  # the ratio it names fits
    with pytest.raises(DataError) as e:  # 4 mini-batches of 4 experiences, 1 expert row each: more than 3
        ExpertRows(mix_cfg(assets, tmp_path, f"data.expert.files={few}", "algorithm.mix.expert_data_ratio=0.1",
                           "actor_rollout_ref.actor.ppo_mini_batch_size=1"), tok)
    assert str(e.value).endswith("fewer than the 4 expert rows of one step (1 per mini-batch of 4 experiences at "
                                 "algorithm.mix.expert_data_ratio=0.1, x 4 mini-batches): add expert rows")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match=r"^data.expert.files: no rows in \["):
        ExpertRows(mix_cfg(assets, tmp_path, f"data.expert.files={empty}"), tok)


def test_expert_rows_past_gpt2s_position_table_are_refused_before_the_model_loads(assets, tmp_path, caplog):
    """models.checks.check_positions covered the RL prompt + response only: an expert row up to
    data.expert.max_length (default 1024) past GPT-2's 512 learned positions ended in an index error in the
    update. Now one line before the model loads, naming the max_length that fits; a rotary model goes on with a
    note."""
    import logging

    from rft.models.families import init_family_model

    gpt2 = init_family_model("gpt2", tmp_path / "gpt2")
    with pytest.raises(ConfigError) as e:
        mix_cfg(assets, tmp_path, f"actor_rollout_ref.model.path={gpt2}", "data.expert.max_length=1024")
    assert str(e.value) == (f"data.expert.max_length=1024: an expert row (algorithm.mix) of up to 1024 tokens, more "
                            f"than the 512 positions of {gpt2} (a learned position table, which has no position past "
                            "it): set data.expert.max_length=512 (data.expert.truncation then says what happens to "
                            "longer rows)")
    mix_cfg(assets, tmp_path, f"actor_rollout_ref.model.path={gpt2}", "data.expert.max_length=512")
    rl_config(assets, tmp_path, f"actor_rollout_ref.model.path={gpt2}", "data.expert.max_length=1024")  # mix off
    with caplog.at_level(logging.WARNING, logger="rft"):  # rft's tiny Qwen2: rotary, 2,048 positions
        mix_cfg(assets, tmp_path, "data.expert.max_length=4096")
    assert "data.expert.max_length=4096: an expert row (algorithm.mix) of up to 4096 tokens, more than the 2048 " \
           "positions" in caplog.text and "not trained" in caplog.text


def test_mix_is_refused_where_it_cannot_hold(assets, tmp_path):
    with pytest.raises(ConfigError, match="algorithm.mix.enable=true needs data.expert.files"):
        rl_config(assets, tmp_path, "algorithm.mix.enable=true")
    with pytest.raises(ConfigError, match=r"algorithm.mix.expert_data_ratio must be in \[0, 1\)"):
        mix_cfg(assets, tmp_path, "algorithm.mix.expert_data_ratio=1.0")
    with pytest.raises(ConfigError, match="with a critic"):
        mix_cfg(assets, tmp_path, "algorithm.adv_estimator=gae")


def test_expert_rows_that_do_not_split_equally_give_the_first_ranks_one_more(assets, tmp_path):
    """Trinity-RFT's mix_chord_toolace: ratio 0.11 of 768 rows, 95 expert rows per mini-batch over 4 data-parallel
    processes, was refused ("do not split over the processes"); Trinity splits its whole read batch over its ranks.
    Now each rank takes its `shard_bounds` share of each mini-batch's expert rows (24, 24, 24, 23), every row once:
    here ratio 0.25 of 8 experiences, 3 expert rows a mini-batch (ceil(0.25 x 8 / 0.75)), two mini-batches, over 2
    ranks: rank 0 takes rows 0, 1 and 3, 4, rank 1 rows 2 and 5."""
    from rft.distributed import Dist

    cfg = mix_cfg(assets, tmp_path, "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                  "algorithm.mix.expert_data_ratio=0.25", "trainer.n_gpus_per_node=2", "trainer.device=cpu")
    tok = load_tokenizer(str(assets / "model"))
    experiences = _experiences(None, tok, assets)
    one = ExpertRows(cfg, tok, Dist())
    assert (one.per_mini_batch, one.rows) == (3, 6)
    shares = [step_shard(6, 3, rank, 2, equal=False) for rank in (0, 1)]
    assert shares == [[0, 1, 3, 4], [2, 5]]
    for rank, share in enumerate(shares):
        mixed = ExpertRows(cfg, tok, Dist(rank=rank, world_size=2)).attach(experiences)
        assert int(mixed.expert_mask.sum()) == len(share)
    with pytest.raises(ValueError, match="do not split evenly"):
        step_shard(6, 3, 0, 2)  # the experiences' shares stay equal


def test_each_rank_trains_on_its_share_of_every_mini_batchs_expert_rows(assets, tmp_path):
    """Two mini-batches of 8 experiences at ratio 0.2: 2 expert rows each (d0 d1 | d2 d3 on one process); on 2
    processes rank 0 attaches d0 and d2, rank 1 d1 and d3, and the mini-batches deal each rank its own. Every rank
    attached all 4 before (the gradient summed over the ranks was the same: twice the rows over twice the tokens,
    the work twice)."""
    from rft.distributed import Dist

    cfg = mix_cfg(assets, tmp_path, "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                  "algorithm.mix.expert_data_ratio=0.2")
    tok = load_tokenizer(str(assets / "model"))
    experiences = _experiences(None, tok, assets)

    def expert_texts(dist: Dist) -> list[str]:
        mixed = ExpertRows(cfg, tok, dist).attach(experiences)
        rows = mixed.select([i for i, e in enumerate(mixed.expert_mask.tolist()) if e])
        return [tok.decode(ids[mask.bool()].tolist()) for ids, mask in zip(rows.response_ids, rows.response_mask)]

    one = expert_texts(Dist())
    assert len(one) == 4 and len(set(one)) == 4
    assert expert_texts(Dist(rank=0, world_size=2)) == [one[0], one[2]]
    assert expert_texts(Dist(rank=1, world_size=2)) == [one[1], one[3]]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU processes (gloo)")
def test_mix_on_two_processes_matches_one(assets, tmp_path):
    """Issue 65: mix with trainer.n_gpus_per_node=2 (FSDP2 over two gloo processes, greedy sampling so both runs
    sample the same responses; each rank trains on its half of every mini-batch's experiences and of its 2 expert
    rows) equals one process: every step's metrics and the exported weights to 1e-6. It refused several processes
    before ("the expert rows are not sharded over the ranks yet"). Ratio 0.35 of 4 experiences: 3 expert rows a
    mini-batch (ceil(0.35 x 4 / 0.65)), 2 on rank 0 and 1 on rank 1 (unequal shares were refused before)."""
    import subprocess
    import sys

    from cli_helpers import rft_here
    from sft_helpers import PROCESSES_APART, max_weight_difference
    from test_distributed import ENV

    args = [f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"custom_reward_function.path={assets / 'reward.py'}", "algorithm.mix.enable=true",
            f"data.expert.files={assets / 'expert.jsonl'}", "data.expert.prompt_key=question",
            "data.expert.response_key=answer", "data.expert.max_length=48", "algorithm.mix.expert_data_ratio=0.35",
            "algorithm.mix.mu=0.3", "data.max_prompt_length=32", "data.max_response_length=6",
            "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.do_sample=false", "actor_rollout_ref.actor.optim.lr=1e-3",
            "actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.actor.strategy=fsdp2",
            "trainer.total_training_steps=2", "trainer.val_before_train=false", "trainer.logger=[]",
            "trainer.device=cpu"]
    rft_here("train", *args, f"trainer.default_local_dir={tmp_path / 'one'}", cwd=tmp_path)
    two = subprocess.run([sys.executable, "-m", "rft", "train", *args, "trainer.n_gpus_per_node=2",
                          f"trainer.default_local_dir={tmp_path / 'two'}"], env=ENV, capture_output=True, text=True,
                         timeout=600)
    assert two.returncode == 0, two.stderr[-4000:]
    one_m, two_m = ({x["step"]: x for x in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())}
                    for run in ("one", "two"))
    assert sorted(one_m) == sorted(two_m) == [1, 2]
    for step in (1, 2):
        for key in ("actor/sft_loss", "actor/pg_loss", "actor/grad_norm", "critic/score/mean", "actor/entropy"):
            assert one_m[step][key] == pytest.approx(two_m[step][key], rel=1e-6, abs=1e-6), (step, key)
    assert one_m[1]["actor/sft_loss"] > 0
    assert max_weight_difference(tmp_path / "one" / "model", tmp_path / "two" / "model") <= PROCESSES_APART


# ------------------------------------------------------------------------------------------ Trinity's mix
def trinity_mix(assets: Path, out: Path, steps: int) -> dict:
    return {
        "project": "p", "name": "mix", "checkpoint_root_dir": str(out),
        "algorithm": {"algorithm_type": "mix", "repeat_times": 4,
                      "sample_strategy_args": {"expert_data_ratio": 0.25},
                      "policy_loss_fn_args": {"mu": 0.2, "clip_range": 0.2, "use_token_level_loss_in_sft": True}},
        "model": {"model_path": str(assets / "model"), "max_prompt_tokens": 32, "max_response_tokens": 6},
        "buffer": {"batch_size": 4, "total_steps": steps,
                   "explorer_input": {"taskset": {"path": str(assets / "data" / "train.parquet")}},
                   "trainer_input": {"experience_buffer": {"name": "buf", "storage_type": "queue"},
                                     "auxiliary_buffers": {"sft_dataset": {
                                         "name": "expert", "storage_type": "file", "path": str(assets / "expert.jsonl"),
                                         "format": {"prompt_type": "plaintext", "prompt_key": "question",
                                                    "response_key": "answer"}}}}},
        "explorer": {"eval_on_startup": False},
        "trainer": {"save_interval": 1, "trainer_config": {
            "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-3, "weight_decay": 0.0}}},
            "custom_reward_function": {"path": str(assets / "reward.py")}, "trainer": {"logger": []}}},
    }


def test_trinity_mix_keys_land_on_algorithm_mix_and_data_expert(assets, tmp_path):
    out = translate(trinity_mix(assets, tmp_path, 2))
    assert out["algorithm"]["mix"] == {"enable": True, "mu": 0.2, "expert_data_ratio": 0.25,
                                       "sft_loss_agg_mode": "token-mean"}
    assert out["algorithm"]["adv_estimator"] == "grpo" and out["actor_rollout_ref"]["rollout"]["n"] == 4
    assert out["data"]["expert"] == {"files": str(assets / "expert.jsonl"), "prompt_key": "question",
                                     "response_key": "answer"}
    pictures = trinity_mix(assets, tmp_path, 2)  # mix_vlm's expert rows carry their images (a vision policy)
    pictures["buffer"]["trainer_input"]["auxiliary_buffers"]["sft_dataset"]["format"]["image_key"] = "figures"
    assert translate(pictures)["data"]["expert"]["image_key"] == "figures"
    assert out["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] == "vanilla"
    earlier = trinity_mix(assets, tmp_path, 2)  # Trinity's earlier mix advantage: grpo without the expert rows
    earlier["algorithm"]["advantage_fn"] = "mix"
    assert translate(earlier)["algorithm"]["adv_estimator"] == "grpo"
    # Trinity reads buffer.train_batch_size rows, ceil(0.25 x T) of them expert: T = 22 is 16 experiences + 6
    cfg = trinity_mix(assets, tmp_path, 2)
    cfg["buffer"]["train_batch_size"] = 22
    assert translate(cfg)["data"]["train_batch_size"] == 4
    cfg["buffer"]["train_batch_size"] = 20  # 15 experiences + 5
    with pytest.raises(ConfigError, match=r"buffer.train_batch_size=20 less its ceil\(0.25 x 20\) = 5 expert rows: "
                                          "with the mix algorithm rft trains on every experience of a step, batch_size x repeat_times = 16"):
        translate(cfg)
    del cfg["buffer"]["batch_size"]
    assert translate({**cfg, "buffer": {**cfg["buffer"], "train_batch_size": 22}})["data"]["train_batch_size"] == 4
    # what rft cannot take from Trinity's mix is refused by name
    # the batch sizes Trinity's mix loss rebuilds its normalisers from: rft's are the global ones already (a note)
    cfg = trinity_mix(assets, tmp_path, 2)
    cfg["algorithm"]["policy_loss_fn_args"] = {"mu": 0.1, "read_batch_size_expert": 64}
    assert translate(cfg)["algorithm"]["mix"]["mu"] == 0.1
    for key, value, needle in (
            ("entropy_loss_fn", "default", None), ("sample_strategy", "default",
                                                "sample_strategy='default': the mix policy loss \\(policy_loss_fn mix\\) trains on")):
        cfg = trinity_mix(assets, tmp_path, 2)
        cfg["algorithm"][key] = value
        if needle is None:  # default with a zero coefficient is the same bonus (none)
            assert translate(cfg)["actor_rollout_ref"]["actor"]["entropy_coeff"] == 0.0
            cfg["algorithm"]["entropy_loss_fn_args"] = {"entropy_coef": 0.01}
            needle = "covers the expert rows too"
        with pytest.raises(ConfigError, match=needle):
            translate(cfg)


def test_trinity_mix_loss_agg_modes_land_on_the_sft_and_ppo_aggregation(assets, tmp_path):
    """Trinity-RFT's mix / mix_chord losses (0.5.2, 0.6.0) take sft_loss_agg_mode and grpo_loss_agg_mode, each
    falling back to loss_agg_mode (the corpus's mix examples write sft_loss_agg_mode)."""
    cfg = trinity_mix(assets, tmp_path, 2)
    cfg["algorithm"]["policy_loss_fn_args"] = {"mu": 0.2, "clip_range": 0.2, "sft_loss_agg_mode": "seq-mean-token-mean",
                                               "grpo_loss_agg_mode": "seq-mean-token-sum"}
    cfg["algorithm"]["loss_agg_mode"] = "token-mean"
    out = translate(cfg)
    assert out["algorithm"]["mix"]["sft_loss_agg_mode"] == "seq-mean-token-mean"
    assert out["actor_rollout_ref"]["actor"]["loss_agg_mode"] == "seq-mean-token-sum"
    cfg["algorithm"]["policy_loss_fn_args"] = {"mu": 0.2, "clip_range": 0.2, "sft_loss_agg_mode": None}
    cfg["algorithm"]["loss_agg_mode"] = "seq-mean-token-sum"
    out = translate(cfg)
    assert out["algorithm"]["mix"].get("sft_loss_agg_mode", "token-mean") == "token-mean"
    assert out["actor_rollout_ref"]["actor"]["loss_agg_mode"] == "seq-mean-token-sum"


def test_trinity_mix_chord_lands_on_the_mu_schedule_and_phi(assets, tmp_path):
    """algorithm_type mix_chord: Trinity's defaults (peak = valley = 0.1, phi on), its arguments mapped by name,
    and a 3-step run whose actor/mix_mu follows the schedule."""
    cfg = trinity_mix(assets, tmp_path, 3)
    cfg["algorithm"] = {"algorithm_type": "mix_chord", "repeat_times": 4, "sample_strategy_args":
                        {"expert_data_ratio": 0.25}}
    assert translate(cfg)["algorithm"]["mix"] == {"enable": True, "mu": 0.1, "mu_valley": 0.1,
                                                  "sft_token_weight": "phi", "expert_data_ratio": 0.25}
    cfg["algorithm"]["policy_loss_fn_args"] = {"mu_warmup_steps": 2, "mu_decay_steps": 2, "mu_peak": 0.5,
                                               "mu_valley": 0.02, "enable_phi_function": False,
                                               "use_token_level_loss_in_sft": False, "clip_range": 0.2}
    mix = translate(cfg)["algorithm"]["mix"]
    assert mix == {"enable": True, "mu": 0.5, "mu_valley": 0.02, "mu_warmup_steps": 2, "mu_decay_steps": 2,
                   "sft_token_weight": "none", "sft_loss_agg_mode": "seq-mean-token-mean", "expert_data_ratio": 0.25}
    cfg["algorithm"]["policy_loss_fn_args"]["mu"] = 0.3  # mix's constant weight: not CHORD's
    with pytest.raises(ConfigError, match=r"algorithm.policy_loss_fn_args.mu"):
        translate(cfg)
    del cfg["algorithm"]["policy_loss_fn_args"]["mu"]
    path = tmp_path / "chord.yaml"
    path.write_text(yaml.safe_dump(cfg))
    kind, loaded = load_trinity(path)
    SyncRun(loaded).fit()
    lines = [json.loads(x) for x in (tmp_path / "p" / "mix" / "metrics.jsonl").read_text().splitlines()]
    # steps 1, 2, 3: half-way up, the peak, then half-way down the cosine
    assert [x["actor/mix_mu"] for x in lines] == pytest.approx([0.25, 0.5, 0.26], abs=1e-9)
    assert all(x["actor/sft_loss"] > 0 for x in lines)


def test_a_mu_schedule_without_a_valley_is_refused(assets, tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.mix.mu_warmup_steps=3 schedules mu \(CHORD\), which needs "
                                          "algorithm.mix.mu_valley"):
        mix_cfg(assets, tmp_path, "algorithm.mix.mu_warmup_steps=3")


def test_the_spec_trainer_input_block_is_read_by_the_mix_algorithm(assets):
    from spec_configs import SPEC, md_yaml_blocks

    block = next(b for b in md_yaml_blocks(SPEC / "trinity_config_reference.md") if list(b) == ["buffer"]
                 and "sft_dataset" in ((b["buffer"].get("trainer_input") or {}).get("auxiliary_buffers") or {}))
    block = copy.deepcopy(block)
    aux = block["buffer"]["trainer_input"]["auxiliary_buffers"]
    aux.pop("other_buffer")  # the page's `...` placeholder
    aux["sft_dataset"]["path"] = str(assets / "expert.jsonl")
    cfg = {"project": "p", "name": "n", "algorithm": {"algorithm_type": "mix"}, "model": {"model_path": "m"},
           "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": "t.parquet"}}, **block["buffer"]}}
    refusals: list = []
    out = translate(cfg, "t.yaml", refusals=refusals)
    assert refusals == []
    assert out["data"]["expert"]["response_key"] == "answer" and out["experience_buffer"]["max_read_timeout"] == 1800


def test_a_trinity_mix_yaml_trains_every_parameter_and_resumes_exactly(assets, tmp_path):
    def run(out: Path, steps: int) -> SyncRun:
        path = out / "mix.yaml"
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(trinity_mix(assets, out, steps)))
        kind, cfg = load_trinity(path)
        assert kind == "rl" and cfg.algorithm.mix.enable
        return SyncRun(cfg)

    one = run(tmp_path / "one", 3)
    start = trainable(one.trainer.model)
    one.fit()
    assert_all_moved(start, one.trainer.model)
    lines = [json.loads(x) for x in (tmp_path / "one" / "p" / "mix" / "metrics.jsonl").read_text().splitlines()]
    assert all(x["actor/sft_loss"] > 0 and "actor/pg_loss" in x for x in lines)
    two = run(tmp_path / "two", 3)
    for step in (1, 2):  # two steps of the same run, then "killed"
        from rft.monitor import Timer

        two.train_step(step, Timer())
        two.trainer.global_step = step
        two.save_checkpoint(step)
    assert two.trainer.expert.state_dict()["batch_in_epoch"] == 2
    resumed = run(tmp_path / "two", 3)
    resumed.fit()
    assert resumed.trainer.expert.state_dict() == one.trainer.expert.state_dict()
    a = load_file(tmp_path / "one" / "p" / "mix" / "model" / "model.safetensors")
    b = load_file(tmp_path / "two" / "p" / "mix" / "model" / "model.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


def test_a_trinity_mix_chord_yaml_trains_two_steps_through_rft_train(assets, tmp_path):
    """algorithm_type mix_chord from the command line: mu warmed up over step 1 and decayed over step 2, phi on the
    expert tokens; both losses logged at each step, every parameter moved."""
    from cli_helpers import rft_here

    cfg = trinity_mix(assets, tmp_path, 2)
    cfg["algorithm"] = {"algorithm_type": "mix_chord", "repeat_times": 4,
                        "sample_strategy_args": {"expert_data_ratio": 0.25},
                        "policy_loss_fn_args": {"mu_warmup_steps": 1, "mu_decay_steps": 1, "mu_peak": 0.5,
                                                "mu_valley": 0.1, "clip_range": 0.2}}
    path = tmp_path / "chord.yaml"
    path.write_text(yaml.safe_dump(cfg))
    rft_here("train", str(path), cwd=tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "p" / "mix" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert all(x["actor/sft_loss"] > 0 and math.isfinite(x["actor/pg_loss"]) for x in lines), lines
    before = load_file(assets / "model" / "model.safetensors")
    after = load_file(tmp_path / "p" / "mix" / "model" / "model.safetensors")
    assert all(not torch.equal(before[k], after[k]) for k in before if "norm" not in k), "a parameter did not move"
