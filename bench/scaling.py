"""Explorers and trainers at scale on this machine (issue 26): the experience buffer under many writers, and a run
with 1, 2 and 4 explorer processes beside 1 and 2 trainer processes, all on one PostgreSQL buffer (the `pgserver`
wheel's server on 127.0.0.1, as the tests start it).

    python bench/scaling.py [--writers 100] [--steps 8] [--no-write]

1. Buffer: `--writers` threads (over 4 processes), each with its own connection (as many explorers on as many
   machines would have), write explore steps of 16 experiences of 64 response tokens as fast as the database takes
   them while one reader process claims 128 at a time (a trainer). Reported: experiences written per second, write latency (median / 95th
   percentile per step), experiences read per second.
2. Runs: `rft train` in mode both, tiny preset, GRPO 16 prompts x 8 samples x 16 tokens, `trainer.explorer_num` E
   explorer processes and `trainer.n_gpus_per_node` T trainer processes, sync_interval 1 with sync_offset E (each
   explorer one turn ahead), weights through sync files. Reported: experiences per second into the buffer and
   trainer steps per second (steady state: from the trainer's first metrics line to its last), and where the time
   goes from the processes' own timers: the explorers' generation, buffer writes and weight loads; the trainer's
   buffer reads (waiting for experiences), update and weight writes.

On 2 cores every extra process shares the same two cores: the table shows the overheads of the shape (buffer,
sync, process start), not a speed-up, which needs a core (or a GPU) per process; docs/scaling.md reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from decoupled import watch_lines  # noqa: E402
from results_md import append_section  # noqa: E402

from bench import cpu_name, wait_idle  # noqa: E402


# ----------------------------------------------------------------------------------------------- buffer
def experiences(step: int, writer: int, rows: int = 16, response: int = 64) -> list:
    import torch

    from rft.experience import Experience

    out = []
    for i in range(rows):
        tokens = torch.randint(0, 32000, (32 + response,))
        e = Experience(tokens=tokens, prompt_length=32, action_mask=torch.ones(response, dtype=torch.long),
                       logprobs=torch.randn(response), reward=float(i % 2), group=f"{writer}-{step}-{i // 8}",
                       model_version=0, info={"explore_step": step})
        out.append(e)
    return out


def _writers(url: str, first: int, count: int, seconds: float, results) -> None:
    """`count` writer threads (writers first.. first + count - 1), each with its own connection, for `seconds`."""
    from rft.buffer.sql import SQLBuffer

    stop = threading.Event()
    latencies: list[float] = []
    written, errors = [0], []

    def write(k: int) -> None:
        buffer = SQLBuffer(url)
        batch = experiences(0, k)
        step = 0
        try:
            while not stop.is_set():
                step += 1
                for e in batch:
                    e.id = f"{k}-{step}-{e.group}-{id(e)}"
                t0 = time.perf_counter()
                buffer.write(batch)
                latencies.append(time.perf_counter() - t0)
                written[0] += len(batch)
        except Exception as e:  # reported, not raised: the rate so far stands
            errors.append(f"writer {k}: {e}")
        finally:
            buffer.close()

    threads = [threading.Thread(target=write, args=(k,), daemon=True) for k in range(first, first + count)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    results.put((written[0], latencies, errors))


def _reader(url: str, seconds: float, results) -> None:
    """A trainer's reads of 128 experiences, for `seconds`."""
    from rft.buffer.sql import SQLBuffer

    buffer = SQLBuffer(url, poll_s=0.01)
    end, step, read = time.monotonic() + seconds, 0, 0
    while time.monotonic() < end:
        step += 1
        with contextlib.suppress(TimeoutError):
            read += len(buffer.read(128, step, timeout=1.0).experiences)
    buffer.close()
    results.put(read)


