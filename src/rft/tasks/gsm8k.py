"""GSM8K jsonl -> verl-format parquet, as verl's examples/data_preprocess/gsm8k.py does it."""

from __future__ import annotations

from pathlib import Path

from rft.data.io import DataError, iter_jsonl, write_parquet

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."
GSM8K_SPLITS = ("train", "test")


def gsm8k_ground_truth(answer: str) -> str:
    """The text after the last "####" of a reference solution, stripped, commas removed
    ("#### 1,200" -> "1200")."""
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def gsm8k_rows(jsonl_path: str | Path, split: str) -> list[dict]:
    """One row per non-blank line ``{"question", "answer"}`` of `jsonl_path`; index counts rows from 0."""
    path = Path(jsonl_path)
    if not path.is_file():
        raise FileNotFoundError(f"no such GSM8K file: {str(path)!r}")
    rows = []
    for where, example in iter_jsonl(path):
        if not (
            isinstance(example, dict)
            and isinstance(example.get("question"), str)
            and isinstance(example.get("answer"), str)
        ):
            raise DataError(f"{where}: expected an object with string 'question' and 'answer'")
        question, answer = example["question"], example["answer"]
        if "####" not in answer:
            raise DataError(f"{where}: the answer has no '####' before the final number")
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": gsm8k_ground_truth(answer)},
                "extra_info": {
                    "split": split,
                    "index": len(rows),
                    "question": question,
                    "answer": answer,
                },
            }
        )
    return rows


def convert_gsm8k(src_dir: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Convert ``src_dir/{train,test}.jsonl`` to ``out_dir/{train,test}.parquet``.

    Both sources are read before anything is written. Returns {"train": path, "test": path}.
    """
    src_dir, out_dir = Path(src_dir), Path(out_dir)
    rows = {split: gsm8k_rows(src_dir / f"{split}.jsonl", split) for split in GSM8K_SPLITS}
    return {split: write_parquet(rows[split], out_dir / f"{split}.parquet") for split in GSM8K_SPLITS}
