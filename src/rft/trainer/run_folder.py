"""A run's output folder, held for the run: checked and locked before any model loads.

`run_folder(cfg)` wraps one training run (RL, SFT, one stage):

* the folder (trainer.default_local_dir) is created and must be writable, and its file system must have room for
  at least the final model (the size of the starting model's weights);
* a lock (`.rft.lock`, an flock on it, with the holder's pid / host / command written in it) refuses a second run
  into the same folder while the first lives; the kernel drops an flock when its process dies, so the lock of a
  killed run is taken over (said in a note);
* temporary files an interrupted run left (`.X.tmp-*`, `.X.old-*`: `rft.fsutil.clean_stale`) are removed, as the
  lock is taken: a checkpoint a kill left moved aside between a save's two renames is put back before the lookup;
* the checkpoint a resume will read (looked up once, as the lock is taken: `checkpoint_to_resume`) is checked against
  the config before the model loads: the batch size and seed, and every key changed since the checkpointed run started
  (its config.yaml) but the few a resume may change (`RESUME_MAY_CHANGE`: length, cadence, validation, logging,
  output, processes, how passes are sharded and laid out); a checkpoint another trainer wrote (an `rft train` run's, resumed by `rft
  sft`, ...) is refused before the run takes the folder: the refusal writes no failed.json and no log there;
* a run already complete ends the command before any model loads (`_complete`: its checkpoint at or past the last
  step, model/ written after it; `_finished_without_checkpoint`: save_freq <= 0, model/ written after the run's
  config.yaml, where a rerun with other keys is refused);
* a stop by Ctrl-C / SIGTERM (`rft.interrupts.Interrupted`, `StopNow`) gets the checkpoint it will resume from
  named, or, before the first is written, says so (trainer.save_freq) and that the run starts again from step 0,
  as trainer.resume_mode has it (disable: from step 0 all the same; resume_path: from resume_from_path again); an
  error that ends the run carries the same words (`resume_note`: a full disk's line, another process lost);
* what the run computes with where the machine, not the config, decides (generation's kernel rule, a CPU's
  precision) is written to `numerics.json` as it starts afresh, and read back by its resumed half and every other
  process of the run (`rft.runtime.fix_run_choices`);
* each process writes its log, `log/[<node_ip>/]<role>.log` (trainer.log_level, trainer.log_group_by_node:
  `rft.monitor.logfile`), the error or stop that ends the run its last line.

Several processes: the process that started the others holds the lock for them (`LOCK_ENV` tells them); under an
outside launcher (torchrun) rank 0 takes it.

Roles: explorer and trainer of one run share its folder (modes explore / train, or the two processes of mode
both), so each role has its own lock (`.rft.lock` the trainer's, `.rft-explorer.lock`, `.rft-bench.lock`); a role
other than the trainer cleans only its own sub-folder (never the trainer's checkpoint being written).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rft.distributed import SINGLE, Dist
from rft.errors import CheckpointError, RftError, RunComplete, RunLocked, ends_with_resume_note
from rft.fsutil import (
    clean_stale,
    holder_record,
    holder_text,
    host_id,
    machine_of,
    on_this_host,
    process_alive,
)
from rft.interrupts import Interrupted, StopNow
from rft.runtime import RUN_CHOICES_FILE, fix_run_choices, human_bytes

LOCK_NAME = ".rft.lock"
FAILED = "failed.json"
"""Written into the folder when the run holding it ends with an error or a stop (the line the CLI prints), for
people and `rft studio` to read; removed when the next run takes the folder."""
LOCK_ENV = "RFT_RUN_LOCK"
"""Set by a process that holds a run folder's lock for the processes it starts: the lock file's absolute path."""


class RunLock:
    """An exclusive lock on a run folder: flock on `<folder>/.rft.lock` (dropped by the kernel when the holder
    dies); where the file system has no flock, the pid written in the file decides whether its holder lives. The
    file names the holder's host as `host_id()` (machine and PID namespace), the one its pid can be tested on: a
    holder recorded on another host is refused there (it may be running), with the file to delete if it is not."""

    def __init__(self, folder: Path, name: str = LOCK_NAME):
        self.path = folder / name
        self.fd: int | None = None

    def _holder(self) -> dict:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self) -> RunLock:
        import fcntl

        previous = self._holder()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise self._locked(self._holder()) from None
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            if previous.get("pid") and not on_this_host(previous.get("host")):
                raise self._unknowable(previous) from None  # its pid cannot be tested here
            if on_this_host(previous.get("host")) and process_alive(previous.get("pid")):
                raise self._locked(previous) from None
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # no flock here: the pid file alone
        self.fd = fd
        pid = previous.get("pid")
        if pid and (pid != os.getpid() or previous.get("host") != host_id()):
            print(f"rft: note: {self.path.parent}: took over the lock of an earlier run that is no longer running "
                  f"(pid {pid} on {machine_of(previous.get('host'))}, started {previous.get('started', '?')})", flush=True)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder_record()) + "\n").encode(), 0)
        return self

    def _locked(self, holder: dict) -> RunLocked:
        return RunLocked(
            f"output folder {str(self.path.parent)!r} is in use by another rft run ({holder_text(holder)}); wait for "
            "it to finish or stop it, or give this run another folder (trainer.default_local_dir)"
        )

    def _unknowable(self, holder: dict) -> RunLocked:
        """No flock, and the holder ran on another machine or container: whether it still runs cannot be known here
        (a lock released on exit is emptied, so it was running or was killed)."""
        return RunLocked(
            f"output folder {str(self.path.parent)!r} was locked by an rft run on {machine_of(holder.get('host'))} "
            f"(pid {holder.get('pid', '?')}, started {holder.get('started', '?')}: {holder.get('command', '?')}), and "
            "this file system has no flock to tell whether it still runs; if it does not, delete "
            f"{str(self.path)!r} and run again, or give this run another folder (trainer.default_local_dir)"
        )

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        os.close(self.fd)  # closing the descriptor drops the flock
        self.fd = None


def _prepare(out: Path) -> None:
    """Create `out` and prove it writable, with one line naming the folder when it is not."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".rft-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RftError(
            f"output folder {str(out)!r} is not writable ({e.strerror or e}); choose a folder you can write "
            "(trainer.default_local_dir=...) or fix its permissions"
        ) from None


