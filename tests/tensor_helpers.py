"""Small helpers of the tensor-math tests: float64 tensors from literals and an exact-to-atol comparison."""

from __future__ import annotations

import torch

F64 = torch.float64


def t(data, dtype=F64) -> torch.Tensor:
    return torch.tensor(data, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-9) -> None:
    """`actual` equals `expected` (a tensor or nested numbers) within `atol`, no relative tolerance."""
    expected = expected if isinstance(expected, torch.Tensor) else torch.tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected.to(actual.dtype), atol=atol, rtol=0)
