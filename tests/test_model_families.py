"""Every causal LM family a user brings trains as the tiny Qwen2 does: small random models of the families in
`rft.models.families.FAMILIES` (built from transformers' config classes, nothing downloaded), each checked for

(a) greedy rollout tokens equal to `model.generate(do_sample=False)` on a left-padded batch of prompts of different
    lengths (longer than the 8-position sliding windows of Mistral, Gemma, GPT-OSS and Cohere 2 and Llama 4's
    8-position attention chunks), and the engine's log-probs equal to a full
    forward's (1e-5, fp32);
(b) the packed update's gradient equal to the padded one (5e-6 relative to the largest entry: measured at most
    1.4e-6 over the families with PyTorch's AVX-512, AVX2 and default kernels and 1 or 2 threads, ~6e-7 typical;
    these random models' gradients reach 30, and a real fault, a leaked mask or a shifted position, moves them by
    1e-3 and more), or, for the families that cannot pack, the fallback to the padded pass;
(c) two GRPO steps and one SFT step through the CLI, each writing a model that `from_pretrained` loads, every
    trainable parameter moved;

and the tokenizers as they come (no pad token, no chat template, BOS added by the tokenizer), the value heads of
families transformers has no token-classification class for, and the router loss of mixture-of-experts models.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import torch
from rl_helpers import SHAPED_REWARD
from transformers import AutoModelForCausalLM

from rft.batch import Batch
from rft.cli import main
from rft.data.chat import adds_bos, render
from rft.models.arch import decode_mask_kind, router_recorder
from rft.models.families import FAMILIES, init_family_model
from rft.models.load import choose_pad_token, load_causal_lm, load_tokenizer, load_value_model
from rft.rollout import HFRollout, SamplingParams
from rft.tasks import write_arithmetic
from rft.workers import packing
from rft.workers.policy import forward_logprobs

os.environ["HF_HUB_OFFLINE"] = "1"
CPU = torch.device("cpu")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

CANNOT_PACK = {
    # logit soft-capping: transformers from 5.24 runs Gemma2 on eager attention; 5.17 loads it with sdpa, and rft's
    # packed attention refuses the soft-capping itself
    "gemma2": r"uses attention \['eager'\]|packed attention does not apply softcap",
    "falcon": "does not run packed",  # ALiBi: the biases come from the padding mask
    "gpt_oss": r"uses attention \['eager'\]",  # attention sinks: transformers runs GPT-OSS on eager attention
    "llama4_text": r"has chunked attention \(attention_chunk_size 8\)",  # in the model's mask, which packing replaces
}
"""The families whose packed pass falls back to the padded one, and the reason printed (a pattern: the reason a
transformers release gives)."""


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("families")
    for family in FAMILIES:
        init_family_model(family, root / family)
    write_arithmetic(root / "data", n_train=32, n_val=8, seed=0, max_digits=1)
    (root / "reward.py").write_text(SHAPED_REWARD)
    return root


def _prompts(tok, lengths=(3, 14, 9, 11)) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded random prompts of `lengths` tokens (byte tokens: every family's vocabulary has them)."""
    gen = torch.Generator().manual_seed(1)
    width = max(lengths)
    ids = torch.full((len(lengths), width), tok.pad_token_id)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = torch.randint(0, 256, (n,), generator=gen)
        mask[i, width - n:] = 1
    return ids, mask


# ----------------------------------------------------------------------------------------------- (a) rollout
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_rollout_equals_generate_and_its_log_probs_a_full_forward(root, family):
    tok = load_tokenizer(str(root / family))
    model = load_causal_lm(str(root / family), torch.float32, CPU).eval()
    ids, mask = _prompts(tok)
    new = 16
    out = HFRollout(model, [tok.eos_token_id], tok.pad_token_id).generate(
        ids, mask, SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=new, ignore_eos=True))
    reference = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new,
                               min_new_tokens=new, pad_token_id=tok.pad_token_id, eos_token_id=None)
    assert torch.equal(out.response_ids, reference[:, ids.shape[1]:])
    # a peaked random model, whose greedy choices are not coin flips between near-equal logits
    assert float(out.logprobs.mean()) > -0.5 * math.log(model.config.vocab_size)
    full = torch.cat([ids, out.response_ids], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(out.response_ids)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask,
                       position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0)).logits[:, ids.shape[1] - 1:-1]
    logprobs = logits.float().log_softmax(-1).gather(-1, out.response_ids[..., None]).squeeze(-1)
    # float32 rounding of a cached decode against one pass: llama and mistral reach 1.1e-5 at one position under
    # PyTorch's AVX2 kernels on an Intel Xeon (ATEN_CPU_CAPABILITY=avx2, 2026-11-26); a wrong position or mask moves
    # log-probs by 1e-2 and more
    assert float((logprobs - out.logprobs).abs().max()) <= 2e-5


