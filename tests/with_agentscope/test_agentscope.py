"""Trinity-RFT's AgentScope workflows (rft.explorer.agentscope) on AgentScope 1's ReAct agent, in the venv `make
agentscope` builds (`make test-agentscope`): the agent drives a scripted engine through rft's endpoint and its real
async OpenAI client; its structured answer is paid by its \\boxed{} answer; every model call is an experience;
agentscope_react_math_workflow's Python tool runs; a model that never calls the finishing tool is counted and
paid 0; Trinity's AgentScope example YAMLs train a step through `rft train` and resolve in the peer corpus
(refused for nothing but their sequence parallelism over the stand-in's one GPU)."""

from __future__ import annotations

import json
import re

import pytest
import torch
import yaml
from cli_helpers import rft_here
from test_trinity_workflows import _corpus_item

from rft.data.dataset import Prompt
from rft.explorer.agentscope import GSM8K_SYSTEM_PROMPT
from rft.explorer.model import GenerationServer, ModelHandle
from rft.explorer.server import Endpoint
from rft.explorer.workflow import AgentScopeReActMathWorkflow, AgentScopeReActWorkflow, Task
from rft.rollout import SamplingParams
from rft.rollout.base import RolloutOutput


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class Engine:
    """Answers each prompt (rendered by the tiny model's template) as `script(prompt_text)` says; keeps the prompts."""

    def __init__(self, tok, script):
        self.tok, self.script, self.prompts = tok, script, []
        self.eos_ids = torch.tensor([tok.eos_token_id])

    def generate(self, ids, mask, params, generator=None):
        rows = []
        for row, m in zip(ids, mask):
            text = self.tok.decode(row[m.bool()].tolist())
            self.prompts.append(text)
            rows.append(self.tok(self.script(text), add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])
        width = max(len(r) for r in rows)
        out, valid = torch.full((len(rows), width), self.tok.pad_token_id), torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, :len(r)], valid[i, :len(r)] = torch.tensor(r), 1
        return RolloutOutput(out, valid, -0.5 * valid.float())


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    from rft.models.tiny import init_model

    folder = tmp_path_factory.mktemp("m")
    init_model("tiny", folder, seed=0)
    return AutoTokenizer.from_pretrained(folder)


def _served(tok, script):
    """(the engine, a model handle recording its calls through the endpoint, the endpoint)."""
    engine = Engine(tok, script)
    server = GenerationServer(engine, tok)
    endpoint = None
    make = lambda: ModelHandle(server, tok, SamplingParams(n=1, max_tokens=128, temperature=1.0), endpoint=endpoint,
                               enable_history=True)
    endpoint = Endpoint(make, "policy", "hermes", 0)
    return engine, make(), endpoint


def _task(question: str, truth: str, n: int = 1) -> Task:
    return Task(prompt=Prompt(ids=[], data_source="gsm8k", ground_truth=truth, extra_info={},
                              messages=[{"role": "user", "content": question}]), repeat_times=n)


def _last_user(text: str) -> str:
    return text.rsplit("<|im_start|>user\n", 1)[-1]


def adder(text: str) -> str:
    """Calls generate_response with the sum (off by one when a is odd); after the tool's answer, a line of text."""
    if "Successfully generated response" in text.rsplit("<|im_start|>assistant", 2)[-2]:
        return "Done."
    a, b = map(int, re.search(r"(\d+)\+(\d+)=", text).groups())
    return _call("generate_response", {"result": f"The answer is \\boxed{{{a + b + a % 2}}}"})


def test_the_react_agent_is_paid_by_its_boxed_answer_and_every_call_is_an_experience(tok):
    engine, handle, endpoint = _served(tok, adder)
    try:
        exps = AgentScopeReActWorkflow(task=_task("2+3=", "#### 5", n=2), model=handle).run()
        # per attempt: the finishing tool call, then the text reply AgentScope asks for; both paid the answer's 1
        assert len(exps) == 4 and [e.reward for e in exps] == [1.0] * 4
        assert [e.rewards for e in exps] == [{"accuracy": 1.0}] * 4
        assert {e.info["react_memory_length"] for e in exps} == {4}  # question, call, its result, the text
        assert GSM8K_SYSTEM_PROMPT in engine.prompts[0] and "generate_response" in engine.prompts[0]
        assert all(int(e.action_mask.sum()) > 0 for e in exps) and not handle.history
        (wrong,) = AgentScopeReActWorkflow(task=_task("3+4=", "7"), model=handle).run()[:1]
        assert wrong.reward == 0.0  # it said 8
        assert endpoint.take_counts()["workflow/endpoint_required_unmet"] == 0
    finally:
        endpoint.close()


