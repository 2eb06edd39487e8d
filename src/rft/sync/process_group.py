"""`sync_method: nccl`: the trainer broadcasts its weights to the explorer over a torch.distributed process group
of the two processes of mode both (rank 0 the trainer, rank 1 the explorer; rendezvous on 127.0.0.1).

The group runs gloo over host memory, on GPUs too for now (a GPU-to-GPU NCCL path is not written: this machine has
no GPU to run it on). The trainer hands a copy of its weights to a sender thread and trains on; the thread
broadcasts when the explorer is ready for them. Both sides know which versions travel: on joining, the explorer
sends the step it has explored to (0, or where a restarted one resumes), and the trainer then sends exactly the
versions its later steps generate with (`rft.sync.schedule.versions_after`), in order, so neither side waits for
a message that never comes and a restarted explorer takes the versions its schedule names (the trainer keeps the
older ones with its checkpoints, see `rft.trainer.modes.TrainLoop`).
"""

from __future__ import annotations

import datetime
import os
import queue
import threading

import torch
import torch.distributed as tdist

ADDR_ENV, PORT_ENV = "RFT_SYNC_ADDR", "RFT_SYNC_PORT"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(rank: int, timeout: float) -> None:
    store = tdist.TCPStore(os.environ.get(ADDR_ENV, "127.0.0.1"), int(os.environ[PORT_ENV]), 2, is_master=rank == 0,
                           timeout=datetime.timedelta(seconds=timeout))
    tdist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                             timeout=datetime.timedelta(seconds=timeout))


def snapshot(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A host-memory copy of `weights` that training does not change (what `publish` takes)."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in weights.items()}


def _explorer_step(step: int = 0) -> int:
    """The explorer's position, sent by it (rank 1) to the trainer when both join."""
    value = torch.tensor([step], dtype=torch.long)
    tdist.broadcast(value, src=1)
    return int(value)


def _send(weights: dict[str, torch.Tensor], version: int) -> None:
    tdist.broadcast(torch.tensor([version], dtype=torch.long), src=0)
    for name in sorted(weights):
        tdist.broadcast(weights[name], src=0)


class ProcessGroupSender:
    """The trainer's side (rank 0). `explorer_step`: the step the explorer has explored to."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        _join(0, timeout)
        self.explorer_step = _explorer_step()
        self._queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rft-weight-sender", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                _send(*item)
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
        if tdist.is_initialized():
            tdist.destroy_process_group()


class ProcessGroupReceiver:
    """The explorer's side (rank 1): receives into tensors shaped like `template` (its own copy of the trainable
    parameters, by name); `step`: the step it has explored to, which decides the versions the trainer sends."""

    def __init__(self, template: dict[str, torch.Tensor], timeout: float, step: int):
        _join(1, timeout)
        _explorer_step(step)
        self._buffers = {k: torch.empty_like(v, device="cpu").contiguous() for k, v in template.items()}
        self.version = -1

    def receive(self, need: int) -> tuple[dict[str, torch.Tensor], int]:
        """Take the trainer's messages in order until one of a version >= `need`; returns it."""
        while True:
            version = torch.zeros(1, dtype=torch.long)
            try:
                tdist.broadcast(version, src=0)
                for name in sorted(self._buffers):
                    tdist.broadcast(self._buffers[name], src=0)
            except (RuntimeError, tdist.DistError) as e:  # gloo / NCCL: the trainer's end of the group is gone
                from rft.errors import RftError

                raise RftError(f"the weight broadcast from the trainer broke ({' '.join(str(e).split())[:160]}): the "
                               "trainer process exited or stopped answering; run the same command again to "
                               "resume") from None
            self.version = int(version)
            if self.version >= need:
                return self._buffers, self.version

    def close(self) -> None:
        if tdist.is_initialized():
            tdist.destroy_process_group()
