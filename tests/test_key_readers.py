"""Nothing is silently ignored (issue 11): every key rft accepts reaches code that reads it, or is refused by name.

The schema walk: the schemas (RFTConfig for `rft train`, SFTConfig for `rft sft`, DPOConfig for `rft dpo`) are
instrumented so that every read of a config field is recorded, except the generic walks that read every field (the
`unsupported` / `choices` check, YAML dumps, copies). Short runs that build every part (critic, reward model,
reference, LoRA, validation, checkpoints, a resume, dynamic sampling, mix's expert rows, the SFT and DPO trainers)
then have to read every key that is not `unsupported`
(those are refused at any value but their default, which does nothing). What is read only with several processes
is listed in WITHOUT_A_READER_HERE with where it is read and tested.

The dialect walk: every key of every Trinity-RFT example in ../shared/spec/trinity_config_reference.md is changed
in turn; the translation must change, or refuse the key by name. Ray actor names are listed in TRINITY_EXEMPT
with the reason.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
from spec_configs import SPEC, md_yaml_blocks, merge

from rft.config.dpo_schema import DPOConfig
from rft.config.load import ConfigError
from rft.config.schema import VLLM_KEYS, RFTConfig
from rft.config.sft_schema import SFTConfig
from rft.config.validate import walk
from rft.trainer.configure import load_config, load_dpo_config, load_sft_config

# ------------------------------------------------------------------------------------------ schema walk
WITHOUT_A_READER_HERE = {
    # read by workers/fsdp.py when the model is sharded over several processes; tests/test_distributed.py runs them
    **{f"{section}.fsdp_config.{key}": "several processes: workers/fsdp.py (tests/test_distributed.py)"
       for section in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")
       for key in ("param_offload", "optimizer_offload", "offload_policy", "wrap_policy.transformer_layer_cls_to_wrap")},
    # verl's fused kernels are rft's chunked LM head (workers/lm_head.py), used whatever the value wherever it
    # reproduces the model's logits: both values give the same numbers (tests/test_lm_head.py); its options'
    # backend is checked (models/checks.py: torch, or refused)
    "actor_rollout_ref.model.use_fused_kernels": "always on: workers/lm_head.py (tests/test_lm_head.py)",
    "trainer.ray_wait_register_center_timeout": "with Ray only: orchestration/cluster.py:reserve (tests/test_cluster.py)",
    # where the data_juicer operators run Data-Juicer: read by data_processor/data_juicer.py:configure and
    # _interpreter, with a data_juicer operator, whose environment `make data-juicer` builds (tests/with_data_juicer)
    **{f"data_processor.data_juicer.{key}": "with a data_juicer operator: data_processor/data_juicer.py "
                                            "(tests/with_data_juicer)" for key in ("python", "server_url",
                                                                                   "auto_start", "port")},
    "trainer.balance_batch": "several processes: rl.py generate_and_score -> distributed.step_shard "
                             "(tests/test_robustness.py::test_balance_batch_deals_prompts_by_length)",
    # the vLLM engine's keys: read by rollout/engines.py:vllm_options when rollout.name is vllm, which needs the
    # venv of `make vllm` (tests/with_vllm runs them: verl's ppo_trainer.yaml with every one of them)
    **{f"actor_rollout_ref.rollout.{key}": "the vLLM engine: rollout/engines.py:vllm_options (tests/with_vllm)"
       for key in VLLM_KEYS},
    # a model behind an API, read in mode bench only (no model loads, nothing trains)
    **{f"external_model.{key}": "mode bench of an API model: orchestration/modes.py:bench_external, "
                                "explorer/external.py (tests/test_external_model.py)"
       for key in ("model_name", "base_url_env", "api_key_env")},
}
SFT_WITHOUT_A_READER_HERE = {
    "model.strategy": "how several processes shard the model: read by trainer/sft.py only when trainer.nnodes x "
                      "n_gpus_per_node > 1 (tests/test_scale.py runs rft sft on 2 processes); this run has one",
}


def _dataclass_types(cls: type, out: set[type]) -> set[type]:
    out.add(cls)
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
            if dataclasses.is_dataclass(value):
                _dataclass_types(type(value), out)
    return out


GENERIC_WALKS = {("validate.py", "walk"), ("validate.py", "_check_schema"), ("validate.py", "inactive_sections"),
                 ("trinity.py", "_verl_default"),
                 ("hub.py", "resolve_hub_ids")}  # looks at every field for the model keys' Hub ids


class Reads:
    """Records `<schema>:<key>` for every read of a field of a tracked config, outside the generic walks."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.prefixes: dict[int, str] = {}
        self.keep: list = []  # the tracked configs stay alive, so their ids are not reused

    def track(self, cfg, prefix: str = "") -> None:
        if not prefix:
            self.keep.append(cfg)
            prefix = f"{type(cfg).__name__}:"
        self.prefixes[id(cfg)] = prefix
        for f in dataclasses.fields(cfg):
            value = object.__getattribute__(cfg, f.name)
            if dataclasses.is_dataclass(value):
                self.track(value, f"{prefix}{f.name}.")

    def of(self, schema: type) -> set[str]:
        tag = f"{schema.__name__}:"
        return {k[len(tag):] for k in self.keys if k.startswith(tag)}

    def install(self, monkeypatch, *schemas: type) -> None:
        reads = self
        for cls in set().union(*(_dataclass_types(s, set()) for s in schemas)):
            names = {f.name for f in dataclasses.fields(cls)}

            def getattribute(obj, name, _names=names):
                value = object.__getattribute__(obj, name)
                prefix = reads.prefixes.get(id(obj))
                if prefix is not None and name in _names and not dataclasses.is_dataclass(value):
                    frame = sys._getframe(1)
                    where = (Path(frame.f_code.co_filename).name, frame.f_code.co_name)
                    module = frame.f_globals.get("__name__", "")
                    if where not in GENERIC_WALKS and not module.startswith(("omegaconf", "dataclasses", "copy")):
                        reads.keys.add(prefix + name)
                return value

            monkeypatch.setattr(cls, "__getattribute__", getattribute)


