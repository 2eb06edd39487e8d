"""The notes a run prints for the person watching it (rft.monitor.notes)."""

from __future__ import annotations

from rft.monitor.notes import NothingToLearn

ZERO_ADVANTAGES = {"critic/advantages/min": 0.0, "critic/advantages/max": 0.0}


def test_a_step_with_nothing_to_learn_is_told_once_with_its_cause():
    notes = NothingToLearn()
    assert notes.note(1, {"critic/advantages/min": -0.7, "critic/advantages/max": 1.2, "critic/score/min": 0.0,
                          "critic/score/max": 1.0}) is None  # something to learn
    assert notes.note(2, {"train/empty_step": 1.0}) is None  # no update at all: no advantages logged
    # every prompt's group alike, but not every reward: some prompts always right, others always wrong
    said = notes.note(3, {**ZERO_ADVANTAGES, "critic/score/min": 0.0, "critic/score/max": 1.0})
    assert said == ("rft: step 3: each prompt's responses scored alike: no advantage, nothing to learn this step (a "
                    "model that answers every prompt wrong, as a random one does, or every one right, has no better "
                    "answer to learn from); this note is not repeated")
    assert notes.note(4, {**ZERO_ADVANTAGES, "critic/score/min": 0.0, "critic/score/max": 0.0}) is None  # said
    fresh = NothingToLearn()
    assert fresh.note(7, {**ZERO_ADVANTAGES, "critic/score/min": 1.0, "critic/score/max": 1.0}).startswith(
        "rft: step 7: all rewards equal (1): no advantage, nothing to learn this step")


def test_a_mix_step_with_nothing_for_the_policy_loss_says_the_sft_loss_still_trains():
    """Trinity's mix: zero advantages leave the policy loss nothing, but the SFT loss on the expert rows still trains
    the model: the note must not say the step learns nothing."""
    said = NothingToLearn().note(1, {**ZERO_ADVANTAGES, "critic/score/min": 0.0, "critic/score/max": 0.0,
                                     "actor/sft_loss": 5.6})
    assert said.startswith("rft: step 1: all rewards equal (0): no advantage, nothing for the policy loss to learn "
                           "this step (the SFT loss on the expert rows still trains)"), said
    assert "nothing to learn this step" not in said


def test_a_step_whose_rewards_were_substituted_does_not_blame_the_model():
    """on_error=zero scored some rows 0 because the reward function failed on them: the note says what share, and
    not that the model answers wrong."""
    said = NothingToLearn().note(2, {**ZERO_ADVANTAGES, "critic/score/min": 0.0, "critic/score/max": 0.0,
                                     "reward_extra/reward_failed/mean": 0.5})
    assert said.startswith("rft: step 2: all rewards equal (0): no advantage, nothing to learn this step (50% of its "
                           "rows scored 0 by custom_reward_function.on_error=zero because the reward function failed "
                           "on them"), said
    assert "fix the reward function" in said and "model that answers" not in said
    # no failed row (the key is logged whenever on_error=zero): the usual cause
    assert "a model that answers every prompt wrong" in NothingToLearn().note(
        2, {**ZERO_ADVANTAGES, "critic/score/min": 0.0, "critic/score/max": 0.0, "reward_extra/reward_failed/mean": 0.0})


def test_a_step_whose_judge_gave_no_verdict_does_not_blame_the_model():
    """An llm_judge whose replies hold no verdict (a random judge, a template it does not follow) scores those rows
    0: the note names the judge and the share, measured by reward_extra/judge_parsed/mean, not the policy."""
    said = NothingToLearn().note(1, {**ZERO_ADVANTAGES, "critic/score/min": 0.0, "critic/score/max": 0.0,
                                     "reward_extra/judge_parsed/mean": 0.0})
    assert said.startswith("rft: step 1: all rewards equal (0): no advantage, nothing to learn this step (the judge's "
                           "reply held no verdict for 100% of its rows, scored 0 (reward_extra/judge_parsed/mean=0)"), said
    assert "reward_kwargs.scoring" in said and "model that answers" not in said
    # every reply judged: the usual cause
    assert "a model that answers every prompt wrong" in NothingToLearn().note(
        1, {**ZERO_ADVANTAGES, "critic/score/min": 0.0, "critic/score/max": 0.0, "reward_extra/judge_parsed/mean": 1.0})
