"""Tiny Qwen2-architecture causal LMs built offline, for tests and toy runs.

`init_model("tiny", out_dir)` writes a randomly initialised `Qwen2ForCausalLM` and its tokenizer into a
folder that `AutoModelForCausalLM` / `AutoTokenizer.from_pretrained` load with no network, so every test tier
runs the real Hugging Face code paths (chat template, generate, logprobs) on a model of ~1M parameters.

The tokenizer is a genuine byte-level BPE, built so that transformers' `Qwen2Tokenizer` reproduces it exactly.
That class (transformers 5) does not trust `tokenizer.json`'s pipeline: it takes only the vocab and merges
from it and rebuilds the rest with Qwen's own NFC normaliser, split regex, ByteLevel pre-tokenizer (no regex)
and ByteLevel decoder. We write `tokenizer.json` with that same pipeline, so the `tokenizers` file and the
`transformers` object agree id for id. The vocabulary:

* ids 0..255: the 256 byte-level symbols in byte order (GPT-2's `bytes_to_unicode`), so a single-byte token's
  id is its byte value. Any text encodes; every digit is its own token (Qwen's regex splits `\\p{N}` one at a
  time and there are no digit merges), so arithmetic tasks are tokenised digit by digit.
* then one token per merge spelling the chat-template role words `user`, `assistant`, `system`
  (`u s -> us`, `us e -> use`, `use r -> user`, ...), so a ChatML prompt tokenises to few, stable ids.
* then the special tokens `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`. They sit in the BPE vocab as well
  as among the added tokens, so their ids are fixed by the vocab, not by the order transformers adds them in.

The embedding has exactly `len(tokenizer)` rows (no padding rows) and is tied to the LM head.

`init_model("tiny-rm", out_dir)` writes a reward model instead: `Qwen2ForSequenceClassification` with one label on
the tiny backbone, same tokenizer (`REWARD_PRESETS`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from rft.fsutil import atomic_dir, new_model_dir

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)
ROLE_WORDS: tuple[str, ...] = ("user", "assistant", "system")
MODEL_MAX_LENGTH = 2048

# Qwen2's pre-tokenizer regex, as transformers' tokenization_qwen2.PRETOKENIZE_REGEX (Qwen2, Qwen2.5).
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# ChatML, as Qwen2.5 uses it, minus the default system prompt. Declared tools are named in one system line
# (`tools: calc, search`): a tiny model has no use for their JSON schemas, which would only lengthen every prompt.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\ntools: ' + (tools | map(attribute='function') | map(attribute='name') | join(', '))"
    " + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

PRESETS: dict[str, dict[str, int]] = {
    # 1,020,416 parameters with the 275-token vocabulary.
    "tiny": dict(
        hidden_size=128,
        num_hidden_layers=4,
        intermediate_size=512,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    # 580,992 parameters: tiny's depth at 3/4 of its width, the student `rft demo --task distill` distils into
    # (half its layers at its width distilled less: bench/RESULTS.md, 2026-11-28).
    "tiny-student": dict(
        hidden_size=96,
        num_hidden_layers=4,
        intermediate_size=384,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    # 6,959,104 parameters with the 275-token vocabulary.
    "small": dict(
        hidden_size=256,
        num_hidden_layers=7,
        intermediate_size=1024,
        num_attention_heads=8,
        num_key_value_heads=4,
    ),
}

REWARD_PRESETS: dict[str, str] = {"tiny-rm": "tiny"}
"""Reward-model presets: a `Qwen2ForSequenceClassification` with one label (a `score` head, no bias) on the
backbone of the named causal-LM preset, with the same tokenizer, for tests and examples of `reward_model`."""


# ----------------------------------------------------------------------------------------------- tokenizer


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map (the ByteLevel alphabet), keyed by byte value."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]  # "!".."~", "¡".."¬", "®".."ÿ"
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return mapping


def _vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The BPE vocabulary (token -> id, ids contiguous from 0) and its merges in rank order."""
    byte_symbols = bytes_to_unicode()
    vocab = {byte_symbols[b]: b for b in range(256)}
    merges: list[tuple[str, str]] = []
    for word in ROLE_WORDS:
        # All role words are ASCII letters, so each character is its own byte-level symbol.
        merged = word[0]
        for char in word[1:]:
            merges.append((merged, char))
            merged += char
            if merged in vocab:
                raise AssertionError(f"merge result {merged!r} is already in the vocabulary")
            vocab[merged] = len(vocab)
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    return vocab, merges


