"""rft's step benchmark on CPU: GRPO on the arithmetic task with the offline tiny/small Qwen2 models.

The shape of the comparison with TRL's GRPOTrainer (bench/vs_trl.py, side by side) on a 2-core machine: 16 prompts x 8 samples
(one optimizer step per batch), a fixed number of new tokens per response (ignore_eos), fp32 (`--precision bf16`:
bf16 named for generation and the update, used where this CPU computes it faster; the table says what ran).

    python bench/bench.py [--preset tiny|small|all] [--steps N] [--no-kl] [--no-write] [--profile]
                          [--engine hf [vllm]] [--precision fp32|bf16]

`--engine hf vllm` (in vLLM's venv: `make bench-vllm`) runs every configuration on each rollout engine, one after
the other in the same invocation (the vLLM rows also run the old-log-prob pass, which logs the engine / trainer
log-prob difference; the floor counts it).

Each configuration runs in its own child process (so its peak RSS is its own): the trainer is built once (model
loading is not timed), `--warmup` steps are run and dropped, then N steps are timed with the trainer's own
per-phase timer (`SyncRun.train_step(step, Timer())`, the phases `fit()` logs as timing_s/*).

FLOP floor (the time the step's dense matmul work would take at the machine's measured fp32 matmul rate; the table
also gives the efficiency against the bf16 rate at the same shape, the floor of a run that computes in bf16):
    FLOPs/step = 2 * N_params * T_gen                      generation: each prompt once (its 8 samples share the
                                                            prefill) + every response token but the last
               + 2 * N_params * T_seq   (per no-grad pass)  ref forward (and old log-probs, when computed)
               + 6 * N_params * T_seq * trained            update: forward + backward over prompt + response
                                                            of the rows trained (trained: 1 - actor/zero_adv_rows
                                                            / B; rows whose advantages are all 0 are left out)
    T_seq = B * (mean prompt length + mean response length), non-padding tokens, B = 16 * 8 = 128 rows;
    T_gen = 16 * mean prompt length + B * (mean response length - 1).
    floor s = FLOPs / (measured GFLOP/s of a torch.matmul (B*T, hidden) x (hidden, 4*hidden), default threads)
    efficiency = floor s / measured s/step.
N_params counts the tied embedding / LM head once; attention-score FLOPs (O(T^2)) are not counted, so the floor is
a (slight) underestimate, i.e. efficiencies are upper bounds.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"

# The comparison with TRL's GRPOTrainer is measured side by side in one invocation: bench/vs_trl.py.
PRESETS = {
    "tiny": dict(response=16, steps=10),
    "small": dict(response=64, steps=4),
}
PHASES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor")
# the reward of the benchmarks (here and bench/vs_trl.py, both sides): the exact answer plus half the share of
# digit characters, so the responses of a group differ and every row is trained (with the arithmetic task's exact
# reward an untrained model scores 0 everywhere, every advantage is 0 and the update has nothing to do)
SHAPED_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    digits = sum(c.isdigit() for c in solution_str)
    return float(solution_str.strip() == str(ground_truth)) + digits / (1 + len(solution_str))
'''
FORMULA = ("FLOPs/step = 2*N*T_gen (generation: each of the 16 prompts once, as its 8 samples share the "
           "prefill, and every response token but the last) + 2*N*T per no-grad "
           "log-prob pass (ref, when use_kl_loss) + 6*N*T x the share of rows trained (update fwd+bwd; rows whose "
           "advantages are all 0 are left out of its passes); floor = FLOPs / measured fp32 "
           "matmul GFLOP/s at the model's shape (B*T, h) x (h, 4h); eff = floor / measured s/step")


# Real sizes: a model of a released checkpoint's shape with random weights and rft's tiny tokenizer (no download).
REAL_SIZES = {
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, intermediate_size=4864, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768),
    "qwen2.5-1.5b": dict(hidden_size=1536, num_hidden_layers=28, intermediate_size=8960, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768),
}


def real_size_model(preset: str, out: Path, seed: int = 0) -> Path:
    """A causal LM of `REAL_SIZES[preset]`'s shape (random weights, tied embeddings as Qwen2.5-0.5B) with the tiny
    tokenizer. The embedding rows of the tokenizer's own ids share one added direction (norm 8, the rows' own ~0.6), so
    the random model (tied embeddings) samples the tokenizer's ids, varied (otherwise ~99.8% of its tokens would be
    ids past the tokenizer's vocabulary, every response would decode empty, every reward would be equal and no row
    would be trained)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rft.models.tiny import build_config, init_model

    init_model("tiny", out, seed=seed)
    tiny = build_config("tiny").to_dict()
    known = tiny["vocab_size"]
    tiny.pop("layer_types", None)  # one per layer: rebuilt for the new depth
    config = Qwen2Config(**{**tiny, **REAL_SIZES[preset]})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        shared = torch.nn.functional.normalize(torch.randn(config.hidden_size), dim=0)
    with torch.no_grad():
        model.get_input_embeddings().weight[:known] += 8.0 * shared
    model.save_pretrained(out)
    return out


