"""Peak memory of one update pass (log-probs and entropy, forward and backward) with the LM head taken out of the
pass (rft/workers/lm_head.py: chunks of tokens) against the model's full logits, at Qwen2.5-0.5B's vocabulary and
hidden size (151,936 x 896; one decoder layer, random weights), 4 rows x --tokens response tokens. Each variant
runs in a process of its own; the figure is that process's maximum resident set (getrusage), minus the same
process's before the pass.

    python bench/lm_head_memory.py --tokens 1024 2048
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
from rft.workers import lm_head
from rft.workers.policy import forward_logprobs
tokens, variant = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=1,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768)
model = Qwen2ForCausalLM(cfg)
model.config._attn_implementation = "sdpa"
if variant == "full":
    setattr(model, lm_head._HEAD_ATTR, None)
else:
    assert lm_head.lm_head(model) is not None
rows = 4
g = torch.Generator().manual_seed(1)
batch = Batch(prompt_ids=torch.randint(0, 151936, (rows, 16), generator=g), prompt_mask=torch.ones(rows, 16, dtype=torch.long),
              response_ids=torch.randint(0, 151936, (rows, tokens), generator=g),
              response_mask=torch.ones(rows, tokens, dtype=torch.long), group=torch.arange(rows))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
logprobs, entropy = forward_logprobs(model, batch, 1.0, with_entropy=True, entropy_grad=True)
(logprobs.sum() + 0.01 * entropy.sum()).backward()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"variant": variant, "tokens": rows * tokens, "pass_mib": (peak - before) / 1024,
                  "seconds": seconds}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024])
    args = parser.parse_args()
    print("| response tokens (4 rows) | variant | memory of the pass (MiB) | seconds |")
    print("| --- | --- | --- | --- |")
    for tokens in args.tokens:
        for variant in ("chunked", "full"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(tokens), variant], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"| {4 * tokens} | {variant} | failed: {out.stderr.strip().splitlines()[-1][:80]} | |")
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {row['tokens']} | {variant} | {row['pass_mib']:.0f} | {row['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
