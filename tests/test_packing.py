"""The verl keys that make training fast change no result: use_remove_padding (packed passes), use_dynamic_bsz
(micro-batches by token count), use_torch_compile; and the update leaves out, exactly, the rows whose advantages
are all zero. Gradients are compared to 1e-6 (relative to the largest entry once it exceeds 1) on the tiny model
with ragged prompts and responses."""

from __future__ import annotations

import os

import pytest
import torch
from rl_helpers import make_assets, rl_config, score

from rft.algorithms import LOSS_AGG_MODES, AggNorm, PolicyLossInputs, compute_policy_loss
from rft.algorithms.policy_loss import POLICY_LOSSES, policy_loss_zero_at_zero_advantage
from rft.config.load import ConfigError
from rft.monitor import Timer
from rft.orchestration.run import SyncRun
from rft.workers import packing
from rft.workers.critic import forward_values
from rft.workers.packing import PACKED_ATTR, enable_remove_padding, token_budget_bins
from rft.workers.policy import compute_logprobs, forward_logprobs

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


@pytest.fixture(scope="module")
def ragged(assets, tmp_path_factory):
    """A scored 16-row mini-batch with prompts of several lengths and responses cut to 1..6 tokens (old log-probs off
    the current ones, so ratios differ from 1), on a policy nudged away from its reference."""
    out = tmp_path_factory.mktemp("ragged")
    run = SyncRun(rl_config(assets, out, "actor_rollout_ref.actor.use_kl_loss=true", "critic.enable=true"))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in run.trainer.model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    lengths = torch.arange(len(batch)) % 6 + 1
    batch.response_mask = (torch.arange(batch.response_ids.shape[1])[None] < lengths[:, None]).long()
    batch.response_ids = batch.response_ids * batch.response_mask
    batch.prompt_mask = batch.prompt_mask.clone()
    batch.prompt_mask[1::2, :3] = 0  # every other prompt 3 tokens shorter (left padding)
    batch.prompt_mask[2::4, :1] = 0
    batch.prompt_ids = batch.prompt_ids * batch.prompt_mask
    assert len(set(batch.prompt_mask.sum(-1).tolist())) == 3  # prompts of several lengths
    score(run, batch)
    current = run.trainer.logprobs(batch, run.trainer.model, run.cfg.actor_rollout_ref.rollout)
    gen = torch.Generator().manual_seed(2)
    batch.old_logprobs = (current + 0.3 * torch.randn(current.shape, generator=gen)) * batch.response_mask
    batch.ref_logprobs = run.trainer.ref_logprobs(batch)
    run.trainer.compute_advantages(batch)
    return run, batch


def _grads(run, batch, **settings) -> list[torch.Tensor]:
    worker = run.trainer.worker
    saved = {k: getattr(worker.s, k) for k in settings}
    for k, v in settings.items():
        setattr(worker.s, k, v)
    try:
        worker.optimizer.zero_grad(set_to_none=True)
        worker.backward_mini_batch(batch, seed=123)
        return [p.grad.detach().clone() for p in worker.params]
    finally:
        for k, v in saved.items():
            setattr(worker.s, k, v)


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """max |a - b| over all entries, relative to the largest entry once it exceeds 1."""
    largest = max(float(g.abs().max()) for g in a)
    assert largest > 1e-4  # a gradient to compare
    return max(float((x - y).abs().max()) for x, y in zip(a, b)) / max(1.0, largest)


def _packed(model, on: bool) -> None:
    if on and not packing.packs(model):
        assert enable_remove_padding(model, "test")
    setattr(model, PACKED_ATTR, on)


