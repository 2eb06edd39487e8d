"""What the RL tests on the tiny model share: their assets (model, data, reward file), the small config every one
of them starts from, and the "every trainable parameter moved" check."""

from __future__ import annotations

from pathlib import Path

import torch

from rft.models.tiny import init_model
from rft.tasks import write_arithmetic
from rft.trainer.configure import load_config

# A shaped reward: an untrained model's samples differ in it, so advantages (and gradients) are non-zero.
SHAPED_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    digits = sum(c.isdigit() for c in solution_str)
    exact = float(solution_str.strip() == str(ground_truth))
    return {"score": exact + digits / (1 + len(solution_str)), "digits": float(digits)}
'''
# A dense reward: any two different responses likely differ in it, so a step whose groups all score alike (the
# shaped reward's untrained samples mostly have no digit: such a step's update is zero) is all but impossible.
DENSE_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return (sum(map(ord, solution_str)) + int(ground_truth)) % 11 / 11
'''


def make_assets(root: Path, reward_source: str = SHAPED_REWARD) -> Path:
    """`root/model` (tiny preset, seed 0), `root/data/{train,val}.parquet` (64 / 8 arithmetic rows) and
    `root/reward.py` holding `reward_source`."""
    init_model("tiny", root / "model", seed=0)
    write_arithmetic(root / "data", n_train=64, n_val=8, seed=0)
    (root / "reward.py").write_text(reward_source)
    return root


def rl_config(assets: Path, out: Path, *overrides: str, with_val: bool = False):
    """One step of 4 prompts x 4 responses, 6 new tokens, lr 1e-3 without weight decay (a parameter that moves
    had a gradient), the custom reward of `assets`; `overrides` come last."""
    val = [f"data.val_files={assets / 'data' / 'val.parquet'}"] if with_val else []
    return load_config(None, [
        f"actor_rollout_ref.model.path={assets / 'model'}",
        f"data.train_files={assets / 'data' / 'train.parquet'}",
        *val,
        f"custom_reward_function.path={assets / 'reward.py'}",
        "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "trainer.val_before_train=false", "trainer.total_training_steps=1", f"trainer.default_local_dir={out}",
        "trainer.logger=[]",
        *overrides,
    ])


def trainable(model) -> dict[str, torch.Tensor]:
    """A detached copy of every trainable parameter, by name."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def assert_all_moved(before: dict[str, torch.Tensor], model) -> None:
    after = trainable(model)
    unmoved = [n for n in before if torch.equal(before[n], after[n])]
    assert not unmoved, f"parameters that did not move: {unmoved}"


def score(run, batch) -> dict[str, float]:
    """Score a generated `batch` as one step of `run` (an rft.orchestration.run.SyncRun) does: the explorer's reward
    pipeline, then the trainer's token rewards; returns the trainer's reward metrics."""
    run.explorer.rewards.score(batch)
    run.trainer.set_token_rewards(batch)
    return run.trainer.reward_metrics(batch)


def stand_in_explorer(cfg, varies, dist=None):
    """An Explorer of `cfg` (rank `dist` of several, default one process) with stand-ins for its engine and reward:
    the tasks are the numbers 0..95 (in the sampler's order), each generation batch's tasks are recorded in
    `explorer.generated`, and the filter metric (algorithm.filter_groups.metric) varies within the groups of the
    tasks `varies` takes, so dynamic sampling drops the others."""
    from types import SimpleNamespace

    from rft.batch import Batch
    from rft.distributed import SINGLE
    from rft.explorer.explorer import Explorer
    from rft.explorer.taskset import FileTaskset, generation_batch

    explorer = Explorer.__new__(Explorer)
    n, metric = cfg.actor_rollout_ref.rollout.n, cfg.algorithm.filter_groups.metric
    explorer.cfg, explorer.dist, explorer.step, explorer.adv_needs = cfg, dist or SINGLE, 0, set()
    explorer.tokenizer, explorer.engine = SimpleNamespace(pad_token_id=0), SimpleNamespace(version=0)
    explorer.taskset = FileTaskset([SimpleNamespace(ids=[t], task=t) for t in range(96)],
                                   generation_batch(cfg.data)[0], True, cfg.data.seed)
    explorer.generated = []

    def generate_batch(prompts, positions=None):
        tasks = [p.task for p in prompts]
        explorer.generated.append(tasks)
        ids = torch.tensor(tasks).repeat_interleave(n)[:, None]
        labels = torch.as_tensor(positions if positions is not None else range(len(prompts)))
        return Batch(prompt_ids=ids, prompt_mask=torch.ones_like(ids), response_ids=torch.ones(len(ids), 2).long(),
                     response_mask=torch.ones(len(ids), 2).long(), group=labels.repeat_interleave(n))

    def score(batch, failures):
        tasks = batch.prompt_ids[:, 0].tolist()
        batch.scores = torch.tensor([float(i % 2) if varies(t) else 0.0 for i, t in enumerate(tasks)])
        return {metric: batch.scores}

    explorer.generate_batch, explorer.rewards = generate_batch, SimpleNamespace(score=score)
    return explorer
