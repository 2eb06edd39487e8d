"""Config validation, before any model loads.

Phase 1 walks the schema: `choices` and `unsupported` metadata (see schema.py), except in the sections of parts the
run does not build (`inactive_sections`: their keys have no effect, as in verl, and the ones set to something other
than the default are named in one note line). Phase 2 checks values across fields: batch-size divisibility,
required paths, registry names. Every error names the key and what to set.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rft.config.errors import ConfigError
from rft.config.schema import VLLM_KEYS, RFTConfig
from rft.sync.schedule import is_synchronous, workflow_apart

log = logging.getLogger("rft")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model", "vocab.txt")
"""A folder holding one of these has a tokenizer transformers can load (without one it builds an empty one)."""

# Names that are part of verl's vocabulary but arrive with a later capability of rft (none at the moment).
_PENDING_ESTIMATORS: dict[str, str] = {}


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


def _all_null(value: Any) -> bool:
    """An engine_kwargs-style mapping whose nested values are all null (or the string 'None'): the default."""
    if isinstance(value, dict):
        return all(_all_null(v) for v in value.values())
    return value is None or value == "None"


def inactive_sections(cfg: RFTConfig) -> dict[str, str]:
    """{key or key prefix ending in '.': why}: the config keys of parts this run does not build (no effect)."""
    from rft.algorithms import ADV_ESTIMATORS, estimator_spec

    out: dict[str, str] = {}
    if not cfg.reward_model.enable:
        why = "reward_model.enable=false"
        for key in ("model.", "micro_batch_size_per_gpu", "max_length", "reward_weight", "rule_weight"):
            out[f"reward_model.{key}"] = why
    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    needs_values = algo.adv_estimator in ADV_ESTIMATORS and "values" in estimator_spec(algo.adv_estimator).needs
    if not (cfg.critic.enable if cfg.critic.enable is not None else needs_values):
        why = f"this run builds no critic (algorithm.adv_estimator={algo.adv_estimator!r})"
        for f in dataclasses.fields(cfg.critic):
            if f.name != "enable":
                out[f"critic.{f.name}" + ("." if dataclasses.is_dataclass(getattr(cfg.critic, f.name)) else "")] = why
    if not (actor.use_kl_loss or algo.use_kl_in_reward):
        out["actor_rollout_ref.ref."] = "this run builds no reference (no KL term)"
    if cfg.actor_rollout_ref.rollout.name != "vllm":
        why = f"actor_rollout_ref.rollout.name={cfg.actor_rollout_ref.rollout.name!r} (these are the vLLM engine's)"
        for key in VLLM_KEYS:
            out[f"actor_rollout_ref.rollout.{key}"] = why
    if not algo.mix.enable:
        why = "algorithm.mix.enable=false"
        out["data.expert."] = why
        for f in dataclasses.fields(algo.mix):
            if f.name != "enable":
                out[f"algorithm.mix.{f.name}"] = why
    return out


def _inactive(key: str, inactive: dict[str, str]) -> str | None:
    for prefix, why in inactive.items():
        if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
            return why
    return None


def _check_schema(cfg: Any, inactive: dict[str, str] | None = None) -> None:
    """`choices`, then `unsupported` (a value other than the default and the field's `also` values is refused)
    outside the `inactive` sections; inside them, the keys set to something other than the default are named in
    one note line per reason."""
    unused: dict[str, list[str]] = {}
    for key, f, value in walk(cfg):
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ConfigError(f"{key}={value!r} is not allowed; choose one of {list(choices)}")
        default = _default_of(f)
        why = _inactive(key, inactive or {})
        if why is not None:
            if value != default and not (isinstance(value, dict) and _all_null(value)):
                unused.setdefault(why, []).append(f"{key}={value!r}")
            continue
        reason = f.metadata.get("unsupported")
        if reason is not None:
            if isinstance(value, dict) and _all_null(value):
                continue
            if value != default and value not in f.metadata.get("also", ()):
                allowed = " or ".join(repr(v) for v in (default, *f.metadata.get("also", ())))
                raise ConfigError(
                    f"{key}={value!r} is not supported by rft yet ({reason}); remove it or set it to {allowed}"
                )
    for why, keys in unused.items():
        log.warning("rft: note: %s, so these keys have no effect: %s", why, ", ".join(keys))


def _files(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    files = [value] if isinstance(value, str) else list(value)
    for f in files:
        if not isinstance(f, str):
            raise ConfigError(f"{key} must be a file path or a list of paths, got {f!r}")
        if Path(f).suffix not in (".parquet", ".jsonl"):
            raise ConfigError(f"{key}: {f!r} is not a .parquet or .jsonl file")
    return files


def _check_model_dir(key: str, path: str) -> None:
    if not (Path(path).expanduser() / "config.json").is_file():
        raise ConfigError(
            f"{key}={path!r} is not a Hugging Face model folder (no config.json); rft loads models from local "
            "folders only"
        )


def _check_vllm(rollout) -> None:
    """rollout.name=vllm: vLLM importable (the error names the extra), its keys' values usable here."""
    import torch

    from rft.errors import RftError
    from rft.rollout.vllm_engine import require_vllm

    r = "actor_rollout_ref.rollout"
    try:
        require_vllm(f"{r}.name=vllm")
    except RftError as e:
        raise ConfigError(str(e)) from None
    tp = rollout.tensor_model_parallel_size
    if tp < 1 or (tp > 1 and torch.cuda.is_available()):
        raise ConfigError(f"{r}.tensor_model_parallel_size={tp}: rft runs its vLLM engine unsharded in the "
                          "trainer's process; set 1")
    if tp > 2:
        raise ConfigError(f"{r}.tensor_model_parallel_size={tp} needs {tp} devices and this machine has no CUDA; "
                          "set 1 (2, verl's default, is accepted and runs one engine)")
    if not 0 < rollout.gpu_memory_utilization <= 1:
        raise ConfigError(f"{r}.gpu_memory_utilization={rollout.gpu_memory_utilization} must be in (0, 1]")
    for key in ("max_num_batched_tokens", "max_num_seqs", "max_model_len"):
        value = getattr(rollout, key)
        if value is not None and value < 1:
            raise ConfigError(f"{r}.{key}={value} must be >= 1")
    kwargs = rollout.engine_kwargs or {}
    unknown = sorted(set(kwargs) - {"vllm", "sglang"})
    if unknown:
        raise ConfigError(f"{r}.engine_kwargs: {unknown} are not engines; the keys are vllm (arguments of vllm.LLM) "
                          "and sglang")
    if not _all_null(kwargs.get("sglang") or {}):
        raise ConfigError(f"{r}.engine_kwargs.sglang: rft has no SGLang engine; remove it")
    if not isinstance(kwargs.get("vllm") or {}, dict):
        raise ConfigError(f"{r}.engine_kwargs.vllm must be a mapping of vllm.LLM arguments")


def _check_files_exist(key: str, files: list[str]) -> None:
    for f in files:
        if not Path(f).expanduser().is_file():
            raise ConfigError(f"{key}: file {f!r} does not exist")


def _check_inputs(model_key: str, model_path: str | None, data: Any, check_paths: bool,
                  check_model_path: bool, require_train: bool = True) -> None:
    """The model folder and the data files both trainers need (`data` has train_files / val_files);
    `require_train`: data.train_files must be set."""
    if not model_path:
        raise ConfigError(f"{model_key} is required: a Hugging Face model folder")
    if getattr(data, "task_storage", "file") != "file":  # a database: tasks of a table
        if not isinstance(data.train_files, str) or not data.train_files:
            raise ConfigError(f"data.task_storage={data.task_storage}: data.train_files must be one SQLAlchemy URL "
                              f"or SQLite file, got {data.train_files!r}")
        _files(data.val_files, "data.val_files")
        if check_paths:
            _check_files_exist("data.val_files", _files(data.val_files, "data.val_files"))
            if check_model_path:
                _check_model_dir(model_key, model_path)
        return
    train_files = _files(data.train_files, "data.train_files")
    val_files = _files(data.val_files, "data.val_files")
    if not train_files and require_train:
        raise ConfigError("data.train_files is required: a parquet/jsonl file or a list of them")
    if check_paths:
        if check_model_path:
            _check_model_dir(model_key, model_path)
        _check_files_exist("data.train_files", train_files)
        _check_files_exist("data.val_files", val_files)


def processes(t: Any) -> int:
    """The number of processes a trainer section asks for: nnodes x n_gpus_per_node."""
    return t.nnodes * t.n_gpus_per_node


def _check_runtime(prefix: str, t: Any, several: str | None = None) -> None:
    """Process counts, an available device, known loggers, a consistent resume setting (trainer sections).
    `several`: why this trainer runs one process only (None: several are allowed)."""
    _positive(f"{prefix}.nnodes", t.nnodes)
    _positive(f"{prefix}.n_gpus_per_node", t.n_gpus_per_node)
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
    _check_loggers(prefix, t.logger, t.monitor_args)
    if t.resume_mode == "resume_path" and not t.resume_from_path:
        raise ConfigError(f"{prefix}.resume_mode=resume_path needs {prefix}.resume_from_path (a global_step_N folder)")
    if t.resume_from_path and t.resume_mode != "resume_path":
        raise ConfigError(f"{prefix}.resume_from_path is set: also set {prefix}.resume_mode=resume_path")


def _check_loggers(prefix: str, loggers: Any, monitor_args: Any) -> None:
    """trainer.logger: names rft has (a refused one with its reason), their packages installed (the error names the
    extra); trainer.monitor_args: known keys, each of a monitor the list names."""
    import importlib.util

    from rft.config.schema import LOGGERS, MONITOR_ARGS, REFUSED_LOGGERS

    if isinstance(loggers, str) or not all(isinstance(x, str) for x in loggers):
        raise ConfigError(f"{prefix}.logger must be a list of names, e.g. [console, tensorboard], got {loggers!r}")
    for name in loggers:
        if name in REFUSED_LOGGERS:
            raise ConfigError(f"{prefix}.logger: {name!r} is not supported by rft ({REFUSED_LOGGERS[name]})")
        if name not in LOGGERS:
            raise ConfigError(f"{prefix}.logger: {name!r} is not a monitor; choose from {list(LOGGERS)}")
        needs = LOGGERS[name]
        if needs is not None and importlib.util.find_spec(needs[0]) is None:
            raise ConfigError(
                f"{prefix}.logger: {name!r} needs the {needs[0]} package, which is not installed: pip install "
                f"'rft[{needs[1]}]' (or remove {name!r} from {prefix}.logger)"
            )
    if not isinstance(monitor_args, dict):
        raise ConfigError(f"{prefix}.monitor_args must be a mapping, e.g. {{uri: sqlite:///mlflow.db}}")
    for key, value in monitor_args.items():
        if key not in MONITOR_ARGS:
            raise ConfigError(f"{prefix}.monitor_args.{key} is not a monitor setting; known: "
                              f"{', '.join(f'{k} ({m})' for k, m in MONITOR_ARGS.items())}")
        if MONITOR_ARGS[key] not in loggers:
            raise ConfigError(f"{prefix}.monitor_args.{key} is a setting of the {MONITOR_ARGS[key]} monitor, which "
                              f"{prefix}.logger={list(loggers)} does not name: add {MONITOR_ARGS[key]!r} or remove it")
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{prefix}.monitor_args.{key} must be a string, got {value!r}")


def _check_reward_functions(crf: Any) -> None:
    """custom_reward_function.name: one name or a list of distinct names (a list needs a path); reward_weights:
    null or one finite number per function (the built-in scorers count as one)."""
    names = [crf.name] if isinstance(crf.name, str) else crf.name
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(
            f"custom_reward_function.name must be a function name or a non-empty list of names, got {crf.name!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"custom_reward_function.name lists a function twice: {names}")
    if len(names) > 1 and not crf.path:
        raise ConfigError(
            f"custom_reward_function.name lists {len(names)} functions: set custom_reward_function.path to the "
            "Python file that defines them"
        )
    if names != ["compute_score"] and not crf.path and not crf.reward_fn_type:
        raise ConfigError(
            f"custom_reward_function.name={crf.name!r} picks a function of custom_reward_function.path, which is not "
            "set: set path to the Python file that defines it, or remove name (the built-in scorers are chosen by "
            "each row's data_source)"
        )
    if crf.reward_weights is not None:
        count = len(names) if crf.path else 1
        weights = list(crf.reward_weights)
        if len(weights) != count or not all(math.isfinite(w) for w in weights):
            raise ConfigError(
                f"custom_reward_function.reward_weights={weights} must hold {count} finite number(s), one per "
                f"reward function ({names if crf.path else crf.reward_fn_type or 'the built-in scorer'})"
            )


def _check_reward_fn_type(cfg: RFTConfig) -> None:
    """custom_reward_function.reward_fn_type (a typed reward, rft.rewards.typed; its name is checked by the schema
    walk's choices) against the keys that choose another reward function, and num_workers."""
    check_reward_fn_type(cfg.custom_reward_function, cfg.reward_model, len(cfg.workflow.auxiliary_models))


def check_reward_fn_type(crf: Any, rm: Any = None, judge_models: int | None = None) -> None:
    """The custom_reward_function checks of `_check_reward_fn_type`, for any command that builds a reward function
    from that section (`rft eval` too): `rm` the reward_model section (None: the command has none); `judge_models`
    how many auxiliary models an llm_judge can choose from (None: the command serves none, so llm_judge is refused)."""
    if crf.num_workers is not None and (isinstance(crf.num_workers, bool) or not isinstance(crf.num_workers, int)
                                        or crf.num_workers < 1):
        raise ConfigError(f"custom_reward_function.num_workers must be an integer >= 1 or null, got {crf.num_workers!r}")
    kind = crf.reward_fn_type
    if crf.reward_kwargs and not crf.path and kind is None:
        raise ConfigError(
            f"custom_reward_function.reward_kwargs={dict(crf.reward_kwargs)!r}: the built-in scorers take no "
            "arguments; they are for the functions of custom_reward_function.path (or llm_judge's settings)"
        )
    if kind is None:
        return
    key = f"custom_reward_function.reward_fn_type={kind!r}"
    if kind == "llm_judge":
        from rft.rewards.judge import check_settings

        if judge_models is None:
            raise ConfigError(f"{key}: the judge is one of rft train's workflow.auxiliary_models, which this command "
                              "does not serve; score with rft train's validation, or choose another reward_fn_type")
        check_settings(dict(crf.reward_kwargs), judge_models)
        if rm is not None and rm.enable:
            raise ConfigError(f"{key} with reward_model.enable=true: rft scores with one of them; remove one")
        if crf.reward_weights is not None:
            raise ConfigError(f"{key} with custom_reward_function.reward_weights: the judge is the only reward "
                              "function; remove reward_weights")
    elif crf.reward_kwargs:
        raise ConfigError(f"{key} with custom_reward_function.reward_kwargs={dict(crf.reward_kwargs)!r}: the typed "
                          "rewards take no arguments; remove reward_kwargs")
    if crf.path:
        raise ConfigError(
            f"{key} and custom_reward_function.path={crf.path!r} are both set: each chooses the run's reward function "
            "and rft would honour only one; remove one of them (to combine a typed reward with your own, import it "
            "in your file: from rft.rewards import " + kind.replace("math_dapo_reward", "math_boxed_reward") + ")"
        )
    if crf.name != "compute_score":
        raise ConfigError(
            f"{key} with custom_reward_function.name={crf.name!r}: name picks a function of custom_reward_function.path"
            ", which a typed reward does not read; remove name"
        )
    if rm is not None and rm.enable and rm.rule_weight == 0:
        raise ConfigError(
            f"{key} is set, but with reward_model.enable=true and reward_model.rule_weight=0 the reward function never "
            "runs: set reward_model.rule_weight (e.g. 1.0) to add its score, or remove reward_fn_type"
        )


def _check_loss_options(cfg: RFTConfig) -> None:
    """Ranges of the policy-loss, KL-controller and DAPO options (each error names the key and what to set)."""
    actor, algo, data = cfg.actor_rollout_ref.actor, cfg.algorithm, cfg.data
    pl = actor.policy_loss
    prefix = "actor_rollout_ref.actor"
    for key, value in (("policy_loss.clip_cov_ratio", pl.clip_cov_ratio), ("policy_loss.kl_cov_ratio", pl.kl_cov_ratio),
                       ("tau_pos", actor.tau_pos), ("tau_neg", actor.tau_neg)):
        if not value > 0:
            raise ConfigError(f"{prefix}.{key} must be > 0, got {value}")
    for key, value in (("policy_loss.ppo_kl_coef", pl.ppo_kl_coef), ("policy_loss.tau", pl.tau)):
        if not value >= 0:
            raise ConfigError(f"{prefix}.{key} must be >= 0, got {value}")
    _positive(f"{prefix}.loss_scale_factor", actor.loss_scale_factor, allow_none=True)
    _positive("critic.loss_scale_factor", cfg.critic.loss_scale_factor, allow_none=True)
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
    ob = cfg.reward_model.overlong_buffer
    if ob.enable:
        if not isinstance(ob.len, int) or not 0 < ob.len <= data.max_response_length:
            raise ConfigError(
                f"reward_model.overlong_buffer.len={ob.len!r} must be an integer in (0, data.max_response_length="
                f"{data.max_response_length}] when reward_model.overlong_buffer.enable=true"
            )
        if not ob.penalty_factor >= 0:
            raise ConfigError(f"reward_model.overlong_buffer.penalty_factor must be >= 0, got {ob.penalty_factor}")
    fg = algo.filter_groups
    if fg.enable and not fg.metric:
        raise ConfigError(
            "algorithm.filter_groups.enable=true needs algorithm.filter_groups.metric: score, seq_reward, "
            "seq_final_reward, or a numeric key the reward function returns (e.g. acc)"
        )
    if not isinstance(fg.max_num_gen_batches, int):
        raise ConfigError(
            f"algorithm.filter_groups.max_num_gen_batches must be an integer (<= 0: no limit), got "
            f"{fg.max_num_gen_batches!r}"
        )


def _check_new_estimator_options(cfg: RFTConfig) -> None:
    """gdpo's reward dimensions and the optimal token baseline's sum of squared probabilities: required where the
    estimator reads them, refused where nothing would."""
    from rft.algorithms import estimator_spec

    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    needs = estimator_spec(algo.adv_estimator).needs
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


def _check_rollout_correction(cfg: RFTConfig) -> None:
    """algorithm.rollout_correction.*: thresholds that parse, options that act, the bypass-mode loss; dro_beta."""
    from rft.algorithms.rollout_correction import parse_is_threshold, parse_rs_options, parse_rs_thresholds

    rc, pl = cfg.algorithm.rollout_correction, cfg.actor_rollout_ref.actor.policy_loss
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


def _check_critic(cfg: RFTConfig, world_size: int, check_paths: bool) -> None:
    """The critic's sizes and ranges (its null sizes follow the actor's), trainer.critic_warmup, and that an
    estimator which needs values has a critic."""
    from rft.algorithms import estimator_spec

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
    use_critic = critic.enable if critic.enable is not None else needs_values
    if not use_critic:
        if warmup > 0:
            raise ConfigError(
                f"trainer.critic_warmup={warmup} trains only a critic, and this run has none: use "
                "algorithm.adv_estimator=gae or critic.enable=true, or set trainer.critic_warmup=0"
            )
        return
    if check_paths and critic.model.path:
        _check_model_dir("critic.model.path", critic.model.path)
    n, data = cfg.actor_rollout_ref.rollout.n, cfg.data
    if critic.rollout_n is not None and critic.rollout_n != n:
        raise ConfigError(
            f"critic.rollout_n={critic.rollout_n} differs from actor_rollout_ref.rollout.n={n}; rft has one group "
            "size: remove critic.rollout_n"
        )
    for key in ("ppo_mini_batch_size", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu",
                "forward_micro_batch_size", "forward_micro_batch_size_per_gpu", "ppo_epochs"):
        _positive(f"critic.{key}", getattr(critic, key), allow_none=True)
    for a, b in (("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
                 ("forward_micro_batch_size", "forward_micro_batch_size_per_gpu")):
        if getattr(critic, a) is not None and getattr(critic, b) is not None:
            raise ConfigError(f"set only one of critic.{a} and critic.{b}")
    mini = critic.ppo_mini_batch_size or actor.ppo_mini_batch_size
    if data.train_batch_size % mini or mini % world_size:
        raise ConfigError(
            f"critic.ppo_mini_batch_size ({mini}) must divide data.train_batch_size ({data.train_batch_size}) and "
            f"be a multiple of the number of processes ({world_size}); both count prompts"
        )
    micro = critic.ppo_micro_batch_size_per_gpu or (
        critic.ppo_micro_batch_size // world_size if critic.ppo_micro_batch_size else None)
    rows_per_mini = mini * n // world_size
    if micro is not None and rows_per_mini % micro:
        raise ConfigError(
            f"a critic mini-batch holds critic.ppo_mini_batch_size x rollout.n = {mini} x {n} = {rows_per_mini} rows "
            f"per process, which is not a multiple of critic.ppo_micro_batch_size_per_gpu ({micro})"
        )
    if not critic.cliprange_value > 0:
        raise ConfigError(f"critic.cliprange_value must be > 0, got {critic.cliprange_value}")
    if critic.optim.lr <= 0:
        raise ConfigError(f"critic.optim.lr must be > 0, got {critic.optim.lr}")
    if not 0 <= critic.optim.lr_warmup_steps_ratio <= 1:
        raise ConfigError("critic.optim.lr_warmup_steps_ratio must be in [0, 1]")
    if critic.model.lora_rank < 0:
        raise ConfigError(f"critic.model.lora_rank must be >= 0, got {critic.model.lora_rank}")
    _check_checkpoint_contents("critic.checkpoint", critic.checkpoint)


def _check_reward_model(cfg: RFTConfig, check_paths: bool) -> None:
    """reward_model.*: a model folder when enabled, sizes, weights; a reward function that would never run."""
    rm = cfg.reward_model
    if not rm.enable:
        return  # verl: the other reward_model keys have no effect then
    if not rm.model.path:
        raise ConfigError("reward_model.enable=true needs reward_model.model.path: a sequence-classification model "
                          "folder with one label (e.g. from `rft init-model --preset tiny-rm`)")
    if check_paths:
        _check_model_dir("reward_model.model.path", rm.model.path)
        if rm.model.input_tokenizer and not Path(rm.model.input_tokenizer).expanduser().is_dir():
            raise ConfigError(f"reward_model.model.input_tokenizer={rm.model.input_tokenizer!r} is not a folder")
    for key in ("micro_batch_size_per_gpu", "max_length"):
        _positive(f"reward_model.{key}", getattr(rm, key), allow_none=True)
    for key in ("reward_weight", "rule_weight"):
        value = getattr(rm, key)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"reward_model.{key} must be a finite number, got {value!r}")
    if rm.reward_weight == 0 and rm.rule_weight == 0:
        raise ConfigError("reward_model.reward_weight and reward_model.rule_weight are both 0: every score would be 0")
    if rm.rule_weight == 0 and cfg.custom_reward_function.path:
        raise ConfigError(
            "custom_reward_function.path is set, but with reward_model.enable=true and reward_model.rule_weight=0 "
            "the reward function never runs: set reward_model.rule_weight (e.g. 1.0) to add its score, or remove "
            "custom_reward_function.path"
        )


def _check_checkpoint_contents(prefix: str, ckpt: Any) -> None:
    contents = set(ckpt.save_contents)
    allowed_contents = {"model", "optimizer", "extra", "hf_model"}
    for key, items in (("save_contents", contents), ("load_contents", set(ckpt.load_contents))):
        if items - allowed_contents:
            raise ConfigError(
                f"{prefix}.{key}: {sorted(items - allowed_contents)} unknown; allowed: {sorted(allowed_contents)}"
            )
    if not set(ckpt.load_contents) <= contents:
        raise ConfigError(f"{prefix}.load_contents must be a subset of save_contents")


def _check_optim(prefix: str, optim: Any, val_files: Any, test_freq: int) -> None:
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


def _check_offload(cfg: RFTConfig, world_size: int) -> None:
    """FSDP's CPU offload keys. On a CPU run the parameters and optimizer state already live in host memory: every
    setting holds and changes nothing. On cuda a sharded model (several processes) keeps its parameter shards in
    host memory with param_offload / offload_policy (FSDP1's CPUOffload, FSDP2's CPUOffloadPolicy), its optimizer
    stepping there too; one process has no FSDP, hence no offload."""
    from rft.models.load import resolve_device

    if resolve_device(cfg.trainer.device).type == "cpu":
        return
    arr = cfg.actor_rollout_ref
    for section, fsdp in (("actor_rollout_ref.actor", arr.actor.fsdp_config),
                          ("actor_rollout_ref.ref", arr.ref.fsdp_config), ("critic.model", cfg.critic.model.fsdp_config)):
        for name in ("param_offload", "optimizer_offload", "offload_policy"):
            if not getattr(fsdp, name):
                continue
            if world_size == 1:
                raise ConfigError(
                    f"{section}.fsdp_config.{name}=true: one process on cuda has no FSDP, hence no CPU offload; set "
                    "it to false, or run several processes (trainer.n_gpus_per_node)"
                )
            if name == "optimizer_offload" and not (fsdp.param_offload or fsdp.offload_policy):
                raise ConfigError(
                    f"{section}.fsdp_config.optimizer_offload=true alone: rft's optimizer steps where the parameter "
                    "shards live, so set param_offload=true (or offload_policy=true) with it, or set it to false"
                )


def _check_processes(cfg: RFTConfig, world_size: int) -> None:
    """What several processes need: a batch of prompts that splits evenly (all responses of a prompt stay on one
    rank)."""
    data, t = cfg.data, cfg.trainer
    where = f"{world_size} processes (trainer.nnodes x trainer.n_gpus_per_node = {t.nnodes} x {t.n_gpus_per_node})"
    if data.train_batch_size % world_size:
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size}) must be a multiple of the number of processes: "
            f"{where} each generate for train_batch_size / processes prompts"
        )


