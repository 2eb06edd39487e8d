"""config/'s own checks: the schema walk, and the cross-section rules that belong to no one subsystem.

The schema walk reads `choices` and `unsupported` metadata (see schema.py), except in the sections of parts the
run does not build (`CheckContext.inactive`, from the `UNUSED` rules: their keys have no effect, as in verl, and the
ones set to something other than the default are named in one note line). The cross-section rules are the batch
sizes: positive, divisible by one another and by the processes. Each subsystem's own checks are beside its code;
the order of all of them is `rft/trainer/validate.py`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from rft.config.checks import CHECKS, CheckContext, all_null, positive, suggest_divisor, suggest_multiple
from rft.config.errors import ConfigError
from rft.config.suggest import did_you_mean

log = logging.getLogger("rft")


def walk(obj: Any, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, value) for every leaf of a config dataclass instance."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from walk(value, key + ".")
        else:
            yield key, f, value


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def inactive_reason(key: str, inactive: Mapping[str, str]) -> str | None:
    """Why `key` has no effect, where a rule of `inactive` ({key or prefix ending in '.': why}) covers it."""
    for prefix, why in inactive.items():
        if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
            return why
    return None


def choice_hint(value: Any, choices: tuple) -> str:
    """"choose one of ['memory', 'checkpoint', 'gloo', 'nccl'] or leave it unset; did you mean 'memory'?" for a `value`
    none of `choices` is: a None choice said in words (a YAML file spells it null, or leaves the key out), then the
    choice closest to a misspelt string."""
    named = [c for c in choices if c is not None]
    unset = " or leave it unset" if None in choices else ""
    meant = did_you_mean(value, [c for c in named if isinstance(c, str)]) if isinstance(value, str) else ""
    return f"choose one of {named}{unset}" + (f"; {meant}" if meant else "")


def _check_schema(cfg: Any, inactive: dict[str, str] | None = None) -> None:
    """`choices`, then `unsupported` (a value other than the default and the field's `also` values is refused)
    outside the `inactive` sections; inside them, the keys set to something other than the default are named in
    one note line per reason."""
    unused: dict[str, list[str]] = {}
    for key, f, value in walk(cfg):
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ConfigError(f"{key}={value!r} is not allowed; {choice_hint(value, choices)}")
        default = _default_of(f)
        why = inactive_reason(key, inactive or {})
        if why is not None:
            wired = isinstance(default, str) and "${" in default  # follows another key (load_contents)
            if value != default and not wired and not (isinstance(value, dict) and all_null(value)):
                unused.setdefault(why, []).append(f"{key}={value!r}")
            continue
        reason = f.metadata.get("unsupported")
        if reason is not None:
            if isinstance(value, dict) and all_null(value):
                continue
            if value != default and value not in f.metadata.get("also", ()):
                allowed = " or ".join(repr(v) for v in (default, *f.metadata.get("also", ())))
                raise ConfigError(
                    f"{key}={value!r} is not supported by rft yet ({reason}); remove it or set it to {allowed}"
                )
    for why, keys in unused.items():
        log.warning("rft: note: %s, so these keys have no effect: %s", why, ", ".join(keys))


@CHECKS.register("config.schema")
def check_schema(ctx: CheckContext) -> None:
    """Every key of the schema: its `choices`, its `unsupported` values, the inactive parts' keys noted."""
    _check_schema(ctx.cfg, dict(ctx.inactive))


@CHECKS.register("config.processes")
def check_processes(ctx: CheckContext) -> None:
    """What several processes need: a batch of prompts that splits evenly (all responses of a prompt stay on one
    rank)."""
    data, t, world_size = ctx.cfg.data, ctx.cfg.trainer, ctx.data_parallel
    if world_size == 1:
        return
    where = f"{ctx.world_size} processes (trainer.nnodes x trainer.n_gpus_per_node = {t.nnodes} x {t.n_gpus_per_node})"
    if ctx.sp > 1:
        where = (f"{world_size} data-parallel groups ({where} in groups of "
                 f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={ctx.sp})")
    if data.train_batch_size % world_size:
        # the value named must pass config.sizes too, so it is a multiple of the mini-batch as well: of
        # lcm(processes, mini-batch), which is the mini-batch where that splits over the processes (else
        # config.sizes asks for another mini-batch first)
        mini = ctx.cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        both = mini if isinstance(mini, int) and mini > world_size and not mini % world_size else world_size
        suggestion = suggest_multiple("data.train_batch_size", both, data.train_batch_size)
        if both != world_size:
            suggestion += f" (of actor_rollout_ref.actor.ppo_mini_batch_size ({mini}) too, which must divide it)"
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size}) must be a multiple of the number of processes: "
            f"{where} each generate for train_batch_size / processes prompts; " + suggestion
        )


