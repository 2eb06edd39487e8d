"""Rewards: built-in scorers keyed by data_source, user reward files, and batch scoring."""

from rft.rewards.arithmetic import arithmetic_score
from rft.rewards.combine import build_reward_fn, weighted_reward
from rft.rewards.custom import load_custom_reward
from rft.rewards.gsm8k import GSM8K_CLIP_CHARS, gsm8k_extract, gsm8k_score
from rft.rewards.scorers import SCORERS, Scorer, ScoreResult, default_compute_score
from rft.rewards.scoring import score_responses

__all__ = [
    "GSM8K_CLIP_CHARS",
    "SCORERS",
    "ScoreResult",
    "Scorer",
    "arithmetic_score",
    "build_reward_fn",
    "default_compute_score",
    "gsm8k_extract",
    "gsm8k_score",
    "load_custom_reward",
    "score_responses",
    "weighted_reward",
]
