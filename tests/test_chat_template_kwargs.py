"""data.apply_chat_template_kwargs (verl's key; Trinity-RFT's enable_thinking lands there): the chat template's
variables reach every rendering of it: the RL prompts, SFT and DPO rows, the workflows' conversations and the
OpenAI-compatible endpoint (with a request's own chat_template_kwargs over them), rft generate's prompts. The
tokenizer's template here branches on Qwen3's enable_thinking and gpt-oss's reasoning_effort."""

from __future__ import annotations

import json
import urllib.request
from types import SimpleNamespace

import pytest
import torch

from rft.config import ConfigError
from rft.data.dataset import PromptDataset
from rft.data.preference import PreferenceDataset
from rft.data.sft import SFTDataset
from rft.models.tiny import CHAT_TEMPLATE, build_tokenizer
from rft.tasks import write_parquet
from rft.trainer.configure import load_config, load_dpo_config, load_generation_config, load_sft_config

# the tiny preset's template with a first line that Qwen3's enable_thinking=false and gpt-oss's reasoning_effort
# write (as those templates do in their system turn)
TEMPLATE = ("{%- if enable_thinking is defined and enable_thinking is false %}{{- '/no_think\\n' }}{%- endif %}"
            "{%- if reasoning_effort is defined %}{{- 'effort: ' + reasoning_effort + '\\n' }}{%- endif %}"
            + CHAT_TEMPLATE)
PROMPT = [{"role": "user", "content": "1+1="}]
REQUIRED = {  # the keys each command needs (nothing is read: validate_paths=False)
    load_config: ["actor_rollout_ref.model.path=m", "data.train_files=t.parquet"],
    load_sft_config: ["model.partial_pretrain=m", "data.train_files=t.parquet"],
    load_dpo_config: ["model.partial_pretrain=m", "data.train_files=t.parquet"],
    load_generation_config: ["model.path=m", "data.path=t.parquet", "data.output_path=o.parquet"],
}


@pytest.fixture(scope="module")
def tokenizer():
    tok = build_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


