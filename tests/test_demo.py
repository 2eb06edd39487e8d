"""`rft demo` end to end with its step counts cut down: every output it promises, and a rerun that skips."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import torch
from omegaconf import OmegaConf

import rft.orchestration.demo as demo
import rft.orchestration.stages as stages
from rft.data.io import read_rows
from rft.distributed import SINGLE
from rft.errors import RftError

os.environ["HF_HUB_OFFLINE"] = "1"


def test_demo_writes_every_output_and_reruns_from_its_stages(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(demo, "COPY_STEPS", 5)
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
    assert [stage.stage_name for stage in cfg.stages] == ["copy", "sft", "grpo"]  # the warm-up: repeat a number
    copies = read_rows(tmp_path / "data" / "copy.parquet")
    assert len(copies) == demo.COPY_ROWS and all(m[0]["content"] == m[1]["content"] for m in
                                                 (r["messages"] for r in copies))
    assert list(cfg.stages[1].data.response_dict_keys) == ["demonstration"]
    train = read_rows(tmp_path / "data" / "train.parquet")
    slipped = [r for r in train if r["extra_info"]["demonstration"] != r["extra_info"]["answer"]]
    carrying = [r for r in train if sum(int(x) % 10 for x in r["extra_info"]["question"][:-1].split("+")) >= 10]
    assert abs(len(slipped) / len(carrying) - demo.CARRY_SLIP) < 0.05
    assert all(int(r["extra_info"]["answer"]) - int(r["extra_info"]["demonstration"]) == 10 for r in slipped)
    out = capsys.readouterr().out
    assert "held-out greedy accuracy after sft" in out and "after grpo" in out
    assert out.rstrip().splitlines()[-1] == demo.lift_verdict("arithmetic", 1, result["sft_accuracy"],
                                                              result["rl_accuracy"])
    # the accuracies are the grpo stage's validations before its first step and after its last: the demo's
    # held-out evaluation of the stages' models agrees (to a prompt or two: batching may round differently)
    val = tmp_path / "data" / "val.parquet"
    for stage, reported in (("sft", result["sft_accuracy"]), ("grpo", result["rl_accuracy"])):
        assert abs(demo.held_out_accuracy(tmp_path / stage / "model", val, max_tokens=5) - reported) <= 0.02
    # a second run finds the demo finished and says so, with the same accuracies
    again = demo.run_demo(tmp_path, seed=1)
    assert "already finished" in capsys.readouterr().out
    assert (again["sft_accuracy"], again["rl_accuracy"]) == (result["sft_accuracy"], result["rl_accuracy"])




def test_the_demo_compares_its_lift_with_its_bar_and_says_what_to_try_below_it():
    assert demo.lift_verdict("arithmetic", 0, 0.575, 0.920) == (
        "rft demo: GRPO lifted held-out accuracy by +0.345, at or above the demo's bar of +0.15")
    assert "at or above" in demo.lift_verdict("arithmetic", 0, 0.335, 0.485)  # 0.15 less a float rounding
    low_sft = demo.lift_verdict("arithmetic", 0, 0.200, 0.265)
    assert low_sft.startswith("rft demo: the lift +0.065 is below the demo's bar of +0.15 (the SFT model had not "
                              "learnt to add yet")
    assert low_sft.endswith("try another seed, `rft demo --seed 1 --output runs/demo-seed1`")
    tools = demo.lift_verdict("tools", 3, 0.1, 0.2)
    assert "below the demo's bar of +0.20 (GRPO's gain depends on the seed" in tools
    assert tools.endswith("`rft demo --task tools --seed 4 --output runs/demo-seed4`")


def test_the_distill_demo_names_its_stage_and_compares_the_student_with_its_teacher_and_time_bar():
    """The distill demo's closing lines speak of distillation (not GRPO), and say whether the student ends within
    DISTILL_TEACHER_GAP of its teacher."""
    assert demo.lift_verdict("distill", 0, 0.540, 0.800) == (
        "rft demo: distillation lifted held-out accuracy by +0.260, at or above the demo's bar of +0.15")
    below = demo.lift_verdict("distill", 2, 0.540, 0.635)
    assert "below the demo's bar of +0.15 (distillation's gain depends on the seed" in below
    assert below.endswith("`rft demo --task distill --seed 3 --output runs/demo-seed3`")
    assert demo.teacher_verdict(0.820, 0.905, 431.6) == (
        "rft demo: the student ends 0.085 below its teacher (0.905), within the demo's bar of 0.10; its own stages "
        "took 432 s (the bar: 600 s on 2 quiet cores)")
    assert "0.270 below its teacher (0.905), outside the demo's bar" in demo.teacher_verdict(0.635, 0.905, 587)
    assert "ends 0.010 above its teacher (0.755), within" in demo.teacher_verdict(0.765, 0.755, 349)


def test_the_distill_demo_warms_its_lr_up_and_distils_200_steps_with_the_full_reverse_kl(tmp_path):
    """The measured recipe (bench/RESULTS.md): lr 2e-4 reached over the first 20 of 200 steps, then constant (at
    full lr from the first step, Adam knocked seed 0's student from 0.540 to 0.17-0.475)."""
    data = {name: tmp_path / f"{name}.parquet" for name in ("train", "val", "copy")}
    config = demo.distill_demo_config(tmp_path / "student", tmp_path / "teacher", data, tmp_path / "out", 0)
    stage = config["stages"][2]
    optim, steps = stage["actor_rollout_ref"]["actor"]["optim"], stage["trainer"]["total_training_steps"]
    assert (optim["lr"], optim["warmup_style"], steps) == (2e-4, "constant", 200)
    assert int(optim["lr_warmup_steps_ratio"] * steps) == 20
    assert stage["distillation"]["distillation_loss"]["loss_mode"] == "full"


def test_a_demo_stopped_part_way_resumes_and_counts_the_time_of_every_call(tmp_path, monkeypatch, capsys):
    """`make demo` stopped by Ctrl-C, then run again: the second call resumes (the SFT stage is not run again) and
    demo.json's seconds are both calls' (it counted the last call only); a third call says the demo has finished."""
    monkeypatch.setattr(demo, "COPY_STEPS", 5)
    monkeypatch.setattr(demo, "SFT_STEPS", 10)
    monkeypatch.setattr(demo, "RL_STEPS", 2)
    monkeypatch.setattr(demo, "N_VAL", 20)
    run_stage = stages.run_stage

    def stopped_before_grpo(stage, dist=SINGLE):
        if stage.name == "grpo":
            time.sleep(1.0)
            raise KeyboardInterrupt  # what rft's handler raises for a Ctrl-C
        run_stage(stage, dist)

    monkeypatch.setattr(stages, "run_stage", stopped_before_grpo)
    with pytest.raises(KeyboardInterrupt):
        demo.run_demo(tmp_path, seed=1)
    state = json.loads((tmp_path / demo.STATE).read_text())
    assert state["calls"] == 1 and state["seconds"] >= 1.0 and not (tmp_path / "demo.json").exists()
    staged: list[float] = []  # the stages' own time in the second call, which its clock must count

    def timed(stage, dist=SINGLE):
        begun = time.perf_counter()
        run_stage(stage, dist)
        staged.append(time.perf_counter() - begun)

    monkeypatch.setattr(stages, "run_stage", timed)
    capsys.readouterr()

    start = time.perf_counter()
    result = demo.run_demo(tmp_path, seed=1)
    second = time.perf_counter() - start
    out = capsys.readouterr().out
    assert f"rft demo: resuming {tmp_path} (call 2; {state['seconds']} s before)" in out
    assert "stage 'sft' already finished" in out
    saved = json.loads((tmp_path / "demo.json").read_text())
    assert saved == result and saved["calls"] == 2
    # the call's clock runs inside the call and around its stages (bounds from the events, not a share of the time)
    assert state["seconds"] + sum(staged) - 0.1 <= saved["seconds"] <= state["seconds"] + second + 0.1
    assert not (tmp_path / demo.STATE).exists()  # finished: demo.json holds the whole time

    assert demo.run_demo(tmp_path, seed=1) == saved
    assert capsys.readouterr().out == (
        f"rft demo: {tmp_path} already finished (demo.json): accuracy {saved['sft_accuracy']:.3f} after SFT -> "
        f"{saved['rl_accuracy']:.3f} after GRPO in {saved['seconds']} s; remove {tmp_path} to run it again\n")
    with pytest.raises(RftError, match="holds a finished demo of .*'seed': 1.*, not .*'seed': 2"):
        demo.run_demo(tmp_path, seed=2)
def test_tools_demo_trains_through_the_tool_workflow(tmp_path, monkeypatch, capsys):
    """`rft demo --task tools` cut down: the teacher's tool share, a staged config whose RL stage runs the tool
    workflow, workflow metrics per step, and every output the arithmetic demo promises."""
    monkeypatch.setattr(demo, "COPY_STEPS", 5)
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
    assert [s.stage_name for s in cfg.stages] == ["copy", "sft", "grpo"]
    assert cfg.workflow.type == "tool_call_workflow" and cfg.stages[1].data.multiturn.enable
    # the warm-up ran first, its own steps, on conversations in which the assistant repeats the user's number
    for stage, steps in (("copy", 5), ("sft", 20)):
        assert json.loads((tmp_path / stage / "metrics.jsonl").read_text().splitlines()[-1])["step"] == steps
    copies = [d["messages"] for d in read_rows(tmp_path / "data" / "copy.parquet")]
    assert len(copies) == demo.COPY_ROWS and {len(m[0]["content"]) for m in copies} == set(range(1, 7))
    assert all(m[0]["content"].isdigit() and m[1] == {"role": "assistant", "content": m[0]["content"]} for m in copies)
    # the teacher calls the calculator in TOOL_SHARE of its demonstrations, always with the right call, and then
    # repeats the tool's result; without the tool it answers from memory, correctly, on GSM8K's answer line
    demos = [d["messages"] for d in read_rows(tmp_path / "data" / "sft.parquet")]
    with_tool = [m for m in demos if any(x["role"] == "tool" for x in m)]
    assert abs(len(with_tool) / len(demos) - demo.TOOL_SHARE) < 0.05
    for m in demos:
        a, b = map(int, m[0]["content"][:-1].split("*"))
        if m in with_tool:
            assert [x["content"] for x in m[1:]] == [f'[calc(e="{a}*{b}")]', str(a * b), str(a * b)]
        else:  # the first character the same every time: greedy SFT answers from memory
            assert len(m) == 2 and m[1]["content"] == f"#### {a * b}"
    # the reported accuracies are the grpo stage's validations through the tool workflow
    val = tmp_path / "data" / "val.parquet"
    for stage, reported in (("sft", result["sft_accuracy"]), ("grpo", result["rl_accuracy"])):
        measured = demo.held_out_accuracy(tmp_path / stage / "model", val, 24, "tool_call_workflow",
                                          demo.TOOLS_WORKFLOW_ARGS)
        assert abs(measured - reported) <= 0.025  # a prompt of N_VAL = 40 (batching may round differently)
    steps = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    trained = [s for s in steps if "workflow/tasks" in s]
    assert len(trained) == 2 and all(s["workflow/tasks"] == 16 and s["workflow/model_calls"] >= 1 for s in trained)
    out = capsys.readouterr().out
    assert "held-out greedy accuracy after sft" in out and "after grpo" in out
    assert out.rstrip().splitlines()[-1] == demo.lift_verdict("tools", 0, result["sft_accuracy"],
                                                              result["rl_accuracy"])


def test_vision_demo_trains_a_vision_language_model_on_pictures(tmp_path, monkeypatch, capsys):
    """`rft demo --task vision` cut down: the tiny Qwen2-VL, the sloppy counter's demonstrations, SFT then GRPO with
    the vision tower trained, the accuracies the GRPO stage measured, every output."""
    monkeypatch.setattr(demo, "VISION_SFT_STEPS", 10)
    monkeypatch.setattr(demo, "VISION_RL_STEPS", 2)
    monkeypatch.setattr(demo, "VISION_TEST_FREQ", 2)
    monkeypatch.setattr(demo, "VISION_TRAIN", 200)
    monkeypatch.setattr(demo, "N_VAL", 20)
    result = demo.run_demo(tmp_path, seed=0, task="vision")
    assert json.loads((tmp_path / "demo.json").read_text())["task"] == "vision"
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = json.loads((tmp_path / "base_model" / "config.json").read_text())
    assert config["model_type"] == "qwen2_vl" and config["text_config"]["hidden_size"] == 128
    cfg = OmegaConf.load(tmp_path / "config.yaml")
    assert [s.stage_name for s in cfg.stages] == ["sft", "grpo"] and not cfg.actor_rollout_ref.model.freeze_vision_tower
    # the teacher misses one shape in VISION_SLIP of the pictures of three or more, and never otherwise
    rows = read_rows(tmp_path / "data" / "train.parquet")
    big = [r for r in rows if int(r["extra_info"]["answer"]) >= 3]
    slips = [r for r in big if r["extra_info"]["demonstration"] != r["extra_info"]["answer"]]
    assert abs(len(slips) / len(big) - demo.VISION_SLIP) < 0.12
    assert all(int(r["extra_info"]["demonstration"]) == int(r["extra_info"]["answer"]) - 1 for r in slips)
    # every weight moved in SFT, the vision tower's too (it starts random)
    from safetensors.torch import load_file

    before, after = load_file(tmp_path / "base_model" / "model.safetensors"), load_file(
        tmp_path / "sft" / "model" / "model.safetensors")
    assert any(n.startswith("visual.") for n in before)
    assert all(not torch.equal(before[n], after[n]) for n in before if n.endswith(".weight"))
    measured = demo.held_out_accuracy(tmp_path / "grpo" / "model", tmp_path / "data" / "val.parquet", 2)
    assert abs(measured - result["rl_accuracy"]) <= 0.05
    assert "after grpo" in capsys.readouterr().out


@pytest.mark.demo  # make test-demo
@pytest.mark.timeout(7200)  # three whole demos on a machine's cores at once: 10-15 minutes on 2 quiet cores
def test_the_whole_demo_holds_its_bar_under_another_cpus_rounding_and_repeats_bitwise(tmp_path):
    """Issue 61: the demo's lift was a lottery of the seed and the CPU's float32 rounding (seed 0's SFT stage ended
    at 0.200 under PyTorch's generic kernels, and GRPO could not lift it by 15 points), and two runs with one seed
    parted in GRPO (a kernel chosen by timing). The whole demo, seed 0, three times at once, one thread each: under
    this CPU's kernels, again killed (SIGKILL) once its GRPO stage has checkpointed and run again into its folder, and
    under the generic kernels (ATEN_CPU_CAPABILITY=default, another machine's rounding). Both roundings' SFT stages
    leave the loss plateau (they learn to add) and GRPO lifts held-out accuracy past the bar; the killed-and-resumed
    run's model equals the uninterrupted one's bit for bit."""
    import signal
    import subprocess
    import sys

    from safetensors.torch import load_file

    def start(name, **env):
        return subprocess.Popen([sys.executable, "-m", "rft", "demo", "--seed", "0", "--output", str(tmp_path / name)],
                                env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **env},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    runs = {"native": start("native"), "generic": start("generic", ATEN_CPU_CAPABILITY="default"),
            "killed": start("killed")}
    try:
        checkpoint = tmp_path / "killed" / "grpo" / "checkpoints" / "global_step_100"
        for _ in range(7200):  # bounded: 2 hours at most
            if checkpoint.is_dir() or runs["killed"].poll() is not None:
                break
            time.sleep(1)
        assert runs["killed"].poll() is None, runs["killed"].communicate()[0][-3000:]
        time.sleep(5)  # into step 101 or its checkpoint's writing
        runs["killed"].send_signal(signal.SIGKILL)
        runs["killed"].communicate()
        runs["killed"] = start("killed")
        for name, proc in runs.items():
            out, _ = proc.communicate(timeout=7200)
            assert proc.returncode == 0, (name, out[-3000:])
            result = json.loads((tmp_path / name / "demo.json").read_text())
            assert result["sft_accuracy"] >= 0.4, (name, result)  # left the plateau: it adds the tens digits
            lift = result["rl_accuracy"] - result["sft_accuracy"]
            assert lift >= demo.LIFT_BARS["arithmetic"] - 1e-9, (name, result)
            assert out.rstrip().splitlines()[-1].startswith("rft demo: GRPO lifted held-out accuracy by"), out[-500:]
    finally:
        for proc in runs.values():
            proc.kill()
    first, again = (load_file(tmp_path / name / "grpo" / "model" / "model.safetensors") for name in ("native", "killed"))
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)


