"""Data-Juicer's LLM operators in the data processor (rft.data_processor.llm): the seed Trinity-RFT configuration's
data_processor block (llm_difficulty_score_filter over the tasks with num_process 32, a Data-Juicer recipe with
llm_quality_score_filter over each step's experiences, reward_shaping_mapper adding its score) run on the arithmetic
taskset with a local model folder rft serves on 127.0.0.1, and a filter deciding by the scores of an
OpenAI-compatible server already running."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from http_helpers import send_json
from rl_helpers import make_assets
from spec_configs import SPEC, md_yaml_blocks

from rft.buffer import database_url
from rft.buffer.sql import EXPERIENCES
from rft.experience import Experience

assert os.environ.get("RFT_DATA_JUICER_PYTHON"), "run with `make test-data-juicer` (RFT_DATA_JUICER_PYTHON)"


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = make_assets(tmp_path_factory.mktemp("assets"))
    from rft.data.io import read_rows

    raw = root / "raw"  # Trinity-RFT's raw tasks: question / answer rows
    raw.mkdir()
    rows = read_rows(root / "data" / "train.parquet")[:8]
    (raw / "train.jsonl").write_text("".join(
        json.dumps({"question": r["extra_info"]["question"], "answer": r["extra_info"]["answer"]}) + "\n"
        for r in rows))
    (raw / "test.jsonl").write_text((raw / "train.jsonl").read_text())  # the seed's eval taskset reads it too
    return root


def seed_data_processor(model: Path, recipe: Path) -> dict:
    """The trinity_config_reference.md data_processor block, its paths local: the model the LLM operators name is
    `model` (a folder), the experience recipe `recipe`."""
    block = next(b for b in md_yaml_blocks(SPEC / "trinity_config_reference.md") if list(b) == ["data_processor"])
    tp = block["data_processor"]["task_pipeline"]
    assert tp["num_process"] == 32 and tp["operators"][0]["name"] == "llm_difficulty_score_filter"
    tp["operators"][0]["args"]["api_or_hf_model"] = str(model)
    ep = block["data_processor"]["experience_pipeline"]
    assert ep["operators"][0]["name"] == "data_juicer"
    ep["operators"][0]["args"]["config_path"] = str(recipe)
    return block


def test_the_seed_data_processor_runs_on_the_arithmetic_taskset(assets, tmp_path):
    recipe = tmp_path / "dj_scoring_exp.yaml"  # Trinity-RFT's example recipe: an LLM's quality score
    recipe.write_text(yaml.safe_dump({"process": [{"llm_quality_score_filter": {
        "api_or_hf_model": str(assets / "model"), "min_score": 0.0, "input_keys": ["prompt", "response"],
        "field_names": ["Question", "Answer"]}}]}))
    config = {"project": "p", "name": "dp", "mode": "both", "checkpoint_root_dir": str(tmp_path / "ckpt"),
              "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
              "model": {"model_path": str(assets / "model"), "max_prompt_tokens": 32, "max_response_tokens": 6},
              "buffer": {"batch_size": 4, "total_steps": 1, "default_reward_fn_type": "math_reward",
                         "explorer_input": {"taskset": {"name": "arithmetic", "path": str(tmp_path / "tasks"),
                                                        "format": {"prompt_key": "question",
                                                                   "response_key": "answer"}}},
                         "trainer_input": {"experience_buffer": {"name": "b", "storage_type": "sql"}}},
              **seed_data_processor(assets / "model", recipe)}
    path = tmp_path / "trinity.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {**os.environ, "TRINITY_TASKSET_PATH": str(assets / "raw")}

    def rft(*args):
        done = subprocess.run([sys.executable, "-m", "rft", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    shown = rft("config", "show", str(path))
    assert "refus" not in shown.stdout + shown.stderr and "num_process: 32" in shown.stdout
    err = rft("train", str(path)).stderr
    # every task scored by the served model (Data-Juicer's 3 tries each: a random model writes no JSON, score 0)
    assert "rft: task pipeline: 8 tasks kept (llm_difficulty_score_filter dropped 0; llm_difficulty_score mean 0)" in err
    assert f"rft: data_processor.task_pipeline: served 24 requests with {assets / 'model'}" in err
    assert f"rft: data_processor.experience_pipeline: served 48 requests with {assets / 'model'}" in err
    assert "HTTP Request" not in err  # the operator's client is quiet
    tasks = (tmp_path / "tasks" / "output.jsonl").read_text().splitlines()
    assert [json.loads(t)["question"] for t in tasks] == [
        json.loads(t)["question"] for t in (assets / "raw" / "train.jsonl").read_text().splitlines()]
    engine = sa.create_engine(database_url(str(tmp_path / "ckpt" / "p" / "dp" / "buffer.sqlite")))
    with engine.connect() as conn:
        rows = [Experience.from_bytes(p) for p in conn.execute(sa.select(EXPERIENCES.c.payload)).scalars()]
    assert len(rows) == 16
    for e in rows:
        assert e.info["llm_quality_score"] == 0.0 and e.info["operators"] == ["data_juicer", "reward_shaping_mapper"]


class Scorer(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that rates a question hard (5 on every dimension) when it adds a 9,
    else easy (1)."""

    asked: list[str] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["messages"][-1]["content"]
        Scorer.asked.append(body["model"])
        level = 5 if "+9" in text else 1
        dims = ["linguistic_complexity", "conceptual_depth", "prior_knowledge", "step_complexity", "ambiguity"]
        reply = json.dumps({"dimension_scores": {d: level for d in dims}, "flags": [], "rationale": "r"})
        send_json(self, {"choices": [{"message": {"role": "assistant", "content": reply}}]})

    def log_message(self, *args):
        pass


