"""Small randomly initialised models of the architectures people fine-tune, built offline from transformers' own
config classes, for the model-family tests (tests/test_model_families.py) and for trying rft on an architecture:
`rft init-model --family llama --tokenizer base out`.

Every family has two layers, hidden size 64 and head_dim 32 (vLLM's CPU attention needs >= 32), and the features
that set it apart at its real size: GPT-2's learned absolute positions, Mistral's sliding window (8 positions, so
that rollouts and updates cross it), Gemma2's logit soft-capping and alternating sliding layers, Phi's partial
rotary, Falcon's ALiBi, the mixture-of-experts layers of Mixtral / Qwen3-MoE / Qwen2-MoE, Llama 4's chunked
attention (8 positions) and NoPE layers, GPT-OSS's attention sinks, Cohere 2's sliding layers, tied and untied
heads.
Weights are drawn with std 0.2 rather than the usual 0.02, so that a random model's next-token distribution is
peaked enough for greedy decoding and log-prob comparisons to mean something.

Tokenizers (`TOKENIZER_STYLES`), all on rft's tiny byte-level vocabulary (`rft.models.tiny`):
* `chatml`: rft's own (Qwen2's: a ChatML template, a pad token, no BOS);
* `no-pad`: as Llama 3 ships: a chat template that writes BOS, no pad token;
* `base`: a base model's: no chat template, no pad token, BOS added to every encoding (Llama 2 / Mistral base).

To add a family: one line in `FAMILIES` with its transformers `model_type` and the config keys that differ from
the shared sizes; tests/test_model_families.py runs every family listed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rft.fsutil import atomic_dir, new_model_dir

_SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
              max_position_embeddings=512, initializer_range=0.2)

FAMILIES: dict[str, dict[str, Any]] = {
    "qwen2": dict(model_type="qwen2", num_key_value_heads=1),
    "qwen3": dict(model_type="qwen3", num_key_value_heads=1, head_dim=32),
    "llama": dict(model_type="llama", num_key_value_heads=1, tie_word_embeddings=False),
    "mistral": dict(model_type="mistral", num_key_value_heads=1, sliding_window=8, tie_word_embeddings=False),
    "phi3": dict(model_type="phi3", num_key_value_heads=1),
    "phi": dict(model_type="phi", partial_rotary_factor=0.5),
    "gpt2": dict(model_type="gpt2"),
    "gpt_neox": dict(model_type="gpt_neox", rotary_pct=0.25, tie_word_embeddings=False),
    "olmo2": dict(model_type="olmo2", num_key_value_heads=1),
    "gemma2": dict(model_type="gemma2", num_key_value_heads=1, head_dim=32, sliding_window=8),
    "gemma3_text": dict(model_type="gemma3_text", num_key_value_heads=1, head_dim=32, sliding_window=8),
    # Granite 3's multipliers, but for its logits_scaling (8), which would flatten a random model's distribution
    "granite": dict(model_type="granite", num_key_value_heads=1, embedding_multiplier=12.0,
                    residual_multiplier=0.22, attention_multiplier=1 / 32),
    "falcon": dict(model_type="falcon", alibi=True, new_decoder_architecture=False, multi_query=True),
    # GELU for OPT's ReLU: a ReLU input within rounding of 0 flips its gradient between two passes of different
    # shapes (packed, padded), which the gradient comparison would read as a difference
    "opt": dict(model_type="opt", ffn_dim=128, word_embed_proj_dim=64, activation_function="gelu"),
    "starcoder2": dict(model_type="starcoder2", num_key_value_heads=1),
    "mixtral": dict(model_type="mixtral", num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2,
                    intermediate_size=64),
    "qwen3_moe": dict(model_type="qwen3_moe", num_key_value_heads=1, head_dim=32, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32),
    # Llama 4's text model: chunked attention (8 positions here, 8192 at its real size) on its RoPE layers, a
    # full-attention NoPE layer (every second one here, every fourth at its real size), mixture-of-experts layers
    "llama4_text": dict(model_type="llama4_text", num_key_value_heads=1, head_dim=32, attention_chunk_size=8,
                        no_rope_layer_interval=2, intermediate_size=64, intermediate_size_mlp=128,
                        num_local_experts=2, num_experts_per_tok=1),
    # attention sinks on alternating sliding layers, mixture-of-experts layers
    "gpt_oss": dict(model_type="gpt_oss", num_key_value_heads=1, head_dim=32, sliding_window=8, num_local_experts=4,
                    num_experts_per_tok=2, intermediate_size=64),
    # alternating sliding layers; logit_scale 1 for its 0.0625, which would flatten a random model's distribution
    "cohere2": dict(model_type="cohere2", num_key_value_heads=1, sliding_window=8,
                    layer_types=["sliding_attention", "full_attention"], logit_scale=1.0),
}
"""Family name -> its transformers model_type and the config keys that differ from `_SIZES`."""

TOKENIZER_STYLES = ("chatml", "no-pad", "base")
BOS = "<s>"
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""The `no-pad` tokenizer's template: ChatML after a BOS the template writes itself, as Llama 3's does."""


