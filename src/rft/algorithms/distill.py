"""Per-token divergences of a student (the policy p) from a teacher q, on the student's own samples (on-policy
distillation). One signature for the family: ``DistillInputs -> (B, R)``, unmasked; the caller masks and aggregates.

  ``k1``:   log p(y_t) - log q(y_t) of the sampled token y_t. Its mean over the student's samples is the reverse
            KL(p || q); as a per-token reward (-k1) into the policy gradient it is Thinking Machines' on-policy
            distillation ("On-Policy Distillation", 2025; the Qwen3 recipe). Its own gradient has mean 0: it is not
            a loss to differentiate (the config check refuses it there).
  ``k3``:   Schulman's low-variance estimate of the same KL (``rft.algorithms.kl``'s k3).
  ``full``: the exact reverse KL(p || q) = sum_v p_v (log p_v - log q_v) from both models' logits.
  ``jsd``:  GKD's generalised Jensen-Shannon divergence (Agarwal et al. 2024, eq. 1; TRL's
            GKDTrainer.generalized_jsd_loss) with beta: m = beta q + (1 - beta) p,
            JSD_beta = beta KL(q || m) + (1 - beta) KL(p || m); beta = 0 is the forward KL(q || p) and beta = 1
            the reverse KL(p || q), as TRL defines the end points.
  ``token_jsd``: Trinity-RFT's jsd advantage's divergence, of the sampled token's two log-probs only (no
            vocabulary sum): log m = logsumexp(log q + log beta, log p + log(1 - beta)),
            D = beta (log q - log m) + (1 - beta)(log p - log m); beta = 0 is log p - log q (k1) and beta = 1
            log q - log p, Trinity's end points. An estimator for a per-token reward (Trinity's advantage is
            -kl_coef D), as k1 is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.algorithms.kl import kl_penalty
from rft.algorithms.utils import LOGIT_CHUNK_TOKENS, _chunks
from rft.registry import Registry


@dataclass
class DistillInputs:
    logprobs: torch.Tensor
    """(B, R) log-probs of the sampled tokens under the student."""
    teacher_logprobs: torch.Tensor | None
    """(B, R) log-probs of the same tokens under the teacher; unused (may be None) by the logit divergences."""
    logits: torch.Tensor | None = None
    """(B, R, V) temperature-scaled logits of the student; ``full`` and ``jsd`` only."""
    teacher_logits: torch.Tensor | None = None
    """(B, R, V) temperature-scaled logits of the teacher; ``full`` and ``jsd`` only."""
    beta: float = 0.5
    """``jsd``'s interpolation (GKD's beta)."""
    chunk_size: int | None = LOGIT_CHUNK_TOKENS
    """Token positions per chunk of a vocabulary-wide divergence; None: all at once."""


Divergence = Callable[[DistillInputs], torch.Tensor]
DISTILL_LOSSES: Registry[Divergence] = Registry("distillation loss")


def _needs_logits(fn: Divergence) -> Divergence:
    fn.needs_logits = True  # type: ignore[attr-defined]
    return fn


def _logits(inputs: DistillInputs, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if inputs.logits is None or inputs.teacher_logits is None:
        raise ValueError(f"distillation loss {name!r} is computed from both models' logits: pass "
                         "DistillInputs.logits and DistillInputs.teacher_logits (B, R, V)")
    return inputs.logits, inputs.teacher_logits


@DISTILL_LOSSES.register("k1")
def distill_k1(inputs: DistillInputs) -> torch.Tensor:
    """``log p - log q`` of the sampled token."""
    return kl_penalty(inputs.logprobs, inputs.teacher_logprobs, "k1")


@DISTILL_LOSSES.register("k3")
def distill_k3(inputs: DistillInputs) -> torch.Tensor:
    """k3 with d = log q - log p: ``exp(d) - d - 1`` (clamped as rft's KL estimator k3 is)."""
    return kl_penalty(inputs.logprobs, inputs.teacher_logprobs, "k3")


@DISTILL_LOSSES.register("full")
@_needs_logits
def distill_full(inputs: DistillInputs) -> torch.Tensor:
    """The exact reverse KL(p || q) over the vocabulary (rft's chunked ``full`` KL)."""
    logits, teacher = _logits(inputs, "full")
    return kl_penalty(inputs.logprobs, None, "full", logits=logits, ref_logits=teacher, chunk_size=inputs.chunk_size)


@DISTILL_LOSSES.register("jsd")
@_needs_logits
def distill_jsd(inputs: DistillInputs) -> torch.Tensor:
    """GKD's generalised JSD with ``beta`` (module docstring), per position, computed ``chunk_size`` positions at a
    time; differentiable in the student's logits."""
    logits, teacher = _logits(inputs, "jsd")
    beta = float(inputs.beta)
    V = logits.shape[-1]
    flat, flat_t = logits.reshape(-1, V), teacher.reshape(-1, V)
    parts = []
    for start, end in _chunks(flat.shape[0], inputs.chunk_size):
        logp = torch.log_softmax(flat[start:end].float(), dim=-1)
        logq = torch.log_softmax(flat_t[start:end].float(), dim=-1)
        if beta == 0.0:
            parts.append((logq.exp() * (logq - logp)).sum(-1))
        elif beta == 1.0:
            parts.append((logp.exp() * (logp - logq)).sum(-1))
        else:
            logm = torch.logsumexp(torch.stack([logq + math.log(beta), logp + math.log(1 - beta)]), dim=0)
            kl_q = (logq.exp() * (logq - logm)).sum(-1)
            kl_p = (logp.exp() * (logp - logm)).sum(-1)
            parts.append(beta * kl_q + (1 - beta) * kl_p)
    out = torch.cat(parts) if parts else flat.new_zeros(0)
    return out.reshape(logits.shape[:-1])


@DISTILL_LOSSES.register("token_jsd")
def distill_token_jsd(inputs: DistillInputs) -> torch.Tensor:
    """Trinity-RFT's sampled-token JSD with ``beta`` (its lambda_coef; module docstring), its end points as Trinity
    writes them."""
    logp, logq, beta = inputs.logprobs, inputs.teacher_logprobs, float(inputs.beta)
    if beta == 0.0:
        return logp - logq
    if beta == 1.0:
        return logq - logp
    logm = torch.logsumexp(torch.stack([logq + math.log(beta), logp + math.log1p(-beta)]), dim=0)
    return beta * (logq - logm) + (1 - beta) * (logp - logm)


def distill_needs_logits(mode: str) -> bool:
    """Whether the divergence registered as ``mode`` needs both models' logits (not only the sampled tokens')."""
    return bool(getattr(DISTILL_LOSSES.get(mode), "needs_logits", False))


def distill_divergence(mode: str, logprobs: torch.Tensor, teacher_logprobs: torch.Tensor | None, *,
                       logits: torch.Tensor | None = None, teacher_logits: torch.Tensor | None = None,
                       beta: float = 0.5, chunk_size: int | None = LOGIT_CHUNK_TOKENS) -> torch.Tensor:
    """Per-token divergence (B, R) of the student from the teacher by registered name (``DISTILL_LOSSES``)."""
    return DISTILL_LOSSES.get(mode)(DistillInputs(logprobs, teacher_logprobs, logits, teacher_logits, beta, chunk_size))
