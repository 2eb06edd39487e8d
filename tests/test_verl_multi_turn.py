"""verl's multi-turn rollout keys (actor_rollout_ref.rollout.multi_turn.*) with verl's meaning on rft's tool workflow:
enable is tool_call_workflow, max_assistant_turns its model turns (null: max_model_len // 3, as verl), format its
parser, tool_config_path verl's tool-config YAML (its schemas declared to the model, each run by rft's tool of that
name, a tool rft has no function for refused by its class before the model loads), interaction_config_path verl's
interactions (the user's turns after each reply, their scores to the reward function), max_user_turns the turns
between the model's; what rft does not do (verl's cuts of tool calls and responses, re-rendering with the template)
is refused by name."""

from __future__ import annotations

import json

import pytest
import torch
from rl_helpers import make_assets, rl_config

from rft.cli import main

MT = "actor_rollout_ref.rollout.multi_turn"

TOOL_CONFIG = """\
tools:
  - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
    config:
      type: native
    tool_schema:
      type: "function"
      function:
        name: "{name}"
        description: "arithmetic"
        parameters:
          type: "object"
          properties:
            expression:
              type: "string"
          required: ["expression"]
"""


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


def tool_config(tmp_path, name: str = "calc"):
    path = tmp_path / f"{name}_tool_config.yaml"
    path.write_text(TOOL_CONFIG.format(name=name))
    return path


