"""Checkpoints: `checkpoints/global_step_N/` folders written atomically, a `latest` pointer, retention.

A folder is written under a temporary name and renamed only when complete, and `latest` is replaced atomically
after that: a crash mid-save leaves the previous checkpoint whole and `latest` pointing at it. Its last file,
`manifest.json`, lists every file with its size; a resume checks a checkpoint against it (and that its weight,
optimizer and DCP files open) and, when it is damaged (cut short by a copy, a full disk, a crash of the file
system), says so, moves it aside (`global_step_N.corrupt`) and resumes from the previous whole one. Weights that
are not finite are never written (`TrainingDiverged`). With a mirror folder (trainer.default_hdfs_dir) every
checkpoint is copied there after it is saved.

Two layouts, one loader. One process writes the trainable weights as `policy.safetensors` and the optimizer as
`optimizer.pt`; several processes write both as a torch.distributed.checkpoint folder (`policy_dcp/`, each rank its
shard). Either resumes with any number of processes: a DCP folder is resharded on load (into an unsharded model
too), a one-process checkpoint is loaded whole into every rank's shards. `extra.pt` (scheduler, RNG states) and
`trainer_state.json` are rank 0's. Several nodes need a shared file system for the checkpoint folder.

trainer_state.json names the trainer that wrote the checkpoint (`trainer_kind`: train with its algorithm, sft,
dpo); a run of another trainer refuses to resume from it (`check_resume_kind`, before any model loads).
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rft.distributed import SINGLE, Dist
from rft.errors import CheckpointError, TrainingDiverged
from rft.fsutil import atomic_dir, checked_write, publish_modes, replace_dir, write_text_atomic

MANIFEST = "manifest.json"

_STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointManager:
    def __init__(self, root: str | Path, max_to_keep: int | None = None, mirror: str | Path | None = None):
        """`mirror`: a folder every saved checkpoint is copied into (trainer.default_hdfs_dir)."""
        self.root = Path(root)
        self.max_to_keep = max_to_keep
        self.mirror = Path(mirror).expanduser() if mirror else None

    def path(self, step: int) -> Path:
        return self.root / f"global_step_{step}"

    def steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir())

    def latest(self) -> Path | None:
        """The newest complete checkpoint: the one `latest` names, else the highest step folder."""
        pointer = self.root / "latest"
        if pointer.is_file():
            target = self.root / pointer.read_text().strip()
            if target.is_dir():
                return target
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def save(self, step: int, write: Callable[[Path], None], dist: Dist = SINGLE) -> Path:
        """`write(folder)` fills the checkpoint of `step`; with several processes every rank writes into the same
        staging folder and rank 0 renames it, points `latest` at it and prunes, between barriers."""
        final = self.path(step)
        if not dist.enabled:
            with atomic_dir(final) as tmp:
                write(tmp)
                write_manifest(tmp)
            write_text_atomic(self.root / "latest", final.name + "\n")
            self._prune(keep=step)
            self._copy_to_mirror(final)
            return final
        staging = final.with_name(f".{final.name}.tmp-{dist.broadcast_object(uuid.uuid4().hex[:8])}")
        if dist.is_main:
            staging.mkdir(parents=True)
        dist.barrier()
        write(staging)
        dist.barrier()
        if dist.is_main:
            write_manifest(staging)
            publish_modes(staging)
            replace_dir(staging, final)
            write_text_atomic(self.root / "latest", final.name + "\n")
            self._prune(keep=step)
            self._copy_to_mirror(final)
        dist.barrier()
        return final

    def _copy_to_mirror(self, folder: Path) -> None:
        if self.mirror is None:
            return
        with atomic_dir(self.mirror / folder.name) as tmp:
            shutil.copytree(folder, tmp, dirs_exist_ok=True)

    def candidates(self) -> list[Path]:
        """Checkpoints to resume from, newest first: the one `latest` names, then the step folders downwards."""
        out: list[Path] = []
        pointer = self.root / "latest"
        if pointer.is_file():
            target = self.root / pointer.read_text().strip()
            if target.is_dir() and _STEP_DIR.match(target.name):
                out.append(target)
        out += [self.path(s) for s in reversed(self.steps()) if self.path(s) not in out]
        return out

    def _prune(self, keep: int) -> None:
        if not self.max_to_keep:
            return
        for step in self.steps()[: -self.max_to_keep]:
            if step != keep:
                shutil.rmtree(self.path(step), ignore_errors=True)


def write_manifest(folder: Path) -> None:
    """`folder/manifest.json`: every file below `folder` with its size, written last."""
    files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=0))


def damage(folder: Path) -> str | None:
    """Why the checkpoint `folder` cannot be resumed from, or None when it looks whole: its manifest's files are
    there with their sizes (checkpoints written before manifests existed skip this), trainer_state.json parses,
    and every weight file, optimizer / scheduler file and DCP folder opens."""
    if not (folder / "trainer_state.json").is_file():
        return "no trainer_state.json"
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except ValueError as e:
        return f"trainer_state.json does not parse ({e})"
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text())["files"]
        except (ValueError, KeyError, TypeError) as e:
            return f"{MANIFEST} does not parse ({e})"
        for name, size in files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != size:
                return f"{name} has {path.stat().st_size} bytes, {size} were written"
    for path in sorted(folder.rglob("*.safetensors")):
        try:
            from safetensors import safe_open

            with safe_open(str(path), "pt") as f:
                f.keys()
        except Exception as e:
            return f"{path.relative_to(folder)} does not open ({' '.join(str(e).split())[:120]})"
    for path in sorted(folder.rglob("*.pt")):
        if not zipfile.is_zipfile(path):
            return f"{path.relative_to(folder)} is not a whole torch file"
    for path in sorted(folder.rglob("*_dcp")):
        if path.is_dir() and not (path / ".metadata").is_file():
            return f"{path.relative_to(folder)} has no .metadata"
    return None


def step_of(path: str | Path) -> int:
    m = _STEP_DIR.match(Path(path).name)
    if not m:
        raise ValueError(f"{str(path)!r} is not a global_step_N checkpoint folder")
    return int(m.group(1))


# ------------------------------------------------------------------------------ what a training checkpoint holds
def trainable_parameters(model) -> dict:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _save_weights(model, file: Path) -> None:
    import torch
    from safetensors.torch import save_file

    weights = {n: p.detach().cpu().contiguous() for n, p in trainable_parameters(model).items()}
    bad = [n for n, w in weights.items() if w.is_floating_point() and not bool(torch.isfinite(w).all())]
    if bad:
        raise TrainingDiverged(
            f"refusing to write a checkpoint from non-finite weights ({len(bad)} tensors, e.g. {bad[0]}); the "
            "previous checkpoint stays the latest: lower the learning rate"
        )
    checked_write(lambda: save_file(weights, file), file)


def load_pt(file: Path) -> Any:
    """A checkpoint's torch file with every tensor on the CPU, whatever device wrote it: a GPU run's checkpoint
    resumes where no GPU is (or another GPU index). Its readers then place each tensor on the resuming run's device:
    `Optimizer.load_state_dict` moves the state to its parameters' device, RNG states are CPU byte tensors, a
    scheduler's state holds numbers. The weights are safetensors files, which record no device, copied into the
    parameters where they live (`_load_weights`, `load_full`); DCP loads into the model's own tensors."""
    import torch

    return torch.load(file, map_location="cpu", weights_only=False)


