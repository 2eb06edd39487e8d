"""Task data: parquet/jsonl io, the arithmetic generator, GSM8K conversion."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rft.data.io import DataError
from rft.rewards import default_compute_score
from rft.tasks import arithmetic_rows, convert_gsm8k, gsm8k_rows, read_rows, write_arithmetic, write_parquet

GSM8K_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"

NESTED_ROW = {
    "data_source": "openai/gsm8k",
    "prompt": [{"role": "user", "content": "What is 1+1? Let's think"}],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "2"},
    "extra_info": {"split": "train", "index": 0, "question": "What is 1+1?", "answer": "1+1=2\n#### 2"},
}

# --- io ---


def test_parquet_round_trip_of_nested_rows(tmp_path):
    second = {**NESTED_ROW, "extra_info": {**NESTED_ROW["extra_info"], "index": 1}}
    path = write_parquet([NESTED_ROW, second], tmp_path / "deep" / "dir" / "rows.parquet")
    assert path == tmp_path / "deep" / "dir" / "rows.parquet"
    assert read_rows(path) == [NESTED_ROW, second]


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "rows.parquet"
    write_parquet([NESTED_ROW], path)
    write_parquet([NESTED_ROW, NESTED_ROW], path)
    assert len(read_rows(path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.parquet"]


def test_failed_write_keeps_the_old_file_and_no_temp_files(tmp_path):
    path = tmp_path / "rows.parquet"
    write_parquet([NESTED_ROW], path)
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        write_parquet([{"a": 1}, {"a": "not an int"}], path)  # pyarrow cannot type this column
    assert read_rows(path) == [NESTED_ROW]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.parquet"]


def test_read_rows_jsonl_and_errors(tmp_path):
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(json.dumps(NESTED_ROW) + "\n\n" + json.dumps({"a": 1}) + "\n")
    assert read_rows(jsonl) == [NESTED_ROW, {"a": 1}]

    (tmp_path / "broken.jsonl").write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl' line 2: invalid JSON"):
        read_rows(tmp_path / "broken.jsonl")
    with pytest.raises(DataError, match=r"missing\.parquet"):
        read_rows(tmp_path / "missing.parquet")
    (tmp_path / "rows.csv").write_text("a\n1\n")
    with pytest.raises(ValueError, match=r"rows\.csv.*\.parquet, \.jsonl"):
        read_rows(tmp_path / "rows.csv")


# --- arithmetic ---


def test_arithmetic_row_format_and_answers():
    rows = arithmetic_rows(50, seed=3, split="train", max_digits=2, ops="+-*")
    assert len(rows) == 50
    row = rows[0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["data_source"] == "arithmetic" and row["ability"] == "arithmetic"
    assert row["reward_model"]["style"] == "rule"
    for index, row in enumerate(rows):
        question, answer = row["extra_info"]["question"], row["reward_model"]["ground_truth"]
        assert row["prompt"] == [{"role": "user", "content": question}]
        assert row["extra_info"] == {"split": "train", "index": index, "question": question, "answer": answer,
                                     "demonstration": answer}
        assert question.endswith("=") and " " not in question
        a, op, b = re.fullmatch(r"(\d{1,2})([-+*])(\d{1,2})=", question).groups()
        a, b = int(a), int(b)
        assert answer == str({"+": a + b, "-": a - b, "*": a * b}[op])
        assert default_compute_score(row["data_source"], f" {answer}\n", answer) == 1.0
    assert len({row["extra_info"]["question"] for row in rows}) == 50
    assert {row["extra_info"]["question"][-1] for row in rows} == {"="}
    assert {op for row in rows for op in "+-*" if op in row["extra_info"]["question"]} == {"+", "-", "*"}


def test_carry_slip_changes_only_the_demonstrations_of_carrying_additions():
    exact = arithmetic_rows(2000, seed=5, split="train")
    sloppy = arithmetic_rows(2000, seed=5, split="train", carry_slip=0.75)
    assert [r["extra_info"]["question"] for r in exact] == [r["extra_info"]["question"] for r in sloppy]
    assert [r["reward_model"] for r in exact] == [r["reward_model"] for r in sloppy]
    carrying = slipped = 0
    for row in sloppy:
        a, b = map(int, row["extra_info"]["question"][:-1].split("+"))
        demo = int(row["extra_info"]["demonstration"])
        if a % 10 + b % 10 < 10:
            assert demo == a + b  # nothing to forget
            continue
        carrying += 1
        assert demo in (a + b, a + b - 10)  # right, or the carry out of the units forgotten
        slipped += demo == a + b - 10
    assert 800 < carrying < 1000  # 45% of uniform two-digit pairs carry
    assert abs(slipped / carrying - 0.75) < 0.05
    assert sloppy == arithmetic_rows(2000, seed=5, split="train", carry_slip=0.75)
    with pytest.raises(ValueError, match=r"carry_slip must be in \[0, 1\], got 1.5"):
        arithmetic_rows(5, seed=0, split="train", carry_slip=1.5)


def test_arithmetic_is_deterministic_per_seed():
    first = arithmetic_rows(100, seed=7, split="train")
    assert first == arithmetic_rows(100, seed=7, split="train")
    assert first != arithmetic_rows(100, seed=8, split="train")


def test_arithmetic_argument_errors():
    with pytest.raises(ValueError, match=r"ops must be .*'\+-\*', got '\+/'"):
        arithmetic_rows(5, seed=0, split="train", ops="+/")
    with pytest.raises(ValueError, match="ops must be"):
        arithmetic_rows(5, seed=0, split="train", ops="")
    with pytest.raises(ValueError, match="max_digits must be >= 1"):
        arithmetic_rows(5, seed=0, split="train", max_digits=0)
    # one digit and "+" allow 10 * 10 = 100 distinct questions
    assert len(arithmetic_rows(100, seed=0, split="train", max_digits=1)) == 100
    with pytest.raises(ValueError, match="asked for 101 distinct arithmetic questions but only 100 exist"):
        arithmetic_rows(101, seed=0, split="train", max_digits=1)


def test_write_arithmetic_has_no_train_val_overlap(tmp_path):
    # 3 ops x 10 x 10 = 300 questions: val takes exactly the 50 that train left
    paths = write_arithmetic(tmp_path / "arith", n_train=250, n_val=50, seed=1, max_digits=1, ops="+-*")
    assert paths == {"train": tmp_path / "arith" / "train.parquet", "val": tmp_path / "arith" / "val.parquet"}
    train, val = read_rows(paths["train"]), read_rows(paths["val"])
    assert len(train) == 250 and len(val) == 50
    assert {r["extra_info"]["split"] for r in train} == {"train"}
    assert {r["extra_info"]["split"] for r in val} == {"val"}
    train_questions = {r["extra_info"]["question"] for r in train}
    assert not train_questions & {r["extra_info"]["question"] for r in val}
    too_many = "asked for 51 distinct arithmetic questions but only 50 exist.*excluding 250"
    with pytest.raises(ValueError, match=too_many):
        write_arithmetic(tmp_path / "small", n_train=250, n_val=51, max_digits=1, ops="+-*")
    assert not (tmp_path / "small").exists()


def test_write_arithmetic_defaults(tmp_path):
    paths = write_arithmetic(tmp_path)
    assert pq.read_metadata(paths["train"]).num_rows == 2000
    assert pq.read_metadata(paths["val"]).num_rows == 200


# --- gsm8k ---

SMALL_GSM8K = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,200 twice. Total?", "answer": "2*1200=<<2*1200=2400>>2400\n####  2,400 "},
]


def _write_jsonl(path: Path, examples: list[dict]) -> Path:
    path.write_text("".join(json.dumps(example) + "\n" for example in examples))
    return path


def test_gsm8k_rows_small_file(tmp_path):
    rows = gsm8k_rows(_write_jsonl(tmp_path / "train.jsonl", SMALL_GSM8K), "train")
    assert rows[0] == {
        "data_source": "openai/gsm8k",
        "prompt": [
            {
                "role": "user",
                "content": "Tom has 3 apples and buys 4. How many? "
                "Let's think step by step and output the final answer after \"####\".",
            }
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "7"},
        "extra_info": {"split": "train", "index": 0, "question": SMALL_GSM8K[0]["question"],
                       "answer": SMALL_GSM8K[0]["answer"]},
    }
    assert rows[1]["reward_model"]["ground_truth"] == "2400"
    assert rows[1]["extra_info"]["index"] == 1
    # the reference solution scores 1.0 under the strict scorer; "####  2,400" (two spaces) does not match it
    scores = [
        default_compute_score(r["data_source"], r["extra_info"]["answer"], r["reward_model"]["ground_truth"])
        for r in rows
    ]
    assert scores == [1.0, 0.0]


def test_convert_gsm8k_small_and_errors(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _write_jsonl(src / "train.jsonl", SMALL_GSM8K)
    with pytest.raises(FileNotFoundError, match=r"test\.jsonl"):
        convert_gsm8k(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written when a source is missing

    _write_jsonl(src / "test.jsonl", SMALL_GSM8K[:1])
    paths = convert_gsm8k(src, tmp_path / "out")
    assert paths == {"train": tmp_path / "out" / "train.parquet", "test": tmp_path / "out" / "test.parquet"}
    assert read_rows(paths["train"]) == gsm8k_rows(src / "train.jsonl", "train")
    assert [r["extra_info"]["split"] for r in read_rows(paths["test"])] == ["test"]

    _write_jsonl(src / "test.jsonl", [SMALL_GSM8K[0], {"question": "q", "answer": "no final marker 5"}])
    with pytest.raises(ValueError, match=r"test\.jsonl' line 2: the answer has no '####'"):
        convert_gsm8k(src, tmp_path / "out2")
    (src / "test.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match=r"test\.jsonl' line 1: expected an object with string 'question'"):
        gsm8k_rows(src / "test.jsonl", "test")


def test_convert_real_gsm8k(tmp_path):
    if not (GSM8K_DIR / "train.jsonl").is_file() or not (GSM8K_DIR / "test.jsonl").is_file():
        pytest.skip(f"GSM8K not found under {GSM8K_DIR}")
    paths = convert_gsm8k(GSM8K_DIR, tmp_path)
    train, test = read_rows(paths["train"]), read_rows(paths["test"])
    assert len(train) == 7473 and len(test) == 1319
    assert train[0]["reward_model"]["ground_truth"] == "72"
    assert train[0]["extra_info"]["question"].startswith("Natalia sold clips to 48 of her friends")
    assert train[-1]["extra_info"]["index"] == 7472
    # every reference solution earns full reward from the registered scorer
    scores = [
        default_compute_score(r["data_source"], r["extra_info"]["answer"], r["reward_model"]["ground_truth"])
        for r in train + test
    ]
    assert scores == [1.0] * (7473 + 1319)
