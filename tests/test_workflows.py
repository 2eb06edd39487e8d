"""Workflows: the generation server batches the calls of many workflow threads; multi-turn conversations keep the
exact tokens with the tool turns masked; tool calls are parsed and tools run safely; workflows that hang, spin,
raise or return garbage are cut, retried and skipped with a metric while the run goes on; the OpenAI-compatible
endpoint serves the real `openai` client, and an agent written only against it trains through the endpoint with
enable_history."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
import torch
from rl_helpers import assert_all_moved, make_assets, rl_config, trainable

from rft.explorer.evaluate import eos_token_ids
from rft.explorer.model import (
    Cancelled,
    Completion,
    Conversation,
    GenerationServer,
    ModelHandle,
)
from rft.explorer.tools import calculator, parse_tool_calls, run_tool
from rft.models.load import load_causal_lm, load_tokenizer
from rft.monitor import Timer
from rft.rollout import HFRollout, SamplingParams
from rft.tasks.calculator import TOOL, answer_text


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


@pytest.fixture(scope="module")
def engine(assets):
    model = load_causal_lm(str(assets / "model"), torch.float32, torch.device("cpu"))
    tok = load_tokenizer(str(assets / "model"))
    return HFRollout(model, eos_token_ids(model, tok), tok.pad_token_id), tok


PARAMS = SamplingParams(n=1, temperature=1.0, max_tokens=5)


# ------------------------------------------------------------------------------------------------ server
class CountingEngine:
    """The engine, counting its calls and rows."""

    def __init__(self, engine):
        self.inner, self.calls = engine, []
        self.eos_ids, self.model = engine.eos_ids, engine.model

    def generate(self, ids, mask, params, generator=None):
        self.calls.append(ids.shape[0])
        return self.inner.generate(ids, mask, params, generator)


def test_concurrent_calls_are_served_in_one_batch_in_client_order(engine):
    inner, tok = engine
    counting = CountingEngine(inner)
    server = GenerationServer(counting, tok, torch.Generator().manual_seed(0))
    clients = [server.open((i,)) for i in range(6)]
    results = {}

    def call(i):
        prompt = tok(f"{i}+{i}=", add_special_tokens=False)["input_ids"]
        results[i] = server.submit(clients[i], [prompt], SamplingParams(n=2, temperature=1.0, max_tokens=4))
        server.close(clients[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in reversed(range(6))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert counting.calls == [12]  # 6 clients x n=2, one engine call
    assert all(len(results[i]) == 1 and len(results[i][0]) == 2 for i in range(6))
    # the same requests again, in another thread order, give the same samples (rows ordered by client, one stream)
    again = GenerationServer(counting, tok, torch.Generator().manual_seed(0))
    clients = [again.open((i,)) for i in range(6)]
    first = dict(results)
    results.clear()
    server_of = again

    def call_again(i):
        prompt = tok(f"{i}+{i}=", add_special_tokens=False)["input_ids"]
        results[i] = server_of.submit(clients[i], [prompt], SamplingParams(n=2, temperature=1.0, max_tokens=4))
        server_of.close(clients[i])

    threads = [threading.Thread(target=call_again, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all([c.token_ids for c in results[i][0]] == [c.token_ids for c in first[i][0]] for i in range(6))


def test_a_cancelled_client_holds_nobody_up(engine):
    inner, tok = engine
    server = GenerationServer(inner, tok)
    busy, waiting = server.open((0,)), server.open((1,))  # `busy` never calls
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", server.submit(waiting, [[1, 2, 3]], PARAMS)))
    t.start()
    t.join(0.5)
    assert t.is_alive()  # waits for `busy` to call too
    server.close(busy, cancelled=True)
    t.join(60)
    assert len(out["r"][0]) == 1
    with pytest.raises(Cancelled):
        server.submit(busy, [[1, 2]], PARAMS)


def test_a_runners_late_threads_still_join_the_first_batch(engine):
    """The runner announces its threads' clients before they open, so a step's first batch waits for the thread
    that starts last (it used to run with whichever threads had opened, so the samples hung on thread timing), also
    where the machine's load holds a thread back for a second (it waited 0.5 s for it, then ran without it)."""
    import itertools
    import time

    from rft.data.dataset import Prompt
    from rft.explorer.runner import RunnerSettings, WorkflowRunner
    from rft.explorer.workflow import SimpleWorkflow, Task

    inner, tok = engine

    def run(late: set[int]) -> tuple[list[int], list]:
        counting = CountingEngine(inner)
        server = GenerationServer(counting, tok, torch.Generator().manual_seed(0))
        made = itertools.count()

        def make_handle() -> ModelHandle:
            if next(made) in late:
                time.sleep(1.0)  # this attempt's thread opens its client late (a loaded machine's delay)
            return ModelHandle(server, tok, SamplingParams(n=1, temperature=1.0, max_tokens=4))

        tasks = [Task(prompt=Prompt([], "arithmetic", str(2 * i), {}, messages=[{"role": "user", "content": f"{i}+{i}="}]),
                      index=i, repeat_times=2, reward_fn=lambda src, text, truth, extra=None: float(text == truth))
                 for i in range(4)]
        results, metrics = WorkflowRunner(SimpleWorkflow, server, make_handle, RunnerSettings(runner_per_model=4)).run(tasks)
        assert metrics["workflow/skipped_tasks"] == 0
        return counting.calls, [[e.tokens.tolist() for e in r] for r in results]

    calls, samples = run(late=set())
    assert calls == [8]  # 4 tasks x 2 samples, one engine call
    for late in ({0}, {3}, {1, 2}):  # whichever threads start late: the same batch, the same samples
        assert run(late) == (calls, samples)


# ------------------------------------------------------------------------------------------ conversations
def test_a_conversation_masks_what_the_model_did_not_write(engine):
    inner, tok = engine
    handle = ModelHandle(GenerationServer(inner, tok, torch.Generator().manual_seed(0)), tok,
                         SamplingParams(n=1, temperature=1.0, max_tokens=6))
    conv = handle.start([{"role": "user", "content": "12*34="}], tools=[TOOL])
    prompt_text = conv.text
    assert prompt_text.startswith("<|im_start|>system\ntools: calc<|im_end|>")
    handle.respond([conv])
    first = conv.last_reply
    conv.add([{"role": "tool", "content": "408"}])
    handle.respond([conv])
    e = conv.to_experience(1.0)
    # the tokens are the chat template's rendering of the whole conversation, up to the last generated token
    rendered = tok.apply_chat_template(conv.messages, tools=[TOOL], tokenize=False)
    assert tok.decode(e.tokens.tolist()) == conv.text and rendered.startswith(conv.text)
    response = e.tokens[e.prompt_length:].tolist()
    action = e.action_mask.tolist()
    # the model's tokens are exactly its two turns; the tool turn and the template's glue are masked
    assert tok.decode([t for t, a in zip(response, action) if a], skip_special_tokens=True) == first + conv.last_reply
    masked = tok.decode([t for t, a in zip(response, action) if not a])
    assert "<|im_start|>tool\n408<|im_end|>" in masked and masked.endswith("<|im_start|>assistant\n")
    assert all(lp == 0.0 for lp, a in zip(e.logprobs.tolist(), action) if not a)
    assert all(lp < 0.0 for lp, a in zip(e.logprobs.tolist(), action) if a)


def test_a_template_that_rewrites_history_keeps_the_sampled_tokens(engine):
    """A template that renders earlier turns differently once a turn follows: the next prompt is the tokens the
    model saw and wrote, then the template's rendering of the new turn; the difference is counted, not fatal."""
    _, tok = engine
    rewriting = "{% for m in messages %}{% if not loop.last %}[old]{% endif %}{{ m['content'] }}{% endfor %}"
    conv = Conversation(tok, [{"role": "user", "content": "hi"}], chat_template=rewriting)
    reply = tok("x", add_special_tokens=False)["input_ids"]
    conv.append_completion(Completion("x", [], reply, [-1.0] * len(reply), "length"))
    sampled = list(conv.ids)
    conv.add([{"role": "user", "content": "again"}])
    assert conv.ids == sampled + tok("again", add_special_tokens=False)["input_ids"]
    assert len(conv.mismatches) == 1 and conv.mismatches[0].startswith("from token 0 of 8 the sampled conversation")
    assert conv.to_experience(0.0).info["render_mismatch"] == 1


