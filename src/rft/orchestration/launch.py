"""Where the processes of an RL run come from: one process trains in place (as a process group of one when its config
names fsdp2: `rft.workers.fsdp.fsdp_alone`); several on this node are started by
torch.distributed's elastic launcher (`rft.distributed.launch`), each re-running the same command; a process that a
launcher started (torchrun on each node of a multi-node job, or the launch above) joins the process group and
trains its rank's share. See docs/scaling.md."""

from __future__ import annotations

import os
from collections.abc import Callable

from rft.config.checks import processes
from rft.config.load import ConfigError
from rft.distributed import Dist
from rft.orchestration.roles import ProcessRole


def multi_node_command(cfg, command: str = "train ...") -> str:
    t = cfg.trainer
    return (f"torchrun --nnodes {t.nnodes} --nproc-per-node {t.n_gpus_per_node} --rdzv-backend c10d "
            f"--rdzv-endpoint HOST:29500 --rdzv-id JOB_ID -m rft {command}")


def check_launch(cfg, command: str = "train ...", role: ProcessRole | None = None) -> None:
    """The process counts of the environment (a launcher's WORLD_SIZE / LOCAL_WORLD_SIZE) agree with the config;
    several nodes need a launcher (the `rft` command each node runs under it: `command`). `role`: this process's
    (None: the environment's)."""
    from rft.distributed import launched

    role = role or ProcessRole.from_env()
    t = cfg.trainer
    if launched():
        env_world = int(os.environ["WORLD_SIZE"])
        local = os.environ.get("LOCAL_WORLD_SIZE")
        if env_world != processes(t) or (local is not None and int(local) != t.n_gpus_per_node):
            raise ConfigError(
                f"the launcher started WORLD_SIZE={env_world} processes (LOCAL_WORLD_SIZE={local} per node) but "
                f"trainer.nnodes x trainer.n_gpus_per_node = {t.nnodes} x {t.n_gpus_per_node}: set them to the "
                "launcher's nodes and processes per node"
            )
    elif t.nnodes > 1 and not role.explorer_child:  # an explorer is no rank: nnodes is not its
        raise ConfigError(
            f"trainer.nnodes={t.nnodes}: rft starts the processes of one node itself; for several nodes start it on "
            f"every node with torch's launcher, e.g. `{multi_node_command(cfg, command)}` (docs/scaling.md)"
        )


def train_here(cfg) -> dict[str, float]:
    """Train in this process: alone, or as the rank a launcher made it (joining the process group first). The
    output folder is held for the run (`run_folder`: locked, writable, cleaned) before the model loads."""
    from rft import interrupts
    from rft.distributed import launched, shutdown
    from rft.orchestration.run import SyncRun
    from rft.trainer.run_folder import run_folder
    from rft.workers.checks import fsdp_alone

    if not launched() and not fsdp_alone(cfg):
        with run_folder(cfg):
            return SyncRun(cfg).fit()
    dist = join_group(cfg)
    interrupts.set_dist(dist)  # the ranks agree on a stop at the start of each step
    try:
        with run_folder(cfg, dist):
            result = SyncRun(cfg, dist).fit()
        dist.barrier()  # every rank has finished before any of them tears the group down
        return result
    finally:
        shutdown()


def run_rl(cfg, module_args: list[str]) -> int:
    """Run the RL config `cfg` with the processes it asks for; `module_args`: the `python -m rft` arguments that
    reproduce this command in each started process. Returns the exit status."""
    from rft.distributed import launch, launched
    from rft.orchestration.cluster import placed_by_ray, ray_requested, run_on_ray
    from rft.sync.schedule import is_synchronous
    from rft.trainer.run_folder import run_folder
    from rft.workers.checks import fsdp_alone

    if placed_by_ray():
        import signal

        from rft.errors import EXIT_ERROR
        from rft.runtime import exit_with_parent

        # a Ray worker blocks SIGINT, and a process it starts inherits the mask: the driver's Ctrl-C passed on
        # would never arrive
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

        # a Ray actor killed (or its node lost) leaves no process of the run behind
        exit_with_parent(EXIT_ERROR, "rft: error: the Ray actor (pid {parent}) that started this process is gone, "
                                     "so it stops: run the same command again to resume")
    elif ray_requested(cfg) and not launched():  # Ray is the launcher (docs/cluster.md)
        return run_on_ray(cfg, module_args)
    role = ProcessRole.from_env()  # the launcher's word on this process, read here once and passed on
    check_launch(cfg, role=role)
    if not is_synchronous(cfg):  # explorer and trainer as separate loops
        from rft.orchestration.modes import TrainLoop, run_both_async, run_mode

        several = launched() or processes(cfg.trainer) > 1 or fsdp_alone(cfg)
        if several and cfg.trainer.mode == "train":
            def train(dist: Dist) -> None:  # the trainer alone on several processes (FSDP)
                with run_folder(cfg, dist):
                    TrainLoop(cfg, dist).fit()

            return run_spmd(cfg, module_args, train)
        if several and cfg.trainer.mode == "both" and not role.explorer_child:
            # the trainer on several processes (FSDP); rank 0 starts the explorer child
            return run_spmd(cfg, module_args, lambda dist: run_both_async(cfg, module_args, role, dist))
        return run_mode(cfg, module_args, role)
    if launched() or processes(cfg.trainer) == 1:
        train_here(cfg)
        return 0
    with run_folder(cfg, for_children=True):  # this process holds the folder for the ones it starts
        return launch(processes(cfg.trainer), module_args)


def run_spmd(cfg, module_args: list[str], body: Callable[[Dist], None], hold_folder: bool = True) -> int:
    """Run `body(dist)` with the processes `cfg.trainer` asks for: here when one (or when a launcher started this
    process: it joins the group first), else started on this node by the elastic launcher, each re-running
    `python -m rft <module_args>`. `hold_folder`: this process holds cfg's output folder for the ones it starts
    (a staged run's stages hold their own). Returns the exit status."""
    from rft import interrupts
    from rft.distributed import SINGLE, launch, launched, shutdown
    from rft.trainer.run_folder import run_folder
    from rft.workers.checks import fsdp_alone

    check_launch(cfg)
    if not launched() and not fsdp_alone(cfg):
        if processes(cfg.trainer) == 1:
            body(SINGLE)
            return 0
        if not hold_folder:
            return launch(processes(cfg.trainer), module_args)
        with run_folder(cfg, for_children=True):
            return launch(processes(cfg.trainer), module_args)
    dist = join_group(cfg)
    interrupts.set_dist(dist)
    try:
        body(dist)
        dist.barrier()  # every rank has finished before any of them tears the group down
        return 0
    finally:
        shutdown()


def join_group(cfg) -> Dist:
    """This process's place in the run's process group: the launcher's (its environment), or, for one process whose
    config asks for FSDP (`rft.workers.fsdp.fsdp_alone`), a group of its own."""
    from rft.distributed import init_from_env, init_group_of_one, launched
    from rft.models.load import resolve_device

    device_type = resolve_device(cfg.trainer.device).type
    if launched():
        return init_from_env(device_type, sequence_parallel_size(cfg))
    return init_group_of_one(device_type)


def sequence_parallel_size(cfg) -> int:
    """The processes per sequence-parallel group a config asks for: an RL config's actor_rollout_ref.actor.
    ulysses_sequence_parallel_size, an SFT config's top-level ulysses_sequence_parallel_size; 1 for other configs."""
    actor = getattr(getattr(cfg, "actor_rollout_ref", None), "actor", cfg)
    return int(getattr(actor, "ulysses_sequence_parallel_size", 1) or 1)
