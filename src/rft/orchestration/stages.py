"""Running a staged config (Trinity-RFT's `stages:`, built and checked by `rft.trainer.stages`): each unfinished
stage in order, in its own folder held for it, its trainer chosen by its kind (SFT, DPO, RL), on the processes the
trainer section asks for; a finished stage skipped, one whose run finished before its DONE file was written done."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from rft.config.load import ConfigError
from rft.data.io import DataError
from rft.distributed import SINGLE, Dist
from rft.trainer.stages import DONE, Stage


def run_stage(stage: Stage, dist: Dist = SINGLE) -> None:
    """Run one stage in this process (`dist`: its rank among the run's processes; every rank calls it)."""
    from rft.config.spelling import said
    from rft.errors import RunComplete
    from rft.fsutil import write_text_atomic
    from rft.trainer.run_folder import run_folder

    def done() -> None:
        if dist.is_main:
            write_text_atomic(stage.out / DONE, json.dumps({"stage": stage.name, "model": str(stage.model_dir)})
                              + "\n")

    try:
        with run_folder(stage.cfg, dist):  # the stage's folder: locked, writable, cleaned, before its model loads
            if stage.kind == "sft":
                from rft.trainer.sft import SFTTrainer

                SFTTrainer(stage.cfg, dist).fit()
            elif stage.kind == "dpo":
                from rft.trainer.dpo import DPOTrainer

                DPOTrainer(stage.cfg, dist).fit()
            else:
                from rft.orchestration.run import SyncRun

                SyncRun(stage.cfg, dist).fit()
            done()
    except RunComplete as e:  # its run finished, and a kill came before its DONE file: the stage is done
        print(said(str(e)), flush=True)  # in the keys of the config's dialect (rft.config.spelling)
        done()
    dist.barrier()  # the next stage reads this one's model


def run_stages(stages: list[Stage], after_stage=None, dist: Dist = SINGLE,
               data_error: Callable[[DataError, int], Exception] | None = None) -> Path:
    """Run the unfinished stages in order; `after_stage(stage)` is called after each (also skipped) stage.
    `dist`: this process's rank among the run's processes (every rank runs every stage). `data_error(error, i)`:
    what to raise instead of the DataError of stage i (a dialect's words for the keys it names)."""
    say = print if dist.is_main else (lambda *a, **k: None)
    for i, stage in enumerate(stages):
        if stage.done:
            say(f"rft: stage {stage.name!r} already finished ({stage.model_dir}); skipping", flush=True)
        else:
            say(f"rft: stage {stage.name!r} ({stage.kind}) -> {stage.out}", flush=True)
            try:
                run_stage(stage, dist)
            except DataError as e:
                if data_error is None:
                    raise
                raise data_error(e, i) from None
        if after_stage is not None:
            after_stage(stage)
    return stages[-1].model_dir


def launch_stages(stages: list[Stage], module_args: list[str],
                  data_error: Callable[[DataError, int], Exception] | None = None) -> int:
    """Run a staged config with the processes its trainer section asks for (every stage on the same processes:
    `build_stages` checks it); `module_args` re-run this command in each started process (which says its own error,
    `data_error` applied, as `run_stages` does here)."""
    from rft.orchestration.cluster import ray_requested
    from rft.orchestration.launch import run_spmd

    if any(ray_requested(stage.cfg) for stage in stages):
        raise ConfigError("ray_init: Ray places the processes of an RL run without stages only (docs/cluster.md); "
                          "remove ray_init from the stages")

    def body(dist: Dist) -> None:
        final = run_stages(stages, dist=dist, data_error=data_error)
        if dist.is_main:
            print(f"rft: all stages finished; final model in {final}", flush=True)

    return run_spmd(stages[0].cfg, module_args, body, hold_folder=False)
