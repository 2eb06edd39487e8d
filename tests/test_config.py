"""Tier 1: config schema, YAML + override loading, validation (every error names the key to change)."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import re

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path

import pytest
import yaml

from rft.config import ConfigError, RFTConfig
from rft.config.validate import walk
from rft.trainer.configure import load_config
from rft.trainer.validate import validate

ROOT = Path(__file__).resolve().parents[1]
# examples/offline/: rft generate / rft eval configs (tests/test_offline.py loads them); examples/verl_interaction/:
# a verl interaction file, which an example config names (tests/test_verl_multi_turn.py loads it)
ALL_EXAMPLES = sorted(p for p in ROOT.glob("examples/**/*.yaml")  # Data-Juicer's: tests/with_data_juicer
                      if not {"offline", "data_juicer", "verl_interaction"} & set(p.relative_to(ROOT).parts))


def _is_trinity(path: Path) -> bool:
    from rft.config.load import read_yaml
    from rft.dialects.trinity import is_trinity

    return is_trinity(read_yaml(path))


def _is_offline(path: Path) -> bool:
    """An `rft sft` / `rft dpo` config: its model section is the SFT one (model.partial_pretrain)."""
    return "partial_pretrain" in (yaml.safe_load(path.read_text()).get("model") or {})


TRINITY_EXAMPLES = [p for p in ALL_EXAMPLES if _is_trinity(p) and not _is_offline(p)]
EXAMPLES = [p for p in ALL_EXAMPLES if p not in TRINITY_EXAMPLES]
# The two keys validation requires; with validate_paths=False they need not exist.
REQUIRED = ["actor_rollout_ref.model.path=model", "data.train_files=train.parquet"]
# Small sizes that satisfy every divisibility rule: 8 prompts per step, 4 per mini-batch, 4 x 2 = 8 rows per
# mini-batch, 4 rows per micro-batch.
SMALL = [
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
]


def load(*overrides: str, path=None, validate_paths: bool = False):
    return load_config(path, [*REQUIRED, *SMALL, *overrides], validate_paths=validate_paths)


@pytest.fixture(scope="module")
def real_paths(tmp_path_factory) -> dict[str, Path]:
    """A tiny model folder and arithmetic train/val files, for validate_paths=True."""
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("config_paths")
    files = write_arithmetic(root / "data", n_train=16, n_val=4, seed=0, preferences=True)
    return {"model": init_model("tiny", root / "model", seed=0), "reward_model": init_model("tiny-rm", root / "rm"),
            **files}


def real_overrides(paths: dict[str, Path]) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={paths['model']}",
        f"data.train_files={paths['train']}",
        f"data.val_files={paths['val']}",
    ]


# ------------------------------------------------------------------------------------------- baseline
def test_required_keys_and_small_sizes_validate():
    cfg = load()
    assert isinstance(cfg, RFTConfig)
    assert cfg.data.train_batch_size == 8
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4
    # untouched keys keep the schema defaults
    assert cfg.data.max_prompt_length == RFTConfig().data.max_prompt_length
    assert cfg.algorithm.adv_estimator == "grpo"


def test_default_sizes_validate_with_only_required_keys():
    cfg = load_config(None, REQUIRED, validate_paths=False)
    assert cfg.data.train_batch_size == 1024 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 256


def test_real_paths_validate(real_paths):
    cfg = load(*real_overrides(real_paths), validate_paths=True)
    assert cfg.actor_rollout_ref.model.path == str(real_paths["model"])


def test_interpolated_default_resolves():
    cfg = load("trainer.project_name=p", "trainer.experiment_name=e")
    assert cfg.trainer.default_local_dir == "checkpoints/p/e"


# ----------------------------------------------------------------------------------------- unknown keys
@pytest.mark.parametrize(
    "key, section, allowed_sample",
    [
        ("data.foo", "under 'data'", ["train_files", "truncation", "custom_cls"]),
        ("actor_rollout_ref.actor.optim.lrr", "under 'actor_rollout_ref.actor.optim'",
         ["lr", "warmup_style", "betas"]),
        ("actor_rollout_ref.rollout.val_kwargs.tempreature", "under 'actor_rollout_ref.rollout.val_kwargs'",
         ["temperature", "top_p", "do_sample"]),
        ("foo", "at the top level", ["data", "actor_rollout_ref", "trainer"]),
    ],
)
def test_unknown_key_names_full_key_and_lists_allowed(key, section, allowed_sample):
    with pytest.raises(ConfigError) as err:
        load(f"{key}=1")
    msg = str(err.value)
    assert f"'{key}'" in msg
    assert section in msg
    allowed = msg.split("Allowed keys", 1)[1]
    for name in allowed_sample:
        assert re.search(rf"\b{name}\b", allowed), (name, msg)


def test_unknown_key_in_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("actor_rollout_ref:\n  rollout:\n    nn: 4\n")
    with pytest.raises(ConfigError, match=r"'actor_rollout_ref\.rollout\.nn'.*Allowed keys.*\bn\b"):
        load(path=path)


# issue 42: the nearest allowed key ("did you mean"), first in the list, and where the key came from
def test_unknown_override_names_the_command_line_and_the_nearest_key():
    with pytest.raises(ConfigError) as err:
        load("trainer.total_training_step=3")
    assert str(err.value).startswith(
        "command line (trainer.total_training_step=3): unknown config key 'trainer.total_training_step'; did you "
        "mean 'trainer.total_training_steps'? Allowed keys under 'trainer': total_training_steps, total_epochs, ")


def test_unknown_key_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("actor_rollout_ref:\n  actor:\n    optim:\n      lrr: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load(path=path)
    assert str(err.value).startswith(f"{path}: unknown config key 'actor_rollout_ref.actor.optim.lrr'; did you "
                                     "mean 'actor_rollout_ref.actor.optim.lr'? Allowed keys under "
                                     "'actor_rollout_ref.actor.optim': lr, ")


@pytest.mark.parametrize("loader, key, nearest", [
    ("load_sft_config", "optim.lrr", "'optim.lr'"),
    ("load_dpo_config", "algorithm.bta", "'algorithm.beta'"),
    ("load_generation_config", "data.n_sample", "'data.n_samples'"),
    ("load_eval_config", "data.respons_key", "'data.response_key'"),
])
def test_every_schema_suggests_the_nearest_key(loader, key, nearest):
    import rft.trainer.configure as configure

    with pytest.raises(ConfigError) as err:
        getattr(configure, loader)(None, [f"{key}=1"], validate_paths=False)
    assert f"unknown config key '{key}'; did you mean {nearest}? Allowed keys under " in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("loader, item, rft_key", [
    ("load_config", "num_generations=4", "actor_rollout_ref.rollout.n"),
    ("load_config", "max_completion_length=64", "data.max_response_length"),
    ("load_config", "learning_rate=1e-6", "actor_rollout_ref.actor.optim.lr"),
    ("load_config", "beta=0.04", "actor_rollout_ref.actor.kl_loss_coef (with actor_rollout_ref.actor.use_kl_loss=true)"),
    ("load_sft_config", "learning_rate=1e-5", "optim.lr"),
    ("load_sft_config", "max_steps=10", "trainer.total_training_steps"),
    ("load_dpo_config", "beta=0.1", "algorithm.beta"),
])
def test_trls_flat_config_names_name_rfts_key(loader, item, rft_key):
    """A TRL user's GRPOConfig / SFTConfig / DPOConfig name on the command line: the unknown-key line names rft's
    (verl's) key for it (it listed the top-level sections alone: 'num_generations' is no close spelling of any)."""
    import rft.trainer.configure as configure

    key = item.split("=")[0]
    with pytest.raises(ConfigError) as err:
        getattr(configure, loader)(None, [item], validate_paths=False)
    assert str(err.value).startswith(f"command line ({item}): unknown config key '{key}'; that is TRL's name: rft's "
                                     f"(verl's) key is {rft_key}. Allowed keys at the top level: "), str(err.value)


def test_every_trl_name_leads_to_a_key_of_its_schema():
    from rft.config.dpo_schema import DPOConfig
    from rft.config.load import _field_type
    from rft.config.sft_schema import SFTConfig
    from rft.config.suggest import TRL_KEYS

    schemas = {"RFTConfig": RFTConfig, "SFTConfig": SFTConfig, "DPOConfig": DPOConfig}
    assert set(TRL_KEYS) == set(schemas)
    for name, keys in TRL_KEYS.items():
        for trl, target in keys.items():
            named = re.findall(r"[a-z_]+(?:\.[a-z_]+)+|\b(?:use_remove_padding)\b", target)
            assert named and all(_field_type(schemas[name], k) is not None for k in named), (name, trl, target)
            assert _field_type(schemas[name], trl) is None, (name, trl)  # TRL's name is not one of rft's keys


@pytest.mark.parametrize("key, nearest", [
    ("trainer.total_steps", "trainer.total_training_steps"),  # Trinity-RFT's name; difflib alone: total_epochs
    ("trainer.total_step", "trainer.total_training_steps"),
    ("trainer.max_steps", "trainer.total_training_steps"),  # Hugging Face Trainer's / TRL's
    ("trainer.num_train_epochs", "trainer.total_epochs"),
    ("actor_rollout_ref.actor.optim.learning_rate", "actor_rollout_ref.actor.optim.lr"),
])
def test_another_trainers_name_for_a_key_suggests_rfts_not_a_lookalike(key, nearest):
    """`trainer.total_steps=3` (the steps, as Trinity-RFT or HF's max_steps name them) must not suggest
    total_epochs, which spells closer and means something else: a run of 3 epochs instead of 3 steps."""
    with pytest.raises(ConfigError) as err:
        load(f"{key}=3")
    assert f"did you mean '{nearest}'? Allowed keys under " in str(err.value), str(err.value)


def test_no_close_key_lists_the_allowed_ones_alone():
    with pytest.raises(ConfigError) as err:
        load("data.foo=1")
    assert "did you mean" not in str(err.value) and "Allowed keys under 'data': " in str(err.value)


# --------------------------------------------------------------------------------------- bad values
@pytest.mark.parametrize(
    "override, key",
    [
        ("data.train_batch_size=abc", "data.train_batch_size"),
        ("data.train_batch_size=1.5", "data.train_batch_size"),
        ("data.train_batch_size=null", "data.train_batch_size"),
        ("actor_rollout_ref.actor.optim.lr=fast", "actor_rollout_ref.actor.optim.lr"),
        ("actor_rollout_ref.rollout.do_sample=maybe", "actor_rollout_ref.rollout.do_sample"),
    ],
)
def test_type_error_names_key(override, key):
    with pytest.raises(ConfigError, match=re.escape(f"'{key}'")):
        load(override)


def test_an_out_of_range_value_names_where_it_came_from(tmp_path):
    """`optim.lr=-1` was the one refusal naming neither the command line nor the file that set it (the loader's
    refusals of a key or a type do): a check's "<key> must ..." now leads with it, for rft train, sft and dpo."""
    from rft.trainer.configure import load_dpo_config, load_sft_config

    with pytest.raises(ConfigError) as err:
        load("actor_rollout_ref.actor.optim.lr=-1")
    assert str(err.value) == ("command line (actor_rollout_ref.actor.optim.lr=-1): actor_rollout_ref.actor.optim.lr "
                              "must be > 0, got -1.0")
    sft = tmp_path / "sft.yaml"
    sft.write_text("optim:\n  lr: -1\n")
    for loader in (load_sft_config, load_dpo_config):
        with pytest.raises(ConfigError) as err:
            loader(sft, ["model.partial_pretrain=m", "data.train_files=t.parquet"], validate_paths=False)
        assert str(err.value) == f"{sft}: optim.lr must be > 0, got -1.0"
        with pytest.raises(ConfigError) as err:  # the last override of a key is the one merged
            loader(sft, ["model.partial_pretrain=m", "data.train_files=t.parquet", "optim.lr=-2", "optim.lr=-3"],
                   validate_paths=False)
        assert str(err.value) == "command line (optim.lr=-3): optim.lr must be > 0, got -3.0"


@pytest.mark.parametrize(
    "override, choices",
    [
        ("data.truncation=up", ["error", "left", "right", "middle"]),
        ("actor_rollout_ref.actor.loss_agg_mode=sum",
         ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm",
          "seq-mean-token-sum-maxlen"]),
        ("trainer.device=tpu", ["auto", "cpu", "cuda"]),
    ],
)
def test_bad_choice_lists_choices(override, choices):
    key, value = override.split("=")
    with pytest.raises(ConfigError) as err:
        load(override)
    msg = str(err.value)
    assert key in msg and repr(value) in msg
    assert str(choices) in msg


