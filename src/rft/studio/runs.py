"""The run view's side of the studio: what a run folder holds, read while the run writes it.

A run folder is one run (`metrics.jsonl` at its root, `explorer/` for a decoupled explorer) or a staged run (one
sub-folder per stage, in the order of its config.yaml's `stages`). For each part: the curves (reward, validation
accuracy with the step-0 validation, response length, KL), the phase timings, the latest validation generations,
the checkpoints and the final model; for the run: whether it is running (its lock's holder lives), running elsewhere
(its lock names another host, whose processes this one cannot see), finished, failed
(`failed.json`, the line the command printed) or stopped, and the tail of the log `rft studio` kept when it started
the run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rft.fsutil import on_this_host, process_alive

LOG = "studio.log"
"""The output of a run `rft studio` started (in its run folder)."""
_VAL = re.compile(r"^val-core/(?P<source>.+)/reward/mean@(?P<n>\d+)$")
REWARD, LENGTH, SFT_LOSS = "critic/score/mean", "response_length/mean", "train/loss"
KL_KEYS = ("actor/kl_loss", "actor/ppo_kl", "actor/reward_kl_penalty")


def _read_jsonl(path: Path) -> list[dict]:
    """The whole lines of a file another process appends to (a half-written last line is left for later)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x == x and abs(x) != float("inf") else None


def _series(records: list[dict], before: dict) -> dict[str, dict[str, list[list[float]]]]:
    """{chart: {series name: [[step, value], ...]}} for the charts reward, accuracy, length, kl."""
    charts: dict[str, dict[str, list[list[float]]]] = {"reward": {}, "accuracy": {}, "length": {}, "kl": {}}

    def add(chart: str, name: str, step: int, value: Any) -> None:
        y = _number(value)
        if y is not None:
            charts[chart].setdefault(name, []).append([step, y])

    for key, value in (before or {}).items():
        if (m := _VAL.match(key)) is not None:
            add("accuracy", m["source"] + ("" if m["n"] == "1" else f" @{m['n']}"), 0, value)
    for record in sorted(records, key=lambda r: r.get("step", 0)):
        step = record.get("step", 0)
        for key, value in record.items():
            if key == REWARD:
                add("reward", "reward (critic/score/mean)", step, value)
            elif key == SFT_LOSS:
                add("reward", "SFT loss (train/loss)", step, value)
            elif key == "val/loss":
                add("accuracy", "SFT val/loss", step, value)
            elif key == LENGTH:
                add("length", "response length (mean)", step, value)
            elif key in KL_KEYS:
                add("kl", key, step, value)
            elif (m := _VAL.match(key)) is not None:
                add("accuracy", m["source"] + ("" if m["n"] == "1" else f" @{m['n']}"), step, value)
    return charts


def _timings(records: list[dict]) -> list[dict]:
    """Per phase: the last step's seconds and the mean over the steps (timing_s/*), slowest first."""
    phases: dict[str, list[float]] = {}
    for record in records:
        for key, value in record.items():
            if key.startswith("timing_s/") and (x := _number(value)) is not None:
                phases.setdefault(key.removeprefix("timing_s/"), []).append(x)
    last = records[-1] if records else {}
    rows = [{"phase": phase, "last": _number(last.get(f"timing_s/{phase}")), "mean": sum(xs) / len(xs)}
            for phase, xs in phases.items()]
    return sorted(rows, key=lambda r: -r["mean"])


def _checkpoints(folder: Path) -> list[dict]:
    root = folder / "checkpoints"
    if not root.is_dir():
        return []
    latest = (root / "latest").read_text().strip() if (root / "latest").is_file() else None
    out = []
    for path in sorted(root.iterdir(), key=lambda p: (len(p.name), p.name)):
        if path.is_dir() and re.match(r"^global_step_\d+(\.corrupt)?$", path.name):
            size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            out.append({"name": path.name, "step": int(re.findall(r"\d+", path.name)[0]), "bytes": size,
                        "latest": path.name == latest, "damaged": path.name.endswith(".corrupt")})
    return out


