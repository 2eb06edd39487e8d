"""Geometry3K (hiyouga/geometry3k on the Hugging Face hub) -> verl-format parquet with images, as verl's
examples/data_preprocess/geo3k.py writes it: the problem (its `<image>` placeholder kept) and verl's instruction as
the user message, the diagram under `images`, the answer as the rule reward's ground truth, scored by
`rft.rewards.math_answers.geo3k_reward` (data_source "hiyouga/geometry3k", verl's geo3k scorer).

The source is a local copy of the dataset (nothing is downloaded): a folder holding, per split, the hub's
`data/<split>-*.parquet` shards or a `<split>.parquet` / `<split>.jsonl` file, with the columns `problem` (text),
`answer` (text) and `images` (a list of {"bytes", "path"} entries, paths, or bytes). Every image is written into the
output as bytes (a path is read relative to its source file), so the parquet stands alone.
"""

from __future__ import annotations

from pathlib import Path

from rft.data.images import image_bytes
from rft.data.io import DataError, read_rows, write_parquet

DATA_SOURCE = "hiyouga/geometry3k"
INSTRUCTION = (r"You FIRST think about the reasoning process as an internal monologue and then provide the final "
               r"answer. The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST "
               r"BE put in \boxed{}.")
GEOMETRY3K_SPLITS = ("train", "validation", "test")  # train and test required, as verl converts them


def split_files(src_dir: Path, split: str) -> list[Path]:
    """The files of one split in `src_dir`: the hub's shards (data/<split>-*.parquet) or <split>.parquet / .jsonl."""
    shards = sorted((src_dir / "data").glob(f"{split}-*.parquet"))
    return shards or [p for p in (src_dir / f"{split}.parquet", src_dir / f"{split}.jsonl") if p.is_file()]


def geometry3k_rows(files: list[Path], split: str) -> list[dict]:
    """verl's rows of one split's source `files`; index counts rows from 0 across them."""
    rows = []
    for path in files:
        for i, example in enumerate(read_rows(path)):
            where = f"{path} row {i}"
            problem, answer, images = example.get("problem"), example.get("answer"), example.get("images")
            if not isinstance(problem, str) or not isinstance(answer, (str, int, float)):
                raise DataError(f"{where}: expected a text 'problem' and an 'answer' (Geometry3K's columns), got "
                                f"{sorted(example)}")
            if not isinstance(images, list) or not images:
                got = "an empty list" if isinstance(images, list) else type(images).__name__
                raise DataError(f"{where}: 'images' must be a list of the problem's diagrams, got {got}")
            answer = str(answer)
            rows.append({
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{problem} {INSTRUCTION}"}],
                "images": [{"bytes": image_bytes(im, path.parent, where)} for im in images],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": split, "index": len(rows), "answer": answer, "question": problem},
            })
    return rows


def convert_geometry3k(src_dir: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Convert the splits of `src_dir` (module docstring) to ``out_dir/<split>.parquet``: train and test, and
    validation when the source has it. Every split is read and checked before anything is written."""
    src_dir, out_dir = Path(src_dir).expanduser(), Path(out_dir)
    files = {split: split_files(src_dir, split) for split in GEOMETRY3K_SPLITS}
    missing = [s for s in ("train", "test") if not files[s]]
    if missing:
        raise DataError(f"no Geometry3K {' or '.join(missing)} split in {str(src_dir)!r}: expected data/<split>-*"
                        ".parquet (the hub's layout) or <split>.parquet / <split>.jsonl")
    rows = {split: geometry3k_rows(paths, split) for split, paths in files.items() if paths}
    return {split: write_parquet(split_rows, out_dir / f"{split}.parquet") for split, split_rows in rows.items()}
