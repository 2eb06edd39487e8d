"""Rollout correction (rft.algorithms.rollout_correction, rft.trainer.rollout_correction): hand-computed IS
weights (TIS, IcePop, token / sequence, batch normalisation), rejection masks and their metrics, the off-policy
and probability-difference metrics, the threshold grammar, and what `apply_rollout_correction` stores on a Batch."""

from __future__ import annotations

import math

import pytest
import torch
from tensor_helpers import F64, close, t

from rft.algorithms.rollout_correction import (
    compute_rollout_correction,
    offpolicy_metrics,
    parse_is_threshold,
    parse_rs_options,
    parse_rs_thresholds,
    rollout_is_weights,
    rollout_probs_diff_metrics,
    rollout_rejection_mask,
)
from rft.batch import Batch
from rft.config.schema import RolloutCorrectionConfig
from rft.trainer.rollout_correction import apply_rollout_correction, corrects_rollout

LN = math.log
# log-ratios l = logp_train - logp_rollout; row 1 has one valid token (its padding carries junk, never read)
MASK = [[1, 1, 1], [1, 0, 0]]


IS_RATIO = ((LN(2.0), LN(0.5), LN(4.0)), (LN(3.0), 50.0, -50.0))


def log_ratio(rows=IS_RATIO) -> torch.Tensor:
    return t(list(rows))


# ------------------------------------------------------------------------------------------ IS weights
def test_token_tis_by_hand():
    w, m = rollout_is_weights(log_ratio(), t(MASK), "token", 2.0)
    # ratios 2, 0.5, 4 | 3 truncated at 2: 2, 0.5, 2 | 2; 0 on padding
    close(w, [[2.0, 0.5, 2.0], [2.0, 0.0, 0.0]])
    assert not w.requires_grad
    assert m["rollout_is_mean"] == pytest.approx(6.5 / 4)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # raw 4 and 3 above 2
    assert m["rollout_is_ratio_fraction_low"] == 0.0  # none below 1/2 (0.5 is not)
    assert (m["rollout_is_max"], m["rollout_is_min"]) == (2.0, 0.5)
    # std of 2, 0.5, 2, 2: E[w^2] - E[w]^2 = 3.0625 - 1.625^2 = 0.421875
    assert m["rollout_is_std"] == pytest.approx(math.sqrt(0.421875))
    assert m["rollout_is_eff_sample_size"] == pytest.approx(1.625 ** 2 / 3.0625, rel=1e-7)
    # per-row means 1.5 and 2: mean 1.75, unbiased std 0.353553, max deviation from 1: 1
    assert m["rollout_is_seq_mean"] == pytest.approx(1.75)
    assert m["rollout_is_seq_std"] == pytest.approx(math.sqrt(0.125))
    assert m["rollout_is_seq_max_deviation"] == pytest.approx(1.0)
    assert m["rollout_is_seq_fraction_high"] == 1.0  # raw row means 6.5/3 and 3 both above 2


def test_sequence_tis_and_icepop_by_hand():
    w, m = rollout_is_weights(log_ratio(), t(MASK), "sequence", 2.0)
    # row 0: exp(ln 2 + ln 0.5 + ln 4) = 4 -> 2 on each of its tokens; row 1: 3 -> 2
    close(w, [[2.0, 2.0, 2.0], [2.0, 0.0, 0.0]])
    assert m["rollout_is_max"] == pytest.approx(4.0) and m["rollout_is_min"] == pytest.approx(3.0)  # before truncation
    assert m["rollout_is_ratio_fraction_high"] == 1.0
    # IcePop 0.5_3.5: per token 2 in, 0.5 in (the bounds are inclusive), 4 out -> 0, 3 in
    w, m = rollout_is_weights(log_ratio(), t(MASK), "token", "0.5_3.5")
    close(w, [[2.0, 0.5, 0.0], [3.0, 0.0, 0.0]])
    assert m["rollout_is_oob_ratio"] == pytest.approx(0.25)


