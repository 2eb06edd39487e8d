"""The OpenAI-compatible endpoint keeps a conversation's tokens across calls: an agent that sends its history back
unchanged (the real `openai` client, tool calls and their ids, follow-up user turns) prompts the model with exactly
the tokens it sampled, on real chat templates (tests/data/chat_templates, on the tiny tokenizer given each family's
special tokens: all eight) that are not append-only (Qwen3 and DeepSeek-R1 drop earlier reasoning, Mistral moves its tools to
the last user turn, Llama and Gemma trim whitespace); a history the client changed is rendered from its text and
counted.

The model is scripted (replies chosen by how many the prompt holds), so the replies hold what breaks a re-rendering:
a word sampled as single bytes where the tokenizer merges it, leading newlines, reasoning, a family's alternative
end-of-turn token, a reply cut at max_tokens (no end-of-turn token)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from rft.explorer.model import GenerationServer, ModelHandle
from rft.rollout import SamplingParams
from rft.rollout.base import RolloutOutput

openai = pytest.importorskip("openai")

TEMPLATES = Path(__file__).resolve().parent / "data" / "chat_templates"  # ../shared/chat-templates, in the repo

# family: (template, special tokens, non-special added tokens, bos, end-of-turn tokens: the family's own first, tools)
FAMILIES = {
    "qwen25": ("qwen25", [], ["<tool_call>", "</tool_call>"], None, ["<|im_end|>", "<|endoftext|>"], True),
    "qwen3": ("qwen3", [], ["<think>", "</think>", "<tool_call>", "</tool_call>"], None,
              ["<|im_end|>", "<|endoftext|>"], True),
    "llama31": ("llama31", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                            "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"], [], "<|begin_of_text|>",
                ["<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"], True),
    "llama32": ("llama32", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                            "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"], [], "<|begin_of_text|>",
                ["<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"], True),
    "mistral03": ("mistral03", ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                                "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"], [], "<s>", ["</s>"], True),
    "gemma3": ("gemma3", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], [], "<bos>",
               ["<end_of_turn>", "<eos>"], False),
    "gemma2": ("gemma2", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], [], "<bos>",
               ["<end_of_turn>", "<eos>"], False),
    "dsr1": ("dsr1", ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
             ["<think>", "</think>"], "<｜begin▁of▁sentence｜>", ["<｜end▁of▁sentence｜>"], False),
}

TOOLS = [{"type": "function", "function": {"name": "calc", "description": "arithmetic", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]


def family_tokenizer(name: str):
    """The tiny byte-level tokenizer with `name`'s template, special tokens, BOS and EOS."""
    from transformers import AddedToken

    from rft.models.tiny import build_tokenizer

    template, special, plain, bos, eos, _ = FAMILIES[name]
    tok = build_tokenizer()
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in special], special_tokens=True)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    tok.eos_token = eos[0]
    if bos is not None:
        tok.bos_token = bos
    tok.chat_template = (TEMPLATES / f"{template}.jinja").read_text()
    return tok



def scripted_output(rows: list[list[int]], pad: int) -> RolloutOutput:
    """A scripted engine's batch: `rows` right-padded with `pad`, each sampled token at log-prob -0.5."""
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad)
    valid = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)], valid[i, :len(r)] = torch.tensor(r), 1
    return RolloutOutput(out, valid, -0.5 * valid.float())


