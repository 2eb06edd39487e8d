"""The on-policy RL loop: generate -> score -> (old, ref) log-probs -> (values) -> advantages -> (critic update)
-> actor update -> validate -> save.

One step reads top to bottom in `train_step`; each phase is one named call inside a timer (`timing_s/<phase>`).
Advantages are computed here, where every group is visible; the worker only sees a Batch and loss settings.

Several processes (`dist`, `rft.distributed`): every rank draws the same prompt indices and generates, scores and
trains on its contiguous share of them (all responses of a prompt on one rank). What spans the batch is computed
over every rank's rows: the advantages from the gathered token rewards, masks and group ids (identical on every
rank, then each keeps its rows), the KL controller's mean, the loss normalisers and the logged metrics. Rank 0
writes the files (config, metrics, exports); checkpoints are written by all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from rft.algorithms import (
    AdvantageInputs,
    compute_advantages,
    estimator_spec,
    explained_variance,
    informative_groups,
    kl_needs_logits,
    kl_penalty,
    make_kl_controller,
    masked_mean,
    overlong_penalty,
    reward_components,
)
from rft.batch import Batch, concat_batches
from rft.config import RFTConfig, to_yaml
from rft.data.dataset import PromptDataset, PromptSampler
from rft.distributed import SINGLE, Dist, padded_shard, step_shard
from rft.fsutil import write_text_atomic
from rft.models.load import (
    compute_dtype,
    export_hf,
    frozen_copy,
    is_peft,
    load_reward_model,
    load_tokenizer,
    load_trainable_model,
    resolve_device,
)
from rft.monitor import SilentTracker, Timer, Tracker
from rft.rewards import build_reward_fn, score_responses
from rft.rewards.model import RewardModel
from rft.rollout import HFRollout, SamplingParams
from rft.runtime import configure_cpu_runtime
from rft.trainer.checkpoint import (
    CheckpointManager,
    load_module_state,
    load_training_state,
    resume_folder,
    save_module_state,
    save_training_state,
    step_of,
)
from rft.trainer.evaluate import eos_token_ids, evaluate, rollout_batch
from rft.trainer.rollout_correction import apply_rollout_correction, corrects_rollout
from rft.workers.critic import CriticSettings, CriticWorker
from rft.workers.fsdp import full_state_dict, gathered_for_generation, wrap
from rft.workers.optim import plateau_step
from rft.workers.policy import (
    PolicyWorker,
    UpdateSettings,
    compute_logit_kl,
    compute_logprobs,
    compute_old_logprobs,
    reference_of,
)


def pad_responses(batch: Batch, width: int, pad_token_id: int) -> Batch:
    """`batch` with its (B, R) response tensors right-padded to `width` columns (padding: masked out)."""
    extra = width - batch.response_ids.shape[1]
    if extra <= 0:
        return batch
    pad = lambda x, value: torch.nn.functional.pad(x, (0, extra), value=value) if x is not None else None
    batch.response_ids = pad(batch.response_ids, pad_token_id)
    batch.response_mask = pad(batch.response_mask, 0)
    batch.rollout_logprobs = pad(batch.rollout_logprobs, 0.0)
    return batch


def _stats(name: str, x: torch.Tensor) -> dict[str, float]:
    x = x.float()
    return {f"{name}/mean": float(x.mean()), f"{name}/max": float(x.max()), f"{name}/min": float(x.min())}


def _log_prob_micro_rows(section) -> int | None:
    """Rows per no-grad log-prob pass of a rollout / ref config section (None: the whole batch)."""
    return section.log_prob_micro_batch_size_per_gpu or section.log_prob_micro_batch_size


class RLTrainer:
    def __init__(self, cfg: RFTConfig, dist: Dist = SINGLE):
        """`dist`: this process's rank among the processes of the run (`rft.distributed.init_from_env`); the
        default is one process."""
        configure_cpu_runtime()
        self.cfg = cfg
        self.dist = dist
        arr, data, trainer = cfg.actor_rollout_ref, cfg.data, cfg.trainer
        self.out = Path(trainer.default_local_dir)
        self.device = resolve_device(trainer.device)
        if dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", dist.local_rank)
        self.dtype = compute_dtype(arr.rollout.dtype, self.device)
        torch.manual_seed(trainer.seed)

        self.tokenizer = load_tokenizer(data.tokenizer or arr.model.path, data.trust_remote_code)
        ds_kwargs = dict(prompt_key=data.prompt_key, max_prompt_length=data.max_prompt_length,
                         truncation=data.truncation, filter_overlong_prompts=data.filter_overlong_prompts,
                         image_key=data.image_key)
        self.train_set = PromptDataset(data.train_files, self.tokenizer, **ds_kwargs)
        self.val_set = PromptDataset(data.val_files, self.tokenizer, **ds_kwargs) if data.val_files else None
        self.sampler = PromptSampler(len(self.train_set), data.train_batch_size, data.shuffle, data.seed)
        self.total_steps = trainer.total_training_steps or self.sampler.batches_per_epoch * trainer.total_epochs
        crf = cfg.custom_reward_function
        self.reward_fn = build_reward_fn(crf.path, crf.name, crf.reward_weights)
        # The optional inputs the estimator declared with its registration; the trainer fills each one it knows:
        # reward_baselines from a greedy rollout per prompt (`gen_max`), values from the critic (`values`).
        self.adv_needs = estimator_spec(cfg.algorithm.adv_estimator).needs

        model = load_trainable_model(arr.model.path, arr.model, self.dtype, self.device, key="actor_rollout_ref.model")
        self.kl_ctrl = make_kl_controller(cfg.algorithm.kl_ctrl.type, cfg.algorithm.kl_ctrl.kl_coef,
                                          cfg.algorithm.kl_ctrl.target_kl, cfg.algorithm.kl_ctrl.horizon)
        self.needs_ref = arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
        # LoRA: the reference is the base model with the adapter disabled; full fine-tuning keeps a frozen copy.
        ref_model = frozen_copy(model) if self.needs_ref and not is_peft(model) else None
        # several processes: both are sharded over the ranks (every decoder layer, then the root)
        self.model = model = wrap(model, arr.actor.strategy, arr.actor.fsdp_config, dist, self.device)
        self.ref_model = (wrap(ref_model, arr.actor.strategy, arr.ref.fsdp_config, dist, self.device)
                          if ref_model is not None else None)
        # A KL estimator computed from logits (full) needs the reference's logits, not its log-probs: for the loss
        # the worker runs the reference on each micro-batch, for the reward the ref phase computes the KL itself.
        algo = cfg.algorithm
        loss_kl_logits = arr.actor.use_kl_loss and kl_needs_logits(arr.actor.kl_loss_type)
        self.reward_kl_from_logits = algo.use_kl_in_reward and kl_needs_logits(algo.kl_penalty)
        self.needs_ref_logprobs = ((arr.actor.use_kl_loss and not loss_kl_logits)
                                   or (algo.use_kl_in_reward and not self.reward_kl_from_logits))

        self.rollout = HFRollout(model, eos_token_ids(model, self.tokenizer), self.tokenizer.pad_token_id,
                                 arr.rollout.micro_batch_size, all_done=dist.all_true if dist.enabled else None)
        self.generator = torch.Generator().manual_seed(trainer.seed)

        actor, ro, rc = arr.actor, arr.rollout, cfg.algorithm.rollout_correction
        self.settings = UpdateSettings(
            n=ro.n, ppo_mini_batch_size=actor.ppo_mini_batch_size,
            micro_rows=actor.ppo_micro_batch_size_per_gpu or actor.ppo_micro_batch_size,
            ppo_epochs=actor.ppo_epochs, shuffle=actor.shuffle,
            seed=actor.data_loader_seed if actor.data_loader_seed is not None else trainer.seed,
            temperature=ro.temperature, max_response_length=data.max_response_length,
            loss_mode="bypass_mode" if rc.bypass_mode else actor.policy_loss.loss_mode,
            loss_agg_mode=actor.loss_agg_mode,
            clip_ratio_low=actor.clip_ratio_low if actor.clip_ratio_low is not None else actor.clip_ratio,
            clip_ratio_high=actor.clip_ratio_high if actor.clip_ratio_high is not None else actor.clip_ratio,
            clip_ratio_c=actor.clip_ratio_c, grad_clip=actor.grad_clip, entropy_coeff=actor.entropy_coeff,
            use_kl_loss=actor.use_kl_loss, kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type,
            tau_pos=actor.tau_pos, tau_neg=actor.tau_neg, clip_cov_ratio=actor.policy_loss.clip_cov_ratio,
            clip_cov_lb=actor.policy_loss.clip_cov_lb, clip_cov_ub=actor.policy_loss.clip_cov_ub,
            kl_cov_ratio=actor.policy_loss.kl_cov_ratio, ppo_kl_coef=actor.policy_loss.ppo_kl_coef,
            opmd_tau=actor.policy_loss.tau, loss_scale_factor=actor.loss_scale_factor,
            dro_beta=actor.policy_loss.dro_beta,
            rollout_is=rc.rollout_is, rollout_is_threshold=rc.rollout_is_threshold,
            rollout_is_batch_normalize=rc.rollout_is_batch_normalize, rollout_rs=rc.rollout_rs,
            rollout_rs_threshold=rc.rollout_rs_threshold, bypass_loss_type=rc.loss_type,
        )
        self.worker = PolicyWorker(model, self.settings, actor.optim, self.total_steps, ref_model=self.ref_model,
                                   dist=dist)
        use_critic = cfg.critic.enable if cfg.critic.enable is not None else "values" in self.adv_needs
        self.critic_tokenizer = self.tokenizer
        self.critic = self._build_critic() if use_critic else None
        self.reward_model = self._build_reward_model() if cfg.reward_model.enable else None
        # With one optimizer step per batch the policy that sampled is the policy being updated, so the old
        # log-probs are the detached current ones and need no forward pass of their own.
        updates = actor.ppo_epochs * (data.train_batch_size // actor.ppo_mini_batch_size)
        self.needs_old_logprobs = (updates > 1 or cfg.algorithm.use_kl_in_reward or corrects_rollout(rc)
                                   or "old_logprobs" in self.adv_needs or actor.calculate_sum_pi_squared
                                   ) and not rc.bypass_mode  # bypass: the rollout's log-probs are the old ones
        self.ckpt = CheckpointManager(
            self.out / "checkpoints", 1 if trainer.remove_previous_ckpt_in_save else trainer.max_actor_ckpt_to_keep
        )
        self.global_step = 0
        self._step_metrics: dict = {}
        self._reward_rows: dict[str, torch.Tensor] = {}  # per-row reward values of the last scored batch
        self._recovered_metrics: dict | None = None

    def _build_critic(self) -> CriticWorker:
        """The value model (critic.model, default the policy's folder) and its worker; null sizes follow the actor."""
        c, arr = self.cfg.critic, self.cfg.actor_rollout_ref
        if c.model.tokenizer_path:
            self.critic_tokenizer = load_tokenizer(c.model.tokenizer_path, c.model.trust_remote_code)
            if self.critic_tokenizer.get_vocab() != self.tokenizer.get_vocab():
                raise ValueError(f"critic.model.tokenizer_path={c.model.tokenizer_path!r}: its vocabulary differs "
                                 "from the policy's, whose token ids the critic reads; remove it")
        model = load_trainable_model(c.model.path or arr.model.path, c.model, self.dtype, self.device,
                                     key="critic.model", value_head=True)
        model = wrap(model, c.strategy, c.model.fsdp_config, self.dist, self.device)
        actor = arr.actor
        micro = c.ppo_micro_batch_size_per_gpu or c.ppo_micro_batch_size
        settings = CriticSettings(
            n=arr.rollout.n, ppo_mini_batch_size=c.ppo_mini_batch_size or actor.ppo_mini_batch_size,
            micro_rows=micro, forward_micro_rows=c.forward_micro_batch_size_per_gpu or c.forward_micro_batch_size
            or micro, ppo_epochs=c.ppo_epochs or actor.ppo_epochs,
            shuffle=actor.shuffle if c.shuffle is None else c.shuffle, seed=self.settings.seed,
            max_response_length=self.cfg.data.max_response_length,
            loss_agg_mode=c.loss_agg_mode or actor.loss_agg_mode, grad_clip=c.grad_clip,
            cliprange_value=c.cliprange_value, loss_scale_factor=c.loss_scale_factor or actor.loss_scale_factor,
        )
        return CriticWorker(model, settings, c.optim, self.total_steps, self.dist)

    def _build_reward_model(self) -> RewardModel:
        rm = self.cfg.reward_model
        model = load_reward_model(rm.model.path, self.dtype, self.device, external_lib=rm.model.external_lib,
                                  trust_remote_code=rm.model.trust_remote_code)
        input_tokenizer = load_tokenizer(rm.model.input_tokenizer) if rm.model.input_tokenizer else None
        rm_tokenizer = None
        if input_tokenizer is not None or (Path(rm.model.path) / "tokenizer_config.json").is_file():
            rm_tokenizer = load_tokenizer(rm.model.path, rm.model.trust_remote_code)
        if input_tokenizer is None and rm_tokenizer is not None and rm_tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise ValueError(f"reward_model.model.path={rm.model.path!r}: its vocabulary differs from the policy's; "
                             "set reward_model.model.input_tokenizer to the policy's tokenizer folder to re-tokenize")
        return RewardModel(model, rm_tokenizer, input_tokenizer, rm.micro_batch_size_per_gpu, rm.max_length)

    # ------------------------------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, float]:
        cfg, main = self.cfg.trainer, self.dist.is_main
        if main:
            self._write_config()
        self._maybe_resume()
        tracker = Tracker(self.out / "metrics.jsonl", self.total_steps, self.global_step, "console" in cfg.logger,
                          recovered=self._recovered_metrics, log_every=cfg.log_freq) if main else SilentTracker()
        where = f"{self.device}" if not self.dist.enabled else f"{self.dist.world_size} processes ({self.device.type})"
        tracker.write(f"rft: {self.total_steps} steps on {where} ({str(self.dtype).replace('torch.', '')}), "
                      f"{len(self.train_set)} train prompts, output {self.out}")
        last: dict[str, float] = {}
        if cfg.val_before_train and self.global_step == 0 and self.val_set is not None:
            # metrics.jsonl holds one line per training step; the step-0 validation has a file of its own
            last = self.validate(tracker)
            if main:
                write_text_atomic(self.out / "val_before_train.json", json.dumps(last, indent=1) + "\n")
            tracker.write("validation before training: " + ", ".join(f"{k}={v:.4f}" for k, v in last.items()))
        while self.global_step < self.total_steps:
            self.global_step += 1
            step, is_last = self.global_step, self.global_step == self.total_steps
            timer = Timer()
            with timer("step"):
                metrics = self.train_step(step, timer)
                if self.val_set is not None and cfg.test_freq > 0 and (is_last or step % cfg.test_freq == 0):
                    with timer("testing"):
                        metrics.update(self.validate(tracker))
                    plateau_step(self.worker.scheduler, metrics)
                    if self.critic is not None:
                        plateau_step(self.critic.scheduler, metrics)
                if cfg.save_freq > 0 and (is_last or step % cfg.save_freq == 0):
                    self._step_metrics = {**metrics, **timer.metrics()}  # its line, should the kill come first
                    with timer("save_checkpoint"):
                        self.ckpt.save(step, self._write_checkpoint, self.dist)
            metrics.update(timer.metrics())
            tracker.log(step, metrics)
            last = metrics
        self._export(self.out / "model", critic=False, final=True)
        tracker.write(f"rft: model written to {self.out / 'model'}")
        if self.critic is not None:
            self._export(self.out / "critic", critic=True, final=True)
            tracker.write(f"rft: critic written to {self.out / 'critic'}")
        tracker.close()
        return last

    def train_step(self, step: int, timer: Timer) -> dict[str, float]:
        batch, reward_metrics = self.generate_and_score(timer)
        if self.cfg.algorithm.filter_groups.enable:
            batch, reward_metrics = self.dynamic_sampling(batch, reward_metrics, timer)
        if self.needs_old_logprobs:
            with timer("old_log_prob"):
                batch.old_logprobs, batch.sum_pi_squared = compute_old_logprobs(
                    self.model, batch, self.settings.temperature,
                    _log_prob_micro_rows(self.cfg.actor_rollout_ref.rollout),
                    self.cfg.actor_rollout_ref.actor.calculate_sum_pi_squared)
        reward_metrics.update(apply_rollout_correction(batch, self.cfg.algorithm.rollout_correction, self.dist))
        if self.needs_ref:
            with timer("ref"):
                if self.needs_ref_logprobs:
                    batch.ref_logprobs = self.ref_logprobs(batch)
                if self.reward_kl_from_logits:
                    batch.ref_kl = compute_logit_kl(
                        self.model, self.ref_model, batch, self.settings.temperature,
                        _log_prob_micro_rows(self.cfg.actor_rollout_ref.ref), self.cfg.algorithm.kl_penalty)
        if self.critic is not None:
            with timer("values"):  # the old values, before either model moves
                batch.values = self.critic.compute_values(batch)
        with timer("adv"):
            adv_metrics = self.compute_advantages(batch)
        metrics = {**reward_metrics, **adv_metrics}
        if self.critic is not None:
            with timer("update_critic"):
                metrics.update(self.critic.update(batch, step))
        if step > self.cfg.trainer.critic_warmup:  # the first critic_warmup steps train only the critic
            with timer("update_actor"):
                metrics.update(self.worker.update(batch, step))
        metrics.update(self.batch_metrics(batch))
        metrics["training/global_step"] = step
        metrics["training/epoch"] = self.sampler.epoch
        n_resp, n_prompt = self.dist.sum(torch.stack([batch.response_mask.sum(), batch.prompt_mask.sum()])).tolist()
        n_all = n_resp + n_prompt
        metrics["perf/gen_tokens_per_s"] = n_resp / max(timer.times["gen"], 1e-9)
        if "update_actor" in timer.times:  # not during critic warmup
            upd_s = timer.times["update_actor"]
            metrics["perf/train_tokens_per_s"] = n_all * self.settings.ppo_epochs / max(upd_s, 1e-9)
        return metrics

    def generate_and_score(self, timer: Timer) -> tuple[Batch, dict[str, float]]:
        """One generation batch of `data.train_batch_size` prompts, scored (and its per-prompt baselines); with
        several processes this rank's share of them."""
        indices = self.sampler.next_batch()
        positions = None
        if self.dist.enabled:  # this rank's share of every mini-batch of the step's prompts
            positions = step_shard(len(indices), self.settings.ppo_mini_batch_size, self.dist.rank,
                                   self.dist.world_size)
            indices = [indices[i] for i in positions]
        with timer("gen"):
            batch = self.generate_batch(indices, positions)
        with timer("reward"):
            reward_metrics = self.score(batch)
        if "reward_baselines" in self.adv_needs:
            with timer("gen_max"):
                batch.reward_baselines = self.greedy_baselines(indices, batch)
            reward_metrics.update(self._stats("critic/reward_baselines", batch.reward_baselines))
        if "reward_components" in self.adv_needs:  # gdpo: the reward dimensions, on the batch (dynamic sampling)
            batch.reward_components = reward_components(self._reward_rows, self.cfg.algorithm.gdpo_reward_keys)
        return batch, reward_metrics

    def dynamic_sampling(self, batch: Batch, reward_metrics: dict[str, float],
                         timer: Timer) -> tuple[Batch, dict[str, float]]:
        """DAPO's dynamic sampling (verl's algorithm.filter_groups): drop the groups whose filter metric is the
        same for every response, generate further batches until data.train_batch_size groups are kept, then keep
        the first train_batch_size of them. More than max_num_gen_batches generation batches (> 0) is an error."""
        fg, want = self.cfg.algorithm.filter_groups, self.cfg.data.train_batch_size
        kept: list[Batch] = []
        kept_rows: list[dict[str, torch.Tensor]] = []  # the per-row reward values of the kept rows
        num_kept = num_generated = num_gen_batches = 0
        while True:
            num_gen_batches += 1
            keep = informative_groups(batch.group, self._filter_values(fg.metric))
            num_generated += len(torch.unique(batch.group))
            if keep.any():
                kept.append(batch.select(keep.nonzero().flatten().tolist()))
                kept_rows.append({k: v[keep] for k, v in self._reward_rows.items()})
                num_kept += len(torch.unique(kept[-1].group))
            if num_kept >= want:
                break
            if 0 < fg.max_num_gen_batches <= num_gen_batches:
                raise RuntimeError(
                    f"dynamic sampling (algorithm.filter_groups) kept {num_kept} of the {want} groups a step needs "
                    f"after {num_gen_batches} generation batches (algorithm.filter_groups.max_num_gen_batches="
                    f"{fg.max_num_gen_batches}): the responses to most prompts agree in "
                    f"{fg.metric!r}. Use easier or harder data, raise max_num_gen_batches, or set it to 0 (no limit)"
                )
            batch, _ = self.generate_and_score(timer)
        batch = concat_batches(kept, self.tokenizer.pad_token_id)
        first = batch.group <= torch.unique(batch.group)[want - 1]  # the first `want` groups (labels ascend)
        batch = batch.select(first.nonzero().flatten().tolist())
        # the reward metrics of the batch that trains, as for an unfiltered step
        metrics = {k: v for k, v in reward_metrics.items() if not k.startswith(("critic/", "reward_extra/"))}
        metrics.update(_stats("critic/score", batch.scores))
        synthetic = ("score", "seq_reward", "seq_final_reward")
        for name in kept_rows[0]:
            if name not in synthetic:
                metrics[f"reward_extra/{name}/mean"] = float(torch.cat([r[name] for r in kept_rows])[first].mean())
        if batch.reward_baselines is not None:
            metrics.update(_stats("critic/reward_baselines", batch.reward_baselines))
        metrics.update({"train/num_gen_batches": float(num_gen_batches), "train/num_kept_groups": float(num_kept),
                        "train/num_generated_groups": float(num_generated)})
        return batch, metrics

    def _filter_values(self, metric: str) -> torch.Tensor:
        """(B,) per-response values of the dynamic-sampling metric for the batch `score` saw last."""
        rows = self._reward_rows
        if metric not in rows:
            raise ValueError(
                f"algorithm.filter_groups.metric={metric!r}: the reward function returned no such value; "
                f"available: {sorted(rows)}"
            )
        return rows[metric]

    # --------------------------------------------------------------------------------------------- phases
    def generate_batch(self, indices: list[int], positions: list[int] | None = None) -> Batch:
        """n responses to each prompt of `indices`; `positions`: the prompts' places in the step's batch of all
        ranks (their group ids), default 0, 1, ..."""
        ro = self.cfg.actor_rollout_ref.rollout
        params = self.sampling_params(ro, n=ro.n, do_sample=ro.do_sample)
        if not self.dist.enabled:
            return rollout_batch(self.rollout, self.tokenizer, self.train_set, indices, params, self.generator)
        # Each rank samples from its own stream, drawn from the shared generator (the same on every rank, so a
        # checkpoint holds one state); prompts get globally unique group ids; every rank pads its responses to
        # the widest of all, so the gathered (B, R) tensors are the one-process batch's.
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        generator = torch.Generator().manual_seed((seed + 1_000_003 * self.dist.rank) % 2**63)
        with gathered_for_generation(self.model):
            batch = rollout_batch(self.rollout, self.tokenizer, self.train_set, indices, params, generator)
        if positions is not None:
            batch.group = torch.as_tensor(positions, dtype=torch.long)[batch.group]
        return pad_responses(batch, self.dist.max_int(batch.response_ids.shape[1]), self.tokenizer.pad_token_id)

    def sampling_params(self, source, *, n: int, do_sample: bool) -> SamplingParams:
        """`n` responses of up to data.max_response_length tokens with the temperature / top-k / top-p of `source`
        (the rollout config or its val_kwargs); the rollout's ignore_eos."""
        return SamplingParams(n=n, temperature=source.temperature, top_k=source.top_k, top_p=source.top_p,
                              do_sample=do_sample, max_tokens=self.cfg.data.max_response_length,
                              ignore_eos=self.cfg.actor_rollout_ref.rollout.ignore_eos)

    def score_rows(self, batch: Batch) -> tuple[list[float], dict[str, list[float]]]:
        """(B scores, per-row extra values): the reward function's score, or with a reward model
        reward_weight x its score + rule_weight x the reward function's (which runs only when rule_weight != 0;
        extras rm_score and rule_score)."""
        if self.reward_model is None:
            return score_responses(self.reward_fn, batch.data_source, batch.response_text, batch.ground_truth,
                                   batch.extra_info)
        rm = self.cfg.reward_model
        model_scores = self.reward_model.score(batch).double()
        total, extra = rm.reward_weight * model_scores, {}
        if rm.rule_weight != 0:
            rule, extra = score_responses(self.reward_fn, batch.data_source, batch.response_text,
                                          batch.ground_truth, batch.extra_info)
            total = total + rm.rule_weight * torch.tensor(rule, dtype=torch.float64)
            extra = {**extra, "rule_score": rule}
        return total.tolist(), {**extra, "rm_score": model_scores.tolist()}

    def score(self, batch: Batch) -> dict[str, float]:
        """Scores (B,) from `score_rows`; the token reward (B, R) is the score on the last valid token."""
        scores, extra = self.score_rows(batch)
        batch.scores = raw = torch.tensor(scores, dtype=torch.float32)
        ob = self.cfg.reward_model.overlong_buffer
        if ob.enable:  # DAPO's soft overlong punishment, added to the score
            penalty = overlong_penalty(batch.response_mask.sum(-1), self.cfg.data.max_response_length, ob.len,
                                       ob.penalty_factor)
            batch.scores = raw + penalty
            if ob.log:
                extra = {**extra, "overlong_reward": penalty.tolist(), "overlong": (penalty < 0).float().tolist()}
        # per-row values dynamic sampling can filter on (verl's names: score before, seq_reward after the penalty)
        self._reward_rows = {**{k: torch.tensor(v, dtype=torch.float32) for k, v in extra.items()},
                             "score": raw, "seq_reward": batch.scores, "seq_final_reward": batch.scores}
        last = (batch.response_mask.sum(-1) - 1).clamp(min=0)
        batch.token_rewards = torch.zeros(batch.response_mask.shape, dtype=torch.float32)
        batch.token_rewards[torch.arange(len(batch)), last] = batch.scores
        metrics = self._stats("critic/score", batch.scores)
        metrics.update({f"reward_extra/{k}/mean": float(np.mean(self.dist.gather_rows(
            torch.tensor(v, dtype=torch.float64)).tolist())) for k, v in extra.items()})
        return metrics

    def greedy_baselines(self, indices: list[int], batch: Batch) -> torch.Tensor:
        """(B,) ReMax's baseline: the score of one greedy response (do_sample false, same max tokens) to each
        prompt in `indices`, scored as the samples are (`score_rows`), given to every row of that prompt's group."""
        ro = self.cfg.actor_rollout_ref.rollout
        params = self.sampling_params(ro, n=1, do_sample=False)
        with gathered_for_generation(self.model):
            greedy = rollout_batch(self.rollout, self.tokenizer, self.train_set, indices, params, generator=None)
        scores, _ = self.score_rows(greedy)
        position = torch.arange(len(indices)).repeat_interleave(ro.n)  # each row's prompt, as in rollout_batch
        return torch.tensor(scores, dtype=torch.float32)[position]

    def logprobs(self, batch: Batch, model, micro_cfg) -> torch.Tensor:
        return compute_logprobs(model, batch, self.settings.temperature, _log_prob_micro_rows(micro_cfg))

    def ref_logprobs(self, batch: Batch) -> torch.Tensor:
        with reference_of(self.model, self.ref_model) as ref:
            return self.logprobs(batch, ref, self.cfg.actor_rollout_ref.ref)

    def compute_advantages(self, batch: Batch) -> dict[str, float]:
        """Advantages and returns of `batch`. With several processes the estimator runs on every rank's rows
        (gathered and put in the one-process order: the one-process batch, so batch-wide statistics such as
        whitening, gpg's alpha or a batch std are global) and each rank keeps its own rows."""
        algo, metrics = self.cfg.algorithm, {}
        mask = batch.response_mask.float()
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
        token_rewards, response_mask, values = g(batch.token_rewards), g(batch.response_mask), opt(batch.values)
        out = compute_advantages(algo.adv_estimator, AdvantageInputs(
            token_rewards=token_rewards, response_mask=response_mask, group=g(batch.group),
            values=values, gamma=algo.gamma, lam=algo.lam,
            norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo, scale_rewards=algo.scale_rewards,
            reward_baselines=opt(batch.reward_baselines), opmd_baseline=algo.opmd_baseline, tau=algo.tau,
            baseline_shift=algo.baseline_shift, reward_components=opt(batch.reward_components),
            gdpo_reward_weights=algo.gdpo_reward_weights, old_logprobs=opt(batch.old_logprobs),
            sum_pi_squared=opt(batch.sum_pi_squared), rollout_is_weights=opt(batch.rollout_is_weights),
        ))
        batch.advantages, batch.returns = out.advantages, out.returns
        if order is not None:  # this rank's rows, back from the one-process order
            lo = sum(self.dist.gather_sizes(len(batch))[: self.dist.rank])
            mine = order.argsort()[lo:lo + len(batch)]
            batch.advantages, batch.returns = out.advantages[mine], out.returns[mine]
        mask = response_mask.float()
        valid = mask.bool()
        metrics.update(_stats("critic/rewards", (token_rewards * mask).sum(-1)))
        metrics.update(_stats("critic/advantages", out.advantages[valid]))
        metrics.update(_stats("critic/returns", out.returns[valid]))
        if values is not None:
            metrics.update(_stats("critic/values", values[valid]))
            metrics["critic/vf_explained_var"] = explained_variance(values, out.returns, valid)
        return metrics

    def batch_metrics(self, batch: Batch) -> dict[str, float]:
        lengths = self.dist.gather_rows(batch.response_mask.sum(-1))
        metrics = _stats("response_length", lengths)
        metrics["response_length/clip_ratio"] = float((lengths >= self.cfg.data.max_response_length).float().mean())
        metrics.update(self._stats("prompt_length", batch.prompt_mask.sum(-1)))
        return metrics

    def _stats(self, name: str, x: torch.Tensor) -> dict[str, float]:
        """`_stats` over every rank's values of `x`."""
        return _stats(name, self.dist.gather_rows(x.flatten()))

    def validate(self, tracker: Tracker | None = None) -> dict[str, float]:
        """Validation metrics `val-core/<data_source>/reward/mean@<n>` on the whole validation set."""
        vk, data = self.cfg.actor_rollout_ref.rollout.val_kwargs, self.cfg.data
        params = self.sampling_params(vk, n=vk.n, do_sample=vk.do_sample)
        scorer = (lambda b: self.score_rows(b)[0]) if self.reward_model is not None else None
        seed = self.cfg.trainer.seed + 7919
        if not self.dist.enabled:
            metrics, samples = evaluate(self.rollout, self.tokenizer, self.val_set, self.reward_fn, params,
                                        data.val_batch_size, seed=seed, scorer=scorer)
        else:  # each rank its share of the prompts, padded to the same number of forward passes
            indices, keep = padded_shard(len(self.val_set), self.dist.rank, self.dist.world_size)
            with gathered_for_generation(self.model):
                metrics, samples = evaluate(self.rollout, self.tokenizer, self.val_set, self.reward_fn, params,
                                            data.val_batch_size, seed=seed + self.dist.rank, scorer=scorer,
                                            indices=indices, keep=keep, gather=self.dist.gather_objects)
        n_show = self.cfg.trainer.log_val_generations
        if n_show > 0 and self.dist.is_main:
            with (self.out / "val_generations.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": self.global_step, "samples": samples[:n_show]}) + "\n")
            if tracker is not None:
                for sample in samples[:n_show]:
                    tracker.write(f"[val step {self.global_step}] {sample}")
        return metrics

    # -------------------------------------------------------------------------------------- checkpoints
    def _write_checkpoint(self, folder: Path) -> None:
        save_training_state(
            folder, contents=set(self.cfg.actor_rollout_ref.actor.checkpoint.save_contents), model=self.model,
            optimizer=self.worker.optimizer, scheduler=self.worker.scheduler,
            generators={"rollout": self.generator}, tokenizer=self.tokenizer,
            state={"global_step": self.global_step, "sampler": self.sampler.state_dict(),
                   "kl_coef": self.kl_ctrl.value, "metrics": self._step_metrics},
            dist=self.dist, export=(lambda out: self._export(out, critic=False)) if self.dist.enabled else None,
        )
        if self.critic is not None:
            save_module_state(folder / "critic", contents=set(self.cfg.critic.checkpoint.save_contents),
                              model=self.critic.model, optimizer=self.critic.optimizer,
                              scheduler=self.critic.scheduler, tokenizer=self.critic_tokenizer, dist=self.dist,
                              export=(lambda out: self._export(out, critic=True)) if self.dist.enabled else None)

    def _maybe_resume(self) -> None:
        t = self.cfg.trainer
        folder = resume_folder(t.resume_mode, t.resume_from_path, self.ckpt)
        if folder is None:
            return
        state = load_training_state(
            folder, contents=set(self.cfg.actor_rollout_ref.actor.checkpoint.load_contents), model=self.model,
            optimizer=self.worker.optimizer, scheduler=self.worker.scheduler, generators={"rollout": self.generator},
            dist=self.dist,
        )
        if self.critic is not None:
            load_module_state(folder / "critic", contents=set(self.cfg.critic.checkpoint.load_contents),
                              model=self.critic.model, optimizer=self.critic.optimizer,
                              scheduler=self.critic.scheduler, dist=self.dist)
        self.sampler.load_state_dict(state["sampler"])
        self.kl_ctrl.value = state["kl_coef"]
        self._recovered_metrics = state.get("metrics")
        self.global_step = step_of(folder)
        if self.dist.is_main:
            print(f"rft: resumed from {folder} at step {self.global_step}", flush=True)
        if t.del_local_ckpt_after_load:
            self.dist.barrier()  # every rank has read it
            if self.dist.is_main:
                shutil.rmtree(folder)

    def _export(self, out: Path, critic: bool, final: bool = False) -> None:
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
            arr, c = self.cfg.actor_rollout_ref, self.cfg.critic
            if critic:
                copy = load_trainable_model(c.model.path or arr.model.path, c.model, self.dtype,
                                            torch.device("cpu"), key="critic.model", value_head=True)
            else:
                copy = load_trainable_model(arr.model.path, arr.model, self.dtype, torch.device("cpu"),
                                            key="actor_rollout_ref.model")
            copy.load_state_dict(weights)
            export_hf(copy, tokenizer, out, merge_in_place=True)
        self.dist.barrier()

    def _write_config(self) -> None:
        write_text_atomic(self.out / "config.yaml", to_yaml(self.cfg))
