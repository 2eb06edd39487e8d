"""The seed's own example configs (../shared/spec) load with rft's CLI, with the fewest edits possible; every
edit that remains is listed here with the reason, and a test shows that each one is still needed (so the list is
neither stale nor short).

Paths and the machine's GPU count are not edits: the examples name files and GPUs of another machine.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from spec_configs import SPEC, md_yaml_blocks, merge, verl_ppo_trainer_yaml, verl_sft_trainer_yaml

from rft.cli import main
from rft.config.load import ConfigError
from rft.config.sft_schema import SFTConfig
from rft.trainer.configure import load_config, load_sft_config

pytestmark = pytest.mark.skipif(not SPEC.is_dir(), reason=f"the seed's spec files are not at {SPEC}")

# ---------------------------------------------------------------------------------- verl ppo_trainer.yaml
VERL_EDITS = {
    # key: (value that loads, why the seed's value is refused)
    "actor_rollout_ref.rollout.name": ("hf", "vLLM is not installed in make test's venv (it pins an older "
                                             "transformers: `make vllm` builds its own; tests/with_vllm runs this "
                                             "config unedited there)"),
}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("seed")
    init_model("tiny", root / "m", seed=0)
    write_arithmetic(root / "tasks", n_train=16, n_val=4, seed=0)
    (root / "tasks" / "val.parquet").rename(root / "tasks" / "test.parquet")
    (root / "sft.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n"
                                            for i in range(8)))
    (root / "ppo_trainer.yaml").write_text(verl_ppo_trainer_yaml())
    (root / "sft_trainer.yaml").write_text(verl_sft_trainer_yaml())
    return root


def _machine(work: Path) -> list[str]:
    """The example's paths and GPU count, as this machine has them."""
    import torch

    gpus = [f"trainer.n_gpus_per_node={torch.cuda.device_count()}"] if torch.cuda.is_available() else []
    return [f"actor_rollout_ref.model.path={work / 'm'}", f"data.train_files={work / 'tasks' / 'train.parquet'}",
            f"data.val_files={work / 'tasks' / 'test.parquet'}", *gpus]


def _edits(skip: str | None = None) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, (value, _) in VERL_EDITS.items() if key != skip]


def test_verl_ppo_trainer_yaml_loads_with_its_listed_edits(work, capsys):
    cfg = load_config(work / "ppo_trainer.yaml", [*_machine(work), *_edits()])
    # the seed's own defaults that rft used to refuse, now taken as they are
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 2  # verl's default, for an absent vLLM
    assert cfg.reward_model.model.fsdp_config == {"min_num_params": 0, "param_offload": False}  # reward model off
    assert cfg.actor_rollout_ref.model.override_config["moe_config"] == {"freeze_moe_router": False}
    assert cfg.trainer.default_hdfs_dir.endswith("experiments/gsm8k/ppo/gsm8k")  # a local mirror folder
    assert cfg.algorithm.adv_estimator == "gae"
    code = main(["config", "show", str(work / "ppo_trainer.yaml"), *_machine(work), *_edits()])
    assert code == 0 and "adv_estimator: gae" in capsys.readouterr().out


