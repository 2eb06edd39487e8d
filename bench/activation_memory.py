"""Peak memory per token of one update pass (log-probs and entropy of every response token, forward and backward)
of a Qwen2.5-0.5B-shaped model (24 layers, width 896, vocabulary 151,936, random weights, float32) on one row of
--tokens tokens, with and without `enable_gradient_checkpointing`. Each case runs in a process of its own; the
figure is that process's maximum resident set (getrusage) minus the same process's before the pass, which holds
the parameters' gradients (1.9 GiB) besides the activations; per token: (pass - gradients) / tokens.

    python bench/activation_memory.py --tokens 1024 4096 16384 [--checkpointing on off]

A case whose pass would not fit the machine's memory is skipped with its estimate (the 16k-token pass without
checkpointing needs ~55 GiB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from rft.batch import Batch
from rft.workers.policy import forward_logprobs
tokens, checkpointing = int(sys.argv[1]), sys.argv[2] == "on"
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  tie_word_embeddings=True)
model = Qwen2ForCausalLM(cfg)
model.config._attn_implementation = "sdpa"
if checkpointing:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
g = torch.Generator().manual_seed(1)
batch = Batch(prompt_ids=torch.randint(0, 151936, (1, 16), generator=g), prompt_mask=torch.ones(1, 16, dtype=torch.long),
              response_ids=torch.randint(0, 151936, (1, tokens), generator=g),
              response_mask=torch.ones(1, tokens, dtype=torch.long), group=torch.arange(1))
grads = sum(p.numel() for p in model.parameters()) * 4 / 2**20
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
logprobs, entropy = forward_logprobs(model, batch, 1.0, with_entropy=True, entropy_grad=True)
(logprobs.sum() + 0.01 * entropy.sum()).backward()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
pass_mib = (peak - before) / 1024
print(json.dumps({"tokens": tokens, "checkpointing": checkpointing, "pass_mib": pass_mib, "gradients_mib": grads,
                  "kib_per_token": (pass_mib - grads) * 1024 / tokens, "seconds": seconds}))
"""

# a rough upper estimate of the activations kept for the backward without checkpointing (KiB per token), from
# this script's 1k / 4k measurements; used only to skip a case that cannot fit
NO_CHECKPOINT_KIB_PER_TOKEN = 3400


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--checkpointing", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--memory-gib", type=float, default=20.0, help="skip a case estimated above this")
    args = parser.parse_args()
    print("| tokens | gradient checkpointing | pass (MiB) | activations (KiB / token) | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for tokens in args.tokens:
        for mode in args.checkpointing:
            estimate = tokens * NO_CHECKPOINT_KIB_PER_TOKEN / 2**20 + 2
            if mode == "off" and estimate > args.memory_gib:
                print(f"| {tokens:,} | off | skipped: ~{estimate:.0f} GiB estimated | | |", flush=True)
                continue
            proc = subprocess.run([sys.executable, "-c", CHILD, str(tokens), mode], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"| {tokens:,} | {mode} | failed: {proc.stderr.strip().splitlines()[-1][:120]} | | |", flush=True)
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"| {tokens:,} | {mode} | {r['pass_mib']:,.0f} | {r['kib_per_token']:,.1f} | {r['seconds']:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