def test_verls_multi_turn_keys_are_the_tool_workflows(assets, tmp_path):
    tools = tool_config(tmp_path)
    cfg = rl_config(assets, tmp_path / "out", f"{MT}.enable=true", f"{MT}.max_assistant_turns=3",
                    f"{MT}.format=hermes", f"{MT}.tool_config_path={tools}", f"{MT}.max_user_turns=5",
                    f"{MT}.use_inference_chat_template=false", f"{MT}.tokenization_sanity_check_mode=strict",
                    f"{MT}.interaction_config_path=null")
    wf = cfg.workflow
    assert (wf.type, wf.args, wf.tool_call_parser, wf.tool_config_path) == (
        "tool_call_workflow", {"max_turns": 3, "max_user_turns": 5}, "hermes", str(tools))
    # null: verl's max_model_len // 3, the prompt's and the response's lengths (32 + 6 here)
    cfg = rl_config(assets, tmp_path / "out", f"{MT}.enable=true", f"{MT}.max_assistant_turns=null")
    assert cfg.workflow.args == {"max_turns": (32 + 6) // 3}
    cfg = rl_config(assets, tmp_path / "out", f"{MT}.enable=true", "actor_rollout_ref.rollout.max_model_len=90")
    assert cfg.workflow.args == {"max_turns": 30}
    # without enable the section is verl's defaults of a feature the run does not use
    cfg = rl_config(assets, tmp_path / "out", f"{MT}.enable=false", f"{MT}.max_assistant_turns=3",
                    f"{MT}.max_parallel_calls=1", f"{MT}.interaction_config_path=null")
    assert cfg.workflow.type == "simple_workflow" and cfg.workflow.args == {}


@pytest.mark.parametrize("format, parser", [("qwen25", "hermes"), ("llama3", "llama3_json"), ("mistral", "mistral"),
                                            ("deepseekv3", "deepseek_v3"), ("pythonic", "pythonic"),
                                            ("llama3_json", "llama3_json")])
def test_sglangs_tool_call_parser_names_are_rfts_parsers(assets, tmp_path, format, parser):
    cfg = rl_config(assets, tmp_path / "out", f"{MT}.enable=true", f"{MT}.format={format}")
    assert cfg.workflow.tool_call_parser == parser


@pytest.mark.parametrize("override, named", [
    (f"{MT}.max_user_turns=0", "integer >= 1"),
    (f"{MT}.max_parallel_calls=1", "runs every tool call"),
    (f"{MT}.max_tool_response_length=256", "whole response"),
    (f"{MT}.tool_response_truncate_side=middle", "whole response"),
    (f"{MT}.use_inference_chat_template=true", "keeps the tokens"),
    (f"{MT}.format=kimi_k2", "['hermes', 'pythonic', 'mistral', 'llama3_json', 'deepseek_v3']"),
    (f"{MT}.max_assistant_turns=0", "integer >= 1"),
    (f"{MT}.max_assistant_turn=5", "not a key of verl's multi_turn section"),
    ("workflow.type=math_workflow", "workflow.type='math_workflow' is set too"),
])
def test_what_rft_does_not_do_is_refused_by_its_verl_key(assets, tmp_path, capsys, override, named):
    code = main(["config", "show", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", f"{MT}.enable=true", override])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("rft: error: ") and named in err[-1], err
    key = override.split("=")[0]
    assert key in err[-1] or key == "workflow.type" and f"{MT}.enable" in err[-1], err[-1]


def test_a_tool_rft_has_no_function_for_is_refused_by_its_class_before_the_model_loads(assets, tmp_path, capsys):
    tools = tool_config(tmp_path, "calc_gsm8k_reward")
    code = main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", f"{MT}.enable=true",
                 f"{MT}.tool_config_path={tools}", f"trainer.default_local_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not (tmp_path / "out").exists()
    assert "'calc_gsm8k_reward' (verl's class verl.tools.gsm8k_tool.Gsm8kTool) has no function" in err[-1], err
    assert "workflow.args.tools_path" in err[-1]
    (tmp_path / "bad.yaml").write_text("tools: [{class_name: x}]\n")
    assert main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", f"{MT}.enable=true",
                 f"{MT}.tool_config_path={tmp_path / 'bad.yaml'}", f"trainer.default_local_dir={tmp_path / 'o'}"]) == 2
    assert "tools[0] needs a tool_schema with function.name" in capsys.readouterr().err


class CallingEngine:
    """Calls the file's tool in hermes format on every turn (so only max_turns ends a conversation); records the
    prompts."""

    def __init__(self, tok):
        self.tok, self.eos_ids, self.prompts = tok, torch.tensor([tok.eos_token_id]), []
        self.reply = self.tok('<tool_call>{"name": "calc", "arguments": {"expression": "2*3"}}</tool_call>',
                              add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

    def generate(self, ids, mask, params, generator=None):
        from rft.rollout.base import RolloutOutput

        self.prompts += [self.tok.decode(row[m.bool()].tolist()) for row, m in zip(ids, mask)]
        out = torch.tensor([self.reply] * ids.shape[0])
        return RolloutOutput(out, torch.ones_like(out), -0.5 * torch.ones(out.shape))


def tool_runner(run, engine, max_tokens: int):
    """The tool workflow of SyncRun `run` on a scripted `engine`: its runner and the tasks of one batch of 2."""
    from rft.explorer.model import GenerationServer, ModelHandle
    from rft.explorer.runner import RunnerSettings, WorkflowRunner
    from rft.explorer.workflow import ToolCallWorkflow
    from rft.rollout import SamplingParams

    server, tok = GenerationServer(engine, run.tokenizer), run.tokenizer
    runner = WorkflowRunner(ToolCallWorkflow, server, lambda: ModelHandle(server, tok, SamplingParams(
        max_tokens=max_tokens)), RunnerSettings(max_timeout=60))
    return runner, run.explorer.workflows.tasks(run.explorer.taskset.next_batch(), 2, is_eval=False)


def test_the_tool_config_is_declared_to_the_model_and_its_calls_run_for_max_assistant_turns(assets, tmp_path):
    from rft.orchestration.run import SyncRun

    run = SyncRun(rl_config(assets, tmp_path / "out", f"{MT}.enable=true", f"{MT}.max_assistant_turns=3",
                            f"{MT}.format=hermes", f"{MT}.tool_config_path={tool_config(tmp_path)}",
                            "data.max_response_length=32"))
    tok = run.tokenizer
    engine = CallingEngine(tok)
    runner, tasks = tool_runner(run, engine, 32)
    assert all([t["function"]["name"] for t in task.prompt.tools] == ["calc"] for task in tasks)
    results, _ = runner.run(tasks)
    assert engine.prompts and all(p.startswith("<|im_start|>system\ntools: calc<|im_end|>") for p in engine.prompts)
    for e in (e for r in results for e in r):
        text = tok.decode(e.tokens.tolist())
        assert e.info["turns"] == 3 and text.count("<|im_start|>tool\n6<|im_end|>") == 2, text
        assert e.rewards["tool_calls"] == 2.0
    assert json.loads(json.dumps(run.cfg.workflow.args)) == {"max_turns": 3}


INTERACTION = """\
from uuid import uuid4

FINISHED = []


class GuessInteraction:
    \"\"\"gsm8k-style, as verl's Gsm8kInteraction: "wrong, try again" until the reply holds the ground truth.\"\"\"

    def __init__(self, config):
        self.config, self.instances = config, {}

    async def start_interaction(self, instance_id=None, ground_truth=None, **kwargs):
        self.instances[instance_id] = ground_truth
        return instance_id

    async def generate_response(self, instance_id, messages, **kwargs):
        reply = next(m["content"] for m in reversed(messages) if m["role"] == "assistant")
        if self.instances[instance_id] in reply:
            return True, "Right.", 1.0, {}
        return False, "Wrong, try again.", 0.25, {}

    async def calculate_score(self, instance_id, **kwargs):
        return 0.0

    async def finalize_interaction(self, instance_id, **kwargs):
        FINISHED.append(self.instances.pop(instance_id))
"""


def interaction_config(tmp_path, monkeypatch, module="rft_test_guess_interaction"):
    (tmp_path / f"{module}.py").write_text(INTERACTION)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "interaction_config.yaml"
    path.write_text(f"interaction:\n  - class_name: {module}.GuessInteraction\n    config: {{}}\n")
    return path


def rows_with_interaction(assets, tmp_path):
    """The arithmetic rows, each naming the guess interaction (verl's extra_info.interaction_kwargs)."""
    import pandas as pd

    rows = pd.read_parquet(assets / "data" / "train.parquet")
    rows["extra_info"] = [{**info, "interaction_kwargs": {"name": "guess", "ground_truth": "42"}}
                          for info in rows["extra_info"]]
    rows.to_parquet(tmp_path / "guess.parquet")
    return tmp_path / "guess.parquet"


class GuessingEngine:
    """Answers 7, then 42 once the user has said "try again"; records the prompts."""

    def __init__(self, tok):
        self.tok, self.prompts, self.eos_ids = tok, [], torch.tensor([tok.eos_token_id])

    def generate(self, ids, mask, params, generator=None):
        from rft.rollout.base import RolloutOutput

        prompts = [self.tok.decode(row[m.bool()].tolist()) for row, m in zip(ids, mask)]
        self.prompts += prompts
        replies = [self.tok("The answer is " + ("42" if "try again" in p else "7"), add_special_tokens=False)
                   ["input_ids"] + [self.tok.eos_token_id] for p in prompts]
        width = max(map(len, replies))
        out = torch.tensor([r + [self.tok.pad_token_id] * (width - len(r)) for r in replies])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in replies])
        return RolloutOutput(out, mask, -0.5 * mask.float())


