"""Task selectors (`data.selector`, Trinity-RFT's `data_selector`): which tasks of the training set each explore step
takes, where rft's own sampler (`data.shuffle`: every task once an epoch) is not what the run asks for.

* `random`: each step draws `batch_size` distinct tasks at random, independently of the steps before (a task may
  come back in the next step), from numpy's default_rng(seed + tasks drawn so far).
* `offline_easy2hard`: the tasks sorted by their `feature_keys` columns, highest first (easy to hard), then read in
  that order, wrapping around.
* `difficulty_based` (BOTS, Trinity-RFT's DifficultyBasedSelector): a Beta(alpha, beta) estimate of each task's pass
  rate, updated after every explore step from the step's pass rates (each task's mean reward) and, for the tasks not
  drawn, from two reference pass rates per task (`feature_keys`: a weak and a strong model's) interpolated by a
  capability coefficient fitted to the observed rates; each step takes the tasks whose estimated pass rate (its mean,
  or a draw from the Beta with do_sample) is closest to `target_reward`: the best ones (tau 0) or a softmax sample
  of -|target - p| / tau without replacement.

Every selector's state (the tasks drawn so far, and the estimates of difficulty_based) is checkpointed with the
explorer, so a resumed run draws the tasks an uninterrupted one draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rft.data.io import DataError

SELECTOR_TYPES = ("random", "offline_easy2hard", "difficulty_based")
DIFFICULTY_DEFAULTS = {"m": 16, "lamb": 0.2, "rho": 0.2, "adaptive_rho": False, "target_reward": 1.0, "tau": 1.0,
                       "do_sample": False}
"""difficulty_based's kwargs and Trinity-RFT's defaults for them."""


def features_of(rows: Sequence[dict], keys: Sequence[str], where: str) -> np.ndarray:
    """(N, len(keys)) float: the rows' `keys` columns (the selectors' difficulty features)."""
    out = np.empty((len(rows), len(keys)), dtype=float)
    for i, row in enumerate(rows):
        for j, key in enumerate(keys):
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise DataError(f"{where}: row {i} has {key}={value!r}; data.selector.feature_keys names columns "
                                "that hold a number in every training row")
            out[i, j] = float(value)
    return out


class _Selector:
    """What a taskset asks of its sampler: `next_batch`, `epoch`, `drawn`, the state, and `feedback`."""

    kind = ""

    def __init__(self, num_items: int, batch_size: int, seed: int, batch_key: str):
        if num_items < batch_size:
            raise DataError(f"the training set has {num_items} tasks, fewer than {batch_key}={batch_size} (the tasks "
                            f"of one step, which data.selector={self.kind} draws without repeats): lower {batch_key} "
                            f"to at most {num_items}, or add tasks")
        self.num_items, self.batch_size, self.seed, self.batch_key = num_items, batch_size, seed, batch_key
        self.current_index = 0  # tasks drawn so far (Trinity-RFT's name)

    @property
    def epoch(self) -> int:
        return self.current_index // self.num_items

    @property
    def drawn(self) -> int:
        return self.current_index // self.batch_size

    def next_batch(self) -> list[int]:
        indices = self._select()
        self.current_index += self.batch_size
        return [int(i) for i in indices]

    def _select(self) -> Sequence[int]:
        raise NotImplementedError

    def feedback(self, indices: Sequence[int], values: Sequence[float]) -> None:
        """The pass rates (mean rewards) of the tasks at `indices` in the last step; only difficulty_based reads them."""

    def state_dict(self) -> dict:
        # "selector_seed", not "seed": a checkpoint's sampler "seed" is data.seed to the resume's early check
        return {"selector": self.kind, "current_index": self.current_index, "selector_seed": self.seed,
                "num_items": self.num_items, "batch_size": self.batch_size}

    def load_state_dict(self, state: dict) -> None:
        """Continue where `state` stopped; refused when the selector, the tasks, the batch size or the seed differ."""
        for key, what in (("selector", "data.selector.selector_type"), ("selector_seed", "data.selector.seed"),
                          ("num_items", "the number of training tasks"), ("batch_size", self.batch_key)):
            mine = {"selector": self.kind, "selector_seed": self.seed}.get(key, getattr(self, key, None))
            if state.get(key) != mine:
                raise DataError(f"the checkpoint was written with {what}={state.get(key)}, this run has {mine}; "
                                "resume with the same data, selector and batch size (or set "
                                "trainer.resume_mode=disable)")
        self.current_index = int(state["current_index"])


class RandomSelector(_Selector):
    kind = "random"

    def _select(self) -> Sequence[int]:
        rng = np.random.default_rng(self.seed + self.current_index)
        return rng.choice(self.num_items, self.batch_size, replace=False)


class OfflineEasy2HardSelector(_Selector):
    kind = "offline_easy2hard"

    def __init__(self, features: np.ndarray, batch_size: int, seed: int, batch_key: str):
        super().__init__(len(features), batch_size, seed, batch_key)
        # highest features first, ties to the later row (Trinity-RFT sorts [features..., index] and reverses)
        self.order = np.array(sorted(range(len(features)), key=lambda i: (*features[i], i), reverse=True))

    def _select(self) -> Sequence[int]:
        start = self.current_index % self.num_items
        return np.take(self.order, np.arange(start, start + self.batch_size), mode="wrap")


class DifficultyBasedSelector(_Selector):
    kind = "difficulty_based"

    def __init__(self, features: np.ndarray, batch_size: int, seed: int, batch_key: str, kwargs: dict[str, Any]):
        super().__init__(len(features), batch_size, seed, batch_key)
        o = {**DIFFICULTY_DEFAULTS, **kwargs}
        self.features = features  # (N, 2): the weak and the strong reference pass rates
        self.m, self.lamb, self.rho = int(o["m"]), float(o["lamb"]), float(o["rho"])
        self.adaptive_rho, self.do_sample = bool(o["adaptive_rho"]), bool(o["do_sample"])
        self.target, self.tau = float(o["target_reward"]), float(o["tau"])
        self.alphas, self.betas = np.ones(self.num_items), np.ones(self.num_items)
        self.cap_coef: float | None = None
        self.cap_discount = 0.9

    def predicted_pass_rates(self) -> np.ndarray:
        if not self.do_sample:
            return self.alphas / (self.alphas + self.betas)
        return np.random.default_rng(self.seed + self.current_index).beta(self.alphas, self.betas)

    def _select(self) -> Sequence[int]:
        scores = torch.from_numpy(-np.abs(self.target - self.predicted_pass_rates()))
        if self.tau == 0:
            return torch.topk(scores, self.batch_size).indices.tolist()
        logits = scores / self.tau
        probs = torch.softmax(logits - logits.max(), dim=0)
        g = torch.Generator().manual_seed(self.seed + self.current_index)
        return torch.multinomial(probs, self.batch_size, replacement=False, generator=g).tolist()

    def feedback(self, indices: Sequence[int], values: Sequence[float]) -> None:
        """Trinity-RFT's InterpolationBetaPREstimator.update: the capability coefficient c (a running mean, 0.9 of the
        old), each task's interpolated rate p~ = clip(f0 + c (f1 - f0), 0, 1) (the observed rate for the tasks
        drawn), then alpha <- (1 - lamb) alpha + lamb + (1 - rho) m s + rho m p~, and beta alike with the failures."""
        idx, rates = np.asarray(indices, dtype=int), np.asarray(values, dtype=float)
        if not len(idx):
            return
        anchor = self.features[idx].mean(axis=0)
        estimate = (rates.mean() - anchor[0]) / (anchor[1] - anchor[0] + 1e-6)
        self.cap_coef = estimate if self.cap_coef is None else \
            self.cap_discount * self.cap_coef + (1 - self.cap_discount) * estimate
        s_bar, f_bar = np.zeros(self.num_items), np.zeros(self.num_items)
        s_bar[idx], f_bar[idx] = rates * self.m, (1 - rates) * self.m
        p_tilde = np.clip((self.features[:, 1] - self.features[:, 0]) * self.cap_coef + self.features[:, 0], 0, 1)
        if self.adaptive_rho and np.mean(np.abs(p_tilde[idx] - rates)) >= 0.25:
            self.rho *= 0.5
        p_tilde[idx] = rates
        self.alphas = (1 - self.lamb) * self.alphas + self.lamb + (1 - self.rho) * s_bar + self.rho * p_tilde * self.m
        self.betas = ((1 - self.lamb) * self.betas + self.lamb + (1 - self.rho) * f_bar
                      + self.rho * (1 - p_tilde) * self.m)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "alphas": self.alphas.tolist(), "betas": self.betas.tolist(),
                "cap_coef": self.cap_coef, "rho": self.rho}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.alphas, self.betas = np.asarray(state["alphas"], dtype=float), np.asarray(state["betas"], dtype=float)
        self.cap_coef, self.rho = state["cap_coef"], float(state["rho"])


def build_selector(spec, rows: Sequence[dict], batch_size: int, batch_key: str, where: str) -> _Selector:
    """data.selector's selector over the training tasks `rows` (their raw rows, for the feature columns)."""
    kind = spec.selector_type
    if kind == "random":
        return RandomSelector(len(rows), batch_size, spec.seed, batch_key)
    features = features_of(rows, list(spec.feature_keys), where)
    if kind == "offline_easy2hard":
        return OfflineEasy2HardSelector(features, batch_size, spec.seed, batch_key)
    return DifficultyBasedSelector(features, batch_size, spec.seed, batch_key, dict(spec.kwargs))