def _load_weights(model, file: Path, folder: Path) -> None:
    import torch
    from safetensors.torch import load_file

    saved, params = load_file(file), trainable_parameters(model)
    if set(saved) != set(params):
        raise CheckpointError(f"checkpoint {folder} does not match the model: different trainable parameters "
                              "(LoRA settings changed?); resume with the settings it was written with, or set "
                              "trainer.resume_mode=disable")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(saved[name].to(p.device))


EXPLORER_VERSIONS = "explorer_versions"
"""A checkpoint's folder of earlier weights (`v<N>.safetensors`, trainer step N's trainable parameters) that the
explorer of a two-process run may still generate with after a restart (`rft.orchestration.modes.TrainLoop`)."""


def save_versions(folder: Path, versions: dict[int, dict]) -> None:
    from safetensors.torch import save_file

    (folder / EXPLORER_VERSIONS).mkdir()
    for version, weights in versions.items():
        file = folder / EXPLORER_VERSIONS / f"v{version}.safetensors"
        checked_write(lambda weights=weights, file=file: save_file(weights, file), file)


def load_versions(folder: Path) -> dict[int, dict]:
    """The weights `save_versions` wrote into checkpoint `folder`, by version ({} when it holds none)."""
    from safetensors.torch import load_file

    if not (folder / EXPLORER_VERSIONS).is_dir():
        return {}
    return {int(p.stem[1:]): load_file(p) for p in sorted((folder / EXPLORER_VERSIONS).glob("v*.safetensors"))}


