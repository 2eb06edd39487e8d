"""Optimizers and learning-rate schedules by name: transformers' `TrainingArguments.optim` and `lr_scheduler_type`
vocabularies, built from torch (or the optional package a name needs).

`optimizer_unavailable(name)` says why a name cannot run here (a package that is not installed, or an optimizer
whose update rft's loop cannot drive); the config validation asks it before any model loads, so a refused name
never gets as far as `make_optimizer`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable

import torch
from torch import nn

from rft.config.schema import DEFAULT_OPTIMIZER, OPTIMIZER_NAMES, SCHEDULER_NAMES

PLATEAU = "reduce_lr_on_plateau"

# names that need a package; {name: (module, pip name)}
_NEEDS_PACKAGE = {"ademamix": ("bitsandbytes", "bitsandbytes"), "grokadamw": ("grokadamw", "grokadamw")}
# names rft refuses whatever is installed, with the reason
_NEVER = {
    "galore_adamw": "GaLore projects the gradients of the modules named by TrainingArguments.optim_target_modules, "
                    "which has no input here (and needs the galore-torch package)",
    "lomo": "LOMO fuses the parameter update into the backward pass; rft's update (mini- and micro-batches, "
            "gradient clipping, then one step) cannot drive it",
    "adalomo": "AdaLomo fuses the parameter update into the backward pass; rft's update (mini- and micro-batches, "
               "gradient clipping, then one step) cannot drive it",
    "schedule_free_sgd": "schedule-free optimizers evaluate at averaged weights (optimizer.train()/eval() swaps "
                         "around every validation and save), which rft's loop does not do",
}


def optimizer_unavailable(name: str) -> str | None:
    """None when `name` can be built here, else the reason it cannot."""
    if name not in OPTIMIZER_NAMES:
        return f"unknown optimizer; choose one of {list(OPTIMIZER_NAMES)}"
    if name in _NEVER:
        return _NEVER[name]
    if name in _NEEDS_PACKAGE:
        module, pip_name = _NEEDS_PACKAGE[name]
        if importlib.util.find_spec(module) is None:
            return f"needs the {pip_name} package, which is not installed"
    return None


def _adam_kwargs(cfg) -> dict:
    return {"lr": cfg.lr, "betas": tuple(cfg.betas), "eps": cfg.eps, "weight_decay": cfg.weight_decay}


def _adafactor(params: list, cfg) -> torch.optim.Optimizer:
    from transformers.optimization import Adafactor

    # transformers' Trainer for optim=adafactor: an external learning rate, no relative step / parameter scaling
    return Adafactor(params, lr=cfg.lr, scale_parameter=False, relative_step=False, warmup_init=False,
                     weight_decay=cfg.weight_decay)


def _ademamix(params: list, cfg) -> torch.optim.Optimizer:
    import bitsandbytes as bnb

    b1, b2 = cfg.betas
    return bnb.optim.AdEMAMix(params, lr=cfg.lr, betas=(b1, b2, 0.9999), alpha=5.0, eps=cfg.eps,
                              weight_decay=cfg.weight_decay)


def _grokadamw(params: list, cfg) -> torch.optim.Optimizer:
    from grokadamw import GrokAdamW

    return GrokAdamW(params, **_adam_kwargs(cfg))


_BUILDERS: dict[str, Callable[[list, object], torch.optim.Optimizer]] = {
    "adamw_torch": lambda p, c: torch.optim.AdamW(p, **_adam_kwargs(c)),
    "adamw_torch_fused": lambda p, c: torch.optim.AdamW(p, **_adam_kwargs(c), fused=True),
    "adafactor": _adafactor,
    "ademamix": _ademamix,
    "sgd": lambda p, c: torch.optim.SGD(p, lr=c.lr, weight_decay=c.weight_decay),
    "adagrad": lambda p, c: torch.optim.Adagrad(p, lr=c.lr, weight_decay=c.weight_decay),
    "rmsprop": lambda p, c: torch.optim.RMSprop(p, lr=c.lr, weight_decay=c.weight_decay),
    "grokadamw": _grokadamw,
}


STATE_VALUES: dict[str, int] = {"adamw_torch": 2, "adamw_torch_fused": 2, "ademamix": 3, "grokadamw": 2,
                                 "adagrad": 1, "rmsprop": 1, "sgd": 0, "adafactor": 0}
"""Values of optimizer state each trainable parameter holds, at least (Adam: two moments; AdEMAMix: three; SGD
without momentum: none; Adafactor's are factored, rows plus columns, so ~0 a parameter)."""


def make_optimizer(params: Iterable[nn.Parameter], optim_cfg, name: str = DEFAULT_OPTIMIZER) -> torch.optim.Optimizer:
    """The optimizer `name` over `params` with lr / betas / eps / weight_decay from `optim_cfg` (the Adam-family
    hyper-parameters are used by the names that have them). ValueError for a name `optimizer_unavailable` refuses."""
    reason = optimizer_unavailable(name)
    if reason is not None:
        raise ValueError(f"optimizer {name!r}: {reason}")
    return _BUILDERS[name](list(params), optim_cfg)


def make_named_scheduler(optimizer: torch.optim.Optimizer, name: str, warmup_steps: int, total_steps: int):
    """transformers' `get_scheduler(name)` with its defaults (cosine: half a cycle to 0, cosine_with_restarts: one
    cycle, polynomial: power 1 to lr_end 1e-7). reduce_lr_on_plateau follows the validation reward (mode max,
    stepped by the trainer after each validation); it has no warmup, as in transformers."""
    from transformers import get_scheduler

    if name not in SCHEDULER_NAMES:
        raise ValueError(f"unknown lr_scheduler_type {name!r}; valid: {', '.join(SCHEDULER_NAMES)}")
    kwargs = {"mode": "max"} if name == PLATEAU else None
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps,
                         scheduler_specific_kwargs=kwargs)


def is_plateau(scheduler) -> bool:
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def validation_reward(metrics: dict[str, float]) -> float | None:
    """The mean of the validation rewards in `metrics` (`val-core/<data_source>/reward/mean@n`), None if none."""
    values = [v for k, v in metrics.items() if k.startswith("val-core/") and "/reward/mean@" in k]
    return sum(values) / len(values) if values else None


def plateau_step(scheduler, metrics: dict[str, float]) -> None:
    """Step a reduce_lr_on_plateau schedule on the validation reward of `metrics`, if the step validated."""
    reward = validation_reward(metrics)
    if is_plateau(scheduler) and reward is not None:
        scheduler.step(reward)
