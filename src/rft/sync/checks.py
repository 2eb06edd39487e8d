"""The checks of the synchronizer keys: how often and how late the explorer takes the trainer's weights."""

from __future__ import annotations

from rft.config.checks import CHECKS, CheckContext, positive
from rft.config.errors import ConfigError


@CHECKS.register("sync.synchronizer")
def check_synchronizer(ctx: CheckContext) -> None:
    s = ctx.cfg.synchronizer
    positive("synchronizer.sync_interval", s.sync_interval)
    if not isinstance(s.sync_offset, int) or s.sync_offset < 0:
        raise ConfigError(f"synchronizer.sync_offset must be an integer >= 0, got {s.sync_offset!r}")
    if not s.sync_timeout > 0:
        raise ConfigError(f"synchronizer.sync_timeout must be > 0 seconds, got {s.sync_timeout}")
    if ctx.cfg.experience_buffer.train_batch_size is not None and s.sync_method in ("gloo", "memory"):
        raise ConfigError(f"synchronizer.sync_method={s.sync_method} with experience_buffer.train_batch_size: a trainer "
                          "step reading its own count of experiences runs apart from the explore steps, whose explorer "
                          "takes the newest weights published, through sync files (sync_method checkpoint, the "
                          "default then); remove sync_method or set it to checkpoint")
