"""The hf rollout engine: masks and logit filters (tier 1), generation with the tiny model (tier 2)."""

from __future__ import annotations

import copy
import importlib
import math
import os
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

from rft.batch import Batch
from rft.data.dataset import left_pad
from rft.rollout import HFRollout, SamplingParams
from rft.rollout.hf import filter_logits, response_mask_from, sample_next
from rft.workers.policy import forward_logprobs

IM_END, PAD = 274, 272
EOS_IDS = [IM_END, PAD]
# The untrained tiny model samples close to uniformly over its 275 tokens: it almost never emits <|im_end|>.
# Treating 38 tokens (digits, lower-case letters, <|im_end|>) as EOS ends ~14% of rows per step: responses of
# many different lengths, which is what the padding checks need.
STOP_IDS = [*range(ord("0"), ord("9") + 1), *range(ord("a"), ord("z") + 1), IM_END, PAD]
QUESTIONS = ["1+2=", "12+345=", "What is the sum of 17 and 25?"]


# --------------------------------------------------------------------------------------- response mask
def test_response_mask_from_hand_case():
    eos = torch.tensor(EOS_IDS)
    tokens = torch.tensor([
        [5, IM_END, 7, IM_END],  # EOS mid-row: kept, everything after masked (a second EOS too)
        [5, 6, 7, 8],  # no EOS: all kept
        [IM_END, 1, 2, 3],  # EOS first
        [5, PAD, 9, 9],  # any id of eos_ids counts
    ])
    assert response_mask_from(tokens, eos, ignore_eos=False).tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 1],
        [1, 0, 0, 0],
        [1, 1, 0, 0],
    ]
    assert response_mask_from(tokens, eos, ignore_eos=True).tolist() == [[1] * 4] * 4


# ------------------------------------------------------------------------------------------ filter_logits
def finite(x: torch.Tensor) -> list[list[bool]]:
    return torch.isfinite(x).tolist()


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    out = filter_logits(logits, top_k=2, top_p=1.0)
    kept = torch.isfinite(out)
    assert kept.sum(-1).tolist() == [2] * 5
    top2 = torch.topk(logits, 2, dim=-1).indices
    assert torch.equal(kept, torch.zeros_like(kept).scatter_(-1, top2, True))
    assert torch.equal(out[kept], logits[kept])  # kept logits are untouched


PROBS = [0.5, 0.3, 0.15, 0.05]


@pytest.mark.parametrize(
    "top_p, kept",
    [
        (0.7, 2),  # 0.5 < 0.7 <= 0.5 + 0.3
        (0.5, 1),  # the first token alone reaches 0.5
        (0.3, 1),  # the first token always stays
        (0.81, 3),  # 0.8 < 0.81 <= 0.95
        (0.99, 4),
    ],
)
def test_top_p_on_a_known_distribution(top_p, kept):
    logits = torch.tensor([PROBS, PROBS[::-1]]).log()  # row 2 reversed: the kept set follows the order
    expected = [[i < kept for i in range(4)], [i >= 4 - kept for i in range(4)]]
    assert finite(filter_logits(logits, top_k=-1, top_p=top_p)) == expected


def test_top_k_and_top_p_together():
    logits = torch.tensor([PROBS]).log()
    assert finite(filter_logits(logits, top_k=3, top_p=0.99)) == [[True, True, True, False]]
    assert finite(filter_logits(logits, top_k=3, top_p=0.7)) == [[True, True, False, False]]


@pytest.mark.parametrize("top_k, top_p", [(-1, 1.0), (0, 1.0), (11, 1.0), (50, 1.0)])
def test_disabled_filters_leave_logits_unchanged(top_k, top_p):
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(1))
    assert torch.equal(filter_logits(logits, top_k, top_p), logits)


@pytest.mark.parametrize(
    "temperature, top_p, expected",
    [
        (1.0, 1.0, PROBS),
        # softmax(log p / 0.5) = p^2 / sum p^2
        (0.5, 1.0, [p * p / sum(q * q for q in PROBS) for p in PROBS]),
        (1.0, 0.7, [0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0]),  # the nucleus, renormalised
    ],
)
def test_sample_next_frequencies(temperature, top_p, expected):
    rows = 20000  # the std of a frequency is at most sqrt(0.25 / 20000) = 0.0035
    logits = torch.tensor([PROBS]).log().expand(rows, 4)
    params = SamplingParams(temperature=temperature, top_p=top_p)
    tokens = sample_next(logits, params, torch.Generator().manual_seed(0))
    assert tokens.shape == (rows,)
    freq = torch.bincount(tokens, minlength=4).double() / rows
    assert torch.allclose(freq, torch.tensor(expected, dtype=torch.double), atol=0.015), freq


def test_sample_next_greedy_is_argmax():
    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(2))
    expected = logits.argmax(-1)
    assert torch.equal(sample_next(logits, SamplingParams(do_sample=False), None), expected)
    assert torch.equal(sample_next(logits, SamplingParams(temperature=0.0), None), expected)
    # sampling from the top-1 token is argmax too, whatever the generator draws
    top1 = sample_next(logits, SamplingParams(top_k=1), torch.Generator().manual_seed(3))
    assert torch.equal(top1, expected)


