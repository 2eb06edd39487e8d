"""Vision-language models: the model's own processor, and the inputs it gives a forward pass beside the tokens.

rft never re-implements a processor. A prompt row's text and images go through the family's processor once when
the data loads (`Vision.encode`: the token ids, with each image expanded into the family's image tokens); every
forward pass that sees those tokens again (the rollout's prefill, the old / reference log-probs, the update) gets
the images' pixel tensors from the same processor's image processor and the token-aligned ids the model reads
(Qwen-VL's `mm_token_type_ids`, Gemma 3's `token_type_ids`) from its `create_mm_token_type_ids` (`model_kwargs`).
Families whose positions depend on the images (Qwen-VL's M-RoPE) compute them from those inputs themselves:
rft then passes no position ids.

transformers 5 builds Qwen-VL processors with a video processor that needs torchvision; where torchvision is not
installed (or does not load beside a CPU torch), the processor is built without one: images work, videos are
refused in the data (`rft.data.images`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rft.errors import ModelError

PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "chat_template.jinja", "chat_template.json",
                   "video_preprocessor_config.json")
"""The files of a processor beside the tokenizer's, copied into an export."""

VISION_ATTR = "_rft_vision"
"""The `Vision` of a vision-language model, set on the model by `attach`."""


def is_vision_config(config) -> bool:
    """Whether a transformers config is a vision-language model's (it has a vision tower)."""
    return getattr(config, "vision_config", None) is not None


def is_vision_folder(path: str | Path) -> bool:
    """Whether the model folder `path` holds a vision-language model (its config.json has a vision_config)."""
    file = Path(path) / "config.json"
    try:
        return bool(json.loads(file.read_text()).get("vision_config"))
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _without_video_processor():
    """transformers checks every processor attribute's class, and a video processor's class does not exist without
    torchvision: let an absent (None) attribute pass that check."""
    from transformers.processing_utils import ProcessorMixin

    check = ProcessorMixin.check_argument_for_proper_class

    def lenient(self, name, arg):
        return None if arg is None else check(self, name, arg)

    ProcessorMixin.check_argument_for_proper_class = lenient
    try:
        yield
    finally:
        ProcessorMixin.check_argument_for_proper_class = check


def load_processor(path: str | Path, key: str = "actor_rollout_ref.model"):
    """`_load_processor`, a package its processor needs and does not find (SmolVLM's num2words) one error."""
    try:
        return _load_processor(path, key)
    except ImportError as e:
        why = " ".join(str(e).split()).split(" Install it with")[0]
        from rft.models.arch import path_key

        raise ModelError(f"{path_key(key)}={str(path)!r}: its processor does not load: {why}; pip install "
                         "'rft[vision]' installs what the vision-language families need") from None


def _load_processor(path: str | Path, key: str):
    """The processor of the model folder `path` (AutoProcessor), built without its video processor where that
    needs torchvision and torchvision does not load (then from its processor_config.json's processor_class, with the
    file's other settings, e.g. SmolVLM's image_seq_len, as that class's keyword arguments)."""
    import transformers
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        return AutoProcessor.from_pretrained(str(path))
    except ImportError as e:
        if "orchvision" not in str(e):
            raise
    config_file = Path(path) / "processor_config.json"
    settings = json.loads(config_file.read_text()) if config_file.is_file() else {}
    name = settings.pop("processor_class", None)
    cls = getattr(transformers, name or "", None)
    if cls is None:
        from rft.models.arch import path_key

        raise ModelError(f"{path_key(key)}={str(path)!r}: its processor needs torchvision, which does not load "
                         "here, and the folder names no processor_class rft can build without it; pip install "
                         "torchvision (the build that matches this torch)")
    with _without_video_processor():
        kwargs = {"image_processor": AutoImageProcessor.from_pretrained(str(path)),
                  "tokenizer": AutoTokenizer.from_pretrained(str(path))}
        if "video_processor" in inspect.signature(cls.__init__).parameters:
            kwargs["video_processor"] = None
        template = _chat_template(Path(path))
        return cls(**kwargs, **settings, **({"chat_template": template} if template else {}))


def _chat_template(path: Path) -> str | None:
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text()
    if (path / "chat_template.json").is_file():
        return json.loads((path / "chat_template.json").read_text()).get("chat_template")
    return None


# The families whose micro-batches with images run packed (use_remove_padding), the packed pass equal to the padded
# one (tests/test_multimodal.py: gradients): their language model attends causally over image tokens as over text.
PACKED_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava", "idefics3", "smolvlm"})
UNPACKED_REASONS = {
    "gemma3": "Gemma 3's image tokens attend to each other both ways (its token_type_ids), which rft's packed "
              "attention (causal rows) does not express",
}


