"""Trinity-RFT's config dialect (../shared/spec/trinity_config_reference.md), translated to rft's verl keys.

A Trinity YAML is recognised by its top-level sections (project, name, mode, model, cluster, buffer, explorer,
synchronizer, monitor, ...; or algorithm.algorithm_type). OmegaConf resolves its interpolations first (`${model.
model_path}`, `${oc.env:VAR,default}`). The parts rft's engine has map onto canonical keys (`TRINITY_KEYS` in
docs/config-dialects: this module's tables); every other key is refused by its Trinity name with the reason, all
at once, before anything loads. A `stages` list becomes rft's stages (`rft.trainer.stages`), each stage's Trinity
sections merged over the global ones, as Trinity does.

rft's loop is synchronous and in one process: generation (Trinity's explorer) and the update (its trainer) take
turns on one model, so the explorer-trainer hand-off (experience buffer queue, synchronizer every step) is what rft
does and other settings of it are refused.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from rft.config.load import ConfigError

# top-level keys only Trinity configs have (verl's are data, actor_rollout_ref, critic, reward_model, algorithm,
# trainer, custom_reward_function)
MARKERS = ("project", "name", "mode", "checkpoint_root_dir", "continue_from_checkpoint", "ray_namespace", "model",
           "cluster", "buffer", "explorer", "synchronizer", "monitor", "service", "data_processor", "log")

# Trinity's algorithm types with their defaults (Trinity-RFT's AlgorithmType.default_config)
ALGORITHMS = {
    "grpo": {"repeat_times": 2, "advantage_fn": "grpo", "policy_loss_fn": "ppo", "kl_penalty_fn": "none",
             "kl_loss_fn": "k2", "entropy_loss_fn": "default"},
    "opmd": {"repeat_times": 2, "advantage_fn": "opmd", "policy_loss_fn": "opmd", "kl_penalty_fn": "none",
             "kl_loss_fn": "k2", "entropy_loss_fn": "default"},
    "ppo": {"repeat_times": 1, "advantage_fn": "ppo", "policy_loss_fn": "ppo", "kl_penalty_fn": "none",
            "kl_loss_fn": "k2", "entropy_loss_fn": "default"},
    "sft": {"policy_loss_fn": "sft", "kl_loss_fn": "none", "entropy_loss_fn": "none"},
}
ADVANTAGE_FNS = {"ppo": "gae", "grpo": "grpo", "opmd": "opmd", "reinforce_plus_plus": "reinforce_plus_plus",
                 "remax": "remax", "rloo": "rloo", "asymre": "asymre"}
POLICY_LOSS_FNS = {"ppo": "vanilla", "opmd": "opmd", "gspo": "gspo"}
KL_FNS = ("k1", "k2", "k3", "low_var_kl", "abs")
SAMPLE_STRATEGIES = ("default", "warmup")  # without auxiliary buffers both read the experiences as they come
A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"


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


def _set(out: dict, key: str, value: Any) -> None:
    node = out
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


class _Translation:
    def __init__(self) -> None:
        self.refusals: list[tuple[str, str]] = []

    def refuse(self, key: str, reason: str) -> None:
        self.refusals.append((key, reason))

    def rest(self, section: dict, where: str, reason: str) -> None:
        """Refuse the keys of `section` nobody took."""
        for key in section:
            self.refuse(f"{where}.{key}" if where else key, reason)

    def raise_if_any(self, path: str) -> None:
        if self.refusals:
            lines = [f"{path}: {len(self.refusals)} Trinity-RFT key(s) rft cannot honour:"]
            lines += [f"  {key}{'' if reason.startswith('=') else ': '}{reason}" for key, reason in self.refusals]
            raise ConfigError("\n".join(lines))


NOT_HONOURED = "not honoured by rft (no equivalent in its one-process synchronous loop); remove it"


def _files(t: _Translation, where: str, path: str | None, split: str) -> Any:
    """A taskset's data files: a jsonl/parquet file, or a folder with {split}.jsonl / {split}.parquet / split
    files in the Hugging Face layout."""
    if not path:
        t.refuse(f"{where}.path", "is required (a jsonl/parquet file or a folder holding the split)")
        return None
    p = Path(path).expanduser()
    if p.is_dir():
        for pattern in (f"{split}.jsonl", f"{split}.parquet", f"{split}-*.parquet", f"data/{split}-*.parquet",
                        f"data/{split}.jsonl", f"data/{split}.parquet", f"{split}/*.parquet", f"{split}/*.jsonl"):
            found = sorted(str(x) for x in p.glob(pattern))
            if found:
                return found if len(found) > 1 else found[0]
        t.refuse(f"{where}.path", f"={path!r} holds no {split!r} split ({split}.jsonl, {split}.parquet, ...)")
        return None
    return str(p)


def _algorithm(t: _Translation, algo: dict, out: dict) -> str:
    """The RL algorithm keys; returns the algorithm type."""
    algo = dict(algo)
    kind = algo.pop("algorithm_type", "ppo")
    if kind not in ALGORITHMS:
        t.refuse("algorithm.algorithm_type", f"={kind!r}: rft runs {sorted(ALGORITHMS)} (dpo / mix are not "
                                              "implemented)")
        return kind
    a = {**ALGORITHMS[kind], **{k: v for k, v in algo.items() if v is not None}}
    algo = {k: v for k, v in algo.items() if k not in ALGORITHMS[kind]}  # the taken keys
    if kind == "sft":
        return kind
    if "repeat_times" in a:
        _set(out, f"{R}.n", a["repeat_times"])
    adv = a["advantage_fn"]
    if adv not in ADVANTAGE_FNS:
        t.refuse("algorithm.advantage_fn", f"={adv!r}: rft has {sorted(ADVANTAGE_FNS)}")
    else:
        _set(out, "algorithm.adv_estimator", ADVANTAGE_FNS[adv])
    for key, value in (a.get("advantage_fn_args") or {}).items():
        target = {"gamma": "algorithm.gamma", "lam": "algorithm.lam", "opmd_baseline": "algorithm.opmd_baseline",
                  "tau": "algorithm.tau", "baseline_shift": "algorithm.baseline_shift"}.get(key)
        if key == "epsilon" and value == 1e-6:  # grpo's std epsilon, rft's too
            continue
        if target is None:
            t.refuse(f"algorithm.advantage_fn_args.{key}", NOT_HONOURED)
        else:
            _set(out, target, value)
    loss = a["policy_loss_fn"]
    if loss not in POLICY_LOSS_FNS:
        t.refuse("algorithm.policy_loss_fn", f"={loss!r}: rft has {sorted(POLICY_LOSS_FNS)}")
    else:
        _set(out, f"{A}.policy_loss.loss_mode", POLICY_LOSS_FNS[loss])
        if loss == "gspo":  # Trinity's gspo aggregates per sequence unless told otherwise (rft's, like verl's, by
            _set(out, f"{A}.loss_agg_mode", "seq-mean-token-mean")  # loss_agg_mode, default token-mean)
    for key, value in (a.get("policy_loss_fn_args") or {}).items():
        target = {"clip_range": f"{A}.clip_ratio", "clip_range_low": f"{A}.clip_ratio_low",
                  "clip_range_high": f"{A}.clip_ratio_high", "tau": f"{A}.policy_loss.tau",
                  "loss_agg_mode": f"{A}.loss_agg_mode"}.get(key)
        if target is None:
            t.refuse(f"algorithm.policy_loss_fn_args.{key}", NOT_HONOURED)
        else:
            _set(out, target, value)
    # a Trinity KL function is a name ("none" or an estimator) plus {kl_coef}: as a loss or in the reward
    for fn, switch, kind, coef in (("kl_loss_fn", f"{A}.use_kl_loss", f"{A}.kl_loss_type", f"{A}.kl_loss_coef"),
                                   ("kl_penalty_fn", "algorithm.use_kl_in_reward", "algorithm.kl_penalty",
                                    "algorithm.kl_ctrl.kl_coef")):
        name, args = a[fn], a.get(f"{fn}_args") or {}
        if name == "none":
            _set(out, switch, False)
        elif name in KL_FNS:
            _set(out, switch, True)
            _set(out, kind, name)
            _set(out, coef, args.get("kl_coef", 0.001))
        else:
            t.refuse(f"algorithm.{fn}", f"={name!r}: rft has none, {', '.join(KL_FNS)}")
        for key in set(args) - {"kl_coef"}:
            t.refuse(f"algorithm.{fn}_args.{key}", NOT_HONOURED)
    ent = a["entropy_loss_fn"]
    ent_args = a.get("entropy_loss_fn_args") or {}
    if ent == "none":
        _set(out, f"{A}.entropy_coeff", 0.0)
    elif ent == "default":
        _set(out, f"{A}.entropy_coeff", ent_args.get("entropy_coef", 0.0))
    else:
        t.refuse("algorithm.entropy_loss_fn", f"={ent!r}: rft has default, none")
    for key in set(ent_args) - {"entropy_coef"}:
        t.refuse(f"algorithm.entropy_loss_fn_args.{key}", NOT_HONOURED)
    if a.get("sample_strategy", "default") not in SAMPLE_STRATEGIES:
        t.refuse("algorithm.sample_strategy", f"={a['sample_strategy']!r}: rft reads each batch as generated "
                                              f"({', '.join(SAMPLE_STRATEGIES)})")
    if "loss_agg_mode" in a:
        _set(out, f"{A}.loss_agg_mode", a["loss_agg_mode"])
    taken = {"repeat_times", "advantage_fn", "advantage_fn_args", "policy_loss_fn", "policy_loss_fn_args",
             "kl_loss_fn", "kl_loss_fn_args", "kl_penalty_fn", "kl_penalty_fn_args", "entropy_loss_fn",
             "entropy_loss_fn_args", "sample_strategy", "sample_strategy_args", "loss_agg_mode"}
    t.rest({k: v for k, v in algo.items() if k not in taken}, "algorithm", NOT_HONOURED)
    return kind


def _model(t: _Translation, model: dict, out: dict, sft: bool) -> None:
    model = dict(model)
    if "model_path" in model:
        _set(out, "model.partial_pretrain" if sft else "actor_rollout_ref.model.path", model.pop("model_path"))
    prompt, response = model.pop("max_prompt_tokens", None), model.pop("max_response_tokens", None)
    max_len = model.pop("max_model_len", None)
    if sft:
        if max_len is not None:
            _set(out, "data.max_length", max_len)
    else:
        if prompt is not None:
            _set(out, "data.max_prompt_length", prompt)
        if response is not None:
            _set(out, "data.max_response_length", response)
        if max_len is not None and prompt is not None and response is not None and prompt + response > max_len:
            t.refuse("model.max_model_len", f"={max_len} is below max_prompt_tokens + max_response_tokens = "
                                            f"{prompt + response}")
    if model.pop("min_response_tokens", 1) != 1:
        t.refuse("model.min_response_tokens", "rft's engine stops at EOS from the first token; only 1 is honoured")
    critic = model.pop("critic_model_path", None)
    if critic is not None and not sft and critic != out.get("actor_rollout_ref", {}).get("model", {}).get("path"):
        _set(out, "critic.model.path", critic)
    t.rest(model, "model", NOT_HONOURED)


def _taskset_args(t: _Translation, ts: dict, where: str, eval_set: bool, out: dict) -> None:
    args = dict(ts.get("rollout_args") or {})
    prefix = f"{R}.val_kwargs" if eval_set else R
    for key in ("temperature", "top_p", "top_k"):
        if key in args:
            _set(out, f"{prefix}.{key}", args.pop(key))
    if eval_set and "temperature" in (ts.get("rollout_args") or {}):
        _set(out, f"{prefix}.do_sample", ts["rollout_args"]["temperature"] > 0)
    t.rest(args, f"{where}.rollout_args", NOT_HONOURED)


def _taskset(t: _Translation, ts: dict, where: str, out: dict, eval_set: bool) -> Any:
    ts = dict(ts)
    files = _files(t, where, ts.pop("path", None), ts.pop("split", "test" if eval_set else "train"))
    ts.pop("name", None)
    if ts.pop("storage_type", "file") != "file":
        t.refuse(f"{where}.storage_type", "rft reads tasksets from files (jsonl / parquet)")
    fmt = dict(ts.pop("format", None) or {})
    if "prompt_key" in fmt:
        _set(out, "data.prompt_key", fmt.pop("prompt_key"))
    if fmt.pop("prompt_type", "plaintext") not in ("plaintext", "messages"):
        t.refuse(f"{where}.format.prompt_type", "rft reads a string or a chat message list")
    t.rest(fmt, f"{where}.format", "rft scores rows by data_source and reward_model.ground_truth (verl's row "
                                   "format) or custom_reward_function; Trinity's workflows are not implemented")
    _taskset_args(t, ts, where, eval_set, out)
    ts.pop("rollout_args", None)
    if eval_set and "repeat_times" in ts:
        _set(out, f"{R}.val_kwargs.n", ts.pop("repeat_times"))
    t.rest(ts, where, "Trinity's workflows and reward functions are not implemented: rft scores rows by "
                      "data_source (verl's row format) or custom_reward_function")
    return files


def _buffer(t: _Translation, buffer: dict, out: dict, sft: bool, repeat: int) -> None:
    b = dict(buffer)
    batch = b.pop("batch_size", None)
    train_batch = b.pop("train_batch_size", None)
    if sft:
        if train_batch is not None or batch is not None:
            _set(out, "data.train_batch_size", train_batch if train_batch is not None else batch)
    else:
        if batch is not None:
            _set(out, "data.train_batch_size", batch)
            _set(out, f"{A}.ppo_mini_batch_size", batch)
        if train_batch is not None and batch is not None and train_batch != batch * repeat:
            t.refuse("buffer.train_batch_size", f"={train_batch}: rft trains on every experience of a step, "
                                                f"batch_size x repeat_times = {batch * repeat}")
    if "total_epochs" in b:
        _set(out, "trainer.total_epochs", b.pop("total_epochs"))
    if "total_steps" in b:
        _set(out, "trainer.total_training_steps", b.pop("total_steps"))
    explorer_input = dict(b.pop("explorer_input", None) or {})
    trainer_input = dict(b.pop("trainer_input", None) or {})
    if not sft:
        if "taskset" in explorer_input:
            files = _taskset(t, explorer_input.pop("taskset"), "buffer.explorer_input.taskset", out, False)
            if files:
                _set(out, "data.train_files", files)
        evals = explorer_input.pop("eval_tasksets", None) or []
        val_files: list = []
        for i, ts in enumerate(evals):
            files = _taskset(t, ts, f"buffer.explorer_input.eval_tasksets[{i}]", out, True)
            if files:
                val_files += files if isinstance(files, list) else [files]
        if val_files:
            _set(out, "data.val_files", val_files)
        exp = dict(trainer_input.pop("experience_buffer", None) or {})
        exp.pop("name", None)
        if exp.pop("storage_type", "queue") != "queue":
            t.refuse("buffer.trainer_input.experience_buffer.storage_type",
                     "rft hands each batch from generation to the update in process (a queue); only queue")
        t.rest(exp, "buffer.trainer_input.experience_buffer", NOT_HONOURED)
    else:
        exp = dict(trainer_input.pop("experience_buffer", None) or {})
        files = _files(t, "buffer.trainer_input.experience_buffer", exp.pop("path", None), exp.pop("split", "train"))
        if files:
            _set(out, "data.train_files", files)
        exp.pop("name", None)
        if exp.pop("storage_type", "file") != "file":
            t.refuse("buffer.trainer_input.experience_buffer.storage_type", "an SFT dataset is read from files")
        fmt = dict(exp.pop("format", None) or {})
        ptype = fmt.pop("prompt_type", "plaintext")
        if ptype == "messages":
            _set(out, "data.multiturn.enable", True)
            if "messages_key" in fmt:
                _set(out, "data.multiturn.messages_key", fmt.pop("messages_key"))
        for key in ("prompt_key", "response_key"):
            if key in fmt:
                _set(out, f"data.{key}", fmt.pop(key))
        t.rest(fmt, "buffer.trainer_input.experience_buffer.format", NOT_HONOURED)
        t.rest(exp, "buffer.trainer_input.experience_buffer", NOT_HONOURED)
    if not sft:  # an sft stage inherits the global explorer input, which belongs to the RL stages
        t.rest(explorer_input, "buffer.explorer_input", NOT_HONOURED)
    t.rest(trainer_input, "buffer.trainer_input", "auxiliary buffers are not implemented")
    t.rest(b, "buffer", "Trinity's workflows and reward functions are not implemented: rft scores rows by "
                        "data_source (verl's row format) or custom_reward_function" if any(
                            k.startswith("default_") for k in b) else NOT_HONOURED)


def _explorer(t: _Translation, explorer: dict, out: dict) -> None:
    e = dict(explorer)
    e.pop("name", None)
    rm = dict(e.pop("rollout_model", None) or {})
    engine = rm.pop("engine_type", "hf")
    if engine != "hf":
        t.refuse("explorer.rollout_model.engine_type", f"={engine!r}: rft generates with its hf engine "
                                                       "(transformers with a KV cache); vLLM is not implemented")
    for key, ok in (("engine_num", 1), ("tensor_parallel_size", 1), ("enable_history", False)):
        if rm.pop(key, ok) != ok:
            t.refuse(f"explorer.rollout_model.{key}", f"rft runs one engine in its own process; only {ok!r}")
    t.rest(rm, "explorer.rollout_model", NOT_HONOURED)
    if "eval_interval" in e:
        _set(out, "trainer.test_freq", e.pop("eval_interval"))
    if "eval_on_startup" in e:
        _set(out, "trainer.val_before_train", e.pop("eval_on_startup"))
    t.rest(e, "explorer", "Trinity's workflow runners and auxiliary models are not implemented")


def _trainer(t: _Translation, trainer: dict, out: dict, sft: bool) -> None:
    tr = dict(trainer)
    tr.pop("name", None)
    tr.pop("save_strategy", None)  # who may save at once: one process saves alone whatever is chosen
    if tr.pop("trainer_type", "verl") != "verl":
        t.refuse("trainer.trainer_type", "rft is a verl-style trainer; only verl")
    if "save_interval" in tr:
        _set(out, "trainer.save_freq", tr.pop("save_interval"))
    if "total_steps" in tr:
        _set(out, "trainer.total_training_steps", tr.pop("total_steps"))
    if "grad_clip" in tr:
        _set(out, "optim.clip_grad" if sft else f"{A}.grad_clip", tr.pop("grad_clip"))
    if "use_dynamic_bsz" in tr:
        _set(out, f"{A}.use_dynamic_bsz", tr.pop("use_dynamic_bsz"))
    inline, path = tr.pop("trainer_config", None), tr.pop("trainer_config_path", "") or None
    if inline and path:
        t.refuse("trainer.trainer_config_path", "give trainer_config or trainer_config_path, not both")
    if path:
        from omegaconf import OmegaConf

        from rft.config.load import read_yaml

        inline = OmegaConf.to_container(read_yaml(path), resolve=True)
    if inline:
        if sft:  # the verl actor's optimizer / micro batch are the SFT run's
            actor = (inline.get("actor_rollout_ref") or {}).get("actor") or {}
            for key in ("lr", "weight_decay", "betas", "eps", "min_lr_ratio"):
                if key in (actor.get("optim") or {}):
                    _set(out, f"optim.{key}", actor["optim"][key])
            if "lr_warmup_steps_ratio" in (actor.get("optim") or {}):
                _set(out, "optim.warmup_steps_ratio", actor["optim"]["lr_warmup_steps_ratio"])
            if "ppo_micro_batch_size_per_gpu" in actor:
                _set(out, "data.micro_batch_size_per_gpu", actor["ppo_micro_batch_size_per_gpu"])
        else:
            for key, value in _merge(out, inline).items():
                out[key] = value
    t.rest(tr, "trainer", NOT_HONOURED)


def _globals(t: _Translation, cfg: dict, out: dict) -> None:
    project, name = cfg.get("project", "Trinity-RFT"), cfg.get("name", "rft")
    _set(out, "trainer.project_name", project)
    _set(out, "trainer.experiment_name", name)
    root = cfg.get("checkpoint_root_dir")
    if root is not None:
        folder = Path(root) / str(project) / str(name)
        if cfg.get("continue_from_checkpoint", True) is False and folder.exists():
            name = f"{name}_{time.strftime('%Y%m%d%H%M%S')}"  # Trinity starts a new experiment
            folder = Path(root) / str(project) / name
            _set(out, "trainer.experiment_name", name)
        _set(out, "trainer.default_local_dir", str(folder))
    if cfg.get("continue_from_checkpoint", True) is False and root is None:
        _set(out, "trainer.resume_mode", "disable")
    if cfg.get("ray_namespace"):
        t.refuse("ray_namespace", "rft does not use Ray")
    cluster = dict(cfg.get("cluster") or {})
    if "node_num" in cluster:
        _set(out, "trainer.nnodes", cluster.pop("node_num"))
    if "gpu_per_node" in cluster:
        _set(out, "trainer.n_gpus_per_node", cluster.pop("gpu_per_node"))
    t.rest(cluster, "cluster", NOT_HONOURED)
    sync = dict(cfg.get("synchronizer") or {})
    sync.pop("sync_method", None)  # nccl / checkpoint: one model in one process needs neither
    sync.pop("sync_timeout", None)
    if sync.pop("sync_interval", 1) != 1:
        t.refuse("synchronizer.sync_interval", "rft's loop is synchronous: the policy that samples is the one "
                                               "trained, so weights are in step every step (only 1)")
    if sync.pop("sync_offset", 0) != 0:
        t.refuse("synchronizer.sync_offset", "rft's loop is synchronous (only 0)")
    t.rest(sync, "synchronizer", NOT_HONOURED)
    monitor = dict(cfg.get("monitor") or {})
    kind = monitor.pop("monitor_type", None)
    if kind not in (None, "console"):
        t.refuse("monitor.monitor_type", f"={kind!r}: rft writes metrics.jsonl and the console only")
    monitor.pop("monitor_args", None) if kind in (None, "console") else None
    if monitor.pop("enable_ray_timeline", False):
        t.refuse("monitor.enable_ray_timeline", "rft does not use Ray")
    t.rest(monitor, "monitor", NOT_HONOURED)
    for key in ("service", "data_processor", "log"):
        if cfg.get(key):
            t.refuse(key, "Trinity's services, data processors and Ray logging are not implemented")


def _section_dialect(t: _Translation, cfg: dict, sft: bool) -> dict:
    """The verl (RL) or sft_trainer (SFT) sections of one (stage's) Trinity config."""
    out: dict = {}
    if not sft:
        _globals(t, cfg, out)
        kind = _algorithm(t, cfg.get("algorithm") or {}, out)
        repeat = (out.get("actor_rollout_ref", {}).get("rollout", {}).get("n")) or ALGORITHMS.get(kind, {}).get(
            "repeat_times", 1)
    else:
        repeat = 1
        algo = dict(cfg.get("algorithm") or {})
        algo.pop("algorithm_type", None)
        for key, value in algo.items():
            if key in ALGORITHMS["sft"] and value == ALGORITHMS["sft"][key]:
                continue
            t.refuse(f"algorithm.{key}", "an sft stage takes no algorithm keys")
    _model(t, cfg.get("model") or {}, out, sft)
    _buffer(t, cfg.get("buffer") or {}, out, sft, repeat)
    if not sft:
        _explorer(t, cfg.get("explorer") or {}, out)
    _trainer(t, cfg.get("trainer") or {}, out, sft)
    return out


def _mode(t: _Translation, cfg: dict, where: str) -> bool:
    """True for an SFT run (mode train, algorithm sft)."""
    mode = cfg.get("mode", "both")
    kind = (cfg.get("algorithm") or {}).get("algorithm_type", "ppo")
    if kind == "sft":
        if mode != "train":
            t.refuse(f"{where}mode", f"={mode!r}: an sft algorithm runs in mode train (as in Trinity-RFT)")
        return True
    if mode != "both":
        t.refuse(f"{where}mode", f"={mode!r}: rft explores and trains together (mode both); explore-, train- and "
                                 "bench-only modes are not implemented")
    return False


def translate(cfg: dict, path: str = "config") -> dict:
    """The rft config (verl keys; with `stages` when the Trinity config has stages or is an SFT run) of the
    resolved Trinity config `cfg`. ConfigError lists every key rft cannot honour."""
    t = _Translation()
    known = {*MARKERS, "algorithm", "trainer", "stages"}
    for key in cfg:
        if key not in known:
            t.refuse(key, "not a Trinity-RFT section (or verl keys mixed into a Trinity config: put them under "
                          "trainer.trainer_config)")
    stages = cfg.get("stages")
    base_cfg = {k: v for k, v in cfg.items() if k != "stages"}
    if not stages:
        sft = _mode(t, cfg, "")
        if not sft:
            out = _section_dialect(t, base_cfg, sft=False)
            t.raise_if_any(path)
            return out
        stages = [{"stage_name": cfg.get("name", "sft")}]
    rl_base = _section_dialect(_Translation(), {**base_cfg, "algorithm": {"algorithm_type": "grpo"}, "mode": "both"},
                               sft=False)  # the global verl sections (errors are reported per stage)
    out_stages = []
    for i, stage in enumerate(stages):
        stage = dict(stage)
        name = stage.pop("stage_name", None)
        if not name:
            t.refuse(f"stages[{i}].stage_name", "is required")
            continue
        # a stage's algorithm replaces the global one; its other sections are merged over the global ones
        merged = _merge({k: v for k, v in base_cfg.items() if not (k == "algorithm" and "algorithm" in stage)},
                        stage)
        where = f"stages[{i}]."
        sub = _Translation()
        sft = _mode(sub, merged, where)
        sections = _section_dialect(sub, merged, sft)
        for key, reason in sub.refusals:
            t.refuse(key if key.startswith("stages[") else where + key, reason)
        for key in sections.get("trainer", {}).copy():
            if key in ("default_local_dir", "project_name", "experiment_name"):
                sections["trainer"].pop(key)  # stage folders and names are rft's (<run>/<stage_name>)
        if sft:
            sections.get("model", {}).pop("partial_pretrain", None)  # each stage starts from the previous model
            out_stages.append({"stage_name": name, "algorithm": "sft", **sections})
        else:
            sections.get("actor_rollout_ref", {}).get("model", {}).pop("path", None)
            algorithm = sections.pop("algorithm", {})
            out_stages.append({"stage_name": name, "algorithm": algorithm, **sections})
    t.raise_if_any(path)
    return {**rl_base, "stages": out_stages}


def load_trinity(path, overrides=(), validate_paths: bool = True):
    """("rl", RFTConfig) or ("stages", [Stage]) of the Trinity YAML at `path`; dotted overrides use Trinity's keys
    (e.g. buffer.total_steps=3) and apply before the translation."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from rft.config.load import merge_layers, parse_overrides, read_yaml
    from rft.config.schema import RFTConfig
    from rft.config.validate import validate

    raw = read_yaml(path)
    try:
        for item in parse_overrides(overrides):
            key, value = item.split("=", 1)
            OmegaConf.update(raw, key, OmegaConf.from_dotlist([f"v={value}"]).v, force_add=True)
        cfg = OmegaConf.to_container(raw, resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{path}: {str(e).splitlines()[0]}") from None
    out = translate(cfg, str(path))
    if "stages" in out:
        from rft.trainer.stages import build_stages

        return "stages", build_stages(OmegaConf.create(out), check_paths=validate_paths)
    rl = merge_layers(RFTConfig, [out])
    validate(rl, check_paths=validate_paths)
    return "rl", rl
