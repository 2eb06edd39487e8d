"""Experience buffers: where explorers write experiences and the trainer reads them (Trinity-RFT's storage types:
queue, sql, file)."""

from pathlib import Path

from rft.buffer.base import BufferClosed, ExperienceBuffer, Read, database_url
from rft.buffer.file import FileBuffer
from rft.buffer.queue import MemoryQueue

DEFAULT_FILE = "buffer.sqlite"


def buffer_url(cfg, shared: bool) -> str | None:
    """The database of the experience buffer: experience_buffer.path as a SQLAlchemy URL, <out>/buffer.sqlite when
    explorer and trainer are separate processes (`shared`) or the storage is sql, an in-memory SQLite database for
    a priority queue in one process; None: the plain in-memory queue."""
    b = cfg.experience_buffer
    if b.path:
        return database_url(b.path)
    if shared or b.storage_type == "sql":
        return database_url(str(Path(cfg.trainer.default_local_dir) / DEFAULT_FILE))
    return "sqlite://" if b.use_priority_queue else None


def make_buffer(cfg, shared: bool = False) -> ExperienceBuffer:
    """The experience buffer of an RL config; `shared`: explorer and trainer are different processes."""
    b = cfg.experience_buffer
    if b.storage_type == "file":
        return FileBuffer(b.path or Path(cfg.trainer.default_local_dir) / "experiences")
    url = buffer_url(cfg, shared)
    if url is None:
        return MemoryQueue()
    from rft.buffer.sql import SQLBuffer  # SQLAlchemy loads only for a database buffer

    t = cfg.trainer
    return SQLBuffer(url, use_priority_queue=b.use_priority_queue, reuse_cooldown_time=b.reuse_cooldown_time,
                     priority_decay=b.priority_decay, use_count_limit=b.priority_use_count_limit,
                     priority_sigma=b.priority_sigma, explorers=t.explorer_num, explorer=t.explorer_rank)


def shareable(buffer: ExperienceBuffer) -> bool:
    """A buffer other processes can open (a database one, not this process's in-memory database)."""
    return hasattr(buffer, "join") and buffer.url not in ("sqlite://", "sqlite:///:memory:")


def persistent(buffer: ExperienceBuffer) -> bool:
    """A buffer that outlives this process (a database file or server, a file buffer's folder), which another run
    may be pointed at: it records the run that owns it (`own`)."""
    return shareable(buffer) or isinstance(buffer, FileBuffer)


def run_layout(cfg, model: dict | None) -> dict:
    """What the processes sharing a buffer must agree on (`rft.buffer.sharing`); `model`: the actor's identity
    (`rft.models.load.model_identity`)."""
    return {"explorer_num": cfg.trainer.explorer_num, "rollout_n": cfg.actor_rollout_ref.rollout.n,
            **({"model": model} if model is not None else {})}


def __getattr__(name: str):
    if name == "SQLBuffer":
        from rft.buffer.sql import SQLBuffer

        return SQLBuffer
    raise AttributeError(f"module 'rft.buffer' has no attribute {name!r}")


__all__ = ["BufferClosed", "ExperienceBuffer", "FileBuffer", "MemoryQueue", "Read", "SQLBuffer", "buffer_url",
           "database_url", "make_buffer", "persistent", "run_layout", "shareable"]
