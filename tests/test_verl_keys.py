"""verl's keys that no rft field holds (rft.config.verl_keys, issue 63): each one honoured through rft's key, accepted
as the no-op it is here with a note, or refused by name with the reason; verl's config files composed as hydra
composes them (defaults lists, `_target_`, `+key=` / `++key=`)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import yaml

from rft.config.errors import ConfigError
from rft.trainer.configure import load_config, load_sft_config

RL = ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet", "data.train_batch_size=8",
      "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2"]
SFT = ["model.partial_pretrain=model", "data.train_files=train.parquet"]


def rl(*overrides, path=None):
    return load_config(path, [*RL, *overrides], validate_paths=False)


def notes(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.getMessage().startswith("rft: note:"))


def test_dapos_overlong_buffer_cfg_is_rfts_overlong_buffer(caplog):
    cfg = rl("reward_model.reward_manager=dapo", "data.max_response_length=64",
             "reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
             "reward_model.reward_kwargs.overlong_buffer_cfg.len=16",
             "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
             "reward_model.reward_kwargs.overlong_buffer_cfg.log=False", "reward_model.reward_kwargs.max_resp_len=64")
    buffer = cfg.reward_model.overlong_buffer
    assert (buffer.enable, buffer.len, buffer.penalty_factor, buffer.log) == (True, 16, 0.5, False)
    assert "reward_model.reward_kwargs.overlong_buffer_cfg.len -> reward_model.overlong_buffer.len" in notes(caplog)
    # verl measures the buffer from max_resp_len; rft from data.max_response_length: another value is refused
    with pytest.raises(ConfigError, match=r"reward_model.reward_kwargs.max_resp_len=32 differs from "
                                          r"data.max_response_length=64"):
        rl("data.max_response_length=64", "reward_model.reward_kwargs.max_resp_len=32")


def test_aliases_land_on_rfts_keys():
    cfg = rl("actor_rollout_ref.actor.freeze_vision_tower=False", "ray_kwargs.ray_init.num_cpus=3")
    assert cfg.actor_rollout_ref.model.freeze_vision_tower is False  # verl's value (rft's default is true)
    assert cfg.ray_init.num_cpus == 3
    sft = load_sft_config(None, ["model.path=model", "data.train_files=train.parquet", "optim.lr_warmup_steps_ratio=0.2",
                                 "optim.warmup_style=constant", "model.use_remove_padding=True",
                                 "engine.strategy=fsdp", "trainer.n_gpus_per_node=1",
                                 "data.micro_batch_size=8", "data.train_batch_size=16"], validate_paths=False)
    assert sft.model.partial_pretrain == "model" and sft.optim.warmup_steps_ratio == 0.2
    assert sft.optim.lr_scheduler == "constant" and sft.use_remove_padding is True and sft.model.strategy == "fsdp"
    assert sft.data.micro_batch_size_per_gpu == 8  # verl's global micro-batch over 1 process
    # the engine SFT trainer's (sft_trainer_engine.yaml) names, and its composed optim/fsdp.yaml's
    sft = load_sft_config(None, [*SFT, "data.messages_key=conversation", "data.tools_key=tools",
                                 "optim.lr_scheduler_type=constant", "optim.optimizer=AdamW",
                                 "profiler.tool=torch"], validate_paths=False)
    assert sft.data.multiturn.messages_key == "conversation" and sft.data.multiturn.tools_key == "tools"
    assert sft.optim.lr_scheduler == "constant"
    with pytest.raises(ConfigError, match="the SFT trainer's optimizer is AdamW"):
        load_sft_config(None, [*SFT, "optim.optimizer=Muon"], validate_paths=False)


def test_load_contents_follows_save_contents():
    cfg = rl("actor_rollout_ref.actor.checkpoint.save_contents=[model]")
    assert cfg.actor_rollout_ref.actor.checkpoint.load_contents == ["model"]
    cfg = rl("actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
             "actor_rollout_ref.actor.checkpoint.load_contents=[model]")
    assert cfg.actor_rollout_ref.actor.checkpoint.load_contents == ["model"]


def test_noops_are_accepted_and_named_in_a_note(caplog):
    caplog.set_level(logging.WARNING, "rft")
    cfg = rl("actor_rollout_ref.nccl_timeout=1200", "actor_rollout_ref.rollout.layered_summon=True",
             "actor_rollout_ref.actor.profiler.enable=True", "global_profiler.tool=nsys",
             "actor_rollout_ref.rollout.calculate_log_probs=True", "data.return_raw_chat=True",
             "actor_rollout_ref.ref.strategy=fsdp")
    assert cfg.data.return_raw_chat is True
    said = notes(caplog)
    for key in ("actor_rollout_ref.nccl_timeout", "actor_rollout_ref.rollout.layered_summon",
                "actor_rollout_ref.actor.profiler.enable", "global_profiler.tool",
                "actor_rollout_ref.rollout.calculate_log_probs", "actor_rollout_ref.ref.strategy"):
        assert key in said, (key, said)


@pytest.mark.parametrize("override, needle", [
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "Megatron"),
    ("actor_rollout_ref.actor.strategy=megatron", "Megatron"),
    ("actor_rollout_ref.actor.router_replay.mode=R3", "MoE routing replay"),
    ("actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent", "agent loops other than its multi-turn tool"),
    ("actor_rollout_ref.ref.strategy=fsdp2", "differs from actor_rollout_ref.actor.strategy='fsdp'"),
])
def test_features_rft_lacks_are_refused_by_name(override, needle):
    with pytest.raises(ConfigError) as e:
        rl(override)
    message = str(e.value)
    assert needle in message and "unknown config key" not in message, message
    assert f"command line ({override})" in message or "actor.strategy" in override, message


@pytest.mark.parametrize("engine, name", [("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")])
def test_engines_rft_lacks_are_refused_by_name(engine, name):
    from rft.trainer.validate import validate

    with pytest.raises(ConfigError, match=f"rft has no {name} engine"):
        validate(rl(f"actor_rollout_ref.rollout.name={engine}"), check_paths=False)


def test_a_key_nobody_has_is_still_unknown():
    with pytest.raises(ConfigError, match="unknown config key 'actor_rollout_ref.rollout.no_such_key'"):
        rl("actor_rollout_ref.rollout.no_such_key=1")


def test_plus_overrides_and_target_markers(caplog):
    cfg = rl("++actor_rollout_ref.actor.clip_ratio=0.3", "+algorithm._target_=verl.trainer.config.AlgoConfig",
             "reward_model.strategy=???")  # hydra's required-value marker in verl's reward_model group
    assert cfg.actor_rollout_ref.actor.clip_ratio == 0.3
    assert "algorithm._target_" in notes(caplog)


def test_hydras_remove_override_leaves_rfts_default(tmp_path):
    (tmp_path / "run.yaml").write_text("actor_rollout_ref:\n  actor:\n    clip_ratio: 0.4\n")
    assert rl(path=tmp_path / "run.yaml").actor_rollout_ref.actor.clip_ratio == 0.4
    assert rl("~actor_rollout_ref.actor.clip_ratio", path=tmp_path / "run.yaml").actor_rollout_ref.actor.clip_ratio == 0.2
    with pytest.raises(ConfigError, match=r"command line \(~data.seed\): data.seed is not in"):
        rl("~data.seed", path=tmp_path / "run.yaml")


def test_rollout_mode_async_serves_the_engine_or_says_why_it_runs_in_process(caplog):
    """verl's server mode (tests/test_async_rollout.py trains with it); where the server cannot serve the run
    (verl's own configs set mode async by default), the in-process rollout, the note naming why."""
    from rft.trainer.validate import validate

    cfg = rl("actor_rollout_ref.rollout.mode=async")
    assert cfg.actor_rollout_ref.rollout.mode == "async"
    validate(cfg, check_paths=False)
    assert "rollout.mode=async: the hf engine serves the rollout from an rft serve process" in notes(caplog)
    caplog.clear()
    validate(rl("actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.model.lora_rank=4"), check_paths=False)
    assert ("rollout.mode=async runs as rft's in-process rollout with actor_rollout_ref.model.lora_rank=4 (the "
            "server takes whole weights, not a LoRA adapter)") in notes(caplog)


@pytest.mark.parametrize("key", ["async_training.checkpoint_engine.enable=true",
                                 "async_training.use_rollout_log_probs=true"])
def test_verls_fully_async_recipe_keys_rft_lacks_are_refused_by_name(key):
    """Its staleness_threshold, partial_rollout and deterministic are rft's async_training section
    (tests/test_streaming_training.py); these have no counterpart."""
    with pytest.raises(ConfigError, match=r"is a verl setting rft does not have: (verl's checkpoint-engine|rft's losses "
                                          r"take the rollout log-probs)"):
        rl(key)


def test_a_hydra_defaults_list_is_composed(tmp_path):
    (tmp_path / "actor").mkdir()
    (tmp_path / "actor" / "my_actor.yaml").write_text("clip_ratio: 0.25\nentropy_coeff: 0.01\n")
    (tmp_path / "run.yaml").write_text(
        "hydra:\n  searchpath: [file://verl/trainer/config]\n"
        "defaults:\n  - ppo_trainer\n  - actor@actor_rollout_ref.actor: my_actor\n  - _self_\n"
        "actor_rollout_ref:\n  actor:\n    entropy_coeff: 0.02\n")
    cfg = rl(path=tmp_path / "run.yaml")
    # the group file under its package, the file itself (_self_) last; ppo_trainer (verl's own) is rft's defaults
    assert cfg.actor_rollout_ref.actor.clip_ratio == 0.25 and cfg.actor_rollout_ref.actor.entropy_coeff == 0.02
    (tmp_path / "bad.yaml").write_text("defaults:\n  - mine@data: nowhere\n  - _self_\n")
    with pytest.raises(ConfigError, match=r"defaults entry .*nowhere.yaml, which does not exist"):
        rl(path=tmp_path / "bad.yaml")
    (tmp_path / "mega.yaml").write_text("defaults:\n  - actor@actor_rollout_ref.actor: megatron_actor\n")
    with pytest.raises(ConfigError, match="Megatron"):
        rl(path=tmp_path / "mega.yaml")


VERL_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "peer-configs" / "verl" / "configs"
"""verl's own trainer configs at the peer corpus's commit (../shared/peer-configs/SOURCE.md)."""
STAND_INS = {"rl": ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet",
                    "data.val_files=val.parquet", "trainer.n_gpus_per_node=1", "trainer.device=cpu"],
             "sft": ["model.partial_pretrain=model", "data.train_files=train.parquet", "data.val_files=val.parquet",
                     "trainer.n_gpus_per_node=1", "trainer.device=cpu"]}
