"""`rft eval`: score the responses of a parquet / jsonl file (verl's main_eval, evaluation.yaml keys) and report,
per data source, mean@n, best@n and pass@k.

For a data source whose rows have n responses each, with c_i of row i's passing (score >= metrics.pass_threshold):

* `eval/<source>/reward/mean@n`: the mean score over all responses;
* `eval/<source>/reward/best@n`: the mean over rows of the row's best score;
* `eval/<source>/pass@k`: the mean over rows of the unbiased estimator of the chance that at least one of k
  responses drawn without replacement from the row's n passes (Chen et al. 2021, "Evaluating Large Language Models
  Trained on Code"): `1 - C(n - c, k) / C(n, k)`, computed as `1 - prod_{i = n - c + 1}^{n} (1 - k / i)`.

The scores come from the reward function of `custom_reward_function` (the built-in scorers by data source by
default, a typed reward with reward_fn_type, the functions of path with reward_kwargs) with its time limit, failure
policy and worker processes (num_workers), as in training; llm_judge, which needs a judge model, is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rft.config.offline_schema import EvalConfig
from rft.console import counted
from rft.errors import RftError


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one prompt with `c` passing responses out of `n` (k <= n)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... below n, and n."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def _ground_truth(value: Any) -> Any:
    return value.get("ground_truth") if isinstance(value, dict) else value


def metrics_of(groups: dict[str, list[list[float]]], threshold: float, ks: list[int] | None) -> dict[str, float]:
    """The metrics of {data source: [the scores of each row's responses]} (every row of a source has n)."""
    out: dict[str, float] = {}
    for source in sorted(groups):
        rows = groups[source]
        n = len(rows[0])
        for k in ks or default_ks(n):
            if k > n:
                raise RftError(f"metrics.k lists {k}, but the rows of data source {source!r} have {n} responses "
                               f"each: k must be at most n")
        out[f"eval/{source}/reward/mean@{n}"] = float(np.mean([s for row in rows for s in row]))
        out[f"eval/{source}/reward/best@{n}"] = float(np.mean([max(row) for row in rows]))
        for k in ks or default_ks(n):
            passed = [sum(s >= threshold for s in row) for row in rows]
            out[f"eval/{source}/pass@{k}"] = float(np.mean([pass_at_k(n, c, k) for c in passed]))
    return out


def eval_outputs(cfg: EvalConfig) -> tuple[Path, Path]:
    """The metrics JSON (metrics.output_path, default <data.path without suffix>.metrics.json) and the scores
    beside it (<name>.scores.jsonl), checked before any scoring: neither may be data.path, the responses being
    scored (a metrics.output_path naming it wrote the JSON over them), a folder, or under a file."""
    from rft.fsutil import output_problem

    d = cfg.data
    out = Path(cfg.metrics.output_path or str(Path(d.path).with_suffix("")) + ".metrics.json")
    scores = out.with_name(out.name.removesuffix(".json").removesuffix(".metrics") + ".scores.jsonl")
    for path in (out, scores):
        problem = output_problem(path, folder=False)
        if problem is None and path.expanduser().resolve() == Path(d.path).expanduser().resolve():
            problem = f"{str(path)!r} is data.path, the responses it scores"
        if problem is not None:
            what = "" if path == out else f" (its scores file, {path.name})"
            raise RftError(f"metrics.output_path{what}: {problem}; name another .json file for the metrics")
    return out, scores


def no_data_source(where: str, cfg: EvalConfig, row: dict) -> RftError:
    """The error for a row at `where` without the data source column, scored by the built-in scorers (no
    custom_reward_function.path or reward_fn_type): the columns the row has, and what the built-in scorers need
    of it (the data source, named among theirs, and the ground truth), or the rewards that need no data source.
    Not `missing_column`'s 'set data.data_source_key=<one of the columns>': no column of a prompt / answer row
    names a scorer."""
    from rft.rewards.scorers import known_sources

    d = cfg.data
    needs = [f"{d.data_source_key!r} (data.data_source_key: the name of the scorer of each row; "
             f"{known_sources(d.data_source_key)})"]
    if d.reward_model_key not in row:
        needs.append(f"{d.reward_model_key!r} (data.reward_model_key: {{ground_truth: ...}} or the ground truth "
                     "itself)")
    return RftError(f"{where}: no column {d.data_source_key!r}; the rows have the columns "
                    f"{', '.join(sorted(map(str, row)))}, and the built-in scorers need {' and '.join(needs)}: add "
                    f"{'them' if len(needs) > 1 else 'it'}, or score these rows with your own function "
                    "(custom_reward_function.path) or a typed reward (custom_reward_function.reward_fn_type), with "
                    "which a row without a data_source column is 'unknown'")


def run_eval(cfg: EvalConfig) -> dict[str, float]:
    from rft.data.io import missing_column, read_rows
    from rft.fsutil import write_text_atomic
    from rft.rewards import build_reward_fn, score_responses

    d, crf = cfg.data, cfg.custom_reward_function
    out, scores_out = eval_outputs(cfg)
    rows = read_rows(d.path, key="data.path")
    if not rows:
        raise RftError(f"data.path={d.path!r} has no rows")
    read = rows  # as the file has them: what an error lists
    if d.data_source_key == "data_source" and (crf.path or crf.reward_fn_type):
        # your own or a typed reward picks no scorer by it: optional, as in the rows rft train reads (and rft
        # generate keeps), verl's "unknown"; the built-in scorers need it
        rows = [row if "data_source" in row else {**row, "data_source": "unknown"} for row in rows]
    flat: dict[str, list] = {"source": [], "response": [], "truth": [], "extra": []}
    counts: dict[str, set[int]] = {}
    for i, row in enumerate(rows):
        if d.data_source_key not in row and not (crf.path or crf.reward_fn_type):
            raise no_data_source(f"{d.path} row {i}", cfg, read[i])
        for key, what in ((d.prompt_key, "prompt_key"), (d.response_key, "response_key"),
                          (d.data_source_key, "data_source_key"), (d.reward_model_key, "reward_model_key")):
            if key not in row:
                raise missing_column(f"{d.path} row {i}", key, f"data.{what}", read[i])
        responses = row[d.response_key]
        responses = [responses] if isinstance(responses, str) else list(responses)
        if not responses or not all(isinstance(r, str) for r in responses):
            raise RftError(f"{d.path} row {i}: data.response_key {d.response_key!r} must hold a non-empty list of "
                           f"strings, got {row[d.response_key]!r:.80}")
        source = str(row[d.data_source_key])
        counts.setdefault(source, set()).add(len(responses))
        flat["source"] += [source] * len(responses)
        flat["response"] += responses
        flat["truth"] += [_ground_truth(row[d.reward_model_key])] * len(responses)
        flat["extra"] += [row.get("extra_info") if isinstance(row.get("extra_info"), dict) else None] * len(responses)
    for source, ns in counts.items():
        if len(ns) > 1:
            raise RftError(f"{d.path}: the rows of data source {source!r} have {sorted(ns)} responses: mean@n and "
                           "pass@k need the same n for every row of a data source")
    fn = build_reward_fn(crf.path, crf.name, crf.reward_weights, crf.timeout, crf.on_error,
                         reward_fn_type=crf.reward_fn_type, num_workers=crf.num_workers,
                         reward_kwargs=crf.reward_kwargs)
    scores, _ = score_responses(fn, flat["source"], flat["response"], flat["truth"], flat["extra"])
    groups: dict[str, list[list[float]]] = {}
    per_row, at = [], 0
    for row in rows:
        n = 1 if isinstance(row[d.response_key], str) else len(row[d.response_key])
        row_scores = scores[at:at + n]
        at += n
        groups.setdefault(str(row[d.data_source_key]), []).append(row_scores)
        per_row.append({"prompt": row[d.prompt_key], "data_source": str(row[d.data_source_key]), "scores": row_scores})
    metrics = metrics_of(groups, cfg.metrics.pass_threshold, cfg.metrics.k)
    report = {"data": str(d.path), "metrics": metrics, "rows": {s: len(g) for s, g in groups.items()},
              "n": {s: len(g[0]) for s, g in groups.items()}, "pass_threshold": cfg.metrics.pass_threshold}
    write_text_atomic(scores_out, "".join(json.dumps(r, default=str) + "\n" for r in per_row))
    write_text_atomic(out, json.dumps(report, indent=1) + "\n")
    for source in sorted(groups):
        shown = {k.split("/", 2)[2]: v for k, v in metrics.items() if k.startswith(f"eval/{source}/")}
        print(f"rft eval: {source} ({counted(len(groups[source]), 'prompt')} x {len(groups[source][0])}): " +
              " ".join(f"{k}={v:.4f}" for k, v in shown.items()), flush=True)
    print(f"rft eval: metrics in {out}", flush=True)
    return metrics
