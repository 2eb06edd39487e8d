"""What rft needs to know of a causal LM's architecture, asked of its config and, where a config cannot tell, of the
model itself with one small check. Nothing here names a model family: a family transformers adds later is handled the
same way, or told apart by the same checks.

* `attention_only`: every layer keeps a key/value cache (no recurrent or linear-attention state), so the `hf` engine
  can preallocate the cache (`rollout/cache.py`).
* `sliding_window`: the narrowest attention window any layer has (Mistral's `sliding_window`, Gemma2/3's and
  Qwen2's sliding layers), None when every layer sees the whole sequence.
* `decode_mask_kind`: whether a decode step can take a prepared (B, 1, 1, L) boolean mask, built once per generation
  and sliced, or needs the (B, L) padding mask to build its own (a window narrower than the sequence; ALiBi, whose
  biases come from the padding mask; eager attention, whose masks are additive floats).
"""

from __future__ import annotations

import torch
from torch import nn

ATTENTION_LAYERS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
_DECODE_MASK_ATTR = "_rft_prepared_decode_mask"


def architecture(model: nn.Module) -> str:
    """The class name of `model`'s transformers model (under a peft or FSDP wrapper), for messages."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return type(getattr(base, "module", base)).__name__


def layer_classes(model: nn.Module, names: list[str] | str | None = None) -> set[str]:
    """Class names of the modules wrapped as units: `names` (wrap_policy.transformer_layer_cls_to_wrap), else the
    model's own `_no_split_modules` (the decoder layer, e.g. Qwen2DecoderLayer)."""
    if isinstance(names, str):
        names = [names]
    if names:
        return set(names)
    for module in (model, getattr(model, "get_base_model", lambda: None)()):
        found = getattr(module, "_no_split_modules", None)
        if found:
            return set(found)
    found = {type(m).__name__ for m in model.modules() if type(m).__name__.endswith("DecoderLayer")}
    if not found:
        raise ValueError(f"{type(model).__name__}: no decoder layer class to shard by; set "
                         "fsdp_config.wrap_policy.transformer_layer_cls_to_wrap")
    return found


def cache_kwarg(model: nn.Module) -> str:
    """The keyword `model`'s forward pass takes its KV cache by: `cache` in recent transformers (5.24, `make
    setup`'s; the old `past_key_values` still works there but warns on every call, a FutureWarning),
    `past_key_values` in earlier releases (the vLLM venv's). Asked of the transformers model's forward signature
    (under a peft wrapper, or FSDP1's FullyShardedDataParallel, whose `forward(*args, **kwargs)` names nothing:
    asked of it, every decode step of a sequence-parallel run warned)."""
    import inspect

    base = model
    while True:
        if hasattr(base, "get_base_model"):
            base = base.get_base_model()
        elif type(base).__name__ == "FullyShardedDataParallel":
            base = base.module
        else:
            break
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


def _config(model: nn.Module):
    return getattr(model, "config", None)


def layer_types(config) -> list[str]:
    """The kind of each layer (`config.layer_types`; every layer `full_attention` when the config has none)."""
    types = getattr(config, "layer_types", None)
    return list(types) if types else ["full_attention"] * int(getattr(config, "num_hidden_layers", 0) or 0)


def attention_only(model: nn.Module) -> bool:
    """Whether every layer of `model` is an attention layer whose cache is keys and values."""
    config = _config(model)
    return bool(getattr(config, "num_hidden_layers", None)) and set(layer_types(config)) <= ATTENTION_LAYERS


def sliding_window(config) -> int | None:
    """The attention window of the model's sliding layers, None when no layer slides."""
    window = getattr(config, "sliding_window", None) or None
    types = getattr(config, "layer_types", None)
    if types is not None and "sliding_attention" not in types:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window) if window else None


def attention_chunk(config) -> int | None:
    """The chunk length of the model's chunked-attention layers (Llama 4's `attention_chunk_size`: a token attends
    only to the earlier tokens of its own chunk), None when no layer is chunked."""
    chunk = getattr(config, "attention_chunk_size", None) or None
    types = getattr(config, "layer_types", None)
    if chunk is None or (types is not None and "chunked_attention" not in types):
        return None
    return int(chunk)


def uses_alibi(model: nn.Module) -> bool:
    """Whether `model`'s attention adds ALiBi biases, which its code builds from the padding mask: as its
    config says (Falcon's `alibi`, MPT's `attn_config.alibi`), or, where the config has no such key, where the
    model's modelling code builds them (Bloom's `build_alibi_tensor`: ALiBi is its only kind of position)."""
    import sys

    config = _config(model)
    for part in (config, *vars(config or {}).values()):
        value = part.get("alibi") if isinstance(part, dict) else getattr(part, "alibi", None)
        if isinstance(value, bool):
            return value
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    code = sys.modules.get(type(getattr(base, "module", base)).__module__)
    return any("alibi" in name.lower() and callable(value) for name, value in vars(code or {}).items())


