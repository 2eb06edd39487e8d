"""verl's `data.sampler`: a sampler class of the user's orders the training prompts (curriculum learning).

verl builds it as `cls(data_source=<the training dataset>, data_config=<the data section>)`, `cls` the class
`data.sampler.class_name` of `data.sampler.class_path` (a Python file, `file://` optional, or `pkg://<module>`:
verl's `load_extern_type`), a `torch.utils.data.Sampler` (verl's `AbstractSampler`) that yields dataset indices.
Its dataloader takes `data.train_batch_size` indices a step from `iter(sampler)`, lazily (verl requires
`dataloader_num_workers=0` for it, so that the order an update changes is the order drawn), and drops the last
short batch of an epoch; a sampler with `update(batch)` (verl's `AbstractCurriculumSampler`) gets the step's batch
after the update (ray_trainer.fit), verl's `DataProto` with the step's tensors and rows.

rft does the same (`UserSampler`: `PromptSampler`'s interface over the user's sampler): `data_source` is rft's
prompt dataset (`len()`, `dataset[i]` a `rft.data.dataset.Prompt`), `data_config` a DictConfig of the data section;
each step draws its indices lazily, an epoch is `len(sampler) // data.train_batch_size` steps (a fresh
`iter(sampler)` each), and `update` gets a `SamplerBatch`: the fields of verl's `DataProto` its samplers read
(`batch` tensors, `non_tensor_batch` numpy arrays, `meta_info`), every process's rows of the step. Checkpoints
keep the epoch, the batches drawn in it and the sampler's `state_dict()` when it has one; a resume calls its
`load_state_dict` and draws on from a fresh `iter(sampler)` (the state holds its place in the epoch, as torchdata's
stateful samplers, which verl's StatefulDataLoader checkpoints, do), or, for a sampler without a state, re-draws
the epoch from a fresh `iter(sampler)` past the batches already drawn (exact when its order is seeded).
"""

from __future__ import annotations

import importlib
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rft.console import counted
from rft.data.io import DataError

log = logging.getLogger("rft")

KEY = "data.sampler.class_path"
PKG, FILE = "pkg://", "file://"


def module_problem(path: str) -> str | None:
    """Why `data.sampler.class_path` does not name a module rft can load, without running it (None: it can)."""
    if path.startswith(PKG):
        name = path[len(PKG):].replace("/", ".")
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError) as e:  # a parent package that is not installed
            found, why = None, f"{type(e).__name__}: {e}"
        else:
            why = "no such module"
        return None if found is not None else f"{path!r} names the module {name!r}, which does not import here " \
                                              f"({why}); install its package or point to the file instead"
    file = Path(path.removeprefix(FILE)).expanduser()
    if not file.is_file() or file.suffix != ".py":
        return f"{path!r} is not a Python file (.py) or pkg://<module>"
    return None


def sampler_class(path: str, name: str) -> type:
    """The class `name` of `path` (verl's load_extern_type: pkg://<module> imports the module, anything else is a
    file, file:// optional), a torch.utils.data.Sampler."""
    from torch.utils.data import Sampler

    from rft.userfile import load_user_module

    if path.startswith(PKG):
        problem = module_problem(path)
        if problem is not None:
            raise DataError(f"{KEY}: {problem}")
        module = importlib.import_module(path[len(PKG):].replace("/", "."))
    else:
        module = load_user_module(path.removeprefix(FILE), KEY, "rft_sampler", DataError)
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise DataError(f"data.sampler.class_name: {path!r} defines no class {name!r}")
    if not issubclass(cls, Sampler):
        raise DataError(f"data.sampler.class_name: {name!r} in {path!r} is not a subclass of torch.utils.data.Sampler "
                        "(verl's AbstractSampler is one)")
    return cls


