"""Trinity-RFT's config dialect (../shared/spec/trinity_config_reference.md), translated to rft's verl keys.

A Trinity YAML is recognised by its top-level sections (project, name, mode, model, cluster, buffer, explorer,
synchronizer, monitor, ...; or algorithm.algorithm_type). OmegaConf resolves its interpolations first (`${model.
model_path}`, `${oc.env:VAR,default}`). The parts rft's engine has map onto canonical keys (`TRINITY_KEYS` in
docs/config-dialects: this module's tables); every other key is refused by its Trinity name with the reason, all
at once, before anything loads. A `stages` list becomes rft's stages (`rft.trainer.stages`), each stage's Trinity
sections merged over the global ones, as Trinity does. This module maps keys and nothing else: the mapped
config is loaded and checked as a verl one (`rft.trainer.configure.load_trinity`).

Trinity's explorer / buffer / trainer / synchronizer keys are rft's own (`mode` -> trainer.mode, `synchronizer.*`,
`buffer.trainer_input.experience_buffer.*` -> experience_buffer.*, taskset storage types -> data.task_storage;
docs/scaling.md; `cluster.ray_address` -> ray_init.address: docs/cluster.md); what rft's engine does not have is
refused.

`trainer.trainer_config` (verl keys) goes into an RL run as it is; a key it sets that a Trinity key sets too, to
another value, is refused (one of the two would be ignored). An SFT stage takes the keys that have an SFT meaning
(`SFT_FROM_VERL`: the model's LoRA / gradient checkpointing, the optimizer and its schedule, grad_clip, the micro
batch, checkpoint retention, test_freq, ...), refuses the ones it cannot honour at other than verl's default
(`SFT_DEFAULT_ONLY`), and leaves the RL-only rest to the file's RL stages; a file without an RL stage names those in
a note.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from rft.config.errors import ConfigError
from rft.config.load import flatten
from rft.config.suggest import did_you_mean, key_hint, origin
from rft.dialects.trinity_keys import trinity_keys, trinity_type
from rft.dialects.trinity_reasons import accepted_at, no_effect, refusal_reason

# top-level keys only Trinity configs have (verl's are data, actor_rollout_ref, critic, reward_model, algorithm,
# trainer, custom_reward_function)
MARKERS = ("project", "name", "mode", "checkpoint_root_dir", "continue_from_checkpoint", "ray_namespace", "model",
           "cluster", "buffer", "explorer", "monitor", "service", "data_processor", "log")
# sections a Trinity config may have beside them (synchronizer is also a section of rft's own keys, same names)
SECTIONS = (*MARKERS, "synchronizer", "algorithm", "trainer", "stages", "group")

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
M = "actor_rollout_ref.model"
# Trinity's algorithm types with their defaults (Trinity-RFT's AlgorithmType.default_config, 0.5.2 and 0.6.0:
# docs/algorithms.md lists every one, with those rft refuses in TEACHER_ALGORITHMS / REFUSED_ALGORITHMS)
_GRPO = {"repeat_times": 2, "advantage_fn": "grpo", "policy_loss_fn": "ppo", "kl_penalty_fn": "none", "kl_loss_fn": "k2",
         "entropy_loss_fn": "default"}
ALGORITHMS = {
    "grpo": _GRPO,
    "grpo_verl": _GRPO,  # grpo with the advantages computed in Trinity's trainer: the same numbers
    "opmd": {**_GRPO, "advantage_fn": "opmd", "policy_loss_fn": "opmd"},
    "ppo": {**_GRPO, "repeat_times": 1, "advantage_fn": "ppo"},
    "reinforceplusplus": {**_GRPO, "advantage_fn": "reinforceplusplus"},
    "rloo": {**_GRPO, "advantage_fn": "rloo"},
    "asymre": {**_GRPO, "advantage_fn": "asymre", "policy_loss_fn": "opmd", "kl_loss_fn": "none",
               "entropy_loss_fn": "none"},
    "topr": {**_GRPO, "advantage_fn": "reinforce", "policy_loss_fn": "topr"},
    "cispo": {**_GRPO, "policy_loss_fn": "cispo"},
    "gspo": {**_GRPO, "policy_loss_fn": "gspo"},
    "sapo": {**_GRPO, "policy_loss_fn": "sapo"},
    "sppo": {**_GRPO, "advantage_fn": "opmd", "policy_loss_fn": "sppo", "kl_loss_fn": "none", "entropy_loss_fn": "none"},
    "rec": {**_GRPO, "advantage_fn": "rec", "policy_loss_fn": "rec"},
    "multi_step_grpo": {**_GRPO, "repeat_times": 8, "advantage_fn": "step_wise_grpo"},
    "dapo": {**_GRPO, "repeat_times": 16, "kl_loss_fn": "none"},  # 0.6.0; DAPO's clip and filters are its YAML's
    # on-policy distillation (its teacher explorer.auxiliary_models[0]): rft's distillation section (`_distill`)
    **{name: {**_GRPO, "repeat_times": 8, "advantage_fn": name, "kl_loss_fn": "none", "entropy_loss_fn": "none"}
       for name in ("on_policy_distill", "jsd")},
    # the SFT loss on the rollouts: Trinity's raft has no advantage (its RAFT workflows return the successful
    # experiences); rft ranks them by reward (adv_estimator raft: each prompt's best); repeat_times is
    # AlgorithmConfig's default
    "raft": {"repeat_times": 1, "advantage_fn": None, "policy_loss_fn": "sft", "kl_penalty_fn": "none",
             "kl_loss_fn": "none", "entropy_loss_fn": "none"},
    "sft": {"policy_loss_fn": "sft", "kl_loss_fn": "none", "entropy_loss_fn": "none"},
    # offline, in mode train: rft dpo's keys (the pairs are Trinity's two experiences of a task, hence repeat_times 2)
    "dpo": {"repeat_times": 2, "policy_loss_fn": "dpo", "kl_loss_fn": "k2", "entropy_loss_fn": "default"},
    # GRPO on the experiences plus SFT on the expert rows of an auxiliary buffer (algorithm.mix, data.expert)
    "mix": {"repeat_times": 8, "advantage_fn": "grpo", "policy_loss_fn": "mix", "kl_penalty_fn": "none",
            "kl_loss_fn": "k2", "entropy_loss_fn": "mix", "sample_strategy": "mix"},
    # CHORD: mix with mu scheduled and the SFT loss's tokens weighted by phi (algorithm.mix.mu_valley, ...)
    "mix_chord": {"repeat_times": 8, "advantage_fn": "grpo", "policy_loss_fn": "mix_chord", "kl_penalty_fn": "none",
                  "kl_loss_fn": "k2", "entropy_loss_fn": "mix", "sample_strategy": "mix"},
}
# Trinity's algorithm types (and advantage functions) rft does not run, with the reason
REFUSED_ALGORITHMS = {
    "gigpo": "GiGPO's step-level groups are the anchor states of an environment's trajectory, one experience per "
             "step; rft's workflows return one experience per episode",
    "m2po": "Trinity-RFT's m2po algorithm type came after its 0.6.0 release, whose defaults rft has not read; its "
            "loss is rft's: set algorithm_type: grpo with policy_loss_fn: m2po",
    "cpt": "continued pre-training trains on plain text, every token (Trinity's cpt schema); rft sft trains on "
           "prompt / response or messages rows only",
}
REFUSED_ADVANTAGE_FNS = {
    **{k: v for k, v in REFUSED_ALGORITHMS.items() if k in ("gigpo",)},
}
# Trinity-RFT's mix_chord policy-loss arguments (its defaults: no warm-up or decay, peak = valley = 0.1, phi on)
CHORD_ARGS = {"mu_peak": "algorithm.mix.mu", "mu_valley": "algorithm.mix.mu_valley",
              "mu_warmup_steps": "algorithm.mix.mu_warmup_steps", "mu_decay_steps": "algorithm.mix.mu_decay_steps"}
OFFLINE = ("sft", "dpo")  # algorithm types run by an offline trainer (SFT-style sections), in mode train
# Trinity-RFT's mix policy loss is told the batch sizes to rebuild its normalisers per micro-batch; rft takes them
# from each mini-batch itself (the global normalisers), so these change nothing here (accepted with a note)
MIX_NORMALISER_ARGS = ("use_dynamic_bsz", "repeat_times", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu",
                       "ngpus_trainer", "read_batch_size_usual", "read_batch_size_expert", "train_batch_size_usual",
                       "train_batch_size_expert", "gradient_accumulation")
MIX_NORMALISERS = ("the sizes Trinity-RFT's mix loss is told to rebuild its normalisers per micro-batch; rft normalises "
                   "the policy loss and the SFT loss by the experiences and the expert rows of each mini-batch "
                   "itself (the global normalisers)")
SAMPLE_STRATEGIES = ("default", "warmup")  # warmup: Trinity-RFT's deprecated alias of default
MESSAGES_KEY = "message"  # Trinity-RFT's FormatConfig.messages_key default (rft's SFT default is "messages")
def _number(value: Any) -> Any:
    """A number Trinity's YAML may give as a string ('1e-6': YAML 1.1 reads no exponent without a dot as a float),
    as a float; anything else as it is."""
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


# Trinity-RFT's advantage_fn -> (rft's adv_estimator, {its advantage_fn_args: rft's key, or a function (value,
# out) -> a refusal reason or None}); Trinity's epsilon is rft's algorithm key of the same name only at 1e-6
_EPS = {"epsilon": lambda v, out: None if _number(v) == 1e-6 else "rft's group std epsilon is 1e-6; remove it"}
_GRPO_ARGS = {**_EPS, "std_threshold": "algorithm.std_threshold", "std_cal_level": "algorithm.std_cal_level"}
ADVANTAGE_FNS = {
    "ppo": ("gae", {"gamma": "algorithm.gamma", "lam": "algorithm.lam"}),
    "grpo": ("grpo", {**_GRPO_ARGS,
                      "duplicate_experiences": lambda v, out: None if not v else (
                          "rft leaves the groups under std_threshold out of the loss; it copies no other group in "
                          "their place"),
                      "rank_penalty": lambda v, out: None if v is None else (
                          "rft has no rank-based reward correction (arXiv:2506.02355)")}),
    "grpo_verl": ("grpo", _EPS),
    # one rft experience is one episode (its workflows' multi-turn conversations), so the last step is the only
    # step and enable_step_norm divides by 1
    "step_wise_grpo": ("grpo", {**_GRPO_ARGS, "enable_step_norm": lambda v, out: None}),
    "reinforceplusplus": ("reinforce_plus_plus", {"gamma": "algorithm.gamma"}),
    "reinforce": ("reinforce", {}),
    "remax": ("remax", {}),
    "rloo": ("rloo", {}),
    **{name: ("opmd", {"opmd_baseline": "algorithm.opmd_baseline", "tau": "algorithm.tau"})
       for name in ("opmd", "opmd_verl")},
    **{name: ("asymre", {"baseline_shift": "algorithm.baseline_shift"}) for name in ("asymre", "asymre_verl")},
    "rec": ("rec", {**_EPS, "std_normalize": "algorithm.norm_adv_by_std_in_grpo",
                    "drop": lambda v, out: None if v is None else (
                        "REC's balance drop discards negative experiences at random; rft has no such drop")}),
    # Trinity-RFT's earlier mix advantage: GRPO on the experiences, 0 on the expert rows (rft's advantages are
    # always computed before the expert rows join the batch)
    "mix": ("grpo", _EPS),
    # kl_coef (teacher_logp - student_logp) per token, no task reward: rft's distillation with k1 and the task
    # reward left out (`_distill`), whose estimator (grpo) reads zero rewards and adds nothing
    "on_policy_distill": ("grpo", {"kl_coef": "distillation.distillation_loss.distillation_loss_coef"}),
    # -kl_coef x the sampled token's JSD (lambda_coef the teacher's weight in the mixture): rft's token_jsd
    "jsd": ("grpo", {"kl_coef": "distillation.distillation_loss.distillation_loss_coef",
                     "lambda_coef": "distillation.distillation_loss.jsd_beta",
                     "temperature": lambda v, out: None if _number(v) == 1.0 else (
                         "Trinity-RFT divides both log-probs by it before the JSD; rft takes them as the rollout's "
                         "temperature gives them: remove it or set 1.0"),
                     "chunk_size": lambda v, out: None}),  # memory only: token_jsd is per token, no chunks
    # GRPO's advantages, then the entropy filter (algorithm.entropy_clip, whose mode `_algorithm` sets)
    "clipb": ("grpo", {**_EPS, "mu": "algorithm.entropy_clip.mu"}),
    "clipv": ("grpo", {**_EPS, "mu": "algorithm.entropy_clip.mu", "max_frac": "algorithm.entropy_clip.max_frac"}),
}
# Trinity's advantage_fn_args rft must set where Trinity's default differs from rft's (rec: std_normalize false)
ADVANTAGE_DEFAULTS = {"rec": {"std_normalize": False}, "on_policy_distill": {"kl_coef": 1.0},
                      "clipb": {"mu": 2.5}, "clipv": {"mu": 8.5},
                      "jsd": {"kl_coef": 1.0, "lambda_coef": 0.5}}
_CLIP = {"clip_range": f"{A}.clip_ratio", "clip_range_low": f"{A}.clip_ratio_low",
         "clip_range_high": f"{A}.clip_ratio_high"}
# Trinity-RFT's policy_loss_fn -> (rft's loss_mode, {its policy_loss_fn_args: rft's key, a list of keys, or a
# function (value, out) -> a refusal reason or None}, Trinity's default_args where they differ from rft's defaults).
# loss_agg_mode, which every one but rec takes, is not in the tables: `_policy_loss_agg` says which applies.
POLICY_LOSS_FNS = {
    "ppo": ("vanilla", {**_CLIP, "clip_ratio_c": f"{A}.clip_ratio_c",
                        **{k: (lambda v, out, k=k: None if not v else f"={v!r}: rft's ppo loss has no {k}")
                           for k in ("enable_sequence_masking", "fallback_to_policy_gradient")},
                        "delta_sequence_masking": lambda v, out: None}, {}),
    "opmd": ("opmd", {"tau": f"{A}.policy_loss.tau"}, {}),
    # GSPO's defaults after verl's discussion (its PR 2775): a sequence ratio near 1, so a narrow clip
    "gspo": ("gspo", _CLIP, {"clip_range_low": 0.0003, "clip_range_high": 0.0004}),
    # MiniMax-M1 bounds only the IS weight's top: clip_range_low 1.0 leaves the bottom open
    "cispo": ("cispo", {**_CLIP, "enable_mask_clip": lambda v, out: None if not v else (
                  "rft's cispo is the paper's loss, every token weighted, none masked"),
                        "mask_clip_range_low": lambda v, out: None, "mask_clip_range_high": lambda v, out: None},
              {"clip_range_low": 1.0, "clip_range_high": 0.28}),
    "sapo": ("sapo", {"tau_pos": f"{A}.tau_pos", "tau_neg": f"{A}.tau_neg"}, {}),
    "topr": ("topr", {"advantage_threshold": f"{A}.policy_loss.topr_advantage_threshold"}, {}),
    "sppo": ("sppo", {"epsilon": [f"{A}.clip_ratio_low", f"{A}.clip_ratio_high"]}, {"epsilon": 0.3}),
    "rec": ("rec", {"epsilon_low": f"{A}.clip_ratio_low", "epsilon_high": f"{A}.clip_ratio_high",
                    "epsilon_low_prime": f"{A}.policy_loss.rec.clip_ratio_low_prime",
                    "epsilon_high_prime": f"{A}.policy_loss.rec.clip_ratio_high_prime",
                    **{k: f"{A}.policy_loss.rec.{k}" for k in ("clip_mode", "weight", "regularizer",
                                                               "regularizer_coef", "temp")}}, {}),
    "importance_sampling": ("importance_sampling", {}, {}),
    "sft": ("sft", {}, {}),
    # after 0.6.0 (its main branch): M2PO's mask over the mini-batch; its default_args are rft's defaults
    "m2po": ("m2po", {"m2_threshold": f"{A}.policy_loss.m2_threshold",
                      "log_ratio_clip": f"{A}.policy_loss.log_ratio_clip"}, {}),
}
# Trinity fills policy_loss_fn_args with the function's default_args only when the section is left out; arguments
# given in part meet the function's own parameter defaults, which differ here (None: Trinity's function raises
# without it, so rft refuses)
POLICY_LOSS_INIT_DEFAULTS = {"rec": {"epsilon_low_prime": 0.4, "epsilon_high_prime": 0.4},
                             **{name: {"clip_range_low": None, "clip_range_high": None} for name in ("ppo", "gspo")}}
# the policy loss's own aggregation where policy_loss_fn_args has no loss_agg_mode (rec takes none: its token mean,
# the sequences' mean with gspo-one-side)
POLICY_LOSS_OWN_AGG = {"gspo": "seq-mean-token-mean"}
KL_FNS = ("k1", "k2", "k3", "low_var_kl", "abs")
# Trinity-RFT's experience-buffer keys, which are rft's experience_buffer section (same names)
EXPERIENCE_BUFFER_KEYS = ("storage_type", "path", "max_read_timeout", "use_priority_queue", "reuse_cooldown_time")
SYNCHRONIZER_KEYS = ("sync_method", "sync_interval", "sync_offset", "sync_timeout")
# Trinity-RFT's task format keys that are rft's data keys (same names)
FORMAT_KEYS = ("system_prompt", "system_prompt_key", "response_key", "tools_key", "chat_template", "image_key",
               "reply_prefix")
# explorer keys that are rft's workflow keys (same names)
PLUGIN_DIRS_ENV = "TRINITY_PLUGIN_DIRS"
WORKFLOW_KEYS = ("runner_per_model", "max_timeout", "max_retry_times", "env_vars", "auxiliary_models")
STORAGE_TYPES = ("file", "sql", "queue")  # a taskset's storage_type (Trinity-RFT's StorageType)
SAVE_STRATEGIES = ("single_thread", "single_process", "single_node", "unrestricted")

# trainer_config keys (verl) an SFT stage honours, and the SFT key each lands on
SFT_FROM_VERL = {
    **{f"{M}.{k}": f"model.{k}" for k in ("lora_rank", "lora_alpha", "target_modules", "exclude_modules",
                                          "enable_gradient_checkpointing", "override_config", "external_lib",
                                          "trust_remote_code", "use_liger")},
    f"{M}.use_remove_padding": "use_remove_padding",
    f"{A}.strategy": "model.strategy",
    f"{A}.grad_clip": "optim.clip_grad",
    f"{A}.ppo_micro_batch_size_per_gpu": "data.micro_batch_size_per_gpu",
    f"{A}.ulysses_sequence_parallel_size": "ulysses_sequence_parallel_size",
    **{f"{A}.optim.{k}": f"optim.{k}" for k in ("lr", "weight_decay", "betas", "eps", "min_lr_ratio")},
    f"{A}.optim.lr_warmup_steps_ratio": "optim.warmup_steps_ratio",
    f"{A}.optim.warmup_style": "optim.lr_scheduler",  # constant | cosine: the SFT schedules of the same names
    f"{A}.checkpoint.save_contents": None,  # checked below: an SFT checkpoint holds model, optimizer, extra
    f"{A}.checkpoint.load_contents": None,
    **{f"trainer.{k}": f"trainer.{k}" for k in ("total_epochs", "total_training_steps", "project_name",
                                                "experiment_name", "logger", "seed", "device", "save_freq",
                                                "test_freq", "resume_mode", "resume_from_path", "default_hdfs_dir",
                                                "default_local_dir", "nnodes", "n_gpus_per_node",
                                                "bad_update_limit", "monitor_args")},
    "trainer.max_actor_ckpt_to_keep": "trainer.max_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep": None,  # no critic in an SFT stage: must be null or equal the actor's
}
# trainer_config keys an SFT stage cannot honour: accepted at verl's default only
SFT_DEFAULT_ONLY = (f"{A}.optim.lr_warmup_steps", f"{A}.optim.num_cycles", f"{A}.optim.total_training_steps",
                    f"{A}.optim.optimizer", f"{A}.optim.lr_scheduler_type", f"{M}.use_fused_kernels",
                    f"{M}.fused_kernel_options", f"{A}.use_torch_compile", f"{A}.use_dynamic_bsz",
                    f"{M}.enable_activation_offload", f"{M}.use_shm")


_SCALARS = ("project", "group", "name", "mode", "checkpoint_root_dir", "continue_from_checkpoint", "ray_namespace")


def is_trinity(raw: Any) -> bool:
    if not hasattr(raw, "keys"):
        return False
    algorithm = raw.get("algorithm") if hasattr(raw, "get") else None
    return any(k in raw for k in MARKERS) or (hasattr(algorithm, "keys") and "algorithm_type" in algorithm)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _said_as(out: dict) -> dict[str, str]:
    """{rft key: the Trinity key that set it}, kept in `out` while it is translated (`_set`'s sources)."""
    return out.setdefault("_trinity", {}).setdefault("said_as", {})


def _set(out: dict, key: str, value: Any, source: str | None = None) -> None:
    """rft's `key` = `value`; `source`: the Trinity key it came from, recorded for the run's messages (`said_as`)."""
    if source is not None:
        _said_as(out)[key] = source
    node = out
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _set_total_steps(out: dict, steps: Any, source: str) -> None:
    """trainer.total_training_steps from buffer.total_steps or trainer.total_steps. Given both, the run ends at the
    smaller, as Trinity's does: its explorer stops after buffer.total_steps steps (the trainer then runs out of
    experiences), its trainer after trainer.total_steps. A value that is no step count is kept for validation to
    refuse. `source`: the Trinity key that gives `steps`; given both, the run's messages name both."""
    def count(v):
        return isinstance(v, int) and not isinstance(v, bool)

    if steps is None:
        return
    before = out.get("trainer", {}).get("total_training_steps")
    said = out.get("_trinity", {}).get("said_as", {}).get("trainer.total_training_steps")
    if said is not None:  # both: to raise the steps, raise both
        source = f"{said} and {source} (the run ends at the smaller)"
    if before is None or not count(steps) or (count(before) and steps < before):
        _set(out, "trainer.total_training_steps", steps)
    _said_as(out)["trainer.total_training_steps"] = source  # the smaller's or not: to raise it, raise both


class _Translation:
    """The refusals of one translation, (key, reason) pairs, and its notes, (key, value, why) of the keys accepted
    that change nothing here; `prefix` ("stages[i].") goes before every key a stage's translation names."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.refusals: list[tuple[str, str]] = []
        self.notes: list[tuple[str, Any, str]] = []
        self.rl_only: list[str] = []  # keys an SFT stage leaves to the RL stages (named when there are none)
        self.said_as: dict[str, str] = {}  # rft key -> the Trinity key that set it (`_set`'s source)

    def refuse(self, key: str, reason: str) -> None:
        refusal = (key if key.startswith("stages[") else self.prefix + key, reason)
        if refusal not in self.refusals:  # a default several tasksets inherit: said once
            self.refusals.append(refusal)

    def note(self, key: str, value: Any, why: str) -> None:
        """`key`=`value` is accepted and changes nothing here, because `why` (said once, by the real translation)."""
        self.notes.append((key if key.startswith("stages[") else self.prefix + key, value, why))

    def change(self, key: str, value: Any, now: Any, why: str) -> None:
        """`key`=`value` is taken as `now`, as Trinity-RFT's own config check takes it, because `why` (said once)."""
        self.notes.append((key if key.startswith("stages[") else self.prefix + key, value, (now, why)))

    def rest(self, section: dict, where: str, reason: str | None = None) -> None:
        """The keys of `section` nobody took: one Trinity-RFT has not is unknown (with the nearest Trinity-RFT key);
        one it has is refused by `reason`, else accepted with a note where it changes nothing here
        (`trinity_reasons.NO_EFFECT`), else refused with its own reason (`trinity_reasons.REFUSED`)."""
        known = trinity_keys(where)
        for key, value in section.items():
            full = f"{where}.{key}" if where else key
            if known is not None and key not in known:
                self.refuse(full, unknown_key(self.prefix + full, known))
            elif reason is not None:
                self.refuse(full, reason)
            elif accepted_at(where, key) == (True, value):
                continue  # Trinity-RFT's default, which rft does too
            elif accepted_at(where, key)[0]:
                self.refuse(full, f"={value!r}: {refusal_reason(where, key)}")
            elif no_effect(where, key) is not None:
                self.note(full, value, no_effect(where, key))
            else:
                self.refuse(full, refusal_reason(where, key))

    def raise_if_any(self, path: str, overrides: list[str] | tuple = ()) -> None:
        """A ConfigError of one line per refusal, each naming where its key came from (the file `path` or a
        command-line override)."""
        if self.refusals:
            raise ConfigError("\n".join(refusal_line(key, reason, path, overrides) for key, reason in self.refusals))

    def say_notes(self, path: str, overrides: list[str] | tuple = ()) -> None:
        """One `rft: note:` line per accepted key that changes nothing here, naming where it came from."""
        log = logging.getLogger("rft")
        for key, value, why in self.notes:
            if isinstance(why, tuple):  # `change`
                log.warning("rft: note: %s: %s=%r is taken as %r, as Trinity-RFT takes it: %s",
                            _origin(key, overrides, path), key, value, *why)
            else:
                log.warning("rft: note: %s: %s=%r changes nothing in rft: %s", _origin(key, overrides, path), key,
                            value, why)


def unknown_key(key: str, known: tuple[str, ...]) -> str:
    """The reason for refusing `key`, which is not Trinity-RFT's: unknown, with the nearest of the `known` keys."""
    return "unknown Trinity-RFT key; " + key_hint(key, known, "Trinity-RFT's keys")


def not_one_of(value: Any, choices: Iterable[str], reason: str) -> str:
    """The reason for refusing `value`, none of the names `choices` a Trinity key takes: "=<value>: <reason>", then
    "; did you mean 'x'?" naming the choice closest to a misspelt string (`did_you_mean`, as the verl keys'
    `rft.config.validate.choice_hint`)."""
    meant = did_you_mean(value, [c for c in choices if c != value]) if isinstance(value, str) else ""
    return f"={value!r}: {reason}" + (f"; {meant}" if meant else "")


def refusal_line(key: str, reason: str, path: str, overrides: list[str] | tuple = ()) -> str:
    """One line: where the refused `key` came from (the command line, the environment, else the file `path`),
    the key and the reason."""
    dotted = re.sub(r"\[(\d+)\]", r".\1", key)  # stages[1].x -> stages.1.x, as an override writes it
    source = ("environment" if key.startswith("$") else origin(dotted, overrides, "")
              or origin(re.sub(r"^stages\.\d+\.", "", dotted), overrides, path))  # a global key, merged into a stage
    return f"{source}: {key}{'' if reason.startswith('=') else ': '}{reason}"


def _section(value: Any, where: str) -> dict:
    """A copy of the mapping at `where` (null: empty); any other value is a ConfigError naming it."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping of keys, got {type(value).__name__} {value!r}")
    return dict(value)


TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "a boolean (true / false)", "str": "a string"}


def _typed(t: _Translation, tree: dict, where: str = "") -> dict:
    """`tree` (a resolved Trinity config, changed in place) with each scalar typed as Trinity-RFT's config classes
    type it (`trinity_keys.TYPES`), by OmegaConf's own conversion, the one Trinity's merge onto those classes makes:
    a value that came through an interpolation is a string (`${oc.env:STEPS,100}` is "100"), which an integer field
    takes as 100, a boolean field "true" as True, a string field 7 as "7". A value its field's type cannot hold is
    refused by its key."""
    from omegaconf.errors import ValidationError
    from omegaconf.nodes import BooleanNode, FloatNode, IntegerNode, StringNode

    nodes = {"int": IntegerNode, "float": FloatNode, "bool": BooleanNode, "str": StringNode}
    for key, value in list(tree.items()):
        full = f"{where}.{key}" if where else str(key)
        if isinstance(value, dict):
            _typed(t, value, full)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    _typed(t, item, f"{full}[{i}]")
        elif value is not None and isinstance(key, str) and (kind := trinity_type(where, key)):
            try:
                tree[key] = nodes[kind.rstrip("?")](value)._value()
            except ValidationError:
                t.refuse(full, f"={value!r} is not {TYPE_WORDS[kind.rstrip('?')]}, the type of this Trinity-RFT "
                               "key")
                del tree[key]  # refused: the rest is translated without it
    return tree


FOLDER_KEYS = "checkpoint_root_dir / project / group / name"
"""trainer.default_local_dir as a Trinity YAML sets it: <checkpoint_root_dir>/<project>/<group>/<name> (group
empty by default: <checkpoint_root_dir>/<project>/<name>)."""



def _not_an_argument(what: str, takes: Iterable[str]) -> str:
    """Why a function argument of a Trinity algorithm is refused: rft's `what` takes only `takes`."""
    return f"not an argument rft's {what} takes (it takes {', '.join(sorted(takes))}); remove it"


def _files(t: _Translation, where: str, path: str | None, split: str, subset: str | None = None) -> Any:
    """A taskset's data files: a jsonl/parquet file, or a folder with {split}.jsonl / {split}.parquet / split
    files in the Hugging Face layout. `subset` (Trinity-RFT's subset_name, the `name` it gives
    datasets.load_dataset) is the folder of that name in a dataset of several subsets (the Hub's layout: gsm8k's
    main/train-*.parquet); a folder without one holds a single subset, read as it is."""
    if not path:
        t.refuse(f"{where}.path", "is required (a jsonl/parquet file or a folder holding the split)")
        return None
    p = Path(path).expanduser()
    if subset and (p / subset).is_dir():
        p = p / subset
    if p.is_dir():
        for pattern in (f"{split}.jsonl", f"{split}.parquet", f"{split}-*.parquet", f"data/{split}-*.parquet",
                        f"data/{split}.jsonl", f"data/{split}.parquet", f"{split}/*.parquet", f"{split}/*.jsonl"):
            found = sorted(str(x) for x in p.glob(pattern))
            if found:
                return found if len(found) > 1 else found[0]
        t.refuse(f"{where}.path", f"={path!r} holds no {split!r} split ({split}.jsonl, {split}.parquet, ...)")
        return None
    if not p.exists() and not p.suffix:  # a folder not made yet: the layout `rft data` writes
        return str(p / f"{split}.parquet")
    return str(p)


def _fn_args(t: _Translation, out: dict, where: str, args: dict, table: dict, what: str) -> None:
    """A Trinity function's arguments onto rft's keys by `table` (an arg -> a key, a list of keys, or a function
    of (value, out) answering a refusal reason or None: honoured as it is); an argument the table lacks is refused,
    naming the arguments rft's `what` (the function) takes."""
    for key, value in args.items():
        target = table.get(key)
        if target is None:
            t.refuse(f"{where}.{key}", _not_an_argument(what, table))
        elif callable(target):
            reason = target(value, out)
            if reason is not None:
                t.refuse(f"{where}.{key}", reason if reason.startswith("=") else f"={value!r}: {reason}")
        else:
            for rft_key in [target] if isinstance(target, str) else target:
                _set(out, rft_key, value, f"{where}.{key}")


def _algorithm(t: _Translation, algo: dict, out: dict) -> str:
    """The RL algorithm keys; returns the algorithm type."""
    algo = _section(algo, "algorithm")
    kind = algo.pop("algorithm_type", "ppo")
    if kind in REFUSED_ALGORITHMS:
        t.refuse("algorithm.algorithm_type", f"={kind!r}: {REFUSED_ALGORITHMS[kind]}")
        return kind
    if kind not in ALGORITHMS:
        t.refuse("algorithm.algorithm_type", not_one_of(kind, [*ALGORITHMS, *REFUSED_ALGORITHMS],
                                                        f"rft runs {sorted(ALGORITHMS)}"))
        return kind
    a = {**ALGORITHMS[kind], **{k: v for k, v in algo.items() if v is not None}}
    algo = {k: v for k, v in algo.items() if k not in ALGORITHMS[kind]}  # the taken keys
    if kind in OFFLINE:
        return kind
    if "repeat_times" in a:
        _set(out, f"{R}.n", a["repeat_times"], "algorithm.repeat_times")
    adv = a.get("advantage_fn")
    if kind == "raft":  # the SFT loss reads no advantage: rft picks the rows to learn by reward rank
        if adv is not None:
            t.refuse("algorithm.advantage_fn", f"={adv!r}: raft's SFT loss reads no advantage (rft keeps each "
                                               "prompt's best responses); remove it")
        _set(out, "algorithm.adv_estimator", "raft")
        if a.get("advantage_fn_args"):
            t.refuse("algorithm.advantage_fn_args", "raft reads no advantage; remove them")
    elif adv in REFUSED_ADVANTAGE_FNS:
        t.refuse("algorithm.advantage_fn", f"={adv!r}: {REFUSED_ADVANTAGE_FNS[adv]}")
    elif adv not in ADVANTAGE_FNS:
        t.refuse("algorithm.advantage_fn", not_one_of(adv, [*ADVANTAGE_FNS, *REFUSED_ADVANTAGE_FNS],
                                                      f"rft has {sorted(ADVANTAGE_FNS)}"))
    else:
        if adv == "ppo" and kind != "ppo":
            # Trinity's algorithm type decides whether a critic is trained (use_critic: ppo's alone), and its ppo
            # advantage reads the critic's values: the reference's own algorithm example (grpo, advantage_fn ppo)
            # asks for GAE, which rft computes with the critic it needs, trained as ppo's; said, not silent
            logging.getLogger("rft").warning(
                "rft: note: algorithm.advantage_fn='ppo' (GAE) with algorithm_type %s: GAE reads a critic's values, "
                "so rft trains a critic (the critic.* keys; Trinity-RFT's %s trains none); remove advantage_fn for "
                "%s's own (%s), or set algorithm_type: ppo", kind, kind, kind, ALGORITHMS[kind]["advantage_fn"])
        estimator, table = ADVANTAGE_FNS[adv]
        _set(out, "algorithm.adv_estimator", estimator)
        if adv in DISTILL_MODES:
            _distill(out, DISTILL_MODES[adv])
        if adv in ("clipb", "clipv"):
            _set(out, "algorithm.entropy_clip.mode", adv)
        args = {**ADVANTAGE_DEFAULTS.get(adv, {}), **(a.get("advantage_fn_args") or {})}
        _fn_args(t, out, "algorithm.advantage_fn_args", args, table, f"{adv} advantage")
    loss = a["policy_loss_fn"]
    # Trinity's mix: its PPO loss on the experiences, mu times the SFT loss on expert rows; mix_chord: CHORD's
    chord = loss == "mix_chord"
    mix = loss == "mix" or chord
    if loss not in POLICY_LOSS_FNS and not mix:
        losses = sorted([*POLICY_LOSS_FNS, "mix", "mix_chord"])
        t.refuse("algorithm.policy_loss_fn", not_one_of(loss, losses, f"rft has {losses}"))
    elif mix:
        _set(out, f"{A}.policy_loss.loss_mode", "vanilla")
        _set(out, "algorithm.mix.enable", True)
        if chord:  # Trinity's defaults, which its arguments below override
            for key, value in (("mu", 0.1), ("mu_valley", 0.1), ("sft_token_weight", "phi")):
                _set(out, f"algorithm.mix.{key}", value)
        _mix_loss_args(t, a.get("policy_loss_fn_args") or {}, out, chord)
    else:
        mode, table, defaults = POLICY_LOSS_FNS[loss]
        _set(out, f"{A}.policy_loss.loss_mode", mode)
        given = a.get("policy_loss_fn_args") or {}
        args = {**defaults, **POLICY_LOSS_INIT_DEFAULTS.get(loss, {}), **given} if given else dict(defaults)
        pg_agg = _policy_loss_agg(t, loss, given, args, a.get("loss_agg_mode") or "token-mean")
        missing = [k for k in ("clip_range_low", "clip_range_high") if args.get(k, 0) is None]
        if missing and args.get("clip_range") is None:
            t.refuse("algorithm.policy_loss_fn_args", f"sets no {' or '.join(missing)} (nor clip_range): Trinity-RFT "
                                                      f"fills {loss}'s default_args only when policy_loss_fn_args is "
                                                      "left out, and its loss has no default for them; add them")
        args = {k: v for k, v in args.items() if v is not None and k != "loss_agg_mode"}
        _fn_args(t, out, "algorithm.policy_loss_fn_args", args, table, f"{loss} policy loss")
    # a Trinity KL function is a name ("none" or an estimator) plus {kl_coef}: as a loss or in the reward
    for fn, switch, estimator, coef in (("kl_loss_fn", f"{A}.use_kl_loss", f"{A}.kl_loss_type", f"{A}.kl_loss_coef"),
                                        ("kl_penalty_fn", "algorithm.use_kl_in_reward", "algorithm.kl_penalty",
                                         "algorithm.kl_ctrl.kl_coef")):
        name, args = a[fn], a.get(f"{fn}_args") or {}
        if name == "none":
            _set(out, switch, False)
        elif name in KL_FNS:
            _set(out, switch, True)
            _set(out, estimator, name)
            _set(out, coef, args.get("kl_coef", 0.001))
        else:
            t.refuse(f"algorithm.{fn}", not_one_of(name, ("none", *KL_FNS), f"rft has none, {', '.join(KL_FNS)}"))
        for key in set(args) - {"kl_coef"}:
            t.refuse(f"algorithm.{fn}_args.{key}", _not_an_argument(f"{fn.removesuffix('_fn')} function", {"kl_coef"}))
    ent = a["entropy_loss_fn"]
    ent_args = a.get("entropy_loss_fn_args") or {}
    if ent == "none":
        _set(out, f"{A}.entropy_coeff", 0.0)
    elif ent == "default" and mix and ent_args.get("entropy_coef", 0.0):
        t.refuse("algorithm.entropy_loss_fn", "='default' with the mix policy loss: Trinity's default entropy bonus "
                                              "covers the expert rows too, rft's the experiences only; use "
                                              "entropy_loss_fn mix")
    elif ent == "default" or (ent == "mix" and mix):  # mix: the bonus on the experiences, not the expert rows
        _set(out, f"{A}.entropy_coeff", ent_args.get("entropy_coef", 0.0))
    else:
        t.refuse("algorithm.entropy_loss_fn", not_one_of(ent, ("default", "none", "mix"),
                                                         "rft has default, none (and mix with policy_loss_fn mix)"))
    for key in set(ent_args) - {"entropy_coef"}:
        t.refuse(f"algorithm.entropy_loss_fn_args.{key}", _not_an_argument("entropy bonus", {"entropy_coef"}))
    _sample_strategy(t, a, out, mix)
    if mix:  # the experiences' PPO loss: grpo_loss_agg_mode, else loss_agg_mode
        agg = (a.get("policy_loss_fn_args") or {}).get("grpo_loss_agg_mode") or a.get("loss_agg_mode")
        if agg is not None:
            _set(out, f"{A}.loss_agg_mode", agg)
    elif loss in POLICY_LOSS_FNS:
        kl_args = a.get("kl_loss_fn_args") or {}
        aux = ((a["kl_loss_fn"] != "none" and kl_args.get("kl_coef", 0.001) != 0)
               or (ent != "none" and ent_args.get("entropy_coef", 0.0) != 0))
        _loss_agg(out, a, pg_agg, aux)
    _optimizer(t, _section(algo.pop("optimizer", None), "algorithm.optimizer"), out)
    taken = {"repeat_times", "advantage_fn", "advantage_fn_args", "policy_loss_fn", "policy_loss_fn_args",
             "kl_loss_fn", "kl_loss_fn_args", "kl_penalty_fn", "kl_penalty_fn_args", "entropy_loss_fn",
             "entropy_loss_fn_args", "sample_strategy", "sample_strategy_args", "loss_agg_mode"}
    t.rest({k: v for k, v in algo.items() if k not in taken}, "algorithm")
    return kind


DISTILL_MODES = {"on_policy_distill": "k1", "jsd": "token_jsd"}
"""Trinity-RFT's distillation advantages -> rft's distillation loss_mode."""


def _distill(out: dict, mode: str) -> None:
    """Trinity-RFT's distillation advantages (`DISTILL_MODES`), -kl_coef D_t of each sampled token with D k1
    (log p - log q: on_policy_distill) or the sampled token's JSD (jsd), q the teacher (explorer.auxiliary_models[0],
    `_teacher`) and p the student, no task reward (its workflows' reward is only logged): rft's distillation with D
    as a per-token advantage and the task reward left out."""
    for key, value in (("enabled", True), ("distillation_loss.loss_mode", mode),
                       ("distillation_loss.use_policy_gradient", True), ("distillation_loss.in_reward", False),
                       ("distillation_loss.use_task_rewards", False)):
        _set(out, f"distillation.{key}", value)


TEACHER_ENGINE = ("the teacher scores the student's tokens in the trainer, in one batched pass beside the policy (as "
                  "the reference model does: its precision and micro-batches), not in an engine of its own")
"""Why an on_policy_distill teacher's engine keys change nothing here."""


AUXILIARY_ENGINE = ("rft serves an auxiliary model with its hf engine on the explorer's device, one copy, whole (the "
                    "same replies as Trinity-RFT's vLLM engines of it give: these say how many and where)")
AUXILIARY_LIMITS = ("rft bounds an auxiliary model's prompt and reply by the model's positions (its config.json; "
                    "the reply by max_tokens, Trinity's max_response_tokens), not by a window of its own")


def _auxiliary_placement(key: str, value: Any) -> bool:
    """Whether an auxiliary model's engine key `key`=`value` says only which vLLM engines serve it, how many and where
    (`AUXILIARY_ENGINE`): an engine count is one where it is a count."""
    if key == "engine_type":
        return value in ("vllm", "vllm_async")
    if key in ("engine_num", "tensor_parallel_size"):
        return type(value) is int and value >= 1
    return True


def _auxiliary_model(t: _Translation, model: Any, where: str) -> Any:
    """One of a workflow's auxiliary models (explorer.auxiliary_models[i], its judge or helper) in rft's terms
    (workflow.auxiliary_models[i]): model_path, temperature and enable_thinking as they are, max_response_tokens ->
    max_tokens; its engine's placement (`AUXILIARY_ENGINE`) and context window (`AUXILIARY_LIMITS`) noted."""
    if not isinstance(model, dict):
        return model  # rft's check says what an item must be
    model = dict(model)
    # dtype and seed change the replies: they go on to rft's check, which names them
    spec = {key: model.pop(key) for key in ("model_path", "temperature", "enable_thinking", "name", "dtype", "seed")
            if key in model}
    if "max_response_tokens" in model:
        spec["max_tokens"] = model.pop("max_response_tokens")
    for key in ("engine_type", "engine_num", "tensor_parallel_size", "enable_prefix_caching", "enforce_eager",
                "gpu_memory_utilization", "enable_chunked_prefill"):
        if key in model:
            value = model.pop(key)
            if _auxiliary_placement(key, value):
                t.note(f"{where}.{key}", value, AUXILIARY_ENGINE)
            else:
                spec[key] = value  # another engine, a count that is none: rft's check names it
    for key in ("max_model_len", "max_prompt_tokens"):
        if key in model:
            t.note(f"{where}.{key}", model.pop(key), AUXILIARY_LIMITS)
    t.rest(model, where)
    return spec


def _teacher(t: _Translation, models: Any, out: dict) -> None:
    """The distillation teacher (on_policy_distill, jsd): explorer.auxiliary_models[0], as Trinity-RFT's distillation workflows take it;
    its engine keys are noted (`TEACHER_ENGINE`), a second model refused (nothing would read it)."""
    where = "explorer.auxiliary_models"
    models = models if isinstance(models, list) else []
    if not models or not isinstance(models[0], dict) or not models[0].get("model_path"):
        t.refuse(where, "on-policy distillation reads its teacher from explorer.auxiliary_models[0].model_path; "
                        "add it")
        return
    teacher = dict(models[0])
    _set(out, "distillation.teacher_model.model_path", teacher.pop("model_path"), f"{where}[0].model_path")
    for key in ("engine_type", "engine_num", "tensor_parallel_size", "enable_prefix_caching", "enforce_eager",
                "dtype", "seed", "gpu_memory_utilization", "enable_chunked_prefill", "max_model_len",
                "max_prompt_tokens", "max_response_tokens", "name"):
        if key in teacher:
            t.note(f"{where}[0].{key}", teacher.pop(key), TEACHER_ENGINE)
    for key in ("chat_template", "enable_thinking", "temperature", "top_p", "top_k"):
        if key in teacher:  # Trinity's teacher scores tokens (logprobs), it samples and renders nothing
            t.note(f"{where}[0].{key}", teacher.pop(key), "the teacher scores the student's token ids; it renders "
                                                          "no prompt and samples nothing")
    t.rest(teacher, f"{where}[0]")
    for i in range(1, len(models)):
        t.refuse(f"{where}[{i}]", "Trinity-RFT's distillation workflows read one teacher, explorer.auxiliary_models[0]; "
                                  "remove the others")


def _policy_loss_agg(t: _Translation, loss: str, given: dict, args: dict, level: str) -> str | None:
    """The aggregation Trinity-RFT's policy loss `loss` applies (None: rft's loss has its own, sapo's). Trinity's
    config check overwrites policy_loss_fn_args' loss_agg_mode with algorithm.loss_agg_mode (`level`, token-mean
    when unset) wherever the arguments hold one: always when they are left out (every default_args but rec's holds
    one, gspo's seq-mean-token-mean included); given without it, the loss keeps its own default. A given value
    other than `level` would be dropped by Trinity: refused, naming the key that decides."""
    written = given.get("loss_agg_mode")
    if written is not None and written != level:
        t.refuse("algorithm.policy_loss_fn_args.loss_agg_mode",
                 f"={written!r}: Trinity-RFT replaces it with algorithm.loss_agg_mode ({level!r}); set "
                 f"algorithm.loss_agg_mode: {written} instead")
    if loss == "rec":  # Trinity's rec takes the token mean, the sequences' mean with gspo-one-side
        return "seq-mean-token-mean" if args.get("clip_mode") == "gspo-one-side" else "token-mean"
    if loss == "sapo":  # rft's sapo aggregates as the paper and verl do (seq-mean-token-mean) whatever the key
        return None
    return level if not given or "loss_agg_mode" in given else POLICY_LOSS_OWN_AGG.get(loss, "token-mean")


def _loss_agg(out: dict, a: dict, pg_agg: str | None, aux: bool) -> None:
    """actor.loss_agg_mode: the policy loss's aggregation (`pg_agg`). Trinity-RFT aggregates its KL and entropy
    losses with algorithm.loss_agg_mode instead; rft has one mode for the three, so where the two differ and
    either loss is on (`aux`), or the user wrote algorithm.loss_agg_mode, a note says which one applies."""
    level = a.get("loss_agg_mode") or "token-mean"
    if pg_agg is None or pg_agg == level:
        _set(out, f"{A}.loss_agg_mode", level, "algorithm.loss_agg_mode" if "loss_agg_mode" in a else None)
        return
    _set(out, f"{A}.loss_agg_mode", pg_agg)
    if aux or "loss_agg_mode" in a:
        fix = ("" if a["policy_loss_fn"] == "rec" else
               f" (add loss_agg_mode to policy_loss_fn_args for {level} everywhere)")
        logging.getLogger("rft").warning(
            "rft: note: Trinity-RFT aggregates the policy loss %s with %s and the KL and entropy losses with "
            "algorithm.loss_agg_mode=%s; rft aggregates all three with %s%s", a["policy_loss_fn"], pg_agg, level,
            pg_agg, fix)


def _mix_loss_args(t: _Translation, args: dict, out: dict, chord: bool) -> None:
    """The mix / mix_chord policy_loss_fn_args: PPO's clip, mu (CHORD's schedule), the SFT loss's aggregation."""
    for key, value in args.items():
        target = {"clip_range": f"{A}.clip_ratio", "clip_range_low": f"{A}.clip_ratio_low",
                  "clip_range_high": f"{A}.clip_ratio_high", "loss_agg_mode": f"{A}.loss_agg_mode",
                  **(CHORD_ARGS if chord else {"mu": "algorithm.mix.mu"})}.get(key)
        if chord and key == "enable_phi_function":
            _set(out, "algorithm.mix.sft_token_weight", "phi" if value else "none")
        elif key == "use_token_level_loss_in_sft":
            _set(out, "algorithm.mix.sft_loss_agg_mode", "token-mean" if value else "seq-mean-token-mean")
        elif key == "sft_loss_agg_mode":  # its SFT loss's aggregation (null: loss_agg_mode's)
            _set(out, "algorithm.mix.sft_loss_agg_mode", value or args.get("loss_agg_mode", "token-mean"),
                 f"algorithm.policy_loss_fn_args.{key}")
        elif key == "grpo_loss_agg_mode":  # its PPO loss's on the experiences: set with algorithm.loss_agg_mode
            pass
        elif key in MIX_NORMALISER_ARGS:
            t.note(f"algorithm.policy_loss_fn_args.{key}", value, MIX_NORMALISERS)
        elif key in ("sft_loss_agg_mode", "grpo_loss_agg_mode"):  # Trinity's newer mix loss's arguments
            _set(out, "algorithm.mix.sft_loss_agg_mode" if key.startswith("sft") else f"{A}.loss_agg_mode", value)
        elif target is None:
            t.refuse(f"algorithm.policy_loss_fn_args.{key}", _not_an_argument(
                "mix_chord policy loss" if chord else "mix policy loss",
                {"clip_range", "clip_range_low", "clip_range_high", "loss_agg_mode", "use_token_level_loss_in_sft",
                 "sft_loss_agg_mode", "grpo_loss_agg_mode", *MIX_NORMALISER_ARGS,
                 *((*CHORD_ARGS, "enable_phi_function") if chord else ("mu",))}))
        else:
            _set(out, target, value)


OPTIMIZER_KEYS = {"lr": "lr", "lr_warmup_steps": "lr_warmup_steps", "lr_warmup_steps_ratio": "lr_warmup_steps_ratio",
                  "min_lr_ratio": "min_lr_ratio", "betas": "betas", "weight_decay": "weight_decay"}
# the same fields as an SFT / DPO stage's optim keys (rft sft's; SFT_FROM_VERL maps verl's onto them alike)
OFFLINE_OPTIMIZER_KEYS = {"lr": "lr", "lr_warmup_steps_ratio": "warmup_steps_ratio", "min_lr_ratio": "min_lr_ratio",
                          "betas": "betas", "weight_decay": "weight_decay"}
SCHEDULES = ("constant", "cosine")  # Trinity's lr_scheduler_type values, rft's optim.warmup_style ones
# Trinity-RFT's optimizer where neither algorithm.optimizer nor trainer_config's actor.optim sets a field, as an SFT /
# DPO stage's optim keys: its verl actor's (../shared/spec/trinity_config_reference.md, "veRL Trainer Configuration":
# lr 1e-6, lr_warmup_steps_ratio 0, warmup_style constant, grad_clip 1.0), not rft sft's (lr 1e-5, a cosine schedule
# after a 10% warm-up). An RL stage's are rft's actor defaults, the same values. The spec gives no betas or
# weight_decay (those stay rft sft's), and no min_lr_ratio, which only a cosine schedule reads.
OFFLINE_OPTIMIZER_DEFAULTS = {"lr": 1e-6, "warmup_steps_ratio": 0.0, "lr_scheduler": "constant", "clip_grad": 1.0}


def _optimizer(t: _Translation, opt: dict, out: dict, offline: bool = False) -> None:
    """algorithm.optimizer (Trinity's OptimizerConfig, which it copies field by field onto verl's actor.optim, the
    optimizer of its SFT and DPO stages too): the actor's optimizer and schedule, or (`offline`) the optim section
    of an SFT / DPO stage. Trinity's lr_scheduler_type (and warmup_style, its deprecated name) is verl's and rft's
    warmup_style (an offline stage's lr_scheduler); its min_lr_ratio default is 0.01 (rft's 0.0), which only a
    cosine schedule reads; optimizer_type adam / adamw is rft's default AdamW."""
    prefix = "optim." if offline else f"{A}.optim."
    for key, target in (OFFLINE_OPTIMIZER_KEYS if offline else OPTIMIZER_KEYS).items():
        if key in opt:
            _set(out, prefix + target, opt.pop(key), f"algorithm.optimizer.{key}")
    warmup_steps = opt.pop("lr_warmup_steps", None) if offline else None
    if warmup_steps not in (None, -1):  # verl's -1: the ratio decides
        t.refuse("algorithm.optimizer.lr_warmup_steps", f"={warmup_steps!r}: an SFT / DPO stage warms up for a "
                                                        "fraction of its steps; set lr_warmup_steps_ratio instead")
    schedule = opt.pop("lr_scheduler_type", None)
    style = opt.pop("warmup_style", None)
    for key, value in (("lr_scheduler_type", schedule), ("warmup_style", style)):
        if value is not None and value not in SCHEDULES:
            t.refuse(f"algorithm.optimizer.{key}",
                     not_one_of(value, SCHEDULES, f"rft's schedules after the warmup are {', '.join(SCHEDULES)}"))
    schedule = schedule or style
    if schedule in SCHEDULES:
        _set(out, prefix + ("lr_scheduler" if offline else "warmup_style"), schedule)
        if schedule == "cosine" and _get(out, f"{prefix}min_lr_ratio") is _MISSING:
            _set(out, f"{prefix}min_lr_ratio", 0.01)  # Trinity's default
    kind = opt.pop("optimizer_type", "adam")
    if kind == "sgd" and not offline:
        _set(out, f"{A}.optim.optimizer", "sgd")
    elif kind not in ("adam", "adamw"):
        t.refuse("algorithm.optimizer.optimizer_type",
                 not_one_of(kind, ("adam", "adamw"), "an SFT / DPO stage trains with AdamW (adam, adamw)") if offline
                 else not_one_of(kind, ("adam", "adamw", "sgd"), "Trinity-RFT's are adam (AdamW), adamw, sgd"))
    clip = opt.pop("clip_grad", 1.0)
    if clip != 1.0:  # Trinity's verl actor clips by trainer.grad_clip, not by this field
        t.refuse("algorithm.optimizer.clip_grad", f"={clip!r}: the actor's gradient clipping is trainer.grad_clip "
                                                  f"(rft's {'optim.clip_grad' if offline else f'{A}.grad_clip'}); "
                                                  "set that instead")
    t.rest(opt, "algorithm.optimizer", "not a field of Trinity-RFT's OptimizerConfig that rft has; remove it")


def _sample_strategy(t: _Translation, a: dict, out: dict, mix: bool) -> None:
    """default (and warmup, its deprecated alias in Trinity-RFT: without SFT warm-up steps it reads each batch as
    generated); mix: the expert rows of the auxiliary buffer sample_strategy_args.sft_dataset_name at
    expert_data_ratio (algorithm.mix; the buffer becomes data.expert in `_buffer`)."""
    strategy, args = a.get("sample_strategy", "default"), dict(a.get("sample_strategy_args") or {})
    if strategy == "mix":
        if not mix:
            t.refuse("algorithm.sample_strategy", "='mix' reads expert rows, which only policy_loss_fn mix trains on")
            return
        _set(out, "algorithm.mix.expert_data_ratio", args.pop("expert_data_ratio", 0.5))
        _set(out, "_trinity.expert_buffer", args.pop("sft_dataset_name", "sft_dataset"))
        t.rest(args, "algorithm.sample_strategy_args", _not_an_argument("mix sample strategy", {
            "expert_data_ratio", "sft_dataset_name"}))
        return
    if mix:  # the spec's algorithm example writes sample_strategy: "default"; mix's own default is mix
        t.refuse("algorithm.sample_strategy", f"={strategy!r}: the mix policy loss (policy_loss_fn mix) trains on the "
                                              "expert rows that sample_strategy mix reads; set it to mix (the mix "
                                              "algorithms' default) or remove it")
        # the auxiliary buffer is mix's all the same: not refused a second time as "this run is not mix"
        _set(out, "_trinity.expert_buffer", args.get("sft_dataset_name", "sft_dataset"))
    elif strategy not in SAMPLE_STRATEGIES:
        t.refuse("algorithm.sample_strategy", not_one_of(strategy, (*SAMPLE_STRATEGIES, "mix"), (
            "rft reads each batch as generated (default, or its alias warmup), or mixes in expert rows (mix, with "
            "policy_loss_fn mix)")))
    if args:
        t.refuse("algorithm.sample_strategy_args", f"the {strategy} strategy takes no arguments")


def _dpo_algorithm(t: _Translation, algo: dict, out: dict) -> None:
    """algorithm_type dpo: rft dpo's algorithm section (its preference loss is Trinity's: TRL's sigmoid with
    label smoothing), plus Trinity's KL loss and entropy bonus on every response token."""
    algo = _section(algo, "algorithm")
    algo.pop("algorithm_type", None)
    a = {**ALGORITHMS["dpo"], **{k: v for k, v in algo.items() if v is not None}}
    if a.pop("repeat_times") != 2:
        t.refuse("algorithm.repeat_times", "DPO reads pairs: Trinity-RFT sets repeat_times to 2 (a chosen and a "
                                           "rejected response); remove it")
    loss = a.pop("policy_loss_fn")
    if loss != "dpo":
        t.refuse("algorithm.policy_loss_fn", f"={loss!r}: the dpo algorithm trains with the dpo loss")
    args = dict(a.pop("policy_loss_fn_args", None) or {})
    for key in ("beta", "label_smoothing"):
        if key in args:
            _set(out, f"algorithm.{key}", args.pop(key))
    t.rest(args, "algorithm.policy_loss_fn_args", _not_an_argument("dpo loss", {"beta", "label_smoothing"}))
    name, args = a.pop("kl_loss_fn"), dict(a.pop("kl_loss_fn_args", None) or {})
    if name == "none":  # Trinity-RFT turns none into k2 (its reference log-probs ride on the KL loss); rft does not
        _set(out, "algorithm.use_kl_loss", False)
    elif name in KL_FNS:
        _set(out, "algorithm.use_kl_loss", True)
        _set(out, "algorithm.kl_loss_type", name)
        _set(out, "algorithm.kl_loss_coef", args.pop("kl_coef", 0.001))
    else:
        t.refuse("algorithm.kl_loss_fn", not_one_of(name, ("none", *KL_FNS), f"rft has none, {', '.join(KL_FNS)}"))
    t.rest(args, "algorithm.kl_loss_fn_args", _not_an_argument("kl_loss function", {"kl_coef"}))
    ent, args = a.pop("entropy_loss_fn"), dict(a.pop("entropy_loss_fn_args", None) or {})
    if ent in ("default", "none"):
        _set(out, "algorithm.entropy_coeff", args.pop("entropy_coef", 0.0) if ent == "default" else 0.0)
    else:
        t.refuse("algorithm.entropy_loss_fn", not_one_of(ent, ("default", "none"), "rft has default, none"))
    t.rest(args, "algorithm.entropy_loss_fn_args", _not_an_argument("entropy bonus", {"entropy_coef"}))
    if a.pop("kl_penalty_fn", "none") != "none":
        t.refuse("algorithm.kl_penalty_fn", "DPO has no reward to put a KL penalty in; use kl_loss_fn")
    for key in ("advantage_fn", "advantage_fn_args"):
        if key in a:
            a.pop(key)
            t.refuse(f"algorithm.{key}", "DPO computes no advantages")
    _sample_strategy(t, a, out, mix=False)
    a.pop("sample_strategy", None), a.pop("sample_strategy_args", None)
    if "loss_agg_mode" in a:
        _set(out, "algorithm.loss_agg_mode", a.pop("loss_agg_mode"))
    _optimizer(t, _section(a.pop("optimizer", None), "algorithm.optimizer"), out, offline=True)
    t.rest(a, "algorithm")


def _model(t: _Translation, model: dict, out: dict, sft: bool) -> None:
    model = _section(model, "model")
    if "model_path" in model:
        _set(out, "model.partial_pretrain" if sft else "actor_rollout_ref.model.path", model.pop("model_path"),
             "model.model_path")
    prompt, response = model.pop("max_prompt_tokens", None), model.pop("max_response_tokens", None)
    max_len = model.pop("max_model_len", None)
    if sft:  # one limit on prompt + response
        if max_len is not None:
            _set(out, "data.max_length", max_len)
        elif prompt is not None and response is not None:
            _set(out, "data.max_length", prompt + response)
        else:
            t.rl_only += [f"model.{k}" for k, v in (("max_prompt_tokens", prompt), ("max_response_tokens", response))
                          if v is not None]
    else:
        if prompt is not None:
            _set(out, "data.max_prompt_length", prompt, "model.max_prompt_tokens")
        if response is not None:
            _set(out, "data.max_response_length", response, "model.max_response_tokens")
        if max_len is not None:  # checked against the lengths in effect (_check_model_len)
            _set(out, "_trinity.max_model_len", max_len)
    truncation = model.pop("enable_prompt_truncation", None)
    if sft and truncation is not None:  # the rollout model's setting: Trinity's trainer does not read it
        t.rl_only.append("model.enable_prompt_truncation")
    elif truncation is not None:
        _prompt_truncation(t, out, truncation, "model.enable_prompt_truncation")
    if model.pop("min_response_tokens", 0) not in (0, 1):  # 0, Trinity's default, and 1: no minimum before EOS
        t.refuse("model.min_response_tokens", "rft's engines stop at EOS from the first token; only 0 (Trinity-RFT's "
                                              "default) and 1 are honoured")
    critic = model.pop("critic_model_path", None)
    if critic is not None and not sft and critic != out.get("actor_rollout_ref", {}).get("model", {}).get("path"):
        _set(out, "critic.model.path", critic)
    elif critic is not None and sft:
        t.rl_only.append("model.critic_model_path")
    _model_settings(t, model, out, sft)
    t.rest(model, "model")


def _model_settings(t: _Translation, model: dict, out: dict, sft: bool) -> None:
    """model's other keys: remote code, the chat template (and its enable_thinking variable), the sampling
    defaults of the tasksets, LoRA, the RoPE overrides, and the Tinker / external-model backends when off."""
    policy = "model" if sft else M
    if "trust_remote_code" in model:  # Trinity's trainer and engines load the model with it; the tokenizer too
        trust = model.pop("trust_remote_code")
        for key in ([f"{policy}.trust_remote_code"] if sft else
                    [f"{M}.trust_remote_code", "critic.model.trust_remote_code", "data.trust_remote_code"]):
            _set(out, key, trust, "model.trust_remote_code")
    template = model.pop("custom_chat_template", None)
    template_path = model.pop("chat_template_path", None)
    if template_path is not None:  # Trinity reads the file's template over custom_chat_template
        try:
            template = Path(template_path).expanduser().read_text()
        except OSError as e:
            t.refuse("model.chat_template_path", f"={template_path!r} cannot be read ({e.strerror or e}): give the "
                                                 "Jinja template's file")
    if template is not None:
        _set(out, "data.chat_template", template, "model.chat_template_path" if template_path else
             "model.custom_chat_template")
    _enable_thinking(t, out, model.pop("enable_thinking", None), "model.enable_thinking")
    for key in ("temperature", "top_p", "top_k", "logprobs"):  # the tasksets' rollout_args where they set none
        if key in model:
            out.setdefault("_trinity", {}).setdefault("sampling", {})[key] = (model.pop(key), f"model.{key}")
    if model.pop("repetition_penalty", 1.0) != 1.0:
        t.refuse("model.repetition_penalty", "rft's engines sample without a repetition penalty; only 1.0 (none, "
                                             "Trinity-RFT's default) is honoured")
    _lora(t, model.pop("lora_configs", None), out, policy)
    for key in ("rope_scaling", "rope_theta"):  # set on the model's config where it loads, as Trinity's verl does
        if model.get(key) is not None:
            value = model.pop(key)
            for target in ([f"{policy}.override_config.{key}"] if sft else
                           [f"{M}.override_config.{key}", f"critic.model.override_config.{key}"]):
                _set(out, target, value, f"model.{key}")
        model.pop(key, None)
    for key, backend in (("tinker", "model.tinker"), ("external_model", "model.external_model")):
        section = model.get(key)
        if isinstance(section, dict) and not section.get("enable", False):
            model.pop(key)  # off: Trinity trains and rolls out itself, as rft does; its other keys are not read
            t.rest({k: v for k, v in section.items() if k != "enable" and k not in trinity_keys(backend)}, backend)
        elif key == "external_model" and isinstance(section, dict):  # an API model evaluated in mode bench
            section = dict(model.pop(key))
            for name in ("enable", "model_name", "base_url_env", "api_key_env"):
                if section.get(name) is not None:
                    _set(out, f"external_model.{name}", section.pop(name), f"{backend}.{name}")
                section.pop(name, None)
            t.rest(section, backend)


def _lora(t: _Translation, configs: Any, out: dict, policy: str) -> None:
    """model.lora_configs: Trinity-RFT trains one LoRA adapter (it refuses more), with its rank, alpha and target
    and excluded modules; a `name` / `base_model_name` names the adapter to vLLM, where rft serves the policy with
    its LoRA merged."""
    if configs is None:
        return
    if not isinstance(configs, list) or len(configs) != 1 or not isinstance(configs[0], dict):
        t.refuse("model.lora_configs", f"={configs!r}: one adapter, a list of one mapping (Trinity-RFT trains one)")
        return
    lora = dict(configs[0])
    for key, default in (("lora_rank", 32), ("lora_alpha", 32), ("target_modules", "all-linear"),
                         ("exclude_modules", None)):  # Trinity's LoRAConfig defaults where the item sets none
        value = lora.pop(key, default)
        if value is not None:
            _set(out, f"{policy}.{key}", value, f"model.lora_configs[0].{key}")
    for key in ("name", "base_model_name"):
        if lora.get(key) is not None:
            t.note(f"model.lora_configs[0].{key}", lora.pop(key), "the adapter's name in Trinity-RFT's vLLM engine; "
                                                                  "rft serves the policy with its LoRA merged")
        lora.pop(key, None)
    t.rest(lora, "model.lora_configs[0]")


PROMPT_TRUNCATION = {True: "left", False: "error"}
"""Trinity-RFT's enable_prompt_truncation as rft's data.truncation. true (its default) cuts a prompt over
max_prompt_tokens to its last max_prompt_tokens tokens: its vLLM engine passes truncate_prompt_tokens, which keeps a
prompt's end, and sets its tokenizer's truncation_side to left (its newest versions give a text prompt over the
limit a masked-out experience instead: rft's nearest is data.filter_overlong_prompts). false sends the prompt whole,
to overflow max_model_len; rft has no room for it, so a prompt over the limit is an error naming the key."""


def _prompt_truncation(t: _Translation, out: dict, value: Any, where: str) -> None:
    """model.enable_prompt_truncation, or explorer.rollout_model's own (which Trinity-RFT's rollout model takes over
    model's; null: model's), `where`: rft's data.truncation (`PROMPT_TRUNCATION`)."""
    if value is None:
        return
    if not isinstance(value, bool):
        t.refuse(where, f"={value!r}: true (cut a prompt over max_prompt_tokens) or false")
        return
    _set(out, "data.truncation", PROMPT_TRUNCATION[value])
    _set(out, "_trinity.truncation_key", where)


def _check_prompt_truncation(t: _Translation, out: dict) -> None:
    """The prompt limit enable_prompt_truncation cuts to: true needs one (Trinity-RFT refuses it without
    max_prompt_tokens); left out, it is Trinity's default, true, where a limit is in effect (model.max_prompt_tokens,
    max_model_len or trainer_config's data.max_prompt_length) and trainer_config sets no data.truncation."""
    where = out.get("_trinity", {}).pop("truncation_key", None)
    limited = _get(out, "data.max_prompt_length") is not _MISSING
    if where is not None and not limited and _get(out, "data.truncation") == PROMPT_TRUNCATION[True]:
        t.refuse(where, "=True cuts a prompt to model.max_prompt_tokens, which is not set: set it (or "
                        "model.max_model_len), as Trinity-RFT requires")
    elif where is None and limited and _get(out, "data.truncation") is _MISSING:
        _set(out, "data.truncation", PROMPT_TRUNCATION[True])


def prompt_truncation_off(cfg: dict, stage: int | None = None) -> str | None:
    """The key of the resolved Trinity config `cfg` that turned prompt truncation off (rft's data.truncation=error),
    or None; with `stage` (an index into cfg's stages), in that stage, whose own keys go over the global ones:
    stages[1].model.enable_prompt_truncation."""
    scopes = [(f"stages[{stage}].", cfg["stages"][stage])] if stage is not None and cfg.get("stages") else []
    for key in ("explorer.rollout_model.enable_prompt_truncation", "model.enable_prompt_truncation"):
        for prefix, section in [*scopes, ("", cfg)]:
            value = _get(section, key)
            if value is not _MISSING and value is not None:
                return prefix + key if value is False else None
    return None


def _check_model_len(t: _Translation, out: dict) -> None:
    """model.max_model_len (RL): as Trinity-RFT's config checker, the missing one of the prompt and response limits
    (Trinity's keys or trainer_config's data.max_prompt_length / max_response_length) is max_model_len less the
    other (the other kept below max_model_len), both missing are half of it each; the two must fit in it."""
    max_len = out.get("_trinity", {}).pop("max_model_len", None)
    if max_len is None:
        return
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 2:
        t.refuse("model.max_model_len", f"={max_len!r}: give the longest prompt + response in tokens, an integer >= 2")
        return
    data = out.get("data", {})
    prompt, response = data.get("max_prompt_length"), data.get("max_response_length")
    if prompt is None and response is None:
        prompt = max_len // 2
        response = max_len - prompt
    elif prompt is None:
        response = min(response, max_len - 1)
        prompt = max_len - response
    elif response is None:
        prompt = min(prompt, max_len - 1)
        response = max_len - prompt
    said = _said_as(out)  # a limit left out: derived from max_model_len
    _set(out, "data.max_prompt_length", prompt, said.get("data.max_prompt_length", "model.max_model_len"))
    _set(out, "data.max_response_length", response, said.get("data.max_response_length", "model.max_model_len"))
    if prompt + response > max_len:
        t.refuse("model.max_model_len", f"={max_len!r} is below the prompt + response limits in effect, "
                                        f"{prompt} + {response} = {prompt + response} (model.max_prompt_tokens / "
                                        "max_response_tokens, or trainer_config's data.max_prompt_length / "
                                        "max_response_length); raise it or lower those")


def _taskset_args(t: _Translation, ts: dict, where: str, eval_set: bool, out: dict) -> None:
    args = _section(ts.get("rollout_args"), f"{where}.rollout_args")
    prefix = f"{R}.val_kwargs" if eval_set else R
    for key in ("temperature", "top_p", "top_k"):
        if key in args:
            _set_shared(t, out, f"{prefix}.{key}", args.pop(key), f"{where}.rollout_args.{key}")
    if eval_set and "temperature" in (ts.get("rollout_args") or {}):
        _set(out, f"{prefix}.do_sample", ts["rollout_args"]["temperature"] > 0)
    if args.get("logprobs", 0) in (0, None):  # the sampled token's log-prob alone: what rft's engines return
        args.pop("logprobs", None)
    if "max_tokens" in args and args["max_tokens"] == _get(out, "data.max_response_length"):
        args.pop("max_tokens")  # the run's own response limit (model.max_response_tokens): the same limit
    t.rest(args, f"{where}.rollout_args")


def _set_shared(t: _Translation, out: dict, key: str, value: Any, where: str) -> None:
    """`key` = `value` from the taskset key `where`; several tasksets that set one rft key differently are refused
    (the last would win silently)."""
    owners = out.setdefault("_trinity", {}).setdefault("set_by", {})
    if key in owners and _get(out, key) != value:
        t.refuse(where, f"={value!r}, but {owners[key]} sets it to {_get(out, key)!r}: rft has one {key} for all "
                        "tasksets of a run; make them equal")
        return
    owners.setdefault(key, where)
    _set(out, key, value, owners[key])


COLUMN_DEFAULTS = {"prompt_key": "prompt", "response_key": None}  # rft's data.prompt_key / response_key


def _set_column(t: _Translation, out: dict, key: str, value: Any, where: str, eval_set: bool) -> None:
    """A taskset's prompt / response column (format.prompt_key / response_key): each Trinity-RFT taskset reads its
    own, so an eval taskset's that differs from the one the training tasks are read by (or an earlier eval
    taskset's, without training tasks) is its files' own (data.val_prompt_keys / val_response_keys, collected
    in `_trinity.own_columns` for `_eval_tasksets`); else the shared data.<key>."""
    shared = _get(out, f"data.{key}")
    if shared is _MISSING and _get(out, "data.train_files") is not _MISSING:
        shared = COLUMN_DEFAULTS[key]  # the training tasks are read by rft's default
    if eval_set and shared is not _MISSING and shared != value:
        out.setdefault("_trinity", {}).setdefault("own_columns", {})[key] = value
    else:
        _set_shared(t, out, f"data.{key}", value, where)


def _enable_thinking(t: _Translation, out: dict, value: Any, where: str) -> None:
    """Trinity-RFT's enable_thinking (model, explorer.rollout_model, a buffer's format): the chat template's
    variable of that name (data.apply_chat_template_kwargs); null, Trinity's default, passes none."""
    if value is not None:
        _set_shared(t, out, "data.apply_chat_template_kwargs.enable_thinking", value, where)


def _taskset(t: _Translation, ts: dict, where: str, out: dict, eval_set: bool, defaults: dict) -> Any:
    ts = _section(ts, where)
    storage = ts.pop("storage_type", "file")
    name = ts.pop("name", None)
    if storage in ("sql", "queue") and not eval_set:  # a table of tasks: the path is its database
        _set(out, "data.task_storage", storage)
        if name:
            _set(out, "data.task_table", name)
        ts.pop("split", None)
        files = ts.pop("path", None)
        if not files:
            t.refuse(f"{where}.path", "is required: the database (a SQLAlchemy URL or a SQLite file)")
    elif not eval_set and out.get("_trinity", {}).get("processed_tasks"):
        # the task pipeline reads its inputs and writes the kept tasks to the path (`_data_processor`), a folder's
        # output.jsonl, the one file the explorer then reads (its split names no other)
        ts.pop("split", None)
        ts.pop("path", None)
        files = None
    else:
        path, split = ts.pop("path", None), ts.pop("split", None)
        if split is not None and path and not Path(path).expanduser().exists():
            t.refuse(f"{where}.path", f"={path!r} does not exist: give the folder holding the {split!r} split, or "
                                      "its file")
        elif split is not None and path and not Path(path).expanduser().is_dir() and Path(path).stem != split:
            t.refuse(f"{where}.split", f"={split!r}, but path={path!r} is a file, not a folder holding splits: "
                                       "remove split or give the folder")
        files = _files(t, where, path, split or ("test" if eval_set else "train"), ts.pop("subset_name", None))
        if storage != "file" and eval_set:
            t.refuse(f"{where}.storage_type", not_one_of(storage, ("file",), "rft reads eval tasksets from files "
                                                                            "(jsonl / parquet)"))
        elif storage != "file":
            t.refuse(f"{where}.storage_type", not_one_of(storage, STORAGE_TYPES, "Trinity-RFT's are "
                                                                               f"{', '.join(STORAGE_TYPES)}"))
    fmt = _section(ts.pop("format", None), f"{where}.format")
    ptype = _prompt_type(t, fmt, f"{where}.format")
    # the prompt column: prompt_key (plaintext) or messages_key (messages); rft reads either form from it
    prompt_column = fmt.pop("messages_key" if ptype == "messages" else "prompt_key", None)
    if prompt_column is not None:
        _set_column(t, out, "prompt_key", prompt_column, f"{where}.format.prompt_key", eval_set)
    for key in ("system_prompt", "reply_prefix"):  # the tasksets' defaults (buffer.explorer_input's)
        if fmt.get(key) is None and key in defaults:
            _set_shared(t, out, f"data.{key}", *defaults[key])
    for key in FORMAT_KEYS:
        if key == "response_key" and key in fmt:
            _set_column(t, out, key, fmt.pop(key), f"{where}.format.{key}", eval_set)
        elif key in fmt:
            _set_shared(t, out, f"data.{key}", fmt.pop(key), f"{where}.format.{key}")
    _enable_thinking(t, out, fmt.pop("enable_thinking", None), f"{where}.format.enable_thinking")
    t.rest(fmt, f"{where}.format")
    _taskset_args(t, ts, where, eval_set, out)
    ts.pop("rollout_args", None)
    if eval_set and "repeat_times" in ts:
        _set_shared(t, out, f"{R}.val_kwargs.n", ts.pop("repeat_times"), f"{where}.repeat_times")
    _data_selector(t, ts, where, out, eval_set)
    _workflow_keys(t, ts, where, out, defaults, eval_set)
    t.rest(ts, where)
    return files


WORKFLOW_DEFAULTS = {"default_workflow_type": "workflow.type",
                     "default_reward_fn_type": "custom_reward_function.reward_fn_type"}


def _workflow_defaults(b: dict, explorer_input: dict) -> dict[str, tuple[Any, str]]:
    """The tasksets' default workflow and reward function types, system prompt and reply prefix ({key: (value,
    where)}):
    Trinity-RFT reads them from buffer.explorer_input (its reference also shows them on buffer); the
    explorer_input's win."""
    defaults = {}
    for section, where in ((b, "buffer"), (explorer_input, "buffer.explorer_input")):
        for key in (*WORKFLOW_DEFAULTS, "system_prompt", "default_eval_workflow_type", "reply_prefix"):
            value = section.pop(key, None) if key not in ("default_eval_workflow_type", "reply_prefix") or \
                section is explorer_input else None
            if value is not None:
                defaults[key] = (value, f"{where}.{key}")
    return defaults


SELECTOR_TYPES = ("random", "offline_easy2hard", "difficulty_based")  # rft's data.selector (rft.data.selectors)


def _data_selector(t: _Translation, ts: dict, where: str, out: dict, eval_set: bool) -> None:
    """A taskset's data_selector (task_selector, its earlier name): Trinity-RFT's default, sequential, reads the
    tasks in the file's order, so the training tasks are not shuffled (rft's data.shuffle false) unless it says
    shuffle (with its seed, 42 by default); random, offline_easy2hard and difficulty_based are rft's data.selector
    (`rft.data.selectors`) with their seed, feature_keys and kwargs. An eval taskset reads every task, in any order
    the same metrics."""
    key = "data_selector" if "data_selector" in ts else "task_selector"
    selector = _section(ts.pop(key, None), f"{where}.{key}")
    ts.pop("task_selector", None)
    kind = selector.pop("selector_type", None) or "sequential"
    if kind not in ("sequential", "shuffle", *SELECTOR_TYPES):
        t.refuse(f"{where}.{key}.selector_type", not_one_of(kind, ("sequential", "shuffle", *SELECTOR_TYPES),
                                                            "Trinity-RFT's selectors are sequential, shuffle, "
                                                            f"{', '.join(SELECTOR_TYPES)}"))
        return
    seed = selector.pop("seed", 42)
    if kind in SELECTOR_TYPES and not eval_set:
        source = f"{where}.{key}"
        _set(out, "data.selector.selector_type", kind, f"{source}.selector_type")
        _set(out, "data.selector.seed", seed, f"{source}.seed")
        for name in ("feature_keys", "kwargs"):
            value = selector.pop(name, None)
            if value:
                _set(out, f"data.selector.{name}", value, f"{source}.{name}")
    else:
        for name in ("feature_keys", "kwargs"):  # the other selectors' settings
            if selector.pop(name, None):
                t.refuse(f"{where}.{key}.{name}", f"read by the selectors that order tasks by features only, not by "
                                                  f"{kind}{' (an eval taskset reads every task)' if eval_set else ''}")
    t.rest(selector, f"{where}.{key}")
    if not eval_set and kind not in SELECTOR_TYPES:
        _set(out, "_trinity.shuffle", (kind == "shuffle", seed, f"{where}.{key}.selector_type"))


OWN_PROMPT_WORKFLOWS = ("frozen_lake_workflow", "toolcall_workflow")  # = rft.explorer.checks': rows without a prompt


def _own_prompt(out: dict) -> None:
    """data.prompt_key null for a workflow that writes every message (frozen_lake_workflow: Trinity's rows are a
    map's seed, size and p), where no taskset names a prompt column."""
    if _get(out, "workflow.type") in OWN_PROMPT_WORKFLOWS and _get(out, "data.prompt_key") is _MISSING:
        _set(out, "data.prompt_key", None)


def _task_order(out: dict) -> None:
    """data.shuffle / data.seed as the training taskset's data selector says (`_data_selector`), where
    trainer_config sets no data.shuffle of its own."""
    shuffle, seed, source = out.get("_trinity", {}).pop("shuffle", (False, 42, None))
    if _get(out, "data.shuffle") is _MISSING and _get(out, "data.selector.selector_type") is _MISSING:
        _set(out, "data.shuffle", shuffle, source)
        if shuffle and _get(out, "data.seed") is _MISSING:
            _set(out, "data.seed", seed, source)


ENVIRONMENTS = (  # (what a Trinity-RFT workflow type's name holds, the environment, its package and what it needs)
    ("webshop", "WebShop's simulated shop", "webshop", "with its shop server and its product catalogue"),
    ("agentscopev0", "an AgentScope 0.x agent", "agentscope", "0.x, whose agent API AgentScope 1 replaced (rft runs "
                                                               "AgentScope 1: agentscope_react_math_workflow is this "
                                                               "workflow on it)"),
    ("agentscope_v1_react_search", "an AgentScope agent searching the web", "agentscope",
     "with a web search service (Tavily's API or a SearXNG server) behind an MCP server that npx runs, and a judge"),
    ("agentscope_frozenlake", "an AgentScope agent playing FrozenLake (its example's plugin)", "agentscope",
     "with that plugin module, which rft has not (frozen_lake_workflow is Trinity's FrozenLake without an agent)"),
    ("email_search", "an AgentScope agent searching a mailbox", "agentscope", "with the Enron mail database"),
)


def environment_workflow(name: Any) -> str | None:
    """Why rft refuses Trinity-RFT's workflow type `name` where it steps an environment (`ENVIRONMENTS`): the
    environment and the package it needs; None for another workflow type (rft's own check names those)."""
    for part, what, package, needs in ENVIRONMENTS if isinstance(name, str) else ():
        if part in name.lower():
            return (f"Trinity-RFT's workflow that runs {what}: it needs the {package} package {needs}, and rft has "
                    "no workflow of that environment (rft's: simple_workflow, math_workflow, math_boxed_workflow, "
                    "simple_mm_workflow, tool_call_workflow, agentscope_react_workflow, or one of your own, "
                    "docs/workflows.md)")
    return None


SAME_WORKFLOWS = {"math_rm_workflow": "simple_workflow", "async_simple_workflow": "simple_workflow",
                  "on_policy_distill_workflow": "simple_workflow",
                  "async_math_workflow": "math_workflow", "async_math_boxed_workflow": "math_boxed_workflow",
                  "async_math_rm_workflow": "simple_workflow", "async_simple_mm_workflow": "simple_mm_workflow",
                  "as_react_workflow": "agentscope_react_workflow",  # Trinity registers its class under both
                  # Trinity's BOTS and Learn2Ask examples name their plugins' classes by module path (Trinity
                  # imports them from the working directory, its repository); rft has them under the names the
                  # plugins register
                  "examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow": "bots_math_boxed_workflow",
                  "examples.bots.workflow.bots_math_boxed_workflow.BOTSRefEvalCollectMathBoxedWorkflow":
                      "bots_ref_eval_collect_math_boxed_workflow",
                  "examples.learn_to_ask.workflow.workflow_learn2ask.Learn2AskWorkflow": "learn2ask_workflow"}
"""Trinity-RFT's workflows that compute what an rft workflow of another name does. math_rm_workflow: one chat
turn, each reply scored by the taskset's reward function (Trinity passes it the reply, the messages and the truth
for RM-Gallery's rewards), summed: simple_workflow. async_X: Trinity's X with an async run (its class is
AsyncSimpleWorkflow mixed into X's), which changes how Trinity's runner awaits it, not the experiences; rft's
runner runs every workflow's tasks concurrently already. on_policy_distill_workflow: one chat turn of the task's
messages whose teacher scores the tokens (rft's distillation section, in the trainer); Trinity's logs a reward of 0,
rft's the run's reward function, which trains nothing with on_policy_distill."""


ARGLESS_WORKFLOWS = ("simple_workflow", "simple_mm_workflow", "math_workflow")
"""Trinity-RFT's workflows whose classes read nothing of a taskset's workflow_args (its examples give
simple_mm_workflow `with_think`, which only its math_boxed_workflow reads): accepted with a note."""


def _workflow_keys(t: _Translation, ts: dict, where: str, out: dict, defaults: dict, eval_set: bool) -> None:
    """default_workflow_type, default_reward_fn_type (the taskset's own, else the buffer's default) and
    workflow_args of a taskset: one value per run (rft has one workflow and one reward function for its tasks
    and its validation), so tasksets that end up with different ones are refused. An eval taskset without its own
    workflow takes buffer.explorer_input.default_eval_workflow_type where it is set, as in Trinity-RFT."""
    for key, target in WORKFLOW_DEFAULTS.items():
        own = ts.pop(key, None)
        if own is not None:
            value, source = own, f"{where}.{key}"
        else:
            inherit = "default_eval_workflow_type" if eval_set and key == "default_workflow_type" and \
                "default_eval_workflow_type" in defaults else key
            value, default_where = defaults.get(inherit, (None, ""))
            source = f"{where}.{key} (inherited from {default_where})"
        written = source.split(" ")[0] if own is not None else default_where  # the key the YAML sets
        if value is not None and not isinstance(value, str):
            t.refuse(written, f"={value!r}: a {key} is a name (a string)")
        elif key == "default_workflow_type" and environment_workflow(value):
            t.refuse(written, f"={value!r}: {environment_workflow(value)}")
            ts.pop("workflow_args", None)  # that workflow's own arguments: refused with it, not said again
        elif value is not None:
            _set_shared(t, out, target, SAME_WORKFLOWS.get(value, value) if key == "default_workflow_type" else value,
                        source)
    workflow = _get(out, "workflow.type")  # the run's one workflow, by rft's name (SAME_WORKFLOWS applied)
    if isinstance(ts.get("workflow_args"), dict) and workflow in ARGLESS_WORKFLOWS:
        for arg, value in ts.pop("workflow_args").items():
            t.note(f"{where}.workflow_args.{arg}", value, f"Trinity-RFT's {workflow} reads no workflow_args (nor "
                                                          "does rft's)")
    for key, target in (("workflow_args", "workflow.args"), ("reward_fn_args", "custom_reward_function.reward_kwargs")):
        if ts.get(key) is not None:
            _set_shared(t, out, target, ts.pop(key), f"{where}.{key}")
        ts.pop(key, None)


def _buffer(t: _Translation, buffer: dict, out: dict, kind: str, repeat: int) -> None:
    """The buffer section of an `kind` ("rl", "sft" or "dpo") run."""
    sft = kind in OFFLINE
    b = _section(buffer, "buffer")
    batch = b.pop("batch_size", None)
    batch_given = batch is not None  # else derived from train_batch_size (experiences) / repeat_times
    train_batch = b.pop("train_batch_size", None)
    if kind == "dpo":  # pairs per step: tasks, or experiences (a chosen and a rejected each) / 2
        if train_batch is not None and (not isinstance(train_batch, int) or train_batch % 2):
            t.refuse("buffer.train_batch_size", f"={train_batch!r}: DPO experiences come in pairs (chosen, "
                                                "rejected), so an even number; or set buffer.batch_size (pairs)")
        elif train_batch is not None or batch is not None:
            _set(out, "data.train_batch_size", train_batch // 2 if train_batch is not None else batch)
    elif sft:
        if train_batch is not None or batch is not None:
            _set(out, "data.train_batch_size", train_batch if train_batch is not None else batch)
    else:
        ratio, experts = out.get("algorithm", {}).get("mix", {}).get("expert_data_ratio"), 0
        if ratio is not None and isinstance(train_batch, int) and isinstance(ratio, (int, float)) and 0 <= ratio < 1:
            # mix: Trinity reads ceil(ratio x train_batch_size) expert rows and the rest from the experiences
            experts = math.ceil(ratio * train_batch)
            train_batch -= experts
        of_which = f" less its ceil({ratio} x {train_batch + experts}) = {experts} expert rows" if experts else ""
        if batch is None and train_batch is not None:  # experiences per step: batch_size x repeat_times
            if not isinstance(train_batch, int) or train_batch % repeat:
                t.refuse("buffer.train_batch_size", f"={train_batch!r} (experiences per step{of_which}) is not a "
                                                    f"multiple of repeat_times={repeat}; set buffer.batch_size "
                                                    "(tasks per step)")
            else:
                batch = train_batch // repeat
                train_batch = None
        if batch is not None:
            given = "buffer.batch_size" if batch_given else "buffer.train_batch_size / algorithm.repeat_times"
            _set(out, "data.train_batch_size", batch, given)
            _set(out, f"{A}.ppo_mini_batch_size", batch, given)
        if train_batch is not None and batch is not None and train_batch != batch * repeat:
            if experts:  # rft's mix reads its expert rows beside every experience of a step
                t.refuse("buffer.train_batch_size", f"={train_batch + experts}{of_which}: with the mix algorithm rft "
                                                    "trains on every experience of a step, batch_size x repeat_times "
                                                    f"= {batch * repeat}")
            else:  # experiences per trainer step, apart from the explore step's (multi-turn, multi-agent workflows)
                _set(out, "experience_buffer.train_batch_size", train_batch, "buffer.train_batch_size")
    if "total_epochs" in b:
        _set(out, "trainer.total_epochs", b.pop("total_epochs"), "buffer.total_epochs")
    if "total_steps" in b:
        _set_total_steps(out, b.pop("total_steps"), "buffer.total_steps")
    explorer_input = {k: v for k, v in _section(b.pop("explorer_input", None), "buffer.explorer_input").items()
                      if v is not None}
    trainer_input = {k: v for k, v in _section(b.pop("trainer_input", None), "buffer.trainer_input").items()
                     if v is not None}
    if not sft:
        defaults = _workflow_defaults(b, explorer_input)
        if explorer_input.get("taskset") is None and not explorer_input.get("eval_tasksets"):
            for key, (value, where) in defaults.items():  # no taskset to take them (mode train)
                _set_shared(t, out, WORKFLOW_DEFAULTS.get(key, f"data.{key}"), value, where)
        if explorer_input.get("taskset") is not None:
            files = _taskset(t, explorer_input.pop("taskset"), "buffer.explorer_input.taskset", out, False,
                             defaults)
            if files:
                _set(out, "data.train_files", files, "buffer.explorer_input.taskset.path")
        evals = explorer_input.pop("eval_tasksets", None) or []
        val_files: list = []
        val_names: list = []  # each eval taskset's name: the data_source of its rows that have none
        own_columns: dict = {"prompt_key": [], "response_key": []}  # per val file, its own (or None: shared)
        for i, ts in enumerate(evals):
            name = ts.get("name") if isinstance(ts, dict) else None
            files = _taskset(t, ts, f"buffer.explorer_input.eval_tasksets[{i}]", out, True, defaults)
            own = out.get("_trinity", {}).pop("own_columns", {})
            if files:
                files = files if isinstance(files, list) else [files]
                val_files += files
                val_names += [str(name) if name else None] * len(files)
                for key, columns in own_columns.items():
                    columns += [own.get(key)] * len(files)
        if val_files:
            _set(out, "data.val_files", val_files, "buffer.explorer_input.eval_tasksets")
        if any(val_names):
            _set(out, "data.val_data_sources", val_names)
        for key, columns in own_columns.items():
            if any(column is not None for column in columns):
                _set(out, f"data.val_{key}s", columns, "buffer.explorer_input.eval_tasksets")
        exp = _section(trainer_input.pop("experience_buffer", None), "buffer.trainer_input.experience_buffer")
        exp.pop("name", None)  # a Ray actor's name in Trinity-RFT; rft has no actors
        _replay_buffer(t, exp, out)
        for key in EXPERIENCE_BUFFER_KEYS:
            if key in exp:
                _set(out, f"experience_buffer.{key}", exp.pop(key))
        t.rest(exp, "buffer.trainer_input.experience_buffer")
        _auxiliary_buffers(t, trainer_input, out)
    elif kind == "dpo":
        _preference_buffer(t, trainer_input, out)
    else:
        exp = _section(trainer_input.pop("experience_buffer", None), "buffer.trainer_input.experience_buffer")
        files = _files(t, "buffer.trainer_input.experience_buffer", exp.pop("path", None), exp.pop("split", "train"),
                       exp.pop("subset_name", None))
        if files:
            _set(out, "data.train_files", files)
        exp.pop("name", None)
        storage = exp.pop("storage_type", "file")
        if storage != "file":
            t.refuse("buffer.trainer_input.experience_buffer.storage_type",
                     not_one_of(storage, ("file",), "an SFT dataset is read from files; set it to file" +
                                (" in this stage (a stage inherits the global experience buffer's)"
                                 if t.prefix else "")))
        # a queue's settings, which Trinity-RFT applies to queue storage only: in a stage, the global (RL)
        # experience buffer's, inherited; they have no effect on the files an SFT / DPO run reads (said in a note)
        t.rl_only += [f"buffer.trainer_input.experience_buffer.{key}"
                      for key in ("max_read_timeout", "use_priority_queue", "reuse_cooldown_time")
                      if exp.pop(key, None) is not None]
        fmt = _section(exp.pop("format", None), "buffer.trainer_input.experience_buffer.format")
        ptype = _prompt_type(t, fmt, "buffer.trainer_input.experience_buffer.format")
        if ptype == "messages":
            _set(out, "data.multiturn.enable", True)
            _set(out, "data.multiturn.messages_key", fmt.pop("messages_key", MESSAGES_KEY))
        _concatenated_turns(t, fmt, "buffer.trainer_input.experience_buffer.format", ptype,
                            "data.multiturn.last_turn_only", out)
        for key in ("prompt_key", "response_key"):
            if key in fmt:
                _set(out, f"data.{key}", fmt.pop(key))
        _enable_thinking(t, out, fmt.pop("enable_thinking", None),
                         "buffer.trainer_input.experience_buffer.format.enable_thinking")
        t.rest(fmt, "buffer.trainer_input.experience_buffer.format")
        t.rest(exp, "buffer.trainer_input.experience_buffer")
    if not sft:
        t.rest(explorer_input, "buffer.explorer_input")
    else:  # an sft stage inherits the global explorer input, which belongs to the RL stages
        t.rl_only += [f"buffer.explorer_input.{k}" for k in explorer_input]
    t.rest(trainer_input, "buffer.trainer_input")
    if not sft:
        _plugin_dirs(t, out)
    else:  # an offline stage inherits the global defaults of the tasksets, which belong to the RL stages
        for key in (*WORKFLOW_DEFAULTS, "system_prompt"):
            if b.pop(key, None) is not None:
                t.rl_only.append(f"buffer.{key}")
    t.rest(b, "buffer")


PRIORITY_FNS = {"linear_decay": {"decay"}, "decay_limit_randomization": {"decay", "use_count_limit", "sigma"}}
"""Trinity-RFT's priority functions and their arguments."""


def _replay_buffer(t: _Translation, exp: dict, out: dict) -> None:
    """experience_buffer.replay_buffer, Trinity-RFT's prioritised replay of a queue buffer, is rft's priority queue:
    enable -> experience_buffer.use_priority_queue, its linear_decay priority (model_version - decay x times read)
    -> priority_decay, decay_limit_randomization's use_count_limit (read at most that many times; applies with a
    cooldown, when experiences are read again) and sigma (Gaussian noise on the priority) -> priority_use_count_limit
    / priority_sigma, reuse_cooldown_time (null: each experience read once) as it is. Off, Trinity-RFT reads
    none of its other keys, nor does rft."""
    where = "buffer.trainer_input.experience_buffer.replay_buffer"
    replay = _section(exp.pop("replay_buffer", None), where)
    if not replay.pop("enable", False):
        return
    _set(out, "experience_buffer.use_priority_queue", True, f"{where}.enable")
    fn = replay.pop("priority_fn", "linear_decay")
    args = _section(replay.pop("priority_fn_args", None), f"{where}.priority_fn_args")
    if fn not in PRIORITY_FNS:
        t.refuse(f"{where}.priority_fn", not_one_of(fn, tuple(PRIORITY_FNS), "rft's priority queue ranks by "
                                                    "linear_decay or decay_limit_randomization"))
    else:
        _set(out, "experience_buffer.priority_decay", args.pop("decay", 2.0), f"{where}.priority_fn_args.decay")
        if fn == "decay_limit_randomization":  # Trinity's defaults: use_count_limit 3 (<= 0: none), sigma 0
            limit = args.pop("use_count_limit", 3)
            if replay.get("reuse_cooldown_time") is not None and isinstance(limit, int) and limit > 0:
                _set(out, "experience_buffer.priority_use_count_limit", limit, f"{where}.priority_fn_args.use_count_limit")
            _set(out, "experience_buffer.priority_sigma", args.pop("sigma", 0.0), f"{where}.priority_fn_args.sigma")
        for key in args:
            t.refuse(f"{where}.priority_fn_args.{key}", _not_an_argument(f"{fn} priority", PRIORITY_FNS[fn]))
    if replay.get("reuse_cooldown_time") is not None:
        _set(out, "experience_buffer.reuse_cooldown_time", replay.pop("reuse_cooldown_time"),
             f"{where}.reuse_cooldown_time")
    replay.pop("reuse_cooldown_time", None)
    t.rest(replay, where)


def _plugin_dirs(t: _Translation, out: dict) -> None:
    """Trinity-RFT imports the workflows of its plugin folders (the TRINITY_PLUGIN_DIRS environment variable):
    rft's workflow.path, one folder."""
    dirs = [d for d in os.environ.get(PLUGIN_DIRS_ENV, "").split(",") if d.strip()]
    if len(dirs) > 1:
        t.refuse(f"${PLUGIN_DIRS_ENV}", f"={','.join(dirs)!r}: rft imports the workflows of one folder "
                                        "(workflow.path); put them together")
    elif dirs:
        _set(out, "workflow.path", dirs[0].strip())


def _prompt_type(t: _Translation, fmt: dict, where: str) -> str:
    """A buffer format's prompt_type (popped): plaintext (default) or messages; another is refused."""
    ptype = fmt.pop("prompt_type", "plaintext")
    if ptype not in ("plaintext", "messages"):
        t.refuse(f"{where}.prompt_type", not_one_of(ptype, ("plaintext", "messages"), "Trinity-RFT has plaintext and "
                                                                                     "messages"))
    return ptype


def _concatenated_turns(t: _Translation, fmt: dict, where: str, ptype: str, target: str, out: dict) -> None:
    """enable_concatenated_multi_turn (SFT rows in the messages format): the loss on every assistant turn (true) or,
    Trinity-RFT's default, on the last message only (`target` = last_turn_only); a plaintext row has one turn."""
    if "enable_concatenated_multi_turn" in fmt and ptype != "messages":
        fmt.pop("enable_concatenated_multi_turn")
        t.refuse(f"{where}.enable_concatenated_multi_turn", "applies to prompt_type messages only")
    elif ptype == "messages":
        _set(out, target, not fmt.pop("enable_concatenated_multi_turn", False))


def _auxiliary_buffers(t: _Translation, trainer_input: dict, out: dict) -> None:
    """The mix algorithm's expert rows: the auxiliary buffer its sample strategy names (`_sample_strategy`), read
    from files like an SFT dataset (data.expert); any other auxiliary buffer is refused."""
    where = "buffer.trainer_input.auxiliary_buffers"
    buffers = _section(trainer_input.pop("auxiliary_buffers", None), where)
    wanted = out.get("_trinity", {}).get("expert_buffer")
    for name, buf in buffers.items():
        if name != wanted:
            t.refuse(f"{where}.{name}", "rft reads an auxiliary buffer only as the expert rows of the mix algorithms "
                                        "(mix, mix_chord) (algorithm.sample_strategy_args.sft_dataset_name" +
                     (f", here {wanted!r})" if wanted else "; this run is not mix)"))
            continue
        buf = _section(buf, f"{where}.{name}")
        buf.pop("name", None)  # a Ray actor's name
        storage = buf.pop("storage_type", "file")
        if storage != "file":
            t.refuse(f"{where}.{name}.storage_type", not_one_of(storage, ("file",), "rft reads the expert rows from "
                                                                                  "files (jsonl / parquet)"))
        files = _files(t, f"{where}.{name}", buf.pop("path", None), buf.pop("split", "train"),
                       buf.pop("subset_name", None))
        if files:
            _set(out, "data.expert.files", files)
        fmt = _section(buf.pop("format", None), f"{where}.{name}.format")
        ptype = _prompt_type(t, fmt, f"{where}.{name}.format")
        if ptype == "messages":
            _set(out, "data.expert.messages_key", fmt.pop("messages_key", MESSAGES_KEY))
        _concatenated_turns(t, fmt, f"{where}.{name}.format", ptype, "data.expert.last_turn_only", out)
        for key in ("prompt_key", "response_key", "image_key"):
            if key in fmt:
                _set(out, f"data.expert.{key}", fmt.pop(key))
        _enable_thinking(t, out, fmt.pop("enable_thinking", None), f"{where}.{name}.format.enable_thinking")
        t.rest(fmt, f"{where}.{name}.format")
        t.rest(buf, f"{where}.{name}")
    if wanted and wanted not in buffers:
        t.refuse(where, f"the mix algorithm reads its expert rows from the auxiliary buffer {wanted!r} "
                        "(algorithm.sample_strategy_args.sft_dataset_name), which is missing")


def _preference_buffer(t: _Translation, trainer_input: dict, out: dict) -> None:
    """algorithm_type dpo: the experience buffer holds the preference pairs (rft dpo's data section)."""
    where = "buffer.trainer_input.experience_buffer"
    exp = _section(trainer_input.pop("experience_buffer", None), where)
    files = _files(t, where, exp.pop("path", None), exp.pop("split", "train"), exp.pop("subset_name", None))
    if files:
        _set(out, "data.train_files", files)
    exp.pop("name", None)  # a Ray actor's name
    storage = exp.pop("storage_type", "file")
    if storage != "file":
        t.refuse(f"{where}.storage_type", not_one_of(storage, ("file",), "rft reads preference pairs from files "
                                                                        "(jsonl / parquet)"))
    fmt = _section(exp.pop("format", None), f"{where}.format")
    if _prompt_type(t, fmt, f"{where}.format") == "messages":  # the prompt's chat messages; responses as lists
        _set(out, "data.prompt_key", fmt.pop("messages_key", MESSAGES_KEY))
        for key in ("prompt_key", "system_prompt_key", "system_prompt"):
            if key in fmt:
                t.refuse(f"{where}.format.{key}", "a plaintext key; with prompt_type messages the prompt is the "
                                                  "messages_key column")
                fmt.pop(key)
    else:
        for key in ("prompt_key", "system_prompt_key", "system_prompt"):
            if key in fmt:
                _set(out, f"data.{key}", fmt.pop(key))
    for key in ("chosen_key", "rejected_key"):
        if key in fmt:
            _set(out, f"data.{key}", fmt.pop(key))
    _enable_thinking(t, out, fmt.pop("enable_thinking", None), f"{where}.format.enable_thinking")
    t.rest(fmt, f"{where}.format")
    t.rest(exp, where)


def _explorer(t: _Translation, explorer: dict, out: dict) -> None:
    e = _section(explorer, "explorer")
    e.pop("name", None)
    rm = _section(e.pop("rollout_model", None), "explorer.rollout_model")
    engine = rm.pop("engine_type", "hf")  # Trinity's default is vllm; rft's is hf (vLLM is an optional extra)
    if engine in ("vllm", "vllm_async"):
        _set(out, "actor_rollout_ref.rollout.name", "vllm", "explorer.rollout_model.engine_type")
        if engine == "vllm_async":  # Trinity's AsyncLLM in a process of its own, serving the explorer's requests as
            # they come: rft's engine server (rollout.mode=async; where it cannot serve the run, in process, a note
            # saying why)
            _set(out, "actor_rollout_ref.rollout.mode", "async", "explorer.rollout_model.engine_type")
        # Trinity leaves the scheduler's token budget to vLLM; verl's 8192 is below Trinity's usual max_model_len
        _set(out, "actor_rollout_ref.rollout.max_num_batched_tokens", None)
    elif engine != "hf":
        t.refuse("explorer.rollout_model.engine_type", not_one_of(engine, ("vllm", "vllm_async", "hf"), (
            "rft's engines are vllm (vllm_async) and hf (transformers with a KV cache)")))
    if "engine_num" in rm:  # each engine an explorer process of its own, taking turns at the steps
        _set(out, "trainer.explorer_num", rm.pop("engine_num"), "explorer.rollout_model.engine_num")
    if "tensor_parallel_size" in rm:
        _set(out, "actor_rollout_ref.rollout.tensor_model_parallel_size", rm.pop("tensor_parallel_size"),
             "explorer.rollout_model.tensor_parallel_size")
    for key in ("gpu_memory_utilization", "enforce_eager", "enable_prefix_caching", "enable_chunked_prefill",
                "max_model_len", "dtype"):
        if key in rm:  # the same names as verl's rollout keys
            _set(out, f"actor_rollout_ref.rollout.{key}", rm.pop(key), f"explorer.rollout_model.{key}")
    if "enable_history" in rm:
        _set(out, "workflow.enable_history", rm.pop("enable_history"))
    if "enable_openai_api" in rm:  # the OpenAI-compatible endpoint the workflows reach
        _set(out, "workflow.endpoint", rm.pop("enable_openai_api"))
    if "seed" in rm:  # the rollout engine's sampling seed; rft's one seed covers sampling
        _set(out, "trainer.seed", rm.pop("seed"), "explorer.rollout_model.seed")
    if "enable_prompt_truncation" in rm:
        _prompt_truncation(t, out, rm.pop("enable_prompt_truncation"),
                           "explorer.rollout_model.enable_prompt_truncation")
    for key in ("tool_call_parser", "reasoning_parser"):  # the endpoint's (vLLM's server flags of those names)
        if key in rm:
            _set(out, f"workflow.{key}", rm.pop(key))
    if "chat_template" in rm:
        _set_shared(t, out, "data.chat_template", rm.pop("chat_template"), "explorer.rollout_model.chat_template")
    _enable_thinking(t, out, rm.pop("enable_thinking", None), "explorer.rollout_model.enable_thinking")
    t.rest(rm, "explorer.rollout_model")
    if _get(out, "distillation.enabled") is True:
        _teacher(t, e.pop("auxiliary_models", None), out)
    elif isinstance(e.get("auxiliary_models"), list):
        _set(out, "workflow.auxiliary_models", [_auxiliary_model(t, m, f"explorer.auxiliary_models[{i}]")
                                                for i, m in enumerate(e.pop("auxiliary_models"))],
             "explorer.auxiliary_models")
    for key in WORKFLOW_KEYS:
        if key in e:
            _set(out, f"workflow.{key}", e.pop(key), f"explorer.{key}")
    if "eval_interval" in e:
        _set(out, "trainer.test_freq", e.pop("eval_interval"), "explorer.eval_interval")
    if "eval_on_startup" in e:
        _set(out, "trainer.val_before_train", e.pop("eval_on_startup"), "explorer.eval_on_startup")
    if "bench_on_latest_checkpoint" in e:
        _set(out, "trainer.bench_on_latest_checkpoint", e.pop("bench_on_latest_checkpoint"))
    t.rest(e, "explorer")


def _trainer(t: _Translation, trainer: dict, out: dict, sft: bool, pairs: bool = False) -> None:
    """`sft`: the keys of an offline (SFT or DPO) run; `pairs`: its batches count preference pairs (DPO)."""
    tr = _section(trainer, "trainer")
    tr.pop("name", None)
    strategy = tr.pop("save_strategy", "unrestricted")
    if strategy not in SAVE_STRATEGIES:
        t.refuse("trainer.save_strategy",
                 not_one_of(strategy, SAVE_STRATEGIES, f"Trinity's strategies are {', '.join(SAVE_STRATEGIES)}"))
    elif strategy != "unrestricted":  # checked against the number of processes (_check_save_strategy)
        _set(out, "_trinity.save_strategy", strategy)
    kind = tr.pop("trainer_type", "verl")
    if kind != "verl":
        t.refuse("trainer.trainer_type", not_one_of(kind, ("verl",), "rft is a verl-style trainer; only verl"))
    if "save_interval" in tr:
        _set(out, "trainer.save_freq", tr.pop("save_interval"), "trainer.save_interval")
    if "total_steps" in tr:
        _set_total_steps(out, tr.pop("total_steps"), "trainer.total_steps")
    if "grad_clip" in tr:
        _set(out, "optim.clip_grad" if sft else f"{A}.grad_clip", tr.pop("grad_clip"), "trainer.grad_clip")
    shortcuts = {key: tr.pop(key) for key in TRAINER_SHORTCUTS if key in tr}
    inline, path = tr.pop("trainer_config", None), tr.pop("trainer_config_path", "") or None
    if inline and path:
        t.refuse("trainer.trainer_config_path", "give trainer_config or trainer_config_path, not both")
    if path:
        from omegaconf import OmegaConf

        from rft.config.load import read_yaml

        inline = OmegaConf.to_container(read_yaml(path), resolve=True)
    if inline:
        if sft:
            _sft_trainer_config(t, inline, out, pairs)
        else:
            for key, value in flatten(inline).items():
                mine = _get(out, key)
                if mine is not _MISSING and mine != value:
                    t.refuse(f"trainer.trainer_config.{key}", f"={value!r}, but a Trinity key of this file sets it "
                                                              f"to {mine!r}: give it once")
            for key, value in _merge(out, inline).items():
                out[key] = value
    _trainer_shortcuts(t, shortcuts, out, sft, pairs)
    t.rest(tr, "trainer")


TRAINER_SHORTCUTS = {
    "use_dynamic_bsz": (f"{A}.use_dynamic_bsz", "critic.use_dynamic_bsz"),
    "max_token_len_per_gpu": (f"{A}.ppo_max_token_len_per_gpu", f"{R}.log_prob_max_token_len_per_gpu",
                              "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
                              "critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu"),
    "ulysses_sequence_parallel_size": (f"{A}.ulysses_sequence_parallel_size",
                                       "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
                                       "critic.ulysses_sequence_parallel_size"),
    "use_remove_padding": (f"{M}.use_remove_padding",),
    "trainer_strategy": (f"{A}.strategy", "critic.strategy"),
    "actor_grad_clip": (f"{A}.grad_clip",),
    "balance_batch": ("trainer.balance_batch",),
    "critic_warmup": ("trainer.critic_warmup",),
    "max_checkpoints_to_keep": ("trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep"),
    **{key: (f"{A}.fsdp_config.{key}", f"actor_rollout_ref.ref.fsdp_config.{key}", f"critic.fsdp_config.{key}")
       for key in ("param_offload", "optimizer_offload", "offload_policy")},
}
SFT_SHORTCUTS = {"ulysses_sequence_parallel_size": "ulysses_sequence_parallel_size",
                 "use_remove_padding": "use_remove_padding", "trainer_strategy": "model.strategy",
                 "actor_grad_clip": "optim.clip_grad", "max_checkpoints_to_keep": "trainer.max_ckpt_to_keep"}
"""The shortcuts an SFT / DPO stage takes (rft sft's keys); the token budget is noted (`TOKEN_BUDGET`), the
offloads refused when on, balance_batch and critic_warmup left to the RL stages."""
"""Trinity-RFT's trainer shortcuts -> the verl keys each fills (its veRLConfig.synchronize_config), where
trainer.trainer_config gives none of its own."""
TOKEN_BUDGET = ("Trinity-RFT's SFT forms micro-batches by token count with it, a performance knob (the same "
                "gradient); rft's SFT forms them of data.micro_batch_size_per_gpu rows")


def _trainer_shortcuts(t: _Translation, shortcuts: dict, out: dict, sft: bool, pairs: bool) -> None:
    """Trinity-RFT's trainer shortcuts (`TRAINER_SHORTCUTS`) as it reads them: each fills the actor's, the
    reference's and the critic's keys that trainer_config leaves unset (trainer_config's own value wins there, as in
    Trinity); actor_grad_clip is the actor's over grad_clip. An SFT / DPO stage has no actor or critic: its keys
    are rft sft's (`SFT_SHORTCUTS`), and the token budget of micro-batches changes nothing but speed."""
    for key, value in shortcuts.items():
        if pairs and SFT_SHORTCUTS.get(key) in DPO_LACKS:
            _dpo_lacks(t, f"trainer.{key}", value)
        elif sft and key in SFT_SHORTCUTS:
            if key == "actor_grad_clip" or _get(out, SFT_SHORTCUTS[key]) is _MISSING:
                _set(out, SFT_SHORTCUTS[key], value, f"trainer.{key}")
        elif sft and key in ("use_dynamic_bsz", "max_token_len_per_gpu"):
            t.note(f"trainer.{key}", value, TOKEN_BUDGET)
        elif sft and key in ("balance_batch", "critic_warmup"):
            t.rl_only.append(f"trainer.{key}")
        elif sft:
            if value:
                t.refuse(f"trainer.{key}", f"={value!r}: rft sft keeps the model and optimizer state on the device "
                                           "(no offloading); set false")
        elif key == "actor_grad_clip":  # over trainer.grad_clip, as Trinity-RFT sets it
            if value is not None:
                _set(out, f"{A}.grad_clip", value, f"trainer.{key}")
        elif key == "max_token_len_per_gpu":  # filled once the longest sequence is known (`_token_budgets`)
            _set(out, "_trinity.max_token_len_per_gpu", value)
        else:
            for target in _shortcut_targets(key, out):
                if _get(out, target) is _MISSING:
                    _set(out, target, value, f"trainer.{key}")


def _shortcut_targets(key: str, out: dict) -> tuple[str, ...]:
    """The verl keys trainer.`key` fills (`TRAINER_SHORTCUTS`): the critic's only where the run trains a critic
    (GAE's values; Trinity-RFT fills them either way, where they are not read)."""
    critic = _get(out, "algorithm.adv_estimator") == "gae" or _get(out, "critic.enable") is True
    return tuple(k for k in TRAINER_SHORTCUTS[key] if critic or not k.startswith("critic."))


def _token_budgets(out: dict, max_len: Any) -> None:
    """The token budgets of dynamic batching as Trinity-RFT sets them (an RL run): trainer.max_token_len_per_gpu,
    left out 2 x max_model_len / ulysses_sequence_parallel_size, fills each budget trainer_config leaves unset; a
    budget below the longest sequence (max_model_len, else the prompt + response limits) is raised to it, as
    Trinity-RFT raises the actor's and the critic's (with a warning: so does rft), since one row must fit in a pass.
    """
    given = out.get("_trinity", {}).pop("max_token_len_per_gpu", None)
    data = out.get("data", {})
    limits = (data.get("max_prompt_length"), data.get("max_response_length"))
    longest = max_len if _count(max_len) else sum(limits) if all(_count(x) for x in limits) else None
    sp = _get(out, f"{A}.ulysses_sequence_parallel_size")
    sp = sp if _count(sp) and sp > 0 else 1
    source = "trainer.max_token_len_per_gpu"
    if given is None and longest is not None:
        given, source = math.ceil(2 * longest / sp), "trainer.max_token_len_per_gpu (left out: 2 x model.max_model_len)"
    for target in _shortcut_targets("max_token_len_per_gpu", out):
        if given is not None and _get(out, target) is _MISSING:
            _set(out, target, given, source)
        value = _get(out, target)
        if longest is not None and _count(value) and value < longest:
            logging.getLogger("rft").warning(
                "rft: note: %s=%d is raised to %d to hold the longest sequence (model.max_model_len), as Trinity-RFT "
                "raises it", target, value, longest)
            _set(out, target, longest)


def _count(value: Any) -> bool:
    """Whether `value` is an integer (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


_MISSING = object()


def _get(tree: dict, key: str) -> Any:
    """The value of the dotted `key` in `tree` (a list's item as `name[i]`), _MISSING where there is none."""
    for index, part in re.findall(r"\[(\d+)\]|([^.\[\]]+)", key):
        if part:
            if not isinstance(tree, dict) or part not in tree:
                return _MISSING
            tree = tree[part]
        elif not isinstance(tree, list) or int(index) >= len(tree):
            return _MISSING
        else:
            tree = tree[int(index)]
    return tree


def _verl_default(key: str) -> Any:
    """The RFTConfig default of the verl key `key` (_MISSING for a key the schema lacks)."""
    from rft.config.schema import RFTConfig
    from rft.config.validate import walk

    if not hasattr(_verl_default, "table"):
        _verl_default.table = {k: v for k, _, v in walk(RFTConfig())}  # type: ignore[attr-defined]
    return _verl_default.table.get(key, _MISSING)  # type: ignore[attr-defined]


DPO_LACKS = ("use_remove_padding", "ulysses_sequence_parallel_size")
"""rft sft's keys (`SFT_FROM_VERL`'s targets) that rft dpo has not: it runs padded forward passes in one process."""


def _dpo_lacks(t: _Translation, where: str, value: Any) -> None:
    """A DPO stage's `where` (use_remove_padding or sequence parallelism, `DPO_LACKS`): packed passes are a
    performance knob (the same loss), noted; a sequence-parallel size other than 1 is refused."""
    if where.endswith("use_remove_padding"):
        t.note(where, value, "packed forward passes, a performance knob (the same loss); rft dpo runs padded ones")
    elif value != 1:
        t.refuse(where, f"={value!r}: rft dpo has no sequence parallelism; set 1")


def _sft_trainer_config(t: _Translation, inline: dict, out: dict, pairs: bool = False) -> None:
    """The verl keys of trainer.trainer_config in an SFT stage: the ones with an SFT meaning land on SFT keys
    (`SFT_FROM_VERL`), the ones an SFT stage cannot honour are refused unless at verl's default, the rest are the RL
    stages' (named in a note when the file has none). A DPO stage (`pairs`) takes the same keys; its micro-batch
    counts pairs, half verl's rows."""
    for key, value in flatten(inline).items():
        where = f"trainer.trainer_config.{key}"
        if key in SFT_FROM_VERL:
            target = SFT_FROM_VERL[key]
            if key.startswith(f"{A}.checkpoint."):
                if set(value or []) != {"model", "optimizer", "extra"}:
                    t.refuse(where, f"={value!r}: an SFT stage's checkpoint holds model, optimizer and extra")
                continue
            if key == "trainer.max_critic_ckpt_to_keep":
                if value is not None and value != _get(inline, "trainer.max_actor_ckpt_to_keep"):
                    t.refuse(where, "an SFT stage has no critic: remove it or make it equal max_actor_ckpt_to_keep")
                continue
            if key == f"{A}.optim.warmup_style" and value not in ("constant", "cosine"):
                t.refuse(where, f"={value!r}: constant or cosine")
                continue
            if pairs and key == f"{A}.ppo_micro_batch_size_per_gpu":  # rows: a chosen and a rejected per pair
                if not isinstance(value, int) or value % 2:
                    t.refuse(where, f"={value!r}: DPO rows come in pairs (chosen, rejected); give an even number")
                    continue
                value //= 2
            if pairs and target in DPO_LACKS:
                _dpo_lacks(t, where, value)
                continue
            mine = _get(out, target)
            if mine is not _MISSING and mine != value:
                t.refuse(where, f"={value!r}, but a Trinity key of this file sets {target} to {mine!r}: give it once")
                continue
            _set(out, target, value)
        elif key in SFT_DEFAULT_ONLY:
            if value != _verl_default(key):
                t.refuse(where, f"={value!r}: an SFT stage has no such setting (only verl's default "
                                f"{_verl_default(key)!r})")
        else:
            t.rl_only.append(where)


def _globals(t: _Translation, cfg: dict, out: dict) -> None:
    project, name = cfg.get("project", "Trinity-RFT"), cfg.get("name", "rft")
    _set(out, "trainer.project_name", project, "project")
    _set(out, "trainer.experiment_name", name, "name")
    root, group = cfg.get("checkpoint_root_dir"), str(cfg.get("group") or "")
    if group:  # Trinity's job folder has it; its W&B run is put in that group, rft's in none
        t.note("group", group, "the W&B run group of Trinity-RFT's monitor; rft's W&B run has no group (the run "
                               "folder is <checkpoint_root_dir>/<project>/<group>/<name>, as Trinity-RFT's)")
    if root is not None:
        folder = Path(root) / str(project) / group / str(name)
        if cfg.get("continue_from_checkpoint", True) is False and folder.exists():
            name = f"{name}_{time.strftime('%Y%m%d%H%M%S')}"  # Trinity starts a new experiment
            folder = Path(root) / str(project) / group / name
            _set(out, "trainer.experiment_name", name)
        _set(out, "trainer.default_local_dir", str(folder), FOLDER_KEYS)
    if cfg.get("continue_from_checkpoint", True) is False and root is None:
        _set(out, "trainer.resume_mode", "disable")
    if cfg.get("ray_namespace"):
        t.refuse("ray_namespace", "rft's Ray driver (cluster.ray_address) takes no namespace; remove it")
    cluster = _section(cfg.get("cluster"), "cluster")
    _trainer_gpus(t, cfg, cluster, out)
    address = cluster.pop("ray_address", None)  # Trinity's default `auto` is for a key left out: there, no Ray
    if address is not None:
        _set(out, "ray_init.address", str(address))
    t.rest(cluster, "cluster")
    sync = dict(cfg.get("synchronizer") or {})
    style = sync.pop("sync_style", "fixed")
    named = SYNC_ALIASES.get(str(style).lower(), str(style).lower())
    if named == "explorer_driven":
        t.note("synchronizer.sync_style", style, EXPLORER_DRIVEN)
    elif named != "fixed":  # fixed, Trinity's default: every sync_interval steps after sync_offset, as rft
        t.refuse("synchronizer.sync_style", not_one_of(style, ("fixed", "explorer_driven", *SYNC_STYLES), SYNC_STYLES.get(
            named, "rft synchronises on the fixed schedule (fixed, Trinity-RFT's default: every sync_interval "
            "steps, sync_offset ahead); set fixed")))
    mode = cfg.get("mode", "both")
    if mode in APART_MODES and str(sync.get("sync_method", "")).lower() == "nccl":
        # Trinity-RFT's config check turns it into checkpoint there (with a warning), as rft's would refuse it
        t.change("synchronizer.sync_method", sync.pop("sync_method"), "checkpoint", NCCL_APART.format(mode=mode))
        _set(out, "synchronizer.sync_method", "checkpoint", "synchronizer.sync_method")
    for key in SYNCHRONIZER_KEYS:  # rft's synchronizer section has Trinity-RFT's names
        if key in sync:
            _set(out, f"synchronizer.{key}", sync.pop(key))
    t.rest(sync, "synchronizer")
    _monitor(t, _section(cfg.get("monitor"), "monitor"), out)
    _log(t, _section(cfg.get("log"), "log"), out)
    _service(t, _section(cfg.get("service"), "service"), out)


APART_MODES = ("train", "explore", "bench", "serve")
NCCL_APART = ("with mode={mode} the explorer and the trainer are separate runs with no process group between them: "
              "the explorer loads the weights the trainer writes")
_FIXED = ("rft's explorer and trainer meet on the fixed schedule instead (fixed, Trinity-RFT's default: every "
          "sync_interval steps, the explorer sync_offset steps ahead, one training step per explored batch); set fixed")
EXPLORER_DRIVEN = (
    "Trinity-RFT's explorer asks for the trainer's weights after every sync_interval of its own steps and waits for "
    "them, taking those of the last step the trainer has trained, which cannot be past the batches explored so far; "
    "rft's explorer does the same on the fixed schedule (sync_interval, sync_offset), waiting until the trainer has "
    "trained those batches: the weights explorer_driven takes whenever the trainer keeps pace, never older ones")
"""Why explorer_driven is accepted: the fixed schedule is its freshest case (a note, not a refusal)."""
SYNC_STYLES = {
    "trainer_driven": "the trainer hands over its weights every sync_interval of its own steps and the explorer "
                      "takes them at its next step, each at its own pace; " + _FIXED,
}
"""Trinity-RFT's synchronisation style rft refuses, and why."""
SYNC_ALIASES = {"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"}


def _service(t: _Translation, service: dict, out: dict) -> None:
    """service.data_juicer (server_url, auto_start, port) -> data_processor.data_juicer: where the data_juicer
    operators run Data-Juicer (rft.data_processor.data_juicer); Trinity-RFT has no other service."""
    dj = _section(service.pop("data_juicer", None), "service.data_juicer")
    for key in ("server_url", "auto_start", "port"):
        if key in dj:
            _set(out, f"data_processor.data_juicer.{key}", dj.pop(key))
    t.rest(dj, "service.data_juicer")
    t.rest(service, "service")


def _log(t: _Translation, log: dict, out: dict) -> None:
    """log.level (in any case, as Trinity reads it) -> trainer.log_level, log.group_by_node ->
    trainer.log_group_by_node (rft.monitor.logfile); log.save_dir is set by Trinity itself ("DO NOT SET"), and rft's
    log folder is <trainer.default_local_dir>/log, Trinity's <checkpoint_root_dir>/<project>/<name>/log."""
    from rft.config.schema import LOG_LEVELS

    if "level" in log:
        level = log.pop("level")
        if str(level).upper() not in LOG_LEVELS:
            t.refuse("log.level", not_one_of(level, [*LOG_LEVELS, *map(str.lower, LOG_LEVELS)],  # in any case
                                             f"one of {', '.join(LOG_LEVELS)}"))
        else:
            _set(out, "trainer.log_level", str(level).upper())
    if "group_by_node" in log:
        _set(out, "trainer.log_group_by_node", log.pop("group_by_node"))
    if "save_dir" in log:
        t.refuse("log.save_dir", f"={log.pop('save_dir')!r}: set by Trinity-RFT itself, not in a config; rft writes "
                                 "each process's log under <checkpoint_root_dir>/<project>/<name>/log")
    t.rest(log, "log")



DATA_JUICER = ("a Data-Juicer recipe and its sample selection, which rft does not run for tasks; list the "
               "recipe's operators under task_pipeline.operators (each runs through Data-Juicer, docs/workflows.md)")
"""Why the recipe-level keys of the task pipeline are refused."""


def _data_processor(t: _Translation, dp: dict, out: dict, taskset: dict) -> None:
    """data_processor -> rft's data_processor section (Trinity-RFT's names; rft's check judges the operators).
    The task pipeline's inputs are the raw tasks (data.train_files; a folder: its train split, as a taskset's) and
    the taskset's path is where Trinity-RFT writes the kept ones (a folder: its output.jsonl), which the explorer
    then reads (task_pipeline.output)."""
    where = "data_processor.task_pipeline"
    tp = _section(dp.pop("task_pipeline", None), where)
    for key in ("operators", "target_fields"):
        if tp.get(key) is not None:
            _set(out, f"{where}.{key}", list(tp.pop(key)))
    inputs = tp.pop("inputs", None)
    if inputs:
        files = [_files(t, f"{where}.inputs[{i}]", path, "train")
                 for i, path in enumerate([inputs] if isinstance(inputs, str) else inputs)]
        files = [f for found in files if found for f in ([found] if isinstance(found, str) else found)]
        _set(out, "data.train_files", files[0] if len(files) == 1 else files)
        path = taskset.get("path")
        if path:
            _set(out, f"{where}.output", path if Path(path).suffix in (".jsonl", ".parquet")
                 else str(Path(path) / "output.jsonl"))
    if tp.get("num_process") is not None:
        _set(out, f"{where}.num_process", tp.pop("num_process"))
    tp.pop("num_process", None)
    for key, unset in (("config_path", None), ("priority_weights", {}), ("top_k", -1), ("output", None)):
        if tp.get(key, unset) not in (unset, None):
            t.refuse(f"{where}.{key}", DATA_JUICER if key != "output" else "the output is the taskset's path")
        tp.pop(key, None)
    t.rest(tp, where)
    where = "data_processor.experience_pipeline"
    ep = _section(dp.pop("experience_pipeline", None), where)
    if ep.get("operators") is not None:
        _set(out, f"{where}.operators", list(ep.pop("operators")))
    if ep.pop("save_input", False) or ep.pop("input_save_path", None):
        t.refuse(f"{where}.save_input", "rft does not keep the pipeline's input experiences; set it false (the "
                                        "buffer holds the processed ones, info.operators naming what changed them)")
    ep.pop("input_save_path", None)
    for key in ("inputs", "output"):
        if ep.pop(key, None):
            t.refuse(f"{where}.{key}", "the pipeline reads the explorer's experiences and writes the experience "
                                       "buffer; remove it")
    t.rest(ep, where)
    t.rest(dp, "data_processor")

def _monitor(t: _Translation, monitor: dict, out: dict) -> None:
    """monitor_type (one name or a list) -> trainer.logger (the console too), monitor_args -> trainer.monitor_args
    (rft.monitor.checks checks each key against the monitors named)."""
    from rft.config.schema import LOGGERS, MONITOR_ARGS, REFUSED_LOGGERS

    kind = monitor.pop("monitor_type", None)
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    for name in kinds:
        if name in REFUSED_LOGGERS or name not in LOGGERS:
            t.refuse("monitor.monitor_type", f"={name!r}: " + REFUSED_LOGGERS[name] if name in REFUSED_LOGGERS
                     else not_one_of(name, LOGGERS, f"rft has {list(LOGGERS)}"))
    if kinds:
        _set(out, "trainer.logger", ["console", *[k for k in kinds if k != "console"]])
    args = _section(monitor.pop("monitor_args", None), "monitor.monitor_args")
    for key in list(args):
        if key not in MONITOR_ARGS:
            t.refuse(f"monitor.monitor_args.{key}", f"not a monitor setting rft has ({', '.join(MONITOR_ARGS)})")
            args.pop(key)
    if args:
        _set(out, "trainer.monitor_args", args)
    if monitor.pop("enable_ray_timeline", False):
        t.refuse("monitor.enable_ray_timeline", "rft writes no Ray timeline, on a cluster (cluster.ray_address) "
                                                "either; remove it or set it false")
    t.rest(monitor, "monitor")


def _section_dialect(t: _Translation, cfg: dict, kind: str) -> dict:
    """The verl (RL), sft_trainer (SFT) or rft dpo (DPO) sections of one (stage's) Trinity config; `kind` is
    `_mode`'s."""
    out: dict = {}
    sft = kind in OFFLINE
    if not sft:
        if cfg.get("mode", "both") in MODES:
            _set(out, "trainer.mode", cfg.get("mode", "both"), "mode")
        _globals(t, cfg, out)
        kind = _algorithm(t, cfg.get("algorithm") or {}, out)
        repeat = (out.get("actor_rollout_ref", {}).get("rollout", {}).get("n")) or ALGORITHMS.get(kind, {}).get(
            "repeat_times", 1)
    else:
        repeat = 1
        # the global keys an SFT run has too (names, folder, processes, monitor); the synchronizer and the services
        # (Data-Juicer's, for the data processor) are the RL stages'
        _globals(t, {k: v for k, v in cfg.items() if k not in ("synchronizer", "service")}, out)
        t.rl_only += [f"{section}.{k}" for section in ("synchronizer", "service") for k in cfg.get(section) or {}]
        algo = _section(cfg.get("algorithm"), "algorithm")
        algo.pop("algorithm_type", None)
        if kind == "sft":  # Trinity trains an SFT stage's actor with algorithm.optimizer too (_dpo_algorithm: DPO's)
            _optimizer(t, _section(algo.pop("optimizer", None), "algorithm.optimizer"), out, offline=True)
        if kind == "dpo":
            _dpo_algorithm(t, algo, out)
        for key, value in algo.items() if kind == "sft" else ():
            if key in ALGORITHMS["sft"] and value == ALGORITHMS["sft"][key]:
                continue
            if key == "sample_strategy" and value in SAMPLE_STRATEGIES:
                continue
            t.refuse(f"algorithm.{key}", "an sft stage takes no algorithm keys")
    _model(t, cfg.get("model") or {}, out, sft)
    if not sft and ((cfg.get("data_processor") or {}).get("task_pipeline") or {}).get("inputs"):
        _set(out, "_trinity.processed_tasks", True)  # the taskset's path is the task pipeline's output
    _buffer(t, cfg.get("buffer") or {}, out, kind, repeat)
    if not sft:
        _data_processor(t, _section(cfg.get("data_processor"), "data_processor"), out,
                        ((cfg.get("buffer") or {}).get("explorer_input") or {}).get("taskset") or {})
        _explorer(t, cfg.get("explorer") or {}, out)
    elif cfg.get("data_processor"):
        t.rl_only.append("data_processor")
    elif cfg.get("explorer"):
        t.rl_only += [f"explorer.{k}" for k in cfg["explorer"]]
    _trainer(t, cfg.get("trainer") or {}, out, sft, pairs=kind == "dpo")
    if sft:  # what the YAML leaves out of the optimizer is Trinity's default, not rft sft's
        for key, value in OFFLINE_OPTIMIZER_DEFAULTS.items():
            if _get(out, f"optim.{key}") is _MISSING:
                _set(out, f"optim.{key}", value)
    else:
        max_len = out.get("_trinity", {}).get("max_model_len")
        _engines(t, out)
        _check_model_len(t, out)
        _token_budgets(out, max_len)
        _task_order(out)
        _own_prompt(out)
        _check_prompt_truncation(t, out)
        _math_workflow_reward(t, out)
    _check_save_strategy(t, out)
    t.said_as.update(out.pop("_trinity", {}).get("said_as", {}))
    return out


def _count(value: Any, default: int = 1) -> int | None:
    """`value` as a count (None: left out, `default`); None where it is no count (the checks refuse it)."""
    value = default if value is None else value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


CLUSTER_MODE = "_cluster_mode"  # the mode whose split of the GPUs a staged run's global sections take


def _trainer_gpus(t: _Translation, cfg: dict, cluster: dict, out: dict) -> None:
    """cluster.node_num x gpu_per_node are the whole cluster's GPUs; Trinity-RFT's trainer gets what its explorer
    leaves (its cluster check): in mode both the GPUs beyond the rollout engines' (engine_num x
    tensor_parallel_size) and the auxiliary models', on one node where they fit, else on whole nodes; in mode train
    all of them; in modes explore and bench none (rft's explorer is one process). A one-GPU cluster runs both on
    that GPU (Trinity's colocate mode); one whose engines leave the trainer nothing else is refused, as Trinity
    refuses it."""
    nodes, per_node = cluster.pop("node_num", None), cluster.pop("gpu_per_node", None)
    if nodes is None and per_node is None:
        return
    source = "cluster.gpu_per_node" if per_node is not None else "cluster.node_num"
    mode = cfg.get(CLUSTER_MODE, cfg.get("mode", "both"))
    n, g = _count(nodes), _count(per_node)
    if n is None or g is None or mode not in ("both", "explore", "bench"):  # train (all); a wrong value: refused
        if nodes is not None:
            _set(out, "trainer.nnodes", nodes, "cluster.node_num")
        if per_node is not None:
            _set(out, "trainer.n_gpus_per_node", per_node, "cluster.gpu_per_node")
        return
    if mode != "both":
        t.note(source, per_node if per_node is not None else nodes,
               f"in mode {mode} the cluster's GPUs are the explorer's engines' (engine_num x tensor_parallel_size); "
               "rft's explorer runs in one process")
        return
    explorer = cfg.get("explorer") or {}
    models = [explorer.get("rollout_model") or {}, *(explorer.get("auxiliary_models") or [])]
    sizes = [(_count(m.get("engine_num")), _count(m.get("tensor_parallel_size"))) for m in models if isinstance(m, dict)]
    if any(e is None or tp is None for e, tp in sizes):
        return t.refuse(source, "the explorer's engine_num and tensor_parallel_size must be counts (Trinity-RFT gives "
                                "its trainer the cluster's GPUs they leave)")
    total, engines = n * g, sum(e * tp for e, tp in sizes)
    trainer = total - engines
    if total == 1:  # Trinity's colocate mode: explorer and trainer on one GPU, as rft's mode both runs anyway
        trainer = 1
    elif trainer <= 0:
        return t.refuse(source, f"the cluster's {total} GPUs (node_num {n} x gpu_per_node {g}) all go to the "
                                f"explorer's engines and auxiliary models ({engines}: engine_num x "
                                "tensor_parallel_size), leaving none for the trainer (Trinity-RFT refuses it too): "
                                "lower engine_num or raise gpu_per_node")
    elif trainer > g and trainer % g:
        return t.refuse(source, f"the trainer gets the {trainer} GPUs of the cluster's {total} the explorer's "
                                f"{engines} leave, which is no whole number of nodes of {g} (Trinity-RFT refuses it "
                                "too): change engine_num or tensor_parallel_size")
    _set(out, "trainer.nnodes", 1 if trainer <= g else trainer // g, "cluster.node_num" if nodes is not None else source)
    _set(out, "trainer.n_gpus_per_node", min(trainer, g), source)


def _one_explorer(out: dict) -> str | None:
    """Why the translated run needs its one explorer process (rft's several explorers take turns at whole steps),
    None where several can share its steps."""
    interval, offset = _get(out, "synchronizer.sync_interval"), _get(out, "synchronizer.sync_offset")
    if _get(out, "trainer.mode") in (_MISSING, "both") and interval in (_MISSING, 1) and offset in (_MISSING, 0):
        return ("with sync_interval 1 and sync_offset 0 every step generates with the weights of the step before, so "
                "explorers taking turns could only run one after another")
    if _get(out, "data.selector.selector_type") == "difficulty_based":
        return "its difficulty_based selector learns from the rewards of the tasks it drew, fed back in one explorer"
    return None


def _engines(t: _Translation, out: dict) -> None:
    """explorer.rollout_model.engine_num > 1: Trinity-RFT spreads each step's rollouts over one explorer's engines;
    rft's engines are explorer processes taking turns at whole steps (trainer.explorer_num). Where the run needs one
    explorer (`_one_explorer`: the on-policy schedule, Trinity's default; a difficulty_based selector), one engine
    generates every step, the same rollouts; said in a note."""
    engines = _get(out, "trainer.explorer_num")
    if not isinstance(engines, int) or isinstance(engines, bool) or engines <= 1:
        return
    why = _one_explorer(out)
    if why is not None:
        out["trainer"].pop("explorer_num")
        _said_as(out).pop("trainer.explorer_num", None)
        t.note("explorer.rollout_model.engine_num", engines, (
            f"Trinity-RFT spreads each step's rollouts over its {engines} engines; rft's engines are explorer "
            f"processes taking turns at whole steps, and {why}: one engine generates each step's rollouts, the same "
            "rollouts"))


BOTS_WORKFLOWS = ("bots_math_boxed_workflow", "bots_ref_eval_collect_math_boxed_workflow")


def _math_workflow_reward(t: _Translation, out: dict) -> None:
    """The reward function a Trinity-RFT workflow implies. Its math_workflow scores with its math_reward when the
    taskset names no reward function (its MathWorkflow's default), not by the rows' data_source: so does rft, unless
    trainer_config gives a reward function file. Its math_boxed_workflow scores with math_boxed_reward likewise where
    the taskset names none; its BOTS example's workflows always with their plugin's bots_math_boxed_reward.
    rm_gallery_reward with reward_name
    math_verify_reward is RM-Gallery's rule reward, rft's math_verify_reward (`_rm_gallery_reward`)."""
    reward = out.get("custom_reward_function", {})
    kind, workflow = reward.get("reward_fn_type"), _get(out, "workflow.type")
    if workflow in ("math_workflow", "math_ruler_workflow", "math_trainable_ruler_workflow") and not kind \
            and not reward.get("path"):
        _set(out, "custom_reward_function.reward_fn_type", "math_reward")
    elif workflow in ("math_boxed_workflow", "on_policy_distill_math_workflow") and not kind and not reward.get("path"):
        _set(out, "custom_reward_function.reward_fn_type", "math_boxed_reward")
    elif workflow in BOTS_WORKFLOWS:  # the plugin's workflow scores with its plugin's reward, whatever is named
        if (kind and kind != "bots_math_boxed_reward") or reward.get("path"):
            t.refuse(_said_as(out).get("custom_reward_function.reward_fn_type", "custom_reward_function.path"),
                     f"={kind or reward.get('path')!r}: Trinity-RFT's {workflow} scores with its own reward, "
                     "bots_math_boxed_reward, and would not read it: remove it")
        else:
            _set(out, "custom_reward_function.reward_fn_type", "bots_math_boxed_reward")
    elif kind == "rm_gallery_reward":
        _rm_gallery_reward(t, out)
    if kind == "math_dapo_reward" and reward.get("reward_kwargs"):
        _dapo_overlong(t, out)


def _dapo_overlong(t: _Translation, out: dict) -> None:
    """Trinity-RFT's math_dapo_reward arguments: enable_overlong_penalty with penalty_factor, max_response_length and
    cache_length adds DAPO's soft overlong penalty, 0 up to max_response_length - cache_length tokens, then
    falling linearly to -penalty_factor at max_response_length: rft's reward_model.overlong_buffer (len
    cache_length) under the dapo reward manager, whose ramp ends at data.max_response_length, so the two lengths
    must agree (a penalty before the generation limit has no rft key)."""
    owners = out.get("_trinity", {}).get("set_by", {})
    where = owners.get("custom_reward_function.reward_kwargs", "reward_fn_args")
    kwargs = dict(out["custom_reward_function"].pop("reward_kwargs"))
    enable = kwargs.pop("enable_overlong_penalty", None)
    factor, limit, cache = (kwargs.pop(k, None) for k in ("penalty_factor", "max_response_length", "cache_length"))
    if kwargs:
        t.refuse(where, f"{sorted(kwargs)} are not arguments of Trinity-RFT's math_dapo_reward (it takes "
                        "enable_overlong_penalty, penalty_factor, max_response_length, cache_length)")
    elif enable:
        generated = _get(out, "data.max_response_length")
        if None in (factor, limit, cache) or not limit > cache:
            t.refuse(where, f"={{..., 'max_response_length': {limit!r}, 'cache_length': {cache!r}, 'penalty_factor': "
                            f"{factor!r}}}: enable_overlong_penalty needs all three, max_response_length > "
                            "cache_length (as Trinity-RFT asserts)")
        elif limit != generated:
            t.refuse(f"{where}.max_response_length", f"={limit!r} differs from model.max_response_tokens={generated!r}; "
                            "rft's overlong penalty (reward_model.overlong_buffer) ends at the generation limit: "
                            "make them equal")
        else:
            _set(out, "reward_model.reward_manager", "dapo", where)
            for key, value in (("enable", True), ("len", cache), ("penalty_factor", factor)):
                _set(out, f"reward_model.overlong_buffer.{key}", value, where)


RM_GALLERY_RULES = {"math_verify_reward": "math_verify_reward"}
"""RM-Gallery's rule rewards (reward_name of Trinity-RFT's rm_gallery_reward) that rft has, by rft's reward_fn_type."""


def _rm_gallery_reward(t: _Translation, out: dict) -> None:
    """Trinity-RFT's rm_gallery_reward calls the RM-Gallery reward named by reward_fn_args.reward_name (its other
    arguments go to that reward). rft has RM-Gallery's math_verify_reward (the same math-verify check,
    rft.rewards.math_answers); its reward models and LLM graders are refused by name."""
    owners = out.get("_trinity", {}).get("set_by", {})
    where = owners.get("custom_reward_function.reward_fn_type", "custom_reward_function.reward_fn_type")
    kwargs = dict(out["custom_reward_function"].pop("reward_kwargs", None) or {})
    args_where = owners.get("custom_reward_function.reward_kwargs", "reward_fn_args")
    name = kwargs.pop("reward_name", None)
    if name not in RM_GALLERY_RULES:
        t.refuse(where, f"='rm_gallery_reward' with reward_name={name!r} ({args_where}): RM-Gallery's reward "
                        "models and graders are not in rft (it has RM-Gallery's "
                        f"{', '.join(RM_GALLERY_RULES)}); score with custom_reward_function.path or llm_judge")
    elif set(kwargs) - {"timeout_score"} or kwargs.get("timeout_score", 0.0) != 0.0:
        t.refuse(args_where, f"={kwargs!r}: RM-Gallery's {name} takes no arguments rft honours but reward_name "
                             "(a check past its time limit scores 0, timeout_score's default)")
    else:
        _set(out, "custom_reward_function.reward_fn_type", RM_GALLERY_RULES[name], where)


def _check_save_strategy(t: _Translation, out: dict) -> None:
    """trainer.save_strategy: one process saves alone, so every strategy holds; several processes write their
    checkpoint shards at once (torch.distributed.checkpoint), which is `unrestricted`."""
    strategy = out.get("_trinity", {}).pop("save_strategy", None)
    trainer = out.get("trainer", {})
    if strategy is not None and trainer.get("nnodes", 1) * trainer.get("n_gpus_per_node", 1) > 1:
        t.refuse("trainer.save_strategy", f"={strategy!r}: with several processes every rank writes its shard of a "
                                          "checkpoint at the same time (torch.distributed.checkpoint), which is "
                                          "unrestricted; use unrestricted, or one process")


MODES = ("both", "explore", "train", "bench")


def _mode(t: _Translation, cfg: dict, where: str) -> str:
    """"sft" / "dpo" for an offline run (mode train, algorithm sft / dpo), else "rl" (its mode is trainer.mode,
    `_section_dialect`)."""
    mode = cfg.get("mode", "both")
    kind = (cfg.get("algorithm") or {}).get("algorithm_type", "ppo")
    if kind in OFFLINE:
        if mode != "train":
            t.refuse(f"{where}mode", not_one_of(mode, ("train",), f"the {kind} algorithm runs in mode train (as in "
                                                                   "Trinity-RFT)"))
        return kind
    if mode not in MODES:
        t.refuse(f"{where}mode", not_one_of(mode, MODES, f"rft has {', '.join(MODES)}"))
    return "rl"


VERL_SECTIONS = ("data", "actor_rollout_ref", "critic", "reward_model", "custom_reward_function")
"""verl's top-level sections that Trinity-RFT has not (its algorithm and trainer sections are its own)."""


def translate(cfg: dict, path: str = "config", refusals: list | None = None, overrides: list[str] | tuple = (),
              said_as: dict | None = None) -> dict:
    """The rft config (verl keys; with `stages` when the Trinity config has stages or is an SFT run) of the
    resolved Trinity config `cfg` (read from the file `path`, then the command line's `overrides` applied).
    ConfigError has a line per key rft refuses (an unknown one, or a Trinity-RFT key it cannot honour), each naming
    the file or the override it came from; with a `refusals` list they are appended to it instead ((key, reason)
    pairs) and the translation of the rest is returned. A `said_as` dict gets, for a run without stages, each rft
    key the translation set from a Trinity key and that key (`trinity_spelling`)."""
    t = _Translation()
    if refusals is not None:
        t.raise_if_any = lambda path, overrides=(): refusals.extend(t.refusals)  # type: ignore[method-assign]
    cfg = _typed(t, copy.deepcopy(cfg))
    known = set(SECTIONS)
    for key, value in cfg.items():
        if key in known and key not in ("stages", *_SCALARS) and value is not None and not isinstance(value, dict):
            raise ConfigError(f"{path}: {key} must be a mapping of keys (a section), got {type(value).__name__}")
        if key in VERL_SECTIONS:
            t.refuse(key, "a verl section, not a Trinity-RFT one: put verl keys under trainer.trainer_config")
        elif key not in known:
            t.rest({key: value}, "")
    stages = cfg.get("stages")
    base_cfg = {k: v for k, v in cfg.items() if k != "stages"}
    staged = bool(stages)
    if not stages:
        kind = _mode(_Translation(), cfg, "")  # an offline run's mode is checked as its one stage's, below
        if kind == "rl":
            _mode(t, cfg, "")
            out = _section_dialect(t, base_cfg, "rl")
            t.raise_if_any(path, overrides)
            t.say_notes(path, overrides)
            if said_as is not None:
                said_as.update(t.said_as)
            return out
        stages = [{"stage_name": cfg.get("name", kind)}]
    if _section(cfg.get("cluster"), "cluster").get("ray_address") is not None:
        t.refuse("cluster.ray_address", "Ray places the processes of an RL run without stages only (docs/cluster.md)")
    # the global verl sections (errors are reported per stage); the trainer's GPUs as the run's own mode splits them
    rl_base = _section_dialect(_Translation(), {**base_cfg, "algorithm": {"algorithm_type": "grpo"}, "mode": "both",
                                                CLUSTER_MODE: cfg.get("mode", "both")}, "rl")
    out_stages = []
    rl_only: list[str] = []
    for i, stage in enumerate(stages):
        stage = _section(stage, f"stages[{i}]")
        name = stage.pop("stage_name", None)
        if not name:
            t.refuse(f"stages[{i}].stage_name", "is required")
            continue
        t.rest({k: v for k, v in stage.items() if k not in trinity_keys("")}, f"stages[{i}]")
        # a stage's algorithm replaces the global one; its other sections are merged over the global ones
        merged = _merge({k: v for k, v in base_cfg.items() if not (k == "algorithm" and "algorithm" in stage)},
                        stage)
        where = f"stages[{i}]." if staged else ""  # an offline run without stages: its keys by their own names
        sub = _Translation(where)
        kind = _mode(sub, merged, where)
        sections = _section_dialect(sub, merged, kind)
        t.refusals += sub.refusals
        t.notes += [n for n in sub.notes if re.sub(r"^stages\[\d+\]\.", "", n[0]) not in
                    {re.sub(r"^stages\[\d+\]\.", "", m[0]) for m in t.notes}]  # a global key: noted once
        rl_only += [key for key in sub.rl_only if key not in rl_only]
        for key in sections.get("trainer", {}).copy():
            if key in ("default_local_dir", "project_name") or key == "experiment_name" and staged:
                sections["trainer"].pop(key)  # stage folders and names are rft's (<run>/<stage_name>)
        # an SFT / DPO file without stages is one run named `name`, as in Trinity-RFT (its experiment is not
        # <name>_<name>, the name rft gives a stage of a staged run)
        if kind in OFFLINE:
            sections.get("model", {}).pop("partial_pretrain", None)  # each stage starts from the previous model
            algorithm = {"algorithm_type": "dpo", **sections.pop("algorithm", {})} if kind == "dpo" else "sft"
            out_stages.append({"stage_name": name, "algorithm": algorithm, **sections})
        else:
            sections.get("actor_rollout_ref", {}).get("model", {}).pop("path", None)
            algorithm = sections.pop("algorithm", {})
            out_stages.append({"stage_name": name, "algorithm": algorithm, **sections})
    t.raise_if_any(path, overrides)
    t.say_notes(path, overrides)
    offline = [s for s in out_stages if s["algorithm"] == "sft" or (isinstance(s["algorithm"], dict) and
                                                                 s["algorithm"].get("algorithm_type") == "dpo")]
    if rl_only and len(offline) == len(out_stages):
        logging.getLogger("rft").warning(
            "rft: note: %s: this SFT / DPO run has no RL stage, so these keys of it have no effect: %s", path,
            ", ".join(rl_only))
    return {**rl_base, "stages": out_stages}



# ------------------------------------------------------------------------------ a run's messages in Trinity's keys
SAID_AS = {
    "trainer.total_training_steps": "buffer.total_steps", "trainer.total_epochs": "buffer.total_epochs",
    "trainer.save_freq": "trainer.save_interval", "trainer.test_freq": "explorer.eval_interval",
    "trainer.val_before_train": "explorer.eval_on_startup", f"{R}.n": "algorithm.repeat_times",
    "data.train_batch_size": "buffer.batch_size", f"{A}.ppo_mini_batch_size": "buffer.batch_size",
    f"{M}.path": "model.model_path", "data.max_prompt_length": "model.max_prompt_tokens",
    "data.max_response_length": "model.max_response_tokens", "trainer.default_local_dir": FOLDER_KEYS,
    "trainer.project_name": "project", "trainer.experiment_name": "name", "trainer.mode": "mode",
    "trainer.nnodes": "cluster.node_num", "trainer.n_gpus_per_node": "cluster.gpu_per_node",
    "trainer.explorer_num": "explorer.rollout_model.engine_num", f"{A}.grad_clip": "trainer.grad_clip",
    f"{A}.optim.lr": "algorithm.optimizer.lr", "data.train_files": "buffer.explorer_input.taskset.path",
    "data.val_files": "buffer.explorer_input.eval_tasksets", f"{R}.name": "explorer.rollout_model.engine_type",
}
"""The Trinity key a message names for an rft key the YAML left out (the one a Trinity user sets for it; the
translation's `_set` records the key that did set it, which goes first)."""

VERL_KEYS_UNDER = ("data", "actor_rollout_ref", "critic", "reward_model", "custom_reward_function", "algorithm",
                   "trainer")
"""rft's sections a Trinity YAML sets under trainer.trainer_config (verl's sections)."""


@functools.cache
def _rl_keys() -> frozenset[str]:
    """Every dotted key of rft's RL schema."""
    from omegaconf import OmegaConf

    from rft.config.schema import RFTConfig

    return frozenset(flatten(OmegaConf.to_container(OmegaConf.structured(RFTConfig))))


def trinity_spelling(said_as: dict[str, str]) -> Callable[[str], str | None]:
    """How a run of a Trinity YAML names rft's key in its messages (`rft.config.spelling.spelling_keys`): the Trinity
    key that set it (`said_as`, from `translate`), else the one a Trinity YAML sets it with (`SAID_AS`), else, for a
    key of verl's sections, the same key under trainer.trainer_config; None (as it is) for the rest (rft's own
    sections, whose keys are Trinity's: synchronizer.*, experience_buffer.*, ...)."""
    def spelt(key: str) -> str | None:
        if "[" in key:  # an item of a list: the list's key renamed (workflow.auxiliary_models[0].model_path)
            head, item = key.split("[", 1)
            renamed = spelt(head)
            return f"{renamed}[{item}" if renamed else None
        if key in said_as:
            return said_as[key]
        if key in SAID_AS:
            return SAID_AS[key]
        if key.split(".", 1)[0] in VERL_KEYS_UNDER and key in _rl_keys():
            return f"trainer.trainer_config.{key}"
        return None

    return spelt


# ------------------------------------------------------------------------------ errors in the Trinity key's words
def _scalar_leaves(tree: Any, parts: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path, value) of every string, number or boolean in `tree` (mappings and lists walked)."""
    if isinstance(tree, dict):
        return [leaf for k, v in tree.items() for leaf in _scalar_leaves(v, (*parts, k))]
    if isinstance(tree, list):
        return [leaf for i, v in enumerate(tree) for leaf in _scalar_leaves(v, (*parts, i))]
    return [(parts, tree)] if isinstance(tree, (str, int, float)) else []


def _spelt(parts: tuple) -> str:
    """A path as a Trinity key is written in rft's messages: buffer.explorer_input.eval_tasksets[0].path."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


def _landings(out: dict, key: str, stage: int | None = None) -> tuple:
    """The values rft's `key` has in a translation: the run's and each stage's, or (`stage`) that stage's."""
    stages = [s for s in out.get("stages") or [] if isinstance(s, dict)]
    if stage is not None:
        return (_get(stages[stage], key),)
    return (_get(out, key), *(_get(s, key) for s in stages))


@contextlib.contextmanager
def notes_given() -> Iterator[None]:
    """Translations within say no notes: the translation's notes were given once, by the real one."""
    log = logging.getLogger("rft")
    quiet, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = quiet


def trinity_sources(cfg: dict, key: str, stage: int | None = None) -> list[tuple[str, Any]]:
    """(Trinity key, its value) of the keys of the resolved Trinity config `cfg` whose value rft's `key` takes (in
    the translation's stage `stage`, else anywhere): each string, number and boolean changed in turn, those whose
    change changes `key` in the translation. The reverse map an error about a value needs, to name the key the user
    wrote (run only when there is an error: one translation per key of the file)."""
    with notes_given():
        before = _landings(translate(copy.deepcopy(cfg), refusals=[]), key, stage)
        found = []
        for parts, value in _scalar_leaves(cfg):
            changed = (not value) if isinstance(value, bool) else f"{value}_" if isinstance(value, str) else 2 * abs(value) + 1
            edited = copy.deepcopy(cfg)
            node = edited
            for part in parts[:-1]:
                node = node[part]
            node[parts[-1]] = changed
            try:
                after = _landings(translate(edited, refusals=[]), key, stage)
            except Exception:  # a value the translation cannot take: not where `key` comes from
                continue
            if after != before and value in before:  # the value itself, as the message quotes it
                found.append((_spelt(parts), value))
        return found


def _origin(key: str, overrides: list[str] | tuple, path: str) -> str:
    """Where the Trinity `key` as rft's messages spell it (stages[1].model.x) came from: an override (which spells
    it stages.1.model.x) or the file `path`."""
    return origin(re.sub(r"\[(\d+)\]", r".\1", key), list(overrides), path)


def in_trinity_terms(error: ConfigError, cfg: dict, out: dict, path: str, overrides: list[str] | tuple = (),
                     stage: int | None = None) -> ConfigError:
    """`error`, raised by loading or checking the translation `out` of the Trinity config `cfg` (the file `path`,
    then the command line's `overrides`), or by running its stage `stage`, with the Trinity keys that set the rft
    keys it names put first: "t.yaml: algorithm.repeat_times='four' (rft's actor_rollout_ref.rollout.n): bad value
    for ...". A key of the same name in both (synchronizer.*) is named by the message itself: only where it came
    from goes first."""
    message = str(error)
    # rft's keys the message names: dotted, then those with a list's item (workflow.auxiliary_models[0].model_path)
    keys = [*re.findall(r"[a-z_]+(?:\.[a-z_0-9]+)+", message),
            *re.findall(r"[a-z_]+(?:\.[a-z_0-9]+)*(?:\[\d+\](?:\.[a-z_0-9]+)*)+", message)]
    named = [k for k in dict.fromkeys(keys) if any(v is not _MISSING for v in _landings(out, k, stage))]
    found = [(trinity_key, value, key) for key in named for trinity_key, value in trinity_sources(cfg, key, stage)]
    sources = [(trinity_key, value, key) for trinity_key, value, key in found if trinity_key != key]
    if not sources:
        where = _origin(found[0][0], overrides, path) if found else ""
        return ConfigError(f"{where}: {message}") if where and not message.startswith(where) else error
    first = sources[0][0]
    where = _origin(first, overrides, path)
    said = ", ".join(f"{trinity_key}={value!r} (rft's {key})" for trinity_key, value, key in sources)
    # the Trinity key says where the value came from: not the translation's trainer_config the loader names
    message = message.removeprefix(f"{path} (trainer.trainer_config): ")
    for trinity_key, _, key in sources:  # what to do, in the keys the user can set (rft's are refused here)
        message = message.replace(f"set {key}=", f"set {trinity_key}=")
    return ConfigError(f"{where}: {said}: {message}")
