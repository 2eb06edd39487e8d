"""Documents generated from code stay in step with it."""

from pathlib import Path

from rft.config.reference import reference_markdown

REPO = Path(__file__).resolve().parents[1]


def test_config_reference_is_current():
    text = (REPO / "docs" / "config.md").read_text()
    assert text == reference_markdown(), "docs/config.md is stale: run `rft config reference > docs/config.md`"


def test_config_reference_documents_every_key():
    from rft.config.schema import RFTConfig
    from rft.config.sft_schema import SFTConfig
    from rft.config.validate import walk

    text = reference_markdown()
    for schema in (RFTConfig, SFTConfig):
        for key, field, _ in walk(schema()):
            assert f"| `{key}` |" in text
            assert field.metadata.get("help"), f"{key} has no help text"


def _rft_data_commands(text: str) -> list[list[str]]:
    """The `rft data ...` command lines of `text`: in code blocks, inline code and YAML comment lines, each cut at
    the end of its line, a backtick, a comment or `&&`."""
    import re
    import shlex

    return [shlex.split(m) for m in re.findall(r"\brft data [^`#&\n]*", text.replace("\\\n", " "))]


def _run_the_data_commands(folder: Path, texts: list[tuple[str, str]]):
    """Run the `rft data` command lines of `texts` ((where, text) pairs) one after another in `folder`, which gets
    the repository's `tests/` and `examples/` as a clone has them: ({command words: where}, [the failures]).
    Skipped: mentions without a folder (`rft data shapes writes ...`) and the user's copies of data sets
    (`path/to/gsm8k`, `<local copy of ...>`, outside the repository)."""
    from cli_helpers import rft_here

    from rft.cli import build_parser

    for name in ("tests", "examples"):
        if not (folder / name).exists():
            (folder / name).symlink_to(REPO / name)
    ran: dict[tuple[str, ...], str] = {}
    failed = []
    for where, text in texts:
        for words in _rft_data_commands(text):
            try:
                args = build_parser().parse_args(words[1:])
            except SystemExit:  # a mention of the command, not a command line
                continue
            if not args.src_or_out:  # a mention without a folder (`rft data shapes writes ...`)
                continue
            source = (REPO / args.src_or_out[0]).resolve() if len(args.src_or_out) == 2 else REPO
            if any(w.startswith("<") for w in words) or not (source.exists() and source.is_relative_to(REPO)):
                continue  # a placeholder for the user's copy of a data set
            if tuple(words) not in ran:
                proc = rft_here(*words[1:], cwd=folder, check=False)
                if proc.returncode != 0:
                    failed.append(f"{where}: {' '.join(words)}: {proc.stderr}")
                ran[tuple(words)] = where
    return ran, failed


def test_the_rft_data_commands_of_the_docs_run_one_after_another_in_one_folder(tmp_path):
    """The README's sections, docs/*.md, the examples' headers and `rft <command> --help` write their data with
    `rft data`; a user runs them one after another in one folder, and `rft data` refuses to write other data over
    a folder's files: so each folder they name gets one data set (the same command again changes nothing), and
    every command runs. Not docs/components.md, whose sections each run in an empty folder, as it says."""
    from rft.cli import EPILOGS, build_parser

    sources = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "components.md"),
               *sorted((REPO / "examples").rglob("*.yaml"))]
    texts = [(str(p.relative_to(REPO)), p.read_text()) for p in sources]
    texts += [(f"rft {name} --help", epilog) for name, epilog in EPILOGS.items()]
    ran, failed = _run_the_data_commands(tmp_path, texts)
    assert failed == [], "\n".join(failed)
    folders = {build_parser().parse_args(list(words[1:])).src_or_out[-1] for words in ran}
    assert {"gsm8k", "d", "data/arithmetic", "data/arithmetic_slip", "shapes"} <= folders, folders


