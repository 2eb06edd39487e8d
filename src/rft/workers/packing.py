"""The verl keys that make a forward pass cheaper without changing its result: `use_remove_padding` (packed
tokens), `use_dynamic_bsz` (micro-batches by token count) and `use_torch_compile`.

Remove padding (verl's `use_remove_padding`; flash-attn's varlen attention on GPUs). The rows of a micro-batch are
packed into one sequence of their real tokens, (1, T) with T = the tokens the attention masks keep, positions
restarting at 0 in every row; every token-wise layer (embeddings, projections, MLP, norms, the LM head) runs on those
T tokens only. The attention, the one layer that mixes tokens, gets the rows' boundaries (`PackedRows`) through the
attention interface of transformers (`AttentionInterface`, the way flash-attn's varlen kernel is called there): on
this CPU path it lays the packed queries, keys and values out again as (rows, longest row) with each row starting at
column 0 and runs SDPA with `is_causal` (no mask: the padding sits after the real keys, where causality already
hides it), then packs the output back. The LM head runs only on the positions that predict response tokens
(`logits_to_keep` as an index tensor). The result is the padded pass's up to float rounding
(tests/test_packing.py: gradients to 1e-6). Not run here: flash-attn's varlen kernel on a GPU (rft's packed
attention is the CPU-correct path and is what runs on cuda too).

Dynamic batch size (verl's `use_dynamic_bsz` with `ppo_max_token_len_per_gpu` / `log_prob_max_token_len_per_gpu`):
a mini-batch is cut into micro-batches of at most that many real tokens (rows longest first, each into the
micro-batch with the fewest tokens, verl's balanced partition), not a fixed number of rows. Every micro-batch is
aggregated with its whole mini-batch's normaliser (`AggNorm`), so the gradient does not change. With several
processes the number of micro-batches is the largest of any rank (sharded models need every rank in each pass).

torch.compile (verl's `use_torch_compile`): every decoder layer's forward is compiled (`nn.Module.compile`, one graph
shared by the layers, dynamic shapes), for the update and the log-prob passes. A machine where the backend cannot
compile (no C++ compiler for inductor on CPU, ...) runs eagerly, with the reason printed once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from rft.models.arch import architecture, attention_chunk, layer_classes, sliding_window
from rft.models.attention import DECODE_ATTENTION, PACKED_ATTENTION, attention_configs, decode_attention
from rft.models.vision import vision_of

PACKED_ATTR = "_rft_remove_padding"
COMPILED_ATTR = "_rft_compiled"
CPU_SLOW_SDPA = (torch.bfloat16, torch.float16)
"""Dtypes the packed attention computes in float32 on a CPU: PyTorch's CPU SDPA (flash) kernels in bf16 ran 6x
slower than in float32 at the small preset's training shape (128 rows x 8 heads x 80 columns x 32, forward and
backward) and no faster at Qwen2.5-0.5B's (bench/RESULTS.md, 2026-11-26); the matmuls around it stay in bf16."""


