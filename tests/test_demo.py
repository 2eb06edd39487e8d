"""`rft demo` end to end with its step counts cut down: every output it promises, and a rerun that skips."""

from __future__ import annotations

import json
import os

from omegaconf import OmegaConf

import rft.trainer.demo as demo
from rft.data.io import read_rows

os.environ["HF_HUB_OFFLINE"] = "1"


def test_demo_writes_every_output_and_reruns_from_its_stages(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(demo, "SFT_STEPS", 30)
    monkeypatch.setattr(demo, "RL_STEPS", 4)
    result = demo.run_demo(tmp_path, seed=1)
    saved = json.loads((tmp_path / "demo.json").read_text())
    assert saved["sft_accuracy"] == result["sft_accuracy"] and saved["rl_accuracy"] == result["rl_accuracy"]
    assert 0.0 <= saved["sft_accuracy"] <= 1.0 and saved["seconds"] > 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "grpo" / "model" / "config.json").is_file()
    assert "stages:" in (tmp_path / "config.yaml").read_text()
    # SFT imitates the sloppy teacher's demonstrations; GRPO's reward is the exact answer
    cfg = OmegaConf.load(tmp_path / "config.yaml")
    assert list(cfg.stages[0].data.response_dict_keys) == ["demonstration"]
    train = read_rows(tmp_path / "data" / "train.parquet")
    slipped = [r for r in train if r["extra_info"]["demonstration"] != r["extra_info"]["answer"]]
    carrying = [r for r in train if sum(int(x) % 10 for x in r["extra_info"]["question"][:-1].split("+")) >= 10]
    assert abs(len(slipped) / len(carrying) - demo.CARRY_SLIP) < 0.05
    assert all(int(r["extra_info"]["answer"]) - int(r["extra_info"]["demonstration"]) == 10 for r in slipped)
    out = capsys.readouterr().out
    assert "held-out greedy accuracy after sft" in out and "after grpo" in out
    # a second run finds both stages finished and reports the same accuracies (deterministic models)
    again = demo.run_demo(tmp_path, seed=1)
    assert "already finished" in capsys.readouterr().out
    assert (again["sft_accuracy"], again["rl_accuracy"]) == (result["sft_accuracy"], result["rl_accuracy"])


def test_tools_demo_trains_through_the_tool_workflow(tmp_path, monkeypatch, capsys):
    """`rft demo --task tools` cut down: the teacher's tool share, a staged config whose RL stage runs the tool
    workflow, workflow metrics per step, and every output the arithmetic demo promises."""
    monkeypatch.setattr(demo, "TOOLS_SFT_STEPS", 20)
    monkeypatch.setattr(demo, "TOOLS_RL_STEPS", 2)
    monkeypatch.setattr(demo, "N_VAL", 40)
    result = demo.run_demo(tmp_path, seed=0, task="tools")
    saved = json.loads((tmp_path / "demo.json").read_text())
    assert saved["task"] == "tools" and saved["rl_accuracy"] == result["rl_accuracy"]
    assert 0.0 <= saved["sft_accuracy"] <= 1.0 and 0.0 <= saved["rl_accuracy"] <= 1.0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "grpo" / "model" / "config.json").is_file()
    cfg = OmegaConf.load(tmp_path / "config.yaml")
    assert cfg.workflow.type == "tool_call_workflow" and cfg.stages[0].data.multiturn.enable
    # the teacher calls the calculator in TOOL_SHARE of its demonstrations, always with the right call and answer
    demos = [d["messages"] for d in read_rows(tmp_path / "data" / "sft.parquet")]
    with_tool = [m for m in demos if any(x["role"] == "tool" for x in m)]
    assert abs(len(with_tool) / len(demos) - demo.TOOL_SHARE) < 0.05
    for m in with_tool:
        a, b = map(int, m[0]["content"][:-1].split("*"))
        assert m[1]["content"] == f'[calc(e="{a}*{b}")]' and m[2]["content"] == str(a * b)
    for m in demos:  # without the tool the teacher answers from memory, correctly
        a, b = map(int, m[0]["content"][:-1].split("*"))
        assert m[-1]["content"] == f"#### {a * b}"  # GSM8K's answer line, the first character the same every time
    steps = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    trained = [s for s in steps if "workflow/tasks" in s]
    assert len(trained) == 2 and all(s["workflow/tasks"] == 16 and s["workflow/model_calls"] >= 1 for s in trained)
    out = capsys.readouterr().out
    assert "held-out greedy accuracy after sft" in out and "after grpo" in out
