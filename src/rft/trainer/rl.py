"""The RL trainer: batches of experiences in, updated weights out.

One step reads top to bottom in `train_step`; each phase is one named call inside a timer (`timing_s/<phase>`):
the batch's reward metrics and token rewards -> (old log-probs) -> (rollout correction) -> (ref log-probs)
-> (values) -> advantages -> (critic update) -> actor update. Advantages are computed here, where every group is
visible; the worker only sees a Batch and loss settings. The trainer never asks how the experiences were produced
(which explorer, engine, workflow or process): `rft.orchestration.run` wires it to an explorer through a buffer and a
synchronizer.

Several processes (`dist`): every rank trains on its contiguous share of each mini-batch (all responses of a prompt
on one rank). What spans the batch is computed over every rank's rows: the advantages from the gathered token
rewards, masks and group ids (identical on every rank, then each keeps its rows), the KL controller's mean, the loss
normalisers and the logged metrics. Rank 0 writes the exports; checkpoints are written by all.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from rft.algorithms import (
    AdvantageInputs,
    EntropyClipInputs,
    compute_advantages,
    distill_needs_logits,
    entropy_clip_keep,
    estimator_spec,
    explained_variance,
    kl_needs_logits,
    kl_penalty,
    make_kl_controller,
    masked_mean,
    reward_components,
)
from rft.algorithms.entropy_clip import DEFAULT_MU
from rft.algorithms.pf_ppo import pf_ppo_resample
from rft.batch import Batch
from rft.distributed import SINGLE, Dist
from rft.errors import ModelError
from rft.models import precision
from rft.models.checks import teacher_problem
from rft.models.load import (
    export_hf,
    frozen_copy,
    is_peft,
    load_causal_lm,
    load_tokenizer,
    load_trainable_model,
    resolve_device,
)
from rft.monitor import TOKENS, Timer
from rft.rollout.engines import engine_spec, unserved_reason
from rft.trainer.checkpoint import (
    EXPLORER_VERSIONS,
    CheckpointManager,
    load_module_state,
    load_training_state,
    load_versions,
    resume_folder,
    save_module_state,
    save_training_state,
    save_versions,
    step_of,
    trainer_kind,
)
from rft.trainer.mix import ExpertRows
from rft.trainer.rollout_correction import apply_rollout_correction, corrects_rollout
from rft.workers.critic import CriticSettings, CriticWorker
from rft.workers.fsdp import full_state_dict, unwrapped_name, wrap
from rft.workers.packing import enable_remove_padding, enable_torch_compile
from rft.workers.policy import (
    PolicyWorker,
    UpdateSettings,
    compute_logit_kl,
    compute_logprobs,
    compute_old_logprobs,
    compute_teacher_divergence,
    reference_of,
)
from rft.workers.ulysses import enable_sequence_parallel

log = logging.getLogger("rft")


def _stats(name: str, x: torch.Tensor) -> dict[str, float]:
    """mean / max / min of `x`; none over nothing (a batch without a token to learn: a RAFT workflow's failures)."""
    x = x.float()
    if not x.numel():
        return {}
    return {f"{name}/mean": float(x.mean()), f"{name}/max": float(x.max()), f"{name}/min": float(x.min())}


def last_turn_lengths(action_mask: torch.Tensor) -> torch.Tensor:
    """(B,) the length of each row's last run of policy tokens in a (B, R) action mask (0 for a row without)."""
    mask = action_mask.bool()
    pos = torch.arange(mask.shape[1]).expand_as(mask)
    last = torch.where(mask, pos, -1).max(-1).values  # the last policy token, -1 when none
    gap = torch.where(~mask & (pos < last[:, None]), pos, -1).max(-1).values  # the last masked token before it
    return (last - gap).clamp(min=0) * mask.any(-1)


def _log_prob_micro_rows(section) -> int | None:
    """Rows per no-grad log-prob pass of a rollout / ref config section (None: the whole batch)."""
    return section.log_prob_micro_batch_size_per_gpu or section.log_prob_micro_batch_size


def token_scores(batch: Batch) -> torch.Tensor:
    """(B, R) each row's score on its last valid token (with an action mask: the last token the policy wrote), 0
    elsewhere (verl's token_level_scores)."""
    if batch.action_mask is None:
        last = (batch.response_mask.sum(-1) - 1).clamp(min=0)
    else:
        last = batch.action_mask.shape[1] - 1 - batch.action_mask.flip(-1).argmax(-1)
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float32)
    out[torch.arange(len(batch)), last] = batch.scores
    return out