def _accepted_keys(schema: type) -> set[str]:
    """Leaf keys a config of `schema` accepts at values other than their default: not `unsupported`, and with
    more than one allowed value (`choices=(True,)` accepts only what rft does)."""
    return {key for key, f, _ in walk(schema()) if "unsupported" not in f.metadata
            and len(f.metadata.get("choices", (0, 1))) > 1}


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    from rl_helpers import make_assets

    from rft.models.tiny import init_model

    root = make_assets(tmp_path_factory.mktemp("readers"))
    init_model("tiny-rm", root / "rm", seed=0)
    (root / "rows.py").write_text(ROWS_CLASS)
    return root


ROWS_CLASS = """
import pyarrow.parquet as pq
from torch.utils.data import Dataset


class Rows(Dataset):
    def __init__(self, data_files, tokenizer, config, processor=None):
        self.rows = [r for f in ([data_files] if isinstance(data_files, str) else data_files)
                     for r in pq.read_table(f).to_pylist()]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]
"""


def _rl(assets: Path, out: Path, *overrides: str):
    return load_config(None, [
        f"actor_rollout_ref.model.path={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"data.val_files={assets / 'data' / 'val.parquet'}", "data.max_prompt_length=32",
        "data.max_response_length=4", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=2", "trainer.save_freq=1",
        "trainer.test_freq=1", "trainer.logger=[]", f"trainer.default_local_dir={out}", *overrides,
    ], validate_paths=False)


