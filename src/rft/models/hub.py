"""Hugging Face Hub ids where a config names a model: `actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct`.

verl and TRL users name models by their Hub id, and a model they used before is already in the local Hugging Face
cache (`~/.cache/huggingface/hub`, `HF_HUB_CACHE`). Every key that names a model or a tokenizer folder says so in
its schema field (`model="policy" | "folder" | "tokenizer"`, or for a list of mappings the mapping key that does,
`model="list:model_path"`), and `resolve_hub_ids` replaces a value that is no local path but a Hub id (`org/name`)
by its snapshot folder in the cache (`huggingface_hub.snapshot_download`: from the cache alone with
`HF_HUB_OFFLINE=1`, else downloaded or updated first). It runs as the first check of every command that takes a
model (`rft.trainer.validate`), before any other check reads the folder, so the resolved folder is what the run
checks, loads, records in its config.yaml and resumes with: a resume whose id now resolves to another revision
(the cache's refs/main moved) is refused as a changed key, naming both snapshot folders, never trained on silently.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
)
from huggingface_hub.utils import HFValidationError, validate_repo_id

from rft.config.errors import ConfigError
from rft.config.validate import inactive_reason

log = logging.getLogger("rft")

TOKENIZER_FILES = ["*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.py"]
"""What a tokenizer key downloads of a Hub model (no weights)."""
NOT_FOR_TRANSFORMERS = ["*.onnx", "*.gguf", "*.h5", "*.msgpack", "*.ot", "*.tflite", "onnx/*", "original/*",
                        "openvino/*", "coreml/*"]
"""Files of a Hub model transformers does not load (other runtimes' weights): not downloaded."""


def is_hub_id(value: str) -> bool:
    """Whether `value` reads as a Hub model id (`org/name`) rather than a folder: one '/', no leading '.', '/' or
    '~', and the characters the Hub allows (`huggingface_hub.utils.validate_repo_id`)."""
    if value.count("/") != 1 or value.startswith((".", "/", "~")):
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def _offline() -> bool:
    """HF_HUB_OFFLINE (or transformers' TRANSFORMERS_OFFLINE), read when asked: a test or a caller may set it after
    huggingface_hub read its constants."""
    said = (os.environ.get(name, "").strip().upper() for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return constants.HF_HUB_OFFLINE or any(v in {"1", "ON", "YES", "TRUE"} for v in said)


def resolve_model(key: str, value: str | None, tokenizer: bool = False) -> str | None:
    """The local folder the config's `key` names: `value` itself when it is a path that exists or no Hub id (the
    folder checks say what is wrong with it), else the snapshot folder of the Hub model `value` in the local cache,
    downloaded first where the network is and offline mode is off (`tokenizer`: its tokenizer files only). A Hub
    model that cannot be had is one line naming the key, the id and what to do."""
    if not value or not isinstance(value, str) or Path(value).expanduser().exists() or not is_hub_id(value):
        return value
    offline = _offline()
    neither = f"{key}={value!r} is neither a model folder here nor a Hugging Face Hub model"
    try:
        folder = snapshot_download(value, local_files_only=offline,
                                   **({"allow_patterns": TOKENIZER_FILES} if tokenizer else
                                      {"ignore_patterns": NOT_FOR_TRANSFORMERS}))
    except GatedRepoError:
        raise ConfigError(f"{key}={value!r}: the Hugging Face Hub model is gated; accept its terms on huggingface.co "
                          f"and log in (`hf auth login`), or set {key} to a model folder") from None
    except RepositoryNotFoundError:
        raise ConfigError(f"{neither} this machine may read (a typo, or a private model: `hf auth login`); set {key} "
                          "to a model folder or a Hub id") from None
    except LocalEntryNotFoundError as e:
        cached = f"{neither} in the local cache ({constants.HF_HUB_CACHE})"
        if offline:
            raise ConfigError(f"{cached}, and HF_HUB_OFFLINE=1 forbids downloading it: set {key} to a model folder, "
                              f"or download the model where the network is (`hf download {value}`) or unset "
                              "HF_HUB_OFFLINE") from None
        cause = e.__cause__ or e  # the connection's own error, where huggingface_hub kept it
        reason = f"{type(cause).__name__}: {str(cause).strip().splitlines()[0][:200]}" if str(cause).strip() \
            else type(cause).__name__
        raise ConfigError(f"{cached}, and the Hub could not be reached ({reason}): set {key} to a model folder, or "
                          f"check the network (HF_ENDPOINT, a proxy), or download it first (`hf download {value}`)"
                          ) from None
    except HfHubHTTPError as e:
        raise ConfigError(f"{key}={value!r}: the Hugging Face Hub refused it ({str(e).splitlines()[0][:200]}); set "
                          f"{key} to a model folder, or try again") from None
    log.info("rft: %s=%s: the Hugging Face Hub model, revision %s in the local cache (%s)", key, value,
             Path(folder).name[:12], folder)
    return str(folder)


def resolve_hub_ids(cfg: Any, policy: bool = True, inactive: Mapping[str, str] | None = None, prefix: str = "") -> None:
    """Replace, in the typed config `cfg` (a schema dataclass), every model or tokenizer key's Hub id by its folder
    (`resolve_model`); `policy`: the trained model's key too (a later stage's starts from a folder not written yet);
    `inactive`: the keys of the parts the run does not build (`CheckContext.inactive`: a reward model while
    reward_model.enable=false, ...), left as they are, as their other checks leave them."""
    for f in dataclasses.fields(cfg):
        value, key, kind = getattr(cfg, f.name), f"{prefix}{f.name}", f.metadata.get("model")
        if inactive_reason(key, inactive or {}) is not None:
            continue
        if dataclasses.is_dataclass(value):
            resolve_hub_ids(value, policy, inactive, f"{key}.")
        elif kind in ("folder", "tokenizer") or (kind == "policy" and policy):
            setattr(cfg, f.name, resolve_model(key, value, tokenizer=kind == "tokenizer"))
        elif isinstance(kind, str) and kind.startswith("list:") and isinstance(value, list):
            name = kind.removeprefix("list:")
            for i, item in enumerate(value):
                if isinstance(item, dict) and name in item:
                    item[name] = resolve_model(f"{key}[{i}].{name}", item[name])
