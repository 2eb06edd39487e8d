"""The policy-loss / KL / aggregation catalogue as pure functions: hand-computed cases (the arithmetic in the
comments), every loss against a slow obvious per-token loop over random shapes and seeds, the micro-batch
invariance of every loss under every aggregation mode, the straight-through '+' KL estimators, the exact
vocabulary-wide KL and the chunked entropy, DAPO's overlong penalty and group filter, the TRL mappings."""

from __future__ import annotations

import math

import pytest
import torch
from tensor_helpers import F64, close, t

from rft.algorithms import (
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    TRL_LOSS_TYPES,
    AggNorm,
    PolicyLossInputs,
    agg_loss,
    compute_policy_loss,
    entropy_from_logits,
    full_kl_from_logits,
    informative_groups,
    kl_needs_logits,
    kl_penalty,
    overlong_penalty,
    policy_loss_needs_minibatch,
    trl_actor_settings,
    trl_loss_agg_mode,
)
from rft.batch import Batch, concat_batches
from rft.config.schema import KL_ESTIMATOR_NAMES, LOSS_AGG_MODE_NAMES, POLICY_LOSS_NAMES

LN = math.log


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ------------------------------------------------------------------------------------------ hand cases
# Four valid tokens, all ratios != 1. old = -1 on valid tokens, logp = old + l:
#   a: l = ln 1.5 (r 1.5), A = +1     b: l = ln 0.5 (r 0.5), A = -1     c: l = ln 1.1 (r 1.1), A = +2
#   d: l = ln 2   (r 2),   A = +0.5   (row 1; its two padding tokens carry wild values that must not matter)
# logp: a -0.594535, b -1.693147, c -0.904690, d -0.306853


def hand_inputs(**kw) -> PolicyLossInputs:
    old = t([[-1.0, -1.0, -1.0], [-1.0, 7.0, -7.0]])
    logp = (old + t([[LN(1.5), LN(0.5), LN(1.1)], [LN(2.0), 40.0, -40.0]])).requires_grad_()
    adv = t([[1.0, -1.0, 2.0], [0.5, 100.0, -100.0]])
    mask = t([[1, 1, 1], [1, 0, 0]])
    return PolicyLossInputs(logp, old, adv, mask, **kw)


def loss_and_grad(name: str, inputs: PolicyLossInputs):
    out = compute_policy_loss(name, inputs)
    (grad,) = torch.autograd.grad(out.loss, inputs.logprobs)
    return out, grad


def test_gpg_by_hand():
    out, grad = loss_and_grad("gpg", hand_inputs())
    # -logp * A: a (1 - ln1.5) = 0.594535, b -(1 + ln2) = -1.693147, c 2(1 - ln1.1) = 1.809380,
    # d 0.5(1 - ln2) = 0.153426; token-mean: 0.864194 / 4 = 0.216049
    close(out.loss, (2.5 - LN(1.5) - 1.5 * LN(2.0) - 2 * LN(1.1)) / 4)
    assert out.loss.item() == pytest.approx(0.216049, abs=1e-6)
    close(grad, [[-0.25, 0.25, -0.5], [-0.125, 0.0, 0.0]])  # -A / 4
    assert out.metrics["pg_clipfrac"] == 0.0
    assert out.metrics["ppo_kl"] == pytest.approx(-(LN(1.5) + LN(0.5) + LN(1.1) + LN(2.0)) / 4)


def test_opmd_by_hand():
    out, grad = loss_and_grad("opmd", hand_inputs(opmd_tau=3.0, loss_agg_mode="seq-mean-token-mean"))
    # -A * logp per token as in gpg; row 0 mean (0.594535 - 1.693147 + 1.809380) / 3 = 0.236923, row 1 0.153426;
    # mean over 2 rows 0.195175, divided by 1 + tau = 4: 0.0487937
    row0 = (2.0 - LN(1.5) - LN(2.0) - 2 * LN(1.1)) / 3
    row1 = 0.5 * (1 - LN(2.0))
    close(out.loss, (row0 + row1) / 2 / 4)
    assert out.loss.item() == pytest.approx(0.0487937, abs=1e-6)
    close(grad, [[-1 / 24, 1 / 24, -2 / 24], [-0.5 / 8, 0.0, 0.0]])  # -A / n_i / B / 4


def test_cispo_by_hand():
    out, grad = loss_and_grad("cispo", hand_inputs())
    # weights sg(clamp(r, 0.8, 1.2)): a 1.2, b 0.8, c 1.1, d 1.2; loss -w * A * logp:
    #   a 1.2 * 0.594535 = 0.713442, b -0.8 * 1.693147 = -1.354518, c 2.2 * 0.904690 = 1.990318,
    #   d 0.6 * 0.306853 = 0.184112; token-mean 1.533354 / 4 = 0.383339
    close(out.loss, (1.2 * (1 - LN(1.5)) - 0.8 * (1 + LN(2.0)) + 2.2 * (1 - LN(1.1)) + 0.6 * (1 - LN(2.0))) / 4)
    assert out.loss.item() == pytest.approx(0.383339, abs=1e-6)
    close(grad, [[-0.3, 0.2, -0.55], [-0.15, 0.0, 0.0]])  # -w * A / 4: every token keeps a gradient
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.75)  # a, b, d clipped


def test_topr_by_hand():
    # alpha = 1 where A > 0, clamp(r, 0, 1) where A <= 0: only b (A -1, r 0.5) is tapered, alpha 0.5.
    # loss -sg(alpha) A logp: a 0.594535, b -0.5 * 1.693147 = -0.846574, c 1.809380, d 0.153426 -> / 4
    out, grad = loss_and_grad("topr", hand_inputs())
    close(out.loss, ((1 - LN(1.5)) - 0.5 * (1 + LN(2.0)) + 2 * (1 - LN(1.1)) + 0.5 * (1 - LN(2.0))) / 4)
    assert out.loss.item() == pytest.approx(0.427692, abs=1e-6)
    close(grad, [[-0.25, 0.125, -0.5], [-0.125, 0.0, 0.0]])  # -alpha A / 4
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.25)
    # the paper's sequence ratio: row 0's r = 1.5 * 0.5 * 1.1 = 0.825 tapers b; row 1's 2 is truncated to 1
    out, grad = loss_and_grad("topr", hand_inputs(topr_ratio_level="sequence"))
    close(grad, [[-0.25, 0.825 / 4, -0.5], [-0.125, 0.0, 0.0]])
    # a threshold of 1 also tapers a (A 1, r 1.5 -> 1: no change) and d (A 0.5, r 2 -> 1): the same gradient
    close(loss_and_grad("topr", hand_inputs(topr_advantage_threshold=1.0))[1], [[-0.25, 0.125, -0.5],
                                                                                 [-0.125, 0.0, 0.0]])


def test_sppo_by_hand():
    # epsilon 0.3 (Trinity's default) on both sides: r in [1 / 1.3, 1.3] = [0.769, 1.3] -> only c (r 1.1) trains;
    # loss -A l = -2 ln 1.1, token-mean over 4 tokens
    out, grad = loss_and_grad("sppo", hand_inputs(clip_ratio_low=0.3, clip_ratio_high=0.3))
    close(out.loss, -2 * LN(1.1) / 4)
    close(grad, [[0.0, 0.0, -0.5], [0.0, 0.0, 0.0]])
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.75)
    # epsilon 1.5: [0.4, 2.5] holds every token: -sum A l / 4 (b: -(-1) ln 0.5 = -ln 2), gradient -A / 4
    out, grad = loss_and_grad("sppo", hand_inputs(clip_ratio_low=1.5, clip_ratio_high=1.5))
    close(out.loss, -(LN(1.5) + LN(2.0) + 2 * LN(1.1) + 0.5 * LN(2.0)) / 4)
    close(grad, [[-0.25, 0.25, -0.5], [-0.125, 0.0, 0.0]])


