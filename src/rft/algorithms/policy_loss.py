"""Policy-gradient losses. Each registered loss maps ``PolicyLossInputs`` to ``PolicyLossOutputs``: it
builds an unreduced per-token loss matrix (B, R) and reduces it once with ``agg_loss`` (with the mini-batch's
``AggNorm``, so splitting a mini-batch into micro-batches never changes the gradient).

Dimension names: B rows (= prompts x n responses), R response tokens. Notation of the docstrings: per token,
``l = logp - old_logp`` (the log-ratio), ``r = exp(l)`` (the importance ratio), ``A`` the advantage, ``sg`` stop
gradient, ``eps_low`` / ``eps_high`` = ``clip_ratio_low`` / ``clip_ratio_high``.
Every loss reports the metrics ``pg_clipfrac``, ``pg_clipfrac_lower`` and ``ppo_kl`` (0.0 where a loss has
no such notion), masked token means over the batch it was given.

Rollout correction (verl 0.9.1): when ``PolicyLossInputs.rollout_is_weights`` is given (the truncated importance
weights between the policy that computed ``old_logprobs`` and the rollout's, ``rft.algorithms.rollout_correction``),
every loss multiplies its per-token loss by them before aggregating (geo_mean: by their per-sequence geometric
mean; bypass_mode computes its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from rft.algorithms import rollout_correction as rollout_corr
from rft.algorithms.aggregation import AggNorm, agg_loss, trl_loss_agg_mode
from rft.algorithms.utils import masked_mean
from rft.registry import Registry

REC_CLIP_MODES = ("none", "one-side", "gspo-one-side", "two-side", "ring")
REC_WEIGHTS = ("none", "importance_sampling", "gspo_importance_sampling", "advantage")
REC_REGULARIZERS = ("none", "k2", "forward-kl")
TOPR_RATIO_LEVELS = ("token", "sequence")


@dataclass(frozen=True)
class RecOptions:
    """The rec loss's options (Trinity-RFT's rec policy_loss_fn_args; its epsilon_low / epsilon_high are the
    clip ratios)."""

    clip_mode: str = "none"
    """Which tokens keep their gradient: none (all), one-side, gspo-one-side, two-side, ring (``rec_policy_loss``)."""
    weight: str = "none"
    """What multiplies A: none, importance_sampling (sg(r)), gspo_importance_sampling (the sequence's sg(r)),
    advantage (exp(A / temp))."""
    regularizer: str = "none"
    """none, k2 (+ coef * l^2), forward-kl (- coef * logp)."""
    regularizer_coef: float = 0.0
    temp: float = 1.0
    """weight=advantage: the temperature."""
    clip_ratio_low_prime: float = 0.6
    """ring: a token with A >= 0 and r <= 1 - this keeps its gradient."""
    clip_ratio_high_prime: float = 2.0
    """ring: a token with A <= 0 and r >= 1 + this keeps its gradient."""


@dataclass
class PolicyLossInputs:
    logprobs: torch.Tensor
    """(B, R) log-probs of the sampled tokens under the current policy (requires grad)."""
    old_logprobs: torch.Tensor
    """(B, R) log-probs under the policy that sampled the rollout."""
    advantages: torch.Tensor
    """(B, R) per-token advantages, 0 on masked tokens."""
    response_mask: torch.Tensor
    """(B, R) 0/1, 1 on response tokens that take part in the loss."""
    clip_ratio_low: float = 0.2
    """PPO lower clip: the ratio is clipped below at 1 - clip_ratio_low."""
    clip_ratio_high: float = 0.2
    """PPO upper clip: the ratio is clipped above at 1 + clip_ratio_high (DAPO's clip-higher when > low)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound (> 1): for A < 0 the per-token loss is capped at -A * clip_ratio_c."""
    loss_agg_mode: str = "token-mean"
    """One of ``LOSS_AGG_MODES``."""
    agg_norm: AggNorm | None = None
    """Normalisers of the whole mini-batch; None when this batch is the whole mini-batch."""
    tau_pos: float = 1.0
    """sapo: gate temperature of tokens with A > 0."""
    tau_neg: float = 1.05
    """sapo: gate temperature of tokens with A <= 0."""
    clip_cov_ratio: float = 0.0002
    """clip_cov: fraction of the valid tokens whose gradient is cut."""
    clip_cov_lb: float = 1.0
    """clip_cov: lower bound of the covariance of a candidate token."""
    clip_cov_ub: float = 5.0
    """clip_cov: upper bound of the covariance of a candidate token."""
    kl_cov_ratio: float = 0.0002
    """kl_cov: fraction of the valid tokens (largest covariance) that get the |l| penalty."""
    ppo_kl_coef: float = 0.1
    """kl_cov: coefficient of the |l| penalty."""
    opmd_tau: float = 1.0
    """opmd: the regularisation strength tau; the loss is divided by 1 + tau."""
    dro_beta: float | None = None
    """dro: coefficient of the quadratic log-ratio penalty (> 0)."""
    topr_advantage_threshold: float = 0.0
    """topr: a token whose advantage is at most this gets the truncated ratio as its weight."""
    topr_ratio_level: str = "token"
    """topr: the ratio of that weight, per token (Trinity-RFT) or per sequence (the paper)."""
    rec: RecOptions = RecOptions()
    """rec: its options."""
    rollout_is_weights: torch.Tensor | None = None
    """(B, R) truncated importance weights pi_old / pi_rollout (detached, 0 on masked tokens), multiplied into
    the per-token loss; None: no rollout correction."""
    rollout_is: str | None = None
    """bypass_mode: the IS weight level ('token', 'sequence') or None (no weights)."""
    rollout_is_threshold: str | float = 2.0
    """bypass_mode: TIS upper bound, or an IcePop band 'lower_upper'."""
    rollout_is_batch_normalize: bool = False
    """bypass_mode: divide the IS weights by their mean over the mini-batch."""
    rollout_rs: str | None = None
    """bypass_mode: rejection-sampling options (comma separated) or None."""
    rollout_rs_threshold: str | float | None = None
    """bypass_mode: their thresholds."""
    bypass_loss_type: str = "ppo_clip"
    """bypass_mode: 'ppo_clip' (vanilla against the rollout's log-probs) or 'reinforce' (IS-weighted REINFORCE)."""
    selection_seed: int = 0
    """clip_cov: seed of the random choice among the candidate tokens."""
    m2_threshold: float = 0.04
    """m2po: the bound on the mean squared log-ratio of the trust-region tokens kept."""
    log_ratio_clip: float = 20.0
    """m2po: the log-ratio's clamp in the loss's value (its gradient unclamped)."""
    minibatch: PolicyLossInputs | None = None
    """Losses whose token selection uses statistics of the whole mini-batch (``needs_minibatch``: clip_cov,
    kl_cov) read them here: the detached inputs of the whole mini-batch, this batch being its rows
    ``row_offset : row_offset + B``. None: this batch is the whole mini-batch."""
    row_offset: int = 0
    """First row of this batch inside ``minibatch``."""
    rows: torch.Tensor | None = None
    """(B,) long: this batch's rows inside ``minibatch`` when they are not consecutive (micro-batches formed by
    token count); overrides ``row_offset``."""


@dataclass
class PolicyLossOutputs:
    loss: torch.Tensor
    """Scalar, already aggregated with ``agg_loss(..., loss_agg_mode, agg_norm)``."""
    metrics: dict[str, float]
    """Detached python floats, masked token means over this micro-batch."""


PolicyLossFn = Callable[[PolicyLossInputs], PolicyLossOutputs]

POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")


def compute_policy_loss(name: str, inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """Look up the policy loss registered as ``name`` and apply it to ``inputs``."""
    return POLICY_LOSSES.get(name)(inputs)


def policy_loss_needs_minibatch(name: str, options: object | None = None) -> bool:
    """Whether the loss registered as ``name`` uses statistics of the whole mini-batch (a token selection, a
    normaliser), so a caller splitting the mini-batch into micro-batches must pass
    ``PolicyLossInputs.minibatch``. A loss may declare it only for some options (a predicate over an object
    carrying ``PolicyLossInputs``' option names, e.g. the inputs or the worker's settings); without ``options``
    such a loss answers True."""
    needs = getattr(POLICY_LOSSES.get(name), "needs_minibatch", False)
    if callable(needs):
        return True if options is None else bool(needs(options))
    return bool(needs)


def policy_loss_zero_at_zero_advantage(name: str, options: object | None = None) -> bool:
    """Whether the loss registered as ``name`` declares that a row whose advantages are 0 on every token adds 0 to
    the loss and to its gradient (``zero_at_zero_advantage``: the per-token loss is A times a function of the
    log-probs of that row alone), so a caller may leave such rows out (their tokens still counted in the
    normalisers). A loss with a term of its own (dro's penalty) or a token selection over the mini-batch (clip_cov,
    kl_cov) does not; a predicate may answer per options, as for ``policy_loss_needs_minibatch``."""
    zero = getattr(POLICY_LOSSES.get(name), "zero_at_zero_advantage", False)
    if callable(zero):
        return False if options is None else bool(zero(options))
    return bool(zero)


def _weighted(loss_mat: torch.Tensor, inputs: PolicyLossInputs) -> torch.Tensor:
    """The per-token loss times the rollout-correction IS weights, when there are any."""
    weights = inputs.rollout_is_weights
    return loss_mat if weights is None else loss_mat * weights.to(loss_mat)


def _metrics(mask: torch.Tensor, clipfrac: torch.Tensor | None, clipfrac_lower: torch.Tensor | None,
             ppo_kl: torch.Tensor) -> dict[str, float]:
    """The three standard metrics as python floats (masked means; None: 0.0), with one host copy."""
    with torch.no_grad():
        zero = torch.zeros((), dtype=ppo_kl.dtype, device=ppo_kl.device)
        values = torch.stack([
            masked_mean(clipfrac.to(ppo_kl.dtype), mask) if clipfrac is not None else zero,
            masked_mean(clipfrac_lower.to(ppo_kl.dtype), mask) if clipfrac_lower is not None else zero,
            masked_mean(ppo_kl, mask),
        ]).tolist()
    return dict(zip(("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"), values))


@POLICY_LOSSES.register("vanilla")
def vanilla_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """Clipped-surrogate PPO loss (Schulman et al. 2017) with dual clip (Ye et al. 2020), as in verl.

    Per token, with log-ratio ``l = clamp(logp - old_logp, -20, 20)`` and ``rho = exp(l)``:
      pg1 = -A * rho
      pg2 = -A * clamp(rho, 1 - clip_ratio_low, 1 + clip_ratio_high)
      clip1 = max(pg1, pg2)                                   (the PPO pessimistic bound)
      pg3 = -A * clip_ratio_c
      loss = min(pg3, clip1) if A < 0 else clip1              (dual clip: caps the loss of A < 0 tokens)
    then aggregated with ``agg_loss(loss, mask, loss_agg_mode, agg_norm)``.
    Metrics (masked means over valid tokens of this micro-batch):
      pg_clipfrac = mean[pg2 > pg1], pg_clipfrac_lower = mean[(clip1 > pg3) & (A < 0)], ppo_kl = mean[-l].
    """
    if inputs.clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for the dual clip, got {inputs.clip_ratio_c}")
    mask = inputs.response_mask
    adv = inputs.advantages

    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)  # (B, R)
    ratio = torch.exp(log_ratio)  # (B, R)
    pg1 = -adv * ratio  # (B, R)
    pg2 = -adv * ratio.clamp(1.0 - inputs.clip_ratio_low, 1.0 + inputs.clip_ratio_high)  # (B, R)
    clip1 = torch.maximum(pg1, pg2)  # (B, R)
    pg3 = -adv * inputs.clip_ratio_c  # (B, R)
    clip2 = torch.minimum(pg3, clip1)  # (B, R)
    negative = adv < 0
    loss_mat = _weighted(torch.where(negative, clip2, clip1), inputs)  # (B, R)

    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, pg2 > pg1, (clip1 > pg3) & negative, -log_ratio.detach()))


