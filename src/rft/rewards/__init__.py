"""Rewards: reward functions by type (Trinity's names), built-in scorers keyed by data_source, user reward files,
and batch scoring (in worker processes where it pays)."""

from rft.rewards.arithmetic import arithmetic_score
from rft.rewards.combine import build_reward_fn, weighted_reward
from rft.rewards.countdown import countdown_reward
from rft.rewards.custom import load_custom_reward
from rft.rewards.formats import format_reward
from rft.rewards.gsm8k import GSM8K_CLIP_CHARS, gsm8k_extract, gsm8k_score
from rft.rewards.math_answers import accuracy_reward, math_boxed_reward, math_reward
from rft.rewards.scorers import SCORERS, Scorer, ScoreResult, default_compute_score
from rft.rewards.scoring import score_responses
from rft.rewards.typed import REWARD_FN_TYPES, RewardFnType, reward_fn_type

__all__ = [
    "GSM8K_CLIP_CHARS",
    "REWARD_FN_TYPES",
    "SCORERS",
    "RewardFnType",
    "ScoreResult",
    "Scorer",
    "accuracy_reward",
    "arithmetic_score",
    "build_reward_fn",
    "countdown_reward",
    "default_compute_score",
    "format_reward",
    "gsm8k_extract",
    "gsm8k_score",
    "load_custom_reward",
    "math_boxed_reward",
    "math_reward",
    "reward_fn_type",
    "score_responses",
    "weighted_reward",
]
