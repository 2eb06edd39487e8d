"""The `hf` rollout engine: batched sampling with a transformers model and its KV cache.

A decode loop of our own rather than `generate()`: it draws from an explicit `torch.Generator` (so a checkpoint can
restore the sampling stream exactly and validation never perturbs it) and does only the work sampling needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from rft.models.arch import attention_only, cache_kwarg, decode_mask_kind
from rft.models.attention import (
    ATTEND_KWARG,
    DECODE_ATTENTION,
    PACKED_ATTENTION,
    attention_configs,
    use_decode_attention,
)
from rft.models.load import device_of
from rft.models.precision import autocast
from rft.rollout.base import RolloutOutput, SamplingParams
from rft.rollout.cache import OneDtypeStaticCache, PreallocatedCache
from rft.rollout.kernels import fast_linears
from rft.rollout.stream import HFStream

ATTEND_BUCKET = 16
"""The compiled decode step attends its static cache in lengths of this many positions: a few shapes to compile,
little attention to positions not written yet."""


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (B, V) logits outside the top-k tokens and outside the smallest nucleus with mass >= top_p."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass before it already reaches top_p; the first token always stays
        drop = (probs.cumsum(-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(-1, order, sorted_logits)
    return logits


LARGE_VOCABULARY = 32768
"""From this many tokens on, `sample_next` draws by the inverse of the distribution function (one uniform number a
row) instead of `torch.multinomial`, which draws an exponential number for every token of the vocabulary: 57-70 ms
a decode step for 16 rows of a 151,936-token vocabulary on this project's AMD EPYC, ~10% of a Qwen2.5-0.5B
generation, against ~6 ms. Both draw exactly from the distribution; smaller vocabularies keep the samples of
earlier releases (the draws differ between the two)."""


def sample_next(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Next tokens (B,) from last-position logits (B, V)."""
    if params.greedy:
        return logits.argmax(-1)
    probs = filter_logits(logits / params.temperature, params.top_k, params.top_p).softmax(-1)
    if probs.shape[-1] >= LARGE_VOCABULARY:
        return inverse_cdf_sample(probs, generator)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token a row of (B, V) probabilities: the first token whose cumulative probability exceeds u times the
    row's total, u uniform on [0, 1) (the cumulative sums in float64, so a token's share is exact to ~1e-16 of the
    total whatever V; a token of probability 0 is never drawn)."""
    cdf = probs.to(torch.float64).cumsum_(-1)  # (B, V)
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64, device=probs.device)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)  # (B, 1)
    return token.clamp_(max=probs.shape[-1] - 1).squeeze(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(B,) log-probs of `tokens` under softmax(logits / temperature) (the plain logits when greedy): the behaviour
    log-probs the engines record, before top-k / top-p filtering."""
    scaled = logits / params.temperature if params.temperature > 0 else logits
    return scaled.log_softmax(-1).gather(-1, tokens[:, None]).squeeze(-1)


def response_mask_from(tokens: torch.Tensor, eos_ids: torch.Tensor, ignore_eos: bool) -> torch.Tensor:
    """(B, R) mask: 1 up to and including the first EOS of each row (everything when ignore_eos)."""
    if ignore_eos:
        return torch.ones_like(tokens)
    is_eos = torch.isin(tokens, eos_ids).long()
    eos_before = is_eos.cumsum(-1) - is_eos  # EOS tokens strictly before position t
    return (eos_before == 0).long()


@torch.no_grad()
def copy_named(model: nn.Module, weights) -> None:
    """Copy `weights` (name -> tensor, named as the model's parameters) into the model's parameters."""
    params = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(params))
    if unknown:
        raise KeyError(f"update_weights: the rollout model has no parameters {unknown[:5]}")
    for name, value in weights.items():
        params[name].copy_(value.to(params[name].device, params[name].dtype))


def check_weights(model: nn.Module, weights) -> None:
    """Refuse `weights` (name -> tensor) that `copy_named` could not load whole, naming the first bad tensor, before
    anything is copied (an update half applied would mix two versions' weights): a name the model lacks, another
    shape, a tensor that is not floating point, a NaN or infinite value."""
    params = dict(model.named_parameters())
    for name, value in weights.items():
        where = f"tensor {name!r}"
        if name not in params:
            raise ValueError(f"{where}: the model has no parameter of this name (e.g. {next(iter(params))!r})")
        if tuple(value.shape) != tuple(params[name].shape):
            raise ValueError(f"{where}: shape {list(value.shape)}, the model's parameter is "
                             f"{list(params[name].shape)}")
        if not value.is_floating_point():
            raise ValueError(f"{where}: dtype {str(value.dtype).removeprefix('torch.')}, not floating point")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{where}: holds NaN or infinite values")


