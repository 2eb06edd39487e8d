"""The checks of the algorithm keys: registered names, what an estimator needs, the loss options, rollout
correction and the preference (DPO) loss. The only module of algorithms/ that imports rft.config."""

from __future__ import annotations

import math

from rft.algorithms.advantages import ADV_ESTIMATORS, estimator_spec
from rft.algorithms.distill import distill_needs_logits
from rft.algorithms.kl import KL_ESTIMATORS
from rft.algorithms.policy_loss import POLICY_LOSSES
from rft.algorithms.preference import preference_loss_spec
from rft.algorithms.rollout_correction import parse_is_threshold, parse_rs_options, parse_rs_thresholds
from rft.config.checks import CHECKS, UNUSED, CheckContext, positive
from rft.config.errors import ConfigError

# Names that are part of verl's vocabulary but arrive with a later capability of rft (none at the moment).
_PENDING_ESTIMATORS: dict[str, str] = {}

DPO_KL_COEF_DEFAULT = 0.001


@UNUSED.register("algorithms.kl")
def unused_kl_keys(cfg) -> dict[str, str]:
    """The KL terms' keys when their switch is off: the in-reward penalty's estimator and controller without
    algorithm.use_kl_in_reward, the KL loss's coefficient and estimator without actor.use_kl_loss (verl reads
    none of them then either)."""
    out: dict[str, str] = {}
    if not cfg.algorithm.use_kl_in_reward:
        why = "algorithm.use_kl_in_reward=false (no KL penalty in the reward)"
        out.update({"algorithm.kl_penalty": why, "algorithm.kl_ctrl.": why})
    actor = cfg.actor_rollout_ref.actor
    if not actor.use_kl_loss:
        why = "actor_rollout_ref.actor.use_kl_loss=false (no KL loss)"
        out.update({"actor_rollout_ref.actor.kl_loss_coef": why, "actor_rollout_ref.actor.kl_loss_type": why})
    return out


@CHECKS.register("algorithms.names")
def check_names(ctx: CheckContext) -> None:
    """The estimator, policy loss and KL estimators are registered names."""
    algo, actor = ctx.cfg.algorithm, ctx.cfg.actor_rollout_ref.actor
    if algo.adv_estimator in _PENDING_ESTIMATORS:
        raise ConfigError(
            f"algorithm.adv_estimator={algo.adv_estimator!r} {_PENDING_ESTIMATORS[algo.adv_estimator]}; "
            f"available: {ADV_ESTIMATORS.names()}"
        )
    if algo.adv_estimator not in ADV_ESTIMATORS:
        raise ConfigError(f"algorithm.adv_estimator={algo.adv_estimator!r} is unknown; choose one of {ADV_ESTIMATORS.names()}")
    if actor.policy_loss.loss_mode not in POLICY_LOSSES:
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={actor.policy_loss.loss_mode!r} is unknown; "
            f"choose one of {POLICY_LOSSES.names()}"
        )
    for key, kind in (("actor_rollout_ref.actor.kl_loss_type", actor.kl_loss_type), ("algorithm.kl_penalty", algo.kl_penalty)):
        if kind not in KL_ESTIMATORS:
            raise ConfigError(f"{key}={kind!r} is unknown; choose one of {KL_ESTIMATORS.names()}")


