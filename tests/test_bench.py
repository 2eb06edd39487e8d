"""The benchmarks' arithmetic (bench/vs_trl.py): the floor counts only the work a step did, and the scaling
workloads' shares of linear growth, on hand-computed cases."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import vs_trl


def _result(zero_adv_rows: float, n_params: int = 1_000_000) -> dict:
    # three steps (summarise takes steps 3..): 10 prompt tokens, 5 response tokens, 128 rows
    row = {"prompt_length/mean": 10.0, "response_length/mean": 5.0, "actor/zero_adv_rows": zero_adv_rows,
           "timing_s/step": 2.0, "timing_s/gen": 0.5, "timing_s/update_actor": 1.4}
    return {"rows": [dict(row), dict(row), dict(row)], "n_params": n_params}


def test_the_floor_counts_generation_once_per_prompt_and_only_the_rows_trained():
    # generation: 2 * N * (16 prompts x 10 tokens + 128 rows x (5 - 1) tokens) = 2e6 * 672 = 1.344e9 FLOPs
    # update: 6 * N * 128 rows x 15 tokens x the share trained
    everything = vs_trl.summarise(_result(0.0), rate=1.0, rows=128, samples=8)
    assert everything["gen_eff"] == pytest.approx(1.344e9 / 1e9 / 0.5)
    assert everything["upd_eff"] == pytest.approx(1.152e10 / 1e9 / 1.4)
    assert everything["eff"] == pytest.approx((1.344 + 11.52) / 2.0)
    half = vs_trl.summarise(_result(64.0), rate=1.0, rows=128, samples=8)
    assert half["kept"] == 0.5 and half["upd_eff"] == pytest.approx(5.76 / 1.4)
    # nothing trained (every advantage 0): the update's FLOPs are not counted, so no efficiency flatters the step
    idle = vs_trl.summarise(_result(128.0), rate=1.0, rows=128, samples=8)
    assert idle["eff"] == pytest.approx(1.344 / 2.0) and math.isnan(idle["upd_eff"])
    # 4 samples a prompt (Q05), 16 rows: generation 2 * N * (4 prompts x 10 tokens + 16 rows x 4 tokens) = 2.08e8
    four = vs_trl.summarise(_result(0.0), rate=1.0, rows=16, samples=4)
    assert four["gen_eff"] == pytest.approx(2.08e8 / 1e9 / 0.5)


def test_scaling_is_each_runs_time_over_linear_growth_from_the_first():
    length = [dict(workload="length", label=f"{t} tok", s=s, prompt=15.0, response=float(t), prompts=16)
              for t, s in ((64, 3.408), (256, 14.397))]
    # 14.397 / 3.408 = 4.2245: over 4x the new tokens 1.06, over 271 / 79 = 3.4304x the row's tokens 1.23
    assert vs_trl.scaling(length) == ("64 tok: 3.408 s/step, 1.00 of linear in new tokens (1.00 in prompt + response "
                                      "tokens); 256 tok: 14.397 s/step, 1.06 of linear in new tokens (1.23 in prompt "
                                      "+ response tokens)")
    growth = [dict(workload="growth", label=f"{p}x8", s=s, prompt=15.0, response=16.0, prompts=p)
              for p, s in ((16, 0.291), (64, 0.951))]
    assert vs_trl.scaling(growth) == "16x8: 0.291 s/step, 1.00 of linear; 64x8: 0.951 s/step, 0.82 of linear"


def test_the_streaming_bench_runs_its_quick_mode():
    """bench/streaming.py --quick: every mode (generate() batches, the stream, the stream with weight updates, kept
    and recomputed caches) runs the long-tailed workload to the end (the script asserts each response's forced
    length) and its table comes out; nothing is written to bench/RESULTS.md."""
    import os
    import subprocess

    bench = Path(__file__).resolve().parents[1] / "bench"
    before = (bench / "RESULTS.md").read_text()
    proc = subprocess.run([sys.executable, str(bench / "streaming.py"), "--quick"], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for mode in ("| sync |", "| stream |", "| stream+upd 4 |", "| stream+upd 4 recompute |"):
        assert mode in proc.stdout
    assert "Per-token staleness" in proc.stdout and "(the same with the cache recomputed)" in proc.stdout
    assert (bench / "RESULTS.md").read_text() == before


def test_the_reward_model_bench_pairs_every_kind_of_mistake_and_mixes_half_carry(tmp_path):
    """bench/rm_grpo.py's pairs: `every` gives each addition one pair per kind of mistake, each rejected answer wrong
    and of its kind's shape; `mix` is half the questions' carry pairs, half their mistake pairs; the held-out file
    never shares a question with the training pairs."""
    import rm_grpo

    from rft.data.io import read_rows
    from rft.tasks.arithmetic import MISTAKES, arithmetic_rows, write_arithmetic

    rows = arithmetic_rows(40, 0, "train")
    pairs = rm_grpo.every_mistake(rows)
    by_question: dict[str, list[dict]] = {}
    for pair in pairs:
        by_question.setdefault(pair["extra_info"]["question"], []).append(pair)
    assert len(by_question) == 40
    for question, group in by_question.items():
        a, b = (int(x) for x in question[:-1].split("+"))
        kinds = {p["extra_info"]["mistake"]: int(p["rejected"]) for p in group}
        assert set(kinds) == set(MISTAKES) - ({"operation"} if a == 0 or b == 0 else set())
        assert all(p["chosen"] == str(a + b) != p["rejected"] for p in group)
        assert kinds["carry"] == (a + b - 10 if a % 10 + b % 10 >= 10 else a + b + 10)
        assert kinds["units"] // 10 == (a + b) // 10 and abs(kinds["off_by_one"] - (a + b)) == 1
    demo = tmp_path / "demo"
    write_arithmetic(demo / "data", n_train=16, n_val=20, seed=0)
    files = rm_grpo.preference_files(demo, tmp_path / "pairs", 30, 0, "mix")
    train, val = read_rows(files["train"]), read_rows(files["val"])
    assert [p["extra_info"]["mistake"] == "carry" for p in train[:15]] == [True] * 15
    assert len(train) == 30 and len(val) == 20
    assert not {p["extra_info"]["question"] for p in train} & {p["extra_info"]["question"] for p in val}
