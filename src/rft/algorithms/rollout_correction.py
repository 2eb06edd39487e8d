"""Rollout correction: the rollout (behaviour) policy that sampled a batch is not exactly the policy being trained
(another engine or precision, or an older checkpoint when the explorer runs ahead). verl 0.9.1's
``algorithm.rollout_correction`` options, as pure tensor functions:

* importance-sampling weights between the training policy's log-probs and the rollout's, truncated (TIS) or
  zeroed outside a band (IcePop), per token or per sequence, optionally normalised to mean 1 over the batch;
* rejection sampling (RS): tokens or whole sequences whose divergence from the rollout exceeds a threshold are
  masked out of the loss;
* the diagnostics verl logs (``rollout_corr/...`` and ``training/rollout_probs_diff_...``).

References: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(truncated importance sampling, https://fengyao.notion.site/off-policy-rl); Liu, Li, Fu, Wang, Liu, Shen 2025,
"When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch"
(https://richardli.xyz/rl-collapse: sequence-level IS, rejection sampling, the K1/K2/K3 divergence filters);
IcePop (Ling team, Ring-1T report, arXiv:2510.18855: weights outside [lower, upper] dropped). Facts and formulas
follow verl 0.9.1's ``verl/trainer/ppo/rollout_corr_helper.py``; the code is rft's.

Notation: ``l_t = logp_train_t - logp_rollout_t`` (the log-ratio of a token), ``m`` the response mask, B rows,
R response tokens. Everything here runs without gradient: the weights change the measure, not the objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rft.algorithms.utils import masked_mean

SAFETY_BOUND = 20.0
"""Log-ratios are clamped to [-20, 20] before exponentiating (verl's bound)."""

ROLLOUT_IS_LEVELS = ("token", "sequence")
ROLLOUT_RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
                      "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")


