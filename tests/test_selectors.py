"""data.selector (Trinity-RFT's data_selector; rft.data.selectors): each selector's draws and difficulty_based's
estimates by hand, the state a resume restores, the explorer feeding each step's pass rates back, Trinity's YAML
keys landing on rft's, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from rl_helpers import make_assets, rl_config

from rft.config import ConfigError
from rft.data.selectors import (
    DifficultyBasedSelector,
    OfflineEasy2HardSelector,
    RandomSelector,
    build_selector,
)
from rft.dialects.trinity import translate
from rft.monitor import Timer
from rft.orchestration.run import SyncRun


def test_random_draws_distinct_tasks_seeded_by_the_tasks_drawn_so_far():
    s = RandomSelector(10, 4, seed=42, batch_key="data.train_batch_size")
    first, second = s.next_batch(), s.next_batch()
    assert first == np.random.default_rng(42).choice(10, 4, replace=False).tolist()
    assert second == np.random.default_rng(46).choice(10, 4, replace=False).tolist()
    assert len(set(first)) == 4 and (s.drawn, s.epoch, s.current_index) == (2, 0, 8)


def test_easy_to_hard_reads_the_highest_features_first_and_wraps():
    s = OfflineEasy2HardSelector(np.array([[0.1], [0.9], [0.5], [0.9]]), 3, seed=0, batch_key="k")
    # 0.9 twice: the later row first (Trinity sorts [feature, index] and reverses)
    assert s.next_batch() == [3, 1, 2]
    assert s.next_batch() == [0, 3, 1]


def _difficulty(**kwargs) -> DifficultyBasedSelector:
    # weak / strong reference pass rates of three tasks
    return DifficultyBasedSelector(np.array([[0.2, 0.6], [0.5, 0.9], [0.0, 0.4]]), 1, seed=0, batch_key="k",
                                   kwargs={"m": 4, "lamb": 0.2, "rho": 0.2, "target_reward": 0.5, "tau": 0, **kwargs})


def test_difficulty_estimates_by_hand():
    s = _difficulty()
    s.feedback([0], [0.5])
    # c = (0.5 - 0.2) / (0.6 - 0.2 + 1e-6) = 0.75; p~ = clip(f0 + c (f1 - f0)) = (0.5, 0.8, 0.3), the drawn task's
    # observed 0.5; alpha = 0.8 x 1 + 0.2 + 0.8 m s + 0.2 m p~ = (3.0, 1.64, 1.24); beta likewise (3.0, 1.16, 1.56)
    c = 0.3 / (0.4 + 1e-6)
    assert s.cap_coef == pytest.approx(c)
    p = np.array([0.5, 0.5 + c * 0.4, c * 0.4])
    np.testing.assert_allclose(s.alphas, 1 + np.array([1.6, 0, 0]) + 0.8 * p)
    np.testing.assert_allclose(s.betas, 1 + np.array([1.6, 0, 0]) + 0.8 * (1 - p))
    np.testing.assert_allclose(s.alphas, [3.0, 1.64, 1.24], atol=1e-5)
    np.testing.assert_allclose(s.betas, [3.0, 1.16, 1.56], atol=1e-5)
    # estimated pass rates (0.5, 0.586, 0.443): target 0.5, tau 0 takes the nearest first
    assert s.next_batch() == [0]
    s.batch_size = 2
    assert s.next_batch() == [0, 2]
    # a second update moves c by a tenth of the new estimate
    s.feedback([1], [0.9])
    assert s.cap_coef == pytest.approx(0.9 * c + 0.1 * (0.9 - 0.5) / (0.4 + 1e-6))


def test_difficulty_samples_with_a_temperature_and_from_the_beta():
    s = _difficulty(tau=0.5, do_sample=True)
    s.feedback([0, 1], [1.0, 0.25])
    alphas, betas = s.alphas.copy(), s.betas.copy()
    drawn = s.next_batch()
    p = np.random.default_rng(0).beta(alphas, betas)
    logits = torch.from_numpy(-np.abs(0.5 - p)) / 0.5
    probs = torch.softmax(logits - logits.max(), dim=0)
    assert drawn == torch.multinomial(probs, 1, replacement=False, generator=torch.Generator().manual_seed(0)).tolist()


def test_adaptive_rho_halves_on_a_poor_interpolation():
    s = _difficulty(adaptive_rho=True)
    # c = (0.5 - 0.35) / 0.4 = 0.375 from the means: p~ = (0.35, 0.65), each 0.35 from its rate (>= 0.25)
    s.feedback([0, 1], [0.0, 1.0])
    assert s.rho == pytest.approx(0.1)
    s.feedback([0, 1], [0.4, 0.7])  # rates near their interpolation: rho stays
    assert s.rho == pytest.approx(0.1)


def test_a_resumed_selector_draws_what_the_uninterrupted_one_draws():
    a = _difficulty(tau=1.0, do_sample=True)
    a.feedback([0], [0.75])
    a.next_batch()
    b = _difficulty(tau=1.0, do_sample=True)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for _ in range(3):
        a.feedback([1], [0.5])
        b.feedback([1], [0.5])
        assert a.next_batch() == b.next_batch()
    with pytest.raises(Exception, match="data.selector.seed"):
        DifficultyBasedSelector(np.zeros((3, 2)), 1, seed=1, batch_key="k", kwargs={}).load_state_dict(a.state_dict())


def test_features_must_be_numbers():
    from omegaconf import OmegaConf

    sel = OmegaConf.create({"selector_type": "offline_easy2hard", "seed": 0, "feature_keys": ["d"], "kwargs": {}})
    with pytest.raises(Exception, match="row 1 has d='hard'"):
        build_selector(sel, [{"d": 1.0}, {"d": "hard"}], 1, "k", "data.train_files")


# ----------------------------------------------------------------------------------------- through the explorer


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = make_assets(tmp_path_factory.mktemp("selectors"))
    table = pq.read_table(root / "data" / "train.parquet")
    n = table.num_rows
    weak = [(i % 8) / 10 for i in range(n)]
    table = table.append_column("weak", pa.array(weak)).append_column("strong", pa.array([w + 0.2 for w in weak]))
    pq.write_table(table, root / "data" / "rated.parquet")
    return root


def test_the_explorer_feeds_each_steps_pass_rates_to_difficulty_based(assets, tmp_path):
    cfg = rl_config(assets, tmp_path, f"data.train_files={assets / 'data' / 'rated.parquet'}",
                    "data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[weak,strong]",
                    "+data.selector.kwargs={target_reward: 0.3, tau: 0}", "trainer.total_training_steps=2")
    run = SyncRun(cfg)
    selector = run.explorer.taskset.sampler
    assert isinstance(selector, DifficultyBasedSelector)
    fed = []
    original = selector.feedback
    selector.feedback = lambda idx, values: (fed.append((list(idx), list(values))), original(idx, values))
    drawn = []
    next_batch = selector.next_batch
    selector.next_batch = lambda: drawn.append(next_batch()) or drawn[-1]
    estimates = []
    for step in (1, 2):
        metrics = run.train_step(step, Timer())
        idx, values = fed[-1]
        # every task of the step, its mean reward: their mean is the step's mean score (4 responses each)
        assert sorted(idx) == sorted(drawn[-1]) and len(idx) == 4
        assert np.mean(values) == pytest.approx(metrics["critic/score/mean"], abs=1e-6)
        estimates.append(selector.alphas / (selector.alphas + selector.betas))
    assert not np.allclose(selector.alphas, 1.0) and selector.current_index == 8
    # the second step's tasks are the 4 whose estimated pass rates after step 1 were nearest the target (tau 0)
    assert drawn[1] == torch.topk(torch.from_numpy(-np.abs(0.3 - estimates[0])), 4).indices.tolist()


def test_trinity_data_selector_lands_on_data_selector():
    out = translate({"project": "p", "name": "n", "model": {"model_path": "m"}, "buffer": {"explorer_input": {
        "taskset": {"path": "t", "data_selector": {"selector_type": "difficulty_based", "feature_keys": ["a", "b"],
                                                   "kwargs": {"m": 16, "tau": 0}}}}}})
    assert out["data"]["selector"] == {"selector_type": "difficulty_based", "seed": 42, "feature_keys": ["a", "b"],
                                       "kwargs": {"m": 16, "tau": 0}}
    out = translate({"project": "p", "name": "n", "model": {"model_path": "m"}, "buffer": {"explorer_input": {
        "taskset": {"path": "t", "data_selector": {"selector_type": "random", "seed": 3}}}}})
    assert out["data"]["selector"] == {"selector_type": "random", "seed": 3}


@pytest.mark.parametrize("overrides, message", [
    (["data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[a]"],
     "difficulty_based takes two columns"),
    (["data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[a,b]",
      "+data.selector.kwargs={temperature: 1}"], "['temperature'] are not difficulty_based's"),
    (["data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[a,b]",
      "+data.selector.kwargs={tau: -1}"], "data.selector.kwargs.tau=-1 must be >= 0"),
    (["data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[a,b]",
      "algorithm.filter_groups.enable=true"], "draws several batches a step"),
    (["data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[a,b]",
      "trainer.n_gpus_per_node=2", "trainer.device=cpu"], "2 processes share the explorer's tasks"),
    (["data.selector.selector_type=offline_easy2hard"], "name the columns"),
    (["data.selector.selector_type=random", "data.selector.feature_keys=[a]"], "not by random"),
    (["data.selector.selector_type=random", "data.sampler.class_path=s.py", "data.sampler.class_name=S"],
     "both draw the training tasks"),
])
def test_bad_selectors_are_refused(assets, tmp_path, overrides, message):
    with pytest.raises(ConfigError) as err:
        rl_config(assets, tmp_path, *overrides)
    assert message in str(err.value), str(err.value)


def test_difficulty_based_beside_several_trainer_processes_when_the_explorer_runs_apart(assets, tmp_path):
    """Trinity-RFT's BOTS example: difficulty_based with 4 trainer GPUs and sync_interval 8. Off the one-process
    schedule the explorer is one process of its own beside the trainer's, so the selector learns in one place (it
    was refused for the trainer's processes)."""
    keys = ("data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[a,b]",
            "trainer.n_gpus_per_node=2", "trainer.device=cpu")
    cfg = rl_config(assets, tmp_path, *keys, "synchronizer.sync_interval=2")
    assert cfg.data.selector.selector_type == "difficulty_based" and cfg.trainer.n_gpus_per_node == 2


