"""The checks of the trainer's own keys: processes and device, resume, the modes and what they combine with, mix's
expert rows, checkpoint copies, and the SFT / DPO trainers' sections; mix's keys have no effect when it is off."""

from __future__ import annotations

import dataclasses
from typing import Any

from rft.config.checks import (
    CHECKS,
    UNUSED,
    CheckContext,
    check_files_exist,
    check_int,
    data_files,
    positive,
    processes,
)
from rft.config.errors import ConfigError
from rft.data.checks import check_inputs, uneven_draws
from rft.models.checks import check_lora_rank, check_reward_backbone, check_tokenizer_folder
from rft.monitor.checks import check_loggers
from rft.sync.schedule import is_synchronous, workflow_apart
from rft.workers.checks import builds_critic


@UNUSED.register("trainer.mix")
def unused_mix_keys(cfg: Any) -> dict[str, str]:
    mix = cfg.algorithm.mix
    if mix.enable:
        return {}
    why = "algorithm.mix.enable=false"
    return {"data.expert.": why, **{f"algorithm.mix.{f.name}": why for f in dataclasses.fields(type(mix))
                                    if f.name != "enable"}}


@UNUSED.register("trainer.checkpoints")
def unused_checkpoint_keys(cfg: Any) -> dict[str, str]:
    """What only a saved checkpoint reads, when trainer.save_freq <= 0 saves none (verl's default -1, which its
    ppo_trainer.yaml keeps beside a default_hdfs_dir): the mirror folder and how many checkpoints are kept."""
    t = cfg.trainer
    if t.save_freq > 0:
        return {}
    why = f"trainer.save_freq={t.save_freq} (no checkpoints are written)"
    return {f"trainer.{key}": why for key in ("default_hdfs_dir", "remove_previous_ckpt_in_save",
                                              "max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep")}


def check_runtime(prefix: str, t: Any, several: str | None = None, lone_resume_path: bool = False) -> None:
    """Process counts, an available device, known loggers, a consistent resume setting (trainer sections).
    `several`: why this trainer runs one process only (None: several are allowed). `lone_resume_path`: a
    resume_from_path without resume_mode=resume_path is verl's no-op (its PPO trainer reads it only then; the
    `trainer.resume` rule notes it), else refused (verl's SFT trainer resumes from it in auto mode, rft's not)."""
    positive(f"{prefix}.nnodes", t.nnodes)
    positive(f"{prefix}.n_gpus_per_node", t.n_gpus_per_node)
    if processes(t) > 1 and several is not None:
        raise ConfigError(
            f"{prefix}.nnodes * {prefix}.n_gpus_per_node = {t.nnodes} x {t.n_gpus_per_node} = {processes(t)}: "
            f"{several}; set both to 1"
        )
    import torch

    if t.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{prefix}.device='cuda' but this machine has no CUDA device; use 'auto' or 'cpu'")
    if t.device != "cpu" and torch.cuda.is_available() and t.n_gpus_per_node > torch.cuda.device_count():
        raise ConfigError(
            f"{prefix}.n_gpus_per_node={t.n_gpus_per_node} but this node has {torch.cuda.device_count()} CUDA "
            f"device(s); one process per device: set it to at most {torch.cuda.device_count()} (or "
            f"{prefix}.device=cpu for CPU processes)"
        )
    check_loggers(prefix, t.logger, t.monitor_args)
    if t.resume_mode == "resume_path" and not t.resume_from_path:
        raise ConfigError(f"{prefix}.resume_mode=resume_path needs {prefix}.resume_from_path (a global_step_N folder)")
    if t.resume_from_path and t.resume_mode != "resume_path" and not lone_resume_path:
        raise ConfigError(f"{prefix}.resume_from_path is set: also set {prefix}.resume_mode=resume_path")


def check_hdfs_dir(key: str, value: str | None) -> None:
    if value and "://" in value:
        raise ConfigError(
            f"{key}={value!r}: rft copies checkpoints to a local or mounted folder only (it has no Hadoop client); "
            "mount the file system and give its path, or set it to null"
        )


@CHECKS.register("trainer.runtime")
def check_rl_runtime(ctx: CheckContext) -> None:
    check_runtime("trainer", ctx.cfg.trainer, lone_resume_path=True)


@UNUSED.register("trainer.resume")
def unused_resume_path(cfg: Any) -> dict[str, str]:
    """trainer.resume_from_path without resume_mode=resume_path: verl's PPO trainer reads it only then (auto resumes
    from the latest checkpoint in default_local_dir, disable starts again), and so does rft train."""
    t = cfg.trainer
    if t.resume_mode == "resume_path":
        return {}
    return {"trainer.resume_from_path": f"trainer.resume_mode={t.resume_mode} (the path is read only with "
                                        "resume_mode=resume_path, as in verl's PPO trainer)"}


