"""Peak resident memory of `rft sft` and `rft dpo` steps at Qwen2.5-0.5B's width and its full vocabulary (151,936;
--layers decoder layers, random weights and the tiny tokenizer: `bench.real_size_model`), on GSM8K rows
(../shared/data/gsm8k: question -> answer; DPO's rejected answer is the same with its final number off by one),
8 rows (pairs) a step in micro-batches of 4 (pairs), at most --max-length tokens, float32, three ways side by side,
each in a process of its own:

  full      the model's full logits (a micro-batch's tokens x vocabulary), no memory handed back
  chunked   the chunked LM head (`workers/lm_head.py`), no memory handed back: main before the change
  released  the chunked LM head, and the freed memory handed back as the RL update does (`release_freed_memory`
            around each backward and the optimizer step, `trim_in_backward` inside it): the change

The figure is the process's maximum resident set (getrusage) over --steps steps. `release_freed_memory` trims only
a process holding more than `runtime.TRIM_SHARE` of the machine's memory (a quarter), which a cut-down model on a
shared machine does not reach: --trim-share sets the share for the measurement (0: always, as a full-size run on a
machine it fills).

    python bench/sft_memory.py --trainer sft dpo --layers 8
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GSM8K = HERE.parent.parent / "shared" / "data" / "gsm8k" / "train.jsonl"

CHILD = """
import json, resource, sys
import torch
from rft import runtime
from rft.trainer import sft as sft_module
from rft.trainer.configure import load_dpo_config, load_sft_config
from rft.trainer.dpo import DPOTrainer
from rft.trainer.sft import SFTTrainer
from rft.workers import lm_head
kind, variant, folder, trim_share, steps, max_length, checkpointing = sys.argv[1:8]
runtime.TRIM_SHARE = float(trim_share)
if variant != "released":  # main before the change: nothing handed back
    sft_module.release_freed_memory = lambda: None
    sft_module.trim_in_backward = lambda model: 0
keys = [f"model.partial_pretrain={folder}/model", f"data.train_files={folder}/{kind}.parquet",
        "data.train_batch_size=8", "data.micro_batch_size_per_gpu=4", f"data.max_length={max_length}",
        "data.truncation=right", "optim.lr=1e-5", "trainer.logger=[]", f"trainer.default_local_dir={folder}/out-{kind}-{variant}",
        "trainer.device=cpu", f"trainer.total_training_steps={steps}",
        f"model.enable_gradient_checkpointing={checkpointing}"]
trainer = (SFTTrainer(load_sft_config(None, keys)) if kind == "sft" else
           DPOTrainer(load_dpo_config(None, [*keys, "algorithm.beta=0.1"])))
for model in (trainer.model, getattr(trainer, "ref_model", None)):
    if model is not None:
        setattr(model, lm_head._HEAD_ATTR, None if variant == "full" else lm_head.lm_head(model))
tokens = 0
for _ in range(int(steps)):
    batch = trainer.train_set.batch(trainer.sampler.next_batch(), trainer.tokenizer.pad_token_id)
    tokens += int(batch.response_mask.sum() + batch.prompt_mask.sum())
    trainer.train_step(batch)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"kind": kind, "variant": variant, "peak_gib": peak, "tokens": tokens}))
"""


def write_data(folder: Path, rows: int) -> None:
    """GSM8K's first `rows` rows as SFT rows (prompt, response) and DPO pairs (prompt, chosen, rejected)."""
    from rft.data.io import write_parquet

    sft, dpo = [], []
    for line in GSM8K.read_text().splitlines()[:rows]:
        row = json.loads(line)
        answer = row["answer"]
        final = re.search(r"(-?\d+)\s*$", answer)
        wrong = answer[:final.start()] + str(int(final.group(1)) + 1) if final else answer + "1"
        sft.append({"prompt": row["question"], "response": answer})
        dpo.append({"prompt": row["question"], "chosen": answer, "rejected": wrong})
    write_parquet(sft, folder / "sft.parquet")
    write_parquet(dpo, folder / "dpo.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", nargs="+", default=["sft", "dpo"], choices=["sft", "dpo"])
    parser.add_argument("--variants", nargs="+", default=["full", "chunked", "released"])
    parser.add_argument("--layers", type=int, default=24, help="decoder layers (Qwen2.5-0.5B has 24)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--trim-share", type=float, default=0.25)
    parser.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=True,
                        help="gradient checkpointing (model.enable_gradient_checkpointing), as the issue's runs")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import bench

    bench.REAL_SIZES["bench"] = {**bench.REAL_SIZES["qwen2.5-0.5b"], "num_hidden_layers": args.layers}
    with tempfile.TemporaryDirectory(prefix="rft-sft-memory-") as tmp:
        folder = Path(tmp)
        bench.real_size_model("bench", folder / "model")
        write_data(folder, 64)
        print(f"Qwen2.5-0.5B's width, {args.layers} layers, vocabulary 151,936; 8 rows (pairs) a step in micro-batches "
              f"of 4, at most {args.max_length} tokens, {args.steps} steps, fp32, gradient checkpointing "
              f"{'on' if args.checkpointing else 'off'}; trim share {args.trim_share}\n")
        print("| trainer | variant | peak RSS (GiB) | tokens |")
        print("| --- | --- | --- | --- |")
        for kind in args.trainer:
            for variant in args.variants:
                out = subprocess.run([sys.executable, "-c", CHILD, kind, variant, str(folder), str(args.trim_share),
                                      str(args.steps), str(args.max_length), str(args.checkpointing).lower()],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"| {kind} | {variant} | failed: {out.stderr.strip().splitlines()[-1][:100]} | |", flush=True)
                    continue
                row = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"| {kind} | {variant} | {row['peak_gib']:.2f} | {row['tokens']} |", flush=True)


if __name__ == "__main__":
    main()
