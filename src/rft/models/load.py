"""Load policies, value models (critic) and reward models from local Hugging Face folders, attach LoRA through
peft, export a merged HF folder."""

from __future__ import annotations

import copy
import functools
import importlib
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rft.fsutil import atomic_dir, checked_write
from rft.models.arch import VALUE_HEADS, path_key

log = logging.getLogger("rft")

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


SAVED_DTYPE_ATTR = "_rft_saved_dtype"
"""Set on a loaded model to the dtype its folder holds its weights in (None when the config does not say)."""


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


def compute_dtype(requested: str, device: torch.device, model: str | None = None, key: str | None = None
                  ) -> torch.dtype:
    """The dtype a model that only generates is loaded and computes in: `requested` where this hardware computes it
    fast, else float32 (`rft.models.precision.choose`, by `model`'s shapes where given, with `key` the config key
    that names it; the trainer's start line says which)."""
    from rft.models.precision import choose, describe

    choice = choose(requested, device, model, key)
    log.debug("rft: %s", describe({"rollout": choice}))
    return choice.dtype


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
    """The tokenizer of the folder `path`, with a pad token (`choose_pad_token` when it has none; said in the log,
    as a missing chat template is). A folder whose tokenizer is empty (transformers builds one from a folder without
    tokenizer files) or has no EOS token is an RftError naming the folder: the run would fail much later in a
    reshape."""
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
        tok.pad_token = choose_pad_token(tok)
        log.info("the tokenizer of %s has no pad token; padding with %r (id %d)%s", path, tok.pad_token,
                 tok.pad_token_id, " (its EOS: it has no other special token)" if tok.pad_token == tok.eos_token
                 else "")
    if not getattr(tok, "chat_template", None):  # verl's apply_chat_template would stop; rft renders plain text
        log.info("the tokenizer of %s has no chat template; chat messages are rendered as plain text, a base "
                 "model's completion style (docs/models.md), unless the config gives a template "
                 "(data.chat_template)", path)
    return tok


def choose_pad_token(tok) -> str:
    """A pad token for a tokenizer without one (Llama 3, Mistral, GPT-2): its `unk_token`, else a special token
    named for padding (Llama 3's `<|finetune_right_pad_id|>`), else an end-of-text token that is not the EOS, else
    an unused reserved special token, else EOS.
    Not EOS where another exists, so that no pass that tells padding by its id can mask a real EOS away (rft's
    masks come from lengths, but exported models and other tools meet the choice too)."""
    eos = {tok.eos_token_id}
    specials = [t for t in tok.all_special_tokens if tok.convert_tokens_to_ids(t) not in eos]
    added = [t.content for t in getattr(tok, "added_tokens_decoder", {}).values() if getattr(t, "special", False)]
    added = [t for t in added if tok.convert_tokens_to_ids(t) not in eos]
    if tok.unk_token is not None and tok.unk_token_id not in eos:
        return tok.unk_token
    for names in (("pad",), ("endoftext", "end_of_text")):  # Qwen pads with <|endoftext|>
        for token in [*specials, *added]:
            if any(name in token.lower() for name in names):
                return token
    reserved = [t for t in added if "reserved" in t.lower()]
    return reserved[0] if reserved else tok.eos_token


def _load_pretrained(auto_class, path: str, dtype: torch.dtype, device: torch.device, *,
                     external_lib: str | None, trust_remote_code: bool, override_config: dict | None, key: str,
                     decoder: bool = False, tokenizer=None, **config_kwargs) -> nn.Module:
    """`auto_class.from_pretrained(path)` with `override_config` (and `config_kwargs`) set on its config.
    `decoder`: refuse a model that is not a causal decoder (`check_causal_config`, then `check_causal` on the
    loaded model); `tokenizer`: refuse one with ids past the embedding (`check_vocab`). A torchvision that
    does not load beside this torch (`errors.broken_torch_companion`) is one line too."""
    from rft.errors import ModelError, broken_torch_companion

    try:
        return _load_checked(auto_class, path, dtype, device, external_lib=external_lib,
                             trust_remote_code=trust_remote_code, override_config=override_config, key=key,
                             decoder=decoder, tokenizer=tokenizer, **config_kwargs)
    except ModelError:
        raise
    except Exception as e:
        companion = broken_torch_companion(e)
        if companion:
            raise ModelError(f"{path_key(key)}={path!r} does not load: {companion}") from e
        raise


