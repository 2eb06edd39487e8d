"""The attention rft's models run under: transformers' SDPA, except for a decode step on the CPU.

A decode step attends one new query per row to the row's whole KV cache. On the CPU, SDPA's kernels do this at a
fraction of what two batched matrix products do: at the W2 benchmark's shape (128 rows, 8 query heads over 4 KV heads,
head_dim 32, ~50 cached positions) PyTorch's flash kernel takes ~390 us a layer and the products below ~260 us
(bench/decode_profile.py prints both). The products group the query heads that share a KV head, so the cache is read
once per KV head and never repeated (`repeat_kv`). Their result is SDPA's up to float rounding (~1e-6).

The engine switches a model to `DECODE_ATTENTION` (`use_decode_attention`); every other call (prefill, training,
GPUs, soft-capped or sink attention, dropout) goes to transformers' SDPA unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

DECODE_ATTENTION = "rft_sdpa"
"""The attention implementation name: SDPA, with decode steps on the CPU as grouped matrix products."""
PACKED_ATTENTION = "rft_packed"
"""The attention implementation name a model with use_remove_padding runs under (`rft.workers.packing`): SDPA on
the rows of a packed call, every other call as `DECODE_ATTENTION`."""
ATTEND_KWARG = "rft_attend"
"""The keyword (passed through the model's forward to its attention) with which the compiled decode step says how
many leading positions of its static KV cache are written: the decode attention reads only those."""


def decode_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention interface. query (B, H, 1, d), key / value (B, KV, L, d), the mask None, boolean
    (True: attended) or additive, broadcastable to (B, H, 1, L). Returns (B, 1, H, d) as transformers' SDPA does."""
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    plain = not any(kwargs.get(name) is not None for name in ("softcap", "s_aux", "sinks", "position_bias"))
    if q_len != 1 or query.device.type != "cpu" or dropout or not plain or heads % kv_heads:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    attend = kwargs.get(ATTEND_KWARG)
    if attend is not None:
        # a static cache: only its first `attend` positions are written yet (the compiled decode step's bucket; a
        # sliding-window layer's shorter buffer is read whole)
        key, value = key[:, :, :attend], value[:, :, :attend]
        if attention_mask is not None:
            attention_mask = attention_mask[..., :attend]
    groups = heads // kv_heads
    q = query.reshape(batch, kv_heads, groups, dim)  # the query heads of a KV head as the rows of one product
    scores = torch.matmul(q, key.transpose(-1, -2))  # (B, KV, G, L)
    scores.mul_(dim ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        mask = attention_mask
        if mask.dim() == 4 and mask.shape[1] == heads and heads > 1:
            mask = mask.reshape(mask.shape[0], kv_heads, groups, mask.shape[-1])
        else:  # (B or 1, 1, 1, L): one mask for every head
            mask = mask.reshape(mask.shape[0], 1, 1, mask.shape[-1])
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))
        else:
            scores.add_(mask)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.matmul(probs, value)  # (B, KV, G, d)
    return out.reshape(batch, 1, heads, value.shape[-1]), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(DECODE_ATTENTION, decode_attention)
    AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


def attention_configs(model: nn.Module):
    """The distinct configs of `model` and its submodules that name an attention implementation."""
    seen = set()
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and id(cfg) not in seen and hasattr(cfg, "_attn_implementation"):
            seen.add(id(cfg))
            yield cfg


def use_decode_attention(model: nn.Module) -> None:
    """Run `model`'s SDPA attention as `DECODE_ATTENTION` from now on (a model on another implementation, eager or
    flash-attn or rft's packed one, keeps it; the packed one does the same for its decode steps)."""
    cfgs = [c for c in attention_configs(model) if c._attn_implementation == "sdpa"]
    if cfgs:
        _register()
    for c in cfgs:
        c._attn_implementation = DECODE_ATTENTION
