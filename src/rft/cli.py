"""`rft` command line: init-model, data, example, train, distill, sft, dpo, rm, demo, generate, eval, merge, studio, serve,
component, config.

`main` is the one error boundary: an expected failure (`rft.errors.RftError`, an operating-system error such as a
full disk or a folder without write permission, Ctrl-C / SIGTERM) ends with one line `rft: error: ...` (or
`rft: stopped ...`) and a non-zero exit; anything else is reported as a bug in one line. `--debug` (anywhere on the
command line) or RFT_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys


def _setup_env() -> None:
    # Local folders only: never reach for the Hugging Face hub at run time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("transformers", "httpx", "httpx2", "huggingface_hub", "torch.distributed"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if os.environ.get("RANK", "0") != "0":  # a launched process other than rank 0: its config notes are rank 0's
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda record: not record.getMessage().startswith("rft: note:"))


def cmd_init_model(args) -> int:
    """`init_model_into` under an flock on OUT (`fsutil.sole_writer`): a second rft init-model into the same folder
    while the first runs is refused in one line (the last to end replaced the first one's model)."""
    from rft.fsutil import sole_writer

    with sole_writer(args.out, "rft init-model"):
        return init_model_into(args)


def init_model_into(args) -> int:
    from rft.errors import RftError
    from rft.models.load import _quiet_transformers
    from rft.models.tiny import REWARD_PRESETS, init_model, parameter_count
    from rft.models.vision_families import VISION_FAMILIES

    _quiet_transformers()  # its one line, not transformers' bars for writing and loading back a 1M-parameter model
    if args.family is None and args.tokenizer != "chatml":
        raise RftError("rft init-model: --tokenizer applies to --family models; the presets have rft's own")
    if args.family is not None and args.preset is not None:
        raise RftError("rft init-model: give --preset or --family, not both")
    if args.family in VISION_FAMILIES:
        from transformers import AutoModelForImageTextToText

        from rft.models.vision_families import init_vision_model

        if args.tokenizer != "chatml":
            raise RftError("rft init-model: the vision-language families have rft's tokenizer and their processor's "
                           "image tokens; --tokenizer applies to the text families")
        path = init_vision_model(args.family, args.out, seed=args.seed, overwrite=args.overwrite)
        n = parameter_count(AutoModelForImageTextToText.from_pretrained(path))
        print(f"wrote {args.family} vision-language model and processor ({n:,} parameters) to {path}")
        return 0
    if args.family is not None:
        from rft.models.families import init_family_model

        path = init_family_model(args.family, args.out, tokenizer=args.tokenizer, seed=args.seed,
                                 overwrite=args.overwrite)
        what = f"{args.family} model ({args.tokenizer} tokenizer"
    else:
        preset = args.preset or "tiny"
        path = init_model(preset, args.out, seed=args.seed, overwrite=args.overwrite)
        what = f"{preset} model ("
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    auto = AutoModelForSequenceClassification if args.preset in REWARD_PRESETS else AutoModelForCausalLM
    n = parameter_count(auto.from_pretrained(path))
    print(f"wrote {what}{', ' if what.endswith('tokenizer') else ''}{n:,} parameters) to {path}")
    return 0


SYNTHETIC = ("arithmetic", "calculator", "shapes")
TASK_OPTIONS = {
    "n_train": SYNTHETIC, "n_val": SYNTHETIC, "seed": SYNTHETIC,
    "max_digits": ("arithmetic",), "ops": ("arithmetic",), "carry_slip": ("arithmetic",), "preferences": ("arithmetic",),
    "rejected": ("arithmetic",),
    "tool_share": ("calculator",), "copy_rows": ("calculator",),
    "max_count": ("shapes",), "slip": ("shapes",),
}
"""`rft data`'s options (their defaults None: the writer's own default) and the tasks each applies to: one given
to another task is refused, not ignored."""


def check_data_args(args) -> None:
    """`rft data`'s refusals before anything is written: an option of another task, a split of no rows (rft train
    refuses an empty data file), an OUT that is a file, a SRC that is a file (of the folder SRC should be)."""
    from pathlib import Path

    from rft.errors import RftError

    for dest, tasks in TASK_OPTIONS.items():
        if getattr(args, dest) is not None and args.task not in tasks:
            raise RftError(f"rft data {args.task}: --{dest.replace('_', '-')} applies to {' and '.join(tasks)} only; "
                           f"leave it out (see rft data --help)")
    if args.task in ("arithmetic", "calculator", "shapes"):
        for flag, n in (("--n-train", args.n_train), ("--n-val", args.n_val)):
            if n is not None and n < 1:
                raise RftError(f"rft data {args.task}: {flag} {n}: a split needs at least 1 row (rft train refuses an "
                               "empty data file)")
    out = Path(args.out)
    for path in (out, *out.parents):  # the innermost that exists must be a folder (a raw "[Errno 17]" before)
        if path.exists():
            if not path.is_dir():
                what = f"OUT {args.out!r}" if path == out else f"{str(path)!r} (on OUT's path {args.out!r})"
                raise RftError(f"rft data {args.task}: {what} is a file; OUT is the folder to write the task's files "
                               "into: name a folder")
            break
    if args.src is not None and Path(args.src).is_file():  # its file named where its folder goes
        holds = {"gsm8k": "train.jsonl and test.jsonl",
                 "geometry3k": "data/<split>-*.parquet (or <split>.parquet / <split>.jsonl)",
                 "alfworld": "json_2.1.1 (ALFWorld's data folder)"}[args.task]
        likely = Path(args.src).parent
        if args.task == "geometry3k" and likely.name == "data":  # a hub shard: data/train-00000-of-00001.parquet
            likely = likely.parent
        raise RftError(f"rft data {args.task}: SRC {args.src!r} is a file; SRC is the folder holding {holds}: "
                       f"{str(likely)!r} probably (rft data {args.task} {likely} {args.out})")


def write_task_data(args, out) -> dict:
    """Write the task's files into the folder `out`; returns their paths by split."""
    if args.task in ("arithmetic", "calculator", "shapes"):  # synthetic tasks: written, their options' ranges checked
        from rft.errors import RftError
        from rft.tasks import write_arithmetic, write_calculator
        from rft.tasks.shapes import write_shapes

        write = {"arithmetic": write_arithmetic, "calculator": write_calculator, "shapes": write_shapes}[args.task]
        options = {dest: getattr(args, dest) for dest, tasks in TASK_OPTIONS.items()
                   if args.task in tasks and getattr(args, dest) is not None}  # the rest: the writer's defaults
        try:
            return write(out, **options)
        except ValueError as e:
            raise RftError(f"rft data {args.task}: {e}") from None
    from rft.tasks import convert_gsm8k  # a local copy of a dataset, converted
    from rft.tasks.alfworld import convert_alfworld
    from rft.tasks.geometry3k import convert_geometry3k

    convert = {"gsm8k": convert_gsm8k, "geometry3k": convert_geometry3k, "alfworld": convert_alfworld}
    return convert[args.task](args.src, out)


def cmd_data(args) -> int:
    """The task's files are written into a staging folder inside OUT (those a killed `rft data` left are removed
    first: `clean_stale_staging`), then compared with what OUT holds: files of the same bytes are left as they are
    (the same task and options write the same bytes), so running the command again changes nothing; files of other
    bytes are replaced only with --overwrite (a run may have trained on them); the rest is renamed into OUT, one
    file at a time."""
    import os
    from pathlib import Path

    from rft.errors import RftError
    from rft.fsutil import clean_stale_staging, differing_files, staging_in

    check_data_args(args)
    out = Path(args.out)
    for line in clean_stale_staging(out):
        print(f"rft data: an earlier rft data was interrupted: {line}")
    with staging_in(out) as staging:
        try:
            staged = write_task_data(args, staging)
        except OSError as e:  # a full disk: name the file in OUT, not its staging copy
            if e.errno is None or e.filename is None or Path(e.filename).parent != staging:
                raise
            raise OSError(e.errno, e.strerror, str(out / Path(e.filename).name)) from e
        names = [path.name for path in staged.values()]
        new, differ = differing_files(staging, out, names)
        if differ and not args.overwrite:
            raise RftError(f"rft data {args.task}: {args.out} already holds {', '.join(differ)} with other data than "
                           "these options write; pass --overwrite to write over them, or choose another folder")
        if not new and not differ:
            print(f"rft data {args.task}: {args.out} already holds {', '.join(names)}, byte for byte as these "
                  "options write them: nothing written")
            return 0
        for name in [*new, *differ]:
            os.replace(staging / name, out / name)
    paths = {split: out / path.name for split, path in staged.items()}
    for split, path in paths.items():
        print(f"{split}: {path}")
    held_out = paths.get("val") or paths.get("test")  # gsm8k keeps verl's name for its held-out split
    if "train" in paths and held_out is not None:
        print(f"for rft train: data.train_files={paths['train']} data.val_files={held_out}")
    return 0


def cmd_example(args) -> int:
    """`rft example`: the shipped example configs, one a line with what it is; `rft example NAME [DEST]`: NAME
    written into the folder DEST byte for byte (the same bytes there already: nothing written; other bytes: refused
    without --overwrite, as `rft data` does), then its header with the path it has there (a header's commands
    start `rft example NAME && rft train NAME.yaml`, which run in the current folder, a clone's or a user's)."""
    import re
    from pathlib import Path

    from rft.config.suggest import did_you_mean
    from rft.errors import RftError
    from rft.example_files import companions, header, shipped, summary
    from rft.fsutil import output_problem, write_text_atomic

    examples = shipped()
    if args.name is None:
        width = max(len(name) for name in examples)
        for name, path in examples.items():
            print(f"{name:<{width}}  {summary(path)}")
        print("rft example NAME [DEST] writes one into DEST (default: this folder)")
        return 0
    name = args.name.removeprefix("examples/").removesuffix(".yaml")
    if name not in examples:
        hint = did_you_mean(name, list(examples))
        raise RftError(f"rft example: no example is named {args.name!r}{'; ' + hint if hint else ''}; `rft example` "
                       "lists them")
    source = examples[name]
    target = Path(args.dest) / source.name
    if target.is_dir():
        raise RftError(f"rft example {name}: {str(target)!r} is a folder; name another DEST to write {source.name} "
                       "into")
    problem = output_problem(target, folder=False)  # DEST, or a folder above it, a file
    if problem is not None:
        raise RftError(f"rft example {name}: {problem}; DEST is the folder to write {source.name} into")
    text = source.read_bytes().decode("utf-8")  # its bytes as they are (read_text would translate line ends)
    if target.is_file() and target.read_bytes() == source.read_bytes():
        print(f"rft example {name}: {target} already holds it, byte for byte: nothing written")
        return 0
    if target.exists() and not args.overwrite:
        raise RftError(f"rft example {name}: {target} already exists with other contents; pass --overwrite to write "
                       "over it, or name another folder")
    write_text_atomic(target, text)
    print(f"wrote {target}{'; its header, with the path it has here:' if header(text) else ''}")
    for line in header(text):  # `rft example NAME && rft train NAME.yaml`: done, and the file is at `target`
        line = re.sub(rf"\S*rft example {re.escape(name)} && ", "", line)
        line = line.replace(f"examples/{name}{source.suffix}", str(target))
        print(re.sub(rf"(?<![\w./-]){re.escape(source.name)}", str(target), line))
    for other in companions(name, text):
        if f"rft example {other} " in "\n".join(header(text)):  # the header's commands write it already
            continue
        print(f"it reads examples/{other}{'' if other.endswith('.py') else '.yaml'}: `rft example {other} "
              f"{Path('examples', other).parent.as_posix()}` writes it there")
    return 0


def _is_staged(path: str | None) -> bool:
    from rft.config.load import read_yaml

    return path is not None and "stages" in read_yaml(path)


def _is_trinity(path: str | None) -> bool:
    from rft.config.load import read_yaml
    from rft.dialects.trinity import is_trinity

    return path is not None and is_trinity(read_yaml(path))


def cmd_train(args) -> int:
    from rft.orchestration.launch import run_rl

    # what each process of a several-process run executes again
    module_args = ["train", *([args.config] if args.config else []), *args.overrides]
    if _is_trinity(args.config):  # Trinity-RFT's dialect, translated to verl keys before anything loads
        return _train_trinity(args, module_args)
    if _is_staged(args.config):  # a multi-stage run: every stage is validated before the first model loads
        from rft.orchestration.stages import launch_stages
        from rft.trainer.stages import load_stages

        return launch_stages(load_stages(args.config, args.overrides), module_args)
    from rft.trainer.configure import load_config

    return run_rl(load_config(args.config, args.overrides), module_args)


DISTILL_OVERRIDES = ("distillation.enabled=true", "distillation.distillation_loss.use_task_rewards=false")
"""What `rft distill` adds to rft train's overrides (the command line's own come after them)."""


def cmd_distill(args) -> int:
    """`rft distill`: the RL loop with the teacher as the only signal (no task reward needed); rft train with
    the same distillation keys combines a teacher with the task reward."""
    args.overrides = [*DISTILL_OVERRIDES, *args.overrides]
    return cmd_train(args)


def _train_trinity(args, module_args: list[str]) -> int:
    from rft.config.spelling import reworded, spelling_keys
    from rft.data.io import DataError
    from rft.errors import RftError, RunComplete
    from rft.orchestration.launch import run_rl
    from rft.trainer.configure import load_trinity, trinity_run_error, trinity_said_as

    # its notes, errors and complete / nothing-to-do lines name the keys as the Trinity YAML sets them
    with spelling_keys(trinity_said_as(args.config, args.overrides)):
        kind, loaded = load_trinity(args.config, args.overrides)  # its errors name them already (in_trinity_terms)
        if kind == "stages":  # a stage's error is said where it is raised: in each process that runs the stages
            from rft.orchestration.stages import launch_stages

            return launch_stages(loaded, module_args, data_error=lambda e, stage: trinity_run_error(
                e, args.config, args.overrides, stage=stage))
        try:
            return run_rl(loaded, module_args)
        except DataError as e:  # it names rft's data keys: the Trinity keys that set them, with their values
            raise trinity_run_error(e, args.config, args.overrides) from None
        except (RftError, RunComplete) as e:
            raise reworded(e) from None


def cmd_sft(args) -> int:
    from rft.trainer.configure import load_sft_config

    cfg = load_sft_config(args.config, args.overrides)
    from rft.trainer.sft import SFTTrainer

    return _run_on_the_sft_loop("sft", args, cfg, SFTTrainer)


def _run_on_the_sft_loop(command: str, args, cfg, trainer_cls) -> int:
    """`rft sft` / `rft dpo` / `rft rm`: `trainer_cls` (the SFT trainer's loop) on one process or the launcher's
    several."""
    from rft.orchestration.launch import run_spmd
    from rft.trainer.run_folder import run_folder

    def body(dist) -> None:
        with run_folder(cfg, dist):
            trainer_cls(cfg, dist).fit()

    return run_spmd(cfg, [command, *([args.config] if args.config else []), *args.overrides], body)


def cmd_dpo(args) -> int:
    from rft.trainer.configure import load_dpo_config

    cfg = load_dpo_config(args.config, args.overrides)
    from rft.trainer.dpo import DPOTrainer

    return _run_on_the_sft_loop("dpo", args, cfg, DPOTrainer)


def cmd_rm(args) -> int:
    from rft.trainer.configure import load_rm_config

    cfg = load_rm_config(args.config, args.overrides)
    from rft.trainer.rm import RMTrainer

    return _run_on_the_sft_loop("rm", args, cfg, RMTrainer)


def cmd_demo(args) -> int:
    from rft.orchestration.demo import run_demo

    run_demo(args.output or ("runs/demo" if args.task == "arithmetic" else f"runs/demo-{args.task}"),
             seed=args.seed, task=args.task, engine=args.engine, dtype=args.dtype)
    return 0


def cmd_generate(args) -> int:
    from rft.offline.generate import run_generate
    from rft.trainer.configure import load_generation_config

    run_generate(load_generation_config(args.config, args.overrides))
    return 0


def cmd_eval(args) -> int:
    from rft.offline.score import run_eval
    from rft.trainer.configure import load_eval_config

    run_eval(load_eval_config(args.config, args.overrides))
    return 0


def cmd_merge(args) -> int:
    from rft.offline.merge import merge_checkpoint

    merge_checkpoint(args.checkpoint, args.out, args.config, overwrite=args.overwrite)
    return 0


def cmd_studio(args) -> int:
    from rft.studio.server import serve

    serve(args.host, args.port, args.runs, open_browser=args.open)
    return 0


def cmd_serve(args) -> int:
    from rft.explorer.engine_server import serve

    serve(args.model, args.name, args.port, args.max_num_seqs, args.seed, args.dtype, args.engine, args.vllm_options)
    return 0


def cmd_component(args) -> int:
    """`rft component` with no name (a name is dispatched before argparse, see main): the list of components."""
    from rft.components.run import main as component_main

    return component_main([])


def _offline_kind(path: str | None) -> str | None:
    """"rm" / "dpo" / "sft" for an `rft rm` / `rft dpo` / `rft sft` YAML (its model section is the SFT one:
    model.partial_pretrain; a DPO one has preference columns or the loss section, a reward model's its own loss
    keys), else None."""
    from rft.config.load import read_yaml

    raw = read_yaml(path) if path is not None else {}
    if "partial_pretrain" not in (raw.get("model") or {}):
        return None
    if "center_rewards_coefficient" in (raw.get("algorithm") or {}) or "margin_key" in (raw.get("data") or {}):
        return "rm"
    return "dpo" if "algorithm" in raw or "chosen_key" in (raw.get("data") or {}) else "sft"


def cmd_config(args) -> int:
    from rft.config import to_yaml
    from rft.trainer.configure import load_config

    offline = _offline_kind(args.config) if args.action == "show" else None
    if offline is not None:
        from rft.trainer.configure import load_dpo_config, load_rm_config, load_sft_config

        load = {"dpo": load_dpo_config, "rm": load_rm_config}.get(offline, load_sft_config)
        print(f"# {args.config}: an rft {offline} config")
        print(to_yaml(load(args.config, args.overrides, validate_paths=False)), end="")
    elif args.action == "show" and _is_trinity(args.config):
        from rft.trainer.configure import load_trinity

        kind, loaded = load_trinity(args.config, args.overrides, validate_paths=False)
        print(f"# {args.config}: Trinity-RFT dialect, as rft's verl keys")
        for stage in loaded if kind == "stages" else []:
            print(f"# stage {stage.name} ({stage.kind}) -> {stage.out}\n{to_yaml(stage.cfg)}", end="")
        if kind == "rl":
            print(to_yaml(loaded), end="")
        _note_missing_packages([s.cfg for s in loaded] if kind == "stages" else [loaded] if kind == "rl" else [])
    elif args.action == "show" and _is_staged(args.config):
        from rft.trainer.stages import load_stages

        stages = load_stages(args.config, args.overrides, validate_paths=False)
        for stage in stages:
            print(f"# stage {stage.name} ({stage.kind}) -> {stage.out}\n{to_yaml(stage.cfg)}", end="")
        _note_missing_packages([stage.cfg for stage in stages])
    elif args.action == "show":
        cfg = load_config(args.config, args.overrides, validate_paths=False)
        print(to_yaml(cfg), end="")
        _note_missing_packages([cfg])
    else:
        from rft.config.reference import reference_markdown

        print(reference_markdown(), end="")
    return 0


def _note_missing_packages(cfgs) -> None:
    """`rft config show` of a config with the vLLM engine where vLLM cannot start, a workflow whose environment's
    package is not installed here, an API model whose URL is not set here, or a Data-Juicer operator that cannot run
    here (no Data-Juicer environment or server, no model server for an LLM operator): the config is shown (showing needs none of them), with one note saying what `rft train` will
    refuse and how to get it (or to run without vLLM)."""
    from rft.data_processor.checks import unavailable_operators
    from rft.explorer.checks import missing_environment
    from rft.explorer.external import missing_api

    problems = set()
    for cfg in cfgs:
        if getattr(getattr(getattr(cfg, "actor_rollout_ref", None), "rollout", None), "name", None) == "vllm":
            from rft.rollout.checks import missing_vllm

            problems.add(missing_vllm())
        problems.add(missing_environment(getattr(getattr(cfg, "workflow", None), "type", None)))
        problems.add(missing_api(getattr(cfg, "external_model", None)))
        if hasattr(cfg, "data_processor"):
            problems.update(unavailable_operators(cfg))
    for problem in sorted(p for p in problems if p):
        logging.getLogger("rft").warning("rft: note: %s (`rft train` refuses this config here)", problem)


def version() -> str:
    """rft's version: the installed distribution's (pip's metadata), else the package's own `__version__` (a source
    tree on PYTHONPATH without an install)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("rft")
    except PackageNotFoundError:
        import rft

        return rft.__version__


def _keys(section: str = "") -> str:
    """The epilog's pointer to the config keys' reference (`section`: its part for the command)."""
    return (f"config keys (verl's names) go in the YAML or on the command line as section.key=value: docs/config.md"
            f"{section}\nlists them (or `rft config reference`); `rft config show CONFIG [section.key=value ...]` prints "
            "the resolved config")


EPILOGS = {
    "train": f"""\
examples, in any folder (`rft example` lists the example configs rft ships; docs/overview.md):
  rft example arithmetic_grpo                 # writes arithmetic_grpo.yaml here (the repository's examples/)
  rft init-model --preset tiny m              # or any local Hugging Face causal-LM folder
  rft data arithmetic d                       # d/train.parquet, d/val.parquet
  rft train arithmetic_grpo.yaml actor_rollout_ref.model.path=m data.train_files=d/train.parquet \\
      data.val_files=d/val.parquet trainer.total_training_steps=3 trainer.default_local_dir=out

{_keys()}.
A Trinity-RFT YAML, and a `stages:` list of SFT / DPO / RL stages, run too (docs/overview.md).""",
    "distill": """\
examples (docs/algorithms.md, on-policy distillation):
  rft distill examples/arithmetic_distill.yaml actor_rollout_ref.model.path=STUDENT \\
      distillation.teacher_model.model_path=TEACHER
  rft demo --task distill                     # the arithmetic demo's GRPO model teaches a smaller student

The student samples, the teacher scores every sampled token; the task reward is left out
(distillation.distillation_loss.use_task_rewards=false; rft train with the same keys keeps it).""",
    "sft": f"""\
examples (`rft example` lists the example configs rft ships; docs/overview.md):
  rft example gsm8k_sft                       # writes gsm8k_sft.yaml here (the repository's examples/)
  rft init-model --preset tiny m              # or any local Hugging Face causal-LM folder
  rft data gsm8k tests/data/gsm8k gsm8k       # GSM8K's first rows (in the repository; or your copy's folder)
  rft sft gsm8k_sft.yaml model.partial_pretrain=m trainer.total_training_steps=4 \\
      trainer.default_local_dir=sft

{_keys(" (its SFT part)")}.""",
    "dpo": f"""\
examples, in any folder (`rft example` lists the example configs rft ships; arithmetic_dpo.yaml's header):
  rft example arithmetic_dpo                  # writes arithmetic_dpo.yaml here (the repository's examples/)
  rft init-model --preset tiny m              # better: a model that makes the mistakes, e.g. runs/demo/sft/model
  rft data arithmetic data/arithmetic_slip --carry-slip 0.75 --preferences  # with preference_*.parquet
  rft dpo arithmetic_dpo.yaml model.partial_pretrain=m trainer.default_local_dir=out

{_keys(" (its DPO part)")}.
The preference losses: docs/algorithms.md.""",
    "rm": f"""\
examples, in any folder (`rft example` lists the example configs rft ships; arithmetic_rm.yaml's header):
  rft example arithmetic_rm                   # writes arithmetic_rm.yaml here (the repository's examples/)
  rft init-model --preset tiny m              # better: a model that knows the task, e.g. runs/demo/sft/model
  rft data arithmetic data/arithmetic --preferences   # with preference_*.parquet
  rft rm arithmetic_rm.yaml model.partial_pretrain=m trainer.default_local_dir=out

{_keys(" (its reward-model part)")}.
out/model is a reward model: rft train's reward_model.model.path loads it; the loss: docs/algorithms.md.""",
    "demo": """\
examples:
  rft demo                                    # SFT then GRPO on two-digit additions, in runs/demo
  rft demo --task tools --seed 1 --output runs/tools

what it runs and prints: docs/testing.md; the tools task: docs/workflows.md; the
vision task: docs/multimodal.md""",
    "data": """\
examples, from the repository's root:
  rft data arithmetic d --n-train 2000 --n-val 200    # d/train.parquet, d/val.parquet
  rft data gsm8k tests/data/gsm8k gsm8k               # gsm8k/train.parquet, gsm8k/test.parquet
  rft data alfworld tests/data/alfworld alfworld     # alfworld/{train,test,test_unseen}.jsonl (ALFWorld's layout)

the rows they hold (verl's format) and how rft train reads them: docs/data.md""",
}
"""The end of `rft <command> --help`: command lines that run as shown (tests/test_cli.py runs them) and where the
keys are described."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rft", description="Reinforcement fine-tuning for LLMs.")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    from rft.models.families import FAMILIES, TOKENIZER_STYLES
    from rft.models.vision_families import VISION_FAMILIES

    q = sub.add_parser("init-model", help="write an offline tiny Qwen2-architecture model and tokenizer (or a "
                                          "small model of another family with --family)")
    q.add_argument("out")
    q.add_argument("--preset", default=None, choices=("tiny", "small", "tiny-rm"),
                   help="tiny (default) / small: causal LMs; tiny-rm: a one-label reward model on tiny's backbone")
    q.add_argument("--family", default=None, choices=sorted([*FAMILIES, *VISION_FAMILIES]),
                   help="a random two-layer model of this transformers family instead (the model-family tests'); "
                        f"vision-language ones ({', '.join(sorted(VISION_FAMILIES))}) with their processor")
    q.add_argument("--tokenizer", default="chatml", choices=TOKENIZER_STYLES,
                   help="with --family: chatml (rft's), no-pad (Llama 3's way: no pad token), base (no chat "
                        "template, no pad token, BOS added)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--overwrite", action="store_true", help="replace OUT when it is not empty (refused without)")
    q.set_defaults(fn=cmd_init_model)

    q = sub.add_parser("data", help="write task data as parquet in verl's row format", epilog=EPILOGS["data"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("task", choices=("alfworld", "arithmetic", "calculator", "geometry3k", "gsm8k", "shapes"),
                   help="gsm8k SRC OUT: GSM8K's train.jsonl / test.jsonl to OUT/train.parquet / OUT/test.parquet "
                        "(verl's names); geometry3k SRC OUT: a local copy of hiyouga/geometry3k (data/<split>-*"
                        ".parquet) with its diagrams, the same names; alfworld SRC OUT: ALFWorld's games (SRC: the "
                        "data folder alfworld-download fills) as rows of their game files, OUT/train.jsonl, "
                        "test.jsonl (valid_seen), test_unseen.jsonl; the synthetic tasks write OUT/train.parquet / "
                        "OUT/val.parquet")
    q.add_argument("src_or_out", nargs="*", metavar="[SRC] OUT")  # "*": a wrong count is rft's own error line
    q.add_argument("--overwrite", action="store_true",
                   help="write over the files of the same names OUT holds with other bytes (refused without; the "
                        "same bytes, and other files, are left)")
    # default None: the task's writer's own default (rft.tasks), and an option given to a task it does not apply
    # to is refused (TASK_OPTIONS)
    q.add_argument("--seed", type=int, help="the synthetic tasks: the rows' seed (default 0)")
    q.add_argument("--n-train", type=int, help="the synthetic tasks: training rows (at least 1; default 2000)")
    q.add_argument("--n-val", type=int, help="the synthetic tasks: held-out rows (at least 1; default 200)")
    q.add_argument("--max-digits", type=int, help="arithmetic: digits of each operand (default 2)")
    q.add_argument("--ops", help="arithmetic: the operators, e.g. +- (default +)")
    q.add_argument("--carry-slip", type=float,
                   help="arithmetic: share of carrying additions whose SFT demonstration forgets the carry (default 0)")
    q.add_argument("--preferences", action="store_true", default=None,
                   help="arithmetic: also write preference_{train,val}.parquet, DPO pairs of the additions (chosen: "
                        "the answer; rejected: the units carry wrong, forgotten or added)")
    q.add_argument("--rejected", choices=("carry", "mistakes"),
                   help="arithmetic with --preferences: the rejected answers, the units carry wrong (carry, the "
                        "default) or a policy's kinds of mistakes (mistakes: carry, units digit, off by one, "
                        "hundreds, wrong operation), the pairs a reward model for GRPO needs")
    q.add_argument("--tool-share", type=float,
                   help="calculator: share of SFT demonstrations that call the calculator tool (default 0.45)")
    q.add_argument("--max-count", type=int, help="shapes: the most shapes a picture holds (1..9; default 4)")
    q.add_argument("--slip", type=float,
                   help="shapes: share of pictures of 3+ shapes whose SFT demonstration misses one (default 0)")
    q.add_argument("--copy-rows", type=int,
                   help="calculator: rows of copy.parquet, the warm-up in which the assistant repeats the user's "
                        "number (0: none; default 4000)")
    q.set_defaults(fn=cmd_data)

    q = sub.add_parser("example", help="list the example configs, or write one into a folder (rft example NAME "
                       "[DEST]): they ship with rft, so they are there outside the repository too")
    q.add_argument("name", nargs="?", metavar="NAME", help="the example (`rft example` lists them)")
    q.add_argument("dest", nargs="?", default=".", metavar="DEST",
                   help="the folder to write NAME's file into (made where missing; default: this folder)")
    q.add_argument("--overwrite", action="store_true",
                   help="write over a file of that name DEST holds with other contents (refused without)")
    q.set_defaults(fn=cmd_example)

    q = sub.add_parser("train", help="RL training from a verl-style YAML plus dotted overrides",
                       epilog=EPILOGS["train"], formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("config", nargs="?", help="YAML file (optional)")
    q.add_argument("overrides", nargs="*", help="dotted.key=value")
    q.set_defaults(fn=cmd_train)

    q = sub.add_parser("distill", help="on-policy distillation: rft train with a teacher's per-token scores as the "
                                       "only signal", epilog=EPILOGS["distill"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("config", nargs="?", help="YAML file (optional)")
    q.add_argument("overrides", nargs="*", help="dotted.key=value")
    q.set_defaults(fn=cmd_distill)

    q = sub.add_parser("sft", help="supervised fine-tuning from a verl sft_trainer-style YAML plus overrides",
                       epilog=EPILOGS["sft"], formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("config", nargs="?", help="YAML file (optional)")
    q.add_argument("overrides", nargs="*", help="dotted.key=value")
    q.set_defaults(fn=cmd_sft)

    q = sub.add_parser("dpo", help="direct preference optimisation (DPO, IPO, ...) from a YAML plus dotted overrides",
                       epilog=EPILOGS["dpo"], formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("config", nargs="?", help="YAML file (optional)")
    q.add_argument("overrides", nargs="*", help="dotted.key=value")
    q.set_defaults(fn=cmd_dpo)

    q = sub.add_parser("rm", help="reward-model training (Bradley-Terry on preference pairs) from a YAML plus dotted "
                                  "overrides", epilog=EPILOGS["rm"], formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("config", nargs="?", help="YAML file (optional)")
    q.add_argument("overrides", nargs="*", help="dotted.key=value")
    q.set_defaults(fn=cmd_rm)

    q = sub.add_parser("demo", help="SFT then GRPO on the embedded tiny model and a task of its own, on CPU; prints "
                                    "accuracy per stage", epilog=EPILOGS["demo"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--task", choices=("arithmetic", "tools", "vision", "distill"), default="arithmetic",
                   help="arithmetic: two-digit additions; tools: products through a calculator tool (multi-turn); "
                        "vision: counting shapes in pictures with a tiny vision-language model; distill: the "
                        "arithmetic demo's GRPO model teaches a smaller student on-policy")
    q.add_argument("--output", help="run folder (default runs/demo, or runs/demo-<task>)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                   help="the GRPO stage's rollout engine (vllm: `make vllm`, docs/rollout.md)")
    q.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="what the GRPO stage computes in (its rollout.dtype and the actor's mixed_precision."
                        "param_dtype; on a CPU bf16 only where it is faster: docs/performance.md); the recorded "
                        "figures are float32's")
    q.set_defaults(fn=cmd_demo)

    q = sub.add_parser("generate", help="n responses per prompt of a parquet with a model folder (verl's "
                       "generation.yaml keys: data.path, data.n_samples, data.output_path, model.path, rollout.*), "
                       "written as a parquet rft eval reads")
    q.add_argument("config", nargs="?", help="YAML file (optional)")
    q.add_argument("overrides", nargs="*", help="dotted.key=value")
    q.set_defaults(fn=cmd_generate)

    q = sub.add_parser("eval", help="score a parquet of responses (verl's evaluation.yaml keys: data.path, "
                       "data.response_key, ..., custom_reward_function.*): mean@n, best@n, pass@k per data source")
    q.add_argument("config", nargs="?", help="YAML file (optional)")
    q.add_argument("overrides", nargs="*", help="dotted.key=value")
    q.set_defaults(fn=cmd_eval)

    q = sub.add_parser("merge", help="a checkpoint (one-process or DCP, LoRA or full) to a Hugging Face folder; the "
                       "model is rebuilt from the run's config.yaml beside checkpoints/ (or --config)")
    q.add_argument("checkpoint", help="a global_step_N folder, or a run / checkpoints folder (its latest)")
    q.add_argument("out", help="the Hugging Face folder to write (atomically)")
    q.add_argument("--config", help="the run's config.yaml (default: <run>/config.yaml beside checkpoints/)")
    q.add_argument("--overwrite", action="store_true",
                   help="replace an OUT that holds a model merged from other inputs, or one no rft merge wrote "
                        "(refused without; the same inputs again: nothing written)")
    q.set_defaults(fn=cmd_merge)

    q = sub.add_parser("studio", help="web app on this machine: a config generator (forms from the schema, "
                       "validated as rft train validates) and a live view of run folders")
    q.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only; "
                   "the studio writes files and starts runs, so serve it beyond this machine only on a trusted network)")
    q.add_argument("--port", type=int, default=8501, help="port (0: any free one; the URL is printed)")
    q.add_argument("--runs", default="runs", help="the folder whose run folders the run view lists (default runs/)")
    q.add_argument("--open", action="store_true", help="open the page in a browser")
    q.set_defaults(fn=cmd_studio)

    q = sub.add_parser("serve", help="the hf or vLLM engine in a process of its own on 127.0.0.1: OpenAI-compatible "
                       "completions with token ids, log-probs and weight versions, weights updated in place "
                       "(docs/rollout.md, Engine servers)")
    q.add_argument("model", help="the model folder (Hugging Face format)")
    q.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0, the default: any free one; printed)")
    q.add_argument("--name", default=None, help="the model name it serves (default: the folder's name)")
    q.add_argument("--max-num-seqs", type=int, default=16,
                   help="rows in flight at once across all requests (verl's rollout.max_num_seqs)")
    q.add_argument("--seed", type=int, default=0, help="seeds the sampling generator")
    q.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="what generation computes in")
    q.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                   help="the engine: hf, or vllm (its request-level API; a weight update waits for the requests "
                   "in flight)")
    q.add_argument("--vllm-options", default=None, metavar="JSON",
                   help="vllm: the engine's arguments as a JSON object of rft.rollout.vllm_engine.VLLMOptions fields "
                   "(max_model_len, kv_cache_tokens, enable_prefix_caching, engine_kwargs, ...; a run passes its "
                   "rollout keys); default: the model's positions, a KV cache of 64 of them")
    q.set_defaults(fn=cmd_serve)

    q = sub.add_parser("component", help="run a component interface (rft_trainer, verl_trainer_component, "
                       "group_relative_policy_optimization) with its own inputs: rft component NAME --help")
    q.add_argument("name", nargs="?")
    q.set_defaults(fn=cmd_component)

    q = sub.add_parser("config", help="show the resolved config (a YAML file, or a component and its inputs: "
                       "rft config show NAME --<input> VALUE ...), or the reference of every key")
    q.add_argument("action", choices=("show", "reference"))
    q.add_argument("config", nargs="?")
    q.add_argument("overrides", nargs="*")
    q.set_defaults(fn=cmd_config)
    return p


def _split_positionals(args) -> None:
    """`rft train a=b` (no YAML) and `rft data gsm8k|geometry3k|alfworld SRC OUT` / `rft data arithmetic|calculator|shapes OUT`."""
    if getattr(args, "config", None) and "=" in args.config and not args.config.endswith((".yaml", ".yml")):
        args.overrides = [args.config, *args.overrides]
        args.config = None
    if args.command == "data":
        from rft.errors import RftError

        items = args.src_or_out
        synthetic = args.task in ("arithmetic", "calculator", "shapes")  # written, not converted from a SRC
        if len(items) != (1 if synthetic else 2):
            takes, example = (("OUT (the folder to write)", "d") if synthetic else
                              ("SRC OUT (the local copy to convert, the folder to write)", f"SRC {args.task}"))
            got = f"{len(items)} ({' '.join(items)})" if items else "none"
            raise RftError(f"rft data {args.task} takes {takes}, got {got}: e.g. rft data {args.task} {example} "
                           "(rft data --help)")
        args.src, args.out = (None, items[0]) if synthetic else items


def _component_argv(argv: list[str]) -> list[str] | None:
    """The `rft component` arguments of `rft component NAME ...` and `rft config show NAME ...` (a component's
    inputs are its own options, so argparse's subparsers do not see them)."""
    if argv[:1] == ["component"]:
        return argv[1:]
    if argv[:2] == ["config", "show"] and len(argv) > 2:
        from rft.components import components

        if argv[2] in components():
            return [argv[2], "--show-config", *argv[3:]]
    return None


def _dispatch(argv: list[str]) -> int:
    component_argv = _component_argv(argv)
    if component_argv is not None:
        from rft.components.run import main as component_main

        return component_main(component_argv)
    parser = build_parser()
    _refuse_unknown_command(parser, argv)
    args = parser.parse_args(argv)
    _split_positionals(args)
    _require_something_to_run(args)
    _require_config_here(args)
    try:
        return args.fn(args)
    except BaseException as e:
        if args.command in RUNLESS and getattr(e, "resume_note", None) is None:
            from rft.errors import STARTS_AGAIN

            with contextlib.suppress(AttributeError):  # an exception type without a __dict__ keeps RESUME_EITHER
                e.resume_note = STARTS_AGAIN
        raise


RUNLESS = ("init-model", "data", "example", "generate", "eval", "merge", "serve")
"""The commands that hold no run folder and write no checkpoint: a stop or a full disk ends their line with
`errors.STARTS_AGAIN`, not with a run's resume."""


def _refuse_unknown_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """`rft trian ...`: one line with the nearest command (argparse's own answer is its usage and an `invalid
    choice` line listing every command)."""
    from rft.config.suggest import did_you_mean
    from rft.errors import RftError

    if not argv or argv[0].startswith("-"):  # an option (--help, --version): argparse's
        return
    commands = next(list(a.choices) for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if argv[0] not in commands:
        hint = did_you_mean(argv[0], commands)
        raise RftError(f"unknown command {argv[0]!r}{f' ({hint})' if hint else ''}; the commands are "
                       f"{', '.join(commands)} (rft --help says what each does)")


EXAMPLE_CONFIGS = {"train": ("gsm8k_grpo_small", "actor_rollout_ref.model.path=MODEL"),
                   "sft": ("gsm8k_sft", "model.partial_pretrain=MODEL"),
                   "dpo": ("arithmetic_dpo", "model.partial_pretrain=MODEL"),
                   "rm": ("arithmetic_rm", "model.partial_pretrain=MODEL")}
"""A runnable first command line per training command, for `rft train` typed alone (the README's first screen):
the shipped example (`rft example NAME` writes it) and the override it needs."""


def _require_something_to_run(args) -> None:
    """`rft train` / `sft` / `dpo` with neither a YAML nor an override: say what the command takes, with an example
    (a config of defaults alone would fail on its first required key, which tells a newcomer little)."""
    from rft.config.errors import ConfigError

    if args.command in EXAMPLE_CONFIGS and not args.config and not args.overrides:
        name, override = EXAMPLE_CONFIGS[args.command]
        raise ConfigError(f"rft {args.command} takes a YAML config and/or section.key=value overrides, e.g. "
                          f"rft {args.command} {name}.yaml {override} after `rft example {name}` writes it here "
                          f"(rft {args.command} --help)")


def _require_config_here(args) -> None:
    """A config `examples/NAME.yaml` (the docs' command lines) that is not in this folder,
    as outside the repository: say that `rft example NAME` writes it, not only that it does not exist."""
    from rft.config.errors import ConfigError
    from rft.example_files import missing_example_problem

    problem = missing_example_problem(args.config) if getattr(args, "config", None) else None
    if problem is not None:
        raise ConfigError(problem)


def report(error: BaseException, debug: bool) -> int:
    """Print `error` as rft's one line, or a line per problem it lists (after its traceback with `debug`); return
    the exit status."""
    import traceback

    from rft.distributed import first_to_say
    from rft.errors import exit_code_of, failure_lines, say_error

    if debug:
        traceback.print_exception(error)
    say_error([line for line in failure_lines(error) if first_to_say(line)])
    if isinstance(error, KeyboardInterrupt):  # a stop: 128 + the signal's number
        from rft.interrupts import exit_code

        return exit_code(getattr(error, "signal_name", "SIGINT"))
    return exit_code_of(error)


def main(argv: list[str] | None = None) -> int:
    from rft.console import guarded_console
    from rft.errors import RunComplete, debug_requested
    from rft.interrupts import ending, handled

    with guarded_console():  # a closed stdout pipe (`| head`, quitting `less`) does not end the run
        _setup_env()
        argv = sys.argv[1:] if argv is None else list(argv)
        debug = "--debug" in argv or debug_requested()
        argv = [a for a in argv if a != "--debug"]
        try:
            with handled():
                try:
                    return _dispatch(argv)
                except (SystemExit, RunComplete):
                    raise
                except BaseException as e:  # the one error boundary: one line, the traceback only with --debug
                    ending()  # printed whole, whatever signal comes now
                    return report(e, debug)
        except SystemExit:
            raise
        except RunComplete as e:  # said before any model loads; nothing trained or written again
            print(e, flush=True)
            return 0
        except BaseException as e:  # a signal's stop raised while the handlers were put back
            return report(e, debug)


if __name__ == "__main__":
    sys.exit(main())
