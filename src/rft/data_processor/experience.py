"""The experience pipeline (Trinity-RFT's data_processor.experience_pipeline): operators over each explore step's
experiences, after the rewards and before the buffer, so the trainer reads what they made of them, in every mode.

An operator is built from its config's `args` and has Trinity-RFT's interface: `process(experiences) ->
(experiences, metrics)`. The pipeline runs them in order, names each one in the `info["operators"]` list of every
experience it passed (their provenance, stored with them in the buffer), and logs the operators' metrics as
`experience_pipeline/<name>` (Trinity-RFT's prefix).
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from rft.experience import Experience
from rft.registry import Registry

EXPERIENCE_OPERATORS: Registry = Registry("experience operator")
"""name -> operator class (Trinity-RFT's EXPERIENCE_OPERATORS names)."""

PROVENANCE = "operators"
"""The `Experience.info` entry listing, in order, the operators an experience went through."""

OP_TYPES = {
    "ADD": lambda reward, stat: reward + stat,
    "SUB": lambda reward, stat: reward - stat,
    "MUL": lambda reward, stat: reward * stat,
    "DIV": lambda reward, stat: reward / stat if stat != 0 else reward,  # Trinity-RFT leaves it where w x s = 0
}


@EXPERIENCE_OPERATORS.register("reward_shaping_mapper")
class RewardShapingMapper:
    """Trinity-RFT's reward_shaping_mapper: for each config {stats_key, op_type, weight} in order, `reward <- reward
    op (weight x stat)`, i.e. ADD r + w s, SUB r - w s, MUL r x (w s), DIV r / (w s) (unchanged where w s = 0).
    op_type defaults to ADD and weight to 1.0, as Trinity-RFT's. The stat is the experience's info[stats_key] (where
    Trinity-RFT's operators put their stats), else its named reward value rewards[stats_key] (a reward function's
    extra entries); an experience with neither keeps its reward for that config, as in Trinity-RFT."""

    def __init__(self, reward_shaping_configs: list[dict] | None = None):
        self.configs = [shaping_config(c, i) for i, c in enumerate(reward_shaping_configs or [])]

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        diffs = []
        for e in experiences:
            before = e.reward
            for key, op, weight in self.configs:
                stat = e.info.get(key, e.rewards.get(key))
                if isinstance(stat, (int, float)) and not isinstance(stat, bool):
                    e.reward = float(OP_TYPES[op](e.reward, weight * stat))
            diffs.append(e.reward - before)
        if not diffs:
            return experiences, {}
        return experiences, {"reward_diff/mean": float(np.mean(diffs)), "reward_diff/min": float(min(diffs)),
                             "reward_diff/max": float(max(diffs))}


def shaping_config(config: Any, index: int) -> tuple[str, str, float]:
    """(stats_key, op_type, weight) of reward_shaping_configs[index]; a config that cannot shape a reward (no
    stats_key, another op_type, a weight that is not a number, a key Trinity-RFT has not) is a ValueError."""
    where = f"reward_shaping_configs[{index}]"
    if not isinstance(config, dict):
        raise ValueError(f"{where} must be a mapping {{stats_key, op_type, weight}}, got {config!r}")
    unknown = sorted(set(config) - {"stats_key", "op_type", "weight"})
    if unknown:
        raise ValueError(f"{where} has no key {unknown[0]!r} (stats_key, op_type, weight)")
    key, op, weight = config.get("stats_key"), config.get("op_type", "ADD"), config.get("weight", 1.0)
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}.stats_key is required: the info entry or named reward the reward is shaped by")
    if op not in OP_TYPES:
        raise ValueError(f"{where}.op_type={op!r}: one of {', '.join(OP_TYPES)}")
    if not isinstance(weight, (int, float)) or isinstance(weight, bool):
        raise ValueError(f"{where}.weight={weight!r} must be a number")
    return key, op, float(weight)


@EXPERIENCE_OPERATORS.register("pass_rate_calculator")
class PassRateCalculator:
    """Trinity-RFT's pass_rate_calculator: each task's pass rate, the mean reward of its responses (its group).
    Trinity-RFT hands it to its task selector; rft has none, so it is stored on each experience as
    info["pass_rate"] (a later reward_shaping_mapper may shape by it) and logged as pass_rate/mean over the
    step's tasks. The rewards are not changed."""

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        by_group: dict[str, list[float]] = defaultdict(list)
        for e in experiences:
            by_group[e.group].append(e.reward)
        rates = {g: float(np.mean(r)) for g, r in by_group.items()}
        for e in experiences:
            e.info["pass_rate"] = rates[e.group]
        return experiences, ({"pass_rate/mean": float(np.mean(list(rates.values())))} if rates else {})