def _model_path(cfg: Any) -> str | None:
    if hasattr(cfg, "actor_rollout_ref"):
        return cfg.actor_rollout_ref.model.path
    return getattr(getattr(cfg, "model", None), "partial_pretrain", None)


def weights_bytes(model_dir: str | None) -> int:
    """The size of the weight files of a Hugging Face folder (0 when it is not there yet)."""
    if not model_dir or not Path(model_dir).expanduser().is_dir():
        return 0
    folder = Path(model_dir).expanduser()
    return sum(p.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.pt")
               for p in folder.glob(pattern) if p.is_file())


def check_free_space(out: Path, needed: int) -> None:
    """Refuse a run whose output file system cannot hold even the final model."""
    if needed <= 0:
        return
    free = shutil.disk_usage(out).free
    if free < needed:
        raise RftError(
            f"output folder {str(out)!r} has {human_bytes(free)} free, but the final model alone needs about "
            f"{human_bytes(needed)} (the starting model's weights; checkpoints need more): free space there or choose "
            "another trainer.default_local_dir"
        )


RESUME_MAY_CHANGE = frozenset({
    # how long: a rerun extends or shortens the run
    "trainer.total_training_steps", "trainer.total_epochs",
    # how often it validates, saves and reports, and where to
    "trainer.save_freq", "trainer.test_freq", "trainer.val_before_train", "trainer.val_only", "trainer.logger",
    "trainer.monitor_args",
    # what it validates on and how it samples there: validation draws from generators of its own (never the
    # training stream) and changes no weight, optimizer or sampler state
    "data.val_files", "data.val_max_samples", "data.val_batch_size", "data.val_prompt_keys", "data.val_response_keys",
    "trainer.log_freq", "trainer.log_level", "trainer.log_group_by_node", "trainer.log_val_generations",
    "trainer.project_name", "trainer.experiment_name", "trainer.default_local_dir", "trainer.default_hdfs_dir",
    "trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep", "trainer.max_ckpt_to_keep",
    "trainer.remove_previous_ckpt_in_save", "trainer.del_local_ckpt_after_load",
    # which checkpoint to continue from
    "trainer.resume_mode", "trainer.resume_from_path",
    # how many processes and where: batch sizes are global and a checkpoint loads into any number of processes,
    # on any device
    "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.device", "trainer.ray_wait_register_center_timeout",
    # which loop this command runs: Trinity's explore and train commands share one run folder (docs/modes.md)
    "trainer.mode",
})
"""Config keys a resumed run may change. Any other changed key is refused (`changed_on_resume`): the checkpoint's
optimizer and scheduler state, weights and sampler position would override it, or it would apply to only part of
the run (a new model.path would load the KL reference model from it, the policy from the checkpoint)."""
RESUME_MAY_CHANGE_SUFFIX = "_per_gpu"
"""... and the `_per_gpu` micro-batch sizes: performance knobs that never change the gradient."""
RESUME_MAY_CHANGE_SECTIONS = ("actor_rollout_ref.rollout.val_kwargs.", "ray_init.")
"""... and every key of these sections: validation's sampling (temperature, top_p, top_k, n, do_sample); the Ray
cluster the processes run on (a run whose head was lost resumes on the cluster started again, at another address
or on Ray or not)."""
RESUME_MAY_CHANGE_NAMES = frozenset({
    # how a pass is laid out, not what it computes: a sharded checkpoint loads under any sharding (FSDP's wrap
    # policy, fsdp_size, offloading), packed or padded passes, recomputed or kept activations, compiled or eager
    "enable_gradient_checkpointing", "enable_activation_offload", "use_remove_padding", "use_torch_compile",
    "use_dynamic_bsz", "ulysses_sequence_parallel_size", "enforce_eager", "entropy_from_logits_with_chunking",
    "entropy_checkpointing",
})
"""... and these keys of any section, and every key of an `fsdp_config` but its mixed precision."""


