"""Preference losses (DPO and its variants): pure functions of sequence log-probs, registered by name.

Dimension names: N preference pairs. Every loss maps ``PreferenceLossInputs`` to ``PreferenceLossOutputs``: the
per-pair losses (N,) and the implicit rewards. With the policy's and the reference's sequence log-probs of the
chosen response (``pi_c``, ``ref_c``) and of the rejected one (``pi_r``, ``ref_r``), TRL's DPOTrainer names

    logits_i          = (pi_c - pi_r) - (ref_c - ref_r)          (the log-ratio difference)
    chosen_rewards_i  = beta * (pi_c - ref_c)                     (detached)
    rejected_rewards_i = beta * (pi_r - ref_r)                    (detached)

and logs ``rewards/chosen`` = mean chosen_rewards, ``rewards/rejected``, ``rewards/accuracies`` = mean of
``chosen_rewards > rejected_rewards`` and ``rewards/margins`` = mean of ``chosen_rewards - rejected_rewards``.

A sequence log-prob is the sum of the response tokens' log-probs (``sequence_logps``); a loss whose spec says
``length_normalized`` (ipo) takes their mean per token instead, as TRL does for IPO. The trainer asks the spec,
never the name. The loss of a batch is the mean over its pairs: the trainer divides the per-pair sum of each
micro-batch by the pairs of the whole optimizer step, so the micro-batch size never changes the gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rft.registry import Registry


@dataclass
class PreferenceLossInputs:
    chosen_logps: torch.Tensor
    """(N,) sequence log-probs of the chosen responses under the policy (requires grad)."""
    rejected_logps: torch.Tensor
    """(N,) sequence log-probs of the rejected responses under the policy (requires grad)."""
    ref_chosen_logps: torch.Tensor
    """(N,) sequence log-probs of the chosen responses under the reference policy (no grad)."""
    ref_rejected_logps: torch.Tensor
    """(N,) sequence log-probs of the rejected responses under the reference policy (no grad)."""
    beta: float = 0.1
    """The inverse temperature: the strength of the implicit KL to the reference (ipo: tau, the regulariser)."""
    label_smoothing: float = 0.0
    """sigmoid / robust: the probability eps that a pair's labels are flipped (cDPO, robust DPO)."""


@dataclass
class PreferenceLossOutputs:
    losses: torch.Tensor
    """(N,) per-pair loss; the batch loss is their mean."""
    chosen_rewards: torch.Tensor
    """(N,) beta * (pi_c - ref_c), detached."""
    rejected_rewards: torch.Tensor
    """(N,) beta * (pi_r - ref_r), detached."""


@dataclass(frozen=True)
class PreferenceLossSpec:
    length_normalized: bool = False
    """The sequence log-prob is the mean of its tokens' log-probs (TRL's IPO), not their sum."""
    uses_label_smoothing: bool = False
    """The loss reads ``label_smoothing``; the others refuse a non-zero value (config validation)."""


PreferenceLoss = Callable[[PreferenceLossInputs], PreferenceLossOutputs]
PREFERENCE_LOSSES: Registry[PreferenceLoss] = Registry("DPO loss_type")
_SPECS: dict[str, PreferenceLossSpec] = {}


def register_preference_loss(name: str, spec: PreferenceLossSpec = PreferenceLossSpec()):
    def wrap(fn: PreferenceLoss) -> PreferenceLoss:
        PREFERENCE_LOSSES.register(name)(fn)
        _SPECS[name] = spec
        return fn

    return wrap


def preference_loss_spec(name: str) -> PreferenceLossSpec:
    PREFERENCE_LOSSES.get(name)  # an unknown name lists the valid ones
    return _SPECS[name]


def sequence_logps(token_logps: torch.Tensor, mask: torch.Tensor, length_normalized: bool = False) -> torch.Tensor:
    """(N,) the sum over the valid tokens of each row of the (N, R) `token_logps` (masked entries never read);
    `length_normalized`: their mean (a row without valid tokens gives 0)."""
    valid = mask.bool()
    total = torch.where(valid, token_logps, torch.zeros((), dtype=token_logps.dtype, device=token_logps.device))
    total = total.sum(-1)
    if length_normalized:
        total = total / valid.sum(-1).to(total.dtype).clamp(min=1.0)
    return total


