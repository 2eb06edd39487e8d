"""`rft data alfworld SRC OUT`: ALFWorld's games (the layout alfworld-download writes: json_2.1.1/<split>/<task>/
<trial>/game.tw-pddl) as task rows of their game files, Trinity-RFT's get_alfworld_data.py rows, in three splits."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import rft_here


def _games(root: Path, split: str, *names: str) -> list[Path]:
    out = []
    for name in names:
        game = root / "json_2.1.1" / split / name / "trial_1" / "game.tw-pddl"
        game.parent.mkdir(parents=True)
        game.write_text("{}")
        out.append(game)
    return out


def test_the_games_become_rows_of_their_absolute_paths_in_three_splits(tmp_path):
    src = tmp_path / "alf"
    train = _games(src, "train", "pick_b", "pick_a")
    seen, unseen = _games(src, "valid_seen", "look_a"), _games(src, "valid_unseen", "heat_a", "cool_a")
    proc = rft_here("data", "alfworld", str(src), "out", cwd=tmp_path)
    rows = {s: [json.loads(line) for line in (tmp_path / "out" / f"{s}.jsonl").read_text().splitlines()]
            for s in ("train", "test", "test_unseen")}
    assert rows["train"] == [{"game_file": str(p.resolve()), "target": ""} for p in sorted(train)]  # name order
    assert [r["game_file"] for r in rows["test"]] == [str(seen[0].resolve())]
    assert [r["game_file"] for r in rows["test_unseen"]] == [str(p.resolve()) for p in sorted(unseen)]
    assert "for rft train: data.train_files=out/train.jsonl data.val_files=out/test.jsonl" in proc.stdout
    again = rft_here("data", "alfworld", str(src), "out", cwd=tmp_path)
    assert "byte for byte as these options write them: nothing written" in again.stdout


def test_a_folder_without_alfworlds_games_is_one_error_naming_it(tmp_path):
    src = tmp_path / "alf"
    _games(src, "train", "pick_a")
    proc = rft_here("data", "alfworld", str(src), "out", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and proc.stderr.startswith("rft: error: rft data alfworld: no ALFWorld games")
    assert "valid_seen" in proc.stderr and "alfworld-download" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "train.jsonl").exists()
