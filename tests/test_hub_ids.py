"""Hugging Face Hub ids where a config names a model (`rft.models.hub`): `actor_rollout_ref.model.path=org/name`
resolves to the model's folder in the local Hugging Face cache. Offline (HF_HUB_OFFLINE=1, the suite's setting),
against a cache made here: tiny models saved in the cache's layout (models--org--name/snapshots/<commit>/,
refs/main). No network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from cli_helpers import rft_here
from huggingface_hub import constants

from rft.models.tiny import init_model
from rft.tasks import write_arithmetic

FIRST, SECOND = "1a2b3c4d5e6f708192a3b4c5d6e7f80912345678", "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"
CHAT, RM = "acme/tiny-chat", "acme/tiny-rm"


def cache_model(cache: Path, repo: str, preset: str, commit: str, seed: int = 0) -> Path:
    """`preset` saved as the Hub model `repo` at `commit` in the cache `cache`, refs/main pointing at it."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snapshot = init_model(preset, folder / "snapshots" / commit, seed=seed)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Path:
    """A Hugging Face cache (HF_HUB_CACHE) with acme/tiny-chat (the tiny preset) and acme/tiny-rm (a reward model),
    and arithmetic data beside it."""
    root = tmp_path_factory.mktemp("hf")
    cache_model(root / "hub", CHAT, "tiny", FIRST)
    cache_model(root / "hub", RM, "tiny-rm", FIRST)
    write_arithmetic(root / "d", n_train=16, n_val=4, seed=0)
    return root


