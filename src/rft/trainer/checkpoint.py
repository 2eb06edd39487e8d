"""Checkpoints: `checkpoints/global_step_N/` folders written atomically, a `latest` pointer, retention.

A folder is written under a temporary name and renamed only when complete, and `latest` is replaced atomically
after that: a crash mid-save leaves the previous checkpoint whole and `latest` pointing at it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from rft.fsutil import atomic_dir, write_text_atomic

_STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointManager:
    def __init__(self, root: str | Path, max_to_keep: int | None = None):
        self.root = Path(root)
        self.max_to_keep = max_to_keep

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

    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        final = self.path(step)
        with atomic_dir(final) as tmp:
            write(tmp)
        write_text_atomic(self.root / "latest", final.name + "\n")
        self._prune(keep=step)
        return final

    def _prune(self, keep: int) -> None:
        if not self.max_to_keep:
            return
        for step in self.steps()[: -self.max_to_keep]:
            if step != keep:
                shutil.rmtree(self.path(step), ignore_errors=True)


def step_of(path: str | Path) -> int:
    m = _STEP_DIR.match(Path(path).name)
    if not m:
        raise ValueError(f"{str(path)!r} is not a global_step_N checkpoint folder")
    return int(m.group(1))


# ------------------------------------------------------------------------------ what a training checkpoint holds
def trainable_parameters(model) -> dict:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _save_weights(model, file: Path) -> None:
    from safetensors.torch import save_file

    save_file({n: p.detach().cpu().contiguous() for n, p in trainable_parameters(model).items()}, file)


def _load_weights(model, file: Path, folder: Path) -> None:
    import torch
    from safetensors.torch import load_file

    saved, params = load_file(file), trainable_parameters(model)
    if set(saved) != set(params):
        raise ValueError(f"checkpoint {folder} does not match the model: different trainable parameters "
                         "(LoRA settings changed?)")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(saved[name].to(p.device))


def save_training_state(folder: Path, *, contents: set[str], model, optimizer, scheduler, generators: dict,
                        state: dict, tokenizer=None) -> None:
    """Write a checkpoint's files into `folder` (see docs/architecture.md): the trainable parameters, the
    optimizer, the scheduler with every RNG state, optionally a HF folder, and `trainer_state.json`."""
    import random

    import numpy as np
    import torch

    from rft.models.load import export_hf

    if "model" in contents:
        _save_weights(model, folder / "policy.safetensors")
    if "optimizer" in contents:
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    if "extra" in contents:
        torch.save({
            "scheduler": scheduler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
                    **{name: g.get_state() for name, g in generators.items()}},
        }, folder / "extra.pt")
    if "hf_model" in contents:
        export_hf(model, tokenizer, folder / "hf_model")
    (folder / "trainer_state.json").write_text(json.dumps({**state, "contents": sorted(contents)}, indent=1))


def load_training_state(folder: Path, *, contents: set[str], model, optimizer, scheduler,
                        generators: dict) -> dict:
    """Restore what `save_training_state` wrote (the parts in `contents`); returns trainer_state.json."""
    import random

    import numpy as np
    import torch

    if not (folder / "trainer_state.json").is_file():
        raise FileNotFoundError(f"{str(folder)!r} is not an rft checkpoint folder (no trainer_state.json)")
    state = json.loads((folder / "trainer_state.json").read_text())
    contents = set(contents) & set(state["contents"])
    if "model" in contents:
        _load_weights(model, folder / "policy.safetensors", folder)
    if "optimizer" in contents:
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=False))
    if "extra" in contents:
        extra = torch.load(folder / "extra.pt", weights_only=False)
        scheduler.load_state_dict(extra["scheduler"])
        torch.set_rng_state(extra["rng"]["torch"])
        random.setstate(extra["rng"]["python"])
        np.random.set_state(extra["rng"]["numpy"])
        for name, g in generators.items():
            g.set_state(extra["rng"][name])
    return state


def save_module_state(folder: Path, *, contents: set[str], model, optimizer, scheduler, tokenizer=None) -> None:
    """A second trained model's part of a checkpoint (the critic's `critic/` sub-folder): model.safetensors (its
    trainable parameters), optimizer.pt, scheduler.pt ("extra"), hf_model/, and contents.json. The RNG states and
    the trainer's state are the policy's files (`save_training_state`)."""
    import torch

    from rft.models.load import export_hf

    folder.mkdir(parents=True, exist_ok=True)
    if "model" in contents:
        _save_weights(model, folder / "model.safetensors")
    if "optimizer" in contents:
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    if "extra" in contents:
        torch.save(scheduler.state_dict(), folder / "scheduler.pt")
    if "hf_model" in contents:
        export_hf(model, tokenizer, folder / "hf_model")
    (folder / "contents.json").write_text(json.dumps(sorted(contents)))


def load_module_state(folder: Path, *, contents: set[str], model, optimizer, scheduler) -> None:
    """Restore what `save_module_state` wrote (the parts in `contents`)."""
    import torch

    if not (folder / "contents.json").is_file():
        raise FileNotFoundError(f"checkpoint {str(folder.parent)!r} has no {folder.name}/ part (written by a run "
                                f"without a {folder.name}?)")
    contents = set(contents) & set(json.loads((folder / "contents.json").read_text()))
    if "model" in contents:
        _load_weights(model, folder / "model.safetensors", folder)
    if "optimizer" in contents:
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=False))
    if "extra" in contents:
        scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=False))


def resume_folder(mode: str, resume_from_path: str | None, manager: CheckpointManager) -> Path | None:
    """The checkpoint a run continues from: none (disable / nothing saved yet), the latest, or the named one."""
    if mode == "disable":
        return None
    if mode == "resume_path":
        return Path(resume_from_path)
    return manager.latest()
