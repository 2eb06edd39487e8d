"""Training curves of one or more run directories (e.g. SFT then GRPO) as one PNG, a column of panels per stage.

Reads what the trainers write: `metrics.jsonl` (one JSON object per step) and, for RL runs,
`val_before_train.json` (the step-0 validation). Each stage has its own x-axis, its own steps (the demo's 1,600 SFT
steps beside 300 GRPO ones would leave GRPO a sixth of a shared axis), and up to three panels, each with its own
y label: an SFT stage's `train/loss`; reward and accuracy, the training reward `critic/score/mean` with the
validation accuracy `val-core/<data_source>/reward/mean@<n>` (one line per data source), both in the reward's
units; and response length `response_length/mean`.
"""

from __future__ import annotations

import itertools
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


PANELS = (("sft_loss", f"SFT loss\n({SFT_LOSS_KEY})"), ("reward", "reward / accuracy\n(val-core reward/mean@n)"),
          ("length", f"response length\n({LENGTH_KEY})"))
"""The panels a stage can have, top to bottom: (what it plots, its y label); "reward" also holds the val lines."""
VAL_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan")
"""One per data source's validation line, none the training reward's blue."""


def stage_series(run_dir: str | Path) -> Series:
    """One stage's points at its own steps, {"reward" | "sft_loss" | "length" | "val/<source>[@n]": [(step, y)]}
    ("@n" left out for mean@1); the val_before_train values sit at step 0, non-finite values are left out.
    Raises as `read_metrics`."""
    run_dir = Path(run_dir)
    series: Series = {}

    def add(name: str, x: int, value) -> None:
        y = _number(value)
        if y is not None:
            series.setdefault(name, []).append((x, y))

    for key, value in _val_before_train(run_dir).items():
        if (name := _val_name(key)) is not None:
            add(name, 0, value)
    for record in sorted(read_metrics(run_dir), key=lambda r: r["step"]):
        for key, value in record.items():
            name = {REWARD_KEY: "reward", SFT_LOSS_KEY: "sft_loss", LENGTH_KEY: "length"}.get(key) or _val_name(key)
            if name is not None:
                add(name, record["step"], value)
    return series


def _panels(series: Series) -> list[str]:
    """The panels a stage's series fill, in PANELS order (one "reward" panel for a validation alone)."""
    has = {"reward" if name.startswith("val/") else name for name in series}
    return [panel for panel, _ in PANELS if panel in has]


def curves_figure(runs: list[tuple[str, Path]], title: str | None = None):
    """The matplotlib Figure of the stages in `runs`, an ordered list of (stage name, run directory): a column per
    stage, titled with its name, of its panels (`PANELS`) over its own steps, each column as wide as the others.
    The caller closes it (`matplotlib.pyplot.close`)."""
    if not runs:
        raise ValueError("plot_curves: runs is empty, give at least one (stage_name, run_dir)")
    stages = [(name, stage_series(run_dir), max(r["step"] for r in read_metrics(run_dir))) for name, run_dir in runs]

    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window (training hosts have no display)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = max(max(len(_panels(series)) for _, series, _ in stages), 1)
    fig = plt.figure(figsize=(max(5.0 * len(stages), 7.0), 3.2 * rows + 0.8), layout="constrained")
    grid = fig.add_gridspec(rows, len(stages))
    labels = dict(PANELS)
    for column, (name, series, last) in enumerate(stages):
        panels = _panels(series) or [None]
        axes = []
        for i, panel in enumerate(panels):  # k panels share the column's rows evenly
            ax = fig.add_subplot(grid[i * rows // len(panels):(i + 1) * rows // len(panels), column],
                                 sharex=axes[0] if axes else None)
            axes.append(ax)
            if panel is None:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="gray",
                        fontsize="large")
            else:
                _draw(ax, panel, series)
                ax.set_ylabel(labels[panel])
            ax.grid(alpha=0.3)
            if i < len(panels) - 1:
                ax.tick_params(labelbottom=False)  # the column's step numbers under its lowest panel only
        axes[0].set_title(name, fontweight="bold")
        axes[-1].set_xlabel(f"{name} step")
        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
        pad = max(last, 1) * 0.02  # keeps end markers and the step-0 validation off the frame
        axes[-1].set_xlim(-pad, max(last, 1) + pad)
    fig.suptitle(title or " \u2192 ".join(name for name, _ in runs))
    return fig


def _draw(ax, panel: str, series: Series) -> None:
    """One panel's lines: the series `panel` names, and in the reward panel each data source's validation."""
    marker = lambda points: "." if len(points) <= 50 else None
    color = {"sft_loss": "tab:orange", "reward": "tab:blue", "length": "tab:green"}[panel]
    if panel in series:
        xs, ys = zip(*series[panel])
        ax.plot(xs, ys, color=color, marker=marker(xs), label=f"train reward ({REWARD_KEY})" if panel == "reward"
                else None)
    if panel == "reward":
        validations = sorted(n for n in series if n.startswith("val/"))
        for name, val_color in zip(validations, itertools.cycle(VAL_COLORS)):
            xs, ys = zip(*series[name])
            ax.plot(xs, ys, color=val_color, marker="o", markersize=4,
                    label=f"validation {name.removeprefix('val/')}")
        ax.legend(loc="best", fontsize="small")


def plot_curves(runs: list[tuple[str, Path]], out_png: str | Path, title: str | None = None) -> Path:
    """Draw `runs` (`curves_figure`) to `out_png`, written atomically; returns `out_png`."""
    out_png = Path(out_png)
    fig = curves_figure(runs, title)
    import matplotlib.pyplot as plt

    try:
        out_png.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_png.with_name(f".{out_png.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            fig.savefig(tmp, format="png", dpi=100)
            os.replace(tmp, out_png)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        plt.close(fig)
    return out_png
