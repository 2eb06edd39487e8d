"""Entropy-guided token filters (Trinity-RFT's ``clipb`` and ``clipv`` advantage functions; "On the Entropy Dynamics
in Reinforcement Fine-Tuning of Large Language Models", arXiv:2602.03392): after the advantages, some tokens of
negative advantage leave the loss (and its token normaliser), chosen by how their update would move the policy's
entropy. From the old policy's pass, per response token t with sampled-token probability p_t = exp(logp_t):

* S_t = p_t (H_t + logp_t), H_t the entropy of the token's distribution: to first order, how much a unit push on the
  sampled token's logit lowers the entropy (entropy falls when S_t > 0).
* N_t = H_t sum_v p_v^2 + sum_v p_v^2 log p_v: the same quantity averaged over the distribution (the expected S of a
  token sampled from it).

``clipb`` centres S over the batch's tokens (population mean and std, every response token of every row) and drops
the tokens of negative advantage with S_t - mean < -mu std: the ones whose negative update raises the entropy most.
``clipv`` takes D_t = N_t - S_t (not centred) and drops the tokens of non-positive advantage with D_t > mu std(D);
when they are more than max_frac of the batch's tokens, only the max(int(max_frac x tokens), 1) negative-advantage
ones of largest D go (zero-advantage ones over the bound go regardless). Both keep every token when the std is below 1e-12.
Tokens of positive advantage are always kept; Clip_B keeps zero-advantage ones too, Clip_V filters them like the
negative ones (Trinity-RFT's code; they carry no policy gradient, only a share of the normaliser)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

ENTROPY_CLIP_MODES = ("clipb", "clipv")
DEFAULT_MU = {"clipb": 2.5, "clipv": 8.5}  # Trinity-RFT's default_args (its examples' values)


@dataclass
class EntropyClipInputs:
    advantages: torch.Tensor
    """(B, R) the estimator's advantages."""
    response_mask: torch.Tensor
    """(B, R) the tokens the filter considers (and whose statistics it takes)."""
    old_logprobs: torch.Tensor
    """(B, R) log-probs of the sampled tokens under the old policy."""
    entropy: torch.Tensor
    """(B, R) the old policy's entropy at each response token."""
    nec: torch.Tensor | None = None
    """(B, R) clipv: N_t = H_t sum_v p_v^2 + sum_v p_v^2 log p_v (`entropy_statistics_from_logits`)."""


def entropy_clip_keep(mode: str, inputs: EntropyClipInputs, mu: float,
                      max_frac: float = 1e-4) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, R) bool: the response tokens that stay in the loss, and the filter's metrics (`frac_clipped` of the
    response tokens, of those of positive and of negative advantage)."""
    adv = inputs.advantages.float()
    on = lambda x: x.to(adv.device).float()
    m = inputs.response_mask.to(adv.device).bool()
    mf = m.float()
    n = mf.sum().clamp_min(1.0)
    lp = on(inputs.old_logprobs)
    s = lp.exp() * (on(inputs.entropy) + lp)
    metrics: dict[str, float] = {}
    if mode == "clipb":
        mean = (s * mf).sum() / n
        std = (((s - mean) ** 2 * mf).sum() / n).sqrt()
        metrics["mean_s"] = float(mean)
        keep = (adv >= 0) | (s - mean >= -mu * std)
    elif mode == "clipv":
        if inputs.nec is None:
            raise ValueError("clipv needs the old pass's N statistic (nec)")
        d = on(inputs.nec) - s
        mean = (d * mf).sum() / n
        std = (((d - mean) ** 2 * mf).sum() / n).sqrt()
        keep_neg = d <= mu * std
        keep = (adv > 0) | keep_neg
        cap = max(int(max_frac * float(n)), 1)
        over = (m & ~keep_neg & (adv < 0))  # the negative-advantage tokens over the bound
        if float((m & ~keep).sum()) > max_frac * float(n) and int(over.sum()) > cap:
            # only the `cap` negative-advantage tokens of largest D leave the loss (zero-advantage ones over the
            # bound leave it regardless, as in Trinity-RFT's code)
            worst = torch.topk(d.masked_fill(~over, float("-inf")).flatten(), cap).indices
            limited = torch.zeros(d.numel(), dtype=torch.bool, device=d.device)
            limited[worst] = True
            keep = (keep | over) & ~limited.view_as(d)
    else:
        raise ValueError(f"entropy clip mode {mode!r} is not one of {ENTROPY_CLIP_MODES}")
    metrics["std"] = float(std)
    if float(std) < 1e-12:
        keep = torch.ones_like(m)
    keep = keep & m
    pos, neg = m & (adv > 0), m & (adv < 0)
    metrics["frac_clipped"] = 1.0 - float(keep.sum()) / float(n)
    metrics["frac_clipped_pos"] = 1.0 - float((keep & pos).sum()) / max(float(pos.sum()), 1.0)
    metrics["frac_clipped_neg"] = 1.0 - float((keep & neg).sum()) / max(float(neg.sum()), 1.0)
    return keep, metrics
