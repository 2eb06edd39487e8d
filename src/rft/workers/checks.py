"""The checks of the worker keys: the actor's and the critic's optimizers and schedules, FSDP offload, the critic
section, checkpoint contents, entropy settings, the step guard and the token budgets of use_dynamic_bsz; the
critic's and the reference's keys have no effect when the run builds neither."""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace
from typing import Any

from rft.algorithms import ADV_ESTIMATORS, estimator_spec
from rft.config.checks import (
    CHECKS,
    UNUSED,
    CheckContext,
    check_int,
    check_model_dir,
    positive,
    processes,
    suggest_divisor,
)
from rft.config.errors import ConfigError

log = logging.getLogger("rft")


def builds_critic(cfg: Any) -> bool:
    """critic.enable, or (null) whether the estimator needs values (an unknown estimator needs none)."""
    algo = cfg.algorithm
    needs_values = algo.adv_estimator in ADV_ESTIMATORS and "values" in estimator_spec(algo.adv_estimator).needs
    return cfg.critic.enable if cfg.critic.enable is not None else needs_values


def fsdp_alone(cfg) -> bool:
    """Whether a one-process RL run shards its models anyway, as rank 0 of a group of one
    (`rft.distributed.init_group_of_one`): when its actor (or its critic) names fsdp2. So a one-GPU machine runs the
    sharded path as verl does there. `fsdp`, verl's default strategy and rft's, keeps one process unsharded: what
    a config that names no strategy computes (the golden files) stays as it was, and FSDP1 is reached with several
    processes."""
    arr = getattr(cfg, "actor_rollout_ref", None)
    if arr is None or processes(cfg.trainer) != 1:
        return False
    return arr.actor.strategy == "fsdp2" or (builds_critic(cfg) and cfg.critic.strategy == "fsdp2")


@UNUSED.register("workers.critic")
def unused_critic_keys(cfg: Any) -> dict[str, str]:
    if builds_critic(cfg):
        return {}
    why = f"this run builds no critic (algorithm.adv_estimator={cfg.algorithm.adv_estimator!r})"
    return {f"critic.{f.name}" + ("." if _is_section(f) else ""): why
            for f in dataclasses.fields(type(cfg.critic)) if f.name != "enable"}


def _is_section(f: dataclasses.Field) -> bool:
    """A field holding a nested section (its key is a prefix), told from the schema, not from a value."""
    factory = f.default_factory
    return factory is not dataclasses.MISSING and dataclasses.is_dataclass(factory())  # type: ignore[misc]


@UNUSED.register("workers.reference")
def unused_reference_keys(cfg: Any) -> dict[str, str]:
    if cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
        return {}
    if cfg.distillation.enabled:  # the teacher runs as the reference does: its precision, sharding, micro-batches
        return {}
    return {"actor_rollout_ref.ref.": "this run builds no reference (no KL term)"}


@CHECKS.register("workers.model_dtype")
def check_model_dtype(ctx: CheckContext) -> None:
    """fsdp_config.model_dtype (verl's: the dtype a model is loaded and kept in): a LoRA reference is the policy
    with its adapter disabled, so it cannot be kept in a dtype of its own."""
    from rft.models.precision import dtype_of

    arr = ctx.cfg.actor_rollout_ref
    actor, ref = arr.actor.fsdp_config.model_dtype, arr.ref.fsdp_config.model_dtype
    uses_ref = arr.actor.use_kl_loss or ctx.cfg.algorithm.use_kl_in_reward
    if uses_ref and arr.model.lora_rank > 0 and dtype_of(ref) != dtype_of(actor):
        raise ConfigError(f"actor_rollout_ref.ref.fsdp_config.model_dtype={ref}: with LoRA the reference is the "
                          "policy with its adapter disabled, kept in the policy's dtype "
                          f"(actor_rollout_ref.actor.fsdp_config.model_dtype={actor}): set it to {actor}, or remove it")