@pytest.mark.slow
@pytest.mark.parametrize("family", ["mistral", *(pytest.param(f, marks=pytest.mark.heavy) for f in (
    "llama", "gemma2", "gpt2", "qwen3_moe", "llama4_text"))])
def test_the_compiled_decode_step_samples_what_the_eager_loop_samples(root, family):
    """`rollout.enforce_eager=false`: the decode step compiled over a static cache draws the eager loop's tokens
    with its log-probs (1e-5), on left-padded prompts, with rows ending at different steps (an EOS set of every 7th
    byte) and the n samples of a prompt sharing its prefill: a plain decoder, a sliding window narrower than the
    sequence, eager attention with soft-capping, learned positions and a mixture of experts."""
    from torch._dynamo.utils import counters

    tok = load_tokenizer(str(root / family))
    model = load_causal_lm(str(root / family), torch.float32, CPU).eval()
    ids, mask = _prompts(tok)
    params = SamplingParams(n=3, temperature=1.0, max_tokens=16)
    eos = list(range(0, 256, 7))
    eager = HFRollout(model, eos, tok.pad_token_id).generate(ids, mask, params, torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]
    compiled = HFRollout(model, eos, tok.pad_token_id, compiled=True).generate(
        ids, mask, params, torch.Generator().manual_seed(0))
    assert counters["stats"]["unique_graphs"] > graphs  # the steps ran compiled
    lengths = eager.response_mask.sum(1)
    assert len(set(lengths.tolist())) > 2  # rows ended at different steps
    assert torch.equal(compiled.response_ids, eager.response_ids)
    assert torch.equal(compiled.response_mask, eager.response_mask)
    assert float((compiled.logprobs - eager.logprobs).abs().max()) <= 1e-5


def test_the_decode_mask_is_prepared_only_where_the_model_takes_it(root):
    """Prepared (4-d) where SDPA attends the whole sequence; the padding mask for a sliding window narrower than the
    sequence (Mistral's 8), eager attention (Gemma2) and ALiBi (Falcon, found by the one-time check)."""
    kinds = {f: decode_mask_kind(load_causal_lm(str(root / f), torch.float32, CPU), 32)
             for f in ("qwen2", "llama", "gpt2", "mistral", "gemma2", "falcon")}
    assert kinds == {"qwen2": "4d", "llama": "4d", "gpt2": "4d", "mistral": "2d", "gemma2": "2d", "falcon": "2d"}
    assert decode_mask_kind(load_causal_lm(str(root / "mistral"), torch.float32, CPU), 8) == "4d"  # within window


# ------------------------------------------------------------------------------------------------ (b) packing
def _ragged_batch(tok, vocab: int) -> Batch:
    """8 rows: prompts of 3 to 14 tokens (left padded), rows 2-3 and 5-6 two responses to one prompt each (the
    packed passes compute a shared prompt once), responses of 1 to 12 (right padded)."""
    gen = torch.Generator().manual_seed(3)
    ids, mask = _prompts(tok, lengths=(3, 14, 9, 9, 5, 12, 12, 14))
    ids[3], mask[3], ids[6], mask[6] = ids[2], mask[2], ids[5], mask[5]
    lengths = torch.tensor([1, 12, 5, 9, 3, 12, 7, 2])
    response_mask = (torch.arange(12)[None] < lengths[:, None]).long()
    response = torch.randint(0, min(vocab, 256), (8, 12), generator=gen) * response_mask
    return Batch(prompt_ids=ids, prompt_mask=mask, response_ids=response, response_mask=response_mask,
                 group=torch.arange(8))


