"""Advantage estimators. Every estimator has one signature: ``fn(AdvantageInputs) -> AdvantageOutputs``
(prime-rl's typed inputs, instead of verl's per-estimator special cases), and is registered by name in
``ADV_ESTIMATORS`` together with an ``EstimatorSpec``: which optional inputs it needs (critic values, a greedy
rollout's reward) and the smallest group it accepts. The trainer and the config validation read the spec; no
caller tests an estimator's name.

Dimension names: B rows (= prompts x n responses), R response tokens, k groups.
Score of a row: ``s_i = sum_t token_rewards[i, t]`` over its valid tokens. Groups: the rows sharing a ``group`` id
(the n responses of one prompt). An outcome estimator computes one number per row and broadcasts it to the row's
valid tokens; every estimator returns advantages that are exactly 0 where ``response_mask`` is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.algorithms.utils import masked_whiten
from rft.registry import Registry

TRL_SCALE_EPS = 1e-4
"""The constant TRL's GRPOTrainer adds to the std when it scales rewards (``scale_rewards`` group / batch)."""

WHITEN_EPS = 1e-8
"""``masked_whiten``'s epsilon in gae, reinforce_plus_plus and reinforce_plus_plus_baseline (verl's)."""


@dataclass
class AdvantageInputs:
    token_rewards: torch.Tensor
    """(B, R) float; a response's score sits on its last valid token."""
    response_mask: torch.Tensor
    """(B, R) 0/1 (float, bool or long), 1 on response tokens."""
    group: torch.Tensor
    """(B,) long; equal ids mark the n responses of one prompt (any ids, in any order)."""
    values: torch.Tensor | None = None
    """(B, R) critic values V_t (gae)."""
    gamma: float = 1.0
    """Discount over response tokens (gae, reinforce_plus_plus, remax)."""
    lam: float = 1.0
    """GAE lambda."""
    norm_adv_by_std_in_grpo: bool = True
    """grpo, grpo_passk: divide by the group std; False gives Dr. GRPO's mean-centred advantage."""
    epsilon: float = 1e-6
    """grpo (verl mode), grpo_passk: added to the group std."""
    scale_rewards: str | None = None
    """grpo: None follows verl (norm_adv_by_std_in_grpo, epsilon); 'group', 'batch' or 'none' follow TRL."""
    reward_baselines: torch.Tensor | None = None
    """(B,) remax: the reward of a greedy rollout of each row's prompt."""
    opmd_baseline: str = "mean"
    """opmd: 'mean' (group mean) or 'logavgexp' (tau * log mean exp(s / tau))."""
    tau: float = 1.0
    """opmd: temperature of the 'logavgexp' baseline."""
    baseline_shift: float = -0.1
    """asymre: added to the group mean to form the baseline."""
    reward_components: torch.Tensor | None = None
    """(B, K) gdpo: each row's value of K reward dimensions (algorithm.gdpo_reward_keys)."""
    gdpo_reward_weights: tuple[float, ...] | list[float] | None = None
    """gdpo: one weight per reward dimension; None: all 1."""
    old_logprobs: torch.Tensor | None = None
    """(B, R) optimal_token_baseline: log-probs of the sampled tokens under the policy that sampled them."""
    sum_pi_squared: torch.Tensor | None = None
    """(B, R) optimal_token_baseline: sum_v pi_v^2 of that policy at each response token."""
    rollout_is_weights: torch.Tensor | None = None
    """(B, R) optimal_token_baseline: rollout correction's IS weights, when there are any (they weight W by w^2)."""
    std_threshold: float | None = None
    """grpo (Trinity-RFT's): the rows of a group whose score std is at most this, and of a group of one, are left
    out of the loss (``AdvantageOutputs.loss_mask``); None: every group trains."""
    std_cal_level: str = "group"
    """grpo (verl mode): 'group' divides by the group's std, 'batch' by the std of all B scores (Trinity-RFT's
    std_cal_level); the mean is the group's either way."""


@dataclass
class AdvantageOutputs:
    advantages: torch.Tensor
    """(B, R), exactly 0 where response_mask is 0."""
    returns: torch.Tensor
    """(B, R), 0 where response_mask is 0."""
    loss_mask: torch.Tensor | None = None
    """(B,) bool: the rows the loss trains on, when the estimator leaves some out (raft's unselected responses,
    grpo's groups under std_threshold); their tokens leave the loss and its token normaliser. None: every row."""


