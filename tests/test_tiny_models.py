"""Tier 2: the offline tiny Qwen2 models and their tokenizer, loaded through the real HF code paths."""

from __future__ import annotations

import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from rft.models.tiny import (
    CHAT_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    IM_START,
    PRESETS,
    QWEN2_PRETOKENIZE_REGEX,
    build_tokenizer,
    init_model,
    parameter_count,
)

TEXTS = [
    "hello world",
    "12+345=",
    "The answer is 42.\n\nDone",
    "  leading spaces\tand tabs\r\nCRLF",
    "café 😀 naïve Ωmega 東京",
    "It's a user's assistant's system",
    "<|im_start|>user\nhi<|im_end|>\n",
    "",
]
PARAM_RANGE = {"tiny": (0.7e6, 1.5e6), "tiny-student": (0.4e6, 0.7e6), "small": (5e6, 10e6)}  # every preset needs a range here
CHAT = [{"role": "user", "content": "1+2="}]
CHAT_TEXT = "<|im_start|>user\n1+2=<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    """Every preset built once, seed 0."""
    return {preset: init_model(preset, tmp_path_factory.mktemp(preset) / "m", seed=0) for preset in PRESETS}


@pytest.fixture(scope="module")
def tiny_dir(model_dirs) -> Path:
    return model_dirs["tiny"]


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def test_files_written(tiny_dir):
    names = {p.name for p in tiny_dir.iterdir()}
    model_files = {"config.json", "generation_config.json", "model.safetensors"}
    tokenizer_files = {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"}
    assert model_files | tokenizer_files <= names


def test_autotokenizer_matches_tokenizer_json(tiny_dir, tokenizer):
    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    in_memory = build_tokenizer()
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert ids == raw.encode(text, add_special_tokens=False).ids, text
        assert ids == in_memory.encode(text, add_special_tokens=False), text
        assert tokenizer.decode(ids) == text
        assert raw.decode(ids, skip_special_tokens=False) == text


def test_vocab_and_merges_files_alone_give_the_same_tokenizer(tiny_dir, tokenizer, tmp_path):
    for path in tiny_dir.iterdir():
        if path.name.startswith(("tokenizer", "vocab", "merges", "special")) and path.name != "tokenizer.json":
            shutil.copy(path, tmp_path / path.name)
    from_vocab = AutoTokenizer.from_pretrained(tmp_path)
    assert from_vocab.get_vocab() == tokenizer.get_vocab()
    for text in TEXTS:
        assert from_vocab.encode(text) == tokenizer.encode(text), text


def test_pipeline_matches_transformers_qwen2():
    from transformers.models.qwen2 import tokenization_qwen2

    assert QWEN2_PRETOKENIZE_REGEX == tokenization_qwen2.PRETOKENIZE_REGEX


def test_in_memory_tokenizer_matches_saved(tokenizer):
    in_memory = build_tokenizer()
    assert in_memory.get_vocab() == tokenizer.get_vocab()
    assert len(in_memory) == len(tokenizer)
    assert (in_memory.eos_token, in_memory.pad_token, in_memory.bos_token) == (IM_END, ENDOFTEXT, None)
    assert sorted(in_memory.all_special_tokens) == sorted(tokenizer.all_special_tokens)
    assert in_memory.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) == CHAT_TEXT


def test_add_special_tokens_adds_nothing(tokenizer):
    # No BOS / EOS post-processor: a prompt is tokenised exactly as written.
    assert tokenizer("12+345=")["input_ids"] == tokenizer.encode("12+345=", add_special_tokens=False)


def test_digits_are_single_tokens(tokenizer):
    for digit in "0123456789":
        assert len(tokenizer.encode(digit)) == 1
    assert len(tokenizer.encode("12345")) == 5
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("12+345=")) == ["1", "2", "+", "3", "4", "5", "="]


def test_special_tokens(tokenizer):
    assert tokenizer.eos_token == IM_END
    assert tokenizer.pad_token == ENDOFTEXT
    assert tokenizer.bos_token is None
    for token in (ENDOFTEXT, IM_START, IM_END):
        ids = tokenizer.encode(token)
        assert len(ids) == 1 and tokenizer.convert_ids_to_tokens(ids) == [token]
        assert ids[0] in tokenizer.all_special_ids
    assert tokenizer.decode(tokenizer.encode(f"{IM_START}x{IM_END}"), skip_special_tokens=True) == "x"
    assert tokenizer.model_max_length == 2048


def test_chat_template(tokenizer):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text == CHAT_TEXT
    assert tokenizer.apply_chat_template(CHAT, tokenize=False) == "<|im_start|>user\n1+2=<|im_end|>\n"
    tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode(text))
    assert tokens[:3] == [IM_START, "user", "Ċ"]
    assert tokens[-3:] == [IM_START, "assistant", "Ċ"]
    assert "system" in tokenizer.convert_ids_to_tokens(tokenizer.encode("system"))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_model_loads_and_generates(model_dirs, preset):
    model_dir = model_dirs[preset]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    low, high = PARAM_RANGE[preset]
    assert low <= parameter_count(model) <= high
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.dtype == torch.float32
    assert model.config.vocab_size == len(tokenizer) == model.get_input_embeddings().weight.shape[0]
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    im_end_id, endoftext_id = tokenizer.convert_tokens_to_ids([IM_END, ENDOFTEXT])
    assert model.generation_config.eos_token_id == [im_end_id, endoftext_id]
    assert model.generation_config.pad_token_id == endoftext_id
    assert model.generation_config.bos_token_id is None

    inputs = tokenizer.apply_chat_template(
        CHAT, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    prompt_len = inputs["input_ids"].shape[1]
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert prompt_len < out.shape[1] <= prompt_len + 4
    assert out[0, prompt_len:].max() < len(tokenizer)


def test_same_seed_same_bytes_different_seed_different_weights(tiny_dir, tmp_path):
    again = init_model("tiny", tmp_path / "again", seed=0)
    other = init_model("tiny", tmp_path / "other", seed=1)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (tiny_dir / "model.safetensors").read_bytes()
    weights = AutoModelForCausalLM.from_pretrained(again).state_dict()
    other_weights = AutoModelForCausalLM.from_pretrained(other).state_dict()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(weights[name], other_weights[name])
    assert weights[name].std().item() == pytest.approx(0.02, rel=0.1)  # Qwen2's init, initializer_range


def test_global_torch_state_neither_used_nor_changed(tiny_dir, tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    torch.set_default_dtype(torch.bfloat16)
    try:
        out = init_model("tiny", tmp_path / "m", seed=0)
        assert torch.get_default_dtype() == torch.bfloat16
    finally:
        torch.set_default_dtype(torch.float32)
    assert torch.equal(torch.rand(3), expected)
    assert (out / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()


def test_existing_dir_is_refused_then_overwritten(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(FileExistsError, match=str(out)):
        init_model("tiny", out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]

    init_model("tiny", out, overwrite=True)
    assert not (out / "keep.txt").exists()
    assert (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging or old folder left


def test_empty_existing_dir_is_used(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    init_model("tiny", out)
    assert (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_unknown_preset(tmp_path):
    with pytest.raises(ValueError, match="tiny") as excinfo:
        init_model("huge", tmp_path / "model")
    assert all(name in str(excinfo.value) for name in PRESETS)
    assert not (tmp_path / "model").exists()
