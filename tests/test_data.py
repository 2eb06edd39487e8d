"""Prompts: truncation (tier 1), PromptDataset on the tiny tokenizer (tier 2), left padding, PromptSampler."""

from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path

import pytest
import torch

from rft.data.dataset import DataError, PromptDataset, PromptSampler, left_pad, truncate
from rft.tasks import arithmetic_rows, write_parquet

IDS = list(range(1, 11))  # [1..10]


# ------------------------------------------------------------------------------------------- truncate
@pytest.mark.parametrize(
    "max_len, mode, expected",
    [
        (4, "left", [7, 8, 9, 10]),  # keep the end
        (4, "right", [1, 2, 3, 4]),  # keep the start
        (4, "middle", [1, 2, 9, 10]),  # 4 // 2 = 2 from the start, 4 - 2 = 2 from the end
        (5, "left", [6, 7, 8, 9, 10]),
        (5, "right", [1, 2, 3, 4, 5]),
        (5, "middle", [1, 2, 8, 9, 10]),  # 5 // 2 = 2 from the start, 3 from the end
        (1, "middle", [10]),  # 1 // 2 = 0 from the start
        (9, "middle", [1, 2, 3, 4, 6, 7, 8, 9, 10]),  # only the middle token goes
        (10, "left", IDS),  # already short enough: untouched whatever the mode
        (12, "error", IDS),
    ],
)
def test_truncate(max_len, mode, expected):
    assert truncate(IDS, max_len, mode) == expected


def test_truncate_error_mode_on_long_ids_raises():
    with pytest.raises(ValueError, match="error"):
        truncate(IDS, 4, "error")


# --------------------------------------------------------------------------------------- PromptDataset
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rft.models.tiny import init_model

    return init_model("tiny", tmp_path_factory.mktemp("data_tiny") / "m", seed=0)


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


def chat_ids(tokenizer, messages) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])


