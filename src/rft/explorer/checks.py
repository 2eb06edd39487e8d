"""The checks of the explorer's keys: the taskset's storage, several explorers, workflows (a workflow rft has, its
arguments and tools, what it combines with) and DAPO's dynamic sampling."""

from __future__ import annotations

from pathlib import Path

from rft.algorithms import estimator_spec
from rft.config.checks import CHECKS, UNUSED, CheckContext, check_model_dir, positive
from rft.config.errors import ConfigError
from rft.config.suggest import did_you_mean
from rft.sync.schedule import is_synchronous

ALFWORLD_WORKFLOWS = ("alfworld_workflow", "step_wise_alfworld_workflow", "RAFT_alfworld_workflow",
                     "RAFT_reflect_alfworld_workflow")
"""The workflows that play ALFWorld's games (rft.explorer.alfworld): the alfworld package, a row's game file."""
AGENTSCOPE_WORKFLOWS = ("agentscope_react_workflow", "agentscope_react_math_workflow")
"""Trinity-RFT's workflows of AgentScope's ReAct agent (rft.explorer.agentscope): the agentscope package, the
endpoint's history."""
REPLY_PREFIX_WORKFLOWS = ("simple_workflow", "math_workflow", "math_boxed_workflow", "bots_math_boxed_workflow",
                          "bots_ref_eval_collect_math_boxed_workflow", "simple_mm_workflow")
"""The built-in workflows whose one reply continues data.reply_prefix (Trinity-RFT's: the simple workflows'
format_messages put it last)."""
BUILTIN_WORKFLOWS = ("simple_workflow", "math_workflow", "tool_call_workflow", "math_boxed_workflow",
                     "simple_mm_workflow", "on_policy_distill_math_workflow", "math_ruler_workflow",
                     "frozen_lake_workflow", "rubric_judge_workflow", "toolcall_workflow", "sciworld_workflow",
                     "bots_math_boxed_workflow", "bots_ref_eval_collect_math_boxed_workflow",
                     "math_trainable_ruler_workflow", *ALFWORLD_WORKFLOWS, "learn2ask_workflow",
                     *AGENTSCOPE_WORKFLOWS)
BOXED_WORKFLOW_REWARDS = {"math_boxed_workflow": "math_boxed_reward",
                          "bots_math_boxed_workflow": "bots_math_boxed_reward",
                          "bots_ref_eval_collect_math_boxed_workflow": "bots_math_boxed_reward"}
"""The \\boxed{} workflows and the reward function whose think format part Trinity-RFT's with_think adds."""
OWN_PROMPT_WORKFLOWS = ("frozen_lake_workflow", "toolcall_workflow")
"""The workflows that write every message themselves: their rows need no prompt (data.prompt_key may be null). The
Trinity dialect keeps the same names (`rft.dialects.trinity.OWN_PROMPT_WORKFLOWS`: it sits below the explorer)."""
ENV_REWARD_WORKFLOWS = ("frozen_lake_workflow", "rubric_judge_workflow", "toolcall_workflow", "sciworld_workflow",
                        *ALFWORLD_WORKFLOWS, "learn2ask_workflow", *AGENTSCOPE_WORKFLOWS)
"""The workflows whose environment (or judge) computes the reward: no reward function reads their rows."""
TRUTHLESS_WORKFLOWS = ("frozen_lake_workflow", "sciworld_workflow", *ALFWORLD_WORKFLOWS)
"""The environment workflows that read no reference answer: their rows need no response column (Trinity-RFT's read
a missing one as None; its RAFT ALFWorld example names a `task_desc` its own data script does not write)."""


