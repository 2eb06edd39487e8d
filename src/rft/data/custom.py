"""verl's `data.custom_cls`: the prompts of a dataset class of the user's, defined in a Python file.

verl builds its RL datasets as `cls(data_files=..., tokenizer=..., processor=..., config=<the data section>)`, `cls`
the class `data.custom_cls.name` of the file `data.custom_cls.path`, a `torch.utils.data.Dataset`, for the training
files and the validation files alike (trainer/main_ppo.py: create_rl_dataset). rft builds them the same way
(`config` a DictConfig of the data section, as verl's; `processor` the model's processor for a vision-language
model, else None), then reads `dataset[i]` for every i < len(dataset) and makes prompts of those rows as of a
file's rows (`rft.data.dataset.PromptDataset`: chat template, truncation, overlong filter).

rft's row contract, what `__getitem__` returns: a mapping with the keys of a verl data file's row, before
tokenization:
* `prompt` (data.prompt_key): a chat message list [{role, content}, ...] or a string; required;
* `data_source`: which reward function scores the row (default "unknown");
* `reward_model`: {ground_truth: the reference answer the reward compares with};
* `extra_info`: a mapping, passed to the reward function;
* the images under data.image_key (a vision-language model), and the columns data.system_prompt_key,
  data.response_key and data.tools_key name when they are set (required then).
verl's own RLHFDataset returns tensors (input_ids, attention_mask, position_ids, ...): rft tokenizes the rows
itself, so a class written for verl returns the row it tokenizes instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rft.data.io import DataError, missing_column

CONTRACT = ("a mapping with the prompt (data.prompt_key: chat messages [{role, content}, ...] or a string) and "
            "optionally data_source, reward_model {ground_truth}, extra_info, as a verl data file's row before "
            "tokenization (docs/data.md)")


def dataset_class(path: str, name: str) -> type:
    """The class `name` of the Python file `path`, a torch.utils.data.Dataset (as verl requires)."""
    from torch.utils.data import Dataset

    from rft.userfile import load_user_module

    module = load_user_module(path, "data.custom_cls.path", "rft_dataset", DataError)
    cls = getattr(module, name, None)
    if cls is None:
        raise DataError(f"data.custom_cls.name: {path!r} defines no {name!r}; classes it defines: "
                        f"{', '.join(_classes(module)) or '(none)'}")
    if not isinstance(cls, type) or not issubclass(cls, Dataset):
        raise DataError(f"data.custom_cls.name: {name!r} in {path!r} is not a subclass of torch.utils.data.Dataset "
                        "(verl's requirement for a custom dataset class)")
    return cls


def _classes(module) -> list[str]:
    return sorted(k for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__)


def custom_rows(data: Any, files: Any, tokenizer, processor=None) -> tuple[str, list[dict]]:
    """(a name for messages, the rows) of data.custom_cls's dataset over `files` (data.train_files or val_files),
    every row checked against rft's row contract (module docstring)."""
    from omegaconf import OmegaConf

    spec = data.custom_cls
    cls = dataset_class(spec.path, spec.name)
    where = f"data.custom_cls {spec.name} ({spec.path})"
    config = OmegaConf.create(OmegaConf.to_container(OmegaConf.structured(data)))
    try:
        dataset = cls(data_files=files, tokenizer=tokenizer, processor=processor, config=config)
        rows = [dataset[i] for i in range(len(dataset))]
    except Exception as e:
        raise DataError(f"{where} raised {type(e).__name__}: {' '.join(str(e).split())[:200]}; fix the class or "
                        f"its files ({files!r})") from e
    if not rows:
        raise DataError(f"{where} over {files!r} has no rows")
    required = {data.prompt_key: "data.prompt_key", data.system_prompt_key: "data.system_prompt_key",
                data.response_key: "data.response_key", data.tools_key: "data.tools_key"}
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise DataError(f"{where}: row {i} is a {type(row).__name__}; rft's row contract: {CONTRACT}")
        for key, what in required.items():
            if key is not None and key not in row:
                missing = missing_column(f"{where}: row {i}", key, what, row)
                raise DataError(f"{missing}; rft's row contract: {CONTRACT}")
    return where, [dict(row) for row in rows]
