"""Masked reductions and logit helpers shared by the estimators and losses.

Dimension names: B rows (= prompts x n responses), R response tokens, V vocab.
Masks are 0/1 tensors of any dtype (bool, long or float); an entry counts as valid when it is non-zero.
Masked-out entries of ``x`` are never read (``torch.where``, not ``x * mask``), so a NaN or inf sitting
on padding cannot leak into a result or a gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _masked_sum_count(
    x: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    valid = mask.bool()
    total = torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))
    if dim is None:
        return total.sum(), valid.sum().to(x.dtype)
    return total.sum(dim), valid.sum(dim).to(x.dtype)


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """``sum(x * mask) / sum(mask)`` over ``dim`` (all entries when ``dim`` is None).

    Normaliser: the number of valid entries, clamped to at least 1, so an all-masked slice gives exactly 0
    (its numerator is 0) instead of NaN, and no host sync is needed to check for it.
    """
    total, count = _masked_sum_count(x, mask, dim)
    return total / count.clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the valid entries of ``x`` (a scalar), two-pass: ``mean((x - mean)^2)`` over the mask.

    ``unbiased`` applies Bessel's correction ``n / (n - 1)`` with ``n = sum(mask)``. With ``n <= 1`` the
    variance is returned as exactly 0 (no correction, no error): the centred squares of a single entry are
    0, and an empty mask gives 0 through ``masked_mean``.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.bool().sum().to(var.dtype)
        var = torch.where(n > 1, var * n / (n - 1).clamp(min=1.0), var)
    return var


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """``(x - mean) * rsqrt(var + eps)`` with mean and UNBIASED variance over the valid entries of ``x``.

    With ``shift_mean=False`` the mean is added back: ``(x - mean) * rsqrt(var + eps) + mean`` (rescale only).
    Masked-out entries of the result are exactly 0.
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=True)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask.bool(), whitened, torch.zeros((), dtype=whitened.dtype, device=whitened.device))


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[labels] = logits[labels] - logsumexp(logits)``: (B, R, V), (B, R) -> (B, R).

    The full (B, R, V) log-softmax is never materialised; computed in the dtype of ``logits`` (pass float32
    logits for float32 precision).
    """
    picked = logits.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)  # (B, R)
    return picked - torch.logsumexp(logits, dim=-1)  # (B, R)


LOGIT_CHUNK_TOKENS = 1024
"""Token positions per chunk of the vocabulary-wide helpers (entropy, full KL): each chunk's temporaries are
(chunk, V), so the extra memory is bounded whatever the batch and sequence length."""


def _chunks(n: int, chunk_size: int | None) -> list[tuple[int, int]]:
    size = n if not chunk_size or chunk_size >= n else chunk_size
    return [(start, min(start + size, n)) for start in range(0, n, max(size, 1))]


class _ChunkedEntropy(torch.autograd.Function):
    """H(softmax(z)) per row of a (N, V) matrix, chunked over rows in the forward and the backward.

    Only the input logits (already alive in the caller) and the (N,) result are saved; the softmax is
    recomputed chunk by chunk in the backward: dH/dz_j = -p_j (log p_j + H).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, chunk_size: int | None) -> torch.Tensor:
        out = logits.new_empty(logits.shape[0])
        for start, end in _chunks(logits.shape[0], chunk_size):
            z = logits[start:end]
            logp = torch.log_softmax(z, dim=-1)
            out[start:end] = -(logp.exp() * logp).sum(-1)
        ctx.save_for_backward(logits, out)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for start, end in _chunks(logits.shape[0], ctx.chunk_size):
            logp = torch.log_softmax(logits[start:end], dim=-1)
            h = entropy[start:end].unsqueeze(-1)
            grad[start:end] = -grad_out[start:end].unsqueeze(-1) * logp.exp() * (logp + h)
        return grad, None


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = LOGIT_CHUNK_TOKENS) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dim: ``H = logsumexp(z) - sum_v softmax(z)_v * z_v``.

    (..., V) -> (...). Follows from ``H = -sum p log p`` with ``log p = z - logsumexp(z)``. Pass logits that are
    already divided by the sampling temperature. The leading dims are flattened to N token positions and
    processed ``chunk_size`` positions at a time (None: all at once), forward and backward, so the memory on
    top of ``logits`` is (chunk_size, V) instead of a (N, V) softmax kept for autograd; the result and its
    gradient do not depend on ``chunk_size``.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    return _ChunkedEntropy.apply(flat, chunk_size).reshape(logits.shape[:-1])