def _log(message: str) -> None:
    print(f"rft: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------- packing
@dataclass(frozen=True)
class PackedRows:
    """Where each token of a packed (1, T) sequence sits in the (rows, width) layout of its rows, each row from
    column 0: `row` (T,), `col` (T,). The attention function reads it (passed as the `rft_packed` kwarg)."""

    row: torch.Tensor
    col: torch.Tensor
    rows: int
    width: int
    windows: list | None = field(default=None, compare=False)
    """Where given (the self-check), the sliding window each attention call was given is appended to it; None in
    training, where a list growing per layer would make compiled layers (use_torch_compile) recompile per layer."""
    keys: torch.Tensor | None = None
    """(rows, width) bool: which columns are keys (a padded layout's rows, `rft.workers.ulysses`); None: every
    column up to the row's length, padding after it."""
    src: torch.Tensor | None = None
    """(rows, width): the packed token at every column of the rows (T: none) where a token sits in several rows (a
    prompt its group's rows share, `PackedTokens.src`); None: each token only at (row, col)."""


def _unpack(x: torch.Tensor, packed: PackedRows) -> torch.Tensor:
    """(1, H, T, d) -> (rows, H, width, d), each row's tokens from column 0, zeros after."""
    tokens = x[0].transpose(0, 1)  # (T, H, d)
    if packed.src is not None:  # a shared token read into every row that holds it (its gradients summed back)
        # index_select, not tokens[src]: the backward of advanced indexing is an accumulating index_put, which
        # sorts its indices on a CPU (13 against 2.3 ms forward and backward at the small preset's 128 rows)
        flat = torch.cat([tokens, tokens.new_zeros(1, *tokens.shape[1:])])
        cells = flat.index_select(0, packed.src.reshape(-1)).view(*packed.src.shape, *tokens.shape[1:])
        return cells.transpose(1, 2)  # (rows, H, width, d)
    out = tokens.new_zeros(packed.rows, packed.width, *tokens.shape[1:])
    out = out.index_put((packed.row, packed.col), tokens)
    return out.transpose(1, 2)


def _sdpa(q, k, v, mask, dropout: float, scaling: float | None) -> torch.Tensor:
    """SDPA over (rows, H, width, d) rows, causal where no mask is given; the query heads of a KV head grouped."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                            is_causal=mask is None, scale=scaling,
                                                            enable_gqa=q.shape[1] != k.shape[1])


def packed_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask, dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' attention interface: SDPA on the rows of a packed sequence when the call carries
    `rft_packed` (a `PackedRows`), else `decode_attention` (generation, unpacked passes)."""
    packed = kwargs.pop("rft_packed", None)
    if packed is None:
        return decode_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    unsupported = [name for name in ("softcap", "s_aux", "sinks") if kwargs.get(name) is not None]
    if unsupported:
        raise NotImplementedError(f"packed attention does not apply {', '.join(unsupported)}")
    q = _unpack(query, packed)  # (rows, H, width, d)
    k = _unpack(key, packed)  # (rows, KV, width, d): SDPA groups the query heads of a KV head (no repeat_kv copy)
    v = _unpack(value, packed)
    window = kwargs.get("sliding_window")
    if packed.windows is not None:
        packed.windows.append(window)
    mask = None
    i = torch.arange(packed.width, device=q.device)
    if window and window < packed.width:  # a sliding layer: each query sees the `window` keys up to itself
        mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    if packed.keys is not None:  # padding columns are no keys; a padding query attends to itself (no empty row)
        causal = mask if mask is not None else i[None, :] <= i[:, None]
        mask = ((causal[None] & packed.keys[:, None, :]) | torch.eye(packed.width, dtype=torch.bool,
                                                                       device=q.device))[:, None]
    if q.device.type == "cpu" and (q.dtype in CPU_SLOW_SDPA or (torch.is_autocast_enabled("cpu") and
                                                                torch.get_autocast_dtype("cpu") in CPU_SLOW_SDPA)):
        dtype = q.dtype  # CPU autocast would run SDPA in bf16 / fp16: its float32 kernels are faster here
        with torch.autocast("cpu", enabled=False):
            out = _sdpa(q.float(), k.float(), v.float(), mask, dropout, scaling).to(dtype)
    else:
        out = _sdpa(q, k, v, mask, dropout, scaling)
    out = out.transpose(1, 2)  # (rows, width, H, d); each token's cell read back as `_unpack` reads (index_select)
    out = out.reshape(-1, *out.shape[2:]).index_select(0, packed.row * packed.width + packed.col)  # (T, H, d)
    return out.unsqueeze(0), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    AttentionMaskInterface.register(PACKED_ATTENTION, sdpa_mask)


def enable_remove_padding(model: nn.Module, key: str) -> bool:
    """Run `model`'s forward passes on packed tokens (`forward_packed`) from now on; generation is unchanged (the
    attention implementation falls back to `decode_attention` for a call without packed rows). Checked on a two-row
    batch against the padded forward first: an architecture whose forward does not route its attention through
    transformers' interface runs padded, with the reason printed (`key`: the config key that asked). Returns whether
    it packs."""
    cfgs = list(attention_configs(model))
    # a vision tower attends within each image, whose patches are never packed: it keeps its attention (setting a
    # composite config sets its sub-configs: the towers are set back after)
    towers = [c.vision_config for c in cfgs if getattr(c, "vision_config", None) is not None]
    impls = {c._attn_implementation for c in cfgs if not any(c is t for t in towers)}
    if not cfgs or not impls <= {"sdpa", DECODE_ATTENTION, PACKED_ATTENTION}:
        _log(f"{key}=true: {architecture(model)} uses attention {sorted(map(str, impls))}, not sdpa; running padded")
        return False
    chunk = attention_chunk(cfgs[0])
    if chunk is not None:  # expressed only in the mask the model builds, which a packed call replaces
        _log(f"{key}=true: {architecture(model)} has chunked attention (attention_chunk_size {chunk}), which the "
             "packed attention does not apply; running padded")
        return False
    _register()
    before = [c._attn_implementation for c in cfgs]
    for c in cfgs:
        c._attn_implementation = PACKED_ATTENTION
    for c, impl in zip(cfgs, before):
        if any(c is t for t in towers):
            c._attn_implementation = impl
    setattr(model, PACKED_ATTR, True)
    try:
        ok, why = _self_check(model)
    except Exception as e:  # an architecture that does not take a packed call
        ok, why = False, f"{type(e).__name__}: {e}"
    if not ok:
        setattr(model, PACKED_ATTR, False)
        for c, impl in zip(cfgs, before):
            c._attn_implementation = impl
        _log(f"{key}=true: {architecture(model)} does not run packed ({why}); running padded")
    elif vision_of(model) is not None and not vision_of(model).packs:
        _log(f"{key}=true: {architecture(model)} packs micro-batches of text rows; a micro-batch with images runs "
             f"padded: {vision_of(model).unpacked_reason}")
    return ok


@torch.no_grad()
def _self_check(model: nn.Module) -> tuple[bool, str]:
    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 6), generator=g).to(device)
    attn = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]], device=device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    was = model.training
    model.eval()
    try:
        padded = _logits(model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False))
        row, col = attn.nonzero(as_tuple=True)
        packed = forward_packed(model, pack(ids[row, col], positions[row, col], row, 2), None, windows := [])
    finally:
        model.train(was)
    if not windows:
        return False, "its decoder layers do not hand the packed rows to the attention function"
    window = sliding_window(next(attention_configs(model)))
    if window is not None and window not in windows:
        return False, f"its attention layers do not pass their sliding window ({window}) to the attention function"
    diff = float((padded[row, col] - packed).abs().max())
    return diff < 1e-4, f"packed and padded logits differ by {diff:.3g}"