def _check_explorers(cfg: RFTConfig, method: str | None, one_process: bool) -> None:
    """trainer.explorer_num / explorer_rank: several explorers share a database buffer and take turns at the steps."""
    t = cfg.trainer
    if not isinstance(t.explorer_num, int) or t.explorer_num < 1:
        raise ConfigError(f"trainer.explorer_num must be an integer >= 1, got {t.explorer_num!r}")
    if not isinstance(t.explorer_rank, int) or not 0 <= t.explorer_rank < t.explorer_num:
        raise ConfigError(f"trainer.explorer_rank={t.explorer_rank!r} must be in [0, trainer.explorer_num="
                          f"{t.explorer_num})")
    if t.explorer_num == 1:
        return
    n = f"trainer.explorer_num={t.explorer_num}"
    if one_process:
        raise ConfigError(f"{n}: the one-process loop (mode both, sync_interval 1, sync_offset 0) has one engine; "
                          "set synchronizer.sync_interval or sync_offset to run explorers apart, or explorer_num 1")
    if cfg.experience_buffer.storage_type == "file":
        raise ConfigError(f"{n}: explorers share a database buffer; experience_buffer.storage_type=file is not one")
    if cfg.data.task_storage != "file":
        raise ConfigError(f"{n}: explorers take turns at the steps of a taskset they each read whole; "
                          f"data.task_storage={cfg.data.task_storage} is a stream they would compete for; use "
                          "files, or explorer_num 1")
    if method == "nccl":
        raise ConfigError(f"{n}: synchronizer.sync_method=nccl broadcasts to one explorer; use checkpoint (the "
                          "default with several explorers)")


