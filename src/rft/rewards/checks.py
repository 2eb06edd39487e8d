"""The checks of the reward keys: custom_reward_function (files, names, weights, typed rewards, the judge),
reward_model, and DAPO's overlong buffer; the reward model's keys have no effect when it is off. And `rft eval`'s
config (verl's evaluation.yaml)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rft.config.checks import CHECKS, UNUSED, CheckContext, check_model_dir, positive
from rft.config.errors import ConfigError


def runs_reward_model(rm: Any) -> bool:
    """Whether the reward model is built and run: enabled, with a score that counts (reward_weight != 0)."""
    return bool(rm.enable) and rm.reward_weight != 0


@UNUSED.register("rewards.reward_model")
def unused_reward_model_keys(cfg: Any) -> dict[str, str]:
    rm = cfg.reward_model
    model_keys = ("model.", "micro_batch_size_per_gpu", "max_length")
    if not rm.enable:
        return {f"reward_model.{key}": "reward_model.enable=false"
                for key in (*model_keys, "reward_weight", "rule_weight")}
    if not runs_reward_model(rm):
        why = (f"reward_model.reward_weight={rm.reward_weight}: the reward model's score counts for nothing, so it is "
               f"neither loaded nor run (a row's score is reward_model.rule_weight={rm.rule_weight} x the reward "
               "function's)")
        return {f"reward_model.{key}": why for key in model_keys}
    return {}


@UNUSED.register("rewards.sandbox_fusion")
def unused_sandbox_keys(cfg: Any) -> dict[str, str]:
    """reward_model.sandbox_fusion is read by the built-in scorer (its code data sources) only, as in verl; its
    max_concurrent bounds the requests to a sandbox URL."""
    crf, keys = cfg.custom_reward_function, ("url", "max_concurrent", "memory_limit_mb")
    if crf.path or crf.reward_fn_type:
        which = (f"custom_reward_function.reward_fn_type={crf.reward_fn_type!r}" if crf.reward_fn_type
                 else f"custom_reward_function.path={crf.path!r}")
        return {f"reward_model.sandbox_fusion.{k}": f"{which}: the run's reward function is not the built-in "
                                                    "scorer, the only reader of the sandbox settings (as in verl)"
                for k in keys}
    if not cfg.reward_model.sandbox_fusion.url:
        return {"reward_model.sandbox_fusion.max_concurrent": "reward_model.sandbox_fusion.url is null: the code "
                                                              "runs on this machine, one process per test case"}
    return {}


@CHECKS.register("rewards.sandbox_fusion")
def check_sandbox_fusion(ctx: CheckContext) -> None:
    """reward_model.sandbox_fusion: an http(s) URL, and positive request and memory limits."""
    sf = ctx.cfg.reward_model.sandbox_fusion
    if sf.url is not None and (not isinstance(sf.url, str) or not sf.url.startswith(("http://", "https://"))):
        raise ConfigError(f"reward_model.sandbox_fusion.url={sf.url!r} must be an http:// or https:// URL (a "
                          "SandboxFusion service's run_code endpoint), or null to run the code on this machine")
    for key in ("max_concurrent", "memory_limit_mb"):
        value = getattr(sf, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"reward_model.sandbox_fusion.{key}={value!r} must be an integer >= 1")


@CHECKS.register("rewards.function")
def check_function(ctx: CheckContext) -> None:
    """custom_reward_function: its file exists, a typed reward's combinations, the names and weights, and (with
    the paths) the functions take the call rft makes."""
    cfg = ctx.cfg
    if ctx.check_paths and cfg.custom_reward_function.path and not Path(cfg.custom_reward_function.path).is_file():
        raise ConfigError(f"custom_reward_function.path: file {cfg.custom_reward_function.path!r} does not exist")
    check_reward_fn_type(cfg.custom_reward_function, cfg.reward_model, len(cfg.workflow.auxiliary_models))
    check_reward_functions(cfg.custom_reward_function)
    if ctx.check_paths:
        check_callable(cfg.custom_reward_function)


def check_callable(crf: Any) -> None:
    """The functions of custom_reward_function.path, imported now: a file that does not import, a name it does not
    define, or a function that cannot take rft's call (a wrong signature) would fail on every row after the model
    loaded (with on_error=zero scoring every row 0)."""
    if crf.path:
        from rft.rewards.custom import load_callable_rewards

        load_callable_rewards(crf.path, [crf.name] if isinstance(crf.name, str) else list(crf.name),
                              crf.reward_kwargs)


def check_reward_functions(crf: Any) -> None:
    """custom_reward_function.name: one name or a list of distinct names (a list needs a path); reward_weights:
    null or one finite number per function (the built-in scorers count as one)."""
    names = [crf.name] if isinstance(crf.name, str) else crf.name
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(
            f"custom_reward_function.name must be a function name or a non-empty list of names, got {crf.name!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"custom_reward_function.name lists a function twice: {names}")
    if len(names) > 1 and not crf.path:
        raise ConfigError(
            f"custom_reward_function.name lists {len(names)} functions: set custom_reward_function.path to the "
            "Python file that defines them"
        )
    if names != ["compute_score"] and not crf.path and not crf.reward_fn_type:
        raise ConfigError(
            f"custom_reward_function.name={crf.name!r} picks a function of custom_reward_function.path, which is not "
            "set: set path to the Python file that defines it, or remove name (the built-in scorers are chosen by "
            "each row's data_source)"
        )
    if crf.reward_weights is not None:
        count = len(names) if crf.path else 1
        weights = list(crf.reward_weights)
        if len(weights) != count or not all(math.isfinite(w) for w in weights):
            raise ConfigError(
                f"custom_reward_function.reward_weights={weights} must hold {count} finite number(s), one per "
                f"reward function ({names if crf.path else crf.reward_fn_type or 'the built-in scorer'})"
            )


def check_reward_fn_type(crf: Any, rm: Any = None, judge_models: int | None = None) -> None:
    """custom_reward_function.reward_fn_type (a typed reward, rft.rewards.typed; its name is checked by the schema
    walk's choices) against the keys that choose another reward function, and num_workers, for any command that
    builds a reward function from that section (`rft eval` too): `rm` the reward_model section (None: the command
    has none); `judge_models` how many auxiliary models an llm_judge can choose from (None: the command serves none,
    so llm_judge is refused)."""
    if crf.num_workers is not None and (isinstance(crf.num_workers, bool) or not isinstance(crf.num_workers, int)
                                        or crf.num_workers < 1):
        raise ConfigError(f"custom_reward_function.num_workers must be an integer >= 1 or null, got {crf.num_workers!r}")
    kind = crf.reward_fn_type
    if crf.reward_kwargs and not crf.path and kind is None:
        raise ConfigError(
            f"custom_reward_function.reward_kwargs={dict(crf.reward_kwargs)!r}: the built-in scorers take no "
            "arguments; they are for the functions of custom_reward_function.path (or llm_judge's settings)"
        )
    if kind is None:
        return
    key = f"custom_reward_function.reward_fn_type={kind!r}"
    if kind == "llm_judge":
        from rft.rewards.judge import check_settings

        if judge_models is None:
            raise ConfigError(f"{key}: the judge is one of rft train's workflow.auxiliary_models, which this command "
                              "does not serve; score with rft train's validation, or choose another reward_fn_type")
        check_settings(dict(crf.reward_kwargs), judge_models)
        if rm is not None and rm.enable:
            raise ConfigError(f"{key} with reward_model.enable=true: rft scores with one of them; remove one")
        if crf.reward_weights is not None:
            raise ConfigError(f"{key} with custom_reward_function.reward_weights: the judge is the only reward "
                              "function; remove reward_weights")
    elif crf.reward_kwargs:
        raise ConfigError(f"{key} with custom_reward_function.reward_kwargs={dict(crf.reward_kwargs)!r}: the typed "
                          "rewards take no arguments; remove reward_kwargs")
    if crf.path:
        raise ConfigError(
            f"{key} and custom_reward_function.path={crf.path!r} are both set: each chooses the run's reward function "
            "and rft would honour only one; remove one of them (to combine a typed reward with your own, import it "
            "in your file: from rft.rewards import " + kind.replace("math_dapo_reward", "math_boxed_reward") + ")"
        )
    if crf.name != "compute_score":
        raise ConfigError(
            f"{key} with custom_reward_function.name={crf.name!r}: name picks a function of custom_reward_function.path"
            ", which a typed reward does not read; remove name"
        )
    if rm is not None and rm.enable and rm.rule_weight == 0:
        raise ConfigError(
            f"{key} is set, but with reward_model.enable=true and reward_model.rule_weight=0 the reward function never "
            "runs: set reward_model.rule_weight (e.g. 1.0) to add its score, or remove reward_fn_type"
        )


@CHECKS.register("rewards.overlong_buffer")
def check_overlong_buffer(ctx: CheckContext) -> None:
    """DAPO's overlong penalty: a buffer inside the response length, a penalty factor >= 0."""
    ob, data = ctx.cfg.reward_model.overlong_buffer, ctx.cfg.data
    if ob.enable:
        if not isinstance(ob.len, int) or not 0 < ob.len <= data.max_response_length:
            raise ConfigError(
                f"reward_model.overlong_buffer.len={ob.len!r} must be an integer in (0, data.max_response_length="
                f"{data.max_response_length}] when reward_model.overlong_buffer.enable=true"
            )
        if not ob.penalty_factor >= 0:
            raise ConfigError(f"reward_model.overlong_buffer.penalty_factor must be >= 0, got {ob.penalty_factor}")


@CHECKS.register("rewards.reward_model")
def check_reward_model(ctx: CheckContext) -> None:
    """reward_model.*: the weights, a reward function that would never run; a model folder and sizes when the
    reward model runs (enabled, reward_weight != 0)."""
    cfg = ctx.cfg
    rm = cfg.reward_model
    if not rm.enable:
        return  # verl: the other reward_model keys have no effect then
    for key in ("reward_weight", "rule_weight"):
        value = getattr(rm, key)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"reward_model.{key} must be a finite number, got {value!r}")
    if runs_reward_model(rm):  # else its model keys have no effect (noted: unused_reward_model_keys)
        check_reward_model_keys(rm, cfg.data, ctx)
    if rm.reward_weight == 0 and rm.rule_weight == 0:
        raise ConfigError("reward_model.reward_weight and reward_model.rule_weight are both 0: every score would be 0")
    if rm.rule_weight == 0 and cfg.custom_reward_function.path:
        raise ConfigError(
            "custom_reward_function.path is set, but with reward_model.enable=true and reward_model.rule_weight=0 "
            "the reward function never runs: set reward_model.rule_weight (e.g. 1.0) to add its score, or remove "
            "custom_reward_function.path"
        )


