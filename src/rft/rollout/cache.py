"""The `hf` engine's KV cache: one buffer per layer allocated for the whole generation, written in place.

transformers' `DynamicCache` grows each layer's keys and values by concatenation, copying the whole cache at
every new token (O(L^2) copies over a response). `PreallocatedCache` allocates (rows, heads, capacity, head_dim)
once, at the prefill, and hands the attention views of the filled columns. Rows can be repeated (the n samples of a
prompt share its prefill) or dropped (rows that have finished) in place of the whole cache, and, for the streaming
engine (`stream.py`), joined with the rows of another cache (`regroup`).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer, StaticCache


def kv_bytes_per_token(config) -> int:
    """float32 keys and values of one token over every layer of a transformers config."""
    text = getattr(config, "text_config", None) or config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return 2 * text.num_hidden_layers * kv_heads * head_dim * 4


class PreallocatedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values live in a buffer of `capacity` positions (views of the filled part)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self._k = self._v = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            b, h, _, d = key_states.shape
            self._k = key_states.new_empty(b, h, self.capacity, d)
            self._v = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
        new = key_states.shape[-2]
        if self.length + new > self.capacity:
            raise RuntimeError(f"PreallocatedCache: {self.length + new} positions exceed the capacity {self.capacity}")
        self._k[:, :, self.length:self.length + new].copy_(key_states)
        self._v[:, :, self.length:self.length + new].copy_(value_states)
        self.length += new
        self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def rows(self, index: torch.Tensor) -> None:
        """Keep the rows `index` (a long tensor: repeats allowed) of the buffer."""
        if self._k is None:
            return
        self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)
        self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]

    def regroup(self, parts: list[tuple[PreallocatedLayer, torch.Tensor | None]], width: int, capacity: int) -> None:
        """Become the rows of `parts` (each a layer and the rows of it to take, None: all) one after another, each
        row's last `width` positions right-aligned in new buffers of `capacity` positions; positions a row never
        wrote (a shorter part) are zeros."""
        keys, values = [], []
        for layer, index in parts:
            start = max(0, layer.length - width)
            k, v = layer._k[:, :, start:layer.length], layer._v[:, :, start:layer.length]
            if index is not None:
                k, v = k.index_select(0, index), v.index_select(0, index)
            keys.append(k)
            values.append(v)
        h, d = keys[0].shape[1], keys[0].shape[3]
        rows = sum(k.shape[0] for k in keys)
        new_k = keys[0].new_zeros(rows, h, capacity, d)
        new_v = values[0].new_zeros(rows, h, capacity, values[0].shape[-1])
        row = 0
        for k, v in zip(keys, values):
            new_k[row:row + k.shape[0], :, width - k.shape[2]:width] = k
            new_v[row:row + v.shape[0], :, width - v.shape[2]:width] = v
            row += k.shape[0]
        if not self.is_initialized:
            self.lazy_initialization(new_k, new_v)
        self._k, self._v, self.capacity, self.length = new_k, new_v, capacity, width
        self.keys, self.values = self._k[:, :, :width], self._v[:, :, :width]


class PreallocatedCache(Cache):
    """`num_layers` `PreallocatedLayer`s of `capacity` positions (prompt + new tokens)."""

    def __init__(self, num_layers: int, capacity: int):
        super().__init__(layers=[PreallocatedLayer(capacity) for _ in range(num_layers)])

    def rows(self, index: torch.Tensor) -> None:
        """Keep the rows `index` of every layer (repeat_interleave for shared prompts, a subset for finished rows)."""
        for layer in self.layers:
            layer.rows(index)

    def regroup(self, parts: list[tuple[PreallocatedCache, torch.Tensor | None]], width: int, capacity: int) -> None:
        """Become the rows of `parts` (each a cache, this one among them or not, and the rows of it to take, None:
        all) one after another, right-aligned at column `width` in buffers of `capacity` positions: the streaming
        engine's batch (`stream.py`), in which the longest row fills all `width` and the others are padded on the
        left, as `generate()`'s prompts are."""
        for i, layer in enumerate(self.layers):
            layer.regroup([(cache.layers[i], index) for cache, index in parts], width, capacity)


class OneDtypeStaticCache(StaticCache):
    """transformers' `StaticCache` whose keys and values are written in one dtype per layer, the wider of the
    prefill's two (every later write cast to it, as `PreallocatedLayer`'s `copy_` casts).

    Under autocast a Qwen2 key is a bf16 projection times float32 rotary factors, so float32, and its value bf16.
    transformers 5.17 allocates a layer's values in its keys' dtype and then refuses the bf16 values
    (`index_copy_(): self and source expected to have the same dtype`: the compiled decode step failed on the H200
    check's image and on a CPU with that release); 5.24 allocates each in its own dtype. The widening is exact
    (bf16 -> float32) and the attention casts both to its own compute dtype, so the samples do not change."""

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        layer = self.layers[layer_idx]
        if layer.is_initialized:
            key_dtype, value_dtype = layer.keys.dtype, layer.values.dtype
        else:
            key_dtype = value_dtype = torch.promote_types(key_states.dtype, value_states.dtype)
        return super().update(key_states.to(key_dtype), value_states.to(value_dtype), layer_idx, *args, **kwargs)