def check_optim(prefix: str, optim: Any, val_files: Any, test_freq: int) -> None:
    """The optimizer can be built here; reduce_lr_on_plateau has validation metrics to follow."""
    from rft.workers.optim import PLATEAU, optimizer_unavailable

    reason = optimizer_unavailable(optim.optimizer)
    if reason is not None:
        raise ConfigError(f"{prefix}.optimizer={optim.optimizer!r} cannot run here: {reason}")
    if optim.lr_scheduler_type == PLATEAU and (not val_files or test_freq <= 0):
        raise ConfigError(
            f"{prefix}.lr_scheduler_type={PLATEAU!r} steps on the validation reward: set data.val_files and "
            "trainer.test_freq > 0"
        )


@CHECKS.register("workers.actor_optim")
def check_actor_optim(ctx: CheckContext) -> None:
    actor, data = ctx.cfg.actor_rollout_ref.actor, ctx.cfg.data
    if actor.optim.lr <= 0:
        raise ConfigError(f"actor_rollout_ref.actor.optim.lr must be > 0, got {actor.optim.lr}")
    if not 0 <= actor.optim.lr_warmup_steps_ratio <= 1:
        raise ConfigError("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio must be in [0, 1]")
    check_optim("actor_rollout_ref.actor.optim", actor.optim, data.val_files, ctx.cfg.trainer.test_freq)


@CHECKS.register("workers.sequence_parallel")
def check_sequence_parallel(ctx: CheckContext) -> None:
    """Ulysses sequence parallelism (rft.workers.ulysses): the actor's size divides the processes and the model's
    heads; the reference and the critic run with it or whole (1); what needs a micro-batch's whole logits (the
    full KL, the optimal token baseline's sum of squared probabilities) is refused with it."""
    cfg = ctx.cfg
    arr = cfg.actor_rollout_ref
    key = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
    sp = arr.actor.ulysses_sequence_parallel_size
    check_int(key, sp, 1, "processes per sequence-parallel group")
    for other, value in (("actor_rollout_ref.ref.ulysses_sequence_parallel_size", arr.ref.ulysses_sequence_parallel_size),
                         ("critic.ulysses_sequence_parallel_size", cfg.critic.ulysses_sequence_parallel_size)):
        if value is not None and value not in (1, sp) and other not in ctx.inactive and not any(
                other.startswith(k) for k in ctx.inactive if k.endswith(".")):
            raise ConfigError(f"{other}={value}: it runs on the actor's processes and data split, so it is the "
                              f"actor's ({key}={sp}) or 1; set one of those (null: the actor's)")
    if sp == 1:
        return
    _check_divides(key, sp, ctx)
    needs_logits = [name for name, on in (
        (f"actor_rollout_ref.actor.kl_loss_type={arr.actor.kl_loss_type}",
         arr.actor.use_kl_loss and arr.actor.kl_loss_type == "full"),
        (f"algorithm.kl_penalty={cfg.algorithm.kl_penalty}",
         cfg.algorithm.use_kl_in_reward and cfg.algorithm.kl_penalty == "full"),
        ("actor_rollout_ref.actor.calculate_sum_pi_squared", arr.actor.calculate_sum_pi_squared),
    ) if on]
    if needs_logits:
        raise ConfigError(f"{key}={sp}: {needs_logits[0]} needs each micro-batch's whole logits, which sequence "
                          "parallelism splits over the processes; set it to 1 or choose another")
    if not (ctx.check_paths and ctx.check_model_path):
        return
    from rft.models.checks import text_config_json
    from rft.workers.ulysses import heads_error

    # each model split over the group: the actor's (its reference's too), and a critic that runs with the actor's
    # size, from its own folder (it was refused only once both models had loaded on every process)
    split = [(key, "actor_rollout_ref.model.path", arr.model.path)]
    if builds_critic(cfg) and cfg.critic.ulysses_sequence_parallel_size in (None, sp):
        split.append(("critic.ulysses_sequence_parallel_size", "critic.model.path",
                      cfg.critic.model.path or arr.model.path))
    for size_key, folder_key, path in split:
        config = text_config_json(path)
        if config is None:
            continue  # the model checks say what is wrong with the folder
        why = heads_error(SimpleNamespace(**config), sp)
        if why is None:
            continue
        if size_key == key:
            raise ConfigError(f"{key}={sp}: the model {path} cannot split its sequences over {sp} processes ({why}); "
                              "set a size that fits, or 1")
        raise ConfigError(f"{key}={sp}: the critic's model {folder_key}={path!r} cannot split its sequences over {sp} "
                          f"processes ({why}); set {size_key}=1 to run the critic whole, or a size that fits both")