def decode_mask_kind(model: nn.Module, length: int) -> str:
    """"4d" when a decode step of sequences up to `length` positions can take a prepared boolean mask, "2d" when it
    needs the padding mask. A prepared mask is only offered to SDPA attention with no window narrower than `length`;
    whether the model then uses it as given (and reads the padding mask nowhere else, as ALiBi does) is checked once
    per model: one decode step of a left-padded two-row batch both ways, logits compared."""
    config = _config(model)
    impl = getattr(config, "_attn_implementation", None)
    if impl not in ("sdpa", "rft_sdpa", "rft_packed") or not attention_only(model):
        return "2d"
    window = min((w for w in (sliding_window(config), attention_chunk(config)) if w is not None), default=None)
    if window is not None and window < length:  # the model's own mask narrows it
        return "2d"
    ok = getattr(model, _DECODE_MASK_ATTR, None)
    if ok is None:
        try:
            ok = _prepared_mask_matches(model)
        except Exception:  # a model that does not take a 4-d mask
            ok = False
        setattr(model, _DECODE_MASK_ATTR, ok)
    return "4d" if ok else "2d"


@torch.no_grad()
def _prepared_mask_matches(model: nn.Module) -> bool:
    from transformers import DynamicCache

    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (2, 6), generator=torch.Generator().manual_seed(0)).to(device)
    attn = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]], device=device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    step = torch.tensor([[1], [2]], device=device)
    full = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
    was = model.training
    model.eval()
    try:
        logits = []
        for mask in (full, full.bool()[:, None, None, :]):
            cache = {cache_kwarg(model): DynamicCache()}
            model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, **cache)
            out = model(input_ids=step, attention_mask=mask, position_ids=positions[:, -1:] + 1, use_cache=True,
                        **cache)
            logits.append(out.logits[:, -1].float())
    finally:
        model.train(was)
    return bool(torch.allclose(logits[0], logits[1], atol=1e-5, rtol=1e-4))


# ------------------------------------------------------------------------------------------ mixture of experts
_ROUTER_ATTR = "_rft_router_recorder"


class RouterRecorder:
    """The router logits of a mixture-of-experts model's layers during a forward pass, recorded by hooks on the
    router modules transformers itself records (`_can_record_outputs["router_logits"]`), and the auxiliary
    load-balancing loss of them computed with the family's own `load_balancing_loss_func`. rft records them itself
    rather than passing `output_router_logits=True`, with which the model computes the loss from its attention mask,
    which a packed pass does not have."""

    def __init__(self, model: nn.Module, owner: nn.Module, spec):
        import sys

        config = owner.config
        self.loss_fn = sys.modules[type(owner).__module__].load_balancing_loss_func
        self.num_experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
        self.top_k = getattr(config, "num_experts_per_tok", 2)
        self.coef = float(getattr(config, "router_aux_loss_coef", 0.0) or 0.0)
        self.applied = bool(getattr(config, "output_router_logits", False))
        """Whether the loss is added to the training loss (the config's output_router_logits, as transformers adds
        it when training with labels); it is reported either way. The config's flag is then turned off: with it the
        model computes the loss in every forward pass itself, generation's included, where its attention mask does
        not fit the router logits of a cached decode step."""
        for module in model.modules():
            if getattr(module, "config", None) is not None and hasattr(module.config, "output_router_logits"):
                module.config.output_router_logits = False
        self.logits: list[torch.Tensor] | None = None
        self.last: torch.Tensor | None = None
        index = spec.index
        for module in model.modules():
            if isinstance(module, spec.target_class):
                module.register_forward_hook(lambda m, args, out: self._record(out, index))

    def _record(self, out, index: int) -> None:
        if self.logits is not None:
            self.logits.append(out[index] if isinstance(out, (tuple, list)) else out)

    def start(self) -> None:
        self.logits = []

    def stop(self, attention_mask: torch.Tensor | None) -> None:
        """Compute the loss of the recorded pass (`attention_mask`: (B, L) of a padded pass, None for packed)."""
        logits, self.logits = self.logits, None
        self.last = self.loss_fn(tuple(logits), self.num_experts, self.top_k, attention_mask) if logits else None

    def take(self) -> torch.Tensor | None:
        last, self.last = self.last, None
        return last if isinstance(last, torch.Tensor) else None


def router_recorder(model: nn.Module) -> RouterRecorder | None:
    """The `RouterRecorder` of a mixture-of-experts `model` (made once), None for a dense model."""
    found = getattr(model, _ROUTER_ATTR, False)
    if found is False:
        found = None
        for module in model.modules():
            # the class's own attribute: a peft wrapper hands its model's attributes through as its own
            spec = (getattr(type(module), "_can_record_outputs", None) or {}).get("router_logits")
            if spec is not None and hasattr(module, "config"):
                import sys

                if hasattr(sys.modules[type(module).__module__], "load_balancing_loss_func"):
                    found = RouterRecorder(model, module, spec)
                break
        setattr(model, _ROUTER_ATTR, found)
    return found


VALUE_HEADS = ("score", "classifier")
"""The module names of the scalar head of a value model (`*ForTokenClassification`: `score`, or `classifier` in
GPT-2, GPT-NeoX, Falcon, Bloom, MPT) and of a reward model (`*ForSequenceClassification`: `score`) in transformers'
decoder classes."""


def path_key(key: str) -> str:
    """The config key of the folder the model section `key` loads from, as its messages name it: `<key>.path`
    (actor_rollout_ref.model.path, critic.model.path, model.path), or `<key>.model_path` for an item of a list
    of models (workflow.auxiliary_models[0].model_path: rft's key and Trinity-RFT's)."""
    return f"{key}.model_path" if key.endswith("]") else f"{key}.path"