def _load_checked(auto_class, path: str, dtype: torch.dtype, device: torch.device, *,
                  external_lib: str | None, trust_remote_code: bool, override_config: dict | None, key: str,
                  decoder: bool, tokenizer, **config_kwargs) -> nn.Module:
    from rft.errors import ModelError

    _quiet_transformers()
    if external_lib:
        try:
            importlib.import_module(external_lib)
        except ImportError as e:  # the module, or one it imports, is not installed: the user's setting, not a bug
            raise ModelError(f"{key}.external_lib={external_lib!r} does not import ({type(e).__name__}: {e}); "
                             "install it, or put its folder on PYTHONPATH") from None
    config = read_model_config(path, key, trust_remote_code)
    for name, value in config_kwargs.items():  # set, not passed: from_pretrained drops names a config lacks
        setattr(config, name, value)
    overrides = dict(override_config or {})
    overrides.update(overrides.pop("model_config", None) or {})
    moe = overrides.pop("moe_config", None)  # verl's Megatron MoE switches: accepted only all false / null
    if moe and not (isinstance(moe, dict) and not any(moe.values())):
        raise ModelError(f"{key}.override_config.moe_config={moe!r} is Megatron-only; remove it")
    for name, value in overrides.items():
        if not hasattr(config, name):
            raise ModelError(f"{key}.override_config.{name}: the model config has no attribute {name!r}")
        setattr(config, name, value)
    if decoder:
        check_causal_config(config, path, key, trust_remote_code)
        if auto_class.__name__ == "AutoModelForCausalLM":
            check_lm_head(config, path, key)
    if tokenizer is not None:
        check_vocab(config, tokenizer, path, key)
    check_weight_files(path, key)
    saved = getattr(config, "dtype", None)
    model_class = auto_class if trust_remote_code else head_class(auto_class, config)
    model = model_class.from_pretrained(path, config=config, dtype=dtype, trust_remote_code=trust_remote_code)
    saved = _DTYPES.get(str(saved).removeprefix("torch."))
    if saved is not None and saved != dtype:
        # only a trainer exports (load_trainable_model says so); generation, scoring, the reference model do not
        log.info("%s is saved in %s; computing in %s", path, str(saved).removeprefix("torch."),
                 str(dtype).removeprefix("torch."))
    setattr(model, SAVED_DTYPE_ATTR, saved)
    model = model.to(device)
    if decoder:
        check_causal(model, path, key)
    return model


def model_identity(path: str, tokenizer) -> dict | None:
    """What experiences depend on in a model, wherever its folder lies: its shape from config.json (the text
    model's, for a vision-language one) and a SHA-256 of its tokenizer's vocabulary (token -> id); None for a
    folder without a readable config.json."""
    import hashlib
    import json

    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    vocab = sorted(tokenizer.get_vocab().items())
    return {"model_type": config.get("model_type"), "vocab_size": text.get("vocab_size", config.get("vocab_size")),
            "hidden_size": text.get("hidden_size"), "num_hidden_layers": text.get("num_hidden_layers"),
            "tokenizer": hashlib.sha256(json.dumps(vocab).encode()).hexdigest()}