def build_backend_tokenizer() -> Any:
    """The `tokenizers.Tokenizer` that is written as tokenizer.json: Qwen2's exact pipeline over our vocab."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    vocab, merges = _vocab_and_merges()
    if set(list(vocab)[:256]) != set(pre_tokenizers.ByteLevel.alphabet()):
        raise AssertionError("byte symbols differ from tokenizers' ByteLevel alphabet")
    tokenizer = Tokenizer(
        BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    # The same four pieces, with the same arguments, as transformers' Qwen2Tokenizer.__init__.
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tokenizer


def _added_tokens_decoder(vocab: dict[str, int]) -> dict[str, dict[str, Any]]:
    return {
        str(vocab[token]): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token in SPECIAL_TOKENS
    }


def _tokenizer_config(vocab: dict[str, int]) -> dict[str, Any]:
    """tokenizer_config.json, shaped like Qwen2.5-Instruct's (which transformers 4.x and 5.x both read)."""
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_prefix_space": False,
        "added_tokens_decoder": _added_tokens_decoder(vocab),
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "split_special_tokens": False,
    }


def build_tokenizer() -> Any:
    """The transformers tokenizer (`Qwen2Tokenizer`), in memory, equal to what `init_model` writes and
    `AutoTokenizer.from_pretrained` loads back."""
    from transformers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab, merges = _vocab_and_merges()
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token=AddedToken(IM_END, special=True, normalized=False),
        pad_token=AddedToken(ENDOFTEXT, special=True, normalized=False),
        extra_special_tokens=[AddedToken(t, special=True, normalized=False) for t in (IM_START, IM_END)],
        add_prefix_space=False,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=MODEL_MAX_LENGTH,
        split_special_tokens=False,
    )


def _write_tokenizer_files(directory: Path) -> dict[str, int]:
    """Writes tokenizer.json, vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json and
    returns the vocabulary."""
    vocab, merges = _vocab_and_merges()
    build_backend_tokenizer().save(str(directory / "tokenizer.json"), pretty=True)
    _write_json(directory / "vocab.json", vocab)
    merges_text = "#version: 0.2\n" + "".join(f"{left} {right}\n" for left, right in merges)
    (directory / "merges.txt").write_text(merges_text, encoding="utf-8")
    _write_json(directory / "tokenizer_config.json", _tokenizer_config(vocab))
    _write_json(
        directory / "special_tokens_map.json",
        {"additional_special_tokens": [IM_START, IM_END], "eos_token": IM_END, "pad_token": ENDOFTEXT},
    )
    return vocab


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------------- model


def _resolve_preset(preset: str) -> dict[str, int]:
    try:
        return PRESETS[REWARD_PRESETS.get(preset, preset)]
    except KeyError:
        valid = ", ".join(sorted([*PRESETS, *REWARD_PRESETS]))
        raise ValueError(f"unknown model preset {preset!r}; valid presets: {valid}") from None


def build_config(preset: str) -> Any:
    """The `Qwen2Config` of a preset, its vocab sized exactly to the tokenizer."""
    from transformers import Qwen2Config

    sizes = _resolve_preset(preset)
    vocab, _ = _vocab_and_merges()
    return Qwen2Config(
        vocab_size=len(vocab),
        **sizes,
        hidden_act="silu",
        max_position_embeddings=MODEL_MAX_LENGTH,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        use_cache=True,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        use_sliding_window=False,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=vocab[IM_END],
        pad_token_id=vocab[ENDOFTEXT],
        dtype="float32",
    )


def parameter_count(model: torch.nn.Module) -> int:
    """Number of distinct parameters (a tied embedding / LM head counts once)."""
    return sum(p.numel() for p in model.parameters())


def init_model(
    preset: str, out_dir: str | os.PathLike[str], seed: int = 0, *, overwrite: bool = False
) -> Path:
    """Writes a seeded, randomly initialised Qwen2 causal LM of `preset` and its tokenizer into `out_dir`; a
    `REWARD_PRESETS` name writes a one-label `Qwen2ForSequenceClassification` (a reward model) instead.

    The folder holds config.json, generation_config.json, model.safetensors (float32) and the tokenizer files;
    the same seed gives byte-identical model.safetensors. It is built in a temporary sibling folder and
    renamed into place, so `out_dir` is never seen half written. A non-empty `out_dir` raises FileExistsError
    unless `overwrite`, in which case the old folder is replaced once the new one is complete. The global
    torch RNG state is left as it was. Returns `out_dir` as a Path.
    """
    from transformers import GenerationConfig, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    config = build_config(preset)  # raises on an unknown preset before touching the disk
    reward_model = preset in REWARD_PRESETS
    if reward_model:
        config.num_labels = 1
    out_dir = new_model_dir(out_dir, overwrite)  # the families' check, whose message names --overwrite

    with atomic_dir(out_dir) as staging:
        vocab = _write_tokenizer_files(staging)
        # Initialise in float32 whatever the caller's default dtype, so the bytes depend on the seed alone.
        default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = (Qwen2ForSequenceClassification if reward_model else Qwen2ForCausalLM)(config)
        finally:
            torch.set_default_dtype(default_dtype)
        if not reward_model:
            model.generation_config = GenerationConfig(
                bos_token_id=None,
                eos_token_id=[vocab[IM_END], vocab[ENDOFTEXT]],
                pad_token_id=vocab[ENDOFTEXT],
            )
        model.save_pretrained(staging)
    return out_dir