class ScriptedModel:
    """An engine whose k-th reply in a conversation (k: the `R<i>` markers its prompt holds) is `script[k]`: text
    pieces (a piece in a list is sampled one byte-level token per character, as the tokenizer would not) and how it
    ends: "eos" (the family's own end-of-turn token), "alt" (its alternative one) or "length" (none). Every prompt and
    reply is recorded."""

    def __init__(self, tok, eos: list[str], tools: bool):
        self.tok, self.eos = tok, [tok.convert_tokens_to_ids(t) for t in eos]
        self.eos_ids = torch.tensor(self.eos)
        call = '<tool_call>\n{"name": "calc", "arguments": {"expression": "2+3"}}\n</tool_call>'
        self.script = [
            (["<think>\nthe ", ["user"], " asks for 2+3\n</think>\n\nR1 "] + ([call] if tools else ["five?"]), "eos"),
            (["\n\nR2 the ", ["user"], " gets 5"], "alt"),
            (["  R3 ", ["user"], " 12  "], "length"),
            (["R4 done"], "eos"),
        ]
        self.prompts: list[list[int]] = []
        self.replies: list[list[int]] = []

    def _reply(self, k: int) -> list[int]:
        pieces, end = self.script[k]
        ids = []
        for piece in pieces:
            if isinstance(piece, list):  # one token per character: not the tokenizer's merge of the word
                ids += [self.tok.convert_tokens_to_ids(c) for c in piece[0]]
            else:
                ids += self.tok(piece, add_special_tokens=False)["input_ids"]
        return ids + ({"eos": self.eos[:1], "alt": self.eos[-1:], "length": []}[end])

    def generate(self, ids, mask, params, generator=None):
        rows = []
        for row, valid in zip(ids, mask):
            prompt = row[valid.bool()].tolist()
            text = self.tok.decode(prompt)
            reply = self._reply(min(sum(f"R{k}" in text for k in range(1, 5)), len(self.script) - 1))
            self.prompts.append(prompt)
            self.replies.append(reply)
            rows.append(reply)
        return scripted_output(rows, self.tok.pad_token_id)


def served(name: str, reasoning_parser: str | None = None):
    from rft.explorer.server import Endpoint

    tok = family_tokenizer(name)
    model = ScriptedModel(tok, FAMILIES[name][4], FAMILIES[name][5])
    server = GenerationServer(model, tok, torch.Generator().manual_seed(0))
    endpoint = Endpoint(lambda: ModelHandle(server, tok, SamplingParams(n=1, temperature=1.0, max_tokens=64)),
                        "tiny", "hermes", reasoning_parser=reasoning_parser)
    return endpoint, model, tok


def agent(client, question: str, tools: bool, system: bool = True) -> list:
    """An agent as people write them: the reply objects appended as they came, tool results by tool_call_id, then
    follow-up questions; four calls."""
    extra = {"tools": TOOLS} if tools else {}
    messages: list = [{"role": "system", "content": "Be brief."}] if system else []
    messages.append({"role": "user", "content": question})
    for follow_up in ("Thanks. And 3*4?", "ok", None):
        reply = client.chat.completions.create(model="tiny", messages=messages, **extra).choices[0].message
        messages.append(reply)
        for call in reply.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "5"})
        if reply.tool_calls:
            reply = client.chat.completions.create(model="tiny", messages=messages, **extra).choices[0].message
            messages.append(reply)
        if follow_up is None:
            return messages
        messages.append({"role": "user", "content": follow_up})
    return messages