@CHECKS.register("algorithms.estimator")
def check_estimator(ctx: CheckContext) -> None:
    """What the estimator declares with its registration (`EstimatorSpec`): the smallest group, its options;
    grpo's scaling keys, opmd's temperature; gdpo's reward dimensions and the optimal token baseline's sum of
    squared probabilities, required where the estimator reads them and refused where nothing would."""
    algo, actor, rollout = ctx.cfg.algorithm, ctx.cfg.actor_rollout_ref.actor, ctx.cfg.actor_rollout_ref.rollout
    spec = estimator_spec(algo.adv_estimator)
    min_group = spec.min_group_size
    if rollout.n < min_group:
        raise ConfigError(
            f"algorithm.adv_estimator={algo.adv_estimator!r} needs at least {min_group} responses per prompt: set "
            f"actor_rollout_ref.rollout.n >= {min_group} (got {rollout.n})"
        )
    if algo.scale_rewards is not None:
        if algo.adv_estimator != "grpo":
            raise ConfigError(
                f"algorithm.scale_rewards={algo.scale_rewards!r} is an option of adv_estimator=grpo only, got "
                f"adv_estimator={algo.adv_estimator!r}; remove it (null)"
            )
        if not algo.norm_adv_by_std_in_grpo:
            raise ConfigError(
                f"algorithm.scale_rewards={algo.scale_rewards!r} (TRL) and algorithm.norm_adv_by_std_in_grpo=false "
                "(verl) both choose the grpo scaling: set only one (scale_rewards=none is the unscaled advantage)"
            )
    if not algo.tau > 0:
        raise ConfigError(f"algorithm.tau must be > 0 (opmd's logavgexp temperature), got {algo.tau}")
    for key, default in (("std_threshold", None), ("std_cal_level", "group")):
        value = getattr(algo, key)
        if value != default and algo.adv_estimator != "grpo":
            raise ConfigError(f"algorithm.{key}={value!r} is an option of adv_estimator=grpo only, got "
                              f"adv_estimator={algo.adv_estimator!r}; remove it")
    if algo.std_cal_level != "group" and algo.scale_rewards is not None:
        raise ConfigError(f"algorithm.std_cal_level={algo.std_cal_level!r} (Trinity-RFT) and algorithm.scale_rewards="
                          f"{algo.scale_rewards!r} (TRL) both choose grpo's std: set only one")
    needs = spec.needs
    keys, weights = algo.gdpo_reward_keys, algo.gdpo_reward_weights
    if "reward_components" in needs:
        if not keys or not all(isinstance(k, str) and k for k in keys) or len(set(keys)) != len(keys):
            raise ConfigError(
                f"algorithm.adv_estimator={algo.adv_estimator!r} needs algorithm.gdpo_reward_keys: a list of distinct "
                "keys of the reward function's returned dict (or names of several reward functions), got "
                f"{keys!r}"
            )
        if weights is not None and (len(weights) != len(keys) or not all(math.isfinite(w) for w in weights)):
            raise ConfigError(
                f"algorithm.gdpo_reward_weights={list(weights)} must hold {len(keys)} finite numbers, one per "
                f"algorithm.gdpo_reward_keys entry {list(keys)}"
            )
    elif keys is not None or weights is not None:
        raise ConfigError(
            f"algorithm.gdpo_reward_keys / gdpo_reward_weights are options of adv_estimator=gdpo, got "
            f"adv_estimator={algo.adv_estimator!r}; remove them (null)"
        )
    if "sum_pi_squared" in needs and not actor.calculate_sum_pi_squared:
        raise ConfigError(
            f"algorithm.adv_estimator={algo.adv_estimator!r} weights returns by the policy's sum of squared "
            "probabilities: set actor_rollout_ref.actor.calculate_sum_pi_squared=true (as verl requires)"
        )
    if actor.calculate_sum_pi_squared and algo.rollout_correction.bypass_mode:
        raise ConfigError(
            "actor_rollout_ref.actor.calculate_sum_pi_squared=true is computed in the old log-prob pass, which "
            "algorithm.rollout_correction.bypass_mode=true skips: set one of them to false"
        )


@CHECKS.register("algorithms.clip")
def check_clip(ctx: CheckContext) -> None:
    """PPO's clip ratios and the dual clip."""
    actor = ctx.cfg.actor_rollout_ref.actor
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        v = getattr(actor, key)
        if v is not None and v < 0:
            raise ConfigError(f"actor_rollout_ref.actor.{key} must be >= 0, got {v}")
    if actor.clip_ratio_c <= 1:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c must be > 1 (dual clip), got {actor.clip_ratio_c}")


