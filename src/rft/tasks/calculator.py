"""The calculator task: products the tiny model cannot do in its head, and a calculator tool that can.

A task is `a*b=` with two-digit a and b (a four-digit product at most); its row declares one tool, `calc`
(OpenAI function schema, column `tools`), and the reward is the exact answer line, `#### 1776` (GSM8K's format;
data_source `calculator`). The tool is called in the pythonic format, `[calc(e="37*48")]`; the tool answers `1776`
in a `tool` message and the model then answers `#### 1776`.

The SFT demonstrations (`sft.parquet`, a `messages` column plus `tools`) come from a teacher who uses the tool in
only `tool_share` of the conversations and otherwise answers straight away, correctly (it can multiply; the model
it teaches cannot). Every direct answer starts with the same `#`, so below a share of one half the imitating
model's likeliest first token is the answer line: greedy decoding answers from memory, which fails, while samples
take the tool path in about `tool_share` of its conversations. Where SFT has also taught the model to copy the
tool's result, that path pays, and GRPO, rewarded by the exact answer, takes it (rft demo --task tools; whether
the copy is learnt within the demo's SFT budget depends on the seed: bench/RESULTS.md).
"""

from __future__ import annotations

import random
from pathlib import Path

from rft.data.io import write_parquet

DATA_SOURCE = "calculator"
ANSWER_PREFIX = "#### "  # GSM8K's answer line
TOOL = {"type": "function", "function": {
    "name": "calc", "description": "The value of an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"e": {"type": "string", "description": "the expression"}},
                   "required": ["e"]}}}


def call_text(a: int, b: int) -> str:
    return f'[calc(e="{a}*{b}")]'


def answer_text(product: int) -> str:
    return f"{ANSWER_PREFIX}{product}"


def _row(a: int, b: int, split: str, index: int) -> dict:
    return {"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": f"{a}*{b}="}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer_text(a * b)}, "tools": [TOOL],
            "extra_info": {"split": split, "index": index, "a": a, "b": b}}


def _demonstration(a: int, b: int, use_tool: bool) -> list[dict]:
    question = {"role": "user", "content": f"{a}*{b}="}
    if not use_tool:
        return [question, {"role": "assistant", "content": answer_text(a * b)}]
    return [question, {"role": "assistant", "content": call_text(a, b)}, {"role": "tool", "content": str(a * b)},
            {"role": "assistant", "content": answer_text(a * b)}]


def write_calculator(out: str | Path, n_train: int = 2000, n_val: int = 200, seed: int = 0,
                     tool_share: float = 0.45) -> dict[str, Path]:
    """`out/train.parquet`, `out/val.parquet` (RL rows; disjoint products) and `out/sft.parquet` (one demonstration
    per training row, the tool used in `tool_share` of them)."""
    if not 0.0 <= tool_share <= 1.0:
        raise ValueError(f"tool_share={tool_share} must be in [0, 1]")
    rng = random.Random(seed)
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    rng.shuffle(pairs)
    if n_train + n_val > len(pairs):
        raise ValueError(f"only {len(pairs)} distinct two-digit products; ask for fewer rows")
    train, val = pairs[:n_train], pairs[n_train:n_train + n_val]
    out = Path(out)
    paths = {"train": write_parquet([_row(a, b, "train", i) for i, (a, b) in enumerate(train)], out / "train.parquet"),
             "val": write_parquet([_row(a, b, "val", i) for i, (a, b) in enumerate(val)], out / "val.parquet")}
    demos = [{"messages": _demonstration(a, b, rng.random() < tool_share), "tools": [TOOL]} for a, b in train]
    paths["sft"] = write_parquet(demos, out / "sft.parquet")
    return paths
