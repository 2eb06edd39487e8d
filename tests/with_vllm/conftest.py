"""The vLLM engine's tests run in the venv `make vllm` builds (`make test-vllm`; .ci/run runs them): vLLM pins a
transformers release below the one `make setup` installs. Without vLLM, tests/conftest.py leaves this folder out of
a collection of tests/ (named on its own, each test fails with the engine's one-line install advice); the allowed
skips of tests/conftest.py apply here too."""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ["HF_HUB_OFFLINE"] = "1"

