"""Multi-stage runs (Trinity-RFT's `stages:`): e.g. an SFT warm-up, then GRPO.

A staged config is an RL config (verl keys) plus a `stages` list. Each stage has a `stage_name`, its algorithm, and
overrides of any section:

    stages:
      - stage_name: sft
        algorithm: sft                 # or {algorithm_type: sft}; its sections are sft_trainer.yaml's
        optim: {lr: 3.0e-3}
      - stage_name: dpo
        algorithm: {algorithm_type: dpo, beta: 0.1}   # or dpo; the other keys are the DPO config's algorithm
        data: {train_files: prefs.parquet}            # section; its sections are rft dpo's (docs/config.md)
      - stage_name: grpo               # an RL stage: overrides of the global (RL) sections
        algorithm: {adv_estimator: grpo}

Stages run in order; each starts from the previous stage's output model; outputs go to `<run>/<stage_name>/`
(`<run>` = the global trainer.default_local_dir); a stage that finished (its `STAGE_DONE` file exists) is skipped
when the run is started again, one whose run finished before that file was written (a kill in between) says its
run is complete and is done, and an unfinished one resumes from its own checkpoints. Every stage's config is
built and validated before the first model loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rft.config.dpo_schema import DPOConfig
from rft.config.load import ConfigError, merge_layers
from rft.config.schema import RFTConfig
from rft.config.sft_schema import SFTConfig
from rft.sync.schedule import is_synchronous, steps_apart, workflow_apart
from rft.trainer.validate import validate, validate_dpo, validate_sft

DONE = "STAGE_DONE"
_STAGE_KEYS = {"stage_name", "algorithm", "mode"}


@dataclass
class Stage:
    name: str
    kind: str  # "sft" | "dpo" | "rl"
    cfg: Any  # SFTConfig | DPOConfig | RFTConfig
    out: Path

    @property
    def model_dir(self) -> Path:
        return self.out / "model"

    @property
    def done(self) -> bool:
        return (self.out / DONE).is_file()


def _kind(raw: dict, where: str) -> tuple[str, dict]:
    """("sft" | "dpo" | "rl", the algorithm section to merge for RL and DPO stages)."""
    algorithm = raw.get("algorithm")
    mode = raw.get("mode")
    if algorithm == "sft" or mode == "sft":
        return "sft", {}
    if algorithm == "dpo":
        return "dpo", {}
    if isinstance(algorithm, dict):
        algorithm = dict(algorithm)
        kind = algorithm.pop("algorithm_type", None)
        if kind == "sft":
            if algorithm:
                raise ConfigError(f"{where}: an sft stage takes no algorithm keys, got {sorted(algorithm)}")
            return "sft", {}
        if kind == "dpo":
            return "dpo", algorithm
        if kind is not None:
            algorithm.setdefault("adv_estimator", kind)
        return "rl", algorithm
    if algorithm is None:
        return "rl", {}
    if isinstance(algorithm, str):
        return "rl", {"adv_estimator": algorithm}
    raise ConfigError(f"{where}.algorithm must be 'sft', an estimator name, or a mapping of algorithm keys")


def load_stages(path, overrides=(), validate_paths: bool = True) -> list[Stage]:
    """The validated stages of the staged YAML at `path` with dotted overrides; overrides may address a stage by
    index or stage_name, e.g. `stages.1.trainer.total_training_steps=5` or `stages.grpo.trainer.…`."""
    from rft.config.load import parse_overrides, read_yaml

    raw = read_yaml(path)
    items = [_stage_item(raw, item) for item in parse_overrides(overrides)]
    for item in items:
        key, value = item.split("=", 1)
        OmegaConf.update(raw, key, OmegaConf.from_dotlist([f"v={value}"]).v, force_add=False)
    return build_stages(raw, check_paths=validate_paths, path=path, overrides=items)


def _stage_item(raw: DictConfig, item: str) -> str:
    """The override `item` with its stage addressed by index (`stages.<i>.…`); a stage may be named by its index
    0..N-1 or its stage_name; any other stage is refused here, not left to OmegaConf's index errors."""
    key, value = item.split("=", 1)
    parts = key.split(".")
    stages = raw.get("stages")
    if parts[0] != "stages" or len(parts) < 2 or not OmegaConf.is_list(stages):
        return item
    names = [str(s.stage_name) if OmegaConf.is_dict(s) and s.get("stage_name") is not None else None
             for s in stages]
    if parts[1].isdigit() and int(parts[1]) < len(stages):
        return item
    if parts[1] in names:
        return ".".join(["stages", str(names.index(parts[1])), *parts[2:]]) + "=" + value
    named = ", ".join(f"{i}={n}" for i, n in enumerate(names) if n is not None)
    raise ConfigError(
        f"override {item!r}: there is no stage {parts[1]!r}; the config has {len(stages)} stage(s), addressed by "
        f"index 0..{len(stages) - 1} or by stage_name ({named}), e.g. stages.0.trainer.total_training_steps=2"
    )


