"""Data-Juicer's filters in the experience pipeline, through the real py-data-juicer in the environment `make
data-juicer` builds (.venv-dj; `make test-data-juicer` sets RFT_DATA_JUICER_PYTHON to its python and runs these;
.ci/run runs them): stats computed by Data-Juicer, experiences it drops gone from the step, rewards shaped by its
stats as the buffer holds them, and its bad inputs as one line before any model loads."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest
import sqlalchemy as sa
import torch
from cli_helpers import rft_here
from rl_helpers import make_assets, rl_config

from rft.buffer import database_url
from rft.buffer.sql import EXPERIENCES
from rft.data_processor import ExperiencePipeline
from rft.experience import Experience
from rft.orchestration.run import SyncRun

os.environ["HF_HUB_OFFLINE"] = "1"
assert os.environ.get("RFT_DATA_JUICER_PYTHON"), "run with `make test-data-juicer` (RFT_DATA_JUICER_PYTHON)"

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(len(solution_str) % 2)
'''
# Data-Juicer's text_length_filter keeps every response here and records its length; the mapper adds 0.25 x it
PIPELINE = ("data_processor.experience_pipeline.operators=[{name: data_juicer, args: {operators: "
            "[{text_length_filter: {min_len: 0, max_len: 100000}}, {words_num_filter: {min_num: 0}}]}}, "
            "{name: reward_shaping_mapper, args: {reward_shaping_configs: [{stats_key: text_len, op_type: ADD, "
            "weight: 0.25}]}}]")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"), REWARD)


def experience(text: str, reward: float) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, action_mask=torch.ones(1, dtype=torch.long),
                      logprobs=torch.zeros(1), reward=reward, group="g", info={"response_text": text}, rewards={})


def test_data_juicer_filters_give_their_stats_and_drop_what_they_reject(tmp_path):
    recipe = tmp_path / "recipe.yaml"  # Trinity-RFT's config_path: a Data-Juicer recipe's process list
    recipe.write_text("project_name: p\nprocess:\n  - text_length_filter: {min_len: 5, max_len: 30}\n"
                      "  - words_num_filter: {min_num: 2}\n")
    pipeline = ExperiencePipeline([{"name": "data_juicer", "args": {"config_path": str(recipe)}}])
    rows = [experience("a short one", 1.0), experience("a much longer response with many words in it", 0.0),
            experience("abc", 0.0), experience("single", 0.5)]
    kept, metrics = pipeline.process(rows)
    pipeline.close()
    # text_len 11 / 44 / 3 / 6; num_words 3 / 9 / 1 / 1: only the first is 5..30 characters and 2+ words
    assert [e.info["response_text"] for e in kept] == ["a short one"]
    assert [(e.info["text_len"], e.info.get("num_words")) for e in rows] == [(11, 3), (44, 9), (3, 1), (6, 1)]
    assert kept[0].info["operators"] == ["data_juicer"] and kept[0].reward == 1.0
    assert metrics["experience_pipeline/data_juicer/kept"] == 1 and metrics["experience_pipeline/data_juicer/dropped"] == 3


def test_the_trainer_reads_rewards_shaped_by_data_juicers_stats_from_the_buffer(assets, tmp_path):
    out = tmp_path / "out"
    run = SyncRun(rl_config(assets, out, "experience_buffer.storage_type=sql", PIPELINE))
    run.fit()
    engine = sa.create_engine(database_url(str(out / "buffer.sqlite")))
    with engine.connect() as conn:
        rows = [Experience.from_bytes(p) for p in conn.execute(sa.select(EXPERIENCES.c.payload)).scalars()]
    assert len(rows) == 16
    for e in rows:
        text = e.info["response_text"]
        assert e.info["text_len"] == len(text)  # Data-Juicer's stat, counted by it
        assert e.reward == pytest.approx(len(text) % 2 + 0.25 * len(text), abs=1e-6)
        assert e.info["operators"] == ["data_juicer", "reward_shaping_mapper"]
    assert any(e.info["text_len"] != rows[0].info["text_len"] for e in rows)  # the shaping varies by row


@pytest.mark.parametrize("operators, line", [
    ("[{no_such_filter: {}}]", "operators[0] (data_juicer): Data-Juicer has no operator 'no_such_filter'"),
    ("[{clean_email_mapper: {}}]", "operators[0] (data_juicer): clean_email_mapper is a Data-Juicer Mapper, "
                                   "not a filter"),
])
def test_a_bad_data_juicer_operator_is_one_line_before_any_model_loads(assets, tmp_path, operators, line):
    run = rft_here("train", f"actor_rollout_ref.model.path={assets / 'model'}",
                   f"data.train_files={assets / 'data' / 'train.parquet'}",
                   f"custom_reward_function.path={assets / 'reward.py'}", f"trainer.default_local_dir={tmp_path}",
                   "data_processor.experience_pipeline.operators=[{name: data_juicer, args: {operators: "
                   f"{operators}}}}}]", cwd=tmp_path, check=False)
    assert run.returncode == 2
    assert run.stderr.startswith(f"rft: error: data_processor.experience_pipeline.{line}"), run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_data_juicer_recipe_that_does_not_parse_is_one_line(assets, tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("process: [text_length_filter: {min_len: 5\n")
    with pytest.raises(ValueError, match=r"operators\[0\].args \(data_juicer\): config_path .*bad.yaml does not "
                                         r"parse as YAML"):
        ExperiencePipeline([{"name": "data_juicer", "args": {"config_path": str(recipe)}}])


def test_trinity_service_auto_start_runs_the_filters_on_a_server_the_run_starts_and_stops(assets, tmp_path):
    """Trinity-RFT's service.data_juicer: auto_start on a free port starts rft's Data-Juicer server in the
    Data-Juicer environment for the check and the run, each stopped after (nothing listens there afterwards)."""
    from ray_cluster import free_port

    from rft.dialects.trinity import translate

    port = free_port()
    out = translate({"project": "p", "model": {"model_path": "m"},
                     "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": "t.parquet"}}},
                     "service": {"data_juicer": {"server_url": f"http://127.0.0.1:{port}", "auto_start": True,
                                                 "port": port}}}, "t.yaml")
    assert out["data_processor"]["data_juicer"] == {"server_url": f"http://127.0.0.1:{port}", "auto_start": True,
                                                    "port": port}
    run = SyncRun(rl_config(assets, tmp_path / "out", "experience_buffer.storage_type=sql", PIPELINE,
                            "data_processor.data_juicer.auto_start=true", f"data_processor.data_juicer.port={port}"))
    run.fit()
    engine = sa.create_engine(database_url(str(tmp_path / "out" / "buffer.sqlite")))
    with engine.connect() as conn:
        rows = [Experience.from_bytes(p) for p in conn.execute(sa.select(EXPERIENCES.c.payload)).scalars()]
    assert len(rows) == 16 and all(e.info["text_len"] == len(e.info["response_text"]) for e in rows)
    run.explorer.pipeline.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_server_url_sends_the_rows_to_a_data_juicer_server_already_running(tmp_path):
    from ray_cluster import free_port

    from rft.config.schema import DataJuicerServiceConfig
    from rft.data_processor.data_juicer import WORKER

    port = free_port()
    server = subprocess.Popen([os.environ["RFT_DATA_JUICER_PYTHON"], "-I", str(WORKER), "--port", str(port)])
    try:
        op = ExperiencePipeline([{"name": "data_juicer", "args": {"operators": [
            {"text_length_filter": {"min_len": 5}}]}}])
        op.operators[0][1].configure(DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{port}"))
        deadline = time.monotonic() + 120
        while True:
            try:
                kept, _ = op.process([experience("a short one", 1.0), experience("abc", 0.0)])
                break
            except ValueError as e:
                assert "does not answer" in str(e) and time.monotonic() < deadline, e
                time.sleep(0.5)
        assert [e.info["response_text"] for e in kept] == ["a short one"]
        assert kept[0].info["text_len"] == 11
    finally:
        server.terminate()
        server.wait(30)
    op.operators[0][1].configure(DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{port}"))
    with pytest.raises(ValueError, match=rf"the Data-Juicer server at http://127.0.0.1:{port} does not answer"):
        op.process([experience("abc", 0.0)])


def test_the_runs_own_server_stopping_mid_run_is_one_data_juicer_error(tmp_path):
    """auto_start: the server the run started ends between two steps; the next step's request is the run's one
    line naming it (a DataJuicerError), not a ConnectionError and a traceback."""
    from ray_cluster import free_port

    from rft.config.schema import DataJuicerServiceConfig
    from rft.data_processor.data_juicer import DataJuicerError

    port = free_port()
    op = ExperiencePipeline([{"name": "data_juicer", "args": {"operators": [{"text_length_filter": {"min_len": 5}}]}}])
    dj = op.operators[0][1]
    dj.configure(DataJuicerServiceConfig(auto_start=True, port=port, server_url=f"http://127.0.0.1:{port}"))
    try:
        kept, _ = op.process([experience("a short one", 1.0)])
        assert len(kept) == 1
        dj.worker.kill()
        dj.worker.wait(30)
        with pytest.raises(DataJuicerError) as err:
            op.process([experience("another one", 1.0)])
    finally:
        op.close()
    assert str(err.value).startswith(f"the Data-Juicer server the run started at http://127.0.0.1:{port} stopped "
                                     "answering (")
