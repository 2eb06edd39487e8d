"""`rft component NAME --<input> VALUE ... --<output> PATH`: parse, install overrides, plan, validate, train, write
the outputs. Every refusal is raised before anything loads."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rft.components import components, get_component
from rft.components.spec import Component, ComponentError, Plan
from rft.config.spelling import spelling

# each component's output that holds the run folder (trainer.default_local_dir); none: a temporary folder
WORK_OUTPUT = {"rft_trainer": "intermediate_folder", "group_relative_policy_optimization": "output_model_path"}
REQUIRED_OUTPUTS = {"rft_trainer": ("model_output",), "verl_trainer_component": ("model_output",)}
# A component run with several processes on this node: the first process plans, starts the others (the same command)
# and writes the outputs once they finished; this variable gives them its run folder.
WORK_ENV = "RFT_COMPONENT_WORK"


def refusal_line(comp: Component, name: str, reason: str) -> str:
    """One line naming the refused input `name` and why (`reason`: "=value ..." or text)."""
    sep = "" if reason[:1] in ("=", ":") else " "
    return f"{comp.name}: --{name}{sep}{reason}"


def _within(inner: str | Path, outer: str | Path) -> bool:
    """`inner` is the folder `outer` or a folder inside it."""
    inner, outer = Path(inner).expanduser().resolve(), Path(outer).expanduser().resolve()
    return inner == outer or outer in inner.parents


def plan_for(comp: Component, values: dict[str, Any], outputs: dict[str, str | None],
             for_run: bool = True) -> Plan:
    """The plan of the inputs, with every refusal collected (`for_run` False: --show-config, no file checks)."""
    plan = comp.plan(values, outputs, check_paths=for_run)
    if for_run:
        from rft.components.outputs import output_problem

        for name in REQUIRED_OUTPUTS.get(comp.name, ()):
            if not outputs.get(name):
                plan.refuse(name, "is required: where the trained model is written")
        # what a model output, which replaces its folder whole, must not hold: the model input, the run folder
        held = [(f"the model folder of --{n}", plan.overrides["actor_rollout_ref.model.path"])
                for n in plan.sources.get("actor_rollout_ref.model.path", [])[:1]]
        held += [(f"--{n} ({outputs[n]})", outputs[n]) for n in (WORK_OUTPUT.get(comp.name),) if outputs.get(n)]
        for name, path in outputs.items():
            work = name == WORK_OUTPUT.get(comp.name)
            problem = output_problem(name, path, run_folder=work) if path else None
            for what, folder in held if problem is None and path and not work else ():
                if _within(folder, path):
                    problem = f"={str(path)!r} holds {what}, which this output would replace; give another folder"
                    break
            if problem is not None:
                plan.refuse(name, problem)
    if outputs.get("mlflow_model_folder"):
        from rft.components.outputs import mlflow_missing

        reason = mlflow_missing()
        if reason is not None:
            plan.refuse("mlflow_model_folder", f": {reason}")
    work = outputs.get(WORK_OUTPUT.get(comp.name, ""))
    if work:
        plan.set("trainer.default_local_dir", str(work), WORK_OUTPUT[comp.name])
    return plan


def resolve(comp: Component, values: dict[str, Any], outputs: dict[str, str | None] | None = None,
            for_run: bool = True, launching: bool = False):
    """(the validated canonical RFTConfig, the plan). Every problem of the inputs is raised at once, one line
    each: the plan's refusals, then the first problem of the canonical config without the refused inputs' keys
    (naming the inputs behind its keys), and when `launching` (`run`) the launch's (several nodes need
    torchrun)."""
    from rft.config.load import ConfigError, merge_layers
    from rft.config.schema import RFTConfig
    from rft.orchestration.launch import check_launch
    from rft.trainer.validate import validate

    plan = plan_for(comp, values, outputs or {}, for_run)
    problems = [refusal_line(comp, name, reason) for name, reason in plan.refusals]
    refused = {name for name, _ in plan.refusals}
    cfg = None
    try:  # without the refused inputs' keys: their problems are reported already
        cfg = merge_layers(RFTConfig, [plan.nested(without=refused)])
        with spelling(plan.in_input_terms):  # its notes name the inputs behind the keys they name
            validate(cfg, check_paths=for_run)
    except ConfigError as e:
        names = plan.inputs_of(str(e))
        if not refused or (names and not refused & set(names)):  # else an echo of a refused input
            who = ", ".join(f"--{n}" for n in names) if names else "the inputs"
            give = "gives" if len(names) == 1 else "give"
            problems.append(f"{comp.name}: {who} {give} an invalid config: {plan.in_input_terms(str(e))}")
    if launching and cfg is not None:
        try:
            check_launch(cfg, f"component {comp.name} ...")  # torchrun on each node runs the component
        except ConfigError as e:
            problems.append(f"{comp.name}: {plan.in_input_terms(str(e))}")
    if problems:
        raise ComponentError("\n".join(problems))
    return cfg, plan


def _inputs_named(comp: Component, plan: Plan, message: str) -> str:
    """`message` (a run's error or note, which names rft's canonical keys) in the component's terms: led by the
    component and the inputs behind the keys it names, each key an input sets named by that input
    (`Plan.in_input_terms`): `rft_trainer: --actor_optim_lr, --intermediate_folder: resuming ... with changed keys
    --actor_optim_lr (3e-06 -> 0.0001) ...`."""
    names = plan.inputs_of(message)
    message = plan.in_input_terms(message)
    return f"{comp.name}: {', '.join(f'--{n}' for n in names)}: {message}" if names else message


@contextlib.contextmanager
def _in_input_terms(comp: Component, plan: Plan) -> Iterator[None]:
    """A run in the component's terms: its notes (`rft.config.spelling`: the inputs behind the keys they name), and
    its expected failure (an `RftError`: a prompt over data.max_prompt_length, a resume with changed keys, ...)
    raised with the inputs behind the keys it names (`_inputs_named`); its class, and so its exit status, stay the
    same."""
    from rft.errors import RftError

    try:
        with spelling(plan.in_input_terms):
            yield
    except RftError as e:
        if len(e.args) == 1 and isinstance(e.args[0], str):
            e.args = (_inputs_named(comp, plan, e.args[0]),)
        raise


def run(comp: Component, values: dict[str, Any], outputs: dict[str, str | None],
        argv: list[str] | None = None) -> dict[str, str]:
    """Train with the component's inputs and write its outputs; returns {output name: path}. `argv`: the
    `rft component` arguments, re-run by each process when the inputs ask for several (trainer_n_gpus_per_node).
    Without an output that holds the run folder, it is a temporary one (`temporary_line`)."""
    from rft.distributed import launched
    from rft.orchestration.launch import train_here

    cfg, plan = resolve(comp, values, outputs, launching=True)
    started_by_us = launched() and WORK_ENV in os.environ
    says = not launched() or (not started_by_us and os.environ["RANK"] == "0")
    with contextlib.ExitStack() as stack:
        temp = None
        if started_by_us:
            cfg.trainer.default_local_dir = os.environ[WORK_ENV]
        elif not outputs.get(WORK_OUTPUT.get(comp.name, "")):
            if launched():  # torchrun started every process: one run folder name for all of them
                temp = str(Path(tempfile.gettempdir()) /
                           f"rft-{comp.name}-{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}")
                Path(temp).mkdir(parents=True, exist_ok=True)
            else:
                temp = str(stack.enter_context(_temporary_run_folder(comp)))
            cfg.trainer.default_local_dir = temp
            if says:
                print(f"rft {comp.name}: {temporary_line(comp, temp, cleaned=not launched())}", flush=True)
            stack.enter_context(_temporary_said(comp, temp))
        if says:
            for note in plan.notes:
                print(f"rft {comp.name}: {note}", flush=True)
        if started_by_us:  # one of the processes started below: train, the first process writes the outputs
            with _in_input_terms(comp, plan):
                train_here(cfg)
            return {}
        return _train_and_write(comp, plan, cfg, values, outputs, argv, temp)


def temporary_line(comp: Component, folder: str, cleaned: bool = True) -> str:
    """The first line of a run without an output that holds its run folder: where the folder is, that it goes
    when the command ends (`cleaned`: and that the next component run removes it after a kill), and what keeps it
    (so that a rerun resumes)."""
    keep = WORK_OUTPUT.get(comp.name)
    how = (f"give --{keep} DIR to keep it, so that the same command resumes from its last checkpoint after a stop "
           "or a kill" if keep else "this component has no output that keeps it, so a rerun starts from step 0")
    after_kill = " (one a killed run left is removed by the next component run)" if cleaned else ""
    return f"run folder {folder}: temporary, removed when this command ends{after_kill}; {how}"


def _temporary_run_folder(comp: Component) -> contextlib.AbstractContextManager[Path]:
    """A new temporary run folder, `<tmp>/.rft-<component>.tmp-<8 hex>`, held (an flock) while this process lives
    and removed when the block ends (`fsutil.held_scratch`); first, the ones that killed component runs left (nobody
    holds them) are removed (`fsutil.clean_abandoned`), with a note each."""
    from rft.fsutil import clean_abandoned, held_scratch

    for name in components():
        for line in clean_abandoned(Path(tempfile.gettempdir()) / f"rft-{name}"):
            print(f"rft {comp.name}: note: a component run was killed: {line}", flush=True)
    return held_scratch(Path(tempfile.gettempdir()) / f"rft-{comp.name}")


@contextlib.contextmanager
def _temporary_said(comp: Component, folder: str) -> Iterator[None]:
    """A stop (Ctrl-C, SIGTERM) or an error of a run in a temporary folder says what the same command does next:
    it starts again from step 0 (the run folder's own words, "resumes from <folder>/checkpoints/...", were untrue:
    the folder is removed)."""
    from rft.errors import ends_with_resume_note

    keep = WORK_OUTPUT.get(comp.name)
    note = (f"the run folder {folder} was temporary and is removed, so the same command starts the run again from "
            f"step 0" + (f" (give --{keep} DIR to keep a run folder to resume from)" if keep else ""))
    try:
        yield
    except KeyboardInterrupt as e:
        if getattr(e, "message", None):  # "<the stop>; <what the run folder said next>"
            e.message = f"{e.message.rpartition('; ')[0] or e.message}; {note}"
        e.resume_note = note
        raise
    except BaseException as e:
        if ends_with_resume_note(e):
            with contextlib.suppress(AttributeError):
                e.resume_note = note
        raise


def _train_and_write(comp: Component, plan: Plan, cfg, values: dict[str, Any], outputs: dict[str, str | None],
                     argv: list[str] | None, temp: str | None) -> dict[str, str]:
    """`run`'s training in the process that writes the outputs (it starts the others where the inputs ask for
    several), then the outputs; a torchrun run folder (`temp`) is removed by rank 0."""
    from rft.config.checks import processes
    from rft.distributed import launch, launched
    from rft.errors import RunComplete
    from rft.orchestration.launch import train_here

    written: dict[str, str] = {}
    try:
        try:
            with _in_input_terms(comp, plan):
                if processes(cfg.trainer) > 1 and not launched():
                    from rft.trainer.run_folder import run_folder

                    os.environ[WORK_ENV] = str(cfg.trainer.default_local_dir)
                    try:
                        with run_folder(cfg, for_children=True):  # held for the processes it starts
                            status = launch(processes(cfg.trainer), ["component", *(argv or [])])
                    finally:
                        os.environ.pop(WORK_ENV, None)
                    if status != 0:
                        raise ComponentError(f"{comp.name}: training failed in one of its "
                                             f"{processes(cfg.trainer)} processes")
                else:
                    train_here(cfg)
        except RunComplete as e:  # the run folder holds this run, finished: its model is what the outputs get
            done = _inputs_named(comp, plan, str(e).removeprefix("rft: "))
            print(f"rft {done if done.startswith(comp.name + ':') else f'{comp.name}: {done}'}; the outputs are "
                  "written from its model", flush=True)
        if launched() and int(os.environ["RANK"]) != 0:
            temp = None  # a launch by torchrun: rank 0 writes the outputs and removes the run folder
            return {}
        model_dir = Path(cfg.trainer.default_local_dir) / "model"
        if outputs.get("output_model_path"):
            written["output_model_path"] = str(outputs["output_model_path"])
        if outputs.get("intermediate_folder"):
            written["intermediate_folder"] = str(outputs["intermediate_folder"])
        if outputs.get("model_output"):
            from rft.components.outputs import write_model_output

            written["model_output"] = str(write_model_output(model_dir, outputs["model_output"]))
        if outputs.get("mlflow_model_folder"):
            from rft.components.outputs import write_mlflow_model

            meta = {"base_model_name": Path(str(values.get("model_name_or_path"))).name,
                    "finetuning_task": "chat-completion", "is_finetuned_model": True, "trainer": "rft"}
            written["mlflow_model_folder"] = str(write_mlflow_model(model_dir, outputs["mlflow_model_folder"], meta))
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    for name, path in written.items():
        print(f"rft {comp.name}: {name} -> {path}", flush=True)
    return written


def _usage() -> str:
    lines = ["usage: rft component NAME [--<input> VALUE ...] [--<output> PATH ...] [--emit-yaml] [--show-config]",
             "", "components (rft component NAME --help lists the inputs):"]
    lines += [f"  {c.name:36s} {c.display_name}" for c in components().values()]
    return "\n".join(lines)


def _unknown_arguments(extra: list[str]) -> dict[str, Any]:
    """{name: value} of the arguments the component's parser did not know (`--name value` or `--name=value`), to
    be refused with the rest; a stray word is refused under its own name."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        token = extra[i]
        name, eq, value = token.removeprefix("--").partition("=")
        if not eq and token.startswith("--") and i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            value, i = extra[i + 1], i + 1
        out[name] = value
        i += 1
    return out