@pytest.mark.parametrize("name", list(FAMILIES))
def test_later_prompts_never_change_a_sampled_token(name):
    endpoint, model, tok = served(name)
    tools = FAMILIES[name][5]
    try:
        client = openai.OpenAI(base_url=endpoint.api_base, api_key="agent", max_retries=0)
        for question in ("What is 2+3?", "Compute 2+3 please."):
            model.prompts.clear(), model.replies.clear()
            agent(client, question, tools, system=name != "gemma2")  # Gemma 2's template refuses a system role
            calls = len(model.prompts)
            assert calls == (4 if tools else 3), calls
            for k in range(1, calls):  # every earlier prompt and reply, token for token, at the head of the next
                seen = model.prompts[k - 1] + model.replies[k - 1]
                assert model.prompts[k][:len(seen)] == seen, (name, k, tok.decode(model.prompts[k]))
                assert model.prompts[k] != seen  # the new turn's rendering follows
            for k in range(1, calls):  # what follows is the template's rendering of the new messages
                new = tok.decode(model.prompts[k][len(model.prompts[k - 1]) + len(model.replies[k - 1]):])
                assert ("5" in new) if (tools and k == 1) else ("Thanks" in new or "ok" in new), (name, k, new)
                assert not any(f"R{i}" in new for i in range(1, 5)), (name, k, new)  # no reply rendered again
        counts = endpoint.take_counts()
        assert counts["workflow/endpoint_kept"] == 2 * (calls - 1) and counts["workflow/endpoint_rerendered"] == 0
        # Qwen3 drops earlier reasoning, Mistral moves its tool list before the last user turn: counted, per question
        rewrites = {"qwen3": 2, "mistral03": 2, "llama31": 0, "qwen25": 0}.get(name)
        assert rewrites is None or counts["workflow/endpoint_template_rewrites"] == 2 * rewrites, counts
        assert endpoint.take_counts()["workflow/endpoint_kept"] == 0  # taken: the next step counts anew
    finally:
        endpoint.close()


def test_a_reply_cut_at_max_tokens_gets_the_templates_closing():
    """The reply without an end-of-turn token (max_tokens) is closed as the template closes a turn; the one that ends
    with the family's alternative end-of-turn token keeps it and gets only what the template puts after it."""
    endpoint, model, tok = served("qwen25")
    try:
        client = openai.OpenAI(base_url=endpoint.api_base, api_key="agent", max_retries=0)
        agent(client, "What is 2+3?", True)
        after_alt = tok.decode(model.prompts[2][len(model.prompts[1]) + len(model.replies[1]):])
        after_cut = tok.decode(model.prompts[3][len(model.prompts[2]) + len(model.replies[2]):])
        assert tok.decode(model.replies[1][-1:]) == "<|endoftext|>"
        assert after_alt == "\n<|im_start|>user\nThanks. And 3*4?<|im_end|>\n<|im_start|>assistant\n", after_alt
        assert after_cut == "<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n", after_cut
    finally:
        endpoint.close()


def test_a_history_the_client_changed_is_rendered_from_its_text_counted_and_said_once(caplog):
    endpoint, model, tok = served("qwen25")
    try:
        client = openai.OpenAI(base_url=endpoint.api_base, api_key="agent", max_retries=0)
        messages = agent(client, "What is 2+3?", True)
        edited = [dict(m) if isinstance(m, dict) else m.model_dump(exclude_none=True) for m in messages]
        last = max(i for i, m in enumerate(edited) if m["role"] == "assistant")
        edited[last]["content"] = "R4 changed by the agent"  # the last reply, edited: kept up to the one before
        edited.append({"role": "user", "content": "again"})
        with caplog.at_level(logging.WARNING, logger="rft"):
            client.chat.completions.create(model="tiny", messages=edited, tools=TOOLS)
            client.chat.completions.create(model="tiny", messages=edited[:2] + [
                {"role": "assistant", "content": "R1 not what the model said"}, {"role": "user", "content": "?"}])
        seen = model.prompts[-4] + model.replies[-4]  # the reply before the edited one: still kept
        assert model.prompts[-2][:len(seen)] == seen
        assert "R4 changed by the agent" in tok.decode(model.prompts[-2][len(seen):])
        assert "R1 not what the model said" in tok.decode(model.prompts[-1])
        counts = endpoint.take_counts()
        assert counts["workflow/endpoint_rerendered"] == 2, counts
        notes = [r.getMessage() for r in caplog.records if "endpoint returned" in r.getMessage()]
        assert len(notes) == 1 and "workflow/endpoint_rerendered" in notes[0], notes
    finally:
        endpoint.close()


