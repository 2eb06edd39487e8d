"""Non-finite and exploding updates: an optimizer step that would poison the weights is not taken, it is counted,
and `limit` of them in a row stop the run.

`UpdateGuard.step` replaces a bare clipped optimizer step:

1. the step's losses and its (global) gradient norm must be finite, else no step is taken;
2. the step is tried first on copies, one block of a parameter at a time (the optimizer's own step on a copy of the
   block's weights and state, with its gradient): the new weights must be finite and the update no larger than
   `EXPLODING_RATIO` times the weights themselves (||dw|| <= 10 ||w||, over all trainable parameters: a learning
   rate of 1e10 passes every finiteness check at the step that ruins the model, and only the next forward pass
   overflows);
3. only a step that passes is taken; one that fails is not (the weights and the optimizer state stay exactly as
   they were) and counts as skipped. More than `limit` skipped steps in a row raise `TrainingDiverged`.

Adam and AdamW skip the trial where a bound proves the step passes (`adam_bound`): Adam's update is scale-free, each
value of m_hat / sqrt(v_hat) is at most a constant C_t of the betas and the step count whatever the gradients were,
so with finite gradients and weights ||dw|| <= lr * (wd * ||w|| + C_t * sqrt(n)), and a bound below the ratio passes
every check the trial would make. At the learning rates training uses the bound holds by orders of magnitude; the
trial (2-3x the step's own time: copies of every weight and moment) then runs only for the steps it could reject.

The trial holds one block's copy at a time (at most `TRIAL_BLOCK` values per tensor; a parameter of an optimizer
whose state is not elementwise, such as Adafactor's factored moments, is one block), so no standing copy of the
weights and optimizer state exists: a full copy would hold 12 bytes a parameter under AdamW, as much again as the
weights and both moments. An optimizer whose step the trial cannot drive on copies (bitsandbytes' AdEMAMix,
GrokAdamW: their steps keep state beyond the per-parameter dicts) is guarded the old way: a copy of the weights and
the state is taken before the step and put back when it fails.

Several processes: the checks are all-reduced, so every rank takes the same decision.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import torch
from torch import nn

from rft.distributed import SINGLE, Dist
from rft.errors import TrainingDiverged

EXPLODING_RATIO = 10.0
"""An update whose norm exceeds this multiple of the weights' norm is rejected (normal steps move weights by a
small fraction of their norm: ~1e-3 to 1e-1)."""
TRIAL_BLOCK = 1 << 22
"""Values per tensor of a trial step's block (16 MiB in float32)."""
ELEMENTWISE = (torch.optim.Adam, torch.optim.SGD, torch.optim.Adagrad, torch.optim.RMSprop)
"""Optimizers (AdamW is an Adam) whose step and state are elementwise: a parameter's rows step as they would whole."""


def _trial_safe(optimizer: torch.optim.Optimizer) -> bool:
    """Whether a trial step on copies runs this optimizer's own step as it runs on the parameters: torch's
    optimizers and transformers' Adafactor keep their state in the per-parameter dicts alone."""
    if isinstance(optimizer, ELEMENTWISE):
        return True
    try:
        from transformers.optimization import Adafactor
    except ImportError:  # pragma: no cover - transformers is a dependency
        return False
    return isinstance(optimizer, Adafactor)


def adam_constant(beta1: float, beta2: float, step: int) -> float:
    """The most |m_hat| / sqrt(v_hat) can be at Adam's step `step` (1-based), over all gradient histories: with
    m_t = (1 - b1) sum_k b1^(t-k) g_k and v_t = (1 - b2) sum_k b2^(t-k) g_k^2, Cauchy-Schwarz over the weights
    r^(t-k) = (b1 / sqrt(b2))^(t-k) gives |m_t| <= (1 - b1) sqrt((1 - r^2t) / (1 - r^2)) sqrt(v_t / (1 - b2)), and
    the bias corrections multiply it by sqrt(1 - b2^t) / (1 - b1^t). 1 at step 1; ~7.3 later for (0.9, 0.999).
    inf where b1 >= sqrt(b2) (no such bound)."""
    r2 = beta1 * beta1 / beta2
    if not (0.0 <= beta1 < 1.0 and 0.0 < beta2 < 1.0 and r2 < 1.0):
        return math.inf
    return ((1 - beta1) / math.sqrt(1 - beta2) * math.sqrt((1 - r2 ** step) / (1 - r2))
            * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step))


