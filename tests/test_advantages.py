"""Advantage estimators (rft.algorithms.advantages): for every registered name a hand-computed case with the
arithmetic in comments, the vectorised function against a slow obvious loop over random shapes and seeds, and
advantages exactly 0 on masked tokens; plus the registration specs and the config keys that select them.

grpo's verl mode and reinforce_plus_plus also have hand-computed cases in test_algorithms.py."""

from __future__ import annotations

import math

import pytest
import torch
from tensor_helpers import F64, close, t

from rft.algorithms import (
    ADV_ESTIMATORS,
    AdvantageInputs,
    EstimatorSpec,
    compute_advantages,
    estimator_spec,
    register_estimator,
)
from rft.config import ConfigError
from rft.config.schema import ADV_ESTIMATOR_NAMES
from rft.registry import Registry
from rft.trainer.configure import load_config

EPS = 1e-6  # verl's grpo / grpo_passk epsilon (AdvantageInputs.epsilon)
TRL_EPS = 1e-4  # TRL's GRPOTrainer constant
WEPS = 1e-8  # masked_whiten's epsilon


# ------------------------------------------------------------------------------------ the hand-made batch
# row  group  mask       token rewards   score s  length
#  0     7    1 1 0      0 1 9(pad)         1       2
#  1     3    1 0 0      0 5 5(pad)         0       1
#  2     7    1 1 1      0 0 3              3       3
#  3     3    1 1 1      0 0 2              2       3
#  4     7    1 1 1      1 0 1              2       3
#  5    11    1 1 0      0 4 0(pad)         4       2     (a group of one)
# group 7: s = 1, 3, 2 (mean 2, unbiased std 1); group 3: s = 0, 2 (mean 1, unbiased std sqrt 2)
MASK = [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]]


def hand_inputs(rows=slice(None), **kw) -> AdvantageInputs:
    token_rewards = t([[0, 1, 9], [0, 5, 5], [0, 0, 3], [0, 0, 2], [1, 0, 1], [0, 4, 0]])
    group = torch.tensor([7, 3, 7, 3, 7, 11])
    return AdvantageInputs(token_rewards[rows], t(MASK)[rows], group[rows], **kw)


def on_valid(per_row: list[float], rows=slice(None)) -> torch.Tensor:
    """The expected (B, R): row i's value on its valid tokens, 0 on the masked ones."""
    mask = t(MASK)[rows]
    return t(per_row).unsqueeze(-1) * mask


def test_rloo_by_hand():
    out = compute_advantages("rloo", hand_inputs())
    # A_i = s_i - mean of the others
    # group 7: 1 - (3 + 2)/2 = -1.5;  3 - (1 + 2)/2 = 1.5;  2 - (1 + 3)/2 = 0
    # group 3: 0 - 2 = -2;  2 - 0 = 2;   group 11 (alone): unchanged, 4
    close(out.advantages, on_valid([-1.5, -2.0, 1.5, 2.0, 0.0, 4.0]))
    close(out.returns, out.advantages)


def test_opo_by_hand():
    out = compute_advantages("opo", hand_inputs())
    # group 7: b = (2*1 + 3*3 + 3*2) / (2 + 3 + 3) = 17/8 = 2.125 -> 1 - 2.125, 3 - 2.125, 2 - 2.125
    # group 3: b = (1*0 + 3*2) / (1 + 3) = 1.5 -> -1.5, 0.5;   group 11 (alone): b = 0 -> 4
    close(out.advantages, on_valid([-1.125, -1.5, 0.875, 0.5, -0.125, 4.0]))


def test_gpg_by_hand():
    out = compute_advantages("gpg", hand_inputs())
    # scores 1, 0, 3, 2, 2, 4: five non-zero of B = 6 -> alpha = 6/5 = 1.2
    # centred: group 7 -> -1, 1, 0; group 3 -> -1, 1; group 11 (alone, mean 0) -> 4;  times 1.2
    close(out.advantages, on_valid([-1.2, -1.2, 1.2, 1.2, 0.0, 4.8]))


def test_gpg_all_zero_scores_give_zero_advantages():
    # alpha = B / max(1, 0) = 4, but every centred score is 0
    inputs = AdvantageInputs(torch.zeros(4, 2, dtype=F64), torch.ones(4, 2, dtype=F64), torch.tensor([0, 0, 1, 1]))
    close(compute_advantages("gpg", inputs).advantages, torch.zeros(4, 2))


def test_asymre_by_hand():
    out = compute_advantages("asymre", hand_inputs())  # baseline_shift -0.1 (Trinity's default)
    # group 7: b = 2 - 0.1 = 1.9 -> -0.9, 1.1, 0.1;  group 3: b = 0.9 -> -0.9, 1.1;  group 11: b = 0 -> 4
    close(out.advantages, on_valid([-0.9, -0.9, 1.1, 1.1, 0.1, 4.0]))
    shifted = compute_advantages("asymre", hand_inputs(baseline_shift=0.5))
    # group 7: b = 2.5 -> -1.5, 0.5, -0.5;  group 3: b = 1.5 -> -1.5, 0.5;  group 11 -> 4
    close(shifted.advantages, on_valid([-1.5, -1.5, 0.5, 0.5, -0.5, 4.0]))


def test_reinforce_is_the_score_itself():
    close(compute_advantages("reinforce", hand_inputs()).advantages, on_valid([1.0, 0.0, 3.0, 2.0, 2.0, 4.0]))


def test_rec_by_hand():
    # std_normalize false (Trinity's default, norm_adv_by_std_in_grpo false): s - group mean; group 11 alone: 4
    out = compute_advantages("rec", hand_inputs(norm_adv_by_std_in_grpo=False))
    close(out.advantages, on_valid([-1.0, -1.0, 1.0, 1.0, 0.0, 4.0]))
    # std_normalize true: over the POPULATION std: group 7 sqrt(2/3) = 0.816497, group 3 sqrt(1) = 1
    out = compute_advantages("rec", hand_inputs())
    p7 = math.sqrt(2 / 3) + 1e-6
    close(out.advantages, on_valid([-1 / p7, -1 / (1 + 1e-6), 1 / p7, 1 / (1 + 1e-6), 0.0, 4 / (1 + 1e-6)]))


