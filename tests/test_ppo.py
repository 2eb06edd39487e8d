"""PPO with a critic (GAE), reward models and the KL in the reward, on the tiny model: a CLI run that resumes
exactly, the critic learning on fixed rollouts, a reward model with a hand-set head, critic warmup, every
parameter moving, and micro-batch invariance of the critic's gradient."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here
from rl_helpers import make_assets, rl_config, score, trainable
from safetensors.torch import load_file, save_file

from rft.algorithms import AdvantageInputs, compute_advantages
from rft.batch import Batch
from rft.config import ConfigError
from rft.data.dataset import left_pad
from rft.models.tiny import init_model
from rft.monitor import Timer
from rft.orchestration.run import SyncRun
from rft.rewards.model import RewardModel
from rft.workers.critic import forward_values

os.environ["HF_HUB_OFFLINE"] = "1"
REPO = Path(__file__).resolve().parents[1]

OTHER_TEMPLATE = ("{%- for message in messages %}{{- message['role'] | capitalize + ': ' + message['content'] + '\\n' }}"
                  "{%- endfor %}")
HEAD = torch.linspace(-1.0, 1.0, 128) * torch.tensor([1.0, -0.5]).repeat(64)  # the tiny-rm head, set by hand


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = make_assets(tmp_path_factory.mktemp("ppo_assets"))
    # a reward model whose head is set by hand: score = HEAD . h_last
    rm = init_model("tiny-rm", root / "rm", seed=1)
    weights = load_file(rm / "model.safetensors")
    assert weights["score.weight"].shape == (1, 128)
    weights["score.weight"] = HEAD.clone().unsqueeze(0)
    save_file(weights, rm / "model.safetensors", metadata={"format": "pt"})
    # the same reward model with another chat template (its input must be re-templated)
    other = root / "rm_other_template"
    other.mkdir()
    for f in rm.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    tok_cfg = json.loads((other / "tokenizer_config.json").read_text())
    tok_cfg["chat_template"] = OTHER_TEMPLATE
    (other / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return root


def make_cfg(assets: Path, out: Path, *overrides: str):
    return rl_config(assets, out, "critic.optim.lr=1e-4", "critic.optim.weight_decay=0.0",
                     "algorithm.adv_estimator=gae", *overrides)


def moved(before: dict, after: dict) -> list[str]:
    return [n for n in before if not torch.equal(before[n], after[n])]


# ------------------------------------------------------------------------------------------- CLI and resume
def test_ppo_from_the_cli_trains_and_resumes_exactly(assets, tmp_path):
    """examples/arithmetic_ppo.yaml (gae, critic, adaptive KL in the reward, critic_warmup 1) through `rft train`:
    3 steps in one run == 2 steps, then a resumed run to 3, for the policy, the critic and the KL coefficient."""
    def train(out: str, steps: int) -> None:
        rft_here("train", str(REPO / "examples" / "arithmetic_ppo.yaml"),
                 f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
                 "data.val_files=null", f"custom_reward_function.path={assets / 'reward.py'}", "data.train_batch_size=4",
                 "data.max_response_length=6", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4",
                 "actor_rollout_ref.actor.shuffle=true", "actor_rollout_ref.actor.optim.lr=1e-3",
                 "algorithm.kl_ctrl.target_kl=0.0001", "algorithm.kl_ctrl.horizon=10", "trainer.save_freq=1",
                 f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={out}", "trainer.logger=[]",
                 cwd=tmp_path)

    train("one", 3)
    train("two", 2)
    train("two", 3)  # resumes from global_step_2
    one, two = tmp_path / "one", tmp_path / "two"
    for part in ("model", "critic"):
        a, b = load_file(one / part / "model.safetensors"), load_file(two / part / "model.safetensors")
        assert a.keys() == b.keys()
        diff = max(float((a[k] - b[k]).abs().max()) for k in a)
        assert diff <= 1e-6, (part, diff)
    lines = [json.loads(x) for x in (one / "metrics.jsonl").read_text().splitlines()]
    resumed = [json.loads(x) for x in (two / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in resumed] == [1, 2, 3]
    coef = [x["actor/reward_kl_penalty_coeff"] for x in lines]
    assert coef[0] != coef[2]  # the adaptive controller moved it, so a resume that lost it would show
    assert resumed[2]["actor/reward_kl_penalty_coeff"] == pytest.approx(coef[2], rel=1e-12)
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/values/mean",
                "critic/returns/mean", "critic/vf_explained_var", "critic/grad_norm", "critic/lr",
                "timing_s/values", "timing_s/update_critic"):
        assert all(key in x for x in lines), key
    assert "actor/pg_loss" not in lines[0] and "actor/pg_loss" in lines[1]  # critic_warmup: 1
    ckpt = one / "checkpoints" / "global_step_3" / "critic"
    assert {p.name for p in ckpt.iterdir()} >= {"model.safetensors", "optimizer.pt", "scheduler.pt"}
    from transformers import AutoModelForTokenClassification

    critic = AutoModelForTokenClassification.from_pretrained(one / "critic")
    assert critic.config.num_labels == 1 and critic.score.out_features == 1


# ---------------------------------------------------------------------------------------------- the critic
def test_critic_value_loss_halves_on_fixed_rollouts(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "critic.optim.lr=3e-5"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    score(run, batch)
    mask = batch.response_mask.float()

    def loss() -> float:
        return float(0.5 * ((run.trainer.critic.compute_values(batch) - batch.returns).square() * mask).sum() / mask.sum())

    first = None
    for step in range(1, 21):  # the policy never moves: the same rollouts, fresh old values each update
        batch.values = run.trainer.critic.compute_values(batch)
        run.trainer.compute_advantages(batch)  # lam = gamma = 1: the returns are the rewards-to-go, whatever V
        first = first if first is not None else loss()
        run.trainer.critic.update(batch, step)
    assert loss() <= 0.5 * first, (first, loss())


def test_critic_warmup_holds_the_actor(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "trainer.critic_warmup=2", "trainer.total_training_steps=3"))
    actor, critic = trainable(run.trainer.model), trainable(run.trainer.critic.model)
    for step in (1, 2, 3):
        metrics = run.train_step(step, Timer())
        actor_now, critic_now = trainable(run.trainer.model), trainable(run.trainer.critic.model)
        assert moved(critic, critic_now), step  # the critic trains every step
        if step <= 2:
            assert not moved(actor, actor_now) and "actor/pg_loss" not in metrics, step
        else:
            assert moved(actor, actor_now) and "actor/pg_loss" in metrics
        actor, critic = actor_now, critic_now


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_gae_step_moves_every_parameter_of_actor_and_critic(assets, tmp_path, lora):
    extra = ["actor_rollout_ref.model.lora_rank=4", "critic.model.lora_rank=4", "critic.model.lora_alpha=8"] \
        if lora else []
    run = SyncRun(make_cfg(assets, tmp_path, *extra))
    actor, critic = trainable(run.trainer.model), trainable(run.trainer.critic.model)
    if lora:
        assert all("lora_" in n for n in actor)
        head = [n for n in critic if "score" in n]
        assert head and all("lora_" in n for n in critic if n not in head)  # LoRA body, value head in full
    for step in (1, 2) if lora else (1,):  # LoRA's B starts at zero: A moves from the second step
        metrics = run.train_step(step, Timer())
        assert metrics["critic/grad_norm"] > 0 and metrics["actor/grad_norm"] > 0
    assert not [n for n in actor if n not in moved(actor, trainable(run.trainer.model))]
    assert not [n for n in critic if n not in moved(critic, trainable(run.trainer.critic.model))]


def test_critic_on_another_estimator_with_gradient_checkpointing(assets, tmp_path):
    """critic.enable with grpo (it learns the estimator's returns); checkpointing changes memory, not the update."""
    results = []
    for flag in ("false", "true"):
        run = SyncRun(make_cfg(assets, tmp_path / flag, "algorithm.adv_estimator=grpo", "critic.enable=true",
                                     f"critic.model.enable_gradient_checkpointing={flag}"))
        assert run.trainer.critic.model.is_gradient_checkpointing == (flag == "true")
        metrics = run.train_step(1, Timer())
        results.append((metrics["critic/grad_norm"], trainable(run.trainer.critic.model)))
    (norm_a, w_a), (norm_b, w_b) = results
    assert norm_a > 0 and norm_a == pytest.approx(norm_b, rel=1e-4)
    assert max(float((w_a[k] - w_b[k]).abs().max()) for k in w_a) < 1e-5


def test_micro_batch_size_does_not_change_the_critic_gradient(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "critic.loss_agg_mode=seq-mean-token-mean"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    score(run, batch)
    batch.values = run.trainer.critic.compute_values(batch)
    run.trainer.compute_advantages(batch)
    run.trainer.critic.model.train()  # no dropout before the value head: train mode gives the old values
    assert torch.equal(forward_values(run.trainer.critic.model, batch).detach(), batch.values)
    batch.values = batch.values + 0.3 * torch.randn(batch.values.shape, generator=torch.Generator().manual_seed(0))
    grads = []
    for micro in (None, 2, 1):
        run.trainer.critic.s.micro_rows = micro
        run.trainer.critic.model.zero_grad(set_to_none=True)
        metrics = run.trainer.critic.backward_mini_batch(batch)
        grads.append(({n: p.grad.clone() for n, p in run.trainer.critic.model.named_parameters()}, metrics))
    (whole, m0), *others = grads
    assert 0 < m0["critic/vf_clipfrac"] < 1  # both branches of the clipped loss are exercised
    for split, metrics in others:
        assert max(float((whole[n] - split[n]).abs().max()) for n in whole) <= 1e-6
        assert metrics["critic/vf_loss"] == pytest.approx(m0["critic/vf_loss"], abs=1e-6)


# ------------------------------------------------------------------------------------------- reward models
def expected_score(rm_dir: Path, ids: list[int]) -> float:
    """score = HEAD . (last hidden state of the last token), from the plain backbone (AutoModel), one row."""
    from transformers import AutoModel

    backbone = AutoModel.from_pretrained(rm_dir)
    with torch.no_grad():
        hidden = backbone(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
    return float(hidden @ HEAD)


def known_batch(tokenizer, pairs: list[tuple[str, str]]) -> Batch:
    """Prompts (chat-templated) and responses (ending in <|im_end|>), padded as a rollout pads them."""
    chats = [[{"role": "user", "content": p}] for p, _ in pairs]
    prompts = [tokenizer(tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False),
                         add_special_tokens=False)["input_ids"] for c in chats]
    responses = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for _, r in pairs]
    prompt_ids, prompt_mask = left_pad(prompts, tokenizer.pad_token_id)
    width = max(map(len, responses))
    response_ids = torch.full((len(pairs), width), tokenizer.pad_token_id)
    response_mask = torch.zeros(len(pairs), width, dtype=torch.long)
    for i, r in enumerate(responses):
        response_ids[i, :len(r)], response_mask[i, :len(r)] = torch.tensor(r), 1
    return Batch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                 response_mask=response_mask, group=torch.arange(len(pairs)), raw_prompt=chats,
                 response_text=[r for _, r in pairs])