def check_auxiliary_sampling(index: int, spec: dict) -> None:
    """An auxiliary model's max_tokens (an integer >= 1) and temperature (a number >= 0): a wrong one failed only when
    the model was served, after the policy had loaded, as an error reported as a bug in rft."""
    key = f"workflow.auxiliary_models[{index}]"
    tokens = spec.get("max_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise ConfigError(f"{key}.max_tokens={tokens!r} must be an integer >= 1 (new tokens per reply)")
    temperature = spec.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not temperature >= 0):
        raise ConfigError(f"{key}.temperature={temperature!r} must be a number >= 0 (0: greedy, the default)")


def check_auxiliary_positions(index: int, spec: dict, default_tokens: int) -> None:
    """An auxiliary model's replies of max_tokens fit its positions (read from its config.json): past them a model
    with a learned position table (GPT-2) stops on an index error, and any other generates what it was never trained
    on, one token at a time for every row of every step (a judge that seems to hang)."""
    from rft.models.checks import model_positions, text_config_json

    config = text_config_json(spec["model_path"])
    positions = model_positions(config) if config is not None else None
    tokens = spec.get("max_tokens") or default_tokens
    if positions is not None and tokens >= positions:
        key = f"workflow.auxiliary_models[{index}]"
        said = f"{key}.max_tokens={tokens}" if spec.get("max_tokens") else \
            f"{key}.max_tokens is unset, so data.max_response_length={tokens}"
        raise ConfigError(f"{said}: replies that long, after the prompt, pass the {positions} positions of "
                          f"{spec['model_path']!r}; set {key}.max_tokens to what a reply needs (a judge's verdict: a "
                          "few tokens)")


@CHECKS.register("explorer.filter_groups")
def check_filter_groups(ctx: CheckContext) -> None:
    """DAPO's dynamic sampling keeps the groups whose metric varies: it needs a metric, and a whole number of
    generation batches, each of verl's data.gen_batch_size prompts (default data.train_batch_size): another size
    only with the filter (verl's main trainer would train on every prompt of it), and with several processes a
    multiple of ppo_mini_batch_size (each shares every mini-batch of it)."""
    fg = ctx.cfg.algorithm.filter_groups
    if fg.enable and not fg.metric:
        raise ConfigError(
            "algorithm.filter_groups.enable=true needs algorithm.filter_groups.metric: score, seq_reward, "
            "seq_final_reward, or a numeric key the reward function returns (e.g. acc)"
        )
    if not isinstance(fg.max_num_gen_batches, int):
        raise ConfigError(
            f"algorithm.filter_groups.max_num_gen_batches must be an integer (<= 0: no limit), got "
            f"{fg.max_num_gen_batches!r}"
        )
    data = ctx.cfg.data
    if data.gen_batch_size is None or data.gen_batch_size == data.train_batch_size:
        return
    gen = f"data.gen_batch_size={data.gen_batch_size!r}"
    if not fg.enable:
        # verl's main trainer draws gen_batch_size prompts a step and trains on all of them without the filter
        raise ConfigError(
            f"{gen} (verl's DAPO recipe: prompts per generation batch of dynamic sampling) differs from "
            f"data.train_batch_size={data.train_batch_size} without algorithm.filter_groups.enable: verl's main "
            "trainer would then train on gen_batch_size prompts a step; set algorithm.filter_groups.enable=true "
            "(with its metric), or remove data.gen_batch_size"
        )
    if isinstance(data.gen_batch_size, bool) or not isinstance(data.gen_batch_size, int) or data.gen_batch_size < 1:
        raise ConfigError(f"{gen} must be a whole number of prompts >= 1 (or null: data.train_batch_size)")
    mini = ctx.cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    if ctx.world_size > 1 and isinstance(mini, int) and mini > 0 and data.gen_batch_size % mini:
        # each process generates its share of every mini-batch of a generation batch, as of a step's prompts
        raise ConfigError(
            f"{gen} with {ctx.world_size} processes must be a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}: each process generates its share of every "
            f"mini-batch of a generation batch's prompts; set it to {-(-data.gen_batch_size // mini) * mini}"
        )


