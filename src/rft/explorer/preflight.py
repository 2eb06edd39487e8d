"""Checks of the loaded prompts against the reward, made before any model loads.

The reward function runs only after the first generation; what it will need can be checked as soon as the data is
read: every row's data_source has a scorer (the built-in scorers, rft.rewards.scorers, unless
custom_reward_function.path is set), and every row has the reward_model.ground_truth a built-in scorer compares
with (a custom function may not need one: rows without it are counted in a note); with a typed reward
(custom_reward_function.reward_fn_type) every row's ground truth is what that type reads.
"""

from __future__ import annotations

import logging
from collections import Counter

from rft.data.dataset import DataError, PromptDataset
from rft.explorer.checks import ENV_REWARD_WORKFLOWS
from rft.rewards.judge import JUDGE
from rft.rewards.scorers import SCORERS, known_sources, meant_source
from rft.rewards.typed import REWARD_FN_TYPES

log = logging.getLogger("rft")


def _rule_reward_runs(cfg) -> bool:
    """The reward function (built-in scorers or custom) runs: no reward model, or one mixed with rule_weight."""
    rm = cfg.reward_model
    return not rm.enable or rm.rule_weight != 0


def check_reward_inputs(cfg, *datasets: PromptDataset | None) -> None:
    """DataError when a row's data_source has no built-in scorer or a built-in scorer would get no ground truth, or
    a row's ground truth is missing or malformed for the typed reward (custom_reward_function.reward_fn_type); a
    note when a custom reward function will get None for some rows' ground truth."""
    if not _rule_reward_runs(cfg) or cfg.workflow.type in ENV_REWARD_WORKFLOWS:
        return
    custom = cfg.custom_reward_function.path
    typed = cfg.custom_reward_function.reward_fn_type
    for dataset in datasets:
        if dataset is None:
            continue
        if typed:
            _check_typed_ground_truth(typed, dataset)
            continue
        if not custom:
            unknown = Counter(p.data_source for p in dataset.prompts if p.data_source not in SCORERS)
            if unknown:
                first = next(p for p in dataset.prompts if p.data_source not in SCORERS)
                listed = ", ".join(f"{src!r} ({n} rows{'; ' + meant if (meant := meant_source(src)) else ''})"
                                   for src, n in unknown.most_common(5))
                raise DataError(
                    f"no built-in reward scorer for data_source {listed} (first: {first.origin}); "
                    f"{known_sources(unknown.most_common(1)[0][0])}. Set custom_reward_function.path to a Python "
                    "file defining compute_score(data_source, solution_str, ground_truth, extra_info), or fix the "
                    "rows' data_source"
                )
        if not custom:
            _check_code_cases(dataset)
        missing = [p for p in dataset.prompts if p.ground_truth is None]
        if not missing:
            continue
        if not custom:
            raise DataError(
                f"{len(missing)} of {len(dataset)} rows have no reward_model.ground_truth (first: "
                f"{missing[0].origin}, data_source {missing[0].data_source!r}), which the built-in scorer compares "
                "the response with: every such row would score 0. Add {\"reward_model\": {\"ground_truth\": ...}} "
                "to the rows, or use your own custom_reward_function.path"
            )
        log.warning("rft: note: %d of %d rows have no reward_model.ground_truth (first: %s); %s gets None for them",
                    len(missing), len(dataset), missing[0].origin, custom)


def _check_code_cases(dataset: PromptDataset) -> None:
    """The built-in code scorer's rows (rft.rewards.code.CODE_SOURCES) hold stdin / stdout test cases it can run."""
    from rft.rewards.code import CODE_SOURCES, code_cases

    for p in dataset.prompts:
        if p.data_source in CODE_SOURCES and p.ground_truth is not None:
            try:
                code_cases(p.ground_truth)
            except ValueError as e:
                raise DataError(f"{p.origin} (data_source {p.data_source!r}, scored by running the response's "
                                f"program): {e}") from None


def check_interaction_rows(cfg, *datasets: PromptDataset | None) -> None:
    """With verl's interactions (workflow.interaction_config_path), every row names one of them in
    extra_info.interaction_kwargs.name, as verl requires: else the row's first conversation would stop the run."""
    path = cfg.workflow.interaction_config_path
    if not path or cfg.workflow.type != "tool_call_workflow":
        return
    from rft.explorer.interactions import read_interaction_config

    names = [name for name, _, _ in read_interaction_config(path)]
    for dataset in (d for d in datasets if d is not None):
        bad = [p for p in dataset.prompts if not isinstance(kwargs := (p.extra_info or {}).get("interaction_kwargs"),
                                                              dict) or kwargs.get("name") not in names]
        if bad:
            raise DataError(f"{len(bad)} of {len(dataset)} rows name no interaction of workflow.interaction_config_"
                            f"path={path!r} ({', '.join(names)}) in extra_info.interaction_kwargs.name (first: "
                            f"{bad[0].origin}); add {{\"interaction_kwargs\": {{\"name\": ...}}}} to each row's "
                            "extra_info, as verl's data does")


def _check_typed_ground_truth(name: str, dataset: PromptDataset) -> None:
    """Every row's ground truth passes the typed reward's check (present and well formed: a number or text for the
    math rewards, {"target", "numbers"} for countdown_reward); format_reward reads none. The data_source is not
    checked: a typed reward scores every row the same way. The LLM judge is shown whatever reference there is."""
    if name == JUDGE:
        return
    check = REWARD_FN_TYPES.get(name).ground_truth
    if check is None:
        return
    bad = [(p, problem) for p in dataset.prompts if (problem := check(p.ground_truth)) is not None]
    if bad:
        first, problem = bad[0]
        key = getattr(dataset, "response_key", None)
        truth = f"ground truth (their {key!r} column, data.response_key={key})" if key else "reward_model.ground_truth"
        raise DataError(
            f"{len(bad)} of {len(dataset)} rows have a {truth} that "
            f"custom_reward_function.reward_fn_type={name!r} cannot use (first: {first.origin}: {problem}); fix the "
            "rows or choose another reward"
        )