def test_a_garbled_reply_keeps_its_tokens_and_the_tool_workflow_goes_on(engine):
    """A sampled reply with a special token inside it is no message the template could write: its tokens stay as
    sampled and a message can still follow it (it used to end its conversation); in the tool workflow the model
    answers after its tool turn, as after a clean call."""
    from rft.explorer.workflow import Task, ToolCallWorkflow

    _, tok = engine
    call = tok('[calc(e="12*34")]', add_special_tokens=False)["input_ids"]
    garbled = call[:-4] + [tok.convert_tokens_to_ids("<|im_start|>")] + call[-4:]  # a special token inside the call
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    conv = Conversation(tok, [{"role": "user", "content": "12*34="}], tools=[TOOL])
    conv.append_completion(Completion(tok.decode(garbled, skip_special_tokens=True), [], garbled + [eos],
                                      [-1.0] * (len(garbled) + 1), "stop"))
    sampled = list(conv.ids)
    conv.add([{"role": "tool", "content": "408"}])
    assert conv.ids[:len(sampled)] == sampled
    assert tok.decode(conv.ids[len(sampled):]) == "\n<|im_start|>tool\n408<|im_end|>\n<|im_start|>assistant\n"

    class Scripted:  # the model handle: first turn one garbled and one clean call, then the answer
        tool_call_parser = "pythonic"

        def start(self, messages, tools=None):
            return Conversation(tok, messages, tools=tools)

        def sample(self, start, n):
            out = [start.copy() for _ in range(n)]
            for c, ids in zip(out, (garbled, call)):
                c.append_completion(Completion(tok.decode(ids, skip_special_tokens=True), [], ids + [eos],
                                               [-1.0] * (len(ids) + 1), "stop"))
            return out

        def respond(self, conversations):
            for c in conversations:
                ids = tok("408", add_special_tokens=False)["input_ids"]
                c.append_completion(Completion("408", [], ids + [eos], [-1.0] * (len(ids) + 1), "stop"))

    from rft.data.dataset import Prompt

    prompt = Prompt(ids=[], messages=[{"role": "user", "content": "12*34="}], data_source="calculator",
                    ground_truth="408", extra_info={}, tools=[TOOL])
    task = Task(prompt=prompt, index=0, repeat_times=2, workflow_args={"max_turns": 2},
                reward_fn=lambda src, text, truth, extra=None: float(text.strip() == truth))
    experiences = ToolCallWorkflow(task=task, model=Scripted()).run()
    assert [e.reward for e in experiences] == [1.0, 1.0]
    assert [e.info["turns"] for e in experiences] == [2, 2]
    assert experiences[0].tokens.tolist()[experiences[0].prompt_length:][:len(garbled)] == garbled


# ------------------------------------------------------------------------------------------------ tools
@pytest.mark.parametrize("text, parser, calls, rest", [
    ('<tool_call>{"name": "calc", "arguments": {"e": "2*3"}}</tool_call>', "hermes", [("calc", {"e": "2*3"})], ""),
    ('ok <tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call><tool_call>{"name": "b"}</tool_call>',
     "hermes", [("a", {"x": 1}), ("b", {})], "ok"),
    ("<tool_call>not json</tool_call>", "hermes", [], ""),
    ('[calc(e="37*48")]', "pythonic", [("calc", {"e": "37*48"})], ""),
    ('[f(a=1, b=[2, 3]), g()]', "pythonic", [("f", {"a": 1, "b": [2, 3]}), ("g", {})], ""),
    ("[calc(e=__import__('os'))]", "pythonic", [], "[calc(e=__import__('os'))]"),  # never evaluated
    ("1776", "pythonic", [], "1776"),
])
def test_tool_calls_are_parsed(text, parser, calls, rest):
    got, left = parse_tool_calls(text, parser)
    assert [(c.name, c.arguments) for c in got] == calls and left == rest


def test_the_clip_ratio_reads_the_last_turn_the_policy_wrote():
    from rft.trainer.rl import last_turn_lengths

    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0, 0], [0] * 8, [0, 1, 0, 1, 0, 0, 0, 1]])
    assert last_turn_lengths(mask).tolist() == [3, 3, 0, 1]


def test_the_calculator_computes_and_refuses_code():
    assert calculator("37*48") == "1776" and calculator(e="7/2") == "3.5" and calculator("(1+2)*-3") == "-9"
    assert calculator("1/0") == "error: division by zero"
    assert calculator("__import__('os').system('x')").startswith("error:")
    assert calculator("2**10000").startswith("error:")


def test_a_tool_that_fails_or_hangs_becomes_an_error_message():
    from rft.explorer.tools import ToolCall

    def boom(**_):
        raise ValueError("bad input")

    def hang(**_):
        threading.Event().wait(30)

    tools = {"boom": boom, "hang": hang}
    assert run_tool(ToolCall("boom", {}), tools, 1.0) == "error: ValueError: bad input"
    assert run_tool(ToolCall("hang", {}), tools, 0.2) == "error: tool 'hang' took longer than 0.2 s"
    assert run_tool(ToolCall("nope", {}), tools, 1.0).startswith("error: unknown tool 'nope'")


# ---------------------------------------------------------------------------------------------- runners
BAD_WORKFLOWS = '''
import time
from rft.explorer.workflow import SimpleWorkflow, Workflow, register_workflow

@register_workflow("flaky")
class Flaky(SimpleWorkflow):
    """Of each 8 tasks: the first hangs (sleeps), the second raises, the third returns garbage; the rest work."""
    def run(self):
        kind = self.task.index % 8
        if kind == 0:
            time.sleep(3600)
        if kind == 1:
            raise RuntimeError("the environment broke")
        if kind == 2:
            return ["not an experience"]
        return super().run()

@register_workflow("spinner")
class Spinner(Workflow):
    def run(self):
        while True:
            pass

@register_workflow("broken")
class Broken(Workflow):
    def run(self):
        raise RuntimeError("always")

@register_workflow("agent")
class Agent(Workflow):
    def run(self):
        self.model.get_openai_client()
'''


def test_hanging_raising_and_garbage_workflows_are_cut_retried_and_skipped(assets, tmp_path):
    from rft.orchestration.run import SyncRun

    (tmp_path / "flaky.py").write_text(BAD_WORKFLOWS)
    run = SyncRun(rl_config(assets, tmp_path / "out", "data.train_batch_size=8",
                            "actor_rollout_ref.actor.ppo_mini_batch_size=8", "workflow.type=flaky",
                            f"workflow.path={tmp_path / 'flaky.py'}", "workflow.max_timeout=5",
                            "workflow.max_retry_times=1", "workflow.runner_per_model=8"))
    metrics = run.train_step(1, Timer())
    assert metrics["workflow/tasks"] == 8 and metrics["workflow/skipped_tasks"] == 3
    assert metrics["workflow/timeouts"] == 2 and metrics["workflow/errors"] == 2
    assert metrics["workflow/bad_results"] == 2 and metrics["workflow/retries"] == 3
    assert metrics["actor/grad_norm"] > 0  # the five good tasks trained
    # a step whose every task fails trains nothing, and the run goes on
    broken = SyncRun(rl_config(assets, tmp_path / "out2", "workflow.type=broken",
                               f"workflow.path={tmp_path / 'flaky.py'}", "workflow.max_retry_times=0"))
    empty = broken.train_step(1, Timer())
    assert empty["train/empty_step"] == 1.0 and empty["workflow/skipped_tasks"] == 4 and "actor/grad_norm" not in empty


def test_a_spinning_workflow_is_stopped(assets, tmp_path):
    from rft.data.dataset import Prompt
    from rft.explorer.model import GenerationServer
    from rft.explorer.plugins import load_workflow_file, workflow_class
    from rft.explorer.runner import RunnerSettings, WorkflowRunner
    from rft.explorer.workflow import Task

    (tmp_path / "flaky.py").write_text(BAD_WORKFLOWS)
    load_workflow_file(str(tmp_path / "flaky.py"))
    server = GenerationServer(None, None)
    runner = WorkflowRunner(workflow_class("spinner"), server, lambda: ModelHandle(server, None, PARAMS),
                            RunnerSettings(runner_per_model=2, max_timeout=0.5, max_retry_times=1))
    tasks = [Task(prompt=Prompt([1], "x", "1", {}), index=i) for i in (900, 901)]
    results, metrics = runner.run(tasks)
    assert results == [[], []] and metrics["workflow/timeouts"] == 4 and metrics["workflow/skipped_tasks"] == 2
    deadline = __import__("time").monotonic() + 10
    while any(t.name.startswith("rft-workflow-90") and t.is_alive() for t in threading.enumerate()):
        assert __import__("time").monotonic() < deadline, "a spinning workflow thread was not stopped"
        __import__("time").sleep(0.05)


