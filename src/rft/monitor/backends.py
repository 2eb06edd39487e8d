"""The monitors that live in other libraries: TensorBoard event files, MLflow, Weights & Biases.

Each imports its library when it is built (the optional extras `rft[tensorboard]`, `rft[mlflow]`, `rft[wandb]`;
config validation already refused a missing one by name) and writes under the loop's folder, `<folder>/monitor/`:

* `tensorboard`: tensorboardX's writer, event files in `monitor/tensorboard/` (TensorBoard reads them:
  `tensorboard --logdir <out>`); tables as a markdown text summary. A resumed run purges the steps it repeats.
* `mlflow`: a run in the experiment `trainer.project_name`, named `trainer.experiment_name` (plus the role),
  tracking URI `monitor_args.uri`, else MLFLOW_TRACKING_URI, else the SQLite store `monitor/mlflow.db` (artifacts in
  `monitor/mlflow-artifacts/`); the params are the resolved config, flattened to dotted keys; tables are the JSON
  artifact `<name>.json` (rows appended). MLflow allows no '@' in a metric name: `mean@1` is logged as
  `mean_at_1` (verl does the same).
* `wandb`: a run of project `trainer.project_name`, named like the MLflow run, config the resolved config, files
  in `monitor/wandb/`; offline unless an API key is set (WANDB_API_KEY or `monitor_args.api_key`) or WANDB_MODE says
  otherwise; `monitor_args.base_url` sets WANDB_BASE_URL. Tables are `wandb.Table`s.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rft.config.load import flatten
from rft.config.schema import LOGGERS
from rft.errors import RftError

MONITOR_DIR = "monitor"


@dataclass
class RunInfo:
    """What a monitor needs to know about the loop it logs: `folder` (where metrics.jsonl is), the experiment's
    names, the role (trainer, explorer, bench: one run each), the resolved config, trainer.monitor_args and the
    step the loop starts after (a resume)."""

    folder: Path
    project: str
    name: str
    role: str = "trainer"
    config: Any = None
    monitor_args: dict = field(default_factory=dict)
    start_step: int = 0

    @property
    def run_name(self) -> str:
        return self.name if self.role == "trainer" else f"{self.name}-{self.role}"

    def config_dict(self) -> dict:
        if self.config is None:
            return {}
        if isinstance(self.config, dict):
            return self.config
        from rft.config import to_dict

        return to_dict(self.config)


def _table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    return columns


class TensorBoardMonitor:
    """Scalars and text summaries written with tensorboardX's event-file writer under their own names (its
    SummaryWriter would rewrite a tag's '@' as '_'; TensorBoard takes any tag)."""

    def __init__(self, info: RunInfo):
        from tensorboardX import FileWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self.logdir = info.folder / MONITOR_DIR / "tensorboard"
        # tensorboardX names a file by the second it was made: a suffix keeps two made in one second apart (and in
        # order: TensorBoard reads the files sorted by name)
        self.writer = FileWriter(str(self.logdir), filename_suffix=f".{time.time_ns()}")
        if info.start_step:
            # a resumed run writes its steps again: TensorBoard drops the events of steps > start written before
            purge = info.start_step + 1
            self.writer.add_event(Event(step=purge, file_version="brain.Event:2"))
            self.writer.add_event(Event(step=purge, session_log=SessionLog(status=SessionLog.START)))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=key, simple_value=float(value)) for key, value in metrics.items()]
        self.writer.add_summary(Summary(value=values), global_step=step)
        self.writer.flush()

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        from tensorboardX.summary import text

        columns = _table_columns(rows)
        cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
        summary = text(name, "\n".join(lines))
        summary.value[0].tag = name  # text() names it <name>/text_summary
        self.writer.add_summary(summary, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


_MLFLOW_BAD = re.compile(r"[^/\w.\- :]")


def mlflow_name(key: str) -> str:
    """A metric name MLflow accepts (alphanumerics, _ - . space : /): '@' reads '_at_', anything else '_'."""
    return _MLFLOW_BAD.sub("_", key.replace("@", "_at_"))


class MlflowMonitor:
    PARAM_CHARS = 6000  # MLflow's limit on a param value
    BATCH = 100  # params per log_batch call (MLflow's limit)

    def __init__(self, info: RunInfo):
        from mlflow.tracking import MlflowClient

        args = info.monitor_args
        for key, env in (("username", "MLFLOW_TRACKING_USERNAME"), ("password", "MLFLOW_TRACKING_PASSWORD")):
            if args.get(key):
                os.environ[env] = args[key]
        local = info.folder.resolve() / MONITOR_DIR
        self.uri = args.get("uri") or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{local / 'mlflow.db'}"
        if self.uri.startswith("sqlite:///"):
            Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name(info.project)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            # a local store keeps its artifacts beside it; a server its own default
            artifacts = (local / "mlflow-artifacts").as_uri() if self.uri.startswith("sqlite:///") else None
            experiment_id = self.client.create_experiment(info.project, artifact_location=artifacts)
        run = self.client.create_run(experiment_id, run_name=info.run_name,
                                     tags={"rft.role": info.role, "rft.folder": str(info.folder.resolve())})
        self.run_id = run.info.run_id
        self._log_params(flatten(info.config_dict()))

    def _log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(mlflow_name(k), str(v)[: self.PARAM_CHARS]) for k, v in sorted(params.items())]
        for start in range(0, len(items), self.BATCH):
            self.client.log_batch(self.run_id, params=items[start:start + self.BATCH])

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(mlflow_name(k), float(v), now, step) for k, v in sorted(metrics.items())]
        for start in range(0, len(items), 1000):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, metrics=items[start:start + 1000])

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        columns = _table_columns(rows)
        data = {c: [row.get(c) for row in rows] for c in columns}
        self.client.log_table(self.run_id, data=data, artifact_file=name.replace("/", "_") + ".json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbMonitor:
    def __init__(self, info: RunInfo):
        import wandb

        args = info.monitor_args
        if args.get("base_url"):
            os.environ["WANDB_BASE_URL"] = args["base_url"]
        if args.get("api_key"):
            os.environ["WANDB_API_KEY"] = args["api_key"]
        self.mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
        directory = info.folder / MONITOR_DIR
        directory.mkdir(parents=True, exist_ok=True)
        self.wandb = wandb
        # console="off": W&B does not wrap stdout / stderr (rft's bar and its one-line errors stay as they are)
        self.run = wandb.init(project=info.project, name=info.run_name, dir=str(directory), mode=self.mode,
                              config=info.config_dict(), reinit="create_new",
                              settings=wandb.Settings(console="off", silent=True))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log({k: float(v) for k, v in metrics.items()}, step=step)

    def log_table(self, name: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        columns = _table_columns(rows)
        table = self.wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in rows])
        self.run.log({name: table}, step=step)

    def close(self) -> None:
        self.run.finish()


