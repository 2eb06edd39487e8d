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