@pytest.mark.heavy  # two demos (the teacher's, the student's) and a rerun: a minute or more on 2 cores
def test_the_distill_demo_runs_its_teacher_then_distils_a_smaller_student(tmp_path, monkeypatch, capsys):
    """`rft demo --task distill`: the arithmetic demo in teacher/ (reused when finished), then the tiny-student
    preset warmed up and distilled on-policy from the teacher's GRPO model, with no task reward; demo.json holds
    both accuracies and the student's own time."""
    for name, steps in (("COPY_STEPS", 5), ("SFT_STEPS", 10), ("RL_STEPS", 2), ("DISTILL_SFT_STEPS", 10),
                        ("DISTILL_STEPS", 2), ("DISTILL_TEST_FREQ", 1)):
        monkeypatch.setattr(demo, name, steps)
    result = demo.run_demo(tmp_path, seed=1, task="distill")
    teacher = json.loads((tmp_path / "teacher" / "demo.json").read_text())
    assert result["teacher_accuracy"] == teacher["rl_accuracy"] and teacher["task"] == "arithmetic"
    assert 0 < result["student_seconds"] < result["seconds"] - teacher["seconds"] + 1
    cfg = OmegaConf.load(tmp_path / "config.yaml")
    assert [stage.stage_name for stage in cfg.stages] == ["copy", "sft", "distill"]
    distill = cfg.stages[2].distillation
    assert distill.teacher_model.model_path == str(tmp_path / "teacher" / "grpo" / "model")
    assert distill.distillation_loss.loss_mode == "full" and not distill.distillation_loss.use_task_rewards
    student = json.loads((tmp_path / "base_model" / "config.json").read_text())
    assert student["hidden_size"] == 96 < json.loads(
        (tmp_path / "teacher" / "base_model" / "config.json").read_text())["hidden_size"]
    records = [json.loads(line) for line in (tmp_path / "distill" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("actor/distill_loss", 0) > 0 for r in records)
    out = capsys.readouterr().out
    assert ("below its teacher" in out or "above its teacher" in out) and "after distillation" in out
    # run again into a new folder holding the finished teacher: it is reused, not trained again
    again = tmp_path / "again"
    shutil.copytree(tmp_path / "teacher", again / "teacher")
    reused = demo.run_demo(again, seed=1, task="distill")
    assert f"{again / 'teacher'} already finished" in capsys.readouterr().out
    assert reused["student_seconds"] == pytest.approx(reused["seconds"], abs=1)  # the teacher took none of its time