POLICY_DCP = "policy_dcp"
"""The folder of a checkpoint written by several processes: trainable weights and optimizer state, sharded."""
MODEL_DCP = "model_dcp"
"""The same for a second trained model's part (the critic's `critic/`)."""


def _save_model_and_optimizer(folder: Path, dcp_name: str, weights_file: str, contents: set[str], model, optimizer,
                              dist: Dist) -> None:
    import torch

    if dist.enabled:
        if contents & {"model", "optimizer"}:
            from rft.workers.fsdp import save_sharded

            save_sharded(folder / dcp_name, model, optimizer if "optimizer" in contents else None)
        return
    if "model" in contents:
        _save_weights(model, folder / weights_file)
    if "optimizer" in contents:
        checked_write(lambda: torch.save(optimizer.state_dict(), folder / "optimizer.pt"), folder / "optimizer.pt")


def _load_model_and_optimizer(folder: Path, dcp_name: str, weights_file: str, contents: set[str], model, optimizer,
                              dist: Dist) -> None:
    if (folder / dcp_name).is_dir():  # written by several processes: resharded to this run
        if contents & {"model", "optimizer"}:
            from rft.workers.fsdp import load_sharded

            load_sharded(folder / dcp_name, model, optimizer if "optimizer" in contents else None)
        return
    if dist.enabled:  # written by one process: every rank loads it whole and keeps its shard
        from safetensors.torch import load_file

        from rft.workers.fsdp import load_full

        if "model" in contents:
            optim_state = load_pt(folder / "optimizer.pt") if "optimizer" in contents else None
            load_full(model, optimizer, load_file(folder / weights_file), optim_state)
        return
    if "model" in contents:
        _load_weights(model, folder / weights_file, folder)
    if "optimizer" in contents:
        optimizer.load_state_dict(load_pt(folder / "optimizer.pt"))


def save_training_state(folder: Path, *, contents: set[str], model, optimizer, scheduler, generators: dict,
                        state: dict, tokenizer=None, dist: Dist = SINGLE,
                        export: Callable[[Path], None] | None = None) -> None:
    """Write a checkpoint's files into `folder` (see docs/architecture.md): the trainable parameters, the
    optimizer, the scheduler with every RNG state, optionally a HF folder, and `trainer_state.json`. Every rank
    calls it; `export(folder)` writes the HF folder of a sharded model (default: `export_hf` of `model`)."""
    import random

    import numpy as np
    import torch

    _save_model_and_optimizer(folder, POLICY_DCP, "policy.safetensors", contents, model, optimizer, dist)
    _export_hf_model(folder, contents, model, tokenizer, export)
    if not dist.is_main:
        return
    if "extra" in contents:
        extra = {"scheduler": scheduler.state_dict(),
                 "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
                         **{name: g.get_state() for name, g in generators.items()}}}
        checked_write(lambda: torch.save(extra, folder / "extra.pt"), folder / "extra.pt")
    (folder / "trainer_state.json").write_text(json.dumps(
        {**state, "contents": sorted(contents), "processes": dist.processes}, indent=1))