RL_RUNS = [
    # a critic (LoRA), a reward model mixed with two weighted reward functions, an adaptive in-reward KL, the
    # overlong buffer, PF-PPO's resampling, hf_model in checkpoints, a mirror folder, named schedulers, validation samples, the prompts
    # read by a dataset class (data.custom_cls: the rows of the files, passed through)
    ["data.custom_cls.name=Rows", "algorithm.adv_estimator=gae", "critic.model.lora_rank=4", "critic.ppo_micro_batch_size_per_gpu=2",
     "critic.forward_micro_batch_size_per_gpu=2", "reward_model.enable=true", "reward_model.rule_weight=0.5",
     "reward_model.micro_batch_size_per_gpu=2", "reward_model.max_length=64",
     "custom_reward_function.name=[compute_score]", "custom_reward_function.reward_weights=[2.0]",
     "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "reward_model.reward_manager=dapo",
     "reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=2",
     "reward_model.overlong_buffer.log=true", "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=pow",
     "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,"
     "extra,hf_model]", "critic.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
     "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine", "critic.optim.total_training_steps=10",
     "trainer.log_val_generations=1", "trainer.critic_warmup=1", "actor_rollout_ref.actor.ppo_epochs=2",
     "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
     # token-budget micro-batches everywhere (issue 16), the critic on packed tokens
     "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=64",
     "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=48",
     "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=40", "critic.use_dynamic_bsz=true",
     "critic.ppo_max_token_len_per_gpu=64", "critic.forward_max_token_len_per_gpu=48",
     "critic.model.use_remove_padding=true"],
    # LoRA actor, a KL loss from logits, dynamic sampling, a shuffled mini-batch loop, remax's greedy baselines
    ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.actor.use_kl_loss=true",
     "actor_rollout_ref.actor.kl_loss_type=full", "algorithm.filter_groups.enable=true",
     "algorithm.filter_groups.metric=score", "actor_rollout_ref.actor.shuffle=true",
     "actor_rollout_ref.actor.entropy_coeff=0.01", "algorithm.adv_estimator=remax",
     "actor_rollout_ref.rollout.micro_batch_size=2", "data.val_batch_size=2", "trainer.max_actor_ckpt_to_keep=1",
     "actor_rollout_ref.actor.optim.warmup_style=cosine", "actor_rollout_ref.actor.optim.total_training_steps=5",
     "actor_rollout_ref.model.use_remove_padding=true"],  # packed passes of a LoRA model
    # tasks from a database table, a persistent buffer with a staleness bound (the decoupled modes' keys that a
    # one-process run reads; their two-process paths: tests/test_modes.py); Trinity's mix with expert rows
    ["data.task_storage=sql", "data.task_table=arith", "experience_buffer.storage_type=sql",
     "experience_buffer.max_staleness=1", "experience_buffer.stale_policy=downweight", "algorithm.mix.enable=true",
     "algorithm.mix.mu=0.2", "algorithm.mix.expert_data_ratio=0.5", "algorithm.mix.sft_loss_agg_mode=seq-mean-token-mean",
     "data.expert.response_key=extra_info", "data.expert.response_dict_keys=[answer]", "data.expert.max_length=48"],
    # a multi-turn workflow (its own paths: tests/test_workflows.py), Trinity's data processor over its tasks and
    # experiences (tests/test_data_processor.py)
    ["workflow.type=tool_call_workflow", "workflow.tool_call_parser=pythonic", "workflow.args={max_turns: 2}",
     "data_processor.task_pipeline.operators=[{name: text_length_filter, args: {min_len: 0}}]",
     "data_processor.task_pipeline.target_fields=[prompt]",
     "data_processor.experience_pipeline.operators=[{name: pass_rate_calculator}]"],
    # on-policy distillation: a teacher's generalised JSD as a dense per-token reward beside the task's
    # (tests/test_distill.py has each form's numbers)
    ["distillation.enabled=true", "distillation.distillation_loss.loss_mode=jsd",
     "distillation.distillation_loss.jsd_beta=0.5", "distillation.distillation_loss.use_policy_gradient=true",
     "distillation.distillation_loss.use_task_rewards=true", "distillation.distillation_loss.distillation_loss_coef=0.5",
     "distillation.distillation_loss.in_reward=true"],
    # Trinity's difficulty-based task selector (fed each step's pass rates; columns `weak` / `strong` added to the
    # rows below) and its Clip_V entropy filter (tests/test_selectors.py, tests/test_entropy_clip.py)
    ["data.selector.selector_type=difficulty_based", "data.selector.feature_keys=[weak,strong]",
     "+data.selector.kwargs={tau: 0, target_reward: 0.5}", "data.selector.seed=3", "algorithm.entropy_clip.mode=clipv",
     "algorithm.entropy_clip.mu=1.0", "algorithm.entropy_clip.max_frac=0.5"],
]