def write_jsonl(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def rows() -> list[dict]:
    return arithmetic_rows(6, seed=0, split="train")


def test_parquet_prompts_are_chat_templated_ids(tokenizer, rows, tmp_path):
    path = write_parquet(rows, tmp_path / "train.parquet")
    ds = PromptDataset(str(path), tokenizer, max_prompt_length=64)
    assert len(ds) == len(rows) and ds.num_filtered == 0
    for prompt, row in zip(ds.prompts, rows):
        assert prompt.ids == chat_ids(tokenizer, row["prompt"])
        assert tokenizer.decode(prompt.ids) == (
            f"<|im_start|>user\n{row['extra_info']['question']}<|im_end|>\n<|im_start|>assistant\n"
        )
        assert prompt.data_source == "arithmetic"
        assert prompt.ground_truth == row["reward_model"]["ground_truth"]
        assert prompt.extra_info == row["extra_info"]


def test_jsonl_equals_parquet_and_file_lists_concatenate(tokenizer, rows, tmp_path):
    parquet = write_parquet(rows[:4], tmp_path / "a.parquet")
    jsonl = write_jsonl(rows[4:], tmp_path / "b.jsonl")
    both = PromptDataset([str(parquet), str(jsonl)], tokenizer, max_prompt_length=64)
    assert [p.ids for p in both.prompts] == [chat_ids(tokenizer, r["prompt"]) for r in rows]
    assert [p.ground_truth for p in both.prompts] == [r["reward_model"]["ground_truth"] for r in rows]
    only_jsonl = PromptDataset(jsonl, tokenizer, max_prompt_length=64)  # a Path, not a str
    assert [p.ids for p in only_jsonl.prompts] == [p.ids for p in both.prompts[4:]]


def test_plain_string_prompt_is_one_user_message(tokenizer, tmp_path):
    rows = [{"prompt": "What is 2+2?", "reward_model": {"ground_truth": "4"}},
            {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}]
    ds = PromptDataset(write_jsonl(rows, tmp_path / "p.jsonl"), tokenizer, max_prompt_length=64)
    assert ds[0].ids == chat_ids(tokenizer, [{"role": "user", "content": "What is 2+2?"}])
    assert ds[1].ids == chat_ids(tokenizer, rows[1]["prompt"])
    # missing columns get defaults
    assert (ds[0].data_source, ds[0].ground_truth, ds[0].extra_info) == ("unknown", "4", {})
    assert ds[1].ground_truth is None


def test_custom_prompt_key(tokenizer, tmp_path):
    path = write_jsonl([{"question": "1+1="}], tmp_path / "q.jsonl")
    ds = PromptDataset(path, tokenizer, prompt_key="question", max_prompt_length=64)
    assert ds[0].ids == chat_ids(tokenizer, [{"role": "user", "content": "1+1="}])


def long_and_short_rows() -> list[dict]:
    return [{"prompt": "1+1=", "extra_info": {"i": 0}}, {"prompt": "x" * 40, "extra_info": {"i": 1}},
            {"prompt": "2+2=", "extra_info": {"i": 2}}, {"prompt": "y" * 50, "extra_info": {"i": 3}}]


LIMIT = 24  # the short prompts template to 12 tokens, the long ones to 48 and 58


def test_lengths_straddle_limit(tokenizer):
    lengths = [len(chat_ids(tokenizer, [{"role": "user", "content": row["prompt"]}]))
               for row in long_and_short_rows()]
    assert lengths[0] <= LIMIT < lengths[1] and lengths[2] <= LIMIT < lengths[3], lengths


def test_filter_overlong_prompts(tokenizer, tmp_path, caplog):
    path = write_jsonl(long_and_short_rows(), tmp_path / "p.jsonl")
    ds = PromptDataset(path, tokenizer, max_prompt_length=LIMIT, filter_overlong_prompts=True,
                       truncation="left")
    assert ds.num_filtered == 2
    assert [p.extra_info["i"] for p in ds.prompts] == [0, 2]
    # one note: how many were dropped, the limit and the longest prompt's length
    longest = max(len(chat_ids(tokenizer, [{"role": "user", "content": row["prompt"]}]))
                  for row in long_and_short_rows())
    notes = [r.getMessage() for r in caplog.records if "filter_overlong_prompts" in r.getMessage()]
    assert notes == [f"rft: note: data.filter_overlong_prompts dropped 2 of the 4 prompts of {path}: longer than "
                     f"data.max_prompt_length={LIMIT} tokens (the longest has {longest})"]
    caplog.clear()
    PromptDataset(path, tokenizer, max_prompt_length=longest, filter_overlong_prompts=True)
    assert not caplog.records  # nothing dropped, nothing said


def test_prompts_that_end_with_an_assistant_turn_get_a_note(tokenizer, tmp_path, caplog):
    """A TRL / SFT conversation given as RL prompts (data.prompt_key=messages) ends with the answer: the model is
    asked for one more turn after it, which trained without a word; one note says so, with the count."""
    turns = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]
    path = write_jsonl([{"messages": turns}, {"messages": turns[:1]}, {"messages": turns}], tmp_path / "m.jsonl")
    PromptDataset(path, tokenizer, prompt_key="messages", max_prompt_length=64)
    notes = [r.getMessage() for r in caplog.records if "assistant turn" in r.getMessage()]
    assert notes == [f"rft: note: 2 of the 3 prompts of {path} (data.prompt_key='messages') end with an assistant "
                     "turn, so the model is asked for another assistant turn after it (as verl does); if that turn "
                     "is the answer to learn, end each prompt with the user's turn and give the answer as the "
                     "ground truth (reward_model.ground_truth, or its column as data.response_key)"], notes
    caplog.clear()
    PromptDataset(write_jsonl([{"messages": turns[:1]}], tmp_path / "u.jsonl"), tokenizer, prompt_key="messages",
                  max_prompt_length=64)
    assert not caplog.records  # prompts that end with the user's turn: nothing said


def test_overlong_prompt_error_names_file_row_length_and_keys(tokenizer, tmp_path):
    path = write_jsonl(long_and_short_rows(), tmp_path / "p.jsonl")
    n_tokens = len(chat_ids(tokenizer, [{"role": "user", "content": "x" * 40}]))
    with pytest.raises(DataError) as err:
        PromptDataset(path, tokenizer, max_prompt_length=LIMIT, truncation="error")
    msg = str(err.value)
    for needle in (str(path), "row 1", f"{n_tokens} tokens", f"data.max_prompt_length={LIMIT}",
                   "data.filter_overlong_prompts", "data.truncation"):
        assert needle in msg, (needle, msg)


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes(tokenizer, tmp_path, mode):
    rows = long_and_short_rows()
    path = write_jsonl(rows, tmp_path / "p.jsonl")
    ds = PromptDataset(path, tokenizer, max_prompt_length=LIMIT, truncation=mode)
    assert len(ds) == 4 and ds.num_filtered == 0
    for prompt, row in zip(ds.prompts, rows):
        full = chat_ids(tokenizer, [{"role": "user", "content": row["prompt"]}])
        assert prompt.ids == truncate(full, LIMIT, mode)
        assert len(prompt.ids) == min(len(full), LIMIT)
    generation_prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    long_ids = ds[1].ids
    if mode == "left":  # the end, with the generation prompt, survives
        assert long_ids[-len(generation_prompt):] == generation_prompt
    if mode == "right":  # the start survives, the generation prompt is cut
        assert long_ids[:3] == tokenizer.encode("<|im_start|>user\n", add_special_tokens=False)
        assert long_ids[-len(generation_prompt):] != generation_prompt


