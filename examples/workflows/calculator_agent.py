"""A calculator agent written only against the OpenAI client, trained as an rft workflow.

The agent knows nothing of rft's internals: it gets an OpenAI client on the explorer's endpoint, sends the task's
chat messages with its tools, runs the calculator when the model calls it and sends the result back, until the
model answers (or `max_turns` model calls). With `enable_history` every call it made is recorded with its tokens
and log-probs; the workflow only scores the final answer and hands the recorded calls back as experiences.

Use it from a config (examples/trinity_tools.yaml):
    workflow: {type: calculator_agent, path: examples/workflows/calculator_agent.py, enable_history: true}
or in Trinity's dialect: explorer.rollout_model.enable_history: true, buffer.explorer_input.default_workflow_type:
calculator_agent, and workflow.path (rft's key) for the file.
"""

from __future__ import annotations

import json

from rft.explorer.tools import calculator
from rft.explorer.workflow import Workflow, register_workflow


@register_workflow("calculator_agent")
class CalculatorAgent(Workflow):
    """One conversation per sample (the task's repeat_times); workflow args: max_turns (default 2)."""

    def run(self):
        client = self.model.get_openai_client()
        model = client.models.list().data[0].id
        max_turns = int(self.args.get("max_turns", 2))
        experiences = []
        for _ in range(self.task.repeat_times):
            messages = list(self.task.messages)
            for _ in range(max_turns):
                reply = client.chat.completions.create(model=model, messages=messages, tools=self.task.prompt.tools,
                                                       n=1, logprobs=True)
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    arguments = json.loads(call.function.arguments or "{}")
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": calculator(**arguments)})
            answer = next(m.get("content") or "" for m in reversed(messages) if m["role"] == "assistant")
            reward, _ = self.task.score(answer)
            calls = self.model.extract_experience_from_history()  # this conversation's model calls
            for e in calls:
                e.reward = reward
            experiences += calls
        return experiences