def test_every_accepted_rl_and_sft_key_has_a_reader(assets, tmp_path, monkeypatch):
    from rft.data.io import read_rows, write_parquet
    from rft.explorer.taskset import write_tasks
    from rft.orchestration.run import SyncRun
    from rft.trainer.sft import SFTTrainer

    tasks = f"sqlite:///{tmp_path / 'tasks.db'}"
    write_tasks(tasks, "arith", read_rows(assets / "data" / "train.parquet"))
    rated = tmp_path / "rated.parquet"  # the selector's reference pass rates
    write_parquet([{**row, "weak": (i % 5) / 10, "strong": (i % 5) / 10 + 0.3}
                   for i, row in enumerate(read_rows(assets / "data" / "train.parquet"))], rated)
    crf = [f"custom_reward_function.path={assets / 'reward.py'}"]
    keys = [[*crf, *extra, f"reward_model.model.path={assets / 'rm'}",
             *([f"data.custom_cls.path={assets / 'rows.py'}"] if "data.custom_cls.name=Rows" in extra else []),
             f"trainer.default_hdfs_dir={tmp_path / 'mirror'}",
             *([f"data.train_files={tasks}"] if "data.task_storage=sql" in extra else []),
             *([f"data.expert.files={assets / 'data' / 'train.parquet'}"] if "algorithm.mix.enable=true" in extra
               else []),
             *([f"distillation.teacher_model.model_path={assets / 'model'}"] if "distillation.enabled=true" in extra
               else []),
             *([f"data.train_files={rated}"] if "data.selector.selector_type=difficulty_based" in extra else [])]
            for extra in RL_RUNS]
    configs = [_rl(assets, tmp_path / f"rl{i}", *k) for i, k in enumerate(keys)]
    # a resume from a named checkpoint that deletes it afterwards (the first run's keys: a resume may change only
    # its length, cadence and checkpoint keys)
    configs.append(_rl(assets, tmp_path / "rl0", *keys[0], "trainer.total_training_steps=2",
                       "trainer.resume_mode=resume_path", "trainer.del_local_ckpt_after_load=true",
                       f"trainer.resume_from_path={tmp_path / 'rl0' / 'checkpoints' / 'global_step_1'}"))
    messages = tmp_path / "chat.jsonl"
    messages.write_text("".join(json.dumps({"conversation": [{"role": "user", "content": f"{i}+1="},
                                                             {"role": "assistant", "content": str(i + 1)}]}) + "\n"
                                for i in range(4)))
    chat = load_sft_config(None, [
        f"model.partial_pretrain={assets / 'model'}", f"data.train_files={messages}", "data.multiturn.enable=true",
        "data.multiturn.messages_key=conversation", "data.train_batch_size=2", "data.micro_batch_size_per_gpu=2",
        "trainer.total_training_steps=1", "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'chat'}"],
        validate_paths=False)
    sft = load_sft_config(None, [
        f"model.partial_pretrain={assets / 'model'}", f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"data.val_files={assets / 'data' / 'val.parquet'}", "data.response_key=extra_info",
        "data.response_dict_keys=[answer]", "data.train_batch_size=4", "data.micro_batch_size_per_gpu=2",
        "data.max_length=48", "model.lora_rank=4", "use_remove_padding=true", "trainer.total_training_steps=2",
        "trainer.save_freq=1",
        "trainer.test_freq=1", "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'sft'}",
        f"trainer.default_hdfs_dir={tmp_path / 'sft_mirror'}"], validate_paths=False)

    pairs = tmp_path / "pairs.jsonl"  # string prompts, so the system-prompt keys are read
    pairs.write_text("".join(json.dumps({"q": f"{i}+1=", "sys": "add", "good": str(i + 1), "bad": str(i)}) + "\n"
                             for i in range(4)))
    dpo = load_dpo_config(None, [
        f"model.partial_pretrain={assets / 'model'}", f"data.train_files={pairs}", f"data.val_files={pairs}",
        "data.prompt_key=q", "data.chosen_key=good", "data.rejected_key=bad", "data.system_prompt_key=sys",
        "data.train_batch_size=2", "data.micro_batch_size_per_gpu=1", "algorithm.use_kl_loss=true",
        "algorithm.entropy_coeff=0.01", "trainer.total_training_steps=2", "trainer.save_freq=1",
        "trainer.test_freq=1", "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'dpo'}"],
        validate_paths=False)
    dpo_system = load_dpo_config(None, [
        f"model.partial_pretrain={assets / 'model'}", f"data.train_files={pairs}", "data.prompt_key=q",
        "data.chosen_key=good", "data.rejected_key=bad", "data.system_prompt=add", "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=2", "model.lora_rank=4",
        "trainer.total_training_steps=1", "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'dpo2'}"],
        validate_paths=False)

    reads = Reads()
    reads.install(monkeypatch, RFTConfig, SFTConfig, DPOConfig)
    from rft.trainer.run_folder import run_folder
    from rft.trainer.validate import validate, validate_dpo, validate_sft

    for cfg in configs:  # each in its run folder, as the command line runs it (the folder reads the log keys)
        reads.track(cfg)
        validate(cfg)
        with run_folder(cfg):
            SyncRun(cfg).fit()
    # mode bench over the first run's checkpoints
    from rft.orchestration.modes import run_bench

    bench = _rl(assets, tmp_path / "rl0", *keys[0], "trainer.mode=bench", "trainer.bench_on_latest_checkpoint=true")
    reads.track(bench)
    validate(bench)
    with run_folder(bench, role="bench"):
        run_bench(bench)
    for cfg in (sft, chat):
        reads.track(cfg)
        validate_sft(cfg)
        with run_folder(cfg):
            SFTTrainer(cfg).fit()
    from rft.trainer.dpo import DPOTrainer

    for cfg in (dpo, dpo_system):
        reads.track(cfg)
        validate_dpo(cfg)
        with run_folder(cfg):
            DPOTrainer(cfg).fit()

    unread = sorted(_accepted_keys(RFTConfig) - reads.of(RFTConfig) - set(WITHOUT_A_READER_HERE))
    assert not unread, f"RL keys accepted without a reader: {unread}"
    unread_sft = sorted(_accepted_keys(SFTConfig) - reads.of(SFTConfig) - set(SFT_WITHOUT_A_READER_HERE))
    assert not unread_sft, f"SFT keys accepted without a reader: {unread_sft}"
    unread_dpo = sorted(_accepted_keys(DPOConfig) - reads.of(DPOConfig) - set(SFT_WITHOUT_A_READER_HERE))
    assert not unread_dpo, f"DPO keys accepted without a reader: {unread_dpo}"
    stale = sorted(k for k in WITHOUT_A_READER_HERE if k in reads.of(RFTConfig))
    assert not stale, f"read here after all, remove from WITHOUT_A_READER_HERE: {stale}"