def _logits(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out[0]


@dataclass(frozen=True)
class PackedTokens:
    """Tokens packed into one sequence (use_remove_padding) and the rows they form: `ids` and `positions` (T,), and
    each token's own cell in the rows' layout, `row` and `col` (T,; every row from column 0), where its output is
    read. `src` (rows, width; T for an empty cell): the token at every cell, where a token also sits in rows other
    than its own (a prompt shared by the responses to it: each of them attends to it, the forward pass computes it
    once); None: each token sits in its own cell only."""

    ids: torch.Tensor
    positions: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    rows: int
    width: int
    src: torch.Tensor | None = None


def pack(ids: torch.Tensor, positions: torch.Tensor, row: torch.Tensor, rows: int) -> PackedTokens:
    """`PackedTokens` of rows laid out one after another: the tokens `ids` (T,) with their `positions` (T,), each in
    the row `row` (T,, ascending), in order."""
    col, lengths = row_columns(row, rows)
    return PackedTokens(ids, positions, row, col, rows, int(lengths.max()))


def row_columns(row: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(each packed token's column in its row (T,), each row's length (rows,)) for the row (T,, ascending) of each
    token of a packed sequence."""
    lengths = torch.bincount(row, minlength=rows)
    return torch.arange(len(row), device=row.device) - (torch.cumsum(lengths, 0) - lengths)[row], lengths


def forward_packed(model: nn.Module, tokens: PackedTokens, keep: torch.Tensor | None,
                   windows: list | None = None, **inputs: torch.Tensor) -> torch.Tensor:
    """The model's output (logits, or a value head's) at the packed positions `keep` (all when None; an index may
    repeat), (len, ·), for the packed `tokens`. `windows`: a list that collects the sliding window each attention
    call was given (None for a full layer). `inputs`: what else the model takes (a vision-language model's pixels,
    its own `position_ids` for M-RoPE: `Vision.packed_kwargs`)."""
    packed = PackedRows(row=tokens.row, col=tokens.col, rows=tokens.rows, width=tokens.width,
                        windows=windows, src=tokens.src)
    ids, positions = tokens.ids, tokens.positions
    cfg = next(attention_configs(model))
    if cfg._attn_implementation != PACKED_ATTENTION:
        raise RuntimeError("forward_packed: the model does not run rft's packed attention (enable_remove_padding)")
    # the attention masks the rows' boundaries itself; a prepared (4-d) mask keeps transformers from building a
    # (T, T) one, which models take as given (an architecture that reads the mask elsewhere fails the self-check)
    placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=ids.device)
    kwargs = {"logits_to_keep": keep} if keep is not None else {}
    kwargs["position_ids"] = positions[None]
    out = model(input_ids=ids[None], attention_mask=placeholder, use_cache=False, rft_packed=packed,
                **{**kwargs, **inputs})
    logits = _logits(out)[0]
    return logits if keep is None or logits.shape[0] == len(keep) else logits[keep]


def packs(model: nn.Module) -> bool:
    """Whether `model`'s forward passes run on packed tokens (use_remove_padding, and the check passed)."""
    return bool(getattr(model, PACKED_ATTR, False))


# ----------------------------------------------------------------------------------------- torch.compile
_COMPILE_OK: tuple[bool, str] | None = None


def compile_backend_works() -> tuple[bool, str]:
    """(whether torch.compile's default backend compiles here, the reason when not): one tiny function compiled
    once per process. The reason is the check's own error (inductor's C++ compiler error, not the wrapper's
    `backend='inductor' raised:`)."""
    global _COMPILE_OK
    if _COMPILE_OK is None:
        cache = inductor_cache_per_capability()
        try:
            fn = torch.compile(lambda x: torch.nn.functional.silu(x) * 2.0 + 1.0, dynamic=True)
            x = torch.randn(5)
            ok = torch.allclose(fn(x), torch.nn.functional.silu(x) * 2.0 + 1.0)
            _COMPILE_OK = (ok, "" if ok else "the compiled function gave a different result")
        except Exception as e:  # no C++ compiler, no Triton, ...
            _COMPILE_OK = (False, compile_error(e))
        if not _COMPILE_OK[0] and cache is None and os.environ.get("ATEN_CPU_CAPABILITY"):
            capability = os.environ["ATEN_CPU_CAPABILITY"]
            folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            _COMPILE_OK = (False, f"{_COMPILE_OK[1]}; ATEN_CPU_CAPABILITY={capability} is set: if "
                           f"TORCHINDUCTOR_CACHE_DIR={folder} holds kernels built under another capability, "
                           "give this one a cache folder of its own")
    return _COMPILE_OK


def compile_error(e: BaseException) -> str:
    """`e`, a failed compile, in a few words: the innermost error (a `BackendCompilerFailed` wraps inductor's)
    and, for a C++ compiler error, its first `error:` line."""
    inner = e
    while getattr(inner, "inner_exception", None) is not None:
        inner = inner.inner_exception
    lines = [x.strip() for x in str(inner).splitlines() if x.strip()]
    text = lines[0] if lines else ""
    compiler = next((x for x in lines if " error: " in x or x.startswith("error: ")), None)
    if compiler and compiler != text:
        text = f"{text}: {compiler.split(' error: ', 1)[-1]}"
    return f"{type(inner).__name__}: {text}"[:240]


def inductor_cache_per_capability() -> str | None:
    """Under ATEN_CPU_CAPABILITY, unless TORCHINDUCTOR_CACHE_DIR names a folder of the user's, a cache folder
    of inductor's own for that capability (its default one with the capability appended), which is returned:
    inductor's on-disk cache is not keyed on the capability, and kernels and precompiled headers built under
    another fail to compile ("'at::vec' has not been declared") or give NaN. None when nothing was set.
    (inductor writes its default into TORCHINDUCTOR_CACHE_DIR once transformers has loaded a model: that one
    is replaced.)"""
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").strip()
    if not capability:
        return None
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        default = os.path.abspath(default_cache_dir())
    except Exception:  # another torch's layout
        return None
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default) != default:
        return None
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder = f"{default}_{capability}"
    return folder