def test_raft_keeps_the_best_response_of_each_group():
    # group 7: scores 1, 3, 2 -> row 2; group 3: 0, 2 -> row 3; group 11 alone -> row 5
    out = compute_advantages("raft", hand_inputs())
    close(out.advantages, on_valid([0.0, 0.0, 1.0, 1.0, 0.0, 1.0]))
    assert out.loss_mask.tolist() == [False, False, True, True, False, True]
    # a tie for the best keeps every row holding it (whatever the rows' order)
    tied = AdvantageInputs(t([[1.0], [1.0], [0.0]]), t([[1], [1], [1]]), torch.tensor([0, 0, 0]))
    assert compute_advantages("raft", tied).loss_mask.tolist() == [True, True, False]


def test_grpo_std_threshold_and_batch_std_by_hand():
    # std_threshold 1.2: group 7 (std 1) and group 11 (alone) leave the loss, group 3 (std sqrt 2) stays;
    # the advantages themselves are grpo's
    out = compute_advantages("grpo", hand_inputs(std_threshold=1.2))
    assert out.loss_mask.tolist() == [False, True, False, True, False, False]
    close(out.advantages, compute_advantages("grpo", hand_inputs()).advantages)
    assert compute_advantages("grpo", hand_inputs()).loss_mask is None
    # std_cal_level batch: the group mean over the std of all six scores 1, 0, 3, 2, 2, 4 (mean 2, unbiased
    # variance (1 + 4 + 1 + 0 + 0 + 4) / 5 = 2); group 11 alone keeps mean 0
    out = compute_advantages("grpo", hand_inputs(std_cal_level="batch"))
    sd = math.sqrt(2.0) + 1e-6
    close(out.advantages, on_valid([-1 / sd, -1 / sd, 1 / sd, 1 / sd, 0.0, 4 / sd]))
    with pytest.raises(ValueError, match="std_cal_level"):
        compute_advantages("grpo", hand_inputs(std_cal_level="batch", scale_rewards="group"))


def test_opmd_mean_by_hand():
    out = compute_advantages("opmd", hand_inputs())
    # b = group mean: group 7 -> -1, 1, 0; group 3 -> -1, 1; group 11 (alone, b = 0) -> 4
    close(out.advantages, on_valid([-1.0, -1.0, 1.0, 1.0, 0.0, 4.0]))


def test_opmd_logavgexp_by_hand():
    out = compute_advantages("opmd", hand_inputs(opmd_baseline="logavgexp", tau=0.5))
    # b = tau * log mean exp(s / tau) = 0.5 * log mean exp(2 s)
    # group 7: 0.5 * log((e^2 + e^6 + e^4) / 3) = 0.5 * log((7.389056 + 403.428793 + 54.598150) / 3)
    #        = 0.5 * log(155.138666) = 0.5 * 5.044319 = 2.522160
    # group 3: 0.5 * log((e^0 + e^4) / 2) = 0.5 * log(27.799075) = 0.5 * 3.325003 = 1.662502
    b7, b3 = 2.5221595, 1.6625015
    expected = on_valid([1 - b7, 0 - b3, 3 - b7, 2 - b3, 2 - b7, 4.0])
    close(out.advantages, expected, atol=1e-6)
    # tau -> large: the baseline tends to the mean; tau -> small: to the max
    close(compute_advantages("opmd", hand_inputs(opmd_baseline="logavgexp", tau=1e4)).advantages,
          on_valid([-1.0, -1.0, 1.0, 1.0, 0.0, 4.0]), atol=1e-3)
    close(compute_advantages("opmd", hand_inputs(opmd_baseline="logavgexp", tau=1e-3)).advantages,
          on_valid([-2.0, -2.0, 0.0, 0.0, -1.0, 4.0]), atol=1e-2)


def test_opmd_bad_option_raises():
    with pytest.raises(ValueError, match="opmd_baseline='median'.*'mean', 'logavgexp'"):
        compute_advantages("opmd", hand_inputs(opmd_baseline="median"))
    with pytest.raises(ValueError, match="tau must be > 0"):
        compute_advantages("opmd", hand_inputs(opmd_baseline="logavgexp", tau=0.0))


def test_grpo_passk_by_hand():
    rows = slice(0, 5)  # groups 7 and 3 only: pass@k needs >= 2 responses per group
    out = compute_advantages("grpo_passk", hand_inputs(rows))
    # group 7: s = 1, 3, 2 -> best row 2, margin 3 - 2 = 1, std 1 -> 1 / (1 + eps)
    # group 3: s = 0, 2    -> best row 3, margin 2 - 0 = 2, std sqrt 2 -> 2 / (sqrt 2 + eps)
    a7, a3 = 1.0 / (1.0 + EPS), 2.0 / (math.sqrt(2.0) + EPS)
    close(out.advantages, on_valid([0.0, 0.0, a7, a3, 0.0], rows))
    raw = compute_advantages("grpo_passk", hand_inputs(rows, norm_adv_by_std_in_grpo=False))
    close(raw.advantages, on_valid([0.0, 0.0, 1.0, 2.0, 0.0], rows))


def test_grpo_passk_tie_at_the_top_gives_zero():
    # scores 2, 2, 1 in one group: margin 2 - 2 = 0 for the best, 0 for the others
    inputs = AdvantageInputs(t([[2.0], [2.0], [1.0]]), t([[1], [1], [1]]), torch.tensor([0, 0, 0]))
    close(compute_advantages("grpo_passk", inputs).advantages, [[0.0], [0.0], [0.0]])


def test_grpo_passk_needs_two_responses_per_group():
    with pytest.raises(ValueError, match=r"grpo_passk needs at least 2 responses.*rollout\.n >= 2"):
        compute_advantages("grpo_passk", hand_inputs())  # group 11 has one


def test_reinforce_plus_plus_baseline_by_hand():
    out = compute_advantages("reinforce_plus_plus_baseline", hand_inputs())
    # centred a = s - group mean (group of one: mean 0): rows -1, -1, 1, 1, 0, 4
    # on valid tokens (lengths 2, 1, 3, 3, 3, 2): -1 -1 | -1 | 1 1 1 | 1 1 1 | 0 0 0 | 4 4   (n = 14)
    # sum = -2 - 1 + 3 + 3 + 0 + 8 = 11 -> mean 11/14
    # sum of squares = 2 + 1 + 3 + 3 + 0 + 32 = 41; centred: 41 - 14 * (11/14)^2 = 41 - 121/14 = 453/14
    # unbiased var = (453/14) / 13 = 453/182
    mean, scale = 11 / 14, 1 / math.sqrt(453 / 182 + WEPS)
    close(out.advantages, on_valid([(a - mean) * scale for a in (-1, -1, 1, 1, 0, 4)]))
    close(out.returns, out.advantages)


