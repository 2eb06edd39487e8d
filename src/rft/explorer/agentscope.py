"""AgentScope's ReAct agent on the policy, as Trinity-RFT's `agentscope_react_workflow` and
`agentscope_react_math_workflow` run it (the workflows: `rft.explorer.workflow`). The agent (AgentScope 1's
`ReActAgent`, its `OpenAIChatModel` on the explorer's OpenAI-compatible endpoint through the workflow's async client)
answers the task's question, calling its tools, until it calls `generate_response` with the structured answer
(`FinalResult`: `result`, the solution with its answer in \\boxed{}); every model call it made is an experience
(the endpoint's history), each paid the answer's reward: 1 when the \\boxed{} answer equals the task's (a GSM8K
solution's after "####"), else 0 (`boxed_answer_reward`).

rft's engines sample without guided decoding, so the endpoint does not force the tool call AgentScope asks for with
tool_choice=required; a reply without one goes back to the agent, which reminds the model and asks again (up to its
max_iters, 10), as it does with any model that answers in text."""

from __future__ import annotations

from rft.errors import RftError

GSM8K_SYSTEM_PROMPT = (
    "You are an agent specialized in solving math problems with tools. Please solve the math problem given to you. You "
    "can write and execute Python code to perform calculation or verify your answer. You should return your final "
    "answer within \\boxed{{}}.")
"""Trinity-RFT's system prompt of both workflows (its GSM8K template's; agentscope_react_math_workflow's between two
line breaks), word for word, its doubled braces included."""

RESULT_DESCRIPTION = ("Your solution of the given math problem. Put your final answer in boxed format, e.g., "
                      "\\boxed{42}")


def require_agentscope():
    """AgentScope 1's agent, formatter, message, model and toolkit modules."""
    try:
        import agentscope.agent
        import agentscope.formatter
        import agentscope.message
        import agentscope.model
        import agentscope.tool
    except ImportError as e:
        raise RftError("the AgentScope workflows run AgentScope 1's ReAct agent: pip install 'rft[agentscope]' "
                       f"(`make agentscope`): {e}") from None
    return agentscope


def final_result_model():
    """The structured answer Trinity-RFT's workflows ask the agent for (`generate_response`'s arguments)."""
    from pydantic import BaseModel, Field

    class FinalResult(BaseModel):
        result: str = Field(description=RESULT_DESCRIPTION)

    return FinalResult


def react_agent(model, system_prompt: str, *, python_tool: bool, name: str):
    """A ReAct agent on the workflow's model handle `model` (its async OpenAI client on the endpoint, the task's
    temperature and max_tokens): with `python_tool` AgentScope's execute_python_code tool (agentscope_react_math_
    workflow's), else its meta tool, which lets the agent equip tools itself (agentscope_react_workflow's)."""
    agentscope = require_agentscope()
    client = model.get_openai_async_client()
    chat_model = agentscope.model.OpenAIChatModel(
        api_key="EMPTY", model_name=client.model_path, stream=False,
        generate_kwargs={"temperature": model.sampling.temperature, "max_tokens": model.sampling.max_tokens})
    chat_model.client = client
    toolkit = agentscope.tool.Toolkit()
    if python_tool:
        toolkit.register_tool_function(agentscope.tool.execute_python_code)
    return agentscope.agent.ReActAgent(name=name, sys_prompt=system_prompt, model=chat_model,
                                       formatter=agentscope.formatter.OpenAIChatFormatter(), toolkit=toolkit,
                                       enable_meta_tool=not python_tool)


async def solve(agent, question: str) -> str:
    """The agent's structured `result` for `question` ("" when it ended without one)."""
    from agentscope.message import Msg

    reply = await agent.reply(Msg("user", question, role="user"), structured_model=final_result_model())
    metadata = getattr(reply, "metadata", None)
    return str(metadata.get("result", "")) if isinstance(metadata, dict) else ""


def boxed_answer_reward(result: str, truth) -> dict[str, float]:
    """Trinity-RFT's reward of both workflows (MathBoxedRewardFn without its think format): accuracy 1 when the last
    \\boxed{} of `result` equals the answer (a GSM8K solution's after ####), else 0."""
    from rft.rewards.math_answers import math_boxed_reward

    return {"accuracy": math_boxed_reward("", result, truth)["accuracy"]}


async def memory_length(agent) -> int:
    """The messages in the agent's memory (Trinity-RFT's react_memory_length)."""
    return len(await agent.memory.get_memory())