# ----------------------------------------------------------------------------------------- dialect walk
TRINITY_EXEMPT = {
    # Ray actor names: identifiers without behaviour in a run that has no Ray actors
    "explorer.name": "a Ray actor's name", "trainer.name": "a Ray actor's name",
    "buffer.explorer_input.taskset.name": "a Ray actor's name (with storage_type sql / queue: data.task_table)",
    "buffer.explorer_input.eval_tasksets.name": "a Ray actor's name",
    "buffer.trainer_input.experience_buffer.name": "a Ray actor's name",
    "buffer.trainer_input.auxiliary_buffers.sft_dataset.name": "a Ray actor's name",
}
# Trinity-RFT's mix and dpo algorithms with every argument they document (the page has no example of them)
MIX_EXAMPLE = {
    "project": "p", "name": "n", "model": {"model_path": "m"},
    "algorithm": {"algorithm_type": "mix", "repeat_times": 8, "sample_strategy": "mix",
                  "sample_strategy_args": {"expert_data_ratio": 0.25, "sft_dataset_name": "sft_dataset"},
                  "policy_loss_fn": "mix", "policy_loss_fn_args": {"mu": 0.1, "clip_range": 0.2,
                                                                   "use_token_level_loss_in_sft": True},
                  "advantage_fn": "grpo", "entropy_loss_fn": "mix", "entropy_loss_fn_args": {"entropy_coef": 0.0},
                  "kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.001}, "kl_penalty_fn": "none"},
    "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": "t.parquet"}},
               "trainer_input": {"experience_buffer": {"name": "b", "storage_type": "queue"},
                                 "auxiliary_buffers": {"sft_dataset": {
                                     "name": "sft", "storage_type": "file", "path": "${oc.env:TRINITY_SFT_DATASET_PATH}",
                                     "format": {"prompt_type": "plaintext", "prompt_key": "question",
                                                "response_key": "answer"}}}}},
}
DPO_EXAMPLE = {
    "project": "p", "name": "n", "mode": "train", "model": {"model_path": "m", "max_model_len": 64},
    "algorithm": {"algorithm_type": "dpo", "repeat_times": 2, "policy_loss_fn": "dpo",
                  "policy_loss_fn_args": {"beta": 0.1, "label_smoothing": 0.0}, "kl_loss_fn": "k1",
                  "kl_loss_fn_args": {"kl_coef": 0.1}, "entropy_loss_fn": "default",
                  "entropy_loss_fn_args": {"entropy_coef": 0.0}, "loss_agg_mode": "token-mean",
                  "sample_strategy": "warmup"},
    "buffer": {"total_epochs": 2, "train_batch_size": 64, "trainer_input": {"experience_buffer": {
        "name": "dpo_buffer", "storage_type": "file", "path": "${oc.env:TRINITY_TASKSET_PATH}",
        "format": {"prompt_type": "plaintext", "prompt_key": "prompt", "chosen_key": "chosen",
                   "rejected_key": "rejected", "system_prompt": "be exact"}}}},
    "trainer": {"save_interval": 30, "total_steps": 200},
}