def test_rec_by_hand():
    from rft.algorithms import RecOptions

    logp = [-1 + LN(1.5), -1 + LN(0.5), -1 + LN(1.1), -1 + LN(2.0)]
    A = [1.0, -1.0, 2.0, 0.5]
    # defaults (clip none, weight none): REINFORCE, -A logp, as gpg
    out, grad = loss_and_grad("rec", hand_inputs())
    close(out.loss, -sum(a * lp for a, lp in zip(A, logp)) / 4)
    close(grad, [[-0.25, 0.25, -0.5], [-0.125, 0.0, 0.0]])
    # one-side, eps 0.2: a (A > 0, r 1.5 > 1.2) out, b (A < 0, r 0.5 < 0.8) out, c in, d (r 2) out
    one_side = hand_inputs(rec=RecOptions(clip_mode="one-side"))
    out, grad = loss_and_grad("rec", one_side)
    close(out.loss, -2 * logp[2] / 4)
    close(grad, [[0.0, 0.0, -0.5], [0.0, 0.0, 0.0]])
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.75)
    # ring with the default primes (0.6, 2): no token is that far, so two-side's c alone; weighted by sg(r) 1.1
    out, grad = loss_and_grad("rec", hand_inputs(rec=RecOptions(clip_mode="ring", weight="importance_sampling")))
    close(grad, [[0.0, 0.0, -2 * 1.1 / 4], [0.0, 0.0, 0.0]])
    # ring with clip_ratio_low_prime 0.4: a token with A >= 0 and r <= 0.6 keeps it too; none here but a
    # negative one with r >= 1 + 0.4 (high_prime 0.4) would: b's r is 0.5, so still c alone
    # gspo-one-side: row 0's sequence ratio (0.825)^(1/3) = 0.938 keeps a, b, c; row 1's 2 drops d
    out, grad = loss_and_grad("rec", hand_inputs(rec=RecOptions(clip_mode="gspo-one-side")))
    close(grad, [[-0.25, 0.25, -0.5], [0.0, 0.0, 0.0]])
    # weight gspo_importance_sampling: A times the row's sg(exp(mean l)): row 0 0.825^(1/3), row 1 2
    s0 = 0.825 ** (1 / 3)
    out, grad = loss_and_grad("rec", hand_inputs(rec=RecOptions(weight="gspo_importance_sampling")))
    close(grad, [[-s0 / 4, s0 / 4, -2 * s0 / 4], [-0.5 * 2 / 4, 0.0, 0.0]])
    # weight advantage (temp 1): A exp(A) in place of A
    out, grad = loss_and_grad("rec", hand_inputs(rec=RecOptions(weight="advantage")))
    close(grad, [[-a * math.exp(a) / 4 for a in A[:3]], [-0.5 * math.exp(0.5) / 4, 0.0, 0.0]])
    # k2 regularizer, coef 0.5: + 0.5 l^2 per token, gradient + l / 4
    ls = [LN(1.5), LN(0.5), LN(1.1), LN(2.0)]
    out, grad = loss_and_grad("rec", hand_inputs(rec=RecOptions(regularizer="k2", regularizer_coef=0.5)))
    close(out.loss, (-sum(a * lp for a, lp in zip(A, logp)) + 0.5 * sum(x * x for x in ls)) / 4)
    close(grad, [[(-1 + ls[0]) / 4, (1 + ls[1]) / 4, (-2 + ls[2]) / 4], [(-0.5 + ls[3]) / 4, 0.0, 0.0]])
    # forward-kl, coef 0.5: - 0.5 logp per token, gradient - 0.5 / 4 more
    out, grad = loss_and_grad("rec", hand_inputs(rec=RecOptions(regularizer="forward-kl", regularizer_coef=0.5)))
    close(grad, [[-0.375, 0.125, -0.625], [-0.25, 0.0, 0.0]])


def test_importance_sampling_and_sft_by_hand():
    # importance_sampling: -A r: a -1.5, b 0.5, c -2.2, d -1.0 -> token-mean -4.2 / 4; gradient -A r / 4
    out, grad = loss_and_grad("importance_sampling", hand_inputs())
    close(out.loss, -1.05)
    close(grad, [[-0.375, 0.125, -0.55], [-0.25, 0.0, 0.0]])
    # sft: -logp whatever the advantage: (0.594535 + 1.693147 + 0.904690 + 0.306853) / 4 = 0.874806
    out, grad = loss_and_grad("sft", hand_inputs())
    assert out.loss.item() == pytest.approx(0.874806, abs=1e-6)
    close(grad, [[-0.25, -0.25, -0.25], [-0.25, 0.0, 0.0]])
    close(loss_and_grad("sft", hand_inputs(loss_agg_mode="seq-mean-token-sum"))[1],
          [[-0.5, -0.5, -0.5], [-0.5, 0.0, 0.0]])  # each row's sum over 2 rows


def test_sapo_by_hand():
    # gate = sigmoid(tau (r - 1)) * 4 / tau, tau = 1 for A > 0, 1.05 for A <= 0; loss = -gate * A:
    #   a: -4 sig(0.5) = -2.489837     b: +4 / 1.05 sig(-0.525) = 1.415945     c: -2 * 4 sig(0.1) = -4.199834
    #   d: -0.5 * 4 sig(1) = -1.462117
    # forced seq-mean-token-mean: row 0 -5.273726 / 3 = -1.757909, row 1 -1.462117 -> -1.610013
    out, grad = loss_and_grad("sapo", hand_inputs(loss_agg_mode="token-mean"))  # the mode is ignored
    a, b, c = -4 * sig(0.5), 4 / 1.05 * sig(-0.525), -8 * sig(0.1)
    d = -2 * sig(1.0)
    close(out.loss, ((a + b + c) / 3 + d) / 2)
    assert out.loss.item() == pytest.approx(-1.610013, abs=1e-6)
    # d loss / d logp = -A * 4 sig'(tau (r - 1)) * r, sig' = sig (1 - sig), times the weight 1/(3*2) or 1/2
    dsig = lambda x: sig(x) * (1 - sig(x))
    expected = [[-4 * dsig(0.5) * 1.5 / 6, 4 * dsig(-0.525) * 0.5 / 6, -8 * dsig(0.1) * 1.1 / 6],
                [-2 * dsig(1.0) * 2 / 2, 0.0, 0.0]]
    close(grad, expected)
    assert out.metrics["pg_clipfrac"] == 0.0


def test_gspo_by_hand():
    # row 0: s = (ln1.5 + ln0.5 + ln1.1) / 3 = ln(0.825) / 3, w0 = 0.825^(1/3) = 0.937889 (inside [0.8, 1.2]):
    #   loss -A w0: a -0.937889, b 0.937889, c -1.875777 -> mean -0.625259
    # row 1: w1 = 2, A = 0.5: pg1 = -1, pg2 = -0.6 -> -0.6 (clipped, no gradient)
    # seq-mean-token-mean (the paper's): (-0.625259 - 0.6) / 2 = -0.612630
    out, grad = loss_and_grad("gspo", hand_inputs(loss_agg_mode="seq-mean-token-mean"))
    w0 = 0.825 ** (1 / 3)
    close(out.loss, (-2 * w0 / 3 - 0.6) / 2)
    assert out.loss.item() == pytest.approx(-0.612630, abs=1e-6)
    # d w / d logp_t = w (the token's own log-prob carries the gradient): -A w0 / 3 / 2
    close(grad, [[-w0 / 6, w0 / 6, -2 * w0 / 6], [0.0, 0.0, 0.0]])
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.25)  # d
    assert out.metrics["pg_clipfrac_lower"] == 0.0
    # loss_agg_mode is honoured (verl 0.9.1): token-mean (-1.875777 - 0.6) / 4 = -0.618944, gradient -A w0 / 4
    out, grad = loss_and_grad("gspo", hand_inputs(loss_agg_mode="token-mean"))
    close(out.loss, (-2 * w0 - 0.6) / 4)
    assert out.loss.item() == pytest.approx(-0.618944, abs=1e-6)
    close(grad, [[-w0 / 4, w0 / 4, -2 * w0 / 4], [0.0, 0.0, 0.0]])