def test_the_inverse_distribution_function_draws_the_probabilities():
    """`inverse_cdf_sample`: the frequencies are the probabilities, a token of probability 0 is never drawn (three
    of 1,000 tokens hold all the mass, one of them the last), and the generator fixes the draws."""
    from rft.rollout.hf import inverse_cdf_sample

    vocab, rows = 1000, 20_000  # the std of a frequency is at most sqrt(0.25 / 20000) = 0.0035
    probs = torch.zeros(rows, vocab)
    probs[:, [7, 500, vocab - 1]] = torch.tensor([0.5, 0.2, 0.3])
    tokens = inverse_cdf_sample(probs, torch.Generator().manual_seed(0))
    assert set(tokens.unique().tolist()) == {7, 500, vocab - 1}
    freq = torch.bincount(tokens, minlength=vocab)[[7, 500, vocab - 1]].double() / rows
    assert torch.allclose(freq, torch.tensor([0.5, 0.2, 0.3], dtype=torch.double), atol=0.015), freq
    # uniform over all 1,000: every tenth of the vocabulary gets a tenth of the draws
    uniform = inverse_cdf_sample(torch.full((rows, vocab), 1e-3), torch.Generator().manual_seed(1))
    tenths = torch.bincount(uniform // (vocab // 10), minlength=10).double() / rows
    assert torch.allclose(tenths, torch.full((10,), 0.1, dtype=torch.double), atol=0.015), tenths
    again = inverse_cdf_sample(torch.full((rows, vocab), 1e-3), torch.Generator().manual_seed(1))
    assert torch.equal(uniform, again)


def test_large_vocabularies_sample_by_the_inverse_distribution_function(monkeypatch):
    """From LARGE_VOCABULARY tokens on, sample_next draws by `inverse_cdf_sample`, below by torch.multinomial."""
    from rft.rollout import hf

    drawn = []
    real = hf.inverse_cdf_sample
    monkeypatch.setattr(hf, "inverse_cdf_sample", lambda p, g: drawn.append(p.shape) or real(p, g))
    logits = torch.full((4, hf.LARGE_VOCABULARY), float("-inf"))
    logits[:, -1] = 0.0  # every draw must be the last token
    tokens = sample_next(logits, SamplingParams(temperature=0.7), torch.Generator().manual_seed(0))
    assert tokens.tolist() == [hf.LARGE_VOCABULARY - 1] * 4 and drawn == [(4, hf.LARGE_VOCABULARY)]
    sample_next(logits[:, -100:], SamplingParams(), torch.Generator().manual_seed(0))
    assert len(drawn) == 1  # a small vocabulary: multinomial


# ------------------------------------------------------------------------------------ the tiny model
@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rft.models.tiny import init_model

    path = init_model("tiny", tmp_path_factory.mktemp("rollout_tiny") / "m", seed=0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def model(model_and_tokenizer):
    return model_and_tokenizer[0]


@pytest.fixture(scope="module")
def prompts(model_and_tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) of three chat prompts of different lengths, left-padded, plus one all-padding column."""
    tokenizer = model_and_tokenizer[1]
    chats = [[{"role": "user", "content": q}] for q in QUESTIONS]
    seqs = [tokenizer.apply_chat_template(chat, add_generation_prompt=True)["input_ids"] for chat in chats]
    assert len({len(s) for s in seqs}) == 3
    ids, mask = left_pad(seqs, PAD)
    return torch.nn.functional.pad(ids, (1, 0), value=PAD), torch.nn.functional.pad(mask, (1, 0), value=0)


def generate(model, prompts, eos=EOS_IDS, micro_batch_size=None, seed=0, **params):
    engine = HFRollout(model, eos_token_ids=eos, pad_token_id=PAD, micro_batch_size=micro_batch_size)
    return engine.generate(*prompts, SamplingParams(**params), torch.Generator().manual_seed(seed))


def until_eos(row: list[int], eos=EOS_IDS) -> list[int]:
    for i, token in enumerate(row):
        if token in eos:
            return row[:i + 1]
    return row


def test_greedy_matches_transformers_generate(model, prompts):
    R = 12
    ours = generate(model, prompts, do_sample=False, max_tokens=R)
    theirs = model.generate(
        input_ids=prompts[0], attention_mask=prompts[1], do_sample=False, max_new_tokens=R,
        eos_token_id=EOS_IDS, pad_token_id=PAD,
    )[:, prompts[0].shape[1]:]
    for i in range(len(QUESTIONS)):
        expected = until_eos(theirs[i].tolist())
        assert ours.response_ids[i].tolist()[:len(expected)] == expected
        assert ours.response_mask[i].sum().item() == len(expected)


def test_output_shapes_and_groups(model, prompts):
    n, R = 4, 10
    out = generate(model, prompts, eos=STOP_IDS, n=n, max_tokens=R)
    B = len(QUESTIONS) * n
    assert out.response_ids.shape == out.response_mask.shape == out.logprobs.shape
    assert out.response_ids.shape[0] == B and out.response_ids.shape[1] <= R
    assert out.response_ids.dtype == torch.long and out.logprobs.dtype == torch.float32
    lengths = out.response_mask.sum(-1)
    assert len(set(lengths.tolist())) > 2, "the test needs responses of different lengths"
    for row in range(B):
        ids, mask = out.response_ids[row].tolist(), out.response_mask[row].tolist()
        length = int(lengths[row])
        assert mask == [1] * length + [0] * (len(mask) - length)  # one run of ones from column 0
        assert ids[:length] == until_eos(ids, STOP_IDS)  # the run ends at the first EOS
        assert ids[length:] == [PAD] * (len(ids) - length)
    valid = out.response_mask.bool()
    assert (out.logprobs[valid] < 0).all() and (out.logprobs[~valid] == 0).all()
    # the rows of one prompt are adjacent: greedy copies of prompt i are rows i*n .. i*n+n-1
    greedy = generate(model, prompts, do_sample=False, n=n, max_tokens=R).response_ids
    single = generate(model, prompts, do_sample=False, n=1, max_tokens=R).response_ids
    assert torch.equal(greedy, single.repeat_interleave(n, dim=0))


def test_stopping_rows_do_not_change_the_others(model, prompts):
    # finished rows keep drawing (and discarding) tokens, so the sampling stream is that of ignore_eos
    R = 10
    free = generate(model, prompts, n=3, max_tokens=R, ignore_eos=True, seed=4)
    assert free.response_ids.shape == (9, R) and free.response_mask.eq(1).all()
    stopped = generate(model, prompts, eos=STOP_IDS, n=3, max_tokens=R, seed=4)
    width = stopped.response_ids.shape[1]
    for row in range(9):
        expected = until_eos(free.response_ids[row].tolist(), STOP_IDS)
        assert stopped.response_ids[row].tolist() == (expected + [PAD] * R)[:width]
    assert width == max(len(until_eos(r, STOP_IDS)) for r in free.response_ids.tolist())


def test_same_seed_same_samples_different_seed_different(model, prompts):
    a = generate(model, prompts, n=2, max_tokens=8, seed=1)
    b = generate(model, prompts, n=2, max_tokens=8, seed=1)
    c = generate(model, prompts, n=2, max_tokens=8, seed=2)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.response_ids, c.response_ids)
    # two samples of one prompt differ: each row draws its own tokens
    assert not torch.equal(a.response_ids[0], a.response_ids[1])


def test_generator_state_fixes_the_samples(model, prompts):
    # what a checkpoint relies on: restoring the generator's state replays the same samples
    engine = HFRollout(model, eos_token_ids=EOS_IDS, pad_token_id=PAD)
    params = SamplingParams(n=2, max_tokens=6)
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    first = engine.generate(*prompts, params, generator).response_ids
    second = engine.generate(*prompts, params, generator).response_ids
    assert not torch.equal(first, second)  # the stream moved on
    generator.set_state(state)
    assert torch.equal(engine.generate(*prompts, params, generator).response_ids, first)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cpu_generator_drives_sampling_on_cuda(model, prompts):
    # the trainer's generator lives on the CPU; torch.multinomial on CUDA logits refuses a CPU generator
    cuda_model = copy.deepcopy(model).cuda()
    a = generate(cuda_model, prompts, n=2, max_tokens=6, seed=1)
    b = generate(cuda_model, prompts, n=2, max_tokens=6, seed=1)
    c = generate(cuda_model, prompts, n=2, max_tokens=6, seed=2)
    assert a.response_ids.device.type == "cpu"
    assert torch.equal(a.response_ids, b.response_ids)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_top_k_one_sampling_is_greedy(model, prompts):
    greedy = generate(model, prompts, do_sample=False, max_tokens=8)
    top1 = generate(model, prompts, top_k=1, max_tokens=8, seed=5)
    assert torch.equal(greedy.response_ids, top1.response_ids)


@pytest.mark.parametrize("micro_batch_size", [1, 4])
def test_micro_batches_give_the_same_greedy_output(model, prompts, micro_batch_size):
    # Make the last prompt's first greedy token an EOS: its rows stop at once while others run on, so the
    # micro-batches come back with different widths and must be padded to one.
    reference = generate(model, prompts, do_sample=False, max_tokens=10, ignore_eos=True).response_ids
    eos = [*EOS_IDS, int(reference[-1, 0])]
    whole = generate(model, prompts, eos=eos, do_sample=False, n=2, max_tokens=10)
    lengths = whole.response_mask.sum(-1).tolist()
    assert lengths[-1] == 1 and max(lengths) == whole.response_ids.shape[1] == 10, lengths
    split = generate(model, prompts, eos=eos, do_sample=False, n=2, max_tokens=10,
                     micro_batch_size=micro_batch_size)
    assert torch.equal(whole.response_ids, split.response_ids)
    assert torch.equal(whole.response_mask, split.response_mask)
    assert torch.allclose(whole.logprobs, split.logprobs, atol=1e-5)


def test_generate_restores_training_mode(model, prompts):
    model.train()
    try:
        generate(model, prompts, do_sample=False, max_tokens=2)
        assert model.training
    finally:
        model.eval()


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_rollout_logprobs_match_a_full_forward_pass(model, prompts, temperature):
    n = 3
    out = generate(model, prompts, eos=STOP_IDS, n=n, max_tokens=12, temperature=temperature,
                   do_sample=temperature > 0, seed=6)
    if temperature > 0:
        lengths = set(out.response_mask.sum(-1).tolist())
        assert len(lengths) > 2, "the test needs responses of different lengths"
    batch = Batch(
        prompt_ids=prompts[0].repeat_interleave(n, dim=0),
        prompt_mask=prompts[1].repeat_interleave(n, dim=0),
        response_ids=out.response_ids,
        response_mask=out.response_mask,
        group=torch.arange(len(QUESTIONS)).repeat_interleave(n),
    )
    with torch.no_grad():
        logprobs, _ = forward_logprobs(model, batch, temperature)
    valid = out.response_mask.bool()
    diff = (logprobs - out.logprobs)[valid].abs().max().item()
    assert diff < 1e-4, diff
    assert math.isfinite(diff)




def test_a_lora_adapter_is_applied_without_a_library_futurewarning(tmp_path):
    """peft reads the model's deprecated `is_gradient_checkpointing`, and transformers printed a FutureWarning on
    every LoRA run: apply_lora silences exactly that message."""
    import warnings

    from omegaconf import OmegaConf

    from rft.models.load import apply_lora, load_causal_lm
    from rft.models.tiny import init_model

    init_model("tiny", tmp_path / "m", seed=0)
    model = load_causal_lm(str(tmp_path / "m"), torch.float32, torch.device("cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        lora = apply_lora(model, OmegaConf.create({"lora_rank": 4, "lora_alpha": 8, "target_modules": "all-linear",
                                                  "exclude_modules": None}))
    assert any("lora_A" in name for name, _ in lora.named_parameters())
def test_hf_weights_merge_lora_as_peft_does_without_touching_the_base(tmp_path):
    """What the vLLM engine loads (models.load.hf_weights): the Hugging Face names and values of
    merge_and_unload(), computed without modifying the LoRA model; a plain model's own state dict."""
    from omegaconf import OmegaConf

    from rft.models.load import apply_lora, hf_weights, load_causal_lm
    from rft.models.tiny import init_model

    init_model("tiny", tmp_path / "m", seed=0)
    plain = load_causal_lm(str(tmp_path / "m"), torch.float32, torch.device("cpu"))
    assert hf_weights(plain).keys() == plain.state_dict().keys()
    lora = apply_lora(load_causal_lm(str(tmp_path / "m"), torch.float32, torch.device("cpu")),
                      OmegaConf.create({"lora_rank": 4, "lora_alpha": 8, "target_modules": "all-linear",
                                        "exclude_modules": None}))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    before = {k: v.clone() for k, v in lora.state_dict().items()}
    merged = hf_weights(lora)
    assert all(torch.equal(before[k], v) for k, v in lora.state_dict().items())  # nothing merged in place
    reference = copy.deepcopy(lora).merge_and_unload().state_dict()
    assert merged.keys() == reference.keys() == plain.state_dict().keys()
    assert max(float((merged[k] - reference[k]).abs().max()) for k in merged) <= 1e-6
    changed = [k for k in merged if not torch.equal(merged[k], plain.state_dict()[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)  # the adapted linears, nothing else


# ------------------------------------------------------------------------------ the decode attention
class _Attention(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


@pytest.mark.parametrize("heads, kv_heads", [(8, 4), (4, 4), (6, 1)])
@pytest.mark.parametrize("mask", ["none", "bool", "bool per head", "additive"])
def test_decode_attention_is_sdpa(heads, kv_heads, mask):
    """The engine's decode attention (grouped matrix products) against transformers' SDPA on a decode step: GQA, MHA
    and MQA, without a mask, with a padding mask (boolean, one for all heads or one per head) and an additive one;
    a prefill (several queries) goes to SDPA itself, unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from rft.models.attention import decode_attention

    g = torch.Generator().manual_seed(0)
    batch, length, dim = 3, 11, 16
    module = _Attention(heads // kv_heads)
    q = torch.randn(batch, heads, 1, dim, generator=g)
    k, v = (torch.randn(batch, kv_heads, length, dim, generator=g) for _ in range(2))
    keep = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    keep[0, ..., :4] = False  # a left-padded row
    keep[2, ..., :1] = False
    masks = {"none": None, "bool": keep, "bool per head": keep.expand(batch, heads, 1, length).clone(),
             "additive": torch.zeros(batch, 1, 1, length).masked_fill(~keep, float("-inf"))
             + 0.1 * torch.randn(batch, 1, 1, length, generator=g)}
    ours, _ = decode_attention(module, q, k, v, masks[mask], scaling=0.3)
    theirs, _ = sdpa_attention_forward(module, q, k, v, masks[mask], scaling=0.3)
    assert ours.shape == theirs.shape == (batch, 1, heads, dim)
    assert float((ours - theirs).abs().max()) < 2e-6
    if mask == "bool":  # the padded keys take no part: changing them changes nothing
        k2 = k.clone()
        k2[0, :, :4] = 100.0
        assert torch.allclose(decode_attention(module, q, k2, v, keep, scaling=0.3)[0], ours, atol=1e-6)
    prefill = torch.randn(batch, heads, 5, dim, generator=g)
    assert torch.equal(decode_attention(module, prefill, k, v, None)[0],
                       sdpa_attention_forward(module, prefill, k, v, None)[0])


def test_the_decode_attention_reads_only_the_written_part_of_a_static_cache():
    """`rft_attend=n` (the compiled decode step's bucket): the keys and values after position n are not read (NaN
    there changes nothing) and the result is the whole cache's with those positions masked; n past the buffer (a
    sliding-window layer's shorter one) reads it whole."""
    from rft.models.attention import ATTEND_KWARG, decode_attention

    g = torch.Generator().manual_seed(1)
    module = _Attention(2)
    q = torch.randn(2, 4, 1, 8, generator=g)
    k, v = (torch.randn(2, 2, 12, 8, generator=g) for _ in range(2))
    written = torch.zeros(2, 1, 1, 12, dtype=torch.bool)
    written[..., :7] = True  # 7 positions written, an attend bucket of 8
    whole, _ = decode_attention(module, q, k, v, written)
    k_unwritten, v_unwritten = k.clone(), v.clone()
    k_unwritten[:, :, 8:] = float("nan")
    v_unwritten[:, :, 8:] = float("nan")
    bucket, _ = decode_attention(module, q, k_unwritten, v_unwritten, written, **{ATTEND_KWARG: 8})
    assert torch.allclose(bucket, whole, atol=1e-6)
    assert torch.isnan(decode_attention(module, q, k_unwritten, v_unwritten, written)[0]).any()  # read: NaN
    assert torch.equal(decode_attention(module, q, k, v, written, **{ATTEND_KWARG: 40})[0], whole)


def test_the_compiled_steps_static_cache_keeps_one_dtype_per_layer(model_and_tokenizer):
    """Under bf16 autocast a Qwen2 prefill writes float32 keys (bf16 projections times float32 rotary factors) and
    bf16 values, and a later step can write bf16 keys: transformers' StaticCache refuses one of these writes (5.17
    allocates the values in the keys' dtype, 5.24 each in its own, then refuses the bf16 key); the engine's cache
    keeps both in the wider dtype, the bf16 writes widened exactly."""
    from transformers import StaticCache

    from rft.rollout.cache import OneDtypeStaticCache

    config = model_and_tokenizer[0].config
    g = torch.Generator().manual_seed(0)
    shape = (2, config.num_key_value_heads, 3, config.hidden_size // config.num_attention_heads)
    prefill_k, prefill_v = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g).bfloat16()
    step_k, step_v = (torch.randn(*shape[:2], 1, shape[3], generator=g).bfloat16() for _ in range(2))
    with pytest.raises(RuntimeError, match="same dtype"):
        plain = StaticCache(config=config, max_cache_len=8)
        plain.update(prefill_k, prefill_v, 0)
        plain.update(step_k, step_v, 0)
    cache = OneDtypeStaticCache(config=config, max_cache_len=8)
    cache.update(prefill_k, prefill_v, 0)
    keys, values = cache.update(step_k, step_v, 0)
    assert keys.dtype == values.dtype == torch.float32
    assert torch.equal(keys[:, :, :4], torch.cat([prefill_k, step_k.float()], 2))
    assert torch.equal(values[:, :, :4], torch.cat([prefill_v, step_v], 2).float())
    assert not keys[:, :, 4:].any()


@pytest.mark.parametrize("packed", [False, True], ids=["decode_attention", "packed_attention"])
def test_the_compiled_decode_loop_attends_in_buckets_and_drops_finished_rows(model_and_tokenizer, prompts, packed):
    """The loop of `rollout.enforce_eager=false` (its step run eagerly here, through a spy): each step attends the
    written part of the static cache rounded up to ATTEND_BUCKET positions, under the decode attention and under
    the packed one (use_remove_padding, whose decode steps are the decode attention's); the rows that ended leave
    the passes once a quarter of them have, as in the eager loop, whose tokens and log-probs it draws."""
    from rft.rollout.hf import ATTEND_BUCKET
    from rft.workers.packing import enable_remove_padding

    model = copy.deepcopy(model_and_tokenizer[0])
    if packed:
        assert enable_remove_padding(model, "actor_rollout_ref.model.use_remove_padding")
    params = SamplingParams(n=4, temperature=1.0, max_tokens=20)
    engine = HFRollout(model, eos_token_ids=STOP_IDS, pad_token_id=PAD, compiled=True)
    steps = []  # (rows in the pass, positions attended, positions written)

    def step(token, position, mask, cache, attend):
        steps.append((token.shape[0], attend, int(cache.get_seq_length()) + 1))
        return engine._decode_step(token, position, mask, cache, attend)

    engine._step = step
    got = engine.generate(*prompts, params, torch.Generator().manual_seed(0))
    width = prompts[0].shape[1]
    capacity = width + params.max_tokens
    assert [w for _, _, w in steps] == list(range(width + 1, width + 1 + len(steps)))
    assert [a for _, a, _ in steps] == [min(capacity, -(-w // ATTEND_BUCKET) * ATTEND_BUCKET) for _, _, w in steps]
    assert steps[0][1] < capacity  # not the whole cache
    rows = [r for r, _, _ in steps]
    assert rows[0] == 12 and rows == sorted(rows, reverse=True) and len(set(rows)) > 2  # rows left the passes
    lengths = got.response_mask.sum(1)
    assert all(rows[t] >= int((lengths > t + 1).sum()) for t in range(len(steps)))  # never a running row
    expected = HFRollout(model, eos_token_ids=STOP_IDS, pad_token_id=PAD).generate(
        *prompts, params, torch.Generator().manual_seed(0))
    assert torch.equal(got.response_ids, expected.response_ids)
    assert float((got.logprobs - expected.logprobs).abs().max()) <= 1e-5


def test_the_engine_decodes_with_its_attention_and_the_models_other_passes_are_sdpa(model_and_tokenizer, prompts):
    """HFRollout switches an SDPA model to the decode attention; its generation equals the one under SDPA (greedy
    tokens, log-probs to 1e-5) and a full forward pass (training, log-probs) is SDPA's to the bit."""
    from transformers import AutoModelForCausalLM

    from rft.models.attention import DECODE_ATTENTION, attention_configs

    sdpa = AutoModelForCausalLM.from_pretrained(model_and_tokenizer[1].name_or_path, dtype=torch.float32).eval()
    ours = copy.deepcopy(sdpa)
    engine = HFRollout(ours, eos_token_ids=EOS_IDS, pad_token_id=PAD)
    assert {c._attn_implementation for c in attention_configs(ours)} == {DECODE_ATTENTION}
    with torch.no_grad():
        assert torch.equal(ours(input_ids=prompts[0], attention_mask=prompts[1]).logits,
                           sdpa(input_ids=prompts[0], attention_mask=prompts[1]).logits)
    params = SamplingParams(do_sample=False, temperature=0.0, max_tokens=12)
    got = engine.generate(*prompts, params)
    for c in attention_configs(ours):
        c._attn_implementation = "sdpa"
    expected = engine.generate(*prompts, params)
    assert torch.equal(got.response_ids, expected.response_ids)
    assert float((got.logprobs - expected.logprobs).abs().max()) < 1e-5


def test_generation_runs_compiled_layers_eagerly(model_and_tokenizer, prompts):
    """use_torch_compile compiles the decoder layers for the training passes; generation runs them eagerly (its
    shapes change every token: compiled, the layers recompiled until torch's limit, ~30 s on the small preset, and
    then ran slower than eager). Nothing is compiled by a generation, and its output is the eager one."""
    from torch._dynamo.utils import counters

    from rft.workers.packing import compile_backend_works, enable_torch_compile

    eager = copy.deepcopy(model_and_tokenizer[0])
    compiled = copy.deepcopy(eager)
    assert enable_torch_compile(compiled, "actor_rollout_ref.actor.use_torch_compile") == compile_backend_works()[0]
    params = SamplingParams(temperature=1.0, max_tokens=8)
    before = counters["frames"]["ok"]
    got = HFRollout(compiled, EOS_IDS, PAD).generate(*prompts, params, torch.Generator().manual_seed(0))
    assert counters["frames"]["ok"] == before
    expected = HFRollout(eager, EOS_IDS, PAD).generate(*prompts, params, torch.Generator().manual_seed(0))
    assert torch.equal(got.response_ids, expected.response_ids)
    assert torch.equal(got.logprobs, expected.logprobs)


# ------------------------------------------------------------------- the compiled decode step (issue 40)
def test_enforce_eager_false_decodes_bloom_eager_for_its_alibi(tmp_path, caplog):
    """Bloom's ALiBi biases come from the padding mask, as Falcon's do, but its config has no `alibi` key: it
    was compiled and failed ('The expanded size of the tensor ... must match', a bug in rft). Asked of the
    model."""
    import logging

    from transformers import AutoConfig, AutoModelForCausalLM

    from rft.rollout.engines import compiled_decode

    caplog.set_level(logging.INFO, logger="rft")
    config = AutoConfig.for_model("bloom", vocab_size=300, hidden_size=64, n_layer=2, n_head=2)
    bloom = AutoModelForCausalLM.from_config(config)
    assert not compiled_decode(False, bloom, sharded=False)
    assert "decodes eager, since its model's ALiBi biases come from the padding mask" in caplog.text
    from rft.models.arch import uses_alibi

    assert uses_alibi(bloom)
    falcon = AutoModelForCausalLM.from_config(AutoConfig.for_model("falcon", vocab_size=300, hidden_size=64,
                                                                   num_hidden_layers=1, num_attention_heads=2,
                                                                   alibi=False))
    assert not uses_alibi(falcon)  # rotary: the config says so


def test_a_failing_compile_check_names_its_own_error(monkeypatch):
    """inductor's error comes wrapped (`BackendCompilerFailed`, whose first line is "backend='inductor'
    raised:"): the reason logged is the compiler's own error."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import CppCompileError

    from rft.workers import packing

    inner = CppCompileError(["g++", "k.cpp"], "k.cpp: In function 'void kernel()':\n"
                                              "k.cpp:15:37: error: 'at::vec' has not been declared\n")

    def failing(fn, **kwargs):
        def run(*args):
            raise BackendCompilerFailed(fn, inner, None)
        return run

    monkeypatch.setattr(packing, "_COMPILE_OK", None)
    monkeypatch.setattr(torch, "compile", failing)
    ok, why = packing.compile_backend_works()
    assert not ok, why
    assert why.startswith("CppCompileError: C++ compile error: 'at::vec' has not been declared"), why


@pytest.mark.heavy
def test_another_aten_cpu_capability_compiles_in_an_inductor_cache_of_its_own(tmp_path):
    """inductor's on-disk cache is not keyed on ATEN_CPU_CAPABILITY: after a run under this CPU's own kernels,
    one under `default` met precompiled headers built for the other ('at::vec' has not been declared) and fell
    back to eager saying torch.compile does not work here. Each capability now gets a cache folder of its
    own."""
    import subprocess
    import sys

    script = ("import os\nfrom rft.workers.packing import compile_backend_works\n"
              "print(compile_backend_works(), os.environ.get('TORCHINDUCTOR_CACHE_DIR'))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "ATEN_CPU_CAPABILITY")}
    env.update(TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")  # inductor's default cache: under TMPDIR
    outs = []
    for capability in (None, "default"):
        run_env = {**env, "ATEN_CPU_CAPABILITY": capability} if capability else env
        proc = subprocess.run([sys.executable, "-c", script], env=run_env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.strip().splitlines()[-1])
    if not outs[0].startswith("(True"):
        pytest.skip(f"torch.compile does not work here: {outs[0]}")
    assert outs[1].startswith("(True, '')") and outs[1].endswith("_default"), outs


# ------------------------------------------------------------------------ generation's products (kernels)
@pytest.mark.parametrize("kernel", ["onednn", "auto"])
def test_generation_on_onednn_products_equals_mkls(model, prompts, monkeypatch, kernel):
    """`rft.rollout.kernels`: the decode loop's products on oneDNN (forced, or by the rule) give the greedy
    tokens and the log-probs of `linear`'s (MKL), and leave the model's layers as they were."""
    from rft.rollout import kernels

    monkeypatch.setenv(kernels.KERNEL_ENV, "aten")
    reference = generate(model, prompts, eos=STOP_IDS, n=2, max_tokens=10, do_sample=False)
    monkeypatch.setenv(kernels.KERNEL_ENV, kernel)
    routed = []
    real = kernels._onednn
    monkeypatch.setattr(kernels, "_onednn", lambda *a: routed.append(1) or real(*a))
    out = generate(model, prompts, eos=STOP_IDS, n=2, max_tokens=10, do_sample=False)
    if kernel == "onednn":
        assert routed, "no product went to oneDNN"
    assert torch.equal(out.response_ids, reference.response_ids)
    assert (out.logprobs - reference.logprobs).abs().max() < 1e-5
    assert not any("forward" in vars(m) for m in model.modules())  # the layers' own forward again


def test_routed_layers_keep_autograd_and_other_dtypes_on_linear(monkeypatch):
    from rft.rollout import kernels

    monkeypatch.setenv(kernels.KERNEL_ENV, "onednn")
    calls = []
    monkeypatch.setattr(kernels, "_onednn", lambda x, w, b: calls.append(x.shape) or torch.nn.functional.linear(x, w, b))
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2).double())
    x = torch.randn(3, 8)
    with kernels.fast_linears(net):
        with torch.no_grad():
            net[0](x)
        assert calls == [(3, 8)]  # the float32 layer, without gradients
        net[1](torch.randn(3, 4, dtype=torch.double))  # another dtype: linear
        y = net[0](x)  # with gradients: linear, and the backward works
        y.sum().backward()
    assert calls == [(3, 8)] and net[0].weight.grad is not None


def test_the_kernel_rule_goes_by_shape():
    """oneDNN for 2-512 rows with a weight of 2 MiB or more (the LM head, the MLP and attention projections of a
    0.5B model), MKL for one row, more rows and small weights (the tiny models'); `aten` / `onednn` for all."""
    from rft.rollout import kernels

    large, small = torch.empty(512, 1024), torch.empty(512, 1023)  # 2 MiB, just under
    assert [kernels.use_onednn(rows, large) for rows in (1, 2, 16, 512, 513)] == [False, True, True, True, False]
    assert not any(kernels.use_onednn(rows, small) for rows in (1, 2, 16, 512, 513))
    assert [kernels.use_onednn(rows, small, "onednn") for rows in (1, 512, 513)] == [True, True, False]
    assert not kernels.use_onednn(16, large, "aten")


def test_generation_does_not_depend_on_how_fast_the_kernels_seem(model, prompts, monkeypatch, tmp_path):
    """A busy machine slows one kernel or the other while rft would time them: generation's numbers stay the same
    to the bit. rft timed MKL against oneDNN per shape once per machine (kept in RFT_CACHE_DIR) and sent each shape
    to the faster, so two runs of one seed, or a run and its resumed half, could compute on different kernels (the
    demo's GRPO runs parted at step 58)."""
    from rft.rollout import kernels

    monkeypatch.delenv(kernels.KERNEL_ENV, raising=False)
    real_linear, real_onednn = torch.nn.functional.linear, kernels._onednn

    def slowed(fn):
        return lambda *a, **k: time.sleep(0.002) or fn(*a, **k)

    outs = []
    for i, slow in enumerate(("onednn", "linear")):  # one machine's slow spell on each kernel
        monkeypatch.setenv("RFT_CACHE_DIR", str(tmp_path / str(i)))  # nothing measured on this machine yet
        importlib.reload(kernels)  # a new process: nothing kept in memory either
        monkeypatch.setattr(kernels, "_onednn", slowed(real_onednn) if slow == "onednn" else real_onednn)
        monkeypatch.setattr(torch.nn.functional, "linear", slowed(real_linear) if slow == "linear" else real_linear)
        outs.append(generate(model, prompts, eos=STOP_IDS, n=4, max_tokens=8, do_sample=True))
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)
    assert torch.equal(outs[0].logprobs, outs[1].logprobs)


def test_a_runs_record_fixes_the_kernel_rule(monkeypatch, tmp_path, capsys):
    """The rule is recorded in the run's folder as it starts; its resumed half, under another RFT_DECODE_KERNEL,
    computes on the recorded rule and says so; outside a run the environment decides."""
    from rft import runtime
    from rft.rollout import kernels

    record = tmp_path / runtime.RUN_CHOICES_FILE
    monkeypatch.setenv(kernels.KERNEL_ENV, "aten")
    with runtime.fix_run_choices(record, kernels.run_choices(), fresh=True):
        assert kernels.kernel_mode() == "aten"
    monkeypatch.setenv(kernels.KERNEL_ENV, "onednn")
    assert kernels.kernel_mode() == "onednn"
    with runtime.fix_run_choices(record, kernels.run_choices(), fresh=False):
        assert kernels.kernel_mode() == "aten"
    assert (f"rft: decode kernel: aten, as the run started ({record}); this process alone would choose onednn "
            "(RFT_DECODE_KERNEL=onednn)") in capsys.readouterr().out
    monkeypatch.setenv(kernels.KERNEL_ENV, "fastest")
    with pytest.raises(ValueError, match="RFT_DECODE_KERNEL='fastest': valid values are auto, aten, onednn"):
        kernels.kernel_mode()


def test_several_processes_sample_from_streams_of_their_own(model, prompts):
    """Sampled rollouts of N processes are not one process's (docs/scaling.md, "What is computed over all
    processes"); what holds instead. Rank r samples from its own stream (`rank_stream`), one draw from the shared
    rollout generator whatever the rank: the same seed and rank give the same samples, bit for bit; the ranks'
    streams differ (four ranks, four seeds) and so do their samples; every rank's shared generator is left in the
    same state (a checkpoint holds one); and rank 0's samples are not one process's, which samples from the shared
    generator itself."""
    from rft.explorer.explorer import rank_stream

    params = SamplingParams(n=2, max_tokens=8)

    def step_one(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A run's first generation on `rank` (trainer.seed 0): its responses and the shared generator after."""
        shared = torch.Generator().manual_seed(0)
        engine = HFRollout(model, eos_token_ids=STOP_IDS, pad_token_id=PAD)
        return engine.generate(*prompts, params, rank_stream(shared, rank)).response_ids, shared.get_state()

    rank0, shared0 = step_one(0)
    again, _ = step_one(0)
    rank1, shared1 = step_one(1)
    assert torch.equal(rank0, again)
    assert not torch.equal(rank0, rank1)
    assert torch.equal(shared0, shared1)
    assert len({rank_stream(torch.Generator().manual_seed(0), r).initial_seed() for r in range(4)}) == 4
    one_process = generate(model, prompts, eos=STOP_IDS, seed=0, n=2, max_tokens=8).response_ids
    assert not torch.equal(one_process, rank0)
