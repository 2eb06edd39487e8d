"""Where the update's time goes at a benchmark shape, against the fp32 floor, and the ceiling its kernels set.

    python bench/update_profile.py [--preset small] [--rows 128] [--tokens 78]

Prints, on the machine at hand: the fp32 matmul rate at the floor's shape (bench.py's), the time of one forward +
backward of the model over (rows, tokens) with a log-prob loss (the update's passes: eager, and with every decoder
layer compiled as `actor.use_torch_compile` does), against its floor 6 * N * rows * tokens at that rate; then the
ceiling no implementation on these kernels passes: every matmul of those passes alone, back to back with the
model's own weights (each linear layer's forward x W^T, its input gradient g W and its weight gradient g^T x at the
step's token count), plus the attention's forward and backward (`scaled_dot_product_attention`, causal, at the
model's heads); and torch.profiler's table of one eager pass (self CPU time by operator). The elementwise work
(RMSNorm, RoPE, SwiGLU, residuals, the loss) is what compiling fuses; the ceiling is what stays.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from decode_profile import best_of, fused_shapes  # bench/ is the script's folder

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small", choices=("tiny", "small"))
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=78, help="tokens per row (W2: ~15 prompt + 64 response, padded)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--wait-idle", type=float, default=60.0, metavar="S")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from transformers import AutoModelForCausalLM

    from bench import cpu_name, matmul_gflops, wait_idle
    from rft.models.tiny import PRESETS, init_model
    from rft.runtime import configure_cpu_runtime
    from rft.workers.packing import enable_torch_compile

    configure_cpu_runtime()
    wait_idle(args.wait_idle)
    cfg = PRESETS[args.preset]
    tokens = args.rows * args.tokens
    print(f"{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; preset {args.preset}, "
          f"{args.rows} rows x {args.tokens} tokens")
    rate = matmul_gflops(tokens, cfg["hidden_size"], cfg["intermediate_size"])
    print(f"fp32 matmul, the floor's shape ({tokens}x{cfg['hidden_size']})x({cfg['hidden_size']}x"
          f"{cfg['intermediate_size']}): {rate:.1f} GFLOP/s")
    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(init_model(args.preset, Path(tmp) / "m", seed=0),
                                                     dtype=torch.float32)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    floor_s = 6 * n_params * tokens / rate / 1e9
    ids = torch.randint(5, model.config.vocab_size, (args.rows, args.tokens))

    def passes():
        logits = model(input_ids=ids).logits.float()
        logits.log_softmax(-1).gather(-1, ids[..., None]).mean().backward()
        model.zero_grad(set_to_none=True)

    eager_s = best_of(passes, args.repeats)
    print(f"forward + backward: eager {eager_s:.3f} s = {100 * floor_s / eager_s:.0f}% of the floor "
          f"({floor_s:.3f} s)", flush=True)
    ceiling(model, args, tokens, floor_s)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        passes()
    print("\ntorch.profiler, one eager forward + backward (self CPU time):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=45))
    if enable_torch_compile(model, "update_profile"):
        t0 = time.perf_counter()
        passes()
        first = time.perf_counter() - t0
        compiled_s = best_of(passes, args.repeats)
        print(f"forward + backward, decoder layers compiled (use_torch_compile): {compiled_s:.3f} s = "
              f"{100 * floor_s / compiled_s:.0f}% of the floor (the first pass, compiling, {first:.1f} s)")


def ceiling(model, args, tokens: int, floor_s: float) -> None:
    """The passes' matmuls alone and the attention alone, at the step's shapes; the floor over their sum."""
    import torch.nn.functional as F

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    xs = [torch.randn(tokens, m.in_features) for m in linears]
    gs = [torch.randn(tokens, m.out_features) for m in linears]

    @torch.no_grad()
    def matmuls():
        for m, x, g in zip(linears, xs, gs):
            F.linear(x, m.weight)  # forward
            torch.mm(g, m.weight)  # the input's gradient
            torch.mm(g.t(), x)  # the weight's gradient

    matmul_s = best_of(matmuls, args.repeats)
    weights = [torch.randn(n, k) for k, n in fused_shapes(model)]  # q|k|v and gate|up as one product each
    fxs = [torch.randn(tokens, w.shape[1]) for w in weights]
    fgs = [torch.randn(tokens, w.shape[0]) for w in weights]

    def fused_matmuls():
        for w, x, g in zip(weights, fxs, fgs):
            F.linear(x, w)
            torch.mm(g, w)
            torch.mm(g.t(), x)

    fused_s = best_of(fused_matmuls, args.repeats)
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    q, k, v = (torch.randn(args.rows, c.num_attention_heads, args.tokens, head_dim, requires_grad=True)
               for _ in range(3))

    def attention():
        for _ in range(c.num_hidden_layers):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    attention_s = best_of(attention, args.repeats)
    print(f"ceiling: the passes' matmuls alone (the model's linear layers, forward and both gradients, back to back) "
          f"{matmul_s:.3f} s = {100 * floor_s / matmul_s:.0f}% of the floor (q|k|v and gate|up fused into one product "
          f"each: {fused_s:.3f} s = {100 * floor_s / fused_s:.0f}%); the attention's forward + backward "
          f"{attention_s:.3f} s; together {matmul_s + attention_s:.3f} s: no update on these kernels passes "
          f"{100 * floor_s / (matmul_s + attention_s):.0f}% of the floor here")


if __name__ == "__main__":
    main()