def _trinity_examples() -> list[dict]:
    """Each Trinity example block of the spec on a minimal base (the trainer block with its trainer_config), and
    the mix and dpo examples above, their ${oc.env:...} variables resolved (the caller sets them)."""
    from omegaconf import OmegaConf

    blocks = [OmegaConf.to_container(OmegaConf.create(b), resolve=True)
              for b in md_yaml_blocks(SPEC / "trinity_config_reference.md") if "actor_rollout_ref" not in b]
    verl = next(b for b in md_yaml_blocks(SPEC / "trinity_config_reference.md") if "actor_rollout_ref" in b)
    base = {"project": "p", "name": "n", "model": {"model_path": "m"},
            "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": "t.parquet"}}}}
    out = []
    for block in blocks:
        if list(block) == ["project", "name", "mode", "checkpoint_root_dir"]:
            continue
        cfg = merge(base, {k: v for k, v in block.items() if isinstance(v, dict) or not isinstance(v, type(None))})
        if isinstance(block.get("trainer"), dict):
            cfg["trainer"]["trainer_config"] = copy.deepcopy(verl)
        out.append(cfg)
    for example in (MIX_EXAMPLE, DPO_EXAMPLE):
        out.append(OmegaConf.to_container(OmegaConf.create(example), resolve=True))
    return out


