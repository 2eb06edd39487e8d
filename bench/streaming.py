"""Streaming rollouts against step-synchronous ones on a long-tailed workload, at the engine level (issue 62 item 7).

    OMP_NUM_THREADS=1 python bench/streaming.py [--quick] [--repeats 3] [--models tiny wide] [--no-write] [--profile]
    OMP_NUM_THREADS=1 python bench/streaming.py --trainer [--quick] [--repeats 3] [--steps 6] [--response 96]

`--trainer`: GRPO runs, step-synchronous against streaming through the engine server (bench/streaming_trainer.py).

Side by side in one invocation, the same requests and token budgets through the hf engine, the modes alternating
within each round so that a slow spell of this shared machine hits each:
* `sync`: batches of B requests through `HFRollout.generate()`, each batch waiting for its longest response (rows
  that ended leave the forward passes once a quarter of the batch has, as generate() does; their slots stay empty);
* `stream`: `HFRollout.stream(max_num_seqs=B)`, a finished row's slot taking the next waiting request;
* `stream+upd K`: the same with a weight update (every parameter copied, `update_weights`) every K decode steps:
  partial rollouts, the rows in flight keeping their KV cache; `stream+upd K recompute`: their cache recomputed
  with the new weights at the first step after each update (`recompute_on_update`).

The workload. Each request's response length L is drawn from a clipped log-normal (median max/8, sigma 1, clipped to
[max/32, max]): most responses short, a long tail, and a mass at the cap, the shape of reasoning RL rollouts (DAPO's
overlong responses, the long-tail samples verl's and AReaL's users report hanging a synchronous step). The lengths
must be the same in every mode, so they are made natural EOS endings of a forced model: a forward hook on the random
model overwrites the last position's logits so that after token `BASE + r` the next token is `BASE + r - 1`, and
after `BASE + 1` the EOS; a prompt ending in `BASE + L` thus gets exactly L tokens (the EOS included) whatever the
mode and the sampling stream. Every forward pass is still the model's whole pass (the hook adds one small index
write), so the costs are the engine's; generate() sees real EOS endings, drops ended rows as it would in a run.
Requests come in groups of n (GRPO's samples of one prompt: the same prompt body, each its own length).

Figures, the median over the rounds: generated tokens per second of wall time and per CPU second of this process
(one thread: the CPU seconds are the less noisy figure on a machine other work shares), engine slot occupancy
(tokens drawn / (decode steps x B): the share of the B slots that drew a useful token at a step), seconds per
completed group of n, and for the partial rollouts the per-token staleness histogram: a toy trainer consumes each
group as it completes, at the engine's version then, and a token is (that version - the version that drew it)
behind.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from results_md import append_section

from bench import REAL_SIZES  # bench/bench.py (the script's folder is on sys.path): the released shapes
from rft.data.dataset import left_pad
from rft.models.tiny import build_config
from rft.rollout import HFRollout, SamplingParams
from rft.rollout.base import StreamRequest
from rft.runtime import configure_cpu_runtime, cpu_model

PAD, EOS, BASE = 0, 1, 2


@dataclass
class Shape:
    """One model and workload size."""
    name: str
    label: str
    max_tokens: int
    prompts: int
    n: int
    slots: int
    update_every: int


SHAPES = {
    "tiny": Shape("tiny", "rft's tiny preset (Qwen2, 128 hidden, 4 layers, 275-token vocabulary)",
                  max_tokens=256, prompts=32, n=4, slots=16, update_every=16),
    "wide": Shape("wide", "Qwen2.5-0.5B's width (896 hidden, 4864 MLP, 14 / 2 heads, 151,936-token vocabulary, tied "
                          "embeddings) with 2 of its 24 layers, random weights",
                  max_tokens=64, prompts=16, n=4, slots=8, update_every=8),
}
QUICK = {"tiny": Shape("tiny", SHAPES["tiny"].label, max_tokens=32, prompts=4, n=2, slots=4, update_every=4)}


def build_model(name: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = build_config("tiny")
    if name == "wide":
        tiny = config.to_dict()
        tiny.pop("layer_types", None)
        config = Qwen2Config(**{**tiny, **REAL_SIZES["qwen2.5-0.5b"], "num_hidden_layers": 2})
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def force_lengths(model: torch.nn.Module):
    """The forward hook that makes a response's length its prompt's last token (the module docstring): the token
    after `BASE + r` is `BASE + r - 1` (r > 1), after `BASE + 1` the EOS, at a logit 50 above the row's largest."""

    def hook(module, args, kwargs, output):
        last = kwargs["input_ids"][:, -1]
        rows = (last > BASE).nonzero().flatten()
        if len(rows):
            logits = output.logits[:, -1, :]
            forced = torch.where(last[rows] > BASE + 1, last[rows] - 1, EOS)
            logits[rows, forced] = logits[rows].max(-1).values + 50.0
        return output

    return model.register_forward_hook(hook, with_kwargs=True)


