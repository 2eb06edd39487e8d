"""Supervised fine-tuning with verl's sft_trainer.yaml keys: the token-mean NLL of the response tokens.

It shares the RL trainer's parts: `forward_logprobs` (the worker's forward: the LM head in chunks of tokens, never
a micro-batch's tokens x vocabulary logits, `workers/lm_head.py`), the RL update's handing back of freed memory
(`release_freed_memory` between the passes, `trim_in_backward` inside the backward), the optimizer / scheduler
builders, the update guard (a non-finite or exploding step is undone and counted as train/skipped_updates), checkpoints
(`save_training_state` / `load_training_state`), the monitor and the HF export.

Several processes (`dist`, trainer.nnodes x n_gpus_per_node, as `rft train`): the model is sharded (FSDP2 / FSDP1,
model.strategy), every rank draws the same rows for a step and takes its contiguous share of them; the loss of a rank
is its share of the batch's token-mean NLL (the token count all-reduced), so the gradient summed over the ranks is
the one-process gradient; the validation rows are split the same way and their sums all-reduced. Rank 0 logs and
writes the model; checkpoints are sharded (DCP), resumable by any number of processes. With ulysses_sequence_parallel_size
(verl's sft_trainer key) the processes form groups that hold the same rows and split each row's tokens between them
(`rft.workers.ulysses`, as the RL actor): `dist` is then the data-parallel view, the rows split over the groups.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from rft.config import to_yaml
from rft.console import counted
from rft.data.dataset import PromptSampler
from rft.data.sft import SFTDataset
from rft.data.validation import capped_validation, note_uncapped_validation
from rft.distributed import SINGLE, Dist, padded_shard
from rft.fsutil import write_text_atomic
from rft.models import precision
from rft.models.checks import check_row_positions
from rft.models.load import (
    export_hf,
    load_tokenizer,
    load_trainable_model,
    resolve_device,
)
from rft.models.vision import vision_for
from rft.monitor import TOKENS, SilentTracker, Timer, Tracker
from rft.runtime import configure_cpu_runtime, release_freed_memory
from rft.trainer.checkpoint import (
    CheckpointManager,
    load_training_state,
    resume_folder,
    save_training_state,
    step_of,
    trainable_parameters,
    trainer_kind,
)
from rft.workers.fsdp import full_state_dict, loss_scale, wrap
from rft.workers.guard import UpdateGuard
from rft.workers.minibatch import trim_in_backward
from rft.workers.packing import enable_remove_padding
from rft.workers.policy import build_optimizer, build_scheduler, forward_logprobs
from rft.workers.ulysses import enable_sequence_parallel

log = logging.getLogger("rft")

SFT_CONTENTS = {"model", "optimizer", "extra"}


class _FSDP:
    """The FSDP settings `wrap` reads, at the SFT schema's defaults (decoder layers as units, no offload)."""

    class wrap_policy:
        transformer_layer_cls_to_wrap = None

    offload_policy = param_offload = False