def read_model_config(path: str, key: str, trust_remote_code: bool):
    """The transformers config of the folder `path` (`rft.config.checks.read_config_json`, as the config's checks
    read it). One that names code of its own (`auto_map` in config.json for a model_type transformers does not
    know) while `<key>.trust_remote_code` is false, and one transformers cannot read, are `ModelError`s naming the
    folder and what to set: the config's checks say the second first, this is the backstop of library use."""
    from rft.config.checks import ConfigJsonError, read_config_json
    from rft.errors import ModelError

    try:
        return read_config_json(Path(path).expanduser(), trust_remote_code)
    except ConfigJsonError as e:
        if e.remote_code:
            raise ModelError(f"{path_key(key)}={path!r}: its config.json {e}, which transformers runs only "
                             f"with {key}.trust_remote_code=true; set that if you trust the code in {path!r}, or "
                             "use a model transformers has built in") from None
        raise ModelError(f"{path_key(key)}={path!r}: its config.json {e}; fix it, or copy or download the "
                         "model again") from None


def _architecture_name(config) -> str:
    names = getattr(config, "architectures", None) or []
    return f"{names[0]} (model_type {config.model_type!r})" if names else f"a {config.model_type!r} model"


NOT_CAUSAL = ("rft trains decoder-only causal LMs (Qwen2, Llama, Mistral, Gemma, GPT-2, ...), whose every "
              "position sees only those before it; choose such a model")


def check_causal_config(config, path: str, key: str, trust_remote_code: bool) -> None:
    """What the config tells before any weight loads: an encoder-decoder (T5, BART) or a model transformers
    has no causal-LM class for is a `ModelError` naming the folder and the architecture."""
    from transformers import AutoModelForCausalLM

    from rft.errors import ModelError

    if getattr(config, "is_encoder_decoder", False):
        raise ModelError(f"{path_key(key)}={path!r} is {_architecture_name(config)}, an encoder-decoder "
                         f"(sequence-to-sequence) model, not a causal decoder: {NOT_CAUSAL}")
    from transformers import AutoModelForImageTextToText

    from rft.models.vision import is_vision_config

    remote = trust_remote_code and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {})
    if is_vision_config(config) and type(config) in AutoModelForImageTextToText._model_mapping:
        return  # a vision-language model: a causal decoder over its text and image tokens
    if not remote and type(config) not in AutoModelForCausalLM._model_mapping:
        raise ModelError(f"{path_key(key)}={path!r} is {_architecture_name(config)}, which transformers has "
                         f"no causal language model class for: {NOT_CAUSAL}")


SCORE_HEADS = ("ForSequenceClassification", "ForTokenClassification")


def check_lm_head(config, path: str, key: str) -> None:
    """A reward or value model's folder (only *ForSequenceClassification / *ForTokenClassification
    architectures) loaded as a causal LM: its weights hold a score head, not an LM head. Untied
    (tie_word_embeddings false, as in Llama, Mistral, Gemma 2's configs), the LM head would be random weights;
    tied, the embeddings read through layers trained to score, not to predict tokens. Either generates noise
    without an error: a `ModelError` naming the folder, before its weights load."""
    from rft.errors import ModelError

    names = [n for n in getattr(config, "architectures", None) or [] if isinstance(n, str)]
    if not names or not all(n.endswith(SCORE_HEADS) for n in names):
        return
    text = getattr(config, "text_config", None) or config
    tied = getattr(text, "tie_word_embeddings", True)
    head = ("tie_word_embeddings is true: it would be the embeddings, read through layers trained to score" if tied
            else "tie_word_embeddings is false: it would be random weights")
    raise ModelError(f"{path_key(key)}={path!r} is {_architecture_name(config)}, a reward or value model: its "
                     f"weights hold a score head, not the LM head a causal LM generates with ({head}); point it at "
                     "a causal LM folder (the model the reward model was trained from, or a generative judge)")