@CHECKS.register("explorer.taskset")
def check_taskset(ctx: CheckContext) -> None:
    """A taskset read as a stream (queue) has no epochs; one in a database runs in one process for now."""
    cfg = ctx.cfg
    if cfg.data.task_storage == "queue" and not cfg.trainer.total_training_steps:
        raise ConfigError("data.task_storage=queue reads tasks as a stream, which has no epochs: set "
                          "trainer.total_training_steps")
    if cfg.data.task_storage != "file" and ctx.world_size > 1:
        raise ConfigError(f"data.task_storage={cfg.data.task_storage} runs in one process for now: set "
                          "trainer.nnodes and trainer.n_gpus_per_node to 1")


@CHECKS.register("explorer.explorers")
def check_explorers(ctx: CheckContext) -> None:
    """trainer.explorer_num / explorer_rank: several explorers share a database buffer and take turns at the steps."""
    cfg = ctx.cfg
    t = cfg.trainer
    if not isinstance(t.explorer_num, int) or t.explorer_num < 1:
        raise ConfigError(f"trainer.explorer_num must be an integer >= 1, got {t.explorer_num!r}")
    if not isinstance(t.explorer_rank, int) or not 0 <= t.explorer_rank < t.explorer_num:
        raise ConfigError(f"trainer.explorer_rank={t.explorer_rank!r} must be in [0, trainer.explorer_num="
                          f"{t.explorer_num})")
    if t.explorer_num == 1:
        return
    n = f"trainer.explorer_num={t.explorer_num}"
    if is_synchronous(cfg):
        raise ConfigError(f"{n}: the one-process loop (mode both, sync_interval 1, sync_offset 0) has one engine; "
                          "set synchronizer.sync_interval or sync_offset to run explorers apart, or explorer_num 1")
    if cfg.experience_buffer.storage_type == "file":
        raise ConfigError(f"{n}: explorers share a database buffer; experience_buffer.storage_type=file is not one")
    if cfg.data.task_storage != "file":
        raise ConfigError(f"{n}: explorers take turns at the steps of a taskset they each read whole; "
                          f"data.task_storage={cfg.data.task_storage} is a stream they would compete for; use "
                          "files, or explorer_num 1")


@CHECKS.register("explorer.selector")
def check_selector_processes(ctx: CheckContext) -> None:
    """data.selector difficulty_based learns in one explorer process: not where the trainer's processes share the
    explorer's tasks (the one-process loop on several; apart, the explorer is one process beside them), nor with
    several explorers."""
    from rft.data.checks import difficulty_based_refusal

    cfg = ctx.cfg
    if cfg.data.selector.selector_type != "difficulty_based":
        return
    if ctx.world_size > 1 and is_synchronous(cfg):
        raise difficulty_based_refusal(f"{ctx.world_size} processes share the explorer's tasks")
    if cfg.trainer.explorer_num > 1:
        raise difficulty_based_refusal(f"trainer.explorer_num={cfg.trainer.explorer_num} explorers draw from one "
                                       "taskset")


def check_frozen_lake(args: dict) -> None:
    """frozen_lake_workflow's arguments, as Trinity-RFT reads them, and gymnasium, before the model loads."""
    for key in ("env_max_steps", "agent_max_steps"):
        value = args.get(key, 8)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"workflow.args.{key}={value!r} must be an integer >= 1")
    if not isinstance(args.get("is_slippery", False), bool):
        raise ConfigError(f"workflow.args.is_slippery={args['is_slippery']!r} must be true or false")
    desc = args.get("desc")
    if desc is not None:
        rows = list(desc) if isinstance(desc, (list, tuple)) else None
        if not rows or not all(isinstance(r, str) and len(r) == len(rows[0]) and set(r) <= set("SFHG") for r in rows) \
                or sum(r.count("S") for r in rows) != 1 or sum(r.count("G") for r in rows) < 1:
            raise ConfigError(f"workflow.args.desc={desc!r} must be a map: rows of S F H G of one length, one S and "
                              "a G (or leave it out: each row's seed, size and p make one)")
    from rft.explorer.frozen_lake import require_gymnasium

    try:
        require_gymnasium()
    except Exception as e:
        raise ConfigError(str(e)) from None