def test_gspo_exponent_is_capped_at_10():
    inputs = PolicyLossInputs(t([[30.0]]).requires_grad_(), t([[0.0]]), t([[-1.0]]), t([[1]]))
    out = compute_policy_loss("gspo", inputs)
    # log w = min(30, 10) -> w = e^10; A = -1: pg1 = e^10, pg2 = 1.2 -> e^10
    close(out.loss, math.exp(10.0), atol=1e-6)


def test_geo_mean_by_hand():
    # log-ratio clipped to [-0.2, 0.2] on the pessimistic side: a (A>0) min(ln1.5, 0.2) = 0.2;
    # b (A<0) max(ln0.5, -0.2) = -0.2; c ln1.1 = 0.0953102 (inside); d (A>0) 0.2
    # row 0: ratio exp((0.2 - 0.2 + ln1.1) / 3) = 1.032280, adv (1 - 1 + 2) / 3 = 2/3 -> loss -0.688187
    # row 1: ratio exp(0.2) = 1.221403, adv 0.5 -> -0.610701; mean over 2 rows -0.649444
    out, grad = loss_and_grad("geo_mean", hand_inputs(loss_agg_mode="seq-mean-token-sum"))  # mode ignored
    r0, r1 = math.exp(LN(1.1) / 3), math.exp(0.2)
    close(out.loss, (-2 / 3 * r0 - 0.5 * r1) / 2)
    assert out.loss.item() == pytest.approx(-0.649444, abs=1e-6)
    # only c is unclipped: d loss / d logp_c = -adv0 * r0 / 3 / 2
    close(grad, [[0.0, 0.0, -2 / 3 * r0 / 6], [0.0, 0.0, 0.0]])
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.5)  # a, d (A > 0, clipped)
    assert out.metrics["pg_clipfrac_lower"] == pytest.approx(0.25)  # b


def test_rollout_is_weights_multiply_the_token_loss():
    # vanilla's token losses (clip 0.2, dual clip 3): a max(-1.5, -1.2) = -1.2, b max(0.5, 0.8) = 0.8, c -2.2,
    # d max(-1, -0.6) = -0.6; weights a 2, b 1, c 0.5, d 1: (-2.4 + 0.8 - 1.1 - 0.6) / 4 = -0.825 (unweighted -0.8)
    weights = t([[2.0, 1.0, 0.5], [1.0, 0.0, 0.0]])
    out, grad = loss_and_grad("vanilla", hand_inputs(rollout_is_weights=weights))
    close(out.loss, -0.825)
    close(compute_policy_loss("vanilla", hand_inputs()).loss, -0.8)
    close(grad, [[0.0, 0.0, -2 * 1.1 * 0.5 / 4], [0.0, 0.0, 0.0]])  # only c is unclipped: -A r w / 4
    # geo_mean: the row's weights enter as their geometric mean: rows 2 2 2 -> 2 and 0.5 -> 0.5
    r0, r1 = math.exp(LN(1.1) / 3), math.exp(0.2)
    out = compute_policy_loss("geo_mean", hand_inputs(rollout_is_weights=t([[2.0, 2.0, 2.0], [0.5, 0.0, 0.0]])))
    close(out.loss, (-2 / 3 * r0 * 2 - 0.5 * r1 * 0.5) / 2, atol=1e-9)


def test_dro_by_hand():
    out, grad = loss_and_grad("dro", hand_inputs(dro_beta=0.5))
    # -(A logp - beta / 2 * l^2): a 0.594535 + 0.25 * 0.164402 = 0.635636, b -1.693147 + 0.25 * 0.480453 = -1.573034,
    # c 1.809380 + 0.25 * 0.009084 = 1.811651, d 0.153426 + 0.25 * 0.480453 = 0.273540 -> token-mean 0.286948
    losses = [-(a * lp - 0.25 * ll ** 2) for a, lp, ll in
              ((1, -1 + LN(1.5), LN(1.5)), (-1, -1 + LN(0.5), LN(0.5)), (2, -1 + LN(1.1), LN(1.1)),
               (0.5, -1 + LN(2.0), LN(2.0)))]
    close(out.loss, sum(losses) / 4)
    assert out.loss.item() == pytest.approx(0.286948, abs=1e-6)
    # gradient -(A - beta l) / 4: a -0.199317, b 0.163357, c -0.488086, d -0.038357
    close(grad, [[-(1 - 0.5 * LN(1.5)) / 4, -(-1 - 0.5 * LN(0.5)) / 4, -(2 - 0.5 * LN(1.1)) / 4],
                 [-(0.5 - 0.5 * LN(2.0)) / 4, 0.0, 0.0]])
    with pytest.raises(ValueError, match="dro needs dro_beta > 0"):
        compute_policy_loss("dro", hand_inputs())


# DPPO on the hand tokens: p_old = e^-1 = 0.367879 and p = p_old r:
#   a p 0.551819 (change +0.183940, binary KL 0.068213)    b p 0.183940 (change -0.183940, binary KL 0.093546)
#   c p 0.404667 (change +0.036788, binary KL 0.002839)    d p 0.735759 (change +0.367879, binary KL 0.296352)


def test_dppo_tv_by_hand():
    # thresholds 0.2: a (A > 0) 0.18 <= 0.2 in, b (A < 0) -0.18 >= -0.2 in, c in, d 0.37 > 0.2 out.
    # -A sg(min(r, 1.2)) logp: a 1.2 * 0.594535 = 0.713442, b -0.5 * 1.693147 = -0.846574, c 2.2 * 0.904690 =
    # 1.990318 (r 1.1 < 1.2), d 0 -> token-mean 1.857186 / 4 = 0.464297
    out, grad = loss_and_grad("dppo_tv", hand_inputs(clip_ratio_c=1.2))
    close(out.loss, (-1.2 * (-1 + LN(1.5)) + 0.5 * (-1 + LN(0.5)) - 2.2 * (-1 + LN(1.1))) / 4)
    assert out.loss.item() == pytest.approx(0.464297, abs=1e-6)
    close(grad, [[-1.2 / 4, 0.5 / 4, -2.2 / 4], [0.0, 0.0, 0.0]])  # -A sg(min(r, 1.2)) / 4 inside, 0 outside
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.25)  # d outside
    assert out.metrics["pg_clipfrac_lower"] == pytest.approx(0.25)  # a: r 1.5 > 1.2, inside
    # thresholds 0.1: only c stays
    out, grad = loss_and_grad("dppo_tv", hand_inputs(clip_ratio_low=0.1, clip_ratio_high=0.1))
    close(out.loss, -2.2 * (-1 + LN(1.1)) / 4)
    close(grad, [[0.0, 0.0, -0.55], [0.0, 0.0, 0.0]])


