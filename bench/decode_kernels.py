"""Generation under each kernel rule of `rft.rollout.kernels`, side by side: the same greedy generation of a tiny
model and of a Qwen2.5-0.5B-shaped one (random weights) with every product on MKL (`aten`), on oneDNN (`onednn`)
and by the shape rule (`auto`, the default), the rules alternating so that a slow spell of a shared machine hits
each; then the products of the 0.5B model's shapes on each kernel alone.

    python bench/decode_kernels.py [--rows 16] [--tokens 16] [--repeats 3] [--no-write]

Appends a section to bench/RESULTS.md (the CPU and the load named)."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from results_md import append_section

from bench import real_size_model  # bench/bench.py: the script's folder is on sys.path
from rft.models.tiny import init_model
from rft.rollout import HFRollout, SamplingParams, kernels
from rft.runtime import configure_cpu_runtime, cpu_model

RULES = ("aten", "onednn", "auto")


def generation_seconds(model, rows: int, tokens: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of one greedy generation of `rows` rows x `tokens` tokens under each rule, `repeats` rounds."""
    prompts = torch.randint(0, 250, (rows, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompts)
    engine = HFRollout(model, eos_token_ids=[274], pad_token_id=272)
    params = SamplingParams(n=1, max_tokens=tokens, ignore_eos=True, do_sample=False)
    times: dict[str, list[float]] = {rule: [] for rule in RULES}
    for _ in range(repeats):
        for rule in RULES:
            os.environ[kernels.KERNEL_ENV] = rule
            start = time.perf_counter()
            engine.generate(prompts, mask, params, torch.Generator().manual_seed(0))
            times[rule].append(time.perf_counter() - start)
    os.environ.pop(kernels.KERNEL_ENV)
    return times


def product_microseconds(k: int, n: int, rows: int, calls: int) -> tuple[float, float]:
    """The median of `calls` products (rows, k) x (k, n) on MKL and on oneDNN, alternating."""
    weight, x = torch.randn(n, k), torch.randn(rows, k)
    spent: dict[str, list[float]] = {"aten": [], "onednn": []}
    for _ in range(calls):
        for name, fn in (("aten", torch.nn.functional.linear), ("onednn", kernels._onednn)):
            start = time.perf_counter()
            fn(x, weight, None)
            spent[name].append(time.perf_counter() - start)
    return tuple(sorted(v)[len(v) // 2] * 1e6 for v in spent.values())  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    args = ap.parse_args()
    configure_cpu_runtime()
    from transformers import AutoModelForCausalLM

    load = os.getloadavg()[0]
    lines = [f"{cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}, load average {load:.1f} "
             f"at the start; greedy generation of {args.rows} rows x {args.tokens} new tokens, best / median of "
             f"{args.repeats} (s), the rules alternating", "",
             "| model | " + " | ".join(RULES) + " |", "| --- |" + " --- |" * len(RULES)]
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("tiny", "qwen2.5-0.5b"):
            folder = Path(tmp) / name
            init_model("tiny", folder) if name == "tiny" else real_size_model(name, folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            times = generation_seconds(model, args.rows, args.tokens, args.repeats)
            cells = [f"{min(t):.2f} / {sorted(t)[len(t) // 2]:.2f}" for t in times.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    lines += ["", "Products of the 0.5B model's shapes, median us (MKL / oneDNN), and the kernel `auto` gives them:", "",
              "| (k x n) | weight | " + " | ".join(f"{r} rows" for r in (1, 4, 16, 64, 256)) + " |",
              "| --- | --- |" + " --- |" * 5]
    for k, n in ((896, 128), (896, 896), (896, 4864), (4864, 896), (896, 151936)):
        weight = torch.empty(n, k)
        cells = []
        for rows in (1, 4, 16, 64, 256):
            aten, onednn = product_microseconds(k, n, rows, 3 if n > 100_000 else 15)
            chosen = "oneDNN" if kernels.use_onednn(rows, weight) else "MKL"
            cells.append(f"{aten:.0f} / {onednn:.0f} ({chosen})")
        lines.append(f"| {k} x {n} | {k * n * 4 / 2**20:.1f} MiB | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    if not args.no_write:
        append_section("generation's kernel rule (bench/decode_kernels.py)", lines)


if __name__ == "__main__":
    main()