def _write_tokenizer(directory: Path, style: str) -> int:
    """Writes the tokenizer files of `style` into `directory`; returns the vocabulary size."""
    from transformers import PreTrainedTokenizerFast

    from rft.models.tiny import ENDOFTEXT, IM_END, IM_START, _write_tokenizer_files, build_backend_tokenizer

    if style == "chatml":
        return len(_write_tokenizer_files(directory))
    from tokenizers import AddedToken, processors

    backend = build_backend_tokenizer()
    backend.add_special_tokens([AddedToken(BOS, special=True, normalized=False)])
    bos_id = backend.token_to_id(BOS)
    if style == "base":  # BOS in front of every encoding, as a base model's tokenizer does
        backend.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                               special_tokens=[(BOS, bos_id)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=ENDOFTEXT if style == "base" else IM_END,
        extra_special_tokens=[IM_START, IM_END], model_max_length=_SIZES["max_position_embeddings"],
        clean_up_tokenization_spaces=False)
    if style == "no-pad":
        tokenizer.chat_template = LLAMA3_TEMPLATE
    tokenizer.save_pretrained(directory)
    config_file = directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.pop("pad_token", None)
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    return backend.get_vocab_size()


def build_family_config(family: str, vocab_size: int, eos_token_id: int, bos_token_id: int | None = None,
                        layers: int | None = None):
    """The transformers config of `family` at rft's test sizes; `layers` decoder layers instead of two (a family's
    explicit `layer_types` repeated to as many)."""
    from transformers import AutoConfig

    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    keys = {**_SIZES, **FAMILIES[family]}
    model_type = keys.pop("model_type")
    if layers is not None:
        keys["num_hidden_layers"] = layers
        if "layer_types" in keys:
            keys["layer_types"] = (keys["layer_types"] * layers)[:layers]
    return AutoConfig.for_model(model_type, **keys, vocab_size=vocab_size, eos_token_id=eos_token_id,
                                bos_token_id=bos_token_id, pad_token_id=None)


def init_family_model(family: str, out_dir: str | os.PathLike[str], tokenizer: str = "chatml", seed: int = 0,
                      dtype=None, overwrite: bool = False) -> Path:
    """Writes a seeded, randomly initialised causal LM of `family` with a `tokenizer` style into `out_dir` (a new
    or empty folder, or any with `overwrite`: replaced once the new one is complete), saved in `dtype` (a torch
    dtype; float32 when None)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from rft.models.load import _quiet_transformers

    _quiet_transformers()
    if tokenizer not in TOKENIZER_STYLES:
        raise ValueError(f"unknown tokenizer style {tokenizer!r}; known: {', '.join(TOKENIZER_STYLES)}")
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    out_dir = new_model_dir(out_dir, overwrite)
    with atomic_dir(out_dir) as staging:
        vocab = _write_tokenizer(staging, tokenizer)
        tok = AutoTokenizer.from_pretrained(staging)
        config = build_family_config(family, vocab, tok.eos_token_id, tok.bos_token_id)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
        model.to(dtype or torch.float32).save_pretrained(staging)
    return out_dir