def missing_environment(workflow: str) -> str | None:
    """Why the environment `workflow` steps cannot start here (its package, ScienceWorld's Java), in one line naming
    the extra; None where it can, or for a workflow without one."""
    from rft.explorer.agentscope import require_agentscope
    from rft.explorer.alfworld import require_alfworld
    from rft.explorer.sciworld import require_scienceworld

    require = {"sciworld_workflow": require_scienceworld, **dict.fromkeys(ALFWORLD_WORKFLOWS, require_alfworld),
               **dict.fromkeys(AGENTSCOPE_WORKFLOWS, require_agentscope)}.get(workflow)
    if require is None:
        return None
    try:
        require()
    except Exception as e:
        return str(e)
    return None


@CHECKS.register("explorer.workflow")
def check_workflow(ctx: CheckContext) -> None:
    """workflow.*: a workflow rft has (or a file that may register it), sizes in range, and what the workflow
    machinery does not combine with (a reward model, ReMax's greedy baselines, dynamic sampling, several
    processes)."""
    cfg, check_paths = ctx.cfg, ctx.check_paths
    wf = cfg.workflow
    positive("workflow.runner_per_model", wf.runner_per_model)
    if not wf.max_timeout > 0:
        raise ConfigError(f"workflow.max_timeout must be > 0 seconds, got {wf.max_timeout}")
    if not isinstance(wf.max_retry_times, int) or wf.max_retry_times < 0:
        raise ConfigError(f"workflow.max_retry_times must be an integer >= 0, got {wf.max_retry_times!r}")
    if not isinstance(wf.endpoint_port, int) or not 0 <= wf.endpoint_port <= 65535:
        raise ConfigError(f"workflow.endpoint_port must be 0 (a free port) or a port number, got {wf.endpoint_port!r}")
    if wf.reasoning_parser is not None and not (wf.endpoint or wf.enable_history):
        raise ConfigError(f"workflow.reasoning_parser={wf.reasoning_parser!r} has no effect without the endpoint: it "
                          "splits the endpoint's chat replies (set workflow.endpoint or workflow.enable_history), or "
                          "remove it")
    if wf.type not in BUILTIN_WORKFLOWS and not wf.path:
        meant = did_you_mean(wf.type, BUILTIN_WORKFLOWS) if isinstance(wf.type, str) else ""
        raise ConfigError(f"workflow.type={wf.type!r} is not one of rft's workflows {list(BUILTIN_WORKFLOWS)}"
                          + (f": {meant} Else set" if meant else ": set") + " workflow.path to the Python file "
                          "that registers it (rft.explorer.workflow.register_workflow)")
    if wf.path and check_paths and not Path(wf.path).expanduser().exists():
        raise ConfigError(f"workflow.path: {wf.path!r} does not exist (a Python file, or a folder of them)")
    if check_paths:  # `rft config show` notes it instead (the config means the same without the package)
        problem = missing_environment(wf.type)
        if problem:
            raise ConfigError(problem)
    if wf.type in ENV_REWARD_WORKFLOWS:
        crf = cfg.custom_reward_function
        if crf.path or crf.reward_fn_type or cfg.reward_model.enable:
            raise ConfigError(f"workflow.type={wf.type} computes its own reward (the environment's, Tool-N1's, the "
                              "judge's); custom_reward_function / reward_model would not be read: remove them")
    if wf.type == "rubric_judge_workflow" and not wf.auxiliary_models:
        raise ConfigError("workflow.type='rubric_judge_workflow' rates each response against the row's rubrics "
                          "with a judge, the first of workflow.auxiliary_models (Trinity-RFT's "
                          "explorer.auxiliary_models), which is empty: give one")
    if wf.type == "learn2ask_workflow" and not wf.auxiliary_models:
        raise ConfigError("workflow.type='learn2ask_workflow' scores each question with a judge, the first of "
                          "workflow.auxiliary_models (Trinity-RFT's explorer.auxiliary_models), which is empty: give "
                          "one")
    if wf.type == "math_ruler_workflow" and not wf.auxiliary_models:
        raise ConfigError("workflow.type='math_ruler_workflow' scores each group's responses with a judge, the first "
                          "of workflow.auxiliary_models (Trinity-RFT's explorer.auxiliary_models), which is empty: "
                          "give one")
    for i, spec in enumerate(wf.auxiliary_models):
        if not isinstance(spec, dict) or not spec.get("model_path"):
            raise ConfigError(f"workflow.auxiliary_models[{i}] must be a mapping with model_path, got {spec!r}")
        unknown = set(spec) - {"model_path", "temperature", "max_tokens", "tensor_parallel_size", "engine_type",
                               "name", "enable_thinking"}
        if unknown:
            raise ConfigError(f"workflow.auxiliary_models[{i}]: keys {sorted(unknown)} are not honoured; rft takes "
                              "model_path, temperature, max_tokens, enable_thinking (and tensor_parallel_size 1, "
                              "engine_type hf)")
        if spec.get("enable_thinking") not in (None, True, False):
            raise ConfigError(f"workflow.auxiliary_models[{i}].enable_thinking must be true, false or null, got "
                              f"{spec['enable_thinking']!r}")
        if spec.get("tensor_parallel_size", 1) != 1 or spec.get("engine_type", "hf") not in ("hf",):
            raise ConfigError(f"workflow.auxiliary_models[{i}]: rft serves auxiliary models with its hf engine in "
                              "the explorer's process (tensor_parallel_size 1, engine_type hf)")
        check_auxiliary_sampling(i, spec)
        if check_paths:
            check_model_dir(f"workflow.auxiliary_models[{i}].model_path", spec["model_path"], ctx)
            check_auxiliary_positions(i, spec, cfg.data.max_response_length)
    if cfg.data.prompt_key is None and wf.type not in OWN_PROMPT_WORKFLOWS and not wf.path:
        raise ConfigError(f"data.prompt_key=null (rows without a prompt) needs a workflow that writes its own "
                          f"messages ({', '.join(OWN_PROMPT_WORKFLOWS)}), not workflow.type={wf.type!r}: name the "
                          "prompt column")
    if cfg.data.reply_prefix is not None and wf.type in BUILTIN_WORKFLOWS and wf.type not in REPLY_PREFIX_WORKFLOWS:
        raise ConfigError(f"data.reply_prefix={cfg.data.reply_prefix!r} starts the one reply of a one-turn workflow "
                          f"({', '.join(REPLY_PREFIX_WORKFLOWS)}, or one of your own that chats the task's messages); "
                          f"workflow.type={wf.type!r} writes its own conversation: remove reply_prefix")
    if wf.type == "frozen_lake_workflow":
        check_frozen_lake(wf.args or {})
    if wf.type in AGENTSCOPE_WORKFLOWS:
        if not wf.enable_history:
            raise ConfigError(f"workflow.type={wf.type} drives the model through the OpenAI-compatible endpoint and "
                              "learns the calls it records: set workflow.enable_history=true (Trinity: "
                              "explorer.rollout_model.enable_history)")
        kind = (wf.args or {}).get("type", "gsm8k")
        if kind != "gsm8k":
            raise ConfigError(f"workflow.args.type={kind!r}: rft has Trinity-RFT's gsm8k template of {wf.type} "
                              "(its email_search template needs Trinity's Enron mail database and an LLM judge)")
    if wf.type in ALFWORLD_WORKFLOWS and "max_env_steps" in (wf.args or {}):
        positive("workflow.args.max_env_steps", wf.args["max_env_steps"])
    if wf.type == "learn2ask_workflow":  # Trinity's reward reads any other train_mode as Rs: refused here
        for key, allowed in (("train_mode", ("Ra+Rs", "Ra", "Rs")), ("fusion_mode", ("default", "sum"))):
            if (wf.args or {}).get(key, allowed[0]) not in allowed:
                raise ConfigError(f"workflow.args.{key}={wf.args[key]!r} is not one of {list(allowed)} "
                                  "(learn2ask_workflow's reward modes)")
    if wf.type == "simple_workflow":
        judged = cfg.custom_reward_function.reward_fn_type == "llm_judge"  # the judge is an auxiliary model
        for key, value, default in (("path", wf.path, None), ("args", wf.args, {}), ("tool_config_path",
                                                                                      wf.tool_config_path, None),
                                    ("interaction_config_path", wf.interaction_config_path, None),
                                    ("enable_history", wf.enable_history, False), ("endpoint", wf.endpoint, False),
                                    ("auxiliary_models", [] if judged else wf.auxiliary_models, [])):
            if value != default:
                raise ConfigError(
                    f"workflow.{key}={value!r} has no effect with workflow.type=simple_workflow (one batched chat turn "
                    "per sample, no workflow code): set workflow.type to the workflow that uses it, or remove it"
                )
        return
    why = None
    if cfg.reward_model.enable:
        why = "reward_model.enable (the reward model scores whole batches; workflows score their own experiences)"
    elif "reward_baselines" in estimator_spec(cfg.algorithm.adv_estimator).needs:
        why = f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} (its greedy baseline is one more generation of "\
              "the batched single-turn path)"
    elif cfg.algorithm.filter_groups.enable:
        why = "algorithm.filter_groups (dynamic sampling regenerates batches on the single-turn path)"
    if why:
        raise ConfigError(f"workflow.type={wf.type!r} does not combine with {why}; use workflow.type=simple_workflow "
                          "or drop it")
    if wf.type in BUILTIN_WORKFLOWS:  # a misspelt argument would be read as its default
        from rft.explorer.workflow import WORKFLOWS

        known = WORKFLOWS.get(wf.type).ARGS
        unknown = sorted(set(wf.args or {}) - known)
        if unknown:
            raise ConfigError(f"workflow.args: {unknown} are not arguments of workflow.type={wf.type!r}, which "
                              f"takes {sorted(known) or 'none'} (in YAML flow style a space follows the colon: "
                              "{max_turns: 2})")
    if wf.type in BOXED_WORKFLOW_REWARDS:  # Trinity reads them as a flag and a number
        args, own = wf.args or {}, BOXED_WORKFLOW_REWARDS[wf.type]
        for key in ("with_think", "use_base"):
            if not isinstance(args.get(key, False), bool):
                raise ConfigError(f"workflow.args.{key}={args[key]!r} must be true or false")
        kind = cfg.custom_reward_function.reward_fn_type
        if args.get("with_think", False) and kind != own:
            raise ConfigError(f"workflow.args.with_think=true adds {own}'s think format part (Trinity-RFT "
                              f"passes it to that reward function only); with custom_reward_function.reward_fn_type="
                              f"{kind!r} it has no effect: remove it or score with {own}")
        coef = args.get("format_score_coef", 0.1)
        if isinstance(coef, bool) or not isinstance(coef, (int, float)) or coef < 0:
            raise ConfigError(f"workflow.args.format_score_coef={coef!r} must be a number >= 0 (the format penalty "
                              "of a reply without one <think>...</think>; 0 counts as 0.1, as in Trinity-RFT)")
    if wf.tool_config_path and wf.type != "tool_call_workflow":
        raise ConfigError(f"workflow.tool_config_path={wf.tool_config_path!r} (verl's tool config) is read by "
                          f"workflow.type=tool_call_workflow, not {wf.type!r}: set that, or remove it")
    if wf.interaction_config_path and wf.type != "tool_call_workflow":
        raise ConfigError(f"workflow.interaction_config_path={wf.interaction_config_path!r} (verl's interactions) is "
                          f"read by workflow.type=tool_call_workflow, not {wf.type!r}: set that, or remove it")
    if wf.interaction_config_path and check_paths:  # each class imported and built now, before the model loads
        from rft.explorer.interactions import load_interactions

        load_interactions(wf.interaction_config_path)
    turns = (wf.args or {}).get("max_user_turns") if wf.type == "tool_call_workflow" else None
    if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int) or turns < 1):
        raise ConfigError(f"workflow.args.max_user_turns={turns!r} must be an integer >= 1 (the turns between the "
                          "model's: tool results and an interaction's answers), or null")
    parser = (wf.args or {}).get("tool_call_parser") if wf.type == "tool_call_workflow" else None
    if parser is not None:  # else every conversation's first reply would fail its task
        from rft.explorer.tools import PARSERS

        if parser not in PARSERS:
            raise ConfigError(f"workflow.args.tool_call_parser={parser!r} is not a tool-call parser; choose one of "
                              f"{list(PARSERS)}, or leave it out for the model family's (workflow.tool_call_parser)")
    tools_path = (wf.args or {}).get("tools_path") if wf.type == "tool_call_workflow" else None
    if (tools_path or wf.tool_config_path) and check_paths:  # loaded now: a file that does not import, or a tool
        # with no function, would fail every task of every step
        from rft.explorer.tools import load_tools

        tools = load_tools(str(tools_path) if tools_path else None)
        if wf.tool_config_path:
            from rft.explorer.verl_tools import check_tool_config

            check_tool_config(wf.tool_config_path, tools)