# ------------------------------------------------------------------------------------------ remove padding
@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo", "clip_cov"])
def test_packed_update_has_the_padded_gradient(ragged, loss_mode):
    """Every aggregation mode, with entropy and KL terms: packed == padded to 1e-6."""
    run, batch = ragged
    model = run.trainer.model
    for mode in LOSS_AGG_MODES:
        opts = dict(loss_mode=loss_mode, loss_agg_mode=mode, entropy_coeff=0.01, kl_loss_coef=0.1,
                    clip_cov_ratio=0.05, clip_cov_lb=-10.0, clip_cov_ub=10.0)
        _packed(model, False)
        padded = _grads(run, batch, **opts)
        _packed(model, True)
        try:
            packed = _grads(run, batch, **opts)
            packed_micro = _grads(run, batch, micro_rows=5, **opts)
        finally:
            _packed(model, False)
        assert _close(padded, packed) <= 1e-6, mode
        assert _close(padded, packed_micro) <= 1e-6, mode


def test_packed_log_probs_and_values_equal_the_padded_ones(ragged):
    run, batch = ragged
    model, critic = run.trainer.model, run.trainer.critic.model
    padded = compute_logprobs(model, batch, 1.0, None)
    values = forward_values(critic, batch).detach()
    _packed(model, True)
    _packed(critic, True)
    try:
        packed = compute_logprobs(model, batch, 1.0, 3)
        packed_values = forward_values(critic, batch).detach()
        lp, entropy = forward_logprobs(model, batch, 1.0, with_entropy=True)
    finally:
        _packed(model, False)
        _packed(critic, False)
    mask = batch.response_mask.bool()
    assert float((padded - packed).abs().max()) <= 1e-6 and bool((packed[~mask] == 0).all())
    assert float((values - packed_values).abs().max()) <= 1e-6
    assert entropy.shape == batch.response_mask.shape and bool(torch.isfinite(entropy).all())


def test_a_prompt_several_rows_hold_is_packed_once():
    """packed_window on three rows, the first two with one prompt (5 6 7), the third another (8 9, left-padded):
    the shared prompt's tokens are packed with row 0 only, each row's layout reads them in front of its response,
    and row 1's first response token is predicted by row 0's last prompt token (packed index 2).

        ids (response_window)    attention       packed index of each cell (src; 10: none)
        row 0: 5 6 7 10 11       1 1 1 1 1       0 1 2 3 4
        row 1: 5 6 7 12  0       1 1 1 1 0       0 1 2 5 10
        row 2: 0 8 9 13 14       0 1 1 1 1       6 7 8 9 10
    """
    from rft.batch import Batch
    from rft.workers.policy import packed_window, prompt_owners

    batch = Batch(prompt_ids=torch.tensor([[5, 6, 7], [5, 6, 7], [0, 8, 9]]),
                  prompt_mask=torch.tensor([[1, 1, 1], [1, 1, 1], [0, 1, 1]]),
                  response_ids=torch.tensor([[10, 11], [12, 0], [13, 14]]),
                  response_mask=torch.tensor([[1, 1], [1, 0], [1, 1]]), group=torch.tensor([0, 0, 1]))
    assert prompt_owners(batch.prompt_ids, batch.prompt_mask).tolist() == [0, 0, 2]
    window = packed_window(batch, torch.device("cpu"))
    tokens = window.tokens
    assert tokens.ids.tolist() == [5, 6, 7, 10, 11, 12, 8, 9, 13, 14]
    assert tokens.positions.tolist() == [0, 1, 2, 3, 4, 3, 0, 1, 2, 3]
    assert tokens.row.tolist() == [0, 0, 0, 0, 0, 1, 2, 2, 2, 2]
    assert tokens.col.tolist() == [0, 1, 2, 3, 4, 3, 0, 1, 2, 3]
    assert tokens.src.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 5, 10], [6, 7, 8, 9, 10]]
    assert window.t.tolist() == [-1, -1, -1, 0, 1, 0, -1, -1, 0, 1]
    assert window.before.tolist() == [2, 3, 2, 7, 8]
    # no prompt held twice: each row's tokens one after another, as before
    alone = packed_window(Batch(prompt_ids=batch.prompt_ids[1:], prompt_mask=batch.prompt_mask[1:],
                                response_ids=batch.response_ids[1:], response_mask=batch.response_mask[1:],
                                group=batch.group[1:]), torch.device("cpu"))
    assert alone.tokens.src is None and alone.before.tolist() == [2, 5, 6]