def remax_inputs(gamma: float, baselines=(0.5, 3.0)) -> AdvantageInputs:
    # row 0 scores 1 on its last valid token (the 5.0 is padding); row 1 scores 2 on token 1
    return AdvantageInputs(t([[0, 0, 1, 5], [0, 2, 0, 0]]), t([[1, 1, 1, 0], [1, 1, 0, 0]]),
                           torch.tensor([0, 1]), gamma=gamma,
                           reward_baselines=None if baselines is None else t(baselines))


def test_remax_by_hand():
    out = compute_advantages("remax", remax_inputs(1.0))
    # return-to-go: row 0 = [1, 1, 1, 0], row 1 = [2, 2, 0, 0]; minus baselines 0.5 and 3 on valid tokens
    close(out.returns, [[1.0, 1.0, 1.0, 0.0], [2.0, 2.0, 0.0, 0.0]])
    close(out.advantages, [[0.5, 0.5, 0.5, 0.0], [-1.0, -1.0, 0.0, 0.0]])
    half = compute_advantages("remax", remax_inputs(0.5))
    # gamma 0.5: row 0 = [0.25, 0.5, 1, 0], row 1 = [1, 2, 0, 0]
    close(half.returns, [[0.25, 0.5, 1.0, 0.0], [1.0, 2.0, 0.0, 0.0]])
    close(half.advantages, [[-0.25, 0.0, 0.5, 0.0], [-2.0, -1.0, 0.0, 0.0]])


def test_remax_carries_the_return_across_a_masked_span():
    # row 0: token 1 is an environment token inside the response (masked: its reward 7 is not read)
    inputs = AdvantageInputs(t([[0, 7, 0, 2], [1, 0, 0, 0]]), t([[1, 0, 1, 1], [1, 0, 0, 0]]),
                             torch.tensor([0, 1]), reward_baselines=t([0.5, 3.0]))
    out = compute_advantages("remax", inputs)
    # gamma 1: row 0 G = [2, -, 2, 2] (token 0 sees the 2 past the gap; restarting at the gap gave 0), minus 0.5
    close(out.returns, [[2.0, 0.0, 2.0, 2.0], [1.0, 0.0, 0.0, 0.0]])
    close(out.advantages, [[1.5, 0.0, 1.5, 1.5], [-2.0, 0.0, 0.0, 0.0]])
    inputs.gamma = 0.5  # the masked token does not discount: G3 = 2, G2 = 0.5 * 2 = 1, G0 = 0.5 * 1 = 0.5
    close(compute_advantages("remax", inputs).returns, [[0.5, 0.0, 1.0, 2.0], [1.0, 0.0, 0.0, 0.0]])


def test_reinforce_plus_plus_carries_the_return_across_a_masked_span():
    # valid tokens 0, 2, 3 (token 1 masked, its reward 9 not read), gamma 0.5:
    #   G3 = 1, G2 = 0 + 0.5 * 1 = 0.5, G0 = 0 + 0.5 * 0.5 = 0.25 (restarting at the gap gave G0 = 0)
    inputs = AdvantageInputs(t([[0, 9, 0, 1]]), t([[1, 0, 1, 1]]), torch.tensor([0]), gamma=0.5)
    out = compute_advantages("reinforce_plus_plus", inputs)
    close(out.returns, [[0.25, 0.0, 0.5, 1.0]])
    # whitened over 0.25, 0.5, 1: mean 7/12; squared deviations 1/9 + 1/144 + 25/144 = 7/24, unbiased var 7/48
    mean, scale = 7 / 12, 1 / math.sqrt(7 / 48 + WEPS)
    close(out.advantages, [[(0.25 - mean) * scale, 0.0, (0.5 - mean) * scale, (1.0 - mean) * scale]])


def test_gdpo_by_hand():
    # two reward dimensions, weights (1, 0.5), no std division; rows 0-2 share a group, row 3 is alone (mean 0)
    #   dim 0: 1 0 2 | 5 -> group mean 1: 0 -1 1 | 5        dim 1: 0 0 3 | 1 -> group mean 1: -1 -1 2 | 1
    #   sum: 0 - 0.5 = -0.5, -1 - 0.5 = -1.5, 1 + 1 = 2, 5 + 0.5 = 5.5
    # on valid tokens (lengths 2, 1, 2, 1): -0.5 -0.5 | -1.5 | 2 2 | 5.5 (n = 6), mean 7/6;
    # squared deviations 2 (5/3)^2 + (8/3)^2 + 2 (5/6)^2 + (13/3)^2 = 591/18, unbiased var 591/90
    inputs = AdvantageInputs(t([[0, 0], [0, 0], [0, 0], [0, 0]]), t([[1, 1], [1, 0], [1, 1], [1, 0]]),
                             torch.tensor([4, 4, 4, 9]), reward_components=t([[1, 0], [0, 0], [2, 3], [5, 1]]),
                             gdpo_reward_weights=(1.0, 0.5), norm_adv_by_std_in_grpo=False)
    out = compute_advantages("gdpo", inputs)
    mean, scale = 7 / 6, 1 / math.sqrt(591 / 90 + WEPS)
    expected = [[(x - mean) * scale if m else 0.0 for m in row] for x, row in
                zip((-0.5, -1.5, 2.0, 5.5), [[1, 1], [1, 0], [1, 1], [1, 0]])]
    close(out.advantages, expected)
    close(out.returns, out.advantages)
    # with the std (verl's default): dim 0's group std 1, dim 1's sqrt 3; the lone row keeps std 1
    inputs.norm_adv_by_std_in_grpo = True
    a0 = [0.0, -1 / (1 + EPS), 1 / (1 + EPS), 5 / (1 + EPS)]
    a1 = [-1 / (math.sqrt(3) + EPS), -1 / (math.sqrt(3) + EPS), 2 / (math.sqrt(3) + EPS), 1 / (1 + EPS)]
    total = [x + 0.5 * y for x, y in zip(a0, a1)]
    flat = [total[0], total[0], total[1], total[2], total[2], total[3]]
    m = sum(flat) / 6
    s = 1 / math.sqrt(sum((x - m) ** 2 for x in flat) / 5 + WEPS)
    close(compute_advantages("gdpo", inputs).advantages,
          [[(total[0] - m) * s] * 2, [(total[1] - m) * s, 0.0], [(total[2] - m) * s] * 2, [(total[3] - m) * s, 0.0]])
    with pytest.raises(ValueError, match="'gdpo' needs AdvantageInputs.reward_components"):
        compute_advantages("gdpo", AdvantageInputs(t([[1.0]]), t([[1]]), torch.tensor([0])))