def test_one_logger_name_is_a_list_of_it(tmp_path):
    # verl's Tracking takes a string for trainer.logger; so does rft, on the command line and in YAML
    assert load("trainer.logger=console").trainer.logger == ["console"]
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  logger: tensorboard\n")
    assert load(path=path).trainer.logger == ["tensorboard"]
    assert load("trainer.logger=[console,file]").trainer.logger == ["console", "file"]
    with pytest.raises(ConfigError, match="trainer.logger"):
        load("trainer.logger=swanlab")  # one name is checked as the list's names are


def test_override_value_that_is_not_yaml_is_a_config_error():
    # hydra-style mapping without spaces: PyYAML cannot parse it; the user must see which override failed
    bad = "actor_rollout_ref.rollout.engine_kwargs={vllm:{swap_space:null}}"
    with pytest.raises(ConfigError, match=re.escape(repr(bad))):
        load(bad)


# ---------------------------------------------------------------------------------- unsupported fields
def _non_default(f: dataclasses.Field, default):
    """A value of the field's type that differs from its default."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default + 0.5
    if isinstance(default, str):
        return "x"
    if isinstance(default, list):
        return [*default, "x"]
    if isinstance(default, dict):
        return {"a": 1}
    assert default is None, (f.name, default)
    type_name = str(f.type)
    for needle, value in (("bool", True), ("int", 3), ("float", 0.5), ("str", "x"), ("Any", "x")):
        if needle in type_name:
            return value
    raise AssertionError(f"no non-default value for {f.name}: {type_name}")


UNSUPPORTED = [(key, f, value) for key, f, value in walk(RFTConfig()) if "unsupported" in f.metadata
               and _non_default(f, value) not in f.metadata.get("also", ())]  # also: what rft does anyway


def test_unsupported_fields_exist():
    # the parametrised test below would silently pass with none
    keys = {key for key, _, _ in UNSUPPORTED}
    assert "reward_model.model.fsdp_config" in keys
    # honoured since issue 16
    assert not keys & {"actor_rollout_ref.model.use_remove_padding", "critic.use_dynamic_bsz",
                       "actor_rollout_ref.actor.use_torch_compile", "actor_rollout_ref.actor.use_dynamic_bsz"}


@pytest.fixture(scope="module")
def base_cfg() -> RFTConfig:
    # every part built (critic, reward model, reference): no section is inactive, so each unsupported key counts
    return load("critic.enable=true", "reward_model.enable=true", "reward_model.model.path=rm",
                "actor_rollout_ref.actor.use_kl_loss=true")


def set_key(cfg: RFTConfig, key: str, value) -> RFTConfig:
    cfg = copy.deepcopy(cfg)
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, value)
    return cfg


@pytest.mark.parametrize("key, f, default", UNSUPPORTED, ids=[key for key, _, _ in UNSUPPORTED])
def test_unsupported_field_refused_when_set(key, f, default, base_cfg):
    # validate() on the dataclass directly: loading through OmegaConf costs ~50 ms a config
    value = _non_default(f, default)
    assert value != default
    validate(set_key(base_cfg, key, default), check_paths=False)  # the default passes
    with pytest.raises(ConfigError) as err:
        validate(set_key(base_cfg, key, value), check_paths=False)
    msg = str(err.value)
    assert msg.startswith(f"{key}=") and "not supported" in msg
    assert f.metadata["unsupported"] in msg


# one field of each kind of type, through YAML parsing and the OmegaConf merge
UNSUPPORTED_BY_KIND = {}
for _key, _f, _default in UNSUPPORTED:
    UNSUPPORTED_BY_KIND.setdefault((str(_f.type), type(_default)), (_key, _f, _default))


@pytest.mark.parametrize("key, f, default", list(UNSUPPORTED_BY_KIND.values()),
                         ids=[key for key, _, _ in UNSUPPORTED_BY_KIND.values()])
def test_unsupported_field_refused_through_load_config(key, f, default):
    every_part = ("critic.enable=true", "reward_model.enable=true", "reward_model.model.path=rm",
                  "actor_rollout_ref.actor.use_kl_loss=true")  # as base_cfg: no key is in a part left unbuilt
    assert load(*every_part, f"{key}={json.dumps(default)}") is not None
    with pytest.raises(ConfigError, match=re.escape(f"{key}=") + ".*not supported"):
        load(*every_part, f"{key}={json.dumps(_non_default(f, default))}")


def test_keys_of_parts_the_run_does_not_build_are_accepted_and_named(caplog):
    # verl's ppo_trainer.yaml sets the reward model's fsdp_config while reward_model.enable is false: no effect
    # (as in verl), so it loads, and the keys set are named in one note line
    cfg = load("reward_model.model.fsdp_config={min_num_params: 0, param_offload: false}", "critic.optim.lr=0.5")
    assert cfg.reward_model.model.fsdp_config == {"min_num_params": 0, "param_offload": False}
    notes = [r.getMessage() for r in caplog.records if "have no effect" in r.getMessage()]
    assert any("reward_model.enable=false" in n and "reward_model.model.fsdp_config=" in n for n in notes), notes
    assert any("no critic" in n and "critic.optim.lr=0.5" in n for n in notes), notes
    with pytest.raises(ConfigError, match="reward_model.model.fsdp_config=.*not supported"):
        load("reward_model.model.fsdp_config={fsdp_size: 2}", "reward_model.enable=true",
             "reward_model.model.path=rm")
    # param_offload true is a memory knob (the same scores): accepted, with a note
    load("reward_model.model.fsdp_config={param_offload: true}", "reward_model.enable=true", "reward_model.model.path=rm")


def test_kl_keys_without_their_switch_have_no_effect_and_a_set_one_is_named(caplog):
    """verl's ppo_trainer.yaml sets algorithm.kl_ctrl.kl_coef=0.005 with use_kl_in_reward=false: verl reads no
    kl_ctrl key then, nor kl_loss_coef / kl_loss_type without use_kl_loss; rft names the ones set in a note (they
    were accepted without a word). With the switch on they are used, and no note names them."""
    import logging

    with caplog.at_level(logging.WARNING, logger="rft"):
        load("algorithm.kl_ctrl.kl_coef=0.005", "algorithm.kl_penalty=low_var_kl",
             "actor_rollout_ref.actor.kl_loss_coef=0.01")
    notes = [r.getMessage() for r in caplog.records if "have no effect" in r.getMessage()]
    assert ("rft: note: algorithm.use_kl_in_reward=false (no KL penalty in the reward), so these keys have no "
            "effect: algorithm.kl_penalty='low_var_kl', algorithm.kl_ctrl.kl_coef=0.005") in notes, notes
    assert ("rft: note: actor_rollout_ref.actor.use_kl_loss=false (no KL loss), so these keys have no effect: "
            "actor_rollout_ref.actor.kl_loss_coef=0.01") in notes, notes
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rft"):
        load("algorithm.kl_ctrl.kl_coef=0.005", "algorithm.use_kl_in_reward=true",
             "actor_rollout_ref.actor.kl_loss_coef=0.01", "actor_rollout_ref.actor.use_kl_loss=true")
    assert not [r for r in caplog.records if "kl_coef" in r.getMessage()], caplog.text


@pytest.mark.parametrize("yaml_text, override, message", [
    # a list for an integer was said to be "expected a list, e.g. [a, b]"
    ("data:\n  train_batch_size: [1024]\n", None,
     "cfg.yaml: config key 'data.train_batch_size' takes an integer, not a list ([1024]); set it to an integer"),
    # a mapping for a list was "unexpected TypeError: Cannot merge incompatible container types ... a bug in rft"
    ("trainer:\n  logger: {a: 1}\n", None,
     "cfg.yaml: config key 'trainer.logger' takes a list, e.g. [a, b], not a mapping ({'a': 1}); set it to a list"),
    (None, "trainer.logger={a: 1}",
     "command line (trainer.logger={a: 1}): config key 'trainer.logger' takes a list, e.g. [a, b], not a mapping "
     "({'a': 1}); set it to a list"),
    ("actor_rollout_ref:\n  actor:\n    checkpoint:\n      save_contents: model\n", None,
     "cfg.yaml: config key 'actor_rollout_ref.actor.checkpoint.save_contents' takes a list, e.g. [a, b], not a "
     "string ('model'); set it to a list, e.g. [model]"),
    # a value for a section was "bad config: Merge error: int is not a subclass of CustomClsConfig. value: 5"
    ("data:\n  custom_cls: 5\n", None,
     "cfg.yaml: config key 'data.custom_cls' takes a section of keys, not a number (5); set the keys under it "
     "instead (data.custom_cls.path, data.custom_cls.name, ...)"),
    # a value OmegaConf cannot convert names where it was set and what the key takes; the last override wins
    ("actor_rollout_ref:\n  actor:\n    optim:\n      lr: fast\n", None,
     "cfg.yaml: config key 'actor_rollout_ref.actor.optim.lr' takes a number, not a string ('fast'); set it to a "
     "number"),
    (None, "data.train_batch_size=four",
     "command line (data.train_batch_size=four): config key 'data.train_batch_size' takes an integer, not a string "
     "('four'); set it to an integer"),
    (None, "actor_rollout_ref.actor.use_kl_loss=maybe",
     "command line (actor_rollout_ref.actor.use_kl_loss=maybe): config key 'actor_rollout_ref.actor.use_kl_loss' "
     "takes true or false, not a string ('maybe'); set it to true or false"),
])
def test_a_value_of_the_wrong_type_names_the_key_where_it_was_set_and_what_it_takes(tmp_path, monkeypatch,
                                                                                    yaml_text, override, message):
    monkeypatch.chdir(tmp_path)
    if yaml_text is not None:
        (tmp_path / "cfg.yaml").write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load(*([override] if override else []), path="cfg.yaml" if yaml_text is not None else None)
    assert str(err.value) == message


def test_vllm_keys_with_the_hf_engine_have_no_effect_and_a_set_one_is_named(caplog):
    """As in verl, the vLLM engine's keys mean nothing to another engine: verl's all-null `engine_kwargs` loads
    quietly, a value set is named in the note line (the vllm engine honours them: tests/with_vllm)."""
    import logging

    cfg = load("actor_rollout_ref.rollout.engine_kwargs={vllm: {swap_space: null}}")
    assert cfg.actor_rollout_ref.rollout.engine_kwargs == {"vllm": {"swap_space": None}}
    with caplog.at_level(logging.WARNING, logger="rft"):
        load("actor_rollout_ref.rollout.engine_kwargs={vllm: {swap_space: 4}}",
             "actor_rollout_ref.rollout.gpu_memory_utilization=0.8")
    notes = [r.getMessage() for r in caplog.records if "have no effect" in r.getMessage()]
    assert len(notes) == 1 and "rollout.name='hf'" in notes[0], notes
    assert "engine_kwargs={'vllm': {'swap_space': 4}}" in notes[0] and "gpu_memory_utilization=0.8" in notes[0]


def test_rollout_name_vllm_without_vllm_installed_names_the_extra(monkeypatch, real_paths):
    """A run (its files checked) needs vLLM and says so, naming the extra and the hf engine that runs without it;
    the config alone (`rft config show`: files not checked) loads."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ConfigError, match=r"rollout.name=vllm: the vLLM engine needs the vllm package.*make vllm.*"
                                          r"set actor_rollout_ref.rollout.name=hf, which runs without it"):
        load(*real_overrides(real_paths), "actor_rollout_ref.rollout.name=vllm", validate_paths=True)
    assert load("actor_rollout_ref.rollout.name=vllm").actor_rollout_ref.rollout.name == "vllm"
    with pytest.raises(ConfigError, match="rft has no SGLang engine"):
        load("actor_rollout_ref.rollout.name=sglang")