def _check_decoupled(cfg: RFTConfig, world_size: int) -> None:
    """trainer.mode, synchronizer.*, experience_buffer.* and the taskset: values in range, and a combination rft
    runs."""
    t, s, b = cfg.trainer, cfg.synchronizer, cfg.experience_buffer
    if cfg.data.task_storage == "queue" and not t.total_training_steps:
        raise ConfigError("data.task_storage=queue reads tasks as a stream, which has no epochs: set "
                          "trainer.total_training_steps")
    if cfg.data.task_storage != "file" and world_size > 1:
        raise ConfigError(f"data.task_storage={cfg.data.task_storage} runs in one process for now: set "
                          "trainer.nnodes and trainer.n_gpus_per_node to 1")
    for key, value in (("synchronizer.sync_interval", s.sync_interval),):
        _positive(key, value)
    if not isinstance(s.sync_offset, int) or s.sync_offset < 0:
        raise ConfigError(f"synchronizer.sync_offset must be an integer >= 0, got {s.sync_offset!r}")
    for key, value in (("synchronizer.sync_timeout", s.sync_timeout),
                       ("experience_buffer.max_read_timeout", b.max_read_timeout)):
        if not value > 0:
            raise ConfigError(f"{key} must be > 0 seconds, got {value}")
    if b.priority_decay < 0:
        raise ConfigError(f"experience_buffer.priority_decay must be >= 0, got {b.priority_decay}")
    if b.reuse_cooldown_time is not None:
        if not b.use_priority_queue:
            raise ConfigError("experience_buffer.reuse_cooldown_time replays experiences of the priority queue: set "
                              "experience_buffer.use_priority_queue=true, or remove it")
        if b.reuse_cooldown_time < 0:
            raise ConfigError(f"experience_buffer.reuse_cooldown_time must be >= 0 seconds, got {b.reuse_cooldown_time}")
    if b.max_staleness is not None and (not isinstance(b.max_staleness, int) or b.max_staleness < 0):
        raise ConfigError(f"experience_buffer.max_staleness must be an integer >= 0 or null, got {b.max_staleness!r}")
    one_process = is_synchronous(cfg)
    method = s.sync_method
    _check_explorers(cfg, method, one_process)
    if one_process:
        # any sync_method: with sync_interval 1 and sync_offset 0 explorer and trainer take strict turns, which
        # rft runs in one process sharing the model (the same weights every step, nothing copied)
        if b.storage_type == "file":
            raise ConfigError("experience_buffer.storage_type=file is written for people to read, not read by a "
                              "trainer: use it with trainer.mode=explore (queue or sql to train)")
        return
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
               "as two") + ": use nccl (a process-group broadcast) or checkpoint (files), or null"
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


