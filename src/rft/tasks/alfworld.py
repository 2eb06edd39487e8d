"""ALFWorld's games as task rows (`rft data alfworld SRC OUT`): the games `alfworld-download` fetches into its data
folder (SRC, $ALFWORLD_DATA), one row per game file, {"game_file": its absolute path, "target": ""}, as Trinity-RFT's
get_alfworld_data.py writes them for its alfworld workflows (`prompt_key: game_file`). Splits: train
(json_2.1.1/train), test (valid_seen, the in-distribution evaluation) and test_unseen (valid_unseen), each in name
order (Trinity samples the same files in a seeded order; rft's sampler draws its own)."""

from __future__ import annotations

import json
from pathlib import Path

from rft.errors import RftError
from rft.fsutil import write_text_atomic

ALFWORLD_SPLITS = {"train": "train", "test": "valid_seen", "test_unseen": "valid_unseen"}
"""rft's split name (the jsonl written) -> ALFWorld's folder under json_2.1.1."""


def convert_alfworld(src_dir: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """OUT/{train,test,test_unseen}.jsonl from the games under SRC/json_2.1.1 (every split's games found before
    anything is written). Returns {split: path}."""
    root = Path(src_dir).expanduser().resolve() / "json_2.1.1"
    games = {split: sorted(str(p) for p in (root / folder).glob("*/*/game.tw-pddl"))
             for split, folder in ALFWORLD_SPLITS.items()}
    empty = [f"{root / ALFWORLD_SPLITS[split]}" for split, files in games.items() if not files]
    if empty:
        raise RftError(f"rft data alfworld: no ALFWorld games (*/*/game.tw-pddl) under {', '.join(empty)}: SRC is "
                       "ALFWorld's data folder, the one `alfworld-download` fills ($ALFWORLD_DATA, holding json_2.1.1)")
    out_dir = Path(out_dir)
    out = {}
    for split, files in games.items():
        out[split] = out_dir / f"{split}.jsonl"
        write_text_atomic(out[split], "".join(json.dumps({"game_file": f, "target": ""}) + "\n" for f in files))
    return out
