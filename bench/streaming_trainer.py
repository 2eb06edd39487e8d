"""Streaming against step-synchronous rollouts at the trainer level (`python bench/streaming.py --trainer`).

The same GRPO run (tiny model, arithmetic prompts, one seed) with the engine in its `rft serve` process
(`actor_rollout_ref.rollout.mode=async`), three ways, alternating within each round so that a slow spell of this
shared machine weighs on each:
* `step-sync`: each step's batch as one request, the step waiting for its longest response (no streaming);
* `stream`: `async_training.staleness_threshold=1`: up to twice a step's groups outstanding, each step training the
  first complete ones while the others generate during the update, in-flight rows taking new weights (partial
  rollouts);
* `stream det`: the same with `async_training.deterministic=true` (task order, requests finished before each sync).

The long tail: the model folder's generation config lists one vocabulary id in `1/stop` as an EOS id, so a response
of the random model stops with probability ~1/stop a token: geometric lengths, median ~0.7 x stop, a tail to the cap
(`--response`, 8x stop by default), most short, a few 8x longer. The figure: trained response tokens per second of
step time over the steps after the first (which starts the server and warms up), the median over the rounds, and
the ratio to step-sync; the response lengths' median / p90 / max say the tail. Beside it, over the same steps:
the reward per trained token (the rewards' mean weighted by response length: streaming trains the short
responses first, and this says whether what it trains is worth less), the trainer's idle share (the step time
spent waiting for rollouts: `timing_s/gen` + `timing_s/sync_wait` over `timing_s/step`) and the staleness
histogram of the trained tokens (the step's weights' version minus the version that drew each token).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

MODES = {"step-sync": [], "stream": ["async_training.staleness_threshold=1"],
         "stream det": ["async_training.staleness_threshold=1", "async_training.deterministic=true"]}


def long_tailed(model: Path, stop: int) -> None:
    """Every `stop`-th vocabulary id an EOS id of the model folder's generation config (the server and the trainer
    read it): a random model's response then ends with probability ~1/stop at each token."""
    path = model / "generation_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    first = config.get("eos_token_id")
    first = first if isinstance(first, list) else [first] if first is not None else []
    config["eos_token_id"] = sorted(set(first) | set(range(3, vocab, stop)))
    path.write_text(json.dumps(config))


@dataclass
class Figures:
    """One run's figures over steps 2.. (the first starts the server and warms up)."""
    rate: float  # trained response tokens per second of step time
    lengths: list[int]  # every trained response's length
    reward: float  # the rewards' mean over the trained tokens: sum(reward x length) / sum(length)
    idle: float  # the trainer's idle share: (gen + sync_wait) / step, the time it waited for rollouts
    staleness: Counter  # trained tokens by versions behind the step's weights: (step - 1) - the token's version


def run(root: Path, out: Path, mode: str, steps: int, response: int, prompts: int, n: int) -> Figures:
    from rl_helpers import rl_config

    from rft.experience import Experience
    from rft.orchestration.run import SyncRun

    cfg = rl_config(root, out, "actor_rollout_ref.rollout.mode=async", f"trainer.total_training_steps={steps}",
                    f"data.max_response_length={response}", f"data.train_batch_size={prompts}",
                    f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}", f"actor_rollout_ref.rollout.n={n}",
                    "trainer.logger=[file]", "experience_buffer.storage_type=sql",
                    f"experience_buffer.path={out / 'buffer.sqlite'}", *MODES[mode])
    SyncRun(cfg).fit()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][1:]
    tokens = sum(m["response_length/mean"] * prompts * n for m in lines)
    step_time = sum(m["timing_s/step"] for m in lines)
    waited = sum(m.get("timing_s/gen", 0.0) + m.get("timing_s/sync_wait", 0.0) for m in lines)
    with sqlite3.connect(out / "buffer.sqlite") as db:
        rows = [Experience.from_bytes(p) for (p,) in db.execute("SELECT payload FROM rft_experiences")]
    rows = [e for e in rows if e.info["explore_step"] >= 2]
    staleness: Counter = Counter()
    for e in rows:
        versions = e.versions.tolist() if e.versions is not None else [e.model_version] * len(e.response)
        staleness.update((e.info["explore_step"] - 1) - v for v in versions)
    lengths = [len(e.response) for e in rows]
    reward = sum(e.reward * len(e.response) for e in rows) / sum(lengths)
    return Figures(tokens / step_time, lengths, reward, waited / step_time, staleness)


def measure(repeats: int, steps: int, response: int, stop: int, prompts: int, n: int) -> list[str]:
    from rl_helpers import make_assets

    from rft.runtime import cpu_model

    runs: dict[str, list[Figures]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        root = make_assets(Path(tmp) / "assets")
        long_tailed(root / "model", stop)
        for r in range(repeats):
            for mode in MODES:
                got = run(root, Path(tmp) / f"{mode.replace(' ', '_')}{r}", mode, steps, response, prompts, n)
                runs[mode].append(got)
                print(f"{mode} round {r}: {got.rate:.0f} trained tokens/s, reward per trained token "
                      f"{got.reward:.4f}, idle {got.idle:.0%}", flush=True)
    lengths = sorted(x for v in runs.values() for f in v for x in f.lengths)

    def med(mode, fn):
        return statistics.median(fn(f) for f in runs[mode])

    base = med("step-sync", lambda f: f.rate)
    lines = [f"{cpu_model()}, GRPO on the tiny model, {prompts} prompts x {n} a step, {steps} steps (the first left "
             f"out), responses up to {response} tokens, load average {os.getloadavg()[0]:.1f} at the end (a machine "
             f"other sessions share: the ratio is the figure); response lengths median {lengths[len(lengths) // 2]}, "
             f"p90 {lengths[int(len(lengths) * 0.9)]}, max {lengths[-1]}", "",
             f"| mode | trained tokens/s (median of {repeats}) | vs step-sync | reward per trained token | "
             "trainer idle share | trained tokens by versions behind (all rounds) |", "|---|---|---|---|---|---|"]
    for mode in MODES:
        hist = sum((f.staleness for f in runs[mode]), Counter())
        total = sum(hist.values())
        cells = ", ".join(f"{v}: {hist[v] / total:.0%}" for v in sorted(hist))
        rate = med(mode, lambda f: f.rate)
        lines.append(f"| {mode} | {rate:.0f} | {rate / base:.2f}x | {med(mode, lambda f: f.reward):.4f} | "
                     f"{med(mode, lambda f: f.idle):.0%} | {cells} |")
    return lines
