"""What the policy and the critic update share: the optimizer and its schedule, the clipped step, and the PPO loop
over epochs, group-shuffled mini-batches and micro-batches.

Mini-batches are counted in prompts (global) and hold ppo_mini_batch_size x n rows, ppo_mini_batch_size x n /
processes on each rank; micro-batches are counted in rows (per process). Each micro-batch's loss is aggregated with
its whole mini-batch's normaliser over all ranks (`AggNorm`), so the micro-batch size and the number of processes
change the memory used, never the gradient: the gradients summed over the ranks (`workers/fsdp.py`) are the
one-process gradient, and the metrics of the ranks' micro-batches are summed the same way. A worker subclass says how one mini-batch's
gradient is accumulated (`backward_mini_batch`); the loop, the step and the metrics are written once, here.

With `activation_offload` (model.enable_activation_offload) the forward pass of every micro-batch runs under
`activation_offload_context`: on cuda the activations it saves for backward are kept in pinned host memory.

Every optimizer step goes through an `UpdateGuard` (workers/guard.py): a step with a non-finite loss or gradient
norm, or that leaves non-finite weights or explodes, is undone and counted (`<prefix>/skipped_updates`), and more
than `settings.bad_update_limit` of them in a row stop the run.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable

import torch
from torch import nn

from rft.algorithms import AggNorm
from rft.batch import Batch
from rft.distributed import SINGLE, Dist
from rft.models.load import device_of
from rft.runtime import release_freed_memory
from rft.workers.guard import UpdateGuard
from rft.workers.optim import is_plateau, make_named_scheduler
from rft.workers.packing import row_tokens, token_budget_bins

LR_KEYS = {"actor": "actor_rollout_ref.actor.optim.lr", "critic": "critic.optim.lr"}


def build_optimizer(params: Iterable[nn.Parameter], optim_cfg, name: str | None = None) -> torch.optim.Optimizer:
    """The optimizer `name` (transformers' `optim` names, `rft.workers.optim`; default: the config's `optimizer`,
    else AdamW) over `params`, from a config with lr, betas, eps and weight_decay."""
    from rft.workers.optim import DEFAULT_OPTIMIZER, make_optimizer

    return make_optimizer(params, optim_cfg, name or getattr(optim_cfg, "optimizer", None) or DEFAULT_OPTIMIZER)


def build_scheduler(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int,
                    num_cycles: float = 0.5, min_lr_ratio: float = 0.0):
    """transformers' schedulers after a linear warmup: constant, cosine (down to min_lr_ratio * lr), or wsd
    (warmup-stable-decay: stable until the last 10% of the post-warmup steps, then a cosine decay)."""
    from transformers import (
        get_constant_schedule_with_warmup,
        get_cosine_with_min_lr_schedule_with_warmup,
        get_wsd_schedule,
    )

    if kind == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup_steps)
    if kind == "cosine":
        return get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, warmup_steps, total_steps, num_cycles=num_cycles, min_lr_rate=min_lr_ratio)
    if kind == "wsd":
        decay = max(1, int(0.1 * (total_steps - warmup_steps)))
        return get_wsd_schedule(optimizer, warmup_steps, decay, num_training_steps=total_steps,
                                min_lr_ratio=min_lr_ratio, num_cycles=num_cycles)
    raise ValueError(f"unknown lr schedule {kind!r}; valid: constant, cosine, wsd")


def activation_offload_context(enabled: bool, device_type: str) -> contextlib.AbstractContextManager:
    """What an update's forward passes run under: with `enabled` on cuda, torch.autograd.graph.save_on_cpu(
    pin_memory=True), so the tensors autograd saves for backward wait in pinned host memory and are copied back
    when the backward pass needs them (verl's enable_activation_offload; less GPU memory, more host traffic, the
    same gradient). Elsewhere nothing: on CPU the activations already live in host memory. The cuda path has not
    been run yet (there is no GPU where the tests run)."""
    if enabled and device_type == "cuda":
        return torch.autograd.graph.save_on_cpu(pin_memory=True)
    return contextlib.nullcontext()


def loss_tokens(batch: Batch) -> torch.Tensor:
    """(B, R) the tokens that carry the policy's loss: `batch.loss_mask` when set (rollout correction's rejection
    sampling leaves the rejected tokens out of it), else the response mask; never those of expert rows
    (`batch.expert_mask`, algorithm.mix: they carry the SFT loss, `expert_tokens`). The response mask stays the
    attention mask."""
    tokens = batch.loss_mask if batch.loss_mask is not None else batch.response_mask
    if batch.expert_mask is not None:
        tokens = tokens * (~batch.expert_mask.to(tokens.device))[:, None]
    return tokens


def expert_tokens(batch: Batch) -> torch.Tensor:
    """(B, R) the tokens of the expert rows that carry the SFT loss (algorithm.mix); all 0 without expert rows."""
    tokens = batch.loss_mask if batch.loss_mask is not None else batch.response_mask
    if batch.expert_mask is None:
        return torch.zeros_like(tokens)
    return tokens * batch.expert_mask.to(tokens.device)[:, None]


def mini_batch_norm(mini: Batch, max_response_length: int, dist: Dist = SINGLE, expert: bool = False) -> AggNorm:
    """The normalisers of a whole mini-batch (its rows on every rank), given to each of its micro-batches: its loss
    tokens (`loss_tokens`), its rows, and `max_response_length` (seq-mean-token-sum-norm's constant). Rows and
    tokens are those of the experiences, or with `expert` those of the expert rows (`expert_tokens`)."""
    is_expert = mini.expert_mask if mini.expert_mask is not None else torch.zeros(len(mini), dtype=torch.bool)
    tokens, rows = (expert_tokens(mini), is_expert.sum()) if expert else (loss_tokens(mini), (~is_expert).sum())
    counts = dist.sum(torch.tensor([float(tokens.sum()), float(rows)], dtype=torch.float64))
    # at least one of each, as agg_loss's own normalisers: a mini-batch without a token to learn (a RAFT workflow's
    # failed episodes) has a loss of 0, not 0 / 0
    return AggNorm(num_tokens=max(float(counts[0]), 1.0), num_seqs=max(float(counts[1]), 1.0),
                   max_len=max_response_length)


TRIM_POINTS = 4
"""The backward pass hands freed memory back at the boundaries of this many equal runs of decoder layers."""


def trim_in_backward(model: nn.Module, points: int = TRIM_POINTS) -> int:
    """Hooks on every (layers / `points`)-th decoder layer of a model on the CPU whose output's gradient calls
    `release_freed_memory` (which trims only a process holding a large share of the machine). The backward frees
    the activations layer by layer while it allocates the weights' gradients, shaped otherwise: glibc keeps the
    freed blocks, and the heap grew by the gradients' size over the activations' (Qwen2.5-0.5B, 16 x 64 tokens:
    peak 10.8 GiB, 9.9 with three trims in the backward, ~0.03 s each). Layers that `use_torch_compile` compiled
    get none (a hook inside the compiled call). Returns the number of hooks."""
    from rft.models.arch import layer_classes

    if device_of(model).type != "cpu":
        return 0
    try:
        classes = layer_classes(model)
    except ValueError:
        return 0
    layers = [m for m in model.modules() if type(m).__name__ in classes]
    every = max(1, len(layers) // points)
    chosen = [m for m in layers[every::every] if getattr(m, "_compiled_call_impl", None) is None]

    def trim(grad: torch.Tensor) -> None:
        release_freed_memory()

    def on_output(module, args, output) -> None:
        hidden = output[0] if isinstance(output, tuple) else output
        if torch.is_tensor(hidden) and hidden.requires_grad:
            hidden.register_hook(trim)

    for layer in chosen:
        layer.register_forward_hook(on_output)
    return len(chosen)


class MiniBatchWorker:
    """A trained model with its optimizer, schedule and PPO update loop (the policy and the critic are two).

    `settings` needs n, ppo_mini_batch_size, micro_rows, ppo_epochs, shuffle, seed, grad_clip and
    bad_update_limit; metrics are named `<prefix>/...`. The schedule spans `optim_cfg.total_training_steps` steps
    when that is set (> 0), else `total_steps` (the run's). Subclasses implement `backward_mini_batch`. `dist`: the ranks sharing the update (the
    model is already sharded over them, `workers/fsdp.py:wrap`); each holds its own rows of every mini-batch.
    """

    prefix = "worker"
    _trim_hooks: int | None = None  # trim_in_backward's hooks on self.model (None: not yet installed)
    steps_taken: int | None = None  # the last update's optimizer steps the guard let through (None: none ran yet)

    def __init__(self, model: nn.Module, settings, optim_cfg, total_steps: int, dist: Dist = SINGLE):
        from rft.workers.fsdp import loss_scale

        self.model = model
        self.s = settings
        self.dist = dist
        self.loss_scale = loss_scale(model, dist)
        self.activation_offload = bool(getattr(settings, "activation_offload", False))
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, optim_cfg)
        self.guard = UpdateGuard(self.params, self.optimizer, getattr(settings, "bad_update_limit", 3), dist,
                                 lr_key=LR_KEYS.get(self.prefix, "optim.lr"))
        schedule_steps = getattr(optim_cfg, "total_training_steps", -1)
        total_steps = schedule_steps if isinstance(schedule_steps, int) and schedule_steps > 0 else total_steps
        warmup = (optim_cfg.lr_warmup_steps if optim_cfg.lr_warmup_steps >= 0
                  else int(optim_cfg.lr_warmup_steps_ratio * total_steps))
        if getattr(optim_cfg, "lr_scheduler_type", None):  # transformers' get_scheduler by name
            self.scheduler = make_named_scheduler(self.optimizer, optim_cfg.lr_scheduler_type, warmup, total_steps)
        else:
            self.scheduler = build_scheduler(self.optimizer, optim_cfg.warmup_style, warmup, total_steps,
                                             optim_cfg.num_cycles, optim_cfg.min_lr_ratio)

    def backward_mini_batch(self, mini: Batch, seed: int = 0) -> dict[str, float]:
        """Accumulate the gradient of one mini-batch's loss into `.grad`; returns the summed metrics."""
        raise NotImplementedError

    def norm(self, mini: Batch) -> AggNorm:
        """`mini_batch_norm` over every rank's rows of this mini-batch; seq-mean-token-sum-norm divides by the
        settings' `loss_scale_factor` when set, else by `max_response_length` (verl's rule)."""
        max_len = getattr(self.s, "loss_scale_factor", None) or self.s.max_response_length
        return mini_batch_norm(mini, max_len, self.dist)

    def plan(self, mini: Batch, sync: bool = False) -> tuple[list[int] | None, list[int], int]:
        """How `mini` is cut into micro-batches: (the order its rows are taken in, None: as they are; the sizes of
        the consecutive micro-batches of that order; the number of filler passes to add). `micro_rows` rows each,
        or with a token budget (`max_token_len`, use_dynamic_bsz) `token_budget_bins`. `sync`: with several
        processes, every rank runs as many passes as the rank with the most (a sharded model needs every rank in
        each pass): the others add filler passes (one row, loss times 0)."""
        budget = getattr(self.s, "max_token_len", None)
        rows = len(mini)
        order = None
        if budget:
            bins = token_budget_bins(row_tokens(mini), budget, self.budget_key)
            want = self.dist.max_int(len(bins)) if sync and self.dist.enabled else len(bins)
            if want > len(bins) and rows > len(bins):
                bins = token_budget_bins(row_tokens(mini), budget, self.budget_key, min_bins=want)
            order = [i for b in bins for i in b]
            order = None if order == list(range(rows)) else order
            sizes = [len(b) for b in bins]
        else:
            micro = self.s.micro_rows or max(rows, 1)
            sizes = [min(micro, rows - start) for start in range(0, rows, micro)]
            want = self.dist.max_int(len(sizes)) if sync and self.dist.enabled else len(sizes)
        fillers = max(0, want - len(sizes))
        if sync and not want:  # no rank has a row: one filler pass everywhere, so every rank reports the metrics
            fillers = 1
        return order, sizes, fillers

    def accumulate(self, mini: Batch, micro_loss: Callable[[list[int], Batch], tuple[torch.Tensor, dict[str, float]]],
                   plan: tuple[list[int] | None, list[int], int] | None = None, filler: Batch | None = None
                   ) -> dict[str, float]:
        """Backward of `micro_loss(rows, micro_batch)` (`rows`: its rows' indices in `mini`) for each micro-batch of
        `plan` (default `self.plan(mini)`: `micro_rows` rows each, or by token budget); the metrics of the
        micro-batches are summed (each micro-batch reports its share of the mini-batch's value). Filler passes run
        `micro_loss` on the first row of `filler` (default `mini`) with the loss and the metrics multiplied by 0
        (exactly 0 gradient; the metrics' keys as the other ranks report them)."""
        order, sizes, fillers = plan if plan is not None else self.plan(mini)
        order = order if order is not None else list(range(len(mini)))
        sums: dict[str, float] = defaultdict(float)
        start = 0
        offload = activation_offload_context(self.activation_offload, device_of(self.model).type)
        if self._trim_hooks is None:  # once, the model compiled or not by now
            self._trim_hooks = trim_in_backward(self.model)
        for size in sizes:
            rows = order[start:start + size]
            with offload:  # the forward pass: what it saves for backward goes to host memory (cuda)
                loss, metrics = micro_loss(rows, mini.select(rows) if size != len(mini) else mini)
            release_freed_memory()  # the forward's temporaries: the backward's gradients are shaped otherwise
            (loss * self.loss_scale if self.loss_scale != 1.0 else loss).backward()
            for k, v in metrics.items():
                sums[k] += v
            start += size
        source = filler if filler is not None else mini
        for _ in range(fillers):  # the metrics count 0 too: every rank reports the same keys
            with offload:
                loss, metrics = micro_loss([0], source.select([0]))
            (loss * 0.0).backward()
            for k, v in metrics.items():
                sums[k] += 0.0 * v
        return sums

    budget_key = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"

    def mini_batches(self, batch: Batch, step: int, epoch: int) -> list[Batch]:
        """The mini-batches of one epoch: ppo_mini_batch_size x n rows of experiences each (this rank's share),
        whole groups shuffled between them when asked; expert rows (algorithm.mix) dealt out equally, each
        mini-batch getting its share after its experiences."""
        rows_per_mini = self.s.ppo_mini_batch_size * self.s.n // self.dist.world_size  # this rank's rows
        order = self._row_order(batch, step, epoch)
        data = batch.select(order) if order is not None else batch
        if data.expert_mask is None:
            return list(data.split(rows_per_mini))
        is_expert = data.expert_mask.tolist()
        rows = [i for i, e in enumerate(is_expert) if not e]
        experts = [i for i, e in enumerate(is_expert) if e]
        k = max(1, -(-len(rows) // rows_per_mini))
        per = len(experts) // k
        return [data.select(rows[j * rows_per_mini:(j + 1) * rows_per_mini] + experts[j * per:(j + 1) * per])
                for j in range(k)]

    def _row_order(self, batch: Batch, step: int, epoch: int) -> list[int] | None:
        """Rows with whole groups shuffled (a group never straddles mini-batches), or None to keep the order."""
        if not self.s.shuffle:
            return None
        g = torch.Generator().manual_seed(self.s.seed * 1_000_003 + step * 1_009 + epoch)
        groups = torch.unique_consecutive(batch.group)
        order = groups[torch.randperm(len(groups), generator=g)]
        return [i for gid in order.tolist() for i in (batch.group == gid).nonzero().flatten().tolist()]

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """ppo_epochs passes over `batch`, one optimizer step per mini-batch, then one scheduler step. Returns the
        metrics averaged over the mini-batch steps, with `<prefix>/grad_norm` and `<prefix>/lr`."""
        s, prefix = self.s, self.prefix
        self.model.train()
        release_freed_memory()  # the generation's and the log-prob passes'
        history: dict[str, list[float]] = defaultdict(list)
        skipped = taken = 0
        for epoch in range(s.ppo_epochs):
            for index, mini in enumerate(self.mini_batches(batch, step, epoch)):
                self.optimizer.zero_grad(set_to_none=True)
                seed = (((s.seed * 1_000_003 + step) * 1_009 + epoch) * 1_013 + index) % 2**63
                sums = self.dist.sum_metrics(self.backward_mini_batch(mini, seed))  # every rank's share
                release_freed_memory()  # the backward pass's, before the optimizer's state is touched
                grad_norm, why = self.guard.step(s.grad_clip, self.model if self.dist.enabled else None,
                                                 losses=[v for k, v in sums.items() if k.endswith("loss")])
                skipped += why is not None
                taken += why is None
                sums[f"{prefix}/grad_norm"] = grad_norm
                for k, v in sums.items():
                    history[k].append(v)
        self.optimizer.zero_grad(set_to_none=True)  # not held through the next generation (4 bytes a parameter)
        release_freed_memory()  # the gradients' and the optimizer step's: the next generation allocates otherwise
        history[f"{prefix}/lr"] = [self.optimizer.param_groups[0]["lr"]]
        if not is_plateau(self.scheduler):  # reduce_lr_on_plateau steps on validation metrics (the trainer)
            with warnings.catch_warnings():
                # the schedule counts trainer steps, as verl's: one whose every update was skipped (the guard: no
                # gradient, e.g. every advantage 0) still moves it; torch's warning about that order says nothing here
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before")
                self.scheduler.step()
        out = {k: sum(v) / len(v) for k, v in history.items()}
        out[f"{prefix}/skipped_updates"] = float(skipped)
        self.steps_taken = taken  # optimizer steps the guard let through: 0 leaves the weights as they were
        return out
