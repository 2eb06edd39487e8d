"""Training-curve PNG: a column per stage over its own steps, the plotted values, errors on bad run folders."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest

from rft.monitor.plots import curves_figure, plot_curves, read_metrics, stage_series

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ARITH = "val-core/arithmetic/reward/mean@1"
GSM8K = "val-core/openai/gsm8k/reward/mean@1"


def _write_run(run_dir, records, before=None):
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if before is not None:
        (run_dir / "val_before_train.json").write_text(json.dumps(before))
    return run_dir


@pytest.fixture
def two_stages(tmp_path):
    sft = _write_run(tmp_path / "sft", [
        {"step": 1, "train/loss": 2.0},
        {"step": 2, "train/loss": 1.5, "val/loss": 1.6},
        {"step": 3, "train/loss": 1.2, ARITH: 0.25},
    ])
    grpo = _write_run(tmp_path / "grpo", [
        {"step": 1, "critic/score/mean": 0.3, "response_length/mean": 6.0, "actor/pg_loss": 0.1},
        {"step": 2, "critic/score/mean": 0.4, "response_length/mean": 5.5, ARITH: 0.35, GSM8K: 0.1},
        {"step": 3, "critic/score/mean": 0.5, "response_length/mean": 5.0},
        {"step": 4, "critic/score/mean": "nan", "response_length/mean": 4.5, ARITH: 0.5, GSM8K: 0.2},
    ], before={ARITH: 0.3, GSM8K: 0.05})
    return [("sft", sft), ("grpo", grpo)]


def test_each_stage_is_a_column_of_its_own_steps_and_panels(two_stages, tmp_path):
    """The demo's curves.png had one shared step axis (its 1,600 SFT steps left GRPO's 300 a sixth of it) and the
    SFT loss on the reward's panel, reading as a reward of 0.5: now a column per stage, its own x-axis, a panel per
    quantity with its own y label."""
    sft, grpo = (run for _, run in two_stages)
    # GRPO step 4's reward was logged as "nan" and is left out; the val_before_train values sit at step 0
    assert stage_series(grpo) == {"reward": [(1, 0.3), (2, 0.4), (3, 0.5)],
                                  "length": [(1, 6.0), (2, 5.5), (3, 5.0), (4, 4.5)],
                                  "val/arithmetic": [(0, 0.3), (2, 0.35), (4, 0.5)],
                                  "val/openai/gsm8k": [(0, 0.05), (2, 0.1), (4, 0.2)]}
    assert stage_series(sft) == {"sft_loss": [(1, 2.0), (2, 1.5), (3, 1.2)], "val/arithmetic": [(3, 0.25)]}

    fig = curves_figure(two_stages, title="sft then grpo")
    try:
        panels = [(ax.get_title(), ax.get_ylabel(), ax.get_xlabel(), tuple(round(x, 2) for x in ax.get_xlim()))
                  for ax in fig.axes]
        length_lines = [line.get_label() for line in fig.axes[3].get_lines()]
        title = fig.get_suptitle()
    finally:
        plt.close(fig)
    assert panels == [
        ("sft", "SFT loss\n(train/loss)", "", (-0.06, 3.06)),
        ("", "reward / accuracy\n(val-core reward/mean@n)", "sft step", (-0.06, 3.06)),
        ("grpo", "reward / accuracy\n(val-core reward/mean@n)", "", (-0.08, 4.08)),
        ("", "response length\n(response_length/mean)", "grpo step", (-0.08, 4.08)),
    ]
    assert title == "sft then grpo"
    assert [line.get_label() for line in fig.axes[2].get_lines()] == [
        "train reward (critic/score/mean)", "validation arithmetic", "validation openai/gsm8k"]
    assert length_lines == ["_child0"]  # the length panel: one line, no legend

    out = tmp_path / "plots" / "curves.png"
    assert plot_curves(two_stages, out) == out
    assert out.read_bytes().startswith(PNG_SIGNATURE) and len(out.read_bytes()) > 10_000
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]  # no temp file left behind


def test_a_long_stage_leaves_a_short_one_its_own_width(tmp_path):
    """The demo's proportions: 1,600 SFT steps beside 300 GRPO steps, each column over its own steps."""
    sft = _write_run(tmp_path / "sft", [{"step": s, "train/loss": 1.0 / s} for s in range(1, 1601)])
    grpo = _write_run(tmp_path / "grpo", [{"step": s, "critic/score/mean": s / 300} for s in range(1, 301)])
    fig = curves_figure([("sft", sft), ("grpo", grpo)])
    try:
        spans = [(ax.get_title(), ax.get_xlim(), ax.get_position().width) for ax in fig.axes]
    finally:
        plt.close(fig)
    assert [(t, tuple(round(x) for x in lim)) for t, lim, _ in spans] == [("sft", (-32, 1632)), ("grpo", (-6, 306))]
    assert abs(spans[0][2] - spans[1][2]) < 0.05  # as wide as each other


def test_plot_without_any_data_draws_empty_panels(tmp_path):
    run = _write_run(tmp_path / "sft", [{"step": 1, "timing_s/step": 2.0}, {"step": 2, "timing_s/step": 1.0}])
    assert stage_series(run) == {}
    path = plot_curves([("sft", run)], tmp_path / "empty.png")
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_missing_metrics_names_the_file(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plot_curves([("grpo", tmp_path / "run")], tmp_path / "out.png")
    assert not (tmp_path / "out.png").exists()


def test_empty_metrics_names_the_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl: empty"):
        read_metrics(run)


def test_bad_json_line_names_file_and_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "critic/score/mean": 0.1}\n{"step": 2, "critic/sco\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not valid JSON"):
        plot_curves([("grpo", run)], tmp_path / "out.png")