# ------------------------------------------------------------------------------------------ thresholds
def parse_is_threshold(spec: str | float) -> tuple[float, float | None]:
    """``rollout_is_threshold`` -> (upper, lower): a number (or a number as a string) is TIS's upper bound
    (lower None); ``"lower_upper"`` (e.g. ``"0.5_5.0"``) is IcePop's band. Both bounds > 0, lower <= upper;
    ValueError / TypeError otherwise."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise TypeError(f"rollout_is_threshold must be a number or a 'lower_upper' string, got {spec!r}")
    lower = None
    text = str(spec).strip()
    try:
        if "_" in text:
            lower_text, upper_text = text.split("_", 1)
            lower, upper = float(lower_text), float(upper_text)
        else:
            upper = float(text)
    except ValueError:
        raise ValueError(f"rollout_is_threshold={spec!r} is not a number nor a 'lower_upper' pair") from None
    if not upper > 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"rollout_is_threshold={spec!r}: the bounds must be > 0 with lower <= upper")
    return upper, lower


def parse_rs_options(rollout_rs: str) -> list[str]:
    """``rollout_rs`` -> its options: comma separated, duplicates dropped, order kept; ValueError on an unknown
    one (the valid ones are ``ROLLOUT_RS_OPTIONS``)."""
    if not isinstance(rollout_rs, str):
        raise ValueError(f"rollout_rs must be a comma separated string of options, got {rollout_rs!r}")
    options = list(dict.fromkeys(o.strip() for o in rollout_rs.split(",") if o.strip()))
    if not options:
        raise ValueError("rollout_rs names no option")
    for option in options:
        if option not in ROLLOUT_RS_OPTIONS:
            raise ValueError(f"rollout_rs option {option!r} is unknown; valid: {', '.join(ROLLOUT_RS_OPTIONS)}")
    return options


def parse_rs_thresholds(options: list[str], spec: str | float | None) -> dict[str, tuple[float | None, float]]:
    """``rollout_rs_threshold`` -> {option: (lower, upper)}: one entry per option (comma separated) or one
    shared by all. A k1 option takes ratio bounds ``"lower_upper"``, or one number u meaning (1 / u, u); the
    k2 / k3 options take one upper bound (lower None). Every bound > 0, lower <= upper."""
    if spec is None or isinstance(spec, bool):
        raise ValueError("rollout_rs needs rollout_rs_threshold")
    parts = [str(spec)] if isinstance(spec, (int, float)) else [p.strip() for p in str(spec).split(",") if p.strip()]
    if len(parts) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold={spec!r}: give one threshold, or one per rollout_rs option "
                         f"({len(options)})")
    parts = parts * len(options) if len(parts) == 1 else parts
    out: dict[str, tuple[float | None, float]] = {}
    for option, part in zip(options, parts):
        try:
            if option.endswith("k1"):
                lower_text, _, upper_text = part.partition("_") if "_" in part else ("", "", part)
                upper = float(upper_text)
                lower = float(lower_text) if lower_text else 1.0 / upper
            else:
                if "_" in part:
                    raise ValueError
                lower, upper = None, float(part)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"rollout_rs_threshold {part!r} for {option}: k1 options take 'lower_upper' or one "
                             "positive number, k2 / k3 options one positive number") from None
        if not upper > 0 or (lower is not None and not 0 < lower <= upper):
            raise ValueError(f"rollout_rs_threshold {part!r} for {option}: bounds must be > 0, lower <= upper")
        out[option] = (lower, upper)
    return out


# --------------------------------------------------------------------------------------------- helpers
def _masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    masked = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return masked.sum() if dim is None else masked.sum(dim)


def _masked_max(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(torch.where(mask.bool(), x, torch.full_like(x, -math.inf)).max())


def _masked_min(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(torch.where(mask.bool(), x, torch.full_like(x, math.inf)).min())


def _clamped_std(x: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> float:
    """sqrt(E[c^2] - E[c]^2) of c = clamp(x, low, high) over the valid entries (0 with fewer than 2)."""
    if int(mask.bool().sum()) <= 1:
        return 0.0
    c = x.clamp(min=low, max=high)
    mean = masked_mean(c, mask)
    return float(torch.sqrt((masked_mean(c.square(), mask) - mean.square()).clamp(min=0.0)))


def _seq_stats(prefix: str, values: torch.Tensor, high: float, low: float | None) -> dict[str, float]:
    """{prefix}_seq_mean / std (unbiased) / max / min / max_deviation (from 0) / fraction_high / fraction_low
    of per-sequence values (the valid sequences)."""
    if values.numel() == 0:
        keys = ("mean", "std", "max", "min", "max_deviation", "fraction_high", "fraction_low")
        return {f"{prefix}_seq_{k}": 0.0 for k in keys}
    out = {f"{prefix}_seq_mean": float(values.mean()),
           f"{prefix}_seq_std": float(values.std()) if values.numel() > 1 else 0.0,
           f"{prefix}_seq_max": float(values.max()), f"{prefix}_seq_min": float(values.min()),
           f"{prefix}_seq_max_deviation": float(values.abs().max()),
           f"{prefix}_seq_fraction_high": float((values > high).to(values.dtype).mean())}
    if low is not None:
        out[f"{prefix}_seq_fraction_low"] = float((values < low).to(values.dtype).mean())
    return out


# ------------------------------------------------------------------------------------------ IS weights
def rollout_is_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str = "token",
                       threshold: str | float = 2.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights pi_train / pi_rollout, (B, R), 0 on masked tokens, detached; and their
    metrics (verl's names, without the ``rollout_corr/`` prefix).

      token:     rho_t = exp(clamp(l_t, -20, 20))
      sequence:  rho_t = exp(clamp(sum_s l_s m_s, -20, 20)) on every token of the row (the product of its ratios)
      TIS (threshold u):          w = min(rho, u)
      IcePop (threshold "a_b"):   w = rho if a <= rho <= b, else 0
    Batch normalisation is separate (``is_weights_mean``).
    """
    if level not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"rollout_is={level!r} is unknown; valid: {', '.join(ROLLOUT_IS_LEVELS)}")
    upper, lower = parse_is_threshold(threshold)
    valid = mask.bool()
    zero = torch.zeros((), dtype=log_ratio.dtype, device=log_ratio.device)
    if level == "token":
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))  # (B, R)
        seq_log = None
    else:
        seq_log = _masked_sum(log_ratio, mask, dim=-1)  # (B,)
        raw = torch.exp(seq_log.clamp(-SAFETY_BOUND, SAFETY_BOUND)).unsqueeze(-1).expand_as(log_ratio)
    raw = torch.where(valid, raw, zero)
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, zero)

    low = 1.0 / upper if lower is None else lower
    metrics = {"rollout_is_mean": float(masked_mean(weights, mask))}
    if seq_log is None:
        metrics["rollout_is_ratio_fraction_high"] = float(masked_mean((raw > upper).to(raw.dtype), mask))
        metrics["rollout_is_ratio_fraction_low"] = float(masked_mean((raw < low).to(raw.dtype), mask))
        metrics["rollout_is_max"] = _masked_max(weights, mask)
        metrics["rollout_is_min"] = _masked_min(weights, mask)
    else:  # from the log-space sums of every row (verl), so values past the clamp still count
        metrics["rollout_is_max"] = math.exp(min(float(seq_log.max()), SAFETY_BOUND))
        metrics["rollout_is_min"] = math.exp(float(seq_log.min()))
        metrics["rollout_is_ratio_fraction_high"] = float((seq_log > math.log(upper)).to(raw.dtype).mean())
        metrics["rollout_is_ratio_fraction_low"] = float((seq_log < math.log(low)).to(raw.dtype).mean())
    metrics["rollout_is_std"] = _clamped_std(weights, mask, 0.0, upper)
    clamped = weights.clamp(min=0.0, max=upper)
    normalised = clamped / (masked_mean(clamped, mask) + 1e-8)
    # 1 / E[w^2] of the mean-1 weights; 0 when no weight is left (every one outside an IcePop band), where verl
    # divides by zero
    second_moment = float(masked_mean(normalised.square(), mask))
    metrics["rollout_is_eff_sample_size"] = 1.0 / second_moment if second_moment > 0 else 0.0
    # rows with tokens whose every weight is 0: they add nothing to the loss this step
    metrics["rollout_is_zeroed_rows"] = float((valid.any(dim=-1) & ~(weights.ne(0) & valid).any(dim=-1)).sum())
    seq_mean = masked_mean(weights, mask, dim=-1)  # (B,) every row, 0 for an empty one
    metrics.update({"rollout_is_seq_mean": float(seq_mean.mean()),
                    "rollout_is_seq_std": float(seq_mean.std()) if seq_mean.numel() > 1 else 0.0,
                    "rollout_is_seq_max": float(seq_mean.max()), "rollout_is_seq_min": float(seq_mean.min()),
                    "rollout_is_seq_max_deviation": float((seq_mean - 1.0).abs().max())})
    raw_seq_mean = masked_mean(raw, mask, dim=-1)
    metrics["rollout_is_seq_fraction_high"] = float((raw_seq_mean > upper).to(raw.dtype).mean())
    metrics["rollout_is_seq_fraction_low"] = float((raw_seq_mean < low).to(raw.dtype).mean())
    if lower is not None:
        outside = (raw < lower) | (raw > upper)
        metrics["rollout_is_oob_ratio"] = float(masked_mean(outside.to(raw.dtype), mask))
    return weights.detach(), metrics