def test_groups_that_share_their_prompt_train_as_the_padded_pass(assets, tmp_path):
    """A GRPO batch whose rows of a group share their prompt (4 prompts x 4 responses): the packed pass computes
    each prompt once (fewer tokens than the rows hold) and its log-probs, values and gradient are the padded
    ones to 1e-6, in one micro-batch and in micro-batches that split the groups."""
    from rft.workers.policy import packed_window

    run = SyncRun(rl_config(assets, tmp_path, "critic.enable=true"))
    batch = run.explorer.generate_batch(run.explorer.taskset.next_batch())
    score(run, batch)
    run.trainer.compute_advantages(batch)
    window = packed_window(batch, torch.device("cpu"))
    assert len(window.tokens.ids) == int(batch.response_mask.sum() + batch.prompt_mask[::4].sum())
    model, critic = run.trainer.model, run.trainer.critic.model
    padded_lp = compute_logprobs(model, batch, 1.0, None)
    padded_values = forward_values(critic, batch).detach()
    padded = _grads(run, batch)
    _packed(model, True)
    _packed(critic, True)
    try:
        assert float((compute_logprobs(model, batch, 1.0, None) - padded_lp).abs().max()) <= 1e-6
        assert float((forward_values(critic, batch).detach() - padded_values).abs().max()) <= 1e-6
        assert _close(padded, _grads(run, batch)) <= 1e-6
        assert _close(padded, _grads(run, batch, micro_rows=6)) <= 1e-6
    finally:
        _packed(model, False)
        _packed(critic, False)


def test_an_architecture_that_cannot_pack_runs_padded(ragged, capsys, monkeypatch):
    run, _ = ragged
    import copy

    model = copy.deepcopy(run.trainer.model)
    before = [c._attn_implementation for c in packing.attention_configs(model)]
    monkeypatch.setattr(packing, "_self_check", lambda m: (False, "no packed call here"))
    assert not enable_remove_padding(model, "actor_rollout_ref.model.use_remove_padding")
    assert not packing.packs(model)
    assert "use_remove_padding=true" in capsys.readouterr().err
    assert [c._attn_implementation for c in packing.attention_configs(model)] == before


# ---------------------------------------------------------------------------------------- dynamic batch size
def test_token_budget_bins():
    lengths = [9, 3, 7, 7, 2, 5, 8, 1]
    bins = token_budget_bins(lengths, 12, "k")
    assert sorted(i for b in bins for i in b) == list(range(8))
    assert all(sum(lengths[i] for i in b) <= 12 for b in bins)
    assert len(bins) == 4  # 42 tokens in bins of 12: first fit, longest first, needs the fewest (4)
    assert len(token_budget_bins(lengths, 12, "k", min_bins=7)) == 7
    assert len(token_budget_bins(lengths, 100, "k")) == 1
    with pytest.raises(ValueError, match="ppo_max_token_len_per_gpu=8 is smaller than the longest sequence"):
        token_budget_bins(lengths, 8, "ppo_max_token_len_per_gpu")


@pytest.mark.parametrize("loss_mode", ["vanilla", "clip_cov"])
def test_dynamic_batch_size_never_changes_the_gradient(ragged, loss_mode):
    run, batch = ragged
    longest = int((batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)).max())
    opts = dict(loss_mode=loss_mode, loss_agg_mode="seq-mean-token-mean", entropy_coeff=0.01, kl_loss_coef=0.1,
                clip_cov_ratio=0.05, clip_cov_lb=-10.0, clip_cov_ub=10.0)
    whole = _grads(run, batch, **opts)
    for budget in (longest, 2 * longest + 3, 1000):
        assert _close(whole, _grads(run, batch, max_token_len=budget, **opts)) <= 1e-6, budget
    plan = run.trainer.worker
    plan.s.max_token_len = longest
    try:
        _, sizes, fillers = plan.plan(batch)
    finally:
        plan.s.max_token_len = None
    assert len(sizes) > 2 and sum(sizes) == len(batch) and fillers == 0


