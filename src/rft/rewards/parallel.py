"""Scoring a batch's rows in worker processes, for reward functions that are pure Python and cost milliseconds a call
(math-verify's SymPy): threads would take turns on the GIL, processes run side by side.

Workers are started once per worker count (spawn: a fresh interpreter that imports only rft.rewards and what the
function needs, never a fork of a process holding model threads; as with any spawned worker, a script that calls
rft's API must guard its entry point with ``if __name__ == "__main__":``) and kept for the next batches; each ignores
SIGINT, so Ctrl-C reaches only rft's own handler, and leaves when the process that started it is gone. A batch is cut into contiguous chunks, each scored in one worker call, and
put back together in row order. Each call still runs under the function's time limit (`RewardFunction` carries it
into the worker, where the call runs in the main thread under SIGALRM), and each row's exception comes back to be
reported exactly as the in-process loop reports it (`rft.rewards.scoring`).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from rft.errors import RewardError
from rft.runtime import exit_with_parent, usable_cores

MIN_ROWS_PER_WORKER = 16
"""A batch is scored in processes only when each worker gets at least this many rows (measured: bench/rewards.py)."""
DEFAULT_MAX_WORKERS = 8

Outcome = tuple[Any, BaseException | None]
"""One row's (result, None) or (None, the exception its call raised)."""

_pools: dict[int, ProcessPoolExecutor] = {}


def default_workers() -> int:
    """The CPU cores this process may run on, shared with the node's other ranks (LOCAL_WORLD_SIZE, set by the
    launcher), at most `DEFAULT_MAX_WORKERS`."""
    cores = usable_cores()
    try:
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        ranks = 1
    return max(1, min(cores // ranks, DEFAULT_MAX_WORKERS))


def worth_parallel(fn: Callable[..., Any], num_rows: int) -> bool:
    """`fn` asks for several workers (`RewardFunction.workers`) and the batch gives each enough rows."""
    workers = getattr(fn, "workers", 1)
    return workers > 1 and num_rows >= 2 * MIN_ROWS_PER_WORKER


def _start_worker(parent: int) -> None:
    """In a new worker: ignore Ctrl-C (the trainer's handler decides), and leave when the trainer is gone (killed,
    or ended by os._exit, which skips the pool's shutdown): the worker would otherwise wait for work forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(0, parent=parent)


def _pool(workers: int) -> ProcessPoolExecutor:
    pool = _pools.get(workers)
    if pool is None:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_worker, initargs=(os.getpid(),))
        _pools[workers] = pool
    return pool


def shutdown() -> None:
    """Stop the worker processes (they are started again on the next parallel batch)."""
    while _pools:
        _, pool = _pools.popitem()
        pool.shutdown(wait=True, cancel_futures=True)


def _portable(error: BaseException) -> BaseException | tuple[str, str]:
    """The exception itself when it survives pickling, else its type name and message."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return type(error).__name__, str(error)


def _score_chunk(fn: Callable[..., Any], calls: list[tuple]) -> list[tuple[Any, Any]]:
    """In a worker: each call's (result, None) or (None, its exception)."""
    outcomes = []
    for args in calls:
        try:
            outcomes.append((fn(*args), None))
        except (Exception, SystemExit) as e:  # sys.exit() too: reported as the row's failure, not the worker's
            outcomes.append((None, _portable(e)))
    return outcomes


def _local(error: Any) -> BaseException | None:
    if isinstance(error, tuple):  # an exception that could not be pickled: one of the same name and message
        name, message = error
        return type(name, (Exception,), {})(message)
    return error


def score_in_processes(fn: Callable[..., Any], calls: Sequence[tuple], workers: int) -> list[Outcome]:
    """`fn(*args)` for each of `calls` in `workers` processes; the outcomes in the order of `calls`."""
    size = max(MIN_ROWS_PER_WORKER, -(-len(calls) // (4 * workers)))  # about 4 chunks per worker, for balance
    chunks = [list(calls[i:i + size]) for i in range(0, len(calls), size)]
    try:
        pool = _pool(workers)
        futures = [pool.submit(_score_chunk, fn, chunk) for chunk in chunks]
        outcomes = [outcome for future in futures for outcome in future.result()]
    except BrokenProcessPool as e:
        broken = _pools.pop(workers, None)
        if broken is not None:
            broken.shutdown(wait=False, cancel_futures=True)
        raise RewardError(f"a reward worker process died while scoring ({e}); set "
                          "custom_reward_function.num_workers=1 to score in this process (a script calling rft's "
                          "API must start with if __name__ == '__main__': workers are spawned and import it)") from e
    return [(result, _local(error)) for result, error in outcomes]