@pytest.mark.parametrize("key", list(VERL_EDITS))
def test_each_verl_edit_is_still_needed(work, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(work / "ppo_trainer.yaml", [*_machine(work), *_edits(skip=key)])


def test_verl_sft_trainer_yaml_loads_unchanged(work, capsys):
    machine = [f"model.partial_pretrain={work / 'm'}", f"data.train_files={work / 'sft.jsonl'}"]
    cfg = load_sft_config(work / "sft_trainer.yaml", machine)
    assert cfg.optim.lr_scheduler == "cosine" and cfg.model.fsdp_config.model_dtype == "fp32"
    assert main(["config", "reference"]) == 0  # the CLI runs; `rft sft` itself trains (tests/test_sft.py)
    capsys.readouterr()


# ---------------------------------------------------------------------------- every key of verl's reference
VERL_KEYS_OFF_THE_PAGE = ("trainer.val_only", "data.dataloader_num_workers")
"""Keys of verl's ppo_trainer.yaml that its config page does not print, which a verl user copies too."""


def _verl_reference_keys() -> list[tuple[str, str]]:
    """(schema, dotted key) of every key on verl's config page: each leaf of its YAML blocks (ppo_trainer.yaml's,
    its custom_cls block under data and its Megatron optim block under the actor; evaluation.yaml's;
    sft_trainer.yaml's) and each full key its prose names (``data.train_files``)."""
    import re

    from spec_configs import rst_yaml_blocks

    from rft.config.load import flatten

    text = (SPEC / "verl_config_reference.rst").read_text()
    blocks = rst_yaml_blocks(SPEC / "verl_config_reference.rst")
    trainer = blocks.index(next(b for b in blocks if b.startswith("trainer:")))
    out = []
    for i, block in enumerate(blocks):
        tree = yaml.safe_load(block)
        name = next(iter(tree))
        schema = "rl" if i <= trainer else ("sft" if name in ("optim", "model") else "eval")
        prefix = {"custom_cls": "data.", "optim": "actor_rollout_ref.actor."}.get(name, "") if schema == "rl" else ""
        out += [(schema, key) for key in flatten(tree, prefix)]
    prose = set(re.findall(r"``([a-z_]+(?:\.[a-z_]+)+)``", text)) - {"actor.use_kl_loss"}  # its short name for
    # actor_rollout_ref.actor.use_kl_loss
    out += [("eval" if key in ("data.path", "data.response_key", "data.data_source_key", "data.reward_model_key")
             else "sft" if key.startswith("optim.") else "rl", key) for key in sorted(prose)]
    return out + [("rl", key) for key in VERL_KEYS_OFF_THE_PAGE]


def _in_schema(node, dotted: str) -> bool:
    """`dotted` is a field (or section) of the config object `node`, or a key inside a free mapping of it."""
    import dataclasses

    for part in dotted.split("."):
        if isinstance(node, dict):  # a mapping of free keys (engine_kwargs, override_config)
            return True
        if not dataclasses.is_dataclass(node) or part not in {f.name for f in dataclasses.fields(node)}:
            return False
        node = getattr(node, part)
    return True


def test_every_key_of_verls_reference_is_a_key_or_refused_with_its_reason():
    """A verl user pastes any key of verl's config page: it is a field of rft's schema (so it loads, or a value
    rft cannot honour is refused with the field's reason: tests/test_config.py), or REFUSED_KEYS refuses it by
    name with the reason and the key to set (a Megatron optimizer key), never the bare "unknown config key" that a
    misspelling gets."""
    from rft.config.offline_schema import EvalConfig
    from rft.config.schema import REFUSED_KEYS, RFTConfig

    schemas = {"rl": RFTConfig(), "sft": SFTConfig(), "eval": EvalConfig()}
    keys = _verl_reference_keys()
    assert len(keys) > 150 and ("rl", "actor_rollout_ref.actor.optim.min_lr") in keys
    from rft.config.verl_keys import row_of  # verl's keys without a field: known by its table (issue 63)

    missing = [f"{schema}: {key}" for schema, key in keys if not _in_schema(schemas[schema], key)
               and not (schema == "rl" and key in REFUSED_KEYS) and row_of(schema, key) is None]
    assert not missing, missing
    refused = sorted({key for schema, key in keys if schema == "rl" and key in REFUSED_KEYS})
    # eight Megatron optimizer keys (clip_grad, verl's FSDP key too, is the verl_keys table's), the prose's external_libs
    assert len(refused) == 9
    for key in refused:
        with pytest.raises(ConfigError) as err:
            load_config(None, ["actor_rollout_ref.model.path=m", "data.train_files=t.parquet", f"{key}=1"],
                        validate_paths=False)
        assert f"'{key}' is a verl key rft does not have: " in str(err.value) and "unknown" not in str(err.value)
        assert REFUSED_KEYS[key] in str(err.value)


# ------------------------------------------------------------------------------------- Trinity-RFT
TRINITY_EDITS = {
    # dotted Trinity key (list indices as numbers): (value that loads, or None to remove it; why)
    "trainer.trainer_config.actor_rollout_ref.actor.use_dynamic_bsz": (False, "the example's SFT stage: rft's SFT "
                                                                              "has no token-budget micro-batches "
                                                                              "(its RL stages honour it)"),
    "buffer.train_batch_size": (None, "the example's staged run: 256 experiences a trainer step against the 64 an "
                                      "explore step makes (32 tasks x its taskset's repeat_times 2) run explorer and "
                                      "trainer apart, and a staged run's RL stage is one loop of both"),
    "cluster.gpu_per_node": (1, "the example's math_workflow in a staged run: each RL stage is one loop of "
                                "explorer and trainer, where a workflow runs on one process (`rft train` runs it "
                                "beside several)"),
}
# what each of the other example blocks of the page still asks for that rft does not have
TRINITY_BLOCK_REFUSALS = {
    "monitor": set(),  # monitor_type wandb with its base_url / api_key: trainer.logger, trainer.monitor_args
    "explorer": set(),  # engine_type vllm is rft's vllm engine (validated where the config loads), the rest honoured
    "synchronizer": set(),  # rft's synchronizer section has Trinity's keys (issue 12)
    "service": set(),  # data_processor.data_juicer (tests/with_data_juicer runs its server)
    "log": set(),  # trainer.log_level / log_group_by_node (tests/test_run_logs.py)
    # num_process: Data-Juicer's processes; the operators run through Data-Juicer where the config is checked
    # (tests/with_data_juicer runs this block on the arithmetic taskset)
    "data_processor": set(),
    # the mix algorithm's expert rows: refused by name in this (ppo) run; tests/test_mix.py loads the block with
    # algorithm_type mix
    "trainer_input": {"buffer.trainer_input.auxiliary_buffers.sft_dataset",
                      "buffer.trainer_input.auxiliary_buffers.other_buffer"},
}


def _blocks() -> list[dict]:
    return md_yaml_blocks(SPEC / "trinity_config_reference.md")


def _prune(tree):
    """The page's `...` placeholders (nulls) removed."""
    if isinstance(tree, dict):
        kept = {k: _prune(v) for k, v in tree.items() if v is not None}
        return {k: v for k, v in kept.items() if v != {}}
    return tree


def trinity_example() -> dict:
    """The example a user pastes: the global, algorithm, model, cluster and buffer blocks, the taskset block, the
    trainer block with the veRL trainer_config block, and the stages block."""
    blocks = _blocks()

    def one(pred):
        return copy.deepcopy(next(b for b in blocks if pred(b)))

    cfg = one(lambda b: list(b) == ["project", "name", "mode", "checkpoint_root_dir"])
    for name in ("algorithm", "model", "cluster"):
        cfg = merge(cfg, one(lambda b, n=name: list(b) == [n]))
    cfg = merge(cfg, _prune(one(lambda b: list(b) == ["buffer"] and "batch_size" in b["buffer"])))
    cfg = merge(cfg, one(lambda b: list(b) == ["buffer"] and (b["buffer"].get("explorer_input") or {}).get("taskset")))
    cfg = merge(cfg, one(lambda b: list(b) == ["trainer"]))
    cfg["trainer"]["trainer_config"] = one(lambda b: "actor_rollout_ref" in b)
    return merge(cfg, one(lambda b: list(b) == ["stages"]))


def _edit(cfg: dict, key: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    node = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is None:
        node.pop(leaf)
    else:
        node[leaf] = value
    return cfg


def edited_trinity_example(skip: str | None = None) -> dict:
    """The Trinity example with TRINITY_EDITS applied (all but `skip`)."""
    cfg = trinity_example()
    for key, (value, _) in TRINITY_EDITS.items():
        if key != skip:
            cfg = _edit(cfg, key, value)
    return cfg


@pytest.fixture
def trinity_env(work, monkeypatch, tmp_path):
    monkeypatch.setenv("MODEL_PATH", str(work / "m"))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(work / "tasks"))
    monkeypatch.setenv("TRINITY_DATASET_PATH", str(work / "sft.jsonl"))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("TRINITY_SFT_DATASET_PATH", str(work / "sft.jsonl"))
    return tmp_path


def test_trinity_example_with_its_trainer_config_loads_with_its_listed_edits(trinity_env, capsys):
    from rft.trainer.configure import load_trinity

    path = trinity_env / "trinity.yaml"
    path.write_text(yaml.safe_dump(edited_trinity_example(), sort_keys=False))
    kind, stages = load_trinity(path)
    assert kind == "stages" and [(s.name, s.kind) for s in stages] == [("sft_warmup", "sft"), ("rft", "rl")]
    sft, rl = stages
    # the trainer_config keys an SFT stage honours reach it; the RL stage takes the whole block
    assert sft.cfg.model.enable_gradient_checkpointing is True and sft.cfg.data.micro_batch_size_per_gpu == 4
    assert sft.cfg.optim.lr == 1e-6 and sft.cfg.optim.lr_scheduler == "constant"
    assert rl.cfg.trainer.max_actor_ckpt_to_keep == 5 and rl.cfg.trainer.max_critic_ckpt_to_keep == 5
    assert rl.cfg.actor_rollout_ref.actor.entropy_from_logits_with_chunking is False
    assert rl.cfg.actor_rollout_ref.rollout.n == 8 and rl.cfg.trainer.total_training_steps == 1000
    assert main(["config", "show", str(path)]) == 0
    assert "Trinity-RFT dialect" in capsys.readouterr().out


@pytest.mark.parametrize("key", list(TRINITY_EDITS))
def test_each_trinity_edit_is_still_needed(trinity_env, key):
    from rft.trainer.configure import load_trinity

    path = trinity_env / "trinity.yaml"
    path.write_text(yaml.safe_dump(edited_trinity_example(skip=key), sort_keys=False))
    with pytest.raises(ConfigError) as err:
        load_trinity(path)
    leaf = key.split(".")[-1] if key != "cluster.gpu_per_node" else "n_gpus_per_node"
    assert leaf in str(err.value), str(err.value)


@pytest.mark.parametrize("name", list(TRINITY_BLOCK_REFUSALS))
def test_the_other_trinity_blocks_are_refused_by_key(trinity_env, name):
    from rft.dialects.trinity import translate

    blocks = _blocks()
    block = next(b for b in blocks if list(b) == [name] or (
        name == "trainer_input" and list(b) == ["buffer"]
        and ((b["buffer"].get("trainer_input") or {}).get("experience_buffer"))))
    base = {"project": "p", "name": "n", "model": {"model_path": str(trinity_env)},
            "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": "t.parquet"}}}}
    refusals: list = []
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.create(merge(base, block)), resolve=True)
    translate(cfg, "t.yaml", refusals=refusals)
    assert {key for key, _ in refusals} == TRINITY_BLOCK_REFUSALS[name]