class HFRollout:
    def __init__(self, model: nn.Module, eos_token_ids: list[int], pad_token_id: int, micro_batch_size: int | None = None,
                 all_done: Callable[[bool], bool] | None = None, compiled: bool = False,
                 dtype: torch.dtype | None = None):
        """`all_done(finished_here)`: with a model sharded over several processes, whether every rank's rows have
        finished; the decode loop stops only then (each forward pass of a sharded model needs every rank), the
        finished rows of a rank emitting padding meanwhile. None: one process.
        `compiled`: the decode step compiled with static shapes (`rollout.enforce_eager=false`, as vLLM captures its
        decode step): a static KV cache of prompt + max_tokens positions, every row in every step, inductor fusing
        the step's small kernels; the first generation of each shape pays the compilation.
        `dtype`: what generation computes in (rollout.dtype as `models.precision.choose` resolved it), under
        autocast when the model's weights are of a higher precision (cast once per generation); None: the weights'
        own."""
        self.model = model
        self.cache_kwarg = cache_kwarg(model)
        self.dtype = dtype
        use_decode_attention(model)
        self.compiled = compiled
        self._step = None
        self.eos_ids = torch.as_tensor(sorted(set(eos_token_ids)), dtype=torch.long)
        self.pad_token_id = pad_token_id
        self.micro_batch_size = micro_batch_size
        self.all_done = all_done
        self.version = 0

    @torch.no_grad()
    def update_weights(self, weights, version: int) -> None:
        """Copy `weights` (name -> tensor, named as the model's parameters) into the model; None: the model is the
        trained one itself (nothing to copy)."""
        if weights is not None:
            copy_named(self.model, weights)
        self.version = version

    def stream(self, max_num_seqs: int, generator: torch.Generator | None = None,
               recompute_on_update: bool = False) -> HFStream:
        """Continuous batching (`rft.rollout.base.StreamingEngine`, `stream.py`): eager only, text only, one
        process, attention-only models."""
        where = "the hf engine's stream"
        if self.compiled:
            raise ValueError(f"{where} runs the eager decode loop: the compiled decode step (enforce_eager=false) "
                             "keeps one static cache for one batch of prompts; build the engine with compiled=False")
        if self.all_done is not None:
            raise ValueError(f"{where} runs in one process: a model sharded over several cannot stream yet")
        if not attention_only(self.model):
            raise ValueError(f"{where} needs a model of attention layers only: the recurrent or linear-attention "
                             "layers of this one have no per-row cache to regroup")
        if max_num_seqs < 1:
            raise ValueError(f"{where}: max_num_seqs={max_num_seqs}, it must be 1 or more")
        return HFStream(self, max_num_seqs, self._generator_on_device(generator), recompute_on_update)

    @torch.no_grad()
    def generate(self, prompt_ids, prompt_mask, params: SamplingParams, generator=None,
                 images: list[list[bytes]] | None = None) -> RolloutOutput:
        """`params.n` responses to each prompt row (rows of a prompt adjacent). `images`: each prompt's images
        (encoded; `rft.data.images`) for a vision-language model, whose prompt ids hold their image tokens."""
        if images is not None and any(images):
            return self._generate_vision(prompt_ids, prompt_mask, images, params, generator)
        generator = self._generator_on_device(generator)
        # row r samples for prompt r // n; each chunk of rows prefills its prompts once (`_generate`)
        row_prompt = torch.arange(prompt_ids.shape[0]).repeat_interleave(params.n)
        rows = self.micro_batch_size or row_prompt.shape[0]
        parts = []
        for i in range(0, row_prompt.shape[0], rows):
            chunk = row_prompt[i:i + rows]
            first = int(chunk[0])
            parts.append(self._generate(prompt_ids[first:int(chunk[-1]) + 1], prompt_mask[first:int(chunk[-1]) + 1],
                                        chunk - first, params, generator))
        return self._concat(parts)

    def _generator_on_device(self, generator: torch.Generator | None) -> torch.Generator | None:
        """torch.multinomial needs a generator on the logits' device. Seed one there from the caller's (CPU)
        generator, so that generator's state, which checkpoints save, still fixes the samples."""
        device = device_of(self.model)
        if generator is None or generator.device.type == device.type:
            return generator
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        return torch.Generator(device).manual_seed(seed)

    def _concat(self, parts: list[RolloutOutput]) -> RolloutOutput:
        """The rows of `parts` one after another, right-padded to the widest response."""
        width = max(p.response_ids.shape[1] for p in parts)
        return RolloutOutput(
            response_ids=torch.cat([_pad_right(p.response_ids, width, self.pad_token_id) for p in parts]),
            response_mask=torch.cat([_pad_right(p.response_mask, width, 0) for p in parts]),
            logprobs=torch.cat([_pad_right(p.logprobs, width, 0.0) for p in parts]),
        )

    def _generate_vision(self, prompt_ids, prompt_mask, images: list[list[bytes]], params: SamplingParams,
                         generator) -> RolloutOutput:
        """A vision-language model's responses: transformers' `generate()` with the processor's pixel inputs
        (`rft.models.vision`), in chunks of `micro_batch_size` rows, drawing from a seed taken from `generator` (so
        its state still fixes the samples); never sampling an image token (a response that opened an image would
        not match the pixel inputs of the update); log-probs under softmax(logits / temperature), as `_sample`."""
        from transformers import GenerationConfig

        from rft.models.vision import forward_function, vision_of

        vision = vision_of(self.model)
        if vision is None:
            raise ValueError("the rollout model is not a vision-language model: it cannot take images")
        device = device_of(self.model)
        row_prompt = torch.arange(prompt_ids.shape[0]).repeat_interleave(params.n)
        greedy = params.greedy
        config = GenerationConfig(
            do_sample=not greedy, temperature=None if greedy else params.temperature,
            top_k=params.top_k if params.top_k > 0 and not greedy else None,
            top_p=params.top_p if params.top_p < 1.0 and not greedy else None, max_new_tokens=params.max_tokens,
            min_new_tokens=params.max_tokens if params.ignore_eos else None,
            eos_token_id=self.eos_ids.tolist(), pad_token_id=self.pad_token_id,
            suppress_tokens=vision.special_ids or None, return_dict_in_generate=True, output_logits=True)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator)) if generator is not None else 0
        was_training = self.model.training
        self.model.eval()
        parts = []
        try:
            rows = self.micro_batch_size or len(row_prompt)
            for i in range(0, len(row_prompt), rows):
                chunk = row_prompt[i:i + rows]
                ids, attn = prompt_ids[chunk].to(device), prompt_mask[chunk].to(device)
                extra = vision.model_kwargs([images[int(r)] for r in chunk], ids, forward=forward_function(self.model))
                with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]), \
                        autocast(self.model, self.dtype):
                    torch.manual_seed(seed + i)
                    # sharded over ranks: every rank runs forward passes until all have finished (each pass
                    # needs every rank), as the text path's `all_done`
                    out = self.model.generate(input_ids=ids, attention_mask=attn, **extra, generation_config=config,
                                              synced_gpus=self.all_done is not None)
                tokens = out.sequences[:, ids.shape[1]:]
                logits = torch.stack(out.logits, dim=1).float()
                if params.temperature > 0:
                    logits = logits / params.temperature
                logprobs = logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
                mask = response_mask_from(tokens, self.eos_ids.to(tokens.device), params.ignore_eos)
                parts.append(RolloutOutput(tokens.masked_fill(mask == 0, self.pad_token_id).cpu(), mask.cpu(),
                                           (logprobs * mask).cpu()))
        finally:
            self.model.train(was_training)
        return self._concat(parts)

    def _generate(self, prompt_ids, prompt_mask, row_prompt: torch.Tensor, params: SamplingParams,
                  generator) -> RolloutOutput:
        # Eager even where the model's layers are compiled (use_torch_compile): a decode step's shapes change with
        # every token and the cache's Python state breaks the graph, so compiled layers recompile per layer until
        # torch's recompile limit, ~30 s on this CPU, and then run slower than eager (bench/decode_profile.py). The
        # compiled decode step (`compiled`) is the one place compilation runs, as a whole step over a static cache.
        device = device_of(self.model)
        args = (prompt_ids.to(device), prompt_mask.to(device), row_prompt.to(device), self.eos_ids.to(device), params,
                generator)
        with self._generating(fast=not self.compiled):
            return self._sample_compiled(*args) if self.compiled else self._sample(*args)

    @contextlib.contextmanager
    def _generating(self, fast: bool):
        """The model in eval mode, eager, under the engine's autocast and, `fast`, on `fast_linears`' kernels.
        Autocast's cast weights live until the context ends: a stream enters it per step, so a weight update
        between two steps is what the next step computes with."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.compiler.set_stance("force_eager"), autocast(self.model, self.dtype), \
                    (fast_linears(self.model) if fast else contextlib.nullcontext()):
                yield
        finally:
            self.model.train(was_training)

    def _sample(self, ids, attn, row_prompt: torch.Tensor, eos_ids, params: SamplingParams,
                generator) -> RolloutOutput:
        """Sample for the rows `row_prompt` (each row's index into `ids`): one prefill per prompt, its KV cache
        repeated for the prompt's rows; a preallocated cache (no copy per token); the decode steps' padding mask
        built once; rows that finished dropped from the forward passes once a quarter of them did (every row still
        draws its sample, so the sampling stream is the one of the whole batch); stop when every row has ended."""
        from transformers import DynamicCache

        device = ids.device
        B, width = row_prompt.shape[0], ids.shape[1]
        layers = getattr(getattr(self.model, "config", None), "num_hidden_layers", None)
        if attention_only(self.model):
            cache = PreallocatedCache(layers, width + params.max_tokens)
        else:  # recurrent or linear-attention layers: transformers' own cache for them
            cache = DynamicCache(config=self.model.config)
        logits, next_pos = self._prefill(ids, attn, row_prompt, cache)
        attn = attn[row_prompt]
        # The decode steps' mask over prompt + new tokens, built once and sliced: (B, 1, 1, L) booleans, True where
        # a key is attended, where the model takes a prepared mask (`decode_mask_kind`), with no mask at all when
        # no row has padding (what transformers passes to SDPA then too); else the (B, L) padding mask, from which
        # the model builds its own (sliding windows, ALiBi, ...).
        kind = decode_mask_kind(self.model, width + params.max_tokens)
        padded = not bool(attn.all())
        decode_mask = None
        if kind == "2d" or padded:
            decode_mask = torch.ones(B, width + params.max_tokens, dtype=attn.dtype, device=device)
            decode_mask[:, :width] = attn
            if kind == "4d":
                decode_mask = decode_mask.bool()[:, None, None, :]
        live = torch.arange(B, device=device)  # the rows the forward passes still run on
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        tokens, logprobs = [], []
        for step in range(params.max_tokens):
            token = self._draw(_all_rows(logits, live, B), finished, params, generator, eos_ids, tokens, logprobs)
            if self._ended(finished, params) or step + 1 == params.max_tokens:
                break
            running = _still_running(finished, live, params) if isinstance(cache, PreallocatedCache) else None
            if running is not None:  # drop the finished rows from the passes
                live, next_pos = live[running], next_pos[running]
                cache.rows(running)
                if decode_mask is not None:
                    decode_mask = decode_mask[running]
            mask = None if decode_mask is None else decode_mask[..., :width + step + 1]
            out = self.model(input_ids=token[live, None], attention_mask=mask, position_ids=next_pos,
                             use_cache=True, **{self.cache_kwarg: cache})
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        return self._output(tokens, logprobs, params)

    def _sample_compiled(self, ids, attn, row_prompt: torch.Tensor, eos_ids, params: SamplingParams,
                         generator) -> RolloutOutput:
        """`_sample` with the decode step compiled: transformers' `StaticCache` (a fixed (rows, heads, prompt +
        max_tokens, head_dim) buffer per layer, written in place; sliding-window layers as the model declares), the
        prefill eager on the prompts and repeated for their rows, then every step one call of the compiled forward
        pass over the rows still running with a fixed-width padding mask. Finished rows leave the passes as in
        `_sample` (the cache's rows selected): the second batch size compiles the step once more with the batch
        dimension dynamic, and no size after it does."""
        device = ids.device
        B, width = row_prompt.shape[0], ids.shape[1]
        capacity = width + params.max_tokens
        cache = OneDtypeStaticCache(config=self.model.config, max_cache_len=capacity)
        logits, next_pos = self._prefill(ids, attn, row_prompt, cache)
        # the padding mask over every position of the cache; the causal mask built from the cache's length hides
        # the positions not yet written
        mask = torch.ones(B, capacity, dtype=attn.dtype, device=device)
        mask[:, :width] = attn[row_prompt]
        if self._step is None:
            self._step = torch.compile(self._decode_step)
        # the decode attention (also the packed one's, use_remove_padding) reads only the written part of the cache,
        # rounded up to ATTEND_BUCKET positions (the length is dynamic in the compiled graph after its second value);
        # another attention reads it all
        bucketed = all(c._attn_implementation in (DECODE_ATTENTION, PACKED_ATTENTION)
                       for c in attention_configs(self.model))
        live = torch.arange(B, device=device)
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        tokens, logprobs = [], []
        for step in range(params.max_tokens):
            token = self._draw(_all_rows(logits, live, B), finished, params, generator, eos_ids, tokens, logprobs)
            if self._ended(finished, params) or step + 1 == params.max_tokens:
                break
            running = _still_running(finished, live, params)
            if running is not None:  # as `_sample`: the batch dimension turns dynamic at the second size compiled
                live, next_pos, mask = live[running], next_pos[running], mask[running]
                cache.reorder_cache(running)
            written = width + step + 1
            attend = min(capacity, -(-written // ATTEND_BUCKET) * ATTEND_BUCKET) if bucketed else None
            with torch.compiler.set_stance("default"):
                logits = self._step(token[live, None], next_pos, mask, cache, attend)
            next_pos = next_pos + 1
        return self._output(tokens, logprobs, params)

    def _prefill(self, ids, attn, row_prompt: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass over the prompts into `cache`, then the cache repeated for the rows `row_prompt`.
        Returns each row's logits for its first token (B, V) and the position of the token after its prompt."""
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self.cache_kwarg: cache})
        if isinstance(cache, PreallocatedCache):
            cache.rows(row_prompt)
        else:
            cache.reorder_cache(row_prompt)
        return out.logits[:, -1, :].float()[row_prompt], positions[row_prompt, -1:] + 1

    def _draw(self, logits, finished, params: SamplingParams, generator, eos_ids, tokens: list,
              logprobs: list) -> torch.Tensor:
        """Sample every row's next token from `logits` (padding for the rows that have `finished`), append it and its
        log-prob to `tokens` / `logprobs`, and mark the rows it ends."""
        token = sample_next(logits, params, generator).to(logits.device)
        token = token.masked_fill(finished, self.pad_token_id)
        logprobs.append(token_logprobs(logits, token, params))
        tokens.append(token)
        if not params.ignore_eos:
            finished |= torch.isin(token, eos_ids)
        return token

    def _sample_rows(self, logits, params: SamplingParams, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens (B,) from last-position logits (B, V), and their log-probs (`token_logprobs`)."""
        token = sample_next(logits, params, generator).to(logits.device)
        return token, token_logprobs(logits, token, params)

    def _ended(self, finished, params: SamplingParams) -> bool:
        """Whether every row has ended (with a sharded model: on every rank)."""
        if params.ignore_eos:
            return False
        done = bool(finished.all())
        return self.all_done(done) if self.all_done is not None else done

    def _output(self, tokens: list, logprobs: list, params: SamplingParams) -> RolloutOutput:
        response = torch.stack(tokens, dim=1).cpu()
        mask = response_mask_from(response, self.eos_ids, params.ignore_eos)
        response = response.masked_fill(mask == 0, self.pad_token_id)
        return RolloutOutput(response, mask, torch.stack(logprobs, dim=1).cpu() * mask)

    def _decode_step(self, token, position, mask, cache, attend: int | None) -> torch.Tensor:
        extra = {self.cache_kwarg: cache} if attend is None else {self.cache_kwarg: cache, ATTEND_KWARG: attend}
        return self.model(input_ids=token, attention_mask=mask, position_ids=position, use_cache=True,
                          **extra).logits[:, -1, :].float()


def _still_running(finished: torch.Tensor, live: torch.Tensor, params: SamplingParams) -> torch.Tensor | None:
    """The positions in `live` (the rows the forward passes run on) of its rows that have not finished, once at most
    three quarters of them still run (dropping rows copies the KV cache: not for every row that ends); else None."""
    if params.ignore_eos:
        return None
    running = (~finished[live]).nonzero().flatten()
    return running if 0 < len(running) <= 0.75 * len(live) else None


def _all_rows(logits: torch.Tensor, live: torch.Tensor, rows: int) -> torch.Tensor:
    """(rows, V) logits from those of the `live` rows; a dropped (finished) row's are 0, any distribution does:
    its token is replaced by padding, but it still draws, so the sampling stream is the whole batch's."""
    if len(live) == rows:
        return logits
    full = logits.new_zeros(rows, logits.shape[-1])
    full[live] = logits
    return full


def _pad_right(x: torch.Tensor, width: int, value) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)