def _export_hf_model(folder: Path, contents: set[str], model, tokenizer, export) -> None:
    """`folder/hf_model` when "hf_model" is in `contents`: `export(path)` (a sharded model's gathering export) or,
    by default, `export_hf` of `model`."""
    if "hf_model" not in contents:
        return
    if export is not None:
        export(folder / "hf_model")
    else:
        from rft.models.load import export_hf

        export_hf(model, tokenizer, folder / "hf_model")


def load_training_state(folder: Path, *, contents: set[str], model, optimizer, scheduler,
                        generators: dict, dist: Dist = SINGLE) -> dict:
    """Restore what `save_training_state` wrote (the parts in `contents`), written by any number of processes;
    returns trainer_state.json. Every rank calls it."""
    if not (folder / "trainer_state.json").is_file():
        raise CheckpointError(f"{str(folder)!r} is not an rft checkpoint folder (no trainer_state.json); name a "
                              "global_step_N folder in trainer.resume_from_path")
    try:
        return _load_training_state(folder, contents=contents, model=model, optimizer=optimizer,
                                    scheduler=scheduler, generators=generators, dist=dist)
    except (CheckpointError, TrainingDiverged):
        raise
    except Exception as e:
        raise CheckpointError(
            f"checkpoint {str(folder)!r} cannot be loaded ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
            "delete it to resume from the previous one, or set trainer.resume_mode=disable to start over"
        ) from e


def _load_training_state(folder: Path, *, contents: set[str], model, optimizer, scheduler, generators: dict,
                         dist: Dist) -> dict:
    import random

    import numpy as np
    import torch

    state = json.loads((folder / "trainer_state.json").read_text())
    contents = set(contents) & set(state["contents"])
    _load_model_and_optimizer(folder, POLICY_DCP, "policy.safetensors", contents, model, optimizer, dist)
    if "extra" in contents:
        extra = load_pt(folder / "extra.pt")
        scheduler.load_state_dict(extra["scheduler"])
        torch.set_rng_state(extra["rng"]["torch"])
        random.setstate(extra["rng"]["python"])
        np.random.set_state(extra["rng"]["numpy"])
        for name, g in generators.items():
            g.set_state(extra["rng"][name])
    return state


def save_module_state(folder: Path, *, contents: set[str], model, optimizer, scheduler, tokenizer=None,
                      dist: Dist = SINGLE, export: Callable[[Path], None] | None = None) -> None:
    """A second trained model's part of a checkpoint (the critic's `critic/` sub-folder): model.safetensors (its
    trainable parameters; `model_dcp/` with several processes), optimizer.pt, scheduler.pt ("extra"), hf_model/,
    and contents.json. The RNG states and the trainer's state are the policy's files (`save_training_state`)."""
    import torch

    if dist.is_main:
        folder.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    _save_model_and_optimizer(folder, MODEL_DCP, "model.safetensors", contents, model, optimizer, dist)
    _export_hf_model(folder, contents, model, tokenizer, export)
    if not dist.is_main:
        return
    if "extra" in contents:
        checked_write(lambda: torch.save(scheduler.state_dict(), folder / "scheduler.pt"), folder / "scheduler.pt")
    (folder / "contents.json").write_text(json.dumps(sorted(contents)))