@POLICY_LOSSES.register("gspo")
def gspo_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """GSPO, Group Sequence Policy Optimization (Zheng et al. 2025, arXiv:2507.18071), as verl's ``gspo``.

    Sequence log-ratio ``s_i = sum_t l_it m_it / max(1, sum_t m_it)``; per token
      log w = min(logp - sg(logp) + sg(s_i), 10)      (value s_i, gradient that of logp; exponent capped at 10)
      w = exp(log w)
      loss = max(-A * w, -A * clamp(w, 1 - eps_low, 1 + eps_high))
    aggregated with ``loss_agg_mode`` (verl 0.9.1 honours it; the paper's sequence-level objective is
    seq-mean-token-mean, which must be asked for: the default is token-mean). No dual clip.
    Metrics: pg_clipfrac = mean[clipped term larger], pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    mask, adv = inputs.response_mask, inputs.advantages
    logp = inputs.logprobs
    log_ratio = logp - inputs.old_logprobs  # (B, R)
    seq_log_ratio = masked_mean(log_ratio.detach(), mask, dim=-1)  # (B,)
    log_w = (logp - logp.detach() + seq_log_ratio.unsqueeze(-1)).clamp(max=10.0)  # (B, R)
    w = torch.exp(log_w)
    pg1 = -adv * w
    pg2 = -adv * w.clamp(1.0 - inputs.clip_ratio_low, 1.0 + inputs.clip_ratio_high)
    loss_mat = _weighted(torch.maximum(pg1, pg2), inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, pg2 > pg1, None, -log_ratio.detach()))


@POLICY_LOSSES.register("gpg")
def gpg_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """GPG, Group Policy Gradient (Chu et al. 2025, arXiv:2504.02546), as verl's ``gpg``: plain REINFORCE.

    Per token ``loss = -logp * A`` (no importance ratio, no clip), aggregated with ``loss_agg_mode``.
    Metrics: pg_clipfrac = pg_clipfrac_lower = 0, ppo_kl = mean[-l] (verl reports 0).
    """
    mask = inputs.response_mask
    loss_mat = _weighted(-inputs.logprobs * inputs.advantages, inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, None, None, (inputs.old_logprobs - inputs.logprobs).detach()))


@POLICY_LOSSES.register("cispo")
def cispo_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """CISPO, Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv:2506.13585), as verl's ``cispo``.

    With ``l`` clamped to [-20, 20] and ``r = exp(l)``, per token
      loss = -sg(clamp(r, 1 - eps_low, 1 + eps_high)) * A * logp
    (every token keeps a gradient; the clipped ratio only weights it), aggregated with ``loss_agg_mode``.
    Metrics: pg_clipfrac = mean[clamp(r) != r], pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    TRL's ``loss_type="cispo"`` clips only from above (min(r, epsilon_high)); verl and rft clip both sides.
    """
    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = (inputs.logprobs - inputs.old_logprobs).detach().clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    weight = ratio.clamp(1.0 - inputs.clip_ratio_low, 1.0 + inputs.clip_ratio_high)
    loss_mat = _weighted(-weight * adv * inputs.logprobs, inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, weight != ratio, None, -log_ratio))


@POLICY_LOSSES.register("sapo")
def sapo_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """SAPO, Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv:2511.20347), as verl's ``sapo``.

    A smooth gate replaces the clip. With ``l`` clamped to [-20, 20], ``r = exp(l)``, ``tau = tau_pos`` where
    A > 0 and ``tau_neg`` elsewhere, per token
      gate = sigmoid(tau * (r - 1)) * 4 / tau        (value 2 / tau and slope 1 at r = 1, like r itself)
      loss = -gate * A
    aggregated with seq-mean-token-mean whatever ``loss_agg_mode`` says (verl forces it too).
    Metrics: pg_clipfrac = pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    tau = torch.where(adv > 0, torch.full_like(adv, inputs.tau_pos), torch.full_like(adv, inputs.tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = agg_loss(_weighted(-gate * adv, inputs), mask, "seq-mean-token-mean", inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, None, None, -log_ratio.detach()))


@POLICY_LOSSES.register("geo_mean")
def geo_mean_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """GMPO, Geometric-Mean Policy Optimization (Zhao et al. 2025, arXiv:2507.20673), as verl's ``geo_mean``.

    Per token (no clamp of l), with ``sgn = sign(A)``:
      lc   = clamp(l, -eps_low, eps_high)                    (the clip acts on the log-ratio)
      lmin = sgn * min(sgn * l, sgn * lc)                    (pessimistic side; 0 where A = 0)
    per sequence i with n_i valid tokens (at least 1):
      ratio_i = exp(sum_t lmin_it m_it / n_i)                (geometric mean of the clipped token ratios)
      adv_i   = sum_t A_it m_it / n_i
      loss_i  = -adv_i * ratio_i
    loss = sum_i loss_i / num_seqs of the mini-batch (verl: torch.mean over the rows; ``loss_agg_mode`` is not
    used; a row without valid tokens counts with loss 0; verl divides by n_i + 1e-8 rather than max(1, n_i)).
    Metrics: pg_clipfrac = mean[l != lc and A > 0], pg_clipfrac_lower = mean[l != lc and A < 0],
    ppo_kl = mean[-l].
    """
    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = inputs.logprobs - inputs.old_logprobs  # (B, R)
    sgn = torch.sign(adv)
    clamped = log_ratio.clamp(-inputs.clip_ratio_low, inputs.clip_ratio_high)
    lmin = sgn * torch.minimum(sgn * log_ratio, sgn * clamped)  # (B, R)
    ratio = torch.exp(masked_mean(lmin, mask, dim=-1))  # (B,)
    seq_adv = masked_mean(adv, mask, dim=-1)  # (B,)
    seq_loss = -seq_adv * ratio  # (B,)
    if inputs.rollout_is_weights is not None:  # their geometric mean over the row's valid tokens (verl)
        log_w = torch.log(inputs.rollout_is_weights.to(ratio) + 1e-10)
        seq_loss = seq_loss * torch.exp(masked_mean(log_w, mask, dim=-1))
    # A per-sequence value spread over its tokens and token-averaged back is that value: seq-mean-token-mean
    # then gives sum_i loss_i / num_seqs with the mini-batch's num_seqs.
    loss = agg_loss(seq_loss.unsqueeze(-1).expand_as(log_ratio), mask, "seq-mean-token-mean", inputs.agg_norm)
    clipped = log_ratio.detach() != clamped.detach()
    return PolicyLossOutputs(loss, _metrics(mask, clipped & (adv > 0), clipped & (adv < 0), -log_ratio.detach()))


def _minibatch_rows(inputs: PolicyLossInputs, selected: torch.Tensor) -> torch.Tensor:
    """This batch's rows of a (B_mini, R) selection computed on ``inputs.minibatch`` (or on ``inputs``)."""
    if inputs.minibatch is None:
        return selected
    if inputs.rows is not None:
        return selected[inputs.rows.to(selected.device)]
    return selected[inputs.row_offset: inputs.row_offset + inputs.logprobs.shape[0]]


def _covariance(src: PolicyLossInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(valid, detached logp, cov): cov = (A - mean A) * (logp - mean logp), means over the valid tokens."""
    valid = src.response_mask.bool()
    logp = src.logprobs.detach()
    adv = src.advantages.detach()
    cov = (adv - masked_mean(adv, valid)) * (logp - masked_mean(logp, valid))
    return valid, logp, cov


@POLICY_LOSSES.register("clip_cov")
def clip_cov_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617), as verl's
    ``clip_cov``.

    Token selection, over the whole mini-batch (``inputs.minibatch``; verl uses whatever batch the loss sees):
      cov = (A - mean A) * (logp - mean logp)                (means over valid tokens, logp detached)
      candidates: valid, not clipped by PPO (pg2 <= pg1 below), clip_cov_lb < cov < clip_cov_ub
      chosen: max(1, int(clip_cov_ratio * valid tokens)) candidates drawn uniformly at random (a generator
              seeded with ``selection_seed``; verl draws from the global RNG)
    Per token (l not clamped, no dual clip), with corr = 0 on chosen tokens and 1 elsewhere:
      pg1 = -A * r, pg2 = -A * clamp(r, 1 - eps_low, 1 + eps_high)
      loss = max(pg1, pg2) * corr                            (chosen tokens lose their gradient)
    aggregated with ``loss_agg_mode``. Metrics: pg_clipfrac = mean[corr == 0], pg_clipfrac_lower = 0,
    ppo_kl = mean[-l].
    """
    src = inputs.minibatch if inputs.minibatch is not None else inputs
    valid, logp_all, cov = _covariance(src)
    with torch.no_grad():
        adv_all = src.advantages
        ratio_all = torch.exp(logp_all - src.old_logprobs)
        pg1_all = -adv_all * ratio_all
        pg2_all = -adv_all * ratio_all.clamp(1.0 - inputs.clip_ratio_low, 1.0 + inputs.clip_ratio_high)
        candidates = valid & ~(pg2_all > pg1_all) & (cov > inputs.clip_cov_lb) & (cov < inputs.clip_cov_ub)
        clip_num = max(int(inputs.clip_cov_ratio * int(valid.sum())), 1)
        index = candidates.flatten().nonzero().squeeze(-1)
        generator = torch.Generator().manual_seed(inputs.selection_seed)
        chosen = index[torch.randperm(len(index), generator=generator)[:clip_num].to(index.device)]
        cut = torch.zeros(candidates.numel(), dtype=torch.bool, device=candidates.device)
        cut[chosen] = True
        cut = _minibatch_rows(inputs, cut.view_as(candidates))

    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = inputs.logprobs - inputs.old_logprobs
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - inputs.clip_ratio_low, 1.0 + inputs.clip_ratio_high)
    loss_mat = _weighted(torch.maximum(pg1, pg2) * (~cut).to(pg1.dtype), inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, cut, None, -log_ratio.detach()))


