"""When weights travel from the trainer to the explorer (Trinity-RFT's synchronizer, fixed style).

The trainer publishes its weights after every `sync_interval`-th step; the explorer takes them after its explore
steps `sync_offset + k * sync_interval` (k >= 1), so it runs `sync_offset` steps ahead before the first sync. Explore
step n therefore generates with the weights of trainer step

    v(n) = I * max(0, floor((n - O - 1) / I))        (I = sync_interval, O = sync_offset)

and the trainer, which trains on explore step n's experiences at its step n starting from the weights of step n - 1,
sees them `(n - 1) - v(n)` steps stale: always 0 for I = 1, O = 0 (on-policy); 0, 1, 2, 1, 2, 1, ... for I = 2,
O = 1; at most I + O - 1.
"""

from __future__ import annotations


def required_version(step: int, interval: int, offset: int) -> int:
    """The trainer step whose weights explore step `step` (1-based) generates with."""
    return interval * max(0, (step - offset - 1) // interval)


def versions_after(step: int, total_steps: int, interval: int, offset: int, explorer: int = 0,
                   explorers: int = 1) -> list[int]:
    """The versions explore steps `step + 1 .. total_steps` generate with, in order, each once; with `explorers`
    explorers taking turns (trainer.explorer_num), those of explorer `explorer`'s steps (n - 1) % explorers."""
    return sorted({required_version(n, interval, offset) for n in range(step + 1, total_steps + 1)
                   if (n - 1) % explorers == explorer})


def published_versions(total_steps: int, interval: int, offset: int) -> list[int]:
    """The versions the explorer of a `total_steps` run needs beyond the starting model, in order: what the
    trainer publishes (it publishes nothing the explorer will not read, so a blocking broadcast never waits
    for a reader that has finished)."""
    return [v for v in versions_after(0, total_steps, interval, offset) if v > 0]


def staleness(step: int, interval: int, offset: int) -> int:
    """Trainer steps between the weights explore step `step` used and those trainer step `step` starts from."""
    return (step - 1) - required_version(step, interval, offset)


def is_synchronous(cfg) -> bool:
    """Mode both with on-policy weights (sync_interval 1, sync_offset 0): explorer and trainer are one loop; except a
    workflow beside several trainer processes (its runners' threads cannot keep the sharded model's lockstep), or a
    trainer step reading its own count of experiences (experience_buffer.train_batch_size), which run the explorer
    as a process of its own on the same on-policy schedule (`workflow_apart`, `steps_apart`)."""
    s = cfg.synchronizer
    return (cfg.trainer.mode == "both" and s.sync_interval == 1 and s.sync_offset == 0 and not workflow_apart(cfg)
            and not steps_apart(cfg))


def steps_apart(cfg) -> bool:
    """A trainer step reads experience_buffer.train_batch_size experiences, not what one explore step made: the
    explorer's and the trainer's steps count apart, so no fixed schedule says which version an explore step
    generates with. Each explore step takes the newest version the trainer has published, up to the schedule's
    (Trinity-RFT's explorer_driven sync): it never waits for a trainer step that waits for its experiences."""
    return cfg.experience_buffer.train_batch_size is not None


def workflow_apart(cfg) -> bool:
    """A workflow other than simple_workflow with several trainer processes: its explorer runs apart."""
    t = cfg.trainer
    return cfg.workflow.type != "simple_workflow" and t.nnodes * t.n_gpus_per_node > 1


def sync_method(cfg) -> str:
    """The weight sync that runs: synchronizer.sync_method, or its default for the mode: memory (one process), gloo
    (the two processes of mode both), checkpoint (modes explore / train / bench, and mode both with several
    explorers, and steps apart: `steps_apart`). nccl, Trinity-RFT's name for a GPU-to-GPU broadcast, runs as gloo
    (rft has no NCCL weight sync; the trainer's log says so: `rft.sync.process_group.transport_line`), or with steps
    apart as checkpoint (gloo sends the fixed schedule's versions)."""
    named = cfg.synchronizer.sync_method
    if steps_apart(cfg) and named in (None, "nccl"):  # the explorer takes the newest version: sync files
        return "checkpoint"
    if named is not None:
        return "gloo" if named == "nccl" else named
    if is_synchronous(cfg):
        return "memory"
    return "gloo" if cfg.trainer.mode == "both" and cfg.trainer.explorer_num == 1 else "checkpoint"
