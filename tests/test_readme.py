"""The README's first screen ("The first ten minutes"), command by command, as a newcomer runs it: every `rft`
command shown runs here in that order on a fresh folder (the repository's examples/ and tests/data/ beside it) and
leaves what the README says; `make demo`, `make test` and activating `.venv` are checked against the Makefile and
this venv (the demo itself: tests/test_demo.py; the studio: tests/test_studio.py)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from cli_helpers import rft_here

ROOT = Path(__file__).resolve().parents[1]
FIRST_SCREEN = "## The first ten minutes"


def first_screen_commands() -> list[list[str]]:
    """The commands of the fenced bash blocks of the README's first section, comments and line continuations
    removed."""
    text = (ROOT / "README.md").read_text()
    assert FIRST_SCREEN in text, f"README.md has no {FIRST_SCREEN!r} section"
    section = text.split(FIRST_SCREEN, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def test_the_first_screen_is_near_the_top_and_shows_the_two_commands_and_how_to_run_rft():
    text = (ROOT / "README.md").read_text()
    assert text.index(FIRST_SCREEN) < 1200  # after a short description only
    commands = first_screen_commands()
    assert commands[:3] == [["make", "demo"], ["make", "test"], ["source", ".venv/bin/activate"]]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: ", makefile, re.M) and re.search(r"^test: ", makefile, re.M)
    assert re.search(r"^VENV\s*\?=\s*\.venv$", makefile, re.M)
    assert (Path(sys.executable).parent / "activate").is_file() and (Path(sys.executable).parent / "rft").is_file()


@pytest.mark.heavy
def test_every_rft_command_of_the_first_screen_runs_and_leaves_what_it_says(tmp_path):
    from transformers import AutoModelForCausalLM

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    ran = []
    for words in first_screen_commands():
        if words[0] != "rft" or words[1] == "studio":  # the studio serves until stopped: tests/test_studio.py
            continue
        rft_here(*words[1:], cwd=tmp_path)
        ran.append(words[1])
    assert ran == ["init-model", "data", "train", "sft", "merge"]
    assert (tmp_path / "gsm8k" / "train.parquet").is_file() and (tmp_path / "gsm8k" / "test.parquet").is_file()
    steps = (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()
    assert len([s for s in steps if '"actor/pg_loss"' in s]) == 4
    for folder in ("grpo/model", "sft/model", "merged"):
        assert AutoModelForCausalLM.from_pretrained(tmp_path / folder) is not None, folder
