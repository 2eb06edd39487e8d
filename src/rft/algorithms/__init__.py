"""Pure tensor math of RL fine-tuning: advantage estimators, policy losses, KL estimators and loss
aggregation, each family behind a name registry. Imports only torch, the stdlib and ``rft.registry``; ``checks.py``,
the checks of the algorithm keys, also imports ``rft.config``."""

from rft.algorithms.advantages import (
    ADV_ESTIMATORS,
    AdvantageInputs,
    AdvantageOutputs,
    EstimatorSpec,
    compute_advantages,
    estimator_spec,
    grpo_advantages,
    register_estimator,
    reinforce_plus_plus_advantages,
    reward_components,
)
from rft.algorithms.aggregation import LOSS_AGG_MODES, TRL_LOSS_TYPES, AggNorm, agg_loss, trl_loss_agg_mode
from rft.algorithms.dapo import informative_groups, overlong_penalty
from rft.algorithms.distill import (
    DISTILL_LOSSES,
    DistillInputs,
    distill_divergence,
    distill_needs_logits,
)
from rft.algorithms.entropy_clip import ENTROPY_CLIP_MODES, EntropyClipInputs, entropy_clip_keep
from rft.algorithms.kl import KL_ESTIMATORS, KLInputs, full_kl_from_logits, kl_needs_logits, kl_penalty
from rft.algorithms.policy_loss import (
    POLICY_LOSSES,
    PolicyLossInputs,
    PolicyLossOutputs,
    RecOptions,
    compute_policy_loss,
    policy_loss_needs_minibatch,
    policy_loss_zero_at_zero_advantage,
    trl_actor_settings,
    vanilla_policy_loss,
)
from rft.algorithms.preference import (
    PREFERENCE_LOSSES,
    PreferenceLossInputs,
    PreferenceLossOutputs,
    compute_preference_loss,
    preference_loss_spec,
    preference_metrics,
    sequence_logps,
)
from rft.algorithms.utils import (
    LOGIT_CHUNK_TOKENS,
    entropy_from_logits,
    entropy_statistics_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    sum_pi_squared_from_logits,
)
from rft.algorithms.value_loss import ValueLossOutputs, explained_variance, value_loss

__all__ = [
    "ADV_ESTIMATORS",
    "AdvantageInputs",
    "AdvantageOutputs",
    "EstimatorSpec",
    "compute_advantages",
    "estimator_spec",
    "grpo_advantages",
    "register_estimator",
    "reinforce_plus_plus_advantages",
    "reward_components",
    "LOSS_AGG_MODES",
    "TRL_LOSS_TYPES",
    "AggNorm",
    "agg_loss",
    "trl_loss_agg_mode",
    "DISTILL_LOSSES",
    "DistillInputs",
    "distill_divergence",
    "distill_needs_logits",
    "informative_groups",
    "overlong_penalty",
    "KL_ESTIMATORS",
    "KLInputs",
    "full_kl_from_logits",
    "kl_needs_logits",
    "kl_penalty",
    "POLICY_LOSSES",
    "PolicyLossInputs",
    "PolicyLossOutputs",
    "RecOptions",
    "compute_policy_loss",
    "policy_loss_needs_minibatch",
    "policy_loss_zero_at_zero_advantage",
    "trl_actor_settings",
    "vanilla_policy_loss",
    "PREFERENCE_LOSSES",
    "PreferenceLossInputs",
    "PreferenceLossOutputs",
    "compute_preference_loss",
    "preference_loss_spec",
    "preference_metrics",
    "sequence_logps",
    "LOGIT_CHUNK_TOKENS",
    "entropy_from_logits",
    "logprobs_from_logits",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "sum_pi_squared_from_logits",
    "entropy_statistics_from_logits",
    "ENTROPY_CLIP_MODES",
    "EntropyClipInputs",
    "entropy_clip_keep",
    "ValueLossOutputs",
    "explained_variance",
    "value_loss",
]

from rft.algorithms.kl_ctrl import AdaptiveKLController, FixedKLController, make_kl_controller

__all__ += ["AdaptiveKLController", "FixedKLController", "make_kl_controller"]
