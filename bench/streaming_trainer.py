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
the ratio to step-sync; the response lengths' median / p90 / max say the tail.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
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


def run(root: Path, out: Path, mode: str, steps: int, response: int, prompts: int, n: int
        ) -> tuple[float, list[int]]:
    """Trained response tokens per second of step time over steps 2.. of one run; every trained length."""
    from rl_helpers import rl_config

    from rft.trainer.run import SyncRun

    cfg = rl_config(root, out, "actor_rollout_ref.rollout.mode=async", f"trainer.total_training_steps={steps}",
                    f"data.max_response_length={response}", f"data.train_batch_size={prompts}",
                    f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}", f"actor_rollout_ref.rollout.n={n}",
                    "trainer.logger=[file]", "experience_buffer.storage_type=sql",
                    f"experience_buffer.path={out / 'buffer.sqlite'}", *MODES[mode])
    SyncRun(cfg).fit()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][1:]
    tokens = sum(m["response_length/mean"] * prompts * n for m in lines)
    import sqlite3

    from rft.experience import Experience

    with sqlite3.connect(out / "buffer.sqlite") as db:
        lengths = [len(Experience.from_bytes(p).response) for (p,) in db.execute("SELECT payload FROM "
                                                                                  "rft_experiences")]
    return tokens / sum(m["timing_s/step"] for m in lines), lengths


def measure(repeats: int, steps: int, response: int, stop: int, prompts: int, n: int) -> list[str]:
    from rl_helpers import make_assets

    from rft.runtime import cpu_model

    rates: dict[str, list[float]] = {m: [] for m in MODES}
    lengths: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = make_assets(Path(tmp) / "assets")
        long_tailed(root / "model", stop)
        for r in range(repeats):
            for mode in MODES:
                rate, got = run(root, Path(tmp) / f"{mode.replace(' ', '_')}{r}", mode, steps, response, prompts, n)
                rates[mode].append(rate)
                lengths += got
                print(f"{mode} round {r}: {rate:.0f} trained tokens/s", flush=True)
    import os

    lengths.sort()
    base = statistics.median(rates["step-sync"])
    lines = [f"{cpu_model()}, GRPO on the tiny model, {prompts} prompts x {n} a step, {steps} steps (the first left "
             f"out), responses up to {response} tokens, load average {os.getloadavg()[0]:.1f} at the end (a machine "
             f"other sessions share: the ratio is the figure); response lengths median {lengths[len(lengths) // 2]}, "
             f"p90 {lengths[int(len(lengths) * 0.9)]}, max {lengths[-1]}", "",
             "| mode | trained tokens/s (median of " + f"{repeats}) | vs step-sync |", "|---|---|---|"]
    lines += [f"| {m} | {statistics.median(v):.0f} | {statistics.median(v) / base:.2f}x |" for m, v in rates.items()]
    return lines
