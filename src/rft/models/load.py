"""Load policies, value models (critic) and reward models from local Hugging Face folders, attach LoRA through
peft, export a merged HF folder."""

from __future__ import annotations

import copy
import importlib
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rft.fsutil import atomic_dir, checked_write

log = logging.getLogger("rft")

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


COMPUTE_DEVICE_ATTR = "rft_compute_device"
"""Set on a sharded model whose parameters live in host memory (FSDP CPU offload) to the device it computes on."""


def device_of(model: nn.Module) -> torch.device:
    """The device `model` computes on, where its inputs go: that of its parameters, unless they are offloaded to host
    memory by FSDP (`COMPUTE_DEVICE_ATTR`)."""
    return getattr(model, COMPUTE_DEVICE_ATTR, None) or next(model.parameters()).device


def compute_dtype(requested: str, device: torch.device) -> torch.dtype:
    """The dtype rft computes in. On CPU that is float32 whatever a GPU config names: bf16 matmuls run ~500x
    slower than fp32 on CPU."""
    if device.type == "cpu":
        if requested not in ("auto", "float32", "fp32"):
            log.info("dtype %s requested; computing in float32 on CPU (bf16/fp16 matmuls are far slower there)",
                     requested)
        return torch.float32
    return _DTYPES.get(requested, torch.bfloat16)


def parse_module_list(value: Any) -> Any:
    """'all-linear' | '[q_proj,v_proj]' | ['q_proj', 'v_proj'] | a regex string -> what peft expects."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            return [x.strip().strip("'\"") for x in text[1:-1].split(",") if x.strip()]
        return text
    if value is None:
        return None
    return list(value)


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_tokenizer(path: str, trust_remote_code: bool = False):
    """The tokenizer of the folder `path` (pad = EOS when it has no pad token). A folder whose tokenizer is empty
    (transformers builds one from a folder without tokenizer files) or has no EOS token is an RftError naming the
    folder: the run would fail much later in a reshape."""
    from transformers import AutoTokenizer

    from rft.errors import RftError

    _quiet_transformers()
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if not set(tok.get_vocab()) - set(tok.all_special_tokens):  # special tokens only: built from nothing
        raise RftError(f"the tokenizer of {path!r} is empty (the folder has no tokenizer files): copy the model's "
                       "tokenizer files into it, or set data.tokenizer to a folder that has them")
    if tok.pad_token_id is None:
        if tok.eos_token is None:
            raise RftError(f"the tokenizer of {path!r} has neither an EOS nor a pad token, which generation needs to "
                           "end and pad responses; use a tokenizer that defines eos_token")
        tok.pad_token = tok.eos_token
    return tok


def _load_pretrained(auto_class, path: str, dtype: torch.dtype, device: torch.device, *,
                     external_lib: str | None, trust_remote_code: bool, override_config: dict | None, key: str,
                     **config_kwargs) -> nn.Module:
    """`auto_class.from_pretrained(path)` with `override_config` (and `config_kwargs`) set on its config."""
    from transformers import AutoConfig

    _quiet_transformers()
    if external_lib:
        importlib.import_module(external_lib)
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    for name, value in config_kwargs.items():  # set, not passed: from_pretrained drops names a config lacks
        setattr(config, name, value)
    overrides = dict(override_config or {})
    overrides.update(overrides.pop("model_config", None) or {})
    if overrides.pop("moe_config", None):
        raise ValueError(f"{key}.override_config.moe_config is Megatron-only; remove it")
    for name, value in overrides.items():
        if not hasattr(config, name):
            raise ValueError(f"{key}.override_config.{name}: the model config has no attribute {name!r}")
        setattr(config, name, value)
    model = auto_class.from_pretrained(path, config=config, dtype=dtype, trust_remote_code=trust_remote_code)
    return model.to(device)


def load_causal_lm(path: str, dtype: torch.dtype, device: torch.device, *, external_lib: str | None = None,
                   trust_remote_code: bool = False, override_config: dict | None = None,
                   key: str = "actor_rollout_ref.model") -> nn.Module:
    """A causal LM from the folder `path` with `override_config` applied, on `device` in `dtype`. `key` is the
    config section named in error messages."""
    from transformers import AutoModelForCausalLM

    return _load_pretrained(AutoModelForCausalLM, path, dtype, device, external_lib=external_lib,
                            trust_remote_code=trust_remote_code, override_config=override_config, key=key)


VALUE_HEAD = "score"
"""The module name of the scalar head of a value model (`*ForTokenClassification`) and of a reward model
(`*ForSequenceClassification`) in transformers' decoder classes."""


