"""DAPO's batch-level options (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at
Scale", arXiv:2503.14476), as verl's DAPO recipe defines them: the soft overlong punishment added to the score,
and the group filter of dynamic sampling. Pure tensor functions; the RL loop (trainer/rl.py) applies them.
"""

from __future__ import annotations

import torch


def overlong_penalty(
    lengths: torch.Tensor, max_response_length: int, buffer_len: int, penalty_factor: float
) -> torch.Tensor:
    """Soft overlong punishment (DAPO section 3.4; verl's ``reward_model.overlong_buffer``), (B,) -> (B,).

    With L the response length in tokens and expected = max_response_length - buffer_len:
      penalty = min(0, -(L - expected) / buffer_len * penalty_factor)
    0 up to ``expected`` tokens, then falling linearly to -penalty_factor at max_response_length. The caller
    adds it to the score. Raises ValueError unless 0 < buffer_len <= max_response_length.
    """
    if not 0 < buffer_len <= max_response_length:
        raise ValueError(f"buffer_len must be in (0, max_response_length={max_response_length}], got {buffer_len}")
    expected = max_response_length - buffer_len
    exceed = lengths.to(torch.float64) - expected
    return (-exceed / buffer_len * penalty_factor).clamp(max=0.0).to(torch.float32)


def informative_groups(group: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Dynamic sampling's filter (DAPO section 3.2; verl's ``algorithm.filter_groups``): (B,), (B,) -> (B,) bool.

    True on the rows of every group whose ``values`` (the filter metric per row) do not all agree, and on the
    rows of single-row groups (verl keeps those too); False on the rows of groups where every value is the
    same (all solved or all failed: zero advantage, no gradient). verl tests ``std > 0``; this tests
    ``max != min``, the same thing without the rounding of a float standard deviation.
    """
    labels, inverse, counts = torch.unique(group, return_inverse=True, return_counts=True)
    values = values.to(torch.float64)
    high = torch.full((len(labels),), -torch.inf, dtype=torch.float64).scatter_reduce(0, inverse, values, "amax")
    low = torch.full((len(labels),), torch.inf, dtype=torch.float64).scatter_reduce(0, inverse, values, "amin")
    keep = (high > low) | (counts == 1)
    return keep[inverse]