def build_sampler(data, dataset) -> Any:
    """The user's sampler over `dataset` (rft's training prompts), built as verl builds it."""
    from omegaconf import OmegaConf

    spec = data.sampler
    cls = sampler_class(spec.class_path, spec.class_name)
    config = OmegaConf.create(OmegaConf.to_container(OmegaConf.structured(data)))
    try:
        return cls(data_source=dataset, data_config=config)
    except Exception as e:
        raise DataError(f"data.sampler {spec.class_name} ({spec.class_path}) raised {type(e).__name__} when built as "
                        f"cls(data_source=<the training prompts>, data_config=<the data section>): "
                        f"{' '.join(str(e).split())[:200]}") from e


class UserSampler:
    """`PromptSampler`'s interface (next_batch, epoch, drawn, state_dict) over a sampler of the user's."""

    def __init__(self, sampler: Any, num_items: int, batch_size: int, batch_key: str = "data.train_batch_size"):
        self.sampler, self.num_items, self.batch_size, self.batch_key = sampler, num_items, batch_size, batch_key
        self.name = type(sampler).__name__
        try:
            length = len(sampler)
        except TypeError:
            length = num_items  # a sampler without a length: an epoch is the dataset's
        if length < batch_size:
            raise DataError(f"data.sampler {self.name} yields {counted(length, 'index', 'indices')} an epoch, fewer "
                            f"than {batch_key}={batch_size} (the prompts of one step): lower {batch_key} to at most "
                            f"{length}")
        self.batches_per_epoch = length // batch_size
        self.epoch, self.batch_in_epoch = 0, 0
        self._iter = None
        self.last: list[int] = []  # the latest batch's indices

    @property
    def drawn(self) -> int:
        return self.epoch * self.batches_per_epoch + self.batch_in_epoch

    def _take(self) -> list[int]:
        indices = list(itertools.islice(self._iter, self.batch_size))
        for i in indices:
            if not isinstance(i, (int, np.integer, torch.Tensor)) or not 0 <= int(i) < self.num_items:
                raise DataError(f"data.sampler {self.name} yielded {i!r}, not an index of the {self.num_items} "
                                "training prompts")
        return [int(i) for i in indices]

    def next_batch(self) -> list[int]:
        if self._iter is not None and self.batch_in_epoch >= self.batches_per_epoch:
            self.epoch, self.batch_in_epoch, self._iter = self.epoch + 1, 0, None
        if self._iter is None:
            self._iter = iter(self.sampler)
        indices = self._take()
        if len(indices) < self.batch_size:  # it yielded fewer than len() said: the epoch ends here (drop_last)
            self.epoch, self.batch_in_epoch, self._iter = self.epoch + 1, 0, iter(self.sampler)
            indices = self._take()
            if len(indices) < self.batch_size:
                raise DataError(f"data.sampler {self.name} yielded {len(indices)} indices in a fresh epoch, fewer "
                                f"than {self.batch_key}={self.batch_size}")
        self.batch_in_epoch += 1
        self.last = indices
        return indices

    def update(self, batch: SamplerBatch) -> None:
        """The sampler's `update(batch)` (verl's AbstractCurriculumSampler), when it has one."""
        update = getattr(self.sampler, "update", None)
        if callable(update):
            update(batch=batch)

    def state_dict(self) -> dict:
        state = {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "num_items": self.num_items,
                 "batch_size": self.batch_size, "sampler": self.name}
        if callable(getattr(self.sampler, "state_dict", None)):
            state["state"] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        for key, what, ours in (("num_items", "the number of training prompts", self.num_items),
                                ("batch_size", self.batch_key, self.batch_size),
                                ("sampler", "data.sampler.class_name", self.name)):
            if key in state and state[key] != ours:
                raise DataError(f"the checkpoint was written with {what}={state[key]}, this run has {ours}; resume "
                                "with the same data, batch size and sampler (or set trainer.resume_mode=disable)")
        self.epoch, self.batch_in_epoch = state["epoch"], state["batch_in_epoch"]
        if "state" in state:
            if not callable(getattr(self.sampler, "load_state_dict", None)):
                raise DataError(f"data.sampler {self.name} has state_dict but no load_state_dict: the checkpoint's "
                                "sampler state cannot be restored; add load_state_dict to the class")
            self.sampler.load_state_dict(state["state"])
            self._iter = iter(self.sampler)  # its state holds its place in the epoch
            return
        log.info("rft: data.sampler %s has no state_dict: the resumed run draws its epoch %d anew, past the %s "
                 "drawn (the same order only if its order is seeded)", self.name, self.epoch,
                 counted(self.batch_in_epoch, "batch", "batches"))
        self._iter = iter(self.sampler)
        for _ in range(self.batch_in_epoch):
            self._take()