def load_module_state(folder: Path, *, contents: set[str], model, optimizer, scheduler, dist: Dist = SINGLE) -> None:
    """Restore what `save_module_state` wrote (the parts in `contents`)."""
    if not (folder / "contents.json").is_file():
        raise FileNotFoundError(f"checkpoint {str(folder.parent)!r} has no {folder.name}/ part (written by a run "
                                f"without a {folder.name}?)")
    contents = set(contents) & set(json.loads((folder / "contents.json").read_text()))
    _load_model_and_optimizer(folder, MODEL_DCP, "model.safetensors", contents, model, optimizer, dist)
    if "extra" in contents:
        scheduler.load_state_dict(load_pt(folder / "scheduler.pt"))


def resume_folder(mode: str, resume_from_path: str | None, manager: CheckpointManager,
                  quiet: bool = False) -> Path | None:
    """The checkpoint a run continues from: none (disable / nothing saved yet), the newest whole one, or the named
    one. A damaged checkpoint (`damage`) is reported in one line and moved aside (`global_step_N.corrupt`, unless
    `quiet`: a look before the run, which changes nothing) and the previous whole one is used; a damaged named
    one is an error naming the newest whole one."""
    if mode == "disable":
        return None
    if mode == "resume_path":
        folder = Path(resume_from_path).expanduser()
        why = damage(folder) if folder.is_dir() else "no such folder"
        if why is not None:
            whole = next((c for c in manager.candidates() if damage(c) is None), None)
            raise CheckpointError(
                f"trainer.resume_from_path={str(resume_from_path)!r} is not a whole rft checkpoint ({why}); "
                + (f"the newest whole checkpoint is {whole}" if whole else "there is no whole checkpoint to use")
            )
        return folder
    for folder in manager.candidates():
        why = damage(folder)
        if why is None:
            return folder
        if not quiet:
            aside = folder.with_name(f"{folder.name}.corrupt")
            if aside.exists():
                shutil.rmtree(aside, ignore_errors=True)
            folder.rename(aside)
            print(f"rft: checkpoint {folder} is damaged ({why}); moved it to {aside.name} and resuming from the "
                  "previous whole checkpoint, if any", flush=True)
    return None


def trainer_kind(cfg) -> dict:
    """The trainer a run of `cfg` is, as its checkpoints record it in trainer_state.json: `trainer` (the command
    that resumes from them: train, sft or dpo; a stage of a staged run is the trainer of its kind) and, for `rft
    train`, `algorithm` (algorithm.adv_estimator)."""
    if hasattr(cfg, "actor_rollout_ref"):
        return {"trainer": "train", "algorithm": cfg.algorithm.adv_estimator}
    algorithm = getattr(cfg, "algorithm", None)
    return {"trainer": "dpo" if hasattr(algorithm, "loss_type") else
            "rm" if hasattr(algorithm, "center_rewards_coefficient") else "sft"}


def config_trainer(config: Any) -> str | None:
    """The trainer (`trainer_kind`'s `trainer`: train, sft or dpo) whose resolved config is `config`, a run folder's
    config.yaml as a dict, None where it is none of theirs: an RL config has actor_rollout_ref; SFT's and DPO's have
    model.partial_pretrain, DPO's also its loss's algorithm section (algorithm.loss_type). The one reading of a
    config.yaml for which trainer wrote it (`written_by`, `run_folder._finished_without_checkpoint`)."""
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("actor_rollout_ref"), dict):
        return "train"
    model, algorithm = config.get("model"), config.get("algorithm")
    if not (isinstance(model, dict) and "partial_pretrain" in model):
        return None
    if isinstance(algorithm, dict) and "center_rewards_coefficient" in algorithm:
        return "rm"
    return "dpo" if isinstance(algorithm, dict) and "loss_type" in algorithm else "sft"