# ------------------------------------------------------------------------------------------ the endpoint
AGENT_WORKFLOW = '''
from rft.explorer.workflow import Workflow, register_workflow

@register_workflow("openai_agent")
class OpenAIAgent(Workflow):
    """An agent that knows only the openai client: it asks twice, then the workflow rewards the calls."""
    def run(self):
        client = self.model.get_openai_client()
        messages = list(self.task.messages)
        for _ in range(2):
            reply = client.chat.completions.create(model=client.models.list().data[0].id, messages=messages,
                                                   n=1, max_tokens=4, logprobs=True, temperature=1.0)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            messages.append({"role": "user", "content": "again"})
        experiences = self.model.extract_experience_from_history()
        for i, e in enumerate(experiences):
            e.reward = float(len(e.info["response_text"]) % 3) + 0.1 * self.task.index + 0.01 * i
        return experiences
'''


@pytest.mark.parametrize("source, name", [("AGENT_WORKFLOW", "openai_agent"), ("ASYNC_AGENT_WORKFLOW", "async_agent")])
def test_an_openai_client_agent_trains_through_the_endpoint(assets, tmp_path, source, name):
    """An agent that knows only the openai client, and one written as Trinity-RFT's async workflows are
    (ASYNC_AGENT_WORKFLOW): two calls a task, batched across the tasks, every trainable parameter moved."""
    pytest.importorskip("openai")
    from rft.orchestration.run import SyncRun

    (tmp_path / "agent.py").write_text(globals()[source])
    run = SyncRun(rl_config(assets, tmp_path / "out", f"workflow.type={name}",
                            f"workflow.path={tmp_path / 'agent.py'}", "workflow.enable_history=true",
                            "actor_rollout_ref.rollout.n=1", "data.train_batch_size=4",
                            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "algorithm.adv_estimator=reinforce_plus_plus"))
    before = trainable(run.trainer.model)
    metrics = run.train_step(1, Timer())
    assert metrics["workflow/skipped_tasks"] == 0 and metrics["workflow/tasks"] == 4
    assert metrics["actor/grad_norm"] > 0
    assert_all_moved(before, run.trainer.model)
    assert metrics["workflow/model_calls"] == 2  # 4 agents x 2 calls, batched: one engine call per turn

def test_an_endpoint_port_in_use_is_one_line_naming_the_port_and_the_key():
    """`workflow.endpoint_port` held by another socket: the key, the port and what to do, not the OS error's
    "check the path and the file system"."""
    import socket

    from rft.config import ConfigError
    from rft.errors import describe_failure
    from rft.explorer.server import Endpoint

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            Endpoint(lambda: None, "tiny", port=port)
    line = describe_failure(err.value)
    assert "\n" not in line and f"workflow.endpoint_port={port}" in line and "in use" in line, line
    assert "workflow.endpoint_port=0" in line and "file system" not in line, line


def test_the_endpoint_answers_the_openai_client(engine):
    openai = pytest.importorskip("openai")
    from rft.explorer.server import Endpoint

    inner, tok = engine
    server = GenerationServer(inner, tok, torch.Generator().manual_seed(0))
    endpoint = Endpoint(lambda: ModelHandle(server, tok, SamplingParams(n=1, temperature=1.0, max_tokens=8)),
                        "tiny", "pythonic")
    try:
        client = openai.OpenAI(base_url=endpoint.api_base, api_key="anything", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["tiny"]
        out = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "1+1="}], n=3,
                                             max_tokens=5, logprobs=True)
        assert len(out.choices) == 3 and all(c.finish_reason in ("stop", "length") for c in out.choices)
        lp = out.choices[0].logprobs.content
        assert lp and all(t.logprob <= 0 for t in lp)
        text = b"".join(bytes(t.bytes) for t in lp).decode("utf-8", "replace").replace("<|im_end|>", "")
        assert text == out.choices[0].message.content
        text = client.completions.create(model="tiny", prompt=["ab", "cd"], max_tokens=3, logprobs=1)
        assert len(text.choices) == 2 and len(text.choices[0].logprobs.token_logprobs) >= 1
        for bad, status in (({"model": "gpt-4"}, 404), ({"stream": True}, 400), ({"stop": ["x"]}, 400),
                            ({"frequency_penalty": 1.0}, 400), ({"max_tokens": 0}, 400)):
            with pytest.raises(openai.APIStatusError) as err:
                client.chat.completions.create(**{"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                                  **bad})
            assert err.value.status_code == status
        # past the model's 2048 positions: refused as OpenAI refuses it (the engine used to decode on, hanging every
        # other call), a prompt too long as well as a completion
        context = inner.model.config.max_position_embeddings
        for messages, max_tokens in (([{"role": "user", "content": "x"}], 200000),
                                     ([{"role": "user", "content": "7" * (context + 100)}], None)):
            with pytest.raises(openai.BadRequestError, match="maximum context length is 2048 tokens"):
                client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens)
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            client.completions.create(model="tiny", prompt="7" * context, max_tokens=1)
        near = "7" * (context - 20)  # 20 positions left: the default 8 new tokens fit, 30 asked do not
        assert client.completions.create(model="tiny", prompt=near).choices[0].finish_reason in ("stop", "length")
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="tiny", prompt=near, max_tokens=30)
    finally:
        endpoint.close()


# ------------------------------------------------------------------------------------- the tool workflow
class ScriptedEngine:
    """An engine that calls the calculator on the user's question and then answers with the tool's result in the
    task's answer format (`#### 1776`), except on every third first turn, where it guesses `#### 7` straight away
    (so a group's rewards differ)."""

    def __init__(self, tok):
        self.tok = tok
        self.eos_ids = torch.tensor([tok.eos_token_id])
        self.first_turns = 0

    def generate(self, ids, mask, params, generator=None):
        from rft.rollout.base import RolloutOutput

        rows = []
        for row, m in zip(ids, mask):
            text = self.tok.decode(row[m.bool()].tolist())
            if "<|im_start|>tool\n" in text:
                reply = answer_text(text.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0])
            else:
                self.first_turns += 1
                question = text.split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
                reply = answer_text(7) if self.first_turns % 3 == 0 else f'[calc(e="{question[:-1]}")]'
            rows.append(self.tok(reply, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])
        width = max(len(r) for r in rows)
        out = torch.full((len(rows), width), self.tok.pad_token_id)
        valid = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, :len(r)], valid[i, :len(r)] = torch.tensor(r), 1
        return RolloutOutput(out, valid, -0.5 * valid.float())