class Vision:
    """A vision-language model's processor, as rft uses it (module docstring)."""

    def __init__(self, processor, model_config, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None  # the folder the processor came from
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.config = model_config
        self.model_type = model_config.model_type
        names = set(getattr(processor, "model_input_names", []) or [])
        self.token_type_keys = [k for k in ("mm_token_type_ids", "token_type_ids") if k in names]
        # the special tokens of images (never sampled: a response must not open an image the processor did not
        # expand)
        special = {getattr(model_config, k, None) for k in
                   ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
                    "vision_end_token_id", "boi_token_id", "eoi_token_id", "boi_token_index", "eoi_token_index")}
        special |= {getattr(processor, k, None) for k in ("image_token_id", "video_token_id")}
        vocab = self.tokenizer.get_vocab()
        special |= {vocab.get(getattr(processor, k, None)) for k in
                    ("image_token", "video_token", "boi_token", "eoi_token", "fake_image_token", "global_image_token",
                     "global_image_tag", "vision_start_token", "vision_end_token")
                    if isinstance(getattr(processor, k, None), str)}
        self.special_ids = sorted(i for i in special if isinstance(i, int) and i >= 0)
        self.mrope = bool((getattr(model_config.get_text_config(), "rope_parameters", None) or {}).get("mrope_section"))

    @property
    def name(self) -> str:
        return type(self.processor).__name__

    def has_image_tokens(self, ids: torch.Tensor) -> bool:
        """Whether `ids` hold any of the image special tokens (`special_ids`)."""
        return bool(self.special_ids) and bool(torch.isin(ids, torch.tensor(self.special_ids, device=ids.device)).any())

    @property
    def packs(self) -> bool:
        """Whether a micro-batch with images runs packed when the model packs (`PACKED_FAMILIES`)."""
        return self.model_type in PACKED_FAMILIES

    @property
    def unpacked_reason(self) -> str:
        return UNPACKED_REASONS.get(self.model_type, f"packing rows with images is not tested for {self.model_type}")

    def render(self, messages: list[dict], chat_template: str | None = None, tools: list[dict] | None = None,
               generation_prompt: bool = True, template_kwargs: dict | None = None) -> str:
        """The text of `messages` (with image parts) by the processor's template, with the generation prompt unless
        `generation_prompt` is false (a conversation that ends with the assistant's turn); `template_kwargs`: the
        template's variables (data.apply_chat_template_kwargs, as `rft.data.chat.render`). A processor built without
        its video processor renders by `ProcessorMixin`'s own method: some (SmolVLM's) read video settings from it
        on every call."""
        from transformers.processing_utils import ProcessorMixin

        apply = self.processor.apply_chat_template
        if getattr(self.processor, "video_processor", ...) is None:
            apply = ProcessorMixin.apply_chat_template.__get__(self.processor)
        return apply(messages, add_generation_prompt=generation_prompt, tokenize=False, chat_template=chat_template,
                     **({"tools": tools} if tools else {}), **(template_kwargs or {}))

    def encode(self, text: str, images: list[bytes], where: str) -> list[int]:
        """The token ids of a prompt's `text` with its `images` expanded by the processor."""
        from rft.data.images import decode
        from rft.data.io import DataError

        try:
            out = self.processor(text=[text], images=[[decode(b) for b in images]] if images else None,
                                 add_special_tokens=False)
        except (ValueError, TypeError) as e:
            raise DataError(f"{where}: the processor {self.name} refused the row: {e}") from None
        return list(out["input_ids"][0])

    def pixel_inputs(self, images: list[list[bytes]]) -> dict[str, torch.Tensor]:
        """The image processor's tensors for rows of images (each row's list, possibly empty)."""
        from rft.data.images import decode

        if not any(images):
            return {}
        rows = [[decode(b) for b in row] for row in images if row]
        out = self.processor(images=rows, return_tensors="pt", padding=True)
        keep = set(self.processor.image_processor.model_input_names) - set(self.processor.unused_input_names)
        return {k: v for k, v in out.items() if k in keep and isinstance(v, torch.Tensor)}

    def model_kwargs(self, images: list[list[bytes]], ids: torch.Tensor, forward=None) -> dict[str, torch.Tensor]:
        """What a forward pass over `ids` (B, L) needs beside them for the rows' `images`: pixel tensors, and the
        token-type ids that `forward` (the model's forward function, whose parameters are checked) takes, over
        every column (a later turn of a conversation may bring images too; sampled tokens are never image
        tokens)."""
        out = self.pixel_inputs(images)
        if not out:
            return out
        keys = self.type_keys(forward)
        if keys:
            types = self.token_types(ids)
            out.update({key: types for key in keys})
        device = ids.device
        return {k: v.to(device) for k, v in out.items()}

    def type_keys(self, forward=None) -> list[str]:
        """The token-type inputs of the processor that `forward` (the model's forward function) takes; every one
        when it is not given."""
        accepts = set(inspect.signature(forward).parameters) if forward is not None else set(self.token_type_keys)
        return [key for key in self.token_type_keys if key in accepts]

    def token_types(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) the processor's token types of `ids` (0 text, 1 image, ...), for a family whose forward takes
        them."""
        return torch.as_tensor(self.processor.create_mm_token_type_ids(ids.tolist()), dtype=torch.long,
                               device=ids.device)

    def packed_kwargs(self, model: nn.Module, images: list[list[bytes]], ids: torch.Tensor, attn: torch.Tensor,
                      row: torch.Tensor, col: torch.Tensor, owner: torch.Tensor,
                      forward=None) -> dict[str, torch.Tensor]:
        """What a packed forward pass (`rft.workers.packing.forward_packed`) gives the model beside the tokens it
        packed from (`row`, `col`) of the padded window `ids` / `attn` (B, W): the pixels of the rows whose prompt
        tokens are packed (`owner`: each row's prompt's row; a shared prompt's images are encoded once, as its
        tokens are computed once; rows with images after their prompt share none), in the packed order the model
        replaces the image tokens in; the packed tokens' token types; and for M-RoPE the positions the model computes over
        whole rows from their images (its own `get_rope_index`), (3, 1, T)."""
        own = [i for i in range(len(images)) if int(owner[i]) == i]
        out = self.pixel_inputs([images[i] for i in own])
        if not out:
            return out
        out = {k: v.to(ids.device) for k, v in out.items()}
        keys = self.type_keys(forward)
        types = self.token_types(ids) if keys or self.mrope else None
        out.update({key: types[row, col][None] for key in keys})
        if self.mrope:
            counts = [len(images[i]) for i in own if images[i]]
            grids = dict(zip([i for i in own if images[i]], out["image_grid_thw"].split(counts)))
            every_row = torch.cat([grids[int(owner[i])] for i in range(len(images)) if images[i]])
            rope_index = next(m.get_rope_index for m in model.modules() if hasattr(m, "get_rope_index"))
            positions, _ = rope_index(ids, mm_token_type_ids=types, image_grid_thw=every_row, attention_mask=attn)
            out["position_ids"] = positions[:, row, col][:, None]
        return out


def attach(model: nn.Module, vision: Vision) -> None:
    """Mark `model` as the vision-language model `vision` processes for (`vision_of`)."""
    setattr(model, VISION_ATTR, vision)


def vision_of(model: nn.Module) -> Vision | None:
    """The `Vision` attached to `model` (or to the model a wrapper holds), None for a text model."""
    for m in (model, getattr(model, "module", None), getattr(model, "base_model", None)):
        v = getattr(m, VISION_ATTR, None) if m is not None else None
        if v is not None:
            return v
    return None


def forward_function(model: nn.Module) -> Any:
    """The forward function whose parameters say what the model takes (through PEFT and FSDP wrappers; a value
    model's generic head, which hands every keyword to its backbone: the backbone's)."""
    from transformers.modeling_layers import GenericForTokenClassification

    inner = model
    for attr in ("get_base_model",):
        if hasattr(inner, attr):
            inner = getattr(inner, attr)()
    if isinstance(inner, GenericForTokenClassification):
        inner = getattr(inner, inner.base_model_prefix)
    return inner.forward


_VISIONS: dict[str, Vision | None] = {}


def vision_for(path: str | None, key: str = "actor_rollout_ref.model") -> Vision | None:
    """The `Vision` of the model folder `path` (its processor and config, loaded once per process), None for a text
    model's folder."""
    if not path or not is_vision_folder(path):
        return None
    if path not in _VISIONS:
        from transformers import AutoConfig

        _VISIONS[path] = Vision(load_processor(path, key), AutoConfig.from_pretrained(path), path)
    return _VISIONS[path]


