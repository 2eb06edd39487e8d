"""Advantage estimators. Every estimator has one signature: ``fn(AdvantageInputs) -> AdvantageOutputs``
(prime-rl's typed inputs, instead of verl's per-estimator special cases).

Dimension names: B rows (= prompts x n responses), R response tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.algorithms.utils import masked_whiten
from rft.registry import Registry


@dataclass
class AdvantageInputs:
    token_rewards: torch.Tensor
    """(B, R) float; a response's score sits on its last valid token."""
    response_mask: torch.Tensor
    """(B, R) 0/1 (float, bool or long), 1 on response tokens."""
    group: torch.Tensor
    """(B,) long; equal ids mark the n responses of one prompt (any ids, in any order)."""
    values: torch.Tensor | None = None
    """(B, R) critic values (unused by the estimators so far)."""
    gamma: float = 1.0
    """Discount over response tokens."""
    lam: float = 1.0
    """GAE lambda (unused by the estimators so far)."""
    norm_adv_by_std_in_grpo: bool = True
    """GRPO: divide by the group std; False gives Dr. GRPO's mean-centred advantage."""
    epsilon: float = 1e-6
    """GRPO: added to the group std."""


@dataclass
class AdvantageOutputs:
    advantages: torch.Tensor
    """(B, R), exactly 0 where response_mask is 0."""
    returns: torch.Tensor
    """(B, R)."""


AdvantageEstimator = Callable[[AdvantageInputs], AdvantageOutputs]

ADV_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def compute_advantages(name: str, inputs: AdvantageInputs) -> AdvantageOutputs:
    """Look up the estimator registered as ``name`` and apply it to ``inputs``."""
    return ADV_ESTIMATORS.get(name)(inputs)


def _zeros_where_masked(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))


@ADV_ESTIMATORS.register("grpo")
def grpo_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Group-relative outcome advantage (GRPO, Shao et al. 2024, DeepSeekMath).

    Score ``s_i = sum_t token_rewards[i, t] * mask[i, t]``; over the rows g sharing row i's group id:
      A_i = (s_i - mean_g s) / (std_g s + epsilon)     if norm_adv_by_std_in_grpo
      A_i =  s_i - mean_g s                            otherwise (Dr. GRPO, Liu et al. 2025)
    std_g is UNBIASED (divides by |g| - 1, as ``torch.std``); epsilon = ``inputs.epsilon`` (default 1e-6).
    A group of one member uses mean 0 and std 1, so A = s / (1 + epsilon) (or s unnormalised).
    A_i is broadcast to every valid token of row i and is exactly 0 elsewhere; returns = advantages.
    Vectorised over groups with ``torch.unique`` + ``index_add`` (no Python loop over groups).
    """
    valid = inputs.response_mask.bool()  # (B, R)
    rewards = inputs.token_rewards
    scores = _zeros_where_masked(rewards, valid).sum(dim=-1)  # (B,)

    group_ids, group_idx = torch.unique(inputs.group, return_inverse=True)  # (k,), (B,) dense ids 0..k-1
    count = torch.zeros(group_ids.numel(), dtype=scores.dtype, device=scores.device).index_add_(
        0, group_idx, torch.ones_like(scores)
    )  # (k,)
    total = torch.zeros_like(count).index_add_(0, group_idx, scores)  # (k,)
    mean = total / count  # (k,), count >= 1 for every id produced by unique
    centred_sq = (scores - mean[group_idx]).square()  # (B,)
    sq_sum = torch.zeros_like(count).index_add_(0, group_idx, centred_sq)  # (k,)
    std = torch.sqrt(sq_sum / (count - 1).clamp(min=1.0))  # (k,) unbiased

    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)

    adv = scores - mean[group_idx]  # (B,)
    if inputs.norm_adv_by_std_in_grpo:
        adv = adv / (std[group_idx] + inputs.epsilon)
    advantages = _zeros_where_masked(adv.unsqueeze(-1).expand_as(rewards), valid)  # (B, R)
    return AdvantageOutputs(advantages=advantages, returns=advantages.clone())


@ADV_ESTIMATORS.register("reinforce_plus_plus")
def reinforce_plus_plus_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REINFORCE++ (Hu 2025): discounted return-to-go, whitened over the whole batch.

    Return-to-go over response tokens, right to left, with the running return zeroed after every masked
    token so nothing leaks backwards across EOS or padding:
      G_t = r_t + gamma * G_{t+1} * m_{t+1},    G_R = 0
    returns = G * m. Advantages = masked_whiten(G, m) * m: ``(G - mean) * rsqrt(var + 1e-8)`` with mean and
    UNBIASED variance over every valid token of the batch (no grouping). The loop runs over R, not B.
    """
    valid = inputs.response_mask.bool()  # (B, R)
    rewards = inputs.token_rewards  # (B, R)
    gamma = inputs.gamma
    returns = torch.zeros_like(rewards)  # (B, R)
    running = torch.zeros_like(rewards[:, 0])  # (B,)
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(rewards.shape[-1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = torch.where(valid[:, t], running, zero)
    returns = _zeros_where_masked(returns, valid)
    advantages = masked_whiten(returns, valid, shift_mean=True, eps=1e-8)  # already 0 where masked
    return AdvantageOutputs(advantages=advantages, returns=returns)