def _log_ratios(x: PreferenceLossInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits, chosen log-ratio, rejected log-ratio), all (N,)."""
    chosen = x.chosen_logps - x.ref_chosen_logps
    rejected = x.rejected_logps - x.ref_rejected_logps
    return chosen - rejected, chosen, rejected


def _outputs(losses: torch.Tensor, x: PreferenceLossInputs, chosen: torch.Tensor,
             rejected: torch.Tensor) -> PreferenceLossOutputs:
    return PreferenceLossOutputs(losses, x.beta * chosen.detach(), x.beta * rejected.detach())


@register_preference_loss("sigmoid", PreferenceLossSpec(uses_label_smoothing=True))
def sigmoid_loss(x: PreferenceLossInputs) -> PreferenceLossOutputs:
    """DPO (Rafailov et al. 2023, arXiv:2305.18290), with conservative DPO's label smoothing eps (cDPO):

        loss_i = -(1 - eps) * log sigmoid(beta * logits_i) - eps * log sigmoid(-beta * logits_i)

    eps = 0 is the DPO loss -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))). TRL's ``sigmoid``."""
    logits, chosen, rejected = _log_ratios(x)
    eps = x.label_smoothing
    losses = -(1 - eps) * F.logsigmoid(x.beta * logits) - eps * F.logsigmoid(-x.beta * logits)
    return _outputs(losses, x, chosen, rejected)


@register_preference_loss("robust", PreferenceLossSpec(uses_label_smoothing=True))
def robust_loss(x: PreferenceLossInputs) -> PreferenceLossOutputs:
    """Robust DPO (Chowdhury et al. 2024, arXiv:2403.00409): the unbiased loss under labels flipped with
    probability eps < 1/2,

        loss_i = (-(1 - eps) * log sigmoid(beta * logits_i) + eps * log sigmoid(-beta * logits_i)) / (1 - 2 eps)

    TRL's ``robust``; eps = 0 is the DPO loss."""
    logits, chosen, rejected = _log_ratios(x)
    eps = x.label_smoothing
    losses = (-(1 - eps) * F.logsigmoid(x.beta * logits) + eps * F.logsigmoid(-x.beta * logits)) / (1 - 2 * eps)
    return _outputs(losses, x, chosen, rejected)


@register_preference_loss("hinge")
def hinge_loss(x: PreferenceLossInputs) -> PreferenceLossOutputs:
    """SLiC's hinge (Zhao et al. 2023, arXiv:2305.10425): loss_i = max(0, 1 - beta * logits_i). TRL's ``hinge``."""
    logits, chosen, rejected = _log_ratios(x)
    return _outputs(torch.relu(1 - x.beta * logits), x, chosen, rejected)


@register_preference_loss("ipo", PreferenceLossSpec(length_normalized=True))
def ipo_loss(x: PreferenceLossInputs) -> PreferenceLossOutputs:
    """IPO (Azar et al. 2023, arXiv:2310.12036, eq. 17; beta is the paper's tau):

        loss_i = (logits_i - 1 / (2 beta))^2

    with the sequence log-probs averaged over each response's tokens (``length_normalized``), as TRL's ``ipo``
    does; the rewards are beta times those averaged log-ratios."""
    logits, chosen, rejected = _log_ratios(x)
    return _outputs((logits - 1 / (2 * x.beta)) ** 2, x, chosen, rejected)


def compute_preference_loss(name: str, inputs: PreferenceLossInputs) -> PreferenceLossOutputs:
    return PREFERENCE_LOSSES.get(name)(inputs)


def preference_metrics(out: PreferenceLossOutputs) -> dict[str, torch.Tensor]:
    """TRL's per-pair reward metrics, (N,) each, to be averaged over the pairs: rewards/chosen, rewards/rejected,
    rewards/accuracies (1 where the chosen reward is strictly larger), rewards/margins."""
    return {"rewards/chosen": out.chosen_rewards, "rewards/rejected": out.rejected_rewards,
            "rewards/accuracies": (out.chosen_rewards > out.rejected_rewards).float(),
            "rewards/margins": out.chosen_rewards - out.rejected_rewards}