"""What measure.py swaps in (a model, data files, one device), and the CPU this machine has."""


def _leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _resolved(cfg) -> set[str]:
    return {key for key, _ in _leaves(dataclasses.asdict(cfg))}


@pytest.mark.parametrize("name", sorted(p.name for p in VERL_CONFIGS.glob("*.yaml")) or ["(missing)"])
def test_every_key_of_verls_own_configs_is_known(name, caplog):
    """Each of verl's trainer configs loads as verl loads it, and each key it sets (walked from the file, no list
    here) is in the resolved config or named in a note: honoured, or a no-op said once; the Megatron ones are
    refused for Megatron. A missing corpus fails (it is the project's shared data), never skips."""
    path = VERL_CONFIGS / name
    assert path.is_file(), f"verl's configs are missing: {VERL_CONFIGS} (../shared/peer-configs)"
    schema = "sft" if name.startswith("sft") else "rl"
    load = load_sft_config if schema == "sft" else load_config
    if "megatron" in name:
        with pytest.raises(ConfigError, match="Megatron"):
            load(path, STAND_INS[schema], validate_paths=False)
        return
    caplog.set_level(logging.WARNING, "rft")
    cfg = load(path, STAND_INS[schema], validate_paths=False)
    said, resolved = notes(caplog), _resolved(cfg)
    tree = yaml.safe_load(path.read_text())
    tree.pop("defaults", None)
    silent = [key for key, _ in _leaves(tree) if key not in resolved and key not in said]
    assert not silent, silent


