"""rft's synthetic arithmetic task: "a+b=" prompts whose reward is the exact answer (rft.rewards.arithmetic).

Small enough for a tiny model to learn in minutes, so a run can show the reward going up. Each row also carries a
demonstration for SFT (`extra_info.demonstration`): the answer, or, with `carry_slip`, the answer of a sloppy
teacher who now and then forgets the carry out of the units digit. SFT on those copies the teacher's slips; an
RL stage rewarded by the exact answer can then do better than its teacher (what `rft demo` shows).

`preference_rows` turns rows into DPO pairs about that carry (`rft data arithmetic --preferences`): for every
addition the correct answer is chosen and the one that gets the units carry wrong is rejected: forgotten where the
units digits carry (a + b - 10, the sloppy teacher's slip), added where they do not (a + b + 10). Pairs on both sides
of the rule: with the forgotten carries alone, DPO learns to add 10 to every answer. For a reward model that pairs
are not enough: it learns the tens digit and nothing else, and GRPO rewarded by it moves the policy to answers with
the units digit wrong, which it scores as high as the right one (bench/RESULTS.md). `rejected="mistakes"` draws
each rejected answer from the kinds of mistakes a policy makes (`MISTAKES`): the carry, the units digit, off by
one, the hundreds carry, the wrong operation.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Collection
from pathlib import Path

from rft.data.io import write_parquet

DATA_SOURCE = "arithmetic"
_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _check_args(max_digits: int, ops: str) -> None:
    if max_digits < 1:
        raise ValueError(f"max_digits must be >= 1, got {max_digits}")
    bad = sorted(set(ops) - set(_OPERATORS))
    if not ops or bad:
        raise ValueError(f"ops must be a non-empty string of characters among '+-*', got {ops!r}")


def arithmetic_rows(
    n: int,
    seed: int,
    split: str,
    max_digits: int = 2,
    ops: str = "+",
    *,
    exclude: Collection[str] = (),
    carry_slip: float = 0.0,
) -> list[dict]:
    """`n` rows with distinct questions ``f"{a}{op}{b}="``, none of them in `exclude`.

    a and b are uniform in [0, 10**max_digits - 1] and op uniform over the characters of `ops` (a repeated
    character weighs more); a draw whose question was already taken is redrawn. The same arguments always give
    the same rows, and `carry_slip` changes only the demonstrations: with probability `carry_slip`, an addition
    whose units digits carry (a % 10 + b % 10 >= 10) is demonstrated as a + b - 10, the carry forgotten.
    Raises ValueError when fewer than `n` new questions exist.
    """
    _check_args(max_digits, ops)
    if not 0.0 <= carry_slip <= 1.0:
        raise ValueError(f"carry_slip must be in [0, 1], got {carry_slip}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    largest = 10**max_digits - 1
    taken = set(exclude)
    available = len(set(ops)) * (largest + 1) ** 2 - len(taken)
    if n > available:
        raise ValueError(
            f"asked for {n} distinct arithmetic questions but only {available} exist with "
            f"max_digits={max_digits}, "
            f"ops={ops!r} (after excluding {len(taken)}); raise max_digits or add ops"
        )
    rng = random.Random(seed)
    slips = random.Random(f"carry_slip:{seed}")  # its own stream: the questions never depend on carry_slip
    rows = []
    while len(rows) < n:
        a, b, op = rng.randint(0, largest), rng.randint(0, largest), rng.choice(ops)
        question = f"{a}{op}{b}="
        if question in taken:
            continue
        taken.add(question)
        answer = str(_OPERATORS[op](a, b))
        demonstration = answer
        if op == "+" and a % 10 + b % 10 >= 10 and slips.random() < carry_slip:
            demonstration = str(a + b - 10)
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": question}],
                "ability": "arithmetic",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": split, "index": len(rows), "question": question, "answer": answer,
                               "demonstration": demonstration},
            }
        )
    return rows


def _wrong_carry(question: str) -> str | None:
    """The answer of an addition "a+b=" with the units carry wrong: forgotten (a + b - 10) where the units digits
    carry, added (a + b + 10) where they do not; None for another operation."""
    if "+" not in question:
        return None
    a, b = (int(x) for x in question[:-1].split("+"))
    return str(a + b - 10) if a % 10 + b % 10 >= 10 else str(a + b + 10)


def _units_slip(a: int, b: int, rng: random.Random) -> int:
    """a + b with its units digit replaced by another digit."""
    total = a + b
    return total - total % 10 + rng.choice([d for d in range(10) if d != total % 10])


MISTAKES: dict[str, Callable[[int, int, random.Random], int]] = {
    "carry": lambda a, b, rng: int(_wrong_carry(f"{a}+{b}=")),
    "units": _units_slip,
    "off_by_one": lambda a, b, rng: a + b + rng.choice((-1, 1)) if a + b else 1,
    "hundreds": lambda a, b, rng: a + b - 100 if a + b >= 100 else a + b + 100,
    "operation": lambda a, b, rng: abs(a - b) if a or b else 1,  # a - b in place of a + b (0+0: 1)
}
"""The kinds of wrong answers `preference_rows(rejected="mistakes")` draws from, one uniformly per addition (the
draw seeded by the question, so a pair never depends on the rows around it). `operation` equals the sum where one
operand is 0; that pair takes the carry instead."""


def _rejected(question: str, kind: str) -> tuple[str, str]:
    """(the wrong answer, its kind) of an addition "a+b=" for `rejected` = "carry" or "mistakes"."""
    a, b = (int(x) for x in question[:-1].split("+"))
    if kind == "mistakes":
        rng = random.Random(f"rejected:{question}")
        kind = rng.choice(sorted(MISTAKES))
        answer = MISTAKES[kind](a, b, rng)
        if answer != a + b:
            return str(answer), kind
        kind = "carry"
    return _wrong_carry(question), kind


def preference_rows(rows: list[dict], rejected: str = "carry") -> list[dict]:
    """DPO pairs of the additions among `rows`: the prompt (the row's chat messages), `chosen` = the correct answer,
    `rejected` = with `rejected="carry"` the answer with the units carry wrong (`_wrong_carry`), with
    `rejected="mistakes"` one of `MISTAKES`; with the row's data_source, ground truth and extra_info (`carries`:
    whether the units digits carry; `mistake`: the rejected answer's kind); TRL's standard preference format with a
    conversational prompt."""
    if rejected not in ("carry", "mistakes"):
        raise ValueError(f"rejected must be 'carry' or 'mistakes', got {rejected!r}")
    pairs = []
    for row in rows:
        question = row["extra_info"]["question"]
        if "+" not in question:
            continue
        wrong, kind = _rejected(question, rejected)
        a, b = (int(x) for x in question[:-1].split("+"))
        pairs.append({"data_source": row["data_source"], "prompt": row["prompt"],
                      "chosen": row["extra_info"]["answer"], "rejected": wrong,
                      "reward_model": row["reward_model"],
                      "extra_info": {**row["extra_info"], "index": len(pairs), "carries": a % 10 + b % 10 >= 10,
                                     "mistake": kind}})
    return pairs


def write_arithmetic(
    out_dir: str | Path,
    n_train: int = 2000,
    n_val: int = 200,
    seed: int = 0,
    max_digits: int = 2,
    ops: str = "+",
    carry_slip: float = 0.0,
    preferences: bool = False,
    rejected: str | None = None,
) -> dict[str, Path]:
    """Write ``train.parquet`` and ``val.parquet`` under `out_dir`; no val question appears in train.

    Val is drawn from ``seed + 1`` with the train questions excluded; `carry_slip` (see `arithmetic_rows`) applies
    to the train demonstrations only. `preferences`: also ``preference_train.parquet`` and
    ``preference_val.parquet``, the DPO pairs (`preference_rows`) of the train and val additions, their rejected
    answers of the kind `rejected` names ("carry", the default, or "mistakes"; refused without `preferences`, which
    it would not reach). Returns {"train": path, "val": path} (and "preference_train", "preference_val").
    """
    if rejected is not None and not preferences:
        raise ValueError(f"rejected={rejected!r} chooses the preference pairs' wrong answers: ask for the pairs too "
                         "(--preferences)")
    train = arithmetic_rows(n_train, seed, "train", max_digits, ops, carry_slip=carry_slip)
    train_questions = {row["extra_info"]["question"] for row in train}
    val = arithmetic_rows(n_val, seed + 1, "val", max_digits, ops, exclude=train_questions)
    out_dir = Path(out_dir)
    paths = {
        "train": write_parquet(train, out_dir / "train.parquet"),
        "val": write_parquet(val, out_dir / "val.parquet"),
    }
    if preferences:
        for split, rows in (("train", train), ("val", val)):
            pairs = preference_rows(rows, rejected or "carry")
            if not pairs:
                raise ValueError(f"no {split} question is an addition, so there is no preference pair; add '+' to "
                                 "ops")
            paths[f"preference_{split}"] = write_parquet(pairs, out_dir / f"preference_{split}.parquet")
    return paths