def written_by(folder: Path) -> dict | None:
    """The trainer that wrote the checkpoint `folder` (`trainer_kind`'s keys; `trainer` "sft or dpo" where the files
    cannot tell them apart), or None when unknown. Checkpoints written before they recorded it tell by their files:
    an RL run's trainer_state.json holds kl_coef, SFT's and DPO's do not; the run folder's config.yaml (a DPO
    config has algorithm.loss_type, an RL one adv_estimator) tells SFT from DPO and names the RL algorithm."""
    try:
        state = json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    if "trainer" in state:
        return {k: state[k] for k in ("trainer", "algorithm") if k in state}
    from rft.config.errors import ConfigError

    try:
        config = run_config(folder)
    except ConfigError:  # a damaged config.yaml: no evidence, the files alone tell
        config = {}
    algorithm = config.get("algorithm") if isinstance(config.get("algorithm"), dict) else {}
    if "kl_coef" in state:
        return {"trainer": "train", **({"algorithm": algorithm["adv_estimator"]} if "adv_estimator" in algorithm
                                       else {})}
    kind = config_trainer(config)
    return {"trainer": kind if kind in ("sft", "dpo") else "sft or dpo"}


def run_config(folder: Path) -> dict:
    """The config.yaml of the run folder holding the checkpoint `folder` (`<run>/checkpoints/global_step_N`), {}
    when there is none. One that does not parse raises the config loader's one line (`read_yaml`: the file, line
    and column); a reader that can do without it catches that ConfigError (`written_by`)."""
    from omegaconf import OmegaConf

    from rft.config.load import read_yaml

    path = folder.parent.parent / "config.yaml"
    if not path.is_file():
        return {}
    return OmegaConf.to_container(read_yaml(path))


def describe_trainer(kind: dict) -> str:
    """`rft train (grpo)`, `rft sft`, ...: a `trainer_kind` as the command that runs it."""
    algorithm = f" ({kind['algorithm']})" if kind.get("algorithm") else ""
    return f"rft {kind['trainer']}{algorithm}"


def checkpoint_to_resume(cfg) -> Path | None:
    """The checkpoint a run of `cfg` would resume from (`resume_folder`), looked up before the run, reading only: a
    damaged one is passed over, not moved aside. A named one that cannot be used raises CheckpointError."""
    t = cfg.trainer
    manager = CheckpointManager(Path(t.default_local_dir).expanduser() / "checkpoints")
    return resume_folder(t.resume_mode, t.resume_from_path, manager, quiet=True)


def check_resume_kind(cfg, folder: Path | None) -> None:
    """Refuse a run that would resume from checkpoints another trainer wrote (an `rft sft` into an `rft train`
    run's folder, ...): its weights, optimizer and step would be taken for this run's, and config.yaml and
    metrics.jsonl overwritten and mixed. `folder`: the checkpoint the run would resume from
    (`checkpoint_to_resume`), None when it starts fresh. Called before any model loads; reads only."""
    if folder is None:
        return
    t = cfg.trainer
    written, this = written_by(folder), trainer_kind(cfg)
    if written is None or this["trainer"] in str(written.get("trainer")).split(" or "):
        return
    command = f"rft {this['trainer']}"
    if t.resume_mode == "resume_path":
        raise CheckpointError(
            f"trainer.resume_from_path={str(t.resume_from_path)!r} is an {describe_trainer(written)} run's "
            f"checkpoint; {command} would resume from it: name a checkpoint of an {command} run, or set "
            "trainer.resume_mode=disable to start fresh"
        )
    raise CheckpointError(
        f"{t.default_local_dir} holds an {describe_trainer(written)} run's checkpoints; {command} would resume from "
        "them: use another trainer.default_local_dir, or trainer.resume_mode=disable to start fresh there"
    )


def load_policy_weights(folder: Path, model) -> None:
    """Only the policy's trained weights of the checkpoint `folder` into `model` (one-process file or DCP folder;
    the model built as the run built it, LoRA included): what evaluating a checkpoint needs."""
    folder = Path(folder)
    if (folder / POLICY_DCP).is_dir():
        from rft.workers.fsdp import load_sharded

        load_sharded(folder / POLICY_DCP, model, None)
    else:
        _load_weights(model, folder / "policy.safetensors", folder)