def test_kernel_and_memory_knobs_of_the_same_numbers_are_noted(caplog):
    """Liger's kernels, verl's Triton fused log-probs and the reward model's parameter offload change memory and
    speed, not the numbers: accepted, each named in a note (they were refused)."""
    caplog.set_level(logging.WARNING, "rft")
    cfg = rl("actor_rollout_ref.model.use_liger=True", "reward_model.enable=True", "reward_model.model.path=rm",
             "reward_model.model.fsdp_config.param_offload=True")
    assert cfg.actor_rollout_ref.model.use_liger is True
    said = notes(caplog)
    assert "Liger's fused kernels" in said and "actor_rollout_ref.model.use_liger" in said, said
    assert "reward_model.model.fsdp_config.param_offload" in said, said
    sft = load_sft_config(None, [*SFT, "model.use_liger=True", "model.fused_kernel_options.impl_backend=triton"],
                          validate_paths=False)
    assert sft.model.use_liger is True
    said = notes(caplog)
    assert "model.use_liger" in said and "model.fused_kernel_options.impl_backend" in said, said
    with pytest.raises(ConfigError, match="sharding the reward model"):  # a sharded reward model still is not
        rl("reward_model.enable=True", "reward_model.model.path=rm", "reward_model.model.fsdp_config.fsdp_size=2")


