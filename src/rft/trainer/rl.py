"""The on-policy RL loop: generate -> score -> (old, ref) log-probs -> advantages -> update -> validate -> save.

One step reads top to bottom in `train_step`; each phase is one named call inside a timer (`timing_s/<phase>`).
Advantages are computed here, where every group is visible; the worker only sees a Batch and loss settings.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from rft.algorithms import AdvantageInputs, compute_advantages, kl_penalty, make_kl_controller, masked_mean
from rft.batch import Batch
from rft.config import RFTConfig, to_yaml
from rft.data.dataset import PromptDataset, PromptSampler
from rft.fsutil import write_text_atomic
from rft.models.load import (
    compute_dtype,
    export_hf,
    frozen_copy,
    is_peft,
    load_tokenizer,
    load_trainable_model,
    resolve_device,
)
from rft.monitor import Timer, Tracker
from rft.rewards import default_compute_score, load_custom_reward, score_responses
from rft.rollout import HFRollout, SamplingParams
from rft.runtime import configure_cpu_runtime
from rft.trainer.checkpoint import (
    CheckpointManager,
    load_training_state,
    resume_folder,
    save_training_state,
    step_of,
)
from rft.trainer.evaluate import eos_token_ids, evaluate, rollout_batch
from rft.workers.policy import PolicyWorker, UpdateSettings, compute_logprobs


def _stats(name: str, x: torch.Tensor) -> dict[str, float]:
    x = x.float()
    return {f"{name}/mean": float(x.mean()), f"{name}/max": float(x.max()), f"{name}/min": float(x.min())}


class RLTrainer:
    def __init__(self, cfg: RFTConfig):
        configure_cpu_runtime()
        self.cfg = cfg
        arr, data, trainer = cfg.actor_rollout_ref, cfg.data, cfg.trainer
        self.out = Path(trainer.default_local_dir)
        self.device = resolve_device(trainer.device)
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
        self.reward_fn = load_custom_reward(crf.path, crf.name) if crf.path else default_compute_score

        self.model = model = load_trainable_model(arr.model.path, arr.model, self.dtype, self.device,
                                                  key="actor_rollout_ref.model")
        self.kl_ctrl = make_kl_controller(cfg.algorithm.kl_ctrl.type, cfg.algorithm.kl_ctrl.kl_coef,
                                          cfg.algorithm.kl_ctrl.target_kl, cfg.algorithm.kl_ctrl.horizon)
        self.needs_ref = arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
        # LoRA: the reference is the base model with the adapter disabled; full fine-tuning keeps a frozen copy.
        self.ref_model = frozen_copy(model) if self.needs_ref and not is_peft(model) else None

        self.rollout = HFRollout(model, eos_token_ids(model, self.tokenizer), self.tokenizer.pad_token_id,
                                 arr.rollout.micro_batch_size)
        self.generator = torch.Generator().manual_seed(trainer.seed)

        actor, ro = arr.actor, arr.rollout
        self.settings = UpdateSettings(
            n=ro.n, ppo_mini_batch_size=actor.ppo_mini_batch_size,
            micro_rows=actor.ppo_micro_batch_size_per_gpu or actor.ppo_micro_batch_size,
            ppo_epochs=actor.ppo_epochs, shuffle=actor.shuffle,
            seed=actor.data_loader_seed if actor.data_loader_seed is not None else trainer.seed,
            temperature=ro.temperature, max_response_length=data.max_response_length,
            loss_mode=actor.policy_loss.loss_mode, loss_agg_mode=actor.loss_agg_mode,
            clip_ratio_low=actor.clip_ratio_low if actor.clip_ratio_low is not None else actor.clip_ratio,
            clip_ratio_high=actor.clip_ratio_high if actor.clip_ratio_high is not None else actor.clip_ratio,
            clip_ratio_c=actor.clip_ratio_c, grad_clip=actor.grad_clip, entropy_coeff=actor.entropy_coeff,
            use_kl_loss=actor.use_kl_loss, kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type,
        )
        self.worker = PolicyWorker(model, self.settings, actor.optim, self.total_steps)
        # With one optimizer step per batch the policy that sampled is the policy being updated, so the old
        # log-probs are the detached current ones and need no forward pass of their own.
        updates = actor.ppo_epochs * (data.train_batch_size // actor.ppo_mini_batch_size)
        self.needs_old_logprobs = updates > 1 or cfg.algorithm.use_kl_in_reward
        self.ckpt = CheckpointManager(
            self.out / "checkpoints", 1 if trainer.remove_previous_ckpt_in_save else trainer.max_actor_ckpt_to_keep
        )
        self.global_step = 0
        self._step_metrics: dict = {}
        self._recovered_metrics: dict | None = None

    # ------------------------------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, float]:
        cfg = self.cfg.trainer
        self._write_config()
        self._maybe_resume()
        tracker = Tracker(self.out / "metrics.jsonl", self.total_steps, self.global_step, "console" in cfg.logger,
                          recovered=self._recovered_metrics)
        tracker.write(f"rft: {self.total_steps} steps on {self.device} ({str(self.dtype).replace('torch.', '')}), "
                      f"{len(self.train_set)} train prompts, output {self.out}")
        last: dict[str, float] = {}
        if cfg.val_before_train and self.global_step == 0 and self.val_set is not None:
            # metrics.jsonl holds one line per training step; the step-0 validation has a file of its own
            last = self.validate(tracker)
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
                if cfg.save_freq > 0 and (is_last or step % cfg.save_freq == 0):
                    self._step_metrics = {**metrics, **timer.metrics()}  # its line, should the kill come first
                    with timer("save_checkpoint"):
                        self.ckpt.save(step, self._write_checkpoint)
            metrics.update(timer.metrics())
            tracker.log(step, metrics)
            last = metrics
        export_hf(self.model, self.tokenizer, self.out / "model", merge_in_place=True)
        tracker.write(f"rft: model written to {self.out / 'model'}")
        tracker.close()
        return last

    def train_step(self, step: int, timer: Timer) -> dict[str, float]:
        with timer("gen"):
            batch = self.generate_batch(self.sampler.next_batch())
        with timer("reward"):
            reward_metrics = self.score(batch)
        if self.needs_old_logprobs:
            with timer("old_log_prob"):
                batch.old_logprobs = self.logprobs(batch, self.model, self.cfg.actor_rollout_ref.rollout)
        if self.needs_ref:
            with timer("ref"):
                batch.ref_logprobs = self.ref_logprobs(batch)
        with timer("adv"):
            adv_metrics = self.compute_advantages(batch)
        with timer("update_actor"):
            actor_metrics = self.worker.update(batch, step)
        metrics = {**reward_metrics, **adv_metrics, **actor_metrics, **self.batch_metrics(batch)}
        metrics["training/global_step"] = step
        metrics["training/epoch"] = self.sampler.epoch
        gen_s, upd_s = timer.times["gen"], timer.times["update_actor"]
        n_resp = float(batch.response_mask.sum())
        n_all = n_resp + float(batch.prompt_mask.sum())
        metrics["perf/gen_tokens_per_s"] = n_resp / max(gen_s, 1e-9)
        metrics["perf/train_tokens_per_s"] = n_all * self.settings.ppo_epochs / max(upd_s, 1e-9)
        return metrics

    # --------------------------------------------------------------------------------------------- phases
    def generate_batch(self, indices: list[int]) -> Batch:
        ro = self.cfg.actor_rollout_ref.rollout
        params = SamplingParams(n=ro.n, temperature=ro.temperature, top_k=ro.top_k, top_p=ro.top_p,
                                do_sample=ro.do_sample, max_tokens=self.cfg.data.max_response_length,
                                ignore_eos=ro.ignore_eos)
        return rollout_batch(self.rollout, self.tokenizer, self.train_set, indices, params, self.generator)

    def score(self, batch: Batch) -> dict[str, float]:
        """Scores (B,) from the reward function; the token reward (B, R) is the score on the last valid token."""
        scores, extra = score_responses(self.reward_fn, batch.data_source, batch.response_text,
                                        batch.ground_truth, batch.extra_info)
        batch.scores = torch.tensor(scores, dtype=torch.float32)
        last = (batch.response_mask.sum(-1) - 1).clamp(min=0)
        batch.token_rewards = torch.zeros(batch.response_mask.shape, dtype=torch.float32)
        batch.token_rewards[torch.arange(len(batch)), last] = batch.scores
        metrics = _stats("critic/score", batch.scores)
        metrics.update({f"reward_extra/{k}/mean": float(np.mean(v)) for k, v in extra.items()})
        return metrics

    def logprobs(self, batch: Batch, model, micro_cfg) -> torch.Tensor:
        micro = micro_cfg.log_prob_micro_batch_size_per_gpu or micro_cfg.log_prob_micro_batch_size
        return compute_logprobs(model, batch, self.settings.temperature, micro)

    def ref_logprobs(self, batch: Batch) -> torch.Tensor:
        ref_cfg = self.cfg.actor_rollout_ref.ref
        if self.ref_model is not None:
            return self.logprobs(batch, self.ref_model, ref_cfg)
        with self.model.disable_adapter():
            return self.logprobs(batch, self.model, ref_cfg)

    def compute_advantages(self, batch: Batch) -> dict[str, float]:
        algo, metrics = self.cfg.algorithm, {}
        mask = batch.response_mask.float()
        if algo.use_kl_in_reward:
            kl = kl_penalty(batch.old_logprobs, batch.ref_logprobs, algo.kl_penalty) * mask  # (B, R)
            beta = self.kl_ctrl.value
            batch.token_rewards = batch.token_rewards - beta * kl
            current_kl = float(masked_mean(kl, mask, dim=-1).mean())
            self.kl_ctrl.update(current_kl, n_steps=len(batch))
            metrics.update({"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta})
        out = compute_advantages(algo.adv_estimator, AdvantageInputs(
            token_rewards=batch.token_rewards, response_mask=batch.response_mask, group=batch.group,
            values=batch.values, gamma=algo.gamma, lam=algo.lam,
            norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
        ))
        batch.advantages, batch.returns = out.advantages, out.returns
        valid = mask.bool()
        metrics.update(_stats("critic/rewards", (batch.token_rewards * mask).sum(-1)))
        metrics.update(_stats("critic/advantages", batch.advantages[valid]))
        metrics.update(_stats("critic/returns", batch.returns[valid]))
        return metrics

    def batch_metrics(self, batch: Batch) -> dict[str, float]:
        lengths = batch.response_mask.sum(-1)
        metrics = _stats("response_length", lengths)
        metrics["response_length/clip_ratio"] = float((lengths >= self.cfg.data.max_response_length).float().mean())
        metrics.update(_stats("prompt_length", batch.prompt_mask.sum(-1)))
        return metrics

    def validate(self, tracker: Tracker | None = None) -> dict[str, float]:
        """Validation metrics `val-core/<data_source>/reward/mean@<n>` on the whole validation set."""
        vk, data = self.cfg.actor_rollout_ref.rollout.val_kwargs, self.cfg.data
        params = SamplingParams(n=vk.n, temperature=vk.temperature, top_k=vk.top_k, top_p=vk.top_p,
                                do_sample=vk.do_sample, max_tokens=data.max_response_length,
                                ignore_eos=self.cfg.actor_rollout_ref.rollout.ignore_eos)
        metrics, samples = evaluate(self.rollout, self.tokenizer, self.val_set, self.reward_fn, params,
                                    data.val_batch_size, seed=self.cfg.trainer.seed + 7919)
        n_show = self.cfg.trainer.log_val_generations
        if n_show > 0:
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
        )

    def _maybe_resume(self) -> None:
        t = self.cfg.trainer
        folder = resume_folder(t.resume_mode, t.resume_from_path, self.ckpt)
        if folder is None:
            return
        state = load_training_state(
            folder, contents=set(self.cfg.actor_rollout_ref.actor.checkpoint.load_contents), model=self.model,
            optimizer=self.worker.optimizer, scheduler=self.worker.scheduler, generators={"rollout": self.generator},
        )
        self.sampler.load_state_dict(state["sampler"])
        self.kl_ctrl.value = state["kl_coef"]
        self._recovered_metrics = state.get("metrics")
        self.global_step = step_of(folder)
        print(f"rft: resumed from {folder} at step {self.global_step}", flush=True)
        if t.del_local_ckpt_after_load:
            shutil.rmtree(folder)

    def _write_config(self) -> None:
        write_text_atomic(self.out / "config.yaml", to_yaml(self.cfg))