def test_the_training_commands_of_the_docs_validate_where_their_data_commands_ran(tmp_path):
    """Each `rft train` / `rft sft` / `rft dpo` command line of the README and docs/*.md whose config file is there
    (the repository's examples/, or none) loads and validates, data and model paths included, in a folder where
    the `rft data` commands of the README and of its own page ran (a newcomer reads the README, then the page), with
    the models they name (`m`, `models/tiny`): a command that leaves out a file the example's defaults do not find
    (docs/scaling.md's first block named no data.val_files, and the example's data/arithmetic/val.parquet is no
    file the README or that page writes) is caught here, not by the user. Skipped: configs of the
    user's (`cfg.yaml`, `trinity.yaml`), placeholders (`...`, `<...>`, `/path/to`, docs/multimodal.md's
    `pairs.parquet`, the user's preference rows with images) and the two-machine block of docs/scaling.md (its
    explorer and trainer share a PostgreSQL buffer); docs/components.md, whose sections each run in an empty
    folder, as it says."""
    import contextlib
    import re
    import shlex

    from cli_helpers import rft_here

    from rft.cli import _is_staged, _is_trinity, build_parser
    from rft.trainer import configure
    from rft.trainer.stages import load_stages

    placeholders = ("...", "<", "/path/to", "pairs.parquet", "trinity_explore_train/")
    readme = REPO / "README.md"
    checked, wrong = 0, []
    for path in [readme, *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "components.md")]:
        text = path.read_text().replace("\\\n", " ")
        lines = re.findall(r"\brft (?:train|sft|dpo) [^`#&|\n]*", text)
        if not lines:
            continue
        folder = tmp_path / path.stem
        folder.mkdir()
        _, failed = _run_the_data_commands(folder, [(str(p.relative_to(REPO)), p.read_text())
                                                    for p in dict.fromkeys([readme, path])])
        assert failed == [], "\n".join(failed)
        for model in ("m", "models/tiny"):
            rft_here("init-model", "--preset", "tiny", model, cwd=folder)
        for made in re.findall(r"\brft init-model (--(?:family|preset) [^`#&|\n]*)", text):  # the page's models
            words = shlex.split(made)
            try:
                out = build_parser().parse_args(["init-model", *words]).out
            except SystemExit:  # prose: `rft init-model --preset tiny-rm` names a preset
                continue
            if not (folder / out).exists() and not any(p in made for p in placeholders):
                rft_here("init-model", *words, cwd=folder)
        for line in lines:
            words = shlex.split(line)
            if "--help" in words or any(p in w for w in words for p in placeholders):
                continue
            try:
                args = build_parser().parse_args(words[1:])
            except SystemExit:  # prose: `rft train reads it`
                continue
            config, overrides = args.config, list(args.overrides)
            if config and "=" in config:
                config, overrides = None, [config, *overrides]
            if config and not (folder / config).is_file():
                continue  # the user's own file (cfg.yaml, runs/demo/config.yaml after make demo)
            with contextlib.chdir(folder):
                try:
                    if args.command != "train":
                        loader = {"sft": configure.load_sft_config,
                                  "rm": configure.load_rm_config}.get(args.command, configure.load_dpo_config)
                        loader(config, overrides)
                    elif _is_trinity(config):
                        configure.load_trinity(config, overrides)
                    elif _is_staged(config):
                        load_stages(config, overrides)
                    else:
                        configure.load_config(config, overrides)
                except Exception as e:  # every refusal is the finding
                    wrong.append(f"{path.relative_to(REPO)}: `{line.strip()}`: {e}")
            checked += 1
    assert wrong == [], "\n".join(wrong)
    # docs/overview.md: 1, docs/scaling.md: 1, docs/multimodal.md: 1; the README's quick start writes its configs with
    # `rft example` in a folder of its own, and test_readme runs it whole (every command, what it leaves)
    assert checked >= 3, checked


def _doc_texts() -> list[tuple[str, str]]:
    """What a user reads for command lines: README.md, docs/*.md, the example configs (their headers) and the
    `rft <command> --help` epilogs, as (where, text)."""
    from rft.cli import EPILOGS

    sources = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").rglob("*.yaml"))]
    return [*((str(p.relative_to(REPO)), p.read_text()) for p in sources),
            *((f"rft {name} --help", epilog) for name, epilog in EPILOGS.items())]


def _flags_of(parser) -> set[str]:
    """The options of an argparse parser and of its subcommands' parsers (`rft config show`)."""
    import argparse

    flags = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _flags_of(sub)
    return flags


