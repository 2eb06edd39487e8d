"""verl's data.sampler (class_path / class_name): a sampler class of the user's draws the training prompts, built as
verl builds it (data_source, data_config); its update(batch) gets each trained step's batch (verl's
AbstractCurriculumSampler), and its state_dict is checkpointed, so a stopped run resumes drawing what the
uninterrupted run drew."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import rft_here, sigterm_after_checkpoint
from rl_helpers import make_assets

from rft.config import ConfigError
from rft.trainer.configure import load_config

A = "actor_rollout_ref"

SAMPLER = '''
import json
import os
from pathlib import Path

import torch
from torch.utils.data import Sampler


class LowestScoreFirst(Sampler):
    """Each epoch, the prompt not yet drawn with the lowest last score next (unscored prompts score 0.5), ties by a
    seeded random key: an order its update changes while the epoch is drawn. Every update is logged beside this
    file (with the process id), what it was handed too."""

    def __init__(self, data_source, data_config):
        self.n = len(data_source)
        self.batch_size = data_config.train_batch_size
        g = torch.Generator().manual_seed(data_config.seed)
        self.keys = torch.rand(self.n, generator=g).tolist()
        self.scores, self.seen = {}, []

    def __len__(self):
        return self.n

    def __iter__(self):
        if len(self.seen) >= self.n - self.n % self.batch_size:  # a new epoch
            self.seen = []
        while len(self.seen) < self.n:
            left = [i for i in range(self.n) if i not in self.seen]
            i = min(left, key=lambda i: (self.scores.get(i, 0.5), self.keys[i]))
            self.seen.append(i)
            yield i

    def update(self, batch):
        rows = {}
        for i, index in enumerate(batch.non_tensor_batch["dataset_index"]):
            rows.setdefault(int(index), []).append(float(batch.batch["token_level_scores"][i].sum()))
        for index, scores in rows.items():
            self.scores[index] = sum(scores) / len(scores)
        line = {"step": batch.meta_info["global_step"], "pid": os.getpid(), "rows": len(batch),
                "drawn": sorted(rows), "keys": sorted(batch.batch), "columns": sorted(batch.non_tensor_batch),
                "scores": {str(k): v for k, v in sorted(self.scores.items())}}
        with Path(__file__).with_suffix(".updates.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\\n")

    def state_dict(self):
        return {"scores": dict(self.scores), "seen": list(self.seen)}

    def load_state_dict(self, state):
        self.scores, self.seen = {int(k): v for k, v in state["scores"].items()}, list(state["seen"])


class NotASampler:
    def __init__(self, data_source, data_config):
        pass
'''


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = make_assets(tmp_path_factory.mktemp("curriculum"))
    (root / "sampler.py").write_text(SAMPLER)
    return root


def args(assets: Path, out: Path, *extra: str) -> list[str]:
    """Three GRPO steps of 4 prompts x 4 samples drawn by the sampler, a checkpoint every step, on the CPU."""
    return [f"{A}.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"custom_reward_function.path={assets / 'reward.py'}", "data.max_prompt_length=32",
            "data.max_response_length=6", "data.train_batch_size=4", f"{A}.rollout.n=4",
            f"{A}.actor.ppo_mini_batch_size=4", f"{A}.actor.optim.lr=1e-3", "trainer.total_training_steps=3",
            "trainer.save_freq=1", "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[]",
            "trainer.device=cpu", f"trainer.default_local_dir={out}", f"data.sampler.class_path={assets / 'sampler.py'}",
            "data.sampler.class_name=LowestScoreFirst", "data.seed=7", *extra]


def train(assets: Path, out: Path, *extra: str, check: bool = True):
    return rft_here("train", *args(assets, out, *extra), cwd=out.parent, check=check)


def updates(assets: Path) -> list[dict]:
    log = assets / "sampler.updates.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def test_the_sampler_draws_the_prompts_its_update_reads_each_step_and_a_resume_draws_on(assets, tmp_path,
                                                                                         monkeypatch):
    from rft.data.dataset import PromptSampler

    updates(assets)
    train(assets, tmp_path / "straight")
    straight = updates(assets)
    assert [u["step"] for u in straight] == [1, 2, 3]
    for u in straight:  # every row of the step, under verl's DataProto names
        assert u["rows"] == 16 and len(u["drawn"]) == 4
        assert {"prompts", "responses", "input_ids", "attention_mask", "response_mask", "token_level_scores",
                "token_level_rewards", "advantages"} <= set(u["keys"])
        assert {"uid", "data_source", "reward_model", "extra_info", "index", "dataset_index"} <= set(u["columns"])
    # the sampler's order, not rft's: the first step's prompts are the 4 of the lowest seeded keys, and each later
    # step draws none it drew before in this epoch
    import torch

    keys = torch.rand(64, generator=torch.Generator().manual_seed(7)).tolist()
    assert straight[0]["drawn"] == sorted(sorted(range(64), key=lambda i: keys[i])[:4])
    assert straight[0]["drawn"] != sorted(PromptSampler(64, 4, seed=7).next_batch())
    drawn = [i for u in straight for i in u["drawn"]]
    assert len(set(drawn)) == 12
    # the scores it was handed are the run's: the step's critic/score/mean is the mean of its rows' scores
    metrics = {x["step"]: x for x in map(json.loads, (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines())}
    for u in straight:
        step_scores = [u["scores"][str(i)] for i in u["drawn"]]
        assert abs(sum(step_scores) / 4 - metrics[u["step"]]["critic/score/mean"]) < 1e-5

    # stopped right after step 2's checkpoint, then the same command: step 3 draws and trains what the straight
    # run's step 3 did (the sampler's state restored)
    out = tmp_path / "stopped"
    sigterm_after_checkpoint(monkeypatch, 2)
    stopped = train(assets, out, check=False)
    monkeypatch.undo()
    assert stopped.returncode != 0
    assert [u["step"] for u in updates(assets)] == [1, 2]
    rerun = train(assets, out)
    assert "resumed from" in rerun.stdout, rerun.stdout
    resumed = updates(assets)
    assert resumed == [{**straight[2], "pid": resumed[0]["pid"]}]
    again = {x["step"]: x for x in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert again[3]["critic/score/mean"] == metrics[3]["critic/score/mean"]


@pytest.mark.parametrize("overrides, message", [
    (["data.sampler.class_name=LowestScoreFirst"], "data.sampler.class_name='LowestScoreFirst' needs "
                                                   "data.sampler.class_path"),
    (["data.sampler.class_path=sampler.py"], "data.sampler.class_path='sampler.py' needs data.sampler.class_name"),
    (["data.sampler.class_path=sampler.py", "data.sampler.class_name=S", "algorithm.filter_groups.enable=true"],
     "but algorithm.filter_groups.enable=true (DAPO's dynamic sampling) draws several batches a step"),
    (["data.sampler.class_path=sampler.py", "data.sampler.class_name=S", "synchronizer.sync_interval=2"],
     "draws tasks in an explorer apart from the trainer"),
])
def test_an_incomplete_or_unusable_sampler_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, ["actor_rollout_ref.model.path=m", "data.train_files=t.parquet", *overrides],
                    validate_paths=False)


def test_a_module_that_does_not_import_is_refused_before_the_model_loads(assets):
    base = [f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
            "data.sampler.class_name=RandomCurriculumSampler"]
    with pytest.raises(ConfigError, match=r"data.sampler.class_path: 'pkg://tests.utils.dataset.samplers' names the "
                                          r"module 'tests.utils.dataset.samplers', which does not import here"):
        load_config(None, [*base, "data.sampler.class_path=pkg://tests.utils.dataset.samplers"])
    with pytest.raises(ConfigError, match="is not a Python file"):
        load_config(None, [*base, "data.sampler.class_path=sampler.txt"])
    # file:// as verl reads it, and a module by name
    load_config(None, [*base, f"data.sampler.class_path=file://{assets / 'sampler.py'}"])
    load_config(None, [*base, "data.sampler.class_path=pkg://torch.utils.data"])


def test_a_class_that_is_not_a_sampler_is_one_line(assets, tmp_path):
    proc = train(assets, tmp_path / "out", "data.sampler.class_name=NotASampler", check=False)
    errors = [x for x in proc.stderr.splitlines() if x.startswith("rft: error:")]
    assert proc.returncode == 2 and errors == [
        f"rft: error: data.sampler.class_name: 'NotASampler' in '{assets / 'sampler.py'}' is not a subclass of "
        "torch.utils.data.Sampler (verl's AbstractSampler is one)"], proc.stderr


def test_on_two_processes_every_process_samples_alike_and_updates_with_every_row(assets, tmp_path):
    """2 processes (gloo): each holds a sampler; every one draws the same prompts and its update gets the step's
    16 rows of both processes, so their orders never drift apart; the run draws what one process draws."""
    import subprocess
    import sys

    from test_distributed import ENV

    updates(assets)
    train(assets, tmp_path / "one", "trainer.total_training_steps=2")
    one = updates(assets)
    proc = subprocess.run([sys.executable, "-m", "rft", "train", *args(assets, tmp_path / "two"),
                           "trainer.total_training_steps=2", "trainer.n_gpus_per_node=2"],
                          env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    two = updates(assets)
    assert len({u["pid"] for u in two}) == 2 and len(two) == 4
    for step in (1, 2):
        lines = [{k: v for k, v in u.items() if k != "pid"} for u in two if u["step"] == step]
        assert lines[0] == lines[1] and lines[0]["rows"] == 16, lines
        assert lines[0]["drawn"] == next(u["drawn"] for u in one if u["step"] == step)
