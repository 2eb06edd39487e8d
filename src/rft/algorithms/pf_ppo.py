"""PF-PPO's policy filtration (Zhang et al. 2024, "Policy Filtration in RLHF to Fine-Tune LLM for Code
Generation", arXiv:2409.06957), as verl's `algorithm.use_pf_ppo` defines it (core_algos.compute_pf_ppo_reweight_data):
after the advantages, the batch is resampled with replacement, each row drawn with a weight from its score, so the
update sees more of the rows whose reward is the more reliable. Pure tensor functions; the RL loop (trainer/rl.py)
applies them.
"""

from __future__ import annotations

import torch

REWEIGHT_METHODS = ("pow", "max_min", "max_random")


def pf_ppo_weights(scores: torch.Tensor, reweight_method: str, weight_pow: float) -> torch.Tensor:
    """(B,) scores -> (B,) sampling weights, verl's three methods:

    * pow: w_i = |s_i| ** weight_pow
    * max_min: w_i = 1 where s_i is the batch's max or min score, else 0
    * max_random: w_i = 0.4 where s_i is the batch's max score, else 0.1

    then clamped to w_i + 1e-8 >= 1e-8 (verl's floor: a zero weight can still be drawn, all-zero weights are
    uniform)."""
    scores = scores.to(torch.float32)
    if reweight_method == "pow":
        weights = scores.abs().pow(weight_pow)
    elif reweight_method == "max_min":
        weights = ((scores == scores.max()) | (scores == scores.min())).to(torch.float32)
    elif reweight_method == "max_random":
        weights = torch.where(scores == scores.max(), 0.4, 0.1)
    else:
        raise ValueError(f"reweight_method must be one of {REWEIGHT_METHODS}, got {reweight_method!r}")
    return (weights + 1e-8).clamp(min=1e-8)


def pf_ppo_resample(scores: torch.Tensor, reweight_method: str, weight_pow: float,
                    generator: torch.Generator) -> torch.Tensor:
    """(B,) row indices drawn with replacement by `pf_ppo_weights` (torch.multinomial, as verl), sorted: the rows
    of a prompt stay adjacent, which rft's mini-batches keep whole (the draw is a multiset, so its order is no part
    of PF-PPO)."""
    weights = pf_ppo_weights(scores, reweight_method, weight_pow)
    return torch.multinomial(weights, len(weights), replacement=True, generator=generator).sort().values