@CHECKS.register("trainer.ray")
def check_ray(ctx: CheckContext) -> None:
    """ray_init: an address or a Ray instance of rft's own (not both), a positive timeout, Ray installed
    (docs/cluster.md)."""
    import importlib.util

    r = ctx.cfg.ray_init
    positive("ray_init.num_cpus", r.num_cpus, allow_none=True)
    if r.address is not None and r.num_cpus is not None:
        raise ConfigError(f"ray_init.num_cpus={r.num_cpus} starts a Ray instance of rft's own, but ray_init.address="
                          f"{r.address!r} names a running cluster, whose CPUs are its `ray start --num-cpus`: "
                          "set one of them")
    if r.address is not None and not r.address.strip():
        raise ConfigError("ray_init.address is empty: give `auto` or HOST:PORT, or null for no Ray")
    if not r.connect_timeout > 0:
        raise ConfigError(f"ray_init.connect_timeout must be > 0 seconds, got {r.connect_timeout!r}")
    if (r.address is not None or r.num_cpus is not None) and importlib.util.find_spec("ray") is None:
        raise ConfigError("ray_init asks for Ray (ray_init.address, Trinity-RFT's cluster.ray_address, or "
                          "ray_init.num_cpus), which is not installed: pip install 'rft[ray]'")


@CHECKS.register("trainer.modes")
def check_modes(ctx: CheckContext) -> None:
    """trainer.mode and synchronizer.sync_method: a combination rft runs, and a buffer a trainer can read."""
    cfg, world_size = ctx.cfg, ctx.world_size
    t, s, b = cfg.trainer, cfg.synchronizer, cfg.experience_buffer
    method = s.sync_method
    if t.val_only:  # verl's: the validation before training, then exit
        if not is_synchronous(cfg):
            raise ConfigError(
                f"trainer.val_only=true runs in the one-loop run (trainer.mode both, synchronizer.sync_interval 1, "
                f"sync_offset 0), not with trainer.mode={t.mode}, sync_interval={s.sync_interval}, "
                f"sync_offset={s.sync_offset}: set those, or use trainer.mode=bench to evaluate a run's models")
        if not t.val_before_train:
            raise ConfigError("trainer.val_only=true stops after the validation before training, which "
                              "trainer.val_before_train=false turns off: set val_before_train=true (verl's val_only "
                              "has no effect without it)")
        if not cfg.data.val_files:
            raise ConfigError("trainer.val_only=true validates on data.val_files: set it")
    if is_synchronous(cfg):
        # any sync_method: with sync_interval 1 and sync_offset 0 explorer and trainer take strict turns, which
        # rft runs in one process sharing the model (the same weights every step, nothing copied)
        if b.storage_type == "file":
            raise ConfigError("experience_buffer.storage_type=file is written for people to read, not read by a "
                              "trainer: use it with trainer.mode=explore (queue or sql to train)")
        return
    check_plateau_apart(cfg)
    if world_size > 1 and t.mode not in ("train", "both"):
        raise ConfigError(
            f"trainer.mode={t.mode} runs in one process: set trainer.nnodes and trainer.n_gpus_per_node to 1 "
            f"(several processes are for the trainer: trainer.mode train or both)"
        )
    if t.mode == "both" and method == "memory":
        raise ConfigError(
            "synchronizer.sync_method=memory needs explorer and trainer in one process, but "
            + (f"workflow.type={cfg.workflow.type} beside several trainer processes runs its explorer apart"
               if workflow_apart(cfg) else f"sync_interval={s.sync_interval} / sync_offset={s.sync_offset} run them "
               "as two") + ": use gloo (a process-group broadcast) or checkpoint (files), or null"
        )
    if t.mode in ("explore", "train", "bench") and method not in (None, "checkpoint"):
        raise ConfigError(
            f"synchronizer.sync_method={method!r} with trainer.mode={t.mode}: explore and train are separate commands "
            "that meet through files, so only checkpoint (the explorer loads what the trainer writes under "
            "<default_local_dir>/sync/) works; set it to checkpoint or null"
        )
    if b.storage_type == "file" and t.mode != "explore":
        raise ConfigError(
            f"experience_buffer.storage_type=file is written for people to read, not read by a trainer: with "
            f"trainer.mode={t.mode} use queue or sql"
        )
    if t.mode == "bench" and not cfg.data.val_files:
        raise ConfigError("trainer.mode=bench evaluates on data.val_files: set it")
    if t.mode == "train" and not cfg.data.train_files and not t.total_training_steps:
        raise ConfigError("trainer.mode=train without data.train_files needs trainer.total_training_steps")