@torch.no_grad()
def check_causal(model: nn.Module, path: str, key: str) -> None:
    """Asked of the loaded model, as a config cannot tell (BERT's and GPT-NeoX's configs both say
    is_decoder=false): two sequences that share their first two tokens must give those two positions the same
    outputs. A bidirectional encoder loaded through a causal-LM head (BertLMHeadModel) sees the later tokens
    there and is a `ModelError`; it would train and export without an error and never generate. A model whose
    forward pass needs more than token ids is not checked."""
    from rft.errors import ModelError

    was = model.training
    model.eval()
    try:
        vocab = model.get_input_embeddings().weight.shape[0]
        device = device_of(model)
        shared = [11, 12]
        outs = [model(input_ids=torch.tensor([shared + tail], device=device) % vocab).logits.float()
                for tail in ([13, 14, 15, 16], [40, 41, 42, 43])]
    except Exception:  # a forward pass that needs more (pixel values, ...): nothing to tell from
        return
    finally:
        model.train(was)
    diff = (outs[0] - outs[1]).abs().flatten(2).amax(-1)[0]
    if float(diff[:2].max()) > 1e-3 * float(diff[2:].max()):
        config = model.config
        raise ModelError(f"{path_key(key)}={path!r} is {_architecture_name(config)}, loaded as "
                         f"{type(model).__name__}: an encoder whose positions see the tokens after them, "
                         f"not a causal decoder (is_decoder={getattr(config, 'is_decoder', None)}): "
                         f"{NOT_CAUSAL}")


def check_vocab(config, tokenizer, path: str, key: str) -> None:
    """A tokenizer with token ids past the model's embedding (vocab_size rows) is a `ModelError` naming both
    sizes, before the weights load: those ids would fail in the first forward pass ('index out of range in
    self'). An embedding larger than the tokenizer (Qwen pads its own) is fine."""
    from rft.errors import ModelError

    rows = getattr(getattr(config, "text_config", None) or config, "vocab_size", None)
    ids = tokenizer.get_vocab().values()
    top = max(ids) + 1 if ids else 0
    if isinstance(rows, int) and top > rows:
        where = getattr(tokenizer, "name_or_path", "") or "the run's"
        raise ModelError(f"the tokenizer {where!r} has token ids up to {top - 1} ({top} ids), more than the "
                         f"{rows} rows of the embedding of {path_key(key)}={path!r} (vocab_size {rows}): ids "
                         f"from {rows} up would fail in the model; set data.tokenizer to the model's own "
                         "tokenizer, or resize the model's embeddings to the tokenizer "
                         "(resize_token_embeddings) and save it")


def check_weight_files(path: str, key: str) -> None:
    """The safetensors files of the folder `path` are whole: each header reads and covers its file, and every
    shard the index names exists. A truncated download or copy is a `ModelError` naming the file, before any
    loads."""
    import json

    from safetensors import safe_open

    from rft.errors import ModelError

    folder = Path(path).expanduser()
    if not folder.is_dir():
        return
    index = folder / "model.safetensors.index.json"
    names = set()
    if index.is_file():
        try:
            names = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"{path_key(key)}={path!r}: {index.name} is damaged ({e}); copy or download the "
                             "model again") from None
    elif (folder / "model.safetensors").is_file():
        names = {"model.safetensors"}
    again = "copy or download the model again"
    for name in sorted(names):
        file = folder / name
        if not file.is_file():
            raise ModelError(f"{path_key(key)}={path!r}: {name}, which {index.name} lists, is missing; "
                             f"{again}")
        try:
            with safe_open(str(file), "pt") as f:
                f.keys()
        except Exception as e:
            said = " ".join(str(e).split())[:120]
            if isinstance(e, MemoryError) or "os error 12" in said:  # ENOMEM from its mmap, not a bad file
                from rft.runtime import available_memory, human_bytes

                free = available_memory()
                machine = f"this machine ({human_bytes(free)} free now)" if free is not None else "this machine"
                raise ModelError(
                    f"{path_key(key)}={path!r}: {name} ({human_bytes(file.stat().st_size)}) could not be mapped "
                    f"into memory ({said}): {machine} or this process's limit (ulimit -v) leaves too little memory "
                    "for the model; free memory, raise the limit, or use a smaller model") from None
            raise ModelError(f"{path_key(key)}={path!r}: {name} is damaged or incomplete "
                             f"({file.stat().st_size:,} bytes; {said}); {again}") from None


