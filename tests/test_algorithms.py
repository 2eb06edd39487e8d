"""Tier 1 tests of rft.algorithms: hand-computed tensors with the arithmetic in comments, and vectorised
code against slow obvious loops over random (B, G, R, seed)."""

from __future__ import annotations

import math

import pytest
import torch
from tensor_helpers import F64, close, t

from rft.algorithms import (
    ADV_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    AdvantageInputs,
    AggNorm,
    PolicyLossInputs,
    agg_loss,
    compute_advantages,
    compute_policy_loss,
    entropy_from_logits,
    kl_penalty,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
)
from rft.registry import Registry

# ----------------------------------------------------------------------------------------------- utils


def test_masked_mean_var_whiten():
    x = t([[1.0, 2.0, 100.0], [3.0, float("nan"), float("inf")]])
    mask = t([[1, 1, 0], [1, 0, 0]], dtype=torch.long)
    # valid entries 1, 2, 3: mean 2; centred squares 1, 0, 1 -> biased var 2/3, unbiased 2/2 = 1
    close(masked_mean(x, mask), 2.0)
    close(masked_mean(x, mask, dim=-1), [1.5, 3.0])
    close(masked_var(x, mask, unbiased=False), 2.0 / 3.0)
    close(masked_var(x, mask), 1.0)
    # whiten: (x - 2) / sqrt(1 + eps); NaN and inf on masked entries do not leak, the result there is 0
    w = masked_whiten(x, mask, eps=0.0)
    close(w, [[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    # shift_mean=False keeps the mean: (x - 2) / 1 + 2
    close(masked_whiten(x, mask, shift_mean=False, eps=0.0), [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])


def test_masked_reductions_degenerate_counts():
    x = t([5.0, 7.0])
    none = t([0, 0])
    one = t([0, 1])
    # empty mask: mean 0 (no NaN), var 0; one entry: var 0 (no Bessel n/(n-1) division by zero)
    close(masked_mean(x, none), 0.0)
    close(masked_var(x, none), 0.0)
    close(masked_var(x, one), 0.0)
    # single entry whitened: (7 - 7) * rsqrt(0 + eps) = 0
    close(masked_whiten(x, one), [0.0, 0.0])


def test_logprobs_and_entropy_match_categorical():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 11, generator=gen, dtype=F64) * 5.0  # (B, R, V)
    logits[0, 0] *= 100.0  # very peaked row: logsumexp must stay stable
    labels = torch.randint(0, 11, (3, 4), generator=gen)  # (B, R)
    dist = torch.distributions.Categorical(logits=logits)
    close(logprobs_from_logits(logits, labels), dist.log_prob(labels), atol=1e-10)
    close(entropy_from_logits(logits), dist.entropy(), atol=1e-10)
    # uniform over V: entropy log V
    close(entropy_from_logits(torch.zeros(2, 8, dtype=F64)), [math.log(8)] * 2)


def test_the_chunked_lm_head_by_hand():
    """Two tokens, vocabulary 2, hidden size 1, W = [[1], [-1]], no bias: the logits of h are (h, -h), so
    log p(0) = -log(1 + e^{-2h}). h = 0: log(1/2) and entropy log 2; h = ln 2 / 2 (logits +-ln2 / 2, p = 2/3, 1/3):
    log p(1) = log(1/3), entropy = -(2/3 log 2/3 + 1/3 log 1/3). d log p(0) / dh = 2 (1 - p(0)) = 1 at h = 0."""
    from rft.algorithms.utils import LogitMap, linear_logprobs

    h = torch.tensor([[0.0], [math.log(2) / 2]], dtype=F64, requires_grad=True)
    w = torch.tensor([[1.0], [-1.0]], dtype=F64)
    logprobs, entropy = linear_logprobs(h, w, None, torch.tensor([0, 1]), chunk_tokens=1)
    close(logprobs, [math.log(0.5), math.log(1 / 3)], atol=1e-12)
    close(entropy, [math.log(2), -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))], atol=1e-12)
    logprobs[0].backward()
    close(h.grad, [[1.0], [0.0]], atol=1e-12)
    # temperature 2 halves the logits: h = ln 2 is then the second case's row
    logprobs, _ = linear_logprobs(torch.tensor([[math.log(2)]], dtype=F64), w, None, torch.tensor([1]),
                                  LogitMap(temperature=2.0))
    close(logprobs, [math.log(1 / 3)], atol=1e-12)


