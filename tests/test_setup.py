"""What a fresh clone's first commands read: pyproject.toml's packaging metadata (`make setup`'s `pip install -e .`)
and the Makefile's demo targets."""

from __future__ import annotations

import itertools
import re
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_pyproject_builds_without_a_setuptools_deprecation():
    """setuptools 77+ warns twice per `pip install -e .` about a `license = {text = ...}` table: the SPDX string
    and license-files it asks for instead, read by the setuptools the build uses, with its warnings as errors."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = apply_configuration(Distribution(), REPO / "pyproject.toml")
    assert dist.metadata.license_expression == "Apache-2.0"
    assert [REPO / f for f in dist.metadata.license_files] == [REPO / "LICENSE"]
    assert "Apache License" in (REPO / "LICENSE").read_text()



def _recipe(target: str) -> list[str]:
    """The command lines of `target`'s recipe in the Makefile."""
    lines = (REPO / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}:", line))
    return [line.strip() for line in itertools.takewhile(lambda x: x.startswith("\t"), lines[start + 1:])]


def test_make_demo_keeps_a_stopped_demo_to_resume():
    """A stopped `make demo` says the same command resumes: its recipe must not delete the run folder first (it
    did, `rm -rf runs/demo`); the demo itself resumes, or says it has finished (tests/test_demo.py)."""
    assert _recipe("demo") == ["$(BIN)/rft demo --output runs/demo"]
    assert _recipe("demo-vision") == ["$(BIN)/rft demo --task vision --output runs/demo-vision"]