def head_class(auto_class, config):
    """The class `auto_class` (an `AutoModelFor...` class) loads for `config`. For a decoder whose family has no
    token- or sequence-classification class in transformers (Cohere, Granite, OLMo, OPT, ...), the same class built
    the way transformers builds those it has: its generic head (`GenericForTokenClassification` /
    `GenericForSequenceClassification`: a `score` Linear on the backbone's hidden states) on the family's
    pretrained-model base, so a value or reward model exists for every causal LM; a vision-language family's value
    model is `vision_value_class`'s."""
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )
    from transformers.modeling_layers import GenericForSequenceClassification, GenericForTokenClassification
    from transformers.modeling_utils import PreTrainedModel

    from rft.models.vision import is_vision_config

    if auto_class is AutoModelForCausalLM and is_vision_config(config):
        from transformers import AutoModelForImageTextToText

        if type(config) in AutoModelForImageTextToText._model_mapping:  # the family's image-text-to-text class
            return AutoModelForImageTextToText
    if auto_class is AutoModelForTokenClassification and is_vision_config(config):
        return vision_value_class(config) or auto_class
    generic = {AutoModelForTokenClassification: (GenericForTokenClassification, "ForTokenClassification"),
               AutoModelForSequenceClassification: (GenericForSequenceClassification, "ForSequenceClassification")}
    if auto_class not in generic or type(config) in auto_class._model_mapping:
        return auto_class
    if type(config) not in AutoModelForCausalLM._model_mapping:
        return auto_class  # not a causal LM either: auto_class's own error names the config
    causal = AutoModelForCausalLM._model_mapping[type(config)]
    base = next((c for c in causal.__mro__[1:] if issubclass(c, PreTrainedModel) and c is not PreTrainedModel
                 and c.__name__.endswith("PreTrainedModel")), None)
    if base is None:
        return auto_class
    mixin, suffix = generic[auto_class]
    name = causal.__name__.removesuffix("ForCausalLM").removesuffix("LMHeadModel") + suffix
    return type(name, (mixin, base), {"__module__": causal.__module__})


def vision_value_class(config):
    """The value-model class of a vision-language config (None when transformers has no image-text-to-text class
    for it): transformers' generic token-classification head (`score`, Linear(text hidden, labels), on the last
    hidden states) over the family's backbone (`AutoModel`: its vision tower, projector and language model, the
    `model` of its `...ForConditionalGeneration`), built as `head_class` builds one for a text family without a
    token-classification class. It reads a folder of the policy's as its image-text-to-text class does: the
    family's renaming of older checkpoints' weight names (Qwen2-VL's `visual.` and `model.layers.`) is registered
    for it too."""
    from transformers import AutoModelForImageTextToText
    from transformers.conversion_mapping import (
        get_checkpoint_conversion_mapping,
        register_checkpoint_conversion_mapping,
    )
    from transformers.modeling_layers import GenericForTokenClassification
    from transformers.modeling_utils import PreTrainedModel

    policy = AutoModelForImageTextToText._model_mapping.get(type(config), None)
    if policy is None:
        return None
    base = next((c for c in policy.__mro__[1:] if issubclass(c, PreTrainedModel) and c is not PreTrainedModel
                 and c.__name__.endswith("PreTrainedModel")), None)
    if base is None or base.base_model_prefix != GenericForTokenClassification.base_model_prefix:
        return None
    name = policy.__name__.removesuffix("ForConditionalGeneration") + "ForTokenClassification"
    renames = get_checkpoint_conversion_mapping(policy.__name__)
    if renames:
        register_checkpoint_conversion_mapping(name, renames, overwrite=True)
    return type(name, (GenericForTokenClassification, base), {"__module__": policy.__module__})