@pytest.mark.parametrize("max_user_turns, scores", [(None, [0.25, 1.0]), (1, [0.25])])
def test_verls_interaction_answers_as_the_user_until_right_and_its_scores_reach_the_reward(
        assets, tmp_path, monkeypatch, max_user_turns, scores):
    import sys

    from rft.orchestration.run import SyncRun

    config = interaction_config(tmp_path, monkeypatch)
    cfg = rl_config(assets, tmp_path / "out", f"{MT}.enable=true", f"{MT}.interaction_config_path={config}",
                    f"{MT}.max_user_turns={'null' if max_user_turns is None else max_user_turns}",
                    "data.max_response_length=16", f"data.train_files={rows_with_interaction(assets, tmp_path)}")
    assert cfg.workflow.interaction_config_path == str(config)
    run = SyncRun(cfg)
    assert list(run.explorer.workflows.interactions) == ["guess"]  # verl's default name: GuessInteraction -> guess
    tok = run.tokenizer
    engine = GuessingEngine(tok)
    runner, tasks = tool_runner(run, engine, 16)
    seen = []
    for task in tasks:
        task.reward_fn = lambda source, reply, truth, info: seen.append(info["turn_scores"]) or sum(info["turn_scores"])
    results, _ = runner.run(tasks)
    experiences = [e for r in results for e in r]
    assert len(experiences) == 8 and seen == [scores] * 8
    for e in experiences:
        text = tok.decode(e.tokens.tolist())
        assert e.info["turns"] == 2 and e.info["turn_scores"] == scores and e.reward == sum(scores), text
        assert text.count("<|im_start|>user\nWrong, try again.<|im_end|>") == 1, text
        assert text.endswith("The answer is 42" + tok.eos_token)
        if max_user_turns is None:
            assert e.info["user_turns"] == 1 and "Right." not in text  # the last answer ends it, unrendered
        # the interaction's turn is the user's: out of the loss
        response = e.tokens[e.prompt_length:]
        user = tok("Wrong, try again.", add_special_tokens=False)["input_ids"]
        at = next(i for i in range(len(response)) if response[i:i + len(user)].tolist() == user)
        assert e.action_mask[at:at + len(user)].sum() == 0 and e.action_mask.sum() > 0
    assert sorted(sys.modules["rft_test_guess_interaction"].FINISHED) == ["42"] * 8  # each one finalized
    sys.modules["rft_test_guess_interaction"].FINISHED.clear()