class SFTTrainer:
    name = "sft"  # the log lines' prefix (DPOTrainer reuses this loop)
    val_unit, val_metrics = "rows", "val/loss"  # what validation reads, and what it computes (the note's words)

    def __init__(self, cfg, dist: Dist = SINGLE):
        """`dist`: this process's rank among the processes of the run (default: one process)."""
        configure_cpu_runtime()
        self.cfg, self.dist = cfg, dist
        data, model_cfg, optim, trainer = cfg.data, cfg.model, cfg.optim, cfg.trainer
        self.out = Path(trainer.default_local_dir)
        self.device = resolve_device(trainer.device)
        if dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", dist.local_rank)
        # float32 weights and optimizer state; the passes compute in model_dtype where this hardware is fast in it
        self.precision = precision.choose(model_cfg.fsdp_config.model_dtype, self.device, model_cfg.partial_pretrain)
        self.dtype = precision.MASTER
        torch.manual_seed(trainer.seed)

        self.tokenizer = load_tokenizer(model_cfg.partial_pretrain, model_cfg.trust_remote_code)
        self.train_set = self.dataset(data.train_files)
        self.val_set = self.load_val_set()
        longest = max(ds.longest for ds in (self.train_set, self.val_set) if ds is not None)
        check_row_positions(model_cfg.partial_pretrain, longest, self.val_unit)
        self.sampler = PromptSampler(len(self.train_set), data.train_batch_size, shuffle=True, seed=trainer.seed,
                                     unit=self.val_unit.removesuffix("s"), mini_batch_key=None)
        self.total_steps = trainer.total_training_steps or self.sampler.batches_per_epoch * trainer.total_epochs

        self.model = self.load_model(self.device, self.tokenizer)
        precision.set_compute(self.model, self.precision)
        if getattr(cfg, "use_remove_padding", False):  # rft sft's key; rft dpo's schema has none (refused there)
            enable_remove_padding(self.model, "use_remove_padding")
        reference = self.reference_model(self.model)
        self.model = wrap(self.model, model_cfg.strategy, _FSDP(), dist, self.device)
        self.ref_model = None if reference is None else wrap(reference, model_cfg.strategy, _FSDP(), dist,
                                                             self.device)
        if dist.sp > 1:  # Ulysses (rft sft's ulysses_sequence_parallel_size): each process runs its slice of a row
            enable_sequence_parallel(self.model, dist, "ulysses_sequence_parallel_size")
        self.loss_scale = loss_scale(self.model, dist)
        self.params = list(trainable_parameters(self.model).values())
        self.optimizer = build_optimizer(self.params, optim)
        self.guard = UpdateGuard(self.params, self.optimizer, trainer.bad_update_limit, dist, lr_key="optim.lr")
        self.scheduler = build_scheduler(self.optimizer, optim.lr_scheduler,
                                         int(optim.warmup_steps_ratio * self.total_steps), self.total_steps,
                                         min_lr_ratio=optim.min_lr_ratio)
        self.ckpt = CheckpointManager(self.out / "checkpoints", trainer.max_ckpt_to_keep, mirror=trainer.default_hdfs_dir)
        self.global_step = 0
        self._step_metrics: dict = {}
        self._recovered_metrics: dict | None = None
        self._trim_hooks = trim_in_backward(self.model)  # freed memory handed back inside each backward

    def load_model(self, device: torch.device, tokenizer=None):
        """The model this trainer updates, from model.partial_pretrain (a causal LM here; `tokenizer`: the one its
        embedding is checked against)."""
        m = self.cfg.model
        return load_trainable_model(m.partial_pretrain, m, self.dtype, device, key="model", tokenizer=tokenizer)

    def reference_model(self, model) -> torch.nn.Module | None:
        """A frozen model the loss compares with (rft dpo's reference policy), made from the loaded `model` before
        either is sharded over the ranks; None here: SFT has none."""
        return None

    def fit(self) -> dict[str, float]:
        t = self.cfg.trainer
        self._maybe_resume()
        main = self.dist.is_main
        if main:  # after the resume's checks
            write_text_atomic(self.out / "config.yaml", to_yaml(self.cfg))
        tracker = Tracker.for_run(self.cfg, self.out, self.total_steps, self.global_step,
                                  recovered=self._recovered_metrics) if main else SilentTracker()
        groups = f" in sequence-parallel groups of {self.dist.sp}" if self.dist.sp > 1 else ""
        where = self.device if not self.dist.enabled else \
            f"{counted(self.dist.processes, 'process', 'processes')}{groups} ({self.device.type})"
        tracker.write(f"rft {self.name}: {counted(self.total_steps, 'step')} on {where}, "
                      f"{counted(len(self.train_set), 'row')}, output {self.out}\nrft {self.name}: {precision.describe({self.name: self.precision})}")
        last: dict[str, float] = {}
        while self.global_step < self.total_steps:
            self.global_step += 1
            step, is_last = self.global_step, self.global_step == self.total_steps
            timer = Timer()
            with timer("step"):
                with timer("update"):
                    rows = self.dist.shard(self.sampler.next_batch())  # this rank's share of the step's rows
                    metrics = self.train_step(self.next_batch(rows))
                if self.val_set is not None and t.test_freq > 0 and (is_last or step % t.test_freq == 0):
                    with timer("testing"):
                        metrics.update(self.validate())
                if t.save_freq > 0 and (is_last or step % t.save_freq == 0):
                    self._step_metrics = {**metrics, **timer.metrics()}  # its line, should the kill come first
                    with timer("save_checkpoint"):
                        self.ckpt.save(step, self._write_checkpoint, self.dist)
            metrics.update(timer.metrics())
            metrics["training/epoch"] = self.sampler.epoch
            tracker.log(step, metrics)
            last = metrics
        self._export(self.out / "model", final=True)
        tracker.write(f"rft {self.name}: model written to {self.out / 'model'}")
        tracker.close()
        return last

    def dataset(self, files):
        """The rows of `files` (data.train_files / data.val_files) as a dataset with `batch(indices, pad_id)`."""
        return SFTDataset(files, self.tokenizer, self.cfg.data,
                          vision=vision_for(self.cfg.model.partial_pretrain, "model"))

    def next_batch(self, rows: list[int]):
        """What `train_step` takes for the training rows `rows` (this rank's share of the step)."""
        return self.train_set.batch(rows, self.tokenizer.pad_token_id)

    def load_val_set(self):
        """The dataset of data.val_files (None without), at most data.val_max_samples of it (verl's key and meaning
        for SFT: the first ones), with one note where an uncapped validation reads more than 300."""
        data = self.cfg.data
        if not data.val_files:
            return None
        val_set = self.dataset(data.val_files)
        kept = capped_validation(len(val_set), data.val_max_samples, shuffle=False, seed=None, unit=self.val_unit)
        if kept is not None:
            val_set.keep(kept)
        if self.cfg.trainer.test_freq > 0 and self.dist.is_main:
            note_uncapped_validation(len(val_set), data.val_max_samples, f"computes {self.val_metrics} over all "
                                     f"{len(val_set)} {self.val_unit} of data.val_files")
        return val_set

    def validate(self) -> dict[str, float]:
        """The validation metrics of the step (trainer.test_freq)."""
        return {"val/loss": self.val_loss()}

    def _nll_sum(self, batch) -> torch.Tensor:
        """Sum over loss tokens of -log p (temperature 1)."""
        logprobs, _ = forward_logprobs(self.model, batch, temperature=1.0)
        mask = batch.loss_mask.to(logprobs.device).float()
        return -(logprobs * mask).sum()

    def train_step(self, batch) -> dict[str, float]:
        """One optimizer step over `batch` (this rank's rows), micro-batch by micro-batch, normalised by the loss
        tokens of every rank's rows (so neither the micro-batch size nor the number of processes changes the
        gradient)."""
        self.model.train()
        n_tokens = float(self.dist.sum(batch.loss_mask.sum().double()))
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for mb in batch.split(self.cfg.data.micro_batch_size_per_gpu):
            loss = self._nll_sum(mb) / n_tokens
            self._backward(loss)
            loss_sum += float(loss.detach())
        loss_sum = float(self.dist.sum(torch.tensor(loss_sum, dtype=torch.float64)))
        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm, why = self._optimizer_step([loss_sum])
        return {"train/loss": loss_sum, "train/grad_norm": grad_norm, "train/lr": lr, "train/tokens": n_tokens,
                TOKENS: self._all_tokens(batch), "train/skipped_updates": float(why is not None)}

    def _backward(self, loss: torch.Tensor) -> None:
        """A micro-batch's backward as the RL update runs it (`workers/minibatch.py:MiniBatchWorker.accumulate`):
        the forward's temporaries handed back first (the gradients are shaped otherwise), more inside the backward
        (`trim_in_backward`); each only where the process holds a large share of the machine."""
        release_freed_memory()
        (loss * self.loss_scale if self.loss_scale != 1.0 else loss).backward()

    def _optimizer_step(self, losses: list[float]) -> tuple[float, str | None]:
        """The guarded optimizer step and the scheduler's, the freed memory handed back before (the backward's) and
        after (the optimizer step's), as the RL update does. The gradients stay until the next step's zero_grad,
        which frees them before its forward pass."""
        release_freed_memory()
        step = self.guard.step(self.cfg.optim.clip_grad, self.model if self.dist.enabled else None, losses=losses)
        self.scheduler.step()
        release_freed_memory()
        return step

    def _all_tokens(self, batch) -> float:
        """The prompt + response tokens of every rank's rows of the step (tokens/s on the console)."""
        return float(self.dist.sum((batch.prompt_mask.sum() + batch.response_mask.sum()).double()))

    @torch.no_grad()
    def val_loss(self) -> float:
        """The token-mean NLL over every validation row (data.val_max_samples of them where set; each rank its
        share, padded to equal passes)."""
        self.model.eval()
        total, tokens = 0.0, 0.0
        rows = self.cfg.data.micro_batch_size_per_gpu
        indices, keep = padded_shard(len(self.val_set), self.dist.rank, self.dist.world_size)
        for start in range(0, max(len(indices), 1), rows):
            chunk = indices[start:start + rows] or [0]
            batch = self.val_set.batch(chunk, self.tokenizer.pad_token_id)
            real = torch.tensor([float(start + i < keep) for i in range(len(chunk))])[:, None]
            batch.loss_mask = batch.loss_mask * real  # the padding rows count for nothing
            total += float(self._nll_sum(batch))
            tokens += float(batch.loss_mask.sum())
        self.model.train()
        sums = self.dist.sum(torch.tensor([total, tokens], dtype=torch.float64))
        return float(sums[0]) / max(float(sums[1]), 1.0)

    def _export(self, out: Path, final: bool = False) -> None:
        """The model as a Hugging Face folder (LoRA merged); with several processes gathered on rank 0 and written
        from a fresh unsharded copy."""
        if not self.dist.enabled:
            export_hf(self.model, self.tokenizer, out, merge_in_place=final)
            return
        weights = full_state_dict(self.model, self.dist)
        if self.dist.is_main:
            copy = self.load_model(torch.device("cpu"))
            copy.load_state_dict(weights)
            export_hf(copy, self.tokenizer, out, merge_in_place=True)
        self.dist.barrier()

    def _write_checkpoint(self, folder: Path) -> None:
        save_training_state(folder, contents=SFT_CONTENTS, model=self.model, optimizer=self.optimizer,
                            scheduler=self.scheduler, generators={}, tokenizer=self.tokenizer,
                            state={"global_step": self.global_step, **trainer_kind(self.cfg),
                                   "sampler": self.sampler.state_dict(), "guard": self.guard.state_dict(),
                                   "metrics": self._step_metrics}, dist=self.dist,
                            export=(lambda out: self._export(out)) if self.dist.enabled else None)

    def _maybe_resume(self) -> None:
        t = self.cfg.trainer
        folder = resume_folder(t.resume_mode, t.resume_from_path, self.ckpt)
        if folder is None:
            return
        state = load_training_state(folder, contents=SFT_CONTENTS, model=self.model, optimizer=self.optimizer,
                                    scheduler=self.scheduler, generators={}, dist=self.dist)
        self.sampler.load_state_dict(state["sampler"])
        self.guard.load_state_dict(state.get("guard", {}))
        self._recovered_metrics = state.get("metrics")
        self.global_step = step_of(folder)
        if self.dist.is_main:
            print(f"rft {self.name}: resumed from {folder} at step {self.global_step}", flush=True)