def _check_mix(cfg: RFTConfig, world_size: int, check_paths: bool) -> None:
    """algorithm.mix: the expert rows' files and format, mu and the ratio, and what mix does not combine with."""
    mix, expert = cfg.algorithm.mix, cfg.data.expert
    if not mix.enable:
        return
    files = _files(expert.files, "data.expert.files")
    if not files:
        raise ConfigError("algorithm.mix.enable=true needs data.expert.files: the expert (SFT) rows, a parquet/jsonl "
                          "file or a list of them")
    if check_paths:
        _check_files_exist("data.expert.files", files)
    if not 0 <= mix.mu <= 1:
        raise ConfigError(f"algorithm.mix.mu must be in [0, 1] (the SFT loss's weight), got {mix.mu}")
    if not 0 <= mix.expert_data_ratio < 1:
        raise ConfigError(f"algorithm.mix.expert_data_ratio must be in [0, 1) (the expert rows' share of a "
                          f"mini-batch), got {mix.expert_data_ratio}")
    _positive("data.expert.max_length", expert.max_length)
    if world_size > 1:
        raise ConfigError(f"algorithm.mix.enable=true with {world_size} processes: the expert rows are not sharded "
                          "over the ranks yet; run mix with one process (trainer.nnodes x n_gpus_per_node = 1)")
    from rft.algorithms import estimator_spec

    algo = cfg.algorithm
    critic = cfg.critic.enable if cfg.critic.enable is not None else "values" in estimator_spec(algo.adv_estimator).needs
    if critic:
        raise ConfigError(f"algorithm.mix.enable=true with a critic (adv_estimator={algo.adv_estimator!r}, "
                          f"critic.enable={cfg.critic.enable}): the critic "
                          "would train on the expert rows, which have no reward; use a critic-free estimator (grpo, "
                          "as Trinity-RFT's mix)")