def test_an_interaction_class_that_does_not_import_is_refused_before_the_model_loads(assets, tmp_path, capsys):
    path = tmp_path / "interaction_config.yaml"
    path.write_text("interaction:\n  - name: gsm8k\n    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction"
                    "\n    config: {}\n")
    code = main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", f"{MT}.enable=true",
                 f"{MT}.interaction_config_path={path}", f"trainer.default_local_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not (tmp_path / "out").exists()
    assert err[-1].startswith("rft: error: workflow.interaction_config_path=") and "cannot import 'verl.interactions" \
        in err[-1] and "PYTHONPATH" in err[-1], err


def test_rows_that_name_no_interaction_are_refused_before_the_model_loads(assets, tmp_path, monkeypatch, capsys):
    config = interaction_config(tmp_path, monkeypatch, "rft_test_guess_interaction_rows")
    code = main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", f"{MT}.enable=true",
                 f"{MT}.interaction_config_path={config}", f"trainer.default_local_dir={tmp_path / 'out'}",
                 "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not (tmp_path / "out" / "checkpoints").exists()
    assert err[-1].startswith("rft: error: 64 of 64 rows name no interaction of workflow.interaction_config_path=")
    assert "(guess) in extra_info.interaction_kwargs.name" in err[-1], err


def test_the_examples_gsm8k_interaction_says_try_again_until_the_answer_is_right():
    from pathlib import Path

    from rft.explorer.interactions import Session, load_interactions

    root = Path(__file__).resolve().parents[1] / "examples"
    interactions = load_interactions(str(root / "verl_interaction" / "interaction_config.yaml"))
    session = Session(interactions, {"name": "gsm8k", "ground_truth": "72"}, "a")
    assert session.respond([{"role": "assistant", "content": "#### 71"}])[0] is False
    done, text = session.respond([{"role": "assistant", "content": "#### 72"}])
    assert done and text == "Your response is correct!" and session.scores == [0.0, 1.0]
    session.finish()
    with pytest.raises(Exception, match="interaction_kwargs with the name of its interaction"):
        Session(interactions, None, "b")


def test_hydras_empty_value_is_the_empty_string_false_where_verl_reads_a_switch(assets, tmp_path, capsys):
    """`key=` is hydra's empty string: verl builds its config classes without type checks, so '' reaches
    `if config.use_kl_loss:` as false; a number it cannot be. over_sample_rate is read by no code of verl 0.8."""
    cfg = rl_config(assets, tmp_path / "out", "actor_rollout_ref.actor.use_kl_loss=true",
                    "actor_rollout_ref.actor.use_kl_loss=", "actor_rollout_ref.rollout.over_sample_rate=0.1")
    assert cfg.actor_rollout_ref.actor.use_kl_loss is False
    code = main(["config", "show", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}",
                 "actor_rollout_ref.actor.ppo_max_token_len_per_gpu="])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "ppo_max_token_len_per_gpu' takes an integer, not a string ('')" in err[-1], err
