"""Several processes (SPMD): the launch, the process group, how a batch is split over the ranks, and the few
collectives the trainer needs. Imports only torch.

One process is the default and needs none of this (`SINGLE`: every collective is the identity), unless its config
asks for FSDP (a group of one: `init_group_of_one`). `rft train` with
`trainer.nnodes * trainer.n_gpus_per_node > 1` starts that many processes on this node through torch.distributed's
elastic launcher (the agent torchrun runs), unless a launcher already did: RANK / WORLD_SIZE in the environment,
e.g. `torchrun --nnodes 2 ... -m rft train ...` on each node of a multi-node job. CUDA runs NCCL with one device
per process; a machine without CUDA runs the same code on CPU with gloo, one compute thread per process.

Splitting (`step_shard`): every rank draws the same prompt indices for a step and takes, from each mini-batch of
them, an equal share (contiguous, or dealt by prompt length with trainer.balance_batch); so every response of a
prompt stays on the rank that generated it, and the mini-batch j a rank trains on is its share of the one-process
mini-batch j (the same optimizer steps, over the same prompts, whatever the number of processes, when mini-batches
are not shuffled).

Sequence parallelism (`with_sequence_parallel`, verl's `ulysses_sequence_parallel_size`): the processes form groups
of `sp` consecutive ranks that hold the same data and split each sequence between them (`rft.workers.ulysses`). A
`Dist` is then the data-parallel view: `rank` / `world_size` count the groups (the data is split world_size ways),
`sp_rank` is the place within the group, `processes` all of them. Its collectives span every process and count each
group once (a sum takes the group's first process's term; a gather its rows), so the trainer's statistics and
normalisers are the data-parallel world's, whatever `sp`.
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import torch

LAUNCH_ENV = ("RANK", "WORLD_SIZE")
"""Set by torchrun / the elastic agent in each worker: their presence means this process was launched."""


def launched() -> bool:
    """True when a launcher started this process as one rank of several (RANK and WORLD_SIZE are set)."""
    return all(k in os.environ for k in LAUNCH_ENV) and int(os.environ["WORLD_SIZE"]) > 1


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """[lo, hi) of rank `rank`'s contiguous share of n items: equal shares, the first n % world_size ranks one
    more. The trainer's batch sizes divide by the number of processes (checked by the config validation)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def step_shard(n: int, mini: int, rank: int, world_size: int, lengths: list[int] | None = None,
               equal: bool = True) -> list[int]:
    """The positions among a step's n prompts that rank `rank` generates for and trains on: from each mini-batch
    of `mini` prompts ([j * mini, (j + 1) * mini)), its `shard_bounds` share, in order. n divides by mini and mini
    by world_size (the config validation checks both), unless not `equal`: shares then differ by one at most (a
    mix's expert rows, whose loss is normalised over every rank's).

    `lengths` (the n prompts' token counts; trainer.balance_batch): each mini-batch's prompts are dealt instead,
    longest first, each to the rank with the fewest tokens among those not yet holding mini / world_size prompts
    (ties: the lower rank). Every rank computes the same deal; each mini-batch keeps its set of prompts (so its
    gradient), only the ranks' shares of it change."""
    if n % mini or (mini % world_size and (equal or lengths is not None)):
        raise ValueError(f"{n} prompts in mini-batches of {mini} do not split evenly over {world_size} processes")
    if lengths is None:
        lo, hi = shard_bounds(mini, rank, world_size)
        return [start + i for start in range(0, n, mini) for i in range(lo, hi)]
    if len(lengths) != n:
        raise ValueError(f"step_shard: {len(lengths)} lengths for {n} prompts")
    per_rank = mini // world_size
    mine: list[int] = []
    for start in range(0, n, mini):
        tokens, counts, owner = [0] * world_size, [0] * world_size, {}
        for pos in sorted(range(start, start + mini), key=lambda i: (-lengths[i], i)):
            r = min((r for r in range(world_size) if counts[r] < per_rank), key=lambda r: (tokens[r], r))
            owner[pos] = r
            tokens[r] += lengths[pos]
            counts[r] += 1
        mine += sorted(pos for pos, r in owner.items() if r == rank)
    return mine


