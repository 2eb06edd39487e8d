"""Training curves of one or more run directories (e.g. SFT then GRPO) as one PNG on a shared step axis.

Reads what the trainers write: `metrics.jsonl` (one JSON object per step) and, for RL runs,
`val_before_train.json` (the step-0 validation). Three panels: training reward `critic/score/mean` (with an SFT
stage's `train/loss` on the panel's right-hand axis), validation accuracy `val-core/<data_source>/reward/mean@<n>`
(one line per data source), and response length `response_length/mean`.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from pathlib import Path

REWARD_KEY = "critic/score/mean"
SFT_LOSS_KEY = "train/loss"
LENGTH_KEY = "response_length/mean"
# data_source may itself contain '/', e.g. val-core/openai/gsm8k/reward/mean@1
_VAL_KEY = re.compile(r"^val-core/(?P<source>.+)/reward/mean@(?P<n>\d+)$")

Series = dict[str, list[tuple[int, float]]]


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The parsed lines of `run_dir/metrics.jsonl`, in file order; blank lines are skipped.

    Raises FileNotFoundError if the file is missing, ValueError if it holds no records or a line is not a
    JSON object with a `step`.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics.jsonl in this run directory")
    records = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError(f"{path}:{lineno}: expected a JSON object with an integer 'step'")
            records.append(record)
    if not records:
        raise ValueError(f"{path}: empty, no steps logged")
    return records


def _val_before_train(run_dir: Path) -> dict:
    path = run_dir / "val_before_train.json"
    if not path.is_file():
        return {}
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg})") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a JSON object of val-core metrics")
    return values


def _number(value) -> float | None:
    """A finite float, or None: the Tracker writes non-finite values as strings ('nan'), left out of plots."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _val_name(key: str) -> str | None:
    m = _VAL_KEY.match(key)
    if m is None:
        return None
    return f"val/{m['source']}" if m["n"] == "1" else f"val/{m['source']}@{m['n']}"


def _stage_series(records: list[dict], before: dict, offset: int) -> Series:
    """One stage's points with x = offset + step; the val_before_train values sit at x = offset."""
    series: Series = {}

    def add(name: str, x: int, value) -> None:
        y = _number(value)
        if y is not None:
            series.setdefault(name, []).append((x, y))

    for key, value in before.items():
        if (name := _val_name(key)) is not None:
            add(name, offset, value)
    for record in sorted(records, key=lambda r: r["step"]):
        x = offset + record["step"]
        for key, value in record.items():
            if key == REWARD_KEY:
                add("reward", x, value)
            elif key == SFT_LOSS_KEY:
                add("sft_loss", x, value)
            elif key == LENGTH_KEY:
                add("length", x, value)
            elif (name := _val_name(key)) is not None:
                add(name, x, value)
    return series


def _load_stages(runs: list[tuple[str, Path]]) -> tuple[list[tuple[str, int, Series]], int]:
    """(stage name, step offset, series) per stage, each stage starting where the previous one's last step
    was, and the total step count."""
    stages = []
    offset = 0
    for name, run_dir in runs:
        run_dir = Path(run_dir)
        records = read_metrics(run_dir)
        stages.append((name, offset, _stage_series(records, _val_before_train(run_dir), offset)))
        offset += max(r["step"] for r in records)
    return stages, offset


def plot_curves(runs: list[tuple[str, Path]], out_png: str | Path, title: str | None = None, *,
                return_series: bool = False) -> Path | tuple[Path, Series]:
    """Plot reward, validation accuracy and response length of the stages in `runs` to `out_png`.

    `runs` is an ordered list of (stage name, run directory); stage k's steps are offset by the last step of
    stages 0..k-1, so e.g. GRPO step 1 after a 3-step SFT run is plotted at x = 4. A dashed line and the stage
    name mark where each stage starts. The PNG is written atomically and `out_png` returned; with
    `return_series=True` also the plotted points, {"reward" | "sft_loss" | "length" | "val/<source>[@n]":
    [(x, y), ...]},
    where "@n" is left out for mean@1.
    """
    if not runs:
        raise ValueError("plot_curves: runs is empty, give at least one (stage_name, run_dir)")
    out_png = Path(out_png)
    stages, total_steps = _load_stages(runs)

    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window (training hosts have no display)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True, constrained_layout=True)
    try:
        ax_reward, ax_val, ax_len = axes
        for ax, key, color, ylabel in ((ax_reward, "reward", "tab:blue", f"train reward\n({REWARD_KEY})"),
                                       (ax_len, "length", "tab:green", f"response length\n({LENGTH_KEY})")):
            # one segment per stage: a line drawn across a boundary would join unrelated runs
            for _, _, series in stages:
                if key in series:
                    xs, ys = zip(*series[key])
                    ax.plot(xs, ys, color=color, marker="." if len(xs) <= 50 else None)
            ax.set_ylabel(ylabel)
        if any("sft_loss" in s for _, _, s in stages):
            ax_loss = ax_reward.twinx()  # SFT has no reward: its loss shares the panel, on its own axis
            for _, _, series in stages:
                if "sft_loss" in series:
                    xs, ys = zip(*series["sft_loss"])
                    ax_loss.plot(xs, ys, color="tab:orange", marker="." if len(xs) <= 50 else None)
            ax_loss.set_ylabel(f"SFT loss ({SFT_LOSS_KEY})", color="tab:orange")

        val_names = sorted({name for _, _, s in stages for name in s if name.startswith("val/")})
        for name in val_names:
            # a data source is one line across stages: the next stage's val_before_train continues it
            points = [p for _, _, s in stages for p in s.get(name, [])]
            xs, ys = zip(*points)
            ax_val.plot(xs, ys, marker="o", markersize=4, label=name.removeprefix("val/"))
        if val_names:
            ax_val.legend(loc="best", fontsize="small", title="data source", title_fontsize="small")
        ax_val.set_ylabel("validation accuracy\n(val-core reward/mean@n)")

        for ax, has_data in ((ax_reward, any("reward" in s or "sft_loss" in s for _, _, s in stages)),
                             (ax_val, bool(val_names)),
                             (ax_len, any("length" in s for _, _, s in stages))):
            if not has_data:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center",
                        color="gray", fontsize="large")
            ax.grid(alpha=0.3)
            for _, offset, _ in stages:
                ax.axvline(offset, color="gray", linestyle="--", linewidth=1)
        for name, offset, _ in stages:
            ax_reward.text(offset, 1.02, f" {name}", transform=ax_reward.get_xaxis_transform(),
                           ha="left", va="bottom", color="dimgray", fontweight="bold")
        ax_len.set_xlabel("step (stages concatenated)")
        ax_len.xaxis.set_major_locator(MaxNLocator(integer=True))
        pad = max(total_steps, 1) * 0.02  # keeps end markers and the x = 0 stage line off the frame
        ax_len.set_xlim(-pad, max(total_steps, 1) + pad)
        fig.suptitle(title or " \u2192 ".join(name for name, _ in runs))

        out_png.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_png.with_name(f".{out_png.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            fig.savefig(tmp, format="png", dpi=100)
            os.replace(tmp, out_png)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        plt.close(fig)

    if not return_series:
        return out_png
    merged: Series = {}
    for _, _, series in stages:
        for name, points in series.items():
            merged.setdefault(name, []).extend(points)
    return out_png, merged
