"""Small randomly initialised vision-language models, built offline from transformers' own config and processor
classes (no download), for the multimodal tests and for trying rft on images: `rft init-model --family qwen2_vl m`.

Each family: a two-layer language model of hidden size 64 on rft's tiny byte-level vocabulary (`rft.models.tiny`)
plus the family's image tokens, a two-layer vision tower, and the family's own processor (image processor sized so
that an image becomes a handful of image tokens), saved as `AutoProcessor` / `AutoModelForImageTextToText` load
them. Weights drawn with std 0.2, as the text families (`rft.models.families`), so greedy decoding means something.

To add a family: a builder in `VISION_FAMILIES` returning (config, processor pieces) for `_write`. Not here: Llama 4,
whose image processor exists only on torchvision (no PIL backend), which rft does not require.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rft.fsutil import atomic_dir, new_model_dir

TEXT_SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=128, max_position_embeddings=1024, initializer_range=0.2)

# A ChatML template that writes each image part as the family's image marker (`{image}` below).
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- else %}"
    "{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{- '{image}' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _tokenizer(extra: list[str], template: str, **named: str):
    """rft's tiny ChatML tokenizer (`rft.models.tiny`) with the family's special tokens `extra` added (ids after the
    text vocabulary) and `named` special-token attributes (e.g. image_token="<image>")."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    from rft.models.tiny import ENDOFTEXT, IM_END, IM_START, MODEL_MAX_LENGTH, build_backend_tokenizer

    backend = build_backend_tokenizer()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in extra])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=IM_END, pad_token=ENDOFTEXT,
        extra_special_tokens=[IM_START, IM_END, *extra], model_specific_special_tokens=named,
        clean_up_tokenization_spaces=False, chat_template=template, model_max_length=MODEL_MAX_LENGTH)


def _qwen_vl(model_type: str, vision: dict) -> Callable[[], tuple[Any, dict]]:
    """Qwen2-VL, Qwen2.5-VL and Qwen3-VL: `vision` the tower's config; the image processor sized from its patch."""
    def build():
        from transformers import AutoConfig, Qwen2VLImageProcessorPil

        extra = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
        template = CHAT_TEMPLATE.replace("{image}", "<|vision_start|><|image_pad|><|vision_end|>")
        tok = _tokenizer(extra, template)
        start, end, image, video = tok.convert_tokens_to_ids(extra)
        # one image token per (2 patches x 2 merge)^2 pixels: 28 x 28 to 56 x 56 pixels (Qwen3-VL 32 x 32 to
        # 64 x 64): 1 to 4 image tokens
        side = 2 * vision["patch_size"]
        image_processor = Qwen2VLImageProcessorPil(min_pixels=side * side, max_pixels=4 * side * side,
                                                   patch_size=vision["patch_size"])
        text = {"head_dim": 32} if model_type == "qwen3_vl" else {}
        config = AutoConfig.for_model(
            model_type,
            # bos_token_id None: the family's default (Qwen's 151643) is past this vocabulary, which transformers
            # warns of on every load; the tokenizer has no BOS
            text_config=dict(**TEXT_SIZES, **text, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id, bos_token_id=None,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [4, 6, 6]}),
            vision_config=vision, image_token_id=image, video_token_id=video, vision_start_token_id=start,
            vision_end_token_id=end, tie_word_embeddings=True)
        return config, dict(tokenizer=tok, image_processor=image_processor, chat_template=template,
                            processor_class={"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor",
                                             "qwen3_vl": "Qwen3VLProcessor"}[model_type])
    return build


def _gemma3():
    """Gemma 3: a SigLIP tower; each image is `<start_of_image>`, its pooled soft tokens, `<end_of_image>`. Untied
    embeddings: Gemma scales its input embeddings by sqrt(hidden), and tied to the output they would make a random
    model repeat its last token."""
    from transformers import AutoConfig, Gemma3ImageProcessorPil

    named = dict(boi_token="<start_of_image>", image_token="<image_soft_token>", eoi_token="<end_of_image>")
    extra = list(named.values())
    template = CHAT_TEMPLATE.replace("{image}", named["boi_token"])
    tok = _tokenizer(extra, template, **named)
    boi, image, eoi = tok.convert_tokens_to_ids(extra)
    # 32 x 32 pixels in 8 x 8 patches, pooled 2 x 2: 4 image tokens an image
    image_processor = Gemma3ImageProcessorPil(size={"height": 32, "width": 32})
    config = AutoConfig.for_model(
        "gemma3",
        text_config=dict(**TEXT_SIZES, head_dim=32, query_pre_attn_scalar=32, vocab_size=len(tok),
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8, vision_use_head=False),
        mm_tokens_per_image=4, image_token_index=image, boi_token_index=boi, eoi_token_index=eoi,
        initializer_range=0.2, tie_word_embeddings=False)
    return config, dict(tokenizer=tok, image_processor=image_processor, chat_template=template,
                        processor_class="Gemma3Processor", image_seq_length=4)


def _llava():
    """LLaVA: a CLIP tower and a Llama language model, one `<image>` token per patch."""
    from transformers import AutoConfig, CLIPImageProcessorPil

    template = CHAT_TEMPLATE.replace("{image}", "<image>")
    tok = _tokenizer(["<image>"], template, image_token="<image>")
    # 32 x 32 pixels (shortest edge resized, then centre-cropped) in 8 x 8 patches: 16 image tokens, the CLS token
    # dropped ("default" feature selection)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    config = AutoConfig.for_model(
        "llava",
        text_config=dict(**TEXT_SIZES, model_type="llama", vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, bos_token_id=None),
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8,
                           initializer_range=0.2),
        image_token_index=tok.convert_tokens_to_ids("<image>"), image_seq_length=16,
        # the last layer's features: LLaVA's usual second-to-last would leave a two-layer tower's last unused
        vision_feature_select_strategy="default", vision_feature_layer=-1, tie_word_embeddings=False)
    return config, dict(tokenizer=tok, image_processor=image_processor, chat_template=template,
                        processor_class="LlavaProcessor", patch_size=8, vision_feature_select_strategy="default",
                        num_additional_image_tokens=1)