HALF = math.log(0.5)


def otb_inputs(**kw) -> AdvantageInputs:
    # rows 0 and 1 share a group, row 2 is alone. pi = exp(old); w = 1 - 2 pi + sum pi^2:
    #   row 0: pi 0.5, sum pi^2 0.5 -> w 0.5 0.5 0.5, W 0.5 1 1.5; rewards 0 0 1 -> G 1 1 1
    #   row 1: pi 0.5 / 0.25, sum pi^2 0.5 / 0.25 -> w 0.5 0.75, W 0.5 1.25; rewards 0 3 (pad 8) -> G 3 3
    #   row 2: token 1 masked (reward 9 not read): G 3 - 1
    nan = math.nan
    return AdvantageInputs(
        token_rewards=t([[0, 0, 1], [0, 3, 8], [2, 9, 1]]), response_mask=t([[1, 1, 1], [1, 1, 0], [1, 0, 1]]),
        group=torch.tensor([0, 0, 1]), **{
            "old_logprobs": t([[HALF, HALF, HALF], [HALF, math.log(0.25), nan], [HALF, nan, HALF]]),
            "sum_pi_squared": t([[0.5, 0.5, 0.5], [0.5, 0.25, nan], [0.5, nan, 0.5]]), **kw})


def test_optimal_token_baseline_by_hand():
    out = compute_advantages("optimal_token_baseline", otb_inputs())
    # per column b_t = sum G W / (sum W + 1e-8) over the group's valid entries:
    #   t0 (1 * 0.5 + 3 * 0.5) / 1 = 2, t1 (1 * 1 + 3 * 1.25) / 2.25 = 2.1111, t2 (1 * 1.5) / 1.5 = 1
    # row 0 is the unique longest (3 > 2): its baseline is 0 from column 2 on -> A row 0 = 1 - 2, 1 - 2.1111, 1
    b0, b1 = 2.0 / (1 + 1e-8), 4.75 / (2.25 + 1e-8)
    close(out.advantages, [[1 - b0, 1 - b1, 1.0], [3 - b0, 3 - b1, 0.0], [3.0, 0.0, 1.0]])  # row 2 alone: A = G
    close(out.returns, [[1.0, 1.0, 1.0], [3.0, 3.0, 0.0], [3.0, 0.0, 1.0]])
    # rollout IS weights 2 on row 1 scale its w by 4: w 2 3, W 2 5 -> t0 (0.5 + 3 * 2) / 2.5 = 2.6,
    # t1 (1 + 3 * 5) / 6 = 2.6667
    weighted = compute_advantages("optimal_token_baseline",
                                  otb_inputs(rollout_is_weights=t([[1, 1, 1], [2, 2, 0], [1, 0, 1]])))
    b0, b1 = 6.5 / (2.5 + 1e-8), 16 / (6 + 1e-8)
    close(weighted.advantages, [[1 - b0, 1 - b1, 1.0], [3 - b0, 3 - b1, 0.0], [3.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="'optimal_token_baseline' needs AdvantageInputs.sum_pi_squared"):
        compute_advantages("optimal_token_baseline", otb_inputs(sum_pi_squared=None))


def test_tir_optimal_token_baseline_aligns_tokens_by_their_index_among_the_policy_tokens():
    # row 0: a masked tool span at column 1; w = 0.5 on every valid token (pi 0.5, sum pi^2 0.5)
    #   row 0 valid columns 0, 2, 3 -> indices 0, 1, 2: W 0.5 1 1.5, rewards 0 (9) 0 1 -> G 1 1 1
    #   row 1 valid columns 0, 1    -> indices 0, 1:    W 0.5 1,     rewards 0 2     -> G 2 2
    # rows 2 (valid) and 3 (empty) share group 1: row 3 does not count, so row 2 is alone (b = 0, A = G)
    inputs = AdvantageInputs(
        token_rewards=t([[0, 9, 0, 1], [0, 2, 0, 0], [0, 4, 0, 0], [0, 0, 0, 0]]),
        response_mask=t([[1, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]), group=torch.tensor([0, 0, 1, 1]),
        old_logprobs=torch.full((4, 4), HALF, dtype=F64), sum_pi_squared=torch.full((4, 4), 0.5, dtype=F64))
    tir = compute_advantages("tir_optimal_token_baseline", inputs)
    # by index: b0 = (1 * 0.5 + 2 * 0.5) / 1 = 1.5, b1 = (1 * 1 + 2 * 1) / 2 = 1.5, b2 = 1.5 / 1.5 = 1, and row 0
    # (unique longest, 3 > 2) gets 0 from index 2 on: row 0 A = -0.5 -0.5 1, row 1 A = 0.5 0.5
    e = 1e-8
    b0, b1 = 1.5 / (1 + e), 3 / (2 + e)
    close(tir.advantages, [[1 - b0, 0, 1 - b1, 1], [2 - b0, 2 - b1, 0, 0], [4, 4, 0, 0], [0, 0, 0, 0]])
    # by column (optimal_token_baseline): column 1 is row 1's alone (b 2), so row 1's second token gets A 0 and
    # row 0 compares its last tokens with nothing: A row 0 = 1 - 1.5, -, 1, 1
    column = compute_advantages("optimal_token_baseline", inputs)
    close(column.advantages, [[1 - b0, 0, 1, 1], [2 - b0, 2 - 2 / (1 + e), 0, 0], [4, 4, 0, 0], [0, 0, 0, 0]])


def test_remax_without_baselines_raises():
    with pytest.raises(ValueError, match="'remax' needs AdvantageInputs.reward_baselines"):
        compute_advantages("remax", remax_inputs(1.0, baselines=None))


def gae_inputs() -> AdvantageInputs:
    # row 1's last token is padding (value 9 must not be read); row 2 has a masked token in the middle
    # (an observation token: skipped, its reward 7 and value 9 never read)
    return AdvantageInputs(
        token_rewards=t([[0, 0, 1], [0, 1, 0], [0, 7, 1]]),
        response_mask=t([[1, 1, 1], [1, 1, 0], [1, 0, 1]]),
        group=torch.tensor([0, 1, 2]),
        values=t([[0.5, 0.2, 0.4], [1.0, 0.3, 9.0], [0.2, 9.0, 0.5]]),
        gamma=0.9, lam=0.8,
    )


def test_gae_by_hand():
    out = compute_advantages("gae", gae_inputs())
    # gamma = 0.9, gamma * lam = 0.72; V beyond the last valid token = 0
    # row 0: t2: d = 1 - 0.4 = 0.6, A = 0.6
    #        t1: d = 0 + 0.9*0.4 - 0.2 = 0.16, A = 0.16 + 0.72*0.6 = 0.592
    #        t0: d = 0 + 0.9*0.2 - 0.5 = -0.32, A = -0.32 + 0.72*0.592 = 0.10624
    # row 1: t2 masked; t1: d = 1 - 0.3 = 0.7, A = 0.7
    #        t0: d = 0.9*0.3 - 1.0 = -0.73, A = -0.73 + 0.72*0.7 = -0.226
    # row 2: t2: d = 1 - 0.5 = 0.5, A = 0.5; t1 masked (skipped)
    #        t0: d = 0.9*0.5 - 0.2 = 0.25 (next valid value), A = 0.25 + 0.72*0.5 = 0.61
    raw = [[0.10624, 0.592, 0.6], [-0.226, 0.7, 0.0], [0.61, 0.0, 0.5]]
    # returns = A + V on valid tokens
    close(out.returns, [[0.60624, 0.792, 1.0], [0.774, 1.0, 0.0], [0.81, 0.0, 1.0]], atol=1e-12)
    # whitened over the 7 valid A: sum = 2.88224, mean = 0.41174857...
    valid = [0.10624, 0.592, 0.6, -0.226, 0.7, 0.61, 0.5]
    mean = sum(valid) / 7
    var = sum((a - mean) ** 2 for a in valid) / 6
    mask = [[1, 1, 1], [1, 1, 0], [1, 0, 1]]
    expected = [[(a - mean) / math.sqrt(var + WEPS) if m else 0.0 for a, m in zip(ra, rm)] for ra, rm in zip(raw, mask)]
    close(out.advantages, expected, atol=1e-9)


def test_gae_needs_values():
    inputs = gae_inputs()
    inputs.values = None
    with pytest.raises(ValueError, match="'gae' needs AdvantageInputs.values"):
        compute_advantages("gae", inputs)


def test_grpo_trl_scale_rewards_by_hand():
    # TRL: mean always per group (a group of one is its own mean -> 0); std + 1e-4
    group = compute_advantages("grpo", hand_inputs(scale_rewards="group")).advantages
    # group 7: (-1, 1, 0) / (1 + 1e-4); group 3: (-1, 1) / (sqrt 2 + 1e-4); group 11: 0
    g7, g3 = 1 / (1 + TRL_EPS), 1 / (math.sqrt(2) + TRL_EPS)
    close(group, on_valid([-g7, -g3, g7, g3, 0.0, 0.0]))
    batch = compute_advantages("grpo", hand_inputs(scale_rewards="batch")).advantages
    # batch std of 1, 0, 3, 2, 2, 4: mean 2, squares 1 + 4 + 1 + 0 + 0 + 4 = 10, unbiased var 10/5 = 2
    b = 1 / (math.sqrt(2) + TRL_EPS)
    close(batch, on_valid([-b, -b, b, b, 0.0, 0.0]))
    none = compute_advantages("grpo", hand_inputs(scale_rewards="none")).advantages
    close(none, on_valid([-1.0, -1.0, 1.0, 1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="scale_rewards='std'"):
        compute_advantages("grpo", hand_inputs(scale_rewards="std"))


# ------------------------------------------------------------------------------ slow obvious references
def _rows(inputs: AdvantageInputs):
    rewards, mask, group = inputs.token_rewards, inputs.response_mask, inputs.group.tolist()
    B, R = rewards.shape
    valid = [[bool(mask[i, j]) for j in range(R)] for i in range(B)]
    scores = [sum(float(rewards[i, j]) for j in range(R) if valid[i][j]) for i in range(B)]
    members = {g: [k for k in range(B) if group[k] == g] for g in group}
    return B, R, valid, scores, [members[g] for g in group]


def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs):  # unbiased; 0 for one value
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0


def _whiten(adv, valid):
    flat = [adv[i][j] for i in range(len(adv)) for j in range(len(adv[0])) if valid[i][j]]
    if not flat:
        return [[0.0] * len(adv[0]) for _ in adv]
    m = _mean(flat)
    var = sum((x - m) ** 2 for x in flat) / (len(flat) - 1) if len(flat) > 1 else 0.0
    return [[(adv[i][j] - m) / math.sqrt(var + WEPS) if valid[i][j] else 0.0 for j in range(len(adv[0]))]
            for i in range(len(adv))]


def _return_to_go(inputs, valid):
    B, R = inputs.token_rewards.shape
    out = [[0.0] * R for _ in range(B)]
    for i in range(B):
        running = 0.0
        for j in reversed(range(R)):
            if not valid[i][j]:  # skipped: the return carries across masked tokens
                continue
            running = float(inputs.token_rewards[i, j]) + inputs.gamma * running
            out[i][j] = running
    return out


def _slow_otb(inputs, valid, groups, tir: bool) -> list[list[float]]:
    """The optimal token baseline by loops, as verl writes it: per group, per column (or per index among the
    valid tokens for tir), b = sum G W / (sum W + 1e-8); the unique longest row's tail gets b = 0."""
    B, R = inputs.token_rewards.shape
    G, W = [[0.0] * R for _ in range(B)], [[0.0] * R for _ in range(B)]
    for i in range(B):
        running, acc = 0.0, 0.0
        for j in reversed(range(R)):
            if valid[i][j]:
                running += float(inputs.token_rewards[i, j])
                G[i][j] = running
        for j in range(R):
            if valid[i][j]:
                w = 1 - 2 * math.exp(float(inputs.old_logprobs[i, j])) + float(inputs.sum_pi_squared[i, j])
                if inputs.rollout_is_weights is not None:
                    w *= float(inputs.rollout_is_weights[i, j]) ** 2
                acc += w
                W[i][j] = acc
    # the rows as sequences of (position, G, W): by column, or packed by index among the valid tokens
    if tir:
        seqs = [[(j, G[i][j], W[i][j]) for j in range(R) if valid[i][j]] for i in range(B)]
    else:
        seqs = [[(j, G[i][j], W[i][j]) if valid[i][j] else (j, 0.0, 0.0) for j in range(R)] for i in range(B)]
    lengths = [sum(valid[i]) for i in range(B)]
    out = [[0.0] * R for _ in range(B)]
    for i in range(B):
        members = [k for k in groups[i] if lengths[k] > 0] if tir else groups[i]
        width = max(len(seqs[k]) for k in groups[i])
        base = [0.0] * width
        if len(members) > 1:
            for p in range(width):
                num = sum(seqs[k][p][1] * seqs[k][p][2] for k in members if p < len(seqs[k]))
                den = sum(seqs[k][p][2] for k in members if p < len(seqs[k]))
                base[p] = num / (den + 1e-8)
            ordered = sorted(lengths[k] for k in members)
            longest = [k for k in members if lengths[k] == ordered[-1]]
            if len(longest) == 1 and ordered[-1] > ordered[-2] and longest[0] == i:
                base = [0.0 if p >= ordered[-2] else b for p, b in enumerate(base)]
        for p, (j, g, _) in enumerate(seqs[i]):
            if valid[i][j]:
                out[i][j] = g - base[p]
    return out


def slow(name: str, inputs: AdvantageInputs) -> list[list[float]]:
    B, R, valid, s, groups = _rows(inputs)
    per_row = None
    if name == "grpo":
        mode = inputs.scale_rewards
        per_row = []
        for i in range(B):
            g = [s[k] for k in groups[i]]
            if mode is None:
                mean, std = (_mean(g), _std(g)) if len(g) > 1 else (0.0, 1.0)
                if inputs.std_cal_level == "batch":
                    std = _std(s) if B > 1 else 1.0
                a = (s[i] - mean) / (std + inputs.epsilon) if inputs.norm_adv_by_std_in_grpo else s[i] - mean
            else:
                a = s[i] - _mean(g)
                if mode == "group":
                    a /= _std(g) + TRL_EPS
                elif mode == "batch":
                    a /= _std(s) + TRL_EPS
            per_row.append(a)
    elif name == "grpo_passk":
        per_row = [0.0] * B
        for i in range(B):
            g = groups[i]
            best = max(g, key=lambda k: (s[k], -k))  # highest score, first row among ties
            if i != best:
                continue
            second = max(s[k] for k in g if k != best)
            a = s[best] - second
            per_row[i] = a / (_std([s[k] for k in g]) + inputs.epsilon) if inputs.norm_adv_by_std_in_grpo else a
    elif name == "rloo":
        per_row = [s[i] - _mean([s[k] for k in groups[i] if k != i]) if len(groups[i]) > 1 else s[i]
                   for i in range(B)]
    elif name == "opo":
        per_row = []
        for i in range(B):
            lens = {k: sum(valid[k]) for k in groups[i]}
            total = sum(lens.values())
            b = sum(lens[k] * s[k] for k in groups[i]) / total if len(groups[i]) > 1 and total else 0.0
            per_row.append(s[i] - b)
    elif name == "gpg":
        alpha = B / max(1, sum(1 for x in s if x != 0))
        per_row = [alpha * (s[i] - (_mean([s[k] for k in groups[i]]) if len(groups[i]) > 1 else 0.0))
                   for i in range(B)]
    elif name == "opmd":
        tau = inputs.tau
        per_row = []
        for i in range(B):
            g = [s[k] for k in groups[i]]
            if len(g) == 1:
                b = 0.0
            elif inputs.opmd_baseline == "mean":
                b = _mean(g)
            else:
                b = tau * math.log(_mean([math.exp(x / tau) for x in g]))
            per_row.append(s[i] - b)
    elif name == "asymre":
        per_row = [s[i] - (_mean([s[k] for k in groups[i]]) + inputs.baseline_shift if len(groups[i]) > 1 else 0.0)
                   for i in range(B)]
    elif name == "reinforce":
        per_row = list(s)
    elif name == "rec":
        per_row = []
        for i in range(B):
            g = [s[k] for k in groups[i]]
            mean, pstd = (_mean(g), math.sqrt(_mean([(x - _mean(g)) ** 2 for x in g]))) if len(g) > 1 else (0.0, 1.0)
            per_row.append((s[i] - mean) / (pstd + inputs.epsilon) if inputs.norm_adv_by_std_in_grpo else s[i] - mean)
    elif name == "raft":
        per_row = [float(s[i] == max(s[k] for k in groups[i])) for i in range(B)]
    if per_row is not None:
        return [[per_row[i] if valid[i][j] else 0.0 for j in range(R)] for i in range(B)]
    if name == "reinforce_plus_plus_baseline":
        centred = [s[i] - (_mean([s[k] for k in groups[i]]) if len(groups[i]) > 1 else 0.0) for i in range(B)]
        return _whiten([[centred[i]] * R for i in range(B)], valid)
    if name == "gdpo":
        comps = inputs.reward_components
        weights = inputs.gdpo_reward_weights or [1.0] * comps.shape[1]
        total = [0.0] * B
        for k, w in enumerate(weights):
            c = [float(comps[i, k]) for i in range(B)]
            for i in range(B):
                g = [c[j] for j in groups[i]]
                mean, std = (_mean(g), _std(g)) if len(g) > 1 else (0.0, 1.0)
                a = (c[i] - mean) / (std + inputs.epsilon) if inputs.norm_adv_by_std_in_grpo else c[i] - mean
                total[i] += w * a
        return _whiten([[total[i]] * R for i in range(B)], valid)
    if name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        return _slow_otb(inputs, valid, groups, tir=name.startswith("tir"))
    if name == "reinforce_plus_plus":
        return _whiten(_return_to_go(inputs, valid), valid)
    if name == "remax":
        g = _return_to_go(inputs, valid)
        return [[g[i][j] - float(inputs.reward_baselines[i]) if valid[i][j] else 0.0 for j in range(R)]
                for i in range(B)]
    if name == "gae":
        adv = [[0.0] * R for _ in range(B)]
        for i in range(B):
            next_v, last = 0.0, 0.0
            for j in reversed(range(R)):
                if not valid[i][j]:
                    continue
                v = float(inputs.values[i, j])
                delta = float(inputs.token_rewards[i, j]) + inputs.gamma * next_v - v
                last = delta + inputs.gamma * inputs.lam * last
                next_v = v
                adv[i][j] = last
        return _whiten(adv, valid)
    raise AssertionError(f"no slow reference for {name}")


def random_inputs(num_prompts: int, G: int, R: int, seed: int, **kw) -> AdvantageInputs:
    """B = num_prompts * G rows in shuffled order with arbitrary group ids; random lengths 0..R (some rows
    empty) with holes inside some responses (masked tool / environment tokens); rewards, values and baselines
    everywhere, including NaN on masked tokens (which must never be read).
    Odd seeds round the rewards: ties, zero scores and zero-variance groups, as with 0/1 rewards."""
    gen = torch.Generator().manual_seed(seed)
    B = num_prompts * G
    ids = torch.randperm(10 * num_prompts, generator=gen)[:num_prompts] * 7 - 5
    group = ids.repeat_interleave(G)[torch.randperm(B, generator=gen)]
    lengths = torch.randint(0, R + 1, (B,), generator=gen)
    holes = (torch.rand(B, R, generator=gen) < 0.2) & (torch.arange(R) > 0)  # never the first token
    mask = ((torch.arange(R).unsqueeze(0) < lengths.unsqueeze(1)) & ~holes).to(F64)
    rewards = torch.randn(B, R, generator=gen, dtype=F64)
    if seed % 2:
        rewards = rewards.round()
    values = torch.randn(B, R, generator=gen, dtype=F64)
    rewards = torch.where(mask.bool(), rewards, torch.full_like(rewards, math.nan))
    values = torch.where(mask.bool(), values, torch.full_like(values, math.nan))
    baselines = torch.randn(B, generator=gen, dtype=F64)
    components = torch.randn(B, 3, generator=gen, dtype=F64)
    if seed % 2:
        components = components.round()
    pi = torch.rand(B, R, generator=gen, dtype=F64) * 0.98 + 0.01
    sum_pi2 = pi.square() + torch.rand(B, R, generator=gen, dtype=F64) * (1 - pi).square()  # a valid sum of p^2
    old, sum_pi2 = (torch.where(mask.bool(), x, torch.full_like(x, math.nan)) for x in (pi.log(), sum_pi2))
    if kw.pop("random_is_weights", False):
        kw["rollout_is_weights"] = torch.rand(B, R, generator=gen, dtype=F64) * 2 * mask
    return AdvantageInputs(rewards, mask, group, values=values, reward_baselines=baselines,
                           reward_components=components, old_logprobs=old, sum_pi_squared=sum_pi2, **kw)


COMBOS = [(1, 1, 1, 0), (3, 1, 4, 1), (2, 2, 3, 2), (4, 3, 5, 3), (5, 4, 7, 4), (3, 8, 6, 5), (7, 5, 9, 6)]
# (estimator, options): every registered name, and every option that changes the formula
VARIANTS = [
    ("gae", {"gamma": 0.9, "lam": 0.8}), ("gae", {}),
    ("grpo", {}), ("grpo", {"norm_adv_by_std_in_grpo": False}),
    ("grpo", {"scale_rewards": "group"}), ("grpo", {"scale_rewards": "batch"}), ("grpo", {"scale_rewards": "none"}),
    ("grpo_passk", {}), ("grpo_passk", {"norm_adv_by_std_in_grpo": False}),
    ("rloo", {}), ("reinforce_plus_plus", {"gamma": 0.9}),
    ("reinforce_plus_plus_baseline", {}), ("remax", {}), ("remax", {"gamma": 0.7}), ("opo", {}), ("gpg", {}),
    ("opmd", {}), ("opmd", {"opmd_baseline": "logavgexp", "tau": 0.5}), ("opmd", {"opmd_baseline": "logavgexp"}),
    ("asymre", {}), ("asymre", {"baseline_shift": 0.3}),
    ("grpo", {"std_cal_level": "batch"}), ("grpo", {"std_threshold": 0.5}),
    ("reinforce", {}), ("rec", {"norm_adv_by_std_in_grpo": False}), ("rec", {}), ("raft", {}),
    ("gdpo", {}), ("gdpo", {"norm_adv_by_std_in_grpo": False, "gdpo_reward_weights": (1.0, 0.5, -2.0)}),
    ("optimal_token_baseline", {}), ("optimal_token_baseline", {"random_is_weights": True}),
    ("tir_optimal_token_baseline", {}), ("tir_optimal_token_baseline", {"random_is_weights": True}),
]


def test_variants_cover_the_registry():
    assert {name for name, _ in VARIANTS} == set(ADV_ESTIMATORS.names())


@pytest.mark.parametrize("num_prompts,G,R,seed", COMBOS)
@pytest.mark.parametrize("name,options", VARIANTS, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in VARIANTS])
def test_matches_slow_loop(name, options, num_prompts, G, R, seed):
    inputs = random_inputs(num_prompts, G, R, seed, **options)
    if estimator_spec(name).min_group_size > G:
        with pytest.raises(ValueError, match="at least 2 responses"):
            compute_advantages(name, inputs)
        return
    out = compute_advantages(name, inputs)
    expected = t(slow(name, inputs))
    close(out.advantages, expected, atol=1e-9)
    assert torch.isfinite(out.advantages).all() and torch.isfinite(out.returns).all()


@pytest.mark.parametrize("name", sorted(ADV_ESTIMATORS.names()))
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.long, torch.float32, F64])
def test_advantages_exactly_zero_on_masked_tokens(name, mask_dtype):
    inputs = random_inputs(4, 4, 6, seed=11)  # NaN rewards and values on every masked token
    reference = compute_advantages(name, inputs)
    inputs.response_mask = inputs.response_mask.to(mask_dtype)
    out = compute_advantages(name, inputs)
    masked = ~inputs.response_mask.bool()
    assert masked.any() and (~masked).any()
    assert (out.advantages[masked] == 0).all()
    assert (out.returns[masked] == 0).all()
    assert (out.advantages[~masked] != 0).any()  # the case is not trivially all-zero
    assert out.advantages.shape == out.returns.shape == inputs.token_rewards.shape
    close(out.advantages, reference.advantages)  # the mask's dtype changes nothing


@pytest.mark.parametrize("name", sorted(ADV_ESTIMATORS.names()))
def test_group_ids_are_labels_not_positions(name):
    base = random_inputs(3, 4, 5, seed=3)
    perm = torch.randperm(len(base.group), generator=torch.Generator().manual_seed(0))
    labels = {int(g): 1000 - 3 * i for i, g in enumerate(base.group.unique())}
    rows = {k: v[perm] for k, v in base.__dict__.items() if isinstance(v, torch.Tensor)}
    permuted = AdvantageInputs(**{**rows, "group": torch.tensor([labels[int(g)] for g in base.group[perm]])})
    close(compute_advantages(name, permuted).advantages, compute_advantages(name, base).advantages[perm])


# ------------------------------------------------------------------------------------------ registration
def test_registry_matches_the_config_choices():
    # verl's names (0.9.1, less its two *_vectorized duplicates) and Trinity-RFT's opmd and asymre
    verl = {"gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo",
            "grpo_passk", "gpg", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline"}
    assert set(ADV_ESTIMATOR_NAMES) == set(ADV_ESTIMATORS.names()) == verl | {"opmd", "asymre", "reinforce", "rec", "raft"}


def test_specs_declare_what_each_estimator_needs():
    assert estimator_spec("remax").needs == {"reward_baselines"}
    assert estimator_spec("gae").needs == {"values"}
    assert estimator_spec("grpo_passk").min_group_size == 2
    assert estimator_spec("gdpo").needs == {"reward_components"}
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        assert estimator_spec(name).needs == {"old_logprobs", "sum_pi_squared"}
    plain = set(ADV_ESTIMATORS.names()) - {"remax", "gae", "grpo_passk", "gdpo", "optimal_token_baseline",
                                           "tir_optimal_token_baseline"}
    assert all(estimator_spec(n) == EstimatorSpec() for n in plain)
    with pytest.raises(KeyError, match="nope.*asymre"):
        estimator_spec("nope")


def test_register_estimator_stores_the_spec(monkeypatch):
    registry: Registry = Registry("advantage estimator")
    monkeypatch.setattr("rft.algorithms.advantages.ADV_ESTIMATORS", registry)
    spec = EstimatorSpec(needs=frozenset({"values"}), min_group_size=3)

    @register_estimator("mine", spec=spec)
    def mine(inputs):
        return inputs

    assert registry.get("mine") is mine and mine.spec is spec


# ------------------------------------------------------------------------------------------ config keys
BASE = ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2"]


def load(*overrides: str):
    return load_config(None, [*BASE, *overrides], validate_paths=False)


REQUIRED = {"gdpo": ["algorithm.gdpo_reward_keys=[score,acc]"],
            "optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"],
            "tir_optimal_token_baseline": ["actor_rollout_ref.actor.calculate_sum_pi_squared=true"]}


@pytest.mark.parametrize("name", sorted(ADV_ESTIMATOR_NAMES))
def test_every_estimator_name_is_selectable(name):
    assert load(f"algorithm.adv_estimator={name}", *REQUIRED.get(name, [])).algorithm.adv_estimator == name


def test_estimator_options_load():
    algo = load("algorithm.adv_estimator=opmd", "algorithm.opmd_baseline=logavgexp", "algorithm.tau=0.3").algorithm
    assert (algo.opmd_baseline, algo.tau) == ("logavgexp", 0.3)
    assert load("algorithm.adv_estimator=asymre", "algorithm.baseline_shift=-0.5").algorithm.baseline_shift == -0.5
    for mode in ("group", "batch", "none"):
        assert load(f"algorithm.scale_rewards={mode}").algorithm.scale_rewards == mode
    defaults = load().algorithm
    assert (defaults.scale_rewards, defaults.opmd_baseline, defaults.tau, defaults.baseline_shift) == (
        None, "mean", 1.0, -0.1)


@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["algorithm.adv_estimator=gae", "critic.enable=false"], ["algorithm.adv_estimator='gae'",
                                                                  "needs critic values"]),
        (["algorithm.adv_estimator=ppo"], ["algorithm.adv_estimator='ppo'", "'grpo_passk'", "'opmd'"]),
        (["algorithm.adv_estimator=grpo_passk", "actor_rollout_ref.rollout.n=1"],
         ["'grpo_passk'", "actor_rollout_ref.rollout.n >= 2", "got 1"]),
        (["algorithm.scale_rewards=std"], ["algorithm.scale_rewards='std'", "'group'", "'batch'", "'none'"]),
        (["algorithm.scale_rewards=group", "algorithm.adv_estimator=rloo"],
         ["algorithm.scale_rewards='group'", "adv_estimator=grpo only", "'rloo'"]),
        (["algorithm.scale_rewards=batch", "algorithm.norm_adv_by_std_in_grpo=false"],
         ["algorithm.scale_rewards='batch'", "norm_adv_by_std_in_grpo=false", "only one"]),
        (["algorithm.opmd_baseline=max"], ["algorithm.opmd_baseline='max'", "'mean'", "'logavgexp'"]),
        (["algorithm.tau=0"], ["algorithm.tau must be > 0", "got 0"]),
        (["algorithm.adv_estimator=gdpo"], ["'gdpo' needs algorithm.gdpo_reward_keys"]),
        (["algorithm.adv_estimator=gdpo", "algorithm.gdpo_reward_keys=[a,b]", "algorithm.gdpo_reward_weights=[1.0]"],
         ["algorithm.gdpo_reward_weights=[1.0] must hold 2 finite numbers"]),
        (["algorithm.gdpo_reward_keys=[a]"], ["options of adv_estimator=gdpo", "adv_estimator='grpo'"]),
        (["algorithm.adv_estimator=optimal_token_baseline"],
         ["set actor_rollout_ref.actor.calculate_sum_pi_squared=true"]),
        (["actor_rollout_ref.actor.calculate_sum_pi_squared=true", "algorithm.rollout_correction.bypass_mode=true"],
         ["calculate_sum_pi_squared=true", "bypass_mode=true skips"]),
    ],
)
def test_estimator_config_errors(overrides, needles):
    with pytest.raises(ConfigError) as err:
        load(*overrides)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))