LINEAR_CHUNK_ELEMENTS = 1 << 25
"""Logits per chunk of `linear_logprobs` (32M floats, 128 MiB a temporary): 220 token positions of a
151,936-token vocabulary, LOGIT_CHUNK_TOKENS of a small one."""


@dataclass(frozen=True)
class LogitMap:
    """What a causal LM does to ``hidden @ W.T + b`` before its softmax: multiply by `scale` (Cohere's
    logit_scale, 1 / Granite's logits_scaling), soft-cap at `softcap` (Gemma 2 / 3: ``c * tanh(x / c)``), divide by
    the sampling `temperature`."""

    scale: float = 1.0
    softcap: float | None = None
    temperature: float = 1.0

    def apply(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | float]:
        """(logits, d logits / d raw) of raw scores."""
        u = raw * self.scale if self.scale != 1.0 else raw
        inv_t = 1.0 / self.temperature if self.temperature > 0 else 1.0
        if self.softcap:
            t = torch.tanh(u / self.softcap)
            return t * (self.softcap * inv_t), (1.0 - t * t) * (self.scale * inv_t)
        return (u * inv_t if inv_t != 1.0 else u), self.scale * inv_t


class _LinearLogprobs(torch.autograd.Function):
    """Log-prob of each label and entropy under softmax(map(hidden @ W.T + b)) for (N, H) hidden states, without
    the (N, V) logits: the forward goes a chunk of positions at a time, the backward a block of the vocabulary at a
    time (as fused linear-cross-entropy kernels do, the block's logits recomputed), with as many logits per block
    as the forward's chunk holds. Saved: the inputs (alive in the caller anyway) and two (N,) vectors.

    Over vocabulary blocks each row of the weight's gradient is written once, from one product over all N
    positions, where position chunks would add a (V, H) product into it per chunk; the hidden states' (N, H)
    gradient is what accumulates. Under autocast the backward's products (the block's logits again, both
    gradients) compute in the autocast dtype as the forward's did, over the block's rows of the weight cast (an
    autograd Function's backward runs outside autocast: in float32 they took 4.3 of the 5.5 s of Qwen2.5-0.5B's
    head at 1,000 positions, bf16 products run 3.8x faster on an AMX CPU)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, logit_map: LogitMap, chunk: int):
        n = hidden.shape[0]
        dtype = torch.promote_types(hidden.dtype, torch.float32)  # float32 at least, as the logits' softmax is
        logprobs, entropy, lse = (hidden.new_empty(n, dtype=dtype) for _ in range(3))
        for start, end in _chunks(n, chunk):
            raw = torch.nn.functional.linear(hidden[start:end], weight, bias).to(dtype)
            z, _ = logit_map.apply(raw)
            del raw  # (n, V) buffers: at most two at a time, in place where the values are the same
            lse[start:end] = torch.logsumexp(z, dim=-1)
            logp = z.sub_(lse[start:end, None])
            logprobs[start:end] = logp.gather(-1, labels[start:end, None]).squeeze(-1)
            entropy[start:end] = -logp.exp().mul_(logp).sum(-1)
            del z, logp
        ctx.save_for_backward(hidden, weight, bias, labels, lse, entropy)
        ctx.logit_map, ctx.chunk = logit_map, chunk
        device = hidden.device.type
        ctx.compute = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        with torch.autocast(ctx.saved_tensors[0].device.type, enabled=False):
            return _LinearLogprobs._backward(ctx, grad_logprobs, grad_entropy)

    @staticmethod
    def _backward(ctx, grad_logprobs, grad_entropy):
        hidden, weight, bias, labels, lse, entropy = ctx.saved_tensors
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        n, vocab = hidden.shape[0], weight.shape[0]
        dtype = lse.dtype
        compute = ctx.compute if ctx.compute is not None and ctx.compute != weight.dtype else weight.dtype
        grad_h = torch.zeros_like(hidden, dtype=dtype) if want_h else None
        grad_w = torch.empty_like(weight) if want_w else None  # each row written once
        grad_b = torch.empty_like(bias) if want_b and bias is not None else None
        h = hidden.to(compute)
        block = max(1, ctx.chunk * vocab // max(n, 1))  # vocabulary rows a block: the forward chunk's logits
        for v0, v1 in _chunks(vocab, block):
            w = weight[v0:v1].to(compute)
            raw = torch.nn.functional.linear(h, w, None if bias is None else bias[v0:v1].to(compute)).to(dtype)
            z, dz_draw = ctx.logit_map.apply(raw)
            del raw
            # (n, block) buffers: three at most, in place where the values are those of the plain expressions
            logp = z.sub_(lse[:, None])
            p = logp.exp()
            # d logprob[label] / dz = onehot - p; d entropy / dz = -p (log p + H)
            if grad_entropy is not None:  # -(g_H * p) * (log p + H)
                dz = logp.add_(entropy[:, None])
                dz.mul_(torch.mul(p, grad_entropy[:, None]).neg_())
            else:
                dz = logp.zero_()
            del z, logp
            if grad_logprobs is not None:
                dz.sub_(p.mul_(grad_logprobs[:, None]))
                inside = ((labels >= v0) & (labels < v1)).nonzero().squeeze(-1)  # the positions labelled here
                dz.index_put_((inside, labels[inside] - v0), grad_logprobs[inside], accumulate=True)
            del p
            draw = (dz.mul_(dz_draw) if torch.is_tensor(dz_draw) or dz_draw != 1.0 else dz).to(compute)
            if want_h:
                grad_h += draw @ w
            if want_w:
                grad_w[v0:v1] = draw.t() @ h
            if grad_b is not None:
                grad_b[v0:v1] = draw.sum(0, dtype=dtype)
        return (grad_h.to(hidden.dtype) if grad_h is not None else None, grad_w, grad_b, None, None, None)


def linear_chunk(vocab: int, chunk_tokens: int | None) -> int:
    """Token positions per chunk of `linear_logprobs` over a `vocab`-row head: at most `chunk_tokens` (None: no
    bound of its own) and at most LINEAR_CHUNK_ELEMENTS logits."""
    chunk = max(1, LINEAR_CHUNK_ELEMENTS // vocab)
    return min(chunk, chunk_tokens) if chunk_tokens else chunk


def linear_logprobs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                    logit_map: LogitMap = LogitMap(), chunk_tokens: int | None = LOGIT_CHUNK_TOKENS
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropies) of `labels` (...,) under softmax(logit_map(hidden @ weight.T + bias)) for hidden
    states (..., H), without the (..., V) logits: the forward computed a chunk of positions at a time (at most
    `chunk_tokens`, and at most LINEAR_CHUNK_ELEMENTS logits; None: only the second bound), the backward a block
    of the vocabulary holding as many logits.
    Equal to `logprobs_from_logits` and `entropy_from_logits` on the full logits up to float rounding; the
    entropy's gradient flows only where the caller keeps it attached."""
    shape = labels.shape
    flat = hidden.reshape(-1, hidden.shape[-1])
    chunk = linear_chunk(weight.shape[0], chunk_tokens)
    logprobs, entropy = _LinearLogprobs.apply(flat, weight, bias, labels.reshape(-1).long(), logit_map, chunk)
    return logprobs.reshape(shape), entropy.reshape(shape)