def test_a_last_assistant_message_is_a_finished_turn_unless_the_request_continues_it():
    """As vLLM's server: a request ending with an assistant message gets a new assistant turn after it;
    `continue_final_message: true` (vLLM's extension) has the reply continue it (Trinity-RFT's reply_prefix). A
    workflow's own `model.chat` continues it (test_reply_prefix.py)."""
    endpoint, model, tok = served("qwen25")
    try:
        client = openai.OpenAI(base_url=endpoint.api_base, api_key="other", max_retries=0)
        messages = [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "<think>"}]
        client.chat.completions.create(model="tiny", messages=messages)
        client.chat.completions.create(model="tiny", messages=messages, extra_body={"continue_final_message": True})
        finished, continued = (tok.decode(p) for p in model.prompts[-2:])
        assert finished.endswith("<|im_start|>assistant\n<think><|im_end|>\n<|im_start|>assistant\n"), finished
        assert continued.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n<think>"), continued
    finally:
        endpoint.close()


def test_conversations_of_other_callers_are_not_continued():
    """The kept tokens are the caller's (its key): another key sending the same history gets a fresh rendering."""
    endpoint, model, tok = served("qwen25")
    try:
        first = openai.OpenAI(base_url=endpoint.api_base, api_key="one", max_retries=0)
        messages = [{"role": "user", "content": "What is 2+3?"}]
        reply = first.chat.completions.create(model="tiny", messages=messages, tools=TOOLS).choices[0].message
        history = messages + [reply, {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "5"}]
        other = openai.OpenAI(base_url=endpoint.api_base, api_key="two", max_retries=0)
        other.chat.completions.create(model="tiny", messages=history, tools=TOOLS)
        first.chat.completions.create(model="tiny", messages=history, tools=TOOLS)
        seen = model.prompts[0] + model.replies[0]
        assert model.prompts[1][:len(seen)] != seen and model.prompts[2][:len(seen)] == seen
        assert endpoint.take_counts()["workflow/endpoint_rerendered"] == 1
    finally:
        endpoint.close()


def test_a_tool_calls_id_is_the_tool_workflows_from_the_replys_raw_text():
    """The call's id is `tools.call_id` of the reply's raw text (`turns.raw_reply`), as the tool workflow gives it: the
    same reply gets the same id on another endpoint (a rerun), where uuid's differed."""
    from rft.explorer.tools import call_id
    from rft.explorer.turns import raw_reply

    ids = []
    for _ in range(2):
        endpoint, model, tok = served("qwen25")
        try:
            client = openai.OpenAI(base_url=endpoint.api_base, api_key="agent", max_retries=0)
            reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "2+3?"}],
                                                   tools=TOOLS).choices[0].message
            eos = [tok.convert_tokens_to_ids(t) for t in FAMILIES["qwen25"][4]]
            assert reply.tool_calls[0].id == call_id(raw_reply(tok, model.replies[0], eos), 0)
            ids.append(reply.tool_calls[0].id)
        finally:
            endpoint.close()
    assert ids[0] == ids[1] and len(ids[0]) == 9 and ids[0].isalnum()


# ---------------------------------------------------------------------------------- an agent loop that trains
AGENT = '''
import json

from rft.explorer.tools import calculator
from rft.explorer.workflow import Workflow, register_workflow


@register_workflow("endpoint_calc_agent")
class EndpointCalcAgent(Workflow):
    """An agent that knows only the openai client: it runs each tool call of a reply with the calculator and sends
    the result back by its tool_call_id until a reply without calls; repeat_times episodes, every call an
    experience rewarded with its episode's answer."""

    def run(self):
        client = self.model.get_openai_client()
        out = []
        for _ in range(self.task.repeat_times):
            messages = list(self.task.messages)
            for _ in range(4):
                reply = client.chat.completions.create(model=client.models.list().data[0].id, messages=messages,
                                                       tools=self.task.prompt.tools).choices[0].message
                messages.append(reply)
                if not reply.tool_calls:
                    break
                for call in reply.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": calculator(**json.loads(call.function.arguments))})
            reward, _ = self.task.score(reply.content or "")
            for e in self.model.extract_experience_from_history():
                e.reward = reward
                out.append(e)
        return out
'''


