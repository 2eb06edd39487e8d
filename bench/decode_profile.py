"""Where the hf engine's generation spends its time at a benchmark shape, against the fp32 floor.

    python bench/decode_profile.py [--preset small] [--rows 128] [--tokens 64]

Prints, on the machine at hand: the fp32 matmul rate at the floor's shape (bench.py's: all the step's tokens in one
matrix) and at the shapes a decode step really multiplies (one token per row: M = rows), the time of one whole
generation (prefill + `tokens` decode steps, ignore_eos) with the engine's decode attention and with transformers'
SDPA (alternately), against its floor (2 * N * bench.py's generated tokens: each prompt once, each response token
but the last, at the floor's rate) and against the decode shapes' own rate; the same with the decode step compiled
(`rollout.enforce_eager=false`), alternately with the eager loop; and torch.profiler's table of one generation
each way (self CPU time by operator). The matmuls of a decode step are (rows, hidden) x (hidden, out); the
attention over the KV cache and the sampling are work the floor does not count; the profile shows where the time is.

And the ceiling no decode loop on this machine passes at this shape: the generation's matmuls alone, run back to
back with the model's own linear layers on (rows, in) inputs (nothing else between them), plus reading the KV cache
once per step at the rate this machine reads memory of that size; the floor over that time is the most of the floor
a generation can reach with these matmul kernels, whatever is fused or dropped around them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small", choices=("tiny", "small"))
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=15, help="prompt tokens per row (the arithmetic task's ~15)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--wait-idle", type=float, default=60.0, metavar="S")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from transformers import AutoModelForCausalLM

    from bench import cpu_name, generated_tokens, matmul_gflops, wait_idle
    from rft.models.attention import DECODE_ATTENTION, attention_configs
    from rft.models.tiny import PRESETS, init_model
    from rft.rollout.base import SamplingParams
    from rft.rollout.hf import HFRollout

    torch.set_flush_denormal(True)
    wait_idle(args.wait_idle)
    cfg = PRESETS[args.preset]
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    kv_out = h // heads * kv
    big = args.rows * (args.prompt + args.tokens)
    print(f"{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; preset {args.preset}, "
          f"{args.rows} rows x {args.tokens} new tokens")
    floor_rate = matmul_gflops(big, h, inter)
    shapes = {"q / o": (h, h), "k / v": (h, kv_out), "gate / up": (h, inter), "down": (inter, h)}
    rates = {name: matmul_gflops(args.rows, k, n) for name, (k, n) in shapes.items()}
    print(f"fp32 matmul, the floor's shape ({big}x{h})x({h}x{inter}): {floor_rate:.1f} GFLOP/s")
    for name, (k, n) in shapes.items():
        print(f"  decode shape {name} ({args.rows}x{k})x({k}x{n}): {rates[name]:.1f} GFLOP/s "
              f"({100 * rates[name] / floor_rate:.0f}% of the floor's rate)")
    # one decode step's layer FLOPs at the decode shapes' rates: the best a decode step can do with these kernels
    per_layer = {"q / o": 2, "k / v": 2, "gate / up": 2, "down": 1}
    layer_s = sum(count * 2 * args.rows * shapes[n][0] * shapes[n][1] / (rates[n] * 1e9)
                  for n, count in per_layer.items())
    layer_flops = sum(count * 2 * args.rows * shapes[n][0] * shapes[n][1] for n, count in per_layer.items())
    decode_rate = layer_flops / layer_s / 1e9
    print(f"  a layer's matmuls at those rates: {decode_rate:.1f} GFLOP/s "
          f"({100 * decode_rate / floor_rate:.0f}% of the floor's rate)")

    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(init_model(args.preset, Path(tmp) / "m", seed=0),
                                                     dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    engine = HFRollout(model, eos_token_ids=[0], pad_token_id=0)
    prompts = torch.randint(5, 200, (args.rows // 8, args.prompt))
    mask = torch.ones_like(prompts)
    params = SamplingParams(n=8, temperature=1.0, max_tokens=args.tokens, ignore_eos=True)
    gen = torch.Generator().manual_seed(0)
    engine.generate(prompts, mask, params, gen)  # warm-up
    # the engine's decode attention (grouped matrix products) and transformers' SDPA, alternately
    times: dict[str, list[float]] = {DECODE_ATTENTION: [], "sdpa": []}
    for _ in range(args.repeats):
        for impl, spent in times.items():
            for c in attention_configs(model):
                c._attn_implementation = impl
            t0 = time.perf_counter()
            engine.generate(prompts, mask, params, gen)
            spent.append(time.perf_counter() - t0)
    flops = 2 * n_params * generated_tokens(args.rows, 8, args.prompt, args.tokens)
    best = min(times[DECODE_ATTENTION])
    print(f"generation: {best:.3f} s (best of {args.repeats}; with transformers' SDPA for the decode attention "
          f"{min(times['sdpa']):.3f} s); floor {flops / floor_rate / 1e9:.3f} s at the floor's rate = "
          f"{100 * flops / floor_rate / 1e9 / best:.0f}% efficiency; at the decode shapes' rate "
          f"{flops / decode_rate / 1e9:.3f} s = {100 * flops / decode_rate / 1e9 / best:.0f}%")
    ceiling(model, args, flops / floor_rate / 1e9, best)
    from torch.profiler import ProfilerActivity, profile

    for c in attention_configs(model):  # the profiles are of the engine as it runs: its own decode attention
        c._attn_implementation = DECODE_ATTENTION
    # rollout.enforce_eager=false: the decode step compiled over a static cache (its compilation untimed)
    compiled = HFRollout(model, eos_token_ids=[0], pad_token_id=0, compiled=True)
    t0 = time.perf_counter()
    compiled.generate(prompts, mask, params, gen)
    compile_s = time.perf_counter() - t0
    spent = {"eager": [], "compiled": []}
    for _ in range(args.repeats):
        for name, e in (("eager", engine), ("compiled", compiled)):
            t0 = time.perf_counter()
            e.generate(prompts, mask, params, gen)
            spent[name].append(time.perf_counter() - t0)
    best_c = min(spent["compiled"])
    print(f"compiled decode step (enforce_eager=false): {best_c:.3f} s (best of {args.repeats}, eager alongside "
          f"{min(spent['eager']):.3f} s; the first generation, compiling, {compile_s:.1f} s) = "
          f"{100 * flops / floor_rate / 1e9 / best_c:.0f}% of the floor")
    for name, e in (("eager", engine), ("compiled", compiled)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            e.generate(prompts, mask, params, gen)
        print(f"\ntorch.profiler, one generation, {name} (self CPU time):")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=16, max_name_column_width=40))


def best_of(fn, repeats: int = 5) -> float:
    fn()
    spent = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - t0)
    return min(spent)


@torch.no_grad()
def ceiling(model, args, floor_s: float, measured_s: float) -> None:
    """The generation's matmuls alone (the model's own linear layers, one decode step's worth `tokens - 1` times and
    the prefill once) and one read of the filled KV cache per step: the least time any decode loop takes here."""
    import torch.nn.functional as F

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    step_inputs = [torch.randn(args.rows, m.in_features) for m in linears]
    prefill_inputs = [torch.randn(args.rows // 8 * args.prompt, m.in_features) for m in linears]

    def matmuls(inputs):
        for m, x in zip(linears, inputs):
            m(x)

    matmul_s = (args.tokens - 1) * best_of(lambda: matmuls(step_inputs)) + best_of(lambda: matmuls(prefill_inputs))
    # the same FLOPs with the projections that share an input as one product each (q|k|v, gate|up: vLLM's layout)
    fused = [torch.randn(n, k) for k, n in fused_shapes(model)]  # (out, in) as nn.Linear holds them
    fused_step = [torch.randn(args.rows, w.shape[1]) for w in fused]
    fused_prefill = [torch.randn(args.rows // 8 * args.prompt, w.shape[1]) for w in fused]
    fused_s = (args.tokens - 1) * best_of(lambda: [F.linear(x, w) for x, w in zip(fused_step, fused)]) + best_of(
        lambda: [F.linear(x, w) for x, w in zip(fused_prefill, fused)])
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    capacity = args.prompt + args.tokens
    caches = [torch.randn(args.rows, cfg.num_key_value_heads, capacity, head_dim)
              for _ in range(2 * cfg.num_hidden_layers)]  # every layer's keys and values, read in turn as a step does
    read_s = best_of(lambda: [c.sum() for c in caches])
    filled = sum(args.prompt + t for t in range(1, args.tokens)) / capacity  # steps x the share of the cache filled
    cache_s = read_s * filled
    print(f"ceiling: the generation's matmuls alone (the model's linear layers back to back, {args.rows} rows a "
          f"decode step) {matmul_s:.3f} s = {100 * floor_s / matmul_s:.0f}% of the floor (with q|k|v and gate|up "
          f"fused into one product each: {fused_s:.3f} s = {100 * floor_s / fused_s:.0f}%); reading the KV cache "
          f"once a step ({sum(c.numel() for c in caches) * 4 / 2**20:.0f} MiB at full length) {cache_s:.3f} s; together "
          f"{matmul_s + cache_s:.3f} s: no decode loop here passes {100 * floor_s / (matmul_s + cache_s):.0f}% of the "
          f"floor (measured: {100 * floor_s / measured_s:.0f}%, {measured_s - matmul_s - cache_s:.3f} s above the "
          "ceiling: attention compute, norms, RoPE, SwiGLU, residuals, cache writes, sampling, dispatch)")


def fused_shapes(model) -> list[tuple[int, int]]:
    """(in, out) of every matmul of a forward pass with the linear layers that read the same input fused into one
    (a decoder layer's q / k / v and gate / up projections, as vLLM's QKVParallelLinear and MergedColumnParallelLinear
    hold them); the others as they are."""
    shapes = []
    for parent in model.modules():
        children = {name: m for name, m in parent.named_children() if isinstance(m, torch.nn.Linear)}
        for group in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
            if all(name in children for name in group):
                shapes.append((children[group[0]].in_features, sum(children[n].out_features for n in group)))
                for name in group:
                    children.pop(name)
        shapes += [(m.in_features, m.out_features) for m in children.values()]
    return shapes


if __name__ == "__main__":
    main()