def load_value_model(path: str, dtype: torch.dtype, device: torch.device, *, external_lib: str | None = None,
                     trust_remote_code: bool = False, override_config: dict | None = None,
                     key: str = "critic.model") -> nn.Module:
    """A value model: `AutoModelForTokenClassification` with one label (verl's critic), i.e. the decoder backbone
    of the folder `path` with a Linear(hidden, 1) head `score` on every position's last hidden state. From a causal
    LM folder the backbone loads and the head is initialised (normal, std = initializer_range; bias 0); from a
    saved value model (an rft critic export) or a reward model (`score` without bias) the head loads too. Dropout
    before the head is off (classifier_dropout 0), so values are deterministic in train mode."""
    from transformers import AutoModelForTokenClassification

    return _load_pretrained(AutoModelForTokenClassification, path, dtype, device, external_lib=external_lib,
                            trust_remote_code=trust_remote_code, override_config=override_config, key=key,
                            num_labels=1, classifier_dropout=0.0)


def scalar_head(model: nn.Module, key: str) -> tuple[nn.Module, nn.Linear]:
    """(decoder backbone, Linear(hidden, 1) head) of a value or reward model, or ValueError naming `key`."""
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    head = getattr(model, VALUE_HEAD, None)
    if not isinstance(base, nn.Module) or not isinstance(head, nn.Linear) or head.out_features != 1:
        raise ValueError(
            f"{key}: {type(model).__name__} is not a decoder with a one-label `{VALUE_HEAD}` head; rft reads scores "
            "from score(last hidden state) of classes such as Qwen2ForSequenceClassification / "
            "LlamaForSequenceClassification with num_labels=1"
        )
    return base, head


def load_reward_model(path: str, dtype: torch.dtype, device: torch.device, *, external_lib: str | None = None,
                      trust_remote_code: bool = False, key: str = "reward_model.model") -> nn.Module:
    """A reward model: `AutoModelForSequenceClassification` with one label, frozen, in eval mode."""
    from transformers import AutoModelForSequenceClassification

    model = _load_pretrained(AutoModelForSequenceClassification, path, dtype, device, external_lib=external_lib,
                             trust_remote_code=trust_remote_code, override_config=None, key=key)
    scalar_head(model, f"{key}.path={path!r}")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def apply_lora(model: nn.Module, model_cfg, task_type: str = "CAUSAL_LM") -> nn.Module:
    """A peft LoRA adapter on `model` (rank, alpha, target / exclude modules from `model_cfg`). A value model
    (task_type TOKEN_CLS) keeps its new `score` head out of LoRA and trains it in full (peft's modules_to_save)."""
    from peft import LoraConfig, get_peft_model

    exclude = parse_module_list(model_cfg.exclude_modules)
    if task_type != "CAUSAL_LM":
        if exclude is None:
            exclude = [VALUE_HEAD]
        elif isinstance(exclude, str):
            exclude = f"(?:{exclude})|(?:(?:.*\\.)?{VALUE_HEAD})"
        else:
            exclude = [*exclude, VALUE_HEAD]
    lora = LoraConfig(
        r=model_cfg.lora_rank,
        lora_alpha=model_cfg.lora_alpha,
        target_modules=parse_module_list(model_cfg.target_modules),
        exclude_modules=exclude,
        lora_dropout=0.0,
        bias="none",
        task_type=task_type,
    )
    return get_peft_model(model, lora)


def load_trainable_model(path: str, model_cfg, dtype: torch.dtype, device: torch.device, key: str,
                         value_head: bool = False) -> nn.Module:
    """The model a trainer updates: `load_causal_lm` (or `load_value_model` with `value_head`), then gradient
    checkpointing and LoRA as `model_cfg` (the RL `actor_rollout_ref.model` / `critic.model` or the SFT `model`
    section) asks."""
    load = load_value_model if value_head else load_causal_lm
    model = load(path, dtype, device, external_lib=model_cfg.external_lib,
                 trust_remote_code=model_cfg.trust_remote_code, override_config=model_cfg.override_config, key=key)
    if model_cfg.enable_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if model_cfg.lora_rank > 0:
        model = apply_lora(model, model_cfg, task_type="TOKEN_CLS" if value_head else "CAUSAL_LM")
    return model


def is_peft(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "merge_and_unload")


def frozen_copy(model: nn.Module) -> nn.Module:
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def export_hf(model: nn.Module, tokenizer, out_dir: str | Path, merge_in_place: bool = False) -> Path:
    """Write a Hugging Face folder (LoRA merged) that `from_pretrained` loads; atomic."""
    out_dir = Path(out_dir)
    if is_peft(model):
        model = (model if merge_in_place else copy.deepcopy(model)).merge_and_unload()
    with atomic_dir(out_dir) as tmp:
        checked_write(lambda: model.save_pretrained(tmp, safe_serialization=True), tmp / "model.safetensors")
        tokenizer.save_pretrained(tmp)
    return out_dir