BUILTIN_WORKFLOWS = ("simple_workflow", "math_workflow", "tool_call_workflow")


def _check_workflow(cfg: RFTConfig, world_size: int, check_paths: bool) -> None:
    """workflow.*: a workflow rft has (or a file that may register it), sizes in range, and what the workflow
    machinery does not combine with (a reward model, ReMax's greedy baselines, dynamic sampling, several
    processes)."""
    wf = cfg.workflow
    _positive("workflow.runner_per_model", wf.runner_per_model)
    if not wf.max_timeout > 0:
        raise ConfigError(f"workflow.max_timeout must be > 0 seconds, got {wf.max_timeout}")
    if not isinstance(wf.max_retry_times, int) or wf.max_retry_times < 0:
        raise ConfigError(f"workflow.max_retry_times must be an integer >= 0, got {wf.max_retry_times!r}")
    if not isinstance(wf.endpoint_port, int) or not 0 <= wf.endpoint_port <= 65535:
        raise ConfigError(f"workflow.endpoint_port must be 0 (a free port) or a port number, got {wf.endpoint_port!r}")
    if wf.type not in BUILTIN_WORKFLOWS and not wf.path:
        raise ConfigError(f"workflow.type={wf.type!r} is not one of rft's workflows {list(BUILTIN_WORKFLOWS)}: set "
                          "workflow.path to the Python file that registers it (rft.explorer.workflow."
                          "register_workflow)")
    if wf.path and check_paths and not Path(wf.path).expanduser().exists():
        raise ConfigError(f"workflow.path: {wf.path!r} does not exist (a Python file, or a folder of them)")
    for i, spec in enumerate(wf.auxiliary_models):
        if not isinstance(spec, dict) or not spec.get("model_path"):
            raise ConfigError(f"workflow.auxiliary_models[{i}] must be a mapping with model_path, got {spec!r}")
        unknown = set(spec) - {"model_path", "temperature", "max_tokens", "tensor_parallel_size", "engine_type",
                               "name"}
        if unknown:
            raise ConfigError(f"workflow.auxiliary_models[{i}]: keys {sorted(unknown)} are not honoured; rft takes "
                              "model_path, temperature, max_tokens (and tensor_parallel_size 1, engine_type hf)")
        if spec.get("tensor_parallel_size", 1) != 1 or spec.get("engine_type", "hf") not in ("hf",):
            raise ConfigError(f"workflow.auxiliary_models[{i}]: rft serves auxiliary models with its hf engine in "
                              "the explorer's process (tensor_parallel_size 1, engine_type hf)")
        if check_paths:
            _check_model_dir(f"workflow.auxiliary_models[{i}].model_path", spec["model_path"])
    if wf.type == "simple_workflow":
        judged = cfg.custom_reward_function.reward_fn_type == "llm_judge"  # the judge is an auxiliary model
        for key, value, default in (("path", wf.path, None), ("args", wf.args, {}),
                                    ("enable_history", wf.enable_history, False), ("endpoint", wf.endpoint, False),
                                    ("auxiliary_models", [] if judged else wf.auxiliary_models, [])):
            if value != default:
                raise ConfigError(
                    f"workflow.{key}={value!r} has no effect with workflow.type=simple_workflow (one batched chat turn "
                    "per sample, no workflow code): set workflow.type to the workflow that uses it, or remove it"
                )
        return
    why = None
    if cfg.reward_model.enable:
        why = "reward_model.enable (the reward model scores whole batches; workflows score their own experiences)"
    elif "reward_baselines" in _estimator_needs(cfg):
        why = f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} (its greedy baseline is one more generation of "\
              "the batched single-turn path)"
    elif cfg.algorithm.filter_groups.enable:
        why = "algorithm.filter_groups (dynamic sampling regenerates batches on the single-turn path)"
    if why:
        raise ConfigError(f"workflow.type={wf.type!r} does not combine with {why}; use workflow.type=simple_workflow "
                          "or drop it")
    if wf.type in BUILTIN_WORKFLOWS:  # a misspelt argument would be read as its default
        from rft.explorer.workflow import WORKFLOWS

        known = WORKFLOWS.get(wf.type).ARGS
        unknown = sorted(set(wf.args or {}) - known)
        if unknown:
            raise ConfigError(f"workflow.args: {unknown} are not arguments of workflow.type={wf.type!r}, which "
                              f"takes {sorted(known) or 'none'} (in YAML flow style a space follows the colon: "
                              "{max_turns: 2})")
    tools_path = (wf.args or {}).get("tools_path") if wf.type == "tool_call_workflow" else None
    if tools_path and check_paths:  # loaded now: a file that does not import would fail every task of every step
        from rft.explorer.tools import load_tools

        load_tools(str(tools_path))


