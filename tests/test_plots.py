"""Training-curve PNG: stage offsets, the plotted values, and the errors on bad run directories."""

from __future__ import annotations

import json

import pytest

from rft.monitor.plots import plot_curves, read_metrics

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


def test_plot_two_stages_offsets_and_values(two_stages, tmp_path):
    out = tmp_path / "plots" / "curves.png"
    path, series = plot_curves(two_stages, out, title="sft then grpo", return_series=True)
    assert path == out
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]  # no temp file left behind

    # SFT ran steps 1..3, so GRPO step s is plotted at x = 3 + s and its val_before_train at x = 3.
    # GRPO step 4's reward was logged as "nan" and is left out.
    assert series["reward"] == [(4, 0.3), (5, 0.4), (6, 0.5)]
    assert series["length"] == [(4, 6.0), (5, 5.5), (6, 5.0), (7, 4.5)]
    assert series["val/arithmetic"] == [(3, 0.25), (3, 0.3), (5, 0.35), (7, 0.5)]
    assert series["val/openai/gsm8k"] == [(3, 0.05), (5, 0.1), (7, 0.2)]
    assert series["sft_loss"] == [(1, 2.0), (2, 1.5), (3, 1.2)]
    assert set(series) == {"reward", "sft_loss", "length", "val/arithmetic", "val/openai/gsm8k"}


def test_plot_without_any_data_draws_empty_panels(tmp_path):
    run = _write_run(tmp_path / "sft", [{"step": 1, "timing_s/step": 2.0}, {"step": 2, "timing_s/step": 1.0}])
    path, series = plot_curves([("sft", run)], tmp_path / "empty.png", return_series=True)
    assert series == {}
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