def append_results(heading: str, text: str) -> None:
    """Append a dated section `## <date> — <heading>` holding `text` to bench/RESULTS.md, and say so."""
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    with RESULTS.open("a") as f:
        f.write(f"\n## {stamp} — {heading}\n\n{text}\n")
    print(f"appended to {RESULTS}")


# ------------------------------------------------------------------------------------------------ machine
def cpu_name() -> str:
    from rft.runtime import cpu_model

    return cpu_model()


def matmul_gflops(m: int, k: int, n: int, min_time: float = 0.4, dtype: torch.dtype = torch.float32) -> float:
    """torch.matmul (m, k) x (k, n) throughput in `dtype` (float32 by default) in GFLOP/s (best of repeated timed
    batches)."""
    torch.set_num_threads(torch.get_num_threads())
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    out = torch.empty(m, n, dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    reps = 1
    while True:  # size a batch to ~50 ms
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=out)
        dt = time.perf_counter() - t0
        if dt > 0.05:
            break
        reps *= 2
    best, spent = float("inf"), 0.0
    while spent < min_time:
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=out)
        dt = time.perf_counter() - t0
        spent += dt
        best = min(best, dt / reps)
    return 2.0 * m * k * n / best / 1e9


# ------------------------------------------------------------------------------------------------ worker
def overrides(model: str, data: str, out: str, response: int, kl: bool, total: int, engine: str = "hf",
              reward: str | None = None, precision: str = "fp32") -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model}",
        *([f"custom_reward_function.path={reward}"] if reward else []),
        f"actor_rollout_ref.rollout.name={engine.removesuffix('-compiled')}",
        # hf-compiled: the hf engine with its decode step compiled (enforce_eager=false)
        *(["actor_rollout_ref.rollout.enforce_eager=false"] if engine == "hf-compiled" else []),
        f"data.train_files={data}",
        "data.max_prompt_length=32",
        f"data.max_response_length={response}",
        "data.train_batch_size=16",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.rollout.ignore_eos=true",
        "actor_rollout_ref.rollout.temperature=1.0",
        # fp32: float32 named everywhere; bf16: named for generation and the update, used where this CPU computes it
        # faster (models/precision.py)
        f"actor_rollout_ref.rollout.dtype={'float32' if precision == 'fp32' else 'bfloat16'}",
        f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={precision}",
        f"actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype={precision}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        f"actor_rollout_ref.actor.use_kl_loss={'true' if kl else 'false'}",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.optim.lr=1e-5",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        "actor_rollout_ref.actor.grad_clip=1.0",
        "algorithm.adv_estimator=grpo",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.device=cpu",
        "trainer.logger=[]",
        f"trainer.total_training_steps={total}",
        f"trainer.default_local_dir={out}",
    ]


