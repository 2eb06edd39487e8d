"""verl's data.custom_cls: a dataset class from a file, built as verl builds it (data_files, tokenizer, processor,
config), its rows made prompts as a file's are; a class that does not keep rft's row contract is one line naming the
class and what is missing, before the model loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import rft_here
from rl_helpers import make_assets, rl_config

from rft.config import ConfigError
from rft.trainer.configure import load_config

ROWS = '''
import json
from pathlib import Path

import pyarrow.parquet as pq
from torch.utils.data import Dataset


class Rows(Dataset):
    """The arithmetic rows with the question worded its own way; what verl handed it is written beside the file."""

    def __init__(self, data_files, tokenizer, config, processor=None):
        files = [data_files] if isinstance(data_files, str) else list(data_files)
        self.rows = [r for f in files for r in pq.read_table(f).to_pylist()]
        seen = Path(__file__).with_suffix(".seen.jsonl")
        with seen.open("a") as f:
            f.write(json.dumps({"data_files": data_files, "tokenizer": type(tokenizer).__name__,
                                "max_prompt_length": config.get("max_prompt_length"),
                                "prompt_key": config.prompt_key, "processor": processor}) + "\\n")

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        return {"prompt": "Q: " + r["extra_info"]["question"], "data_source": r["data_source"],
                "reward_model": {"ground_truth": r["extra_info"]["answer"]}, "extra_info": {"index": i}}


class TokenizedRows(Rows):
    """What verl's RLHFDataset returns: tensors, not rft's row."""

    def __getitem__(self, i):
        import torch

        return {"input_ids": torch.tensor([1, 2, 3]), "attention_mask": torch.tensor([1, 1, 1])}


class Broken(Dataset):
    def __init__(self, data_files, tokenizer, config, processor=None):
        raise FileNotFoundError("no such table: questions")


class Plain:
    def __init__(self, data_files, tokenizer, config, processor=None):
        pass
'''


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = make_assets(tmp_path_factory.mktemp("custom_cls"))
    (root / "rows.py").write_text(ROWS)
    return root


def test_the_class_is_built_as_verl_builds_it_and_its_rows_are_the_prompts(assets, tmp_path):
    from rft.explorer import load_tasksets
    from rft.models.load import load_tokenizer

    (assets / "rows.seen.jsonl").unlink(missing_ok=True)
    cfg = rl_config(assets, tmp_path, f"data.custom_cls.path={assets / 'rows.py'}", "data.custom_cls.name=Rows",
                    with_val=True)
    taskset, val_set = load_tasksets(cfg, load_tokenizer(str(assets / "model")))
    train = [json.loads(x) for x in (assets / "rows.seen.jsonl").read_text().splitlines()]
    assert train == [{"data_files": str(assets / "data" / f"{split}.parquet"), "tokenizer": train[0]["tokenizer"],
                      "max_prompt_length": 32, "prompt_key": "prompt", "processor": None}
                     for split in ("train", "val")]
    assert (len(taskset.dataset), len(val_set)) == (64, 8)
    first = taskset.dataset[0]
    from rft.data.io import read_rows

    row = read_rows(assets / "data" / "train.parquet")[0]
    assert first.messages == [{"role": "user", "content": "Q: " + row["extra_info"]["question"]}]
    assert (first.ground_truth, first.data_source, first.extra_info) == (row["extra_info"]["answer"], "arithmetic",
                                                                         {"index": 0})
    assert first.origin == f"data.custom_cls Rows ({assets / 'rows.py'}) row 0"


def test_the_example_class_words_the_questions_its_own_way(assets, tmp_path):
    from rft.explorer import load_tasksets
    from rft.models.load import load_tokenizer

    example = Path(__file__).resolve().parents[1] / "examples" / "datasets" / "question_answer.py"
    cfg = rl_config(assets, tmp_path, f"data.custom_cls.path={example}", "data.custom_cls.name=QuestionAnswer",
                    "data.max_prompt_length=96")
    taskset, _ = load_tasksets(cfg, load_tokenizer(str(assets / "model")))
    first = taskset.dataset[0]
    question = first.extra_info["question"]
    assert first.messages == [{"role": "user", "content": f"Compute {question} Reply with the number only."}]
    assert first.ground_truth == str(sum(int(x) for x in question.rstrip("=").split("+")))  # rft data's additions


def _bad_model(assets: Path, root: Path) -> Path:
    """The tiny model with its weights cut off after their header (which the config checks read): a run that
    loaded them would fail on them, not on the data."""
    import struct

    model = root / "model"
    shutil.copytree(assets / "model", model)
    weights = (model / "model.safetensors").read_bytes()
    header = 8 + struct.unpack("<Q", weights[:8])[0]
    (model / "model.safetensors").write_bytes(weights[:header + 16])
    return model


@pytest.mark.parametrize("name, line", [
    ("TokenizedRows", "rft: error: data.custom_cls TokenizedRows ({path}): row 0: no column 'prompt' (data.prompt_key); "
                      "the rows have the columns attention_mask, input_ids: set data.prompt_key=<one of them>; "
                      "rft's row contract: a mapping with the prompt "
                      "(data.prompt_key: chat messages [{{role, content}}, ...] or a string) and optionally "
                      "data_source, reward_model {{ground_truth}}, extra_info, as a verl data file's row before "
                      "tokenization (docs/data.md)"),
    ("Broken", "rft: error: data.custom_cls Broken ({path}) raised FileNotFoundError: no such table: questions; fix "
               "the class or its files ("),
    ("Plain", "rft: error: data.custom_cls.name: 'Plain' in '{path}' is not a subclass of torch.utils.data.Dataset "
              "(verl's requirement for a custom dataset class)"),
    ("Missing", "rft: error: data.custom_cls.name: '{path}' defines no 'Missing'; classes it defines: Broken, Plain, "
                "Rows, TokenizedRows"),
])
def test_a_class_that_breaks_the_row_contract_is_one_line_before_the_model_loads(assets, tmp_path, name, line):
    model = _bad_model(assets, tmp_path)
    proc = rft_here("train", f"actor_rollout_ref.model.path={model}",
                    f"data.train_files={assets / 'data' / 'train.parquet'}",
                    f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
                    "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                    "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path / 'out'}",
                    f"data.custom_cls.path={assets / 'rows.py'}", f"data.custom_cls.name={name}",
                    cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("rft: error:")]
    assert len(errors) == 1 and errors[0].startswith(line.format(path=assets / "rows.py")), errors


@pytest.mark.parametrize("overrides, message", [
    (["data.custom_cls.path=rows.py"], "data.custom_cls.path='rows.py' needs data.custom_cls.name"),
    (["data.custom_cls.name=Rows"], "data.custom_cls.name='Rows' needs data.custom_cls.path"),
    (["data.custom_cls.path=rows.py", "data.custom_cls.name=Rows", "data.task_storage=sql",
      "data.train_files=sqlite:///tasks.db"], "data.custom_cls reads data.train_files through its class, so it needs "
                                             "data.task_storage=file, got 'sql'"),
])
def test_an_incomplete_custom_cls_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, ["actor_rollout_ref.model.path=m", "data.train_files=t.parquet", *overrides],
                    validate_paths=False)


def test_the_files_are_the_classs_to_read(assets):
    """A class reads what it likes: data.train_files need not be parquet / jsonl (verl hands them on as they are)."""
    cfg = load_config(None, [f"actor_rollout_ref.model.path={assets / 'model'}", "data.train_files=questions.csv",
                             f"data.custom_cls.path={assets / 'rows.py'}", "data.custom_cls.name=Rows"])
    assert cfg.data.train_files == "questions.csv"
    with pytest.raises(ConfigError, match="data.custom_cls.path: 'rows.txt' is not a Python file"):
        load_config(None, [f"actor_rollout_ref.model.path={assets / 'model'}", "data.train_files=questions.csv",
                           "data.custom_cls.path=rows.txt", "data.custom_cls.name=Rows"])