@torch.no_grad()
def sum_pi_squared_from_logits(logits: torch.Tensor, chunk_size: int | None = LOGIT_CHUNK_TOKENS) -> torch.Tensor:
    """``sum_v softmax(z)_v^2 = exp(logsumexp(2 z) - 2 logsumexp(z))`` over the last dim: (..., V) -> (...),
    without gradient. The optimal token baseline's ``||s_t||^2 = 1 - 2 pi_t + sum_v pi_v^2`` needs it (verl's
    ``calculate_sum_pi_squared_from_logits``). Pass temperature-scaled logits; computed ``chunk_size`` positions
    at a time like the entropy."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = flat.new_empty(flat.shape[0])
    for start, end in _chunks(flat.shape[0], chunk_size):
        z = flat[start:end]
        out[start:end] = torch.exp(torch.logsumexp(2.0 * z, dim=-1) - 2.0 * torch.logsumexp(z, dim=-1))
    return out.reshape(logits.shape[:-1])


@torch.no_grad()
def entropy_statistics_from_logits(logits: torch.Tensor, chunk_size: int | None = LOGIT_CHUNK_TOKENS
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(H, N) over the last dim, (..., V) -> (...) each, without gradient: the entropy H = -sum_v p_v log p_v and
    N = H sum_v p_v^2 + sum_v p_v^2 log p_v (the entropy filters' statistic, ``rft.algorithms.entropy_clip``), in
    float32, ``chunk_size`` positions at a time. Pass temperature-scaled logits."""
    flat = logits.reshape(-1, logits.shape[-1])
    h, n = (flat.new_empty(flat.shape[0], dtype=torch.float32) for _ in range(2))
    for start, end in _chunks(flat.shape[0], chunk_size):
        logp = torch.log_softmax(flat[start:end].float(), dim=-1)
        p = logp.exp()
        p2 = p * p
        h[start:end] = -(p * logp).sum(-1)
        n[start:end] = h[start:end] * p2.sum(-1) + (p2 * logp).sum(-1)
    return h.reshape(logits.shape[:-1]), n.reshape(logits.shape[:-1])