class RLTrainer:
    def __init__(self, cfg, tokenizer, total_steps: int, dist: Dist = SINGLE):
        """Loads the policy (and the reference and critic when the config asks for them) with its optimizer.
        `total_steps`: the run's training steps (the learning-rate schedules span them)."""
        self.cfg, self.tokenizer, self.total_steps, self.dist = cfg, tokenizer, total_steps, dist
        arr, trainer = cfg.actor_rollout_ref, cfg.trainer
        self.out = Path(trainer.default_local_dir)
        self.device = resolve_device(trainer.device)
        if dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", dist.local_rank)
        # What each model computes in (models/precision.py): the weights stay in fsdp_config.model_dtype (float32
        # by default), the passes run under autocast in the precision the config names where this hardware computes
        # it faster (never above the weights' dtype).
        self.precision = {
            "rollout": precision.choose(arr.rollout.dtype, self.device, arr.model.path,
                                        "actor_rollout_ref.rollout.dtype"),
            "actor": precision.kept_in(
                precision.choose(arr.actor.fsdp_config.mixed_precision.param_dtype, self.device, arr.model.path,
                                 "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"),
                arr.actor.fsdp_config.model_dtype, "actor_rollout_ref.actor.fsdp_config.model_dtype")}
        self.dtype = self.precision["rollout"].dtype  # the engine's and the reward model's
        if not engine_spec(arr.rollout.name).own_numerics:  # the hf engine generates with the policy's weights
            self.precision["rollout"] = precision.kept_in(self.precision["rollout"], arr.actor.fsdp_config.model_dtype,
                                                          "actor_rollout_ref.actor.fsdp_config.model_dtype",
                                                          trained=False)
        # The optional inputs the estimator declared with its registration; the trainer fills `values` from the
        # critic (the explorer fills `reward_baselines`, which need generation).
        self.adv_needs = estimator_spec(cfg.algorithm.adv_estimator).needs

        # verl's model_dtype: the dtype the policy is loaded in, so its weights, gradients and AdamW state are in it
        model = load_trainable_model(arr.model.path, arr.model, self.precision["actor"].master, self.device,
                                     key="actor_rollout_ref.model", tokenizer=tokenizer)
        precision.set_compute(model, self.precision["actor"], arr.actor.fsdp_config.mixed_precision, self.device)
        if arr.model.use_remove_padding:  # packed forward passes (the reference's copy packs too)
            enable_remove_padding(model, "actor_rollout_ref.model.use_remove_padding")
        self.kl_ctrl = make_kl_controller(cfg.algorithm.kl_ctrl.type, cfg.algorithm.kl_ctrl.kl_coef,
                                          cfg.algorithm.kl_ctrl.target_kl, cfg.algorithm.kl_ctrl.horizon)
        self.needs_ref = arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
        # LoRA: the reference is the base model with the adapter disabled; full fine-tuning keeps a frozen copy.
        ref_model = frozen_copy(model) if self.needs_ref and not is_peft(model) else None
        if self.needs_ref:  # its own precision (a LoRA reference is the policy itself: the actor's)
            mp = arr.ref.fsdp_config.mixed_precision
            ref_dtype = arr.ref.fsdp_config.model_dtype  # a LoRA reference's is the policy's (workers/checks.py)
            self.precision["ref"] = self.precision["actor"] if ref_model is None else precision.kept_in(
                precision.choose(mp.param_dtype, self.device, arr.model.path), ref_dtype,
                "actor_rollout_ref.ref.fsdp_config.model_dtype")
            if ref_model is not None:
                ref_model.to(self.precision["ref"].master)  # the frozen copy is the policy's, in its dtype
                precision.set_compute(ref_model, self.precision["ref"], mp, self.device)
        # several processes: both are sharded over the ranks (every decoder layer, then the root)
        self.model = model = wrap(model, arr.actor.strategy, arr.actor.fsdp_config, dist, self.device)
        self.ref_model = (wrap(ref_model, arr.actor.strategy, arr.ref.fsdp_config, dist, self.device)
                          if ref_model is not None else None)
        if dist.sp > 1:  # Ulysses: each process of a group runs its slice of every sequence
            enable_sequence_parallel(model, dist, "actor_rollout_ref.actor.ulysses_sequence_parallel_size")
            if self.ref_model is not None and (arr.ref.ulysses_sequence_parallel_size or dist.sp) > 1:
                enable_sequence_parallel(self.ref_model, dist, "actor_rollout_ref.ref.ulysses_sequence_parallel_size")
        if arr.actor.use_torch_compile:
            for m in (model, self.ref_model):
                if m is not None:
                    enable_torch_compile(m, "actor_rollout_ref.actor.use_torch_compile")
        # A KL estimator computed from logits (full) needs the reference's logits, not its log-probs: for the loss
        # the worker runs the reference on each micro-batch, for the reward the ref phase computes the KL itself.
        algo = cfg.algorithm
        loss_kl_logits = arr.actor.use_kl_loss and kl_needs_logits(arr.actor.kl_loss_type)
        self.reward_kl_from_logits = algo.use_kl_in_reward and kl_needs_logits(algo.kl_penalty)
        self.needs_ref_logprobs = ((arr.actor.use_kl_loss and not loss_kl_logits)
                                   or (algo.use_kl_in_reward and not self.reward_kl_from_logits))

        # on-policy distillation: a frozen teacher scores the step's responses (`score_with_teacher`)
        self.distill = cfg.distillation.distillation_loss if cfg.distillation.enabled else None
        self.teacher = self._load_teacher() if self.distill is not None else None
        self.settings = UpdateSettings.from_config(cfg)
        self.worker = PolicyWorker(model, self.settings, arr.actor.optim, total_steps, ref_model=self.ref_model,
                                   dist=dist, teacher=self.teacher)
        use_critic = cfg.critic.enable if cfg.critic.enable is not None else "values" in self.adv_needs
        self.critic_tokenizer = tokenizer
        self.critic = self._build_critic() if use_critic else None
        # With one optimizer step per batch of fresh experiences the policy that sampled is the policy being
        # updated, so the old log-probs are the detached current ones and need no forward pass of their own; an
        # engine of its own numerics (vLLM) changes nothing in the loss there (the ratio is 1 either way), and the
        # difference verl logs (training/rollout_probs_diff_*, docs/rollout.md) comes from the update's own passes.
        updates = arr.actor.ppo_epochs * (cfg.data.train_batch_size // arr.actor.ppo_mini_batch_size)
        rc = cfg.algorithm.rollout_correction
        self.needs_old_logprobs = (updates > 1 or cfg.algorithm.use_kl_in_reward or corrects_rollout(rc)
                                   or self.precision["rollout"].dtype != self.precision["actor"].dtype
                                   or "old_logprobs" in self.adv_needs or arr.actor.calculate_sum_pi_squared
                                   or cfg.algorithm.entropy_clip.mode is not None
                                   ) and not rc.bypass_mode  # bypass: the rollout's log-probs are the old ones
        served = unserved_reason(cfg, dist.processes) is None  # an engine server's passes: another process's
        self.worker.rollout_drift = ((engine_spec(arr.rollout.name).own_numerics or served)
                                     and not self.needs_old_logprobs)
        # algorithm.mix: the expert rows each update adds (trainer/mix.py)
        self.expert = ExpertRows(cfg, tokenizer, dist) if cfg.algorithm.mix.enable else None
        self.ckpt = CheckpointManager(
            self.out / "checkpoints", 1 if trainer.remove_previous_ckpt_in_save else trainer.max_actor_ckpt_to_keep,
            mirror=trainer.default_hdfs_dir,
        )
        self.global_step = 0

    def _build_critic(self) -> CriticWorker:
        """The value model (critic.model, default the policy's folder) and its worker; null sizes follow the actor."""
        c, arr = self.cfg.critic, self.cfg.actor_rollout_ref
        if c.model.tokenizer_path:
            self.critic_tokenizer = load_tokenizer(c.model.tokenizer_path, c.model.trust_remote_code)
            if self.critic_tokenizer.get_vocab() != self.tokenizer.get_vocab():
                raise ModelError(f"critic.model.tokenizer_path={c.model.tokenizer_path!r}: its vocabulary differs "
                                 "from the policy's, whose token ids the critic reads; remove it")
        self.precision["critic"] = precision.kept_in(
            precision.choose(c.model.fsdp_config.mixed_precision.param_dtype, self.device, c.model.path or arr.model.path),
            c.model.fsdp_config.model_dtype, "critic.model.fsdp_config.model_dtype")
        model = load_trainable_model(c.model.path or arr.model.path, c.model, self.precision["critic"].master,
                                     self.device, key="critic.model", value_head=True, tokenizer=self.tokenizer,
                                     freeze_vision=self._critic_freezes_vision())
        precision.set_compute(model, self.precision["critic"], c.model.fsdp_config.mixed_precision, self.device)
        if c.model.use_remove_padding:
            enable_remove_padding(model, "critic.model.use_remove_padding")
        model = wrap(model, c.strategy, c.model.fsdp_config, self.dist, self.device)
        if self.dist.sp > 1 and (c.ulysses_sequence_parallel_size or self.dist.sp) > 1:
            enable_sequence_parallel(model, self.dist, "critic.ulysses_sequence_parallel_size")
        return CriticWorker(model, CriticSettings.from_config(self.cfg, self.settings), c.optim, self.total_steps,
                            self.dist)

    def _load_teacher(self) -> torch.nn.Module:
        """The distillation teacher, frozen, in the reference's precision and sharding. Its folder is asked again
        here, before its weights load: a staged run's student did not exist when the config was checked."""
        arr, key = self.cfg.actor_rollout_ref, "distillation.teacher_model.model_path"
        path = self.cfg.distillation.teacher_model.model_path
        problem = teacher_problem(path, arr.model.path, self.cfg.data.tokenizer)
        if problem:
            raise ModelError(f"{key}={path!r} {problem}")
        mp = arr.ref.fsdp_config.mixed_precision
        choice = precision.kept_in(precision.choose(mp.param_dtype, self.device), arr.ref.fsdp_config.model_dtype,
                                   "actor_rollout_ref.ref.fsdp_config.model_dtype")
        teacher = load_causal_lm(path, choice.master, self.device, key="distillation.teacher_model",
                                 tokenizer=self.tokenizer)
        teacher.eval().requires_grad_(False)
        precision.set_compute(teacher, choice, mp, self.device)
        return wrap(teacher, arr.actor.strategy, arr.ref.fsdp_config, self.dist, self.device)

    def _critic_freezes_vision(self) -> bool:
        """critic.model.freeze_vision_tower, null: the policy's setting."""
        own = self.cfg.critic.model.freeze_vision_tower
        return self.cfg.actor_rollout_ref.model.freeze_vision_tower if own is None else own

    # ------------------------------------------------------------------------------------------- one step
    def train_step(self, batch: Batch, step: int, timer: Timer) -> dict[str, float]:
        """Update the policy (and critic) on `batch`: scored experiences (`scores`, `rollout_logprobs`, per-row
        `reward_rows`, `model_version`; `reward_baselines` when the estimator needs them)."""
        self.global_step = step
        metrics = self.reward_metrics(batch)
        metrics.update(self.staleness_metrics(batch, step))
        self.set_token_rewards(batch)
        entropy_stats = None  # (entropy, N) of the old policy at each response token: the entropy filters' input
        if self.needs_old_logprobs:
            with timer("old_log_prob"):
                ro = self.cfg.actor_rollout_ref.rollout
                batch.old_logprobs, batch.sum_pi_squared, entropy_stats = compute_old_logprobs(
                    self.model, batch, self.settings.temperature, _log_prob_micro_rows(ro),
                    self.cfg.actor_rollout_ref.actor.calculate_sum_pi_squared, self._token_budget(ro), self.dist,
                    with_entropy_stats=self.cfg.algorithm.entropy_clip.mode is not None)
        # off-policy correction against the rollout's log-probs (stale experiences, engine mismatch)
        metrics.update(apply_rollout_correction(batch, self.cfg.algorithm.rollout_correction, self.dist))
        if "reward_components" in self.adv_needs:  # gdpo: the reward dimensions the rows carry
            batch.reward_components = reward_components(self.reward_values(batch), self.cfg.algorithm.gdpo_reward_keys)
        if self.needs_ref:
            with timer("ref"):
                if self.needs_ref_logprobs:
                    batch.ref_logprobs = self.ref_logprobs(batch)
                if self.reward_kl_from_logits:
                    ref_cfg = self.cfg.actor_rollout_ref.ref
                    batch.ref_kl = compute_logit_kl(
                        self.model, self.ref_model, batch, self.settings.temperature, _log_prob_micro_rows(ref_cfg),
                        self.cfg.algorithm.kl_penalty, self._token_budget(ref_cfg), self.dist)
        if self.teacher is not None:
            with timer("teacher"):
                metrics.update(self.score_with_teacher(batch))
        if self.critic is not None:
            with timer("values"):  # the old values, before either model moves
                batch.values = self.critic.compute_values(batch)
        with timer("adv"):
            metrics.update(self.compute_advantages(batch, entropy_stats))
            metrics.update(self.downweight_stale(batch, step))
            batch = self.pf_ppo_draw(batch, step)
        if self.critic is not None:
            with timer("update_critic"):
                metrics.update(self.critic.update(batch, step))
        self.actor_moved = False  # whether this step changed the actor's weights (what a sync has to carry)
        if step > self.cfg.trainer.critic_warmup:  # the first critic_warmup steps train only the critic
            with timer("update_actor"):
                metrics.update(self.worker.update(self.expert.attach(batch) if self.expert else batch, step))
            self.actor_moved = self.worker.steps_taken != 0
        metrics.update(self.batch_metrics(batch))
        metrics["training/global_step"] = step
        n_all = float(self.dist.sum(torch.stack([batch.response_mask.sum(), batch.prompt_mask.sum()])).sum())
        metrics[TOKENS] = n_all
        if "update_actor" in timer.times:  # not during critic warmup
            metrics["perf/train_tokens_per_s"] = (n_all * self.settings.ppo_epochs
                                                  / max(timer.times["update_actor"], 1e-9))
        return metrics

    def pf_ppo_draw(self, batch: Batch, step: int) -> Batch:
        """PF-PPO (algorithm.use_pf_ppo with gae, as verl): the batch resampled with replacement by its scores, the
        draw seeded by data.seed and the step (a resumed run draws the same rows)."""
        algo = self.cfg.algorithm
        if not (algo.use_pf_ppo and algo.adv_estimator == "gae"):
            return batch
        draw = torch.Generator().manual_seed(self.cfg.data.seed * 1_000_003 + step)
        return batch.select(pf_ppo_resample(batch.scores, algo.pf_ppo.reweight_method, algo.pf_ppo.weight_pow, draw))

    @staticmethod
    def set_token_rewards(batch: Batch) -> None:
        """`batch.token_rewards` (B, R): `token_scores`, the start of the rewards the KL terms then change."""
        batch.token_rewards = token_scores(batch)

    def reward_metrics(self, batch: Batch) -> dict[str, float]:
        """critic/score/* over the batch's scores, reward_extra/<name>/mean of each named per-row value (over the
        rows that carry it), and critic/reward_baselines/* when the rows carry ReMax baselines (every rank's rows)."""
        metrics = self._stats("critic/score", batch.scores)
        names = list(dict.fromkeys(k for row in batch.reward_rows for k in row))  # every row's, in order
        if self.dist.enabled:  # the ranks gather the same names
            names = list(dict.fromkeys(k for rank in self.dist.gather_objects(names) for k in rank))
        for name in names:  # each over the rows that carry it (a workflow's judge rows carry their own)
            values = torch.tensor([row[name] for row in batch.reward_rows if name in row], dtype=torch.float64)
            values = self.dist.gather_rows(values).tolist()
            if values:
                metrics[f"reward_extra/{name}/mean"] = float(np.mean(values))
        if batch.reward_baselines is not None:
            metrics.update(self._stats("critic/reward_baselines", batch.reward_baselines))
        return metrics

    @staticmethod
    def reward_values(batch: Batch) -> dict[str, torch.Tensor]:
        """(B,) per-row reward values by name: each named value every row carries (a reward function's dict
        entries, rm_score, ...) and `score`, the score the row trains with."""
        names = [k for k in batch.reward_rows[0] if all(k in row for row in batch.reward_rows)] \
            if batch.reward_rows else []  # those every row carries
        values = {k: torch.tensor([row[k] for row in batch.reward_rows], dtype=torch.float32) for k in names}
        return {**values, "score": batch.scores}

    def staleness_metrics(self, batch: Batch, step: int) -> dict[str, float]:
        """rollout/staleness/mean|max: trainer steps between the weights that generated each row and the weights
        this step starts from (step - 1); 0 everywhere for on-policy training."""
        if batch.model_version is None:
            return {}
        staleness = self.dist.gather_rows((step - 1) - batch.model_version).float()
        return {"rollout/staleness/mean": float(staleness.mean()), "rollout/staleness/max": float(staleness.max())}

    def downweight_stale(self, batch: Batch, step: int) -> dict[str, float]:
        """experience_buffer.stale_policy=downweight: the advantages of a row s > max_staleness steps stale are
        scaled by max_staleness / s, so its share of the policy gradient shrinks with its age (the buffer drops
        such rows instead with stale_policy=drop)."""
        b = self.cfg.experience_buffer
        if b.max_staleness is None or b.stale_policy != "downweight" or batch.model_version is None:
            return {}
        staleness = ((step - 1) - batch.model_version).float()  # (B,)
        over = staleness > b.max_staleness
        weight = torch.where(over, b.max_staleness / staleness.clamp(min=1), torch.ones_like(staleness))
        batch.advantages = batch.advantages * weight[:, None]
        return {"rollout/staleness/downweighted": float(self.dist.sum(over.sum().double()))}

    def logprobs(self, batch: Batch, model, micro_cfg) -> torch.Tensor:
        return compute_logprobs(model, batch, self.settings.temperature, _log_prob_micro_rows(micro_cfg),
                                self._token_budget(micro_cfg), self.dist)

    def _token_budget(self, section) -> int | None:
        """Real tokens per no-grad log-prob pass of a rollout / ref section with log_prob_use_dynamic_bsz (null:
        the actor's use_dynamic_bsz; the budget null: the actor's ppo_max_token_len_per_gpu), else None."""
        actor = self.cfg.actor_rollout_ref.actor
        dynamic = section.log_prob_use_dynamic_bsz
        if not (actor.use_dynamic_bsz if dynamic is None else dynamic):
            return None
        budget = section.log_prob_max_token_len_per_gpu
        return actor.ppo_max_token_len_per_gpu if budget is None else budget

    def ref_logprobs(self, batch: Batch) -> torch.Tensor:
        with reference_of(self.model, self.ref_model) as ref:
            return self.logprobs(batch, ref, self.cfg.actor_rollout_ref.ref)

    def score_with_teacher(self, batch: Batch) -> dict[str, float]:
        """The teacher's pass over the step's responses (one batched pass, micro-batched as the reference's). As a
        reward (use_policy_gradient): the policy's per-token divergence from the teacher, `Batch.teacher_kl`, which
        `compute_advantages` adds; as a loss: the teacher's log-probs of the sampled tokens for the worker's
        sampled divergences (a logit divergence runs the teacher in each micro-batch instead)."""
        d, ref_cfg = self.distill, self.cfg.actor_rollout_ref.ref
        if d.use_policy_gradient:
            batch.teacher_kl = compute_teacher_divergence(
                self.model, self.teacher, batch, self.settings.temperature, _log_prob_micro_rows(ref_cfg),
                d.loss_mode, d.jsd_beta, self._token_budget(ref_cfg), self.dist)
            mask = (batch.action_mask if batch.action_mask is not None else batch.response_mask).float()
            n = self.dist.sum(torch.stack([(batch.teacher_kl * mask).sum(), mask.sum()]).double())
            return {"distill/divergence": float(n[0] / n[1].clamp(min=1))}
        if not distill_needs_logits(d.loss_mode):
            batch.teacher_logprobs = self.logprobs(batch, self.teacher, ref_cfg)
        return {}

    def distill_rewards(self, batch: Batch) -> None:
        """Before the estimator: the task reward left out (use_task_rewards false), and with in_reward the
        -coef x divergence per token added to the token rewards."""
        d = self.distill
        if d is None:
            return
        if not d.use_task_rewards:
            batch.token_rewards = torch.zeros_like(batch.token_rewards)
        if d.use_policy_gradient and d.in_reward:
            mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
            batch.token_rewards = batch.token_rewards - d.distillation_loss_coef * batch.teacher_kl * mask

    def distill_advantages(self, advantages: torch.Tensor, teacher_kl: torch.Tensor | None,
                           mask: torch.Tensor) -> torch.Tensor:
        """After the estimator (use_policy_gradient without in_reward): A_t - coef x divergence_t on the policy's
        tokens `mask`, Thinking Machines' per-token reverse-KL advantage beside the task's."""
        d = self.distill
        if d is None or not d.use_policy_gradient or d.in_reward:
            return advantages
        return advantages - d.distillation_loss_coef * teacher_kl * mask

    def compute_advantages(self, batch: Batch, entropy_stats: tuple[torch.Tensor, torch.Tensor] | None = None
                           ) -> dict[str, float]:
        """Advantages and returns of `batch`. With several processes the estimator runs on every rank's rows
        (gathered and put in the one-process order: the one-process batch, so batch-wide statistics such as
        whitening, gpg's alpha or a batch std are global) and each rank keeps its own rows. `entropy_stats`: the
        old pass's (entropy, N), for algorithm.entropy_clip's filter, which then drops tokens from the loss."""
        algo, metrics = self.cfg.algorithm, {}
        action = batch.action_mask if batch.action_mask is not None else batch.response_mask
        mask = action.float()
        self.distill_rewards(batch)
        if algo.use_kl_in_reward:
            # an estimator from logits (full) was computed in the ref phase, where both policies ran
            kl = (batch.ref_kl if batch.ref_kl is not None
                  else kl_penalty(batch.old_logprobs, batch.ref_logprobs, algo.kl_penalty)) * mask  # (B, R)
            beta = self.kl_ctrl.value
            batch.token_rewards = batch.token_rewards - beta * kl
            row_kl = self.dist.gather_rows(masked_mean(kl, mask, dim=-1))  # (B_all,)
            current_kl = float(row_kl.mean())
            self.kl_ctrl.update(current_kl, n_steps=len(row_kl))
            metrics.update({"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta})
        # every rank's rows in the one-process order (by prompt position: group ids), so that the batch-wide sums
        # are taken in the same order as with one process
        order = torch.argsort(self.dist.gather_rows(batch.group), stable=True) if self.dist.enabled else None
        g = (lambda x: self.dist.gather_rows(x)[order]) if order is not None else (lambda x: x)
        opt = lambda x: g(x) if x is not None else None
        # the estimator sees the policy's tokens (masked spans inside a response: tool turns)
        token_rewards, response_mask, values = g(batch.token_rewards), g(action), opt(batch.values)
        out = compute_advantages(algo.adv_estimator, AdvantageInputs(
            token_rewards=token_rewards, response_mask=response_mask, group=g(batch.group),
            values=values, gamma=algo.gamma, lam=algo.lam,
            norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo, scale_rewards=algo.scale_rewards,
            reward_baselines=opt(batch.reward_baselines), opmd_baseline=algo.opmd_baseline, tau=algo.tau,
            baseline_shift=algo.baseline_shift, reward_components=opt(batch.reward_components),
            gdpo_reward_weights=algo.gdpo_reward_weights, old_logprobs=opt(batch.old_logprobs),
            sum_pi_squared=opt(batch.sum_pi_squared), rollout_is_weights=opt(batch.rollout_is_weights),
            std_threshold=algo.std_threshold, std_cal_level=algo.std_cal_level,
        ))
        # the teacher's per-token term joins the estimator's advantages (every rank's rows, as they are)
        advantages = self.distill_advantages(out.advantages, opt(batch.teacher_kl), response_mask)
        batch.advantages, batch.returns, kept = advantages, out.returns, out.loss_mask
        if order is not None:  # this rank's rows, back from the one-process order
            lo = sum(self.dist.gather_sizes(len(batch))[: self.dist.rank])
            mine = order.argsort()[lo:lo + len(batch)]
            batch.advantages, batch.returns = advantages[mine], out.returns[mine]
            kept = kept[mine] if kept is not None else None
        if kept is not None:  # the rows the estimator leaves out (raft, std_threshold) carry no loss
            tokens = batch.loss_mask if batch.loss_mask is not None else batch.response_mask
            batch.loss_mask = tokens * kept.to(tokens.device, tokens.dtype).unsqueeze(-1)
            metrics["critic/kept_rows"] = float(out.loss_mask.float().mean())
        if algo.entropy_clip.mode is not None:  # the tokens the entropy filter drops carry no loss either
            ec = algo.entropy_clip
            keep, clip_metrics = entropy_clip_keep(ec.mode, EntropyClipInputs(
                advantages=advantages, response_mask=response_mask, old_logprobs=g(batch.old_logprobs),
                entropy=g(entropy_stats[0]), nec=g(entropy_stats[1])), ec.mu or DEFAULT_MU[ec.mode], ec.max_frac)
            if order is not None:
                keep = keep[mine]
            tokens = batch.loss_mask if batch.loss_mask is not None else batch.response_mask
            batch.loss_mask = tokens * keep.to(tokens.device, tokens.dtype)
            metrics.update({f"actor/entropy_clip/{k}": v for k, v in clip_metrics.items()})
        mask = response_mask.float()
        valid = mask.bool()
        metrics.update(_stats("critic/rewards", (token_rewards * mask).sum(-1)))
        metrics.update(_stats("critic/advantages", advantages[valid]))
        metrics.update(_stats("critic/returns", out.returns[valid]))
        if values is not None:
            metrics.update(_stats("critic/values", values[valid]))
            metrics["critic/vf_explained_var"] = explained_variance(values, out.returns, valid)
        return metrics

    def batch_metrics(self, batch: Batch) -> dict[str, float]:
        """response_length/* over whole responses (tool turns included) and clip_ratio, the share of rows whose
        last turn the policy wrote reached max_response_length (the per-turn limit of a multi-turn workflow)."""
        lengths = self.dist.gather_rows(batch.response_mask.sum(-1))
        metrics = _stats("response_length", lengths)
        turns = lengths if batch.action_mask is None else self.dist.gather_rows(last_turn_lengths(batch.action_mask))
        metrics["response_length/clip_ratio"] = float((turns >= self.cfg.data.max_response_length).float().mean())
        metrics.update(self._stats("prompt_length", batch.prompt_mask.sum(-1)))
        return metrics

    def _stats(self, name: str, x: torch.Tensor) -> dict[str, float]:
        """`_stats` over every rank's values of `x`."""
        return _stats(name, self.dist.gather_rows(x.flatten()))

    # -------------------------------------------------------------------------------------- weights out
    def trainable_weights(self) -> dict[str, torch.Tensor]:
        """The trainable parameters by name (what a synchronizer sends to an explorer's copy of the model)."""
        return {n: p.detach() for n, p in self.model.named_parameters() if p.requires_grad}

    def gathered_weights(self, trainable_only: bool = True, everywhere: bool = False) -> dict[str, torch.Tensor]:
        """The policy's parameters (the trainable ones, or all), gathered whole from the shards, by the unsharded
        model's names: onto rank 0 ({} on the others), or onto every rank (`everywhere`: what a rollout engine
        beside each rank loads). A collective: every rank calls it."""
        state = full_state_dict(self.model, self.dist, everywhere)
        if not state:
            return {}
        names = [unwrapped_name(n) for n, p in self.model.named_parameters() if p.requires_grad or not trainable_only]
        missing = [n for n in names if n not in state]
        if missing:
            raise RuntimeError(f"the gathered policy lacks parameters: {missing[:5]}")
        return {n: state[n] for n in names}

    # -------------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, step: int, state: dict, generators: dict[str, torch.Generator],
                        versions: dict[int, dict[str, torch.Tensor]] | None = None) -> Path:
        """Checkpoint `step`: the policy (and critic) with optimizers, schedules and step guards, the KL
        coefficient, and the caller's `state` (step metrics, the explorer's position) and `generators` (their RNG
        states); `versions`: earlier trainable weights by step that a restarted explorer may still need (`resume`
        returns them)."""
        def write(folder: Path) -> None:
            if versions:
                save_versions(folder, versions)
            save_training_state(
                folder, contents=set(self.cfg.actor_rollout_ref.actor.checkpoint.save_contents), model=self.model,
                optimizer=self.worker.optimizer, scheduler=self.worker.scheduler, generators=generators,
                tokenizer=self.tokenizer, state={"global_step": step, "kl_coef": self.kl_ctrl.value,
                                                 "guards": self.guard_states(), **trainer_kind(self.cfg), **state,
                                                 **({"expert": self.expert.state_dict()} if self.expert else {})},
                dist=self.dist,
                export=(lambda out: self.export(out, critic=False)) if self.dist.enabled else None,
            )
            if self.critic is not None:
                save_module_state(folder / "critic", contents=set(self.cfg.critic.checkpoint.save_contents),
                                  model=self.critic.model, optimizer=self.critic.optimizer,
                                  scheduler=self.critic.scheduler, tokenizer=self.critic_tokenizer, dist=self.dist,
                                  export=(lambda out: self.export(out, critic=True)) if self.dist.enabled else None)
        return self.ckpt.save(step, write, self.dist)

    def workers(self) -> dict:
        """The trained models' workers by name: actor, and critic where there is one."""
        return {"actor": self.worker, **({"critic": self.critic} if self.critic is not None else {})}

    def guard_states(self) -> dict[str, dict]:
        """Each worker's step guard state (its skipped steps in a row), as a checkpoint holds it."""
        return {name: worker.guard.state_dict() for name, worker in self.workers().items()}

    def resume(self, generators: dict[str, torch.Generator]) -> dict | None:
        """Continue from the checkpoint trainer.resume_mode picks (None: start afresh); restores the RNG states of
        `generators`. Returns the checkpoint's trainer_state.json, its step in `global_step`, and under
        "explorer_versions" the weights `save_checkpoint` was given as `versions`."""
        t = self.cfg.trainer
        folder = resume_folder(t.resume_mode, t.resume_from_path, self.ckpt)
        if folder is None:
            return None
        state = load_training_state(
            folder, contents=set(self.cfg.actor_rollout_ref.actor.checkpoint.load_contents), model=self.model,
            optimizer=self.worker.optimizer, scheduler=self.worker.scheduler, generators=generators,
            dist=self.dist,
        )
        if self.critic is not None:
            load_module_state(folder / "critic", contents=set(self.cfg.critic.checkpoint.load_contents),
                              model=self.critic.model, optimizer=self.critic.optimizer,
                              scheduler=self.critic.scheduler, dist=self.dist)
        self.kl_ctrl.value = state["kl_coef"]
        for name, worker in self.workers().items():
            worker.guard.load_state_dict(state.get("guards", {}).get(name, {}))
        if self.expert is not None:
            self.expert.load_state_dict(state.get("expert", {}))
        self.global_step = state["global_step"] = step_of(folder)
        state[EXPLORER_VERSIONS] = load_versions(folder)
        if self.dist.is_main:
            print(f"rft: resumed from {folder} at step {self.global_step}", flush=True)
        if t.del_local_ckpt_after_load:
            self.dist.barrier()  # every rank has read it
            if self.dist.is_main:
                shutil.rmtree(folder)
        return state

    def export(self, out: Path, critic: bool, final: bool = False) -> None:
        """The policy (or the critic) as a Hugging Face folder, LoRA merged. Several processes: the full weights
        are gathered on rank 0, loaded into a fresh unsharded copy of the model and written from there.
        `final`: the run is over, so one process may merge LoRA into the trained model itself."""
        model = self.critic.model if critic else self.model
        tokenizer = self.critic_tokenizer if critic else self.tokenizer
        if not self.dist.enabled:
            export_hf(model, tokenizer, out, merge_in_place=final)
            return
        weights = full_state_dict(model, self.dist)
        if self.dist.is_main:
            copy = self.unsharded_copy(critic)
            copy.load_state_dict(weights)
            export_hf(copy, tokenizer, out, merge_in_place=True)
        self.dist.barrier()

    def unsharded_copy(self, critic: bool = False) -> torch.nn.Module:
        """A fresh unsharded model (LoRA-wrapped as the trained one) on CPU, in the policy's (or the critic's)
        architecture, with the folder's weights: what a sharded model's gathered weights are loaded into."""
        arr, c = self.cfg.actor_rollout_ref, self.cfg.critic
        if critic:
            return load_trainable_model(c.model.path or arr.model.path, c.model, self.precision["critic"].master,
                                        torch.device("cpu"), key="critic.model", value_head=True,
                                        freeze_vision=self._critic_freezes_vision())
        return load_trainable_model(arr.model.path, arr.model, self.precision["actor"].master, torch.device("cpu"),
                                    key="actor_rollout_ref.model")

    def export_final(self, write: Callable[[str], None] = print) -> None:
        """<out>/model (and <out>/critic) at the end of the run."""
        self.export(self.out / "model", critic=False, final=True)
        write(f"rft: model written to {self.out / 'model'}")
        if self.critic is not None:
            self.export(self.out / "critic", critic=True, final=True)
            write(f"rft: critic written to {self.out / 'critic'}")
