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


def test_the_backward_trims_between_runs_of_layers_in_every_model_family(monkeypatch):
    """trim_in_backward finds the decoder layers of each family rft builds (models/families.py: GPT-2's blocks,
    mixture-of-experts and sliding-window layers, layers returning a tensor or a tuple) and its hooks fire in the
    backward pass, once each, and never in a pass without gradients."""
    import torch
    from transformers import AutoModelForCausalLM

    from rft.models.families import FAMILIES, build_family_config
    from rft.workers import minibatch

    calls = []
    monkeypatch.setattr(minibatch, "release_freed_memory", lambda: calls.append(1))
    missed = {}
    for family in FAMILIES:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(build_family_config(family, vocab_size=64, eos_token_id=1, layers=4))
        calls.clear()
        hooks = minibatch.trim_in_backward(model, points=2)  # 4 layers: a hook on the third
        ids = torch.randint(2, 64, (2, 12))
        with torch.no_grad():
            model(input_ids=ids)
        quiet = len(calls)
        model(input_ids=ids).logits.sum().backward()
        if (hooks, quiet, len(calls)) != (1, 0, 1):
            missed[family] = (hooks, quiet, len(calls))
    assert not missed, f"(hooks, trims without gradients, trims in the backward) per family: {missed}"
    assert len(FAMILIES) >= 15  # every family: none left out of the loop above


def test_the_update_hands_its_gradients_memory_back_before_the_next_generation(tmp_path, monkeypatch):
    """The update's last trim comes after its gradients are freed (each parameter's .grad None): the heap they
    leave is handed back before the next generation allocates, which otherwise runs from a heap the update
    fragmented (measured at Qwen2.5-0.5B's shape, bench/RESULTS.md 2026-11-27 midday)."""
    from rl_helpers import make_assets, rl_config

    from rft.monitor import Timer
    from rft.orchestration.run import SyncRun
    from rft.workers import minibatch

    run = SyncRun(rl_config(make_assets(tmp_path / "assets"), tmp_path / "out"))
    params = [p for p in run.trainer.model.parameters() if p.requires_grad]
    freed = []
    monkeypatch.setattr(minibatch, "release_freed_memory", lambda: freed.append(all(p.grad is None for p in params)))
    monkeypatch.setattr(minibatch, "trim_in_backward", lambda *a, **k: 0)
    run.train_step(1, Timer())
    assert len(freed) >= 3 and freed[-1] is True and not all(freed), freed



CHILD = """
import sys, time
from rft.errors import say_error
from rft.runtime import exit_with_parent
exit_with_parent(2, "rft: error: the parent (pid {parent}) is gone", poll_s=0.02)
SAY
open(sys.argv[1], "w").close()
time.sleep(60)  # a slow teardown: the parent watch ends it
"""
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.DEVNULL,
                         stderr=open(sys.argv[3], "w"))
print(child.pid, flush=True)
while not os.path.exists(sys.argv[2]) and child.poll() is None:
    time.sleep(0.02)
os._exit(0)  # gone while the child tears down
"""


def _orphan_stderr(tmp_path, say: str) -> list[str]:
    """The stderr lines of a child (CHILD, `say` its error step) whose parent exits once the child got that far,
    read when the child has exited (gone, or a zombie where nothing reaps orphans)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    said, err = tmp_path / "said", tmp_path / "stderr"
    pid = int(subprocess.run([sys.executable, "-c", PARENT, CHILD.replace("SAY", say), str(said), str(err)],
                             capture_output=True, text=True, timeout=600, check=True).stdout)
    status = Path(f"/proc/{pid}/status")
    for _ in range(3000):  # the watch polls every 20 ms
        try:
            if "\nState:\tZ" in status.read_text():
                break
        except OSError:  # gone
            break
        time.sleep(0.02)
    return err.read_text().splitlines()


def test_a_child_whose_parent_goes_after_it_said_its_error_says_nothing_more(tmp_path):
    """A child that printed its error line (a weight broadcast broken by its killed parent) and then finds the parent
    gone exits without a second line (test_modes' killed-trainer test saw both under load)."""
    assert _orphan_stderr(tmp_path, 'say_error(["rft: error: the broadcast broke"])') == [
        "rft: error: the broadcast broke"]


def test_a_child_whose_parent_goes_first_says_so(tmp_path):
    lines = _orphan_stderr(tmp_path, "pass")
    assert len(lines) == 1 and lines[0].startswith("rft: error: the parent (pid ") and lines[0].endswith("is gone")