@dataclass(frozen=True)
class EstimatorSpec:
    """What an estimator needs beyond token rewards, the mask and the groups."""

    needs: frozenset[str] = frozenset()
    """Optional ``AdvantageInputs`` fields the estimator reads and the caller must fill: 'values' (a critic),
    'reward_baselines' (the trainer scores one greedy rollout per prompt), 'reward_components' (per-row values of
    the configured reward dimensions), 'old_logprobs' and 'sum_pi_squared' (the old-policy pass)."""
    min_group_size: int = 1
    """Fewest responses per prompt (``actor_rollout_ref.rollout.n``) the estimator accepts."""


AdvantageEstimator = Callable[[AdvantageInputs], AdvantageOutputs]

ADV_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def register_estimator(*names: str, spec: EstimatorSpec = EstimatorSpec()) -> Callable:
    """Decorator: register an estimator under ``names`` with its spec (stored on the function as ``.spec``).

    A function registered with ``ADV_ESTIMATORS.register`` directly gets the default spec."""

    def wrap(fn: AdvantageEstimator) -> AdvantageEstimator:
        fn.spec = spec  # type: ignore[attr-defined]
        return ADV_ESTIMATORS.register(*names)(fn)

    return wrap


def estimator_spec(name: str) -> EstimatorSpec:
    """The ``EstimatorSpec`` registered with estimator ``name`` (KeyError listing the names if unknown)."""
    return getattr(ADV_ESTIMATORS.get(name), "spec", EstimatorSpec())


def compute_advantages(name: str, inputs: AdvantageInputs) -> AdvantageOutputs:
    """Look up the estimator registered as ``name`` and apply it to ``inputs``."""
    return ADV_ESTIMATORS.get(name)(inputs)


