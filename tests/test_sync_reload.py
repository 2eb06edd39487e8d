"""A sync carries weights only where the step moved them: a step that did not change the actor (critic warmup, an
explore step without experiences, every optimizer step refused) gives the engine its version alone, so an engine
with weights of its own (vLLM) does not reload every tensor for nothing."""

from __future__ import annotations

from rft.monitor import Timer
from tests.rl_helpers import make_assets, rl_config


def test_a_step_that_leaves_the_actor_as_it_was_reloads_nothing(tmp_path):
    from rft.orchestration.run import SyncRun

    make_assets(tmp_path / "assets")
    run = SyncRun(rl_config(tmp_path / "assets", tmp_path / "out", "algorithm.adv_estimator=gae",
                            "trainer.critic_warmup=1", "trainer.total_training_steps=2"))
    engine = run.sync.engine
    loads = []
    real = engine.update_weights
    engine.update_weights = lambda weights, version: loads.append(version) or real(weights, version)
    run.train_step(1, Timer())  # critic warmup: the critic trains, the actor does not
    assert not run.trainer.actor_moved and loads == [] and engine.version == 1
    run.train_step(2, Timer())
    assert run.trainer.actor_moved and loads == [2] and engine.version == 2