def test_dppo_kl_by_hand():
    # thresholds 0.08: a (A > 0) KL 0.068 in; b (A < 0) KL 0.094 > 0.08 and p < p_old: out; c in; d KL 0.30 out
    # -A sg(min(r, 3)) logp: a 1.5 * 0.594535 = 0.891802, c 1.990318 -> token-mean 2.882120 / 4 = 0.720530
    out, grad = loss_and_grad("dppo_kl", hand_inputs(clip_ratio_low=0.08, clip_ratio_high=0.08))
    close(out.loss, (-1.5 * (-1 + LN(1.5)) - 2.2 * (-1 + LN(1.1))) / 4)
    assert out.loss.item() == pytest.approx(0.720530, abs=1e-6)
    close(grad, [[-1.5 / 4, 0.0, -2.2 / 4], [0.0, 0.0, 0.0]])
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.5)
    # a move back towards the old policy is never masked: with A > 0 on b (p fell, KL 0.094 > 0.08) b stays in
    flipped = hand_inputs(clip_ratio_low=0.08, clip_ratio_high=0.08)
    flipped.advantages = flipped.advantages.abs()
    _, grad = loss_and_grad("dppo_kl", flipped)
    assert grad[0, 1].item() == pytest.approx(-0.5 / 4)  # -A r / 4 = -1 * 0.5 / 4


def test_bypass_mode_ppo_clip_with_rejection_by_hand():
    # old_logprobs are the rollout's here. token_k1 keeps -l in [ln 0.6, ln 1.6] = [-0.5108, 0.4700]:
    # a -0.405 in, b 0.693 out, c -0.095 in, d -0.693 out. vanilla on a, c: -1.2 (clipped) and -2.2; the
    # normaliser keeps every valid token (4, as verl's global token count): (-1.2 - 2.2) / 4 = -0.85
    out, grad = loss_and_grad("bypass_mode", hand_inputs(rollout_rs="token_k1", rollout_rs_threshold="0.6_1.6"))
    close(out.loss, -0.85)
    close(grad, [[0.0, 0.0, -0.55], [0.0, 0.0, 0.0]])  # a clipped, b and d rejected
    assert out.metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(0.5)
    # without rejection it is vanilla against the rollout's log-probs (the ratio is the IS correction)
    close(compute_policy_loss("bypass_mode", hand_inputs(rollout_is="token")).loss,
          compute_policy_loss("vanilla", hand_inputs()).loss)


def test_bypass_mode_reinforce_with_is_weights_by_hand():
    # token TIS at 1.6: w = min(r, 1.6): a 1.5, b 0.5, c 1.1, d 1.6; loss -A w logp:
    # a 0.891802, b -0.846574, c 1.990318, d 0.5 * 1.6 * 0.306853 = 0.245482 -> token-mean 0.570257
    x = dict(rollout_is="token", rollout_is_threshold=1.6, bypass_loss_type="reinforce")
    out, grad = loss_and_grad("bypass_mode", hand_inputs(**x))
    w = {"a": 1.5, "b": 0.5, "c": 1.1, "d": 1.6}
    expected = (-w["a"] * (-1 + LN(1.5)) + w["b"] * (-1 + LN(0.5)) - 2 * w["c"] * (-1 + LN(1.1))
                - 0.5 * w["d"] * (-1 + LN(2.0))) / 4
    close(out.loss, expected)
    assert out.loss.item() == pytest.approx(0.570257, abs=1e-6)
    close(grad, [[-1.5 / 4, 0.5 / 4, -2.2 / 4], [-0.8 / 4, 0.0, 0.0]])  # -A w / 4, w without gradient
    assert out.metrics["rollout_corr/rollout_is_mean"] == pytest.approx(4.7 / 4)
    assert out.metrics["ppo_kl"] == pytest.approx(-(LN(1.5) + LN(0.5) + LN(1.1) + LN(2.0)) / 4)
    # batch-normalised: divided by the token mean of w, (1.5 + 0.5 + 1.1 + 1.6) / 4 = 1.175
    close(compute_policy_loss("bypass_mode", hand_inputs(**x, rollout_is_batch_normalize=True)).loss,
          expected / 1.175)
    # sequence level: row 0 w = min(1.5 * 0.5 * 1.1, 1.6) = 0.825 on all its tokens, row 1 min(2, 1.6) = 1.6
    seq = compute_policy_loss("bypass_mode", hand_inputs(**{**x, "rollout_is": "sequence"})).loss
    close(seq, (-0.825 * ((-1 + LN(1.5)) - (-1 + LN(0.5)) + 2 * (-1 + LN(1.1))) - 0.8 * (-1 + LN(2.0))) / 4)


def test_bypass_mode_batch_normalisation_uses_the_mini_batch():
    """Split into micro-batches (each given the whole mini-batch's detached inputs), reinforce with
    batch-normalised IS weights and rejection equals the whole mini-batch; without the mini-batch's inputs
    each micro-batch normalises by its own mean (verl's behaviour) and the sum differs."""
    opts = dict(rollout_is="token", rollout_is_threshold=1.5, rollout_is_batch_normalize=True,
                rollout_rs="token_k3", rollout_rs_threshold=0.02, bypass_loss_type="reinforce")
    x = random_inputs(7, 6, 11, **opts)
    assert policy_loss_needs_minibatch("bypass_mode", x) and not policy_loss_needs_minibatch("bypass_mode",
                                                                                            random_inputs(2, 2, 0))
    whole = compute_policy_loss("bypass_mode", x).loss
    (whole_grad,) = torch.autograd.grad(whole, x.logprobs)
    splits = [slice(0, 1), slice(1, 3), slice(3, 7)]
    total = sum(compute_policy_loss("bypass_mode", _split_inputs(x, s, "bypass_mode")).loss for s in splits)
    (grad,) = torch.autograd.grad(total, x.logprobs)
    assert abs(total.item() - whole.item()) <= 1e-10 and (grad - whole_grad).abs().max().item() <= 1e-10
    norm = AggNorm(float(x.response_mask.sum()), 7.0, 6)
    alone = sum(compute_policy_loss("bypass_mode", PolicyLossInputs(**{
        **{k: (v[s] if isinstance(v, torch.Tensor) else v) for k, v in x.__dict__.items()}, "agg_norm": norm})).loss
        for s in splits)
    assert abs(alone.item() - whole.item()) > 1e-4


# clip_cov / kl_cov: covariance over the valid tokens with mean A = 0.625 and mean logp = -0.874806:
#   a 0.375 * 0.280271 = 0.105102   b -1.625 * -0.818341 = 1.329804   c 1.375 * -0.029884 = -0.041091
#   d -0.125 * 0.567953 = -0.070994


def test_clip_cov_by_hand():
    # clip 0.6 both sides: a (r 1.5), b (r 0.5), c (r 1.1) unclipped; d (r 2, A > 0) clipped at 1.6.
    # candidates: unclipped with 1 < cov < 5 -> b only; clip_num = max(int(0.0002 * 4), 1) = 1 -> b cut.
    # loss max(pg1, pg2) * corr: a -1.5, b 0, c -2.2, d -0.8 -> token-mean -4.5 / 4 = -1.125
    out, grad = loss_and_grad("clip_cov", hand_inputs(clip_ratio_low=0.6, clip_ratio_high=0.6))
    close(out.loss, -1.125)
    close(grad, [[-0.375, 0.0, -0.55], [0.0, 0.0, 0.0]])  # b lost its gradient (it would be +0.125)
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.25)
    # bounds that leave no candidate: the plain clipped loss, b keeps its gradient
    out, grad = loss_and_grad("clip_cov", hand_inputs(clip_ratio_low=0.6, clip_ratio_high=0.6, clip_cov_lb=2.0))
    close(out.loss, (-1.5 + 0.5 - 2.2 - 0.8) / 4)
    close(grad, [[-0.375, 0.125, -0.55], [0.0, 0.0, 0.0]])


