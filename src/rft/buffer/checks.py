"""The checks of the experience buffer's keys: read time-outs, priority replay, staleness, a path that can be
written."""

from __future__ import annotations

import os
from pathlib import Path

from rft.config.checks import CHECKS, UNUSED, CheckContext
from rft.config.errors import ConfigError


def local_folder(storage_type: str, path: str | None) -> Path | None:
    """The folder on this machine a buffer at `path` writes into (a SQLite database's, a file buffer's own); None
    for the default path (under the output folder, checked with it), a database server or memory."""
    if not path:
        return None
    if storage_type == "file":
        return Path(path).expanduser()
    from rft.buffer.base import database_url

    url = database_url(path)
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return None
    return Path(url.removeprefix("sqlite:///")).expanduser().parent


def check_buffer_path(b) -> None:
    """The buffer's folder can be made and written, told before any model loads (the run met it after loading the
    models, as an operating-system error naming no key)."""
    folder = local_folder(b.storage_type, b.path)
    if folder is None:
        return
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    problem = (f"{existing} is a file, not a folder" if not existing.is_dir()
               else f"{existing} cannot be written" if not os.access(existing, os.W_OK | os.X_OK) else None)
    if problem:
        raise ConfigError(f"experience_buffer.path={b.path!r}: {problem}, so the buffer cannot be written there; "
                          "choose a path in a folder this process can write")


@CHECKS.register("buffer.experience_buffer")
def check_experience_buffer(ctx: CheckContext) -> None:
    b = ctx.cfg.experience_buffer
    if not b.max_read_timeout > 0:
        raise ConfigError(f"experience_buffer.max_read_timeout must be > 0 seconds, got {b.max_read_timeout}")
    if b.priority_decay < 0:
        raise ConfigError(f"experience_buffer.priority_decay must be >= 0, got {b.priority_decay}")
    if b.reuse_cooldown_time is not None:
        if not b.use_priority_queue:
            raise ConfigError("experience_buffer.reuse_cooldown_time replays experiences of the priority queue: set "
                              "experience_buffer.use_priority_queue=true, or remove it")
        if b.reuse_cooldown_time < 0:
            raise ConfigError(f"experience_buffer.reuse_cooldown_time must be >= 0 seconds, got {b.reuse_cooldown_time}")
    if b.priority_sigma < 0:
        raise ConfigError(f"experience_buffer.priority_sigma must be >= 0, got {b.priority_sigma}")
    if b.priority_sigma and not b.use_priority_queue:
        raise ConfigError("experience_buffer.priority_sigma perturbs the priority queue's order: set "
                          "experience_buffer.use_priority_queue=true, or remove it")
    if b.priority_use_count_limit is not None:
        if not isinstance(b.priority_use_count_limit, int) or b.priority_use_count_limit < 1:
            raise ConfigError("experience_buffer.priority_use_count_limit must be an integer >= 1 or null, got "
                              f"{b.priority_use_count_limit!r}")
        if b.reuse_cooldown_time is None:
            raise ConfigError("experience_buffer.priority_use_count_limit limits the replays of "
                              "experience_buffer.reuse_cooldown_time, which is not set (each experience is read "
                              "once): set it, or remove the limit")
    n = b.train_batch_size
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"experience_buffer.train_batch_size must be an integer >= 1 (experiences a trainer "
                              f"step reads) or null, got {n!r}")
        if ctx.cfg.algorithm.mix.enable:
            raise ConfigError("experience_buffer.train_batch_size with algorithm.mix: rft's mix reads its expert rows "
                              "beside every experience of an explore step; remove it")
    if b.max_staleness is not None and (not isinstance(b.max_staleness, int) or b.max_staleness < 0):
        raise ConfigError(f"experience_buffer.max_staleness must be an integer >= 0 or null, got {b.max_staleness!r}")
    if ctx.check_paths:
        check_buffer_path(b)


@UNUSED.register("buffer.train_batch_size")
def unused_train_batch_size(cfg) -> dict[str, str]:
    """experience_buffer.train_batch_size is a trainer's read (and, in mode explore, what makes its explorer take the
    newest weights published): mode bench reads no buffer."""
    if cfg.trainer.mode == "bench":
        return {"experience_buffer.train_batch_size": f"trainer.mode={cfg.trainer.mode}: no trainer reads the buffer "
                                                      "in this command"}
    return {}