def test_the_tool_workflow_masks_the_tool_turns_and_trains(assets, tmp_path):
    from rft.experience import to_batch
    from rft.explorer.runner import RunnerSettings, WorkflowRunner
    from rft.explorer.workflow import ToolCallWorkflow
    from rft.orchestration.run import SyncRun
    from rft.tasks import write_calculator

    write_calculator(tmp_path / "calc", n_train=16, n_val=4, seed=0)
    run = SyncRun(rl_config(assets, tmp_path / "out", "data.tools_key=tools", "workflow.type=tool_call_workflow",
                            "workflow.args={tool_call_parser: pythonic}", "data.max_response_length=16",
                            f"data.train_files={tmp_path / 'calc' / 'train.parquet'}", "custom_reward_function.path=null",
                            "actor_rollout_ref.rollout.n=3"))
    tok = run.tokenizer
    server = GenerationServer(ScriptedEngine(tok), tok)
    handle = lambda: ModelHandle(server, tok, SamplingParams(n=1, max_tokens=16))
    runner = WorkflowRunner(ToolCallWorkflow, server, handle, RunnerSettings(max_timeout=60))
    tasks = run.explorer.workflows.tasks(run.explorer.taskset.next_batch(), 3, is_eval=False)
    results, metrics = runner.run(tasks)
    assert metrics["workflow/skipped_tasks"] == 0
    assert metrics["workflow/render_mismatch"] == 0  # the tiny template writes the replies' text as sampled
    n_tool = 0
    for task, experiences in zip(tasks, results):
        a, b = task.prompt.extra_info["a"], task.prompt.extra_info["b"]
        for e in experiences:
            response = e.tokens[e.prompt_length:].tolist()
            mine = tok.decode([t for t, m in zip(response, e.action_mask.tolist()) if m])
            theirs = tok.decode([t for t, m in zip(response, e.action_mask.tolist()) if not m])
            if mine == "#### 7<|im_end|>":  # guessed: one turn, nothing masked, scored by the exact answer
                assert theirs == "" and e.reward == float(a * b == 7)
                continue
            n_tool += 1
            assert tok.decode(e.tokens.tolist()).endswith(
                f'[calc(e="{a}*{b}")]<|im_end|>\n<|im_start|>tool\n{a * b}<|im_end|>\n'
                f"<|im_start|>assistant\n#### {a * b}<|im_end|>")
            assert mine == f'[calc(e="{a}*{b}")]<|im_end|>#### {a * b}<|im_end|>'  # the model's two turns
            assert theirs == f"\n<|im_start|>tool\n{a * b}<|im_end|>\n<|im_start|>assistant\n"  # the tool's turn
            assert e.reward == 1.0
    assert 0 < n_tool < 12
    # the batch keeps the mask: the loss, the advantages and the update see only the policy's tokens
    batch = to_batch([e for r in results for e in r], tok.pad_token_id)
    assert batch.loss_mask.sum() < batch.response_mask.sum()
    before = trainable(run.trainer.model)
    metrics = run.trainer.train_step(batch, 1, Timer())
    assert_all_moved(before, run.trainer.model)
    # clip_ratio counts a row whose last turn hit the per-turn limit, not a conversation longer than one turn's
    assert metrics["response_length/max"] > 16 and metrics["response_length/clip_ratio"] == 0.0
    tool_tokens = batch.response_mask.bool() & ~batch.loss_mask.bool()
    assert tool_tokens.any() and (batch.advantages[tool_tokens] == 0).all()
    assert (batch.advantages[batch.loss_mask.bool()] != 0).any()


def test_the_trinity_tools_example_trains_its_openai_agent(assets, tmp_path, monkeypatch):
    """examples/trinity_tools.yaml with examples/workflows/calculator_agent.py (TRINITY_PLUGIN_DIRS): the agent's
    tool calls go through the endpoint's parser, its calculator answers, every call it made is an experience, and
    one step trains on them."""
    pytest.importorskip("openai")
    from pathlib import Path

    from rft.experience import to_batch
    from rft.orchestration.run import SyncRun
    from rft.tasks import write_calculator
    from rft.trainer.configure import load_trinity

    root = Path(__file__).resolve().parents[1]
    write_calculator(tmp_path / "calc", n_train=16, n_val=4, seed=0)
    for name, value in (("TRINITY_PLUGIN_DIRS", str(root / "examples" / "workflows")),
                        ("RFT_MODEL", str(assets / "model")), ("RFT_DATA", str(tmp_path / "calc")),
                        ("RFT_CHECKPOINT_ROOT", str(tmp_path / "out"))):
        monkeypatch.setenv(name, value)
    kind, cfg = load_trinity(str(root / "examples" / "trinity_tools.yaml"),
                             ["buffer.batch_size=4", "algorithm.repeat_times=3", "buffer.total_steps=1"])
    assert kind == "rl" and cfg.workflow.type == "calculator_agent" and cfg.workflow.enable_history
    assert cfg.workflow.tool_call_parser == "pythonic" and cfg.data.tools_key == "tools"
    run = SyncRun(cfg)
    tok = run.tokenizer
    run.explorer.workflows.server.engine = ScriptedEngine(tok)  # calls the tool, except every third first turn
    experiences, metrics = run.explorer.workflows.explore_step(Timer())
    assert metrics["workflow/skipped_tasks"] == 0 and metrics["workflow/tasks"] == 4
    by_task: dict[str, list] = {}
    for e in experiences:
        by_task.setdefault(e.group, []).append(e)
    assert len(by_task) == 4
    n_tool = 0
    for group in by_task.values():
        a, b = group[0].info["extra_info"]["a"], group[0].info["extra_info"]["b"]
        prompts = [tok.decode(e.tokens[:e.prompt_length].tolist()) for e in group]
        replies = [e.info["response_text"] for e in group]
        # a tool conversation is two calls: the second's prompt holds the call and the calculator's answer
        seconds = [i for i, p in enumerate(prompts) if f"<|im_start|>tool\n{a * b}<|im_end|>" in p]
        n_tool += len(seconds)
        for i in seconds:
            assert replies[i] == f"#### {a * b}" and group[i].reward == 1.0
            assert replies[i - 1] == f'[calc(e="{a}*{b}")]' and group[i - 1].reward == 1.0  # the call that led there
            # the endpoint wrote the call back as the model wrote it: the second prompt extends the first call's tokens
            first = group[i - 1].tokens
            assert torch.equal(group[i].tokens[:len(first)], first)
        assert len(group) == 3 + len(seconds)
    assert 0 < n_tool < 12
    before = trainable(run.trainer.model)
    run.trainer.train_step(to_batch(experiences, tok.pad_token_id), 1, Timer())
    assert_all_moved(before, run.trainer.model)


# ------------------------------------------------------------------------------------------- the LLM judge
class JudgeEngine:
    """A judge that says yes when the graded answer starts with the reference's first digit, no when it starts
    with another character, and rambles (no verdict) when it is empty; it keeps the prompts it was shown."""

    def __init__(self, tok):
        self.tok, self.eos_ids, self.seen = tok, torch.tensor([tok.eos_token_id]), []

    def generate(self, ids, mask, params, generator=None):

        rows = []
        for row, m in zip(ids, mask):
            text = self.tok.decode(row[m.bool()].tolist())
            self.seen.append(text)
            answer = text.split("Answer to grade: ")[1].split("\nIs the answer")[0]
            reference = text.split("Reference answer: ")[1].split("\n")[0]
            reply = "hmm" if not answer else ("Yes." if answer[0] == reference[0] else "No, it is wrong.")
            rows.append(reply)
        return replies_output(self.tok, rows)


def replies_output(tok, replies: list[str]):
    """The engine output of `replies` (one string per row), each ended by EOS and right-padded."""
    from rft.rollout.base import RolloutOutput

    rows = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in replies]
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), tok.pad_token_id)
    valid = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)], valid[i, :len(r)] = torch.tensor(r), 1
    return RolloutOutput(out, valid, torch.zeros(valid.shape))


class CoinJudge:
    """A judge sampling at a temperature: each verdict a coin flipped with the generator it is given (its server's)."""

    def __init__(self, tok):
        self.tok, self.eos_ids = tok, torch.tensor([tok.eos_token_id])

    def generate(self, ids, mask, params, generator=None):
        replies = ["Yes." if float(torch.rand((), generator=generator)) < 0.5 else "No." for _ in range(len(ids))]
        return replies_output(self.tok, replies)


def test_a_sampling_judges_stream_is_in_the_checkpoint(assets, tmp_path):
    """Issue 60: an auxiliary model sampling at a temperature (here a judge) draws from a generator of its own; a
    resumed run started it from its seed again, so the resumed steps' verdicts, and the weights trained on them,
    were not the straight run's. 3 steps == 1 step, then resumed to 3."""
    from safetensors.torch import load_file

    from rft.orchestration.run import SyncRun

    def fit(out: str, steps: int) -> SyncRun:
        run = SyncRun(rl_config(assets, tmp_path / out, "custom_reward_function.path=null",
                                "custom_reward_function.reward_fn_type=llm_judge",
                                f"workflow.auxiliary_models=[{{model_path: {assets / 'model'}, temperature: 1.0}}]",
                                "trainer.save_freq=1", f"trainer.total_training_steps={steps}"))
        run.explorer.auxiliary[0].server.engine = CoinJudge(run.tokenizer)
        run.fit()
        return run

    fit("one", 3)
    fit("two", 1)
    explorer = fit("two", 3).explorer
    one, two = ([json.loads(x) for x in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]
                for out in ("one", "two"))
    assert [x["step"] for x in two] == [1, 2, 3]
    assert [x["critic/score/mean"] for x in two] == [x["critic/score/mean"] for x in one]
    assert len({x["critic/score/mean"] for x in one}) > 1  # the verdicts vary
    a, b = (load_file(tmp_path / out / "model" / "model.safetensors") for out in ("one", "two"))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    # modes explore / both keep the explorer's state with its steps in the buffer: the judge's stream too
    state, judge = explorer.state_dict(), explorer.auxiliary[0].server.generator
    drawn = torch.rand(4, generator=judge)
    explorer.load_state_dict(json.loads(json.dumps(state)))
    assert torch.equal(torch.rand(4, generator=judge), drawn)