BOUND_MARGIN = 0.5
"""The Adam bound must hold within half the ratio (far from rounding) for the trial to be skipped."""


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor holding this rank's values (a DTensor's local shard; a plain tensor itself)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _copy(t: torch.Tensor) -> torch.Tensor:
    t = _local(t).detach()
    return t.to("cpu", copy=True) if t.is_cuda else t.clone()


def _copy_all(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """dst[i] <- src[i] (one multi-tensor copy when every pair is on one device)."""
    if all(d.device == s.device for d, s in zip(dst, src)):
        torch._foreach_copy_(dst, src)
    else:
        for d, s in zip(dst, src):
            d.copy_(s)


class UpdateGuard:
    """Wraps the optimizer step of one trained model (see the module docstring). `lr_key`: the config key named
    in the error; `limit`: skipped steps in a row that are tolerated."""

    def __init__(self, params: list[nn.Parameter], optimizer: torch.optim.Optimizer, limit: int = 3,
                 dist: Dist = SINGLE, lr_key: str = "optim.lr", limit_key: str = "trainer.bad_update_limit"):
        self.params, self.optimizer, self.limit, self.dist = params, optimizer, limit, dist
        self.lr_key, self.limit_key = lr_key, limit_key
        self.in_a_row = 0  # skipped steps since the last one taken: checkpointed (`state_dict`)
        self.trial = _trial_safe(optimizer)  # else a snapshot before each step, put back when it fails
        self._weights: list[torch.Tensor] | None = None  # the snapshot's buffers, reused every step
        self._state: dict = {}

    # ------------------------------------------------------------------------------------------ the state
    def state_dict(self) -> dict:
        """What the guard's later decisions read from earlier steps: the skipped steps in a row. A checkpoint holds
        it, so a resumed run stops at the step the uninterrupted one stops at (the trial's buffers are scratch,
        refilled at every step)."""
        return {"in_a_row": self.in_a_row}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()` ({} from a checkpoint written before rft saved it: none skipped)."""
        self.in_a_row = int(state.get("in_a_row", 0))

    # ------------------------------------------------------------------------------------------ the copy
    def _snapshot(self) -> tuple[list[torch.Tensor], dict]:
        """A copy of the trainable weights and the optimizer state, into buffers allocated at the first step and
        reused (one multi-tensor copy per kind: no allocation per step). Host memory for cuda tensors."""
        live = [_local(p).detach() for p in self.params]
        if self._weights is None or any(b.shape != t.shape for b, t in zip(self._weights, live)):
            self._weights = [_copy(t) for t in live]
        else:
            _copy_all(self._weights, live)
        state = {}
        for p in self.params:
            if p not in self.optimizer.state:
                continue
            saved = self._state.setdefault(p, {})
            state[p] = {}
            for k, v in self.optimizer.state[p].items():
                if torch.is_tensor(v):
                    local = _local(v).detach()
                    if k not in saved or saved[k].shape != local.shape or saved[k].dtype != local.dtype:
                        saved[k] = _copy(local)
                    else:
                        saved[k].copy_(local)
                    state[p][k] = saved[k]
                else:
                    state[p][k] = v
        return self._weights, state

    @torch.no_grad()
    def _restore(self, snapshot: tuple[list[torch.Tensor], dict]) -> None:
        weights, state = snapshot
        for p, w in zip(self.params, weights):
            _local(p).copy_(w)
        for p in self.params:
            if p not in state:
                self.optimizer.state.pop(p, None)  # it had no state before this step (lazy initialisation)
                continue
            current = self.optimizer.state[p]
            for k in list(current):
                if k not in state[p]:
                    del current[k]
            for k, v in state[p].items():
                if torch.is_tensor(v) and torch.is_tensor(current.get(k)) and _local(current[k]).shape == v.shape:
                    _local(current[k]).copy_(v)
                else:
                    current[k] = v.to(_local(p).device, copy=True) if torch.is_tensor(v) else v

    @torch.no_grad()
    def adam_bound(self) -> float | None:
        """An upper bound of ||w_new - w_old|| / ||w_old|| for the step Adam / AdamW would take now, over every
        rank's shards (`adam_constant`: ||dw|| <= ||lr wd w|| + sqrt(sum lr^2 C_t^2 n)); None for another optimizer
        or weights that are not all finite (the trial decides those)."""
        opt = self.optimizer
        if not isinstance(opt, torch.optim.Adam):
            return None
        decay_sq = adam_sq = weight_sq = 0.0
        for group in opt.param_groups:
            live = [(_local(p).detach(), opt.state.get(p, {})) for p in group["params"]
                    if p.grad is not None and _local(p).numel()]
            if not live:
                continue
            lr, (b1, b2) = float(group["lr"]), group["betas"]
            counts = [torch.as_tensor(s["step"], dtype=torch.float64) for _, s in live if "step" in s]
            steps = {int(t) + 1 for t in torch.stack(counts).unique().tolist()} if counts else set()
            if len(counts) < len(live):  # a parameter without state yet takes its first step
                steps.add(1)
            c = max(adam_constant(b1, b2, t) for t in steps)
            norms = torch.stack(torch._foreach_norm([w for w, _ in live])).double()
            w_sq = float(norms.square().sum())
            weight_sq += w_sq
            decay_sq += (lr * group["weight_decay"]) ** 2 * w_sq
            adam_sq += (lr * c) ** 2 * sum(w.numel() for w, _ in live)
        totals = self.dist.every_process.sum(torch.tensor([decay_sq, adam_sq, weight_sq],
                                                           dtype=torch.float64)).tolist()
        if not all(math.isfinite(x) for x in totals):
            return None
        return (math.sqrt(totals[0]) + math.sqrt(totals[1])) / max(math.sqrt(totals[2]), 1e-12)

    @torch.no_grad()
    def _trial_step(self) -> tuple[bool, float]:
        """(all weights finite after the step, ||w_new - w_old|| / ||w_old||) of the step the optimizer would take,
        over every rank's shards, from the optimizer's own step run on copies, one block at a time; the parameters
        and the optimizer's state are not touched."""
        opt = self.optimizer
        groups, state = opt.param_groups, opt.state
        elementwise = isinstance(opt, ELEMENTWISE)
        nonfinite = delta_sq = weight_sq = 0.0
        try:
            for group in groups:
                for p in group["params"]:
                    live, grad, saved = _local(p).detach(), p.grad, state.get(p, {})
                    if grad is None or live.numel() == 0:
                        continue  # the optimizer leaves it as it is (or this rank holds none of it)
                    grad = _local(grad).detach()
                    blocks: list = [...]  # the whole tensor
                    if elementwise and live.dim():  # rows of at most TRIAL_BLOCK values
                        rows = max(1, TRIAL_BLOCK // max(1, math.prod(live.shape[1:])))
                        blocks = [slice(i, i + rows) for i in range(0, live.shape[0], rows)]
                    for block in blocks:
                        w = live[block].clone()
                        w.grad = grad[block]
                        copied = {k: _local(v)[block if _local(v).shape == live.shape else ...].clone()
                                  if torch.is_tensor(v) else v for k, v in saved.items()}
                        opt.param_groups = [{**group, "params": [w]}]
                        opt.state = defaultdict(dict, {w: copied} if copied else {})
                        opt.step()
                        old = live[block]
                        if not bool(torch.isfinite(w).all()):
                            nonfinite += 1
                        else:
                            delta_sq += float(torch.linalg.vector_norm(w - old, dtype=torch.float64) ** 2)
                            weight_sq += float(torch.linalg.vector_norm(old, dtype=torch.float64) ** 2)
        finally:
            opt.param_groups, opt.state = groups, state
        totals = self.dist.every_process.sum(torch.tensor([nonfinite, delta_sq, weight_sq],
                                                           dtype=torch.float64)).tolist()  # every shard
        return totals[0] == 0, math.sqrt(totals[1]) / max(math.sqrt(totals[2]), 1e-12)

    @torch.no_grad()
    def _update_size(self, before: list[torch.Tensor]) -> tuple[bool, float]:
        """(all new weights finite, ||w_new - w_old|| / ||w_old||) over every rank's shards (multi-tensor norms)."""
        new = [_local(p).detach() for p in self.params]
        old = [b.to(t.device) for b, t in zip(before, new)]
        nonfinite = 0.0
        norms = torch.stack(torch._foreach_norm(new)).double() if new else torch.zeros(0, dtype=torch.float64)
        suspicious = (~torch.isfinite(norms)).nonzero().flatten().tolist()
        nonfinite = float(sum(1 for i in suspicious if not bool(torch.isfinite(new[i]).all())))
        if new:
            deltas = torch.stack(torch._foreach_norm(torch._foreach_sub(new, old))).double()
            weights = torch.stack(torch._foreach_norm(old)).double()
            finite = torch.isfinite(norms)
            delta_sq, weight_sq = float(deltas[finite].square().sum()), float(weights[finite].square().sum())
        else:
            delta_sq = weight_sq = 0.0
        totals = self.dist.every_process.sum(torch.tensor([nonfinite, delta_sq, weight_sq],
                                                    dtype=torch.float64)).tolist()  # every shard
        ratio = math.sqrt(totals[1]) / max(math.sqrt(totals[2]), 1e-12)
        return totals[0] == 0, ratio

    # ------------------------------------------------------------------------------------------ the step
    def step(self, grad_clip: float, model: nn.Module | None = None, losses: Iterable[float] = ()
             ) -> tuple[float, str | None]:
        """Clip the gradient norm to `grad_clip` (<= 0: no clipping) and step, unless the step is bad. Returns
        (gradient norm before clipping, why the step was skipped or None). `model`: the module owning the params
        when it may be sharded (the norm then spans every rank's shard). Raises TrainingDiverged after more than
        `limit` skipped steps in a row."""
        max_norm = grad_clip if grad_clip > 0 else float("inf")
        if model is not None:
            from rft.workers.fsdp import clip_grad_norm

            grad_norm = float(clip_grad_norm(model, self.params, max_norm))
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        bad_losses = [x for x in losses if not math.isfinite(x)]
        reason = None
        if bad_losses:
            reason = f"non-finite loss ({bad_losses[0]})"
        elif not math.isfinite(grad_norm):
            reason = f"non-finite gradient norm ({grad_norm})"
        if reason is None:
            snapshot = None if self.trial else self._snapshot()
            bound = self.adam_bound() if snapshot is None else None
            if bound is not None and bound <= BOUND_MARGIN * EXPLODING_RATIO:
                finite, ratio = True, bound  # proven to pass: the trial would find the same
            elif snapshot is None:
                finite, ratio = self._trial_step()
            else:
                self.optimizer.step()
                finite, ratio = self._update_size(snapshot[0])
            if not finite:
                reason = "non-finite weights after the step"
            elif ratio > EXPLODING_RATIO:
                reason = f"an exploding update (||dw|| = {ratio:.3g} x ||w||)"
            if reason is not None and snapshot is not None:
                self._restore(snapshot)
            elif reason is None and snapshot is None:
                self.optimizer.step()
        if reason is None:
            self.in_a_row = 0
            return grad_norm, None
        self.optimizer.zero_grad(set_to_none=True)
        self.in_a_row += 1
        if self.in_a_row > self.limit:
            raise TrainingDiverged(
                f"{self.in_a_row} optimizer steps in a row were skipped (the last: {reason}; gradient norm "
                f"{grad_norm:.4g}), more than {self.limit_key}={self.limit}: the weights and optimizer state are "
                f"those before the first of them. Lower {self.lr_key} (or check the data and the reward)"
            )
        return grad_norm, reason
