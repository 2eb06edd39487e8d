"""`sync_method: gloo`: the trainer broadcasts its weights to its explorers over torch.distributed process groups of
mode both's processes, one group of two per explorer (rank 0 the trainer, rank 1 that explorer; rendezvous on
127.0.0.1, one store with a key prefix per explorer).

The groups run gloo through host memory, on GPUs too: rft has no NCCL path for this sync. Trinity-RFT's
`sync_method: nccl` (a GPU-to-GPU NCCL group between the trainer and its vLLM engines) runs as this, and the
trainer's log says so (`transport_line`): in rft's own launch of mode both the explorer shares the trainer's GPU, and
NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so an NCCL group needs an explorer placed on a GPU of
its own, which has not been run. A group is one of its own, not torch.distributed's default group: the explorer's vLLM engine
initialises that one for itself in the same process (as verl's and TRL's weight syncs keep theirs apart). The
trainer polls its store for each explorer to join (quietly: no c10d timeout warnings on the console), so an explorer
that dies before it joins stops the trainer at once with one line instead of after the sync timeout. The trainer
hands a copy of its weights to a sender thread per explorer and trains on; each thread broadcasts when its explorer
is ready for them, so one explorer never waits for another. Both sides know which versions travel: on joining, an
explorer sends the step it has explored to (0, or where a restarted one resumes), and the trainer then sends exactly
the versions its later steps generate with (`rft.sync.schedule.versions_after`: with trainer.explorer_num explorers
taking turns, those of its own steps), in order, so neither side waits for a message that never comes and a
restarted explorer takes the versions its schedule names (the trainer keeps the older ones with its checkpoints, see
`rft.orchestration.modes.TrainLoop`). With the step it also sends the dtype of its receiving tensors (its model's:
bf16 where the rollout computes in bf16), and the trainer casts its float32 master weights to it as it sends: a
broadcast's sizes must match on both sides, and the explorer's half-size copy is what it loads anyway.
"""

from __future__ import annotations

import datetime
import os
import queue
import threading
import time
from collections.abc import Callable

import torch
import torch.distributed as tdist

ADDR_ENV, PORT_ENV = "RFT_SYNC_ADDR", "RFT_SYNC_PORT"
_JOINED = "joined"  # the store key (under its prefix) an explorer sets when it joins


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _store(trainer: bool, timeout: float) -> tdist.Store:
    """The rendezvous store at RFT_SYNC_ADDR:RFT_SYNC_PORT: the trainer serves it, each explorer connects."""
    limit = datetime.timedelta(seconds=timeout)
    addr, port = os.environ.get(ADDR_ENV, "127.0.0.1"), int(os.environ[PORT_ENV])
    if trainer:
        return tdist.TCPStore(addr, port, None, is_master=True, timeout=limit, wait_for_workers=False)
    return tdist.TCPStore(addr, port, None, is_master=False, timeout=limit)


class _Group:
    """The private gloo group of the trainer (rank 0) and explorer `explorer` (rank 1), on `store` under a prefix of
    that explorer's. `alive`: called while the trainer waits for the explorer to join; raises if it has exited."""

    def __init__(self, store: tdist.Store, rank: int, explorer: int, timeout: float,
                 alive: Callable[[], None] | None = None):
        limit = datetime.timedelta(seconds=timeout)
        store = tdist.PrefixStore(f"rft/explorer{explorer}/", store)
        if rank == 0:
            deadline = time.monotonic() + timeout
            # store.check, not a 1 s store.wait: each wait that times out prints two C++ warnings ("[c10d]
            # waitForInput ... timed out after 1000ms") on the console while the explorer loads its model
            while not store.check([_JOINED]):
                time.sleep(0.2)
                if alive is not None:
                    alive()
                if time.monotonic() > deadline:
                    from rft.errors import RftError

                    raise RftError(f"the explorer process did not join the weight broadcast within "
                                   f"synchronizer.sync_timeout={timeout:g} s; run the same command again to "
                                   "resume (or raise the timeout)") from None
        else:
            store.set(_JOINED, "1")
        self.group = tdist.ProcessGroupGloo(store, rank, 2, limit)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        self.group.broadcast(tensor, src).wait()


def transport_line(named: str | None, device: torch.device) -> str:
    """The trainer's line saying what the weight broadcast runs over; `named`: synchronizer.sync_method as set
    (Trinity-RFT's nccl runs as gloo), `device`: where the trainer's weights are."""
    line = "rft trainer: the weights go to the explorer by broadcast over a gloo process group, through host memory"
    if device.type != "cpu":
        line += f" (copied from {device.type} to host memory and back)"
    if named == "nccl":
        line += (", not NCCL: synchronizer.sync_method=nccl names Trinity-RFT's GPU-to-GPU NCCL broadcast, which rft "
                 "does not have (docs/scaling.md); gloo, the same broadcast through host memory, runs instead")
    return line


