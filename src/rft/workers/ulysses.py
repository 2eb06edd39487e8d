"""Ulysses sequence parallelism (verl's `ulysses_sequence_parallel_size`, DeepSpeed-Ulysses): the processes of a
group of `sp` hold the same micro-batch and each runs the model on 1/sp of its tokens, so the activations of a long
sequence are split between them.

Every layer but the attention works token by token, so it runs on the process's slice as it is. The attention
exchanges its inputs all-to-all: each process sends every other one the heads that one computes, and receives the
whole sequence for its H/sp query heads (queries, keys and values (1, heads, T/sp, d) -> (1, heads/sp, T, d));
it attends over the whole sequence (rft's packed attention: rows, causality, sliding windows) and sends the
result back the same way. A model with fewer KV heads than sp repeats each KV head sp / KV times first, as verl
does (sp must then be a multiple of the KV heads; the query heads always divide by sp).

The micro-batch's tokens are laid out as the forward pass without sequence parallelism lays them out: the real
tokens packed with use_remove_padding, the padded rows (padding included, masked as keys) without; then padded to a
multiple of sp with tokens of a row of their own. Each process computes the outputs its slice holds (the log-prob
and entropy of each response token it predicts, or the critic's value) and one all-reduce puts them together on
every process of the group. Its backward passes each process its own share's gradient unchanged: every process of
the group computes the same loss from the same outputs, so one copy of the gradient reaches each token, and the
sum over the processes FSDP makes is the data-parallel gradient (verl scales the gradient of its gather by sp for
the same reason). A mixture of experts' load-balancing loss is computed from the router logits of the whole
sequence, gathered the same way.

Collectives: all-to-all and all-reduce, which NCCL and gloo both have (on this CPU over gloo).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from rft.errors import ModelError
from rft.models.arch import architecture, attention_chunk, router_recorder
from rft.models.attention import attention_configs
from rft.models.load import device_of
from rft.workers.packing import PACKED_ATTENTION, PackedRows, _logits, packed_attention, row_columns

ULYSSES_ATTENTION = "rft_ulysses"
"""The attention implementation of a sequence-parallel model: Ulysses' exchange around rft's packed attention for
a call that carries `ULYSSES_KWARG`, the packed attention (and its decode attention) for every other call."""
ULYSSES_KWARG = "rft_ulysses"
_ATTR = "_rft_sequence_parallel"


@dataclass(frozen=True)
class SPGroup:
    """This process's sequence-parallel group: its process group, its rank in it and its size."""

    group: object
    rank: int
    size: int


_GROUPS: dict[tuple[int, int], SPGroup] = {}


def sp_group(dist) -> SPGroup | None:
    """The sequence-parallel group of `dist` (a `rft.distributed.Dist`), None without one. Every process makes
    every group (torch.distributed.new_group is collective), once per process."""
    if dist.sp <= 1:
        return None
    key = (dist.processes, dist.sp)
    if key not in _GROUPS:
        mine = None
        for first in range(0, dist.processes, dist.sp):
            group = torch.distributed.new_group(list(range(first, first + dist.sp)))
            if first == dist.rank * dist.sp:
                mine = group
        _GROUPS[key] = SPGroup(mine, dist.sp_rank, dist.sp)
    return _GROUPS[key]