def _gradient(model, batch: Batch, weights: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logprobs, _ = forward_logprobs(model, batch, 1.0)
    (logprobs * weights).sum().backward()
    return [p.grad.detach().clone() for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_packed_update_has_the_padded_gradient(root, family, capsys):
    tok = load_tokenizer(str(root / family))
    model = load_causal_lm(str(root / family), torch.float32, CPU)
    batch = _ragged_batch(tok, model.config.vocab_size)
    weights = torch.randn(batch.response_ids.shape, generator=torch.Generator().manual_seed(4)) * batch.response_mask
    padded = _gradient(model, batch, weights)
    packs = packing.enable_remove_padding(model, "actor_rollout_ref.model.use_remove_padding")
    if family in CANNOT_PACK:
        said = capsys.readouterr().err
        assert not packs and re.search(CANNOT_PACK[family], said) and said.rstrip().endswith("running padded"), said
        return
    assert packs, capsys.readouterr().err
    packed = _gradient(model, batch, weights)
    largest = max(float(g.abs().max()) for g in padded)
    assert largest > 1e-4
    assert max(float((a - b).abs().max()) for a, b in zip(padded, packed)) / max(1.0, largest) <= 5e-6


# --------------------------------------------------------------------------------------------- (c) the CLI
def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return dict(AutoModelForCausalLM.from_pretrained(folder).named_parameters())


def _assert_loads_and_moved(base: Path, trained: Path) -> None:
    before, after = _weights(base), _weights(trained)
    assert before.keys() == after.keys()
    unmoved = [n for n in before if torch.equal(before[n], after[n])]
    assert not unmoved, unmoved


def _grpo(root: Path, model: Path, out: Path, *extra: str, example: str = "arithmetic_grpo.yaml") -> None:
    """Two steps of `example` (4 prompts x 4 samples, 4 new tokens, the shaped reward) through the CLI."""
    data = root / "data"
    assert main(["train", str(EXAMPLES / example), f"actor_rollout_ref.model.path={model}",
                 f"data.train_files={data / 'train.parquet'}", "data.val_files=null",
                 f"custom_reward_function.path={root / 'reward.py'}", "data.train_batch_size=4",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "data.max_response_length=4",
                 "actor_rollout_ref.actor.optim.lr=1e-3",
                 "trainer.total_training_steps=2", "trainer.save_freq=-1", "trainer.val_before_train=false",
                 "trainer.logger=[]", f"trainer.default_local_dir={out}", *extra]) == 0


def _sft(root: Path, model: Path, out: Path, steps: int = 1) -> None:
    data = root / "data"
    assert main(["sft", f"model.partial_pretrain={model}", f"data.train_files={data / 'train.parquet'}",
                 f"data.val_files={data / 'val.parquet'}", "data.response_key=extra_info",
                 "data.response_dict_keys=[answer]", "data.train_batch_size=4", "data.micro_batch_size_per_gpu=4",
                 "data.max_length=32", "optim.lr=1e-3", f"trainer.total_training_steps={steps}", "trainer.logger=[]",
                 f"trainer.default_local_dir={out}"]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_two_grpo_steps_and_an_sft_step_through_the_cli(root, family, tmp_path):
    _grpo(root, root / family, tmp_path / "grpo")
    _assert_loads_and_moved(root / family, tmp_path / "grpo" / "model")
    _sft(root, root / family, tmp_path / "sft")
    _assert_loads_and_moved(root / family, tmp_path / "sft" / "model")


# --------------------------------------------------------------------------------------------- tokenizers
@pytest.fixture(scope="module")
def llamas(tmp_path_factory) -> Path:
    """Llama folders whose tokenizers come as Llama 3's (`no-pad`: no pad token, a template that writes BOS) and
    as a base model's (`base`: no chat template, no pad token, BOS added to every encoding)."""
    root = tmp_path_factory.mktemp("llamas")
    for style in ("no-pad", "base"):
        init_family_model("llama", root / style, tokenizer=style)
    write_arithmetic(root / "data", n_train=32, n_val=8, seed=0, max_digits=1, preferences=True)
    from rft.tasks import write_calculator

    write_calculator(root / "calc", n_train=16, n_val=4, seed=0)
    (root / "reward.py").write_text(SHAPED_REWARD)
    return root


def test_a_tokenizer_without_a_pad_token_pads_with_one_that_is_not_eos(llamas, caplog):
    with caplog.at_level("INFO", logger="rft"):
        tok = load_tokenizer(str(llamas / "no-pad"))
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id != tok.eos_token_id
    assert "has no pad token; padding with '<|endoftext|>'" in caplog.text
    base = load_tokenizer(str(llamas / "base"))  # BOS, EOS and the ChatML words: no better choice than EOS
    assert base.pad_token == base.eos_token


class _Tok:
    """The attributes `choose_pad_token` reads."""

    def __init__(self, specials: list[str], eos: str, unk: str | None = None, added: tuple[str, ...] = ()):
        from types import SimpleNamespace

        self.vocab = {t: i for i, t in enumerate([*specials, *added])}
        self.all_special_tokens, self.eos_token, self.unk_token = specials, eos, unk
        self.eos_token_id, self.unk_token_id = self.vocab[eos], self.vocab.get(unk)
        self.added_tokens_decoder = {self.vocab[t]: SimpleNamespace(content=t, special=True) for t in added}

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.vocab[token]


@pytest.mark.parametrize("tok, pad", [
    (_Tok(["<s>", "</s>", "<unk>"], "</s>", unk="<unk>"), "<unk>"),  # Mistral, Llama 2
    (_Tok(["<|begin_of_text|>", "<|eot_id|>"], "<|eot_id|>",
          added=("<|end_of_text|>", "<|reserved_special_token_0|>", "<|finetune_right_pad_id|>")),
     "<|finetune_right_pad_id|>"),  # Llama 3
    (_Tok(["<|im_end|>"], "<|im_end|>", added=("<|endoftext|>",)), "<|endoftext|>"),  # Qwen without its pad
    (_Tok(["<s>", "</s>"], "</s>", added=("<|reserved_1|>",)), "<|reserved_1|>"),
    (_Tok(["<|endoftext|>"], "<|endoftext|>", unk="<|endoftext|>"), "<|endoftext|>"),  # GPT-2: EOS is all it has
])
def test_the_pad_token_choice(tok, pad):
    assert choose_pad_token(tok) == pad


def test_without_a_chat_template_prompts_are_plain_text(llamas, caplog):
    with caplog.at_level("INFO", logger="rft"):
        tok = load_tokenizer(str(llamas / "base"))
    assert adds_bos(tok) and not tok.chat_template
    # said, not silent (verl's apply_chat_template stops on such a tokenizer)
    assert (f"the tokenizer of {llamas / 'base'} has no chat template; chat messages are rendered as plain text, a "
            "base model's completion style (docs/models.md), unless the config gives a template "
            "(data.chat_template)") in caplog.text
    user = [{"role": "user", "content": "1+2="}]
    assert render(tok, user) == "<s>1+2="
    turns = [*user, {"role": "assistant", "content": "3"}, {"role": "tool", "content": "42"}]
    assert render(tok, turns) == "<s>1+2=3<|endoftext|>\n42"
    assert render(tok, turns).startswith(render(tok, turns[:2]))  # a conversation extends its own text
    templated = load_tokenizer(str(llamas / "no-pad"))
    assert not adds_bos(templated)  # the template writes the BOS
    assert render(templated, user).startswith("<s><|im_start|>user\n1+2=")
    # a data row whose prompt is a string: that string (after the BOS the tokenizer adds), or with a template the
    # user message it stands for
    from rft.data.dataset import PromptDataset

    rows = [{"prompt": "12+34=", "data_source": "arithmetic", "reward_model": {"ground_truth": "46"}}]
    plain = PromptDataset([("rows", rows)], tok)[0].ids
    assert plain == tok("12+34=")["input_ids"] and plain[0] == tok.bos_token_id
    assert templated.decode(PromptDataset([("rows", rows)], templated)[0].ids) == render(
        templated, [{"role": "user", "content": "12+34="}])


@pytest.mark.slow
@pytest.mark.parametrize("style", ["no-pad", "base"])
def test_grpo_sft_dpo_and_the_tool_workflow_on_a_llama_as_it_comes(llamas, style, tmp_path):
    """Done-when of the model-family issue: each finishes 2 steps on a Llama folder whose tokenizer has no pad
    token, and on one without a chat template; each writes a model that loads."""
    model = llamas / style
    _grpo(llamas, model, tmp_path / "grpo")
    _sft(llamas, model, tmp_path / "sft", steps=2)
    assert main(["dpo", str(EXAMPLES / "arithmetic_dpo.yaml"), f"model.partial_pretrain={model}",
                 f"data.train_files={llamas / 'data' / 'preference_train.parquet'}",
                 f"data.val_files={llamas / 'data' / 'preference_val.parquet'}", "data.train_batch_size=4",
                 "data.micro_batch_size_per_gpu=4", "trainer.total_training_steps=2", "trainer.logger=[]",
                 f"trainer.default_local_dir={tmp_path / 'dpo'}"]) == 0
    calc = llamas / "calc"
    _grpo(llamas, model, tmp_path / "tools", f"data.train_files={calc / 'train.parquet'}", "data.tools_key=tools",
          "workflow.type=tool_call_workflow", "workflow.args={tool_call_parser: pythonic}",
          "data.max_prompt_length=64", "data.max_response_length=12", "custom_reward_function.path=null")
    for run in ("grpo", "sft", "dpo", "tools"):
        assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path / run / "model"), torch.nn.Module)


# --------------------------------------------------------------------------------- value heads and experts
@pytest.mark.parametrize("family", ["olmo2", "opt", "granite", "gpt2"])
def test_every_family_has_a_value_model_on_its_own_backbone(root, family):
    """OLMo2, OPT and Granite have no token-classification class in transformers: rft builds one the way
    transformers builds those it has; GPT-2's own names its head `classifier`. The backbone is the causal LM's."""
    value = load_value_model(str(root / family), torch.float32, CPU)
    causal = dict(load_causal_lm(str(root / family), torch.float32, CPU).named_parameters())
    shared = [n for n, _ in value.named_parameters() if n in causal]
    assert len(shared) >= len(causal) - 1  # all but an untied LM head
    assert all(torch.equal(dict(value.named_parameters())[n], causal[n]) for n in shared)
    ids = torch.randint(0, 200, (2, 5))
    assert value(input_ids=ids).logits.shape == (2, 5, 1)


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_the_router_loss_of_a_mixture_of_experts(root, family):
    """Recorded on the update's pass, equal to the loss transformers computes itself (padded and packed alike),
    applied only where the config's output_router_logits asks (transformers' own rule)."""
    tok = load_tokenizer(str(root / family))
    model = load_causal_lm(str(root / family), torch.float32, CPU)
    router = router_recorder(model)
    assert router is not None and not router.applied and router.coef > 0
    batch = _ragged_batch(tok, model.config.vocab_size)
    forward_logprobs(model, batch, 1.0)
    ours = router.take()
    ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], dim=1)
    theirs = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                   output_router_logits=True).aux_loss
    assert ours.requires_grad and abs(float(ours.detach()) - float(theirs)) <= 1e-5
    assert packing.enable_remove_padding(model, "x")
    forward_logprobs(model, batch, 1.0)
    assert abs(float(router.take()) - float(theirs)) <= 1e-5
    with torch.no_grad():
        forward_logprobs(model, batch, 1.0)  # no gradient: a log-prob pass records nothing
    assert router.take() is None
    model.config.output_router_logits = True
    (root / f"{family}-aux").mkdir(exist_ok=True)
    model.save_pretrained(root / f"{family}-aux")
    applied = router_recorder(load_causal_lm(str(root / f"{family}-aux"), torch.float32, CPU))
    assert applied.applied