# ----------------------------------------------------------------------------------------- cross-field
def test_train_batch_not_multiple_of_mini_batch():
    with pytest.raises(ConfigError) as err:
        load("data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4")
    msg = str(err.value)
    assert "data.train_batch_size (10)" in msg and "ppo_mini_batch_size (4)" in msg
    # the value it suggests is one that loads: the largest divisor of 10 below 4
    assert msg.endswith("set actor_rollout_ref.actor.ppo_mini_batch_size to a divisor of 10, e.g. "
                        "actor_rollout_ref.actor.ppo_mini_batch_size=2")
    load("data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2")


def test_mini_batch_rows_not_multiple_of_micro_batch():
    # 4 prompts x n=3 = 12 rows per mini-batch; 5 does not divide 12
    with pytest.raises(ConfigError) as err:
        load("data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
             "actor_rollout_ref.rollout.n=3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5")
    msg = str(err.value)
    assert "4 x 3 = 12" in msg and "ppo_micro_batch_size_per_gpu (5)" in msg
    assert "a divisor of 12, e.g. actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4" in msg
    load("data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.rollout.n=3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")
    # 6 divides 12
    assert load("actor_rollout_ref.rollout.n=3",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=6").actor_rollout_ref.rollout.n == 3


@pytest.mark.parametrize("command, overrides, suggested", [
    # 16 rows per process, micro-batches of 6: the largest divisor of 16 at most 6
    ("sft", ["data.train_batch_size=16", "data.micro_batch_size_per_gpu=6"],
     "set data.micro_batch_size_per_gpu to a divisor of 16, e.g. data.micro_batch_size_per_gpu=4"),
    # 15 rows over 2 processes: the largest multiple of 2 at most 15
    ("sft", ["data.train_batch_size=15", "data.micro_batch_size_per_gpu=7", "trainer.n_gpus_per_node=2"],
     "set data.train_batch_size to a multiple of 2, e.g. data.train_batch_size=14"),
    ("dpo", ["data.train_batch_size=8", "data.micro_batch_size_per_gpu=3"],
     "set data.micro_batch_size_per_gpu to a divisor of 8, e.g. data.micro_batch_size_per_gpu=2"),
    # 5 rows over 4 processes in sequence-parallel groups of 2: the rows split over 2 groups
    ("sft", ["data.train_batch_size=5", "data.micro_batch_size_per_gpu=1", "trainer.n_gpus_per_node=4",
             "ulysses_sequence_parallel_size=2"],
     "set data.train_batch_size to a multiple of 2, e.g. data.train_batch_size=4"),
])
def test_sft_and_dpo_batch_errors_name_a_size_that_loads(command, overrides, suggested):
    """The SFT and DPO batch divisibility errors named the sizes but no value that fits (the RL ones did)."""
    from rft.trainer.configure import load_dpo_config, load_sft_config

    loader = {"sft": load_sft_config, "dpo": load_dpo_config}[command]
    base = ["model.partial_pretrain=model", "data.train_files=train.parquet"]
    with pytest.raises(ConfigError) as err:
        loader(None, [*base, *overrides], validate_paths=False)
    assert str(err.value).endswith(suggested)
    loader(None, [*base, *overrides, suggested.rsplit("e.g. ", 1)[1]], validate_paths=False)


@pytest.mark.parametrize("overrides, needle", [
    (["ulysses_sequence_parallel_size=2"], "ulysses_sequence_parallel_size=2 does not divide the 1 process(es)"),
    (["ulysses_sequence_parallel_size=2", "trainer.n_gpus_per_node=3"],
     "ulysses_sequence_parallel_size=2 does not divide the 3 process(es)"),
    (["ulysses_sequence_parallel_size=0"], "ulysses_sequence_parallel_size"),
])
def test_sft_sequence_parallel_sizes_that_do_not_split_the_processes_are_refused(overrides, needle):
    from rft.trainer.configure import load_sft_config

    base = ["model.partial_pretrain=model", "data.train_files=train.parquet"]
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_sft_config(None, [*base, *overrides], validate_paths=False)


def test_a_batch_that_does_not_split_over_the_processes_names_one_that_does():
    """RL's refusal named the processes but no batch size (SFT's did): 10 prompts over 4 processes (mini-batches
    of 4, 1 prompt x 2 responses per process), the largest multiple of 4 at most 10."""
    sizes = ["trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]
    with pytest.raises(ConfigError) as err:
        load(*sizes, "data.train_batch_size=10")
    assert str(err.value).endswith("set data.train_batch_size to a multiple of 4, e.g. data.train_batch_size=8")
    assert load(*sizes, "data.train_batch_size=8").data.train_batch_size == 8


def test_a_batch_that_does_not_split_over_the_processes_names_one_the_mini_batch_divides_too():
    """22 prompts over 4 processes with mini-batches of 8: the suggestion was 20, which the next check refuses (8 does
    not divide it); it is now the largest multiple of lcm(4, 8) = 8 at most 22, and that loads."""
    sizes = ["trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]
    with pytest.raises(ConfigError) as err:
        load(*sizes, "data.train_batch_size=22")
    message = str(err.value)
    assert "set data.train_batch_size to a multiple of 8, e.g. data.train_batch_size=16 (of " \
           "actor_rollout_ref.actor.ppo_mini_batch_size (8) too, which must divide it)" in message, message
    suggested = message.split("e.g. ", 1)[1].split(" ", 1)[0]
    assert load(*sizes, suggested).data.train_batch_size == 16


@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["data.max_response_length=8", "actor_rollout_ref.rollout.response_length=7"],
         ["actor_rollout_ref.rollout.response_length=7", "data.max_response_length=8"]),
        (["data.max_prompt_length=32", "actor_rollout_ref.rollout.prompt_length=64"],
         ["actor_rollout_ref.rollout.prompt_length=64", "data.max_prompt_length=32"]),
        (["actor_rollout_ref.rollout.name=sglang"], ["actor_rollout_ref.rollout.name='sglang'", "'hf'"]),
        (["trainer.n_gpus_per_node=3"], ["data.train_batch_size (8)", "multiple of the number of processes",
                                          "3 processes", "1 x 3"]),
        (["trainer.nnodes=0"], ["trainer.nnodes", "positive"]),
        (["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_mini_batch_size=3", "data.train_batch_size=6"],
         ["ppo_mini_batch_size (3)", "number of processes (2)", "a divisor of 6 and a multiple of 2, e.g. "
          "actor_rollout_ref.actor.ppo_mini_batch_size=2"]),
        (["actor_rollout_ref.rollout.temperature=0"], ["temperature=0", "do_sample=false"]),
        (["actor_rollout_ref.rollout.top_p=0"], ["top_p"]),
        (["actor_rollout_ref.actor.ppo_micro_batch_size=4"], ["ppo_micro_batch_size", "only one"]),
        (["data.train_batch_size=0"], ["data.train_batch_size", "positive"]),
        (["algorithm.adv_estimator=nope"], ["algorithm.adv_estimator='nope'", "grpo"]),
        (["algorithm.adv_estimator=gae", "critic.enable=false"], ["algorithm.adv_estimator='gae'", "critic"]),
        (["trainer.logger=[console,swanlab]"], ["trainer.logger", "swanlab", "protobuf"]),
        (["trainer.resume_mode=resume_path"], ["trainer.resume_from_path"]),
        (["data.train_files=train.csv"], ["data.train_files", "train.csv"]),
        (["actor_rollout_ref.actor.checkpoint.load_contents=[model,hf_model]"], ["load_contents", "subset"]),
    ],
)
def test_cross_field_errors(overrides, needles):
    with pytest.raises(ConfigError) as err:
        load(*overrides)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_several_processes_accepted_on_cpu():
    """trainer.nnodes x trainer.n_gpus_per_node processes: batch sizes checked against their number; on a machine
    without CUDA they are CPU processes (gloo), and the offload keys are accepted (no-ops there)."""
    cfg = load("trainer.n_gpus_per_node=2", "trainer.device=cpu", "actor_rollout_ref.actor.strategy=fsdp2",
               "actor_rollout_ref.actor.fsdp_config.offload_policy=true",
               "actor_rollout_ref.ref.fsdp_config.param_offload=true")
    assert cfg.trainer.n_gpus_per_node == 2
    with pytest.raises(ConfigError, match=r"rows per process"):  # 8 prompts x 2 / 2 processes = 8 rows, micro 3
        load("trainer.n_gpus_per_node=2", "trainer.device=cpu", "data.train_batch_size=8",
             "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3")