@dataclass
class SamplerBatch:
    """A trained step's rows as a curriculum sampler's `update(batch)` reads them: the fields of verl's DataProto.
    `batch`: tensors (B, ...) under verl's names (prompts, responses, input_ids, attention_mask, response_mask,
    token_level_scores, token_level_rewards, and advantages / returns / old_log_probs / ref_log_prob / values when
    the step computed them); `non_tensor_batch`: numpy object arrays (B,) (uid: the group, data_source,
    reward_model {ground_truth}, extra_info, index: extra_info's index as verl reads it, and rft's dataset_index:
    the sampler's index of the row's prompt); `meta_info`: {global_step}."""

    batch: dict[str, torch.Tensor] = field(default_factory=dict)
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.non_tensor_batch.values()))) if self.non_tensor_batch else 0


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def sampler_batch(batch, token_scores: torch.Tensor, positions: list[int | None], drawn: list[int], step: int,
                  dist) -> SamplerBatch:
    """The SamplerBatch of a trained step: `batch` (this process's rft Batch after the update), `token_scores`
    (B, R) its scores on the last tokens, `positions` each row's prompt's place among the step's `drawn` indices
    (None: a row of no drawn prompt, e.g. algorithm.mix's expert rows);
    with several processes every process's rows, in rank order (every process's sampler gets the same batch)."""
    tensors = {"prompts": batch.prompt_ids, "responses": batch.response_ids, "response_mask": batch.response_mask,
               "prompt_mask": batch.prompt_mask, "token_level_scores": token_scores,
               "token_level_rewards": batch.token_rewards if batch.token_rewards is not None else token_scores,
               "advantages": batch.advantages, "returns": batch.returns, "old_log_probs": batch.old_logprobs,
               "ref_log_prob": batch.ref_logprobs, "values": batch.values}
    tensors = {k: v.detach().cpu() for k, v in tensors.items() if v is not None}
    rows = {"uid": [f"{step}-{int(g)}" for g in batch.group], "data_source": list(batch.data_source),
            "reward_model": [{"ground_truth": g} for g in batch.ground_truth],
            "extra_info": list(batch.extra_info),
            "index": [(e or {}).get("index") if isinstance(e, dict) else None for e in batch.extra_info],
            "dataset_index": [None if p is None else drawn[p] for p in positions]}
    parts = dist.gather_objects((tensors, rows)) if dist.enabled else [(tensors, rows)]
    prompt_width = max(t["prompts"].shape[1] for t, _ in parts)
    response_width = max(t["responses"].shape[1] for t, _ in parts)
    merged: dict[str, torch.Tensor] = {}
    for key in parts[0][0]:
        pieces = []
        for t, _ in parts:
            x = t[key]
            if key in ("prompts", "prompt_mask"):  # left-padded
                x = torch.nn.functional.pad(x, (prompt_width - x.shape[1], 0))
            elif x.dim() == 2:  # right-padded response columns
                x = torch.nn.functional.pad(x, (0, response_width - x.shape[1]))
            pieces.append(x)
        merged[key] = torch.cat(pieces)
    prompt_mask = merged.pop("prompt_mask")
    merged["input_ids"] = torch.cat([merged["prompts"], merged["responses"]], dim=1)
    merged["attention_mask"] = torch.cat([prompt_mask, merged["response_mask"]], dim=1)
    non_tensor = {k: _objects([v for _, r in parts for v in r[k]]) for k in rows}
    return SamplerBatch(merged, non_tensor, {"global_step": step})