def test_every_flag_the_docs_give_an_rft_command_is_one_it_takes():
    """`rft <command> ... --flag` in the README, docs/*.md, the examples' headers and the --help epilogs: each flag
    is an option of that command (of `rft component NAME` and `rft config show NAME`: an input or output of that
    component, or the command's own switches), so a command pasted from the docs is not refused for a flag that was
    renamed or never existed. Prose (`rft trains ...`) and placeholders (`--<input>`) are not command lines."""
    import argparse
    import re

    from rft.cli import build_parser
    from rft.components import components

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    table = components()
    component_switches = {"--help", "-h", "--emit-yaml", "--show-config", "--emit-deepspeed-config"}
    wrong = []
    for where, text in _doc_texts():
        for line in re.findall(r"\brft [a-z][\w-]*[^`#&|\n]*", text.replace("\\\n", " ")):
            words = line.split()
            if words[1] not in commands:
                continue  # prose: `rft trains ...`
            allowed = _flags_of(commands[words[1]])
            named = [w for w in words[2:4] if w in table]
            if words[1] == "component" or (words[1] == "config" and named):
                if not named:
                    continue  # `rft component NAME ...`
                comp = table[named[0]]
                allowed |= component_switches | {f"--{io.name}" for io in (*comp.inputs, *comp.outputs)}
            for word in words[2:]:
                flag = word.split("=", 1)[0].rstrip(".,:;)'\"")
                if re.fullmatch(r"--[A-Za-z][\w-]*", flag) and flag not in allowed:
                    wrong.append(f"{where}: {flag} in `{line.strip()}`")
    assert wrong == [], "\n".join(wrong)


def test_every_example_file_the_docs_name_exists():
    """`examples/...` paths in the README, docs/*.md, the examples and the --help epilogs name files and folders of
    the repository's examples/ (or verl's, where the text says so), so a user who opens or runs one finds it."""
    import re

    verls = {"examples/data_preprocess/geo3k.py", "examples/data_preprocess/gsm8k.py", "examples/sft/gsm8k",
             "examples/grpo_trainer/run_qwen2_5_vl-7b.sh"}  # paths in verl's repository, named as verl's
    missing = []
    for where, text in _doc_texts():
        for path in sorted(set(re.findall(r"(?<![\w/.-])examples/[\w./-]*[\w/]", text))):
            if path not in verls and "NAME" not in path and not (REPO / path).exists():
                missing.append(f"{where}: {path}")
    assert missing == [], "\n".join(missing)


def test_every_config_key_the_docs_set_is_a_key_of_rft():
    """A key the README or docs/*.md sets in inline code (`section.key=value`, `section.key: value`) whose section is
    one of rft's (RL, SFT, DPO, generation, evaluation configs) is a key of one of them, so a user who copies the
    setting is not refused (`optim.optimizer: adamw_torch` was the RL actor's key without its prefix, and no key of
    `rft sft`). Keys of Trinity-RFT's dialect, said as such, are listed."""
    import re

    from rft.config.schema import RFTConfig
    from rft.config.sft_schema import SFTConfig
    from rft.config.validate import walk
    from rft.trainer.configure import DPOConfig, EvalConfig, GenerationConfig

    keys = {key for schema in (RFTConfig, SFTConfig, DPOConfig, GenerationConfig, EvalConfig)
            for key, _, _ in walk(schema())}
    sections = {key.split(".")[0] for key in keys}
    trinity = {"algorithm.repeat_times"}  # README: a refused value named by the Trinity key that set it
    wrong = []
    for where, text in _doc_texts():
        if where.startswith("examples/"):
            continue
        for code in re.findall(r"`([^`\n]+)`", text):
            for key in re.findall(r"(?<![\w./$+-])([a-z_]+(?:\.[A-Za-z_]\w*)+)\s*(?:=|: )", code):
                if key.split(".")[0] not in sections or key in trinity:
                    continue
                if key not in keys and not any(key.startswith(k + ".") for k in keys):  # a mapping's own keys
                    wrong.append(f"{where}: {key} in `{code}`")
    assert wrong == [], "\n".join(wrong)