def check_reward_model_keys(rm: Any, data: Any, ctx: CheckContext) -> None:
    """The reward model's folder (when the paths are checked) and sizes."""
    if not rm.model.path:
        raise ConfigError("reward_model.enable=true needs reward_model.model.path: a sequence-classification model "
                          "folder with one label (e.g. from `rft init-model --preset tiny-rm`)")
    if ctx.check_paths:
        check_model_dir("reward_model.model.path", rm.model.path, ctx)
        if rm.model.input_tokenizer and not Path(rm.model.input_tokenizer).expanduser().is_dir():
            raise ConfigError(f"reward_model.model.input_tokenizer={rm.model.input_tokenizer!r} is not a folder")
        if rm.model.input_tokenizer:
            check_retemplating(rm.model.path)
    for key in ("micro_batch_size_per_gpu", "max_length"):
        positive(f"reward_model.{key}", getattr(rm, key), allow_none=True)
    if ctx.check_paths:
        check_reward_model_folder(rm, data)


def check_retemplating(path: str) -> None:
    """With reward_model.model.input_tokenizer the reward model's own tokenizer renders each conversation with its
    chat template: its folder needs tokenizer files and a chat template (in tokenizer_config.json or a
    chat_template.jinja / .json beside it), else the first step failed after the policy had loaded."""
    import json

    from rft.models.checks import TOKENIZER_FILES

    key = "reward_model.model.path"
    folder = Path(path).expanduser()
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"{key}={path!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES[:3])}, ...), which "
            "reward_model.model.input_tokenizer needs (the reward model's own tokenizer re-tokenizes each "
            "conversation): copy the reward model's tokenizer files into it, or set input_tokenizer to null to "
            "score the policy's tokens as they are (same vocabulary)")
    try:
        in_config = bool(json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        in_config = False
    if not in_config and not any((folder / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        raise ConfigError(
            f"{key}={path!r}: reward_model.model.input_tokenizer is set, but the reward model's tokenizer has no chat "
            "template to render the conversation with (none in tokenizer_config.json, no chat_template.jinja); add "
            "the template it was trained with, or set input_tokenizer to null to score the policy's tokens as they "
            "are (same vocabulary)")


CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
"""How the architectures of a generative model's config.json end (its head predicts tokens, not a score)."""


def check_reward_model_folder(rm: Any, data: Any) -> None:
    """What the reward model's config.json tells before it loads (verl loads it with num_labels=1): a generative
    model (only *ForCausalLM architectures) would get a random score head, a classifier of 2 or more labels has no one
    score to read (verl stops on the head's size mismatch); and a model with a learned position table (GPT-2, OPT)
    must hold its longest input, prompt + response (or reward_model.max_length), or its forward pass would stop on an
    index error mid-run."""
    from rft.models.checks import LEARNED_POSITIONS, model_positions, text_config_json

    key = f"reward_model.model.path={rm.model.path!r}"
    config = text_config_json(rm.model.path)
    if config is None:
        return
    names = [n for n in config.get("architectures") or [] if isinstance(n, str)]
    remote = "AutoModelForSequenceClassification" in (config.get("auto_map") or {})
    if names and not remote and all(n.endswith(CAUSAL_HEADS) for n in names):
        raise ConfigError(
            f"{key} is a generative model ({', '.join(names)}), not a reward model: its score head would be random "
            "weights. Point it at a sequence-classification model with one label (AutoModelForSequenceClassification, "
            "e.g. trained with TRL's RewardTrainer), or score with custom_reward_function / reward_fn_type=llm_judge")
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) and labels else config.get("num_labels", 2)
    if count != 1:
        raise ConfigError(
            f"{key} is a classifier with {count} labels (config.json's id2label / num_labels); a reward model has one "
            "(num_labels=1: its one output is the score, as verl reads it). Use a one-label reward model, or re-save "
            "the classifier's head as one label (e.g. the difference of its two labels' rows)")
    positions = model_positions(config)
    if positions is None or config.get("model_type") not in LEARNED_POSITIONS:
        return
    longest = data.max_prompt_length + data.max_response_length
    table = (f"the {positions} positions of {key} (a learned position table, which has no position past it)")
    fix = (f"set reward_model.max_length={positions} (a longer input keeps its last {positions} tokens, where the "
           "score is read)")
    if rm.max_length is not None:
        if rm.max_length > positions:
            raise ConfigError(f"reward_model.max_length={rm.max_length} is more than {table}: {fix}")
    elif rm.model.input_tokenizer:
        raise ConfigError(f"reward_model.max_length is null, and reward_model.model.input_tokenizer re-templates each "
                          f"conversation to a length not known before the run, which may pass {table}: {fix}")
    elif longest > positions:
        raise ConfigError(f"data.max_prompt_length + data.max_response_length = {data.max_prompt_length} + "
                          f"{data.max_response_length} = {longest} tokens, more than {table}: {fix}")


@CHECKS.register("rewards.reward_manager")
def check_reward_manager(ctx: CheckContext) -> None:
    """The overlong buffer is the dapo reward manager's (as in verl); a reward function's time limit is a number."""
    cfg, crf = ctx.cfg, ctx.cfg.custom_reward_function
    ob = cfg.reward_model.overlong_buffer
    if ob.enable and cfg.reward_model.reward_manager != "dapo":
        raise ConfigError(
            "reward_model.overlong_buffer.enable=true: as in verl, the overlong buffer is applied by the dapo reward "
            f"manager only; set reward_model.reward_manager=dapo (it is {cfg.reward_model.reward_manager!r})"
        )
    if crf.timeout is not None and (isinstance(crf.timeout, bool) or not isinstance(crf.timeout, (int, float))
                                    or not math.isfinite(crf.timeout)):
        raise ConfigError(f"custom_reward_function.timeout must be a number of seconds or null, got {crf.timeout!r}")


@CHECKS.register("rewards.evaluation")
def check_evaluation(ctx: CheckContext) -> None:
    """rft eval (verl's evaluation.yaml): the responses file, a reward function that runs without a model server,
    pass@k's k."""
    cfg = ctx.cfg
    if not cfg.data.path:
        raise ConfigError("data.path is required: a parquet/jsonl file of rows with responses")
    check_reward_fn_type(cfg.custom_reward_function)  # a typed reward; no reward model, no judge model here
    check_reward_functions(cfg.custom_reward_function)
    out = cfg.metrics.output_path
    if out is not None and not str(out).endswith(".json"):  # a parquet or YAML named here was written over
        raise ConfigError(f"metrics.output_path={out!r} must be a .json file (the metrics; <name>.scores.jsonl goes "
                          "beside it), or null for <data.path without suffix>.metrics.json")
    k = cfg.metrics.k
    if k is not None and (not k or not all(isinstance(x, int) and x > 0 for x in k)):
        raise ConfigError(f"metrics.k must be null or a list of positive integers, got {k!r}")
    if ctx.check_paths:
        for key, value in (("data.path", cfg.data.path), ("custom_reward_function.path",
                                                          cfg.custom_reward_function.path)):
            if value and not Path(value).expanduser().is_file():
                raise ConfigError(f"{key}: file {value!r} does not exist")
        check_callable(cfg.custom_reward_function)