def check_plateau_apart(cfg) -> None:
    """reduce_lr_on_plateau follows the validation reward, which a trainer apart from its explorer never sees (the
    explorer validates): its rate would never fall."""
    from rft.workers.optim import PLATEAU

    t, s = cfg.trainer, cfg.synchronizer
    if t.mode not in ("both", "train"):
        return
    for section, optim in (("actor_rollout_ref.actor", cfg.actor_rollout_ref.actor.optim), ("critic", cfg.critic.optim)):
        if optim.lr_scheduler_type == PLATEAU:
            raise ConfigError(
                f"{section}.optim.lr_scheduler_type={PLATEAU} steps on the validation reward, which with "
                f"trainer.mode={t.mode}, synchronizer.sync_interval={s.sync_interval}, sync_offset={s.sync_offset} "
                "the explorer computes apart from the trainer, which never sees it (the rate would never fall): use "
                "another schedule, or the one-process loop (trainer.mode both, sync_interval 1, sync_offset 0)"
            )


@CHECKS.register("trainer.mix")
def check_mix(ctx: CheckContext) -> None:
    """algorithm.mix: the expert rows' files and format, mu and the ratio, and what mix does not combine with."""
    cfg = ctx.cfg
    mix, expert = cfg.algorithm.mix, cfg.data.expert
    if not mix.enable:
        return
    files = data_files(expert.files, "data.expert.files")
    if not files:
        raise ConfigError("algorithm.mix.enable=true needs data.expert.files: the expert (SFT) rows, a parquet/jsonl "
                          "file or a list of them")
    if ctx.check_paths:
        check_files_exist("data.expert.files", files)
    if not 0 <= mix.mu <= 1:
        raise ConfigError(f"algorithm.mix.mu must be in [0, 1] (the SFT loss's weight), got {mix.mu}")
    if mix.mu_valley is None:
        for key in ("mu_warmup_steps", "mu_decay_steps"):
            if getattr(mix, key):
                raise ConfigError(f"algorithm.mix.{key}={getattr(mix, key)} schedules mu (CHORD), which needs "
                                  "algorithm.mix.mu_valley: the weight it decays to")
    else:
        if not 0 <= mix.mu_valley <= 1:
            raise ConfigError(f"algorithm.mix.mu_valley must be in [0, 1] (the SFT loss's weight after the decay), "
                              f"got {mix.mu_valley}")
        for key in ("mu_warmup_steps", "mu_decay_steps"):
            if getattr(mix, key) < 0:
                raise ConfigError(f"algorithm.mix.{key} must be >= 0 steps, got {getattr(mix, key)}")
    if not 0 <= mix.expert_data_ratio < 1:
        raise ConfigError(f"algorithm.mix.expert_data_ratio must be in [0, 1) (the expert rows' share of a "
                          f"mini-batch), got {mix.expert_data_ratio}")
    positive("data.expert.max_length", expert.max_length)
    algo = cfg.algorithm
    if builds_critic(cfg):
        raise ConfigError(f"algorithm.mix.enable=true with a critic (adv_estimator={algo.adv_estimator!r}, "
                          f"critic.enable={cfg.critic.enable}): the critic "
                          "would train on the expert rows, which have no reward; use a critic-free estimator (grpo, "
                          "as Trinity-RFT's mix)")


@CHECKS.register("trainer.sampler")
def check_sampler(ctx: CheckContext) -> None:
    """data.sampler (verl's custom sampler, `rft.data.curriculum`): a class in a Python file or a pkg:// module,
    drawing the prompts of the loop that trains on them (its update reads each trained step's batch)."""
    cfg = ctx.cfg
    spec, data = cfg.data.sampler, cfg.data
    if spec.class_path is None and spec.class_name is None:
        return
    if not spec.class_path:
        raise ConfigError(f"data.sampler.class_name={spec.class_name!r} needs data.sampler.class_path: the .py file "
                          "(or pkg://<module>) defining it")
    if not spec.class_name:
        raise ConfigError(f"data.sampler.class_path={spec.class_path!r} needs data.sampler.class_name: the sampler "
                          "class in it")
    why = None
    if data.task_storage != "file" and data.task_storage != "sql":
        why = f"data.task_storage={data.task_storage!r} reads tasks as a stream, in id order"
    elif not is_synchronous(cfg):
        why = (f"trainer.mode={cfg.trainer.mode!r} with synchronizer.sync_interval={cfg.synchronizer.sync_interval}, "
               f"sync_offset={cfg.synchronizer.sync_offset} draws tasks in an explorer apart from the trainer, whose "
               "batches the sampler's update would not see in order")
    else:
        why = uneven_draws(cfg)
    if why is not None:
        raise ConfigError(f"data.sampler.class_path: a sampler of yours draws the prompts of rft's synchronous loop "
                          f"(its update gets each trained step's batch), but {why}; remove data.sampler or run "
                          "synchronously")
    if ctx.check_paths:
        from rft.data.curriculum import module_problem

        problem = module_problem(spec.class_path)
        if problem is not None:
            raise ConfigError(f"data.sampler.class_path: {problem}")