def load_causal_lm(path: str, dtype: torch.dtype, device: torch.device, *, external_lib: str | None = None,
                   trust_remote_code: bool = False, override_config: dict | None = None,
                   key: str = "actor_rollout_ref.model", tokenizer=None) -> nn.Module:
    """A causal LM from the folder `path` with `override_config` applied, on `device` in `dtype`. `key` is the
    config section named in error messages; `tokenizer`, the one the run encodes with (its ids checked against
    the embedding). Not a causal decoder (BERT, T5): a `ModelError`."""
    from transformers import AutoModelForCausalLM

    from rft.models.arch import router_recorder
    from rft.models.vision import attach, vision_for

    model = _load_pretrained(AutoModelForCausalLM, path, dtype, device, external_lib=external_lib,
                             trust_remote_code=trust_remote_code, override_config=override_config, key=key,
                             decoder=True, tokenizer=tokenizer)
    vision = vision_for(path, key)
    if vision is not None:  # its processor beside it: the passes over image tokens need the pixels
        attach(model, vision)
    router_recorder(model)  # a mixture of experts: its load-balancing loss recorded by rft (models/arch.py)
    return model


def load_value_model(path: str, dtype: torch.dtype, device: torch.device, *, external_lib: str | None = None,
                     trust_remote_code: bool = False, override_config: dict | None = None,
                     key: str = "critic.model", tokenizer=None) -> nn.Module:
    """A value model: `AutoModelForTokenClassification` with one label (verl's critic), i.e. the decoder backbone
    of the folder `path` with a Linear(hidden, 1) head `score` on every position's last hidden state. From a causal
    LM folder the backbone loads and the head is initialised (normal, std = initializer_range; bias 0); from a
    saved value model (an rft critic export) or a reward model (`score` without bias) the head loads too. Dropout
    before the head is off (classifier_dropout 0), so values are deterministic in train mode. Checked as
    `load_causal_lm` checks. A vision-language folder: the family's backbone with the same head
    (`vision_value_class`), its processor attached as the policy's is (its passes get the rows' pixels)."""
    from transformers import AutoModelForTokenClassification

    from rft.models.vision import attach, vision_for

    model = _load_pretrained(AutoModelForTokenClassification, path, dtype, device, external_lib=external_lib,
                             trust_remote_code=trust_remote_code, override_config=override_config, key=key,
                             decoder=True, tokenizer=tokenizer, num_labels=1, classifier_dropout=0.0)
    vision = vision_for(path, key)
    if vision is not None:  # a vision-language value model: its passes get the pixels as the policy's do
        attach(model, vision)
    return model


def scalar_head(model: nn.Module, key: str) -> tuple[nn.Module, nn.Linear]:
    """(decoder backbone, Linear(hidden, 1) head) of a value or reward model, or ValueError naming `key`."""
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    head = next((getattr(model, name) for name in VALUE_HEADS if isinstance(getattr(model, name, None), nn.Linear)),
                None)
    if not isinstance(base, nn.Module) or head is None or head.out_features != 1:
        raise ValueError(
            f"{key}: {type(model).__name__} is not a decoder with a one-label `score` head; rft reads scores "
            "from score(last hidden state) of classes such as Qwen2ForSequenceClassification / "
            "LlamaForSequenceClassification with num_labels=1"
        )
    return base, head


def load_reward_model(path: str, dtype: torch.dtype, device: torch.device, *, external_lib: str | None = None,
                      trust_remote_code: bool = False, key: str = "reward_model.model", tokenizer=None) -> nn.Module:
    """A reward model: `AutoModelForSequenceClassification` with one label, frozen, in eval mode. `tokenizer`:
    the one whose ids it reads (checked against its embedding)."""
    from transformers import AutoModelForSequenceClassification

    model = _load_pretrained(AutoModelForSequenceClassification, path, dtype, device, external_lib=external_lib,
                             trust_remote_code=trust_remote_code, override_config=None, key=key, tokenizer=tokenizer)
    scalar_head(model, f"{path_key(key)}={path!r}")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def load_reward_backbone(path: str, dtype: torch.dtype, device: torch.device, *, external_lib: str | None = None,
                         trust_remote_code: bool = False, override_config: dict | None = None, key: str = "model",
                         tokenizer=None) -> nn.Module:
    """A reward model to train (`rft rm`): `AutoModelForSequenceClassification` with one label. From a causal LM
    folder the backbone loads and the head `score` is initialised (transformers' init, std initializer_range); from
    a reward model the head loads too. Its config's pad_token_id is the tokenizer's, as TRL's RewardTrainer sets it:
    transformers reads the score at the last token that is not the pad, so the exported folder scores as trained.
    Dropout is off (TRL's disable_dropout), so both responses of a pair are scored by the same function."""
    from transformers import AutoModelForSequenceClassification

    model = _load_pretrained(AutoModelForSequenceClassification, path, dtype, device, external_lib=external_lib,
                             trust_remote_code=trust_remote_code, override_config=override_config, key=key,
                             tokenizer=tokenizer, num_labels=1)
    scalar_head(model, f"{path_key(key)}={path!r}")
    if tokenizer is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    for name in ("attention_dropout", "hidden_dropout", "classifier_dropout"):
        if isinstance(getattr(model.config, name, None), float):
            setattr(model.config, name, 0.0)
    return model