@CHECKS.register("algorithms.loss_options")
def check_loss_options(ctx: CheckContext) -> None:
    """Ranges of the policy-loss options, the loss scale factors and the KL controller."""
    cfg = ctx.cfg
    actor, algo = cfg.actor_rollout_ref.actor, cfg.algorithm
    pl = actor.policy_loss
    prefix = "actor_rollout_ref.actor"
    for key, value in (("policy_loss.clip_cov_ratio", pl.clip_cov_ratio), ("policy_loss.kl_cov_ratio", pl.kl_cov_ratio),
                       ("tau_pos", actor.tau_pos), ("tau_neg", actor.tau_neg),
                       ("policy_loss.log_ratio_clip", pl.log_ratio_clip)):
        if not value > 0:
            raise ConfigError(f"{prefix}.{key} must be > 0, got {value}")
    if not pl.rec.temp > 0:
        raise ConfigError(f"{prefix}.policy_loss.rec.temp must be > 0, got {pl.rec.temp}")
    for key, value in (("policy_loss.ppo_kl_coef", pl.ppo_kl_coef), ("policy_loss.tau", pl.tau),
                       ("policy_loss.m2_threshold", pl.m2_threshold),
                       ("policy_loss.rec.regularizer_coef", pl.rec.regularizer_coef),
                       ("policy_loss.rec.clip_ratio_low_prime", pl.rec.clip_ratio_low_prime),
                       ("policy_loss.rec.clip_ratio_high_prime", pl.rec.clip_ratio_high_prime)):
        if not value >= 0:
            raise ConfigError(f"{prefix}.{key} must be >= 0, got {value}")
    positive(f"{prefix}.loss_scale_factor", actor.loss_scale_factor, allow_none=True)
    positive("critic.loss_scale_factor", cfg.critic.loss_scale_factor, allow_none=True)
    if not pl.clip_cov_lb < pl.clip_cov_ub:
        raise ConfigError(
            f"{prefix}.policy_loss.clip_cov_lb ({pl.clip_cov_lb}) must be below clip_cov_ub ({pl.clip_cov_ub})"
        )
    ctrl = algo.kl_ctrl
    if ctrl.type == "adaptive" and not (ctrl.target_kl > 0 and ctrl.horizon > 0):
        raise ConfigError(
            f"algorithm.kl_ctrl.type=adaptive needs algorithm.kl_ctrl.target_kl > 0 and horizon > 0, got "
            f"target_kl={ctrl.target_kl}, horizon={ctrl.horizon}"
        )


@CHECKS.register("algorithms.rollout_correction")
def check_rollout_correction(ctx: CheckContext) -> None:
    """algorithm.rollout_correction.*: thresholds that parse, options that act, the bypass-mode loss; dro_beta."""
    rc, pl = ctx.cfg.algorithm.rollout_correction, ctx.cfg.actor_rollout_ref.actor.policy_loss
    prefix = "algorithm.rollout_correction"
    if pl.loss_mode == "dro" and not (pl.dro_beta is not None and pl.dro_beta > 0):
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode=dro needs actor_rollout_ref.actor.policy_loss.dro_beta > 0, "
            f"got {pl.dro_beta!r}"
        )
    try:
        parse_is_threshold(rc.rollout_is_threshold)
        if rc.rollout_rs is not None:
            parse_rs_thresholds(parse_rs_options(rc.rollout_rs), rc.rollout_rs_threshold)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{prefix}: {err}") from None
    if rc.rollout_is is None and (rc.rollout_is_batch_normalize or rc.rollout_is_threshold != 2.0):
        raise ConfigError(
            f"{prefix}.rollout_is_threshold / rollout_is_batch_normalize shape the IS weights, which "
            f"{prefix}.rollout_is=null turns off: set rollout_is (token or sequence), or remove them"
        )
    if rc.rollout_rs is None and rc.rollout_rs_threshold is not None:
        raise ConfigError(f"{prefix}.rollout_rs_threshold is set but {prefix}.rollout_rs is null: set rollout_rs "
                          "(e.g. seq_mean_k3) or remove the threshold")
    if rc.bypass_mode and pl.loss_mode not in ("vanilla", "bypass_mode"):
        raise ConfigError(
            f"{prefix}.bypass_mode=true runs verl's bypass-mode loss (PPO-clip or REINFORCE, {prefix}.loss_type) "
            f"in place of actor_rollout_ref.actor.policy_loss.loss_mode={pl.loss_mode!r}: set loss_mode=bypass_mode "
            f"(or vanilla), or bypass_mode=false"
        )
    if pl.loss_mode == "bypass_mode" and not rc.bypass_mode:
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode is verl's bypass-mode loss: its old log-probs "
            f"must be the rollout's; set {prefix}.bypass_mode=true"
        )
    if rc.loss_type != "ppo_clip" and not rc.bypass_mode:
        raise ConfigError(f"{prefix}.loss_type={rc.loss_type!r} chooses the bypass-mode loss: set "
                          f"{prefix}.bypass_mode=true, or remove it")