PAIRS = [("1+2=", "3"), ("12+30=", "42"), ("7+8=", "hello there")]


def test_reward_model_scores_known_texts(assets):
    from transformers import AutoTokenizer

    from rft.models.load import load_reward_model

    tok = AutoTokenizer.from_pretrained(assets / "model")
    batch = known_batch(tok, PAIRS)
    rm = load_reward_model(str(assets / "rm"), torch.float32, torch.device("cpu"))
    # same template: the policy's own tokens of the templated prompt and the response
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             + r + "<|im_end|>" for p, r in PAIRS]
    expected = [expected_score(assets / "rm", tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    for micro in (None, 1):
        scores = RewardModel(rm, micro_rows=micro).score(batch)
        assert torch.allclose(scores, torch.tensor(expected), atol=1e-5), (scores, expected)
    # another template: decoded, re-templated as "User: ...\nAssistant: ...\n" by the reward model's tokenizer
    other = assets / "rm_other_template"
    rm_tok = AutoTokenizer.from_pretrained(other)
    scorer = RewardModel(load_reward_model(str(other), torch.float32, torch.device("cpu")), rm_tok, tok)
    texts = [f"User: {p}\nAssistant: {r}\n" for p, r in PAIRS]
    assert [rm_tok.decode(ids) for ids in scorer.inputs(batch)] == texts
    expected = [expected_score(other, rm_tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert torch.allclose(scorer.score(batch), torch.tensor(expected), atol=1e-5)
    # max_length keeps the end of the conversation, where the score is read
    short = RewardModel(rm, max_length=5)
    assert [len(x) for x in short.inputs(batch)] == [5, 5, 5]
    full = RewardModel(rm).inputs(batch)
    assert short.inputs(batch) == [x[-5:] for x in full]


def test_reward_model_scores_reach_the_advantages(assets, tmp_path):
    cfg = make_cfg(assets, tmp_path, "algorithm.adv_estimator=grpo", "reward_model.enable=true",
                   f"reward_model.model.path={assets / 'rm'}", "reward_model.reward_weight=0.5",
                   "reward_model.rule_weight=2.0", "reward_model.micro_batch_size_per_gpu=3")
    run = SyncRun(cfg)
    assert run.trainer.critic is None
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    metrics = score(run, batch)
    rows = []
    for i in range(len(batch)):
        ids = batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist() + \
            batch.response_ids[i][batch.response_mask[i].bool()].tolist()
        rows.append(expected_score(assets / "rm", ids))
    rule = [run.explorer.rewards.reward_fn(s, r, g, e)["score"] for s, r, g, e in
            zip(batch.data_source, batch.response_text, batch.ground_truth, batch.extra_info)]
    expected = 0.5 * torch.tensor(rows) + 2.0 * torch.tensor(rule)
    assert torch.allclose(batch.scores, expected, atol=1e-5)
    last = batch.response_mask.sum(-1) - 1
    assert torch.allclose(batch.token_rewards[torch.arange(len(batch)), last], expected, atol=1e-5)
    assert float(batch.token_rewards.sum()) == pytest.approx(float(expected.sum()), abs=1e-4)  # nowhere else
    assert metrics["reward_extra/rm_score/mean"] == pytest.approx(sum(rows) / len(rows), abs=1e-5)
    run.trainer.compute_advantages(batch)
    by_hand = compute_advantages("grpo", AdvantageInputs(
        token_rewards=batch.token_rewards, response_mask=batch.response_mask, group=batch.group))
    assert torch.equal(batch.advantages, by_hand.advantages)
    scores = expected.view(-1, 4)  # 4 groups of n = 4
    grpo = ((scores - scores.mean(-1, keepdim=True)) / (scores.std(-1, keepdim=True) + 1e-6)).flatten()
    assert torch.allclose(batch.advantages[torch.arange(len(batch)), last], grpo, atol=1e-4)


def test_a_reward_model_of_weight_zero_is_neither_loaded_nor_run(assets, tmp_path, caplog):
    """reward_model.reward_weight=0 made its score count for nothing, yet the reward model was loaded and scored
    every batch. It is left out, said in one note naming its keys; the scores are rule_weight x the rule's, as
    0 x rm_score + rule_weight x rule_score were."""
    import logging

    with caplog.at_level(logging.WARNING, logger="rft"):
        cfg = make_cfg(assets, tmp_path, "algorithm.adv_estimator=grpo", "reward_model.enable=true",
                       f"reward_model.model.path={assets / 'rm'}", "reward_model.reward_weight=0",
                       "reward_model.rule_weight=2.0")
    notes = [r.getMessage() for r in caplog.records if "reward_model.reward_weight=0" in r.getMessage()]
    assert notes == [
        "rft: note: reward_model.reward_weight=0.0: the reward model's score counts for nothing, so it is neither "
        "loaded nor run (a row's score is reward_model.rule_weight=2.0 x the reward function's), so these keys have "
        f"no effect: reward_model.model.path='{assets / 'rm'}'"], notes
    run = SyncRun(cfg)
    assert run.explorer.rewards.reward_model is None
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    metrics = score(run, batch)
    rule = [run.explorer.rewards.reward_fn(s, r, g, e)["score"] for s, r, g, e in
            zip(batch.data_source, batch.response_text, batch.ground_truth, batch.extra_info)]
    assert batch.scores.tolist() == (2.0 * torch.tensor(rule)).tolist()
    assert "reward_extra/rule_score/mean" in metrics and "reward_extra/rm_score/mean" not in metrics


def test_rm_example_runs_from_the_cli(assets, tmp_path):
    """`rft init-model --preset tiny-rm`, then one step of examples/rm_grpo.yaml with validation."""
    rft_here("init-model", "--preset", "tiny-rm", "rm", cwd=tmp_path)
    from transformers import AutoModelForSequenceClassification

    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm").config.num_labels == 1
    rft_here("train", str(REPO / "examples" / "rm_grpo.yaml"), f"actor_rollout_ref.model.path={assets / 'model'}",
             "reward_model.model.path=rm", f"data.train_files={assets / 'data' / 'train.parquet'}",
             f"data.val_files={assets / 'data' / 'val.parquet'}", "data.train_batch_size=4",
             "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2",
             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "data.max_response_length=4",
             "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.save_freq=-1",
             "trainer.default_local_dir=out", "trainer.logger=[]", cwd=tmp_path)
    line = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert {"reward_extra/rm_score/mean", "reward_extra/rule_score/mean",
            "val-core/arithmetic/reward/mean@1"} <= set(line)


# ------------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("overrides, needles", [
    (["critic.enable=false"], ["adv_estimator='gae'", "critic.enable=false"]),
    (["algorithm.adv_estimator=grpo", "trainer.critic_warmup=2"], ["trainer.critic_warmup=2", "critic.enable=true"]),
    (["critic.ppo_mini_batch_size=3"], ["critic.ppo_mini_batch_size (3)", "data.train_batch_size (4)",
                                        "e.g. critic.ppo_mini_batch_size=2"]),
    (["critic.ppo_micro_batch_size_per_gpu=3"], ["4 x 4 = 16", "critic.ppo_micro_batch_size_per_gpu (3)",
                                                 "e.g. critic.ppo_micro_batch_size_per_gpu=2"]),
    (["critic.cliprange_value=0"], ["critic.cliprange_value must be > 0"]),
    (["critic.rollout_n=2"], ["critic.rollout_n=2", "rollout.n=4"]),
    (["critic.use_dynamic_bsz=true", "critic.forward_max_token_len_per_gpu=8"],
     ["critic.forward_max_token_len_per_gpu=8", "at least the longest sequence"]),
    (["trainer.max_critic_ckpt_to_keep=2"], ["max_critic_ckpt_to_keep", "max_actor_ckpt_to_keep"]),
    (["reward_model.enable=true"], ["reward_model.model.path"]),
    (["reward_model.enable=true", "reward_model.model.path=rm"], ["reward_model.model.path='rm'", "config.json"]),
])
def test_critic_and_reward_model_config_errors(assets, tmp_path, overrides, needles):
    with pytest.raises(ConfigError) as err:
        make_cfg(assets, tmp_path, *overrides)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_reward_function_that_would_never_run_is_refused(assets, tmp_path):
    with pytest.raises(ConfigError, match="rule_weight=0"):
        make_cfg(assets, tmp_path, "reward_model.enable=true", f"reward_model.model.path={assets / 'rm'}")
    cfg = make_cfg(assets, tmp_path, "reward_model.enable=true", f"reward_model.model.path={assets / 'rm'}",
                   "custom_reward_function.path=null")
    assert cfg.reward_model.rule_weight == 0.0  # verl's behaviour: the reward model's score alone


def test_critic_defaults_follow_the_actor(assets, tmp_path):
    run = SyncRun(make_cfg(assets, tmp_path, "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                                 "actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.shuffle=true",
                                 "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
                                 "critic.ppo_micro_batch_size_per_gpu=4",
                                 f"critic.model.tokenizer_path={assets / 'model'}"))  # the policy's vocabulary
    s = run.trainer.critic.s
    assert (s.ppo_mini_batch_size, s.ppo_epochs, s.shuffle, s.loss_agg_mode) == (2, 2, True, "seq-mean-token-sum")
    assert (s.micro_rows, s.forward_micro_rows, s.cliprange_value) == (4, 4, 0.5)
    assert run.trainer.critic.optimizer.param_groups[0]["lr"] == 1e-4