def enable_torch_compile(model: nn.Module, key: str) -> bool:
    """Compile every decoder layer of `model` (its forward: training and log-prob passes; the hf engine runs them
    eagerly, `torch.compiler.set_stance`). Falls back to eager with the reason printed when the backend does not
    compile here. Returns whether the layers are compiled."""
    if getattr(model, COMPILED_ATTR, False):
        return True
    ok, why = compile_backend_works()
    if not ok:
        _log(f"{key}=true: torch.compile does not work on this machine ({why}); running eagerly")
        return False
    try:
        classes = layer_classes(model)
    except ValueError:
        classes = set()
    layers = [m for m in model.modules() if type(m).__name__ in classes]  # GPT-2's GPT2Block, Bloom's BloomBlock too
    if not layers:
        _log(f"{key}=true: {architecture(model)} has no decoder layers to compile; running eagerly")
        return False
    for layer in layers:
        layer.compile(dynamic=True)
    setattr(model, COMPILED_ATTR, True)
    return True


# ------------------------------------------------------------------------------------- dynamic batch size
def token_budget_bins(lengths: Sequence[int], max_tokens: int, key: str, min_bins: int = 1) -> list[list[int]]:
    """Rows (indices into `lengths`, each row's real tokens) grouped into micro-batches of at most `max_tokens`
    tokens: as few as first-fit over the rows longest first allows (at least `min_bins`, at most one per row), then
    the rows dealt longest first into the bin with the fewest tokens (verl's balanced partition, so the bins are
    even). Each bin lists its rows in ascending order; the bins come longest first. Raises ValueError naming `key`
    when one row alone is longer than the budget."""
    if not lengths:
        return []
    longest = max(lengths)
    if longest > max_tokens:
        raise ValueError(f"{key}={max_tokens} is smaller than the longest sequence of the batch ({longest} tokens, "
                         "prompt + response): raise it to at least data.max_prompt_length + "
                         "data.max_response_length")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    fill: list[int] = []
    for i in order:  # first fit, longest first: how many bins the budget needs
        for b, used in enumerate(fill):
            if used + lengths[i] <= max_tokens:
                fill[b] += lengths[i]
                break
        else:
            fill.append(lengths[i])
    k = min(len(lengths), max(len(fill), min_bins))
    bins: list[list[int]] = [[] for _ in range(k)]
    tokens = [0] * k
    for i in order:  # balanced: longest first into the emptiest bin that still has room
        fits = [b for b in range(k) if tokens[b] + lengths[i] <= max_tokens] or list(range(k))
        b = min(fits, key=lambda j: (tokens[j], j))
        bins[b].append(i)
        tokens[b] += lengths[i]
    return [sorted(b) for b in bins if b]


def row_tokens(batch) -> list[int]:
    """Each row's real tokens (prompt + response attention masks) as Python ints."""
    return (batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)).tolist()