def _estimator_needs(cfg: RFTConfig) -> frozenset:
    from rft.algorithms import estimator_spec

    return estimator_spec(cfg.algorithm.adv_estimator).needs


def _positive(key: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")


def validate(cfg: RFTConfig, check_paths: bool = True, world_size: int | None = None,
             check_model_path: bool = True) -> None:
    """The RL config, before any model loads. `world_size`: the number of processes the batch sizes are checked
    against; default trainer.nnodes x trainer.n_gpus_per_node."""
    from rft.algorithms import ADV_ESTIMATORS, KL_ESTIMATORS, POLICY_LOSSES, estimator_spec

    _check_schema(cfg, inactive_sections(cfg))
    world_size = processes(cfg.trainer) if world_size is None else world_size
    data, arr, algo, trainer = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    actor, rollout = arr.actor, arr.rollout

    # a trainer reading experiences needs no tasks when told how many steps to take; bench evaluates only
    require_train = not (trainer.mode == "bench" or (trainer.mode == "train" and trainer.total_training_steps))
    _check_inputs("actor_rollout_ref.model.path", arr.model.path, data, check_paths, check_model_path, require_train)
    if check_paths and cfg.custom_reward_function.path and not Path(cfg.custom_reward_function.path).is_file():
        raise ConfigError(f"custom_reward_function.path: file {cfg.custom_reward_function.path!r} does not exist")
    _check_reward_fn_type(cfg)
    _check_reward_functions(cfg.custom_reward_function)

    # ---- registry names
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

    # ---- engines and devices
    if rollout.name == "sglang":
        raise ConfigError("actor_rollout_ref.rollout.name='sglang': rft has no SGLang engine; use 'vllm' or 'hf' "
                          "(transformers generation with a KV cache)")
    if rollout.name == "vllm":
        _check_vllm(rollout)
    _check_runtime("trainer", trainer)
    if world_size > 1:
        _check_processes(cfg, world_size)

    # ---- sizes
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
        _positive(key, value)
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
        _positive(key, value, allow_none=True)
    for a, b in (
        ("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
    ):
        if getattr(actor, a) is not None and getattr(actor, b) is not None:
            raise ConfigError(f"set only one of actor_rollout_ref.actor.{a} and actor_rollout_ref.actor.{b}")
    if data.train_batch_size % actor.ppo_mini_batch_size:
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size}) must be a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({actor.ppo_mini_batch_size}); both count prompts"
        )
    if actor.ppo_mini_batch_size % world_size:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({actor.ppo_mini_batch_size}) must divide by the "
            f"number of processes ({world_size})"
        )
    micro = actor.ppo_micro_batch_size_per_gpu or (
        actor.ppo_micro_batch_size // world_size if actor.ppo_micro_batch_size else None
    )
    rows_per_mini = actor.ppo_mini_batch_size * rollout.n // world_size
    if micro is not None and rows_per_mini % micro:
        raise ConfigError(
            f"a mini-batch holds ppo_mini_batch_size x rollout.n = {actor.ppo_mini_batch_size} x {rollout.n} = "
            f"{rows_per_mini} rows per process, which is not a multiple of "
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu ({micro})"
        )
    for key, value in (("prompt_length", data.max_prompt_length), ("response_length", data.max_response_length)):
        set_value = getattr(rollout, key)
        if set_value is not None and set_value != value:
            raise ConfigError(
                f"actor_rollout_ref.rollout.{key}={set_value} differs from data.max_{key}={value}; "
                f"rft has one {key.split('_')[0]} length: set data.max_{key}"
            )

    # ---- estimator options (what an estimator needs is declared with its registration: EstimatorSpec)
    min_group = estimator_spec(algo.adv_estimator).min_group_size
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
    _check_new_estimator_options(cfg)

    # ---- ranges
    if not 0 < rollout.top_p <= 1 or not 0 < rollout.val_kwargs.top_p <= 1:
        raise ConfigError("actor_rollout_ref.rollout.top_p and val_kwargs.top_p must be in (0, 1]")
    if rollout.temperature < 0 or rollout.val_kwargs.temperature < 0:
        raise ConfigError("actor_rollout_ref.rollout.temperature and val_kwargs.temperature must be >= 0")
    if rollout.do_sample and rollout.temperature == 0:
        raise ConfigError("actor_rollout_ref.rollout.temperature=0 with do_sample=true: set do_sample=false for greedy")
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        v = getattr(actor, key)
        if v is not None and v < 0:
            raise ConfigError(f"actor_rollout_ref.actor.{key} must be >= 0, got {v}")
    if actor.clip_ratio_c <= 1:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c must be > 1 (dual clip), got {actor.clip_ratio_c}")
    if actor.optim.lr <= 0:
        raise ConfigError(f"actor_rollout_ref.actor.optim.lr must be > 0, got {actor.optim.lr}")
    if not 0 <= actor.optim.lr_warmup_steps_ratio <= 1:
        raise ConfigError("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio must be in [0, 1]")
    _check_optim("actor_rollout_ref.actor.optim", actor.optim, data.val_files, trainer.test_freq)
    _check_offload(cfg, world_size)
    if arr.model.lora_rank < 0:
        raise ConfigError(f"actor_rollout_ref.model.lora_rank must be >= 0, got {arr.model.lora_rank}")
    _check_checkpoint_contents("actor_rollout_ref.actor.checkpoint", actor.checkpoint)
    _check_loss_options(cfg)
    _check_rollout_correction(cfg)
    _check_critic(cfg, world_size, check_paths)
    _check_reward_model(cfg, check_paths)
    _check_decoupled(cfg, world_size)
    _check_mix(cfg, world_size, check_paths)
    _check_workflow(cfg, world_size, check_paths)
    _check_keys_with_readers(cfg)
    if check_paths and check_model_path:
        check_tokenizer_folder("data.tokenizer" if data.tokenizer else "actor_rollout_ref.model.path",
                               data.tokenizer or arr.model.path)