def _may_change(key: str) -> bool:
    parts = key.split(".")
    return (key in RESUME_MAY_CHANGE or key.endswith(RESUME_MAY_CHANGE_SUFFIX) or parts[-1] in RESUME_MAY_CHANGE_NAMES
            or key.startswith(RESUME_MAY_CHANGE_SECTIONS)
            or ("fsdp_config" in parts and "mixed_precision" not in parts))


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _unbuilt(cfg: Any) -> dict[str, str]:
    """{key or prefix: why} of the parts an RL config does not build (the reward model while
    reward_model.enable=false, ...: `rft.trainer.validate.UNUSED_RL`); none for another trainer's config."""
    if not hasattr(cfg, "actor_rollout_ref"):
        return {}
    from rft.config.checks import unused_keys
    from rft.trainer.validate import UNUSED_RL

    return unused_keys(UNUSED_RL, cfg)


def changed_on_resume(cfg: Any, started: dict, may_change: Callable[[str], bool] = _may_change) -> list[str]:
    """`key (old -> new)` for each key of `cfg` that differs from the config the checkpointed run was started with
    (`started`, its config.yaml) and is not one a resume may change (`may_change`: `RESUME_MAY_CHANGE`) or a key of a
    part this run does not build (`_unbuilt`: what switches it off, e.g. reward_model.enable, is compared itself,
    so the part was off in the checkpointed run too). A key missing from `started` (written by another version of
    rft) is not compared."""
    from rft.config.load import flatten, to_dict
    from rft.config.validate import inactive_reason

    before, unbuilt = flatten(started), _unbuilt(cfg)
    out = []
    for key, value in flatten(to_dict(cfg)).items():  # the dict, not the config's fields: no key is "read" here
        if may_change(key) or inactive_reason(key, unbuilt) is not None:
            continue
        if key in before and before[key] != value:
            out.append(f"{key} ({_show(before[key])} -> {_show(value)})")
    return out