@CHECKS.register("algorithms.preference")
def check_preference(ctx: CheckContext) -> None:
    """rft dpo's algorithm section: beta, label smoothing (read by the losses that use it), the KL and entropy terms."""
    algo = ctx.cfg.algorithm
    if not algo.beta > 0:
        raise ConfigError(f"algorithm.beta must be > 0, got {algo.beta}")
    if not 0 <= algo.label_smoothing < 0.5:
        raise ConfigError(f"algorithm.label_smoothing must be in [0, 0.5), got {algo.label_smoothing}")
    if algo.label_smoothing and not preference_loss_spec(algo.loss_type).uses_label_smoothing:
        raise ConfigError(f"algorithm.label_smoothing={algo.label_smoothing} is read by loss_type sigmoid and robust "
                          f"only, not {algo.loss_type!r}; set it to 0 or change the loss_type")
    for key in ("kl_loss_coef", "entropy_coeff"):
        if getattr(algo, key) < 0:
            raise ConfigError(f"algorithm.{key} must be >= 0, got {getattr(algo, key)}")
    if algo.kl_loss_coef != DPO_KL_COEF_DEFAULT and not algo.use_kl_loss:
        raise ConfigError(f"algorithm.kl_loss_coef={algo.kl_loss_coef} has no effect with algorithm.use_kl_loss="
                          "false; set use_kl_loss=true or remove it")


@UNUSED.register("algorithms.distillation")
def unused_distillation_keys(cfg) -> dict[str, str]:
    """distillation.* without distillation.enabled (no teacher is loaded)."""
    if cfg.distillation.enabled:
        return {}
    why = "distillation.enabled=false (no teacher)"
    return {"distillation.teacher_model.": why, "distillation.distillation_loss.": why}


@CHECKS.register("algorithms.distillation")
def check_distillation(ctx: CheckContext) -> None:
    """The distillation loss's options: beta in [0, 1]; k1 only as a reward (its own gradient has mean 0); the
    in-reward placement only with the policy gradient; the logit divergences not under sequence parallelism (the
    whole logits of a micro-batch are not gathered there)."""
    d = ctx.cfg.distillation
    if not d.enabled:
        return
    loss, key = d.distillation_loss, "distillation.distillation_loss"
    if not 0.0 <= loss.jsd_beta <= 1.0:
        raise ConfigError(f"{key}.jsd_beta={loss.jsd_beta} is outside [0, 1]: 0 is the forward KL, 1 the reverse KL")
    if loss.loss_mode == "k1" and not loss.use_policy_gradient:
        raise ConfigError(f"{key}.loss_mode=k1 with use_policy_gradient=false: log p - log q of the student's own "
                          "samples has a gradient of mean 0 as a loss; set use_policy_gradient=true (k1 as a "
                          "per-token reward, Thinking Machines' recipe) or loss_mode k3, full or jsd")
    if loss.loss_mode == "token_jsd" and not loss.use_policy_gradient:
        raise ConfigError(f"{key}.loss_mode=token_jsd with use_policy_gradient=false: the sampled token's JSD "
                          "estimate is a per-token reward (Trinity-RFT's jsd advantage), as k1 is; set "
                          "use_policy_gradient=true, or loss_mode jsd for GKD's JSD as a loss")
    if loss.in_reward and not loss.use_policy_gradient:
        raise ConfigError(f"{key}.in_reward=true puts the divergence into the token rewards, which needs "
                          "use_policy_gradient=true; set one of them otherwise")
    if distill_needs_logits(loss.loss_mode) and ctx.sp > 1:
        raise ConfigError(f"{key}.loss_mode={loss.loss_mode} needs both models' logits of whole sequences, which "
                          "rft does not gather under sequence parallelism: use loss_mode k1 or k3, or "
                          "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1")