def _verdict(response: str, truth: str) -> tuple[float, float]:
    """(reward, judge_parsed) JudgeEngine gives."""
    return (0.0, 0.0) if not response else (float(response[0] == truth[0]), 1.0)


@pytest.mark.parametrize("workflow", ["simple_workflow", "math_workflow"])
def test_the_llm_judge_scores_through_an_auxiliary_model(assets, tmp_path, workflow):
    """reward_fn_type llm_judge: the batched path (one judge call for the step) and a workflow (each task's
    question bound), the training rewards and the validation scores are the judge's verdicts."""
    from rft.orchestration.run import SyncRun

    run = SyncRun(rl_config(assets, tmp_path / "out", "custom_reward_function.path=null",
                            "custom_reward_function.reward_fn_type=llm_judge",
                            f"workflow.auxiliary_models=[{{model_path: {assets / 'model'}}}]",
                            f"workflow.type={workflow}", with_val=True))
    judge = JudgeEngine(run.tokenizer)
    run.explorer.auxiliary[0].server.engine = judge
    experiences, _ = run.explorer.explore_step(Timer())
    assert len(experiences) == 16
    for e in experiences:
        response, truth = e.info["response_text"], str(e.info["ground_truth"])
        assert (e.reward, e.rewards["judge_parsed"]) == _verdict(response, truth)
    questions = {p["content"] for e in experiences for p in e.info["raw_prompt"] if p["role"] == "user"}
    assert {s.split("Question: ")[1].split("\n")[0] for s in judge.seen} == questions
    assert judge.seen[0].startswith("<|im_start|>user\nGrade an answer against the reference.")
    metrics, samples = run.explorer.evaluate()
    assert len(samples) == 8
    expected = [_verdict(s["response"], str(p.ground_truth))[0] for s, p in zip(samples, run.explorer.val_set.prompts)]
    assert [s["score"] for s in samples] == expected
    assert metrics["val-core/arithmetic/reward/mean@1"] == pytest.approx(sum(expected) / 8)


@pytest.mark.parametrize("spec, needle", [
    ("max_tokens: 0", "workflow.auxiliary_models[0].max_tokens=0 must be an integer >= 1"),
    ("max_tokens: abc", "workflow.auxiliary_models[0].max_tokens='abc' must be an integer >= 1"),
    ("temperature: hot", "workflow.auxiliary_models[0].temperature='hot' must be a number >= 0"),
    ("max_tokens: 100000", "workflow.auxiliary_models[0].max_tokens=100000: replies that long, after the prompt, "
                           "pass the 2048 positions of"),
])
def test_a_judges_sampling_settings_are_checked_before_any_model_loads(assets, tmp_path, spec, needle):
    """A judge's max_tokens / temperature of the wrong kind failed when the judge was served, after the policy had
    loaded ('unexpected ValueError ... a bug in rft'); a max_tokens past its positions made every step generate
    that many tokens per row (a judge that seems to hang)."""
    from rft.config.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        rl_config(assets, tmp_path / "out", "custom_reward_function.path=null",
                  "custom_reward_function.reward_fn_type=llm_judge",
                  f"workflow.auxiliary_models=[{{model_path: {assets / 'model'}, {spec}}}]")
    assert needle in str(err.value), str(err.value)


def test_judge_settings_and_verdicts():
    from rft.config.errors import ConfigError
    from rft.rewards.judge import LLMJudge, check_settings, parse_verdict

    assert parse_verdict("Yes, it is.") == 1.0 and parse_verdict("INCORRECT") == 0.0
    assert parse_verdict("the answer is not right: no") == 0.0 and parse_verdict("maybe") is None
    assert parse_verdict("Score: 7/10", "scale", 10) == 0.7 and parse_verdict("12", "scale", 10) == 1.0
    assert parse_verdict("-3", "scale", 10) == 0.0 and parse_verdict("none", "scale") is None
    assert check_settings({}, 1) == 0 and check_settings({"model": 1, "scoring": "scale"}, 2) == 1
    for settings, n, needle in [({}, 0, "needs a judge model"), ({"model": 2}, 2, "model=2"),
                                ({"temperature": 0}, 1, "['temperature'] are not llm_judge settings"),
                                ({"scoring": "stars"}, 1, "scoring='stars'"), ({"max_score": 0}, 1, "max_score=0"),
                                ({"template": "{question} {answer}"}, 1, "names ['answer']"),
                                ({"template": "{question}"}, 1, "never shows the {response}"),
                                ({"template": "{response"}, 1, "double other braces")]:
        with pytest.raises(ConfigError, match=None) as err:
            check_settings(settings, n)
        assert needle in str(err.value), (settings, str(err.value))

    class Handle:
        def chat_batch(self, conversations, n=1):
            self.asked = [c[0]["content"] for c in conversations]
            return [[type("C", (), {"text": t})()] for t in ("8 out of 10", "no idea")]

    handle = Handle()
    judge = LLMJudge(handle, template="Q {question} R {reference} A {response}", scoring="scale", max_score=10)
    assert judge.score_batch(["1+1=", "2+2="], ["2", "5"], ["2", "4"]) == ([0.8, 0.0], {"judge_parsed": [1.0, 0.0]})
    assert handle.asked == ["Q 1+1= R 2 A 2", "Q 2+2= R 4 A 5"]


def test_a_workflow_run_resumes_exactly(assets, tmp_path):
    """2 steps through the tool workflow in one run == 1 step, then a resumed run to 2: the runner's threads, the
    server's batches and the sampling stream repeat (the batches used to hang on thread timing)."""
    from safetensors.torch import load_file

    from rft.orchestration.run import SyncRun
    from rft.tasks import write_calculator

    write_calculator(tmp_path / "calc", n_train=16, n_val=4, seed=0, copy_rows=0)

    def config(out: str, steps: int):
        return rl_config(assets, tmp_path / out, "data.tools_key=tools", "workflow.type=tool_call_workflow",
                         "workflow.args={tool_call_parser: pythonic, max_turns: 2}", "workflow.runner_per_model=4",
                         f"data.train_files={tmp_path / 'calc' / 'train.parquet'}", "data.max_prompt_length=64",
                         "trainer.save_freq=1", f"trainer.total_training_steps={steps}")

    SyncRun(config("one", 2)).fit()
    SyncRun(config("two", 1)).fit()
    SyncRun(config("two", 2)).fit()
    one, two = (load_file(tmp_path / out / "model" / "model.safetensors") for out in ("one", "two"))
    assert max(float((one[k] - two[k]).abs().max()) for k in one) <= 1e-6
    initial = load_file(assets / "model" / "model.safetensors")
    assert max(float((one[k] - initial[k]).abs().max()) for k in one if k in initial) > 1e-4  # it trained
    lines = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2] and all(x["workflow/tasks"] == 4 for x in lines)
    # the step's engine calls (they were counted over the process: the resumed run's step 2 said fewer)
    straight = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert [x["workflow/model_calls"] for x in lines] == [x["workflow/model_calls"] for x in straight]


def test_a_workflow_that_fails_on_every_task_ends_the_run_in_one_line(assets, tmp_path, capsys):
    """Each empty explore step advances the step (it used to be redone forever, a metrics line and a checkpoint of
    'step 1' each round); trainer.bad_update_limit + 1 of them in a row stop the run with one line, exit 2."""
    import json

    from rft.cli import main

    (tmp_path / "flaky.py").write_text(BAD_WORKFLOWS)
    args = ["train", f"actor_rollout_ref.model.path={assets / 'model'}",
            f"data.train_files={assets / 'data' / 'train.parquet'}", f"custom_reward_function.path={assets / 'reward.py'}",
            "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2", "workflow.type=broken",
            f"workflow.path={tmp_path / 'flaky.py'}", "workflow.max_retry_times=0", "trainer.logger=[]",
            "trainer.save_freq=1", "trainer.bad_update_limit=2", f"trainer.default_local_dir={tmp_path / 'out'}"]
    assert main([*args, "trainer.total_training_steps=10"]) == 2
    assert "3 explore steps in a row gave no experience" in capsys.readouterr().err
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2] and all(x["train/empty_step"] == 1.0 for x in lines)
    # fewer empty steps than the limit: the run finishes its steps
    assert main([*args, "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path / 'out2'}"]) == 0