@pytest.mark.parametrize("scale, softcap, temperature", [(1.0, None, 1.0), (0.5, 3.0, 0.7), (2.0, None, 1.3)])
def test_the_chunked_lm_head_equals_the_full_logits_and_their_gradients(scale, softcap, temperature):
    """`linear_logprobs` against `logprobs_from_logits` / `entropy_from_logits` of the logits the model computes
    (scaled, soft-capped, divided by the temperature), values and the gradients of hidden states, weight and bias,
    in float64 (1e-12): the same function, chunked over 5 positions."""
    from rft.algorithms.utils import LogitMap, linear_logprobs

    gen = torch.Generator().manual_seed(0)
    h = torch.randn(37, 16, generator=gen, dtype=F64, requires_grad=True)
    w = torch.randn(50, 16, generator=gen, dtype=F64, requires_grad=True)
    b = torch.randn(50, generator=gen, dtype=F64, requires_grad=True)
    labels = torch.randint(0, 50, (37,), generator=gen)
    a, c = torch.randn(37, generator=gen, dtype=F64), torch.randn(37, generator=gen, dtype=F64)
    raw = torch.nn.functional.linear(h, w, b) * scale
    z = (softcap * torch.tanh(raw / softcap) if softcap else raw) / temperature
    (logprobs_from_logits(z, labels) @ a + entropy_from_logits(z, None) @ c).backward()
    expected = [logprobs_from_logits(z, labels).detach(), entropy_from_logits(z, None).detach()]
    grads = [x.grad.clone() for x in (h, w, b)]
    for x in (h, w, b):
        x.grad = None
    logprobs, entropy = linear_logprobs(h, w, b, labels, LogitMap(scale, softcap, temperature), chunk_tokens=5)
    (logprobs @ a + entropy @ c).backward()
    close(logprobs.detach(), expected[0], atol=1e-12)
    close(entropy.detach(), expected[1], atol=1e-12)
    for x, g in zip((h, w, b), grads):
        close(x.grad, g, atol=1e-12)


