"""An RL run in one process: explorer and trainer take turns on one model (mode both, sync_interval 1,
sync_offset 0: on-policy).

    explore (gen, reward[, gen_max]) -> buffer.write -> buffer.read -> train_step -> sync -> [validate] -> [save] -> log

The explorer and the trainer share the policy itself, so the synchronizer only moves the engine's version
(`sync_method: memory`). The checkpoint of a step holds the trainer's state, the explorer's position (its
sampler, sampling generator and auxiliary models' generators) and the empty steps in a row, so a resumed run
regenerates exactly what an uninterrupted one would and stops where it would.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from rft.buffer import ExperienceBuffer, make_buffer, persistent, run_layout, shareable
from rft.config import to_yaml
from rft.console import counted
from rft.data.curriculum import sampler_batch
from rft.distributed import SINGLE, Dist
from rft.errors import RftError
from rft.experience import to_batch
from rft.explorer import Explorer, load_tasksets
from rft.explorer.explorer import GENERATOR
from rft.explorer.streaming import StreamingRollout
from rft.fsutil import write_text_atomic
from rft.models.load import load_tokenizer, model_identity
from rft.models.precision import describe
from rft.monitor import SilentTracker, Timer, Tracker
from rft.orchestration.step_loop import Cadence, StepLog, StepLoop, StepRole
from rft.rewards.pipeline import RewardPipeline
from rft.rollout.engines import build_engine, engine_spec, served_engine, unserved_reason
from rft.runtime import configure_cpu_runtime
from rft.sync.memory import MemorySync
from rft.trainer.rl import RLTrainer, token_scores
from rft.trainer.run_folder import claim_buffer, total_training_steps
from rft.workers.optim import plateau_step


def joined_buffer(cfg, tokenizer, shared: bool = False, roles: tuple[str, ...] = ()) -> ExperienceBuffer:
    """The run's experience buffer, a database one joined as `roles` on the terms of this config and model
    (`rft.buffer.sharing`): explorers and trainer of one run agree, a new run does not reuse another's buffer (one
    that outlives the process is owned by its run: `claim_buffer`)."""
    buffer = make_buffer(cfg, shared=shared)
    with closed_on_error(buffer):  # refused: its connections closed now, not when collected (a process that goes on,
        # and a file moved meanwhile, would meet them: SQLite's "disk I/O error")
        if shareable(buffer):
            buffer.join(run_layout(cfg, model_identity(cfg.actor_rollout_ref.model.path, tokenizer)), [])
        if persistent(buffer):
            claim_buffer(buffer, Path(cfg.trainer.default_local_dir))
        if shareable(buffer):
            buffer.hold(list(roles))
    return buffer


def start_rl_process(cfg) -> tuple[Path, object]:
    """What every RL mode does first in its process (`SyncRun`, and `rft.orchestration.modes`' loops and bench): the
    CPU runtime configured, torch seeded with trainer.seed; returns (the output folder, the policy's tokenizer)."""
    configure_cpu_runtime()
    torch.manual_seed(cfg.trainer.seed)
    data = cfg.data
    return (Path(cfg.trainer.default_local_dir),
            load_tokenizer(data.tokenizer or cfg.actor_rollout_ref.model.path, data.trust_remote_code))


@contextlib.contextmanager
def closed_on_error(buffer: ExperienceBuffer | None):
    """`buffer` closed (its roles freed, its heartbeat stopped) when the block that builds the rest of a run
    fails: the process may go on (a command run in-process), and a rerun must find the roles free."""
    try:
        yield
    except BaseException:
        if buffer is not None:
            buffer.close()
        raise


class SyncRun(StepRole):
    def __init__(self, cfg, dist: Dist = SINGLE):
        """`dist`: this process's rank among the processes of the run (`rft.distributed.init_from_env`); the
        default is one process."""
        self.cfg, self.dist = cfg, dist
        self.out, self.tokenizer = start_rl_process(cfg)
        taskset, val_set = load_tasksets(cfg, self.tokenizer)
        self.total_steps = total_training_steps(cfg, len(taskset))
        # a database buffer's terms checked before the model loads
        self.buffer = joined_buffer(cfg, self.tokenizer, roles=("explorer/0", "trainer")) if dist.is_main else None
        self.served = None  # rollout.mode=async: the engine server's client, which stops the server
        with closed_on_error(self.buffer), closed_on_error(self):
            self.trainer = trainer = RLTrainer(cfg, self.tokenizer, self.total_steps, dist)
            rewards = RewardPipeline.from_config(cfg, self.tokenizer, trainer.dtype, trainer.device)
            if dist.enabled and engine_spec(cfg.actor_rollout_ref.rollout.name).replica_per_rank:
                # an engine beside each rank (verl's hybrid engine: vLLM), serving an unsharded copy of the policy that
                # every sync fills with the gathered weights; FSDP on one process (a group of one, no launcher's
                # RANK) has the one engine of a one-process run
                gather = lambda: trainer.gathered_weights(trainable_only=False, everywhere=True)
                engine = build_engine(cfg, trainer.unsharded_copy(), self.tokenizer, distributed=dist.processes > 1,
                                      weights=gather())
                self.sync = MemorySync(engine, gather=gather)
            elif unserved_reason(cfg, dist.processes) is None:  # rollout.mode=async
                # the engine in a server process of its own (verl's server mode): every sync sends it the weights,
                # the first one now (the model the trainer starts from, or the checkpoint's on resume)
                engine = self.served = served_engine(cfg, trainer.model)
                self.sync = MemorySync(engine, gather=trainer.trainable_weights)
                self.sync.publish(None, 0)
            else:
                engine = build_engine(cfg, trainer.model, self.tokenizer, dist.all_true if dist.enabled else None)
                self.sync = MemorySync(engine)
            self.explorer = Explorer(cfg, self.tokenizer, engine, rewards, taskset, val_set, dist)
            if self.served is not None and cfg.async_training.staleness_threshold is not None:
                # verl's fully-async keys: groups streamed through the server under the staleness bound
                ro = cfg.actor_rollout_ref.rollout
                self.explorer.streaming = StreamingRollout(
                    cfg, engine, taskset, self.explorer.sampling_params(ro, n=ro.n, do_sample=ro.do_sample),
                    self.explorer.generator)
            if self.buffer is None:
                self.buffer = make_buffer(cfg)
            self._step_metrics: dict = {}
            self.empty_steps = 0  # explore steps in a row without an experience: checkpointed

    @property
    def global_step(self) -> int:
        return self.trainer.global_step

    # ------------------------------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, float]:
        try:
            return self._fit()
        finally:
            self.buffer.close()  # a database buffer's roles freed: a rerun takes them at once
            self.explorer.close()
            self.close()

    def close(self) -> None:
        """The engine server this run started, stopped (rollout.mode=async)."""
        if self.served is not None:
            self.served.close()

    def _fit(self) -> dict[str, float]:
        cfg, main, trainer = self.cfg.trainer, self.dist.is_main, self.trainer
        recovered = self.resume()
        # after the resume's checks: a refused resume leaves the folder's config.yaml as it was; so does a
        # validation-only run in a run's folder (config.yaml is what its checkpoints were trained with: rft merge
        # and a resume's checks read it)
        if main and not (cfg.val_only and (self.out / "config.yaml").exists()):
            write_text_atomic(self.out / "config.yaml", to_yaml(self.cfg))
        tracker = Tracker.for_run(self.cfg, self.out, self.total_steps, self.global_step,
                                  recovered=recovered) if main else SilentTracker()
        where = (f"{counted(self.dist.processes, 'process', 'processes')} ({trainer.device.type})" if self.dist.enabled
                 else f"{trainer.device}")
        what = (f"validation only (trainer.val_only) at step {self.global_step}" if cfg.val_only
                else counted(self.total_steps, "step"))
        tracker.write(f"rft: {what} on {where}, "
                      f"{counted(len(self.explorer.taskset), 'train prompt')}, output {self.out}\nrft: "
                      f"{describe(trainer.precision)}")
        last: dict[str, float] = {}
        if cfg.val_only:  # verl's: validate the model the run starts from, then stop (checks: val_files is set)
            last = self.validate(tracker)
            if main:
                write_text_atomic(self.out / "val_only.json", json.dumps(last, indent=1) + "\n")
            tracker.write(f"validation only (trainer.val_only), step {self.global_step}: "
                          + ", ".join(f"{k}={v:.4f}" for k, v in last.items()))
            tracker.close()
            return last
        if cfg.val_before_train and self.global_step == 0 and self.explorer.val_set is not None:
            # metrics.jsonl holds one line per training step; the step-0 validation has a file of its own
            timer = Timer()
            with timer("testing"):
                last = self.validate(tracker)
            tracker.validated(timer.times["testing"])  # the time left counts the validations to come at its cost
            if main:
                write_text_atomic(self.out / "val_before_train.json", json.dumps(last, indent=1) + "\n")
            tracker.write("validation before training: " + ", ".join(f"{k}={v:.4f}" for k, v in last.items()))
        steps = StepLog(tracker, last=last)
        self._tracker = tracker
        StepLoop(Cadence.of(cfg, self.total_steps), steps).run(self, self.global_step + 1)
        return steps.finish(trainer)

    # ------------------------------------------------------------------- the role in the step loop (StepRole)
    checkpoints = True

    @property
    def validates(self) -> bool:
        return self.explorer.val_set is not None

    def step(self, step: int, timer: Timer) -> dict[str, float]:
        return self.train_step(step, timer)

    def train_step(self, step: int, timer: Timer) -> dict[str, float]:
        """One on-policy step: explore, hand the experiences over through the buffer, train, sync."""
        experiences, metrics = self.explorer.explore_step(timer)
        metrics["training/epoch"] = self.explorer.taskset.epoch
        if not experiences:  # every workflow of the step failed (the explorer said so): nothing to train on
            self.empty_steps += 1
            limit = self.cfg.trainer.bad_update_limit
            if self.empty_steps > limit:
                raise RftError(f"{self.empty_steps} explore steps in a row gave no experience (every task of each "
                               f"failed; trainer.bad_update_limit={limit}): the workflow fails on every task; "
                               "its errors are the warnings above")
            self.trainer.global_step = step  # the step is spent: the run goes on to the next
            self.sync.publish(None, step, changed=False)
            return {**metrics, "train/empty_step": 1.0}
        self.empty_steps = 0
        self.buffer.write(experiences)
        read = self.buffer.read(len(experiences), step)
        labels = [e.info["position"] for e in read.experiences] if self.dist.enabled else None
        # every rank's responses padded to the widest of all: the trainer gathers (B, R) tensors over the ranks
        width = self.dist.max_int(max(len(e.response) for e in read.experiences))
        batch = to_batch(read.experiences, self.tokenizer.pad_token_id, labels, width)
        metrics.update(self.trainer.train_step(batch, step, timer))
        curriculum = getattr(self.explorer.taskset, "curriculum", None)
        if curriculum is not None:  # verl's AbstractCurriculumSampler.update, with the step's trained batch
            positions = [e.info.get("position") for e in read.experiences]
            curriculum.update(sampler_batch(batch, token_scores(batch), positions, curriculum.last, step, self.dist))
        if self.explorer.streaming is not None:  # without partial rollouts: the requests in flight finish first
            with timer("sync_wait"):
                self.explorer.streaming.before_sync()
        with timer("sync"):  # the hf engine shares the model (nothing to do); vLLM reloads its weights if they moved
            self.sync.publish(None, step, changed=self.trainer.actor_moved)
        return metrics

    def validate_step(self, step: int, metrics: dict[str, float]) -> None:
        """The step loop's validation: its figures into the step's `metrics`, then the plateau schedulers."""
        metrics.update(self.validate(self._tracker))
        plateau_step(self.trainer.worker.scheduler, metrics)
        if self.trainer.critic is not None:
            plateau_step(self.trainer.critic.scheduler, metrics)

    def save(self, step: int, metrics: dict[str, float]) -> None:
        self._step_metrics = metrics  # its line, should the kill come first
        self.save_checkpoint(step)

    def validate(self, tracker: Tracker | SilentTracker | None = None) -> dict[str, float]:
        """Validation metrics `val-core/<data_source>/reward/mean@<n>` on the whole validation set; the first
        trainer.log_val_generations samples go to the monitors' val/generations table (val_generations.jsonl)."""
        if self.explorer.streaming is not None:  # the server's stream holds the validation's rows alone
            self.explorer.streaming.drain()
        metrics, samples = self.explorer.evaluate()
        if tracker is not None:
            tracker.log_generations(self.global_step, samples[:self.cfg.trainer.log_val_generations])
        return metrics

    # -------------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, step: int) -> Path:
        return self.trainer.save_checkpoint(
            step, {"sampler": self.explorer.taskset.state_dict(), "empty_steps": self.empty_steps,
                   # each rank's: every rank asks its auxiliary models (a judge) about its own rows
                   "auxiliary": self.dist.gather_objects(self.explorer.auxiliary_states()),
                   "metrics": self._step_metrics,
                   **({"stream": self.explorer.streaming.state_dict()} if self.explorer.streaming else {})},
            {GENERATOR: self.explorer.generator})

    def resume(self) -> dict | None:
        """Continue from the latest checkpoint (trainer.resume_mode); returns the step's metrics record kept in
        the checkpoint (restored if the kill came between the checkpoint and its metrics line)."""
        state = self.trainer.resume({GENERATOR: self.explorer.generator})
        if state is None:
            return None
        self.explorer.taskset.load_state_dict(state["sampler"])
        self.empty_steps = state.get("empty_steps", 0)
        auxiliary = state.get("auxiliary", [])
        self.explorer.load_auxiliary_states(auxiliary[self.dist.rank] if self.dist.rank < len(auxiliary) else [])
        self.explorer.step = state["global_step"]
        if self.explorer.streaming is not None and "stream" in state:
            self.explorer.streaming.load_state_dict(state["stream"])
        self.buffer.truncate_after(state["global_step"])
        self.sync.publish(None, state["global_step"])
        return state.get("metrics")