def test_a_run_stopped_among_empty_steps_stops_where_the_straight_run_stops(assets, tmp_path, capsys, monkeypatch):
    """Issue 60: the empty explore steps in a row are in the checkpoint. A run whose workflow fails on every task
    stops at step 3 (bad_update_limit=2); stopped after checkpoint 2 and run again, it counted from 0 again and
    stopped at step 5."""
    import json

    from cli_helpers import sigterm_after_checkpoint

    from rft.cli import main

    (tmp_path / "flaky.py").write_text(BAD_WORKFLOWS)
    args = ["train", f"actor_rollout_ref.model.path={assets / 'model'}",
            f"data.train_files={assets / 'data' / 'train.parquet'}", f"custom_reward_function.path={assets / 'reward.py'}",
            "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2", "workflow.type=broken",
            f"workflow.path={tmp_path / 'flaky.py'}", "workflow.max_retry_times=0", "trainer.logger=[]",
            "trainer.save_freq=1", "trainer.bad_update_limit=2", "trainer.total_training_steps=10"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main([*args, f"trainer.default_local_dir={straight}"]) == 2
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("rft: error:")]
    assert len(line) == 1 and "3 explore steps in a row gave no experience" in line[0]
    sigterm_after_checkpoint(monkeypatch, 2)
    assert main([*args, f"trainer.default_local_dir={stopped}"]) == 143
    monkeypatch.undo()
    capsys.readouterr()
    assert main([*args, f"trainer.default_local_dir={stopped}"]) == 2
    out, err = capsys.readouterr()
    assert "resumed from" in out and line[0].replace(str(straight), str(stopped)) in err.splitlines(), err
    lines = [json.loads(x) for x in (stopped / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2] and all(x["train/empty_step"] == 1.0 for x in lines)


def test_a_reward_that_fails_on_every_response_of_a_workflow_step_stops_the_run(assets, tmp_path, capsys):
    """Workflows score each response on its own (Task.score): with on_error=zero a reward function failing on all of
    them is still a broken function, said once for the step with its first failure, exit 2."""
    from rft.cli import main

    (tmp_path / "broken.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                        "    raise KeyError('answer')\n")
    out = tmp_path / "out"
    assert main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", "data.max_prompt_length=32",
                 "data.max_response_length=4", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                 "actor_rollout_ref.rollout.n=2", "workflow.type=math_workflow", "trainer.logger=[]",
                 f"custom_reward_function.path={tmp_path / 'broken.py'}", "custom_reward_function.on_error=zero",
                 "trainer.total_training_steps=2", f"trainer.default_local_dir={out}"]) == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("rft: error:")]
    assert len(errors) == 1 and "failed on every row of explore step 1 (8 of 8;" in errors[0], errors
    assert "raised KeyError: 'answer' on row 0" in errors[0], errors
    assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text()


@pytest.mark.parametrize("broken", ["every", "half"])
def test_a_workflow_validation_says_its_failed_rows_and_stops_when_all_failed(assets, tmp_path, capsys, caplog,
                                                                                broken):
    """Validation through a workflow had no check: a reward failing on every response (on_error=zero) reported a
    val-core score of 0 as the model's. It stops the run as the plain validation does (exit 2, one line naming
    validation and its count), and a pass where some failed says how many in one warning."""
    from rft.cli import main

    fails = "True" if broken == "every" else "next(CALLS) % 2"
    (tmp_path / "broken.py").write_text(
        "import itertools\nCALLS = itertools.count()\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        f"    if {fails}:\n        raise KeyError('answer')\n    return 1.0\n")
    out = tmp_path / "out"
    code = main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}",
                 f"data.val_files={assets / 'data' / 'val.parquet'}", "trainer.val_before_train=true",
                 "trainer.total_training_steps=1", "actor_rollout_ref.rollout.val_kwargs.n=2",
                 "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=4",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2",
                 "workflow.type=math_workflow", "trainer.logger=[]",
                 f"custom_reward_function.path={tmp_path / 'broken.py'}", "custom_reward_function.on_error=zero",
                 f"trainer.default_local_dir={out}"])
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("rft: error:")]
    if broken == "every":
        assert code == 2 and len(errors) == 1, err
        assert "the reward function failed on every row of validation (16 of 16;" in errors[0], errors
        assert "its score would be 0 whatever the model answered" in errors[0], errors
        assert "raised KeyError: 'answer' on row 0" in errors[0], errors
        assert not (out / "val_before_train.json").exists()
    else:
        said = [r.getMessage() for r in caplog.records if "rows scored 0 by custom_reward_function.on_error=zero"
                in r.getMessage()]
        assert code == 0 and errors == [], err
        assert said and said[0].startswith("rft: validation: 8 of 16 rows scored 0"), said