def test_the_chunked_lm_heads_backward_computes_in_autocasts_dtype():
    """Under CPU bf16 autocast the backward's products (a vocabulary block's logits again, the gradients of hidden
    states and weight) run in bf16 as the forward's did, not in the float32 of the saved tensors: three a block,
    the blocks holding the forward chunk's 5 x 50 logits (6 of the 50 rows for 37 positions: 9 blocks); the
    gradients are autocast's own full-logits pass's to bf16 rounding, in float32."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from rft.algorithms.utils import LogitMap, linear_logprobs

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.dtypes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.linear):
                self.dtypes.append(tuple(a.dtype for a in args if torch.is_tensor(a)))
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(0)
    h = torch.randn(37, 16, generator=gen, requires_grad=True)
    w = torch.randn(50, 16, generator=gen, requires_grad=True)
    labels = torch.randint(0, 50, (37,), generator=gen)
    a, c = torch.randn(37, generator=gen), torch.randn(37, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = torch.nn.functional.linear(h, w).float()
    (logprobs_from_logits(z, labels) @ a + entropy_from_logits(z, None) @ c).backward()
    expected = [h.grad.clone(), w.grad.clone()]
    h.grad = w.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logprobs, entropy = linear_logprobs(h, w, None, labels, LogitMap(), chunk_tokens=5)
    products = Products()
    with products:
        (logprobs @ a + entropy @ c).backward()
    assert len(products.dtypes) == 3 * 9 and set(products.dtypes) == {(torch.bfloat16, torch.bfloat16)}
    assert h.grad.dtype == w.grad.dtype == torch.float32
    for got, want in zip((h.grad, w.grad), expected):
        assert float((got - want).norm() / want.norm()) < 1e-2


# ------------------------------------------------------------------------------------------ advantages


def grpo_inputs(**kw) -> AdvantageInputs:
    # score on the last valid token; the 5.0 on row 0 sits on a masked token and must be ignored
    token_rewards = t(
        [
            [0.0, 1.0, 5.0],  # group 5, s = 1
            [1.0, 0.0, 0.0],  # group 9, s = 1
            [0.0, 0.0, 2.0],  # group 5, s = 2
            [0.0, 0.0, 3.0],  # group 9, s = 3
            [0.0, 0.0, 3.0],  # group 5, s = 3
            [0.0, 4.0, 0.0],  # group 42 (alone), s = 4
        ]
    )
    response_mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]])
    group = torch.tensor([5, 9, 5, 9, 5, 42])  # non-adjacent, not 0..k-1
    return AdvantageInputs(token_rewards=token_rewards, response_mask=response_mask, group=group, **kw)


def test_grpo_normalised_by_hand():
    out = compute_advantages("grpo", grpo_inputs())
    eps = 1e-6
    # group 5: s = 1, 2, 3; mean 2; unbiased std sqrt((1 + 0 + 1) / 2) = 1   -> A = -1, 0, 1 over (1 + eps)
    # group 9: s = 1, 3;    mean 2; unbiased std sqrt((1 + 1) / 1) = sqrt 2  -> A = -1, 1 over (sqrt 2 + eps)
    # group 42: one member -> mean 0, std 1                                  -> A = 4 / (1 + eps)
    a5, a9, a42 = 1.0 / (1.0 + eps), 1.0 / (math.sqrt(2.0) + eps), 4.0 / (1.0 + eps)
    expected = [
        [-a5, -a5, 0.0],
        [-a9, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [a9, a9, a9],
        [a5, a5, a5],
        [a42, a42, 0.0],
    ]
    close(out.advantages, expected)
    close(out.returns, expected)


def test_grpo_unnormalised_dr_grpo_by_hand():
    out = compute_advantages("grpo", grpo_inputs(norm_adv_by_std_in_grpo=False))
    # A = s - mean_g s: group 5 -> -1, 0, 1; group 9 -> -1, 1; group 42 (alone, mean 0) -> 4
    expected = [
        [-1.0, -1.0, 0.0],
        [-1.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0],
        [4.0, 4.0, 0.0],
    ]
    close(out.advantages, expected)


def test_grpo_group_ids_are_labels_not_positions():
    # relabelling and permuting the rows permutes the advantages and changes nothing else
    base = grpo_inputs()
    perm = torch.tensor([4, 1, 5, 0, 3, 2])
    relabel = {5: -3, 9: 1000, 42: 0}
    permuted = AdvantageInputs(
        token_rewards=base.token_rewards[perm],
        response_mask=base.response_mask[perm],
        group=torch.tensor([relabel[int(g)] for g in base.group[perm]]),
    )
    close(compute_advantages("grpo", permuted).advantages, compute_advantages("grpo", base).advantages[perm])


def rpp_inputs(gamma: float) -> AdvantageInputs:
    # row 1's 7.0 sits on padding and must not leak backwards
    token_rewards = t([[0.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 7.0]])
    response_mask = t([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    return AdvantageInputs(token_rewards, response_mask, group=torch.tensor([0, 1]), gamma=gamma)


def test_reinforce_plus_plus_gamma_one_by_hand():
    out = compute_advantages("reinforce_plus_plus", rpp_inputs(1.0))
    # G row 0 = [1, 1, 1, 0], row 1 = [2, 2, 0, 0]
    close(out.returns, [[1.0, 1.0, 1.0, 0.0], [2.0, 2.0, 0.0, 0.0]])
    # valid G: 1, 1, 1, 2, 2 -> mean 7/5 = 1.4
    # centred squares 3 * 0.16 + 2 * 0.36 = 1.2; unbiased var 1.2/4 = 0.3
    s = 1.0 / math.sqrt(0.3 + 1e-8)
    lo, hi = -0.4 * s, 0.6 * s
    close(out.advantages, [[lo, lo, lo, 0.0], [hi, hi, 0.0, 0.0]])


def test_reinforce_plus_plus_gamma_half_by_hand():
    out = compute_advantages("reinforce_plus_plus", rpp_inputs(0.5))
    # G row 0 = [0.25, 0.5, 1, 0] (1 * 0.5^2, 1 * 0.5, 1), row 1 = [1, 2, 0, 0]
    close(out.returns, [[0.25, 0.5, 1.0, 0.0], [1.0, 2.0, 0.0, 0.0]])
    # valid G: 0.25, 0.5, 1, 1, 2 -> mean 4.75/5 = 0.95
    # centred: -0.7, -0.45, 0.05, 0.05, 1.05; squares sum 0.49 + 0.2025 + 0.0025 + 0.0025 + 1.1025 = 1.8
    # unbiased var 1.8 / 4 = 0.45
    s = 1.0 / math.sqrt(0.45 + 1e-8)
    expected = [[-0.7 * s, -0.45 * s, 0.05 * s, 0.0], [0.05 * s, 1.05 * s, 0.0, 0.0]]
    close(out.advantages, expected)


def slow_grpo(inputs: AdvantageInputs) -> torch.Tensor:
    rewards, mask, group = inputs.token_rewards, inputs.response_mask, inputs.group.tolist()
    B, R = rewards.shape
    scores = [sum(float(rewards[i, j]) for j in range(R) if mask[i, j]) for i in range(B)]
    adv = torch.zeros(B, R, dtype=rewards.dtype)
    for i in range(B):
        members = torch.tensor([scores[k] for k in range(B) if group[k] == group[i]], dtype=F64)
        mean, std = (members.mean(), members.std()) if len(members) > 1 else (0.0, 1.0)
        a = scores[i] - mean
        if inputs.norm_adv_by_std_in_grpo:
            a = a / (std + inputs.epsilon)
        for j in range(R):
            if mask[i, j]:
                adv[i, j] = a
    return adv


def slow_reinforce_plus_plus(inputs: AdvantageInputs) -> torch.Tensor:
    rewards, mask = inputs.token_rewards, inputs.response_mask
    B, R = rewards.shape
    returns = torch.zeros(B, R, dtype=rewards.dtype)
    for i in range(B):
        running = 0.0
        for j in reversed(range(R)):
            if not mask[i, j]:
                running = 0.0
                continue
            running = float(rewards[i, j]) + inputs.gamma * running
            returns[i, j] = running
    valid = [float(returns[i, j]) for i in range(B) for j in range(R) if mask[i, j]]
    n = len(valid)
    mean = sum(valid) / n
    var = sum((v - mean) ** 2 for v in valid) / (n - 1) if n > 1 else 0.0
    adv = torch.zeros(B, R, dtype=rewards.dtype)
    for i in range(B):
        for j in range(R):
            if mask[i, j]:
                adv[i, j] = (float(returns[i, j]) - mean) / math.sqrt(var + 1e-8)
    return adv


def random_adv_inputs(num_prompts: int, G: int, R: int, seed: int, **kw) -> AdvantageInputs:
    """B = num_prompts * G rows in shuffled order with arbitrary group ids; random lengths 0..R (a few
    rows empty), rewards everywhere including on padding (which must be ignored)."""
    gen = torch.Generator().manual_seed(seed)
    B = num_prompts * G
    ids = torch.randperm(10 * num_prompts, generator=gen)[:num_prompts] * 7 - 5  # arbitrary labels
    group = ids.repeat_interleave(G)[torch.randperm(B, generator=gen)]  # (B,) non-adjacent
    lengths = torch.randint(0, R + 1, (B,), generator=gen)  # (B,)
    response_mask = (torch.arange(R).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)  # (B, R)
    token_rewards = torch.randn(B, R, generator=gen, dtype=F64)  # (B, R)
    # discrete scores make ties and zero-variance groups likely, as with 0/1 verifiable rewards
    if seed % 2:
        token_rewards = token_rewards.round()
    return AdvantageInputs(token_rewards, response_mask, group, **kw)


COMBOS = [(1, 1, 1, 0), (3, 1, 4, 1), (2, 2, 3, 2), (4, 3, 5, 3), (5, 4, 7, 4), (3, 8, 6, 5), (7, 5, 9, 6)]


@pytest.mark.parametrize("num_prompts,G,R,seed", COMBOS)
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_slow_loop(num_prompts, G, R, seed, norm):
    inputs = random_adv_inputs(num_prompts, G, R, seed, norm_adv_by_std_in_grpo=norm)
    close(compute_advantages("grpo", inputs).advantages, slow_grpo(inputs), atol=1e-9)


@pytest.mark.parametrize("num_prompts,G,R,seed", COMBOS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_matches_slow_loop(num_prompts, G, R, seed, gamma):
    inputs = random_adv_inputs(num_prompts, G, R, seed, gamma=gamma)
    if not inputs.response_mask.any():
        pytest.skip("no valid token drawn")
    close(compute_advantages("reinforce_plus_plus", inputs).advantages, slow_reinforce_plus_plus(inputs))


@pytest.mark.parametrize("name", ["grpo", "reinforce_plus_plus"])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.long, torch.float32, F64])
def test_advantages_exactly_zero_on_masked_tokens(name, mask_dtype):
    inputs = random_adv_inputs(4, 4, 6, seed=11)
    reference = compute_advantages(name, inputs)
    inputs.response_mask = inputs.response_mask.to(mask_dtype)
    out = compute_advantages(name, inputs)
    masked = ~inputs.response_mask.bool()
    assert masked.any()
    assert (out.advantages[masked] == 0).all()
    assert out.advantages.shape == out.returns.shape == inputs.token_rewards.shape
    close(out.advantages, reference.advantages)  # the mask's dtype changes nothing


# ----------------------------------------------------------------------------------------- policy loss


def vanilla_inputs(**kw) -> PolicyLossInputs:
    # tokens a, b, c on row 0; d on row 1; row 1's last two are padding with wild values
    #   a: A = +1, ratio 1.5 -> pg1 = -1.5, pg2 = -1.2 (upper clip 1.2) -> loss max = -1.2, clipped
    #   b: A = -1, ratio 4   -> pg1 = 4, pg2 = 1.2 -> clip1 = 4 > pg3 = 3 -> dual clip, loss 3
    #   c: A = -1, ratio 0.5 -> pg1 = 0.5, pg2 = 0.8 (lower clip 0.8) -> loss 0.8, clipped; 0.8 < pg3 = 3
    #   d: A = +2, ratio 1   -> pg1 = pg2 = -2, no clip -> loss -2
    old = torch.zeros(2, 3, dtype=F64)
    logprobs = t([[math.log(1.5), math.log(4.0), math.log(0.5)], [0.0, 50.0, -50.0]]).requires_grad_()
    advantages = t([[1.0, -1.0, -1.0], [2.0, 100.0, -100.0]])
    mask = t([[1, 1, 1], [1, 0, 0]])
    return PolicyLossInputs(logprobs, old, advantages, mask, **kw)


def test_vanilla_policy_loss_by_hand():
    inputs = vanilla_inputs()
    out = compute_policy_loss("vanilla", inputs)
    # token-mean over 4 valid tokens: (-1.2 + 3 + 0.8 - 2) / 4 = 0.6 / 4 = 0.15
    close(out.loss, 0.15)
    # clipped (pg2 > pg1): a and c -> 2/4; dual-clipped: b -> 1/4
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.5)
    assert out.metrics["pg_clipfrac_lower"] == pytest.approx(0.25)
    # ppo_kl = mean(-log ratio) = -(ln 1.5 + ln 4 + ln 0.5 + 0) / 4 = -ln 3 / 4
    assert out.metrics["ppo_kl"] == pytest.approx(-math.log(3.0) / 4.0)
    assert all(isinstance(v, float) for v in out.metrics.values())
    # only d is unclipped: d(-A * ratio)/d logp = -A * ratio = -2, over 4 tokens -> -0.5; clipped tokens get 0
    out.loss.backward()
    close(inputs.logprobs.grad, [[0.0, 0.0, 0.0], [-0.5, 0.0, 0.0]])


def test_vanilla_policy_loss_asymmetric_clip_and_agg_mode():
    # clip_ratio_high = 0.6: token a (ratio 1.5) is no longer clipped: loss -1.5
    # seq-mean-token-sum: row 0 (-1.5 + 3 + 0.8) = 2.3, row 1 -2 -> (2.3 - 2) / 2 = 0.15
    out = compute_policy_loss(
        "vanilla", vanilla_inputs(clip_ratio_high=0.6, loss_agg_mode="seq-mean-token-sum")
    )
    close(out.loss, 0.15)
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.25)  # only c
    with pytest.raises(ValueError, match="clip_ratio_c"):
        compute_policy_loss("vanilla", vanilla_inputs(clip_ratio_c=1.0))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_vanilla_policy_loss_micro_batches_sum_to_mini_batch(mode):
    gen = torch.Generator().manual_seed(3)
    B, R = 6, 5
    logprobs = (torch.randn(B, R, generator=gen, dtype=F64) * 0.3).requires_grad_()
    old = torch.randn(B, R, generator=gen, dtype=F64) * 0.3
    adv = torch.randn(B, R, generator=gen, dtype=F64)
    mask = (torch.rand(B, R, generator=gen) > 0.3).to(F64)
    whole = compute_policy_loss("vanilla", PolicyLossInputs(logprobs, old, adv, mask, loss_agg_mode=mode))
    norm = AggNorm(num_tokens=float(mask.sum()), num_seqs=B, max_len=R)
    parts = [
        compute_policy_loss(
            "vanilla",
            PolicyLossInputs(logprobs[s], old[s], adv[s], mask[s], loss_agg_mode=mode, agg_norm=norm),
        ).loss
        for s in (slice(0, 1), slice(1, 3), slice(3, 6))
    ]
    close(sum(parts), whole.loss, atol=1e-12)


# -------------------------------------------------------------------------------------------------- KL


def test_kl_estimators_by_hand():
    logp = t([-1.0, -2.0, -1.0, -31.0, -1.0])
    ref = t([-2.0, -1.0, -1.0, -1.0, -31.0])
    # logp - ref = 1, -1, 0, -30, 30
    close(kl_penalty(logp, ref, "kl"), [1.0, -1.0, 0.0, -30.0, 30.0])
    close(kl_penalty(logp, ref, "k1"), [1.0, -1.0, 0.0, -30.0, 30.0])
    close(kl_penalty(logp, ref, "abs"), [1.0, 1.0, 0.0, 30.0, 30.0])
    # 0.5 * (logp - ref)^2
    close(kl_penalty(logp, ref, "mse"), [0.5, 0.5, 0.0, 450.0, 450.0])
    close(kl_penalty(logp, ref, "k2"), [0.5, 0.5, 0.0, 450.0, 450.0])
    # k3 with d = ref - logp = -1, 1, 0, 30 -> 20, -30 -> -20:
    #   e^-1 - (-1) - 1 = e^-1; e - 1 - 1 = e - 2; 1 - 0 - 1 = 0;
    #   e^20 - 21 -> clamp 10; e^-20 + 20 - 1 ~ 19 -> clamp 10
    k3 = [math.exp(-1.0), math.e - 2.0, 0.0, 10.0, 10.0]
    close(kl_penalty(logp, ref, "low_var_kl"), k3)
    close(kl_penalty(logp, ref, "k3"), k3)


def test_k3_clamp_is_hit_just_past_the_bound():
    # d = 3: e^3 - 4 = 16.09 > 10 -> 10; d = 2: e^2 - 3 = 4.389 stays
    close(kl_penalty(t([0.0, 0.0]), t([3.0, 2.0]), "k3"), [10.0, math.exp(2.0) - 3.0])


# ----------------------------------------------------------------------------------------- aggregation

LOSS_MAT = [[1.0, 2.0, 3.0, 9.0], [4.0, 5.0, 6.0, 9.0], [7.0, 7.0, 7.0, 7.0]]
AGG_MASK = [[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]  # row 2 has no valid token


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token-mean", 7.0 / 3.0),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-sum", 7.0 / 3.0),  # (3 + 4 + 0) / 3 rows
        ("seq-mean-token-mean", 5.5 / 3.0),  # (3/2 + 4/1 + 0/max(1, 0)) / 3 rows
        ("seq-mean-token-sum-norm", 7.0 / 12.0),  # (1 + 2 + 4) / (3 rows x max_len 4)
        ("seq-mean-token-sum-maxlen", 7.0 / 12.0),  # the same normaliser under rft's earlier name
        ("token-sum", 7.0),  # 1 + 2 + 4, no normaliser
    ],
)
def test_agg_loss_by_hand(mode, expected):
    close(agg_loss(t(LOSS_MAT), t(AGG_MASK), mode), expected)


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token-mean", 0.7),  # 7 / num_tokens 10
        ("seq-mean-token-sum", 1.4),  # 7 / num_seqs 5
        ("seq-mean-token-mean", 1.1),  # 5.5 / num_seqs 5
        ("seq-mean-token-sum-norm", 7.0 / 40.0),  # 7 / (num_seqs 5 x max_len 8)
        ("token-sum", 7.0),  # the global normalisers do not enter
    ],
)
def test_agg_loss_with_global_norm_by_hand(mode, expected):
    norm = AggNorm(num_tokens=10.0, num_seqs=5.0, max_len=8)
    close(agg_loss(t(LOSS_MAT), t(AGG_MASK, dtype=torch.bool), mode, norm), expected)


def test_agg_loss_unknown_mode_lists_valid_ones():
    with pytest.raises(ValueError) as err:
        agg_loss(t(LOSS_MAT), t(AGG_MASK), "sum")
    for mode in LOSS_AGG_MODES:
        assert mode in str(err.value)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_micro_batches_match_mini_batch_value_and_grad(mode):
    gen = torch.Generator().manual_seed(7)
    B, R = 6, 7
    loss_mat = torch.randn(B, R, generator=gen, dtype=F64).requires_grad_()  # (B, R)
    lengths = torch.tensor([3, 0, 7, 1, 5, 2])  # uneven, one empty row
    mask = (torch.arange(R).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)  # (B, R)

    whole = agg_loss(loss_mat, mask, mode)
    (whole_grad,) = torch.autograd.grad(whole, loss_mat)

    norm = AggNorm(num_tokens=float(mask.sum()), num_seqs=float(B), max_len=R)
    close(agg_loss(loss_mat, mask, mode, norm), whole, atol=1e-12)  # the global norm of the whole batch
    parts = [agg_loss(loss_mat[s], mask[s], mode, norm) for s in (slice(0, 1), slice(1, 3), slice(3, 6))]
    split = torch.stack(parts).sum()
    (split_grad,) = torch.autograd.grad(split, loss_mat)

    assert (split - whole).abs().item() <= 1e-6
    assert (split_grad - whole_grad).abs().max().item() <= 1e-6
    assert (whole_grad[mask == 0] == 0).all()


# ------------------------------------------------------------------------------------------ registries


@pytest.mark.parametrize(
    "registry,lookup",
    [
        (ADV_ESTIMATORS, lambda name: compute_advantages(name, grpo_inputs())),
        (POLICY_LOSSES, lambda name: compute_policy_loss(name, vanilla_inputs())),
        (KL_ESTIMATORS, lambda name: kl_penalty(t([0.0]), t([0.0]), name)),
    ],
)
def test_registry_unknown_name_lists_valid_ones(registry, lookup):
    with pytest.raises(KeyError) as err:
        lookup("no-such-thing")
    assert registry.names()
    for name in registry.names():
        assert name in str(err.value)


def test_registered_names():
    assert {"grpo", "reinforce_plus_plus"} <= set(ADV_ESTIMATORS.names())
    assert "vanilla" in POLICY_LOSSES
    assert {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"} <= set(KL_ESTIMATORS.names())


def test_registering_a_name_twice_raises():
    with pytest.raises(ValueError, match="twice"):
        ADV_ESTIMATORS.register("grpo")(lambda inputs: inputs)
    with pytest.raises(ValueError, match="twice"):
        KL_ESTIMATORS.register("k3")(lambda logp, ref: logp)
    fresh: Registry = Registry("thing")
    fresh.register("a", "b")(len)
    with pytest.raises(ValueError):
        fresh.register("b")(len)
    assert fresh.get("a") is len