@CHECKS.register("explorer.streaming")
def check_streaming(ctx: CheckContext) -> None:
    """async_training (verl's fully-async keys): streaming runs in the async path only, where the run's explorer and
    trainer take turns in one process with the engine in its server (`rft.explorer.streaming`); what it cannot
    honour is refused by name."""
    from rft.rollout.engines import unserved_reason

    cfg, a = ctx.cfg, ctx.cfg.async_training
    if a.staleness_threshold is None:
        for key, value, default in (("partial_rollout", a.partial_rollout, True),
                                    ("deterministic", a.deterministic, False)):
            if value != default:
                raise ConfigError(f"async_training.{key}={value} has no effect: streaming is off "
                                  "(async_training.staleness_threshold is null); set staleness_threshold (0 or more) "
                                  f"with actor_rollout_ref.rollout.mode=async, or drop async_training.{key}")
        return
    where = f"async_training.staleness_threshold={a.staleness_threshold:g}"
    if a.staleness_threshold < 0:
        raise ConfigError(f"{where}: it must be 0 or more (the groups outstanding beyond a step's, as a share of "
                          "data.train_batch_size)")
    why = unserved_reason(cfg, ctx.world_size)
    if why is None and not is_synchronous(cfg):
        s = cfg.synchronizer
        why = (f"synchronizer.sync_interval={s.sync_interval}, sync_offset={s.sync_offset} (streaming bounds the "
               "explorer's lead itself: leave them 1 and 0)")
    if why is None and a.partial_rollout and not a.deterministic and cfg.actor_rollout_ref.rollout.name == "vllm":
        raise ConfigError("async_training.partial_rollout=true with actor_rollout_ref.rollout.name='vllm': vLLM "
                          "cannot reload its weights under requests in flight (its KV cache holds the old "
                          "weights' keys and values, and the reload rebuilds its kernels' weights), so its server "
                          "finishes them before an update; set async_training.partial_rollout=false, or use "
                          "rollout.name=hf for partial rollouts")
    if why is None and cfg.algorithm.filter_groups.enable:
        why = "algorithm.filter_groups.enable=true (dynamic sampling draws further batches; a stream takes groups)"
    if why is None and cfg.data.task_storage == "queue":
        why = "data.task_storage='queue' (a stream names its tasks by their dataset positions)"
    if why is None and "reward_baselines" in estimator_spec(cfg.algorithm.adv_estimator).needs:
        why = (f"algorithm.adv_estimator={cfg.algorithm.adv_estimator!r} (its greedy baselines are a second "
               "generation beside the stream)")
    if why is not None:
        raise ConfigError(f"{where} streams the rollout through the engine server of actor_rollout_ref.rollout."
                          f"mode=async, which this run cannot have: {why}; set that, or leave "
                          "async_training.staleness_threshold null")


