"""verl's multi-turn rollout keys (actor_rollout_ref.rollout.multi_turn.*) with verl's meaning on rft's tool workflow:
enable is tool_call_workflow, max_assistant_turns its model turns (null: max_model_len // 3, as verl), format its
parser, tool_config_path verl's tool-config YAML (its schemas declared to the model, each run by rft's tool of that
name, a tool rft has no function for refused by its class before the model loads); what rft does not do
(interactions, verl's cuts of tool calls and responses, re-rendering with the template) is refused by name."""

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
        "tool_call_workflow", {"max_turns": 3}, "hermes", str(tools))
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
    (f"{MT}.interaction_config_path=/x/gsm8k_interaction_config.yaml", "interactions"),
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


def test_the_tool_config_is_declared_to_the_model_and_its_calls_run_for_max_assistant_turns(assets, tmp_path):
    from rft.explorer.model import GenerationServer, ModelHandle
    from rft.explorer.runner import RunnerSettings, WorkflowRunner
    from rft.explorer.workflow import ToolCallWorkflow
    from rft.rollout import SamplingParams
    from rft.trainer.run import SyncRun

    run = SyncRun(rl_config(assets, tmp_path / "out", f"{MT}.enable=true", f"{MT}.max_assistant_turns=3",
                            f"{MT}.format=hermes", f"{MT}.tool_config_path={tool_config(tmp_path)}",
                            "data.max_response_length=32"))
    tok = run.tokenizer
    engine = CallingEngine(tok)
    server = GenerationServer(engine, tok)
    runner = WorkflowRunner(ToolCallWorkflow, server, lambda: ModelHandle(server, tok, SamplingParams(max_tokens=32)),
                            RunnerSettings(max_timeout=60))
    tasks = run.explorer.workflows.tasks(run.explorer.taskset.next_batch(), 2, is_eval=False)
    assert all([t["function"]["name"] for t in task.prompt.tools] == ["calc"] for task in tasks)
    results, _ = runner.run(tasks)
    assert engine.prompts and all(p.startswith("<|im_start|>system\ntools: calc<|im_end|>") for p in engine.prompts)
    for e in (e for r in results for e in r):
        text = tok.decode(e.tokens.tolist())
        assert e.info["turns"] == 3 and text.count("<|im_start|>tool\n6<|im_end|>") == 2, text
        assert e.rewards["tool_calls"] == 2.0
    assert json.loads(json.dumps(run.cfg.workflow.args)) == {"max_turns": 3}