def busy_s() -> float:
    """Seconds of CPU time the whole machine has spent busy (all cores, all processes), from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return float("nan")
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def foreign_cores(seconds: float) -> float:
    """Cores other processes keep busy, sampled over `seconds` while this process sleeps."""
    busy0 = busy_s()
    time.sleep(seconds)
    return (busy_s() - busy0) / seconds


def wait_idle(limit_s: float) -> None:
    """Wait (up to `limit_s`) until other processes use < 0.25 cores: 2 cores shared make torch many-fold slower."""
    start = time.perf_counter()
    while limit_s > 0:
        load = foreign_cores(1.0)
        if load < 0.25:
            return
        waited = time.perf_counter() - start
        if waited >= limit_s:
            print(f"  (machine still busy: other processes use {load:.2f} cores; measuring anyway)", flush=True)
            return
        if waited < 1.5:
            print(f"  (other processes use {load:.2f} cores; waiting up to {limit_s:.0f} s for an idle machine)",
                  flush=True)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_worker(spec: dict) -> dict:
    torch.set_flush_denormal(True)
    from rft.monitor import Timer
    from rft.trainer.configure import load_config
    from rft.orchestration.run import SyncRun

    warmup, steps = spec["warmup"], spec["steps"]
    cfg = load_config(None, overrides(spec["model"], spec["data"], spec["out"], spec["response"], spec["kl"],
                                      warmup + steps, spec.get("engine", "hf"), spec.get("reward"),
                                      spec.get("precision", "fp32")))
    rss_import = rss_mib()
    t0 = time.perf_counter()
    trainer = SyncRun(cfg)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in trainer.trainer.model.parameters())
    ran_in = {what: str(c.dtype).removeprefix("torch.") for what, c in trainer.trainer.precision.items()}
    rows: list[dict] = []
    prof_table = None
    busy0 = own0 = wall0 = 0.0
    for step in range(1, warmup + steps + 1):
        if step == warmup + 1:
            busy0, own0, wall0 = busy_s(), own_cpu_s(), time.perf_counter()
        timer = Timer()
        profile = spec.get("profile") and step == warmup + 1
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as tprofile

            prof = tprofile(activities=[ProfilerActivity.CPU])
            prof.__enter__()
        with timer("step"):
            metrics = trainer.train_step(step, timer)
        if profile:
            prof.__exit__(None, None, None)
            prof_table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
        metrics.update(timer.metrics())
        if step > warmup and not profile:
            rows.append(metrics)
    wall = time.perf_counter() - wall0
    foreign = (busy_s() - busy0 - (own_cpu_s() - own0)) / wall  # cores used by other processes meanwhile
    if not rows:
        raise SystemExit("no timed steps (only the profiled one): raise --steps")
    keys = set().union(*rows)
    mean = {k: sum(r.get(k, 0.0) for r in rows) / len(rows) for k in keys}
    steps_s = [r["timing_s/step"] for r in rows]
    return dict(mean=mean, n_params=n_params, build_s=build_s, rss_import_mib=rss_import, rss_peak_mib=rss_mib(),
                step_min=min(steps_s), step_max=max(steps_s), step_median=sorted(steps_s)[len(steps_s) // 2],
                timed=len(rows), profile=prof_table, foreign_cores=foreign, cpu_util=(own_cpu_s() - own0) / wall,
                ran_in=ran_in)


# ------------------------------------------------------------------------------------------------ driver
def generated_tokens(rows: int, n: int, prompt: float, response: float) -> float:
    """The tokens generation's forward passes must run: each prompt's once (its n samples share the prefill) and
    every response token but the last (sampled from the pass before, never fed back)."""
    return rows / n * prompt + rows * max(response - 1.0, 0.0)


def flops(n_params: int, m: dict, rows: int, n: int = 8) -> dict[str, float]:
    """The step's FLOPs by phase (gen, each no-grad log-prob pass, update_actor) and in all (`step`), from its mean
    prompt / response lengths: only the work done, so generation counts each prompt once (`generated_tokens`) and
    the update the rows it trained on (rows whose advantages are all 0 are left out of its passes:
    `actor/zero_adv_rows`; none at all when the update was skipped); `trained`: that share."""
    prompt, response = m["prompt_length/mean"], m["response_length/mean"]
    t = rows * (prompt + response)
    trained = max(0.0, rows - m.get("actor/zero_adv_rows", 0.0)) / rows
    out = {"gen": 2 * n_params * generated_tokens(rows, n, prompt, response),
           "update_actor": 6 * n_params * t * trained}
    out.update({p: 2 * n_params * t for p in ("ref", "old_log_prob") if f"timing_s/{p}" in m})
    out["step"], out["trained"] = sum(out.values()), trained
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=("tiny", "small", "all"), default="all")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default: tiny 10, small 4)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    ap.add_argument("--no-kl", action="store_true", help="skip the use_kl_loss=true (reference forward) rows")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--profile", action="store_true",
                    help="torch.profiler over the first timed step of each configuration (that step is not timed)")
    ap.add_argument("--wait-idle", type=float, default=60.0, metavar="S",
                    help="before each measurement wait up to S seconds for other processes to leave the CPU "
                         "(default 60; 0: never wait)")
    ap.add_argument("--engine", nargs="+", choices=("hf", "hf-compiled", "vllm"), default=["hf"],
                    help="rollout engines to run each configuration on, side by side (default hf; hf-compiled: "
                         "the hf engine with rollout.enforce_eager=false, its decode step compiled)")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="fp32: float32 named everywhere (default); bf16: bf16 named for generation and the update, "
                         "used where this CPU computes it faster than fp32 (the table's `ran in` says)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        spec = json.loads(args.worker)
        print("@@RESULT@@" + json.dumps(run_worker(spec)))
        return

    torch.set_flush_denormal(True)
    t_start = time.perf_counter()
    presets = ["tiny", "small"] if args.preset == "all" else [args.preset]
    machine = (f"{cpu_name()}, nproc {os.cpu_count()}, torch {torch.__version__} "
               f"({torch.get_num_threads()} threads), CPU, {args.precision} named")
    print(f"rft bench: {machine}")

    from transformers.utils import logging as hf_logging

    from rft.models.tiny import PRESETS as MODEL_PRESETS
    from rft.models.tiny import init_model

    hf_logging.disable_progress_bar()
    from rft.tasks import write_arithmetic

    # The matmul rate the floor is computed at: (B*T, hidden) x (hidden, 4*hidden), T ~ 15 prompt + response.
    wait_idle(args.wait_idle)
    busy0, own0, wall0 = busy_s(), own_cpu_s(), time.perf_counter()
    peak = matmul_gflops(1024, 1024, 1024)
    shape_rate, bf16_rate = {}, {}
    for name in presets:
        h, inter = MODEL_PRESETS[name]["hidden_size"], MODEL_PRESETS[name]["intermediate_size"]
        bt = 128 * (15 + PRESETS[name]["response"])
        shape_rate[name] = (bt, h, inter, matmul_gflops(bt, h, inter))
        bf16_rate[name] = matmul_gflops(bt, h, inter, min_time=0.2, dtype=torch.bfloat16)
    mm_foreign = (busy_s() - busy0 - (own_cpu_s() - own0)) / (time.perf_counter() - wall0)
    print(f"fp32 matmul (other processes used {mm_foreign:.2f} cores meanwhile): 1024^3 {peak:.1f} GFLOP/s; " + "; ".join(
        f"{n} ({bt}x{h})x({h}x{i}) {g:.1f} GFLOP/s (bf16 {bf16_rate[n]:.1f})" for n, (bt, h, i, g) in shape_rate.items()))

    results = []
    with tempfile.TemporaryDirectory(prefix="rft-bench-") as tmp:
        tmp = Path(tmp)
        data = write_arithmetic(tmp / "data", n_train=2000, n_val=10, seed=0)["train"]
        reward = tmp / "reward_shaped.py"
        reward.write_text(SHAPED_REWARD)
        for name in presets:
            model = init_model(name, tmp / f"model-{name}", seed=0)
            steps = args.steps if args.steps is not None else PRESETS[name]["steps"]
            for kl, engine in [(kl, e) for kl in ([False] if args.no_kl else [False, True]) for e in args.engine]:
                spec = dict(model=str(model), data=str(data), out=str(tmp / f"out-{name}-{int(kl)}-{engine}"),
                            response=PRESETS[name]["response"], kl=kl, warmup=args.warmup, engine=engine,
                            reward=str(reward), precision=args.precision,
                            steps=steps + (1 if args.profile else 0), profile=args.profile)
                wait_idle(args.wait_idle)
                proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                                      capture_output=True, text=True)
                line = next((x for x in proc.stdout.splitlines() if x.startswith("@@RESULT@@")), None)
                if proc.returncode != 0 or line is None:
                    sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
                    raise SystemExit(f"bench worker failed for {name} kl={kl} engine={engine} "
                                     f"(exit {proc.returncode})")
                r = json.loads(line[len("@@RESULT@@"):])
                r.update(preset=name, kl=kl, engine=engine)
                results.append(r)
                print(f"  {name} {engine} use_kl_loss={str(kl).lower()}: {r['mean']['timing_s/step']:.3f} s/step "
                      f"({r['timed']} steps, build {r['build_s']:.1f} s)", flush=True)
                if r.get("profile"):
                    print(f"\ntorch.profiler, {name} use_kl_loss={str(kl).lower()}, one step (self CPU time):")
                    print(r["profile"])

    table = render(results, shape_rate, peak, mm_foreign, bf16_rate)
    print()
    print(table)
    total = time.perf_counter() - t_start
    print(f"\nbench wall time {total:.0f} s")
    if not args.no_write:
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        header = "# rft benchmark results\n\nAppended by `make bench` (bench/bench.py); newest last.\n"
        existing = RESULTS.read_text() if RESULTS.exists() else header
        with RESULTS.open("w") as f:
            f.write(existing.rstrip("\n") + "\n\n" + f"## {stamp} — {machine}\n\n" + table + "\n")
        print(f"appended to {RESULTS}")


def render(results: list[dict], shape_rate: dict, peak: float, mm_foreign: float, bf16_rate: dict) -> str:
    head = ["preset", "engine", "params", "new tok", "kl/ref", "s/step", "median (min–max)",
            *[f"{p} s" for p in PHASES], "other s", "gen tok/s", "train tok/s", "rows trained", "GFLOP/step",
            "ran in (gen / update)", "floor s", "eff", "gen eff", "update eff", "eff at the bf16 rate", "eff@1024³",
            "peak RSS MiB", "other procs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in results:
        m, name = r["mean"], r["preset"]
        work = flops(r["n_params"], m, 128)
        f = work["step"]
        rate = shape_rate[name][3] * 1e9
        step = m["timing_s/step"]
        floor = f / rate
        phase_eff = {p: f"{100 * work[p] / rate / m[f'timing_s/{p}']:.0f}%" if work.get(p) else "–"
                     for p in ("gen", "update_actor")}
        phase_sum = sum(m.get(f"timing_s/{p}", 0.0) for p in PHASES)
        cells = [name, r.get("engine", "hf"), f"{r['n_params'] / 1e6:.2f}M", str(PRESETS[name]["response"]), "yes" if r["kl"] else "no",
                 f"{step:.3f}", f"{r['step_median']:.3f} ({r['step_min']:.3f}–{r['step_max']:.3f})",
                 *[f"{m[f'timing_s/{p}']:.3f}" if f"timing_s/{p}" in m else "–" for p in PHASES],
                 f"{step - phase_sum:.3f}", f"{m['perf/gen_tokens_per_s']:.0f}",
                 f"{m['perf/train_tokens_per_s']:.0f}", f"{100 * work['trained']:.0f}%", f"{f / 1e9:.2f}",
                 f"{r['ran_in']['rollout']} / {r['ran_in']['actor']}",
                 f"{floor:.3f}", f"{100 * floor / step:.1f}%", phase_eff["gen"], phase_eff["update_actor"],
                 f"{100 * f / (bf16_rate[name] * 1e9) / step:.1f}%",
                 f"{100 * f / (peak * 1e9) / step:.1f}%",
                 f"{r['rss_peak_mib']:.0f} (import {r['rss_import_mib']:.0f})", f"{r['foreign_cores']:.2f} cores"]
        lines.append("| " + " | ".join(cells) + " |")
    rates = "; ".join(f"{n}: ({bt}x{h})x({h}x{i}) {g:.1f} GFLOP/s" for n, (bt, h, i, g) in shape_rate.items())
    busy = [r for r in results if r["foreign_cores"] > 0.25] + ([None] if mm_foreign > 0.25 else [])
    notes = [
        "",
        *([f"**Warning: other processes used CPU during {len(busy)} of the measurements (`other procs`, cores "
           f"busy outside the benchmark; matmul calibration {mm_foreign:.2f}); on 2 cores torch's thread pool "
           "slows down many-fold when a core is taken, so those rows are not representative.**", ""]
          if busy else []),
        f"fp32 matmul rate: 1024³ {peak:.1f} GFLOP/s; model shape {rates}; bf16 at the model shapes: "
        + ", ".join(f"{n} {g:.1f} GFLOP/s" for n, g in bf16_rate.items()) + ". ran in: what generation and the "
        "update computed in (models/precision.py: bf16 where this CPU runs it faster than fp32); eff, gen eff and "
        "update eff are against the fp32 rate, `eff at the bf16 rate` against the bf16 one (the floor a bf16 run "
        "would be held to).",
        f"Floor: {FORMULA}; gen eff / update eff: that phase's FLOPs at the rate over its own time; eff@1024³ "
        "uses the 1024³ rate instead. N counts the tied embedding once; attention-score FLOPs are not counted. "
        "Reward: the exact answer plus half the share of digits (SHAPED_REWARD), so every row is trained (rows "
        "trained: the share whose advantages were not all 0).",
        "Shape: GRPO, 16 prompts x 8 samples, ppo_mini_batch_size 16 (one optimizer step), whole mini-batch per "
        "forward, ignore_eos (fixed response length), lr 1e-5, grad_clip 1.0, fp32. s/step is the mean of the "
        "timed steps after 2 warm-up steps; model loading is not timed. `other` = step minus the named phases "
        "(batch metrics, bookkeeping). peak RSS: ru_maxrss of the configuration's own process (after "
        "importing torch/transformers/rft: `import`). other procs: CPU cores used by other processes during the "
        "timed steps (/proc/stat minus this process). gen tok/s counts response tokens; train tok/s prompt + response tokens. "
        "TRL's GRPOTrainer on the same shapes, side by side: bench/vs_trl.py.",
    ]
    return "\n".join(lines + notes)


if __name__ == "__main__":
    main()
