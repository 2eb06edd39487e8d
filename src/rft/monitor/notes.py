"""Notes for a person watching a run: what its numbers alone do not say.

`NothingToLearn`: a step whose advantages are all zero moves the policy by nothing but its KL and entropy terms.
With a group-relative estimator (GRPO, RLOO, ...) that is every step of a model whose responses to each prompt
all score alike, e.g. the quick start's random model, which answers nothing right: its console says
`score=0 pg_loss=0` step after step, and the note says why, once. In Trinity-RFT's mix the SFT loss on the
expert rows still trains such a step, and the note says so; a distillation loss (`actor/distill_loss`, the teacher's
divergence differentiated through the student) trains it whatever the advantages, and no note is given. Where rows were scored 0 because the reward function
failed on them (custom_reward_function.on_error=zero), or because an llm_judge's reply held no verdict, the note
says what share, not that the model answers wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

ADVANTAGES = ("critic/advantages/min", "critic/advantages/max")
SCORES = ("critic/score/min", "critic/score/max")
SUBSTITUTED = "reward_extra/reward_failed/mean"
"""The share of a step's rows whose reward function failed, scored 0 by on_error=zero (rft.rewards.scoring)."""
JUDGED = "reward_extra/judge_parsed/mean"
"""The share of a step's rows whose llm_judge reply held a verdict (rft.rewards.judge); the others scored 0."""


class NothingToLearn:
    """The note for the first step of a run with every advantage zero (`note`); None for every other step."""

    def __init__(self) -> None:
        self.said = False

    def note(self, step: int, metrics: Mapping[str, float]) -> str | None:
        if self.said or "actor/distill_loss" in metrics or not all(metrics.get(k) == 0 for k in ADVANTAGES):
            return None
        self.said = True
        low, high = (metrics.get(k) for k in SCORES)
        what = f"all rewards equal ({low:g})" if low is not None and low == high else \
            "each prompt's responses scored alike"
        nothing = ("nothing for the policy loss to learn this step (the SFT loss on the expert rows still trains)"
                   if "actor/sft_loss" in metrics else "nothing to learn this step")
        substituted = metrics.get(SUBSTITUTED, 0.0)
        unjudged = 1.0 - metrics.get(JUDGED, 1.0)
        if substituted > 0:
            why = (f"{substituted:.0%} of its rows scored 0 by custom_reward_function.on_error=zero because the reward "
                   "function failed on them, as the warnings say: rewards that say nothing of the model; fix the "
                   "reward function")
        elif unjudged > 0:
            why = (f"the judge's reply held no verdict for {unjudged:.0%} of its rows, scored 0 "
                   f"({JUDGED}={1 - unjudged:g}): rewards that say nothing of the policy; make the judge answer "
                   "in the form custom_reward_function.reward_kwargs.scoring reads (its template, a judge model "
                   "that follows it, enough max_tokens)")
        else:
            why = ("a model that answers every prompt wrong, as a random one does, or every one right, has no "
                   "better answer to learn from")
        return f"rft: step {step}: {what}: no advantage, {nothing} ({why}); this note is not repeated"