@pytest.mark.heavy
def test_verl_ppo_trainer_yaml_trains_with_sequence_parallelism_hybrid_sharding_and_activation_offload(work, tmp_path):
    """The seed's ppo_trainer.yaml (GAE with a critic, FSDP1, torch.compile) with its listed edits, this machine's
    small sizes and verl's scale keys: 4 processes in groups of 2 that split each sequence
    (ulysses_sequence_parallel_size 2; the critic follows), the actor sharded within pairs and replicated across
    them (fsdp_size 2), activation offload (a note on CPU): it resolves and trains 2 steps."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT")}
    out = tmp_path / "out"
    args = [str(work / "ppo_trainer.yaml"), *_machine(work), *_edits(), "trainer.n_gpus_per_node=4",
            "trainer.device=cpu", "data.train_batch_size=4", "data.max_prompt_length=32", "data.max_response_length=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "actor_rollout_ref.actor.fsdp_config.fsdp_size=2",
            "actor_rollout_ref.model.enable_activation_offload=true", "trainer.total_training_steps=2",
            "trainer.logger=[console]", f"trainer.default_local_dir={out}", "trainer.default_hdfs_dir=null",
            "trainer.val_before_train=false"]
    proc = subprocess.run([sys.executable, "-m", "rft", "train", *args], env={**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "2 steps on 4 processes" in proc.stdout and "enable_activation_offload=true changes nothing on CPU" in (
        proc.stdout + proc.stderr)
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2] and (out / "model" / "config.json").is_file() and (out / "critic").is_dir()