def check_resume_matches(cfg: Any, folder: Path | None) -> None:
    """The checkpoint a resume would read (`folder`, from `checkpoint_to_resume`; None: the run starts fresh) was
    written with this config's batch size and seed (the sampler state refuses otherwise, but only after the model
    has loaded), and with this config: a key changed since the checkpointed run started (its run folder's
    config.yaml) is refused unless a resume may change it (`RESUME_MAY_CHANGE`), since the checkpoint's state would
    silently override it. A config.yaml that does not parse is refused with the loader's line (file, line, column):
    passed over, the resume would compare nothing."""
    from rft.trainer.checkpoint import run_config

    out = Path(cfg.trainer.default_local_dir)
    if folder is None or not (folder / "trainer_state.json").is_file():
        return
    try:
        sampler = json.loads((folder / "trainer_state.json").read_text()).get("sampler") or {}
    except (OSError, ValueError):
        return  # the resume itself reports an unreadable checkpoint
    seed = cfg.data.seed if hasattr(cfg.data, "seed") else cfg.trainer.seed
    seed_key = "data.seed" if hasattr(cfg.data, "seed") else "trainer.seed"
    size, size_key = cfg.data.train_batch_size, "data.train_batch_size"
    if hasattr(cfg.data, "gen_batch_size"):  # an RL sampler draws generation batches (DAPO's data.gen_batch_size)
        from rft.explorer.taskset import generation_batch

        size, size_key = generation_batch(cfg.data)
    for key, what, value in (("batch_size", size_key, size),
                             ("seed", seed_key, seed)):
        if key in sampler and sampler[key] != value:
            raise RftError(
                f"{folder} was written with {what}={sampler[key]}, this run has {value}: a resume must use the "
                f"same data and batch size; set {what}={sampler[key]}, or trainer.resume_mode=disable to start "
                "over (or another trainer.default_local_dir)"
            )
    started = run_config(folder)  # the run folder's config.yaml, written as the checkpointed run started
    if not started:
        return  # none to compare with (a checkpoint copied on its own)
    changed = changed_on_resume(cfg, started)
    if changed:
        at = folder.name if folder.parent.parent.resolve() == out.expanduser().resolve() else str(folder)
        raise RftError(
            f"resuming {out} from {at} with changed keys {', '.join(changed)}: a resumed run continues the "
            "checkpoint's training; restore them, or start a new run in another trainer.default_local_dir (or "
            "trainer.resume_mode=disable)"
        )


def _tidy_and_find_checkpoint(cfg: Any, out: Path, lock: RunLock
                              ) -> tuple[list[str], Path | CheckpointError | None]:
    """What `clean_stale` did to the run folder `out` and its checkpoints, then the checkpoint the run would resume
    from, looked up once (`checkpoint_to_resume`) while holding the folder's lock and before the run takes the
    folder, and `check_resume_kind` on it. The clean-up goes first: a checkpoint a kill left moved aside between a
    save's two renames is put back, so the lookup (and the changed-keys check after it) sees it. A refusal leaves
    the other run's folder as it was but for that clean-up (no failed.json, no log lines, its lock file emptied).
    A named checkpoint that cannot be used is returned, not raised: the run raises it once it holds its folder,
    which records it (failed.json, its log)."""
    from rft.trainer.checkpoint import check_resume_kind, checkpoint_to_resume

    cleaned: list[str] = []
    try:
        cleaned = clean_stale(out) + clean_stale(out / "checkpoints")
        try:
            folder = checkpoint_to_resume(cfg)
        except CheckpointError as e:
            return cleaned, e
        check_resume_kind(cfg, folder)
    except BaseException:
        _say_interrupted(cleaned)
        lock.release()
        raise
    return cleaned, folder


