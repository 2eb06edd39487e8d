"""rft against TRL's GRPOTrainer, side by side in one invocation, as a new user would compare them.

Both get the same model folder (the offline tiny / small Qwen2), the same arithmetic prompts (chat template, the
same tokenizer), the same reward function (one file, read by both), 16 prompts x 8 samples per optimizer step, no
KL term (TRL's beta 0, rft's use_kl_loss false), temperature 1, lr 1e-5 constant, fp32 on CPU (`--precision bf16`:
TRL with bf16=True, rft with bf16 named for its rollout and update; `--precision auto`: TRL in fp32, rft with no
precision key, as a user's first run: bf16 where this CPU computes it faster), responses ending at
EOS (no ignore_eos) up to the workload's new tokens, and 8 optimizer steps. s/step is the median of steps 3-8 of
each side (TRL: a TrainerCallback around each optimizer step, generation included; rft: `SyncRun.train_step`).
Each side runs in its own process, back to back: TRL in `bench/.venv-trl` (made on first use: torch 2.13.0 under
constraints.txt, trl 1.16.0), rft in this Python.

    python bench/vs_trl.py [--workloads W1,W2,W3,growth] [--variants default,fastest] [--steps 8] [--repeats 2]
                           [--no-write] [--baseline-src DIR [--baseline-variant fastest]] [--profile]
                           [--precision fp32|bf16|auto]

Interleaved: each workload runs TRL, then each rft variant, `--repeats` times over (TRL, rft, TRL, rft, ...), so
a slow spell of the shared machine hits both sides; every run is printed, and the table takes each side's best
(lowest s/step) run.

--baseline-src DIR also runs rft from another source tree (e.g. `git archive` of the commit before a change) as the
variant `baseline`, with the keys of `--baseline-variant` (default: none, the tree's defaults); --variants keeps
only the named rft variants of each workload; --profile prints torch.profiler's table for one extra rft step of
each variant (not timed).

Workloads (docs: bench/RESULTS.md):
  W1      tiny preset, 16 new tokens at most                    goal: rft <= 0.6x TRL's s/step
  W2      small preset, 64 new tokens at most                   goal: rft <= 0.55x TRL; generation >= 75% and the
                                                                update >= 80% of their FLOP floors
  W3      small preset, 128 new tokens at most (mixed lengths)  goal: rft's tokens/s within 15% of W2's
  growth  rft alone, tiny preset, ignore_eos 16 tokens, 16 / 32 / 64 prompts per step: s/step within 15% of linear
  length  rft alone, small preset, ignore_eos 64 / 128 / 256 new tokens, 16 prompts: s/step within 15% of linear in
          the new tokens (also printed per prompt + response token)
  Q05     Qwen2.5-0.5B's shape (494M parameters, vocabulary 151,936, random weights: bench.real_size_model), 4
          prompts x 4 samples, 64 new tokens at most, gradient checkpointing on both sides (TRL's default)
                                                                goal: rft's peak resident memory <= TRL's
  Q05-full  the same without gradient checkpointing on either side
Gradient checkpointing is the same on both sides of every workload (TRL's GRPOConfig turns it on by default: the
W workloads turn it off there, as rft's default is; before 2026-11-25 they compared rft without it against TRL
with it).
Each run's peak resident memory (the worker process's maximum RSS, `getrusage`) is in the table beside s/step, and
the run's last generation beside the same generation (prompts, sampling parameters, generator state, weights)
replayed alternately in the run's process after its steps and by the hf engine alone in a fresh process (`last gen`:
what the run around it costs generation, side by side so that the machine's drift reaches both). Each replay in the
run's process follows `release_freed_memory`, as each generation of the run follows its update's last one.
Variants: default (no keys: packed passes since 2026-11-25), padded (use_remove_padding=false, the default before),
remove_padding (use_remove_padding=true: the default now, kept for --baseline-src runs of older trees), compile
(use_torch_compile), compiled_decode (rollout.enforce_eager=false: the hf engine's compiled decode step) and fastest
(the three speed keys together).
Reward: bench.py's SHAPED_REWARD (the exact answer plus half the share of digits), so groups differ and every
row is trained on both sides (with the task's exact reward an untrained model scores 0 everywhere: rft would skip
its update, TRL would not, and the comparison would flatter rft). The real-size workloads add a term in the response's length
below 0.01 (`TIE_BREAK`): their random model drifts to responses where the shaped reward is 0 everywhere too.

rft's efficiency: the step's fp32 FLOPs (bench.py's floor: 2*N*T_gen generation, each prompt once + the response
tokens fed back, + 6*N*T update over the rows the update ran on) at the machine's measured matmul rate, divided by
the measured s/step; generation and update also apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv-trl"
TRL = "trl==1.16.0"

# name: (preset, max new tokens, ignore_eos, prompts, samples per prompt, gradient checkpointing on both sides,
# rft variants); the reward is bench.py's SHAPED_REWARD, the same file for both sides, under which every row is
# trained. Gradient checkpointing is set on both sides alike: TRL's GRPOConfig turns it on by default, rft's
# enable_gradient_checkpointing (verl's) is off by default.
WORKLOADS = {
    "W1": [("tiny", 16, False, 16, 8, False, ("default", "padded", "compile", "compiled_decode", "fastest"))],
    "W2": [("small", 64, False, 16, 8, False, ("default", "padded", "compile", "compiled_decode", "fastest"))],
    "W3": [("small", 128, False, 16, 8, False, ("default", "padded"))],
    "growth": [("tiny", 16, True, p, 8, False, ("default",)) for p in (16, 32, 64)],
    "length": [("small", t, True, 16, 8, False, ("default",)) for t in (64, 128, 256)],
    # a real size: Qwen2.5-0.5B's shape (random weights, bench.real_size_model), 4 prompts x 4 samples; with
    # gradient checkpointing on both sides (TRL's default) and off on both
    "Q05": [("qwen2.5-0.5b", 64, False, 4, 4, True, ("default",))],
    "Q05-full": [("qwen2.5-0.5b", 64, False, 4, 4, False, ("default",))],
}
VARIANTS = {
    "default": [],  # packed passes (use_remove_padding, on by default since 2026-11-25)
    "padded": ["actor_rollout_ref.model.use_remove_padding=false"],  # the default before 2026-11-25
    "remove_padding": ["actor_rollout_ref.model.use_remove_padding=true"],  # the default now; for --baseline-src
    "compile": ["actor_rollout_ref.actor.use_torch_compile=true"],
    "compiled_decode": ["actor_rollout_ref.rollout.enforce_eager=false"],  # the hf engine's decode step compiled
    "fastest": ["actor_rollout_ref.model.use_remove_padding=true", "actor_rollout_ref.actor.use_torch_compile=true",
                "actor_rollout_ref.rollout.enforce_eager=false"],  # the three together
}
SCALING = ("growth", "length")  # rft alone: s/step against the work's growth


TIE_BREAK = '''
_shaped = compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return _shaped(data_source, solution_str, ground_truth) + 0.01 * len(solution_str) / (1 + len(solution_str))
'''
"""The real-size workloads' reward: the shaped one plus a term in the response's length below 0.01. The random
0.5B model drifts within a step or two to responses with no digit and no EOS (seen in bf16 on an Intel Xeon,
2026-11-26: every row of steps 2-5 scored 0), where every group's rewards are equal, rft leaves every row out of its
update (exactly: their advantages are 0) and TRL still runs its own; responses of different lengths keep the
rewards of a group apart, so both sides train every row."""


# ---------------------------------------------------------------------------------------------- the TRL venv
def trl_python() -> Path:
    return VENV / "bin" / "python"


def ensure_trl_venv() -> None:
    """bench/.venv-trl with torch 2.13.0 (constraints.txt: pip may never replace it) and trl 1.16.0."""
    if trl_python().exists():
        return
    pip = [str(trl_python()), "-m", "pip", "install", "--quiet", "--constraint", str(ROOT / "constraints.txt")]
    print(f"creating {VENV} (torch 2.13.0, {TRL}) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, TRL], check=True)


# ---------------------------------------------------------------------------------------------- TRL side
def trl_worker(spec: dict) -> dict:
    """TRL's GRPOTrainer on the spec's model, prompts and reward; per-step seconds from a callback."""
    import importlib.util

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_flush_denormal(True)
    loader = importlib.util.spec_from_file_location("reward", spec["reward"])
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)

    def reward(prompts, completions, ground_truth, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [module.compute_score("arithmetic", t, g) for t, g in zip(texts, ground_truth)]

    rows = [json.loads(x) for x in Path(spec["data"]).read_text().splitlines()]
    dataset = Dataset.from_list(rows)
    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    n = spec["samples"]
    args = GRPOConfig(
        output_dir=spec["out"], per_device_train_batch_size=spec["prompts"] * n, gradient_accumulation_steps=1,
        steps_per_generation=1, num_generations=n, num_iterations=1, max_completion_length=spec["response"],
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, learning_rate=1e-5, lr_scheduler_type="constant",
        max_steps=spec["steps"], logging_steps=1, report_to="none", save_strategy="no",
        use_cpu=True, bf16=spec["precision"] == "bf16", seed=0, dataloader_num_workers=0, model_init_kwargs={"dtype": torch.float32},
        disable_dropout=True, max_grad_norm=1.0, gradient_checkpointing=spec["checkpointing"],
    )
    trainer = GRPOTrainer(model=spec["model"], reward_funcs=reward, args=args, train_dataset=dataset,
                          callbacks=[StepTimer()])
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    return {"times": times, "response_mean": statistics.mean(lengths) if lengths else None, "rss": peak_rss()}


# ---------------------------------------------------------------------------------------------- rft side
def rft_worker(spec: dict) -> dict:
    sys.path.insert(0, str(HERE))
    import torch

    from rft.monitor import Timer
    from rft.trainer.configure import load_config
    from rft.orchestration.run import SyncRun

    torch.set_flush_denormal(True)
    cfg = load_config(None, [
        f"actor_rollout_ref.model.path={spec['model']}", f"data.train_files={spec['parquet']}",
        "data.max_prompt_length=32", f"data.max_response_length={spec['response']}",
        f"data.train_batch_size={spec['prompts']}", f"actor_rollout_ref.rollout.n={spec['samples']}",
        f"actor_rollout_ref.rollout.ignore_eos={'true' if spec['ignore_eos'] else 'false'}",
        "actor_rollout_ref.rollout.temperature=1.0",
        # fp32: float32 named everywhere; bf16: bf16 named for the rollout and the update, used where this CPU
        # computes it faster (models/precision.py; the run's log line says which); auto: no key (rft's default)
        *{"fp32": ["actor_rollout_ref.rollout.dtype=float32",
                   "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"],
          "bf16": ["actor_rollout_ref.rollout.dtype=bfloat16",
                   "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16"],
          "auto": []}[spec["precision"]],
        f"actor_rollout_ref.actor.ppo_mini_batch_size={spec['prompts']}", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.optim.lr=1e-5", "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        "actor_rollout_ref.actor.grad_clip=1.0", "algorithm.adv_estimator=grpo",
        f"custom_reward_function.path={spec['reward']}", "trainer.val_before_train=false", "trainer.test_freq=-1",
        "trainer.save_freq=-1", "trainer.resume_mode=disable", "trainer.device=cpu", "trainer.logger=[]",
        f"trainer.total_training_steps={spec['steps']}", f"trainer.default_local_dir={spec['out']}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={'true' if spec['checkpointing'] else 'false'}",
        *spec["keys"],
    ])
    run = SyncRun(cfg)
    from rft.models.precision import describe

    print(f"rft {describe(run.trainer.precision)}", file=sys.stderr, flush=True)
    n_params = sum(p.numel() for p in run.trainer.model.parameters())
    arm = record_generations(run.explorer.engine, Path(spec["out"]) / "replay.pt")
    rows, table = [], None
    for step in range(1, spec["steps"] + 1):
        if step == spec["steps"] - (1 if spec.get("profile") else 0):
            arm()  # the last timed step's generation, replayed by the engine alone afterwards
        timer = Timer()
        profile = spec.get("profile") and step == spec["steps"]  # the last step, profiled (not in the median)
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as tprofile

            prof = tprofile(activities=[ProfilerActivity.CPU])
            prof.__enter__()
        with timer("step"):
            metrics = run.train_step(step, timer)
        if profile:
            prof.__exit__(None, None, None)
            table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40)
            continue
        metrics.update(timer.metrics())
        rows.append({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    rss = peak_rss()  # the run's own peak, before the replays below
    return {"rows": rows, "n_params": n_params, "profile": table, "rss": rss,
            "replay": replay_side_by_side(run.explorer.engine, spec)}


def record_generations(engine, path: Path):
    """Wrap `engine.generate` so that its next call after `arm()` saves to `path` its inputs (prompts, sampling
    parameters, the generator's state before it), the model's weights then and its seconds: replayed by the engine
    alone in a fresh process (`engine_worker`). Returns `arm`."""
    import torch

    generate = engine.generate
    path.parent.mkdir(parents=True, exist_ok=True)
    armed = []

    def recorded(prompt_ids, prompt_mask, params, generator=None):
        if not armed:
            return generate(prompt_ids, prompt_mask, params, generator)
        armed.clear()
        state = generator.get_state() if generator is not None else None
        t0 = time.perf_counter()
        out = generate(prompt_ids, prompt_mask, params, generator)
        seconds = time.perf_counter() - t0
        # the weights it generated with (a generation changes none), copied after it: before, the copy's 2 GB at
        # Qwen2.5-0.5B's size would change the memory the timed generation meets
        weights = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
        torch.save({"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "params": params, "state": state,
                    "weights": weights, "seconds": seconds, "tokens": int(out.response_mask.sum()),
                    "dtype": engine.dtype}, path)
        return out

    engine.generate = recorded
    return lambda: armed.append(True)


REPLAY_ROUNDS = 4
"""Generations each side of `replay_side_by_side` times, in the order A B B A A B B A (a drift of the machine's speed
through the comparison reaches both sides alike)."""


def _replay(engine, replay: dict) -> tuple[float, int]:
    """`replay`'s generation by `engine` (same prompts, parameters and draws): (seconds, response tokens)."""
    import torch

    generator = None
    if replay["state"] is not None:
        generator = torch.Generator()
        generator.set_state(replay["state"])
    t0 = time.perf_counter()
    out = engine.generate(replay["prompt_ids"], replay["prompt_mask"], replay["params"], generator)
    return time.perf_counter() - t0, int(out.response_mask.sum())


def replay_side_by_side(engine, spec: dict) -> dict:
    """The run's last timed generation (`record_generations`) timed again, alternately, in this process (which holds
    the run: optimizer state, the heap the updates left, the compiled or timed kernels) over the weights it had
    then, and by the hf engine alone in a fresh process that trains nothing (`engine_worker`, waiting on a pipe):
    what the run around it costs generation, measured so that the machine's drift (25-40% within minutes on a
    shared host) reaches both sides. Returns the recorded in-run seconds and both sides' times."""
    import torch

    from rft.runtime import release_freed_memory

    replay = torch.load(Path(spec["out"]) / "replay.pt", weights_only=False)
    worker = subprocess.Popen([sys.executable, __file__, "--engine-worker", json.dumps(spec)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        _await(worker, "@@READY@@")  # loaded, and its first generation (the one-time work) done
        with torch.no_grad():
            weights = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
            engine.model.load_state_dict(replay["weights"])  # the weights of the recorded generation
        ours, theirs, same = [], [], True
        rounds = spec.get("replay_rounds", REPLAY_ROUNDS)
        for side in ("ABBA" * rounds)[:2 * rounds]:
            if side == "A":
                release_freed_memory()  # as the run's update ends, before each of its generations
                seconds, tokens = _replay(engine, replay)
                ours.append(seconds)
            else:
                worker.stdin.write("go\n")
                worker.stdin.flush()
                seconds, tokens = (float(x) for x in _await(worker, "@@GEN@@").split())
                theirs.append(seconds)
            same &= int(tokens) == replay["tokens"]
        with torch.no_grad():
            engine.model.load_state_dict(weights)
    finally:
        worker.stdin.close()
        worker.wait(timeout=60)
    return {"in_run": replay["seconds"], "in_process": ours, "alone": theirs, "same_tokens": same}


def _await(worker: subprocess.Popen, tag: str) -> str:
    """The rest of the worker's next line that starts with `tag` (other lines pass through to stderr)."""
    for line in worker.stdout:
        if line.startswith(tag):
            return line[len(tag):]
        sys.stderr.write(line)
    raise SystemExit(f"the engine worker ended before {tag} (exit {worker.wait()})")


def engine_worker(spec: dict) -> None:
    """The hf engine alone over the model loaded afresh with the weights of the run's last timed generation
    (`record_generations`), in a process that trains nothing: one generation of it (the one-time work: the kernels'
    timing per shape, first allocations), then another for each "go" line on stdin, its seconds and response tokens
    printed after @@GEN@@ (the same prompts, parameters and draws, so the same tokens)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rft.rollout.base import eos_token_ids
    from rft.rollout.hf import HFRollout
    from rft.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    torch.set_flush_denormal(True)
    replay = torch.load(Path(spec["out"]) / "replay.pt", weights_only=False)
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    model.load_state_dict(replay.pop("weights"))  # the run's weights at that generation
    engine = HFRollout(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id,
                       dtype=replay["dtype"])  # the run's generation precision
    _replay(engine, replay)
    print("@@READY@@", flush=True)
    for _ in sys.stdin:
        seconds, tokens = _replay(engine, replay)
        print(f"@@GEN@@{seconds} {tokens}", flush=True)


def peak_rss() -> int:
    """This process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---------------------------------------------------------------------------------------------- driver
def _child(cmd: list[str], env: dict | None = None) -> tuple[dict, float]:
    """Run a worker; (its result, cores other processes used meanwhile)."""
    from bench import busy_s

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, t0 = busy_s(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("@@RESULT@@")), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-6000:])
        raise SystemExit(f"worker failed: {' '.join(cmd[:3])} (exit {proc.returncode})")
    return json.loads(line[len("@@RESULT@@"):]), max(0.0, (busy_s() - busy0 - child) / wall)


def median_of(times: list[float], first: int = 3) -> float:
    return statistics.median(times[first - 1:]) if len(times) >= first else statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="W1,W2,W3,growth")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved runs of each side (best kept)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--wait-idle", type=float, default=60.0, metavar="S")
    ap.add_argument("--baseline-src", metavar="DIR",
                    help="also run rft from this source tree (e.g. an export of the commit before a change) as the "
                         "variant 'baseline', side by side")
    ap.add_argument("--baseline-variant", default="default", choices=sorted(VARIANTS),
                    help="the speed keys the baseline tree runs with (a variant's; default: none)")
    ap.add_argument("--variants", help="only these rft variants of each workload, comma-separated (default: all)")
    ap.add_argument("--precision", choices=("fp32", "bf16", "auto"), default="fp32",
                    help="fp32: both trainers in float32; bf16: TRL with bf16=True (autocast over float32 weights) "
                         "against rft with bf16 named for its rollout and update (used where this CPU computes it "
                         "faster than float32: models/precision.py); auto: TRL in float32 against rft with no "
                         "precision key (its default: bf16 where this CPU computes it faster)")
    ap.add_argument("--replay-rounds", type=int, default=REPLAY_ROUNDS, metavar="N",
                    help="replays of the run's last generation each side (the run's process, the engine alone); a "
                         f"gap below ~15%% needs 8 or more on a noisy machine (default {REPLAY_ROUNDS})")
    ap.add_argument("--profile", action="store_true",
                    help="torch.profiler over one more rft step of each variant (printed; not in the median)")
    ap.add_argument("--trl-worker", help=argparse.SUPPRESS)
    ap.add_argument("--rft-worker", help=argparse.SUPPRESS)
    ap.add_argument("--engine-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS) if args.variants else set()
    if unknown:
        ap.error(f"--variants: no variant {', '.join(sorted(unknown))} (the variants: {', '.join(VARIANTS)})")
    if args.trl_worker:
        print("@@RESULT@@" + json.dumps(trl_worker(json.loads(args.trl_worker))), flush=True)
        return
    if args.rft_worker:
        print("@@RESULT@@" + json.dumps(rft_worker(json.loads(args.rft_worker))), flush=True)
        return
    if args.engine_worker:
        engine_worker(json.loads(args.engine_worker))
        return

    sys.path.insert(0, str(HERE))
    import torch
    from transformers.utils import logging as hf_logging

    from bench import (
        REAL_SIZES,
        SHAPED_REWARD,
        append_results,
        cpu_name,
        matmul_gflops,
        real_size_model,
        wait_idle,
    )
    from rft.data.io import read_rows
    from rft.models.tiny import PRESETS as MODEL_PRESETS
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    hf_logging.disable_progress_bar()
    ensure_trl_venv()
    machine = f"{cpu_name()}, nproc {os.cpu_count()}, torch {torch.__version__}, CPU, {args.precision}"
    print(f"rft vs TRL {TRL.split('==')[1]}: {machine}", flush=True)
    wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
    results = []
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rft-vs-trl-") as tmp:
        tmp = Path(tmp)
        data = write_arithmetic(tmp / "data", n_train=2000, n_val=10, seed=0)["train"]
        trl_data = tmp / "trl.jsonl"
        trl_data.write_text("".join(json.dumps({"prompt": r["prompt"],
                                                "ground_truth": str(r["reward_model"]["ground_truth"])}) + "\n"
                                    for r in read_rows(data)))
        reward = tmp / "reward_shaped.py"
        reward.write_text(SHAPED_REWARD)
        tie_break = tmp / "reward_shaped_tie_break.py"
        tie_break.write_text(SHAPED_REWARD + TIE_BREAK)
        for workload in wanted:
            for preset, response, ignore_eos, prompts, samples, checkpointing, variants in WORKLOADS[workload]:
                model = tmp / f"model-{preset}"
                sizes = REAL_SIZES.get(preset) or MODEL_PRESETS[preset]
                if not model.exists():
                    real_size_model(preset, model) if preset in REAL_SIZES else init_model(preset, model, seed=0)
                if preset not in rates:
                    wait_idle(args.wait_idle)
                    rates[preset] = matmul_gflops(prompts * samples * (15 + response), sizes["hidden_size"],
                                                  sizes["intermediate_size"])
                base = dict(model=str(model), response=response, prompts=prompts, samples=samples,
                            precision=args.precision, replay_rounds=args.replay_rounds,
                            ignore_eos=ignore_eos, steps=args.steps, checkpointing=checkpointing,
                            reward=str(tie_break if preset in REAL_SIZES else reward))
                label = (f"{workload} {preset} {response} tok, {prompts}x{samples}"
                         + (", gradient checkpointing" if checkpointing else ""))
                keep = set(args.variants.split(",")) if args.variants else set(variants)
                names = (("baseline",) if args.baseline_src else ()) + tuple(v for v in variants if v in keep)
                trl_runs: list[dict] = []
                rft_runs: dict[str, list[dict]] = {v: [] for v in names}
                for repeat in range(1, args.repeats + 1):
                    if workload not in SCALING:
                        wait_idle(args.wait_idle)
                        spec = {**base, "data": str(trl_data), "out": str(tmp / "trl-out")}
                        env = {**os.environ, "PYTHONPATH": ""}
                        trl, load = _child([str(trl_python()), __file__, "--trl-worker", json.dumps(spec)], env)
                        trl.update(s=median_of(trl["times"]), load=load)
                        trl_runs.append(trl)
                        print(f"  {label}, run {repeat}: TRL {trl['s']:.3f} s/step (peak RSS "
                              f"{trl['rss'] / 2**30:.2f} GiB, other procs {load:.2f} cores)", flush=True)
                    for variant in names:
                        wait_idle(args.wait_idle)
                        spec = {**base, "parquet": str(data), "out": str(tmp / f"rft-{workload}-{variant}"),
                                "variant": variant, "profile": args.profile and repeat == 1,
                                "keys": VARIANTS[args.baseline_variant if variant == "baseline" else variant],
                                "steps": args.steps + (1 if args.profile and repeat == 1 else 0)}
                        src = args.baseline_src if variant == "baseline" else str(ROOT / "src")
                        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), os.environ.get(
                            "PYTHONPATH", "")])}  # this tree's rft (or the baseline's), whatever the venv has
                        r, load = _child([sys.executable, __file__, "--rft-worker", json.dumps(spec)], env)
                        row = summarise(r, rates[preset], prompts * samples, samples)
                        replay = r["replay"]
                        row.update(load=load, runs=[], rss=r["rss"], replay=replay)
                        rft_runs[variant].append(row)
                        print(f"    rft {variant}, run {repeat}: {row['s']:.3f} s/step (eff {100 * row['eff']:.0f}%, "
                              f"peak RSS {row['rss'] / 2**30:.2f} GiB, other procs {load:.2f} cores); its last "
                              f"generation {replay['in_run']:.3f} s in the run; again, alternately, in the run's "
                              f"process {_seconds(replay['in_process'])} and by the engine alone "
                              f"{_seconds(replay['alone'])}{'' if replay['same_tokens'] else ' (other tokens!)'}",
                              flush=True)
                        if r.get("profile"):
                            print(f"\ntorch.profiler, {label}, rft {variant}, one step (self CPU time):\n"
                                  f"{r['profile']}", flush=True)
                trl = min(trl_runs, key=lambda x: x["s"]) if trl_runs else None
                if trl:
                    trl["runs"] = [x["s"] for x in trl_runs]
                for variant, runs in rft_runs.items():
                    row = min(runs, key=lambda x: x["s"])
                    row.update(workload=workload, label=label, variant=variant, trl=trl, preset=preset,
                               response=response, prompts=prompts, runs=[x["s"] for x in runs])
                    results.append(row)
                    if trl:
                        print(f"  {label}: rft {variant} best {row['s']:.3f} s/step, TRL best {trl['s']:.3f}: "
                              f"{row['s'] / trl['s']:.2f}x", flush=True)
    table = render(results, rates, args.replay_rounds)
    print()
    print(table)
    if not args.no_write:
        append_results(f"rft vs TRL {TRL.split('==')[1]} side by side (`bench/vs_trl.py`); {os.uname().nodename}: "
                       f"{machine}", table)