def _check_divides(key: str, sp: int, ctx: CheckContext) -> None:
    """A sequence-parallel size > 1 that splits the run's processes into groups (several processes)."""
    t = ctx.cfg.trainer
    if ctx.world_size % sp or ctx.world_size == 1:
        raise ConfigError(
            f"{key}={sp} does not divide the {ctx.world_size} process(es) (trainer.nnodes x trainer.n_gpus_per_node "
            f"= {t.nnodes} x {t.n_gpus_per_node}): run a multiple of {sp} processes or set it to 1")


@CHECKS.register("workers.sft_sequence_parallel")
def check_sft_sequence_parallel(ctx: CheckContext) -> None:
    """rft sft's Ulysses sequence parallelism (verl's sft_trainer ulysses_sequence_parallel_size): the size divides
    the processes and the model's heads."""
    cfg = ctx.cfg
    key = "ulysses_sequence_parallel_size"
    sp = cfg.ulysses_sequence_parallel_size
    check_int(key, sp, 1, "processes per sequence-parallel group")
    if sp == 1:
        return
    _check_divides(key, sp, ctx)
    if not (ctx.check_paths and ctx.check_model_path):
        return
    from rft.models.checks import text_config_json
    from rft.workers.ulysses import heads_error

    config = text_config_json(cfg.model.partial_pretrain)
    why = None if config is None else heads_error(SimpleNamespace(**config), sp)
    if why is not None:
        raise ConfigError(f"{key}={sp}: the model {cfg.model.partial_pretrain} cannot split its sequences over {sp} "
                          f"processes ({why}); set a size that fits, or 1")


@CHECKS.register("workers.offload")
def check_offload(ctx: CheckContext) -> None:
    """FSDP's CPU offload keys. On a CPU run the parameters and optimizer state already live in host memory: every
    setting holds and changes nothing. On cuda a sharded model (several processes) keeps its parameter shards in
    host memory with param_offload / offload_policy (FSDP1's CPUOffload, FSDP2's CPUOffloadPolicy), its optimizer
    stepping there too; one process has no FSDP, hence no offload, unless it shards alone (`fsdp_alone`)."""
    from rft.models.load import resolve_device

    cfg, world_size = ctx.cfg, ctx.world_size
    if resolve_device(cfg.trainer.device).type == "cpu":
        return
    arr = cfg.actor_rollout_ref
    for section, fsdp in (("actor_rollout_ref.actor", arr.actor.fsdp_config),
                          ("actor_rollout_ref.ref", arr.ref.fsdp_config), ("critic.model", cfg.critic.model.fsdp_config)):
        for name in ("param_offload", "optimizer_offload", "offload_policy"):
            if not getattr(fsdp, name):
                continue
            if world_size == 1 and not fsdp_alone(cfg):
                raise ConfigError(
                    f"{section}.fsdp_config.{name}=true: one process on cuda has no FSDP, hence no CPU offload; set "
                    "it to false, run several processes (trainer.n_gpus_per_node), or shard the one process "
                    "(actor_rollout_ref.actor.strategy=fsdp2)"
                )
            if name == "optimizer_offload" and not (fsdp.param_offload or fsdp.offload_policy):
                raise ConfigError(
                    f"{section}.fsdp_config.optimizer_offload=true alone: rft's optimizer steps where the parameter "
                    "shards live, so set param_offload=true (or offload_policy=true) with it, or set it to false"
                )


def _fsdp_sections(cfg: Any) -> list[tuple[str, Any, str]]:
    """(key prefix, FSDPConfig, strategy key) of the sharded models this run builds: the actor, the reference (with
    a KL term; it follows the actor's strategy), the critic (when built)."""
    arr = cfg.actor_rollout_ref
    sections = [("actor_rollout_ref.actor", arr.actor.fsdp_config, "actor_rollout_ref.actor.strategy")]
    if arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
        sections.append(("actor_rollout_ref.ref", arr.ref.fsdp_config, "actor_rollout_ref.actor.strategy"))
    if builds_critic(cfg):
        sections.append(("critic.model", cfg.critic.model.fsdp_config, "critic.strategy"))
    return sections