CALLS = {"qwen3": '<tool_call>{{"name": "calc", "arguments": {{"e": "{e}"}}}}</tool_call>',
         "llama31": '{{"name": "calc", "parameters": {{"e": "{e}"}}}}',
         "mistral03": '[TOOL_CALLS] [{{"name": "calc", "arguments": {{"e": "{e}"}}}}]'}
"""A call of the calculator in each family's format (the parser the endpoint picks from the model folder)."""


class CalculatorPolicy(ScriptedModel):
    """Calls the calculator twice (in its family's format, `call`), then answers: right the first time a question
    is answered, wrong (#### 7) the second, so each group's rewards differ."""

    def __init__(self, tok, eos: list[str], call: str):
        super().__init__(tok, eos, True)
        self.answered: dict[str, int] = {}
        self.call = call

    def generate(self, ids, mask, params, generator=None):
        import re

        rows = []
        for row, valid in zip(ids, mask):
            prompt = row[valid.bool()].tolist()
            text = self.tok.decode(prompt)
            a, b = map(int, re.search(r"(\d+)\*(\d+)=", text).groups())
            calls = text.count(f'"{a}*{b}"')  # the calls' arguments (the question reads a*b=)
            if calls < 2:
                reply = self.call.format(e=f"{a}*{b}")
            else:
                self.answered[f"{a}*{b}"] = self.answered.get(f"{a}*{b}", 0) + 1
                reply = f"#### {a * b if self.answered[f'{a}*{b}'] % 2 else 7}"
            ids_ = self.tok(reply, add_special_tokens=False)["input_ids"] + self.eos[:1]
            self.prompts.append(prompt)
            self.replies.append(ids_)
            rows.append(ids_)
        return scripted_output(rows, self.tok.pad_token_id)


def family_model(name: str, folder: Path) -> Path:
    """The tiny model with `name`'s tokenizer (its embeddings resized to the added tokens)."""
    from transformers import AutoModelForCausalLM

    from rft.models.tiny import init_model

    init_model("tiny", folder, seed=0)
    tok = family_tokenizer(name)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("name", ["qwen3", "llama31", "mistral03"])
def test_an_openai_agent_with_tool_calls_trains_three_grpo_steps_through_the_endpoint(tmp_path, name):
    """Two tool calls and an answer per episode, two episodes per task, two tasks a step: every call's prompt holds
    the earlier calls' prompts and sampled tokens unchanged, and three GRPO steps train the tiny model (with the
    family's tokenizer) on the history's experiences. The sampling is scripted (a random tiny model makes no tool
    calls): the policy's replies, not its weights, decide what the agent does."""
    from rl_helpers import assert_all_moved, trainable

    from rft.monitor import Timer
    from rft.orchestration.run import SyncRun
    from rft.tasks import write_calculator
    from rft.trainer.configure import load_config

    write_calculator(tmp_path / "calc", n_train=12, n_val=4, seed=0, copy_rows=0)
    (tmp_path / "agent.py").write_text(AGENT)
    run = SyncRun(load_config(None, [
        f"actor_rollout_ref.model.path={family_model(name, tmp_path / 'model')}",
        f"data.train_files={tmp_path / 'calc' / 'train.parquet'}", "data.tools_key=tools",
        "data.max_prompt_length=1024", "data.max_response_length=64", "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.optim.lr=1e-3", "algorithm.adv_estimator=grpo",
        "workflow.type=endpoint_calc_agent", f"workflow.path={tmp_path / 'agent.py'}", "workflow.enable_history=true",
        "trainer.val_before_train=false", "trainer.total_training_steps=3",
        f"trainer.default_local_dir={tmp_path / 'out'}", "trainer.logger=[]"]))
    policy = CalculatorPolicy(run.tokenizer, FAMILIES[name][4], CALLS[name])
    run.explorer.workflows.server.engine = policy
    start = trainable(run.trainer.model)
    for step in range(1, 4):
        before = trainable(run.trainer.model)
        metrics = run.train_step(step, Timer())
        assert metrics["workflow/skipped_tasks"] == 0 and metrics["workflow/tasks"] == 2, metrics
        assert metrics["workflow/endpoint_kept"] == 2 * 2 * 2 and metrics["workflow/endpoint_rerendered"] == 0
        assert metrics["actor/grad_norm"] > 0
        assert any(not torch.equal(before[k], v) for k, v in trainable(run.trainer.model).items())
    assert_all_moved(start, run.trainer.model)  # every trainable parameter, over the three steps
    # a call after a tool result: its prompt begins with an earlier call's prompt and sampled tokens, unchanged (the
    # calls of two workflows are batched together, so the earlier call is any of those before)
    calls = list(zip(policy.prompts, policy.replies))
    continued = sum(any(prompt[:len(p) + len(r)] == p + r for p, r in calls[:k]) for k, (prompt, _) in enumerate(calls))
    assert len(calls) == 3 * 2 * 2 * 3 and continued == 3 * 2 * 2 * 2  # every second and third call of every episode