def _part(name: str, folder: Path) -> dict:
    records = _read_jsonl(folder / "metrics.jsonl")
    config = folder / "config.yaml"
    total = None
    if config.is_file():
        m = re.search(r"^\s+total_training_steps: (\d+)$", config.read_text(encoding="utf-8"), re.M)
        total = int(m[1]) if m else None
    generations = _read_jsonl(folder / "val_generations.jsonl")
    return {
        "name": name, "folder": str(folder), "steps": len(records), "last_step": records[-1].get("step") if records
        else 0, "total_steps": total, "charts": _series(records, _read_json(folder / "val_before_train.json") or {}),
        "timings": _timings(records), "generations": generations[-1] if generations else None,
        "checkpoints": _checkpoints(folder), "model": (folder / "model" / "config.json").is_file(),
        "failed": _read_json(folder / "failed.json"), "last": {k: v for k, v in (records[-1] if records else {}).items()
                                                                if isinstance(v, (int, float))},
    }


def _stage_names(root: Path) -> list[str]:
    config = root / "config.yaml"
    if not config.is_file():
        return []
    import yaml

    try:
        raw = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return []
    stages = raw.get("stages") if isinstance(raw, dict) else None
    return [str(s.get("stage_name")) for s in stages or [] if isinstance(s, dict) and s.get("stage_name")]


def _lock_holders(folder: Path) -> list[str]:
    """Where the folder's run locks are held (`.rft.lock` and the other roles' name their holder while held): "" for
    a live process of this host, the host's name for a process of another host (or container), whose pid cannot
    be tested from here: it counts as running there until its lock is released (an empty file)."""
    holders = []
    for lock in folder.glob(".rft*.lock"):
        try:
            holder = json.loads(lock.read_text() or "{}")
        except (OSError, ValueError):
            continue
        if not isinstance(holder, dict) or not holder.get("pid"):
            continue
        if not holder.get("host") or on_this_host(holder.get("host")):  # no host named: tested here, as before
            if process_alive(holder.get("pid")):
                holders.append("")
        else:
            holders.append(str(holder.get("host")))
    return holders


def parts_of(root: Path) -> list[tuple[str, Path]]:
    """(name, folder) of what a run folder holds: its stages in order, else the run and its explorer."""
    names = _stage_names(root)
    if names:
        return [(n, root / n) for n in names]
    out = [("run", root)] if (root / "metrics.jsonl").is_file() or (root / "config.yaml").is_file() else []
    if (root / "explorer" / "metrics.jsonl").is_file():
        out.append(("explorer", root / "explorer"))
    if not out:  # stages of an unknown config: sub-folders with metrics, oldest first
        subs = [p for p in root.iterdir() if (p / "metrics.jsonl").is_file()] if root.is_dir() else []
        out = [(p.name, p) for p in sorted(subs, key=lambda p: (p / "metrics.jsonl").stat().st_mtime)]
    return out


def read_run(path: str | Path) -> dict:
    """Everything the run view shows of the run folder `path` (see the module docstring)."""
    root = Path(path).expanduser()
    if not root.is_dir():
        return {"folder": str(root), "exists": False, "status": "missing", "parts": [], "log": None, "error": None}
    parts = [_part(name, folder) for name, folder in parts_of(root)]
    failures = [p["failed"] for p in parts if p["failed"]] + ([f] if (f := _read_json(root / "failed.json")) else [])
    log = root / LOG
    log_tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:] if log.is_file() else None
    error_lines = [line for line in log_tail or [] if line.startswith("rft: error:")]
    holders = [h for _, folder in [("", root), *parts_of(root)] for h in _lock_holders(folder)]
    if "" in holders:
        status = "running"
    elif holders:
        status = "running elsewhere"
    elif failures or error_lines:
        status = "failed"
    elif parts and (parts[-1]["model"] or (root / "demo.json").is_file()):
        status = "finished"
    else:
        status = "stopped" if parts else "empty"
    error = failures[0]["error"] if failures else (error_lines[-1].removeprefix("rft: error: ") if error_lines else None)
    return {"folder": str(root), "exists": True, "status": status, "parts": parts, "log": log_tail, "error": error,
            "demo": _read_json(root / "demo.json"), "running_on": holders[0] if status == "running elsewhere" else None}


def list_runs(root: str | Path) -> list[str]:
    """The run folders directly under `root` (and `root` itself when it is one), newest first."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return []
    own = any((root / name).is_file() for name in ("metrics.jsonl", "config.yaml"))
    found = ([root] if own else []) + [p for p in root.iterdir() if p.is_dir() and parts_of(p)]
    return [str(p) for p in sorted(found, key=lambda p: -p.stat().st_mtime)]