def apply_lora(model: nn.Module, model_cfg, task_type: str = "CAUSAL_LM") -> nn.Module:
    """A peft LoRA adapter on `model` (rank, alpha, target / exclude modules from `model_cfg`). A value or reward
    model (task_type TOKEN_CLS, SEQ_CLS) keeps its new scalar head (`VALUE_HEADS`) out of LoRA and trains it in full (peft's modules_to_save)."""
    from peft import LoraConfig, get_peft_model

    exclude = parse_module_list(model_cfg.exclude_modules)
    if task_type != "CAUSAL_LM":
        heads = [name for name in VALUE_HEADS if hasattr(model, name)]
        if exclude is None:
            exclude = heads
        elif isinstance(exclude, str):
            exclude = f"(?:{exclude})|(?:(?:.*\\.)?(?:{'|'.join(heads)}))"
        else:
            exclude = [*exclude, *heads]
    lora = LoraConfig(
        r=model_cfg.lora_rank,
        lora_alpha=model_cfg.lora_alpha,
        target_modules=parse_module_list(model_cfg.target_modules),
        exclude_modules=exclude,
        lora_dropout=0.0,
        bias="none",
        task_type=task_type,
    )
    with warnings.catch_warnings():
        # peft 0.21 asks the model's `is_gradient_checkpointing`, which transformers 5.24 deprecates with a
        # FutureWarning each LoRA run printed; nothing rft passes avoids it (peft reads the attribute itself)
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, lora)


def load_trainable_model(path: str, model_cfg, dtype: torch.dtype, device: torch.device, key: str,
                         value_head: bool = False, tokenizer=None, freeze_vision: bool | None = None,
                         reward_head: bool = False) -> nn.Module:
    """The model a trainer updates: `load_causal_lm` (`load_value_model` with `value_head`, `load_reward_backbone`
    with `reward_head`), then gradient
    checkpointing and LoRA as `model_cfg` (the RL `actor_rollout_ref.model` / `critic.model` or the SFT `model`
    section) asks. `tokenizer`: the run's, checked against the embedding. `freeze_vision`: whether a
    vision-language model's vision tower is frozen; None: `model_cfg.freeze_vision_tower`."""
    from rft.models.vision import freeze_vision_tower, vision_for

    load = load_reward_backbone if reward_head else load_value_model if value_head else load_causal_lm
    model = load(path, dtype, device, external_lib=model_cfg.external_lib,
                 trust_remote_code=model_cfg.trust_remote_code, override_config=model_cfg.override_config,
                 key=key, tokenizer=tokenizer)
    saved = getattr(model, SAVED_DTYPE_ATTR, None)
    if saved is not None and saved != dtype:
        log.info("%s: the trained model is exported in %s, as saved", path, str(saved).removeprefix("torch."))
    if model_cfg.enable_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    adapter = getattr(model_cfg, "lora_adapter_path", None)
    if adapter and model_cfg.lora_rank == 0:  # the config loader found no adapter_config.json to read the rank from
        from rft.errors import ModelError

        raise ModelError(f"{key}.lora_adapter_path={adapter!r} has no adapter_config.json: set it to a peft adapter "
                         "folder (a LoRA adapter saved with save_pretrained), or remove it")
    if model_cfg.lora_rank > 0:
        model = apply_lora(model, model_cfg,
                           task_type="SEQ_CLS" if reward_head else "TOKEN_CLS" if value_head else "CAUSAL_LM")
        if adapter:
            load_adapter(model, adapter, f"{key}.lora_adapter_path")
    freeze = getattr(model_cfg, "freeze_vision_tower", True) if freeze_vision is None else freeze_vision
    if freeze and vision_for(path, key) is not None:
        frozen = freeze_vision_tower(model)
        print(f"rft: {path}: the vision tower and projector frozen ({frozen:,} parameters; "
              f"{key}.freeze_vision_tower=false trains them)", file=sys.stderr, flush=True)
    return model