def test_the_router_loss_is_reported_and_applied_in_training(root, tmp_path):
    _grpo(root, root / "qwen3_moe", tmp_path / "plain")
    _grpo(root, root / "qwen3_moe", tmp_path / "aux",
          "+actor_rollout_ref.model.override_config.output_router_logits=true")
    import json

    plain = [json.loads(line) for line in (tmp_path / "plain" / "metrics.jsonl").read_text().splitlines()]
    aux = [json.loads(line) for line in (tmp_path / "aux" / "metrics.jsonl").read_text().splitlines()]
    assert plain[0]["actor/router_aux_loss"] == pytest.approx(aux[0]["actor/router_aux_loss"], rel=1e-6)
    assert plain[0]["actor/router_aux_loss"] > 1.0  # about top_k for a balanced router (Switch's normalisation)
    # the same first batch; the loss that adds coef * aux moves the routers elsewhere
    plain, aux = _weights(tmp_path / "plain" / "model"), _weights(tmp_path / "aux" / "model")
    assert plain.keys() == aux.keys()
    assert any("gate" in n and not torch.equal(w, aux[n]) for n, w in plain.items())


# ------------------------------------------------------------------------------------------------ bf16, CLI
def test_a_bf16_folder_trains_in_fp32_on_cpu_and_exports_bf16(root, tmp_path, caplog):
    import json

    import torch as t
    from safetensors import safe_open

    init_family_model("llama", tmp_path / "bf16", dtype=t.bfloat16)
    with caplog.at_level("INFO", logger="rft"):
        _grpo(root, tmp_path / "bf16", tmp_path / "run")
    assert "is saved in bfloat16; computing in float32" in caplog.text
    assert "the trained model is exported in bfloat16, as saved" in caplog.text
    exported = tmp_path / "run" / "model"
    assert json.loads((exported / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(exported / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {t.bfloat16}  # noqa: SIM118 (safe_open has no iterator)
    _assert_loads_and_moved(tmp_path / "bf16", exported)


def test_rft_init_model_writes_any_family(tmp_path, capsys):
    assert main(["init-model", str(tmp_path / "m"), "--family", "mistral", "--tokenizer", "base"]) == 0
    assert "wrote mistral model (base tokenizer," in capsys.readouterr().out
    assert type(AutoModelForCausalLM.from_pretrained(tmp_path / "m")).__name__ == "MistralForCausalLM"
    assert not load_tokenizer(str(tmp_path / "m")).chat_template
    assert main(["init-model", str(tmp_path / "m"), "--family", "gpt2"]) == 2  # not empty, no --overwrite
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["init-model", str(tmp_path / "m2"), "--preset", "tiny", "--family", "gpt2"]) == 2
    assert main(["init-model", str(tmp_path / "m2"), "--tokenizer", "base"]) == 2
    assert "--tokenizer applies to --family models" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("family, targets, changed", [
    ("llama", "all-linear", ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    ("gpt2", "all-linear", ("c_attn", "c_proj", "c_fc")),  # Conv1D layers
    ("gpt2", "[c_attn]", ("c_attn",)),
    ("phi3", "[qkv_proj,gate_up_proj]", ("qkv_proj", "gate_up_proj")),
    ("mixtral", "all-linear", ("q_proj", "k_proj", "v_proj", "o_proj", "mlp.gate",  # the router too
                               "experts.gate_up_proj", "experts.down_proj")),  # the fused experts' 3-d weights
])
def test_lora_by_each_familys_module_names(root, tmp_path, family, targets, changed):
    """Two LoRA GRPO steps: the merged export differs from the base exactly in the targeted modules' weights."""
    _grpo(root, root / family, tmp_path / "run", "actor_rollout_ref.model.lora_rank=4",
          f"actor_rollout_ref.model.target_modules={targets}", "actor_rollout_ref.actor.optim.lr=1e-2")
    before, after = _weights(root / family), _weights(tmp_path / "run" / "model")
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved and all(any(c in n for c in changed) for n in moved), moved
    assert all(any(c in n for n in moved) for c in changed), moved


@pytest.mark.slow
def test_torch_compile_finds_the_layers_of_families_whose_blocks_are_not_named_decoder_layers(root, capsys):
    """GPT-2's layers are GPT2Block: the layers compiled are the model's `_no_split_modules`, as FSDP's units."""
    from rft.workers.packing import compile_backend_works, enable_torch_compile

    model = load_causal_lm(str(root / "gpt2"), torch.float32, CPU)
    blocks = [m for m in model.modules() if type(m).__name__ == "GPT2Block"]
    assert len(blocks) == 2
    assert enable_torch_compile(model, "actor_rollout_ref.actor.use_torch_compile") == compile_backend_works()[0]
    if compile_backend_works()[0]:
        assert all(b._compiled_call_impl is not None for b in blocks)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "olmo2", "mistral", "qwen3_moe", "falcon"])
def test_ppo_with_a_critic_packed_and_by_token_budget(root, family, tmp_path):
    """PPO's critic on each family's backbone (OLMo2: rft's generic head; GPT-2: its `classifier`), every pass
    packed where the family packs and cut by token budget (use_dynamic_bsz), two steps: both exports load."""
    from transformers import AutoConfig

    _grpo(root, root / family, tmp_path, "critic.ppo_micro_batch_size_per_gpu=16",
          "actor_rollout_ref.model.use_remove_padding=true", "critic.model.use_remove_padding=true",
          "actor_rollout_ref.actor.use_dynamic_bsz=true", "critic.use_dynamic_bsz=true", example="arithmetic_ppo.yaml")
    _assert_loads_and_moved(root / family, tmp_path / "model")
    critic = tmp_path / "critic"
    assert AutoConfig.from_pretrained(critic).architectures[0].endswith("ForTokenClassification")
    value = load_value_model(str(critic), torch.float32, CPU)
    assert value(input_ids=torch.randint(0, 200, (1, 4))).logits.shape == (1, 4, 1)