def test_a_stopped_run_resumes_to_the_uninterrupted_ones_weights(assets, tmp_path):
    """Trinity's random data_selector through `rft train`: 2 steps, then the same config extended to 3 resumes from
    the checkpoint (the selector's state in it) and ends bitwise where 3 straight steps end."""
    import yaml
    from cli_helpers import rft_here
    from safetensors.torch import load_file

    def config(root: Path, steps: int) -> Path:
        tree = {"project": "p", "name": "sel", "mode": "both", "checkpoint_root_dir": str(root),
                "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-3}},
                "model": {"model_path": str(assets / "model"), "max_prompt_tokens": 32, "max_response_tokens": 4},
                "buffer": {"batch_size": 4, "total_steps": steps, "explorer_input": {"taskset": {
                    "name": "t", "path": str(assets / "data"), "split": "train", "format": {"prompt_key": "prompt"},
                    "rollout_args": {"temperature": 1.0}, "data_selector": {"selector_type": "random", "seed": 7}}}},
                "explorer": {"eval_interval": 100},
                "trainer": {"save_interval": 1, "trainer_config": {"custom_reward_function": {
                    "path": str(assets / "reward.py")}}}}
        path = root.parent / f"{root.name}_{steps}.yaml"
        path.write_text(yaml.safe_dump(tree))
        return path

    rft_here("train", str(config(tmp_path / "straight", 3)), cwd=tmp_path)
    rft_here("train", str(config(tmp_path / "stopped", 2)), cwd=tmp_path)
    resumed = rft_here("train", str(config(tmp_path / "stopped", 3)), cwd=tmp_path)
    assert "resumed from" in resumed.stdout, resumed.stdout
    a, b = (load_file(str(tmp_path / r / "p" / "sel" / "model" / "model.safetensors")) for r in ("straight", "stopped"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