def test_everything_filtered_raises(tokenizer, tmp_path):
    path = write_jsonl([{"prompt": "x" * 40}], tmp_path / "p.jsonl")
    n_tokens = len(chat_ids(tokenizer, [{"role": "user", "content": "x" * 40}]))
    with pytest.raises(DataError) as err:
        PromptDataset(path, tokenizer, max_prompt_length=LIMIT, filter_overlong_prompts=True)
    msg = str(err.value)
    for needle in (f"every prompt of {path} (1)", f"data.max_prompt_length={LIMIT}", f"the longest {n_tokens}",
                   f"raise data.max_prompt_length to at least {n_tokens}", "data.filter_overlong_prompts=false",
                   "data.truncation"):
        assert needle in msg, (needle, msg)


def test_json_and_csv_data_files_name_the_conversion_that_works(tmp_path, monkeypatch):
    """Hugging Face datasets' json and csv files (what a TRL user has): the refusal says how to make each a file rft
    reads, and the command it gives does; a model's pretty-printed config.json gets no such advice."""
    import subprocess
    import sys

    from rft.config.checks import data_files
    from rft.config.errors import ConfigError
    from rft.data.io import read_rows

    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}]
    Path("lines.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    Path("array.json").write_text(json.dumps(rows, indent=2))
    Path("rows.csv").write_text("prompt,answer\n1+1=,two\n2+2=,four\n")
    Path("config.json").write_text(json.dumps({"model_type": "llama"}, indent=2))
    refusals = {}
    for name in ("lines.json", "array.json", "rows.csv", "config.json"):
        with pytest.raises(ConfigError) as e:
            data_files(name, "data.train_files")
        refusals[name] = str(e.value)
    assert refusals["lines.json"] == ("data.train_files: 'lines.json' is not a .parquet or .jsonl file; its lines are "
                                      "JSON objects (JSON Lines): rename it lines.jsonl and set that")
    assert refusals["config.json"] == "data.train_files: 'config.json' is not a .parquet or .jsonl file"
    for name, written in (("array.json", "array.jsonl"), ("rows.csv", "rows.parquet")):
        assert refusals[name].endswith(f", and set {written}"), refusals[name]
        command = refusals[name].split('python -c "', 1)[1].split('"', 1)[0]
        subprocess.run([sys.executable, "-c", command], check=True)
    assert read_rows("array.jsonl") == rows
    assert read_rows("rows.parquet") == [{"prompt": "1+1=", "answer": "two"}, {"prompt": "2+2=", "answer": "four"}]


def test_missing_prompt_column(tokenizer, tmp_path):
    path = write_parquet([{"question": "1+1="}], tmp_path / "q.parquet")
    with pytest.raises(DataError) as err:
        PromptDataset(str(path), tokenizer, max_prompt_length=64)
    msg = str(err.value)
    assert str(path) in msg and "'prompt'" in msg and "data.prompt_key" in msg and "question" in msg
    # what to do: the key to set and the columns to choose from; a close one named first
    assert "set data.prompt_key=<one of them>" in msg and "the rows have the columns question" in msg
    path = write_parquet([{"prompts": "1+1=", "answer": "2"}], tmp_path / "p.parquet")
    with pytest.raises(DataError, match=r"did you mean data\.prompt_key=prompts\? the rows have the columns "
                                        r"prompts, answer: set data\.prompt_key=<one of them>"):
        PromptDataset(str(path), tokenizer, max_prompt_length=64)
    assert len(PromptDataset(str(path), tokenizer, prompt_key="prompts", max_prompt_length=64)) == 1


def test_images_column_refused(tokenizer, tmp_path):
    path = write_jsonl([{"prompt": "describe", "images": ["a.png"]}], tmp_path / "mm.jsonl")
    with pytest.raises(DataError, match=r"row 0: the row has images \('images'\) but the model is a text-only model"):
        PromptDataset(path, tokenizer, max_prompt_length=64)


def test_bad_prompt_value_names_row(tokenizer, tmp_path):
    path = write_jsonl([{"prompt": "ok"}, {"prompt": 5}], tmp_path / "p.jsonl")
    with pytest.raises(DataError, match=r"row 1: the prompt must be"):
        PromptDataset(path, tokenizer, max_prompt_length=64)


def test_empty_file_refused(tokenizer, tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(DataError, match="no rows"):
        PromptDataset(path, tokenizer, max_prompt_length=64)


# -------------------------------------------------------------------------------------------- left_pad
def test_left_pad():
    ids, mask = left_pad([[1, 2, 3], [4], [5, 6]], pad_id=9)
    assert ids.shape == mask.shape == (3, 3)
    assert ids.dtype == mask.dtype == torch.long
    assert ids.tolist() == [[1, 2, 3], [9, 9, 4], [9, 5, 6]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    assert ids[:, -1].tolist() == [3, 4, 6]  # every last token in the last column


def test_left_pad_pad_id_inside_a_sequence_stays_real():
    # the mask comes from lengths, not from comparing ids to the pad id
    ids, mask = left_pad([[9, 1], [2]], pad_id=9)
    assert ids.tolist() == [[9, 1], [9, 2]]
    assert mask.tolist() == [[1, 1], [0, 1]]


# -------------------------------------------------------------------------------------------- sampler
def take(sampler: PromptSampler, n: int) -> list[list[int]]:
    return [sampler.next_batch() for _ in range(n)]


def test_batches_within_an_epoch_are_disjoint():
    sampler = PromptSampler(num_items=11, batch_size=3, seed=1)
    assert sampler.batches_per_epoch == 3  # drop_last: 11 // 3
    epoch = take(sampler, 3)
    assert all(len(b) == 3 for b in epoch)
    flat = [i for b in epoch for i in b]
    assert len(set(flat)) == 9 and set(flat) <= set(range(11))
    assert sampler.state_dict() == {"epoch": 0, "batch_in_epoch": 3, "seed": 1, "num_items": 11, "batch_size": 3}
    sampler.next_batch()
    assert sampler.state_dict() == {"epoch": 1, "batch_in_epoch": 1, "seed": 1, "num_items": 11, "batch_size": 3}


def test_same_seed_same_order_different_seed_different():
    a = take(PromptSampler(20, 4, seed=7), 10)
    assert a == take(PromptSampler(20, 4, seed=7), 10)
    assert a != take(PromptSampler(20, 4, seed=8), 10)


def test_each_epoch_has_its_own_order():
    sampler = PromptSampler(20, 4, seed=7)
    epoch1, epoch2 = take(sampler, 5), take(sampler, 5)
    assert epoch1 != epoch2
    assert sorted(i for b in epoch1 for i in b) == sorted(i for b in epoch2 for i in b) == list(range(20))


@pytest.mark.parametrize("before", [0, 2, 3, 4])  # 3 batches per epoch: 3 saves exactly at an epoch end
def test_resume_continues_with_the_same_batches(before):
    reference = take(PromptSampler(10, 3, seed=5), before + 10)
    first = PromptSampler(10, 3, seed=5)
    assert take(first, before) == reference[:before]
    state = json.loads(json.dumps(first.state_dict()))  # survives a round trip through a checkpoint file
    resumed = PromptSampler(10, 3, seed=5)
    resumed.load_state_dict(state)
    assert take(resumed, 10) == reference[before:]  # 10 batches cross at least three epoch boundaries


def test_fewer_items_than_batch_size_raises():
    with pytest.raises(DataError, match=r"3 prompts.*data\.train_batch_size=4.*lower data\.train_batch_size to at "
                                        r"most 3"):
        PromptSampler(num_items=3, batch_size=4)


def test_seed_mismatch_on_load_raises():
    state = PromptSampler(10, 2, seed=1).state_dict()
    with pytest.raises(DataError, match="data.seed"):
        PromptSampler(10, 2, seed=2).load_state_dict(state)


def test_no_shuffle_is_arange_order():
    sampler = PromptSampler(7, 3, shuffle=False, seed=123)
    assert take(sampler, 5) == [[0, 1, 2], [3, 4, 5], [0, 1, 2], [3, 4, 5], [0, 1, 2]]


def test_sampler_refuses_a_state_from_other_data_or_batch_size():
    state = PromptSampler(20, 4, seed=1).state_dict()
    for other in (PromptSampler(24, 4, seed=1), PromptSampler(20, 5, seed=1)):
        with pytest.raises(DataError, match="resume with the same data and batch size"):
            other.load_state_dict(state)


def test_images_on_a_later_row_are_refused(tmp_path, tokenizer):
    path = tmp_path / "mixed.jsonl"
    rows = [{"prompt": "1+1="}, {"prompt": "2+2=", "images": ["x.png"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match="row 1: the row has images .* text-only model; train a vision-language"):
        PromptDataset(path, tokenizer)


# ------------------------------------------------------------------------------------------ validation cap
def test_val_max_samples_caps_validation_as_verl_does_and_a_large_validation_says_so(tiny, tokenizer, tmp_path,
                                                                                     caplog):
    """data.val_max_samples (verl's key): with data.shuffle the rows numpy's default_rng(data.seed) picks (verl's
    RLHFDataset), else the first ones; uncapped, a validation of more than 300 prompts says how many and the key."""
    import numpy as np

    from rft.explorer import Explorer, load_val_prompts
    from rft.trainer.configure import load_config

    path = tmp_path / "val.parquet"
    write_parquet(arithmetic_rows(301, seed=0, split="test"), path)
    questions = [p.extra_info["question"] for p in PromptDataset(path, tokenizer)]
    cfg = lambda *extra: load_config(None, [f"actor_rollout_ref.model.path={tiny}", f"data.val_files={path}",
                                            f"data.train_files={path}", "data.train_batch_size=4",
                                            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                            "trainer.total_training_steps=1", *extra], validate_paths=False)
    sampled = load_val_prompts(cfg("data.val_max_samples=5", "data.seed=3"), tokenizer)
    expected = np.random.default_rng(3).choice(301, size=5, replace=False).tolist()
    assert [p.extra_info["question"] for p in sampled] == [questions[i] for i in expected]
    first = load_val_prompts(cfg("data.val_max_samples=5", "data.shuffle=false"), tokenizer)
    assert [p.extra_info["question"] for p in first] == questions[:5]
    note = ("rft: note: each validation generates for all 301 prompts of data.val_files (x1 responses); set "
            "data.val_max_samples=N to validate on N of them")
    for extra, notes in ((["trainer.test_freq=10"], [note]), (["trainer.test_freq=-1", "trainer.val_before_train=false"], []),
                         (["trainer.test_freq=10", "data.val_max_samples=301"], [])):
        caplog.clear()
        with caplog.at_level("WARNING", logger="rft"):
            config = cfg(*extra)
            Explorer(config, tokenizer, None, None, None, load_val_prompts(config, tokenizer))
        assert caplog.messages == notes, extra


def test_val_files_own_prompt_and_response_columns(tokenizer, tmp_path):
    """data.val_prompt_keys / val_response_keys: each file read by its own columns (a null entry: the shared
    ones), the reference answer from the file's response column; a missing column names the per-file key."""
    from rft.config.load import ConfigError
    from rft.explorer.explorer import load_prompts, val_file_keys
    from rft.trainer.configure import load_config

    shared = write_jsonl([{"prompt": "What is 2+2?", "solution": "4"}], tmp_path / "a.jsonl")
    own = write_jsonl([{"question": "What is 3+3?", "answer": "6"}], tmp_path / "b.jsonl")
    base = ["actor_rollout_ref.model.path=m", f"data.train_files={shared}"]
    cfg = load_config(None, [*base, f"data.val_files=[{shared},{own}]", "data.response_key=solution",
                             "data.val_prompt_keys=[null,question]", "data.val_response_keys=[null,answer]"],
                      validate_paths=False)
    assert val_file_keys(cfg.data) == [{}, {"prompt_key": ("question", "data.val_prompt_keys[1]"),
                                            "response_key": ("answer", "data.val_response_keys[1]")}]
    ds = load_prompts(cfg, tokenizer, cfg.data.val_files, file_keys=val_file_keys(cfg.data))
    assert [p.ground_truth for p in ds.prompts] == ["4", "6"]
    assert [p.messages[-1]["content"] for p in ds.prompts] == ["What is 2+2?", "What is 3+3?"]
    with pytest.raises(DataError, match=r"data.val_prompt_keys\[0\]"):  # the first file has no 'question'
        PromptDataset([str(shared)], tokenizer, file_keys=[{"prompt_key": ("question", "data.val_prompt_keys[0]")}])
    with pytest.raises(ConfigError, match=r"data.val_prompt_keys has 1 entries for the 2 of data.val_files"):
        load_config(None, [*base, f"data.val_files=[{shared},{own}]", "data.val_prompt_keys=[question]"],
                    validate_paths=False)
