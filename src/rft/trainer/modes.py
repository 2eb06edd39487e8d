"""The modes of an RL command (trainer.mode, Trinity-RFT's): explorer and trainer as separate loops that meet only
through the experience buffer and the synchronizer.

* both, sync_interval 1, sync_offset 0: one process (`rft.trainer.run.SyncRun`, several with torchrun).
* both otherwise: two processes. This one trains (`TrainLoop`); it starts the explorer (`ExploreLoop`) as a child
  running the same command, which runs up to `sync_offset + sync_interval - 1` steps ahead of the trainer. With
  several trainer processes (FSDP), rank 0 starts the explorer and the weights go through sync files.
* explore / train: one loop each, two commands (on one machine or two) sharing the buffer and the output folder;
  `train` on several processes too (FSDP, as the one-process loop): rank 0 reads each step's experiences from the
  buffer and every rank trains its contiguous share of them.
* bench: evaluate the starting model and the saved checkpoints (`run_bench`).

On a CPU each of the two processes of mode both takes half of the compute threads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from rft.buffer import BufferClosed, make_buffer
from rft.config import to_yaml
from rft.distributed import SINGLE, Dist, shard_bounds
from rft.errors import RftError
from rft.experience import to_batch
from rft.explorer import Explorer, load_prompts, load_tasksets
from rft.fsutil import write_text_atomic
from rft.models.load import compute_dtype, load_tokenizer, load_trainable_model, resolve_device
from rft.monitor import SilentTracker, Timer, Tracker
from rft.rewards.pipeline import RewardPipeline
from rft.rollout.engines import build_engine
from rft.runtime import configure_cpu_runtime
from rft.sync import schedule
from rft.sync.process_group import snapshot
from rft.sync.schedule import sync_method
from rft.trainer.checkpoint import EXPLORER_VERSIONS
from rft.trainer.run import total_training_steps

ROLE_ENV = "RFT_ROLE"
EXPLORER_DIR = "explorer"
SYNC_DIR = "sync"


def _share_threads() -> None:
    """Explorer and trainer of one machine split its cores (one thread each on 2 cores)."""
    if not torch.cuda.is_available():
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))


# --------------------------------------------------------------------------------------------- explorer
class ExploreLoop:
    """Explore steps, each written to the buffer with the explorer's position; weights taken from the trainer as
    the schedule asks (`rft.sync.schedule`); validation every trainer.test_freq explore steps."""

    def __init__(self, cfg):
        configure_cpu_runtime()
        self.cfg = cfg
        data, arr, t = cfg.data, cfg.actor_rollout_ref, cfg.trainer
        self.out = Path(t.default_local_dir)
        torch.manual_seed(t.seed)
        self.tokenizer = load_tokenizer(data.tokenizer or arr.model.path, data.trust_remote_code)
        taskset, val_set = load_tasksets(cfg, self.tokenizer)
        self.total_steps = total_training_steps(cfg, len(taskset))
        device = resolve_device(t.device)
        dtype = compute_dtype(arr.rollout.dtype, device)
        # the policy built as the trainer builds it (LoRA included), so the synchronised names match
        model = load_trainable_model(arr.model.path, arr.model, dtype, device, key="actor_rollout_ref.model")
        # what the trainer trains and sends (the LoRA adapter, or every parameter), by name
        self.trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        model.requires_grad_(False)
        rewards = RewardPipeline.from_config(cfg, self.tokenizer, dtype, device)
        engine = build_engine(cfg, model, self.tokenizer)
        self.explorer = Explorer(cfg, self.tokenizer, engine, rewards, taskset, val_set)
        self.buffer = make_buffer(cfg, shared=True)
        self.sync = None  # made in run(): nccl joins the trainer's process group there

    def run(self) -> None:
        cfg, ex, engine = self.cfg, self.explorer, self.explorer.engine
        s, t = cfg.synchronizer, cfg.trainer
        method = sync_method(cfg)
        state = self.buffer.explorer_state()
        if state is not None:
            ex.load_state_dict(state)
        self.buffer.truncate_after(ex.step)  # what a killed explorer wrote after its last recorded step
        if method == "nccl":
            from rft.sync.process_group import ProcessGroupReceiver

            # the trainer sends exactly the versions the steps after ex.step generate with; the first one now
            self.sync = ProcessGroupReceiver(self.trainable, s.sync_timeout, ex.step)
            if ex.step < self.total_steps:
                need = schedule.required_version(ex.step + 1, s.sync_interval, s.sync_offset)
                engine.update_weights(*self.sync.receive(need))
        else:  # the starting model is version 0
            from rft.sync.checkpoint import CheckpointSync

            self.sync = CheckpointSync(self.out / SYNC_DIR, s.sync_timeout, s.sync_interval, s.sync_offset)
        folder = self.out / EXPLORER_DIR
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "config.yaml", to_yaml(cfg))
        tracker = Tracker.for_run(cfg, folder, self.total_steps, ex.step, role="explorer",
                                  console=os.environ.get(ROLE_ENV) != "explorer",
                                  recovered=state.get("metrics") if state else None)
        tracker.write(f"rft explorer: steps {ex.step + 1}..{self.total_steps}, {len(ex.taskset) or 'a stream of'} tasks, "
                      f"sync every {s.sync_interval} step(s) offset {s.sync_offset} ({method}), output {folder}")
        if t.val_before_train and ex.step == 0 and ex.val_set is not None:
            metrics, _ = ex.evaluate()
            write_text_atomic(folder / "val_before_train.json", json.dumps(metrics, indent=1) + "\n")
        while ex.step < self.total_steps:
            step = ex.step + 1
            timer = Timer()
            with timer("step"):
                need = schedule.required_version(step, s.sync_interval, s.sync_offset)
                if engine.version < need:
                    with timer("sync"):
                        weights, version = self.sync.receive(need)
                        engine.update_weights(weights, version)
                experiences, metrics = ex.explore_step(timer)
                metrics["training/epoch"] = ex.taskset.epoch
                metrics["rollout/model_version"] = engine.version
                samples = None
                if ex.val_set is not None and t.test_freq > 0 and (step == self.total_steps or step % t.test_freq == 0):
                    with timer("testing"):
                        val_metrics, samples = ex.evaluate()
                    metrics.update(val_metrics)
                with timer("write"):  # the step's metrics line goes with it: a kill before tracker.log loses nothing
                    self.buffer.write(experiences, {**ex.state_dict(), "metrics": {**metrics, **timer.metrics()}})
                if samples is not None:
                    tracker.log_generations(step, samples[:t.log_val_generations])
            metrics.update(timer.metrics())
            tracker.log(step, metrics)
        self.buffer.finish()
        tracker.write(f"rft explorer: {self.total_steps} steps written to the experience buffer")
        tracker.close()
        self.sync.close()


# ---------------------------------------------------------------------------------------------- trainer
class KeptVersions:
    """What a trainer broadcasting to its explorer (sync_method nccl) keeps in host memory: copies of the versions
    (trainable weights after trainer step v) that explore steps after its current step generate with, at most
    sync_offset // sync_interval + 2 of them. They go to the explorer, and those older than a checkpoint's step are
    saved with it, so a rerun sends a restarted explorer the versions its schedule names whatever step it resumes
    at, and the run is the uninterrupted one."""

    def __init__(self, total_steps: int, interval: int, offset: int, saved: dict[int, dict[str, torch.Tensor]]):
        self.interval, self.offset = interval, offset
        self.versions = set(schedule.versions_after(0, total_steps, interval, offset))
        self.kept = dict(saved)

    def after_step(self, step: int, weights: dict[str, torch.Tensor]) -> None:
        """Trainer step `step` is done with `weights`: keep them if a step generates with them; forget the versions
        no explore step after `step` generates with."""
        oldest = schedule.required_version(step + 1, self.interval, self.offset)
        self.kept = {v: w for v, w in self.kept.items() if v >= oldest}
        if step in self.versions and step not in self.kept:
            self.kept[step] = snapshot(weights)

    def get(self, version: int) -> dict[str, torch.Tensor] | None:
        """The kept weights of `version`, or None when they are not kept."""
        return self.kept.get(version)

    def keep_if_missing(self, version: int, weights: dict[str, torch.Tensor]) -> None:
        """Keep a copy of `weights` as `version` unless that version is kept already."""
        if version not in self.kept:
            self.kept[version] = snapshot(weights)

    def before(self, step: int) -> dict[int, dict[str, torch.Tensor]]:
        """The kept versions older than `step` (what checkpoint `step` saves beside its own weights)."""
        return {v: w for v, w in self.kept.items() if v < step}


class TrainLoop:
    """Trainer steps on batches read from the buffer; weights published for the explorer as the schedule asks.
    Several processes (`dist`, mode train): rank 0 reads the buffer, writes the sync files and the logs; the
    experiences of a step go to every rank, which trains its share."""

    def __init__(self, cfg, dist: Dist = SINGLE):
        from rft.trainer.rl import RLTrainer

        configure_cpu_runtime()
        self.cfg, self.dist = cfg, dist
        data, arr, t = cfg.data, cfg.actor_rollout_ref, cfg.trainer
        self.out = Path(t.default_local_dir)
        torch.manual_seed(t.seed)
        self.tokenizer = load_tokenizer(data.tokenizer or arr.model.path, data.trust_remote_code)
        taskset, _ = load_tasksets(cfg, self.tokenizer) if data.train_files else (None, None)
        self.total_steps = total_training_steps(cfg, len(taskset) if taskset is not None else None)
        self.trainer = RLTrainer(cfg, self.tokenizer, self.total_steps, dist)
        self.buffer = make_buffer(cfg, shared=True) if dist.is_main else None
        self.rows = data.train_batch_size * arr.rollout.n

    def fit(self, explorer: subprocess.Popen | None = None) -> dict[str, float]:
        """`explorer`: the explorer child of mode both, watched between steps."""
        cfg, t, s, b = self.cfg, self.cfg.trainer, self.cfg.synchronizer, self.cfg.experience_buffer
        main = self.dist.is_main
        state = self.trainer.resume({})
        start = self.trainer.global_step
        if main:
            write_text_atomic(self.out / "config.yaml", to_yaml(cfg))  # after the resume's checks passed
            self.buffer.release_after(start)  # reads after the checkpoint are read again, in the same order
        tracker = Tracker.for_run(cfg, self.out, self.total_steps, start,
                                  recovered=state.get("metrics") if state else None) if main else SilentTracker()
        where = (f"{self.dist.world_size} processes ({self.trainer.device.type})" if self.dist.enabled
                 else str(self.trainer.device))
        tracker.write(f"rft trainer: steps {start + 1}..{self.total_steps} on {where}, reading "
                      f"{self.rows} experiences a step, output {self.out}")
        kept = None
        if sync_method(cfg) == "nccl":
            kept = KeptVersions(self.total_steps, s.sync_interval, s.sync_offset,
                                state[EXPLORER_VERSIONS] if state else {})
            kept.after_step(start, self.trainer.trainable_weights())
            sync, publish_at = self._broadcaster(start, kept, tracker.write, explorer)
        else:
            sync, publish_at = self._writer(start)
        last: dict[str, float] = {}
        for step in range(start + 1, self.total_steps + 1):
            timer = Timer()
            with timer("step"):
                min_version = (step - 1) - b.max_staleness if (b.max_staleness is not None
                                                                and b.stale_policy == "drop") else None
                with timer("read"):
                    read = self._read(step, min_version, explorer) if main else None
                    if self.dist.enabled:
                        read = self.dist.broadcast_object(read)
                if read is None:
                    tracker.write(f"rft trainer: the explorer finished and every experience was read; stopping "
                                  f"after step {step - 1}")
                    break
                batch = self._share(read.experiences)
                metrics = self.trainer.train_step(batch, step, timer)
                metrics.update({"buffer/rows": float(len(read.experiences)), "buffer/wait_s": read.waited_s,
                                "buffer/partial_reads": float(read.partial),
                                "rollout/staleness/dropped": float(read.dropped)})
                if kept is not None:
                    kept.after_step(step, self.trainer.trainable_weights())
                if step in publish_at:
                    with timer("sync"):
                        try:
                            sync.publish(kept.get(step) if kept is not None else self._weights(), step)
                        except RftError:  # a broken broadcast: said as the child's exit when that is its cause
                            _watch_explorer(explorer, step, grace_s=5.0)
                            raise
                if t.save_freq > 0 and (step == self.total_steps or step % t.save_freq == 0):
                    with timer("save_checkpoint"):
                        self.trainer.save_checkpoint(step, {"metrics": {**metrics, **timer.metrics()}}, {},
                                                     kept.before(step) if kept is not None else None)
            metrics.update(timer.metrics())
            tracker.log(step, metrics)
            last = metrics
        self.trainer.export_final(tracker.write)
        tracker.close()
        sync.close()
        return last

    def _broadcaster(self, start: int, kept: KeptVersions, write, explorer: subprocess.Popen | None = None
                     ) -> tuple[object, set[int]]:
        """sync_method nccl: join the explorer, send the versions up to `start` that its next steps generate with
        (from `kept`), and return the sender with the later versions to send after their trainer steps."""
        from rft.sync.process_group import ProcessGroupSender

        s = self.cfg.synchronizer
        sender = ProcessGroupSender(s.sync_timeout, alive=lambda: _watch_explorer(explorer, start))
        explored = sender.explorer_step
        needed = schedule.versions_after(explored, self.total_steps, s.sync_interval, s.sync_offset)
        early = [v for v in needed if v <= start]
        missing = [v for v in early if kept.get(v) is None]
        if missing:  # a checkpoint written without them (an older rft, another sync method): the newest instead
            write(f"rft trainer: checkpoint global_step_{start} does not hold the weights of version(s) "
                  f"{', '.join(map(str, missing))} that explore steps after {explored} generate with; the explorer "
                  f"goes on with version {start}, so this resume is not an exact replay of the run")
            kept.keep_if_missing(start, self.trainer.trainable_weights())
            early = [start]
        for version in early:
            sender.publish(kept.get(version), version)
        return sender, {v for v in needed if v > start}

    def _share(self, experiences: list) -> object:
        """This rank's Batch of the step's `experiences`: all of them on one process; with several, a contiguous
        share (`shard_bounds`: sizes differing by one at most), the groups labelled over the whole step so that advantages see
        every group whole (the trainer gathers the rows)."""
        if not self.dist.enabled:
            return to_batch(experiences, self.tokenizer.pad_token_id)
        first: dict[str, int] = {}
        labels = [first.setdefault(e.group, len(first)) for e in experiences]
        n, world = len(experiences), self.dist.world_size
        lo, hi = shard_bounds(n, self.dist.rank, world)
        if hi == lo:
            raise RftError(f"the trainer read {n} experiences for {world} processes; each needs at least one "
                           "(experience_buffer partial reads below the number of processes)")
        return to_batch(experiences[lo:hi], self.tokenizer.pad_token_id, labels[lo:hi])

    def _weights(self) -> dict[str, torch.Tensor]:
        """The trainable weights the explorer loads: gathered whole from the shards onto rank 0 with several
        processes (every rank calls it; the others get {})."""
        return self.trainer.trainable_weights(gathered=self.dist.enabled)

    def _writer(self, start: int) -> tuple[object, set[int]]:
        """sync_method checkpoint: the folder keeps the versions an explorer may still ask for, across restarts
        (written by rank 0; the other ranks only take part in gathering the weights)."""
        from rft.sync.checkpoint import CheckpointSync

        s = self.cfg.synchronizer
        versions = set(schedule.published_versions(self.total_steps, s.sync_interval, s.sync_offset))
        if not self.dist.is_main:
            if start > 0:
                self._weights()
            return _Gatherer(), versions
        sync = CheckpointSync(self.out / SYNC_DIR, s.sync_timeout, s.sync_interval, s.sync_offset)
        if start > 0:
            sync.publish(self._weights(), start)
        return sync, versions

    def _read(self, step: int, min_version: int | None, explorer: subprocess.Popen | None):
        """The step's experiences; None when the explorer finished and nothing is left. A dead explorer child
        ends the run with an error while the trainer waits."""
        try:
            return self.buffer.read(self.rows, step, self.cfg.experience_buffer.max_read_timeout, min_version,
                                    watch=lambda: _watch_explorer(explorer, step))
        except BufferClosed:
            return None


class _Gatherer:
    """The synchronizer of a rank other than 0: it has gathered its part of the weights; rank 0 writes them."""

    def publish(self, weights, version: int) -> None:
        pass

    def close(self) -> None:
        pass


def _watch_explorer(explorer: subprocess.Popen | None, step: int, grace_s: float = 0.0) -> None:
    """Raise the one line for the explorer child of mode both having exited (waiting up to `grace_s` for a child
    whose end broke a broadcast to be reaped); nothing while it runs."""
    if explorer is None:
        return
    try:
        code = explorer.wait(grace_s) if grace_s else explorer.poll()
    except subprocess.TimeoutExpired:
        return
    if code is not None:
        raise RftError(f"the explorer process exited with code {code} at trainer step {step}; run the same command "
                       "again to resume")


def run_both_async(cfg, module_args: list[str], dist: Dist = SINGLE) -> int:
    """Mode both as two processes: the explorer a child running the same command, the trainer here (`dist`: this
    process is one rank of several trainer processes; rank 0 starts the explorer)."""
    from rft.trainer.run_folder import run_folder

    if os.environ.get(ROLE_ENV) == "explorer":
        _share_threads()
        with run_folder(cfg, role="explorer"):
            ExploreLoop(cfg).run()
        return 0
    if not dist.enabled:
        _share_threads()
    with run_folder(cfg, dist):
        return _train_with_explorer_child(cfg, module_args, dist)


# what a launcher sets in each of its processes: the explorer child is a process of its own, not a rank
LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")


def _train_with_explorer_child(cfg, module_args: list[str], dist: Dist = SINGLE) -> int:
    from rft.sync.process_group import ADDR_ENV, PORT_ENV, free_port

    loop = TrainLoop(cfg, dist)  # the model is loaded before the explorer starts competing for the cores
    if not dist.is_main:
        loop.fit()
        return 0
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV and not k.startswith("TORCHELASTIC_")}
    env.update({ROLE_ENV: "explorer", ADDR_ENV: "127.0.0.1", PORT_ENV: str(free_port())})
    os.environ[ADDR_ENV], os.environ[PORT_ENV] = env[ADDR_ENV], env[PORT_ENV]
    child = subprocess.Popen([sys.executable, "-m", "rft", *module_args], env=env)
    try:
        loop.fit(explorer=child)
        code = child.wait(timeout=cfg.synchronizer.sync_timeout)
        if code != 0:
            raise RftError(f"the explorer process exited with code {code} (its error is above); run the same "
                           "command again to resume")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return 0


# ------------------------------------------------------------------------------------------------ bench
def run_bench(cfg) -> Path:
    """Evaluate the starting model (trainer.val_before_train) and every checkpoint of the run (only the newest
    with trainer.bench_on_latest_checkpoint) on data.val_files; one line per model in <out>/bench/metrics.jsonl
    (`step`, `checkpoint`, bench/<data_source>/reward/mean@<n>)."""
    from rft.trainer.checkpoint import CheckpointManager, damage, load_policy_weights

    configure_cpu_runtime()
    data, arr, t = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    out = Path(t.default_local_dir)
    torch.manual_seed(t.seed)
    tokenizer = load_tokenizer(data.tokenizer or arr.model.path, data.trust_remote_code)
    val_set = load_prompts(cfg, tokenizer, data.val_files)
    device = resolve_device(t.device)
    dtype = compute_dtype(arr.rollout.dtype, device)
    # built as the run built it (LoRA included): a checkpoint holds its trainable parameters
    model = load_trainable_model(arr.model.path, arr.model, dtype, device, key="actor_rollout_ref.model")
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    rewards = RewardPipeline.from_config(cfg, tokenizer, dtype, device)
    engine = build_engine(cfg, model, tokenizer)
    explorer = Explorer(cfg, tokenizer, engine, rewards, None, val_set)
    manager = CheckpointManager(out / "checkpoints")
    steps = []
    for step in manager.steps():  # checked as resume and merge check them, before any evaluation
        why = damage(manager.path(step))
        if why is None:
            steps.append(step)
        else:
            print(f"rft bench: checkpoint {manager.path(step)} is damaged ({why}); skipped", flush=True)
    if t.bench_on_latest_checkpoint:  # the newest whole one, as a resume takes it
        steps = steps[-1:]
    models: list[tuple[int, str]] = [(0, "start")] if t.val_before_train else []
    models += [(step, manager.path(step).name) for step in steps]
    if not models:
        raise FileNotFoundError(f"mode bench: no checkpoints in {out / 'checkpoints'} (and trainer.val_before_train "
                                "is false): nothing to evaluate")
    from rft.monitor.backends import RunInfo, build_monitors

    monitors = build_monitors(t.logger, RunInfo(out / "bench", t.project_name, t.experiment_name, "bench", cfg,
                                                 dict(t.monitor_args), 0))
    lines = []
    for step, name in models:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(start[n])
        if step > 0:
            load_policy_weights(manager.path(step), model)
        metrics, _ = explorer.evaluate()
        row = {"step": step, "checkpoint": name,
               **{"bench/" + k.removeprefix("val-core/"): v for k, v in metrics.items()}}
        lines.append(json.dumps(row))
        write_text_atomic(out / "bench" / "metrics.jsonl", "".join(x + "\n" for x in lines))
        print(f"rft bench: {name}: " + ", ".join(f"{k}={v:.4f}" for k, v in row.items() if k.startswith("bench/")),
              flush=True)
        for monitor in monitors:
            monitor.log(step, {k: v for k, v in row.items() if k.startswith("bench/")})
    for monitor in monitors:
        monitor.close()
    return out / "bench" / "metrics.jsonl"


def run_mode(cfg, module_args: list[str]) -> int:
    """Run the mode of `cfg` that is not mode both on one process (see the module docstring)."""
    from rft.trainer.run_folder import run_folder

    mode = cfg.trainer.mode
    if mode == "both":
        return run_both_async(cfg, module_args)
    with run_folder(cfg, role={"bench": "bench", "explore": "explorer"}.get(mode, "trainer")):
        if mode == "bench":
            run_bench(cfg)
        elif mode == "explore":
            ExploreLoop(cfg).run()
        else:
            TrainLoop(cfg).fit()
    return 0