def test_dynamic_batch_size_log_prob_passes(ragged):
    run, batch = ragged
    whole = compute_logprobs(run.trainer.model, batch, 1.0, None)
    longest = int((batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)).max())
    budgeted = compute_logprobs(run.trainer.model, batch, 1.0, None, max_tokens=longest)
    assert float((whole - budgeted).abs().max()) <= 1e-6
    values = run.trainer.critic.compute_values(batch)
    run.trainer.critic.s.forward_max_token_len = longest
    try:
        assert float((values - run.trainer.critic.compute_values(batch)).abs().max()) <= 1e-6
    finally:
        run.trainer.critic.s.forward_max_token_len = None


# ------------------------------------------------------------------------------------ zero-advantage rows
def test_rows_with_zero_advantages_are_left_out_exactly(ragged):
    run, batch = ragged
    worker = run.trainer.worker
    batch = batch.select(list(range(len(batch))))
    batch.advantages = batch.advantages.clone()
    batch.advantages[batch.group == batch.group[0]] = 0.0  # a group whose rewards agree
    batch.advantages[batch.group == batch.group[-1]] = 0.0
    opts = dict(use_kl_loss=False, entropy_coeff=0.0, loss_mode="vanilla", loss_agg_mode="token-mean")
    s = worker.s
    for k, v in opts.items():
        setattr(s, k, v)
    try:
        assert worker.drops_zero_advantage_rows()
        dropped = _grads(run, batch)
        worker.drops_zero_advantage_rows = lambda: False  # the same update over every row
        try:
            every = _grads(run, batch)
        finally:
            del worker.drops_zero_advantage_rows
        assert _close(every, dropped) <= 1e-6
        metrics = worker.backward_mini_batch(batch)
        zero_rows = int((batch.advantages * batch.response_mask == 0).all(-1).sum())
        assert zero_rows >= 8 and metrics["actor/zero_adv_rows"] == zero_rows
        # every group agrees: no pass runs, the gradient is exactly 0 and the optimizer still steps
        batch.advantages = torch.zeros_like(batch.advantages)
        assert all(float(g.abs().max()) == 0.0 for g in _grads(run, batch))
        out = worker.update(batch, step=5)
        assert out["actor/zero_adv_rows"] == len(batch) and out["actor/grad_norm"] == 0.0
        assert len(worker.optimizer.state) == len(worker.params)  # every parameter stepped (Adam's state)
        # a KL or entropy term has a gradient of its own there: no row is left out
        s.entropy_coeff = 0.01
        assert not worker.drops_zero_advantage_rows()
    finally:
        s.use_kl_loss, s.entropy_coeff, s.loss_mode = True, 0.0, "vanilla"


def _declares_zero_at_zero_advantage(name: str) -> bool:
    return policy_loss_zero_at_zero_advantage(name, PolicyLossInputs(*(torch.zeros(1, 1),) * 4))


def test_only_losses_with_a_term_at_zero_advantage_keep_those_rows():
    """clip_cov and kl_cov pick tokens by a batch covariance, dro adds a squared term and sft (Trinity-RFT's
    policy loss of that name) is the negative log-likelihood, whatever the advantage: rows with A = 0 still move
    them, so those rows must stay in the update; every other loss declares it may leave them out."""
    keep = {name for name in POLICY_LOSSES.names() if not _declares_zero_at_zero_advantage(name)}
    assert keep == {"clip_cov", "dro", "kl_cov", "sft"}