def test_an_llm_filter_keeps_the_tasks_a_running_server_scores_within_its_bounds(assets, tmp_path):
    from rft.data_processor import run_task_pipeline
    from rft.trainer.configure import load_config

    server = HTTPServer(("127.0.0.1", 0), Scorer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        raw = assets / "raw" / "train.jsonl"
        cfg = load_config(None, [
            f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={raw}",
            f"trainer.default_local_dir={tmp_path / 'out'}", "data_processor.task_pipeline.num_process=2",
            "data_processor.task_pipeline.target_fields=[question]",
            "data_processor.task_pipeline.operators=[{name: llm_difficulty_score_filter, args: {api_or_hf_model: "
            "hosted-7b, min_score: 0.5, input_keys: [question], field_names: [Question], model_params: {base_url: "
            f"'http://127.0.0.1:{server.server_port}/v1', api_key: k}}}}}}]"])
        out = run_task_pipeline(cfg)
    finally:
        server.shutdown()
    from rft.data.io import read_rows

    kept = [row["question"] for row in read_rows(out)]
    every = [json.loads(line)["question"] for line in raw.read_text().splitlines()]
    assert kept == [q for q in every if "+9" in q] and 0 < len(kept) < len(every)
    assert set(Scorer.asked) == {"hosted-7b"} and len(Scorer.asked) == len(every)  # one call each: all parsed


def test_the_example_config_shows_with_no_refusal(assets, tmp_path):
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny").symlink_to(assets / "model")
    (tmp_path / "examples").symlink_to(root / "examples")
    done = subprocess.run([sys.executable, "-m", "rft", "config", "show", "examples/data_juicer/trinity_llm_scores.yaml"],
                          cwd=tmp_path, env={**os.environ, "TRINITY_TASKSET_PATH": str(assets / "raw")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refus" not in done.stdout + done.stderr and "llm_difficulty_score_filter" in done.stdout


def test_the_seed_trinity_configuration_with_its_runtime_blocks_loads_with_no_refusal(assets, tmp_path,
                                                                                      monkeypatch):
    """trinity_config_reference.md's example as test_seed_configs assembles it (with its listed edits), plus the
    page's service, data_processor and log blocks, local paths and a free port: it loads, every stage, with no
    refusal (the Data-Juicer operators loaded where Data-Juicer runs, the server auto-started and stopped)."""
    import socket

    from spec_configs import merge
    from test_seed_configs import edited_trinity_example

    from rft.trainer.configure import load_trinity

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"process": [{"llm_quality_score_filter": {
        "api_or_hf_model": str(assets / "model"), "min_score": 0.0}}]}))
    blocks = md_yaml_blocks(SPEC / "trinity_config_reference.md")
    service = next(b for b in blocks if list(b) == ["service"] and b["service"])
    log = next(b for b in blocks if list(b) == ["log"] and b["log"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    service["service"]["data_juicer"].update(server_url=f"http://127.0.0.1:{port}", port=port)
    for key, value in (("MODEL_PATH", assets / "model"), ("TRINITY_TASKSET_PATH", assets / "raw"),
                       ("TRINITY_DATASET_PATH", assets / "sft.jsonl"), ("TRINITY_SFT_DATASET_PATH", assets / "sft.jsonl"),
                       ("TRINITY_CHECKPOINT_ROOT_DIR", tmp_path / "checkpoints")):
        monkeypatch.setenv(key, str(value))
    (assets / "sft.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n"
                                              for i in range(8)))
    cfg = merge(merge(merge(edited_trinity_example(), service), seed_data_processor(assets / "model", recipe)), log)
    path = tmp_path / "trinity.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    kind, stages = load_trinity(path)
    rl = [s for s in stages if s.kind == "rl"]
    assert kind == "stages" and rl
    dp = rl[0].cfg.data_processor
    assert dp.task_pipeline.num_process == 32 and dp.data_juicer.auto_start and dp.data_juicer.port == port
    with socket.socket() as s:  # the check's server stopped
        assert s.connect_ex(("127.0.0.1", port)) != 0


class Silent(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that accepts every request and never answers (until the test ends)."""

    stop = threading.Event()
    asked: list[str] = []

    def do_POST(self):
        Silent.asked.append(self.path)
        Silent.stop.wait(600)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def silent_server():
    """The base URL (http://127.0.0.1:PORT/v1) of a Silent server, stopped when the block ends."""
    from http.server import ThreadingHTTPServer

    Silent.stop.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        Silent.stop.set()
        server.shutdown()
        server.server_close()


def test_a_model_server_that_never_answers_the_task_pipeline_is_one_line_within_its_timeout(assets, tmp_path):
    """llm_difficulty_score_filter over the 8 tasks (2 processes) asking a server that accepts and never answers,
    model_params.timeout 1: `rft train` stops with one line naming the server and the key, exit 2, within a bound
    (its start, Data-Juicer's imports twice, then 3 tries of 1 s: generous on a loaded machine), and writes no
    taskset (the rerun filters again); Data-Juicer alone scored every row 0 after 9 s each and trained on."""
    import time

    with silent_server() as url:
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "rft", "train", f"actor_rollout_ref.model.path={assets / 'model'}",
                               f"data.train_files={assets / 'raw' / 'train.jsonl'}", f"trainer.default_local_dir={tmp_path}",
                               "data.prompt_key=question", "data_processor.task_pipeline.num_process=2",
                               "data_processor.task_pipeline.operators=[{name: llm_difficulty_score_filter, args: "
                               "{api_or_hf_model: hosted-7b, min_score: 0.5, input_keys: [question], field_names: "
                               f"[Question], model_params: {{base_url: '{url}', api_key: k, timeout: 1}}}}}}]"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=400)
        took = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [x for x in done.stderr.splitlines() if x.startswith("rft: error:")]
    assert errors == [
        f"rft: error: data_processor.task_pipeline.operators[0] (llm_difficulty_score_filter): the model server at "
        f"{url} did not answer llm_difficulty_score_filter within 1 s (3 tries: model_params.timeout, "
        "model_params.max_retries): check that it serves that model, or raise model_params.timeout; the pipeline "
        "wrote nothing: run the same command again"], done.stderr[-3000:]
    assert took < 240, done.stderr[-3000:]
    assert Silent.asked and not (tmp_path / "task_pipeline" / "tasks.parquet").exists()


def test_a_model_server_that_never_answers_the_experience_pipeline_is_one_error_within_its_timeout(tmp_path):
    """Trinity-RFT's recipe (llm_quality_score_filter over each step's experiences) asking a server that never
    answers, model_params.timeout 1: the step's pipeline raises the line naming the server and the key."""
    import time

    import torch

    from rft.data_processor import ExperiencePipeline
    from rft.data_processor.data_juicer import DataJuicerError

    rows = [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, action_mask=torch.ones(1, dtype=torch.long),
                       logprobs=torch.zeros(1), reward=1.0, group="g", info={"response_text": text}, rewards={})
            for text in ("4", "5", "six")]
    with silent_server() as url:
        pipeline = ExperiencePipeline([{"name": "data_juicer", "args": {"operators": [{"llm_quality_score_filter": {
            "api_or_hf_model": "hosted-7b", "min_score": 0.0, "input_keys": ["prompt", "response"],
            "field_names": ["Question", "Answer"], "model_params": {"base_url": url, "api_key": "k",
                                                                    "timeout": 1}}}]}}])
        start = time.monotonic()
        try:
            with pytest.raises(DataJuicerError) as err:
                pipeline.process(rows)
        finally:
            pipeline.close()
        took = time.monotonic() - start
    assert str(err.value) == (
        f"the model server at {url} did not answer llm_quality_score_filter within 1 s (3 tries: "
        "model_params.timeout, model_params.max_retries): check that it serves that model, or raise "
        "model_params.timeout")
    assert took < 120


def test_the_task_pipeline_of_two_processes_asks_the_judge_about_each_task_once(assets, tmp_path):
    """`rft train` on two trainer processes (gloo, one thread each), every one loading the taskset: the first runs
    the task pipeline, the other waits and reads its output, so the test's own server is asked about each of the 8
    tasks once (it was asked twice, once by each process)."""
    from rft.data.io import read_rows, write_parquet

    tasks = tmp_path / "tasks.parquet"
    write_parquet(read_rows(assets / "data" / "train.parquet")[:8], tasks)
    server = HTTPServer(("127.0.0.1", 0), Scorer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Scorer.asked.clear()
    try:
        done = subprocess.run([
            sys.executable, "-m", "rft", "train", f"actor_rollout_ref.model.path={assets / 'model'}",
            f"data.train_files={tasks}", f"trainer.default_local_dir={tmp_path / 'out'}", "trainer.n_gpus_per_node=2",
            "trainer.device=cpu", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2", "data.max_prompt_length=32", "data.max_response_length=4",
            "trainer.total_training_steps=1", "trainer.logger=[]", "trainer.val_before_train=false",
            "data_processor.task_pipeline.num_process=1",
            "data_processor.task_pipeline.operators=[{name: llm_difficulty_score_filter, args: {api_or_hf_model: "
            "hosted-7b, min_score: 0.0, input_keys: [prompt], field_names: [Question], model_params: {base_url: "
            f"'http://127.0.0.1:{server.server_port}/v1', api_key: k}}}}}}]"],
            cwd=tmp_path, capture_output=True, text=True, timeout=900,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(Scorer.asked) == 8, done.stderr[-3000:]
    assert done.stderr.count("rft: task pipeline: 8 tasks kept") == 1, done.stderr[-3000:]