def workload(shape: Shape, vocab: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """`shape.prompts` x `shape.n` requests (a group's n adjacent): (prompt ids ending in BASE + L, L)."""
    gen = torch.Generator().manual_seed(seed)
    top = shape.max_tokens
    lengths = (torch.randn(shape.prompts * shape.n, generator=gen) + torch.log(torch.tensor(top / 8))).exp()
    lengths = lengths.round().clamp(max(2, top // 32), top).long().tolist()
    requests = []
    for p in range(shape.prompts):
        body = torch.randint(BASE + top + 1, vocab, (int(torch.randint(8, 33, (1,), generator=gen)),),
                             generator=gen).tolist()
        requests += [(body + [BASE + length], length) for length in lengths[p * shape.n:(p + 1) * shape.n]]
    return requests


@dataclass
class Run:
    wall: float = 0.0
    cpu: float = 0.0
    tokens: int = 0
    steps: int = 0
    drawn: int = 0  # tokens drawn over the decode steps (slots that did useful work)
    groups: list[float] = field(default_factory=list)  # each group's completion, seconds from the start
    staleness: Counter = field(default_factory=Counter)


def run_sync(engine: HFRollout, requests, shape: Shape, params: SamplingParams) -> Run:
    run = Run()
    start, cpu = time.perf_counter(), time.process_time()
    gen = torch.Generator().manual_seed(0)
    for i in range(0, len(requests), shape.slots):
        batch = requests[i:i + shape.slots]
        ids, mask = left_pad([prompt for prompt, _ in batch], PAD)
        out = engine.generate(ids, mask, params, gen)
        lengths = out.response_mask.sum(-1).tolist()
        assert lengths == [length for _, length in batch], (lengths, batch)
        run.tokens += sum(lengths)
        run.steps += max(lengths)
        now = time.perf_counter() - start
        run.groups += [now] * (len(batch) // shape.n)
    run.drawn = run.tokens
    run.wall, run.cpu = time.perf_counter() - start, time.process_time() - cpu
    return run


def run_stream(engine: HFRollout, requests, shape: Shape, params: SamplingParams, update_every: int = 0,
               recompute: bool = False, weights: list[dict] | None = None) -> Run:
    run = Run()
    version0 = engine.version
    start, cpu = time.perf_counter(), time.process_time()
    stream = engine.stream(shape.slots, torch.Generator().manual_seed(0), recompute_on_update=recompute)
    for i, (prompt, _) in enumerate(requests):
        stream.submit(StreamRequest(i, prompt, params))
    finished: dict[int, list] = {}
    while stream.pending:
        if update_every and run.steps and run.steps % update_every == 0:
            engine.update_weights(weights[engine.version % len(weights)], engine.version + 1)
        done = stream.step()
        run.steps += 1
        run.drawn += len(stream.rows) + len(done)
        for response in done:
            assert len(response.response_ids) == requests[response.request_id][1]
            run.tokens += len(response.response_ids)
            group = finished.setdefault(response.request_id // shape.n, [])
            group.append(response)
            if len(group) == shape.n:  # the toy trainer takes the group now, at the engine's version
                run.groups.append(time.perf_counter() - start)
                for r in group:
                    run.staleness.update((engine.version - r.versions).tolist())
    run.wall, run.cpu = time.perf_counter() - start, time.process_time() - cpu
    engine.update_weights(weights[0] if weights else None, version0)
    return run


def modes(shape: Shape) -> list[tuple[str, dict]]:
    k = shape.update_every
    return [("sync", {}), ("stream", {}), (f"stream+upd {k}", {"update_every": k}),
            (f"stream+upd {k} recompute", {"update_every": k, "recompute": True})]


def measure(shape: Shape, repeats: int, profile: bool) -> tuple[list[str], str]:
    model = build_model(shape.name)
    hook = force_lengths(model)
    engine = HFRollout(model, [EOS], PAD)
    params = SamplingParams(temperature=1.0, max_tokens=shape.max_tokens)
    requests = workload(shape, model.config.vocab_size)
    lengths = [length for _, length in requests]
    # the weights the toy trainer publishes: the model's own and a perturbed copy, alternating
    own = {name: p.detach().clone() for name, p in model.named_parameters()}
    moved = {name: p + 1e-3 * torch.randn_like(p) for name, p in own.items()}
    runs: dict[str, list[Run]] = {name: [] for name, _ in modes(shape)}
    for _ in range(repeats):
        for name, kwargs in modes(shape):
            if name == "sync":
                runs[name].append(run_sync(engine, requests, shape, params))
            else:
                runs[name].append(run_stream(engine, requests, shape, params, weights=[own, moved], **kwargs))
            print(f"  {shape.name} {name}: {runs[name][-1].tokens / runs[name][-1].wall:.0f} tokens/s", flush=True)
    report = ""
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run_stream(engine, requests, shape, params)
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(15)
        stats.sort_stats("cumulative").print_stats(r"rollout/(stream|hf|kernels|cache)\.py|module\.py.*\(train\)")
        report = text.getvalue()
    hook.remove()

    def med(name, fn):
        return statistics.median(fn(r) for r in runs[name])

    sync_rate = med("sync", lambda r: r.tokens / r.wall)
    sync_cpu = med("sync", lambda r: r.tokens / r.cpu)
    lines = [f"**{shape.label}**: {len(requests)} requests ({shape.prompts} groups of n={shape.n}), B = "
             f"{shape.slots} slots, max_tokens {shape.max_tokens}; response lengths {min(lengths)}-{max(lengths)} "
             f"({max(lengths) / min(lengths):.0f}x), median {statistics.median(lengths):.0f}, mean "
             f"{statistics.mean(lengths):.1f}, {sum(lengths)} tokens in all. Median of {repeats} rounds.", "",
             "| mode | tokens/s (wall) | x sync | tokens / CPU s | x sync | slot occupancy | decode steps | "
             "s / group | median group done at (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, _ in modes(shape):
        rate, cpu = med(name, lambda r: r.tokens / r.wall), med(name, lambda r: r.tokens / r.cpu)
        lines.append(f"| {name} | {rate:.0f} | {rate / sync_rate:.2f} | {cpu:.0f} | {cpu / sync_cpu:.2f} | "
                     f"{med(name, lambda r: r.drawn / (r.steps * shape.slots)):.2f} | {runs[name][0].steps} | "
                     f"{med(name, lambda r: r.wall / len(r.groups)):.3f} | "
                     f"{med(name, lambda r: statistics.median(r.groups)):.2f} |")
    kept, recomputed = (runs[name][0] for name, _ in modes(shape)[2:])
    hist, total = kept.staleness, sum(kept.staleness.values())
    cells = ", ".join(f"{v}: {hist[v] / total:.1%}" for v in sorted(hist))
    mean = sum(v * c for v, c in hist.items()) / total
    same = "the same with the cache recomputed" if recomputed.staleness == hist else "NOT the same when recomputed"
    lines += ["", f"Per-token staleness with a weight update every {shape.update_every} decode steps "
              f"({kept.steps // shape.update_every} updates; versions behind when the toy trainer takes the token's "
              f"group): {cells}; mean {mean:.2f}, max {max(hist)} ({same})."]
    return lines, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds: the tiny model, a small workload, one round, "
                                                         "nothing written")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", nargs="+", choices=sorted(SHAPES), default=["tiny", "wide"])
    ap.add_argument("--profile", action="store_true", help="print a profile of one streaming run of each model")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    ap.add_argument("--trainer", action="store_true", help="the trainer level instead: GRPO runs step-synchronous "
                                                           "against streaming (bench/streaming_trainer.py)")
    ap.add_argument("--steps", type=int, default=6, help="--trainer: steps a run")
    ap.add_argument("--response", type=int, default=96, help="--trainer: the response cap")
    ap.add_argument("--stop", type=int, default=12, help="--trainer: a response stops w.p. ~1/stop a token")
    args = ap.parse_args()
    if args.trainer:
        from streaming_trainer import measure as trainer_level

        lines = trainer_level(1 if args.quick else args.repeats, 3 if args.quick else args.steps, args.response,
                              args.stop, prompts=8, n=4)
        print("\n".join(lines))
        if not (args.no_write or args.quick):
            append_section("streaming against step-synchronous rollouts, trainer level (bench/streaming.py "
                           "--trainer)", lines)
            print("appended to bench/RESULTS.md")
        return
    configure_cpu_runtime()
    torch.set_num_threads(1)
    shapes = list(QUICK.values()) if args.quick else [SHAPES[m] for m in args.models]
    repeats = 1 if args.quick else args.repeats
    lines = [f"{cpu_model()}, 1 thread (torch.set_num_threads(1); OMP_NUM_THREADS="
             f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), torch {torch.__version__}, float32, load average "
             f"{os.getloadavg()[0]:.1f} at the start (a machine other sessions share); sampling at temperature 1, "
             "the lengths forced (bench/streaming.py's docstring)", ""]
    for shape in shapes:
        table, report = measure(shape, repeats, args.profile)
        lines += table + [""]
        print("\n".join(table), flush=True)
        if report:
            print(report)
    if not (args.no_write or args.quick):
        append_section("streaming against step-synchronous rollouts, engine level (bench/streaming.py)", lines)
        print("appended to bench/RESULTS.md")


if __name__ == "__main__":
    main()