def padded_shard(n: int, rank: int, world_size: int) -> tuple[list[int], int]:
    """(indices, number of real ones): rank `rank`'s share of range(n) padded to ceil(n / world_size) indices by
    repeating its last index (or index 0 for an empty share), so every rank runs the same number of forward passes
    (sharded models need every rank in each one); the padding rows are dropped after generation."""
    lo, hi = shard_bounds(n, rank, world_size)
    width = -(-n // world_size)
    real = list(range(lo, hi))
    fill = real[-1] if real else 0
    return real + [fill] * (width - len(real)), len(real)


@dataclass(frozen=True)
class Dist:
    """This process's place among the ranks, and the collectives over all of them (identities for one process).

    Tensors passed to a collective live on any device; they are moved to `comm_device` (cpu for gloo, this rank's
    GPU for NCCL) for the operation and the result comes back on the device they came from.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    comm_device: str = "cpu"
    sp: int = 1
    """Processes per sequence-parallel group; they hold the same data (`rank`, `world_size`: the data-parallel
    rank and size)."""
    sp_rank: int = 0
    group_of_one: bool = False
    """One process in a process group of its own (`init_group_of_one`): the sharded path runs as on several."""

    @property
    def processes(self) -> int:
        return self.world_size * self.sp

    @property
    def process_rank(self) -> int:
        """This process's rank among all of them (the groups are consecutive ranks)."""
        return self.rank * self.sp + self.sp_rank

    @property
    def enabled(self) -> bool:
        """Whether this process is one rank of a process group: the models are sharded, the collectives run."""
        return self.processes > 1 or self.group_of_one

    @property
    def is_main(self) -> bool:
        return self.process_rank == 0

    def with_sequence_parallel(self, sp: int) -> Dist:
        """The data-parallel view of these processes in groups of `sp` (see the module's docstring)."""
        if sp == self.sp:
            return self
        processes, rank = self.processes, self.process_rank
        if sp < 1 or processes % sp:
            raise ValueError(f"sequence parallel size {sp} does not divide the {processes} processes")
        return Dist(rank=rank // sp, world_size=processes // sp, local_rank=self.local_rank,
                    comm_device=self.comm_device, sp=sp, sp_rank=rank % sp, group_of_one=self.group_of_one)

    @property
    def every_process(self) -> Dist:
        """Every process as a rank of its own (sums over the processes' shards of a sharded model)."""
        return self.with_sequence_parallel(1) if self.sp > 1 else self

    def _firsts(self, parts: list) -> list:
        """Of one entry per process, those of each group's first process (all of them without groups)."""
        return parts[:: self.sp]

    def bounds(self, n: int) -> tuple[int, int]:
        return shard_bounds(n, self.rank, self.world_size)

    def shard(self, items: list) -> list:
        lo, hi = self.bounds(len(items))
        return items[lo:hi]

    # ---------------------------------------------------------------------------------------- collectives
    def _reduce(self, x: torch.Tensor, op) -> torch.Tensor:
        t = x.detach().to(self.comm_device).clone()
        torch.distributed.all_reduce(t, op=op)
        return t.to(x.device)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """`x` summed over the ranks (with groups: over the groups, each group's first process contributing)."""
        if not self.enabled:
            return x
        if self.sp_rank:
            x = torch.zeros_like(x)
        return self._reduce(x, torch.distributed.ReduceOp.SUM)

    def max(self, x: torch.Tensor) -> torch.Tensor:
        return self._reduce(x, torch.distributed.ReduceOp.MAX) if self.enabled else x

    def sum_metrics(self, values: dict[str, float]) -> dict[str, float]:
        """`values` summed over the ranks, key by key (every rank passes the same keys)."""
        if not self.enabled or not values:
            return dict(values)
        keys = sorted(values)
        total = self.sum(torch.tensor([float(values[k]) for k in keys], dtype=torch.float64))
        return dict(zip(keys, total.tolist()))

    def max_int(self, value: int) -> int:
        return int(self.max(torch.tensor([value], dtype=torch.long))) if self.enabled else value

    def all_true(self, flag: bool) -> bool:
        """True when `flag` is true on every rank."""
        if not self.enabled:
            return flag
        return bool(self._reduce(torch.tensor([int(flag)], dtype=torch.long), torch.distributed.ReduceOp.MIN))

    def gather_rows(self, x: torch.Tensor) -> torch.Tensor:
        """The ranks' `x` concatenated along dim 0 in rank order (row counts may differ; the other dims may not)."""
        if not self.enabled:
            return x
        device, dtype = x.device, x.dtype
        t = x.detach().to(self.comm_device)
        if dtype == torch.bool:  # gloo has no bool collectives
            t = t.to(torch.uint8)
        rows = [int(r) for r in self._gather_sizes(t.shape[0])]
        padded = torch.zeros((max(rows), *t.shape[1:]), dtype=t.dtype, device=t.device)
        padded[: t.shape[0]] = t
        parts = [torch.empty_like(padded) for _ in range(self.processes)]
        torch.distributed.all_gather(parts, padded.contiguous())
        out = torch.cat(self._firsts([p[:r] for p, r in zip(parts, rows)]))
        return out.to(dtype).to(device)

    def gather_sizes(self, size: int) -> list[int]:
        """Every rank's `size`, in rank order."""
        return self._firsts(self._gather_sizes(size))

    def _gather_sizes(self, size: int) -> list[int]:
        t = torch.tensor([size], dtype=torch.long, device=self.comm_device)
        parts = [torch.empty_like(t) for _ in range(self.processes)]
        torch.distributed.all_gather(parts, t)
        return [int(p) for p in parts]

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's picklable `obj`, in rank order."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.processes
        torch.distributed.all_gather_object(out, obj)
        return self._firsts(out)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()


SINGLE = Dist()


# ------------------------------------------------------------------------------------- process group
def init_from_env(device_type: str, sp: int = 1) -> Dist:
    """Join the process group of a launched run (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR / MASTER_PORT from the
    launcher): NCCL with this rank's GPU on cuda, gloo on CPU with one compute thread (several processes that each
    use every core slow each other down 10-40x). `sp` > 1: the data-parallel view of groups of `sp` processes
    (`Dist.with_sequence_parallel`)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
        backend, comm = "nccl", f"cuda:{local_rank}"
    else:
        torch.set_num_threads(1)
        backend, comm = "gloo", "cpu"
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend=backend)
    from rft.errors import EXIT_ERROR
    from rft.runtime import exit_with_parent

    # torch's launcher starts each rank in a session of its own: a launcher killed outright (SIGKILL, a machine's
    # out-of-memory killer) would leave the ranks running on, writing into the run's folder beside its rerun
    exit_with_parent(EXIT_ERROR, f"rft: error: the launcher (pid {{parent}}) of rank {rank} is gone, so this rank "
                                 "stops: run the same command again")
    return Dist(rank=rank, world_size=world, local_rank=local_rank, comm_device=comm).with_sequence_parallel(sp)


def init_group_of_one(device_type: str) -> Dist:
    """A process group of this process alone (rank 0 of 1: NCCL on the current GPU, gloo on CPU), for a one-process
    run whose config asks for FSDP: verl wraps the model on one GPU as on many, so the sharded path (FSDP, its
    collectives, DCP checkpoints) runs on a one-GPU machine. Its store lives in this process (no port is opened)."""
    if device_type == "cuda":
        backend, comm = "nccl", f"cuda:{torch.cuda.current_device()}"
    else:
        backend, comm = "gloo", "cpu"
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend=backend, store=torch.distributed.HashStore(), rank=0,
                                             world_size=1)
    return Dist(comm_device=comm, group_of_one=True)


def shutdown() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def launch(nproc: int, module_args: list[str]) -> int:
    """Run `python -m rft <module_args>` in `nproc` processes on this node through torch.distributed's elastic
    agent (torchrun --standalone: a c10d rendezvous on a free local port); returns 0 when every process succeeded,
    else the failed ranks' exit status where they share one (2 for a config or data error), 1 otherwise (the failed
    ranks and how they ended are printed in one line; each rank prints its own error, a line several ranks end
    with once: `first_to_say`).

    Ctrl-C / SIGTERM to this process: the agent passes the signal on and waits for the processes (they stop at
    the next step, quietly: `interrupts.quiet`), then this raises `interrupts.Interrupted`, so the run reports
    one `rft: stopped ...` line and exits 128 + the signal number, as one process does (the agent's
    SignalException used to be reported as a bug, beside a line from every rank)."""
    import logging
    import signal

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from rft import interrupts
    from rft.runtime import usable_cores

    # torchrun's default, passed down to the workers: one OpenMP thread per process
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cores = usable_cores()
    if nproc > cores and not torch.cuda.is_available():
        print(f"rft: note: {nproc} processes on {cores} CPU cores (trainer.n_gpus_per_node x nnodes on CPU: a process "
              "each, one thread each); more processes than cores share them and run slower than as many as the cores",
              flush=True)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
                          start_method="spawn")
    # the agent's warnings and errors repeat rft's lines as log records (each module's logger has its level)
    elastic = [lg for name, lg in list(logging.root.manager.loggerDict.items())
               if name.startswith("torch.distributed.elastic") and isinstance(lg, logging.Logger)]
    levels = [lg.level for lg in elastic]
    for lg in elastic:
        lg.setLevel(logging.CRITICAL)
    os.environ[interrupts.LAUNCHER_ENV] = "1"
    try:
        elastic_launch(config, entrypoint=sys.executable)("-u", "-m", "rft", *module_args)
    except SignalException as e:
        name = signal.Signals(e.sigval).name
        raise interrupts.Interrupted(name, f"stopped by {name} ({nproc} processes)") from None
    except ChildFailedError as e:
        codes = {rank: f.exitcode for rank, f in sorted(e.failures.items())}
        stopped = {c for c in codes.values() if c in (130, 143, -signal.SIGINT, -signal.SIGTERM)}
        if len(stopped) == 1 and all(c in stopped for c in codes.values()):  # a signal sent to the processes
            name = "SIGINT" if stopped.pop() in (130, -signal.SIGINT) else "SIGTERM"
            raise interrupts.Interrupted(name, f"stopped by {name} ({nproc} processes)") from None
        # when one rank fails the agent stops the others with SIGTERM (143): a rank slower to meet the same bad
        # row is stopped before it does. Those are the agent's doing; the status is the one the others failed with
        own = {rank: code for rank, code in codes.items() if code not in (143, -signal.SIGTERM)} or codes
        failures = "; ".join(f"rank {rank}: {_ended(code) if rank in own else 'stopped by the launcher (SIGTERM)'}"
                             for rank, code in codes.items())
        print(f"rft: {nproc} processes started, some failed ({failures})", file=sys.stderr)
        ended = set(own.values())  # every failed rank's one status (2: an error in the config or the data)
        return ended.pop() if len(ended) == 1 and 0 < next(iter(ended)) < 128 else 1
    finally:
        os.environ.pop(interrupts.LAUNCHER_ENV, None)
        for lg, level in zip(elastic, levels):
            lg.setLevel(level)
    return 0


def first_to_say(line: str) -> bool:
    """Whether this process prints the error line `line`. In a run rft's launcher started, a bad config value or
    data row stops every rank with the same line (N copies above the launcher's summary): the first rank to say a
    line says it for all, counted in the launcher's store, which outlives the ranks; the others keep it to their
    own logs. True in any other process, or when that store cannot be reached."""
    from datetime import timedelta
    from hashlib import sha256

    from rft.interrupts import quiet

    if not quiet() or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return True
    try:
        store = torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                           is_master=False, timeout=timedelta(seconds=10))
        return store.add(f"rft/said/{sha256(line.encode()).hexdigest()}", 1) == 1
    except (KeyError, ValueError, RuntimeError):  # no store to ask (DistStoreError is a RuntimeError)
        return True


def _ended(exitcode: int) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    import signal

    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"