def _leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(tree, list) and tree and all(isinstance(x, dict) for x in tree):
        for i, x in enumerate(tree):
            yield from _leaves(x, f"{prefix}[{i}].")
    else:
        yield prefix[:-1], tree


def _changes(value) -> list:
    """Other values of the same kind: a larger and a smaller one (a limit is only read when it binds)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, (int, float)):
        return [value * 2 + 1, 1 if value != 1 else 0]
    if isinstance(value, str):
        return [value + "_x"]
    if isinstance(value, list):
        return [[*value, "x"]]
    return ["x", {"x": 1}]


def _set_path(tree: dict, key: str, value) -> dict:
    tree = copy.deepcopy(tree)
    node = tree
    parts = key.replace(".[", "[").split(".")
    for part in parts[:-1]:
        if "[" in part:
            name, index = part.rstrip("]").split("[")
            node = node[name][int(index)]
        else:
            node = node[part]
    last = parts[-1]
    if "[" in last:
        name, index = last.rstrip("]").split("[")
        node[name][int(index)] = value
    else:
        node[last] = value
    return tree


def _outcome(cfg: dict) -> tuple[dict, list]:
    """(the translation, the refusals) of `cfg`."""
    from rft.dialects.trinity import translate

    refusals: list = []
    try:
        return translate(copy.deepcopy(cfg), "t.yaml", refusals=refusals), refusals
    except ConfigError as e:  # a value of the wrong shape: one error naming the key
        return {}, [("<raised>", str(e))]


def _named(key: str, refusals: list) -> bool:
    """A refusal names `key` or a section holding it."""
    plain = key.replace(".[", "[")
    return any(plain == k or plain.startswith(k + ".") or plain.startswith(k + "[")
               or (k == "<raised>" and re.sub(r"\[\d+\]", "", plain) in reason) for k, reason in refusals)


def test_every_trinity_example_key_lands_somewhere_or_is_refused_by_name(tmp_path, monkeypatch):
    from rft.tasks import write_arithmetic

    write_arithmetic(tmp_path / "tasks", n_train=8, n_val=4, seed=0)
    (tmp_path / "tasks" / "val.parquet").rename(tmp_path / "tasks" / "test.parquet")
    for name in ("MODEL_PATH", "TRINITY_TASKSET_PATH", "TRINITY_SFT_DATASET_PATH", "TRINITY_DATASET_PATH"):
        monkeypatch.setenv(name, str(tmp_path / "tasks"))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))
    (tmp_path / "ckpt" / "Trinity-RFT" / "example").mkdir(parents=True)  # so continue_from_checkpoint matters
    silent = []
    for cfg in _trinity_examples():
        before = _outcome(cfg)
        for key, value in _leaves(cfg):
            if key.startswith("trainer.trainer_config.") or "${" in str(value):
                continue  # verl keys: the schema walk above; interpolations: resolved before translation
            generic = re.sub(r"^stages\.", "", re.sub(r"\.?\[\d+\]", "", key))
            if generic in TRINITY_EXEMPT or _named(key, before[1]):
                continue
            outcomes = [_outcome(_set_path(cfg, key, v)) for v in _changes(value)]
            if all(after[0] == before[0] and not _named(key, after[1]) for after in outcomes):
                silent.append(f"{key}={value!r}")
    assert not silent, f"Trinity keys whose value changes nothing and that are not refused: {silent}"