def rendered(tokenizer, messages, **variables) -> list[int]:
    """What transformers itself makes of `messages` with the template's `variables`."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **variables)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# --------------------------------------------------------------------------------------------------- RL data
def test_rl_prompts_are_rendered_with_the_template_variables(tokenizer, tmp_path):
    path = write_parquet([{"prompt": PROMPT, "data_source": "x", "reward_model": {"ground_truth": "2"}}],
                         tmp_path / "p.parquet")

    def ids(**kwargs) -> list[int]:
        return PromptDataset(str(path), tokenizer, max_prompt_length=64, **kwargs).prompts[0].ids

    plain = ids()
    off = ids(template_kwargs={"enable_thinking": False})
    assert off != plain and tokenizer.decode(off).startswith("/no_think\n")
    assert off == rendered(tokenizer, PROMPT, enable_thinking=False)
    assert ids(template_kwargs={"reasoning_effort": "medium"}) == rendered(tokenizer, PROMPT, reasoning_effort="medium")
    # a variable the template does not read changes nothing (Jinja ignores it, as in transformers)
    assert ids(template_kwargs={"enable_thinking": True, "not_read": 3}) == plain


def test_the_explorer_loads_prompts_with_the_configs_variables(tokenizer, tmp_path):
    from rft.explorer.explorer import load_prompts
    from rft.trainer.configure import load_config

    path = write_parquet([{"prompt": PROMPT, "data_source": "x", "reward_model": {"ground_truth": "2"}}],
                         tmp_path / "p.parquet")
    cfg = load_config(None, [*REQUIRED[load_config], "data.max_prompt_length=64",
                             "+data.apply_chat_template_kwargs.enable_thinking=false"], validate_paths=False)
    assert cfg.data.apply_chat_template_kwargs == {"enable_thinking": False}
    assert load_prompts(cfg, tokenizer, [str(path)]).prompts[0].ids == rendered(tokenizer, PROMPT,
                                                                                 enable_thinking=False)


# ------------------------------------------------------------------------------------------ SFT and DPO data
def sft_cfg(**kwargs) -> SimpleNamespace:
    return SimpleNamespace(prompt_key="prompt", response_key="response", prompt_dict_keys=None,
                           response_dict_keys=None, max_length=128, truncation="error",
                           multiturn=SimpleNamespace(enable=False, messages_key="messages", tools_key=None,
                                                     last_turn_only=False, enable_thinking_key=None),
                           apply_chat_template_kwargs=kwargs)


def test_sft_rows_are_rendered_with_the_template_variables(tokenizer, tmp_path):
    path = write_parquet([{"prompt": PROMPT, "response": "2"}], tmp_path / "sft.parquet")
    plain = SFTDataset(str(path), tokenizer, sft_cfg()).examples[0]
    off = SFTDataset(str(path), tokenizer, sft_cfg(enable_thinking=False)).examples[0]
    assert off.prompt_ids == rendered(tokenizer, PROMPT, enable_thinking=False) != plain.prompt_ids
    assert off.response_ids == plain.response_ids  # the response is its text and EOS either way

    chat = write_parquet([{"messages": [*PROMPT, {"role": "assistant", "content": "2"}]}], tmp_path / "mt.parquet")
    cfg = sft_cfg(reasoning_effort="low")
    cfg.multiturn.enable = True
    turn = SFTDataset(str(chat), tokenizer, cfg).examples[0]
    text = tokenizer.decode(turn.prompt_ids + turn.response_ids)
    assert text.startswith("effort: low\n") and text.endswith("2<|im_end|>\n")
    assert tokenizer.decode([t for t, m in zip(turn.response_ids, turn.loss_mask) if m]) == "2<|im_end|>"


def test_a_conversations_enable_thinking_column_is_its_own_variable(tokenizer, tmp_path):
    """verl's multi-turn SFT reads a row's enable_thinking from data.multiturn.enable_thinking_key's column, over
    data.apply_chat_template_kwargs; a null there leaves the row to them."""
    chat = [*PROMPT, {"role": "assistant", "content": "2"}]
    path = write_parquet([{"messages": chat, "enable_thinking": False}, {"messages": chat, "enable_thinking": None},
                          {"messages": chat, "enable_thinking": True}], tmp_path / "mt.parquet")
    cfg = sft_cfg(enable_thinking=False)
    cfg.multiturn.enable, cfg.multiturn.enable_thinking_key = True, "enable_thinking"

    def thinking_off() -> list[bool]:
        return [tokenizer.decode(x.prompt_ids + x.response_ids).startswith("/no_think\n")
                for x in SFTDataset(str(path), tokenizer, cfg).examples]

    assert thinking_off() == [True, True, False]
    cfg.multiturn.enable_thinking_key = None  # the column not read
    assert thinking_off() == [True, True, True]
    bad = write_parquet([{"messages": chat, "enable_thinking": "no"}], tmp_path / "bad.parquet")
    cfg.multiturn.enable_thinking_key = "enable_thinking"
    with pytest.raises(ValueError, match=r"row 0: column 'enable_thinking' \(data.multiturn.enable_thinking_key\) "
                                         "must be true, false or null, got 'no'"):
        SFTDataset(str(bad), tokenizer, cfg)


def test_dpo_pairs_are_rendered_with_the_template_variables(tokenizer, tmp_path):
    path = write_parquet([{"prompt": PROMPT, "chosen": "2", "rejected": "3"}], tmp_path / "dpo.parquet")

    def pair(**kwargs):
        cfg = SimpleNamespace(prompt_key="prompt", chosen_key="chosen", rejected_key="rejected",
                              system_prompt_key=None, system_prompt=None, max_length=128, truncation="error",
                              apply_chat_template_kwargs=kwargs)
        return PreferenceDataset(str(path), tokenizer, cfg).examples[0]

    assert pair(enable_thinking=False).prompt_ids == rendered(tokenizer, PROMPT, enable_thinking=False)
    assert pair(enable_thinking=False).prompt_ids != pair().prompt_ids


def test_the_sft_dpo_and_generate_configs_take_the_key():
    for load, required in REQUIRED.items():
        cfg = load(None, [*required, "+data.apply_chat_template_kwargs.reasoning_effort=medium"],
                   validate_paths=False)
        assert cfg.data.apply_chat_template_kwargs == {"reasoning_effort": "medium"}, load


# ------------------------------------------------------------------------------------ workflows, endpoint
class EchoEngine:
    """An engine that answers every prompt with one EOS token (what the endpoint does with the prompt is tested,
    not the model)."""

    def __init__(self, eos: int):
        self.eos_ids, self.model = torch.tensor([eos]), None

    def generate(self, ids, mask, params, generator=None, **_):
        rows = ids.shape[0]  # the server asks for one response per row
        return SimpleNamespace(response_ids=torch.full((rows, 1), int(self.eos_ids[0])),
                               response_mask=torch.ones(rows, 1, dtype=torch.long),
                               logprobs=torch.zeros(rows, 1))


def test_conversations_and_the_endpoint_render_with_the_variables(tokenizer):
    from rft.explorer.model import GenerationServer, ModelHandle
    from rft.explorer.server import Endpoint
    from rft.rollout import SamplingParams

    server = GenerationServer(EchoEngine(tokenizer.eos_token_id), tokenizer, torch.Generator().manual_seed(0))
    params = SamplingParams(n=1, temperature=1.0, max_tokens=4)
    handle = ModelHandle(server, tokenizer, params, template_kwargs={"enable_thinking": False})
    off = rendered(tokenizer, PROMPT, enable_thinking=False)
    assert handle.prompt(PROMPT)[0] == off and handle.start(PROMPT).ids == off
    assert handle.chat(PROMPT)[0].prompt_ids == off

    endpoint = Endpoint(lambda: handle, "tiny", token_details=True)

    def prompt_ids(**body) -> list[int]:
        request = urllib.request.Request(f"{endpoint.api_base}/chat/completions", json.dumps(
            {"model": "tiny", "messages": PROMPT, "max_tokens": 2, **body}).encode(),
            {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())["choices"][0]["rft"]["prompt_token_ids"]

    try:
        assert prompt_ids() == off  # the run's data.apply_chat_template_kwargs
        # a request's own chat_template_kwargs (vLLM's extension) over them
        assert prompt_ids(chat_template_kwargs={"enable_thinking": True}) == rendered(tokenizer, PROMPT)
        assert prompt_ids(chat_template_kwargs={"reasoning_effort": "high"}) == rendered(
            tokenizer, PROMPT, enable_thinking=False, reasoning_effort="high")
        for bad, said in (({"chat_template_kwargs": ["x"]}, "give a mapping of template variables"),
                          ({"chat_template_kwargs": {"tokenize": True}}, "tokenize is an argument of apply_chat_template")):
            with pytest.raises(urllib.error.HTTPError) as err:
                prompt_ids(**bad)
            assert err.value.code == 400 and said in json.loads(err.value.read())["error"]["message"]
        assert handle.template_kwargs == {"enable_thinking": False}  # a request's variables stay its own
    finally:
        endpoint.close()


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("load", list(REQUIRED), ids=lambda load: load.__name__)
def test_apply_chat_template_arguments_are_refused_before_any_model_loads(load):
    with pytest.raises(ConfigError) as err:
        load(None, [*REQUIRED[load], "+data.apply_chat_template_kwargs.tokenize=true",
                    "+data.apply_chat_template_kwargs.enable_thinking=false"], validate_paths=False)
    assert str(err.value).endswith("data.apply_chat_template_kwargs: tokenize is an argument of apply_chat_template "
                                   "that rft sets itself, not a template variable; remove it")


def test_trinitys_enable_thinking_is_the_templates_variable():
    from test_trinity import _with

    from rft.dialects.trinity import translate

    for key in ("model.enable_thinking", "explorer.rollout_model.enable_thinking"):
        out = translate(_with({key: False}))
        assert out["data"]["apply_chat_template_kwargs"] == {"enable_thinking": False}, key
    taskset = {"path": "t.jsonl", "format": {"enable_thinking": True}}
    out = translate(_with({"buffer.explorer_input.taskset": taskset}))
    assert out["data"]["apply_chat_template_kwargs"] == {"enable_thinking": True}
    # null, Trinity's default: the template's own
    assert "apply_chat_template_kwargs" not in translate(_with({"model.enable_thinking": None})).get("data", {})
    # rft has one setting for the run: two that differ are refused, naming both keys
    with pytest.raises(ConfigError) as err:
        translate(_with({"model.enable_thinking": False, "explorer.rollout_model.enable_thinking": True}))
    assert "explorer.rollout_model.enable_thinking=True, but model.enable_thinking sets it to False" in str(err.value)


# ------------------------------------------------------------------------------------------------ generate
def test_rft_generate_renders_its_prompts_with_the_variables(tokenizer, tmp_path, capsys):
    """The prompt's length tells: the limit is the plain prompt's tokens, which the /no_think line passes."""
    from rft.cli import main
    from rft.models.tiny import init_model

    model = init_model("tiny", tmp_path / "m", seed=0)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    prompts = write_parquet([{"prompt": PROMPT}], tmp_path / "p.parquet")
    plain, off = len(rendered(tokenizer, PROMPT)), len(rendered(tokenizer, PROMPT, enable_thinking=False))
    base = ["generate", f"data.path={prompts}", f"model.path={model}", f"data.output_path={tmp_path / 'o.parquet'}",
            "data.n_samples=1", "rollout.response_length=2", "rollout.dtype=float32", "trainer.device=cpu",
            f"rollout.prompt_length={plain}"]
    assert main([*base, "+data.apply_chat_template_kwargs.enable_thinking=false"]) == 2
    assert f"the prompt has {off} tokens > rollout.prompt_length={plain}" in capsys.readouterr().err
    assert main(base) == 0