NOT_BUILT = {
    "reward_filter": "not built in rft yet",
    "reward_std_filter": "not built in rft yet (algorithm.filter_groups drops the groups whose rewards all agree)",
    "invalid_reward_filter": "not built in rft yet",
}
"""Trinity-RFT's other experience operators, refused by name with the reason."""


class ExperiencePipeline:
    def __init__(self, specs: list[dict]):
        """`specs`: data_processor.experience_pipeline.operators, each {name, args} (`build_operators`)."""
        self.operators = build_operators(specs, EXPERIENCE_OPERATORS, NOT_BUILT)

    @classmethod
    def from_config(cls, cfg, serve=None) -> ExperiencePipeline | None:
        """The pipeline of `cfg`, None without operators; `serve`: how the run serves a local model folder a
        Data-Juicer LLM operator names (`rft.data_processor.llm`)."""
        specs = cfg.data_processor.experience_pipeline.operators
        if not specs:
            return None
        pipeline = cls(specs)
        servers = 0
        for i, (name, op) in enumerate(pipeline.operators):
            if hasattr(op, "configure"):  # data_juicer: where Data-Juicer runs (data_processor.data_juicer)
                try:
                    op.configure(cfg.data_processor.data_juicer)
                except ValueError as e:
                    raise ValueError(f"operators[{i}] ({name}): {e}") from None
                servers += cfg.data_processor.data_juicer.auto_start
                op.serve = serve
        if servers > 1:
            raise ValueError("operators: several data_juicer operators with data_processor.data_juicer.auto_start "
                             "would each start a server on its port: put their Data-Juicer operators in one list")
        return pipeline

    def close(self) -> None:
        for _, op in self.operators:
            if hasattr(op, "close"):
                op.close()

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        """The experiences after every operator, each naming them in info["operators"]; the operators' metrics as
        experience_pipeline/<metric> and experience_pipeline/experience_count."""
        metrics: dict[str, float] = {}
        for name, op in self.operators:
            experiences, more = op.process(experiences)
            for e in experiences:
                e.info[PROVENANCE] = [*e.info.get(PROVENANCE, []), name]
            metrics.update({f"experience_pipeline/{k}": float(v) for k, v in more.items()})
        metrics["experience_pipeline/experience_count"] = float(len(experiences))
        return experiences, metrics


def build_operators(specs: Any, registry: Registry, refused: dict[str, str],
                    other: tuple[str, Callable[[str, dict], Any]] | None = None) -> list[tuple[str, Any]]:
    """(name, operator) of each {name, args} of `specs`, built from `registry`; `other` = (what they are, build):
    how a name the registry has not is built (else it is refused). An unknown or `refused` name, args the operator
    does not take, or a spec of another shape is a ValueError naming its index."""
    out = []
    for i, spec in enumerate(specs or []):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or set(spec) - {"name", "args"}:
            raise ValueError(f"operators[{i}] must be a mapping {{name, args}}, got {spec!r}")
        name, args = spec["name"], spec.get("args") or {}
        if name in refused:
            raise ValueError(f"operators[{i}].name={name!r}: {refused[name]}")
        if name not in registry and other is None:
            raise ValueError(f"operators[{i}].name={name!r} is not an operator rft has: "
                             f"{', '.join(registry.names())}")
        if not isinstance(args, dict):
            raise ValueError(f"operators[{i}].args must be a mapping, got {args!r}")
        if name not in registry:
            kind, build = other
            try:
                out.append((name, build(name, args)))
            except ValueError as e:
                raise ValueError(f"operators[{i}] ({name}, {kind}): {e}") from None
            continue
        takes = list(inspect.signature(registry.get(name)).parameters)
        for key in args:
            if key not in takes:
                raise ValueError(f"operators[{i}].args.{key}: {name} takes {', '.join(takes) or 'no arguments'}")
        try:
            out.append((name, registry.get(name)(**args)))
        except (TypeError, ValueError) as e:
            raise ValueError(f"operators[{i}].args ({name}): {e}") from None
    return out