def main(argv: list[str]) -> int:
    """`rft component ...`; returns the exit status (2: refused)."""
    from rft.components.amlyaml import component_yaml

    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    try:
        comp = get_component(argv[0])
        if "--emit-yaml" in argv[1:]:  # needs none of the required inputs
            print(component_yaml(comp), end="")
            return 0
        if "-h" in argv[1:] or "--help" in argv[1:]:
            comp.parser().parse_args(argv[1:])  # prints the help and exits
        if "--emit-deepspeed-config" in argv[1:] and comp.deepspeed_template:
            print(json.dumps(comp.deepspeed_template, indent=2))
            return 0
        args, extra = comp.parser(strict=False).parse_known_args(argv[1:])
        values = {**{i.name: getattr(args, i.name) for i in comp.inputs if hasattr(args, i.name)},
                  **_unknown_arguments(extra)}
        outputs = {o.name: getattr(args, o.name) for o in comp.outputs}
        if args.show_config:
            from rft.config import to_yaml

            cfg, plan = resolve(comp, values, outputs, for_run=False)
            print(f"# canonical config of `rft component {comp.name}` (verl keys)")
            for note in plan.notes:
                print(f"# {note}")
            print(to_yaml(cfg), end="")
            return 0
        if values.get("pypi_packages_override") and WORK_ENV not in os.environ:  # the first process installs
            from rft.components.pip import install_requirements

            install_requirements(values["pypi_packages_override"])
        run(comp, values, outputs, argv)
        return 0
    except ComponentError as e:
        for line in str(e).splitlines():
            print(f"rft: error: {line}", file=sys.stderr)
        return 2