@pytest.mark.parametrize("name", [n for n in sorted(POLICY_LOSSES.names()) if _declares_zero_at_zero_advantage(n)])
def test_losses_that_declare_it_give_zero_gradient_where_advantages_are_zero(name):
    """Random inputs with three of six rows at A = 0: for a loss that declares `zero_at_zero_advantage`, the
    gradient on those rows is exactly 0 and the loss equals the loss of the other rows (same normaliser)."""
    g = torch.Generator().manual_seed(0)
    B, R = 6, 5
    logprobs = (-torch.rand(B, R, generator=g)).requires_grad_()
    old = -torch.rand(B, R, generator=g)
    adv = torch.randn(B, R, generator=g)
    adv[::2] = 0.0
    mask = (torch.arange(R)[None] < torch.tensor([5, 3, 4, 1, 5, 2])[:, None]).float()
    for mode in LOSS_AGG_MODES:
        norm = AggNorm(float(mask.sum()), float(B), R)
        inputs = PolicyLossInputs(logprobs=logprobs, old_logprobs=old, advantages=adv, response_mask=mask,
                                  loss_agg_mode=mode, agg_norm=norm, dro_beta=0.1)
        loss = compute_policy_loss(name, inputs).loss
        (grad,) = torch.autograd.grad(loss, logprobs)
        assert float(grad[::2].abs().max()) == 0.0, mode
        kept = [1, 3, 5]
        sub = PolicyLossInputs(logprobs=logprobs[kept], old_logprobs=old[kept], advantages=adv[kept],
                               response_mask=mask[kept], loss_agg_mode=mode, agg_norm=norm, dro_beta=0.1)
        assert float(compute_policy_loss(name, sub).loss) == pytest.approx(float(loss), rel=1e-6, abs=1e-7), mode


# ------------------------------------------------------------------ multi-turn rows (Batch.action_mask)
def _with_tool_spans(run, batch):
    """A copy of `batch` whose longer responses hold tool tokens (action mask 0 at response tokens 1-2 of the rows
    with 4+ tokens, as a multi-turn row's tool result: attended to, never trained on), its token rewards and
    advantages recomputed on the action mask, as the trainer does."""
    batch = batch.select(list(range(len(batch))))
    action = batch.response_mask.clone()
    action[batch.response_mask.sum(-1) >= 4, 1:3] = 0
    batch.action_mask, batch.loss_mask = action, action.clone()
    run.trainer.set_token_rewards(batch)
    run.trainer.compute_advantages(batch)
    tools = (batch.response_mask == 1) & (action == 0)
    assert int(tools.sum()) >= 8 and bool((batch.advantages[tools] == 0).all())
    return batch, tools


def test_packed_and_budgeted_updates_train_on_the_action_mask_only(ragged):
    """Packed passes with token-budget micro-batches give the padded gradient of a batch with tool tokens, and
    nothing sitting on the tool tokens (advantages, old or reference log-probs) reaches the gradient."""
    run, batch = ragged
    batch, tools = _with_tool_spans(run, batch)
    model = run.trainer.model
    longest = int((batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)).max())
    noisy = batch.select(list(range(len(batch))))
    noisy.advantages = noisy.advantages + 5.0 * tools
    noisy.old_logprobs = noisy.old_logprobs - 2.0 * tools
    noisy.ref_logprobs = noisy.ref_logprobs - 2.0 * tools
    for mode in LOSS_AGG_MODES:
        opts = dict(loss_mode="vanilla", loss_agg_mode=mode, entropy_coeff=0.01, kl_loss_coef=0.1)
        padded = _grads(run, batch, **opts)
        _packed(model, True)
        try:
            packed = _grads(run, noisy, max_token_len=longest, **opts)
        finally:
            _packed(model, False)
        assert _close(padded, packed) <= 1e-6, mode
    every = batch.select(list(range(len(batch))))  # the same rows trained on every response token
    every.action_mask = every.loss_mask = None
    assert _close(padded, _grads(run, every, **opts)) > 1e-4