@pytest.fixture
def cached(hub, monkeypatch) -> Path:
    """This process reads `hub`'s cache (huggingface_hub read HF_HUB_CACHE when it was imported)."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub / "hub"))
    return hub


def snapshot(hub: Path, repo: str, commit: str = FIRST) -> str:
    return str((hub / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / commit).resolve())


def train_args(hub: Path, out: Path, *extra: str) -> list[str]:
    return ["train", f"actor_rollout_ref.model.path={CHAT}", f"data.train_files={hub / 'd' / 'train.parquet'}",
            "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
            "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=1",
            f"trainer.default_local_dir={out}", *extra]


def test_rft_train_trains_from_a_hub_id_in_the_local_cache_offline(cached, tmp_path, caplog):
    """`rft train ... actor_rollout_ref.model.path=acme/tiny-chat` with HF_HUB_OFFLINE=1 (it was refused: "not a
    Hugging Face model folder"): two steps trained from the cache's snapshot, which the run's config.yaml records
    (the commit in its path)."""
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with caplog.at_level("INFO", logger="rft"):
        rft_here(*train_args(cached, tmp_path / "out", "trainer.total_training_steps=2"), cwd=tmp_path)
    out = tmp_path / "out"
    assert (out / "model" / "model.safetensors").is_file()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    recorded = yaml.safe_load((out / "config.yaml").read_text())["actor_rollout_ref"]["model"]["path"]
    assert recorded == snapshot(cached, CHAT)
    assert (f"rft: actor_rollout_ref.model.path={CHAT}: the Hugging Face Hub model, revision {FIRST[:12]} in the "
            f"local cache ({recorded})") in caplog.messages


def test_a_resume_keeps_the_revision_the_run_started_from(cached, tmp_path):
    """A Hub id resolves to the cache's refs/main; a resume after refs/main moved to another commit is refused in one
    line naming both snapshots (it would have trained on another model's weights), and resumes once the run's
    revision is named again (its snapshot folder)."""
    out = tmp_path / "out"
    rft_here(*train_args(cached, out, "trainer.total_training_steps=1"), cwd=tmp_path)
    cache_model(cached / "hub", CHAT, "tiny", SECOND, seed=1)  # `hf download` fetched a newer commit
    try:
        moved = rft_here(*train_args(cached, out, "trainer.total_training_steps=2"), cwd=tmp_path, check=False)
        assert moved.returncode == 2
        line = moved.stdout.strip().splitlines()[-1] if not moved.stderr.strip() else moved.stderr.strip()
        assert line.startswith("rft: error: resuming") and "\n" not in line, line
        assert f"actor_rollout_ref.model.path ({snapshot(cached, CHAT)} -> {snapshot(cached, CHAT, SECOND)})" in line
        again = rft_here(*[a if not a.startswith("actor_rollout_ref.model.path=") else
                           f"actor_rollout_ref.model.path={snapshot(cached, CHAT)}"
                           for a in train_args(cached, out, "trainer.total_training_steps=2")], cwd=tmp_path)
        assert "resumed from" in again.stdout
    finally:
        (cached / "hub" / f"models--{CHAT.replace('/', '--')}" / "refs" / "main").write_text(FIRST)


def test_an_id_missing_from_the_cache_offline_is_one_line_naming_the_key_and_what_to_do(cached, tmp_path):
    proc = rft_here(*train_args(cached, tmp_path / "out", "actor_rollout_ref.model.path=acme/absent"), cwd=tmp_path,
                    check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"rft: error: actor_rollout_ref.model.path='acme/absent' is neither a model folder here nor a Hugging Face "
        f"Hub model in the local cache ({cached / 'hub'}), and HF_HUB_OFFLINE=1 forbids downloading it: set "
        "actor_rollout_ref.model.path to a model folder, or download the model where the network is (`hf download "
        "acme/absent`) or unset HF_HUB_OFFLINE")
    assert not (tmp_path / "out").exists()  # before the run took its folder, before any model loaded


def test_every_key_that_names_a_model_resolves_a_hub_id(cached, tmp_path):
    """The policy, its tokenizer, the critic and its tokenizer, the reward model and its input tokenizer, an
    auxiliary model (a judge's), rft sft's and rft dpo's model.partial_pretrain, rft generate's model.path: one
    resolver, run first by every command's validation."""
    from rft.config.schema import RFTConfig
    from rft.models.hub import resolve_hub_ids
    from rft.trainer.configure import load_config, load_generation_config, load_sft_config

    chat, rm = snapshot(cached, CHAT), snapshot(cached, RM)
    cfg = load_config(None, [
        f"actor_rollout_ref.model.path={CHAT}", f"data.tokenizer={CHAT}", f"data.train_files={cached / 'd' / 'train.parquet'}",
        "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=gae",
        f"critic.model.path={CHAT}", f"critic.model.tokenizer_path={CHAT}", "critic.ppo_mini_batch_size=2",
        "reward_model.enable=true", f"reward_model.model.path={RM}", f"reward_model.model.input_tokenizer={CHAT}",
        f"trainer.default_local_dir={tmp_path / 'rl'}"])
    assert (cfg.actor_rollout_ref.model.path, cfg.data.tokenizer, cfg.critic.model.path,
            cfg.critic.model.tokenizer_path, cfg.reward_model.model.path,
            cfg.reward_model.model.input_tokenizer) == (chat, chat, chat, chat, rm, chat)
    # workflow.auxiliary_models (an llm_judge's model): the resolver's walk of the same schema
    aux = RFTConfig()
    aux.workflow.auxiliary_models = [{"model_path": CHAT, "max_tokens": 4}]
    resolve_hub_ids(aux)
    assert aux.workflow.auxiliary_models == [{"model_path": chat, "max_tokens": 4}]
    sft = load_sft_config(None, [f"model.partial_pretrain={CHAT}", f"data.train_files={cached / 'd' / 'train.parquet'}",
                                 "data.response_key=extra_info", "data.response_dict_keys=[answer]",
                                 f"trainer.default_local_dir={tmp_path / 'sft'}"])
    assert sft.model.partial_pretrain == chat
    gen = load_generation_config(None, [f"model.path={CHAT}", f"data.path={cached / 'd' / 'val.parquet'}",
                                        f"data.output_path={tmp_path / 'o.parquet'}"])
    assert gen.model.path == chat
    # a path that exists is a path, whatever it looks like; one that is no Hub id keeps its folder message
    (tmp_path / "acme" / "tiny-chat").mkdir(parents=True)
    proc = rft_here(*train_args(cached, tmp_path / "x", "actor_rollout_ref.model.path=acme/tiny-chat"),
                    cwd=tmp_path, check=False)
    assert "'acme/tiny-chat' is not a Hugging Face model folder (no config.json)" in proc.stderr


def test_rft_generate_from_a_hub_id(cached, tmp_path):
    proc = rft_here("generate", f"model.path={CHAT}", f"data.path={cached / 'd' / 'val.parquet'}",
                    f"data.output_path={tmp_path / 'o.parquet'}", "data.n_samples=1", "rollout.response_length=2",
                    "rollout.dtype=float32", "trainer.device=cpu", cwd=tmp_path)
    assert proc.returncode == 0 and (tmp_path / "o.parquet").is_file()


def test_a_part_the_run_does_not_build_keeps_its_model_key_unresolved(cached, tmp_path):
    """reward_model.model.path with reward_model.enable=false has no effect (noted, not checked): its id is neither
    looked up nor refused, as its folder would not be."""
    from rft.trainer.configure import load_config

    cfg = load_config(None, [f"actor_rollout_ref.model.path={CHAT}", f"data.train_files={cached / 'd' / 'train.parquet'}",
                             "reward_model.model.path=acme/absent", f"trainer.default_local_dir={tmp_path / 'rl'}"])
    assert cfg.reward_model.model.path == "acme/absent" and cfg.actor_rollout_ref.model.path == snapshot(cached, CHAT)
