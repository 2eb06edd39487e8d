"""A verl interaction rft runs as verl does (verl's gsm8k interaction of its sglang_multiturn examples, without verl): after
each reply the user says whether the answer (after "####") is right; a wrong one is answered "try again" and the
conversation goes on, a right one ends it. Each turn's score (1 right, 0 wrong) reaches the reward function as
extra_info["turn_scores"].

interaction_config.yaml names this class (its folder is searched when the module is not on PYTHONPATH)."""

from __future__ import annotations

from rft.rewards.gsm8k import gsm8k_score


class Gsm8kInteraction:
    """verl's BaseInteraction methods, async as verl's are; one instance serves every conversation, by instance_id."""

    def __init__(self, config: dict):
        self.config, self.name = config, config.get("name", "gsm8k")
        self._truth: dict[str, str] = {}

    async def start_interaction(self, instance_id: str, ground_truth: str | None = None, **kwargs) -> str:
        self._truth[instance_id] = str(ground_truth)
        return instance_id

    async def generate_response(self, instance_id: str, messages: list[dict], **kwargs):
        reply = next((m.get("content") or "" for m in reversed(messages) if m["role"] == "assistant"), "")
        score = await self.calculate_score(instance_id, reply)
        if score == 1.0:
            return True, "Your response is correct!", score, {}
        return False, "Your response is incorrect! You need to reflect on your answer and try again.", score, {}

    async def calculate_score(self, instance_id: str, reply: str = "", **kwargs) -> float:
        return float(gsm8k_score(reply, self._truth[instance_id], method="strict", format_score=0.0, score=1.0))

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        self._truth.pop(instance_id, None)
