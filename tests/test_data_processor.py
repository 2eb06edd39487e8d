"""Trinity-RFT's data processor: the experience pipeline's operators (reward_shaping_mapper's ADD / SUB / MUL / DIV,
pass_rate_calculator) on hand-computed experiences, the task pipeline's text_length_filter, one short run whose
buffer rows hold the shaped rewards the trainer read and each row's provenance, an explorer run of mode explore,
the one-line errors of operators rft has not, and the Trinity dialect's mapping."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import sqlalchemy as sa
import torch
from cli_helpers import rft_here
from rl_helpers import make_assets, rl_config

from rft.buffer import database_url
from rft.buffer.sql import EXPERIENCES
from rft.config.load import ConfigError
from rft.data.io import read_rows
from rft.data_processor import ExperiencePipeline
from rft.data_processor.tasks import TextLengthFilter
from rft.dialects.trinity import translate
from rft.experience import Experience
from rft.orchestration.run import SyncRun

os.environ["HF_HUB_OFFLINE"] = "1"

# parity of the response's length (0 / 1, so a group's pass rate varies) and its length as a named reward value
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": float(len(solution_str) % 2), "chars": float(len(solution_str))}
'''
SHAPING = ('data_processor.experience_pipeline.operators=[{name: pass_rate_calculator}, {name: reward_shaping_mapper, '
           'args: {reward_shaping_configs: [{stats_key: chars, op_type: ADD, weight: 0.5}, '
           '{stats_key: pass_rate, op_type: MUL, weight: 2.0}]}}]')
MAX_LEN = 5  # the task pipeline keeps the questions of at most 5 characters ("7+96=", not "49+97=")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"), REWARD)


def experience(reward: float, group: str = "g", info: dict | None = None, rewards: dict | None = None) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, action_mask=torch.ones(1, dtype=torch.long),
                      logprobs=torch.zeros(1), reward=reward, group=group, info=dict(info or {}),
                      rewards=dict(rewards or {}))


def shaping(*configs: dict) -> list[dict]:
    return [{"name": "reward_shaping_mapper", "args": {"reward_shaping_configs": list(configs)}}]


# ------------------------------------------------------------------------------------------- operators
@pytest.mark.parametrize("op_type, expected", [("ADD", 1.0 + 0.5 * 4), ("SUB", 1.0 - 0.5 * 4),
                                               ("MUL", 1.0 * (0.5 * 4)), ("DIV", 1.0 / (0.5 * 4))])
def test_reward_shaping_mapper_applies_weight_times_the_stat(op_type, expected):
    exps, metrics = ExperiencePipeline(shaping({"stats_key": "q", "op_type": op_type, "weight": 0.5})).process(
        [experience(1.0, info={"q": 4})])
    assert exps[0].reward == expected
    assert metrics["experience_pipeline/reward_diff/mean"] == expected - 1.0


def test_reward_shaping_reads_info_before_the_named_rewards_and_skips_experiences_without_the_stat():
    # defaults ADD, weight 1.0 (Trinity-RFT's); a DIV by w x s = 0 leaves the reward
    pipeline = ExperiencePipeline(shaping({"stats_key": "q"}, {"stats_key": "zero", "op_type": "DIV"}))
    exps, metrics = pipeline.process([experience(1.0, info={"q": 2.0}, rewards={"q": 100.0, "zero": 0.0}),
                                      experience(1.0, rewards={"q": 3.0}), experience(1.0)])
    assert [e.reward for e in exps] == [3.0, 4.0, 1.0]
    assert (metrics["experience_pipeline/reward_diff/min"], metrics["experience_pipeline/reward_diff/max"]) == (0, 3)
    assert [e.info["operators"] for e in exps] == [["reward_shaping_mapper"]] * 3


def test_pass_rate_calculator_gives_each_experience_its_groups_mean_reward():
    exps, metrics = ExperiencePipeline([{"name": "pass_rate_calculator"}]).process(
        [experience(1.0, "a"), experience(0.0, "a"), experience(1.0, "a"), experience(0.0, "b")])
    assert [e.info["pass_rate"] for e in exps] == [2 / 3, 2 / 3, 2 / 3, 0.0]
    assert [e.reward for e in exps] == [1.0, 0.0, 1.0, 0.0]
    assert metrics == {"experience_pipeline/pass_rate/mean": (2 / 3 + 0.0) / 2,
                       "experience_pipeline/experience_count": 4.0}


def test_text_length_filter_keeps_min_len_to_max_len_characters_of_the_text():
    rows = [{"p": "a" * 9}, {"p": "a" * 10}, {"p": [{"role": "user", "content": "a" * 6}, {"content": "bbb"}]},
            {"p": "a" * 12}, {"q": "a" * 11}]
    # Data-Juicer's default min_len 10; messages read as their contents joined by a newline (6 + 1 + 3 = 10)
    assert TextLengthFilter().process(rows, "p") == [rows[1], rows[2], rows[3]]
    assert TextLengthFilter(max_len=11, text_key="q").process(rows, "p") == [rows[4]]


def test_a_task_pipeline_output_made_from_the_same_inputs_is_reused_and_remade_when_they_change(assets, tmp_path,
                                                                                                caplog):
    from rft.data_processor import run_task_pipeline

    def config(max_len: int):
        return rl_config(assets, tmp_path / "out", "data_processor.task_pipeline.operators=[{name: "
                         f"text_length_filter, args: {{min_len: 0, max_len: {max_len}}}}}]")

    caplog.set_level("INFO", logger="rft")
    out = Path(run_task_pipeline(config(MAX_LEN)))
    made = out.stat().st_mtime_ns
    assert run_task_pipeline(config(MAX_LEN)) == str(out) and out.stat().st_mtime_ns == made
    assert "was made from the same files and operators; reused" in caplog.text
    caplog.clear()
    longer = read_rows(run_task_pipeline(config(MAX_LEN + 1)))  # another argument: filtered again
    assert "reused" not in caplog.text
    assert len(longer) == sum(len(prompt_text(r)) <= MAX_LEN + 1 for r in read_rows(assets / "data" / "train.parquet"))


# ---------------------------------------------------------------------------------------------- a run
def prompt_text(row: dict) -> str:
    return "\n".join(m["content"] for m in row["prompt"])


def test_a_run_trains_on_the_shaped_rewards_its_buffer_holds_with_their_provenance(assets, tmp_path):
    out = tmp_path / "out"
    cfg = rl_config(assets, out, "experience_buffer.storage_type=sql", SHAPING,
                    "data_processor.task_pipeline.operators=[{name: text_length_filter, args: {min_len: 0, "
                    f"max_len: {MAX_LEN}}}}}]")
    kept = [r for r in read_rows(assets / "data" / "train.parquet") if len(prompt_text(r)) <= MAX_LEN]
    assert 4 <= len(kept) < 64
    run = SyncRun(cfg)
    assert len(run.explorer.taskset) == len(kept)
    run.fit()
    assert read_rows(out / "task_pipeline" / "tasks.parquet") == kept  # the explorer's taskset
    engine = sa.create_engine(database_url(str(out / "buffer.sqlite")))
    with engine.connect() as conn:
        rows = [Experience.from_bytes(p) for p in conn.execute(sa.select(EXPERIENCES.c.payload)).scalars()]
    assert len(rows) == 16
    by_group: dict[str, list[float]] = {}
    for e in rows:
        by_group.setdefault(e.group, []).append(len(e.info["response_text"]) % 2)
    for e in rows:
        text = e.info["response_text"]
        pass_rate = sum(by_group[e.group]) / len(by_group[e.group])
        assert e.info["pass_rate"] == pass_rate
        assert e.reward == pytest.approx((len(text) % 2 + 0.5 * len(text)) * (2.0 * pass_rate), abs=1e-6)
        assert e.info["operators"] == ["pass_rate_calculator", "reward_shaping_mapper"]
        assert len(prompt_text({"prompt": e.info["raw_prompt"]})) <= MAX_LEN
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["critic/score/mean"] == pytest.approx(sum(e.reward for e in rows) / 16, abs=1e-5)
    assert metrics["experience_pipeline/experience_count"] == 16


def test_mode_explore_writes_the_processed_experiences(assets, tmp_path):
    out = tmp_path / "out"
    args = [f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
            "data.max_response_length=6", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2", "trainer.val_before_train=false", "trainer.total_training_steps=1",
            f"trainer.default_local_dir={out}", "trainer.logger=[]", "trainer.mode=explore",
            "experience_buffer.storage_type=file",
            "data_processor.experience_pipeline.operators=[{name: reward_shaping_mapper, args: "
            "{reward_shaping_configs: [{stats_key: chars, op_type: MUL, weight: -1.0}]}}]"]
    rft_here("train", *args, cwd=tmp_path)
    rows = [Experience.from_json(x) for x in (out / "experiences" / "experiences.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for e in rows:
        text = e.info["response_text"]
        assert e.reward == (len(text) % 2) * -float(len(text)) and e.rewards["chars"] == len(text)
        assert e.info["operators"] == ["reward_shaping_mapper"]


# -------------------------------------------------------------------------------------------- errors
ERRORS = [
    ("data_processor.experience_pipeline.operators=[{name: data_juicer, args: {config_path: dj.yaml}}]",
     "data_processor.experience_pipeline.operators[0].args (data_juicer): config_path dj.yaml: cannot be read (No "
     "such file or directory)"),
    ("data_processor.experience_pipeline.operators=[{name: data_juicer, args: {operators: [{text_length_filter: "
     "{}}]}}]",
     "data_processor.experience_pipeline.operators[0] (data_juicer): Data-Juicer runs in a Python environment of its "
     "own (py-data-juicer cannot share rft's, docs/workflows.md): build one (`make data-juicer`, or pip install "
     "py-data-juicer aiohttp ray in a venv) and set RFT_DATA_JUICER_PYTHON (or data_processor.data_juicer.python) "
     "to its python"),
    ("data_processor.experience_pipeline.operators=[{name: reward_shaper}]",
     "data_processor.experience_pipeline.operators[0].name='reward_shaper' is not an operator rft has: "
     "data_juicer, pass_rate_calculator, reward_shaping_mapper"),
    ("data_processor.experience_pipeline.operators=[{name: pass_rate_calculator, args: {threshold: 1}}]",
     "data_processor.experience_pipeline.operators[0].args.threshold: pass_rate_calculator takes no arguments"),
    ("data_processor.experience_pipeline.operators=[{name: reward_shaping_mapper, args: {reward_shaping_configs: "
     "[{stats_key: q, op_type: POW}]}}]",
     "data_processor.experience_pipeline.operators[0].args (reward_shaping_mapper): reward_shaping_configs[0]."
     "op_type='POW': one of ADD, SUB, MUL, DIV"),
    ("data_processor.task_pipeline.operators=[{name: llm_difficulty_score_filter, args: {min_score: 0.0}}]",
     "data_processor.task_pipeline.operators[0] (llm_difficulty_score_filter, a Data-Juicer operator): "
     "llm_difficulty_score_filter: api_or_hf_model='gpt-4o' (Data-Juicer's default) is no local model folder and no "
     "OpenAI-compatible server is named for it (model_params.base_url, or $OPENAI_BASE_URL): give a model folder "
     "(rft serves it on 127.0.0.1 with its hf engine) or the address of a server that serves that model"),
    ("data_processor.task_pipeline.operators=[{name: llm_difficulty_score_filter, args: {model_params: {base_url: "
     "'http://127.0.0.1:1/v1', timeout: 0}}}]",
     "data_processor.task_pipeline.operators[0] (llm_difficulty_score_filter, a Data-Juicer operator): "
     "llm_difficulty_score_filter: model_params.timeout=0 must be a number of seconds > 0 (each request to the model "
     "server; default 120)"),
    ("data_processor.task_pipeline.operators=[{name: words_num_filter}]",
     "data_processor.task_pipeline.operators[0] (words_num_filter, a Data-Juicer operator): Data-Juicer runs in a Python environment of its "
     "own (py-data-juicer cannot share rft's, docs/workflows.md): build one (`make data-juicer`, or pip install "
     "py-data-juicer aiohttp ray in a venv) and set RFT_DATA_JUICER_PYTHON (or data_processor.data_juicer.python) "
     "to its python"),
    ("data_processor.task_pipeline.num_process=4",
     "data_processor.task_pipeline.num_process=4 sets the processes of the pipeline's Data-Juicer operators, and "
     "it has none (rft's own run in the process that loads the taskset): remove it"),
    ("data_processor.task_pipeline.operators=[{name: text_length_filter, args: {min_len: -1}}]",
     "data_processor.task_pipeline.operators[0].args (text_length_filter): min_len=-1 must be an integer >= 0"),
]


@pytest.mark.parametrize("override, line", ERRORS, ids=[e[1][:60] for e in ERRORS])
def test_an_operator_rft_has_not_is_one_error_line_before_any_model_loads(assets, tmp_path, override, line,
                                                                        monkeypatch):
    monkeypatch.delenv("RFT_DATA_JUICER_PYTHON", raising=False)  # Data-Juicer's own tests: tests/with_data_juicer
    with pytest.raises(ConfigError) as err:
        rl_config(assets, tmp_path / "out", override)
    assert str(err.value) == line


def test_config_show_notes_what_the_machine_lacks_and_train_refuses_it(assets, tmp_path, monkeypatch, caplog):
    """A Data-Juicer LLM operator with no model server named and no Data-Juicer environment here: both depend on the
    machine the run starts on, so `config show` shows the config with one note each, `rft train` refuses."""
    for name in ("RFT_DATA_JUICER_PYTHON", "OPENAI_BASE_URL", "OPENAI_API_URL", "DASHSCOPE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    common = [f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
              "data_processor.task_pipeline.operators=[{name: llm_difficulty_score_filter, args: {api_or_hf_model: "
              "hosted-7b}}]",
              "data_processor.experience_pipeline.operators=[{name: data_juicer, args: {operators: [{"
              "text_length_filter: {}}]}}]"]
    unserved = ("data_processor.task_pipeline.operators[0] (llm_difficulty_score_filter, a Data-Juicer operator): "
                "llm_difficulty_score_filter: api_or_hf_model='hosted-7b' is no local model folder and no "
                "OpenAI-compatible server is named for it")
    no_env = "data_processor.experience_pipeline.operators[0] (data_juicer): Data-Juicer runs in a Python environment"
    shown = rft_here("config", "show", *common, cwd=tmp_path, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "llm_difficulty_score_filter" in shown.stdout
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rft: note: data_processor.")]
    assert len(notes) == 2 and notes[0].startswith(f"rft: note: {no_env}") and notes[1].startswith(
        f"rft: note: {unserved}") and all(n.endswith("(`rft train` refuses this config here)") for n in notes)
    trained = rft_here("train", *common, cwd=tmp_path, check=False)
    assert trained.returncode == 2
    assert [x for x in trained.stderr.splitlines() if x.startswith("rft: error:")] == [
        f"rft: error: {unserved} (model_params.base_url, or $OPENAI_BASE_URL): give a model folder (rft serves it on "
        "127.0.0.1 with its hf engine) or the address of a server that serves that model"]


def test_rft_train_prints_the_operator_error_as_one_line(assets, tmp_path):
    proc = rft_here("train", f"actor_rollout_ref.model.path={assets / 'model'}",
                    f"data.train_files={assets / 'data' / 'train.parquet'}",
                    "data_processor.experience_pipeline.operators=[{name: data_juicer}]", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert [x for x in proc.stderr.splitlines() if x.strip()] == [
        "rft: error: data_processor.experience_pipeline.operators[0].args (data_juicer): give one of operators "
        "(Data-Juicer's process list) or config_path (a Data-Juicer recipe)"]


# ------------------------------------------------------------------------------------------- Trinity
def test_trinity_data_processor_lands_on_rfts_section(assets, tmp_path):
    (tmp_path / "out").mkdir()
    cfg = {"project": "p", "name": "n", "algorithm": {"algorithm_type": "grpo"}, "model": {"model_path": "m"},
           "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": str(tmp_path / "out")}}},
           "data_processor": {
               "task_pipeline": {"operators": [{"name": "text_length_filter", "args": {"max_len": 40}}],
                                 "inputs": [str(assets / "data")], "target_fields": ["prompt"]},
               "experience_pipeline": {"operators": shaping({"stats_key": "q", "op_type": "ADD", "weight": 1.0}),
                                       "save_input": False}}}
    out = translate(cfg, "t.yaml")
    assert out["data_processor"] == {
        "task_pipeline": {"operators": [{"name": "text_length_filter", "args": {"max_len": 40}}],
                          "target_fields": ["prompt"], "output": str(tmp_path / "out" / "output.jsonl")},
        "experience_pipeline": {"operators": shaping({"stats_key": "q", "op_type": "ADD", "weight": 1.0})}}
    assert out["data"]["train_files"] == str(assets / "data" / "train.parquet")  # the inputs: the raw tasks


def test_trinity_data_juicer_keys_are_refused_by_name_and_num_process_lands_on_rfts():
    refusals: list = []
    out = translate({"project": "p", "model": {"model_path": "m"},
                     "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": "t.parquet"}}},
                     "data_processor": {"task_pipeline": {"num_process": 32, "config_path": "dj.yaml", "top_k": 8},
                                        "experience_pipeline": {"save_input": True}}}, "t.yaml", refusals=refusals)
    assert [key for key, _ in refusals] == [
        "data_processor.task_pipeline.config_path", "data_processor.task_pipeline.top_k",
        "data_processor.experience_pipeline.save_input"]
    assert out["data_processor"]["task_pipeline"]["num_process"] == 32  # Data-Juicer's np (rft checks its use)


def test_every_request_of_an_llm_operator_is_bounded_by_default():
    """What Data-Juicer is sent: model_params.timeout (the OpenAI client's bound on each request) where the operator
    asks a server and names none, the operator's own where it does; nothing for an operator that loads its model or
    asks no model."""
    from rft.data_processor.llm import DEFAULT_TIMEOUT_S, with_served_models

    process = [{"llm_quality_score_filter": {"model_params": {"base_url": "http://h/v1"}}},
               {"llm_difficulty_score_filter": {"api_or_hf_model": "m", "model_params": {"base_url": "http://h/v1",
                                                                                         "timeout": 5}}},
               {"llm_perplexity_filter": {"is_hf_model": True}}, {"text_length_filter": {"min_len": 3}}]
    sent = with_served_models(process, serve=None)
    assert [next(iter(spec.values())).get("model_params") for spec in sent] == [
        {"timeout": DEFAULT_TIMEOUT_S, "base_url": "http://h/v1"}, {"base_url": "http://h/v1", "timeout": 5}, None,
        None]
    assert DEFAULT_TIMEOUT_S == 120