def _idefics3(model_type: str) -> Callable[[], tuple[Any, dict]]:
    """Idefics3 and SmolVLM (the same model and image layout, each with its own processor classes): a SigLIP-like
    tower, pixel-shuffled; image splitting off so that an image is one tile."""
    def build():
        import transformers
        from transformers import AutoConfig

        prefix = {"idefics3": "Idefics3", "smolvlm": "SmolVLM"}[model_type]
        extra = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
        template = CHAT_TEMPLATE.replace("{image}", "<image>")
        tok = _tokenizer(extra, template)
        # no splitting; 32 x 32 pixels in 8 x 8 patches, shuffled 2 x 2: 4 image tokens an image
        image_processor = getattr(transformers, f"{prefix}ImageProcessorPil")(
            do_image_splitting=False, size={"longest_edge": 32}, max_image_size={"longest_edge": 32})
        config = AutoConfig.for_model(
            model_type,
            text_config=dict(**TEXT_SIZES, model_type="llama", vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id, bos_token_id=None),
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                               image_size=32, patch_size=8, initializer_range=0.2),
            image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2, initializer_range=0.2,
            tie_word_embeddings=False)
        return config, dict(tokenizer=tok, image_processor=image_processor, chat_template=template,
                            processor_class=f"{prefix}Processor", image_seq_len=4)
    return build


VISION_FAMILIES: dict[str, Callable[[], tuple[Any, dict]]] = {
    "qwen2_vl": _qwen_vl("qwen2_vl", dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2,
                                          patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                                          initializer_range=0.2)),
    "qwen2_5_vl": _qwen_vl("qwen2_5_vl", dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                              out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                                              temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                                              initializer_range=0.2)),
    "gemma3": _gemma3,
    "llava": _llava,
    "idefics3": _idefics3("idefics3"),
    "smolvlm": _idefics3("smolvlm"),
    "qwen3_vl": _qwen_vl("qwen3_vl", dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                          out_hidden_size=64, patch_size=16, spatial_merge_size=2,
                                          temporal_patch_size=2, num_position_embeddings=16,
                                          deepstack_visual_indexes=[0], initializer_range=0.2)),
}
"""Vision-language family name -> a builder of (transformers config, processor pieces: tokenizer, image_processor,
chat_template, processor_class, and the processor's own settings, e.g. Idefics3's image_seq_len, written to
processor_config.json). SmolVLM's processor needs the num2words package to load."""


def _write(staging: Path, config, pieces: dict, seed: int, dtype) -> None:
    """Saves into `staging` the processor `pieces` (its settings beside processor_class in processor_config.json) and
    the model of `config` drawn from `seed`."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    tok = pieces["tokenizer"]
    tok.save_pretrained(staging)
    pieces["image_processor"].save_pretrained(staging)
    (staging / "chat_template.jinja").write_text(pieces["chat_template"])
    extra = {k: v for k, v in pieces.items() if k not in ("tokenizer", "image_processor", "chat_template",
                                                          "processor_class")}
    (staging / "processor_config.json").write_text(
        json.dumps({"processor_class": pieces["processor_class"], **extra}, indent=2) + "\n")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        _draw_zero_matrices(model)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.to(dtype or torch.float32).save_pretrained(staging)


def _draw_zero_matrices(model, std: float = 0.2) -> None:
    """Draws with std `std` the weight matrices a family initialises at zero (Gemma 3's image projection, trained
    from zero): left at zero, a random model would not see its images."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and p.is_floating_point() and not p.any():
                p.normal_(0.0, std)


DEMO_TEXT_SIZES = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=512)
"""The language model of `rft demo --task vision`'s Qwen2-VL (the size of rft's `tiny` text preset): the test
families' two layers of width 64 do not learn to count shapes within the demo's minutes."""


def init_vision_model(family: str, out_dir: str | os.PathLike[str], seed: int = 0, dtype=None,
                      overwrite: bool = False, text_sizes: dict | None = None) -> Path:
    """Writes a seeded, randomly initialised vision-language model of `family` with its processor into `out_dir` (a
    new or empty folder, or any with `overwrite`), saved in `dtype` (float32 when None). `text_sizes`: the language
    model's sizes instead of `TEXT_SIZES` (Qwen-VL families: the vision tower's output follows its width)."""
    from rft.models.load import _quiet_transformers

    _quiet_transformers()
    if family not in VISION_FAMILIES:
        raise ValueError(f"unknown vision-language family {family!r}; known: {', '.join(sorted(VISION_FAMILIES))}")
    out_dir = new_model_dir(out_dir, overwrite)
    config, pieces = VISION_FAMILIES[family]()
    if text_sizes:  # built again, so that what follows from the sizes (a layer type per layer) follows them
        text = {**config.text_config.to_dict(), **text_sizes}
        text.pop("layer_types", None)
        config.text_config = type(config.text_config)(**text)
    if text_sizes and "hidden_size" in text_sizes and config.model_type.startswith("qwen"):  # its merger's output
        # is the language model's input (the other families' projectors map any tower width)
        vision = config.vision_config
        setattr(vision, "out_hidden_size" if hasattr(vision, "out_hidden_size") else "hidden_size",
                text_sizes["hidden_size"])
    with atomic_dir(out_dir) as staging:
        _write(staging, config, pieces, seed, dtype)
    return out_dir