def build_stages(raw: DictConfig, check_paths: bool = True, path=None, overrides: list[str] | tuple = ()) -> list[Stage]:
    """The validated stages of a staged config (already merged with command-line `overrides`; they and the file
    `path` are named in an unknown key's error)."""
    data = OmegaConf.to_container(raw, resolve=True)
    stages_raw = data.pop("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ConfigError("stages must be a non-empty list of {stage_name, algorithm, ...overrides}")
    # the global sections, typed (unknown keys refused here)
    base = merge_layers(RFTConfig, [data], path=path, applied=overrides)
    root = Path(base.trainer.default_local_dir)
    names: set[str] = set()
    stages: list[Stage] = []
    previous_model = base.actor_rollout_ref.model.path
    for i, stage_raw in enumerate(stages_raw):
        where = f"stages[{i}]"
        if not isinstance(stage_raw, dict) or not stage_raw.get("stage_name"):
            raise ConfigError(f"{where} needs a stage_name")
        name = str(stage_raw["stage_name"])
        if name in names or "/" in name:
            raise ConfigError(f"{where}.stage_name={name!r} must be unique and contain no '/'")
        names.add(name)
        kind, algorithm = _kind(stage_raw, where)
        sections = {k: v for k, v in stage_raw.items() if k not in _STAGE_KEYS}
        given = [item.removeprefix(f"stages.{i}.") for item in overrides if item.startswith(f"stages.{i}.")]
        out = root / name
        if kind == "sft":
            cfg = _typed(SFTConfig, [_inherited(base, previous_model, name), sections,
                                     _forced_offline(previous_model, out)], where, path, given)
            validate_sft(cfg, check_paths=check_paths, check_model_path=i == 0,
                         world_size=cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node)
        elif kind == "dpo":  # the SFT stage's inherited keys, plus the DPO loss of the stage's algorithm mapping
            cfg = _typed(DPOConfig, [_inherited(base, previous_model, name), {"algorithm": algorithm}, sections,
                                     _forced_offline(previous_model, out)], where, path, given)
            validate_dpo(cfg, check_paths=check_paths, check_model_path=i == 0,
                         world_size=cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node)
        else:
            forced = {"actor_rollout_ref": {"model": {"path": previous_model}},
                      "trainer": {"default_local_dir": str(out)}}
            cfg = _typed(RFTConfig, [data, {"algorithm": algorithm}, sections, forced], where, path, given)
            validate(cfg, check_paths=check_paths, check_model_path=i == 0)
            if not is_synchronous(cfg):
                t, s = cfg.trainer, cfg.synchronizer
                why = (f"workflow.type={cfg.workflow.type!r} beside {t.nnodes * t.n_gpus_per_node} trainer processes "
                       f"(trainer.nnodes x trainer.n_gpus_per_node = {t.nnodes} x {t.n_gpus_per_node}) runs its "
                       "explorer as a process of its own" if workflow_apart(cfg) else
                       f"experience_buffer.train_batch_size={cfg.experience_buffer.train_batch_size} (experiences a "
                       f"trainer step reads, not the data.train_batch_size x rollout.n = "
                       f"{cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n} an explore step makes) runs "
                       "explorer and trainer apart" if steps_apart(cfg) else
                       f"trainer.mode={t.mode!r}, synchronizer.sync_interval={s.sync_interval}, sync_offset="
                       f"{s.sync_offset} run explorer and trainer apart")
                raise ConfigError(
                    f"{where}: {why}, but a staged run runs each RL stage as one loop of explorer and trainer (mode "
                    "both, sync_interval 1, sync_offset 0; a workflow on one process); run that stage on its own with "
                    "`rft train`"
                )
        t = cfg.trainer
        if (t.nnodes, t.n_gpus_per_node) != (base.trainer.nnodes, base.trainer.n_gpus_per_node):
            raise ConfigError(
                f"{where}: trainer.nnodes x trainer.n_gpus_per_node = {t.nnodes} x {t.n_gpus_per_node} differs from "
                f"the run's {base.trainer.nnodes} x {base.trainer.n_gpus_per_node}: every stage runs on the same "
                "processes; set them in the global trainer section only"
            )
        stages.append(Stage(name, kind, cfg, out))
        previous_model = str(out / "model")
    return stages


def _inherited(base: RFTConfig, previous_model: str, name: str) -> dict:
    """What an offline (SFT, DPO) stage takes from the global sections: the model's trust_remote_code, the seed,
    device, processes, monitors, log settings and names."""
    t = base.trainer
    return {"model": {"partial_pretrain": previous_model,
                      "trust_remote_code": base.actor_rollout_ref.model.trust_remote_code},
            "trainer": {"seed": t.seed, "device": t.device, "nnodes": t.nnodes, "n_gpus_per_node": t.n_gpus_per_node,
                        "logger": t.logger, "monitor_args": t.monitor_args,
                        "log_level": t.log_level, "log_group_by_node": t.log_group_by_node,
                        "project_name": t.project_name, "experiment_name": f"{t.experiment_name}_{name}"}}


def _forced_offline(previous_model: str, out: Path) -> dict:
    """The keys an offline stage cannot set: it starts from the previous stage's model, writes to its folder."""
    return {"model": {"partial_pretrain": previous_model}, "trainer": {"default_local_dir": str(out)}}


def _typed(schema: type, layers: list[dict], where: str, path=None, given: list[str] | tuple = ()):
    try:
        return merge_layers(schema, layers, path=path, applied=given)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
