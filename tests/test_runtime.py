"""Process-wide CPU settings (rft.runtime)."""

from __future__ import annotations

from rft import runtime


def test_freed_memory_is_trimmed_only_while_the_process_holds_a_large_share(monkeypatch):
    calls = []

    class Libc:
        def malloc_trim(self, pad):
            calls.append(pad)

    monkeypatch.setattr(runtime, "_LIBC", Libc())
    monkeypatch.setattr(runtime, "total_memory", lambda: 24 << 30)
    monkeypatch.setattr(runtime, "resident_memory", lambda: 3 << 30)  # 12.5% of the machine: kept
    runtime.release_freed_memory()
    assert calls == []
    runtime.release_freed_memory(force=True)
    assert calls == [0]
    monkeypatch.setattr(runtime, "resident_memory", lambda: 11 << 30)  # 46%: handed back
    runtime.release_freed_memory()
    assert calls == [0, 0]
    monkeypatch.setattr(runtime, "resident_memory", lambda: None)  # unknown: trimmed, as before
    runtime.release_freed_memory()
    assert calls == [0, 0, 0]


def test_the_memory_readings_are_bytes():
    assert runtime.total_memory() > runtime.available_memory() > 0
    assert 0 < runtime.resident_memory() < runtime.total_memory()


def test_the_backward_hands_freed_memory_back_between_runs_of_layers(monkeypatch):
    """trim_in_backward: 8 decoder layers, 4 runs: hooks on layers 2, 4 and 6 (none on a compiled layer), whose
    output gradients call release_freed_memory once each in a backward pass, as the backward reaches each, and
    never in a pass without gradients (a generation, a log-prob pass)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rft.workers import minibatch

    config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=8,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    layers = list(model.model.layers)
    seen, calls = [], []  # the layers whose output gradient was reached; that layer, at each trim

    def reached(i):
        def hook(module, args, out):
            if out.requires_grad:
                out.register_hook(lambda g: seen.append(i))
        return hook

    for i, layer in enumerate(layers):
        layer.register_forward_hook(reached(i))
    monkeypatch.setattr(minibatch, "release_freed_memory", lambda: calls.append(seen[-1]))
    assert minibatch.trim_in_backward(model) == 3
    ids = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        model(input_ids=ids)
    assert calls == []
    model(input_ids=ids).logits.sum().backward()
    assert seen == [7, 6, 5, 4, 3, 2, 1, 0] and calls == [6, 4, 2]

    other = Qwen2ForCausalLM(config)
    other.model.layers[4].compile()  # a hook would run inside the compiled call
    assert minibatch.trim_in_backward(other) == 2
