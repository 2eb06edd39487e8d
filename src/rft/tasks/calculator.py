"""The calculator task: products the tiny model cannot do in its head, and a calculator tool that can.

A task is `a*b=` with two-digit a and b (a four-digit product at most); its row declares one tool, `calc`
(OpenAI function schema, column `tools`), and the reward is the exact product in the final reply, bare (`1776`) or
on GSM8K's answer line (`#### 1776`) (data_source `calculator`, rft.rewards.arithmetic.calculator_score). The
tool is called in the pythonic format, `[calc(e="37*48")]`; the tool answers `1776` in a `tool` message.

The SFT demonstrations (`sft.parquet`, a `messages` column plus `tools`) come from a teacher who uses the tool in
only `tool_share` of the conversations and otherwise answers straight away, correctly (it can multiply; the model
it teaches cannot). Every direct answer is an answer line, so it starts with the same `#`: below a share of one
half the imitating model's likeliest first token is that `#`, and greedy decoding answers from memory, which
fails, while samples take the tool path in about `tool_share` of its conversations. That path pays where the model
copies the tool's result, and GRPO, rewarded by the exact answer, then takes it (rft demo --task tools).

A from-scratch model has to learn the copy, and how soon it does is the seed's luck unless it is made easy
(bench/RESULTS.md, bench/copy_learning.py): so after the tool the teacher answers with the bare number (a prefix
in front of it slows the copy down most), and `copy.parquet` holds a warm-up every pretrained LM has had already,
conversations in which the assistant repeats the user's number of 1 to 6 digits (`rft.tasks.copying`).
"""

from __future__ import annotations

import random
from pathlib import Path

from rft.data.io import write_parquet
from rft.rewards.arithmetic import ANSWER_LINE
from rft.tasks.copying import write_copy

DATA_SOURCE = "calculator"
TOOL = {"type": "function", "function": {
    "name": "calc", "description": "The value of an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"e": {"type": "string", "description": "the expression"}},
                   "required": ["e"]}}}


def call_text(a: int, b: int) -> str:
    return f'[calc(e="{a}*{b}")]'


def answer_text(product: int) -> str:
    return f"{ANSWER_LINE}{product}"


def _row(a: int, b: int, split: str, index: int) -> dict:
    return {"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": f"{a}*{b}="}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a * b)}, "tools": [TOOL],
            "extra_info": {"split": split, "index": index, "a": a, "b": b}}


def _demonstration(a: int, b: int, use_tool: bool) -> list[dict]:
    """From memory: the answer line. Through the tool: the call, the tool's result, and that result repeated."""
    question = {"role": "user", "content": f"{a}*{b}="}
    if not use_tool:
        return [question, {"role": "assistant", "content": answer_text(a * b)}]
    return [question, {"role": "assistant", "content": call_text(a, b)}, {"role": "tool", "content": str(a * b)},
            {"role": "assistant", "content": str(a * b)}]


def write_calculator(out: str | Path, n_train: int = 2000, n_val: int = 200, seed: int = 0,
                     tool_share: float = 0.45, copy_rows: int = 4000) -> dict[str, Path]:
    """`out/train.parquet`, `out/val.parquet` (RL rows; disjoint products), `out/sft.parquet` (one demonstration
    per training row, the tool used in `tool_share` of them) and, unless `copy_rows` is 0, `out/copy.parquet`
    (`copy_rows` conversations `user: N` -> `assistant: N`, N of 1 to 6 digits, no tools)."""
    if not 0.0 <= tool_share <= 1.0:
        raise ValueError(f"tool_share={tool_share} must be in [0, 1]")
    if copy_rows < 0:
        raise ValueError(f"copy_rows={copy_rows} must be >= 0")
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
    if copy_rows:  # its own stream: the other files do not depend on copy_rows
        paths["copy"] = write_copy(out / "copy.parquet", copy_rows, seed)
    return paths