def _say_interrupted(cleaned: list[str]) -> None:
    """What `clean_stale` undid of an interrupted run in the folder, a line each."""
    for line in cleaned:
        print(f"rft: an earlier run was interrupted: {line}", flush=True)


def total_training_steps(cfg, num_tasks: int | None) -> int:
    """trainer.total_training_steps, else total_epochs passes over `num_tasks` tasks in batches of
    data.train_batch_size, or of data.gen_batch_size with DAPO's dynamic sampling (verl: len(dataloader) x
    total_epochs, its dataloader's batch being gen_batch_size). A step that draws more than one generation batch
    moves the taskset into further epochs: the run still takes this many steps (verl stops at the end of its last
    epoch instead, possibly earlier)."""
    from rft.explorer.taskset import generation_batch

    t = cfg.trainer
    if t.total_training_steps:
        return t.total_training_steps
    if not num_tasks:
        raise ValueError("trainer.total_training_steps is needed when no training taskset is given")
    return num_tasks // generation_batch(cfg.data)[0] * t.total_epochs


def _complete(cfg: Any, out: Path, checkpoint: Path | CheckpointError | None) -> str | None:
    """The line saying the run of `cfg` (rft train, sft or dpo) in `out` is already complete, None where it is not:
    `checkpoint` (the one the run resumes from, looked up once) is this trainer's (for rft train the trainer of one
    loop, or of mode both / train, whose explorer's steps precede it) at the run's last step (or past it: an earlier
    run into the folder took more steps), model/ (and critic/) were written after it (the final export), its keys
    are this config's (a changed key: None, and the run's own check refuses it), and the run is not asked to
    validate only (rft train's trainer.val_only). Rerunning the command would reload everything to rewrite model/;
    it says so instead. Reads only."""
    from rft.trainer.checkpoint import step_of, trainer_kind, written_by

    t = cfg.trainer
    if (not isinstance(checkpoint, Path)
            or (written_by(checkpoint) or {}).get("trainer") != trainer_kind(cfg)["trainer"]
            or t.resume_mode != "auto" or getattr(t, "val_only", False)):  # val_only: rft train's key alone
        return None
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        step = step_of(checkpoint)
        total = total_training_steps(cfg, (state.get("sampler") or {}).get("num_items"))
        exports = [out / "model"] + ([out / "critic"] if any(checkpoint.glob("critic*")) else [])
        saved = (checkpoint / "trainer_state.json").stat().st_mtime
        if step < total or not all((folder / "config.json").is_file()
                                    and (folder / "config.json").stat().st_mtime >= saved for folder in exports):
            return None
        check_resume_matches(cfg, checkpoint)
    except (OSError, ValueError, AttributeError, RftError):
        return None
    if step > total:  # an earlier run of the folder was asked for more steps: this one has none left to take
        return (f"rft: {out} is complete (its last checkpoint is at step {step}, past the {total} steps asked; model "
                f"in {out / 'model'}); nothing to do (raise trainer.total_training_steps / trainer.total_epochs above "
                f"{step} to train on)")
    return (f"rft: {out} is complete ({step}/{total} steps, model in {out / 'model'}); nothing to do (raise "
            "trainer.total_training_steps / trainer.total_epochs to train on)")


