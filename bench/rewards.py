"""Typed reward scoring, in process vs in worker processes (rft.rewards.parallel): rows per second and the speed-up.

    python bench/rewards.py [--gsm8k DIR] [--workers N] [--rows 32,128,512] [--repeats 3]

Rows are GSM8K test questions. Two kinds of response: "marked", the reference solution ending in "#### N" (math_reward
parses only the text after "####": the cheap case), and "unmarked", the same solution without its "####" line
(math-verify searches the whole text: the dear case). Each batch is scored by math_reward with the default time
limit, once in process and once in workers (the pool started beforehand, as it is after a run's first batch), and the
two results must be identical. Besides wall-clock rows/s it reports the CPU seconds each way took (this process plus
the workers, from /proc): on a loaded machine the wall clock shows the share of the cores one gets, the CPU seconds
what the workers cost over the in-process loop.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from rft.rewards import build_reward_fn, parallel, score_responses
from rft.rewards.parallel import default_workers, score_in_processes, shutdown

GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"


def batches(gsm8k: Path, rows: int) -> dict[str, tuple[list, list]]:
    examples = [json.loads(line) for line in (gsm8k / "test.jsonl").read_text().splitlines() if line.strip()]
    examples = (examples * (rows // len(examples) + 1))[:rows]
    golds = [e["answer"] for e in examples]
    marked = [e["answer"] for e in examples]
    unmarked = [e["answer"].rsplit("####", 1)[0] for e in examples]
    return {"marked": (marked, golds), "unmarked": (unmarked, golds)}


def cpu_seconds() -> float:
    """CPU time of this process and of the live worker processes (user + system)."""
    total = sum(os.times()[:2])
    for pool in parallel._pools.values():
        for pid in pool._processes:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def timed(fn, responses, golds, repeats: int) -> tuple[float, float, tuple]:
    """(rows/s of the fastest repeat, CPU ms per row over all repeats, the result)."""
    best, result = float("inf"), None
    n = len(responses)
    cpu = cpu_seconds()
    for _ in range(repeats):
        start = time.perf_counter()
        result = score_responses(fn, ["openai/gsm8k"] * n, responses, golds, [None] * n)
        best = min(best, time.perf_counter() - start)
    return n / best, 1000 * (cpu_seconds() - cpu) / (n * repeats), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k", type=Path, default=GSM8K)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--rows", default="16,32,64,128,512")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    serial = build_reward_fn(None, timeout=60.0, reward_fn_type="math_reward", num_workers=1)
    parallel_fn = build_reward_fn(None, timeout=60.0, reward_fn_type="math_reward", num_workers=args.workers)
    score_in_processes(parallel_fn, [("x", "#### 1", "1", None)] * 64, args.workers)  # start the workers
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"math_reward, {args.workers} workers, {os.cpu_count()} cores, load {load} (rows/s: best of {args.repeats})")
    print("| responses | rows | in process rows/s | workers rows/s | speed-up | CPU ms/row in process | CPU ms/row workers |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for rows in (int(r) for r in args.rows.split(",")):
        for kind, (responses, golds) in batches(args.gsm8k, rows).items():
            one, one_cpu, one_result = timed(serial, responses, golds, args.repeats)
            many, many_cpu, many_result = timed(parallel_fn, responses, golds, args.repeats)
            assert one_result == many_result, f"{kind} x {rows}: the worker results differ"
            print(f"| {kind} | {rows} | {one:.0f} | {many:.0f} | {many / one:.2f}x | {one_cpu:.2f} | {many_cpu:.2f} |",
                  flush=True)
    shutdown()


if __name__ == "__main__":
    main()