def test_matching_rollout_lengths_accepted():
    cfg = load("data.max_response_length=8", "actor_rollout_ref.rollout.response_length=8")
    assert cfg.actor_rollout_ref.rollout.response_length == 8


def test_greedy_with_temperature_zero_accepted():
    cfg = load("actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.rollout.do_sample=false")
    assert cfg.actor_rollout_ref.rollout.temperature == 0


@pytest.mark.parametrize("missing, key", [(0, "actor_rollout_ref.model.path"), (1, "data.train_files")])
def test_required_key_missing(missing, key):
    kept = [o for i, o in enumerate(REQUIRED) if i != missing]
    with pytest.raises(ConfigError, match=re.escape(key) + ".*required"):
        load_config(None, [*kept, *SMALL], validate_paths=False)


# ----------------------------------------------------------------------------------- paths on disk
def test_missing_train_file(real_paths, tmp_path):
    missing = tmp_path / "nope.parquet"
    with pytest.raises(ConfigError, match=r"data\.train_files: file .*nope\.parquet.* does not exist"):
        load(*real_overrides(real_paths), f"data.train_files={missing}", validate_paths=True)
    # the same config loads when paths are not checked
    assert load(*real_overrides(real_paths), f"data.train_files={missing}").data.train_files == str(missing)


