"""rft's synthetic visual task: how many shapes does a picture hold? Drawn offline with Pillow, so a vision-language
model can learn from pixels in minutes on a CPU (`rft data shapes`, `rft demo --task vision`).

Each picture is a 56 x 56 white canvas with 1 to `max_count` filled shapes (squares and discs of random colours,
sizes and places, never overlapping); the prompt is the picture and "How many shapes? Answer with a digit.", the
reward the exact count (`data_source` "shapes", scored as the arithmetic task: the response is the answer alone).
Rows are verl's multimodal format: `images` a list of `{"bytes": <PNG>}`, `<image>` in the prompt where it goes.
Each row also carries an SFT demonstration (`extra_info.demonstration`): the count, or, with `slip`, a sloppy
teacher's count that now and then misses one shape in pictures of three or more (GRPO, rewarded by the exact count,
can then do better than its teacher: `rft demo --task vision`).
"""

from __future__ import annotations

import io
import random
from pathlib import Path

from rft.data.io import write_parquet

DATA_SOURCE = "shapes"
SIZE = 56
QUESTION = "<image>How many shapes? Answer with a digit."


def draw(count: int, rng: random.Random):
    """A picture with `count` shapes that do not overlap (a PIL image)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    boxes: list[tuple[int, int, int, int]] = []
    while len(boxes) < count:
        side = rng.randint(8, 14)
        x, y = rng.randint(1, SIZE - side - 1), rng.randint(1, SIZE - side - 1)
        box = (x, y, x + side, y + side)
        if any(box[0] < b[2] + 2 and b[0] < box[2] + 2 and box[1] < b[3] + 2 and b[1] < box[3] + 2 for b in boxes):
            continue
        boxes.append(box)
        colour = tuple(rng.randint(0, 180) for _ in range(3))
        (pen.rectangle if rng.random() < 0.5 else pen.ellipse)(box, fill=colour)
    return image


def shapes_rows(n: int, seed: int, split: str, max_count: int = 4, slip: float = 0.0) -> list[dict]:
    """`n` rows of pictures with 1..`max_count` shapes (uniform), drawn from `seed`; `slip` changes only the
    demonstrations (its own random stream): a picture of 3 or more shapes is demonstrated one short with that
    probability."""
    if not 1 <= max_count <= 9:
        raise ValueError(f"max_count must be in 1..9 (one digit), got {max_count}")
    if not 0.0 <= slip <= 1.0:
        raise ValueError(f"slip must be in [0, 1], got {slip}")
    rng = random.Random(f"shapes:{seed}")
    slips = random.Random(f"shapes_slip:{seed}")
    rows = []
    for index in range(n):
        count = rng.randint(1, max_count)
        out = io.BytesIO()
        draw(count, rng).save(out, format="PNG")
        answer = str(count)
        demonstration = str(count - 1) if count >= 3 and slips.random() < slip else answer
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": QUESTION}],
            "images": [{"bytes": out.getvalue()}],
            "ability": "counting",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "answer": answer,
                           "demonstration": demonstration},
        })
    return rows


def write_shapes(out_dir: str | Path, n_train: int = 2000, n_val: int = 200, seed: int = 0,
                 max_count: int = 4, slip: float = 0.0) -> dict[str, Path]:
    """Write `train.parquet` (`slip`: its demonstrations') and `val.parquet` (drawn from seed + 1) under `out_dir`."""
    out_dir = Path(out_dir)
    return {"train": write_parquet(shapes_rows(n_train, seed, "train", max_count, slip), out_dir / "train.parquet"),
            "val": write_parquet(shapes_rows(n_val, seed + 1, "val", max_count), out_dir / "val.parquet")}
