"""data.reply_prefix (Trinity-RFT's format.reply_prefix): text every reply starts with, after the chat template's
generation prompt, which the model continues. Trinity's simple workflows put it last as an assistant message and its
vLLM chat continues that message (continue_final_message); rft renders the prompt with the generation prompt and the
prefix after it, on the batched path (the dataset's prompt ids) and in a workflow's `model.chat` alike, and the
response is what follows it. Its benchmark's guru_math template writes `reply_prefix: "<think>"`; it was refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import rft_here
from rl_helpers import make_assets, rl_config

from rft.config import ConfigError
from rft.data.chat import render, render_prompt, reply_prefix_of, with_reply_prefix
from rft.data.dataset import PromptDataset
from rft.dialects.trinity import translate
from rft.explorer.model import ModelHandle
from rft.models.load import load_tokenizer
from rft.rollout.base import SamplingParams

QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("reply_prefix"))


def test_the_prefix_follows_the_generation_prompt(assets):
    tok = load_tokenizer(str(assets / "model"))
    assert tok.chat_template  # the tiny model's Qwen2-style template
    plain = render(tok, QUESTION)
    assert plain.endswith("<|im_start|>assistant\n")
    prefixed = with_reply_prefix(QUESTION, "<think>")
    assert prefixed == [*QUESTION, {"role": "assistant", "content": "<think>"}]
    assert reply_prefix_of(prefixed) == (QUESTION, "<think>")
    assert render_prompt(tok, prefixed) == plain + "<think>"
    assert render_prompt(tok, QUESTION) == plain and with_reply_prefix(QUESTION, None) == QUESTION
    # a tokenizer without a chat template: plain text, the prefix straight after the question's text
    tok.chat_template = None
    assert render_prompt(tok, prefixed) == "What is 2 + 3?<think>"


def test_the_batched_path_and_a_workflows_chat_see_the_same_prompt(assets):
    tok = load_tokenizer(str(assets / "model"))
    files = str(assets / "data" / "train.parquet")
    with_prefix = PromptDataset(files, tok, reply_prefix="<think>", max_prompt_length=64)
    without = PromptDataset(files, tok, max_prompt_length=64)
    first, bare = with_prefix[0], without[0]
    tail = tok("<think>", add_special_tokens=False)["input_ids"]
    assert first.ids == bare.ids + tail  # the generation prompt ends with a newline: the prefix tokenizes apart
    assert tok.decode(first.ids).endswith("<|im_start|>assistant\n<think>")
    assert first.messages == [*bare.messages, {"role": "assistant", "content": "<think>"}]
    handle = ModelHandle(tokenizer=tok, server=None, sampling=SamplingParams())
    assert handle.prompt(first.messages) == (first.ids, [])  # what SimpleWorkflow's model.chat sends


def test_multi_turn_workflows_refuse_it_and_trinity_keys_set_it(assets, tmp_path):
    assert rl_config(assets, tmp_path, "data.reply_prefix=<think>").data.reply_prefix == "<think>"
    with pytest.raises(ConfigError, match=r"data.reply_prefix='<think>' starts the one reply of a one-turn workflow "
                                          r".*workflow.type='tool_call_workflow' writes its own conversation"):
        rl_config(assets, tmp_path, "data.reply_prefix=<think>", "workflow.type=tool_call_workflow")
    base = {"project": "p", "name": "n", "model": {"model_path": str(assets / "model")},
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "buffer": {"batch_size": 2, "total_steps": 1, "explorer_input": {"taskset": {
                "path": str(assets / "data" / "train.parquet"), "format": {"reply_prefix": "<think>"}}}}}
    assert translate(base)["data"]["reply_prefix"] == "<think>"
    base["buffer"]["explorer_input"]["taskset"]["format"] = {}
    base["buffer"]["explorer_input"]["reply_prefix"] = "Let me think."  # the tasksets' default
    assert translate(base)["data"]["reply_prefix"] == "Let me think."


def test_a_run_generates_after_the_prefix(assets, tmp_path):
    """One GRPO step of math_boxed_workflow with reply_prefix, validated before and after: every validation prompt
    ends with the prefix after the generation prompt, and the step trains."""
    import json

    out = tmp_path / "out"
    rft_here("train", f"actor_rollout_ref.model.path={assets / 'model'}",
             f"data.train_files={assets / 'data' / 'train.parquet'}",
             f"data.val_files={assets / 'data' / 'val.parquet'}", "data.reply_prefix=<think>",
             "workflow.type=math_boxed_workflow", "data.max_prompt_length=64", "data.max_response_length=6",
             "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
             "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=1", "trainer.test_freq=1",
             "trainer.logger=[file]", "trainer.log_val_generations=3", f"trainer.default_local_dir={out}",
             cwd=tmp_path)
    samples = [s for line in (out / "val_generations.jsonl").open() for s in json.loads(line)["samples"]]
    assert samples and all(s["prompt"].endswith("<|im_start|>assistant\n<think>") for s in samples), samples[:1]
    assert (out / "model" / "model.safetensors").is_file()