@CHECKS.register("trainer.checkpoint_copies")
def check_checkpoint_copies(ctx: CheckContext) -> None:
    """A local or mounted mirror folder; one number of checkpoints kept for actor and critic."""
    t = ctx.cfg.trainer
    check_hdfs_dir("trainer.default_hdfs_dir", t.default_hdfs_dir)
    if t.max_critic_ckpt_to_keep is not None and t.max_critic_ckpt_to_keep != t.max_actor_ckpt_to_keep:
        raise ConfigError(
            f"trainer.max_critic_ckpt_to_keep={t.max_critic_ckpt_to_keep} differs from trainer.max_actor_ckpt_to_keep"
            f"={t.max_actor_ckpt_to_keep}: the critic is saved inside each global_step_N folder, so one number keeps "
            "both; set them equal (or remove max_critic_ckpt_to_keep)"
        )


def _check_sft_loop(ctx: CheckContext, several: str | None = None) -> None:
    """The keys rft sft and rft dpo share (the SFT loop's model, data sizes, optimizer, trainer section).
    `several`: why this trainer runs one process only (None: several are allowed)."""
    cfg = ctx.cfg
    data, model, optim, trainer = cfg.data, cfg.model, cfg.optim, cfg.trainer
    check_inputs("model.partial_pretrain", model.partial_pretrain, data, ctx)
    if ctx.check_paths and ctx.check_model_path:
        check_tokenizer_folder("model.partial_pretrain", model.partial_pretrain)
    check_hdfs_dir("trainer.default_hdfs_dir", trainer.default_hdfs_dir)
    check_int("trainer.bad_update_limit", trainer.bad_update_limit, 0, "bad optimizer steps in a row before stopping")
    check_runtime("trainer", trainer, several=several)
    for key, value in (("data.train_batch_size", data.train_batch_size),
                       ("data.micro_batch_size_per_gpu", data.micro_batch_size_per_gpu),
                       ("data.max_length", data.max_length), ("trainer.total_epochs", trainer.total_epochs)):
        positive(key, value)
    for key, value in (("trainer.total_training_steps", trainer.total_training_steps),
                       ("trainer.max_ckpt_to_keep", trainer.max_ckpt_to_keep)):
        positive(key, value, allow_none=True)
    if optim.lr <= 0:
        raise ConfigError(f"optim.lr must be > 0, got {optim.lr}")
    if not 0 <= optim.warmup_steps_ratio <= 1:
        raise ConfigError(f"optim.warmup_steps_ratio must be in [0, 1], got {optim.warmup_steps_ratio}")
    check_lora_rank("model.lora_rank", model.lora_rank)


@CHECKS.register("trainer.sft")
def check_sft(ctx: CheckContext) -> None:
    """rft sft's sections (verl's sft_trainer.yaml): model, data sizes, optimizer, trainer."""
    _check_sft_loop(ctx)


@CHECKS.register("trainer.dpo")
def check_dpo(ctx: CheckContext) -> None:
    """rft dpo's sections shared with rft sft."""
    _check_sft_loop(ctx)


@CHECKS.register("trainer.rm")
def check_rm(ctx: CheckContext) -> None:
    """rft rm's sections shared with rft sft, its backbone's family, its margin column and centring term."""
    _check_sft_loop(ctx)
    cfg = ctx.cfg
    if ctx.check_paths and ctx.check_model_path:
        check_reward_backbone("model.partial_pretrain", cfg.model.partial_pretrain)
    data = cfg.data
    if data.margin_key is not None and data.margin_key in (data.prompt_key, data.chosen_key, data.rejected_key):
        raise ConfigError(f"data.margin_key={data.margin_key!r} names the prompt or a response column; it names the "
                          "column of each pair's margin (a number), or null for none")
    center = cfg.algorithm.center_rewards_coefficient
    if center is not None and not center >= 0:
        raise ConfigError(f"algorithm.center_rewards_coefficient must be >= 0 (or null: off), got {center}")