def _seconds(times: list[float]) -> str:
    return f"{statistics.median(times):.3f} s (" + ", ".join(f"{t:.3f}" for t in times) + ")"


def _last_gen(replay: dict) -> str:
    ours, alone = statistics.median(replay["in_process"]), statistics.median(replay["alone"])
    return (f"{replay['in_run']:.3f} / {ours:.3f} / {alone:.3f} ({100 * (ours / alone - 1):+.0f}%)"
            + ("" if replay["same_tokens"] else " other tokens!"))


def summarise(r: dict, rate: float, rows: int, samples: int) -> dict:
    """Medians of steps 3.. of the rft rows: s/step, phases, tokens; the floor and efficiencies."""
    from bench import generated_tokens

    steps = r["rows"][2:] if len(r["rows"]) >= 3 else r["rows"]
    med = lambda k: statistics.median([x.get(k, 0.0) for x in steps])
    n = r["n_params"]
    prompt, response = med("prompt_length/mean"), med("response_length/mean")
    tokens = rows * (prompt + response)
    kept = 1.0 - med("actor/zero_adv_rows") / rows
    gen_flops, upd_flops = 2 * n * generated_tokens(rows, samples, prompt, response), 6 * n * tokens * kept
    s, gen, upd = med("timing_s/step"), med("timing_s/gen"), med("timing_s/update_actor")
    return dict(s=s, gen=gen, upd=upd, prompt=prompt, response=response, kept=kept,
                first=r["rows"][0]["timing_s/step"] if r["rows"] else float("nan"),
                tok_s=rows * response / s, eff=(gen_flops + upd_flops) / (rate * 1e9) / s,
                gen_eff=gen_flops / (rate * 1e9) / max(gen, 1e-9),
                upd_eff=upd_flops / (rate * 1e9) / max(upd, 1e-9) if kept > 0 else float("nan"),
                other=s - gen - upd)