def python_first(text: str) -> str:
    """Runs the sum in the Python tool first, then answers with what the tool printed."""
    last = text.rsplit("<|im_start|>assistant", 2)[-2]
    if "Successfully generated response" in last:
        return "Done."
    printed = re.search(r"<stdout>(\d+)", last)
    if printed:
        return _call("generate_response", {"result": f"\\boxed{{{printed.group(1)}}}"})
    a, b = map(int, re.search(r"(\d+)\+(\d+)=", text).groups())
    return _call("execute_python_code", {"code": f"print({a}*0+{a}+{b})"})


def test_the_math_agent_runs_its_python_tool(tok):
    engine, handle, endpoint = _served(tok, python_first)
    try:
        exps = AgentScopeReActMathWorkflow(task=_task("20+22=", "42"), model=handle).run()
        assert len(exps) == 3 and [e.reward for e in exps] == [1.0] * 3
        assert "<stdout>42" in engine.prompts[1]  # the tool ran the model's code and printed its sum
        assert engine.prompts[0].count("\n" + GSM8K_SYSTEM_PROMPT + "\n") == 1  # Trinity's line breaks around it
    finally:
        endpoint.close()


def test_a_model_that_never_calls_the_finishing_tool_is_counted_and_paid_nothing(tok):
    engine, handle, endpoint = _served(tok, lambda text: "I think it is 5.")
    try:
        exps = AgentScopeReActWorkflow(task=_task("2+3=", "5"), model=handle).run()
        assert exps and all(e.reward == 0.0 for e in exps)
        assert len(exps) == len(engine.prompts) >= 10  # AgentScope's max_iters, each a reminder and a call
        assert endpoint.take_counts()["workflow/endpoint_required_unmet"] >= 10
    finally:
        endpoint.close()


@pytest.mark.parametrize("item, keys, workflow", [
    ("examples/agentscope_react/gsm8k.yaml", ("question", "answer"), "agentscope_react_workflow"),
    ("examples/agentscope_tool_react/agentscopev1_tool_react_dapo.yaml", ("prompt", "solution"),
     "agentscope_react_math_workflow")])
def test_trinitys_agentscope_examples_train_one_step(tmp_path, item, keys, workflow):
    """The examples as their users run them (stand-ins as test_trinity_workflows' `_corpus_item`: GSM8K rows, the
    tiny model), their sequence parallelism of 2 set to the stand-in's one process: a step of 2 tasks; the tiny
    model never calls the finishing tool, so every call is paid 0 and the step trains."""
    from rft.models.tiny import init_model

    tasks, model = tmp_path / "tasks", tmp_path / "m"
    tasks.mkdir()
    init_model("tiny", model, seed=0)
    rows = [{keys[0]: f"{a}+{b}=", keys[1]: f"#### {a + b}"} for a, b in ((1, 2), (3, 4), (5, 6), (7, 8))]
    (tasks / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tree = _corpus_item(item, model, tasks, tmp_path / "ckpt")
    shown = rft_here("config", "show", _written(tmp_path, tree), cwd=tmp_path, check=False)
    assert shown.returncode == 2 and "ulysses_sequence_parallel_size=2" in shown.stderr  # sp 2 over the one GPU
    tree["trainer"]["ulysses_sequence_parallel_size"] = 1
    tree["model"]["max_response_tokens"] = 8
    config = _written(tmp_path, tree)
    assert f"type: {workflow}" in rft_here("config", "show", config, cwd=tmp_path).stdout
    rft_here("train", config, cwd=tmp_path)
    metrics = [m for f in (tmp_path / "ckpt").rglob("metrics.jsonl") for m in map(json.loads, f.read_text().splitlines())
               if "training/global_step" in m]
    assert [m["training/global_step"] for m in metrics] == [1] and metrics[-1]["critic/score/mean"] == 0.0


def _written(tmp_path, tree) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    return str(path)


@pytest.mark.parametrize("overrides, message", [
    ([], "workflow.type=agentscope_react_workflow drives the model through the OpenAI-compatible endpoint and learns "
         "the calls it records: set workflow.enable_history=true"),
    (["workflow.enable_history=true", "workflow.args={type: email_search}"],
     "workflow.args.type='email_search': rft has Trinity-RFT's gsm8k template of agentscope_react_workflow"),
])
def test_what_the_agent_workflows_need_is_refused_before_the_model_loads(tmp_path, overrides, message):
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    write_arithmetic(tmp_path / "data", n_train=4, n_val=2, seed=0)
    proc = rft_here("train", f"actor_rollout_ref.model.path={init_model('tiny', tmp_path / 'm', seed=0)}",
                    f"data.train_files={tmp_path / 'data' / 'train.parquet'}", "workflow.type=agentscope_react_workflow",
                    *overrides, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("rft: error:") == 1