def buffer_stress(url: str, writers: int, seconds: float, processes: int = 4) -> dict:
    """`writers` writer threads over `processes` processes (one Python process holding 100 threads would measure
    its own lock, not the database's), and one reader process."""
    import multiprocessing as mp

    from rft.buffer.sql import SQLBuffer

    SQLBuffer(url).close()  # the tables, once
    ctx = mp.get_context("spawn")
    results, reads = ctx.Queue(), ctx.Queue()
    shares = [writers // processes + (i < writers % processes) for i in range(processes)]
    url = str(url)  # a plain string for the processes (the test server's URL carries its restart())
    procs = [ctx.Process(target=_writers, args=(url, sum(shares[:i]), n, seconds, results))
             for i, n in enumerate(shares) if n]
    procs.append(ctx.Process(target=_reader, args=(url, seconds, reads)))
    start = time.perf_counter()
    for p in procs:
        p.start()
    parts = [results.get(timeout=seconds + 300) for _ in procs[:-1]]
    read = reads.get(timeout=seconds + 300)
    for p in procs:
        p.join(timeout=60)
    wall = time.perf_counter() - start
    lat = sorted(x for _, part, _ in parts for x in part)
    return {"writers": writers, "written_per_s": sum(n for n, _, _ in parts) / wall, "read_per_s": read / wall,
            "p50_ms": 1e3 * lat[len(lat) // 2] if lat else float("nan"),
            "p95_ms": 1e3 * lat[int(len(lat) * 0.95)] if lat else float("nan"),
            "errors": [e for _, _, errs in parts for e in errs], "writes": len(lat)}


# ------------------------------------------------------------------------------------------------- runs
def mean_of(lines: list[dict], key: str) -> float:
    values = [x[key] for x in lines if key in x]
    return statistics.mean(values) if values else 0.0


def run(model: Path, data: Path, out: Path, url: str, explorers: int, trainers: int, steps: int) -> dict:
    args = [f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", "data.max_prompt_length=32",
            "data.max_response_length=16", "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.ignore_eos=true",
            "actor_rollout_ref.actor.optim.lr=1e-5", "trainer.val_before_train=false",
            f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", f"trainer.default_local_dir={out}",
            "trainer.logger=[]", f"trainer.explorer_num={explorers}", f"trainer.n_gpus_per_node={trainers}",
            f"synchronizer.sync_offset={explorers}", "synchronizer.sync_method=checkpoint",
            f"experience_buffer.path={url}", "experience_buffer.storage_type=sql"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    folders = [out] + [out / ("explorer" if k == 0 else f"explorer_{k}") for k in range(explorers)]
    stamps: list[dict[int, float]] = [{} for _ in folders]  # when each step's metrics line appeared
    stop = threading.Event()
    watchers = [threading.Thread(target=watch_lines, args=(f / "metrics.jsonl", d, stop), daemon=True)
                for f, d in zip(folders, stamps)]
    for w in watchers:
        w.start()
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rft", "train", *args], env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    stop.set()
    for w in watchers:
        w.join()
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"rft train failed (explorers {explorers}, trainers {trainers}, exit {proc.returncode})")
    # steady state: the first step of each side (process start, the first sync) left out
    lines = [[json.loads(x) for x in (f / "metrics.jsonl").read_text().splitlines() if x.strip()] for f in folders]
    trainer = [x for x in lines[0] if x["step"] > 1]
    explorer = [x for side in lines[1:] for x in side if x["step"] > 1]
    steady = (stamps[0][steps] - stamps[0][1]) / (steps - 1)
    written = sorted(t for d in stamps[1:] for t in d.values())
    rows = 16 * 8
    return {"explorers": explorers, "trainers": trainers, "wall_s": wall, "steps_per_s": 1 / steady,
            "exp_per_s": rows * (len(written) - 1) / (written[-1] - written[0]), "gen_s": mean_of(explorer, "timing_s/gen"),
            "write_s": mean_of(explorer, "timing_s/write"), "explorer_sync_s": mean_of(explorer, "timing_s/sync"),
            "read_s": mean_of(trainer, "timing_s/read"), "update_s": mean_of(trainer, "timing_s/update_actor"),
            "trainer_sync_s": mean_of(trainer, "timing_s/sync"), "step_s": mean_of(trainer, "timing_s/step")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the buffer measurement")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--explorers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--trainers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--buffer-only", action="store_true", help="only the buffer measurement")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--wait-idle", type=float, default=60.0)
    args = ap.parse_args()
    from pg_server import postgres
    from transformers.utils import logging as hf_logging

    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    hf_logging.disable_progress_bar()
    machine = f"{cpu_name()}, nproc {os.cpu_count()}, CPU, fp32"
    print(f"rft scaling bench: {machine}", flush=True)
    lines = []
    with postgres(max_connections=args.writers + 20) as url:
        wait_idle(args.wait_idle)
        b = buffer_stress(url, args.writers, args.seconds)
        print(f"  buffer: {b['writers']} writers {b['written_per_s']:.0f} exp/s written, {b['read_per_s']:.0f} exp/s "
              f"read, write p50 {b['p50_ms']:.0f} ms p95 {b['p95_ms']:.0f} ms, {len(b['errors'])} errors", flush=True)
        lines += ["| concurrent writers | steps written | experiences written / s | write latency p50 / p95 (ms, "
                  "16 experiences) | experiences read / s (one reader) | errors |", "|---|---|---|---|---|---|",
                  f"| {b['writers']} | {b['writes']} | {b['written_per_s']:.0f} | {b['p50_ms']:.0f} / "
                  f"{b['p95_ms']:.0f} | {b['read_per_s']:.0f} | {len(b['errors'])} |", ""]
        for err in b["errors"][:3]:
            lines.append(f"error: {err}")
    rows = []
    if args.buffer_only:
        args.explorers = []
    with tempfile.TemporaryDirectory(prefix="rft-scaling-") as tmp:
        tmp = Path(tmp)
        data = write_arithmetic(tmp / "data", n_train=2000, n_val=10, seed=0)["train"]
        model = init_model("tiny", tmp / "model", seed=0)
        for trainers in args.trainers:
            for explorers in args.explorers:
                with postgres() as url:
                    wait_idle(args.wait_idle)
                    r = run(model, data, tmp / f"out-{explorers}-{trainers}", url, explorers, trainers, args.steps)
                rows.append(r)
                print(f"  {explorers} explorer(s), {trainers} trainer(s): {r['steps_per_s']:.2f} steps/s, "
                      f"{r['exp_per_s']:.0f} exp/s, wall {r['wall_s']:.0f} s", flush=True)
    if rows:
        lines += ["| explorers | trainer processes | trainer steps / s | experiences / s into the buffer | explorer: "
                  "generation s | buffer write s | weight load s | trainer: buffer read (wait) s | update s | weight "
                  "write s | step s | command wall s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['explorers']} | {r['trainers']} | {r['steps_per_s']:.2f} | {r['exp_per_s']:.0f} | "
                         f"{r['gen_s']:.3f} | {r['write_s']:.3f} | {r['explorer_sync_s']:.3f} | {r['read_s']:.3f} | "
                         f"{r['update_s']:.3f} | {r['trainer_sync_s']:.3f} | {r['step_s']:.3f} | {r['wall_s']:.0f} |")
        lines += ["", f"Runs: mode both, tiny preset, GRPO 16 prompts x 8 samples x 16 tokens (ignore_eos), "
                  f"{args.steps} steps, sync_interval 1 and sync_offset = explorers, sync files, a fresh PostgreSQL "
                  "per run. Trainer steps / s: from the trainer's first metrics line to its last; experiences / s: "
                  "from the first explore step's line to the last, over all explorers. Per-step phase times are the "
                  "processes' own timers over steps 2.. (step 1 holds the process start; explorer means over all "
                  "explorers). Every process has one thread; on 2 cores the processes share the cores."]
    print("\n".join(lines))
    if not args.no_write:
        append_section(f"explorers and trainers on one PostgreSQL buffer (bench/scaling.py) — {machine}", lines)


if __name__ == "__main__":
    main()
