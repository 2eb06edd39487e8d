"""A component's model outputs: the Hugging Face folder (model_output) and an MLflow model (mlflow_model_folder).

Both are written whole or not at all: under a temporary sibling renamed into place, or, when the destination is an
existing empty folder (an Azure ML output mount, which cannot be renamed), straight into it. A destination holding
anything else than an earlier run's output of that name is refused before the run trains (`output_problem`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

from rft.components.spec import ComponentError
from rft.fsutil import atomic_dir

GENERATION_PARAMS = {"max_new_tokens": 256, "do_sample": False, "temperature": 1.0, "top_p": 1.0}
MLFLOW_HINT = "install the optional extra: pip install 'rft[mlflow]' (or pip install mlflow)"


def mlflow_missing() -> str | None:
    """Why an MLflow output cannot be written here, or None."""
    if importlib.util.find_spec("mlflow") is None:
        return f"mlflow is not installed; {MLFLOW_HINT}"
    return None


# what marks a folder as an earlier run's output of that name, which a new run may replace whole
WRITTEN_BY_A_RUN = {"model_output": "config.json", "mlflow_model_folder": "MLmodel"}


def output_problem(name: str, path: str | Path, run_folder: bool = False) -> str | None:
    """Why the output `name` cannot be written at `path`, or None: a file that is not a folder; for a model output
    (replaced whole), a folder holding anything but an earlier such output (its `WRITTEN_BY_A_RUN` file), which
    would be deleted; `run_folder` outputs keep what else their folder holds. Checked before anything trains."""
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        instead = "a new folder, or an earlier run's to resume it" if run_folder else "a new or empty folder"
        return f"={str(path)!r} is a file, not a folder; give {instead}"
    if run_folder or not folder.is_dir() or name not in WRITTEN_BY_A_RUN:
        return None
    held = sorted(p.name for p in folder.iterdir())
    if held and WRITTEN_BY_A_RUN[name] not in held:
        shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        return (f"={str(path)!r} holds other files ({shown}), not an earlier run's {name} (no "
                f"{WRITTEN_BY_A_RUN[name]}); the output replaces its folder whole, so give a new or empty folder")
    return None


@contextlib.contextmanager
def output_dir(final: str | Path) -> Iterator[Path]:
    final = Path(final).expanduser()
    if final.is_dir() and not any(final.iterdir()):
        yield final
        return
    with atomic_dir(final) as tmp:
        yield tmp


def write_model_output(model_dir: Path, dest: str | Path) -> Path:
    """Copy the trained Hugging Face folder `model_dir` (LoRA already merged by the trainer's export) to `dest`."""
    with output_dir(dest) as out:
        shutil.copytree(model_dir, out, dirs_exist_ok=True)
    return Path(dest)


def mlflow_requirements() -> list[str]:
    """Explicit pip requirements of the saved model (mlflow's inference would otherwise ask for torchvision)."""
    from importlib import metadata

    reqs = []
    for name in ("torch", "transformers", "tokenizers", "safetensors", "accelerate"):
        try:
            version = metadata.version(name).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
        reqs.append(f"{name}=={version}")
    return reqs


def write_mlflow_model(model_dir: Path, dest: str | Path, metadata: dict | None = None) -> Path:
    """An MLflow model (transformers flavour, task text-generation) of the Hugging Face folder `model_dir`, saved
    from the loaded model and tokenizer; `mlflow.transformers.load_model` and `mlflow.pyfunc.load_model` load it
    offline."""
    reason = mlflow_missing()
    if reason is not None:
        raise ComponentError(f"mlflow_model_folder: {reason}")
    import mlflow.transformers
    from mlflow.models import infer_signature
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # a params schema, so pyfunc's predict(..., params=...) reaches the pipeline's generate
    signature = infer_signature(["prompt"], ["completion"], params=dict(GENERATION_PARAMS))
    with output_dir(dest) as out, _local_model_card_only():
        mlflow.transformers.save_model(
            transformers_model={"model": model, "tokenizer": tokenizer}, path=str(out), task="text-generation",
            signature=signature, pip_requirements=mlflow_requirements(), metadata=metadata or {},
            model_card=_model_card(Path(model_dir)),
        )
    return Path(dest)


def _model_card(model_dir: Path):
    """The model's own card (its README.md, license included, as the Hub writes it), or an empty one: MLflow
    otherwise fetches the card from the Hub under the model's name, which for a run's model is a local folder."""
    from huggingface_hub import ModelCard

    readme = model_dir / "README.md"
    return ModelCard.load(readme) if readme.is_file() else ModelCard("---\nlibrary_name: transformers\n---\n")


@contextlib.contextmanager
def _local_model_card_only() -> Iterator[None]:
    """MLflow's save asks the Hub for the model's license files under its name, a local folder here: with the network
    up it retried for ~20 s, and offline or not it warned twice (the card and the license not found). The Hub is
    offline for the save, and MLflow's warnings about what a local model has no Hub page for are not printed."""
    import logging
    from unittest import mock

    from huggingface_hub import constants

    logger = logging.getLogger("mlflow.transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with mock.patch.object(constants, "HF_HUB_OFFLINE", True):
            yield
    finally:
        logger.setLevel(level)
