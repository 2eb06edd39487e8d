"""Pure tensor math of RL fine-tuning: advantage estimators, policy losses, KL estimators and loss
aggregation, each family behind a name registry. Imports only torch, the stdlib and ``rft.registry``."""

from rft.algorithms.advantages import (
    ADV_ESTIMATORS,
    AdvantageInputs,
    AdvantageOutputs,
    compute_advantages,
    grpo_advantages,
    reinforce_plus_plus_advantages,
)
from rft.algorithms.aggregation import LOSS_AGG_MODES, AggNorm, agg_loss
from rft.algorithms.kl import KL_ESTIMATORS, kl_penalty
from rft.algorithms.policy_loss import (
    POLICY_LOSSES,
    PolicyLossInputs,
    PolicyLossOutputs,
    compute_policy_loss,
    vanilla_policy_loss,
)
from rft.algorithms.utils import (
    entropy_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
)

__all__ = [
    "ADV_ESTIMATORS",
    "AdvantageInputs",
    "AdvantageOutputs",
    "compute_advantages",
    "grpo_advantages",
    "reinforce_plus_plus_advantages",
    "LOSS_AGG_MODES",
    "AggNorm",
    "agg_loss",
    "KL_ESTIMATORS",
    "kl_penalty",
    "POLICY_LOSSES",
    "PolicyLossInputs",
    "PolicyLossOutputs",
    "compute_policy_loss",
    "vanilla_policy_loss",
    "entropy_from_logits",
    "logprobs_from_logits",
    "masked_mean",
    "masked_var",
    "masked_whiten",
]

from rft.algorithms.kl_ctrl import AdaptiveKLController, FixedKLController, make_kl_controller

__all__ += ["AdaptiveKLController", "FixedKLController", "make_kl_controller"]
