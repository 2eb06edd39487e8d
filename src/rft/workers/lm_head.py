"""The LM head taken out of the forward pass: the update and the log-prob passes read the hidden states the head
would read and compute each response token's log-prob and entropy chunk by chunk (`linear_logprobs`), so no pass
holds the (tokens x vocabulary) logits of a micro-batch: at a 151,936-token vocabulary they are 0.6 MB a token in
float32 (2.4 GB for 4k tokens), plus as much again for their gradient, against 3.5 KB of hidden states (Qwen2.5-0.5B).
This is what verl's `use_fused_kernels` (its torch backend) and Liger's fused linear cross-entropy do. A micro-batch
whose logits fit in one chunk (at most 1,024 positions and 32M logits) computes them whole, as before: nothing to
save, and no second product in the backward.

The head is taken out only where rft reproduces the model's logits: a plain `nn.Linear` head (not LoRA-wrapped, not
sharded), with the transforms the config declares (Cohere's `logit_scale`, Granite's `logits_scaling`, Gemma's
`final_logit_softcapping`), checked once per model against its own forward (log-probs within 1e-4); elsewhere the
model's logits are used as before, with one log line saying why.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from rft.algorithms.utils import LogitMap, linear_chunk, linear_logprobs

log = logging.getLogger("rft")
_HEAD_ATTR = "_rft_lm_head"
SHARDED = "its model is sharded over processes (FSDP)"


@dataclass(frozen=True)
class Head:
    module: nn.Linear
    logit_map: LogitMap


def _logit_map(config) -> LogitMap:
    scale = float(getattr(config, "logit_scale", None) or 1.0)
    scaling = getattr(config, "logits_scaling", None)
    if scaling:
        scale /= float(scaling)
    softcap = getattr(config, "final_logit_softcapping", None)
    return LogitMap(scale=scale, softcap=float(softcap) if softcap else None)


def lm_head(model: nn.Module) -> Head | None:
    """The head `head_logprobs` computes through, or None where the model's own logits are used (decided once per
    model; the reason logged)."""
    cached = getattr(model, _HEAD_ATTR, False)
    if cached is None or (cached is not False and cached.module is model.get_output_embeddings()):
        return cached  # (a deep copy of the model carries a copy of its decision, checked against its own head)
    head, why = _find(model)
    if head is not None:
        try:
            diff = _self_check(model, head)
        except Exception as e:  # an architecture whose forward does not go through its head as expected
            diff, why = None, f"{type(e).__name__}: {e}"
        if diff is None or diff > 1e-4:
            why = why if diff is None else f"its log-probs differ from the model's own by {diff:.3g}"
            head = None
    if head is None:  # a sharded model is expected (docs/scaling.md); another architecture is worth a line
        (log.debug if why == SHARDED else log.info)("rft: the LM head's log-probs come from the model's full "
                                                    "logits (%s)", why)
    setattr(model, _HEAD_ATTR, head)
    return head


def _find(model: nn.Module) -> tuple[Head | None, str]:
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if type(head) is not nn.Linear:
        return None, f"its output layer is a {type(head).__name__}, not a Linear layer"
    sharded = any(type(p).__name__ == "DTensor" for p in head.parameters()) or any(
        type(m).__name__.startswith(("FSDP", "FullyShardedDataParallel")) for m in model.modules())
    if sharded:  # its parameters are gathered only inside the forward passes FSDP hooks
        return None, SHARDED
    config = getattr(model, "config", None)
    return Head(head, _logit_map(config)), ""


@contextmanager
def head_input(model: nn.Module, head: Head):
    """Within: the model's forward hands its head's input to `store["hidden"]` and returns placeholder logits
    (..., 1) instead of computing them."""
    store: dict[str, torch.Tensor] = {}

    def capture(hidden: torch.Tensor) -> torch.Tensor:
        store["hidden"] = hidden
        return hidden.new_zeros(*hidden.shape[:-1], 1)

    head.module.forward = capture
    try:
        yield store
    finally:
        del head.module.forward


def head_chunk(head: Head, chunk_tokens: int | None) -> int:
    """Token positions per chunk through `head` (`linear_chunk`)."""
    return linear_chunk(head.module.weight.shape[0], chunk_tokens)


def head_logprobs(head: Head, hidden: torch.Tensor, labels: torch.Tensor, temperature: float,
                  chunk_tokens: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropies) of `labels` for the head's input `hidden` (..., H) under softmax(logits /
    temperature)."""
    logit_map = LogitMap(head.logit_map.scale, head.logit_map.softcap, temperature if temperature > 0 else 1.0)
    return linear_logprobs(hidden, head.module.weight, head.module.bias, labels, logit_map, chunk_tokens)


@torch.no_grad()
def _self_check(model: nn.Module, head: Head) -> float:
    """The largest gap between the model's own log-probs and `head_logprobs`' on a random two-row batch."""
    device = head.module.weight.device
    vocab = min(head.module.weight.shape[0], model.get_input_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 7), generator=g).to(device)
    labels = torch.randint(0, vocab, (2, 6), generator=g).to(device)
    was = model.training
    model.eval()
    try:
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        with head_input(model, head) as store:
            model(input_ids=ids, use_cache=False)
    finally:
        model.train(was)
    ours, _ = head_logprobs(head, store["hidden"][:, :-1], labels, 1.0, None)
    theirs = logits.log_softmax(-1).gather(-1, labels[..., None]).squeeze(-1)
    return float((ours - theirs).abs().max())
