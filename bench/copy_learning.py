"""How fast the from-scratch tiny model learns to copy a number, by what its answer puts before the number.

The tools demo (`rft demo --task tools`) needs the model to copy the calculator's result into its answer line,
`#### 1776`, and whether SFT teaches that copy in the demo's budget has been the seed's luck (bench/RESULTS.md).
This isolates the copy: one SFT stage on conversations where a message holds a number of 1 to 6 digits and the
assistant repeats it after a prefix, for each prefix and seed, and reports the training loss along the way (per
answer token, so a longer prefix lowers it: the plateau before the copy is found sits near 0.8-0.9 with `#### `)
and, at the end, the share of 200 numbers of a separate draw that the model's greedy answer repeats exactly (the
1- and 2-digit ones, about a third of them, also occur among the 4000 training rows; the longer ones mostly not).

    python bench/copy_learning.py [--prefixes '' '= ' '#### '] [--role tool] [--seeds 0 1 2] [--steps 150]
                                  [--no-write]

Each run takes ~40 s on 2 cores; they run one after the other. Appends a table to bench/RESULTS.md unless
--no-write.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
from results_md import append_section  # noqa: E402  (bench/ is the script's folder: on sys.path)

HELD_OUT = 200  # numbers of a separate draw the trained model is asked to repeat


def copy_rows(seed: int, role: str, prefix: str, n: int = 4000) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        digits = rng.randrange(1, 7)
        number = str(rng.randrange(10 ** (digits - 1), 10 ** digits))
        rows.append({"messages": [{"role": role, "content": number},
                                  {"role": "assistant", "content": prefix + number}]})
    return rows


def run(out: Path, seed: int, role: str, prefix: str, steps: int) -> tuple[dict[int, float], float]:
    """The training loss by step of one SFT stage on the copy conversations, and the share of a separate draw of
    numbers its model repeats exactly (greedy)."""
    import torch
    from omegaconf import OmegaConf

    from rft.data.io import write_parquet
    from rft.models.load import load_causal_lm, load_tokenizer
    from rft.models.tiny import init_model
    from rft.trainer.stages import build_stages, run_stages

    init_model("tiny", out / "base_model", seed=seed)
    rows = write_parquet(copy_rows(seed, role, prefix), out / "copy.parquet")
    config = {
        "data": {"train_files": str(rows), "max_prompt_length": 32, "max_response_length": 16},
        "actor_rollout_ref": {"model": {"path": str(out / "base_model")}},
        "trainer": {"default_local_dir": str(out), "seed": seed},
        "stages": [{"stage_name": "copy", "algorithm": "sft",
                    "data": {"train_files": str(rows), "multiturn": {"enable": True}, "train_batch_size": 64,
                             "micro_batch_size_per_gpu": 64, "max_length": 48},
                    "optim": {"lr": 3.0e-3, "weight_decay": 0.0, "warmup_steps_ratio": 0.05},
                    "trainer": {"total_training_steps": steps, "save_freq": 0}}],
    }
    (out / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
    model_dir = run_stages(build_stages(OmegaConf.load(out / "config.yaml")))
    lines = (out / "copy" / "metrics.jsonl").read_text().splitlines()
    losses = {m["step"]: m["train/loss"] for m in map(json.loads, lines)}

    tokenizer = load_tokenizer(str(model_dir))
    tokenizer.padding_side = "left"
    model = load_causal_lm(str(model_dir), torch.float32, torch.device("cpu")).eval()
    held_out = copy_rows(seed + 1000, role, prefix, HELD_OUT)
    texts = [tokenizer.apply_chat_template(r["messages"][:1], add_generation_prompt=True, tokenize=False)
             for r in held_out]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out_ids = model.generate(**batch, max_new_tokens=16, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    answers = tokenizer.batch_decode(out_ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    right = sum(a.strip() == r["messages"][1]["content"].strip() for a, r in zip(answers, held_out))
    return losses, right / len(held_out)


def main() -> int:
    from rft.runtime import configure_cpu_runtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefixes", nargs="+", default=["", "= ", "#### "])
    ap.add_argument("--role", default="tool", help="the role of the message holding the number (tool, user)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    configure_cpu_runtime()
    marks = list(range(25, args.steps + 1, 25))
    table = [f"| prefix | seed | {' | '.join(f'loss @{s}' for s in marks)} | new draw repeated |",
             "| --- | --- |" + " --- |" * (len(marks) + 1)]
    with tempfile.TemporaryDirectory(prefix="rft_copy_") as tmp:
        for prefix in args.prefixes:
            for seed in args.seeds:
                losses, repeated = run(Path(tmp) / f"{len(table)}", seed, args.role, prefix, args.steps)
                row = f"| `{prefix!r}` | {seed} | {' | '.join(f'{losses[s]:.2f}' for s in marks)} | {repeated:.3f} |"
                print(row, flush=True)
                table.append(row)
    if not args.no_write:
        append_section(f"copy learning by answer prefix, role `{args.role}` ({platform.machine()}, "
                       "`python bench/copy_learning.py`)", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