@UNUSED.register("explorer.ground_truth")
def unused_truth_keys(cfg) -> dict[str, str]:
    """The response columns under a workflow that reads no reference answer (`TRUTHLESS_WORKFLOWS`)."""
    kind = cfg.workflow.type
    if kind not in TRUTHLESS_WORKFLOWS:
        return {}
    why = f"workflow.type={kind} is paid by its environment and reads no reference answer"
    return {"data.response_key": why, "data.val_response_keys": why}


@CHECKS.register("explorer.external_model")
def check_external_model(ctx: CheckContext) -> None:
    """external_model: mode bench only, a single-turn workflow, the rows on disk (no task database, no data class),
    text only; its base URL's variable set where the run starts (`ctx.check_paths`)."""
    from rft.explorer.external import EXTERNAL_WORKFLOWS, missing_api

    cfg, ext = ctx.cfg, ctx.cfg.external_model
    if not ext.enable:
        return
    if cfg.trainer.mode != "bench":
        raise ConfigError(f"external_model.enable: a model behind an API is evaluated in trainer.mode=bench only, "
                          f"not {cfg.trainer.mode} (rft trains and explores model folders it loads); set "
                          "trainer.mode=bench or remove it")
    if cfg.workflow.type not in EXTERNAL_WORKFLOWS or cfg.workflow.path:
        raise ConfigError(f"external_model.enable: workflow.type={cfg.workflow.type} is not a single-turn workflow "
                          f"an API model can run ({', '.join(EXTERNAL_WORKFLOWS)}: one chat turn, the replies scored "
                          "by their text); the others need the model's tokens")
    if (cfg.workflow.args or {}).get("use_base"):
        raise ConfigError("external_model.enable: workflow.args.use_base sends a raw text prompt, which a chat API "
                          "does not take; remove it")
    if cfg.data.task_storage != "file" or cfg.data.custom_cls.path:
        raise ConfigError("external_model.enable: the tasks come from data.val_files as rft reads them (no task "
                          "database, no data.custom_cls)")
    if cfg.reward_model.enable or cfg.custom_reward_function.reward_fn_type == "llm_judge":
        raise ConfigError("external_model.enable: the replies are scored by a reward function (a reward model or a "
                          "judge reads token ids or a local model); remove reward_model.enable / the llm_judge")
    if cfg.reward_model.overlong_buffer.enable:
        raise ConfigError("external_model.enable: reward_model.overlong_buffer counts a reply's tokens, which an API "
                          "does not return; remove it")
    problem = missing_api(ext) if ctx.check_paths else None
    if problem is not None:
        raise ConfigError(problem)


@UNUSED.register("explorer.external_model")
def unused_with_an_api_model(cfg) -> dict[str, str]:
    """What a bench of a model behind an API does not read: the policy's training, its reference and critic, the
    checkpoints a bench of a run reads, the training rollout's sampling (validation's val_kwargs are read)."""
    if not cfg.external_model.enable:
        return {}
    why = "external_model.enable evaluates a model behind an API (no model loads, nothing trains)"
    return {prefix: why for prefix in ("actor_rollout_ref.actor.", "actor_rollout_ref.ref.", "critic.", "algorithm.",
                                       "trainer.val_before_train", "trainer.bench_on_latest_checkpoint",
                                       "actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.top_p",
                                       "actor_rollout_ref.rollout.top_k", "actor_rollout_ref.rollout.n")}