def is_weights_mean(weights: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """The mean ``rollout_is_batch_normalize`` divides by: over the valid tokens (token level), or over the
    rows with a valid token of each row's weight (sequence level). A scalar tensor."""
    if level == "token":
        return masked_mean(weights, mask)
    rows = mask.bool().any(dim=-1).to(weights.dtype)  # (B,)
    return (masked_mean(weights, mask, dim=-1) * rows).sum() / rows.sum().clamp(min=1e-8)


def normalise_is_weights(weights: torch.Tensor, mean: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(weights / mean, the factor used): weights with mean 1 over the batch ``mean`` was taken on; a mean at or
    below 1e-8 leaves them as they are (factor 1)."""
    if float(mean) > 1e-8:
        return weights / mean, float(mean)
    return weights, 1.0


# ------------------------------------------------------------------------------------ rejection sampling
def rollout_rejection_mask(log_ratio: torch.Tensor, mask: torch.Tensor, rollout_rs: str,
                           rollout_rs_threshold: str | float) -> tuple[torch.Tensor, dict[str, float]]:
    """(keep (B, R) 0/1 in ``log_ratio``'s dtype, metrics): a token is kept when it passes every option.

    With l clamped to [-20, 20], per token k1 = -l, k2 = l^2 / 2, k3 = exp(l) - 1 - l; per sequence the masked
    sum, mean (over its valid tokens) or max (k2, k3 only; 0 for an empty row) of those. A k1 statistic is kept
    inside [log lower, log upper]; a k2 / k3 statistic at or below its upper bound. A sequence option keeps or
    rejects every token of its row.
    """
    options = parse_rs_options(rollout_rs)
    bounds = parse_rs_thresholds(options, rollout_rs_threshold)
    valid = mask.bool()
    seq_valid = valid.any(dim=-1)
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    token_stat = {"k1": -lr, "k2": 0.5 * lr.square(), "k3": torch.exp(lr) - 1.0 - lr}
    keep = torch.ones_like(log_ratio)
    metrics: dict[str, float] = {}
    for option in options:
        lower, upper = bounds[option]
        kind = option[-2:]
        is_k1 = kind == "k1"
        high = math.log(upper) if is_k1 else upper
        low = math.log(lower) if is_k1 else 0.0  # type: ignore[arg-type]
        stat = token_stat[kind]
        if option.startswith("token"):
            per_token, per_seq = stat, None
        else:
            if option.startswith("seq_sum"):
                per_seq = _masked_sum(stat, mask, dim=-1)
            elif option.startswith("seq_mean"):
                per_seq = masked_mean(stat, mask, dim=-1)
            else:
                per_seq = torch.where(valid, stat, torch.full_like(stat, -math.inf)).amax(dim=-1)
                per_seq = torch.where(torch.isinf(per_seq), torch.zeros_like(per_seq), per_seq)
            per_token = per_seq.unsqueeze(-1).expand_as(stat)
        option_keep = (per_token <= high) & ((per_token >= low) if is_k1 else torch.ones_like(valid))
        keep = keep * option_keep.to(keep.dtype)

        prefix = f"rollout_rs_{option}"
        seq_values = per_seq if per_seq is not None else masked_mean(stat, mask, dim=-1)
        seq_values = seq_values[seq_valid]
        metrics[f"{prefix}_mean"] = float(masked_mean(per_token, mask))
        if per_seq is not None and seq_values.numel():
            metrics[f"{prefix}_max"], metrics[f"{prefix}_min"] = float(seq_values.max()), float(seq_values.min())
            metrics[f"{prefix}_fraction_high"] = float((seq_values > high).to(lr.dtype).mean())
            metrics[f"{prefix}_fraction_low"] = float((seq_values < low).to(lr.dtype).mean()) if is_k1 else 0.0
        else:
            metrics[f"{prefix}_max"], metrics[f"{prefix}_min"] = _masked_max(per_token, mask), _masked_min(per_token, mask)
            metrics[f"{prefix}_fraction_high"] = float(masked_mean((per_token > high).to(lr.dtype), mask))
            metrics[f"{prefix}_fraction_low"] = (float(masked_mean((per_token < low).to(lr.dtype), mask))
                                                 if is_k1 else 0.0)
        metrics[f"{prefix}_std"] = _clamped_std(per_token, mask, low, high)
        metrics.update(_seq_stats(prefix, seq_values, high, low if is_k1 else None))
        rejected = valid & ~option_keep
        metrics[f"{prefix}_masked_fraction"] = float(masked_mean(rejected.to(lr.dtype), mask))
        n_seq = int(seq_valid.sum())
        metrics[f"{prefix}_seq_masked_fraction"] = (float((rejected.any(dim=-1) & seq_valid).sum()) / n_seq
                                                    if n_seq else 0.0)
    rejected = valid & (keep < 0.5)
    metrics["rollout_rs_masked_fraction"] = float(masked_mean(rejected.to(lr.dtype), mask))
    metrics["rollout_rs_seq_masked_fraction"] = float(rejected.any(dim=-1).to(lr.dtype).mean())
    return keep, metrics


# --------------------------------------------------------------------------------------------- metrics
def offpolicy_metrics(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """verl's off-policy diagnostics of the training log-probs against the rollout's (no prefix), with
    ppl_i = exp(-mean_t logp_it) per row and means over every row (an empty row counts with log-ppl 0):
    training_ppl / training_log_ppl, rollout_ppl / rollout_log_ppl, kl = mean_tokens(logp_rollout - logp),
    k3_kl = mean_tokens(exp(l) - l - 1), log_ppl_diff (mean, abs mean, max, min of mean_t l per row),
    ppl_ratio = mean_rows exp(log_ppl_diff_i), chi2_token = mean_tokens(rho^2) - 1,
    chi2_seq = mean_rows(prod_t rho^2) - 1 (log-ratios clamped to [-20, 20] for both chi2)."""
    train_mean = masked_mean(logprobs, mask, dim=-1)  # (B,)
    rollout_mean = masked_mean(rollout_logprobs, mask, dim=-1)
    lr = logprobs - rollout_logprobs
    diff = rollout_mean - train_mean  # (B,)
    lr_safe = lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    seq_sum = _masked_sum(lr, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "training_ppl": float(torch.exp(-train_mean).mean()), "training_log_ppl": float((-train_mean).mean()),
        "kl": float(masked_mean(rollout_logprobs - logprobs, mask)),
        "k3_kl": float(masked_mean(torch.exp(lr) - lr - 1.0, mask)),
        "rollout_ppl": float(torch.exp(-rollout_mean).mean()), "rollout_log_ppl": float((-rollout_mean).mean()),
        "log_ppl_diff": float(diff.mean()), "log_ppl_abs_diff": float(diff.abs().mean()),
        "log_ppl_diff_max": float(diff.max()), "log_ppl_diff_min": float(diff.min()),
        "ppl_ratio": float(torch.exp(diff).mean()),
        "chi2_token": float(masked_mean(torch.exp(lr_safe).square(), mask)) - 1.0,
        "chi2_seq": float(torch.exp(2.0 * seq_sum).mean()) - 1.0,
    }


def rollout_probs_diff_metrics(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                               mask: torch.Tensor) -> dict[str, float]:
    """verl's ``training/rollout_probs_diff_*`` (its debug metrics of rollout vs trainer): over the valid tokens,
    |p_train - p_rollout| on probabilities (not log-probs): max, mean, std (unbiased); their Pearson correlation
    ``training/rollout_actor_probs_pearson_corr``; ``_valid`` 1, or 0 and NaNs without a valid token."""
    valid = mask.bool()
    if not valid.any():
        nan = float("nan")
        return {"training/rollout_probs_diff_valid": 0, "training/rollout_probs_diff_max": nan,
                "training/rollout_probs_diff_mean": nan, "training/rollout_probs_diff_std": nan,
                "training/rollout_actor_probs_pearson_corr": nan}
    p_train, p_rollout = torch.exp(logprobs[valid]), torch.exp(rollout_logprobs[valid])
    diff = (p_train - p_rollout).abs()
    return {"training/rollout_probs_diff_valid": 1, "training/rollout_probs_diff_max": float(diff.max()),
            "training/rollout_probs_diff_mean": float(diff.mean()),
            "training/rollout_probs_diff_std": float(diff.std()),
            "training/rollout_actor_probs_pearson_corr":
                float(torch.corrcoef(torch.stack([p_train, p_rollout]))[0, 1])}


# ------------------------------------------------------------------------------------------ all at once
@dataclass
class RolloutCorrection:
    weights: torch.Tensor | None
    """(B, R) truncated (and, if asked, batch-normalised) IS weights, 0 on masked tokens; None without
    ``rollout_is``."""
    keep: torch.Tensor
    """(B, R) 1 where rejection sampling keeps a token, 0 where it rejects one (all 1 without ``rollout_rs``)."""
    metrics: dict[str, float]
    """verl's names with the ``rollout_corr/`` prefix."""


def compute_rollout_correction(logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor,
                               rollout_is: str | None = None, rollout_is_threshold: str | float = 2.0,
                               rollout_is_batch_normalize: bool = False, rollout_rs: str | None = None,
                               rollout_rs_threshold: str | float | None = None) -> RolloutCorrection:
    """IS weights (``rollout_is_weights``, when ``rollout_is`` is set), the rejection mask
    (``rollout_rejection_mask``, when ``rollout_rs`` is set) and the off-policy metrics, all from
    l = ``logprobs`` - ``rollout_logprobs`` over ``mask`` (B, R). With ``rollout_is_batch_normalize`` the weights
    are divided by their mean over this batch (``is_weights_mean``; metric ``rollout_is_batch_norm_factor``).
    ValueError when ``mask`` has no valid token."""
    if not mask.bool().any():
        raise ValueError("rollout correction needs at least one valid token in the response mask")
    with torch.no_grad():
        log_ratio = logprobs - rollout_logprobs
        metrics: dict[str, float] = {}
        weights = None
        if rollout_is is not None:
            weights, is_metrics = rollout_is_weights(log_ratio, mask, rollout_is, rollout_is_threshold)
            metrics.update(is_metrics)
            if rollout_is_batch_normalize:
                weights, factor = normalise_is_weights(weights, is_weights_mean(weights, mask, rollout_is))
                metrics["rollout_is_batch_norm_factor"] = factor
        keep = torch.ones_like(log_ratio)
        if rollout_rs is not None:
            keep, rs_metrics = rollout_rejection_mask(log_ratio, mask, rollout_rs, rollout_rs_threshold)
            metrics.update(rs_metrics)
        metrics.update(offpolicy_metrics(logprobs, rollout_logprobs, mask))
    return RolloutCorrection(weights, keep, {f"rollout_corr/{k}": v for k, v in metrics.items()})
