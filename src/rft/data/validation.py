"""The validation cap (`data.val_max_samples`, verl's key in ppo_trainer.yaml and sft_trainer.yaml) and the note a
large uncapped validation gets; shared by `rft train` (prompts), `rft sft` (rows) and `rft dpo` (pairs)."""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("rft")

LARGE_VALIDATION = 300
"""Validation rows above which a run without data.val_max_samples says how many it validates on, and the key (a run of another project's config names it as that config sets it: `rft.config.spelling`)."""


def capped_validation(total: int, cap: int, shuffle: bool, seed: int | None, unit: str) -> list[int] | None:
    """The indices of the `total` validation `unit`s (prompts, rows, pairs) that data.val_max_samples = `cap` keeps,
    in order, or None where it keeps them all (cap <= 0 or >= total). verl's meaning (RLHFDataset, SFTDataset): with
    `shuffle` numpy's default_rng(seed).choice(total, size=cap, replace=False), else the first `cap`."""
    if not 0 < cap < total:
        return None
    log.info("rft: validating on %d of the %d %s of data.val_files (data.val_max_samples; %s)", cap, total, unit,
             f"a sample drawn with data.seed={seed}" if shuffle else "the first ones")
    return np.random.default_rng(seed).choice(total, size=cap, replace=False).tolist() if shuffle else list(range(cap))


def note_uncapped_validation(count: int, cap: int, work: str) -> None:
    """One note where a run validates on more than LARGE_VALIDATION `count` rows without data.val_max_samples
    (`cap` <= 0): `work` says what each validation does with them (a GSM8K test set's 1,319 prompts take minutes at
    every validation). The caller says it once, on the rank that logs, and only where the run validates."""
    if count > LARGE_VALIDATION and cap <= 0:
        log.warning("rft: note: each validation %s; set data.val_max_samples=N to validate on N of them", work)
