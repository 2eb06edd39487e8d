"""The `hf` engine's decode loop does less work for the same samples: one prefill per prompt shared by its n rows,
a preallocated KV cache, the decode mask built once, finished rows dropped from the forward passes. Against the
loop it replaced (transformers' DynamicCache grown by concatenation, every row prefilled and run to the end), kept
here as the reference: the same tokens, log-probs to 1e-6, with the same generator."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

from rft.data.dataset import PromptDataset, left_pad
from rft.models.arch import cache_kwarg
from rft.models.load import load_causal_lm, load_tokenizer
from rft.rollout import HFRollout, SamplingParams
from rft.rollout.hf import response_mask_from, sample_next

os.environ["HF_HUB_OFFLINE"] = "1"


def reference_generate(model, eos, pad, prompt_ids, prompt_mask, params, generator):
    """The decode loop before issue 16 (every row prefilled, a DynamicCache grown by concatenation)."""
    from transformers import DynamicCache

    ids, attn = prompt_ids.repeat_interleave(params.n, 0), prompt_mask.repeat_interleave(params.n, 0)
    eos = torch.tensor(eos)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    cache = {cache_kwarg(model): DynamicCache()}
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, logits_to_keep=1, **cache)
    next_pos = positions[:, -1:] + 1
    finished = torch.zeros(ids.shape[0], dtype=torch.bool)
    tokens, logprobs = [], []
    for step in range(params.max_tokens):
        logits = out.logits[:, -1, :].float()
        token = sample_next(logits, params, generator).masked_fill(finished, pad)
        scaled = logits / params.temperature if params.temperature > 0 else logits
        logprobs.append(scaled.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1))
        tokens.append(token)
        if not params.ignore_eos:
            finished |= torch.isin(token, eos)
            if bool(finished.all()):
                break
        if step + 1 == params.max_tokens:
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        out = model(input_ids=token[:, None], attention_mask=attn, position_ids=next_pos, use_cache=True, **cache)
        next_pos = next_pos + 1
    response = torch.stack(tokens, dim=1)
    mask = response_mask_from(response, eos, params.ignore_eos)
    return response.masked_fill(mask == 0, pad), mask, torch.stack(logprobs, dim=1) * mask


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("gen")
    init_model("tiny", root / "m", seed=0)
    write_arithmetic(root / "d", n_train=32, n_val=4, seed=0)
    tok = load_tokenizer(str(root / "m"))
    model = load_causal_lm(str(root / "m"), torch.float32, torch.device("cpu")).eval()
    ds = PromptDataset(str(root / "d" / "train.parquet"), tok)
    ids, mask = left_pad([ds[i].ids for i in range(12)], tok.pad_token_id)
    assert not bool(mask.all())  # prompts of several lengths: the decode steps need the padding mask
    return model, tok, ids, mask


CASES = [
    dict(n=8, temperature=1.0, max_tokens=20),  # many EOS ids below: rows finish early, most are dropped
    dict(n=4, temperature=1.0, max_tokens=8, ignore_eos=True),
    dict(n=3, do_sample=False, temperature=0.0, max_tokens=10),
    dict(n=8, temperature=0.7, top_p=0.9, top_k=20, max_tokens=12),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("prompts_per_call", [None, 5])
def test_the_decode_loop_samples_what_the_reference_does(setup, case, prompts_per_call):
    model, tok, ids, mask = setup
    params = SamplingParams(**CASES[case])
    eos = list(range(8, 60))  # a fifth of the vocabulary ends a row: lengths vary from 1 to max_tokens
    chunk = prompts_per_call or len(ids)
    engine = HFRollout(model, eos, tok.pad_token_id, micro_batch_size=chunk * params.n if prompts_per_call else None)
    got = engine.generate(ids, mask, params, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        ref = [reference_generate(model, eos, tok.pad_token_id, ids[p:p + chunk], mask[p:p + chunk], params, g)
               for p in range(0, len(ids), chunk)]
    width = max(r[0].shape[1] for r in ref)
    pad = lambda x, v: torch.nn.functional.pad(x, (0, width - x.shape[1]), value=v)
    assert torch.equal(got.response_ids, torch.cat([pad(r[0], tok.pad_token_id) for r in ref]))
    assert torch.equal(got.response_mask, torch.cat([pad(r[1], 0) for r in ref]))
    assert float((got.logprobs - torch.cat([pad(r[2], 0.0) for r in ref])).abs().max()) <= 1e-6
    lengths = got.response_mask.sum(-1)
    if not params.ignore_eos and params.do_sample:
        assert int(lengths.min()) < params.max_tokens // 2 < int(lengths.max())  # mixed lengths




def test_generation_passes_the_cache_by_the_name_transformers_takes(setup):
    """transformers 5.24 renamed the forward pass's `past_key_values` to `cache` and warns (FutureWarning) on every
    call that uses the old name: every run printed it. The decode loop passes the name the model takes (`cache`
    from 5.24, `past_key_values` before: the version lane's 5.17)."""
    import inspect

    model, tok, ids, mask = setup
    assert cache_kwarg(model) in inspect.signature(type(model).forward).parameters
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        HFRollout(model, [tok.eos_token_id], tok.pad_token_id).generate(
            ids[:2], mask[:2], SamplingParams(n=2, temperature=1.0, max_tokens=4), torch.Generator().manual_seed(0))


def test_the_cache_keyword_is_the_wrapped_models_under_fsdp1(setup, tmp_path):
    """FSDP1's FullyShardedDataParallel takes `forward(*args, **kwargs)`: asked of the wrapper, the keyword came out
    `past_key_values`, and every decode step of a sequence-parallel run (several processes, strategy fsdp) warned."""
    import copy

    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel

    model = setup[0]
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        wrapped = FullyShardedDataParallel(copy.deepcopy(model), device_id=torch.device("cpu"), use_orig_params=True)
        assert cache_kwarg(wrapped) == cache_kwarg(model)
    finally:
        if started:
            dist.destroy_process_group()


def test_the_cache_is_written_in_place(setup):
    from rft.rollout.cache import PreallocatedCache

    model, tok, ids, mask = setup
    cache = PreallocatedCache(model.config.num_hidden_layers, ids.shape[1] + 4)
    model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1, **{cache_kwarg(model): cache})
    buffer = cache.layers[0]._k
    cache.rows(torch.arange(len(ids)).repeat_interleave(2))
    assert cache.layers[0].keys.shape[0] == 2 * len(ids) and cache.get_seq_length() == ids.shape[1]
    buffer = cache.layers[0]._k
    step = torch.zeros(2 * len(ids), 1, dtype=torch.long)
    model(input_ids=step, use_cache=True, position_ids=torch.full((2 * len(ids), 1), ids.shape[1]),
          **{cache_kwarg(model): cache})
    assert cache.layers[0]._k is buffer and cache.get_seq_length() == ids.shape[1] + 1  # no new allocation