def _finished_without_checkpoint(cfg: Any, out: Path, checkpoint: Path | CheckpointError | None) -> str | None:
    """`_complete` for a run that wrote no checkpoint (trainer.save_freq <= 0, verl's default): `out` holds a
    finished run of this trainer (a one-loop `rft train` run, an `rft sft` or `rft dpo` run) when its model/ was
    written after its config.yaml (the final export, after the run started) and it has no failed.json; another
    trainer's such run is refused (no checkpoint names its trainer, as for `check_resume_kind`: its config.yaml
    does). With this config's keys, the line saying it is complete; with other keys a refusal naming them: having
    no checkpoint to resume, the run would start again from step 0 and replace that run's model/ and metrics.jsonl
    without a word. None where `out` holds no such run. Reads only."""
    from omegaconf import OmegaConf

    from rft.config.load import read_yaml
    from rft.sync.schedule import is_synchronous
    from rft.trainer.checkpoint import config_trainer, trainer_kind

    t = cfg.trainer
    rl = hasattr(cfg, "actor_rollout_ref")
    if checkpoint is not None or t.resume_mode != "auto" or (rl and (t.val_only or not is_synchronous(cfg))):
        return None
    config, exported = out / "config.yaml", out / "model" / "config.json"
    try:
        if (out / FAILED).exists() or not exported.is_file() or exported.stat().st_mtime < config.stat().st_mtime:
            return None
        started = OmegaConf.to_container(read_yaml(config))
    except (OSError, RftError):
        return None
    kind = config_trainer(started)
    if kind is None:
        return None
    this = trainer_kind(cfg)["trainer"]
    if kind != this:  # no checkpoint says whose the folder is (check_resume_kind): its config.yaml does
        raise RftError(
            f"{out} holds a finished rft {kind} run (model in {out / 'model'}) that wrote no checkpoint; rft {this} "
            "would start there from step 0 and replace its model/ and metrics.jsonl: use another "
            "trainer.default_local_dir, or set trainer.resume_mode=disable to replace that run"
        )
    # no checkpoint to resume: every key but the folder's own is the finished run's
    changed = changed_on_resume(cfg, started, may_change=lambda key: key == "trainer.default_local_dir")
    if changed:
        raise RftError(
            f"{out} holds a finished run (model in {out / 'model'}) with other keys: {', '.join(changed)}; it wrote no "
            f"checkpoint (trainer.save_freq={t.save_freq}), so this run would start again from step 0 and replace its "
            "model/ and metrics.jsonl: give this run another trainer.default_local_dir, or set "
            "trainer.resume_mode=disable to replace that run"
        )
    return (f"rft: {out} is complete (model in {out / 'model'}; trainer.save_freq={t.save_freq} wrote no "
            "checkpoint); nothing to do (with no checkpoint to train on from, trainer.resume_mode=disable trains it "
            "again from step 0, or give another trainer.default_local_dir)")


