"""The policy worker: log-probs and PPO-style updates with mini- and micro-batches.

It does not know which algorithm runs: it gets a Batch with advantages and the names of a policy loss, a KL
estimator and an aggregation mode. The update loop (epochs, mini-batches counted in prompts, micro-batches in rows,
each aggregated with the whole mini-batch's normaliser) is `workers/minibatch.py`'s, shared with the critic. Two
capabilities are asked of the registries, never of a name: a KL estimator that `kl_needs_logits` (``full``) makes
the worker run the reference on each micro-batch (no gradient) for its logits; a policy loss that
`policy_loss_needs_minibatch` (clip_cov, kl_cov; bypass_mode's batch-normalised weights) gets the detached inputs
of its whole mini-batch (one extra no-gradient forward pass per mini-batch, only when the mini-batch is split).
The loss runs on `loss_tokens` (the response tokens rollout correction's rejection sampling kept) and multiplies the
batch's rollout-correction IS weights in (`Batch.rollout_is_weights`), both set by the trainer. With algorithm.mix
the batch also holds expert rows (`Batch.expert_mask`): the policy loss, entropy and KL skip them, and they carry
mu times the SFT loss, aggregated with the mini-batch's normaliser of the expert rows (`expert_tokens`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields, replace

import torch
from torch import nn

from rft.algorithms import (
    LOGIT_CHUNK_TOKENS,
    AggNorm,
    PolicyLossInputs,
    RecOptions,
    agg_loss,
    compute_policy_loss,
    distill_divergence,
    distill_needs_logits,
    entropy_from_logits,
    entropy_statistics_from_logits,
    kl_needs_logits,
    kl_penalty,
    logprobs_from_logits,
    policy_loss_needs_minibatch,
    policy_loss_zero_at_zero_advantage,
    sum_pi_squared_from_logits,
)
from rft.algorithms.rollout_correction import rollout_probs_diff_metrics
from rft.batch import Batch
from rft.distributed import SINGLE, Dist
from rft.models.arch import router_recorder
from rft.models.load import device_of
from rft.models.precision import autocast
from rft.models.vision import Vision, forward_function, vision_of
from rft.workers.lm_head import Head, head_chunk, head_input, head_logprobs, lm_head
from rft.workers.minibatch import (  # noqa: F401  (build_optimizer, build_scheduler: re-exported)
    MiniBatchWorker,
    build_optimizer,
    build_scheduler,
    expert_tokens,
    loss_tokens,
    mini_batch_norm,
)
from rft.workers.packing import (
    PackedTokens,
    forward_packed,
    pack,
    packs,
    row_columns,
    row_tokens,
    token_budget_bins,
)
from rft.workers.ulysses import sequence_parallel, split_outputs


def response_window(batch: Batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """(input_ids, attention_mask, position_ids) of `batch` on `device` with the columns that are padding in every
    row trimmed, the prompt width p and the response width r (at least 1) kept. Position p - 1 + t predicts
    response token t (and holds the critic's value of the state before it)."""
    P = batch.prompt_ids.shape[1]
    p_len = int(batch.prompt_mask.sum(-1).max())
    r_len = max(1, int(batch.response_mask.sum(-1).max()))
    ids = torch.cat([batch.prompt_ids[:, P - p_len:], batch.response_ids[:, :r_len]], dim=1).to(device)
    attn = torch.cat([batch.prompt_mask[:, P - p_len:], batch.response_mask[:, :r_len]], dim=1).to(device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, positions, p_len, r_len


def padded_inputs(model: nn.Module, batch: Batch, vision: Vision | None) -> tuple[dict, int, int]:
    """The keyword inputs of a padded forward over `response_window` (input_ids, attention_mask, position_ids and,
    for a vision-language model, its pixel inputs; positions left to the model where they depend on the images,
    M-RoPE), with the prompt and response widths p and r."""
    ids, attn, positions, p_len, r_len = response_window(batch, device_of(model))
    extra = {}
    if vision is not None:
        extra = vision.model_kwargs(batch.images, ids, forward_function(model))
        if vision.mrope:  # positions that depend on the images: the model computes them
            positions = None
    return {"input_ids": ids, "attention_mask": attn, "position_ids": positions, **extra}, p_len, r_len


def forward_logits(model: nn.Module, batch: Batch, temperature: float,
                   head: Head | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (B, r, V) of softmax(logits / temperature), labels (B, r)) at the response positions; with `head`
    (`lm_head`), the hidden states (B, r, H) that head reads there instead of its logits (no temperature applied).

    Columns that are padding in every row are trimmed first (`response_window`), so r = the longest response of
    `batch` (at least 1) <= R, and the LM head runs only on the positions that predict response tokens
    (`logits_to_keep`).
    """
    if sequence_parallel(model) is not None:  # the config checks refuse what needs whole logits (rft.workers.checks)
        raise NotImplementedError("the logits of a whole micro-batch are not computed under sequence parallelism")
    router = router_recorder(model) if torch.is_grad_enabled() else None
    if router is not None:  # a mixture of experts in a pass with gradients: its load-balancing loss too
        router.start()
    attn = None
    vision = vision_of(model) if any(batch.images) else None
    with autocast(model), head_input(model, head) if head is not None else nullcontext() as store:
        if packs(model) and (vision is None or vision.packs):  # a router's load-balancing loss counts every
            # row's tokens: no prompt shared then
            logits, labels = _packed_logits(model, batch, store, share_prompts=router is None, vision=vision)
        else:  # padded; rows with images of a family that does not pack them (`rft.models.vision`)
            inputs, p_len, r_len = padded_inputs(model, batch, vision)
            attn = inputs["attention_mask"]
            logits = model(**inputs, use_cache=False, logits_to_keep=r_len + 1).logits
            # (B, r_len, V), or the head's input (B, r_len, H)
            logits = store["hidden"][:, -(r_len + 1):-1] if store is not None else logits[:, :-1].float()
            labels = inputs["input_ids"][:, p_len:]
    if router is not None:
        router.stop(attn)
    if head is None and temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return logits, labels


@dataclass(frozen=True)
class PackedWindow:
    """The window of `response_window` packed (use_remove_padding): `tokens` (T), each token's response index `t`
    (T,: t for response token t of its row, -1 for a prompt token) and, for each response token in packed order
    (`(t >= 0).nonzero()`), the packed index of the token before it in its row, whose output predicts it
    (`before`, N; repeated where responses share the prompt whose last token predicts their first). `ids`, `attn`
    (B, W): the window `response_window` laid out padded; `col` (T,): each packed token's column in it
    (its row: `tokens.row`); `owner` (B,): the row whose prompt tokens each row's response reads (itself unless
    shared)."""

    tokens: PackedTokens
    t: torch.Tensor
    before: torch.Tensor
    ids: torch.Tensor
    attn: torch.Tensor
    col: torch.Tensor
    owner: torch.Tensor


def packed_window(batch: Batch, device: torch.device, share_prompts: bool = True) -> PackedWindow:
    """The real tokens of `batch` packed, with the padding of `response_window` left out and (`share_prompts`)
    each prompt that several rows hold (the responses to one prompt, a GRPO group) packed once: every token-wise
    layer computes it once, and the attention lays it out again in front of each response (its gradient summed over
    them), which is exactly the padded pass's result, with the prompts' share of the work divided by the group size.
    (Not exact for what counts tokens across the batch rather than per row: a mixture of experts' load-balancing
    loss, whose pass does not share.) Positions count each row's real tokens from 0, as the padded pass's do. Rows
    with images share a prompt only where its images are the same too (one question asked of several pictures is
    several prompts)."""
    ids, attn, positions, p_len, _ = response_window(batch, device)
    B, W = ids.shape
    real = attn.bool()
    rows = torch.arange(B, device=device)
    # (B,) the first row holding each row's prompt
    owner = prompt_owners(ids[:, :p_len], real[:, :p_len], batch.images) if share_prompts else rows
    own = real.clone()
    own[:, :p_len] &= (owner == rows)[:, None]  # a shared prompt's tokens packed with its first row only
    row, col = own.nonzero(as_tuple=True)  # row-major: each row's tokens in order
    T = len(row)
    t = torch.where(col >= p_len, col - p_len, torch.full_like(col, -1))
    response = (t >= 0).nonzero().flatten()
    if bool((owner == rows).all()):  # nothing shared: each row's tokens, one row after another
        return PackedWindow(pack(ids[row, col], positions[row, col], row, B), t, response - 1, ids, attn, col,
                            owner)
    index = torch.full((B, W), T, dtype=torch.long, device=device)
    index[row, col] = torch.arange(T, device=device)
    cell = torch.cat([index[owner, :p_len], index[:, p_len:]], dim=1)  # (B, W): the token at each real column
    real_row, real_col = real.nonzero(as_tuple=True)
    layout_col, lengths = row_columns(real_row, B)  # each real column's place in its row's layout
    layout = torch.full((B, W), -1, dtype=torch.long, device=device)
    layout[real_row, real_col] = layout_col
    src = torch.full((B, int(lengths.max())), T, dtype=torch.long, device=device)
    src[real_row, layout_col] = cell[real_row, real_col]
    tokens = PackedTokens(ids[row, col], positions[row, col], row, layout[row, col], B, src.shape[1], src)
    return PackedWindow(tokens, t, src[row[response], tokens.col[response] - 1], ids, attn, col, owner)


def prompt_owners(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                  images: list[list[bytes]] | None = None) -> torch.Tensor:
    """(B,) for each row, the first row whose prompt (its real tokens, and its `images` when rows have some) is
    the same: the row itself unless an earlier one holds its prompt."""
    key = torch.cat([prompt_ids * prompt_mask, prompt_mask.long()], dim=1)
    if images is not None and any(images):
        seen: dict[tuple, int] = {}
        same = [seen.setdefault(tuple(row), len(seen)) for row in images]
        key = torch.cat([key, torch.tensor(same, device=key.device)[:, None]], dim=1)
    _, group = torch.unique(key, dim=0, return_inverse=True)
    rows = torch.arange(len(key), device=key.device)
    first = torch.full((int(group.max()) + 1,), len(key), dtype=torch.long, device=key.device)
    return first.scatter_reduce(0, group, rows, "amin")[group]


def _packed_logits(model: nn.Module, batch: Batch, store: dict | None = None, share_prompts: bool = True,
                   vision: Vision | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`forward_logits` on packed tokens: the logits (B, r, V) (0 where a row has no token) and labels (B, r); or,
    with `store` (`head_input`), the head's input (B, r, H). With `vision`, the images of the rows whose prompts
    are packed go with them (each prompt's images encoded once, as its tokens are computed once)."""
    if vision is not None and share_prompts and vision.has_image_tokens(batch.response_ids):
        share_prompts = False  # images in a conversation's later turns: each row's images go with its own tokens
    window = packed_window(batch, device_of(model), share_prompts)
    tokens, target = window.tokens, (window.t >= 0).nonzero().flatten()  # the response tokens, in packed order
    r_len = max(1, int(batch.response_mask.sum(-1).max()))
    extra = {}
    if vision is not None:
        extra = vision.packed_kwargs(model, batch.images, window.ids, window.attn, tokens.row,
                                     window.col, window.owner, forward_function(model))
    packed = forward_packed(model, tokens, window.before, **extra).float()  # (N, V)
    if store is not None:  # the head's input, at the kept positions (or at all, for a model that keeps all)
        hidden = store["hidden"][0]
        packed = hidden if hidden.shape[0] == len(target) else hidden[window.before]
    index = (tokens.row[target], window.t[target])
    logits = packed.new_zeros(len(batch), r_len, packed.shape[-1]).index_put(index, packed)
    labels = tokens.ids.new_zeros(len(batch), r_len).index_put(index, tokens.ids[target])
    return logits, labels


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad the last dim of a (B, r) tensor with zeros to (B, width)."""
    return torch.nn.functional.pad(x, (0, width - x.shape[-1]))


def forward_logprobs(
    model: nn.Module, batch: Batch, temperature: float, with_entropy: bool = False, entropy_grad: bool = False,
    chunk_tokens: int | None = LOGIT_CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, R) of the response tokens under softmax(logits / temperature), and their entropy (B, R).
    Through the LM head chunk by chunk where rft reproduces the model's logits (`rft.workers.lm_head`: never the
    (tokens x vocabulary) logits of the whole batch at once), else from the full logits (the entropy chunked over
    token positions, see `entropy_from_logits`). See `forward_logits`."""
    with autocast(model):  # the model's compute precision (models/precision.py), the chunked head's too
        return _forward_logprobs(model, batch, temperature, with_entropy, entropy_grad, chunk_tokens)


def _forward_logprobs(model: nn.Module, batch: Batch, temperature: float, with_entropy: bool, entropy_grad: bool,
                      chunk_tokens: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    R = batch.response_ids.shape[1]
    if sequence_parallel(model) is not None:
        return _split_logprobs(model, batch, temperature, with_entropy, entropy_grad, chunk_tokens)
    head = lm_head(model)
    positions = len(batch) * max(1, int(batch.response_mask.sum(-1).max()))
    if head is not None and positions <= head_chunk(head, chunk_tokens):
        head = None  # the logits fit in one chunk: computed whole, with nothing to recompute in the backward
    if head is not None:
        hidden, labels = forward_logits(model, batch, temperature, head)
        logprobs, entropy = head_logprobs(head, hidden, labels, temperature, chunk_tokens)
        if not with_entropy:
            return _pad(logprobs, R), None
        return _pad(logprobs, R), _pad(entropy if entropy_grad and torch.is_grad_enabled() else entropy.detach(), R)
    logits, labels = forward_logits(model, batch, temperature)
    logprobs = logprobs_from_logits(logits, labels)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = _pad(entropy_from_logits(logits if entropy_grad else logits.detach(), chunk_tokens), R)
    return _pad(logprobs, R), entropy


def _split_logprobs(model: nn.Module, batch: Batch, temperature: float, with_entropy: bool, entropy_grad: bool,
                    chunk_tokens: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`forward_logprobs` of a sequence-parallel model (`rft.workers.ulysses`): each process computes the log-probs
    (and entropies) of the response tokens its slice predicts."""
    R = batch.response_ids.shape[1]
    ids, attn, positions, p_len, _ = response_window(batch, device_of(model))

    def per_token(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        columns = [logprobs_from_logits(logits, labels)]
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                columns.append(entropy_from_logits(logits if entropy_grad else logits.detach(), chunk_tokens))
        return torch.stack(columns, dim=-1)

    out = split_outputs(model, ids, attn, positions, p_len, per_token, 1 + with_entropy, packed=packs(model))
    return _pad(out[..., 0], R), (_pad(out[..., 1], R) if with_entropy else None)


@torch.no_grad()
def eval_passes(model: nn.Module, batch: Batch, micro_rows: int | None,
                forward: Callable[[Batch], torch.Tensor], mask: torch.Tensor | None = None,
                max_tokens: int | None = None, dist: Dist = SINGLE,
                key: str = "log_prob_max_token_len_per_gpu") -> torch.Tensor:
    """(B, R) of `forward(micro_batch)` ((b, R) each) over micro-batches of `micro_rows` rows (None: one pass), or
    of at most `max_tokens` real tokens (use_dynamic_bsz; `key` names the budget in errors; with several processes
    every rank runs as many passes as the rank with the most), without gradients and with `model` in eval mode (its
    mode restored after), on CPU, 0 on padding (`mask`, default the response mask, when the output is not (B, R))."""
    was_training = model.training
    model.eval()
    try:
        if max_tokens:
            bins = token_budget_bins(row_tokens(batch), max_tokens, key)
            want = dist.max_int(len(bins)) if dist.enabled else len(bins)
            if want > len(bins) and len(batch) > len(bins):
                bins = token_budget_bins(row_tokens(batch), max_tokens, key, min_bins=want)
            order = torch.tensor([i for b in bins for i in b], dtype=torch.long)
            parts = [forward(batch.select(b)).cpu() for b in bins]
            for _ in range(want - len(bins)):  # filler passes: the other ranks need this one in theirs
                forward(batch.select([0]))
            out = torch.cat(parts)[order.argsort()] if parts else None
        else:
            out = torch.cat([forward(mb).cpu() for mb in batch.split(micro_rows or len(batch))])
    finally:
        model.train(was_training)
    return out * (batch.response_mask if mask is None else mask)


def compute_logprobs(model: nn.Module, batch: Batch, temperature: float, micro_rows: int | None,
                     max_tokens: int | None = None, dist: Dist = SINGLE) -> torch.Tensor:
    """(B, R) log-probs without gradients, `micro_rows` rows (or `max_tokens` tokens) per forward pass."""
    return eval_passes(model, batch, micro_rows, lambda mb: forward_logprobs(model, mb, temperature)[0],
                       max_tokens=max_tokens, dist=dist)


def compute_old_logprobs(model: nn.Module, batch: Batch, temperature: float, micro_rows: int | None,
                         with_sum_pi_squared: bool = False, max_tokens: int | None = None,
                         dist: Dist = SINGLE, with_entropy_stats: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]:
    """(log-probs (B, R), sum_v pi_v^2 (B, R) or None, (entropy, N) (B, R) each or None) of the policy without
    gradients, `micro_rows` rows (or `max_tokens` tokens) per pass, all from the same logits: sum pi^2 when
    `with_sum_pi_squared` (the optimal token baseline's input), the entropy and N when `with_entropy_stats` (the
    entropy filters', `rft.algorithms.entropy_clip`)."""
    if not with_sum_pi_squared and not with_entropy_stats:
        return compute_logprobs(model, batch, temperature, micro_rows, max_tokens, dist), None, None
    R = batch.response_ids.shape[1]

    def columns(mb: Batch) -> torch.Tensor:  # (b, kR): log-probs, then sum pi^2, entropy and N where asked
        logits, labels = forward_logits(model, mb, temperature)
        out = [logprobs_from_logits(logits, labels)]
        if with_sum_pi_squared:
            out.append(sum_pi_squared_from_logits(logits))
        if with_entropy_stats:
            out.extend(entropy_statistics_from_logits(logits))
        return torch.cat([_pad(x.to(out[0].dtype), R) for x in out], dim=-1)

    k = 1 + with_sum_pi_squared + 2 * with_entropy_stats
    out = eval_passes(model, batch, micro_rows, columns, mask=torch.cat([batch.response_mask] * k, dim=-1),
                      max_tokens=max_tokens, dist=dist)
    parts = list(out.split(R, dim=-1))
    logprobs, spp = parts[0], (parts[1] if with_sum_pi_squared else None)
    return logprobs, spp, ((parts[-2], parts[-1]) if with_entropy_stats else None)


@contextmanager
def reference_of(model: nn.Module, ref_model: nn.Module | None) -> Iterator[nn.Module]:
    """The module computing the reference policy, in eval mode for the duration: `ref_model` (a frozen copy of
    the starting weights) when given, else `model` itself with its LoRA adapter disabled."""
    if ref_model is None and not hasattr(model, "disable_adapter"):
        raise RuntimeError("no reference policy: full fine-tuning needs the frozen copy (ref_model)")
    module = ref_model if ref_model is not None else model
    was_training = module.training
    module.eval()
    try:
        if ref_model is not None:
            yield ref_model
        else:
            with model.disable_adapter():
                yield model
    finally:
        module.train(was_training)


def compute_logit_kl(model: nn.Module, ref_model: nn.Module | None, batch: Batch, temperature: float,
                     micro_rows: int | None, kind: str, max_tokens: int | None = None,
                     dist: Dist = SINGLE) -> torch.Tensor:
    """(B, R) per-token KL(policy || reference) of a logit-based estimator (`kl_needs_logits`, e.g. ``full``),
    without gradients: both policies run on each micro-batch of `micro_rows` rows. 0 on padding."""

    def kl_of(mb: Batch) -> torch.Tensor:
        logits, labels = forward_logits(model, mb, temperature)
        with reference_of(model, ref_model) as ref:
            ref_logits, _ = forward_logits(ref, mb, temperature)
        kl = kl_penalty(logprobs_from_logits(logits, labels), None, kind, logits=logits, ref_logits=ref_logits)
        return _pad(kl, batch.response_ids.shape[1])

    return eval_passes(model, batch, micro_rows, kl_of, max_tokens=max_tokens, dist=dist)


def compute_teacher_divergence(model: nn.Module, teacher: nn.Module, batch: Batch, temperature: float,
                               micro_rows: int | None, mode: str, beta: float, max_tokens: int | None = None,
                               dist: Dist = SINGLE) -> torch.Tensor:
    """(B, R) per-token divergence of the policy from the distillation teacher (`rft.algorithms.distill`'s `mode`)
    without gradients: both models run on each micro-batch of `micro_rows` rows (or `max_tokens` tokens), one
    batched pass over the step's responses as the reference's. 0 on padding."""
    R = batch.response_ids.shape[1]

    def divergence_of(mb: Batch) -> torch.Tensor:
        with reference_of(model, teacher) as t:
            if not distill_needs_logits(mode):  # the sampled tokens' log-probs, through the chunked LM head
                return distill_divergence(mode, forward_logprobs(model, mb, temperature)[0],
                                          forward_logprobs(t, mb, temperature)[0])
            teacher_logits, labels = forward_logits(t, mb, temperature)
        logits, _ = forward_logits(model, mb, temperature)
        div = distill_divergence(mode, logprobs_from_logits(logits, labels), None, logits=logits,
                                 teacher_logits=teacher_logits, beta=beta)
        return _pad(div, R)

    return eval_passes(model, batch, micro_rows, divergence_of, max_tokens=max_tokens, dist=dist)


@dataclass
class UpdateSettings:
    """What one update needs to know beyond the Batch (taken from the actor config by the trainer)."""

    n: int  # rollout.n: rows per prompt
    ppo_mini_batch_size: int  # prompts per optimizer step
    micro_rows: int | None  # rows per forward/backward pass; None: the whole mini-batch
    ppo_epochs: int
    shuffle: bool
    seed: int
    temperature: float
    max_response_length: int
    loss_mode: str
    loss_agg_mode: str
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float
    grad_clip: float
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    tau_pos: float = 1.0  # sapo
    tau_neg: float = 1.05  # sapo
    clip_cov_ratio: float = 0.0002  # clip_cov
    clip_cov_lb: float = 1.0  # clip_cov
    clip_cov_ub: float = 5.0  # clip_cov
    kl_cov_ratio: float = 0.0002  # kl_cov
    ppo_kl_coef: float = 0.1  # kl_cov
    m2_threshold: float = 0.04  # m2po
    log_ratio_clip: float = 20.0  # m2po
    opmd_tau: float = 1.0  # opmd
    loss_scale_factor: int | None = None  # seq-mean-token-sum-norm's constant; None: max_response_length
    dro_beta: float | None = None  # dro
    topr_advantage_threshold: float = 0.0  # topr
    topr_ratio_level: str = "token"  # topr
    rec: RecOptions = RecOptions()  # rec
    # bypass_mode (algorithm.rollout_correction.*)
    rollout_is: str | None = None
    rollout_is_threshold: str | float = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: str | float | None = None
    bypass_loss_type: str = "ppo_clip"
    logit_chunk_tokens: int | None = LOGIT_CHUNK_TOKENS  # token positions per chunk of entropy / full KL; None: all
    bad_update_limit: int = 3  # trainer.bad_update_limit: skipped optimizer steps in a row before the run stops
    max_token_len: int | None = None  # use_dynamic_bsz: real tokens per forward/backward pass (else micro_rows)
    mix_mu: float | None = None  # algorithm.mix: the SFT loss's weight on the expert rows; None: no mix
    mix_sft_agg: str = "token-mean"  # algorithm.mix.sft_loss_agg_mode
    mix_schedule: tuple | None = None  # CHORD: (mu_valley, mu_warmup_steps, mu_decay_steps); None: mu constant
    mix_phi: bool = False  # algorithm.mix.sft_token_weight phi: each expert token's -log p weighted by p (1 - p)
    activation_offload: bool = False  # model.enable_activation_offload: forward passes save to host memory (cuda)
    distill_mode: str | None = None  # distillation as a loss (use_policy_gradient false): its divergence; else None
    distill_coef: float = 1.0  # distillation.distillation_loss.distillation_loss_coef
    distill_beta: float = 0.5  # distillation.distillation_loss.jsd_beta

    @classmethod
    def from_config(cls, cfg) -> UpdateSettings:
        """The settings of an RL config's actor section (clip ratios default to clip_ratio, the shuffle seed to
        trainer.seed; rollout_correction.bypass_mode makes the loss bypass_mode)."""
        arr = cfg.actor_rollout_ref
        actor, ro, pl, rc = arr.actor, arr.rollout, arr.actor.policy_loss, cfg.algorithm.rollout_correction
        return cls(
            n=ro.n, ppo_mini_batch_size=actor.ppo_mini_batch_size,
            micro_rows=actor.ppo_micro_batch_size_per_gpu or actor.ppo_micro_batch_size,
            ppo_epochs=actor.ppo_epochs, shuffle=actor.shuffle,
            seed=actor.data_loader_seed if actor.data_loader_seed is not None else cfg.trainer.seed,
            temperature=ro.temperature, max_response_length=cfg.data.max_response_length,
            loss_mode="bypass_mode" if rc.bypass_mode else pl.loss_mode, loss_agg_mode=actor.loss_agg_mode,
            clip_ratio_low=actor.clip_ratio_low if actor.clip_ratio_low is not None else actor.clip_ratio,
            clip_ratio_high=actor.clip_ratio_high if actor.clip_ratio_high is not None else actor.clip_ratio,
            clip_ratio_c=actor.clip_ratio_c, grad_clip=actor.grad_clip, entropy_coeff=actor.entropy_coeff,
            use_kl_loss=actor.use_kl_loss, kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type,
            tau_pos=actor.tau_pos, tau_neg=actor.tau_neg, clip_cov_ratio=pl.clip_cov_ratio,
            clip_cov_lb=pl.clip_cov_lb, clip_cov_ub=pl.clip_cov_ub, kl_cov_ratio=pl.kl_cov_ratio,
            ppo_kl_coef=pl.ppo_kl_coef, m2_threshold=pl.m2_threshold, log_ratio_clip=pl.log_ratio_clip,
            opmd_tau=pl.tau, loss_scale_factor=actor.loss_scale_factor,
            dro_beta=pl.dro_beta, topr_advantage_threshold=pl.topr_advantage_threshold,
            topr_ratio_level=pl.topr_ratio_level,
            rec=RecOptions(**{f.name: getattr(pl.rec, f.name) for f in fields(RecOptions)}),  # each key read here
            rollout_is=rc.rollout_is, rollout_is_threshold=rc.rollout_is_threshold,
            rollout_is_batch_normalize=rc.rollout_is_batch_normalize, rollout_rs=rc.rollout_rs,
            rollout_rs_threshold=rc.rollout_rs_threshold, bypass_loss_type=rc.loss_type,
            bad_update_limit=cfg.trainer.bad_update_limit,
            max_token_len=actor.ppo_max_token_len_per_gpu if actor.use_dynamic_bsz else None,
            mix_mu=cfg.algorithm.mix.mu if cfg.algorithm.mix.enable else None,
            mix_sft_agg=cfg.algorithm.mix.sft_loss_agg_mode,
            mix_schedule=((cfg.algorithm.mix.mu_valley, cfg.algorithm.mix.mu_warmup_steps,
                           cfg.algorithm.mix.mu_decay_steps) if cfg.algorithm.mix.mu_valley is not None else None),
            mix_phi=cfg.algorithm.mix.sft_token_weight == "phi",
            activation_offload=arr.model.enable_activation_offload,
            logit_chunk_tokens=cls.logit_chunk_tokens if actor.entropy_from_logits_with_chunking else None,
            **distill_loss_settings(cfg.distillation),
        )


def distill_loss_settings(d) -> dict:
    """The worker's distillation settings: a loss of its own only with use_policy_gradient false (as a reward the
    trainer puts it into the advantages, and the worker knows nothing of it)."""
    loss = d.distillation_loss
    if not d.enabled or loss.use_policy_gradient:
        return {}
    return {"distill_mode": loss.loss_mode, "distill_coef": loss.distillation_loss_coef, "distill_beta": loss.jsd_beta}


def mu_at(step: int, mu: float, valley: float | None, warmup_steps: int, decay_steps: int) -> float:
    """The SFT loss's weight at trainer step `step`: `mu` when there is no schedule (`valley` None); else CHORD's:
    step / warmup_steps x mu during the warm-up, then a cosine from mu down to `valley` over decay_steps, then
    `valley`."""
    if valley is None:
        return mu
    if step < warmup_steps:
        return step / warmup_steps * mu
    if step >= warmup_steps + decay_steps:
        return valley
    return valley + (mu - valley) * 0.5 * (1 + math.cos(math.pi * (step - warmup_steps) / decay_steps))


class PolicyWorker(MiniBatchWorker):
    prefix = "actor"
    rollout_drift = False
    """Whether an update without old log-probs reports the engine's log-prob drift (verl's
    `training/rollout_probs_diff_*`) from its own passes: the trainer sets it for an engine of its own numerics
    (vLLM) where no old-log-prob pass runs. With one optimizer step per batch the update's passes run the weights
    that sampled, before they move: the old-log-prob pass would compute the same log-probs once more."""
    _drift: list | None = None  # this update's (log-probs, rollout log-probs, loss tokens) of each micro-batch

    def __init__(self, model: nn.Module, settings: UpdateSettings, optim_cfg, total_steps: int,
                 ref_model: nn.Module | None = None, dist: Dist = SINGLE, teacher: nn.Module | None = None):
        """`ref_model`: the frozen reference (full fine-tuning) for a KL loss computed from logits; with LoRA the
        reference is `model` with its adapter disabled and `ref_model` stays None. `teacher`: the distillation
        teacher, run on each micro-batch when the distillation loss needs its logits."""
        super().__init__(model, settings, optim_cfg, total_steps, dist)
        self.ref_model = ref_model
        self.teacher = teacher
        self.mu = settings.mix_mu  # algorithm.mix: the SFT loss's weight this step (CHORD's schedule moves it)

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        s = self.s
        drift = self.rollout_drift and batch.old_logprobs is None and batch.rollout_logprobs is not None
        self._drift = [] if drift else None
        if s.mix_mu is not None:
            self.mu = mu_at(step, s.mix_mu, *(s.mix_schedule or (None, 0, 0)))
        metrics = super().update(batch, step)
        if s.mix_mu is not None:
            metrics["actor/mix_mu"] = self.mu
        if drift:
            metrics.update(self._drift_metrics())
        return metrics

    def _drift_metrics(self) -> dict[str, float]:
        """`training/rollout_probs_diff_*` over every rank's tokens the update's passes computed (one step per
        batch: each row once)."""
        parts, self._drift = self._drift or [], None
        if not parts:
            return {}
        columns = [self.dist.gather_rows(torch.cat(column)) for column in zip(*parts)]
        return rollout_probs_diff_metrics(*columns)

    def _loss_inputs(self, mb: Batch, logprobs: torch.Tensor, norm: AggNorm | None, seed: int) -> PolicyLossInputs:
        s = self.s
        device = logprobs.device
        weights = mb.rollout_is_weights
        return PolicyLossInputs(
            logprobs=logprobs,
            old_logprobs=mb.old_logprobs.to(device) if mb.old_logprobs is not None else logprobs.detach(),
            advantages=mb.advantages.to(device), response_mask=loss_tokens(mb).to(device).float(),
            clip_ratio_low=s.clip_ratio_low, clip_ratio_high=s.clip_ratio_high, clip_ratio_c=s.clip_ratio_c,
            loss_agg_mode=s.loss_agg_mode, agg_norm=norm, tau_pos=s.tau_pos, tau_neg=s.tau_neg,
            clip_cov_ratio=s.clip_cov_ratio, clip_cov_lb=s.clip_cov_lb, clip_cov_ub=s.clip_cov_ub,
            kl_cov_ratio=s.kl_cov_ratio, ppo_kl_coef=s.ppo_kl_coef, opmd_tau=s.opmd_tau, selection_seed=seed,
            m2_threshold=s.m2_threshold, log_ratio_clip=s.log_ratio_clip,
            dro_beta=s.dro_beta, topr_advantage_threshold=s.topr_advantage_threshold,
            topr_ratio_level=s.topr_ratio_level, rec=s.rec,
            rollout_is_weights=weights.to(device) if weights is not None else None,
            rollout_is=s.rollout_is, rollout_is_threshold=s.rollout_is_threshold,
            rollout_is_batch_normalize=s.rollout_is_batch_normalize, rollout_rs=s.rollout_rs,
            rollout_rs_threshold=s.rollout_rs_threshold, bypass_loss_type=s.bypass_loss_type,
        )

    def _micro_loss(self, mb: Batch, norm: AggNorm, seed: int = 0, minibatch: PolicyLossInputs | None = None,
                    rows: torch.Tensor | None = None, metric_norm: AggNorm | None = None,
                    expert_norm: AggNorm | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """This micro-batch's loss (its share of the mini-batch's, `norm`) and metrics (their shares of the
        mini-batch's; `metric_norm`: the normalisers of the rows trained on when some were left out; `expert_norm`:
        the expert rows' normalisers with algorithm.mix)."""
        s = self.s
        metric_norm = metric_norm or norm
        R = mb.response_ids.shape[1]
        kl_from_logits = s.use_kl_loss and kl_needs_logits(s.kl_loss_type)
        ref_logits = None
        if kl_from_logits:
            with torch.no_grad(), reference_of(self.model, self.ref_model) as ref:
                ref_logits, _ = forward_logits(ref, mb, s.temperature)
        distill_logits = s.distill_mode is not None and distill_needs_logits(s.distill_mode)
        teacher_logits = None
        if distill_logits:
            with torch.no_grad(), reference_of(self.model, self.teacher) as teacher:
                teacher_logits, _ = forward_logits(teacher, mb, s.temperature)
        logits = None
        if kl_from_logits or distill_logits:  # the full KL and the logit divergences need both models' logits
            logits, labels = forward_logits(self.model, mb, s.temperature)
            logprobs = _pad(logprobs_from_logits(logits, labels), R)
            with torch.set_grad_enabled(s.entropy_coeff != 0 and torch.is_grad_enabled()):
                entropy = _pad(entropy_from_logits(logits if s.entropy_coeff else logits.detach(),
                                                   s.logit_chunk_tokens), R)
        else:
            logprobs, entropy = forward_logprobs(self.model, mb, s.temperature, with_entropy=True,
                                                 entropy_grad=s.entropy_coeff != 0, chunk_tokens=s.logit_chunk_tokens)
        r = max(1, int(mb.response_mask.sum(-1).max()))  # the response columns the pass computed
        mask = loss_tokens(mb).to(logprobs.device).float()
        if self._drift is not None and mb.old_logprobs is None:  # the weights that sampled: the drift (update)
            self._drift.append((logprobs.detach().float().cpu(), mb.rollout_logprobs.float().cpu(), mask.cpu()))
        inputs = self._loss_inputs(mb, logprobs, norm, seed)
        inputs.minibatch, inputs.rows = minibatch, rows  # rows: mb's rows in `minibatch`
        out = compute_policy_loss(s.loss_mode, inputs)
        # algorithm.mix (Trinity-RFT): (1 - mu) * policy loss on the experiences + mu * SFT loss on the expert rows
        loss = out.loss if s.mix_mu is None else (1.0 - self.mu) * out.loss
        share = float(mask.sum()) / max(metric_norm.num_tokens, 1.0)  # token share of this micro-batch
        # a loss's own names (no '/') go under actor/; rollout_corr/... (bypass_mode) keep theirs
        metrics = {(k if "/" in k else f"actor/{k}"): v * share for k, v in out.metrics.items()}
        metrics["actor/pg_loss"] = float(out.loss.detach())
        entropy_term = agg_loss(entropy, mask, s.loss_agg_mode, norm)
        metrics["actor/entropy"] = float(entropy_term.detach() if metric_norm is norm
                                         else agg_loss(entropy.detach(), mask, s.loss_agg_mode, metric_norm))
        if s.entropy_coeff:
            loss = loss - s.entropy_coeff * entropy_term
        if s.use_kl_loss:
            ref_logprobs = mb.ref_logprobs[:, :r].to(logprobs.device) if mb.ref_logprobs is not None else None
            kl = _pad(kl_penalty(logprobs[:, :r], ref_logprobs, s.kl_loss_type, logits=logits,
                                 ref_logits=ref_logits, chunk_size=s.logit_chunk_tokens), R)
            kl_term = agg_loss(kl, mask, s.loss_agg_mode, norm)
            loss = loss + s.kl_loss_coef * kl_term
            metrics["actor/kl_loss"] = float(kl_term.detach())
            metrics["actor/kl_coef"] = s.kl_loss_coef * share
        if s.distill_mode is not None:  # on-policy distillation as a loss (GKD): through the student's logits
            teacher_logprobs = mb.teacher_logprobs[:, :r].to(logprobs.device) if mb.teacher_logprobs is not None \
                else None
            div = _pad(distill_divergence(s.distill_mode, logprobs[:, :r], teacher_logprobs, logits=logits,
                                          teacher_logits=teacher_logits, beta=s.distill_beta,
                                          chunk_size=s.logit_chunk_tokens), R)
            distill_term = agg_loss(div, mask, s.loss_agg_mode, norm)
            loss = loss + s.distill_coef * distill_term
            metrics["actor/distill_loss"] = float(distill_term.detach())
        router = router_recorder(self.model)
        aux = router.take() if router is not None else None
        if aux is not None:  # a mixture of experts: reported, and applied when its config asks (output_router_logits)
            metrics["actor/router_aux_loss"] = float(aux.detach()) * share
            if router.applied:
                loss = loss + router.coef * aux * share
        if s.mix_mu is not None:
            nll = -logprobs
            if s.mix_phi:  # CHORD-phi: p (1 - p), detached, per expert token
                p = logprobs.detach().exp()
                nll = nll * p * (1 - p)
            sft = agg_loss(nll, expert_tokens(mb).to(logprobs.device).float(), s.mix_sft_agg, expert_norm)
            loss = loss + self.mu * sft
            metrics["actor/sft_loss"] = float(sft.detach())
        return loss, metrics

    def drops_zero_advantage_rows(self) -> bool:
        """Whether rows whose advantages are 0 on every loss token can be left out of the update exactly: the policy
        loss declares a per-token loss that is 0 with 0 gradient where A = 0 (`policy_loss_zero_at_zero_advantage`)
        and no entropy or KL term adds a gradient of its own (nor mix's SFT loss: expert rows have no advantage). Their
        tokens still count in the normalisers."""
        s = self.s
        return (policy_loss_zero_at_zero_advantage(s.loss_mode, s) and not s.entropy_coeff and not s.use_kl_loss
                and not policy_loss_needs_minibatch(s.loss_mode, s) and s.mix_mu is None and s.distill_mode is None)

    def backward_mini_batch(self, mini: Batch, seed: int = 0) -> dict[str, float]:
        """Accumulate the gradient of one mini-batch's loss into the parameters' `.grad`, micro-batch by
        micro-batch (`micro_rows` rows each, or by token budget with use_dynamic_bsz); returns the summed
        micro-batch metrics. No optimizer step.

        Rows whose advantages are all 0 are left out when that is exact (`drops_zero_advantage_rows`): their
        gradient is 0, the normalisers still count them; the metrics of the loss (clip fractions, ppo_kl) and
        `actor/entropy` are then those of the rows trained on, `actor/zero_adv_rows` counts the rows left out.
        `seed` seeds the random token choice of losses that make one (clip_cov)."""
        s = self.s
        norm = self.norm(mini)
        metric_norm, dropped, full = None, None, mini
        if self.drops_zero_advantage_rows():
            tokens = loss_tokens(mini).bool()
            keep = ((mini.advantages != 0) & tokens).any(-1)
            dropped = int((~keep).sum())
            if dropped:
                mini = mini.select(keep.nonzero().flatten().tolist())
            metric_norm = self.norm(mini)  # a collective: every rank, whether it dropped rows or not
            if not metric_norm.num_tokens:  # every row left out: the metrics are 0 (a filler pass reports them)
                metric_norm = norm
        plan = self.plan(mini, sync=dropped is not None or bool(getattr(s, "max_token_len", None)))
        expert_norm = mini_batch_norm(mini, norm.max_len, self.dist, expert=True) if s.mix_mu is not None else None
        whole, offset = None, 0
        if policy_loss_needs_minibatch(s.loss_mode, s) and (len(plan[1]) > 1 or self.dist.enabled):
            # The token selection of this loss uses statistics of the whole mini-batch: give every micro-batch
            # the same detached inputs (current log-probs of all rows: one extra forward pass, no gradient),
            # with several processes those of every rank's rows (this rank's start at `offset`).
            current = compute_logprobs(self.model, mini, s.temperature, s.micro_rows,
                                       getattr(s, "max_token_len", None), self.dist)
            whole = self._loss_inputs(mini, current.to(device_of(self.model)), norm, seed)
            if self.dist.enabled:
                offset = sum(self.dist.gather_sizes(len(mini))[: self.dist.rank])
                whole = replace(whole, **{k: self.dist.gather_rows(getattr(whole, k)) for k in (
                    "logprobs", "old_logprobs", "advantages", "response_mask")})
        sums = self.accumulate(mini, lambda rows, mb: self._micro_loss(
            mb, norm, seed, whole, torch.tensor(rows, dtype=torch.long) + offset, metric_norm,
            expert_norm), plan=plan, filler=full)
        if dropped is not None:
            sums["actor/zero_adv_rows"] = float(dropped)
            for p in self.params:  # a model that ran no pass: its gradient is exactly 0, and the step takes it
                if p.grad is None and not len(mini):
                    p.grad = torch.zeros_like(p)
        return sums