def test_clip_cov_random_choice_is_seeded_and_counted():
    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(8, 10, generator=gen, dtype=F64)
    adv = torch.randn(8, 10, generator=gen, dtype=F64)
    mask = torch.ones(8, 10, dtype=F64)

    def cut(seed: int) -> torch.Tensor:
        inputs = PolicyLossInputs(logp.clone().requires_grad_(), logp.clone(), adv, mask, clip_cov_ratio=0.05,
                                  clip_cov_lb=-10.0, clip_cov_ub=10.0, selection_seed=seed)
        out, grad = loss_and_grad("clip_cov", inputs)
        assert out.metrics["pg_clipfrac"] == pytest.approx(4 / 80)  # int(0.05 * 80) = 4 tokens cut
        return grad == 0

    assert cut(1).sum() == 4 and torch.equal(cut(1), cut(1))
    assert not torch.equal(cut(1), cut(2))


def test_kl_cov_by_hand():
    # k = max(1, int(4 * 0.0002)) = 1: the largest cov is b -> b's loss -A r + coef |l| = 0.5 + ln 2
    # others -A r: a -1.5, c -2.2, d -1.0; token-mean (-1.5 + 0.5 + ln2 - 2.2 - 1.0) / 4 = -0.876713
    out, grad = loss_and_grad("kl_cov", hand_inputs(ppo_kl_coef=1.0))
    close(out.loss, (-4.2 + LN(2.0)) / 4)
    assert out.loss.item() == pytest.approx(-0.876713, abs=1e-6)
    # b: d/dlogp (-A r + |l|) = 0.5 - 1 (l < 0) -> -0.125; a -0.375, c -0.55, d -0.25
    close(grad, [[-0.375, -0.125, -0.55], [-0.25, 0.0, 0.0]])
    assert out.metrics["ppo_kl"] == pytest.approx((LN(1.5) + LN(2.0) + LN(1.1) + LN(2.0)) / 4)  # mean |l|
    # kl_cov_ratio 0.5 -> k = 2: b and a (cov 0.105); a: -1.5 + ln1.5, gradient (-1.5 + 1) / 4 = -0.125
    out, grad = loss_and_grad("kl_cov", hand_inputs(ppo_kl_coef=1.0, kl_cov_ratio=0.5))
    close(out.loss, (-4.2 + LN(2.0) + LN(1.5)) / 4)
    close(grad, [[-0.125, -0.125, -0.55], [-0.25, 0.0, 0.0]])


def _m2po_inputs(**kw) -> PolicyLossInputs:
    # log-ratios l: row 0 [0.3, 0.1, -0.2] with A [1, 1, -1]; row 1 [0.4, 0.05] with A [-1, 2]
    old = t([[-1.0, -1.0, -1.0], [-2.0, -0.5, 0.0]])
    logp = (old + t([[0.3, 0.1, -0.2], [0.4, 0.05, 0.0]])).requires_grad_()
    return PolicyLossInputs(logp, old, t([[1.0, 1.0, -1.0], [-1.0, 2.0, 0.0]]), t([[1, 1, 1], [1, 1, 0]]), **kw)


def test_m2po_by_hand():
    # trust-region tokens (A > 0 and l > 0, or A < 0 and l < 0): l^2 0.09, 0.01, 0.04 (row 0) and 0.0025 (row 1's
    # second; its first has A < 0 < l). Their mean 0.035625 <= 0.04: nothing dropped, the loss is -A e^l over the
    # 5 valid tokens: (-e^0.1 + e^-0.2 + e^0.4 - 2 e^0.05 - e^0.3) / 5
    e = math.exp
    out, grad = loss_and_grad("m2po", _m2po_inputs())
    close(out.loss, (-e(0.3) - e(0.1) + e(-0.2) + e(0.4) - 2 * e(0.05)) / 5)
    close(grad, [[-e(0.3) / 5, -e(0.1) / 5, e(-0.2) / 5], [e(0.4) / 5, -2 * e(0.05) / 5, 0.0]])
    assert out.metrics["pg_clipfrac"] == 0.0
    # m2_threshold 0.02: l^2 sorted 0.0025, 0.01, 0.04, 0.09 have prefix means 0.0025, 0.00625, 0.0175, 0.035625:
    # the first three stay, the 0.09 token (row 0's first) is dropped: 0 in the loss, still in its denominator
    out, grad = loss_and_grad("m2po", _m2po_inputs(m2_threshold=0.02))
    close(out.loss, (-e(0.1) + e(-0.2) + e(0.4) - 2 * e(0.05)) / 5)
    close(grad, [[0.0, -e(0.1) / 5, e(-0.2) / 5], [e(0.4) / 5, -2 * e(0.05) / 5, 0.0]])
    assert out.metrics["pg_clipfrac"] == pytest.approx(0.2)
    # log_ratio_clip 0.25: row 1's first token (l 0.4, outside the trust region) is e^0.25 in value and in its
    # gradient (the clamp is straight-through); row 0's first (0.3) too
    out, grad = loss_and_grad("m2po", _m2po_inputs(log_ratio_clip=0.25))
    close(out.loss, (-e(0.25) - e(0.1) + e(-0.2) + e(0.25) - 2 * e(0.05)) / 5)
    close(grad, [[-e(0.25) / 5, -e(0.1) / 5, e(-0.2) / 5], [e(0.25) / 5, -2 * e(0.05) / 5, 0.0]])


# ------------------------------------------------------------------------------- slow per-token loops


def _slow_agg(token_loss: dict, B: int, R: int, n_valid: list[int], mode: str):
    total = sum(token_loss.values(), torch.zeros((), dtype=F64))
    if mode == "token-mean":
        return total / max(1, sum(n_valid))
    if mode == "seq-mean-token-sum":
        return total / B
    if mode == "token-sum":
        return total
    if mode in ("seq-mean-token-sum-norm", "seq-mean-token-sum-maxlen"):
        return total / (B * R)
    assert mode == "seq-mean-token-mean"
    rows = [sum((v for (i, _), v in token_loss.items() if i == row), torch.zeros((), dtype=F64)) / max(1, n_valid[row])
            for row in range(B)]
    return sum(rows, torch.zeros((), dtype=F64)) / B