def test_zero_advantage_rows_are_judged_on_the_policy_tokens(ragged):
    """A row whose policy tokens all have A = 0 is left out even when its tool tokens carry a (never read)
    advantage; packed and by token budget, the gradient is the one over every row."""
    run, batch = ragged
    batch, tools = _with_tool_spans(run, batch)
    worker, model = run.trainer.worker, run.trainer.model
    group = batch.group == batch.group[0]
    assert bool(tools[group].any())  # the group has a row with tool tokens
    batch.advantages[group] = 0.0
    batch.advantages[group & tools.any(-1)] = 1.0 * tools[group & tools.any(-1)]
    longest = int((batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)).max())
    opts = dict(use_kl_loss=False, entropy_coeff=0.0, loss_mode="vanilla", loss_agg_mode="token-mean")
    saved = {k: getattr(worker.s, k) for k in opts}
    for k, v in opts.items():
        setattr(worker.s, k, v)
    try:
        assert worker.drops_zero_advantage_rows()
        _packed(model, True)
        try:
            dropped = _grads(run, batch, max_token_len=longest)
            metrics = worker.backward_mini_batch(batch)
        finally:
            _packed(model, False)
        worker.drops_zero_advantage_rows = lambda: False
        try:
            every = _grads(run, batch)
        finally:
            del worker.drops_zero_advantage_rows
    finally:
        for k, v in saved.items():
            setattr(worker.s, k, v)
    assert metrics["actor/zero_adv_rows"] == int((batch.advantages * batch.loss_mask == 0).all(-1).sum()) >= 4
    assert _close(every, dropped) <= 1e-6


# -------------------------------------------------------------------------------------------- torch.compile
def test_torch_compile_falls_back_with_the_reason(ragged, capsys, monkeypatch):
    import copy

    model = copy.deepcopy(ragged[0].trainer.model)
    monkeypatch.setattr(packing, "_COMPILE_OK", (False, "InvalidCxxCompiler: no working C++ compiler found"))
    assert not packing.enable_torch_compile(model, "actor_rollout_ref.actor.use_torch_compile")
    err = capsys.readouterr().err
    assert "use_torch_compile=true: torch.compile does not work on this machine (InvalidCxxCompiler" in err


@pytest.mark.heavy
def test_torch_compile_keeps_the_gradient(ragged):
    """The compiled decoder layers give the eager gradient (to 1e-5: inductor fuses and reorders float ops), from
    one graph that all the layers share."""
    run, batch = ragged
    ok, why = packing.compile_backend_works()
    if not ok:
        pytest.skip(f"torch.compile does not work here: {why}")
    eager = _grads(run, batch, loss_agg_mode="token-mean")
    import copy

    saved = copy.deepcopy(run.trainer.model.state_dict())
    layers = [m for m in run.trainer.model.modules() if type(m).__name__.endswith("DecoderLayer")]
    assert packing.enable_torch_compile(run.trainer.model, "k")
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # graphs another test compiled for the shared layer code are not reused
    graphs = counters["stats"]["unique_graphs"]
    try:
        compiled = _grads(run, batch, loss_agg_mode="token-mean")
        graphs = counters["stats"]["unique_graphs"] - graphs
    finally:
        for layer in layers:  # back to eager for the other tests
            layer._compiled_call_impl = None
        delattr(run.trainer.model, packing.COMPILED_ATTR)
        run.trainer.model.load_state_dict(saved)
    assert _close(eager, compiled) <= 1e-5
    # one graph for every layer: a guard on per-call Python state (the self-check's list of sliding windows, grown
    # by each layer's attention call) compiled a graph per layer until dynamo's recompile limit, then ran eagerly
    assert graphs == 1 < len(layers), (graphs, len(layers))


# ------------------------------------------------------------------------------------------- the config keys
def test_the_three_keys_run_a_training_step(assets, tmp_path):
    """use_remove_padding, use_dynamic_bsz with its budgets and use_torch_compile are taken, not refused; a step
    with remove padding and dynamic batches (compile off: tested above) trains and logs the rows left out."""
    A = "actor_rollout_ref.actor"
    run = SyncRun(rl_config(assets, tmp_path, "actor_rollout_ref.model.use_remove_padding=true",
                            f"{A}.use_dynamic_bsz=true", f"{A}.ppo_max_token_len_per_gpu=64",
                            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                            f"{A}.ppo_epochs=2", "critic.enable=true", "critic.model.use_remove_padding=true",
                            "critic.use_dynamic_bsz=true", "critic.ppo_max_token_len_per_gpu=64",
                            "critic.forward_max_token_len_per_gpu=64"))
    assert packing.packs(run.trainer.model) and packing.packs(run.trainer.critic.model)
    assert run.trainer.settings.max_token_len == 64
    assert run.trainer._token_budget(run.cfg.actor_rollout_ref.rollout) == 64  # null: the actor's
    metrics = run.train_step(1, Timer())
    assert metrics["actor/grad_norm"] > 0 and "actor/zero_adv_rows" in metrics
    with pytest.raises(ConfigError, match="ppo_max_token_len_per_gpu"):
        rl_config(assets, tmp_path / "b", f"{A}.use_dynamic_bsz=true", f"{A}.ppo_max_token_len_per_gpu=4")