def _record_failure(path: Path | None, error: BaseException) -> None:
    from rft.errors import describe_failure
    from rft.fsutil import write_text_atomic

    if path is None:
        return
    with contextlib.suppress(OSError):  # the error being reported matters more than its record
        write_text_atomic(path, json.dumps({"error": describe_failure(error), "type": type(error).__name__,
                                            "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                                            "command": " ".join(sys.argv)}) + "\n")


RUN_ID_FILE = ".rft-run-id"


def claim_buffer(buffer: Any, out: Path) -> None:
    """The run of output folder `out` owns the persistent `buffer` (`rft.buffer.sharing.owner_refusal`), or this
    process stops in one line before it reads or writes there.

    The run's identity is a random id in `out/.rft-run-id`, written by the first process of the run to claim a
    buffer (written once: the explorer and the trainer of a new run starting at the same moment agree on it) and
    kept across reruns, so a resume in the same folder is the same run. The buffer records the first run to claim
    it; a process of another run is refused. One exception, the two machines of docs/scaling.md without a shared
    file system (the same output folder path on each): a folder without an id whose path the buffer's owner
    recorded from another machine takes that owner's id, even when both machines started at once."""
    import uuid

    from rft.buffer.sharing import owner_refusal
    from rft.fsutil import write_text_atomic, write_text_once

    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)  # held by `run_folder` in a run; a loop built on its own makes it
    here, id_file = str(out), out / RUN_ID_FILE

    def elsewhere(owner: dict | None) -> bool:
        """`owner` is this folder's path on another machine: the same run, whose folder this machine lacks."""
        return owner is not None and owner.get("folder") == here and bool(owner.get("host")) \
            and not on_this_host(owner.get("host"))

    made = False
    if id_file.is_file():
        run = id_file.read_text().strip()
    else:
        owner = buffer.owner()
        proposed = owner["run"] if elsewhere(owner) else uuid.uuid4().hex
        run = write_text_once(id_file, proposed + "\n").strip()
        made = run == proposed and not elsewhere(owner)
    owner = buffer.own({"run": run, "folder": here, "host": host_id()})
    if owner["run"] == run:
        return
    if made and elsewhere(owner):  # both machines started at once, and the other one recorded its id first
        write_text_atomic(id_file, owner["run"] + "\n")
        return
    raise RftError(owner_refusal(owner, here, buffer.where))


def _resume_note(cfg: Any, out: Path, role: str = "trainer") -> str:
    """What the same command does after a stop or a crash, as trainer.resume_mode decides (`resume_folder`): resume
    from the latest whole checkpoint in `out` (auto), or, with none there yet, start the run again (naming
    trainer.save_freq); start again whatever checkpoints there are (disable); resume from trainer.resume_from_path
    (resume_path), not from a checkpoint written since."""
    from rft.trainer.checkpoint import CheckpointManager, resume_folder

    if role.startswith("explorer"):  # its position is in the buffer, written with each step
        return "the same command resumes after the last explore step written to the experience buffer"
    t = cfg.trainer
    mode = getattr(t, "resume_mode", "auto")
    latest = resume_folder("auto", None, CheckpointManager(out / "checkpoints"), quiet=True)
    if mode == "disable":
        instead = f"; set trainer.resume_mode=auto to resume from {latest} instead" if latest else ""
        return (f"trainer.resume_mode=disable, so the same command starts the run again from step 0 whatever "
                f"checkpoints there are{instead}")
    if mode == "resume_path":
        named = Path(t.resume_from_path).expanduser()
        later = (f"; set trainer.resume_mode=auto to resume from {latest}, the latest"
                 if latest is not None and latest.resolve() != named.resolve() else "")
        return (f"trainer.resume_mode=resume_path, so the same command resumes from {named} "
                f"(trainer.resume_from_path) again{later}")
    if latest is None:
        freq = f"trainer.save_freq={t.save_freq}" if hasattr(t, "save_freq") else "trainer.save_freq"
        return f"no checkpoint was written yet ({freq}), so the same command starts the run again from step 0"
    return f"the same command resumes from {latest}"


@contextlib.contextmanager
def run_folder(cfg: Any, dist: Dist = SINGLE, for_children: bool = False, role: str = "trainer") -> Iterator[Path]:
    """Hold the output folder of `cfg` (an RL or SFT config) for one run; see the module docstring.
    `for_children`: this process only starts the processes that train (it holds the lock for them, and they write
    the logs); `role`: trainer, explorer or bench (see Roles)."""
    out = Path(cfg.trainer.default_local_dir).expanduser()
    lock_name = LOCK_NAME if role == "trainer" else f".rft-{role}.lock"
    lock_file = str(out.resolve() / lock_name)
    held_by_parent = os.environ.get(LOCK_ENV) == lock_file
    lock, resume_from, interrupted = None, None, []
    if dist.is_main and not held_by_parent:
        _prepare(out)
        lock = RunLock(out, lock_name).acquire()
        if role == "trainer":
            interrupted, resume_from = _tidy_and_find_checkpoint(cfg, out, lock)
            try:
                done = (_complete(cfg, out, resume_from) or _finished_without_checkpoint(cfg, out, resume_from)
                        if dist.processes == 1 else None)
            except BaseException:  # a refusal leaves the folder as it was
                lock.release()
                raise
            if done is not None:  # ends the command before the model loads (its peers, if any, are not started)
                _say_interrupted(interrupted)
                lock.release()
                raise RunComplete(done)
    failed = out / (FAILED if role == "trainer" else f"failed-{role}.json")
    if lock is not None:
        failed.unlink(missing_ok=True)
    try:
        with (_process_log(cfg, out, role, dist, for_children),
              _failure_recorded(failed if lock is not None else None, cfg, out, role)):
            if lock is not None and role != "trainer":
                for line in clean_stale(out / role):
                    print(f"rft: an earlier {role} was interrupted: {line}", flush=True)
            elif lock is not None:
                _say_interrupted(interrupted)
                check_free_space(out, weights_bytes(_model_path(cfg)))
                mirror = getattr(cfg.trainer, "default_hdfs_dir", None)
                if mirror and getattr(cfg.trainer, "save_freq", 1) > 0:  # no checkpoint to copy: no folder
                    _prepare(Path(mirror).expanduser())
                if isinstance(resume_from, CheckpointError):
                    raise resume_from
                check_resume_matches(cfg, resume_from)
            if for_children:
                os.environ[LOCK_ENV] = lock_file
            try:
                with _run_choices_fixed(out, _model_folders(cfg),
                                        fresh=lock is not None and role == "trainer" and resume_from is None):
                    yield out
            finally:
                if for_children:
                    os.environ.pop(LOCK_ENV, None)
    finally:
        if lock is not None:
            lock.release()


def _run_choices_fixed(out: Path, models: tuple[str, ...], fresh: bool) -> contextlib.AbstractContextManager:
    """What the run computes with where the machine decides (generation's kernel rule, a CPU's precision, at the
    shapes of its `models`): fixed as it starts afresh (`fresh`) and read back by its resumed half and its other
    processes (`rft.runtime.fix_run_choices`), so they compute as it did whatever this machine or environment would
    choose now."""
    from rft.models import precision
    from rft.rollout import kernels

    return fix_run_choices(out / RUN_CHOICES_FILE, {**precision.run_choices(models), **kernels.run_choices()}, fresh)


def _model_folders(cfg: Any) -> tuple[str, ...]:
    """The model folders whose passes `cfg` (an RL, SFT or DPO config) computes: the policy's, the critic's."""
    arr, critic, model = (getattr(cfg, name, None) for name in ("actor_rollout_ref", "critic", "model"))
    paths = (arr.model.path if arr is not None else None,
             critic.model.path if critic is not None and getattr(critic.model, "path", None) else None,
             getattr(model, "partial_pretrain", None))
    return tuple(p for p in paths if isinstance(p, str) and p)


def _process_log(cfg: Any, out: Path, role: str, dist: Dist, for_children: bool) -> contextlib.AbstractContextManager:
    """This process's log file, `<out>/log/[<node_ip>/]<role>.log` (`rft.monitor.logfile`): the trainer's ranks
    after the first are trainer_1, trainer_2, ...; a process that only starts the others has none."""
    from rft.monitor.logfile import log_path, run_log

    if for_children:
        return contextlib.nullcontext()
    name = f"{role}_{dist.process_rank}" if dist.process_rank > 0 else role
    t = cfg.trainer
    return run_log(log_path(out, name, t.log_group_by_node), t.log_level)


@contextlib.contextmanager
def _failure_recorded(failed: Path | None, cfg: Any, out: Path, role: str) -> Iterator[None]:
    """An error or stop of the block written to `failed` (None: not this process's to write), with what the same
    command does next (`_resume_note`): in the line of a stop by Ctrl-C / SIGTERM, between phases or at once, and
    as the error's `resume_note` for the lines that end with it (`rft.errors.describe_failure`: another process
    lost, a full disk)."""
    try:
        yield
    except Interrupted as e:
        stopped = Interrupted(e.signal_name, f"{e.message}; {_resume_note(cfg, out, role)}")
        _record_failure(failed, stopped)
        raise stopped from None
    except StopNow as e:
        stopped = StopNow(e.signal_name, f"stopped by {e.signal_name}; {_resume_note(cfg, out, role)}")
        _record_failure(failed, stopped)
        raise stopped from None
    except BaseException as e:
        if ends_with_resume_note(e):  # not a config refusal's: its checks read the checkpoint once, before this
            with contextlib.suppress(OSError, AttributeError):  # unreadable folder: the line says what is true of any
                e.resume_note = _resume_note(cfg, out, role)
        _record_failure(failed, e)
        raise