# ------------------------------------------------------------------------------------------------ helpers
def _zeros_where_masked(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _require(inputs: AdvantageInputs, field: str, estimator: str, what: str) -> torch.Tensor:
    value = getattr(inputs, field)
    if value is None:
        raise ValueError(f"advantage estimator {estimator!r} needs AdvantageInputs.{field}: {what}")
    return value


def _scores(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(valid (B, R) bool, scores (B,)): the sum of each row's token rewards over its valid tokens."""
    valid = inputs.response_mask.bool()
    return valid, _zeros_where_masked(inputs.token_rewards, valid).sum(dim=-1)


@dataclass
class _Groups:
    """Dense group index of every row and per-group reductions (``index_add``: no Python loop over groups)."""

    idx: torch.Tensor  # (B,) long, 0..k-1
    count: torch.Tensor  # (k,) float, >= 1

    @classmethod
    def of(cls, group: torch.Tensor, like: torch.Tensor) -> _Groups:
        _, idx = torch.unique(group, return_inverse=True)
        idx = idx.to(like.device)
        k = int(idx.max()) + 1 if idx.numel() else 0
        count = torch.zeros(k, dtype=like.dtype, device=like.device).index_add_(0, idx, torch.ones_like(like))
        return cls(idx, count)

    def sum(self, x: torch.Tensor) -> torch.Tensor:  # (B,) -> (k,)
        return torch.zeros_like(self.count).index_add_(0, self.idx, x)

    def mean(self, x: torch.Tensor) -> torch.Tensor:  # (B,) -> (k,)
        return self.sum(x) / self.count

    def std(self, x: torch.Tensor) -> torch.Tensor:
        """(k,) UNBIASED std (divides by |g| - 1, as ``torch.std``); 0 for a group of one."""
        centred_sq = (x - self.mean(x)[self.idx]).square()
        return torch.sqrt(self.sum(centred_sq) / (self.count - 1).clamp(min=1.0))

    def amax(self, x: torch.Tensor) -> torch.Tensor:  # (B,) -> (k,)
        init = torch.full_like(self.count, -math.inf)
        return init.scatter_reduce(0, self.idx, x, reduce="amax", include_self=True)

    @property
    def single(self) -> torch.Tensor:  # (k,) bool
        return self.count == 1


def _grpo_verl(scores: torch.Tensor, groups: _Groups, norm_by_std: bool, epsilon: float,
               std_cal_level: str = "group") -> torch.Tensor:
    """(B,) verl's grpo per row: (s - mean_g) / (std_g + epsilon), or s - mean_g; a group of one uses mean 0,
    std 1; std UNBIASED. std_cal_level 'batch': the std of all B scores for every row (1 for a batch of one)."""
    mean = torch.where(groups.single, torch.zeros_like(groups.count), groups.mean(scores))
    if std_cal_level == "batch":
        std = (scores.std() if scores.numel() > 1 else torch.ones((), dtype=scores.dtype)).expand(scores.shape)
    elif std_cal_level == "group":
        std = torch.where(groups.single, torch.ones_like(groups.count), groups.std(scores))[groups.idx]
    else:
        raise ValueError(f"grpo: std_cal_level={std_cal_level!r} is not one of 'group', 'batch'")
    adv = scores - mean[groups.idx]
    return adv / (std + epsilon) if norm_by_std else adv


def _first_best(scores: torch.Tensor, groups: _Groups) -> torch.Tensor:
    """(B,) bool: the first row of each group holding the group's highest score."""
    rows = torch.arange(scores.numel(), device=scores.device)
    top = groups.amax(scores)  # (k,)
    at_top = torch.where(scores == top[groups.idx], rows, torch.full_like(rows, scores.numel()))
    best = torch.full_like(groups.count, scores.numel(), dtype=torch.long).scatter_reduce(
        0, groups.idx, at_top, reduce="amin", include_self=True)  # (k,)
    return rows == best[groups.idx]


def _outcome(per_row: torch.Tensor, valid: torch.Tensor) -> AdvantageOutputs:
    """Broadcast one advantage per row (B,) to its valid tokens; returns = advantages."""
    advantages = _zeros_where_masked(per_row.unsqueeze(-1).expand(valid.shape), valid)
    return AdvantageOutputs(advantages=advantages, returns=advantages.clone())


def _return_to_go(rewards: torch.Tensor, valid: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_next(t) on valid tokens, next(t) the next VALID token after t (G = 0 past the last
    one), 0 on masked tokens. Masked tokens are skipped: their rewards are not read and they neither discount
    nor reset the running return, which carries across a masked span (tool or environment tokens inside a
    multi-turn response) to the policy's tokens before it (verl 0.9.1). The loop runs over R."""
    returns = torch.zeros_like(rewards)  # (B, R)
    running = torch.zeros_like(rewards[:, 0])  # (B,)
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(rewards.shape[-1])):
        running = torch.where(valid[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(valid[:, t], running, zero)
    return returns


# ------------------------------------------------------------------------------------------- estimators
@register_estimator("gae", spec=EstimatorSpec(needs=frozenset({"values"})))
def gae_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438), PPO's estimator.

    Right to left over the valid tokens (masked tokens are skipped: they neither read nor change the running
    quantities), with V beyond the last valid token = 0:
      delta_t = r_t + gamma * V_{t+1} - V_t          (V_{t+1}: the value of the next VALID token, else 0)
      A_t     = delta_t + gamma * lam * A_{t+1}      (A beyond the last valid token = 0)
    returns = A + V (before whitening; the critic's target). Advantages = masked_whiten(A, m):
    ``(A - mean) * rsqrt(var + 1e-8)``, mean and UNBIASED variance over every valid token of the batch.
    Both outputs are 0 on masked tokens. Needs ``values`` (B, R).
    """
    values = _require(inputs, "values", "gae", "(B, R) critic values")
    valid = inputs.response_mask.bool()
    rewards = inputs.token_rewards
    gamma, lam = inputs.gamma, inputs.lam
    adv = torch.zeros_like(rewards)  # (B, R)
    next_value = torch.zeros_like(rewards[:, 0])  # (B,)
    last_adv = torch.zeros_like(rewards[:, 0])  # (B,)
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        gae_t = delta + gamma * lam * last_adv
        next_value = torch.where(valid[:, t], values[:, t], next_value)
        last_adv = torch.where(valid[:, t], gae_t, last_adv)
        adv[:, t] = last_adv
    returns = _zeros_where_masked(adv + values, valid)
    advantages = masked_whiten(adv, valid, shift_mean=True, eps=WHITEN_EPS)  # 0 where masked
    return AdvantageOutputs(advantages=advantages, returns=returns)


@register_estimator("grpo")
def grpo_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Group-relative outcome advantage (GRPO, Shao et al. 2024, DeepSeekMath, arXiv:2402.03300).

    verl's semantics (``scale_rewards`` None, the default); over the rows g sharing row i's group id:
      A_i = (s_i - mean_g s) / (std_g s + epsilon)     if norm_adv_by_std_in_grpo
      A_i =  s_i - mean_g s                            otherwise (Dr. GRPO, Liu et al. 2025, arXiv:2503.20783)
    std_g is UNBIASED (divides by |g| - 1, as ``torch.std``); epsilon = ``inputs.epsilon`` (default 1e-6).
    A group of one member uses mean 0 and std 1, so A = s / (1 + epsilon) (or s unnormalised).

    TRL's GRPOTrainer semantics (``scale_rewards`` set; ``norm_adv_by_std_in_grpo`` and ``epsilon`` unused):
      A_i = (s_i - mean_g s) / (std + 1e-4)    std = std_g s ('group') or the std of all B scores ('batch')
      A_i =  s_i - mean_g s                    ('none')
    every std UNBIASED; 1e-4 is TRL's constant (``TRL_SCALE_EPS``). As in TRL the mean is always the group's
    own, so a group of one gets A = 0 (its std counts as 0; a batch of one row has std 0).
    A_i is broadcast to every valid token of row i and is exactly 0 elsewhere; returns = advantages.

    Trinity-RFT's options (its grpo advantage_fn_args): ``std_cal_level='batch'`` divides by the std of all B
    scores instead of the group's (verl semantics only; the mean stays the group's, as in Trinity and
    arXiv:2508.08221); ``std_threshold`` leaves the rows of a group whose std is at most it (and of a group of
    one) out of the loss (``loss_mask``), as Trinity drops those experiences.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    mean = groups.mean(scores)  # (k,)
    mode = inputs.scale_rewards
    if mode is not None and inputs.std_cal_level != "group":
        raise ValueError("grpo: std_cal_level is an option of verl's semantics (scale_rewards None)")
    if mode is None:
        adv = _grpo_verl(scores, groups, inputs.norm_adv_by_std_in_grpo, inputs.epsilon, inputs.std_cal_level)
    elif mode in ("group", "batch", "none"):
        adv = scores - mean[groups.idx]
        if mode == "group":
            adv = adv / (groups.std(scores)[groups.idx] + TRL_SCALE_EPS)
        elif mode == "batch":
            batch_std = scores.std() if scores.numel() > 1 else torch.zeros((), dtype=scores.dtype)
            adv = adv / (batch_std + TRL_SCALE_EPS)
    else:
        raise ValueError(f"grpo: scale_rewards={mode!r} is not one of None, 'group', 'batch', 'none'")
    out = _outcome(adv, valid)
    if inputs.std_threshold is not None:  # Trinity-RFT's: such a group teaches nothing, so it is left out
        out.loss_mask = ~(groups.single | (groups.std(scores) <= inputs.std_threshold))[groups.idx]
    return out


@register_estimator("grpo_passk", spec=EstimatorSpec(min_group_size=2))
def grpo_passk_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Pass@k advantage (Tang et al. 2025, "Optimizing Language Models for Inference Time Objectives using
    Reinforcement Learning", arXiv:2503.19595, the paper verl cites for its ``grpo_passk``).

    In each group only the best response (the first row with the group's highest score) gets a non-zero
    advantage, the margin over the second-highest score:
      A_best = (s_max - s_second) / (std_g s + epsilon)   if norm_adv_by_std_in_grpo (std UNBIASED, eps 1e-6)
      A_best =  s_max - s_second                          otherwise
    and A = 0 for every other row (a tie at the top gives 0 everywhere). Every group needs >= 2 responses
    (ValueError otherwise). Broadcast to valid tokens; returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    if bool((groups.count < 2).any()):
        raise ValueError(
            "grpo_passk needs at least 2 responses per prompt (actor_rollout_ref.rollout.n >= 2); "
            f"got a group of {int(groups.count.min())}"
        )
    top = groups.amax(scores)  # (k,)
    is_best = _first_best(scores, groups)  # (B,)
    second = groups.amax(torch.where(is_best, torch.full_like(scores, -math.inf), scores))  # (k,)
    margin = top - second
    if inputs.norm_adv_by_std_in_grpo:
        margin = margin / (groups.std(scores) + inputs.epsilon)
    adv = torch.where(is_best, margin[groups.idx], torch.zeros_like(scores))
    return _outcome(adv, valid)


@register_estimator("rloo")
def rloo_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al. 2024, arXiv:2402.14740).

    For a group of n > 1: A_i = s_i - (sum_g s - s_i) / (n - 1) = n / (n - 1) * (s_i - mean_g s), the score
    minus the mean of the OTHER responses. A group of one is left unchanged (A = s). Broadcast to valid tokens;
    returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    n = groups.count[groups.idx]  # (B,)
    loo = (scores - groups.mean(scores)[groups.idx]) * n / (n - 1).clamp(min=1.0)
    adv = torch.where(n > 1, loo, scores)
    return _outcome(adv, valid)


@register_estimator("reinforce_plus_plus")
def reinforce_plus_plus_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): discounted return-to-go, whitened over the whole batch.

    Return-to-go over the valid response tokens, right to left; masked tokens are skipped (not read, no
    discount), so the return carries across a masked span inside a response (verl 0.9.1):
      G_t = r_t + gamma * G_next(t),   next(t) = the next valid token after t,   G = 0 past the last one
    returns = G on valid tokens, 0 on masked ones. Advantages = masked_whiten(G, m) * m: ``(G - mean) * rsqrt(var + 1e-8)`` with mean and
    UNBIASED variance over every valid token of the batch (no grouping). The loop runs over R, not B.
    """
    valid = inputs.response_mask.bool()  # (B, R)
    returns = _return_to_go(inputs.token_rewards, valid, inputs.gamma)
    advantages = masked_whiten(returns, valid, shift_mean=True, eps=WHITEN_EPS)  # already 0 where masked
    return AdvantageOutputs(advantages=advantages, returns=returns)


@register_estimator("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REINFORCE++ with a group baseline (Hu 2025, arXiv:2501.03262; verl's ``reinforce_plus_plus_baseline``).

    a_i = s_i - mean_g s (a group of one uses mean 0), broadcast to row i's valid tokens, then whitened over
    the batch's valid TOKENS (a longer response weighs more): A = ``(a - mean) * rsqrt(var + 1e-8)``, mean and
    UNBIASED variance over every valid token. returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    mean = torch.where(groups.single, torch.zeros_like(groups.count), groups.mean(scores))
    centred = _zeros_where_masked((scores - mean[groups.idx]).unsqueeze(-1).expand(valid.shape), valid)
    advantages = masked_whiten(centred, valid, shift_mean=True, eps=WHITEN_EPS)
    return AdvantageOutputs(advantages=advantages, returns=advantages.clone())


@register_estimator("remax", spec=EstimatorSpec(needs=frozenset({"reward_baselines"})))
def remax_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """ReMax (Li et al. 2024, arXiv:2310.10505): return-to-go minus the reward of a greedy rollout.

      G_t = r_t + gamma * G_next(t)           (as reinforce_plus_plus: masked tokens skipped, the return carries
                                               across them; gamma = 1 gives the suffix sum of the valid rewards)
      A_t = G_t - b_i                          b_i = reward_baselines[i], the score of the greedy response
                                               to row i's prompt
    No normalisation. returns = G (0 on masked tokens); A is 0 on masked tokens. Needs ``reward_baselines``.
    """
    baselines = _require(inputs, "reward_baselines", "remax", "(B,) reward of a greedy rollout per row's prompt")
    valid = inputs.response_mask.bool()
    returns = _return_to_go(inputs.token_rewards, valid, inputs.gamma)
    advantages = _zeros_where_masked(returns - baselines.to(returns).unsqueeze(-1), valid)
    return AdvantageOutputs(advantages=advantages, returns=returns)


@register_estimator("opo")
def opo_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """On-Policy RL with Optimal reward baseline (Hao et al. 2025, arXiv:2505.23585; verl's ``opo``).

    The baseline is the length-weighted group mean, len_j = number of valid tokens of response j:
      b_g = sum_{j in g} len_j * s_j / sum_{j in g} len_j,      A_i = s_i - b_g
    A group of one uses b = 0; a group whose responses are all empty uses b = 0. Broadcast to valid tokens;
    returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    lengths = valid.sum(dim=-1).to(scores.dtype)  # (B,)
    weight = groups.sum(lengths)  # (k,)
    weighted = groups.sum(lengths * scores)
    baseline = torch.where(weight > 0, weighted / weight.clamp(min=1.0), torch.zeros_like(weight))
    baseline = torch.where(groups.single, torch.zeros_like(baseline), baseline)
    return _outcome(scores - baseline[groups.idx], valid)


@register_estimator("gpg")
def gpg_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Group Policy Gradient (Chu et al. 2025, arXiv:2504.02546; verl's ``gpg``).

      A_i = alpha * (s_i - mean_g s),   alpha = B / max(1, #{j : s_j != 0})
    over the whole batch of B rows (alpha rescales the gradient to the rows with a non-zero reward). A group
    of one uses mean 0. Broadcast to valid tokens; returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    alpha = scores.numel() / torch.count_nonzero(scores).clamp(min=1).to(scores.dtype)
    mean = torch.where(groups.single, torch.zeros_like(groups.count), groups.mean(scores))
    return _outcome(alpha * (scores - mean[groups.idx]), valid)


@register_estimator("opmd")
def opmd_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Online Policy Mirror Descent (Trinity-RFT's ``opmd``, Trinity-RFT report arXiv:2505.17826, after Kimi k1.5,
    arXiv:2501.12599).

      A_i = s_i - b_g,   b_g = mean_g s                                   (opmd_baseline = 'mean')
                         b_g = tau * log(mean_{j in g} exp(s_j / tau))    (opmd_baseline = 'logavgexp')
    logavgexp is computed stably as max_g s + tau * log mean exp((s - max_g s) / tau); it tends to max_g s as
    tau -> 0 and to mean_g s as tau -> inf. A group of one uses b = 0. Broadcast to valid tokens;
    returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    if inputs.opmd_baseline == "mean":
        baseline = groups.mean(scores)
    elif inputs.opmd_baseline == "logavgexp":
        tau = inputs.tau
        if not tau > 0:
            raise ValueError(f"opmd: tau must be > 0, got {tau}")
        top = groups.amax(scores)
        baseline = top + tau * torch.log(groups.mean(torch.exp((scores - top[groups.idx]) / tau)))
    else:
        raise ValueError(f"opmd: opmd_baseline={inputs.opmd_baseline!r} is not one of 'mean', 'logavgexp'")
    baseline = torch.where(groups.single, torch.zeros_like(baseline), baseline)
    return _outcome(scores - baseline[groups.idx], valid)


@register_estimator("asymre")
def asymre_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Asymmetric REINFORCE (Trinity-RFT's ``asymre``; Arnal et al. 2025, arXiv:2506.20520).

      A_i = s_i - (mean_g s + baseline_shift)     (Trinity's default shift: -0.1)
    A shift below 0 lowers the baseline, so more responses are reinforced than pushed down. A group of one
    uses b = 0 (no shift, as Trinity). Broadcast to valid tokens; returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    baseline = groups.mean(scores) + inputs.baseline_shift
    baseline = torch.where(groups.single, torch.zeros_like(baseline), baseline)
    return _outcome(scores - baseline[groups.idx], valid)


@register_estimator("reinforce")
def reinforce_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REINFORCE's outcome advantage without a baseline (Williams 1992; Trinity-RFT's ``reinforce``, the default
    advantage of its topr algorithm): A_i = s_i, broadcast to row i's valid tokens; returns = advantages.
    TOPR (arXiv:2503.14286) weights by the reward itself, so a reward that is not centred stays as it is."""
    valid, scores = _scores(inputs)
    return _outcome(scores, valid)


@register_estimator("rec")
def rec_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """REC's group-relative advantage (Yao et al. 2025, "Group-relative REINFORCE is secretly an off-policy
    algorithm", arXiv:2509.24203; Trinity-RFT's ``rec``):
      A_i = s_i - mean_g s                                       (Trinity's default, std_normalize false)
      A_i = (s_i - mean_g s) / (pstd_g s + epsilon)              (norm_adv_by_std_in_grpo; Trinity's
                                                                  std_normalize true)
    pstd is the POPULATION std (divides by |g|, unlike grpo's); epsilon = ``inputs.epsilon``. A group of one uses
    mean 0 and std 1. Broadcast to valid tokens; returns = advantages.
    """
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    mean = torch.where(groups.single, torch.zeros_like(groups.count), groups.mean(scores))
    adv = scores - mean[groups.idx]
    if inputs.norm_adv_by_std_in_grpo:
        centred_sq = (scores - groups.mean(scores)[groups.idx]).square()
        pstd = torch.where(groups.single, torch.ones_like(groups.count), torch.sqrt(groups.mean(centred_sq)))
        adv = adv / (pstd[groups.idx] + inputs.epsilon)
    return _outcome(adv, valid)


@register_estimator("raft")
def raft_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """RAFT, reward-ranked fine-tuning (Dong et al. 2023, arXiv:2304.06767; Trinity-RFT's ``raft``): of the n
    responses to a prompt, the best ones (those holding the group's highest score: one, or all that tie for it)
    are fine-tuned on, the others are left out of the loss (``loss_mask``). A = 1 on a kept row's valid tokens,
    0 elsewhere; returns = advantages. Paired with the ``sft`` policy loss (-log p of the kept tokens) this is
    the paper's SFT on the best-of-n samples (ties, which the paper breaks arbitrarily, are all kept, so the
    choice does not depend on the rows' order); with n = 1 every response is kept, as Trinity's raft trains on
    every experience its workflow returns (its RAFT workflows return the successful ones)."""
    valid, scores = _scores(inputs)
    groups = _Groups.of(inputs.group, scores)
    best = scores == groups.amax(scores)[groups.idx]  # (B,)
    out = _outcome(best.to(scores.dtype), valid)
    out.loss_mask = best
    return out


@register_estimator("gdpo", spec=EstimatorSpec(needs=frozenset({"reward_components"})))
def gdpo_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """GDPO, Group reward-Decoupled normalization Policy Optimization (arXiv:2601.05242), as verl 0.9.1's ``gdpo``.

    Each reward dimension k (column k of ``reward_components``, B x K: the reward function's values named by
    ``algorithm.gdpo_reward_keys``) is normalised in its group on its own, as verl's grpo, then they are summed
    with weights w_k (``gdpo_reward_weights``, default 1) and whitened over the batch's valid tokens:
      a_ik = (c_ik - mean_g c_k) / (std_g c_k + epsilon)     (or c_ik - mean_g c_k without
                                                               norm_adv_by_std_in_grpo; a group of one: mean 0,
                                                               std 1; std UNBIASED, epsilon 1e-6)
      A    = masked_whiten(sum_k w_k a_ik on row i's valid tokens)   ((x - mean) * rsqrt(var + 1e-8), UNBIASED)
    so a dominant dimension cannot drown a weaker one. The token rewards (with any in-reward KL or overlong
    penalty) are not used, as in verl. returns = advantages.
    """
    components = _require(inputs, "reward_components", "gdpo", "(B, K) per-row values of the reward dimensions")
    valid = inputs.response_mask.bool()
    components = components.to(inputs.token_rewards.dtype if inputs.token_rewards.is_floating_point()
                               else torch.float32)
    num = components.shape[-1]
    weights = [1.0] * num if inputs.gdpo_reward_weights is None else list(inputs.gdpo_reward_weights)
    if len(weights) != num:
        raise ValueError(f"gdpo: {len(weights)} reward weights for {num} reward dimensions")
    groups = _Groups.of(inputs.group, components[:, 0])
    total = sum((w * _grpo_verl(components[:, k], groups, inputs.norm_adv_by_std_in_grpo, inputs.epsilon)
                 for k, w in enumerate(weights)), torch.zeros_like(components[:, 0]))  # (B,)
    per_token = _zeros_where_masked(total.unsqueeze(-1).expand(valid.shape), valid)
    advantages = masked_whiten(per_token, valid, shift_mean=True, eps=WHITEN_EPS)
    return AdvantageOutputs(advantages=advantages, returns=advantages.clone())


def reward_components(rows: dict[str, torch.Tensor], keys: list[str] | tuple[str, ...] | None) -> torch.Tensor:
    """(B, K) gdpo's reward dimensions: the per-row values named by ``keys`` (algorithm.gdpo_reward_keys) out of
    ``rows`` (name -> (B,) values of the reward function's returned dict, or of several reward functions).
    ValueError naming the missing key and the available ones."""
    if not keys:
        raise ValueError("gdpo needs algorithm.gdpo_reward_keys: the reward dimensions to normalise one by one")
    missing = [k for k in keys if k not in rows]
    if missing:
        raise ValueError(f"algorithm.gdpo_reward_keys: {missing} not among the reward function's values; "
                         f"available: {sorted(rows)}")
    return torch.stack([rows[k].to(torch.float32) for k in keys], dim=-1)


OTB_EPS = 1e-8
"""The optimal token baseline's epsilon in its denominator (verl's)."""


def _otb_inputs(inputs: AdvantageInputs, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(valid (B, R), returns G (B, R), cumulative path variance W (B, R)) of the optimal token baseline:
      G_t = sum_{s >= t, valid} r_s                    (reward to go; 0 on masked tokens)
      w_t = 1 - 2 pi_t + sum_v pi_v^2   [* rho_t^2]    (pi_t = exp(old_logp_t); rho the rollout IS weight if any)
      W_t = sum_{s <= t, valid} w_s
    """
    old = _require(inputs, "old_logprobs", name, "(B, R) log-probs of the policy that sampled")
    sum_pi2 = _require(inputs, "sum_pi_squared", name, "(B, R) sum_v pi_v^2 of that policy")
    valid = inputs.response_mask.bool()
    rewards = _zeros_where_masked(inputs.token_rewards, valid)
    returns = _zeros_where_masked(rewards.flip(-1).cumsum(-1).flip(-1), valid)
    w = 1.0 - 2.0 * torch.exp(old.to(rewards)) + sum_pi2.to(rewards)
    if inputs.rollout_is_weights is not None:
        w = w * inputs.rollout_is_weights.to(rewards).square()
    cum_w = _zeros_where_masked(w, valid).cumsum(-1)
    return valid, returns, _zeros_where_masked(cum_w, valid)


def _otb_baseline(returns: torch.Tensor, cum_w: torch.Tensor, lengths: torch.Tensor, groups: _Groups,
                  members: torch.Tensor) -> torch.Tensor:
    """(B, L) per-position baseline b_t = sum_i G_it W_it / (sum_i W_it + 1e-8) over the rows of a group (their
    entries are 0 past their length), 0 for a group of fewer than 2 ``members``; then, in a group whose longest
    row is unique and longer than the second longest (L2), that row's baseline is 0 from position L2 on (nothing
    to compare its tail with: verl's handle_zero_tail)."""
    num = torch.zeros((len(groups.count), returns.shape[1]), dtype=returns.dtype,
                      device=returns.device).index_add_(0, groups.idx, returns * cum_w)
    den = torch.zeros_like(num).index_add_(0, groups.idx, cum_w) + OTB_EPS
    n = groups.sum(members.to(returns.dtype))  # (k,)
    baseline = torch.where((n >= 2).unsqueeze(-1), num / den, torch.zeros_like(num))[groups.idx]  # (B, L)
    lengths = lengths.to(returns.dtype)
    longest = groups.amax(lengths)  # (k,)
    at_top = lengths == longest[groups.idx]
    n_top = groups.sum(at_top.to(returns.dtype))
    second = groups.amax(torch.where(at_top, torch.full_like(lengths, -math.inf), lengths))
    cut = at_top & (n_top == 1)[groups.idx] & (longest > second)[groups.idx] & (n >= 2)[groups.idx]
    columns = torch.arange(returns.shape[1], device=returns.device, dtype=returns.dtype)
    tail = cut.unsqueeze(-1) & (columns >= second[groups.idx].unsqueeze(-1))
    return torch.where(tail, torch.zeros_like(baseline), baseline)


@register_estimator("optimal_token_baseline",
                    spec=EstimatorSpec(needs=frozenset({"old_logprobs", "sum_pi_squared"})))
def optimal_token_baseline_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """Optimal Token Baseline (Li et al. 2025, "The Optimal Token Baseline",
    https://yingru.notion.site/The-Optimal-Token-Baseline-399211a558b782cfa936014c0d42dfb8), as verl 0.9.1's
    ``optimal_token_baseline``: a baseline per token position instead of one per response, the return weighted by
    the path's accumulated gradient-norm proxy.

    With G, W as ``_otb_inputs`` (||grad log pi_t||^2 ~ 1 - 2 pi_t + sum_v pi_v^2, summed along the path),
    per group and response column t (rows aligned by column):
      b_t = sum_i G_it W_it m_it / (sum_i W_it m_it + 1e-8)          (0 for a group of one)
    the unique longest row of a group gets b = 0 from the second-longest row's length on (lengths counted in
    valid tokens, used as columns: verl's handle_zero_tail, always on), and
      A_t = G_t - b_t on valid tokens, 0 elsewhere;   returns = G (0 on masked tokens; verl leaves them there)
    Needs ``old_logprobs`` and ``sum_pi_squared`` (actor.calculate_sum_pi_squared); ``rollout_is_weights`` scale W by
    rho^2 when rollout correction gives them. No normalisation.
    """
    valid, returns, cum_w = _otb_inputs(inputs, "optimal_token_baseline")
    groups = _Groups.of(inputs.group, returns[:, 0])
    lengths = valid.sum(dim=-1)
    baseline = _otb_baseline(returns, cum_w, lengths, groups, torch.ones_like(lengths, dtype=torch.bool))
    advantages = _zeros_where_masked(returns - baseline, valid)
    return AdvantageOutputs(advantages=advantages, returns=returns)


@register_estimator("tir_optimal_token_baseline",
                    spec=EstimatorSpec(needs=frozenset({"old_logprobs", "sum_pi_squared"})))
def tir_optimal_token_baseline_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    """The optimal token baseline for tool-integrated / multi-turn responses, as verl 0.9.1's
    ``tir_optimal_token_baseline``: as ``optimal_token_baseline``, but rows are aligned by the index of a token
    among the row's VALID tokens (the k-th policy token of every response shares a baseline, whatever tool output
    sits between), and rows without a valid token do not count in their group (a group of one non-empty row
    gets b = 0). Same G, W, tail rule (on those indices), A = G - b on valid tokens; returns = G.
    """
    valid, returns, cum_w = _otb_inputs(inputs, "tir_optimal_token_baseline")
    B = valid.shape[0]
    lengths = valid.sum(dim=-1)
    width = max(int(lengths.max()) if B else 0, 1)
    rows, cols = valid.nonzero(as_tuple=True)
    index = (valid.cumsum(-1) - 1)[rows, cols]  # each valid token's index among its row's valid tokens
    packed_g = returns.new_zeros(B, width).index_put_((rows, index), returns[rows, cols])
    packed_w = cum_w.new_zeros(B, width).index_put_((rows, index), cum_w[rows, cols])
    groups = _Groups.of(inputs.group, returns[:, 0])
    baseline = _otb_baseline(packed_g, packed_w, lengths, groups, lengths > 0)
    advantages = torch.zeros_like(returns)
    advantages[rows, cols] = (packed_g - baseline)[rows, index]
    return AdvantageOutputs(advantages=advantages, returns=returns)