# ------------------------------------------------------------------------------------------- collectives
class _AllToAll(torch.autograd.Function):
    """(sp, ...) -> (sp, ...): part j goes to process j; part i of the result came from process i. Its own
    inverse, so the backward is the same exchange of the gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return _all_to_all(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _all_to_all(grad, ctx.group), None


def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    torch.distributed.all_to_all_single(out, x, group=group)
    return out


class _SumOfShares(torch.autograd.Function):
    """The sum over the group of each process's share (zeros outside it); the backward hands each process the
    gradient of its share unchanged (every process computes the same loss of the sum: one copy is the gradient)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        out = x.detach().clone()
        torch.distributed.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def heads_to_sequence(x: torch.Tensor, sp: SPGroup) -> torch.Tensor:
    """(1, heads, T/sp, d), this process's tokens of every head -> (1, heads/sp, T, d), every token of its heads."""
    _, heads, local, dim = x.shape
    parts = _AllToAll.apply(x.reshape(sp.size, heads // sp.size, local, dim), sp.group)  # part i: process i's
    return parts.transpose(0, 1).reshape(1, heads // sp.size, sp.size * local, dim)


def sequence_to_heads(x: torch.Tensor, sp: SPGroup) -> torch.Tensor:
    """(1, T, heads/sp, d), every token of this process's heads -> (1, T/sp, heads, d), its tokens of every head."""
    _, tokens, heads, dim = x.shape
    parts = _AllToAll.apply(x.reshape(sp.size, tokens // sp.size, heads, dim), sp.group)  # part j: heads of j
    return parts.transpose(0, 1).reshape(1, tokens // sp.size, sp.size * heads, dim)


# --------------------------------------------------------------------------------------------- attention
@dataclass(frozen=True)
class UlyssesCall:
    """What the attention of a sequence-parallel pass needs beside its inputs (passed as `ULYSSES_KWARG`): the group
    and the rows of the whole (padded) sequence."""

    sp: SPGroup
    packed: PackedRows


def ulysses_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask, dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' attention interface: with `ULYSSES_KWARG`, the exchange around the packed attention over the
    whole sequence; otherwise the packed attention's own behaviour (generation, a pass without the group)."""
    call: UlyssesCall | None = kwargs.pop(ULYSSES_KWARG, None)
    if call is None:
        return packed_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                **kwargs)
    sp = call.sp
    kv = key.shape[1]
    if kv < sp.size:  # each KV head repeated so that every process gets one (verl's repeat_kv)
        key = key.repeat_interleave(sp.size // kv, dim=1)
        value = value.repeat_interleave(sp.size // kv, dim=1)
    q, k, v = (heads_to_sequence(x, sp) for x in (query, key, value))
    out, _ = packed_attention(module, q, k, v, None, dropout=dropout, scaling=scaling, rft_packed=call.packed,
                              **kwargs)  # (1, T, heads/sp, d)
    return sequence_to_heads(out, sp), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ULYSSES_ATTENTION, ulysses_attention)
    AttentionMaskInterface.register(ULYSSES_ATTENTION, sdpa_mask)


def heads_error(config, sp: int) -> str | None:
    """Why a model of `config` cannot split its attention heads over `sp` processes, or None."""
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if not heads:
        return "its config names no num_attention_heads"
    if heads % sp:
        return f"its {heads} attention heads do not divide by {sp}"
    if kv % sp and sp % kv:
        return f"its {kv} key-value heads neither divide by {sp} nor divide it (verl repeats them up to {sp})"
    return None


# ------------------------------------------------------------------------------------------ enabling
def enable_sequence_parallel(model: nn.Module, dist, key: str) -> None:
    """Run `model`'s update and log-prob passes split over `dist`'s sequence-parallel group (`sequence_parallel`).
    Checked on a small batch against the same pass on one process; an architecture whose attention does not go
    through transformers' interface, or whose heads do not split, raises ModelError naming `key`. Every
    process of the run calls it at once (it makes the groups)."""
    sp = sp_group(dist)
    if sp is None:
        return
    cfgs = list(attention_configs(model))
    impls = {c._attn_implementation for c in cfgs}
    name = architecture(model)
    if not cfgs or not impls <= {"sdpa", "rft_sdpa", PACKED_ATTENTION, ULYSSES_ATTENTION}:
        raise ModelError(f"{key}={sp.size}: {name} uses attention {sorted(map(str, impls))}, not sdpa, which the "
                         "sequence-parallel attention replaces; set it to 1")
    chunk = attention_chunk(cfgs[0])
    if chunk is not None:  # expressed only in the mask the model builds, which the split pass replaces
        raise ModelError(f"{key}={sp.size}: {name} has chunked attention (attention_chunk_size {chunk}), which the "
                         "sequence-parallel attention does not apply; set it to 1")
    why = heads_error(cfgs[0], sp.size)
    if why:
        raise ModelError(f"{key}={sp.size}: {name} cannot split its sequences over {sp.size} processes ({why}); "
                         "set it to a size that fits, or 1")
    _register()
    for c in cfgs:
        c._attn_implementation = ULYSSES_ATTENTION
    setattr(model, _ATTR, sp)
    try:
        ok, why = _self_check(model, sp)
    except NotImplementedError as e:  # soft-capping, sinks: not in the packed attention
        ok, why = False, str(e)
    if not ok:
        raise ModelError(f"{key}={sp.size}: {name} does not run sequence-parallel ({why}); set it to 1")


def sequence_parallel(model: nn.Module) -> SPGroup | None:
    """The group `model`'s passes are split over (`enable_sequence_parallel`), None when they are not."""
    return getattr(model, _ATTR, None)


@torch.no_grad()
def _self_check(model: nn.Module, sp: SPGroup) -> tuple[bool, str]:
    """The split pass's logits of a two-row batch (one row left-padded, 13 tokens: the slices cut through rows)
    against the model's own padded pass, in both layouts (every process computes all three)."""
    device = device_of(model)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    vocab = config.vocab_size  # (under FSDP1 the embedding's weight outside a forward pass is this rank's shard)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 13), generator=g).to(device)
    attn = torch.ones_like(ids)
    attn[0, :3] = 0  # a left-padded prompt of 4 columns, 9 response tokens
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    was = model.training
    model.eval()
    try:
        whole = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False).logits.float()
        lm = getattr(model, "get_output_embeddings", lambda: None)() is not None  # not a value model
        diff = 0.0
        for packed in (True, False):
            split = split_outputs(model, ids, attn, positions, 4, lambda out, labels: out.float(),
                                  whole.shape[-1], packed=packed, lm=lm)  # (2, 9, V): the outputs before 4..12
            diff = max(diff, float((whole[:, 3:-1] - split).abs().max()))
    finally:
        model.train(was)
        _reshard(model)
    return diff < 1e-4, f"its split logits differ from the whole pass's by {diff:.3g}"


def _reshard(model: nn.Module) -> None:
    """FSDP2 keeps the root's parameters gathered after a forward pass without gradients, registered on the model
    in place of its sharded ones until the next backward: sharded again, so that an optimizer built next holds the
    sharded parameters."""
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


# ----------------------------------------------------------------------------------------- the split pass
@dataclass(frozen=True)
class _Layout:
    """A micro-batch's tokens as one sequence (T,) padded to a multiple of sp: each token's id, position, row and
    column in `PackedRows`; `index` (B, W): each window column's place in the sequence (-1: left out)."""

    ids: torch.Tensor
    positions: torch.Tensor
    packed: PackedRows
    index: torch.Tensor

    @classmethod
    def of(cls, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, packed: bool, sp: int) -> _Layout:
        rows, width = ids.shape
        if packed:  # the real tokens (contiguous in each row), columns from 0
            row, _ = attn.nonzero(as_tuple=True)
            col, lengths = row_columns(row, rows)
            keys, index = None, torch.full_like(ids, -1)
            index[attn.bool()] = torch.arange(len(row), device=ids.device)
            seq_ids, seq_pos, width = ids[attn.bool()], positions[attn.bool()], int(lengths.max())
        else:  # every column, the padding masked as keys
            row = torch.arange(rows, device=ids.device).repeat_interleave(width)
            col = torch.arange(width, device=ids.device).repeat(rows)
            keys, index = attn.bool(), torch.arange(rows * width, device=ids.device).reshape(rows, width)
            seq_ids, seq_pos = ids.flatten(), positions.flatten()
        extra = -len(seq_ids) % sp  # a row of its own, attending to itself only
        if extra:
            fill = torch.arange(extra, device=ids.device)
            seq_ids = torch.cat([seq_ids, torch.zeros_like(fill)])
            seq_pos = torch.cat([seq_pos, fill])
            row, col = torch.cat([row, torch.full_like(fill, rows)]), torch.cat([col, fill])
            if keys is not None:
                keys = torch.nn.functional.pad(keys, (0, max(0, extra - width)))
                keys = torch.cat([keys, torch.ones_like(keys[:1])])
            rows, width = rows + 1, max(width, extra)
        return cls(seq_ids, seq_pos, PackedRows(row=row, col=col, rows=rows, width=width, keys=keys), index)


class _GatherShares(torch.autograd.Function):
    """Every process's (n, ...) share concatenated in group order; the backward keeps this process's share of the
    gradient (every process computes the same loss of the whole)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group, rank: int, size: int) -> torch.Tensor:
        ctx.rank, ctx.n = rank, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(size)]
        torch.distributed.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[ctx.rank * ctx.n:(ctx.rank + 1) * ctx.n], None, None, None


def split_outputs(model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, p_len: int,
                  fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], width: int, packed: bool,
                  lm: bool = True) -> torch.Tensor:
    """(B, W - p_len, `width`): `fn(outputs (n, C), labels (n,))` of the model's outputs at the positions that
    predict each response token (column p_len + t - 1 for token t at column p_len + t) of the window `ids` /
    `attn` / `positions` (B, W), computed by the processes of `model`'s group on their slices; 0 where a row has no
    token. `packed`: the real tokens only (use_remove_padding), else the padded rows. `lm`: the model takes
    `logits_to_keep` (a causal LM; not a value model, whose outputs are read at the kept positions)."""
    sp = sequence_parallel(model)
    layout = _Layout.of(ids, attn, positions, packed, sp.size)
    target = attn[:, p_len:].bool()  # (B, r): the response tokens
    b, t = target.nonzero(as_tuple=True)
    keep = layout.index[b, p_len + t - 1]  # the sequence positions that predict them
    labels = ids[b, p_len + t]
    local = len(layout.ids) // sp.size
    lo = sp.rank * local
    mine = ((keep >= lo) & (keep < lo + local)).nonzero().flatten()
    here = keep[mine] - lo
    router = router_recorder(model) if torch.is_grad_enabled() else None
    if router is not None:
        router.start()
    placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=ids.device)  # the attention masks by itself
    kwargs = {"logits_to_keep": here} if lm else {}
    out = model(input_ids=layout.ids[None, lo:lo + local], position_ids=layout.positions[None, lo:lo + local],
                attention_mask=placeholder, use_cache=False, **{ULYSSES_KWARG: UlyssesCall(sp, layout.packed)},
                **kwargs)
    out = _logits(out)[0]
    if not lm or out.shape[0] != len(here):
        out = out[here]
    values = fn(out, labels[mine])  # (n, width)
    share = values.new_zeros(len(keep), width).index_put((mine,), values)
    whole = _SumOfShares.apply(share, sp.group)
    if router is not None:  # the load-balancing loss of the whole sequence's real tokens
        real = layout.index[attn.bool()]
        router.logits = [_GatherShares.apply(x.reshape(local, -1), sp.group, sp.rank, sp.size)[real]
                         for x in (router.logits or [])]
        router.stop(None)
    return whole.new_zeros(*target.shape, width).index_put((b, t), whole)

