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
    removed, a line's `&&`-joined commands one by one."""
    text = (ROOT / "README.md").read_text()
    assert FIRST_SCREEN in text, f"README.md has no {FIRST_SCREEN!r} section"
    section = text.split(FIRST_SCREEN, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                end = words.index("&&") if "&&" in words else len(words)
                commands.append(words[:end])
                words = words[end + 1:]
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


def test_the_readme_is_read_in_two_minutes_and_shows_how_to_install():
    words = len((ROOT / "README.md").read_text().split())
    assert words <= 1500, words
    assert "pip install -c constraints.txt ." in (ROOT / "README.md").read_text()


@pytest.mark.heavy
def test_every_rft_command_of_the_first_screen_runs_and_leaves_what_it_says(tmp_path):
    """In a fresh folder with the clone's examples/ and tests/ beside it: `mkdir` and `cd` as a shell does them, then
    every rft command, in the scratch folder the README makes (nothing written outside it)."""
    from transformers import AutoModelForCausalLM

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    cwd, ran = tmp_path, []
    for words in first_screen_commands():
        if words[0] == "mkdir":
            (cwd / words[-1]).mkdir(parents=True, exist_ok=True)
        elif words[0] == "cd":
            cwd = cwd / words[1]
        elif words[0] == "rft" and words[1] != "studio":  # the studio serves until stopped: tests/test_studio.py
            rft_here(*words[1:], cwd=cwd)
            ran.append(words[1])
    assert ran == ["init-model", "data", "example", "train", "example", "sft", "merge"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["examples", "tests", "try"]  # one scratch folder
    assert (cwd / "gsm8k" / "train.parquet").is_file() and (cwd / "gsm8k" / "test.parquet").is_file()
    steps = (cwd / "grpo" / "metrics.jsonl").read_text().splitlines()
    assert len([s for s in steps if '"actor/pg_loss"' in s]) == 4
    for folder in ("grpo/model", "sft/model", "merged"):
        assert AutoModelForCausalLM.from_pretrained(cwd / folder) is not None, folder