def freeze_vision_tower(model: nn.Module) -> int:
    """Take every parameter outside the language model (its decoder and output head, or a value model's scalar
    head) out of training: the vision tower and its projector (a LoRA adapter's on them too). Returns how many
    parameters were frozen."""
    from rft.models.arch import VALUE_HEADS

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    heads = [getattr(base, name, None) for name in VALUE_HEADS]
    keep = {id(p) for m in (base.get_decoder(), base.get_output_embeddings(), *heads) if isinstance(m, nn.Module)
            for p in m.parameters()}
    frozen = 0
    for p in base.parameters():
        if id(p) not in keep and p.requires_grad:
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


def save_processor(vision: Vision, out_dir: Path) -> None:
    """The processor's files (`PROCESSOR_FILES`: image processor, processor class, chat template) into an export:
    copied from the folder it came from, or written by the image processor."""
    import shutil

    source = vision.path
    files = [source / f for f in PROCESSOR_FILES if source is not None and (source / f).is_file()]
    if files:
        for f in files:
            shutil.copy2(f, out_dir / f.name)
        return
    vision.processor.image_processor.save_pretrained(out_dir)
    (out_dir / "processor_config.json").write_text(json.dumps({"processor_class": vision.name}, indent=2) + "\n")
    if getattr(vision.processor, "chat_template", None):
        (out_dir / "chat_template.jinja").write_text(vision.processor.chat_template)
