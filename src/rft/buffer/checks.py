"""The checks of the experience buffer's keys: read time-outs, priority replay, staleness."""

from __future__ import annotations

from rft.config.checks import CHECKS, CheckContext
from rft.config.errors import ConfigError


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
    if b.max_staleness is not None and (not isinstance(b.max_staleness, int) or b.max_staleness < 0):
        raise ConfigError(f"experience_buffer.max_staleness must be an integer >= 0 or null, got {b.max_staleness!r}")