def test_every_weight_outside_the_icepop_band_gives_finite_metrics_and_the_zeroed_rows():
    """Every ratio (2, 0.5, 4 | 3) outside the band 5_10: all weights 0. verl divides by zero for the effective
    sample size here; rft reports 0 effective samples and both rows zeroed."""
    w, m = rollout_is_weights(log_ratio(), t(MASK), "token", "5_10")
    close(w, [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert m["rollout_is_eff_sample_size"] == 0.0 and m["rollout_is_zeroed_rows"] == 2.0
    assert all(math.isfinite(v) for v in m.values()), m
    _, m = rollout_is_weights(log_ratio(), t(MASK), "token", "0.5_3.5")  # row 0 keeps two weights, row 1 one
    assert m["rollout_is_zeroed_rows"] == 0.0 and m["rollout_is_eff_sample_size"] > 0
    _, m = rollout_is_weights(log_ratio(), t(MASK), "token", "3_3.5")  # only row 1's 3 stays
    assert m["rollout_is_zeroed_rows"] == 1.0


def test_batch_normalisation_by_hand():
    corr = compute_rollout_correction(log_ratio(), torch.zeros(2, 3, dtype=F64), t(MASK), "token", 2.0, True)
    # token weights 2, 0.5, 2 | 2: mean 1.625 -> divided by it
    close(corr.weights, t([[2.0, 0.5, 2.0], [2.0, 0.0, 0.0]]) / 1.625)
    assert corr.metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(1.625)
    # sequence: weights 2 | 2, mean over the rows 2 -> all 1
    corr = compute_rollout_correction(log_ratio(), torch.zeros(2, 3, dtype=F64), t(MASK), "sequence", 2.0, True)
    close(corr.weights, [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


# ---------------------------------------------------------------------------------- rejection sampling
# l: row 0 ln 1.5, ln 0.25, ln 3; row 1 ln 1.2
#   k1 = -l:          -0.405465  1.386294  -1.098612 | -0.182322
#   k2 = l^2 / 2:      0.082201  0.960906   0.603474 |  0.016620
#   k3 = r - 1 - l:    0.094535  0.636294   0.901388 |  0.017678
RS_RATIO = ((LN(1.5), LN(0.25), LN(3.0)), (LN(1.2), 9.0, 9.0))


def test_token_k1_rejection_by_hand():
    keep, m = rollout_rejection_mask(log_ratio(RS_RATIO), t(MASK), "token_k1", "0.5_2")
    # keep -l in [ln 0.5, ln 2] = [-0.693, 0.693]: row 0 keeps token 0 only, row 1 keeps its token
    close(keep * t(MASK), [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert m["rollout_rs_token_k1_masked_fraction"] == pytest.approx(0.5)
    assert m["rollout_rs_token_k1_seq_masked_fraction"] == pytest.approx(0.5)
    assert m["rollout_rs_token_k1_fraction_high"] == pytest.approx(0.25)  # 1.386 > ln 2
    assert m["rollout_rs_token_k1_fraction_low"] == pytest.approx(0.25)  # -1.099 < ln 0.5
    assert m["rollout_rs_masked_fraction"] == pytest.approx(0.5)
    # one number u means the band (1/u, u)
    same, _ = rollout_rejection_mask(log_ratio(RS_RATIO), t(MASK), "token_k1", 2.0)
    close(same, keep)


def test_sequence_rejection_by_hand():
    # seq_mean_k3: row 0 (0.094535 + 0.636294 + 0.901388) / 3 = 0.544072 > 0.1 -> rejected; row 1 0.017678 kept
    keep, m = rollout_rejection_mask(log_ratio(RS_RATIO), t(MASK), "seq_mean_k3", 0.1)
    close(keep * t(MASK), [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert m["rollout_rs_seq_mean_k3_max"] == pytest.approx(0.544072, abs=1e-6)
    assert m["rollout_rs_masked_fraction"] == pytest.approx(0.75)
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(0.5)
    # seq_max_k2: row 0's largest 0.960906 > 0.5 rejects it; seq_sum_k1 with band (0.5, 2): row 0 sums
    # -ln(1.125) = -0.118 (kept), row 1 -0.182 (kept)
    keep, _ = rollout_rejection_mask(log_ratio(RS_RATIO), t(MASK), "seq_max_k2", "0.5")
    close(keep * t(MASK), [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    keep, _ = rollout_rejection_mask(log_ratio(RS_RATIO), t(MASK), "seq_sum_k1", "0.5_2")
    close(keep * t(MASK), t(MASK))
    # options combine (a token must pass all), each with its own threshold, duplicates dropped
    keep, m = rollout_rejection_mask(log_ratio(RS_RATIO), t(MASK), "token_k3,seq_sum_k1,token_k3", "0.1,0.5_2")
    close(keep * t(MASK), [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])  # k3 <= 0.1: tokens 0 and row 1
    assert "rollout_rs_token_k3_mean" in m and "rollout_rs_seq_sum_k1_mean" in m


def test_threshold_grammar():
    assert parse_is_threshold(2) == (2.0, None) and parse_is_threshold("0.5_5.0") == (5.0, 0.5)
    assert parse_rs_options("token_k1, seq_mean_k3,token_k1") == ["token_k1", "seq_mean_k3"]
    assert parse_rs_thresholds(["token_k1", "seq_max_k3"], "0.9_1.1,0.3") == {"token_k1": (0.9, 1.1),
                                                                              "seq_max_k3": (None, 0.3)}
    for bad in ("2_1", "0_1", "x", "-1"):
        with pytest.raises(ValueError):
            parse_is_threshold(bad)
    with pytest.raises(TypeError):
        parse_is_threshold(True)
    with pytest.raises(ValueError, match="seq_max_k1"):
        parse_rs_options("seq_max_k1")
    with pytest.raises(ValueError, match="one per rollout_rs option"):
        parse_rs_thresholds(["token_k1", "token_k2", "token_k3"], "1,2")
    with pytest.raises(ValueError, match="k2 / k3 options one positive number"):
        parse_rs_thresholds(["token_k2"], "0.1_0.2")


# --------------------------------------------------------------------------------------------- metrics
def test_offpolicy_metrics_by_hand():
    lr = log_ratio(RS_RATIO)
    rollout = torch.full((2, 3), LN(0.2), dtype=F64)
    m = offpolicy_metrics(rollout + lr, rollout, t(MASK))
    # kl = mean(rollout - train) = -(ln 1.5 + ln 0.25 + ln 3 + ln 1.2) / 4 = -ln(1.35) / 4
    assert m["kl"] == pytest.approx(-LN(1.35) / 4)
    assert m["k3_kl"] == pytest.approx((0.094535 + 0.636294 + 0.901388 + 0.017678) / 4, abs=1e-6)
    # chi2_token = mean r^2 - 1 = (2.25 + 0.0625 + 9 + 1.44) / 4 - 1; chi2_seq = ((1.125)^2 + 1.2^2) / 2 - 1
    assert m["chi2_token"] == pytest.approx(12.7525 / 4 - 1)
    assert m["chi2_seq"] == pytest.approx((1.125 ** 2 + 1.44) / 2 - 1)
    # per-row log-ppl: rollout -ln 0.2 for both rows; train: row 0 -(3 ln 0.2 + ln 1.125) / 3, row 1 -ln 0.24
    assert m["rollout_log_ppl"] == pytest.approx(-LN(0.2))
    assert m["training_log_ppl"] == pytest.approx((-(LN(0.2) + LN(1.125) / 3) - LN(0.24)) / 2)
    assert m["log_ppl_diff"] == pytest.approx((-LN(1.125) / 3 - LN(1.2)) / 2)


def test_rollout_probs_diff_by_hand():
    rollout = t([[LN(0.2), LN(0.4), LN(0.1)], [LN(0.5), 0.0, 0.0]])
    train = rollout + log_ratio(RS_RATIO)  # probabilities 0.3, 0.1, 0.3 | 0.6
    m = rollout_probs_diff_metrics(train, rollout, t(MASK))
    # |p_train - p_rollout| = 0.1, 0.3, 0.2 | 0.1: max 0.3, mean 0.175, unbiased std sqrt(0.0275 / 3)
    assert m["training/rollout_probs_diff_valid"] == 1
    assert m["training/rollout_probs_diff_max"] == pytest.approx(0.3)
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(0.175)
    assert m["training/rollout_probs_diff_std"] == pytest.approx(math.sqrt(0.0275 / 3))
    x, y = [0.3, 0.1, 0.3, 0.6], [0.2, 0.4, 0.1, 0.5]
    mx, my = sum(x) / 4, sum(y) / 4
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    pearson = cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert m["training/rollout_actor_probs_pearson_corr"] == pytest.approx(pearson)
    assert rollout_probs_diff_metrics(train, rollout, torch.zeros(2, 3))["training/rollout_probs_diff_valid"] == 0


# ------------------------------------------------------------------------------- the trainer's step
def small_batch(old: torch.Tensor, rollout: torch.Tensor) -> Batch:
    B, R = old.shape
    return Batch(prompt_ids=torch.ones(B, 1, dtype=torch.long), prompt_mask=torch.ones(B, 1, dtype=torch.long),
                 response_ids=torch.ones(B, R, dtype=torch.long), response_mask=torch.tensor(MASK),
                 group=torch.arange(B), old_logprobs=old.float(), rollout_logprobs=rollout.float())


def test_apply_rollout_correction_stores_weights_and_kept_tokens():
    """A hand-made mismatch: the rollout's log-probs are the trainer's minus l (ratios 1.5, 0.25, 3 | 1.2)."""
    old = torch.full((2, 3), LN(0.3), dtype=F64)
    batch = small_batch(old, old - log_ratio(RS_RATIO))
    section = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token_k1",
                                      rollout_rs_threshold="0.5_2")
    assert corrects_rollout(section)
    metrics = apply_rollout_correction(batch, section)
    # TIS at 2: 1.5, 0.25, 2 | 1.2; token_k1 band [ln 0.5, ln 2] on -l keeps row 0's token 0 and row 1's token
    close(batch.rollout_is_weights.double(), [[1.5, 0.25, 2.0], [1.2, 0.0, 0.0]], atol=1e-6)
    assert batch.loss_mask.tolist() == [[1, 0, 0], [1, 0, 0]]
    assert batch.response_mask.tolist() == MASK  # the attention mask is untouched
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(0.5)
    assert metrics["rollout_corr/kl"] == pytest.approx(-LN(1.35) / 4, abs=1e-6)
    assert metrics["training/rollout_probs_diff_valid"] == 1


def test_apply_rollout_correction_modes():
    old = torch.full((2, 3), LN(0.3), dtype=F64)
    # IS only: weights, no loss mask
    batch = small_batch(old, old - log_ratio(RS_RATIO))
    apply_rollout_correction(batch, RolloutCorrectionConfig(rollout_is="sequence"))
    assert batch.loss_mask is None and batch.rollout_is_weights is not None
    # bypass: the rollout's log-probs become the old ones, nothing else
    batch = small_batch(old, old - 1.0)
    section = RolloutCorrectionConfig(bypass_mode=True, rollout_is="token")
    assert not corrects_rollout(section)
    assert apply_rollout_correction(batch, section) == {}
    assert torch.equal(batch.old_logprobs, batch.rollout_logprobs) and batch.rollout_is_weights is None
    # no old log-probs (one optimizer step per batch, no correction asked): nothing to do
    batch = small_batch(old, old)
    batch.old_logprobs = None
    assert apply_rollout_correction(batch, RolloutCorrectionConfig()) == {} and batch.rollout_is_weights is None
    # metrics only: the default section still reports the mismatch when both log-probs are there
    batch = small_batch(old, old - log_ratio(RS_RATIO))
    metrics = apply_rollout_correction(batch, RolloutCorrectionConfig())
    assert "rollout_corr/chi2_token" in metrics and batch.rollout_is_weights is None and batch.loss_mask is None