def load_adapter(model: nn.Module, folder: str, key: str) -> None:
    """A saved peft adapter's weights into `model`'s adapter, made by `apply_lora` with the adapter's r, alpha and
    target modules (the config loader reads them from its adapter_config.json): verl's start from a saved LoRA
    adapter (PeftModel.from_pretrained, is_trainable). Every adapter weight must land on one of the model's."""
    from peft import load_peft_weights, set_peft_model_state_dict

    from rft.errors import ModelError

    weights = load_peft_weights(str(Path(folder).expanduser()), device="cpu")
    result = set_peft_model_state_dict(model, weights)
    unexpected = [k for k in result.unexpected_keys if "lora_" in k]
    if unexpected:
        raise ModelError(f"{key}={folder!r}: {len(unexpected)} of the adapter's weights match no module of the model "
                         f"(e.g. {unexpected[0]}): it was saved for another model")


def is_peft(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "merge_and_unload")


def hf_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors by their Hugging Face names, as `from_pretrained` would load them, without a copy of
    the model: a LoRA model's adapted weights merged (base + scale * B @ A, computed here, so the base weights
    are never modified), modules_to_save's trained copies under the original names."""
    if not is_peft(model):
        return {n: t.detach() for n, t in model.state_dict().items()}
    base = model.get_base_model()
    merged = {}
    for prefix, module in base.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
            delta = sum(module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A)
            merged[f"{prefix}.base_layer.weight"] = module.base_layer.weight.detach() + delta
    out = {}
    for name, t in base.state_dict().items():
        if ".lora_" in name or ".original_module." in name:
            continue
        value = merged.get(name, t).detach()
        out[name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")] = value
    return out


def frozen_copy(model: nn.Module) -> nn.Module:
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def export_hf(model: nn.Module, tokenizer, out_dir: str | Path, merge_in_place: bool = False,
              extra_files: dict[str, str] | None = None) -> Path:
    """Write a Hugging Face folder (LoRA merged) that `from_pretrained` loads; atomic. The weights are written in
    the dtype the model was loaded from (`SAVED_DTYPE_ATTR`: a bf16 folder trained in fp32 on CPU exports bf16).
    `extra_files`: {name: text} written into the folder with the model (`rft merge`'s record of its inputs)."""
    from rft.models.vision import save_processor, vision_of

    out_dir = Path(out_dir)
    vision = vision_of(model)
    copied = False
    if is_peft(model):
        copied = not merge_in_place
        model = (model if merge_in_place else copy.deepcopy(model)).merge_and_unload()
    saved = getattr(model, SAVED_DTYPE_ATTR, None)
    if saved is not None and next(model.parameters()).dtype != saved:
        model = (model if copied else copy.deepcopy(model)).to(saved)
    with atomic_dir(out_dir) as tmp:
        checked_write(lambda: model.save_pretrained(tmp, safe_serialization=True), tmp / "model.safetensors")
        tokenizer.save_pretrained(tmp)
        if vision is not None:
            save_processor(vision, tmp)
        for name, text in (extra_files or {}).items():
            checked_write(functools.partial((tmp / name).write_text, text, encoding="utf-8"), tmp / name)
    return out_dir