def _key(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


@CHECKS.register("workers.fsdp_layout")
def check_fsdp_layout(ctx: CheckContext) -> None:
    """fsdp_size: negative or at least the number of processes (every process, as verl's create_device_mesh) or a
    divisor of it (hybrid sharding, `workers/fsdp.py`),
    not 1 under FSDP1 (torch makes a one-process shard group NO_SHARD, without the all-reduce across the groups);
    wrap_policy.min_num_params: an integer >= 0."""
    world = ctx.world_size
    for section, fsdp, strategy_key in _fsdp_sections(ctx.cfg):
        size = fsdp.fsdp_size
        if not isinstance(size, int) or isinstance(size, bool) or not (size < 0 or size >= world
                                                                       or (size > 0 and world % size == 0)):
            divisors = [d for d in range(1, world + 1) if world % d == 0]
            raise ConfigError(
                f"{section}.fsdp_config.fsdp_size={size!r} is not -1, a divisor of the {world} processes "
                f"(trainer.nnodes x trainer.n_gpus_per_node) or at least {world}: set -1 to shard over all of them "
                f"(so does a size of {world} or more, as in verl), or one of {divisors} for hybrid sharding (groups "
                "of that many processes)"
            )
        if size == 1 and world > 1 and _key(ctx.cfg, strategy_key) == "fsdp":
            raise ConfigError(
                f"{section}.fsdp_config.fsdp_size=1 with {strategy_key}=fsdp: FSDP1 turns a shard group of one "
                "process into NO_SHARD, which never all-reduces the gradients across the groups; use "
                f"{strategy_key}=fsdp2, or an fsdp_size of at least 2"
            )
        check_int(f"{section}.fsdp_config.wrap_policy.min_num_params", fsdp.wrap_policy.min_num_params, 0,
                  "parameters that make a submodule an FSDP unit; 0: off")


def _shard_group(fsdp: Any, world: int) -> int:
    """The processes one copy of a model is sharded over: fsdp_size when it divides the processes, else all."""
    size = fsdp.fsdp_size
    return size if isinstance(size, int) and size > 0 and world % size == 0 else world


def _weight_bytes(params: int, model_dtype: str = "fp32") -> int:
    """The weights of a model of `params` parameters kept in `model_dtype` (fsdp_config.model_dtype)."""
    from rft.models.precision import MASTER, dtype_of

    return (dtype_of(model_dtype) or MASTER).itemsize * params


def _training_bytes(params: int, lora_rank: int, optimizer: str, model_dtype: str = "fp32") -> int:
    """What training a model of `params` parameters holds: its weights (in `model_dtype`, fsdp_config.model_dtype)
    and, trained in full, its gradients and the optimizer's state, in the same dtype (LoRA's adapter counted as
    nothing)."""
    from rft.workers.optim import STATE_VALUES

    trained = 0 if lora_rank > 0 else params
    return _weight_bytes(params, model_dtype) + _weight_bytes(trained, model_dtype) * (1 + STATE_VALUES.get(optimizer, 0))


def refuse_unless_fits(path: str, params: int, parts: list[tuple[str, int, int]], local: int,
                       fixes: list[str]) -> None:
    """The run's memory check (`workers.memory`, `workers.sft_memory`): `parts` (what, bytes of one whole copy, the
    processes it is sharded over) held by each of the `local` processes on this machine fit in the memory free now,
    else a ConfigError naming each part and `fixes`, the keys that shrink it. A lower bound (no activations, no KV
    cache, no copy gathered for generation), so a run it refuses cannot fit; nothing is checked where the free
    memory cannot be read."""
    from rft.runtime import available_memory, human_bytes

    free = available_memory()
    need = sum(local * size // group for _, size, group in parts)
    if free is None or need <= free:
        return
    what = ", ".join(f"{name} {human_bytes(local * size // group)}" for name, size, group in parts)
    raise ConfigError(
        f"{path} ({params:,} parameters) needs at least {human_bytes(need)} of memory on this machine for its "
        f"{local} process(es) before any activation ({what}; float32 on CPU), more than the {human_bytes(free)} free "
        f"now: {'; or '.join(fixes)}")


def _on_cpu(ctx: CheckContext) -> bool:
    from rft.models.load import resolve_device

    return ctx.check_paths and ctx.check_model_path and resolve_device(ctx.cfg.trainer.device).type == "cpu"


@CHECKS.register("workers.memory")
def check_memory(ctx: CheckContext) -> None:
    """On CPU: what the run's processes on this machine hold for the whole run, the weights (fsdp_config.model_dtype), the
    gradients and the optimizer state of the actor, the reference's weights, the critic's (each sharded over its
    FSDP group), counted from the model folders' safetensors headers, fit in the memory free now; refused before
    anything loads with the keys that shrink it (`refuse_unless_fits`), an fsdp_size that keeps a copy per group of
    fewer processes than the run's first."""
    from rft.models.checks import saved_parameters
    from rft.workers.optim import STATE_VALUES

    cfg = ctx.cfg
    arr = cfg.actor_rollout_ref
    actor_params = saved_parameters(arr.model.path) if _on_cpu(ctx) else None
    if actor_params is None:
        return
    world, local = ctx.world_size, min(ctx.world_size, cfg.trainer.n_gpus_per_node)
    sharded = [("actor_rollout_ref.actor", arr.actor.fsdp_config,
                "the actor's weights, gradients and optimizer state",
                _training_bytes(actor_params, arr.model.lora_rank, arr.actor.optim.optimizer,
                                arr.actor.fsdp_config.model_dtype))]
    if (arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward) and arr.model.lora_rank == 0:
        sharded.append(("actor_rollout_ref.ref", arr.ref.fsdp_config, "the reference's weights",
                        _weight_bytes(actor_params, arr.ref.fsdp_config.model_dtype)))
    if builds_critic(cfg):
        critic_params = saved_parameters(cfg.critic.model.path or arr.model.path) or actor_params
        sharded.append(("critic.model", cfg.critic.model.fsdp_config, "the critic's",
                        _training_bytes(critic_params, cfg.critic.model.lora_rank, cfg.critic.optim.optimizer,
                                        cfg.critic.model.fsdp_config.model_dtype)))
    parts = [(what, size, _shard_group(fsdp, world)) for _, fsdp, what, size in sharded]
    fixes = [f"shard over all {world} processes ({section}.fsdp_config.fsdp_size=-1; {fsdp.fsdp_size} keeps a whole "
             f"copy in every {'process' if fsdp.fsdp_size == 1 else f'group of {fsdp.fsdp_size} processes'})"
             for section, fsdp, _, _ in sharded if _shard_group(fsdp, world) < world]
    if arr.model.lora_rank == 0:
        fixes.append("train a LoRA adapter (actor_rollout_ref.model.lora_rank, e.g. 32)")
    if STATE_VALUES.get(arr.actor.optim.optimizer, 0) > 0:
        fixes.append("an optimizer with less state (actor_rollout_ref.actor.optim.optimizer=adafactor)")
    fixes.append("a smaller model, or more machines (trainer.nnodes)")
    refuse_unless_fits(arr.model.path, actor_params, parts, local, fixes)


@CHECKS.register("workers.sft_memory")
def check_sft_memory(ctx: CheckContext) -> None:
    """`workers.memory` for rft sft and rft dpo (and their stages): the model's weights, gradients and AdamW's
    moments (sharded over every process), and DPO's frozen reference copy with full fine-tuning."""
    from rft.config.dpo_schema import DPOConfig
    from rft.models.checks import saved_parameters
    from rft.workers.optim import DEFAULT_OPTIMIZER

    cfg = ctx.cfg
    model = cfg.model
    params = saved_parameters(model.partial_pretrain) if _on_cpu(ctx) else None
    if params is None:
        return
    world = ctx.world_size
    parts = [("the model's weights, gradients and optimizer state",
              _training_bytes(params, model.lora_rank, DEFAULT_OPTIMIZER), world)]
    preference = isinstance(cfg, DPOConfig)  # the reference's log-probs in every step
    if preference and model.lora_rank == 0:
        parts.append(("the reference's weights", 4 * params, world))
    fixes = [] if model.lora_rank > 0 else [
        "train a LoRA adapter (model.lora_rank, e.g. 32" + ("; the reference is then the model with its adapter "
                                                            "off, no copy)" if preference else ")")]
    fixes.append("a smaller model" if preference else "a smaller model, or more machines (trainer.nnodes)")
    refuse_unless_fits(model.partial_pretrain, params, parts, min(world, cfg.trainer.n_gpus_per_node), fixes)


@CHECKS.register("workers.activation_offload")
def check_activation_offload(ctx: CheckContext) -> None:
    """enable_activation_offload on CPU: the activations already live in host memory, so the key changes nothing;
    said in one note line."""
    from rft.models.load import resolve_device

    cfg = ctx.cfg
    if resolve_device(cfg.trainer.device).type != "cpu":
        return
    keys = ["actor_rollout_ref.model.enable_activation_offload"] if (
        cfg.actor_rollout_ref.model.enable_activation_offload) else []
    if builds_critic(cfg) and cfg.critic.model.enable_activation_offload:
        keys.append("critic.model.enable_activation_offload")
    if keys:
        log.warning("rft: note: %s changes nothing on CPU: the activations already live in host memory (on cuda "
                    "the update's forward passes keep them there)", ", ".join(f"{k}=true" for k in keys))


def check_checkpoint_contents(prefix: str, ckpt: Any) -> None:
    contents = set(ckpt.save_contents)
    allowed_contents = {"model", "optimizer", "extra", "hf_model"}
    for key, items in (("save_contents", contents), ("load_contents", set(ckpt.load_contents))):
        if items - allowed_contents:
            raise ConfigError(
                f"{prefix}.{key}: {sorted(items - allowed_contents)} unknown; allowed: {sorted(allowed_contents)}"
            )
    if not set(ckpt.load_contents) <= contents:
        raise ConfigError(f"{prefix}.load_contents must be a subset of save_contents")


@CHECKS.register("workers.actor_checkpoint")
def check_actor_checkpoint(ctx: CheckContext) -> None:
    check_checkpoint_contents("actor_rollout_ref.actor.checkpoint", ctx.cfg.actor_rollout_ref.actor.checkpoint)


@CHECKS.register("workers.critic")
def check_critic(ctx: CheckContext) -> None:
    """The critic's sizes and ranges (its null sizes follow the actor's), trainer.critic_warmup, and that an
    estimator which needs values has a critic."""
    cfg, world_size = ctx.cfg, ctx.data_parallel
    critic, actor, algo = cfg.critic, cfg.actor_rollout_ref.actor, cfg.algorithm
    needs_values = "values" in estimator_spec(algo.adv_estimator).needs
    if needs_values and critic.enable is False:
        raise ConfigError(
            f"algorithm.adv_estimator={algo.adv_estimator!r} needs critic values: remove critic.enable=false "
            "(null builds the critic when the estimator needs it)"
        )
    warmup = cfg.trainer.critic_warmup
    if not isinstance(warmup, int) or warmup < 0:
        raise ConfigError(f"trainer.critic_warmup must be an integer >= 0, got {warmup!r}")
    if not builds_critic(cfg):
        if warmup > 0:
            raise ConfigError(
                f"trainer.critic_warmup={warmup} trains only a critic, and this run has none: use "
                "algorithm.adv_estimator=gae or critic.enable=true, or set trainer.critic_warmup=0"
            )
        return
    if ctx.check_paths and critic.model.path:
        check_model_dir("critic.model.path", critic.model.path, ctx)
    n, data = cfg.actor_rollout_ref.rollout.n, cfg.data
    if critic.rollout_n is not None and critic.rollout_n != n:
        raise ConfigError(
            f"critic.rollout_n={critic.rollout_n} differs from actor_rollout_ref.rollout.n={n}; rft has one group "
            "size: remove critic.rollout_n"
        )
    for key in ("ppo_mini_batch_size", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu",
                "forward_micro_batch_size", "forward_micro_batch_size_per_gpu", "ppo_epochs"):
        positive(f"critic.{key}", getattr(critic, key), allow_none=True)
    for a, b in (("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
                 ("forward_micro_batch_size", "forward_micro_batch_size_per_gpu")):
        if getattr(critic, a) is not None and getattr(critic, b) is not None:
            raise ConfigError(f"set only one of critic.{a} and critic.{b}")
    mini = critic.ppo_mini_batch_size or actor.ppo_mini_batch_size
    if data.train_batch_size % mini or mini % world_size:
        raise ConfigError(
            f"critic.ppo_mini_batch_size ({mini}) must divide data.train_batch_size ({data.train_batch_size}) and "
            f"be a multiple of the number of processes ({world_size}); both count prompts: "
            + suggest_divisor("critic.ppo_mini_batch_size", data.train_batch_size, mini, world_size)
        )
    micro = critic.ppo_micro_batch_size_per_gpu or (
        critic.ppo_micro_batch_size // world_size if critic.ppo_micro_batch_size else None)
    rows_per_mini = mini * n // world_size
    if micro is not None and rows_per_mini % micro:
        raise ConfigError(
            f"a critic mini-batch holds critic.ppo_mini_batch_size x rollout.n = {mini} x {n} = {rows_per_mini} rows "
            f"per process, which is not a multiple of critic.ppo_micro_batch_size_per_gpu ({micro}): "
            + suggest_divisor("critic.ppo_micro_batch_size_per_gpu", rows_per_mini, micro)
        )
    if not critic.cliprange_value > 0:
        raise ConfigError(f"critic.cliprange_value must be > 0, got {critic.cliprange_value}")
    if critic.optim.lr <= 0:
        raise ConfigError(f"critic.optim.lr must be > 0, got {critic.optim.lr}")
    if not 0 <= critic.optim.lr_warmup_steps_ratio <= 1:
        raise ConfigError("critic.optim.lr_warmup_steps_ratio must be in [0, 1]")
    if critic.model.lora_rank < 0:
        raise ConfigError(f"critic.model.lora_rank must be >= 0, got {critic.model.lora_rank}")
    check_checkpoint_contents("critic.checkpoint", critic.checkpoint)


@CHECKS.register("workers.entropy")
def check_entropy(ctx: CheckContext) -> None:
    """One entropy setting (the reference computes none); entropy_checkpointing=false is noted, not honoured."""
    cfg = ctx.cfg
    arr = cfg.actor_rollout_ref
    actor = arr.actor
    for name in ("entropy_from_logits_with_chunking", "entropy_checkpointing"):
        ref_value = getattr(arr.ref, name)
        if ref_value is not None and ref_value != getattr(actor, name) and (actor.use_kl_loss or
                                                                           cfg.algorithm.use_kl_in_reward):
            raise ConfigError(
                f"actor_rollout_ref.ref.{name}={ref_value} differs from actor_rollout_ref.actor.{name}="
                f"{getattr(actor, name)}: the reference computes no entropy, so rft has one setting; remove the "
                "reference's (or make them equal)"
            )
    if not actor.entropy_checkpointing:
        log.warning("rft: note: actor_rollout_ref.actor.entropy_checkpointing=false changes nothing: rft's entropy "
                    "always recomputes its softmax in the backward (the same result, less memory)")


@CHECKS.register("workers.schedule")
def check_schedule(ctx: CheckContext) -> None:
    """The schedules' length: -1 (the run's) or a positive number of steps."""
    cfg = ctx.cfg
    for prefix, optim in (("actor_rollout_ref.actor.optim", cfg.actor_rollout_ref.actor.optim),
                          ("critic.optim", cfg.critic.optim)):
        steps = optim.total_training_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or (steps != -1 and steps <= 0):
            raise ConfigError(f"{prefix}.total_training_steps must be -1 (the run's length) or a positive number "
                              f"of steps, got {steps!r}")


@CHECKS.register("workers.guard")
def check_guard(ctx: CheckContext) -> None:
    check_int("trainer.bad_update_limit", ctx.cfg.trainer.bad_update_limit, 0,
              "bad optimizer steps in a row before stopping")


@CHECKS.register("workers.token_budgets")
def check_token_budgets(ctx: CheckContext) -> None:
    """use_dynamic_bsz: every token budget in use holds the longest sequence (prompt + response)."""
    cfg = ctx.cfg
    arr, c = cfg.actor_rollout_ref, cfg.critic
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    budgets = []
    if arr.actor.use_dynamic_bsz:
        budgets.append(("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", arr.actor.ppo_max_token_len_per_gpu))
    for name, section in (("rollout", arr.rollout), ("ref", arr.ref)):
        dynamic = section.log_prob_use_dynamic_bsz
        if arr.actor.use_dynamic_bsz if dynamic is None else dynamic:
            budget = section.log_prob_max_token_len_per_gpu
            key = f"actor_rollout_ref.{name}.log_prob_max_token_len_per_gpu"
            budgets.append((key if budget is not None else "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
                            arr.actor.ppo_max_token_len_per_gpu if budget is None else budget))
    if c.use_dynamic_bsz:
        budgets += [("critic.ppo_max_token_len_per_gpu", c.ppo_max_token_len_per_gpu),
                    ("critic.forward_max_token_len_per_gpu", c.forward_max_token_len_per_gpu)]
    for key, value in budgets:
        if not isinstance(value, int) or isinstance(value, bool) or value < longest:
            raise ConfigError(
                f"{key}={value!r} (use_dynamic_bsz) must be an integer of at least the longest sequence, "
                f"data.max_prompt_length + data.max_response_length = {longest} tokens: one row must fit in a pass"
            )


@CHECKS.register("workers.vision")
def check_vision(ctx: CheckContext) -> None:
    """A vision-language policy: what rft does not yet run with images is refused by name before any model loads
    (docs/multimodal.md): sequence parallelism (the image features of a row split over processes), FSDP1 over
    several processes (generation runs the vision tower outside the root's forward pass, where FSDP1 has not
    gathered the root's parameters; FSDP2's are gathered for generation, `workers/fsdp.py:gathered_for_generation`),
    and a critic that cannot see the images (critic.model.path a text model, or another family's, whose processor
    would not make the policy's image tokens). A critic of the policy's family trains (PPO with GAE: the value
    model is the family's backbone with a value head, `rft.models.load.vision_value_class`, its passes given the
    rows' pixels; critic.model.freeze_vision_tower, null: the actor's). Workflows take images through their model
    handle (`rft.explorer.model`)."""
    from rft.models.vision import is_vision_folder

    cfg = ctx.cfg
    path = cfg.actor_rollout_ref.model.path
    if not path or not is_vision_folder(path):
        return
    what = f"actor_rollout_ref.model.path={path!r} is a vision-language model"
    critic_path = cfg.critic.model.path
    if builds_critic(cfg) and critic_path and ctx.check_paths:
        family = _model_type(critic_path)
        if not is_vision_folder(critic_path) or family != _model_type(path):
            kind = f"a {family!r} vision-language model" if is_vision_folder(critic_path) else "a text model"
            raise ConfigError(f"{what} ({_model_type(path)!r}) and critic.model.path={critic_path!r} is {kind}: "
                              "the critic reads the policy's image tokens with their pixels, so it is a model of the "
                              "policy's family; remove critic.model.path (null: the policy's) or give one of that "
                              "family (a saved rft critic of it)")
    if (cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size or 1) > 1:
        raise ConfigError(f"{what}: actor_rollout_ref.actor.ulysses_sequence_parallel_size > 1 splits rows over "
                          "processes, which a row's image features do not follow yet; set it to 1")
    if ctx.world_size > 1 and cfg.actor_rollout_ref.actor.strategy == "fsdp":
        raise ConfigError(f"{what}, on {ctx.world_size} processes with actor_rollout_ref.actor.strategy=fsdp (FSDP1), "
                          "whose root parameters generation's vision tower reads outside the root's forward pass; "
                          "set actor_rollout_ref.actor.strategy=fsdp2 (tested equal to one process)")


def _model_type(path: str) -> str | None:
    """The model_type in the folder `path`'s config.json (None when it has none)."""
    import json
    from pathlib import Path

    try:
        return json.loads((Path(path) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        return None