clip_cov_policy_loss.needs_minibatch = True  # type: ignore[attr-defined]


@POLICY_LOSSES.register("kl_cov")
def kl_cov_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617), as verl's ``kl_cov``.

    Token selection, over the whole mini-batch (``inputs.minibatch``): cov as in clip_cov; the
    k = max(1, int(kl_cov_ratio * valid tokens)) valid tokens with the largest cov (none if there is no valid
    token). Per token (l not clamped, no clip):
      loss = -A * r + ppo_kl_coef * |l|   on selected tokens
      loss = -A * r                       elsewhere
    aggregated with ``loss_agg_mode``. Metrics (as verl): pg_clipfrac = pg_clipfrac_lower = 0,
    ppo_kl = mean[|l|].
    """
    src = inputs.minibatch if inputs.minibatch is not None else inputs
    valid, _, cov = _covariance(src)
    with torch.no_grad():
        flat_valid = valid.flatten()
        index = flat_valid.nonzero().squeeze(-1)
        selected = torch.zeros(flat_valid.numel(), dtype=torch.bool, device=valid.device)
        if len(index):
            k = max(1, int(len(index) * inputs.kl_cov_ratio))
            top = torch.topk(cov.flatten()[index], k, largest=True).indices
            selected[index[top]] = True
        selected = _minibatch_rows(inputs, selected.view_as(valid))

    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = inputs.logprobs - inputs.old_logprobs
    pg = -adv * torch.exp(log_ratio)
    loss_mat = _weighted(torch.where(selected, pg + inputs.ppo_kl_coef * log_ratio.abs(), pg), inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, None, None, log_ratio.detach().abs()))


kl_cov_policy_loss.needs_minibatch = True  # type: ignore[attr-defined]


@POLICY_LOSSES.register("m2po")
def m2po_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """M2PO, Second-Moment Trust Policy Optimization (Zheng et al. 2025, "Prosperity before Collapse: How Far Can
    Off-Policy RL Reach with Stale Data on LLMs?", Algorithm 1), as Trinity-RFT's ``m2po`` policy loss.

    Token selection, over the whole mini-batch (``inputs.minibatch``), with l = logp - old_logp (detached):
      trust-region tokens: valid with A > 0 and l > 0, or A < 0 and l < 0 (where PPO's clip would act)
      M2 = mean of l^2 over them; while M2 > m2_threshold the tokens of largest l^2 are dropped: the kept ones
      are the longest prefix of their l^2 sorted ascending whose mean is at most m2_threshold
    Per token, with l' = l clamped to [-log_ratio_clip, log_ratio_clip] in value (the gradient of l itself):
      loss = -A * exp(l')   on the valid tokens not dropped, 0 on the dropped ones
    aggregated with ``loss_agg_mode`` over every valid token (the paper's denominator: dropped tokens count).
    Metrics: pg_clipfrac = the dropped tokens' fraction, pg_clipfrac_lower = 0, ppo_kl = mean[-l'].
    """
    src = inputs.minibatch if inputs.minibatch is not None else inputs
    with torch.no_grad():
        valid = src.response_mask.bool()
        l_all = (src.logprobs - src.old_logprobs).detach().float()
        adv_all = src.advantages
        trust = valid & (((adv_all > 0) & (l_all > 0)) | ((adv_all < 0) & (l_all < 0)))
        index = trust.flatten().nonzero().squeeze(-1)
        second = l_all.flatten()[index].square()
        drop = torch.zeros(trust.numel(), dtype=torch.bool, device=trust.device)
        if len(index) and float(second.mean()) > inputs.m2_threshold:
            ordered, order = torch.sort(second, stable=True)
            prefix = torch.cumsum(ordered, 0) / torch.arange(1, len(ordered) + 1, device=ordered.device)
            keep = int((prefix <= inputs.m2_threshold).sum())
            drop[index[order[keep:]]] = True
        drop = _minibatch_rows(inputs, drop.view_as(trust))

    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = inputs.logprobs - inputs.old_logprobs
    clipped = log_ratio.clamp(-inputs.log_ratio_clip, inputs.log_ratio_clip)
    stable = log_ratio + (clipped - log_ratio).detach()
    loss_mat = _weighted(torch.where(drop, torch.zeros_like(log_ratio), -adv * torch.exp(stable)), inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, drop, None, -stable.detach()))


m2po_policy_loss.needs_minibatch = True  # type: ignore[attr-defined]
m2po_policy_loss.zero_at_zero_advantage = True  # type: ignore[attr-defined]  # a row of A = 0 has no trust token


@POLICY_LOSSES.register("opmd")
def opmd_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """OPMD, Online Policy Mirror Descent as Trinity-RFT defines it (its ``opmd`` policy loss; Trinity-RFT
    technical report, arXiv:2505.17826, after Kimi k1.5's online mirror descent, arXiv:2501.12599).

    Per token ``loss = -A * logp`` (no importance ratio, no clip), aggregated with ``loss_agg_mode``, the
    aggregate divided by ``1 + tau`` (``opmd_tau``, Trinity's ``tau``; the advantages carry the
    mirror-descent baseline, e.g. Trinity's opmd advantage).
    Metrics: pg_clipfrac = pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    mask = inputs.response_mask
    loss = agg_loss(_weighted(-inputs.advantages * inputs.logprobs, inputs), mask, inputs.loss_agg_mode,
                    inputs.agg_norm)
    loss = loss / (1.0 + inputs.opmd_tau)
    return PolicyLossOutputs(loss, _metrics(mask, None, None, (inputs.old_logprobs - inputs.logprobs).detach()))


@POLICY_LOSSES.register("dro")
def dro_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """DRO, Direct Reward Optimization (Richemond et al. 2024, "Offline Regularised Reinforcement Learning for
    Large Language Models Alignment", arXiv:2405.19107), as verl 0.9.1's ``dro``: the advantage-weighted
    log-likelihood with a quadratic penalty on the log-ratio to the old policy, per token
      loss = -(A * logp - dro_beta / 2 * l^2)          (l not clamped; gradient -(A - dro_beta * l) on logp)
    aggregated with ``loss_agg_mode``. ``dro_beta`` (``policy_loss.dro_beta``) must be > 0.
    Metrics: pg_clipfrac = pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    beta = inputs.dro_beta
    if beta is None or not beta > 0:
        raise ValueError(f"dro needs dro_beta > 0 (actor_rollout_ref.actor.policy_loss.dro_beta), got {beta}")
    mask = inputs.response_mask
    log_ratio = inputs.logprobs - inputs.old_logprobs
    loss_mat = _weighted(-(inputs.advantages * inputs.logprobs - 0.5 * beta * log_ratio.square()), inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, None, None, -log_ratio.detach()))


@POLICY_LOSSES.register("topr")
def topr_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """TOPR, Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv:2503.14286), as Trinity-RFT's ``topr``.

    Positive examples get REINFORCE's full gradient, negative ones a truncated importance ratio, per token
      alpha = clamp(r, 0, 1)   where A <= topr_advantage_threshold        (r detached)
      alpha = 1                elsewhere
      loss  = -sg(alpha) * A * logp
    aggregated with ``loss_agg_mode``. ``topr_ratio_level`` token (Trinity's) takes r per token; sequence (the
    paper's) takes each row's r = exp(sum_t l_t) over its valid tokens (computed as exp(min(sum l, 0)), since
    only its truncation to [0, 1] is used). The paper's advantage is the reward itself (Trinity's topr default
    advantage_fn ``reinforce``); threshold 0 reads "R <= 0" as the paper's negative set (R < 0) plus the zeros,
    whose loss is 0 either way.
    Metrics: pg_clipfrac = mean[alpha < 1], pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    if inputs.topr_ratio_level not in TOPR_RATIO_LEVELS:
        raise ValueError(f"topr: ratio level {inputs.topr_ratio_level!r} is not one of {TOPR_RATIO_LEVELS}")
    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = (inputs.logprobs - inputs.old_logprobs).detach()  # (B, R)
    if inputs.topr_ratio_level == "token":
        truncated = torch.exp(log_ratio.clamp(max=0.0))
    else:
        seq = (log_ratio * mask).sum(dim=-1, keepdim=True)  # (B, 1)
        truncated = torch.exp(seq.clamp(max=0.0)).expand_as(log_ratio)
    alpha = torch.where(adv <= inputs.topr_advantage_threshold, truncated, torch.ones_like(truncated))
    loss_mat = _weighted(-alpha * adv * inputs.logprobs, inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, alpha < 1.0, None, -log_ratio))


@POLICY_LOSSES.register("sppo")
def sppo_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """sPPO, PPO with the clipped ratio inside a log (Vaswani et al. 2021, "A functional mirror ascent view of
    policy gradient methods with function approximation", arXiv:2108.05828), as Trinity-RFT's ``sppo``: the
    objective A * log(clip(r, 1 / (1 + eps_low), 1 + eps_high)), per token
      loss = -A * l * [1 / (1 + eps_low) <= sg(r) <= 1 + eps_high]       (l = logp - old_logp)
    (the gradient of the clipped log is A * grad logp inside the range, 0 outside), aggregated with
    ``loss_agg_mode``. Trinity's single ``epsilon`` (default 0.3) is both clip ratios.
    Metrics: pg_clipfrac = mean[outside the range], pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    mask, adv = inputs.response_mask, inputs.advantages
    log_ratio = inputs.logprobs - inputs.old_logprobs
    ratio = torch.exp(log_ratio.detach())
    inside = (ratio >= 1.0 / (1.0 + inputs.clip_ratio_low)) & (ratio <= 1.0 + inputs.clip_ratio_high)
    loss_mat = _weighted(-adv * log_ratio * inside.to(log_ratio.dtype), inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, ~inside, None, -log_ratio.detach()))


@POLICY_LOSSES.register("rec")
def rec_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """REC, REINFORCE with off-policy corrections (Yao et al. 2025, "Group-relative REINFORCE is secretly an
    off-policy algorithm", arXiv:2509.24203), as Trinity-RFT's ``rec``. With r = sg(exp(l)) per token and
    s_i = sg(exp(mean_t l_it)) per row (valid tokens), eps = clip_ratio_low / high, eps' = rec.clip_ratio_*_prime,
    a token keeps its gradient where ``rec.clip_mode`` says:
      none: always;   two-side: 1 - eps_low <= r <= 1 + eps_high
      one-side:       (A >= 0 and r <= 1 + eps_high) or (A <= 0 and r >= 1 - eps_low)
      gspo-one-side:  as one-side with s_i in place of r
      ring:           two-side, or (A >= 0 and r <= 1 - eps'_low), or (A <= 0 and r >= 1 + eps'_high)
    A is weighted by ``rec.weight``: none, importance_sampling (A * r), gspo_importance_sampling (A * s_i),
    advantage (A * exp(A / rec.temp)); per token
      loss = -A_w * logp * [kept]  (+ coef * l^2 with regularizer k2; - coef * logp with forward-kl)
    aggregated with ``loss_agg_mode`` (Trinity takes the token mean, and seq-mean-token-mean for gspo-one-side:
    its dialect sets that mode). Metrics: pg_clipfrac = mean[not kept], pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    o = inputs.rec
    for value, allowed in ((o.clip_mode, REC_CLIP_MODES), (o.weight, REC_WEIGHTS), (o.regularizer, REC_REGULARIZERS)):
        if value not in allowed:
            raise ValueError(f"rec: {value!r} is not one of {allowed}")
    mask, adv = inputs.response_mask, inputs.advantages
    low, high = inputs.clip_ratio_low, inputs.clip_ratio_high
    log_ratio = inputs.logprobs - inputs.old_logprobs
    ratio = torch.exp(log_ratio.detach())  # (B, R)
    seq_ratio = torch.exp(masked_mean(log_ratio.detach(), mask, dim=-1)).unsqueeze(-1).expand_as(ratio)  # (B, R)
    pos, neg = adv >= 0, adv <= 0
    two_side = (ratio >= 1.0 - low) & (ratio <= 1.0 + high)
    kept = {"none": torch.ones_like(pos),
            "two-side": two_side,
            "one-side": (pos & (ratio <= 1.0 + high)) | (neg & (ratio >= 1.0 - low)),
            "gspo-one-side": (pos & (seq_ratio <= 1.0 + high)) | (neg & (seq_ratio >= 1.0 - low)),
            "ring": two_side | (pos & (ratio <= 1.0 - o.clip_ratio_low_prime))
            | (neg & (ratio >= 1.0 + o.clip_ratio_high_prime))}[o.clip_mode]
    weighted = {"none": adv, "importance_sampling": adv * ratio, "gspo_importance_sampling": adv * seq_ratio,
                "advantage": adv * torch.exp(adv / o.temp)}[o.weight]
    loss_mat = -weighted * inputs.logprobs * kept.to(ratio.dtype)
    if o.regularizer == "k2":
        loss_mat = loss_mat + o.regularizer_coef * log_ratio.square()
    elif o.regularizer == "forward-kl":
        loss_mat = loss_mat - o.regularizer_coef * inputs.logprobs
    loss = agg_loss(_weighted(loss_mat, inputs), mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, ~kept, None, -log_ratio.detach()))


@POLICY_LOSSES.register("importance_sampling")
def importance_sampling_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """The plain importance-sampled policy gradient, as Trinity-RFT's ``importance_sampling`` (the loss it names
    for on-policy distillation without clipping): with l clamped to [-20, 20] and r = exp(l), per token
      loss = -A * r                       (no clip; the gradient is -A * r * grad logp)
    aggregated with ``loss_agg_mode``. Metrics: pg_clipfrac = pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    mask = inputs.response_mask
    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)
    loss_mat = _weighted(-inputs.advantages * torch.exp(log_ratio), inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, None, None, -log_ratio.detach()))


@POLICY_LOSSES.register("sft")
def sft_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """Supervised fine-tuning on the loss tokens, as Trinity-RFT's ``sft`` policy loss (its raft algorithm's):
    per token ``loss = -logp``, aggregated with ``loss_agg_mode``; the advantages are not read, so which
    responses are learnt is the estimator's choice (raft: the best of each group, through the loss mask).
    Metrics: pg_clipfrac = pg_clipfrac_lower = 0, ppo_kl = mean[-l].
    """
    mask = inputs.response_mask
    loss = agg_loss(_weighted(-inputs.logprobs, inputs), mask, inputs.loss_agg_mode, inputs.agg_norm)
    return PolicyLossOutputs(loss, _metrics(mask, None, None, (inputs.old_logprobs - inputs.logprobs).detach()))


def _dppo_loss(inputs: PolicyLossInputs, inside: torch.Tensor, ratio: torch.Tensor,
               log_ratio: torch.Tensor) -> PolicyLossOutputs:
    """DPPO's shared tail: ``-A * sg(min(r, clip_ratio_c)) * logp`` on the tokens ``inside`` the trust region."""
    mask = inputs.response_mask
    truncated = ratio.clamp(max=inputs.clip_ratio_c).detach()
    keep = inside.detach().to(ratio.dtype)
    loss_mat = _weighted(-inputs.advantages * truncated * inputs.logprobs * keep, inputs)
    loss = agg_loss(loss_mat, mask, inputs.loss_agg_mode, inputs.agg_norm)
    outside = ~inside
    capped = (ratio > inputs.clip_ratio_c) & inside
    return PolicyLossOutputs(loss, _metrics(mask, outside, capped, -log_ratio.detach()))


@POLICY_LOSSES.register("dppo_tv")
def dppo_tv_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """DPPO-Binary-TV, Divergence Proximal Policy Optimization (Qi et al. 2026, "Rethinking the Trust Region in LLM
    Reinforcement Learning", arXiv:2602.04879), as verl 0.9.1's ``dppo_tv``.

    The trust region is on the probabilities, not the ratio: with p = exp(logp), p_old = exp(old_logp),
    l = clamp(logp - old_logp, -20, 20), r = exp(l), a token is inside when
      A > 0:  p - p_old <= eps_high          A <= 0:  p - p_old >= -eps_low
    (``clip_ratio_high`` / ``clip_ratio_low`` are the TV thresholds here), and per token
      loss = -A * sg(min(r, clip_ratio_c)) * logp * [inside]      (truncated IS instead of PPO's clip)
    aggregated with ``loss_agg_mode``; no gradient flows through the mask or the ratio. The paper recommends a
    large ``clip_ratio_c`` (verl's fallback is 20; its config default, like rft's, 3).
    Metrics: pg_clipfrac = mean[outside], pg_clipfrac_lower = mean[r > clip_ratio_c and inside], ppo_kl = mean[-l].
    """
    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    change = torch.exp(inputs.logprobs) - torch.exp(inputs.old_logprobs)
    inside = torch.where(inputs.advantages > 0, change <= inputs.clip_ratio_high, change >= -inputs.clip_ratio_low)
    return _dppo_loss(inputs, inside, ratio, log_ratio)


@POLICY_LOSSES.register("dppo_kl")
def dppo_kl_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """DPPO-Binary-KL (Qi et al. 2026, arXiv:2602.04879), as verl 0.9.1's ``dppo_kl``: as ``dppo_tv`` with the
    binary KL between the old and the new Bernoulli (the sampled token vs the rest) as the divergence,
      d = p_old * (old_logp - logp) + (1 - p_old) * log((1 - p_old + 1e-8) / (1 - p + 1e-8))
    and a token inside when
      A > 0:  d <= eps_high or p <= p_old          A <= 0:  d <= eps_low or p >= p_old
    (a move back towards the old policy is never masked). Loss and metrics as ``dppo_tv``.
    """
    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    p, p_old = torch.exp(inputs.logprobs), torch.exp(inputs.old_logprobs)
    binary_kl = p_old * (inputs.old_logprobs - inputs.logprobs) + (1.0 - p_old) * torch.log(
        (1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
    inside = torch.where(inputs.advantages > 0, (binary_kl <= inputs.clip_ratio_high) | (p <= p_old),
                         (binary_kl <= inputs.clip_ratio_low) | (p >= p_old))
    return _dppo_loss(inputs, inside, ratio, log_ratio)


_BYPASS_METRICS = ("kl", "k3_kl", "chi2_token", "rollout_is_mean", "rollout_rs_masked_fraction")
"""The rollout-correction metrics bypass_mode reports: token means, so the micro-batches' shares add up to the
mini-batch's value."""


@POLICY_LOSSES.register("bypass_mode")
def bypass_mode_policy_loss(inputs: PolicyLossInputs) -> PolicyLossOutputs:
    """verl 0.9.1's bypass mode (``algorithm.rollout_correction.bypass_mode``): no old-policy forward pass, the
    rollout's log-probs stand in for the old ones (``old_logprobs`` here ARE the rollout's), and the correction is
    computed in the loss from the current policy, with l = logp - logp_rollout (``rft.algorithms.rollout_correction``):
      IS weights w (``rollout_is``, ``rollout_is_threshold``; no gradient) and a rejection mask k (``rollout_rs``,
      ``rollout_rs_threshold``); the loss runs on the valid tokens with k = 1, the normaliser stays the
      mini-batch's (rejected tokens count in token-mean's denominator, as in verl)
      bypass_loss_type = ppo_clip:   vanilla PPO against the rollout (its ratio is the IS correction; w unused)
      bypass_loss_type = reinforce:  loss = -A * w * logp (w = 1 without ``rollout_is``), no clip
    With ``rollout_is_batch_normalize`` w is divided by its mean over the whole mini-batch (``minibatch``; verl
    takes the micro-batch's, so its result depends on the micro-batch size).
    Metrics: vanilla's (ppo_clip) or ppo_kl = mean[logp_rollout - logp] over the kept tokens (reinforce); and
    ``rollout_corr/{kl, k3_kl, chi2_token, rollout_is_mean, rollout_rs_masked_fraction}`` of this micro-batch.
    """
    if inputs.bypass_loss_type not in rollout_corr.BYPASS_LOSS_TYPES:
        raise ValueError(f"bypass_mode: loss_type={inputs.bypass_loss_type!r} is not one of "
                         f"{', '.join(rollout_corr.BYPASS_LOSS_TYPES)}")
    mask = inputs.response_mask
    rollout_logprobs = inputs.old_logprobs
    current = inputs.logprobs.detach()
    corr = rollout_corr.compute_rollout_correction(
        current, rollout_logprobs, mask, inputs.rollout_is, inputs.rollout_is_threshold, False, inputs.rollout_rs,
        inputs.rollout_rs_threshold) if mask.bool().any() else None
    weights = corr.weights if corr is not None else None
    if weights is not None and inputs.rollout_is_batch_normalize:
        src = inputs.minibatch if inputs.minibatch is not None else inputs
        with torch.no_grad():
            all_weights, _ = rollout_corr.rollout_is_weights(src.logprobs.detach() - src.old_logprobs,
                                                             src.response_mask, inputs.rollout_is,
                                                             inputs.rollout_is_threshold)
            mean = rollout_corr.is_weights_mean(all_weights, src.response_mask, inputs.rollout_is)
        weights, _ = rollout_corr.normalise_is_weights(weights, mean)
    kept = mask * corr.keep.to(mask) if corr is not None else mask
    if inputs.agg_norm is None:  # the rejected tokens stay in the normaliser (verl's global batch info)
        inputs = replace(inputs, agg_norm=AggNorm(float(mask.bool().sum().clamp(min=1)), float(mask.shape[0]),
                                                  mask.shape[-1]))
    if inputs.bypass_loss_type == "ppo_clip":
        out = vanilla_policy_loss(replace(inputs, response_mask=kept, rollout_is_weights=None))
    else:
        loss_mat = -inputs.advantages * inputs.logprobs
        if weights is not None:
            loss_mat = loss_mat * weights.to(loss_mat)
        loss = agg_loss(loss_mat, kept, inputs.loss_agg_mode, inputs.agg_norm)
        out = PolicyLossOutputs(loss, _metrics(kept, None, None, (rollout_logprobs - current).to(loss.dtype)))
    if corr is not None:
        out.metrics.update({f"rollout_corr/{k}": corr.metrics[f"rollout_corr/{k}"] for k in _BYPASS_METRICS
                            if f"rollout_corr/{k}" in corr.metrics})
    return out


bypass_mode_policy_loss.needs_minibatch = (  # type: ignore[attr-defined]
    lambda o: o.rollout_is is not None and o.rollout_is_batch_normalize and o.bypass_loss_type == "reinforce")


def trl_actor_settings(
    loss_type: str = "dapo", epsilon: float = 0.2, epsilon_high: float | None = None, beta: float = 0.0
) -> dict[str, object]:
    """rft actor keys (relative to ``actor_rollout_ref.actor``) that reproduce TRL GRPOTrainer's loss.

    TRL: per token ``-min(r A, clamp(r, 1 - epsilon, 1 + epsilon_high) A) + beta * k3``, normalised by
    ``loss_type`` (see ``trl_loss_agg_mode``). rft: ``vanilla`` with clip_ratio_low = epsilon, clip_ratio_high =
    epsilon_high (default epsilon), the KL as a separate term aggregated the same way (aggregation is linear, so
    the sum is TRL's), and the dual clip pushed out of reach (clip_ratio_c = 1e9 > e^20, the largest ratio after
    rft's clamp of l to [-20, 20]); TRL has no dual clip and no clamp of l, and its k3 has no clamps (rft's
    low_var_kl clamps d to [-20, 20] and the value to [-10, 10]).
    """
    return {
        "policy_loss.loss_mode": "vanilla",
        "loss_agg_mode": trl_loss_agg_mode(loss_type),
        "clip_ratio_low": epsilon,
        "clip_ratio_high": epsilon if epsilon_high is None else epsilon_high,
        "clip_ratio_c": 1e9,
        "use_kl_loss": beta != 0.0,
        "kl_loss_coef": beta,
        "kl_loss_type": "low_var_kl",
    }


# The losses whose per-token loss is A times a function of the row's own log-probs (see
# policy_loss_zero_at_zero_advantage; tests/test_packing.py checks each on random inputs).
for _fn in (vanilla_policy_loss, gspo_policy_loss, gpg_policy_loss, cispo_policy_loss, sapo_policy_loss,
            geo_mean_policy_loss, opmd_policy_loss, dppo_tv_policy_loss, dppo_kl_policy_loss, topr_policy_loss,
            sppo_policy_loss, importance_sampling_policy_loss):
    _fn.zero_at_zero_advantage = True  # type: ignore[attr-defined]
rec_policy_loss.zero_at_zero_advantage = lambda o: o.rec.regularizer == "none"  # type: ignore[attr-defined]
bypass_mode_policy_loss.zero_at_zero_advantage = (  # type: ignore[attr-defined]
    lambda o: not (o.rollout_is is not None and o.rollout_is_batch_normalize))