def test_missing_val_file_in_list(real_paths, tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ConfigError, match=r"data\.val_files: file .*nope\.jsonl"):
        load(*real_overrides(real_paths), f"data.val_files=[{real_paths['val']},{missing}]",
             validate_paths=True)


def test_model_folder_without_config_json(real_paths, tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.model\.path=.*config\.json"):
        load(*real_overrides(real_paths), f"actor_rollout_ref.model.path={tmp_path / 'model'}",
             validate_paths=True)


def test_custom_reward_function_file_missing(real_paths, tmp_path):
    missing_file = r"custom_reward_function\.path: file .*reward\.py.* does not exist"
    with pytest.raises(ConfigError, match=missing_file):
        load(*real_overrides(real_paths), f"custom_reward_function.path={tmp_path / 'reward.py'}",
             validate_paths=True)
    (tmp_path / "reward.py").write_text("def compute_score(*args, **kwargs):\n    return 0.0\n")
    cfg = load(*real_overrides(real_paths), f"custom_reward_function.path={tmp_path / 'reward.py'}",
               validate_paths=True)
    assert cfg.custom_reward_function.path == str(tmp_path / "reward.py")


# ------------------------------------------------------------------------------------------------ YAML
def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_yaml_interpolation_resolves_after_overrides(tmp_path):
    path = write_yaml(tmp_path, (
        "data:\n  max_prompt_length: 40\n  max_response_length: 12\n"
        "actor_rollout_ref:\n  rollout:\n"
        "    prompt_length: ${data.max_prompt_length}\n    response_length: ${data.max_response_length}\n"
    ))
    cfg = load(path=path)
    assert cfg.actor_rollout_ref.rollout.prompt_length == 40
    assert cfg.actor_rollout_ref.rollout.response_length == 12
    # an override of the referenced key moves the interpolated one with it
    cfg = load("data.max_prompt_length=64", path=path)
    assert (cfg.data.max_prompt_length, cfg.actor_rollout_ref.rollout.prompt_length) == (64, 64)


def test_overrides_win_over_yaml(tmp_path):
    path = write_yaml(tmp_path, "data:\n  train_batch_size: 16\n  seed: 3\ntrainer:\n  total_epochs: 2\n")
    overrides = [*REQUIRED, "data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    cfg = load_config(path, overrides, validate_paths=False)
    assert cfg.data.train_batch_size == 32
    assert cfg.data.seed == 3 and cfg.trainer.total_epochs == 2  # keys the overrides leave alone


def test_plus_prefix_accepted_for_existing_keys():
    cfg = load("+data.seed=5", "+trainer.total_epochs=3")
    assert cfg.data.seed == 5 and cfg.trainer.total_epochs == 3


def test_plus_prefix_does_not_add_keys():
    with pytest.raises(ConfigError, match=r"unknown config key 'data\.new_key'"):
        load("+data.new_key=1")


@pytest.mark.parametrize("override", ["data.seed", "=5", "data.seed 5"])
def test_override_without_equals_refused(override):
    with pytest.raises(ConfigError, match="dotted.key=value"):
        load(override)


def test_yaml_list_refused(tmp_path):
    path = write_yaml(tmp_path, "- data\n- trainer\n")
    with pytest.raises(ConfigError, match="mapping"):
        load(path=path)


def test_yaml_syntax_error_refused(tmp_path):
    path = write_yaml(tmp_path, "data:\n  train_batch_size: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(path=path)


def test_missing_yaml_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml.*does not exist"):
        load(path=tmp_path / "nope.yaml")


# -------------------------------------------------------------------------------------------- examples
def test_examples_exist():
    assert EXAMPLES, "examples/*.yaml: no example configs found"


STAGED = [p for p in EXAMPLES if "stages" in yaml.safe_load(p.read_text())]
# `rft dpo` configs: the SFT sections (model.partial_pretrain) plus the preference loss; `rft sft` configs: without
RM = [p for p in EXAMPLES if _is_offline(p)
      and "center_rewards_coefficient" in (yaml.safe_load(p.read_text()).get("algorithm") or {})]
DPO = [p for p in EXAMPLES if _is_offline(p) and "algorithm" in yaml.safe_load(p.read_text()) and p not in RM]
SFT = [p for p in EXAMPLES if _is_offline(p) and p not in DPO and p not in RM]
# the vLLM examples: loaded and validated where vLLM is (tests/with_vllm); here they must name the extra
VLLM_EXAMPLES = [p for p in EXAMPLES if ((yaml.safe_load(p.read_text()).get("actor_rollout_ref") or {})
                                         .get("rollout") or {}).get("name") == "vllm"]
# the ALFWorld examples: validated and trained where the alfworld package is (tests/with_alfworld); here they name it
ALFWORLD_EXAMPLES = [p for p in EXAMPLES if "alfworld" in str((yaml.safe_load(p.read_text()).get("workflow") or {})
                                                              .get("type"))]
SINGLE = [p for p in EXAMPLES if p not in STAGED and p not in DPO and p not in SFT and p not in RM
          and p not in VLLM_EXAMPLES and p not in ALFWORLD_EXAMPLES]


# each example that needs a package make test's venv lacks: the module, the refusal, what `config show` prints, and
# the words of its note
NEEDS_PACKAGE = [
    *((p, "vllm", r"rollout.name=vllm: the vLLM engine needs the vllm package.*make vllm.*rollout.name=hf, which "
                  r"runs without it", "name: vllm", ("needs the vllm package", "rollout.name=hf")) for p in VLLM_EXAMPLES),
    *((p, "alfworld", r"the ALFWorld workflows run ALFWorld on TextWorld: pip install 'rft\[alfworld\]'",
       "type: alfworld_workflow", ("rft[alfworld]",)) for p in ALFWORLD_EXAMPLES)]


@pytest.mark.parametrize("example, module, refusal, shown, words", NEEDS_PACKAGE,
                         ids=[p.name for p, *_ in NEEDS_PACKAGE])
def test_an_example_whose_package_is_missing_names_the_extra(example, module, refusal, shown, words, monkeypatch,
                                                              real_paths, caplog, capsys):
    """Without its package (vLLM, alfworld: as in make test's venv): `rft train` refuses the example naming the
    extra; `rft config show` shows it, exit 0, with that reason as a note."""
    import logging
    import sys

    from rft.cli import main

    monkeypatch.setitem(sys.modules, module, None)  # `import <module>` fails
    with pytest.raises(ConfigError, match=refusal):
        load_config(example, real_overrides(real_paths), validate_paths=True)
    with caplog.at_level(logging.WARNING, logger="rft"):
        assert main(["config", "show", str(example)]) == 0
    assert shown in capsys.readouterr().out
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rft: note:")]
    assert any(all(w in n for w in (*words, "rft train")) for n in notes), notes


def test_there_is_an_alfworld_example():
    assert [p.name for p in ALFWORLD_EXAMPLES] == ["alfworld_grpo.yaml"]


def test_there_is_a_vllm_example():
    assert [p.name for p in VLLM_EXAMPLES] == ["arithmetic_grpo_vllm.yaml"]


@pytest.mark.parametrize("example", DPO, ids=[p.name for p in DPO])
def test_dpo_example_validates_with_real_paths(example, real_paths):
    from rft.trainer.configure import load_dpo_config

    raw = yaml.safe_load(example.read_text())
    assert load_dpo_config(example, validate_paths=False).algorithm.loss_type == raw["algorithm"]["loss_type"]
    cfg = load_dpo_config(example, [f"model.partial_pretrain={real_paths['model']}",
                                    f"data.train_files={real_paths['preference_train']}",
                                    f"data.val_files={real_paths['preference_val']}"])
    assert cfg.data.train_batch_size == raw["data"]["train_batch_size"]


@pytest.mark.parametrize("example", RM, ids=[p.name for p in RM])
def test_rm_example_validates_with_real_paths(example, real_paths):
    from rft.trainer.configure import load_rm_config

    raw = yaml.safe_load(example.read_text())
    assert load_rm_config(example, validate_paths=False).algorithm.center_rewards_coefficient == \
        raw["algorithm"]["center_rewards_coefficient"]
    cfg = load_rm_config(example, [f"model.partial_pretrain={real_paths['model']}",
                                   f"data.train_files={real_paths['preference_train']}",
                                   f"data.val_files={real_paths['preference_val']}"])
    assert cfg.data.train_batch_size == raw["data"]["train_batch_size"]


def test_there_is_an_rm_example():
    assert [p.name for p in RM] == ["arithmetic_rm.yaml"]


@pytest.mark.parametrize("example", SFT, ids=[p.name for p in SFT])
def test_sft_example_keeps_its_values(example):
    from rft.trainer.configure import load_sft_config

    cfg = load_sft_config(example, validate_paths=False)
    for section, values in yaml.safe_load(example.read_text()).items():
        for key, value in values.items():
            assert getattr(getattr(cfg, section), key) == value, (section, key)


def test_there_is_an_sft_example():
    assert [p.name for p in SFT] == ["gsm8k_sft.yaml"]


@pytest.mark.parametrize("example", STAGED, ids=[p.name for p in STAGED])
def test_staged_example_builds_every_stage(example, real_paths):
    from rft.trainer.stages import load_stages

    overrides = real_overrides(real_paths)
    for i, stage in enumerate(yaml.safe_load(example.read_text())["stages"]):  # a DPO stage's preference pairs
        if isinstance(stage.get("algorithm"), dict) and stage["algorithm"].get("algorithm_type") == "dpo":
            overrides += [f"stages.{i}.data.train_files={real_paths['preference_train']}",
                          f"stages.{i}.data.val_files={real_paths['preference_val']}"]
    stages = load_stages(example, overrides, validate_paths=True)
    raw = yaml.safe_load(example.read_text())
    assert [s.name for s in stages] == [x["stage_name"] for x in raw["stages"]]
    with pytest.raises(ConfigError, match="lists stages"):
        load_config(example, validate_paths=False)


@pytest.mark.parametrize("example", SINGLE, ids=[p.name for p in SINGLE])
def test_example_loads_without_paths(example):
    cfg = load_config(example, validate_paths=False)
    raw = yaml.safe_load(example.read_text())
    # the YAML's own values survive the merge
    for section, values in raw.items():
        for key, value in values.items():
            if not isinstance(value, dict):
                assert getattr(getattr(cfg, section), key) == value, (section, key)


API_EXAMPLES = [p for p in SINGLE if (yaml.safe_load(p.read_text()).get("external_model") or {}).get("enable")]
"""Mode bench of a model behind an API (gsm8k_api_bench.yaml): nothing trains or resumes, so the training keys a
resume compares have no effect there (noted) and are not compared."""
RESUMABLE = [p for p in SINGLE if p not in API_EXAMPLES] + SFT


def test_there_is_an_api_bench_example():
    assert [p.name for p in API_EXAMPLES] == ["gsm8k_api_bench.yaml"]


@pytest.mark.parametrize("example", RESUMABLE, ids=[p.name for p in RESUMABLE])
def test_an_examples_config_yaml_read_back_is_no_change_on_resume(example, tmp_path):
    """A rerun compares its config with the config.yaml the run wrote (`check_resume_matches`): written and read
    back, every example's config is unchanged, and a changed lr is named with both values; a new length and new
    validation (its files, sample cap, sampling) pass."""
    from omegaconf import OmegaConf

    from rft.config.load import to_yaml
    from rft.trainer.configure import load_sft_config
    from rft.trainer.run_folder import changed_on_resume

    load = load_sft_config if example in SFT else load_config
    cfg = load(example, validate_paths=False)
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    started = OmegaConf.to_container(OmegaConf.load(tmp_path / "config.yaml"))
    assert changed_on_resume(cfg, started) == []
    lr = "optim.lr" if example in SFT else "actor_rollout_ref.actor.optim.lr"
    validation = ["data.val_files=other/val.parquet", "data.val_max_samples=3"]
    if example not in SFT:
        validation += ["data.val_batch_size=2", "actor_rollout_ref.rollout.val_kwargs.temperature=0.5",
                       "actor_rollout_ref.rollout.val_kwargs.n=4"]
    moved = load(example, [f"{lr}=0.5", "trainer.total_training_steps=99", *validation], validate_paths=False)
    assert changed_on_resume(moved, started) == [f"{lr} ({started_lr(started, lr)} -> 0.5)"]


def started_lr(started: dict, key: str):
    for part in key.split("."):
        started = started[part]
    return started


@pytest.fixture
def memory_to_spare(monkeypatch):
    """The examples' shapes are real ones (geo3k's KV cache: 15 GiB on the tiny model): whether they fit in the memory
    free at this moment is the machine's state, not the config's (the memory checks have tests of their own)."""
    monkeypatch.setattr("rft.runtime.available_memory", lambda: 1 << 50)


@pytest.mark.parametrize("example", SINGLE, ids=[p.name for p in SINGLE])
def test_example_validates_with_real_paths(example, real_paths, tmp_path, memory_to_spare, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # gsm8k_api_bench.yaml's API (not called)
    raw = load_config(example, validate_paths=False)
    overrides = real_overrides(real_paths)
    if raw.data.val_files is None:
        overrides = overrides[:2]
    if raw.custom_reward_function.path:
        overrides.append(f"custom_reward_function.path={ROOT / raw.custom_reward_function.path}")
    if raw.data.custom_cls.path:
        overrides.append(f"data.custom_cls.path={ROOT / raw.data.custom_cls.path}")
    if raw.reward_model.enable:
        overrides.append(f"reward_model.model.path={real_paths['reward_model']}")
    if raw.workflow.interaction_config_path:  # verl's key names it (relative to a clone's root)
        overrides.append("actor_rollout_ref.rollout.multi_turn.interaction_config_path="
                         f"{ROOT / raw.workflow.interaction_config_path}")
    if raw.distillation.enabled:  # the student's own folder teaches it (one tokenizer)
        overrides.append(f"distillation.teacher_model.model_path={real_paths['model']}")
    cfg = load_config(example, overrides, validate_paths=True)
    assert cfg.actor_rollout_ref.model.path == str(real_paths["model"])


@pytest.mark.parametrize("example", TRINITY_EXAMPLES, ids=[str(p.relative_to(ROOT / "examples"))
                                                           for p in TRINITY_EXAMPLES])
def test_trinity_example_validates_with_real_paths(example, real_paths, tmp_path, monkeypatch, memory_to_spare):
    from rft.dialects.trinity import PLUGIN_DIRS_ENV
    from rft.trainer.configure import load_trinity

    if PLUGIN_DIRS_ENV in example.read_text():  # the header's command names the plugin folder
        monkeypatch.setenv(PLUGIN_DIRS_ENV, str(ROOT / "examples" / "workflows"))

    data = tmp_path / "tasks"
    data.mkdir()
    for split, target in (("train", "train"), ("val", "val")):
        (data / f"{target}.parquet").write_bytes(Path(real_paths[split]).read_bytes())
    raw = yaml.safe_load(example.read_text())
    if raw["algorithm"]["algorithm_type"] == "dpo":  # an offline run: one DPO stage, in mode train
        kind, stages = load_trinity(example, [f"model.model_path={real_paths['model']}",
                                              f"buffer.trainer_input.experience_buffer.path="
                                              f"{real_paths['preference_train']}"])
        assert kind == "stages" and [s.kind for s in stages] == ["dpo"] and raw["mode"] == "train"
        assert stages[0].cfg.model.partial_pretrain == str(real_paths["model"])
        return
    expert = [f"buffer.trainer_input.auxiliary_buffers.{name}.path={real_paths['preference_train']}"
              for name in (raw["buffer"].get("trainer_input") or {}).get("auxiliary_buffers") or {}]
    kind, cfg = load_trinity(example, [f"model.model_path={real_paths['model']}",
                                       f"buffer.explorer_input.taskset.path={data}",
                                       *([f"buffer.explorer_input.eval_tasksets.0.path={data}"]
                                         if "eval_tasksets" in example.read_text() else []), *expert])
    assert kind == "rl" and cfg.actor_rollout_ref.model.path == str(real_paths["model"])
    assert cfg.trainer.mode == raw["mode"]
    assert cfg.synchronizer.sync_interval == raw["synchronizer"]["sync_interval"]
    assert cfg.synchronizer.sync_offset == raw["synchronizer"]["sync_offset"]


# ------------------------------------------------------------------------------------------------- CLI
def test_cli_config_show(capsys):
    from rft.cli import main

    assert main(["config", "show", str(ROOT / "examples" / "arithmetic_grpo.yaml"),
                 "data.train_batch_size=32"]) == 0
    out = capsys.readouterr().out
    assert "adv_estimator: grpo" in out
    shown = yaml.safe_load(out)
    assert shown["data"]["train_batch_size"] == 32  # the override
    assert shown["data"]["max_prompt_length"] == 32  # from the YAML
    assert shown["trainer"]["default_local_dir"] == "runs/arithmetic_grpo"


def test_cli_config_show_error_exits_2(capsys, tmp_path):
    from rft.cli import main

    assert main(["config", "show", str(tmp_path / "nope.yaml")]) == 2
    assert "rft: error:" in capsys.readouterr().err


def test_verl_keys_a_verl_user_copies_load_or_are_refused_with_what_to_do(capsys, caplog):
    from rft.cli import main

    # verl's data.dataloader_num_workers (8 in verl's own generated config): rft has no DataLoader, so any number of
    # loader workers is a no-op here, accepted and named in a note (issue 63)
    assert load("data.dataloader_num_workers=0").data.dataloader_num_workers == 0
    assert main(["config", "show", str(ROOT / "examples" / "arithmetic_grpo.yaml"),
                 "data.dataloader_num_workers=8"]) == 0
    notes = [r.getMessage() for r in caplog.records if "data.dataloader_num_workers" in r.getMessage()]
    assert notes and notes[0].startswith("rft: note: ") and "no rft field" in notes[0], caplog.text
    # verl's trainer.val_only: validate, then stop; what it needs is named
    val = "data.val_files=val.parquet"
    assert load("trainer.val_only=true", val).trainer.val_only is True
    for overrides, needles in ((["trainer.val_only=true"], ["trainer.val_only", "data.val_files: set it"]),
                               (["trainer.val_only=true", val, "trainer.val_before_train=false"],
                                ["trainer.val_only", "set val_before_train=true"]),
                               (["trainer.val_only=true", val, "trainer.mode=explore"],
                                ["trainer.val_only", "trainer.mode=explore", "trainer.mode=bench"])):
        with pytest.raises(ConfigError) as e:
            load(*overrides)
        assert all(n in str(e.value) for n in needles), str(e.value)


def test_decoupled_modes_take_several_trainer_processes_and_say_what_they_cannot():
    """Mode train and mode both (off the one-process schedule) run their trainer on several processes, mode both
    broadcasting from rank 0 by default (files with several explorers); the explorer's own modes on several
    processes are refused with what to set."""
    from rft.sync.schedule import sync_method

    two = ("trainer.n_gpus_per_node=2", "synchronizer.sync_interval=2")
    assert load(*two, "trainer.mode=train").trainer.mode == "train"
    assert sync_method(load(*two)) == "gloo"
    assert sync_method(load(*two, "synchronizer.sync_method=nccl")) == "gloo"  # Trinity-RFT's name: no NCCL here
    assert sync_method(load(*two, "trainer.explorer_num=2")) == "checkpoint"
    with pytest.raises(ConfigError, match=r"trainer.mode=explore runs in one process.*train or both"):
        load(*two, "trainer.mode=explore")


@pytest.mark.parametrize("section", ["actor_rollout_ref.actor", "critic"])
def test_reduce_lr_on_plateau_is_refused_where_the_trainer_sees_no_validation(section):
    """Issue 60's audit: reduce_lr_on_plateau follows the validation reward; a trainer apart from its explorer (mode
    train, mode both off the one-process schedule) never got it, so its rate never fell, silently."""
    plateau = (f"{section}.optim.lr_scheduler_type=reduce_lr_on_plateau", "data.val_files=val.parquet",
               "trainer.test_freq=1", *(["algorithm.adv_estimator=gae"] if section == "critic" else []))
    assert load(*plateau).trainer.mode == "both"  # the one-process loop steps it after each validation
    for apart in (["synchronizer.sync_interval=2"], ["trainer.mode=train"]):
        with pytest.raises(ConfigError) as e:
            load(*plateau, *apart)
        assert str(e.value).startswith(f"{section}.optim.lr_scheduler_type=reduce_lr_on_plateau steps on the "
                                       "validation reward, which with trainer.mode="), str(e.value)
    assert load(*plateau, "trainer.mode=explore").trainer.mode == "explore"  # an explorer has no schedule


def test_several_explorers_need_the_decoupled_modes_a_database_and_file_tasksets():
    apart = ("trainer.explorer_num=2", "synchronizer.sync_interval=2")
    assert load(*apart).trainer.explorer_num == 2
    with pytest.raises(ConfigError, match=r"explorer_num=2: the one-process loop"):
        load("trainer.explorer_num=2")
    with pytest.raises(ConfigError, match=r"explorer_rank=2 must be in \[0, trainer.explorer_num=2\)"):
        load(*apart, "trainer.explorer_rank=2")
    assert load(*apart, "synchronizer.sync_method=nccl").synchronizer.sync_method == "nccl"  # a broadcast each
    with pytest.raises(ConfigError, match=r"storage_type=file is not one"):
        load(*apart, "trainer.mode=explore", "experience_buffer.storage_type=file")


def test_fused_kernels_take_the_torch_backend_and_note_triton(base_cfg, caplog):
    """verl's use_fused_kernels is rft's chunked LM head (always on where exact): both values and impl_backend
    torch pass; triton (verl's kernels of the same numbers) passes with a note; another backend and an unknown
    option are refused naming the key."""
    for value in (True, False):
        validate(set_key(base_cfg, "actor_rollout_ref.model.use_fused_kernels", value), check_paths=False)
    key = "actor_rollout_ref.model.fused_kernel_options"
    validate(set_key(base_cfg, key, {"impl_backend": "torch"}), check_paths=False)
    caplog.set_level(logging.WARNING, "rft")
    validate(set_key(base_cfg, key, {"impl_backend": "triton"}), check_paths=False)
    assert f"rft: note: {key}.impl_backend='triton'" in caplog.text
    with pytest.raises(ConfigError, match=re.escape(f"{key}.impl_backend='cuda': rft's fused log-probs are the torch")):
        validate(set_key(base_cfg, key, {"impl_backend": "cuda"}), check_paths=False)
    with pytest.raises(ConfigError, match="the one option is impl_backend"):
        validate(set_key(base_cfg, key, {"chunk": 4}), check_paths=False)


@pytest.mark.parametrize("section", ["actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model"])
def test_verls_model_dtype_is_rfts_key_with_verls_meaning(section):
    """verl's fsdp_config.model_dtype is the dtype it loads the model in: the master weights, gradients and
    optimizer state (tests/test_model_dtype.py trains with it); fp16 weights (no loss scaling) are refused."""
    cfg = load(f"{section}.fsdp_config.model_dtype=bfloat16")
    fsdp = cfg.critic.model.fsdp_config if section == "critic.model" else \
        getattr(cfg.actor_rollout_ref, section.split(".")[1]).fsdp_config
    assert fsdp.model_dtype == "bfloat16"
    with pytest.raises(ConfigError, match=f"{section}.fsdp_config.model_dtype"):
        load(f"{section}.fsdp_config.model_dtype=fp16")
