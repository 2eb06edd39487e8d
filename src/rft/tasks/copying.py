"""A warm-up every pretrained LM has had already and a from-scratch model has not: repeat the user's number.

Conversations `user: 4821` -> `assistant: 4821`, numbers of 1 to 6 digits. A tiny model trained from scratch first
has to find the attention that reads digits back from the prompt; on a task that needs it (copying a tool's result,
adding the digits of two numbers) when it finds it is the seed's and the CPU rounding's luck, and learning the copy
alone first makes it reliable (bench/RESULTS.md). The `copy` stage of `rft demo` trains on these.
"""

from __future__ import annotations

import random
from pathlib import Path

from rft.data.io import write_parquet


def copy_conversation(rng: random.Random) -> dict:
    digits = rng.randrange(1, 7)
    number = str(rng.randrange(10 ** (digits - 1), 10 ** digits))
    return {"messages": [{"role": "user", "content": number}, {"role": "assistant", "content": number}]}


def write_copy(path: str | Path, rows: int, seed: int) -> Path:
    """`rows` copying conversations (a `messages` column) drawn from a stream of their own for `seed`."""
    rng = random.Random(f"copy-{seed}")
    return write_parquet([copy_conversation(rng) for _ in range(rows)], path)