@UNUSED.register("algorithms.pf_ppo")
def unused_pf_ppo_keys(cfg) -> dict[str, str]:
    """algorithm.pf_ppo.* without use_pf_ppo, and use_pf_ppo itself with an estimator other than gae: verl
    resamples only in its gae branch (ray_trainer.compute_advantage), so there it has no effect either."""
    algo = cfg.algorithm
    if not algo.use_pf_ppo:
        return {"algorithm.pf_ppo.": "algorithm.use_pf_ppo=false (no PF-PPO resampling)"}
    if algo.adv_estimator != "gae":
        why = f"algorithm.adv_estimator={algo.adv_estimator} (verl resamples for PF-PPO only with gae)"
        return {"algorithm.use_pf_ppo": why, "algorithm.pf_ppo.": why}
    return {}


@CHECKS.register("algorithms.pf_ppo")
def check_pf_ppo(ctx: CheckContext) -> None:
    """PF-PPO resamples the whole batch, which with several processes would move rows between them: one process."""
    algo = ctx.cfg.algorithm
    if algo.use_pf_ppo and algo.adv_estimator == "gae" and ctx.world_size > 1:
        raise ConfigError(f"algorithm.use_pf_ppo=true with {ctx.world_size} processes: PF-PPO's resampling of the "
                          "whole batch across processes is not in rft yet; run it in one process "
                          "(trainer.n_gpus_per_node=1, trainer.nnodes=1)")


@UNUSED.register("algorithms.entropy_clip")
def unused_entropy_clip_keys(cfg) -> dict[str, str]:
    """algorithm.entropy_clip.* without a mode; max_frac with clipb, which has no cap."""
    mode = cfg.algorithm.entropy_clip.mode
    if mode is None:
        why = "algorithm.entropy_clip.mode=null (no entropy filter)"
        return {"algorithm.entropy_clip.mu": why, "algorithm.entropy_clip.max_frac": why}
    return {"algorithm.entropy_clip.max_frac": "algorithm.entropy_clip.mode=clipb (only clipv caps its share)"} \
        if mode == "clipb" else {}


@CHECKS.register("algorithms.entropy_clip")
def check_entropy_clip(ctx: CheckContext) -> None:
    """The entropy filter's bound, its cap, and the old log-prob pass it reads."""
    algo = ctx.cfg.algorithm
    ec, key = algo.entropy_clip, "algorithm.entropy_clip"
    if ec.mode is None:
        return
    if ec.mu is not None and not (math.isfinite(ec.mu) and ec.mu > 0):
        raise ConfigError(f"{key}.mu={ec.mu} must be a number > 0 (the bound in stds), or null for the mode's default")
    if not 0.0 < ec.max_frac <= 1.0:
        raise ConfigError(f"{key}.max_frac={ec.max_frac} must be in (0, 1] (a share of the batch's response tokens)")
    if algo.rollout_correction.bypass_mode:
        raise ConfigError(f"{key}.mode={ec.mode} reads the entropy from the old log-prob pass, which "
                          "algorithm.rollout_correction.bypass_mode=true skips: set one of them otherwise")
