"""In-reward KL coefficient controllers (Ziegler et al. 2019, "Fine-Tuning Language Models from Human
Preferences"; verl's FixedKLController / AdaptiveKLController).

adaptive: e = clip(kl / target_kl - 1, -0.2, 0.2); beta <- beta * (1 + e * n_steps / horizon),
where n_steps is the number of rows the KL was measured on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FixedKLController:
    value: float

    def update(self, current_kl: float, n_steps: int) -> None:
        del current_kl, n_steps


@dataclass
class AdaptiveKLController:
    value: float
    target_kl: float
    horizon: int

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def make_kl_controller(kind: str, kl_coef: float, target_kl: float = 0.1, horizon: int = 10000):
    if kind == "fixed":
        return FixedKLController(kl_coef)
    if kind == "adaptive":
        if target_kl <= 0 or horizon <= 0:
            raise ValueError("algorithm.kl_ctrl.target_kl and horizon must be > 0 for the adaptive controller")
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"unknown KL controller {kind!r}; valid: adaptive, fixed")