@pytest.mark.heavy
def test_enforce_eager_false_compiles_the_hf_engines_decode_step(assets, tmp_path, caplog):
    """actor_rollout_ref.rollout.enforce_eager=false (verl's and Trinity's key: vLLM's captured decode step) with
    the hf engine: the run's engine compiles its decode step, the log says so, and a step trains on what it
    sampled; a sharded model, a Falcon (ALiBi) or a machine where torch.compile does not work decodes eager and the
    log says why. The compiled tokens equal the
    eager ones on five families (test_model_families)."""
    import logging

    from torch._dynamo.utils import counters

    from rft.models.families import init_family_model
    from rft.models.load import load_causal_lm
    from rft.rollout.engines import compiled_decode

    caplog.set_level(logging.INFO, logger="rft")
    run = SyncRun(rl_config(assets, tmp_path, "actor_rollout_ref.rollout.enforce_eager=false"))
    assert run.explorer.engine.compiled and "decode step is compiled with static shapes" in caplog.text
    torch._dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]
    metrics = run.train_step(1, Timer())
    assert counters["stats"]["unique_graphs"] > graphs and metrics["actor/grad_norm"] > 0
    assert not compiled_decode(True, run.trainer.model, sharded=False)
    assert not compiled_decode(False, run.trainer.model, sharded=True)
    assert "decodes eager, since its model is sharded" in caplog.text
    falcon = load_causal_lm(str(init_family_model("falcon", tmp_path / "falcon")), torch.float32,
                            torch.device("cpu"))
    assert not compiled_decode(False, falcon, sharded=False) and "ALiBi" in caplog.text
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(packing, "_COMPILE_OK", (False, "InvalidCxxCompiler: no working C++ compiler found"))
        assert not compiled_decode(False, run.trainer.model, sharded=False)
    assert "decodes eager, since torch.compile does not work here (InvalidCxxCompiler" in caplog.text


def test_the_packed_attention_computes_in_float32_under_cpu_autocast():
    """CPU autocast would run SDPA in bf16, whose CPU kernels are several times slower than float32's at training
    shapes: the packed attention computes it in float32 on the bf16 projections and hands back their dtype. Its
    output is float32 SDPA's exactly, and not bf16 SDPA's (which differs by bf16 rounding)."""
    from rft.workers.packing import PackedRows, _sdpa, _unpack, packed_attention

    gen = torch.Generator().manual_seed(0)
    lengths = [5, 3, 7]
    row = torch.cat([torch.full((n,), r) for r, n in enumerate(lengths)])
    col = torch.cat([torch.arange(n) for n in lengths])
    packed = PackedRows(row=row, col=col, rows=3, width=7)
    q, k, v = (torch.randn(1, h, 15, 16, generator=gen).to(torch.bfloat16) for h in (4, 2, 2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = packed_attention(None, q, k, v, None, rft_packed=packed)
        in_bf16 = _sdpa(*(_unpack(x, packed) for x in (q, k, v)), None, 0.0, None)
    expected = _sdpa(*(_unpack(x, packed).float() for x in (q, k, v)), None, 0.0, None)
    expected = expected.to(torch.bfloat16).transpose(1, 2)[row, col].unsqueeze(0)
    assert out.dtype == torch.bfloat16 and in_bf16.dtype == torch.bfloat16 and torch.equal(out, expected)
    assert not torch.equal(out, in_bf16.transpose(1, 2)[row, col].unsqueeze(0))
