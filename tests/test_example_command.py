"""`rft example`: the example configs ship with rft, so a user in a folder of their own (pip-installed rft, no
repository beside them) lists them, writes one where they are, and a missing `examples/NAME.yaml` says how."""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import re
from pathlib import Path

import pytest
from cli_helpers import rft_here

REPO = Path(__file__).resolve().parents[1]


def test_the_examples_ship_as_package_data():
    """One copy: `src/rft/examples` is the repository's `examples/` (a link), and pyproject's package-data takes
    every file of it into the wheel (a new example in a deeper folder would otherwise be left out silently)."""
    from rft.example_files import ROOT

    assert ROOT.resolve() == (REPO / "examples").resolve()
    table = (REPO / "pyproject.toml").read_text().split("[tool.setuptools.package-data]", 1)[1]
    patterns = ast.literal_eval(re.search(r"^rft = (\[.*?\])$", table, re.M | re.S).group(1))
    files = [p.relative_to(REPO / "examples").as_posix() for p in (REPO / "examples").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    left_out = [f for f in files if not any(fnmatch.fnmatch(f"examples/{f}", pattern) for pattern in patterns)]
    assert files and left_out == []


def test_rft_example_lists_the_examples_with_their_first_line(tmp_path):
    run = rft_here("example", cwd=tmp_path)
    lines = run.stdout.splitlines()
    names = [line.split()[0] for line in lines[:-1]]
    expected = sorted([*(p.relative_to(REPO / "examples").with_suffix("").as_posix()
                         for p in (REPO / "examples").rglob("*.yaml")),
                       *(p.relative_to(REPO / "examples").as_posix() for p in (REPO / "examples").rglob("*.py"))])
    assert names == expected
    assert "arithmetic_grpo" in names and "offline/eval" in names and "datasets/question_answer.py" in names
    line = next(line for line in lines if line.startswith("arithmetic_grpo "))
    assert line.split(None, 1)[1] == "GRPO on rft's synthetic arithmetic task with the offline tiny model"
    assert lines[-1].startswith("rft example NAME [DEST]")
    assert list(tmp_path.iterdir()) == []  # listing writes nothing


def test_rft_example_writes_the_repositorys_bytes_and_refuses_other_bytes_without_overwrite(tmp_path):
    repo_file = REPO / "examples" / "arithmetic_grpo.yaml"
    run = rft_here("example", "arithmetic_grpo", "out/configs", cwd=tmp_path)  # DEST made where missing
    written = tmp_path / "out" / "configs" / "arithmetic_grpo.yaml"
    assert written.read_bytes() == repo_file.read_bytes()
    # its header as it runs here: the path written, not the repository's
    assert "rft train out/configs/arithmetic_grpo.yaml actor_rollout_ref.model.path=m" in run.stdout
    assert "examples/arithmetic_grpo.yaml" not in run.stdout and "rft example arithmetic_grpo &&" not in run.stdout

    rft_here("example", "offline/eval", cwd=tmp_path)  # the default DEST: this folder
    assert (tmp_path / "eval.yaml").read_bytes() == (REPO / "examples" / "offline" / "eval.yaml").read_bytes()

    again = rft_here("example", "arithmetic_grpo", "out/configs", cwd=tmp_path)  # the same bytes: nothing to do
    assert "nothing written" in again.stdout

    written.write_text("# mine\n")
    refused = rft_here("example", "arithmetic_grpo", "out/configs", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("rft: error: rft example arithmetic_grpo: ") and "--overwrite" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and written.read_text() == "# mine\n"
    rft_here("example", "arithmetic_grpo", "out/configs", "--overwrite", cwd=tmp_path)
    assert written.read_bytes() == repo_file.read_bytes()


RECIPES = ("data_juicer/dj_scoring_exp.yaml", "verl_interaction/interaction_config.yaml")
"""Shipped YAML files that are no rft config (a Data-Juicer recipe, verl's interaction file: other examples read
them)."""


@pytest.mark.parametrize("example", sorted(p for p in (REPO / "examples").rglob("*.yaml")
                                           if p.relative_to(REPO / "examples").as_posix() not in RECIPES),
                         ids=lambda p: p.relative_to(REPO / "examples").as_posix())
def test_every_examples_header_runs_it_from_where_rft_example_writes_it(example):
    """An example's header said `rft train examples/NAME.yaml`, a path a user who got the file with `rft example
    NAME` does not have (it is NAME.yaml in their folder; offline/eval.yaml's is eval.yaml). The header's commands
    start `rft example NAME &&` and run the file by its own name, which works there and in a clone alike."""
    from rft.example_files import header

    name = example.relative_to(REPO / "examples").with_suffix("").as_posix()
    commands = "\n".join(header(example.read_text()))
    assert re.search(rf"\brft example {re.escape(name)} && ", commands), commands
    assert re.search(rf"\brft (train|distill|sft|dpo|rm|generate|eval) {example.stem}\.yaml(\s|$)", commands), commands
    assert f"examples/{name}.yaml" not in commands


@pytest.mark.parametrize(("argv", "words"), [
    (["example", "arithmetic_grpoo"], ["no example is named 'arithmetic_grpoo'", "did you mean 'arithmetic_grpo'",
                                       "`rft example` lists them"]),
    (["example", "arithmetic_grpo", "f"], ["'f' is a file", "DEST is the folder"]),
])
def test_rft_example_refuses_an_unknown_name_and_a_file_as_dest_in_one_line(argv, words, tmp_path):
    (tmp_path / "f").write_text("mine\n")
    run = rft_here(*argv, cwd=tmp_path, check=False)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and run.stderr.startswith("rft: error: ")
    for word in words:
        assert word in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("command", ["train", "sft", "dpo", "eval"])
def test_a_missing_examples_path_says_rft_example_writes_it(command, tmp_path):
    """`rft train examples/arithmetic_grpo.yaml` as the docs show it, outside the repository: one line saying the
    file is not here and which command writes it, before any model loads."""
    run = rft_here(command, "examples/arithmetic_grpo.yaml", "a.b=1", cwd=tmp_path, check=False)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith("rft: error: config file 'examples/arithmetic_grpo.yaml' does not exist here "
                                 f"({tmp_path}); `rft example arithmetic_grpo` writes it into this folder")
    assert "`rft example arithmetic_grpo examples` writes it at that path" in run.stderr
    nested = rft_here(command, "examples/offline/eval.yaml", cwd=tmp_path, check=False)
    assert "`rft example offline/eval` writes it into this folder as eval.yaml" in nested.stderr
    unknown = rft_here(command, "examples/nope.yaml", cwd=tmp_path, check=False)
    assert unknown.returncode == 2 and "no example is named 'nope' either: `rft example` lists them" in unknown.stderr


def test_a_written_example_runs_where_it_is_written_after_the_data_command_of_its_header(tmp_path):
    """The examples' data paths are relative to the folder they run in: gsm8k_grpo_small.yaml, written into a
    fresh folder, validates (data files included) after its header's `rft data gsm8k SRC gsm8k`."""
    from rft.trainer.configure import load_config

    rft_here("init-model", "--preset", "tiny", "m", cwd=tmp_path)
    run = rft_here("example", "gsm8k_grpo_small", cwd=tmp_path)
    assert "rft data gsm8k path/to/gsm8k gsm8k" in run.stdout
    rft_here("data", "gsm8k", str(REPO / "tests" / "data" / "gsm8k"), "gsm8k", cwd=tmp_path)
    with contextlib.chdir(tmp_path):
        cfg = load_config("gsm8k_grpo_small.yaml", ["actor_rollout_ref.model.path=m"])
    assert cfg.data.train_files == "gsm8k/train.parquet"


def test_rft_example_says_how_to_get_a_file_the_example_reads_once(tmp_path):
    """A companion file (the Data-Juicer recipe trinity_llm_scores.yaml reads) whose `rft example` command the
    header already gives is not announced a second time below it."""
    run = rft_here("example", "data_juicer/trinity_llm_scores", cwd=tmp_path)
    assert run.stdout.count("rft example data_juicer/dj_scoring_exp examples/data_juicer") == 1, run.stdout
    assert "it reads examples/" not in run.stdout


def test_rft_example_names_as_read_only_the_files_the_config_reads(tmp_path):
    """gsm8k_grpo_small's header names examples/gsm8k_grpo.yaml, the recipe it shrinks, which it does not read: no
    `it reads` line sends the user to write it; arithmetic_grpo_custom_dataset reads its dataset class by path
    (data.custom_cls.path); the calculator agent's docstring names the config that uses it, not one it reads, and a
    file without a comment header is written without an empty `its header` line."""
    from rft.example_files import companions, shipped

    small = rft_here("example", "gsm8k_grpo_small", cwd=tmp_path)
    assert "it reads examples/" not in small.stdout, small.stdout
    examples = shipped()
    assert companions("arithmetic_grpo_custom_dataset",
                      examples["arithmetic_grpo_custom_dataset"].read_text()) == ["datasets/question_answer.py"]
    agent = rft_here("example", "workflows/calculator_agent.py", cwd=tmp_path)
    assert agent.stdout == "wrote calculator_agent.py\n", agent.stdout