def test_a_saved_lora_adapter_is_the_start(tmp_path, caplog):
    """verl's actor_rollout_ref.model.lora_adapter_path (it was refused): the adapter's r, alpha and target modules
    become rft's LoRA keys (verl ignores its own then: a value given is replaced, said in the note), and the
    policy starts from the adapter's weights; a folder with no adapter_config.json is refused by name."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from rft.config.checks import CheckContext
    from rft.models.checks import check_lora
    from rft.models.load import load_trainable_model
    from rft.models.tiny import init_model

    folder = init_model("tiny", tmp_path / "model")
    saved = get_peft_model(AutoModelForCausalLM.from_pretrained(folder),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj", "q_proj"]))
    torch.manual_seed(0)
    for name, p in saved.named_parameters():
        if "lora_B" in name:
            p.data.normal_()  # peft starts B at 0: a trained adapter's is not
    saved.save_pretrained(tmp_path / "adapter")
    caplog.set_level(logging.WARNING, "rft")
    cfg = rl(f"actor_rollout_ref.model.path={folder}", f"actor_rollout_ref.model.lora_adapter_path={tmp_path}/adapter",
             "actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.model.lora_alpha=16")  # verl's defaults
    model_cfg = cfg.actor_rollout_ref.model
    assert (model_cfg.lora_rank, model_cfg.lora_alpha, model_cfg.target_modules) == (4, 8, ["q_proj", "v_proj"])
    assert "actor_rollout_ref.model.lora_rank=4 (not 0)" in notes(caplog)
    model = load_trainable_model(str(folder), model_cfg, torch.float32, torch.device("cpu"),
                                 key="actor_rollout_ref.model")
    want, got = get_peft_model_state_dict(saved), get_peft_model_state_dict(model)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert any(p.requires_grad for n, p in model.named_parameters() if "lora_B" in n)  # trained on
    from rft.errors import ModelError

    (tmp_path / "empty").mkdir()
    unread = rl(f"actor_rollout_ref.model.path={folder}", f"actor_rollout_ref.model.lora_adapter_path={tmp_path}/empty")
    with pytest.raises(ModelError, match="has no adapter_config.json"):  # never trained without its adapter
        load_trainable_model(str(folder), unread.actor_rollout_ref.model, torch.float32, torch.device("cpu"),
                             key="actor_rollout_ref.model")
    with pytest.raises(ConfigError, match="lora_adapter_path=.*has no adapter_config.json"):
        check_lora(CheckContext(rl(f"actor_rollout_ref.model.lora_adapter_path={tmp_path}/empty"), check_paths=True))


def test_a_resume_path_without_its_mode_is_verls_no_op(caplog):
    """verl's PPO trainer reads trainer.resume_from_path only with resume_mode=resume_path (auto resumes from the
    latest checkpoint): the path alone is noted, not refused; rft sft still refuses it (verl's SFT trainer resumes
    from it in auto mode, rft's does not)."""
    caplog.set_level(logging.WARNING, "rft")
    cfg = rl("trainer.resume_from_path=ckpt/global_step_2")
    assert cfg.trainer.resume_mode == "auto"
    assert "trainer.resume_from_path='ckpt/global_step_2'" in caplog.text and "resume_mode=auto" in caplog.text
    with pytest.raises(ConfigError, match="also set trainer.resume_mode=resume_path"):
        load_sft_config(None, [*SFT, "trainer.resume_from_path=ckpt/global_step_2"], validate_paths=False)
