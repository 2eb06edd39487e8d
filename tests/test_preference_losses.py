"""The preference losses (rft.algorithms.preference) on hand-computed numbers, with TRL's definitions."""

from __future__ import annotations

import math

import pytest
import torch

from rft.algorithms import (
    PREFERENCE_LOSSES,
    PreferenceLossInputs,
    compute_preference_loss,
    preference_loss_spec,
    preference_metrics,
    sequence_logps,
)

# Two pairs. Pair 0: pi_c=-1, pi_r=-3, ref_c=ref_r=-2 -> chosen log-ratio +1, rejected -1, logits = 2.
#            Pair 1: pi_c=-2, pi_r=-1, ref_c=ref_r=-2 -> chosen log-ratio 0, rejected +1, logits = -1.
# beta = 0.5: beta * logits = (1, -0.5).


def inputs(label_smoothing: float = 0.0) -> PreferenceLossInputs:
    return PreferenceLossInputs(
        chosen_logps=torch.tensor([-1.0, -2.0], dtype=torch.float64, requires_grad=True),
        rejected_logps=torch.tensor([-3.0, -1.0], dtype=torch.float64, requires_grad=True),
        ref_chosen_logps=torch.tensor([-2.0, -2.0], dtype=torch.float64),
        ref_rejected_logps=torch.tensor([-2.0, -2.0], dtype=torch.float64),
        beta=0.5, label_smoothing=label_smoothing)


def softplus(x: float) -> float:  # -log sigmoid(-x)
    return math.log1p(math.exp(x))


def test_registry_holds_trls_loss_types_and_the_specs_say_what_each_reads():
    assert PREFERENCE_LOSSES.names() == ["hinge", "ipo", "robust", "sigmoid"]
    assert preference_loss_spec("ipo").length_normalized and not preference_loss_spec("sigmoid").length_normalized
    assert preference_loss_spec("sigmoid").uses_label_smoothing and not preference_loss_spec("hinge").uses_label_smoothing
    with pytest.raises(KeyError, match="valid: hinge, ipo, robust, sigmoid"):
        preference_loss_spec("kto")


def test_sigmoid_is_minus_log_sigmoid_of_beta_times_the_log_ratio_difference():
    x = inputs()
    out = compute_preference_loss("sigmoid", x)
    # -log sigmoid(1) = log(1 + e^-1) = 0.313262; -log sigmoid(-0.5) = log(1 + e^0.5) = 0.974077
    assert out.losses.tolist() == pytest.approx([softplus(-1.0), softplus(0.5)])
    assert out.losses.tolist() == pytest.approx([0.3132616875, 0.9740769842])
    # the gradient of pair 0's loss wrt pi_c: -beta * (1 - sigmoid(1)) = -0.5 * 0.268941 = -0.134471
    out.losses.sum().backward()
    assert x.chosen_logps.grad.tolist() == pytest.approx([-0.5 * (1 - 1 / (1 + math.exp(-1))),
                                                          -0.5 * (1 - 1 / (1 + math.exp(0.5)))])
    assert x.rejected_logps.grad.tolist() == pytest.approx((-x.chosen_logps.grad).tolist())


def test_trls_reward_metrics():
    out = compute_preference_loss("sigmoid", inputs())
    # rewards = beta * log-ratios: chosen (0.5, 0), rejected (-0.5, 0.5)
    assert out.chosen_rewards.tolist() == [0.5, 0.0] and out.rejected_rewards.tolist() == [-0.5, 0.5]
    assert not out.chosen_rewards.requires_grad
    means = {k: float(v.mean()) for k, v in preference_metrics(out).items()}
    assert means == {"rewards/chosen": 0.25, "rewards/rejected": 0.0, "rewards/accuracies": 0.5,
                     "rewards/margins": 0.25}


def test_label_smoothing_conservative_and_robust():
    eps = 0.1
    cdpo = compute_preference_loss("sigmoid", inputs(eps)).losses
    # pair 0: 0.9 * log(1 + e^-1) + 0.1 * log(1 + e^1) = 0.281936 + 0.131326 = 0.413262
    assert cdpo.tolist() == pytest.approx([0.9 * softplus(-1) + 0.1 * softplus(1),
                                           0.9 * softplus(0.5) + 0.1 * softplus(-0.5)])
    assert cdpo[0].item() == pytest.approx(0.4132616875)
    robust = compute_preference_loss("robust", inputs(eps)).losses
    # pair 0: (0.9 * 0.313262 - 0.1 * 1.313262) / 0.8 = 0.188262
    assert robust[0].item() == pytest.approx(0.1882616875)
    assert robust[1].item() == pytest.approx((0.9 * softplus(0.5) - 0.1 * softplus(-0.5)) / 0.8)


def test_hinge_and_ipo():
    # hinge: max(0, 1 - beta * logits) = (max(0, 1 - 1), max(0, 1 + 0.5)) = (0, 1.5)
    assert compute_preference_loss("hinge", inputs()).losses.tolist() == [0.0, 1.5]
    # ipo: (logits - 1 / (2 beta))^2 = ((2 - 1)^2, (-1 - 1)^2) = (1, 4)
    assert compute_preference_loss("ipo", inputs()).losses.tolist() == [1.0, 4.0]


def test_sequence_logps_sum_or_mean_over_the_valid_tokens_only():
    token_logps = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, float("inf"), 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert sequence_logps(token_logps, mask).tolist() == [-3.0, -0.5]
    assert sequence_logps(token_logps, mask, length_normalized=True).tolist() == [-1.5, -0.5]
    assert sequence_logps(token_logps, torch.zeros_like(mask), length_normalized=True).tolist() == [0.0, 0.0]