@CHECKS.register("config.sizes")
def check_sizes(ctx: CheckContext) -> None:
    """The RL run's sizes: positive, the mini-batch dividing the batch and splitting over the processes, the
    micro-batch dividing a mini-batch's rows, one prompt and one response length."""
    cfg, world_size = ctx.cfg, ctx.data_parallel
    data, arr, trainer = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    actor, rollout = arr.actor, arr.rollout
    for key, value in (
        ("data.train_batch_size", data.train_batch_size),
        ("data.max_prompt_length", data.max_prompt_length),
        ("data.max_response_length", data.max_response_length),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size),
        ("actor_rollout_ref.actor.ppo_epochs", actor.ppo_epochs),
        ("actor_rollout_ref.rollout.n", rollout.n),
        ("actor_rollout_ref.rollout.val_kwargs.n", rollout.val_kwargs.n),
        ("trainer.total_epochs", trainer.total_epochs),
    ):
        positive(key, value)
    for key, value in (
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", actor.ppo_micro_batch_size_per_gpu),
        ("actor_rollout_ref.actor.ppo_micro_batch_size", actor.ppo_micro_batch_size),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", rollout.log_prob_micro_batch_size_per_gpu),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size", rollout.log_prob_micro_batch_size),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", arr.ref.log_prob_micro_batch_size_per_gpu),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size", arr.ref.log_prob_micro_batch_size),
        ("actor_rollout_ref.rollout.micro_batch_size", rollout.micro_batch_size),
        ("data.val_batch_size", data.val_batch_size),
        ("trainer.total_training_steps", trainer.total_training_steps),
        ("trainer.max_actor_ckpt_to_keep", trainer.max_actor_ckpt_to_keep),
        ("trainer.log_freq", trainer.log_freq),
    ):
        positive(key, value, allow_none=True)
    for a, b in (
        ("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
    ):
        if getattr(actor, a) is not None and getattr(actor, b) is not None:
            raise ConfigError(f"set only one of actor_rollout_ref.actor.{a} and actor_rollout_ref.actor.{b}")
    mini_key = "actor_rollout_ref.actor.ppo_mini_batch_size"
    if data.train_batch_size % actor.ppo_mini_batch_size:
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size}) must be a multiple of {mini_key} "
            f"({actor.ppo_mini_batch_size}); both count prompts: "
            + suggest_divisor(mini_key, data.train_batch_size, actor.ppo_mini_batch_size, world_size)
        )
    if actor.ppo_mini_batch_size % world_size:
        raise ConfigError(
            f"{mini_key} ({actor.ppo_mini_batch_size}) must divide by the number of "
            f"{'data-parallel groups' if ctx.sp > 1 else 'processes'} ({world_size}): "
            + suggest_divisor(mini_key, data.train_batch_size, actor.ppo_mini_batch_size, world_size)
        )
    micro = actor.ppo_micro_batch_size_per_gpu or (
        actor.ppo_micro_batch_size // world_size if actor.ppo_micro_batch_size else None
    )
    rows_per_mini = actor.ppo_mini_batch_size * rollout.n // world_size
    if micro is not None and rows_per_mini % micro:
        raise ConfigError(
            f"a mini-batch holds ppo_mini_batch_size x rollout.n = {actor.ppo_mini_batch_size} x {rollout.n} = "
            f"{rows_per_mini} rows per process, which is not a multiple of "
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu ({micro}): "
            + suggest_divisor("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", rows_per_mini, micro)
        )
    for key, value in (("prompt_length", data.max_prompt_length), ("response_length", data.max_response_length)):
        set_value = getattr(rollout, key)
        if set_value is not None and set_value != value:
            raise ConfigError(
                f"actor_rollout_ref.rollout.{key}={set_value} differs from data.max_{key}={value}; "
                f"rft has one {key.split('_')[0]} length: set data.max_{key}"
            )


@CHECKS.register("config.sft_batch")
def check_sft_batch(ctx: CheckContext) -> None:
    """rft sft: the batch splits over the processes (over their sequence-parallel groups, which hold the same rows),
    and a process's share over its micro-batches."""
    data, world_size = ctx.cfg.data, ctx.data_parallel
    micro = data.micro_batch_size_per_gpu
    if data.train_batch_size % world_size:
        where = f"the number of processes ({world_size})" if ctx.sp == 1 else \
            f"the number of sequence-parallel groups ({ctx.world_size} processes / ulysses_sequence_parallel_size " \
            f"{ctx.sp} = {world_size})"
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size}) must be a multiple of {where}: "
            + suggest_multiple("data.train_batch_size", world_size, data.train_batch_size)
        )
    local = data.train_batch_size // world_size  # rows per process and step
    if local % micro and micro < local:
        raise ConfigError(
            f"data.train_batch_size's share per process ({local} rows) must be a multiple of "
            f"data.micro_batch_size_per_gpu ({micro}) or at most one micro-batch: "
            + suggest_divisor("data.micro_batch_size_per_gpu", local, micro)
        )


@CHECKS.register("config.dpo_batch")
def check_dpo_batch(ctx: CheckContext) -> None:
    """rft dpo: the batch of pairs splits into micro-batches on every process."""
    data, world_size = ctx.cfg.data, ctx.world_size
    micro = data.micro_batch_size_per_gpu
    if data.train_batch_size % (micro * world_size):
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size} pairs) must be a multiple of "
            f"data.micro_batch_size_per_gpu ({micro}) x processes ({world_size}): "  # 1: trainer.dpo refuses more
            + suggest_divisor("data.micro_batch_size_per_gpu", data.train_batch_size // world_size, micro)
        )