def _slow_selection(name: str, x: PolicyLossInputs, valid: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """clip_cov / kl_cov token choice, m2po's dropped tokens, by plain loops."""
    n = len(valid)
    if not n:
        return set()
    if name == "m2po":
        ll = {k: x.logprobs[k].item() - x.old_logprobs[k].item() for k in valid}
        trust = [k for k in valid if x.advantages[k].item() * ll[k] > 0]
        if not trust or sum(ll[k] ** 2 for k in trust) / len(trust) <= x.m2_threshold:
            return set()
        ordered = sorted(trust, key=lambda k: ll[k] ** 2)
        kept, total = 0, 0.0
        for k in ordered:
            if (total + ll[k] ** 2) / (kept + 1) > x.m2_threshold:
                break
            kept, total = kept + 1, total + ll[k] ** 2
        return set(ordered[kept:])
    lp = {k: x.logprobs[k].item() for k in valid}
    adv = {k: x.advantages[k].item() for k in valid}
    mean_a, mean_l = sum(adv.values()) / n, sum(lp.values()) / n
    cov = {k: (adv[k] - mean_a) * (lp[k] - mean_l) for k in valid}
    if name == "kl_cov":
        k = max(1, int(n * x.kl_cov_ratio))
        return set(sorted(valid, key=lambda key: -cov[key])[:k])
    candidates = []
    for key in valid:
        r = math.exp(lp[key] - x.old_logprobs[key].item())
        pg1 = -adv[key] * r
        pg2 = -adv[key] * min(max(r, 1 - x.clip_ratio_low), 1 + x.clip_ratio_high)
        if not pg2 > pg1 and x.clip_cov_lb < cov[key] < x.clip_cov_ub:
            candidates.append(key)
    clip_num = max(int(x.clip_cov_ratio * n), 1)
    perm = torch.randperm(len(candidates), generator=torch.Generator().manual_seed(x.selection_seed))
    return {candidates[j] for j in perm[:clip_num].tolist()}


def slow_policy_loss(name: str, x: PolicyLossInputs) -> torch.Tensor:
    """Every loss by plain Python loops over (row, token), scalar torch ops only (so autograd still works)."""
    B, R = x.logprobs.shape
    valid = [(i, j) for i in range(B) for j in range(R) if x.response_mask[i, j] > 0]
    n_valid = [sum(1 for i, _ in valid if i == row) for row in range(B)]
    lo, hi = 1 - x.clip_ratio_low, 1 + x.clip_ratio_high
    exp, clamp = torch.exp, torch.clamp
    if name == "geo_mean":
        rows = []
        for row in range(B):
            keys = [k for k in valid if k[0] == row]
            if not keys:
                rows.append(torch.zeros((), dtype=F64))
                continue
            lsum, asum = torch.zeros((), dtype=F64), 0.0
            for k in keys:
                a = x.advantages[k].item()
                ll = x.logprobs[k] - x.old_logprobs[k]
                lc = clamp(ll, -x.clip_ratio_low, x.clip_ratio_high)
                lsum = lsum + (torch.minimum(ll, lc) if a > 0 else torch.maximum(ll, lc) if a < 0 else 0.0 * ll)
                asum += a
            row = -asum / len(keys) * exp(lsum / len(keys))
            if x.rollout_is_weights is not None:  # their geometric mean over the row
                row = row * math.exp(sum(math.log(x.rollout_is_weights[k].item() + 1e-10) for k in keys) / len(keys))
            rows.append(row)
        return sum(rows, torch.zeros((), dtype=F64)) / B
    mode = "seq-mean-token-mean" if name == "sapo" else x.loss_agg_mode
    chosen = _slow_selection(name, x, valid) if name in ("clip_cov", "kl_cov", "m2po") else set()
    seq_l = {row: sum((x.logprobs[k] - x.old_logprobs[k]).item() for k in valid if k[0] == row) / max(1, n_valid[row])
             for row in range(B)}
    token_loss = {}
    for k in valid:
        a, lp, old = x.advantages[k].item(), x.logprobs[k], x.old_logprobs[k].item()
        ll = lp - old
        if name == "vanilla":
            r = exp(clamp(ll, -20, 20))
            loss = torch.maximum(-a * r, -a * clamp(r, lo, hi))
            if a < 0:
                loss = torch.minimum(loss, torch.tensor(-a * x.clip_ratio_c, dtype=F64))
        elif name == "gspo":
            w = exp(clamp(lp - lp.detach() + seq_l[k[0]], max=10.0))
            loss = torch.maximum(-a * w, -a * clamp(w, lo, hi))
        elif name == "opmd":
            loss = -a * lp / (1 + x.opmd_tau)
        elif name == "cispo":
            r = math.exp(min(max(ll.item(), -20), 20))
            loss = -min(max(r, lo), hi) * a * lp
        elif name == "sapo":
            r = exp(clamp(ll, -20, 20))
            tau = x.tau_pos if a > 0 else x.tau_neg
            loss = -torch.sigmoid(tau * (r - 1)) * 4 / tau * a
        elif name == "clip_cov":
            r = exp(ll)
            loss = torch.maximum(-a * r, -a * clamp(r, lo, hi)) * (0.0 if k in chosen else 1.0)
        elif name == "kl_cov":
            loss = -a * exp(ll) + (x.ppo_kl_coef * ll.abs() if k in chosen else 0.0)
        elif name == "m2po":
            loss = 0.0 * lp if k in chosen else -a * exp(clamp(ll, -x.log_ratio_clip, x.log_ratio_clip))
        elif name == "dro":
            loss = -(a * lp - 0.5 * x.dro_beta * ll ** 2)
        elif name in ("dppo_tv", "dppo_kl"):
            lc = min(max(ll.item(), -20.0), 20.0)
            p, p_old = math.exp(lp.item()), math.exp(old)
            if name == "dppo_tv":
                inside = p - p_old <= x.clip_ratio_high if a > 0 else p - p_old >= -x.clip_ratio_low
            else:
                d = p_old * (old - lp.item()) + (1 - p_old) * math.log((1 - p_old + 1e-8) / (1 - p + 1e-8))
                inside = (d <= x.clip_ratio_high or p <= p_old) if a > 0 else (d <= x.clip_ratio_low or p >= p_old)
            loss = -a * min(math.exp(lc), x.clip_ratio_c) * lp if inside else 0.0 * lp
        elif name == "topr":  # token-level truncated ratio on the tokens with A <= 0
            loss = -(min(math.exp(ll.item()), 1.0) if a <= x.topr_advantage_threshold else 1.0) * a * lp
        elif name == "sppo":
            inside = 1 / (1 + x.clip_ratio_low) <= math.exp(ll.item()) <= 1 + x.clip_ratio_high
            loss = -a * ll if inside else 0.0 * lp
        elif name in ("rec", "gpg"):  # rec's defaults: every token, A unweighted, no regularizer
            loss = -a * lp
        elif name == "importance_sampling":
            loss = -a * exp(clamp(ll, -20, 20))
        elif name == "sft":
            loss = -lp
        elif name == "bypass_mode":  # ppo_clip without rejection: vanilla against the rollout (old) log-probs
            r = exp(clamp(ll, -20, 20))
            loss = torch.maximum(-a * r, -a * clamp(r, lo, hi))
            if a < 0:
                loss = torch.minimum(loss, torch.tensor(-a * x.clip_ratio_c, dtype=F64))
        else:
            raise AssertionError(name)
        if x.rollout_is_weights is not None and name != "bypass_mode":
            loss = loss * x.rollout_is_weights[k].item()
        token_loss[k] = loss
    return _slow_agg(token_loss, B, R, n_valid, mode)


def random_inputs(B: int, R: int, seed: int, **kw) -> PolicyLossInputs:
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(B, R, generator=gen, dtype=F64) * 0.5 - 1.0
    logp = (old + torch.randn(B, R, generator=gen, dtype=F64) * 0.3).requires_grad_()
    adv = torch.randn(B, R, generator=gen, dtype=F64)
    adv[0, 0] = 0.0  # a zero advantage (sign 0 in geo_mean, tau_neg in sapo)
    lengths = torch.randint(0, R + 1, (B,), generator=gen)
    lengths[0] = R  # at least one full row
    mask = (torch.arange(R).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)
    settings = dict(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_cov_ratio=0.2, clip_cov_lb=-0.5,
                    clip_cov_ub=0.5, kl_cov_ratio=0.2, ppo_kl_coef=0.7, opmd_tau=0.5, tau_pos=0.9, tau_neg=1.3,
                    selection_seed=seed, dro_beta=0.3)
    if kw.pop("with_weights", False):  # rollout correction's IS weights, 0 on masked tokens
        settings["rollout_is_weights"] = torch.rand(B, R, generator=gen, dtype=F64) * 2 * mask
    settings.update(kw)
    return PolicyLossInputs(logp, old, adv, mask, **settings)


@pytest.mark.parametrize("name", POLICY_LOSS_NAMES)
@pytest.mark.parametrize("B, R, seed, with_weights", [(1, 1, 0, False), (3, 5, 1, False), (6, 4, 2, True),
                                                      (5, 9, 3, False), (5, 9, 4, True)])
def test_every_loss_matches_a_slow_loop(name, B, R, seed, with_weights):
    for mode in LOSS_AGG_MODES:
        x = random_inputs(B, R, seed, loss_agg_mode=mode, with_weights=with_weights)
        fast = compute_policy_loss(name, x).loss
        (fast_grad,) = torch.autograd.grad(fast, x.logprobs)
        slow = slow_policy_loss(name, x)
        (slow_grad,) = torch.autograd.grad(slow, x.logprobs, allow_unused=True)
        slow_grad = torch.zeros_like(fast_grad) if slow_grad is None else slow_grad
        close(fast, slow.detach(), atol=1e-10)
        close(fast_grad, slow_grad, atol=1e-10)
        assert torch.isfinite(fast_grad).all()


# ---------------------------------------------------------------------------- micro-batch invariance


def _split_inputs(x: PolicyLossInputs, rows: slice, name: str) -> PolicyLossInputs:
    norm = AggNorm(num_tokens=float(x.response_mask.sum()), num_seqs=float(x.logprobs.shape[0]),
                   max_len=x.logprobs.shape[1])
    whole = None
    if policy_loss_needs_minibatch(name):
        whole = PolicyLossInputs(**{**x.__dict__, "logprobs": x.logprobs.detach()})
    part = {k: (v[rows] if isinstance(v, torch.Tensor) else v) for k, v in x.__dict__.items()}
    part.update(agg_norm=norm, minibatch=whole, row_offset=rows.start)
    return PolicyLossInputs(**part)


@pytest.mark.parametrize("name", POLICY_LOSS_NAMES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_give_the_mini_batch_gradient(name, mode):
    """Any split of a mini-batch into micro-batches (each with the mini-batch's AggNorm) sums to the loss of
    the whole mini-batch, in value and gradient (<= 1e-6)."""
    x = random_inputs(7, 6, 11, loss_agg_mode=mode, clip_cov_ratio=0.1, kl_cov_ratio=0.1)
    whole = compute_policy_loss(name, x).loss
    (whole_grad,) = torch.autograd.grad(whole, x.logprobs)
    for splits in ([slice(0, 4), slice(4, 7)], [slice(0, 1), slice(1, 3), slice(3, 7)],
                   [slice(i, i + 1) for i in range(7)]):
        total = sum(compute_policy_loss(name, _split_inputs(x, s, name)).loss for s in splits)
        (grad,) = torch.autograd.grad(total, x.logprobs)
        assert abs(total.item() - whole.item()) <= 1e-6
        assert (grad - whole_grad).abs().max().item() <= 1e-6
    assert whole_grad.abs().max() > 0


def test_minibatch_statistics_matter_for_kl_cov():
    """Without the mini-batch's inputs, a micro-batch of kl_cov picks its own top token: the split differs."""
    x = random_inputs(7, 6, 11, kl_cov_ratio=0.1)
    whole = compute_policy_loss("kl_cov", x).loss
    norm = AggNorm(float(x.response_mask.sum()), 7.0, 6)
    parts = []
    for s in (slice(0, 1), slice(1, 3), slice(3, 7)):
        part = {k: (v[s] if isinstance(v, torch.Tensor) else v) for k, v in x.__dict__.items()}
        parts.append(compute_policy_loss("kl_cov", PolicyLossInputs(**{**part, "agg_norm": norm})).loss)
    assert abs(sum(parts).item() - whole.item()) > 1e-3


def test_loss_registry_and_schema_agree():
    assert set(POLICY_LOSS_NAMES) == set(POLICY_LOSSES.names())
    assert set(KL_ESTIMATOR_NAMES) == set(KL_ESTIMATORS.names())
    assert tuple(LOSS_AGG_MODE_NAMES) == tuple(LOSS_AGG_MODES)
    assert {n for n in POLICY_LOSSES.names() if policy_loss_needs_minibatch(n)} == {"clip_cov", "kl_cov", "m2po",
                                                                                     "bypass_mode"}
    # bypass_mode only for batch-normalised REINFORCE weights
    plain = PolicyLossInputs(t([[0.0]]), t([[0.0]]), t([[1.0]]), t([[1]]))
    assert {n for n in POLICY_LOSSES.names() if policy_loss_needs_minibatch(n, plain)} == {"clip_cov", "kl_cov",
                                                                                            "m2po"}
    assert [n for n in KL_ESTIMATORS.names() if kl_needs_logits(n)] == ["full"]


# ------------------------------------------------------------------------------------- aggregation


def test_dr_grpo_aggregation_by_hand():
    loss_mat = t([[1.0, 2.0, 3.0, 9.0], [4.0, 5.0, 6.0, 9.0], [7.0, 7.0, 7.0, 7.0]])
    mask = t([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    # verl 0.9.1's seq-mean-token-sum-norm (the Dr. GRPO form): valid sum 1 + 2 + 4 = 7 over (num_seqs 3 x
    # max_len 4) = 12 -> 7/12 (verl before 0.7, and rft before this fix: 7 / 4, no division by the rows)
    close(agg_loss(loss_mat, mask, "seq-mean-token-sum-norm"), 7.0 / 12.0)
    close(agg_loss(loss_mat, mask, "seq-mean-token-sum-maxlen"), 7.0 / 12.0)  # rft's earlier name, same value
    # with the mini-batch's normaliser: 5 rows x max_len 8 -> 7 / 40; loss_scale_factor 100 as max_len -> 7 / 500
    close(agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", AggNorm(10.0, 5.0, 8)), 7.0 / 40.0)
    close(agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", AggNorm(10.0, 5.0, 100)), 7.0 / 500.0)


def test_trl_loss_types_map_to_exact_normalisers():
    """TRL's four normalisers on one micro-batch = the whole mini-batch (no gradient accumulation)."""
    loss_mat = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = t([[1, 1, 1], [1, 0, 0]])
    max_completion_length = 3
    trl = {  # TRL GRPOTrainer._compute_loss, written out
        "grpo": ((1 + 2 + 3) / 3 + 4 / 1) / 2,
        "bnpo": (1 + 2 + 3 + 4) / 4,
        "dr_grpo": (1 + 2 + 3 + 4) / (2 * max_completion_length),
        "dapo": (1 + 2 + 3 + 4) / 4,  # num_items_in_batch: the tokens of the global batch
    }
    assert set(trl) == set(TRL_LOSS_TYPES)
    for loss_type, expected in trl.items():
        close(agg_loss(loss_mat, mask, trl_loss_agg_mode(loss_type)), expected)
    with pytest.raises(ValueError, match="dr_grpo"):
        trl_loss_agg_mode("sum")
    settings = trl_actor_settings("dr_grpo", epsilon=0.2, epsilon_high=0.28, beta=0.04)
    assert settings == {"policy_loss.loss_mode": "vanilla", "loss_agg_mode": "seq-mean-token-sum-norm",
                        "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 1e9, "use_kl_loss": True,
                        "kl_loss_coef": 0.04, "kl_loss_type": "low_var_kl"}
    assert trl_actor_settings("grpo", epsilon=0.3)["clip_ratio_high"] == 0.3


def test_trl_settings_reproduce_trl_loss_without_dual_clip():
    """vanilla with trl_actor_settings = TRL's per-token -min(r A, clip(r) A) (a ratio of 5 with A < 0 is
    capped at -3A by rft's default dual clip, not with TRL's settings)."""
    logp = t([[LN(5.0), LN(0.9)]]).requires_grad_()
    inputs = PolicyLossInputs(logp, t([[0.0, 0.0]]), t([[-1.0, 1.0]]), t([[1, 1]]), clip_ratio_low=0.2,
                              clip_ratio_high=0.2, clip_ratio_c=trl_actor_settings()["clip_ratio_c"])
    # TRL: token 1: -min(-5, -1.2) = 5; token 2: -min(0.9, 0.9) = -0.9; dapo: (5 - 0.9) / 2 = 2.05
    close(compute_policy_loss("vanilla", inputs).loss, 2.05)
    inputs.clip_ratio_c = 3.0
    close(compute_policy_loss("vanilla", inputs).loss, (3.0 - 0.9) / 2)


# ---------------------------------------------------------------------------------------------- KL


@pytest.mark.parametrize("base", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_plus_estimators_have_base_value_and_k2_gradient(base):
    logp = t([[-1.0, -2.0, -0.5, -3.0]]).requires_grad_()
    ref = t([[-2.0, -1.0, -0.5, -0.2]])
    plus = kl_penalty(logp, ref, base + "+")
    close(plus, kl_penalty(logp, ref, base).detach())
    (grad_plus,) = torch.autograd.grad(plus.sum(), logp)
    # k2 = 0.5 (logp - ref)^2 -> gradient logp - ref = 1, -1, 0, -2.8
    close(grad_plus, [[1.0, -1.0, 0.0, -2.8]], atol=1e-12)
    if base not in ("mse", "k2"):  # the base's own gradient differs (k1: 1 everywhere)
        (grad_base,) = torch.autograd.grad(kl_penalty(logp, ref, base).sum(), logp)
        assert not torch.allclose(grad_base, grad_plus)


def test_k3_plus_by_hand():
    logp = t([-1.0]).requires_grad_()
    ref = t([-2.0])
    # value: d = ref - logp = -1 -> e^-1 - (-1) - 1 = e^-1 = 0.367879; gradient of k2: logp - ref = 1
    value = kl_penalty(logp, ref, "k3+")
    close(value, [math.exp(-1.0)])
    value.sum().backward()
    close(logp.grad, [1.0])


def test_full_kl_by_hand():
    # p = softmax([0, ln 3]) = (1/4, 3/4); q = softmax([0, 0]) = (1/2, 1/2)
    # KL = 1/4 ln(1/2) + 3/4 ln(3/2) = -0.173287 + 0.304099 = 0.130812
    logits = t([[[0.0, LN(3.0)]]])
    ref = t([[[0.0, 0.0]]])
    expected = 0.25 * LN(0.5) + 0.75 * LN(1.5)
    close(kl_penalty(t([[0.0]]), None, "full", logits=logits, ref_logits=ref), [[expected]])
    assert expected == pytest.approx(0.130812, abs=1e-6)
    with pytest.raises(ValueError, match="logits"):
        kl_penalty(t([[0.0]]), t([[0.0]]), "full")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_full_kl_matches_torch_distributions_for_every_chunk_size(seed):
    gen = torch.Generator().manual_seed(seed)
    B, R, V = 3, 5, 11
    logits = (torch.randn(B, R, V, generator=gen, dtype=F64) * 2).requires_grad_()
    ref = (torch.randn(B, R, V, generator=gen, dtype=F64) * 2).requires_grad_()
    expected = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=logits), torch.distributions.Categorical(logits=ref))
    weights = torch.randn(B, R, generator=gen, dtype=F64)
    exp_gp, exp_gq = torch.autograd.grad((expected * weights).sum(), (logits, ref))
    for chunk in (None, 1, 2, 4, 15, 1000):
        got = full_kl_from_logits(logits, ref, chunk)
        close(got, expected.detach(), atol=1e-12)
        gp, gq = torch.autograd.grad((got * weights).sum(), (logits, ref))
        close(gp, exp_gp, atol=1e-12)
        close(gq, exp_gq, atol=1e-12)


def test_full_kl_gradcheck():
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 6, generator=gen, dtype=F64).requires_grad_()
    ref = torch.randn(4, 6, generator=gen, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: full_kl_from_logits(a, b, 3), (logits, ref))


def test_full_kl_of_identical_policies_is_zero():
    logits = torch.randn(2, 3, 7, dtype=torch.float32)
    assert torch.equal(full_kl_from_logits(logits, logits.clone()), torch.zeros(2, 3))


# ----------------------------------------------------------------------------------------- entropy


def test_entropy_by_hand():
    # p = (1/4, 3/4): H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.346574 + 0.215762 = 0.562335
    close(entropy_from_logits(t([0.0, LN(3.0)])), -(0.25 * LN(0.25) + 0.75 * LN(0.75)))


@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_entropy_equals_unchunked(seed):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(3, 7, 13, generator=gen, dtype=F64) * 3).requires_grad_()
    probs = torch.softmax(logits, -1)
    reference = torch.logsumexp(logits, -1) - (probs * logits).sum(-1)  # the unchunked formula
    weights = torch.randn(3, 7, generator=gen, dtype=F64)
    (ref_grad,) = torch.autograd.grad((reference * weights).sum(), logits)
    for chunk in (None, 1, 4, 21, 5000):
        got = entropy_from_logits(logits, chunk)
        close(got, reference.detach(), atol=1e-12)
        (grad,) = torch.autograd.grad((got * weights).sum(), logits)
        close(grad, ref_grad, atol=1e-12)
    assert torch.autograd.gradcheck(lambda z: entropy_from_logits(z, 5), (logits[0].detach().requires_grad_(),))


# -------------------------------------------------------------------------------------------- DAPO


def test_overlong_penalty_by_hand():
    # max 20, buffer 8 -> expected 12: L = 10 -> 0; 12 -> 0; 16 -> -(4/8) * 0.5 = -0.25; 20 -> -0.5
    close(overlong_penalty(torch.tensor([10, 12, 16, 20]), 20, 8, 0.5), [0.0, 0.0, -0.25, -0.5])
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(torch.tensor([1]), 20, 0, 1.0)


def test_informative_groups_by_hand():
    group = torch.tensor([0, 0, 0, 3, 3, 3, 5, 7, 7])
    values = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.3, 0.1 + 0.2, 0.3])
    # group 0 all agree -> dropped; group 3 varies -> kept; group 5 single row -> kept;
    # group 7: 0.1 + 0.2 = 0.30000000000000004 != 0.3 in float64 but equal in float32 -> dropped
    keep = informative_groups(group, values)
    assert keep.tolist() == [False] * 3 + [True] * 3 + [True] + [False] * 2


def test_concat_batches_pads_and_relabels():
    def batch(p: int, r: int, rows: int, groups: list[int]) -> Batch:
        return Batch(prompt_ids=torch.full((rows, p), 5), prompt_mask=torch.ones(rows, p, dtype=torch.long),
                     response_ids=torch.full((rows, r), 6), response_mask=torch.ones(rows, r, dtype=torch.long),
                     group=torch.tensor(groups), scores=torch.arange(rows, dtype=torch.float32),
                     data_source=["x"] * rows)

    out = concat_batches([batch(2, 3, 2, [0, 0]), batch(4, 1, 3, [1, 1, 4])], pad_token_id=0)
    assert out.prompt_ids.tolist()[0] == [0, 0, 5, 5] and out.prompt_mask.tolist()[0] == [0, 0, 1, 1]
    assert out.response_ids.tolist()[2] == [6, 0, 0] and out.response_mask.tolist()[2] == [1, 0, 0]
    assert out.group.tolist() == [0, 0, 1, 1, 4]  # second batch's labels 1, 1, 4 shifted by 1 - 1 = 0 past 0
    assert out.scores.tolist() == [0.0, 1.0, 0.0, 1.0, 2.0] and len(out.data_source) == 5
    again = concat_batches([batch(1, 1, 2, [0, 0]), batch(1, 1, 2, [0, 0])], pad_token_id=0)
    assert again.group.tolist() == [0, 0, 1, 1]