def render(results: list[dict], rates: dict[str, float], rounds: int = REPLAY_ROUNDS) -> str:
    head = ["workload", "rft variant", "TRL s/step", "rft s/step", "rft / TRL", "runs (TRL; rft)",
            "rft first step s", "gen s",
            "last gen: in run / again in its process / alone s",
            "update s", "other s",
            "rows trained", "resp tok (rft / TRL)", "resp tok/s", "eff", "gen eff", "update eff",
            "other procs (TRL / rft)", "peak RSS GiB (TRL / rft)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in results:
        trl = r["trl"]
        cells = [r["label"], r["variant"], f"{trl['s']:.3f}" if trl else "–", f"{r['s']:.3f}",
                 f"{r['s'] / trl['s']:.2f}" if trl else "–",
                 "; ".join(([" ".join(f"{x:.3f}" for x in trl["runs"])] if trl else [])
                           + [" ".join(f"{x:.3f}" for x in r["runs"])]),
                 f"{r['first']:.1f}", f"{r['gen']:.3f}", _last_gen(r["replay"]),
                 f"{r['upd']:.3f}",
                 f"{r['other']:.3f}", f"{100 * r['kept']:.0f}%",
                 f"{r['response']:.1f} / {trl['response_mean']:.1f}" if trl and trl["response_mean"] else
                 f"{r['response']:.1f}", f"{r['tok_s']:.0f}", f"{100 * r['eff']:.0f}%", f"{100 * r['gen_eff']:.0f}%",
                 f"{100 * r['upd_eff']:.0f}%" if r["kept"] > 0 else "–",
                 f"{trl['load']:.2f} / {r['load']:.2f}" if trl else f"– / {r['load']:.2f}",
                 f"{trl['rss'] / 2**30:.2f} / {r['rss'] / 2**30:.2f}" if trl else f"– / {r['rss'] / 2**30:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = ["", "fp32 matmul rate at the model's shape: " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in rates.items())
             + ". s/step: median of steps 3-8 of a run; each side's best of its interleaved runs (all listed); rft "
             "first step: the first step's seconds (compiles, the kernels' timing per shape, first allocations). "
             "eff = (2*N*T_gen generation, each prompt once + the response tokens fed back, + 6*N*T update over the "
             "rows trained) / rate / s/step; gen eff and update eff: each phase's own FLOPs over its own time. last gen: "
             "the run's last generation, then the same one (prompts, parameters, draws, weights) again, alternately, "
             f"{rounds} times in the run's process after its steps and {rounds} times by the "
             "hf engine "
             "alone in a fresh process (medians; the two replays' ratio is the figure: measured side by side). "
             "rows trained: the "
             "share of rows whose advantages were not all 0 (rft leaves the others out of the update, exactly). "
             "other procs: cores other processes used during each side's run (2 cores in all)."]
    for name, what in (("growth", "prompts per step"), ("length", "new tokens per row")):
        runs = [r for r in results if r["workload"] == name]
        if len(runs) > 1:
            notes.append(f"{name.capitalize()} (rft alone, s/step against {what}): " + scaling(runs) + ".")
    return "\n".join(lines + notes)


def scaling(runs: list[dict]) -> str:
    """Each run's s/step as a share of linear growth from the first, (s / s0) / (work / work0): work the prompts
    (growth) or the new tokens per row (length); for length also per prompt + response token."""
    def share(r, work):
        return r["s"] / runs[0]["s"] / (work(r) / work(runs[0]))

    parts = []
    for r in runs:
        if r["workload"] == "length":
            parts.append(f"{r['label']}: {r['s']:.3f} s/step, {share(r, lambda x: x['response']):.2f} of linear in "
                         f"new tokens ({share(r, lambda x: x['prompt'] + x['response']):.2f} in prompt + response "
                         "tokens)")
        else:
            parts.append(f"{r['label']}: {r['s']:.3f} s/step, {share(r, lambda x: x['prompts']):.2f} of linear")
    return "; ".join(parts)

if __name__ == "__main__":
    main()