def check_tokenizer_folder(key: str, path: str) -> None:
    """The folder `path` holds tokenizer files (without any, transformers builds an empty tokenizer and the run
    fails much later)."""
    folder = Path(path).expanduser()
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"{key}={path!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES[:3])}, ...): copy the model's "
            "tokenizer files into it, or set data.tokenizer to a folder that has them"
        )


def check_hdfs_dir(key: str, value: str | None) -> None:
    if value and "://" in value:
        raise ConfigError(
            f"{key}={value!r}: rft copies checkpoints to a local or mounted folder only (it has no Hadoop client); "
            "mount the file system and give its path, or set it to null"
        )


def _check_int(key: str, value: Any, low: int, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{key} must be an integer >= {low} ({what}), got {value!r}")


def _check_keys_with_readers(cfg: RFTConfig) -> None:
    """The cross-field checks of keys added so that a verl / Trinity config loads as it is: each is honoured, or
    refused here with the reason."""
    arr, t, crf = cfg.actor_rollout_ref, cfg.trainer, cfg.custom_reward_function
    actor = arr.actor
    moe = (arr.model.override_config or {}).get("moe_config")
    if moe and not (isinstance(moe, dict) and all(not v for v in moe.values())):
        raise ConfigError(
            f"actor_rollout_ref.model.override_config.moe_config={moe!r} configures Megatron's MoE layers, which "
            "rft (FSDP / one process) does not have; remove it or leave its values false / null"
        )
    ob = cfg.reward_model.overlong_buffer
    if ob.enable and cfg.reward_model.reward_manager != "dapo":
        raise ConfigError(
            "reward_model.overlong_buffer.enable=true: as in verl, the overlong buffer is applied by the dapo reward "
            f"manager only; set reward_model.reward_manager=dapo (it is {cfg.reward_model.reward_manager!r})"
        )
    if crf.timeout is not None and (isinstance(crf.timeout, bool) or not isinstance(crf.timeout, (int, float))
                                    or not math.isfinite(crf.timeout)):
        raise ConfigError(f"custom_reward_function.timeout must be a number of seconds or null, got {crf.timeout!r}")
    check_hdfs_dir("trainer.default_hdfs_dir", t.default_hdfs_dir)
    if t.max_critic_ckpt_to_keep is not None and t.max_critic_ckpt_to_keep != t.max_actor_ckpt_to_keep:
        raise ConfigError(
            f"trainer.max_critic_ckpt_to_keep={t.max_critic_ckpt_to_keep} differs from trainer.max_actor_ckpt_to_keep"
            f"={t.max_actor_ckpt_to_keep}: the critic is saved inside each global_step_N folder, so one number keeps "
            "both; set them equal (or remove max_critic_ckpt_to_keep)"
        )
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
    for prefix, optim in (("actor_rollout_ref.actor.optim", actor.optim), ("critic.optim", cfg.critic.optim)):
        steps = optim.total_training_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or (steps != -1 and steps <= 0):
            raise ConfigError(f"{prefix}.total_training_steps must be -1 (the run's length) or a positive number "
                              f"of steps, got {steps!r}")
    _check_int("trainer.bad_update_limit", t.bad_update_limit, 0, "bad optimizer steps in a row before stopping")
    _check_token_budgets(cfg)


def _check_token_budgets(cfg: RFTConfig) -> None:
    """use_dynamic_bsz: every token budget in use holds the longest sequence (prompt + response)."""
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


def _check_sft_loop(cfg, check_paths: bool, check_model_path: bool, several: str | None = None) -> None:
    """The keys rft sft and rft dpo share (the SFT loop's model, data sizes, optimizer, trainer section).
    `several`: why this trainer runs one process only (None: several are allowed)."""
    data, model, optim, trainer = cfg.data, cfg.model, cfg.optim, cfg.trainer
    _check_inputs("model.partial_pretrain", model.partial_pretrain, data, check_paths, check_model_path)
    if check_paths and check_model_path:
        check_tokenizer_folder("model.partial_pretrain", model.partial_pretrain)
    check_hdfs_dir("trainer.default_hdfs_dir", trainer.default_hdfs_dir)
    _check_int("trainer.bad_update_limit", trainer.bad_update_limit, 0, "bad optimizer steps in a row before stopping")
    _check_runtime("trainer", trainer, several=several)
    for key, value in (("data.train_batch_size", data.train_batch_size),
                       ("data.micro_batch_size_per_gpu", data.micro_batch_size_per_gpu),
                       ("data.max_length", data.max_length), ("trainer.total_epochs", trainer.total_epochs)):
        _positive(key, value)
    for key, value in (("trainer.total_training_steps", trainer.total_training_steps),
                       ("trainer.max_ckpt_to_keep", trainer.max_ckpt_to_keep)):
        _positive(key, value, allow_none=True)
    if optim.lr <= 0:
        raise ConfigError(f"optim.lr must be > 0, got {optim.lr}")
    if not 0 <= optim.warmup_steps_ratio <= 1:
        raise ConfigError(f"optim.warmup_steps_ratio must be in [0, 1], got {optim.warmup_steps_ratio}")
    if model.lora_rank < 0:
        raise ConfigError(f"model.lora_rank must be >= 0, got {model.lora_rank}")


def validate_sft(cfg, check_paths: bool = True, world_size: int | None = None, check_model_path: bool = True) -> None:
    """The SFT config (verl's sft_trainer.yaml keys), before any model loads. `world_size`: default
    trainer.nnodes x trainer.n_gpus_per_node."""
    _check_schema(cfg)
    world_size = processes(cfg.trainer) if world_size is None else world_size
    data = cfg.data
    _check_sft_loop(cfg, check_paths, check_model_path)
    local = data.train_batch_size // world_size  # rows per process and step
    if data.train_batch_size % world_size or (local % data.micro_batch_size_per_gpu
                                              and data.micro_batch_size_per_gpu < local):
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size}) must be a multiple of the number of processes "
            f"({world_size}), and its share per process ({data.train_batch_size / world_size:g} rows) a multiple of "
            f"data.micro_batch_size_per_gpu ({data.micro_batch_size_per_gpu}) or at most one micro-batch"
        )


def validate_dpo(cfg, check_paths: bool = True, world_size: int = 1, check_model_path: bool = True) -> None:
    """The DPO config (rft's SFT sections plus the preference loss), before any model loads."""
    from rft.algorithms import preference_loss_spec

    _check_schema(cfg)
    data, algo = cfg.data, cfg.algorithm
    _check_sft_loop(cfg, check_paths, check_model_path, several="rft dpo runs one process for now")
    if data.train_batch_size % (data.micro_batch_size_per_gpu * world_size):
        raise ConfigError(
            f"data.train_batch_size ({data.train_batch_size} pairs) must be a multiple of "
            f"data.micro_batch_size_per_gpu ({data.micro_batch_size_per_gpu}) x processes ({world_size})"
        )
    if len({data.prompt_key, data.chosen_key, data.rejected_key}) < 3:
        raise ConfigError(f"data.prompt_key, chosen_key and rejected_key must name three different columns, got "
                          f"{data.prompt_key!r}, {data.chosen_key!r}, {data.rejected_key!r}")
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


DPO_KL_COEF_DEFAULT = 0.001