def test_vllms_reasoning_parsers_split_a_reply_into_thinking_and_content():
    from rft.explorer.server import split_reasoning

    cases = {  # reply: (deepseek_r1, qwen3), as vLLM's parsers of those names return them
        "<think>a</think>b": (("a", "b"), ("a", "b")),
        "a</think>b": (("a", "b"), ("a", "b")),  # the template opened the thinking
        "<think>a</think>": (("a", None), ("a", None)),
        "plain": (("plain", None), (None, "plain")),  # no </think>: thinking that never ended / no thinking
        "<think>a": (("a", None), (None, "<think>a")),
    }
    for reply, (r1, qwen3) in cases.items():
        assert split_reasoning(reply, "deepseek_r1") == r1, reply
        assert split_reasoning(reply, "qwen3") == qwen3, reply
        assert split_reasoning(reply, None) == (None, reply)


@pytest.mark.parametrize("parser", ["deepseek_r1", "qwen3"])
def test_a_reasoning_parser_returns_the_thinking_apart_and_keeps_the_sampled_tokens(parser):
    """workflow.reasoning_parser (Trinity's rollout_model.reasoning_parser): the first reply's thinking comes back
    as `reasoning_content` (and vLLM's `reasoning`), its tool call parsed from what follows; the agent sends the
    replies back as they came and every later prompt still begins with the tokens sampled."""
    endpoint, model, tok = served("qwen3", reasoning_parser=parser)
    try:
        client = openai.OpenAI(base_url=endpoint.api_base, api_key="agent", max_retries=0)
        first = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "2+3?"}],
                                               tools=TOOLS).choices[0].message
        assert first.reasoning_content == first.reasoning == "\nthe user asks for 2+3\n"
        assert first.content.strip() == "R1" and first.tool_calls[0].function.name == "calc"
        model.prompts.clear(), model.replies.clear()
        messages = agent(client, "What is 2+3?", True)
        assert len(model.prompts) == 4
        for k in range(1, 4):
            seen = model.prompts[k - 1] + model.replies[k - 1]
            assert model.prompts[k][:len(seen)] == seen, k
        second = messages[4]  # "\n\nR2 the user gets 5", no </think>: all thinking for deepseek_r1 (its template
        # opens the thinking), all content for qwen3
        if parser == "deepseek_r1":
            assert second.content is None and "R2 the user gets 5" in second.reasoning_content
        else:
            assert "R2 the user gets 5" in second.content and getattr(second, "reasoning_content", None) is None
    finally:
        endpoint.close()
