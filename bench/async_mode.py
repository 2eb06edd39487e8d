"""`actor_rollout_ref.rollout.mode` sync against async, side by side in one invocation: the same GRPO run (tiny model,
arithmetic, one seed) with the engine in the trainer's process and with the engine in an `rft serve` process
(continuous batching, weights sent at every sync). Runs alternate (sync, async, sync, async, ...), so a load that
changes meanwhile weighs on both; the figure is the ratio of trained response tokens per second of step time,
steps after the first (which loads and warms up) only.

    python bench/async_mode.py [--repeats 2] [--steps 6] [--response 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


PHASES = ("gen", "old_log_prob", "update_actor", "sync")


def run(root: Path, out: Path, mode: str, steps: int, response: int, prompts: int, n: int
        ) -> tuple[float, dict[str, float]]:
    """Trained response tokens per second of step time over steps 2.. of one run, and the mean seconds a step of
    each phase took."""
    from rl_helpers import rl_config

    from rft.orchestration.run import SyncRun

    cfg = rl_config(root, out, f"actor_rollout_ref.rollout.mode={mode}", f"trainer.total_training_steps={steps}",
                    f"data.max_response_length={response}", f"data.train_batch_size={prompts}",
                    f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}", f"actor_rollout_ref.rollout.n={n}",
                    "trainer.logger=[file]")
    SyncRun(cfg).fit()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][1:]
    tokens = sum(m["response_length/mean"] * prompts * n for m in lines)
    phases = {k: statistics.mean(m.get(f"timing_s/{k}", 0.0) for m in lines) for k in PHASES}
    return tokens / sum(m["timing_s/step"] for m in lines), phases


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--response", type=int, default=64)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=4)
    args = p.parse_args()
    from rl_helpers import make_assets

    with tempfile.TemporaryDirectory() as tmp:
        root = make_assets(Path(tmp) / "assets")
        rates: dict[str, list[float]] = {"sync": [], "async": []}
        for r in range(args.repeats):
            for mode in rates:
                rate, phases = run(root, Path(tmp) / f"{mode}{r}", mode, args.steps, args.response, args.prompts,
                                   args.n)
                rates[mode].append(rate)
                print(f"{mode} run {r}: {rate:.0f} trained tokens/s; s a step: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()), flush=True)
    sync, served = statistics.median(rates["sync"]), statistics.median(rates["async"])
    print(f"median trained tokens/s: sync {sync:.0f}, async {served:.0f}; async / sync = {served / sync:.2f}")


if __name__ == "__main__":
    main()
