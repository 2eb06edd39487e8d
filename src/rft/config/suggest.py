"""What to say about a key (or input) nobody knows: the nearest known one ("did you mean") and the known ones at
that place, nearest first. The one place close matches are computed, for every unknown-key message: the verl-style
schemas (`rft.config.load`), the Trinity-RFT dialect, the components' inputs and the studio's live check.

Close means difflib's ratio of at least 0.6 (`difflib.get_close_matches`' default): `total_step` finds
`total_steps`, `lrr` finds `lr`, `foo` finds nothing under `data` and the message lists the keys alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence

CUTOFF = 0.6
_STEPS = ("total_training_steps", "total_steps")
_EPOCHS = ("total_epochs",)
ALIASES: dict[str, tuple[str, ...]] = {
    "total_steps": _STEPS, "total_step": _STEPS, "max_steps": _STEPS, "num_steps": _STEPS, "train_steps": _STEPS,
    "num_train_steps": _STEPS, "num_training_steps": _STEPS, "training_steps": _STEPS, "steps": _STEPS,
    "epochs": _EPOCHS, "num_epochs": _EPOCHS, "num_train_epochs": _EPOCHS, "max_epochs": _EPOCHS,
    "learning_rate": ("lr",),
}
"""Other trainers' names (Trinity-RFT's, Hugging Face Trainer's and TRL's) for a key whose own name spells further
from them than a key that means something else: `total_steps` is closer to `total_epochs` than to
`total_training_steps` by difflib's ratio. The first of a name's targets present among the known keys is suggested
before any close spelling."""


def _close(name: str, known: Sequence[str], n: int) -> list[str]:
    """Up to `n` of `known` nearest `name`: its alias present there, then difflib's close matches, closest first."""
    alias = [k for k in ALIASES.get(name, ()) if k in known and k != name][:1]
    close = difflib.get_close_matches(name, list(known), n=n, cutoff=CUTOFF)
    return [*alias, *(k for k in close if k not in alias)][:n]


def nearest_first(name: str, known: Sequence[str]) -> list[str]:
    """`known` with its close matches to `name` first (closest first), then the rest in their own order."""
    close = _close(name, known, len(known))
    return [*close, *(k for k in known if k not in close)]


def did_you_mean(name: str, known: Sequence[str], spell: Callable[[str], str] = lambda k: f"'{k}'") -> str:
    """"did you mean 'x'?" naming the closest of `known` to `name` (as `spell` writes it; another trainer's name
    for it first, `ALIASES`), or "" when none is close."""
    close = _close(name, known, 1)
    return f"did you mean {spell(close[0])}?" if close else ""


def key_hint(key: str, known: Sequence[str], listed_as: str = "Allowed keys") -> str:
    """The rest of the one line about the unknown dotted `key`, whose last part is none of `known` (the names valid
    beside it): "did you mean 'trainer.total_training_steps'? Allowed keys under 'trainer': total_training_steps,
    total_epochs, ...", every known name listed, the nearest first."""
    parent, _, leaf = key.rpartition(".")
    place = f"under '{parent}'" if parent else "at the top level"
    hint = did_you_mean(leaf, known, lambda k: f"'{parent}.{k}'" if parent else f"'{k}'")
    listed = f"{listed_as} {place}: {', '.join(nearest_first(leaf, known))}" if known else f"no keys {place}"
    return f"{hint} {listed}" if hint else listed


def override_key(item: str) -> str:
    """The dotted key of a command-line override `key=value` (`+key=value` too)."""
    return item.split("=", 1)[0].lstrip("+")


def origin(key: str, overrides: Sequence[str] = (), path: str | None = None) -> str:
    """Where the dotted `key` came from: "command line (key=value)" when an override set it (or a section holding
    it, or a key below it), else the file `path` ("" when there is none)."""
    for item in overrides:
        given = override_key(item)
        if given == key or key.startswith(given + ".") or given.startswith(key + "."):
            return f"command line ({item})"
    return str(path) if path else ""


_TRL_SHARED = {
    "max_steps": "trainer.total_training_steps", "num_train_epochs": "trainer.total_epochs",
    "output_dir": "trainer.default_local_dir", "seed": "trainer.seed", "save_steps": "trainer.save_freq",
    "eval_steps": "trainer.test_freq", "report_to": "trainer.logger",
}
_TRL_SFT = {
    **_TRL_SHARED, "save_total_limit": "trainer.max_ckpt_to_keep", "model_name_or_path": "model.partial_pretrain",
    "learning_rate": "optim.lr",
    "weight_decay": "optim.weight_decay", "warmup_ratio": "optim.warmup_steps_ratio", "max_grad_norm": "optim.clip_grad",
    "lr_scheduler_type": "optim.lr_scheduler", "max_length": "data.max_length",
    "per_device_train_batch_size": "data.micro_batch_size_per_gpu", "gradient_checkpointing":
        "model.enable_gradient_checkpointing", "padding_free": "use_remove_padding",
}
TRL_KEYS: dict[str, dict[str, str]] = {
    "RFTConfig": {
        **_TRL_SHARED, "save_total_limit": "trainer.max_actor_ckpt_to_keep",
        "model_name_or_path": "actor_rollout_ref.model.path",
        "learning_rate": "actor_rollout_ref.actor.optim.lr", "weight_decay": "actor_rollout_ref.actor.optim.weight_decay",
        "warmup_ratio": "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
        "lr_scheduler_type": "actor_rollout_ref.actor.optim.lr_scheduler_type",
        "max_grad_norm": "actor_rollout_ref.actor.grad_clip",
        "gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
        "num_generations": "actor_rollout_ref.rollout.n", "max_prompt_length": "data.max_prompt_length",
        "max_completion_length": "data.max_response_length", "temperature": "actor_rollout_ref.rollout.temperature",
        "top_p": "actor_rollout_ref.rollout.top_p", "top_k": "actor_rollout_ref.rollout.top_k",
        "num_iterations": "actor_rollout_ref.actor.ppo_epochs", "epsilon": "actor_rollout_ref.actor.clip_ratio",
        "epsilon_high": "actor_rollout_ref.actor.clip_ratio_high",
        "beta": "actor_rollout_ref.actor.kl_loss_coef (with actor_rollout_ref.actor.use_kl_loss=true)",
        "scale_rewards": "algorithm.norm_adv_by_std_in_grpo",
        "loss_type": "actor_rollout_ref.actor.loss_agg_mode (TRL's grpo: seq-mean-token-mean; bnpo, dapo: "
                     "token-mean; dr_grpo: seq-mean-token-sum-norm)",
        "padding_free": "actor_rollout_ref.model.use_remove_padding",
    },
    "SFTConfig": _TRL_SFT,
    "DPOConfig": {**{k: v for k, v in _TRL_SFT.items() if k != "padding_free"}, "beta": "algorithm.beta",
                  "loss_type": "algorithm.loss_type", "label_smoothing": "algorithm.label_smoothing"},
}
"""TRL's flat config names (TrainingArguments, GRPOConfig for rft train's RFTConfig, SFTConfig, DPOConfig) given at
the top level of a config of the schema named: rft's (verl's) dotted key for each, said in the unknown-key line.
Where the two differ in more than the name, the value says how."""


def trl_key(schema: str, key: str) -> str:
    """"that is TRL's name: rft's (verl's) key is <dotted key>. " for TRL's `key` in a config of `schema`
    (`TRL_KEYS`), else ""."""
    rft = TRL_KEYS.get(schema, {}).get(key)
    return f"that is TRL's name: rft's (verl's) key is {rft}. " if rft else ""