def test_a_workflow_without_the_package_it_needs_stops_the_run_at_its_first_task(assets, tmp_path, capsys,
                                                                                  monkeypatch):
    """rft's API refusing the setup (an agent asking for the OpenAI client where openai is not installed) is not a
    task's failure: the run stops with that line at once (it failed every task of every step, and the run only
    stopped after trainer.bad_update_limit empty steps)."""
    from rft.cli import main

    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` raises ImportError
    (tmp_path / "flaky.py").write_text(BAD_WORKFLOWS)
    assert main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", "data.max_prompt_length=32",
                 "data.max_response_length=4", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                 "workflow.type=agent", f"workflow.path={tmp_path / 'flaky.py'}", "trainer.logger=[]",
                 f"custom_reward_function.path={assets / 'reward.py'}", "trainer.total_training_steps=5",
                 f"trainer.default_local_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert [x for x in err.splitlines() if x.startswith("rft: error:")] == [
        "rft: error: the OpenAI client needs the openai package: pip install 'rft[agents]'"]
    assert "workflow Agent on task" not in err  # not retried as a task's failure
    assert not (tmp_path / "out" / "metrics.jsonl").exists() or not (tmp_path / "out" / "metrics.jsonl").read_text()


@pytest.mark.parametrize("workflow, args, unknown", [
    ("tool_call_workflow", "{tools_path:/x.py}", "'tools_path:/x.py'"),  # YAML flow style without the space
    ("tool_call_workflow", "{max_turn: 3}", "'max_turn'"),
    ("math_workflow", "{max_turns: 3}", "'max_turns'"),
])
def test_arguments_a_built_in_workflow_does_not_read_are_refused(assets, tmp_path, capsys, workflow, args, unknown):
    """They were read as nothing: the run trained with the defaults (a tools_path that does not exist, misspelt,
    trained for minutes on the built-in tools)."""
    from rft.cli import main

    assert main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", f"workflow.type={workflow}",
                 f"workflow.args={args}", f"trainer.default_local_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert f"workflow.args: [{unknown}] are not arguments of workflow.type='{workflow}'" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("workflow", ["alfworld_workflow", "step_wise_alfworld_workflow"])
@pytest.mark.parametrize("steps", ["0", "many"])
def test_alfworlds_max_env_steps_must_be_a_positive_integer(tmp_path, workflow, steps):
    """Read as an int in the workflow: a bad value failed every task at run time, retried; now one line first."""
    from rft.config.errors import ConfigError
    from rft.trainer.configure import load_config

    with pytest.raises(ConfigError, match=f"workflow.args.max_env_steps must be a positive integer, got "
                                          f"{0 if steps == '0' else repr(steps)}"):
        load_config(None, ["data.train_files=t.jsonl", "actor_rollout_ref.model.path=m", f"workflow.type={workflow}",
                           f"workflow.args={{max_env_steps: {steps}}}"], validate_paths=False)


@pytest.mark.parametrize("workflow", ["simple_workflow", "tool_call_workflow"])
def test_a_reasoning_parser_without_the_endpoint_is_refused_before_the_model_loads(assets, tmp_path, capsys,
                                                                                 workflow):
    from rft.cli import main

    assert main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", f"workflow.type={workflow}",
                 "workflow.reasoning_parser=qwen3", f"trainer.default_local_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "workflow.reasoning_parser='qwen3' has no effect" in err and err.startswith("rft: error:"), err
    assert not (tmp_path / "out").exists()


def test_a_tools_file_that_does_not_import_is_refused_before_the_model_loads(assets, tmp_path, capsys):
    from rft.cli import main

    (tmp_path / "tools.py").write_text("def add(a, b:\n    return a + b\n")
    assert main(["train", f"actor_rollout_ref.model.path={assets / 'model'}",
                 f"data.train_files={assets / 'data' / 'train.parquet'}", "workflow.type=tool_call_workflow",
                 f"workflow.args={{tools_path: {tmp_path / 'tools.py'}}}",
                 f"trainer.default_local_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "workflow.args.tools_path" in err and "SyntaxError" in err and not (tmp_path / "out").exists()


def tool_workflow_command(assets: Path, tmp_path: Path, out: Path, *extra: str) -> list[str]:
    """`rft train` with the calculator tool workflow (tasks in tmp_path/calc) on two trainer processes."""
    return [sys.executable, "-m", "rft", "train", f"actor_rollout_ref.model.path={assets / 'model'}",
            f"data.train_files={tmp_path / 'calc' / 'train.parquet'}", "data.tools_key=tools",
            "workflow.type=tool_call_workflow", "workflow.args={tool_call_parser: pythonic, max_turns: 2}",
            "workflow.runner_per_model=4", "data.max_prompt_length=64", "data.max_response_length=8",
            "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2", "trainer.n_gpus_per_node=2", "trainer.save_freq=1",
            "trainer.logger=[]", "trainer.val_before_train=false", f"trainer.default_local_dir={out}", *extra]


@pytest.mark.slow
def test_the_tool_workflow_on_the_on_policy_schedule_beside_two_trainer_processes(assets, tmp_path):
    """Mode both's default schedule (sync_interval 1, sync_offset 0) with the tool workflow and two trainer
    processes: the explorer runs as a process of its own (the log says why), still strictly on policy: every step
    generated with the weights the trainer starts it from (staleness 0, the explorer's log-probs the trainer's)."""
    import subprocess

    from rft.tasks import write_calculator

    write_calculator(tmp_path / "calc", n_train=16, n_val=4, seed=0)
    out = tmp_path / "out"
    proc = subprocess.run(tool_workflow_command(assets, tmp_path, out, "trainer.total_training_steps=2",
                                                "actor_rollout_ref.actor.ppo_epochs=2"),  # old log-probs computed
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "its explorer runs as a process of its own" in proc.stdout and "on 2 processes" in proc.stdout
    trainer = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    explorer = [json.loads(x) for x in (out / "explorer" / "metrics.jsonl").read_text().splitlines()]
    assert [x["rollout/model_version"] for x in explorer] == [0, 1]
    assert [x["rollout/staleness/max"] for x in trainer] == [0, 0]
    assert all(x["training/rollout_probs_diff_max"] < 1e-4 for x in trainer), trainer


@pytest.mark.heavy
def test_the_tool_workflow_runs_on_two_explorer_processes_beside_two_trainer_processes(assets, tmp_path):
    """trainer.explorer_num=2 in mode both with the multi-turn tool workflow, and the trainer on two FSDP processes:
    two explorer processes, each running its steps' tasks through its own workflow runners and model server,
    taking turns at the steps; the trainer reads every experience once. The same run with explorer 1 SIGKILLed
    after its first step stops (the trainer says its explorer died), and run again resumes to the uninterrupted
    run's final weights."""
    import os
    import signal
    import subprocess
    import time

    from safetensors.torch import load_file

    from rft.buffer import SQLBuffer, database_url
    from rft.tasks import write_calculator

    write_calculator(tmp_path / "calc", n_train=16, n_val=4, seed=0)

    def command(out: Path) -> list[str]:
        return tool_workflow_command(assets, tmp_path, out, "synchronizer.sync_interval=2", "trainer.explorer_num=2",
                                     "trainer.total_training_steps=4")

    def finished(out: Path) -> str:
        proc = subprocess.run(command(out), capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    out = tmp_path / "out"
    assert "on 2 processes" in finished(out)
    for folder, steps in (("explorer", [1, 3]), ("explorer_1", [2, 4])):
        lines = [json.loads(x) for x in (out / folder / "metrics.jsonl").read_text().splitlines()]
        assert [x["step"] for x in lines] == steps
        assert all(x["workflow/tasks"] == 4 and x["workflow/skipped_tasks"] == 0 for x in lines)
    reads = SQLBuffer(database_url(str(out / "buffer.sqlite"))).reads_by_id()
    assert len(reads) == 4 * 4 * 2 and all(len(steps) == 1 for steps in reads.values())

    killed_out = tmp_path / "killed"
    killed = subprocess.Popen(command(killed_out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=tmp_path)
    # killed once explorer 1 has written step 2 and the trainer has saved step 1 (so a rerun has something to resume
    # from), and before explorer 1 can run step 4 (it waits for the weights of trainer step 2)
    metrics = killed_out / "explorer_1" / "metrics.jsonl"
    saved = killed_out / "checkpoints" / "global_step_1"
    deadline = time.monotonic() + 600
    while not (metrics.is_file() and metrics.read_text().strip() and saved.is_dir()):
        assert killed.poll() is None and time.monotonic() < deadline, "explorer 1 or the trainer never got there"
        time.sleep(0.05)
    assert len(metrics.read_text().splitlines()) == 1, "explorer 1 ran past its first step before it was killed"
    os.kill(_process_with_env(killed.pid, b"RFT_EXPLORER_RANK=1"), signal.SIGKILL)
    log, _ = killed.communicate(timeout=300)
    assert killed.returncode != 0 and "explorer" in log and not (killed_out / "model").exists(), log[-3000:]
    assert "resumed from" in finished(killed_out)
    reads = SQLBuffer(database_url(str(killed_out / "buffer.sqlite"))).reads_by_id()
    assert len(reads) == 4 * 4 * 2 and all(len(steps) == 1 for steps in reads.values())
    a, b = (load_file(folder / "model" / "model.safetensors") for folder in (out, killed_out))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


def _process_with_env(root: int, entry: bytes) -> int:
    """The process below `root` whose environment holds `entry`."""
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            if entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
            todo += [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                     for c in (t / "children").read_text().split()]
        except OSError:
            continue
    raise AssertionError(f"no process with {entry!r} below {root}")


@pytest.mark.parametrize("truncation", ["left", "right", "error"])
def test_chat_and_generate_cut_a_prompt_over_the_limit_as_data_truncation_says(engine, truncation):
    """A workflow's chat / generate prompt over data.max_prompt_length is cut as the dataset's are (Trinity-RFT's
    vLLM engine cuts every call at max_prompt_tokens): math_workflow's system prompt used to send gsm8k prompts of
    ~480 tokens with max_prompt_tokens 256. `error` sends it whole, as before."""
    from rft.data.chat import encode

    inner, tok = engine
    handle = ModelHandle(GenerationServer(inner, tok, torch.Generator().manual_seed(0)), tok,
                         SamplingParams(n=1, temperature=1.0, max_tokens=2), max_prompt_tokens=8,
                         truncation=truncation)
    messages = [{"role": "system", "content": "think first"}, {"role": "user", "content": "12+34+56+78="}]
    full = encode(tok, messages)
    text = "1+2+3+4+5+6+7+8+9="
    raw = tok(text, add_special_tokens=False)["input_ids"]
    assert len(full) > 8 and len(raw) > 8
    (chat,) = handle.chat(messages)
    ((generated,),) = handle.generate([text])
    expected = {"left": lambda ids: ids[-8:], "right": lambda ids: ids[:8], "error": lambda ids: ids}[truncation]
    assert chat.prompt_ids == expected(full) and generated.prompt_ids == expected(raw)


TRINITY_TUTORIAL_WORKFLOWS = '''
from rft.experience import Experience
from rft.explorer.workflow import Workflow, register_workflow

def reward_of(text):
    return float(len(text) % 3)

@register_workflow("tutorial_experiences")
class TutorialExperiences(Workflow):
    """Trinity-RFT's tutorial workflow: an Experience built from each response's tokens, prompt length and
    log-probs (no action mask, no group)."""
    def run(self):
        responses = self.model.chat([{"role": "user", "content": "Question: " + str(self.task.truth)}],
                                    n=self.task.repeat_times, temperature=1.0)
        return [Experience(tokens=r.tokens, prompt_length=r.prompt_length, reward=reward_of(r.response_text),
                           logprobs=r.logprobs) for r in responses]

@register_workflow("tutorial_responses")
class TutorialResponses(Workflow):
    """The chat's results returned as they are, each with its reward set (Trinity's chat returns experiences)."""
    def run(self):
        responses = self.model.chat(self.task.messages, n=self.task.repeat_times)
        for r in responses:
            r.reward = reward_of(r.response_text)
        return responses
'''


@pytest.mark.parametrize("name", ["tutorial_experiences", "tutorial_responses"])
def test_workflows_written_as_trinitys_tutorial_trains(assets, tmp_path, name):
    """Trinity-RFT's tutorial ways of returning a workflow's result: Experience(tokens, prompt_length, reward,
    logprobs) from the chat's responses, or the responses themselves with their reward set; each experience is
    the response's tokens with its reward, and a step moves every trainable parameter."""
    from rft.orchestration.run import SyncRun

    (tmp_path / "tutorial.py").write_text(TRINITY_TUTORIAL_WORKFLOWS)
    run = SyncRun(rl_config(assets, tmp_path / "out", f"workflow.type={name}", f"workflow.path={tmp_path / 'tutorial.py'}",
                            "actor_rollout_ref.rollout.n=4", "data.train_batch_size=2",
                            "actor_rollout_ref.actor.ppo_mini_batch_size=2"))
    before = trainable(run.trainer.model)
    metrics = run.train_step(1, Timer())
    assert metrics["workflow/skipped_tasks"] == 0 and metrics["workflow/tasks"] == 2
    assert metrics["actor/grad_norm"] > 0
    assert_all_moved(before, run.trainer.model)


TRINITY_PLUGIN = '''
from typing import List, Optional

from trinity.common.experience import Experience
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, Workflow
from trinity.utils.log import get_logger

logger = get_logger(__name__)
RUNS = []


@WORKFLOWS.register_module("plugin_one_answer")
class OneAnswer(Workflow):
    """Trinity-RFT's tutorial workflow as its plugin files write it: one response a run (can_repeat False)."""

    def __init__(self, *, task: Task, model: ModelWrapper, auxiliary_models: Optional[List] = None):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.rollout_args = task.rollout_args

    def run(self) -> List[Experience]:
        RUNS.append((self.task.index, self.rollout_args.n, self.rollout_args.temperature))
        responses = self.model.chat(self.task.messages, temperature=self.rollout_args.temperature, logprobs=0)
        response = responses[0]
        return [Experience(tokens=response.tokens, prompt_length=response.prompt_length,
                           reward=float(len(response.response_text) % 3), logprobs=response.logprobs)]


@WORKFLOWS.register_module("plugin_all_answers")
class AllAnswers(Workflow):
    """A workflow that repeats itself (can_repeat True): Trinity's runner tells it how often first."""

    can_repeat = True

    def set_repeat_times(self, repeat_times, run_id_base):
        self.repeat_times = repeat_times

    def run(self) -> List[Experience]:
        RUNS.append((self.task.index, self.repeat_times, None))
        responses = self.model.chat(self.task.messages, n=self.repeat_times)
        for r in responses:
            r.reward = float(len(r.response_text) % 3)
        return responses
'''


def test_a_trinity_plugin_file_runs_unchanged_each_task_repeat_times_over(assets, tmp_path):
    """A workflow file written against Trinity-RFT's modules (trinity.common.workflows, .experience, .models,
    trinity.utils.log) imports rft's stand-ins; its class does not repeat itself (Trinity's default), so each task
    runs it rollout.n times, one response each, and the group of 4 trains."""
    import sys

    from rft.orchestration.run import SyncRun

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "one_answer.py").write_text(TRINITY_PLUGIN)
    run = SyncRun(rl_config(assets, tmp_path / "out", "workflow.type=plugin_one_answer",
                            f"workflow.path={tmp_path / 'plugins'}", "actor_rollout_ref.rollout.n=4",
                            "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"))
    assert getattr(sys.modules["trinity"], "__rft__", False)
    plugin = next(m for name, m in sys.modules.items() if name.startswith("rft_workflow_one_answer"))
    before = trainable(run.trainer.model)
    metrics = run.train_step(1, Timer())
    assert metrics["workflow/skipped_tasks"] == 0 and metrics["workflow/tasks"] == 2
    assert sorted(index for index, _, _ in plugin.RUNS) == [0, 0, 0, 0, 1, 1, 1, 1]  # 4 runs a task
    assert {(n, temperature) for _, n, temperature in plugin.RUNS} == {(4, 1.0)}
    assert metrics["actor/grad_norm"] > 0
    assert_all_moved(before, run.trainer.model)
    # the repeatable one: one run a task, told its 4 repeats, 4 responses (the file is imported again: its module)
    run = SyncRun(rl_config(assets, tmp_path / "out2", "workflow.type=plugin_all_answers",
                            f"workflow.path={tmp_path / 'plugins'}", "actor_rollout_ref.rollout.n=4",
                            "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"))
    plugin = next(m for name, m in sys.modules.items() if name.startswith("rft_workflow_one_answer"))
    metrics = run.train_step(1, Timer())
    assert metrics["workflow/skipped_tasks"] == 0 and sorted(plugin.RUNS) == [(0, 4, None), (1, 4, None)]
    assert metrics["actor/grad_norm"] > 0


def test_logprobs_asks_for_the_sampled_tokens_only():
    from rft.explorer.model import ModelHandle

    handle = ModelHandle(None, None, PARAMS)
    assert handle.params(2, logprobs=0).n == 2 and handle.params(logprobs=True).temperature == PARAMS.temperature
    with pytest.raises(TypeError, match="logprobs=5: a completion has the log-prob of each sampled token"):
        handle.params(logprobs=5)


def test_a_completion_returned_without_its_reward_is_refused_and_with_it_is_its_experience():
    import torch

    from rft.explorer.model import Completion
    from rft.explorer.runner import as_experiences, check_experiences

    c = Completion(text="12", prompt_ids=[1, 2, 3], token_ids=[7, 8], logprobs=[-0.5, -0.25], finish_reason="stop")
    assert "a completion whose reward is not set" in check_experiences(as_experiences([c]))
    c.reward = 0.75
    e, = as_experiences([c])
    assert check_experiences([e]) is None
    assert e.tokens.tolist() == [1, 2, 3, 7, 8] and e.prompt_length == 3 and e.reward == 0.75
    assert e.action_mask.tolist() == [1, 1] and e.logprobs.tolist() == [-0.5, -0.25]
    assert e.info["response_text"] == "12" and e.logprobs.dtype == torch.float32


def test_an_experience_without_a_token_to_learn_passes_only_when_the_workflow_says_so():
    """Trinity-RFT's RAFT workflows return an experience that trains nothing for an episode they do not learn: rft's
    runner takes one whose action mask is all 0 only with info['kept'] = False (else it is a workflow's bug), and a
    mini-batch of such rows has a loss of 0, not 0 / 0."""
    import torch

    from rft.algorithms.aggregation import agg_loss
    from rft.experience import Experience, to_batch
    from rft.explorer.runner import check_experiences
    from rft.workers.minibatch import mini_batch_norm

    def exp(mask, **info):
        return Experience(tokens=torch.tensor([5, 6, 7, 8]), prompt_length=2, action_mask=torch.tensor(mask),
                          logprobs=torch.zeros(2), reward=0.0, group="", info=info)

    assert "action mask is all 0" in check_experiences([exp([0, 0])])
    assert check_experiences([exp([0, 0], kept=False)]) is None and check_experiences([exp([1, 0])]) is None
    batch = to_batch([exp([0, 0], kept=False), exp([0, 0], kept=False)], pad_token_id=0)
    norm = mini_batch_norm(batch, 2)
    assert (norm.num_tokens, norm.num_seqs) == (1.0, 2.0)
    loss = agg_loss(torch.ones(2, 2, requires_grad=True), batch.loss_mask, "token-mean", norm)
    assert float(loss) == 0.0


ASYNC_AGENT_WORKFLOW = '''
from rft.explorer.workflow import Workflow, register_workflow

@register_workflow("async_agent")
class AsyncAgent(Workflow):
    """Written as Trinity-RFT's async workflows are: run_async, the async OpenAI client, chat_async, response_text."""
    is_async = True

    async def run_async(self):
        client = self.model.get_openai_async_client()
        reply = await client.chat.completions.create(model=client.model_path, messages=self.task.messages, n=1,
                                                     max_tokens=4, logprobs=True, temperature=1.0)
        (second,) = await self.model.chat_async(self.task.messages + [
            {"role": "assistant", "content": reply.choices[0].message.content}, {"role": "user", "content": "again"}])
        experiences = self.model.extract_experience_from_history(clear_history=True)
        for i, e in enumerate(experiences):
            e.reward = float(len(second.response_text) % 3) + 0.1 * self.task.index + 0.01 * i
        return experiences
'''

