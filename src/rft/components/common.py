"""What the three components share: process counts, inputs that ask for something the machine at hand cannot do
(vLLM, Liger kernels, sequence packing) and the model folder an Azure ML model-import component leaves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rft.components.spec import Input, Plan, vllm_install_hint, vllm_installed


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def check_processes(plan: Plan, name: str, value: int | None) -> None:
    """A GPU / node count lands on its key (trainer.n_gpus_per_node / trainer.nnodes): one process per device,
    NCCL on GPUs; on a machine without CUDA the same number of CPU processes with gloo (one compute thread each).
    The config validation checks the batch sizes against the number of processes."""
    if value is None or value == 1:
        return
    if not isinstance(value, int) or value < 1:
        plan.refuse(name, f"={value} must be a positive integer")
    elif name.endswith("n_gpus_per_node") and not has_cuda():
        import os

        cores = os.cpu_count() or 1
        crowded = f"; this machine has {cores} cores, so the processes share them" if value > cores else ""
        plan.notes.append(f"{name}={value}: no CUDA device here, so {value} CPU processes (gloo), one compute thread "
                          f"each{crowded}")


def devices_here() -> int:
    """The processes one node of this machine runs: one per CUDA device, else 1."""
    import torch

    return torch.cuda.device_count() if has_cuda() else 1


def default_processes(plan: Plan, name: str) -> None:
    """A process count left at its spec default (8 GPUs per node: a GPU cluster) runs on the devices this machine
    has: its CUDA devices, else one process, with a note saying how to ask for more. A count given (Azure ML
    passes every input) is honoured as given (`check_processes`)."""
    asked = plan.values[name]
    if name in plan.given or not isinstance(asked, int) or asked <= devices_here():
        return
    plan.values[name] = devices_here()
    plan.set(plan.keys[name], devices_here(), name)
    here = f"{devices_here()} processes, one per CUDA device here" if has_cuda() else \
        "1 process, as this machine has no CUDA device"
    plan.notes.append(f"{name} not given: {here} (the spec default {asked} describes an {asked}-GPU node); give "
                      f"--{name} N for N processes")


def default_offload(plan: Plan) -> None:
    """FSDP offload inputs left at a spec default of true, on one CUDA process (no FSDP, hence no offload): false,
    with a note. Given as true, they are refused by the config's check (workers.offload)."""
    if not has_cuda() or plan.values.get("trainer_n_gpus_per_node") != 1 or plan.values.get("trainer_nnodes") != 1:
        return
    left = [name for name, value in plan.values.items() if name not in plan.given and value is True
            and (plan.keys.get(name) or "").endswith(("param_offload", "optimizer_offload", "offload_policy"))]
    for name in left:
        plan.set(plan.keys[name], False, name)
    if left:
        plan.notes.append(f"{', '.join(left)} not given: false (their spec default true needs FSDP, which one "
                          "process on cuda does not have)")


def check_engine(plan: Plan, name: str, value: str) -> None:
    """A rollout engine name: `hf` (transformers with a KV cache) or `vllm` where vLLM is installed."""
    if value == "hf":
        return
    if value == "vllm":
        if not vllm_installed():
            plan.refuse(name, f"='vllm': vLLM is not installed here; {vllm_install_hint()}, or set it to 'hf' (rft's "
                              "transformers engine with a KV cache)")
    elif value == "sglang":
        plan.refuse(name, "='sglang': rft has no SGLang engine; set it to 'hf' (rft's transformers engine with a "
                          "KV cache) or 'vllm'")
    else:
        plan.refuse(name, f"={value!r} is not a rollout engine rft knows; set it to 'hf' or 'vllm'")


def check_liger(plan: Plan, name: str, value: bool) -> None:
    if not value:
        return
    if importlib.util.find_spec("triton") is None:
        plan.refuse(name, "=true: Liger kernels need Triton (and a GPU), which this machine does not have; set it "
                          "to false")
    else:
        plan.refuse(name, "=true: rft does not use Liger kernels yet; set it to false")


def resolve_model_folder(plan: Plan, name: str, path: str | None) -> str | None:
    """The Hugging Face folder in `path`: `path` itself when it holds config.json, else the one folder below it
    (up to three levels, e.g. an MLflow model's data/model) that does. None (and a refusal) when ambiguous."""
    if not path:
        return path
    root = Path(path).expanduser()
    if (root / "config.json").is_file() or not root.is_dir():
        return path  # not there at all: the config validation says so
    found = sorted({p.parent for depth in ("*/", "*/*/", "*/*/*/") for p in root.glob(depth + "config.json")})
    if len(found) == 1:
        plan.notes.append(f"{name}: using the model folder {found[0]} inside {path}")
        return str(found[0])
    if not found:
        plan.refuse(name, f"={path!r} holds no Hugging Face model folder (no config.json in it or below it)")
    else:
        plan.refuse(name, f"={path!r} holds several model folders ({', '.join(map(str, found))}); pass one of them")
    return None


# ------------------------------------------------------------------------- the verl-style components' rows
def verl_inputs(rows: list[tuple]) -> tuple[Input, ...]:
    """Inputs from compact rows (group, name, type, default, optional, enum, key or None, description[, extra])."""
    out = []
    for row in rows:
        group, name, type_, default, optional, enum, key, description, *extra = row
        kwargs = extra[0] if extra else {}
        out.append(Input(name=name, type=type_, description=description, default=default, optional=optional,
                         enum=tuple(enum) if enum else None, group=group, key=key, **kwargs))
    return tuple(out)


def verl_checks(plan: Plan) -> None:
    """The checks both verl-style components make on the inputs they share."""
    v = plan.values
    default_processes(plan, "trainer_n_gpus_per_node")
    default_offload(plan)
    for name in ("trainer_n_gpus_per_node", "trainer_nnodes"):
        check_processes(plan, name, v.get(name))
    path = resolve_model_folder(plan, "actor_model_path", v.get("actor_model_path")) if plan.check_paths else \
        v.get("actor_model_path")
    if path is not None:
        plan.set("actor_rollout_ref.model.path", path, "actor_model_path")
    plan.set("trainer.logger", ["console"])
