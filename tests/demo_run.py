"""A finished short demo run (the demo's SFT and GRPO step counts cut down, as tests/test_demo.py does), made once
per test process for the tests that read one: generate + eval against its held-out accuracy, the studio's run
view."""

from __future__ import annotations

from pathlib import Path

_CACHE: dict[str, Path] = {}


def short_demo(tmp_path_factory) -> Path:
    if "run" not in _CACHE:
        import rft.orchestration.demo as demo

        root = tmp_path_factory.mktemp("short_demo") / "demo"
        saved = demo.COPY_STEPS, demo.SFT_STEPS, demo.RL_STEPS, demo.TEST_FREQ
        demo.COPY_STEPS, demo.SFT_STEPS, demo.RL_STEPS, demo.TEST_FREQ = 5, 30, 4, 2
        try:
            demo.run_demo(root, seed=1)
        finally:
            demo.COPY_STEPS, demo.SFT_STEPS, demo.RL_STEPS, demo.TEST_FREQ = saved
        _CACHE["run"] = root
    return _CACHE["run"]