def snapshot(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A host-memory copy of `weights` that training does not change (what `publish` takes)."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in weights.items()}


WIRE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""The dtypes the weights may travel in, by their index (what the explorer announces on joining)."""


def _explorer_joins(group: _Group, step: int = 0, dtype: torch.dtype = torch.float32) -> tuple[int, torch.dtype]:
    """The explorer's position and the dtype it receives the weights in, sent by it (rank 1) to the trainer when
    both join."""
    value = torch.tensor([step, WIRE_DTYPES.index(dtype)], dtype=torch.long)
    group.broadcast(value, src=1)
    return int(value[0]), WIRE_DTYPES[int(value[1])]


def _send(group: _Group, weights: dict[str, torch.Tensor], version: int, dtype: torch.dtype) -> None:
    group.broadcast(torch.tensor([version], dtype=torch.long), src=0)
    for name in sorted(weights):
        group.broadcast(weights[name].to(dtype).contiguous(), src=0)


class ProcessGroupSender:
    """The trainer's side (rank 0) of explorer `explorer`'s group on `store`. `explorer_step`: the step that
    explorer has explored to; `alive`: raises if the explorer process has exited (checked while waiting for it to
    join); `versions`: what it is sent (set by the trainer from its schedule once it has joined)."""

    def __init__(self, store: tdist.Store, explorer: int, timeout: float, alive: Callable[[], None] | None = None):
        self.explorer, self.timeout = explorer, timeout
        self._group = _Group(store, 0, explorer, timeout, alive)
        self.explorer_step, self.dtype = _explorer_joins(self._group)
        self.versions: set[int] = set()
        self._queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"rft-weight-sender-{explorer}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                _send(self._group, *item, self.dtype)
            except BaseException as e:  # the explorer is gone: the trainer's loop reports it
                self.error = e
                return

    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Queue `weights` (a `snapshot`, not changed afterwards) as `version`; the broadcast happens when the
        explorer asks for it."""
        if self.error is not None:
            from rft.errors import RftError

            raise RftError(f"the weight broadcast to the explorer failed ({' '.join(str(self.error).split())[:160]}): "
                           "the explorer process exited or stopped answering; run the same command again to "
                           "resume") from self.error
        self._queue.put((weights, version))

    def close(self) -> None:
        """Wait (up to the sync timeout) until the explorer has taken every queued version, then leave the group."""
        self._queue.put(None)
        self._thread.join(self.timeout)


class ProcessGroupBroadcast:
    """The trainer's broadcast to its `explorers` explorers: a `ProcessGroupSender` each, joined in rank order;
    `publish` hands a version to the senders of the explorers whose steps generate with it."""

    def __init__(self, explorers: int, timeout: float, alive: Callable[[], None] | None = None):
        store = _store(True, timeout)
        self.senders = [ProcessGroupSender(store, k, timeout, alive) for k in range(explorers)]
        self._store = store  # served while the groups live

    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        for sender in self.senders:
            if version in sender.versions:
                sender.publish(weights, version)

    def close(self) -> None:
        for sender in self.senders:
            sender.close()


class ProcessGroupReceiver:
    """Explorer `explorer`'s side (rank 1 of its group): receives into tensors shaped like `template` (its own copy
    of the trainable parameters, by name), in their dtype where they share one (else float32: the engine's load
    casts); `step`: the step it has explored to, which decides the versions the trainer sends."""

    def __init__(self, template: dict[str, torch.Tensor], timeout: float, step: int, explorer: int = 0):
        dtypes = {v.dtype for v in template.values()}
        dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32
        dtype = dtype if dtype in WIRE_DTYPES else torch.float32
        self._store = _store(False, timeout)
        self._group = _Group(self._store, 1, explorer, timeout)
        _explorer_joins(self._group, step, dtype)
        self._buffers = {k: torch.empty(v.shape, dtype=dtype) for k, v in template.items()}
        self.version = -1

    def receive(self, need: int) -> tuple[dict[str, torch.Tensor], int]:
        """Take the trainer's messages in order until one of a version >= `need`; returns it."""
        while True:
            version = torch.zeros(1, dtype=torch.long)
            try:
                self._group.broadcast(version, src=0)
                for name in sorted(self._buffers):
                    self._group.broadcast(self._buffers[name], src=0)
            except (RuntimeError, tdist.DistError) as e:  # gloo / NCCL: the trainer's end of the group is gone
                from rft.errors import RftError

                raise RftError(f"the weight broadcast from the trainer broke ({' '.join(str(e).split())[:160]}): the "
                               "trainer process exited or stopped answering; run the same command again to "
                               "resume") from None
            self.version = int(version)
            if self.version >= need:
                return self._buffers, self.version

    def close(self) -> None:
        """Nothing to tear down: the group goes with this object."""