BACKENDS = {"tensorboard": TensorBoardMonitor, "mlflow": MlflowMonitor, "wandb": WandbMonitor}
assert set(BACKENDS) | {"console", "file"} == set(LOGGERS), "rft.config.schema.LOGGERS and BACKENDS differ"


def build_monitors(loggers: Sequence[str], info: RunInfo) -> list:
    """The monitors of `loggers` other than console and file (the Tracker's own), in the list's order."""
    out = []
    try:
        for name in dict.fromkeys(loggers):
            if name in BACKENDS:
                try:
                    out.append(BACKENDS[name](info))
                except Exception as e:  # the library refused its settings: a bad key or URL, no server, ...
                    if isinstance(e, OSError) and e.errno is not None:
                        raise  # a file-system fault: the CLI's own line for it (full disk, no permission)
                    raise MonitorError(name, e) from e
    except BaseException:
        for monitor in out:
            monitor.close()
        raise
    return out


class MonitorError(RftError):
    """A monitor whose library would not start (a rejected API key, a server that does not answer, ...): its
    settings, not rft, are at fault, so the line names them."""

    def __init__(self, name: str, error: Exception):
        detail = (str(error).strip().splitlines() or [""])[0].rstrip(".")
        super().__init__(f"trainer.logger: the {name} monitor could not start ({type(error).__name__}: {detail}); "
                         f"check {MONITOR_SETTINGS[name]}, or remove {name} from trainer.logger")


MONITOR_SETTINGS = {
    "tensorboard": "that <out>/monitor/tensorboard can be written",
    "mlflow": "trainer.monitor_args uri / username / password (Trinity-RFT: monitor.monitor_args) and "
              "MLFLOW_TRACKING_URI",
    "wandb": "trainer.monitor_args api_key / base_url (Trinity-RFT: monitor.monitor_args), WANDB_API_KEY, or "
             "WANDB_MODE=offline to log without an account",
}
"""Where each monitor's settings are, for the line of one that would not start."""
