"""Trinity-RFT's config dialect: recognised, OmegaConf-resolved (incl. ${oc.env:VAR,default}), mapped onto rft's verl
keys where the engine has the part, every other key refused by its Trinity name; `rft train` / `rft config show`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from cli_helpers import rft_here

from rft.config.load import ConfigError, read_yaml
from rft.dialects.trinity import is_trinity, translate
from rft.dialects.trinity_keys import KEYS
from rft.trainer.configure import load_trinity

TRINITY_MODEL_KEYS = KEYS["model"]

REPO = Path(__file__).resolve().parents[1]
BASE = {"project": "p", "name": "n", "algorithm": {"algorithm_type": "grpo"}, "model": {"model_path": "m"}}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    from rft.models.tiny import init_model
    from rft.tasks import write_arithmetic

    root = tmp_path_factory.mktemp("trinity")
    init_model("tiny", root / "m", seed=0)
    write_arithmetic(root / "tasks", n_train=32, n_val=8, seed=0)
    (root / "tasks" / "val.parquet").rename(root / "tasks" / "test.parquet")
    return root


def _get(tree: dict, key: str):
    for part in key.split("."):
        tree = tree[part]
    return tree


def _with(extra: dict) -> dict:
    out = json.loads(json.dumps(BASE))
    for key, value in extra.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


MAPPED = [
    ({"project": "proj"}, "trainer.project_name", "proj"),
    ({"name": "exp"}, "trainer.experiment_name", "exp"),
    ({"checkpoint_root_dir": "/ck"}, "trainer.default_local_dir", "/ck/p/n"),
    ({"algorithm.repeat_times": 8}, "actor_rollout_ref.rollout.n", 8),
    ({}, "actor_rollout_ref.rollout.n", 2),  # grpo's default repeat_times
    ({}, "actor_rollout_ref.actor.kl_loss_type", "k2"),  # grpo's default kl_loss_fn
    ({"algorithm.kl_loss_fn": "none"}, "actor_rollout_ref.actor.use_kl_loss", False),
    ({"algorithm.kl_loss_fn_args": {"kl_coef": 0.05}}, "actor_rollout_ref.actor.kl_loss_coef", 0.05),
    ({"algorithm.kl_penalty_fn": "k3"}, "algorithm.kl_penalty", "k3"),
    ({"algorithm.kl_penalty_fn": "k3"}, "algorithm.use_kl_in_reward", True),
    ({"algorithm.advantage_fn": "rloo"}, "algorithm.adv_estimator", "rloo"),
    ({"algorithm.algorithm_type": "opmd"}, "actor_rollout_ref.actor.policy_loss.loss_mode", "opmd"),
    ({"algorithm.algorithm_type": "opmd", "algorithm.advantage_fn_args": {"opmd_baseline": "logavgexp",
                                                                           "tau": 0.5}},
     "algorithm.opmd_baseline", "logavgexp"),
    ({"algorithm.policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.28}},
     "actor_rollout_ref.actor.clip_ratio_high", 0.28),
    # Trinity's config check overwrites gspo's default_args loss_agg_mode (seq-mean-token-mean) with
    # algorithm.loss_agg_mode (token-mean when unset); arguments given without one keep the loss's own
    ({"algorithm.policy_loss_fn": "gspo"}, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"),
    ({"algorithm.policy_loss_fn": "gspo", "algorithm.policy_loss_fn_args": {"clip_range": 0.001}},
     "actor_rollout_ref.actor.loss_agg_mode", "seq-mean-token-mean"),
    ({"algorithm.entropy_loss_fn_args": {"entropy_coef": 0.01}}, "actor_rollout_ref.actor.entropy_coeff", 0.01),
    ({"model.model_path": "/models/x"}, "actor_rollout_ref.model.path", "/models/x"),
    ({"model.max_prompt_tokens": 64}, "data.max_prompt_length", 64),
    ({"model.max_response_tokens": 16}, "data.max_response_length", 16),
    ({"cluster.gpu_per_node": 1}, "trainer.n_gpus_per_node", 1),
    ({"buffer.batch_size": 16}, "data.train_batch_size", 16),
    ({"buffer.batch_size": 16}, "actor_rollout_ref.actor.ppo_mini_batch_size", 16),
    ({"buffer.total_epochs": 3}, "trainer.total_epochs", 3),
    ({"buffer.total_steps": 9}, "trainer.total_training_steps", 9),
    ({"buffer.explorer_input.taskset": {"path": "t.parquet", "format": {"prompt_key": "question"}}},
     "data.prompt_key", "question"),
    ({"buffer.explorer_input.taskset": {"path": "t.parquet", "rollout_args": {"temperature": 0.7}}},
     "actor_rollout_ref.rollout.temperature", 0.7),
    ({"buffer.explorer_input.eval_tasksets": [{"path": "v.parquet", "rollout_args": {"temperature": 0.5},
                                               "repeat_times": 4}]}, "actor_rollout_ref.rollout.val_kwargs.n", 4),
    ({"buffer.explorer_input.eval_tasksets": [{"path": "v.parquet", "rollout_args": {"temperature": 0.5}}]},
     "data.val_files", ["v.parquet"]),
    ({"explorer.eval_interval": 5}, "trainer.test_freq", 5),
    ({"explorer.eval_on_startup": False}, "trainer.val_before_train", False),
    ({"explorer.bench_on_latest_checkpoint": True}, "trainer.bench_on_latest_checkpoint", True),
    ({"buffer.explorer_input.taskset": {"name": "arith", "storage_type": "queue", "path": "sqlite:///t.db"}},
     "data.task_storage", "queue"),
    ({"buffer.explorer_input.taskset": {"name": "arith", "storage_type": "sql", "path": "sqlite:///t.db"}},
     "data.task_table", "arith"),
    ({"buffer.explorer_input.taskset": {"name": "arith", "storage_type": "sql", "path": "sqlite:///t.db"}},
     "data.train_files", "sqlite:///t.db"),
    ({"mode": "explore"}, "trainer.mode", "explore"),
    ({"mode": "bench"}, "trainer.mode", "bench"),
    ({"synchronizer.sync_interval": 4}, "synchronizer.sync_interval", 4),
    ({"synchronizer.sync_offset": 1}, "synchronizer.sync_offset", 1),
    ({"synchronizer.sync_method": "checkpoint"}, "synchronizer.sync_method", "checkpoint"),
    ({"synchronizer.sync_timeout": 60}, "synchronizer.sync_timeout", 60),
    ({"buffer.trainer_input.experience_buffer": {"storage_type": "sql", "path": "sqlite:///b.db"}},
     "experience_buffer.path", "sqlite:///b.db"),
    ({"buffer.trainer_input.experience_buffer": {"storage_type": "sql"}}, "experience_buffer.storage_type", "sql"),
    ({"buffer.trainer_input.experience_buffer": {"max_read_timeout": 30}}, "experience_buffer.max_read_timeout", 30),
    ({"buffer.trainer_input.experience_buffer": {"use_priority_queue": True, "reuse_cooldown_time": 5}},
     "experience_buffer.reuse_cooldown_time", 5),
    ({"trainer.save_interval": 7}, "trainer.save_freq", 7),
    ({"trainer.total_steps": 11}, "trainer.total_training_steps", 11),
    ({"trainer.grad_clip": 0.5}, "actor_rollout_ref.actor.grad_clip", 0.5),
    ({"trainer.trainer_config": {"actor_rollout_ref": {"actor": {"optim": {"lr": 3e-6}}}}},
     "actor_rollout_ref.actor.optim.lr", 3e-6),
    # workflows, reward function types and task formats (docs/workflows.md)
    ({"buffer.default_workflow_type": "math_workflow"}, "workflow.type", "math_workflow"),
    ({"buffer.explorer_input.default_workflow_type": "tool_call_workflow"}, "workflow.type", "tool_call_workflow"),
    ({"buffer.explorer_input.default_workflow_type": "math_workflow",
      "buffer.explorer_input.taskset": {"path": "t", "default_workflow_type": "tool_call_workflow"}},
     "workflow.type", "tool_call_workflow"),  # the taskset's own wins over the default
    ({"buffer.default_reward_fn_type": "math_reward"}, "custom_reward_function.reward_fn_type", "math_reward"),
    ({"buffer.explorer_input.taskset": {"path": "t", "default_reward_fn_type": "countdown_reward"},
      "buffer.explorer_input.eval_tasksets": [{"path": "v", "default_reward_fn_type": "countdown_reward"}]},
     "custom_reward_function.reward_fn_type", "countdown_reward"),
    ({"buffer.explorer_input.taskset": {"path": "t", "workflow_args": {"max_turns": 3}}}, "workflow.args",
     {"max_turns": 3}),
    ({"buffer.explorer_input.taskset": {"path": "t", "reward_fn_args": {"template": "{response}"}}},
     "custom_reward_function.reward_kwargs", {"template": "{response}"}),
    ({"buffer.explorer_input.taskset": {"path": "t", "format": {"response_key": "answer"}}}, "data.response_key",
     "answer"),
    ({"buffer.explorer_input.taskset": {"path": "t", "format": {"tools_key": "tools"}}}, "data.tools_key", "tools"),
    ({"buffer.explorer_input.taskset": {"path": "t", "format": {"image_key": "pictures"}}}, "data.image_key",
     "pictures"),
    ({"buffer.explorer_input.taskset": {"path": "t", "format": {"system_prompt_key": "sys"}}},
     "data.system_prompt_key", "sys"),
    ({"buffer.explorer_input.system_prompt": "Be brief.", "buffer.explorer_input.taskset": {"path": "t"}},
     "data.system_prompt", "Be brief."),
    ({"buffer.explorer_input.taskset": {"path": "t", "format": {"prompt_type": "messages", "messages_key": "m"}}},
     "data.prompt_key", "m"),
    ({"explorer.runner_per_model": 4}, "workflow.runner_per_model", 4),
    ({"explorer.max_timeout": 30}, "workflow.max_timeout", 30),
    ({"explorer.max_retry_times": 0}, "workflow.max_retry_times", 0),
    ({"explorer.env_vars": {"A": "1"}}, "workflow.env_vars", {"A": "1"}),
    ({"explorer.auxiliary_models": [{"model_path": "judge"}]}, "workflow.auxiliary_models", [{"model_path": "judge"}]),
    ({"explorer.rollout_model": {"enable_history": True}}, "workflow.enable_history", True),
    ({"explorer.rollout_model": {"enable_openai_api": True}}, "workflow.endpoint", True),
    ({"explorer.rollout_model": {"tool_call_parser": "pythonic"}}, "workflow.tool_call_parser", "pythonic"),
    ({"explorer.rollout_model": {"chat_template": "{{ x }}"}}, "data.chat_template", "{{ x }}"),
]


@pytest.mark.parametrize("extra, key, expected", MAPPED, ids=[m[1] + f"-{i}" for i, m in enumerate(MAPPED)])
def test_trinity_key_lands_on_its_verl_key(extra, key, expected):
    assert _get(translate(_with(extra)), key) == expected


# a value for each Trinity key a run's messages name (SAID_AS) but for the taskset and checkpoint paths
SAID_VALUES = {"buffer.total_steps": 7, "buffer.total_epochs": 3, "trainer.save_interval": 5,
               "explorer.eval_interval": 4, "explorer.eval_on_startup": False, "algorithm.repeat_times": 4,
               "buffer.batch_size": 8, "model.model_path": "m2", "model.max_prompt_tokens": 30,
               "model.max_response_tokens": 9, "project": "p2", "name": "n2", "mode": "both", "cluster.node_num": 1,
               "cluster.gpu_per_node": 1, "explorer.rollout_model.engine_num": 2, "trainer.grad_clip": 0.5,
               "algorithm.optimizer.lr": 1e-5, "explorer.rollout_model.engine_type": "vllm"}


def test_the_trinity_key_a_message_names_is_the_one_the_translation_set_the_key_from():
    """`SAID_AS` (the Trinity key a message names for an rft key) agrees with the translation: that Trinity key set,
    the rft key takes its value, and the translation records it as its source."""
    from rft.dialects.trinity import FOLDER_KEYS, SAID_AS

    untested = {k for k, trinity_key in SAID_AS.items() if trinity_key not in SAID_VALUES}
    assert untested == {"trainer.default_local_dir", "data.train_files", "data.val_files"}
    assert SAID_AS["trainer.default_local_dir"] == FOLDER_KEYS
    for key, trinity_key in SAID_AS.items():
        if key in untested:
            continue
        said_as: dict = {}
        # engine_num's explorers run apart: off the on-policy schedule (on it, one engine: the test below)
        apart = {"synchronizer.sync_interval": 2} if trinity_key == "explorer.rollout_model.engine_num" else {}
        out = translate(_with({trinity_key: SAID_VALUES[trinity_key], **apart}), said_as=said_as)
        assert _get(out, key) == SAID_VALUES[trinity_key] and said_as[key] == trinity_key, (key, trinity_key)


def test_a_message_names_the_trinity_key_that_set_an_rft_key_and_leaves_the_rest(tmp_path):
    from rft.config.spelling import said, spelling_keys
    from rft.dialects.trinity import trinity_spelling

    said_as: dict = {}
    translate(_with({"model.max_model_len": 40, "model.max_response_tokens": 6, "buffer.total_steps": 3,
                     "trainer.total_steps": 2}), said_as=said_as)
    message = ("raise trainer.total_training_steps. data.max_prompt_length=34 (rft's data.max_prompt_length) "
               "data.max_response_length=6 data.seed=1 synchronizer.sync_interval=1 trainer.trainer_config.data.x "
               "/a/data.max_prompt_length data.parquet")
    with spelling_keys(trinity_spelling(said_as)):
        assert said(message) == (
            "raise buffer.total_steps and trainer.total_steps (the run ends at the smaller). model.max_model_len=34 "
            "(rft's data.max_prompt_length) model.max_response_tokens=6 trainer.trainer_config.data.seed=1 "
            "synchronizer.sync_interval=1 trainer.trainer_config.data.x /a/data.max_prompt_length data.parquet")
    assert said(message) == message


REFUSED = [
    ({"mode": "serve"}, "mode='serve'"),
    ({"algorithm.algorithm_type": "dpo"}, "mode='both': the dpo algorithm runs in mode train"),
    ({"algorithm.algorithm_type": "mix"}, "the auxiliary buffer 'sft_dataset' (algorithm.sample_strategy_args"),
    ({"algorithm.algorithm_type": "gigpo"}, "algorithm.algorithm_type='gigpo'"),
    ({"algorithm.advantage_fn": "nope"}, "algorithm.advantage_fn='nope'"),
    ({"algorithm.sample_strategy": "mix"}, "algorithm.sample_strategy='mix'"),
    ({"ray_namespace": "x"}, "ray_namespace: rft's Ray driver (cluster.ray_address) takes no namespace; remove it"),
    ({"model.min_response_tokens": 4}, "model.min_response_tokens"),
    ({"model.max_prompt_tokens": 64, "model.max_response_tokens": 64, "model.max_model_len": 100},
     "model.max_model_len=100"),
    # rft has one workflow per run: a taskset whose workflow (its own or the default) differs is refused
    ({"buffer.explorer_input.default_workflow_type": "math_workflow",
      "buffer.explorer_input.taskset": {"path": "t", "default_workflow_type": "tool_call_workflow"},
      "buffer.explorer_input.eval_tasksets": [{"path": "v"}]},
     "buffer.explorer_input.eval_tasksets[0].default_workflow_type (inherited from buffer.explorer_input."),
    ({"buffer.explorer_input.taskset": {"path": "t", "format": {"chat_template": "a"}},
      "explorer.rollout_model": {"chat_template": "b"}}, "explorer.rollout_model.chat_template='b'"),
    ({"buffer.trainer_input.experience_buffer": {"capacity": 8}},
     "buffer.trainer_input.experience_buffer.capacity"),
    ({"buffer.trainer_input.auxiliary_buffers": {"sft": {}}}, "buffer.trainer_input.auxiliary_buffers.sft: rft reads"),
    ({"explorer.rollout_model": {"engine_type": "sglang"}}, "explorer.rollout_model.engine_type='sglang'"),
    ({"synchronizer.sync_style": "dynamic_by_trainer"}, "synchronizer.sync_style"),
    ({"monitor.monitor_type": "swanlab"}, "monitor.monitor_type='swanlab'"),
    ({"monitor.enable_ray_timeline": True}, "monitor.enable_ray_timeline: rft writes no Ray timeline, on a cluster "
                                            "(cluster.ray_address) either; remove it or set it false"),
    ({"service": {"data_juicer": {"auto_start": True, "np": 4}}}, "service.data_juicer.np"),
    # log and the data processor honoured (tests/test_run_logs.py, tests/test_data_processor.py); a Data-Juicer
    # recipe's sample selection not
    ({"data_processor": {"task_pipeline": {"num_process": 4, "top_k": 8}}, "log": {"level": "INFO"}},
     "data_processor.task_pipeline.top_k"),
    ({"trainer.trainer_type": "megatron"}, "trainer.trainer_type"),
    ({"data": {"train_files": "x"}}, "t.yaml: data: a verl section, not a Trinity-RFT one: put verl keys under "
                                     "trainer.trainer_config"),
    # a path that does not exist is named as missing (it was called "a file, not a folder holding splits")
    ({"buffer.explorer_input.taskset": {"path": "/no/such/tasks", "split": "train"}},
     "buffer.explorer_input.taskset.path='/no/such/tasks' does not exist"),
]


@pytest.mark.parametrize("extra, needle", REFUSED, ids=[r[1][:40] for r in REFUSED])
def test_what_rft_cannot_honour_is_refused_by_key(extra, needle):
    with pytest.raises(ConfigError) as err:
        translate(_with(extra), "t.yaml")
    assert needle in str(err.value), str(err.value)


def test_the_ppo_advantage_with_another_algorithm_type_trains_a_critic_and_says_so(caplog):
    """The reference's own algorithm example, grpo with advantage_fn ppo: GAE reads a critic's values (Trinity-RFT's
    grpo trains no critic), so rft trains one for it, and a note says so (it was silent)."""
    import logging

    with caplog.at_level(logging.WARNING, logger="rft"):
        out = translate(_with({"algorithm.advantage_fn": "ppo"}), "t.yaml")
    assert out["algorithm"]["adv_estimator"] == "gae"
    assert ("rft: note: algorithm.advantage_fn='ppo' (GAE) with algorithm_type grpo: GAE reads a critic's values, so "
            "rft trains a critic (the critic.* keys; Trinity-RFT's grpo trains none); remove advantage_fn for grpo's "
            "own (grpo), or set algorithm_type: ppo") in caplog.text


def test_all_refusals_are_reported_together_one_line_each():
    with pytest.raises(ConfigError) as err:
        translate(_with({"mode": "serve", "monitor.monitor_type": "clearml",
                         "synchronizer.sync_style": "dynamic_by_trainer"}),
                  "t.yaml")
    assert [line.split(":")[1].strip() for line in str(err.value).splitlines()] == [
        "mode='serve'", "synchronizer.sync_style='dynamic_by_trainer'", "monitor.monitor_type='clearml'"]


def test_sync_style_fixed_is_what_rft_does():
    """Trinity-RFT's default sync_style, fixed (every sync_interval steps, sync_offset ahead), is rft's schedule:
    accepted as written in a copied config; the dynamic styles are refused, a misspelling with its did-you-mean."""
    cfg = translate(_with({"synchronizer.sync_style": "fixed", "synchronizer.sync_interval": 2}), "t.yaml")
    assert cfg["synchronizer"]["sync_interval"] == 2 and "sync_style" not in cfg["synchronizer"]
    with pytest.raises(ConfigError) as err:
        translate(_with({"synchronizer.sync_style": "fixd"}), "t.yaml")
    assert "synchronizer.sync_style='fixd'" in str(err.value) and "did you mean 'fixed'" in str(err.value)


def test_mix_with_the_specs_sample_strategy_default_is_one_line_saying_to_set_mix():
    # the spec's algorithm example writes sample_strategy: "default"; with algorithm_type mix (whose policy loss
    # reads expert rows) the line names that key and what to set, and the mix run's auxiliary buffer is not
    # refused a second time as "this run is not mix"
    aux = {"sft_dataset": {"name": "sft_dataset", "storage_type": "file", "path": "/data/sft",
                           "format": {"prompt_key": "question", "response_key": "answer"}}}
    with pytest.raises(ConfigError) as err:
        translate(_with({"algorithm.algorithm_type": "mix", "algorithm.sample_strategy": "default",
                         "buffer.trainer_input.auxiliary_buffers": aux}), "t.yaml")
    assert str(err.value) == ("t.yaml: algorithm.sample_strategy='default': the mix policy loss (policy_loss_fn mix) "
                              "trains on the expert rows that sample_strategy mix reads; set it to mix (the mix "
                              "algorithms' default) or remove it")


# ------------------------------------------- issue 42: a misspelt key is unknown (did you mean), not "cannot honour"
MISSPELT = [
    ({"buffer.total_step": 3}, "buffer.total_step", "'buffer.total_steps'", "under 'buffer': total_steps, "),
    ({"model.model_pth": "m"}, "model.model_pth", "'model.model_path'", "under 'model': model_path, "),
    ({"projct": "p"}, "projct", "'project'", "at the top level: project, "),
    ({"explorer.eval_intervall": 2}, "explorer.eval_intervall", "'explorer.eval_interval'", "eval_interval, "),
    ({"buffer.explorer_input.taskset": {"path": "t", "formt": {}}}, "buffer.explorer_input.taskset.formt",
     "'buffer.explorer_input.taskset.format'", "under 'buffer.explorer_input.taskset': format, "),
    ({"buffer.explorer_input.eval_tasksets": [{"path": "t", "rollout_args": {"temprature": 0}}]},
     "buffer.explorer_input.eval_tasksets[0].rollout_args.temprature",
     "'buffer.explorer_input.eval_tasksets[0].rollout_args.temperature'", ": temperature, "),
]


@pytest.mark.parametrize("extra, key, nearest, listed", MISSPELT, ids=[m[1] for m in MISSPELT])
def test_a_misspelt_key_is_unknown_with_the_nearest_trinity_key(extra, key, nearest, listed):
    with pytest.raises(ConfigError) as err:
        translate(_with(extra), "t.yaml")
    line = str(err.value)
    assert "\n" not in line and "cannot honour" not in line, line
    assert line.startswith(f"t.yaml: {key}: unknown Trinity-RFT key; did you mean {nearest}? Trinity-RFT's keys "), line
    assert listed in line, line


def test_a_trinity_key_rft_refuses_says_its_own_reason():
    with pytest.raises(ConfigError) as err:
        translate(_with({"cluster.total_gpu_num": 8}), "t.yaml")
    assert str(err.value) == ("t.yaml: cluster.total_gpu_num: Trinity-RFT computes it from node_num, gpu_per_node and "
                              "the engines (DO NOT SET); rft's processes are nnodes x n_gpus_per_node; remove it")


def test_a_misspelt_stage_key_names_its_stage():
    cfg = _with({})
    cfg["stages"] = [{"stage_name": "a", "buffer": {"total_step": 2}, "trainr": {}}]
    with pytest.raises(ConfigError) as err:
        translate(cfg, "t.yaml")
    lines = str(err.value).splitlines()
    assert lines[0].startswith("t.yaml: stages[0].trainr: unknown Trinity-RFT key; did you mean 'stages[0].trainer'?")
    assert lines[1].startswith("t.yaml: stages[0].buffer.total_step: unknown Trinity-RFT key; did you mean "
                               "'stages[0].buffer.total_steps'?")


def test_each_refusal_names_the_file_or_the_command_line_override(work, tmp_path):
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    path.write_text(path.read_text().replace("max_prompt_tokens", "max_prompt_token"))
    with pytest.raises(ConfigError) as err:
        load_trinity(path, ["buffer.total_step=3", "cluster.total_gpu_num=8"])
    assert str(err.value).splitlines() == [
        "command line (cluster.total_gpu_num=8): cluster.total_gpu_num: Trinity-RFT computes it from node_num, "
        "gpu_per_node and the engines (DO NOT SET); rft's processes are nnodes x n_gpus_per_node; remove it",
        f"{path}: model.max_prompt_token: unknown Trinity-RFT key; did you mean 'model.max_prompt_tokens'? "
        "Trinity-RFT's keys under 'model': " + ", ".join(["max_prompt_tokens", "max_response_tokens", *(
            k for k in TRINITY_MODEL_KEYS if k not in ("max_prompt_tokens", "max_response_tokens"))]),
        "command line (buffer.total_step=3): buffer.total_step: unknown Trinity-RFT key; did you mean "
        "'buffer.total_steps'? Trinity-RFT's keys under 'buffer': total_steps, total_epochs, batch_size, "
        "train_batch_size, explorer_input, trainer_input, default_workflow_type, default_reward_fn_type, "
        "system_prompt, max_retry_times, max_retry_interval, explorer_output, tokenizer_path, pad_token_id, "
        "cache_dir"]


def test_rft_prints_one_error_line_per_refusal(work, tmp_path):
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    proc = rft_here("config", "show", str(path), "buffer.total_step=3", "mode=serve", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    first, second = [line for line in proc.stderr.splitlines() if line.startswith("rft: error:")]
    assert first == "rft: error: command line (mode=serve): mode='serve': rft has both, explore, train, bench"
    assert second.startswith("rft: error: command line (buffer.total_step=3): buffer.total_step: unknown "
                             "Trinity-RFT key; did you mean 'buffer.total_steps'? ")


def test_a_bad_value_is_named_by_the_trinity_key_that_holds_it(work, tmp_path):
    # the value lands on rft's actor_rollout_ref.rollout.n, which types and checks it: the error names the
    # Trinity key the user wrote (and where), rft's key after it
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    path.write_text(path.read_text().replace("repeat_times: 2", "repeat_times: four"))
    proc = rft_here("config", "show", str(path), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.strip() == (f"rft: error: {path}: algorithm.repeat_times='four' is not an integer, the type "
                                   "of this Trinity-RFT key"), proc.stderr
    assert "Traceback" not in proc.stderr
    # a value the checks refuse, given on the command line
    with pytest.raises(ConfigError) as err:
        load_trinity(path, ["algorithm.repeat_times=0"])
    assert str(err.value).startswith("command line (algorithm.repeat_times=0): algorithm.repeat_times=0 (rft's "
                                     "actor_rollout_ref.rollout.n): actor_rollout_ref.rollout.n must be a positive")


def test_a_refusal_names_the_trinity_key_of_a_list_item_and_says_what_to_set_in_trinity_keys(work, tmp_path):
    from rft.dialects.trinity import in_trinity_terms

    # the spec's explorer example names a hub model as an auxiliary model: the refusal names the Trinity key
    # (workflow.auxiliary_models[0] is rft's, a key the Trinity file cannot hold) and the file
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    path.write_text(path.read_text().replace(
        "explorer: {eval_interval: 2, eval_on_startup: false}",
        "explorer: {eval_interval: 2, eval_on_startup: false, auxiliary_models: [{model_path: Qwen/Qwen2.5-7B-Instruct}]}"))
    with pytest.raises(ConfigError) as err:
        load_trinity(path)
    assert str(err.value).startswith(f"{path}: explorer.auxiliary_models[0].model_path='Qwen/Qwen2.5-7B-Instruct' "
                                     "(rft's workflow.auxiliary_models[0].model_path): "), str(err.value)
    # what to do is said in the Trinity key (vLLM's absence: its refusal ends "or set <rft's key>=hf")
    cfg = _with({"explorer.rollout_model": {"engine_type": "vllm"}})
    error = ConfigError("actor_rollout_ref.rollout.name=vllm: the vLLM engine needs the vllm package, which is not "
                        "installed here; ... or set actor_rollout_ref.rollout.name=hf, which runs without it")
    said = str(in_trinity_terms(error, cfg, translate(cfg), "t.yaml"))
    assert said.startswith("t.yaml: explorer.rollout_model.engine_type='vllm' (rft's actor_rollout_ref.rollout.name)")
    assert said.endswith("or set explorer.rollout_model.engine_type=hf, which runs without it"), said


def test_a_misspelt_choice_of_a_same_named_key_names_the_file_and_the_closest_choice(work, tmp_path):
    # synchronizer.* keys are rft's own names too: the error names the file (or the override) all the same, lists
    # the values YAML can give (no Python None) and the closest one
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    path.write_text(path.read_text().replace("sync_method: nccl", "sync_method: memroy"))
    proc = rft_here("config", "show", str(path), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.strip() == (
        f"rft: error: {path}: synchronizer.sync_method='memroy' is not allowed; choose one of ['memory', "
        "'checkpoint', 'gloo', 'nccl'] or leave it unset; did you mean 'memory'?")
    # on the command line; a -1 (which doubling plus one left unchanged) is found where it came from too
    for override in ("synchronizer.sync_method=memroy", "synchronizer.sync_timeout=-1"):
        with pytest.raises(ConfigError) as err:
            load_trinity(_trinity_yaml(work, tmp_path / "t.yaml"), [override])
        assert str(err.value).startswith(f"command line ({override}): synchronizer."), str(err.value)
        assert "None" not in str(err.value)


# ------------------------- a misspelt value of a Trinity key with a closed set of names: did you mean, as verl's keys
MISSPELT_CHOICES = [
    ({"mode": "bothh"}, "mode='bothh'", "'both'"),
    ({"algorithm.algorithm_type": "grop"}, "algorithm.algorithm_type='grop'", "'grpo'"),
    ({"monitor.monitor_type": "tensorbord"}, "monitor.monitor_type='tensorbord'", "'tensorboard'"),
    ({"monitor.monitor_type": ["console", "wandbb"]}, "monitor.monitor_type='wandbb'", "'wandb'"),
    ({"algorithm.advantage_fn": "rlo"}, "algorithm.advantage_fn='rlo'", "'rloo'"),
    ({"algorithm.policy_loss_fn": "gspoo"}, "algorithm.policy_loss_fn='gspoo'", "'gspo'"),
    ({"algorithm.kl_loss_fn": "k33"}, "algorithm.kl_loss_fn='k33'", "'k3'"),
    ({"algorithm.kl_penalty_fn": "nnone"}, "algorithm.kl_penalty_fn='nnone'", "'none'"),
    ({"algorithm.entropy_loss_fn": "defualt"}, "algorithm.entropy_loss_fn='defualt'", "'default'"),
    ({"algorithm.sample_strategy": "defaut"}, "algorithm.sample_strategy='defaut'", "'default'"),
    ({"algorithm.optimizer": {"lr_scheduler_type": "cosin"}}, "algorithm.optimizer.lr_scheduler_type='cosin'",
     "'cosine'"),
    ({"algorithm.optimizer": {"optimizer_type": "adamm"}}, "algorithm.optimizer.optimizer_type='adamm'", "'adam'"),
    ({"explorer.rollout_model": {"engine_type": "vlm"}}, "explorer.rollout_model.engine_type='vlm'", "'vllm'"),
    ({"trainer.save_strategy": "single_proces"}, "trainer.save_strategy='single_proces'", "'single_process'"),
    ({"trainer.trainer_type": "verll"}, "trainer.trainer_type='verll'", "'verl'"),
    ({"log.level": "debg"}, "log.level='debg'", "'debug'"),
    ({"buffer.explorer_input.taskset": {"path": "t", "storage_type": "fiel"}},
     "buffer.explorer_input.taskset.storage_type='fiel'", "'file'"),
    ({"buffer.explorer_input.eval_tasksets": [{"path": "v", "storage_type": "flie"}]},
     "buffer.explorer_input.eval_tasksets[0].storage_type='flie'", "'file'"),
    ({"buffer.explorer_input.taskset": {"path": "t", "format": {"prompt_type": "mesages"}}},
     "buffer.explorer_input.taskset.format.prompt_type='mesages'", "'messages'"),
    ({"mode": "trian", "algorithm": {"algorithm_type": "sft"}, "buffer.trainer_input.experience_buffer":
      {"path": "s.jsonl"}}, "mode='trian'", "'train'"),
    ({"mode": "train", "algorithm": {"algorithm_type": "sft"}, "buffer.trainer_input.experience_buffer":
      {"path": "s.jsonl", "storage_type": "fille"}}, "buffer.trainer_input.experience_buffer.storage_type='fille'",
     "'file'"),
]


@pytest.mark.parametrize("extra, said, meant", MISSPELT_CHOICES, ids=[m[1] for m in MISSPELT_CHOICES])
def test_a_misspelt_choice_says_did_you_mean_in_its_one_line(extra, said, meant):
    with pytest.raises(ConfigError) as err:
        translate(_with(extra), "t.yaml")
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"t.yaml: {said}: "), line
    assert line.endswith(f"; did you mean {meant}?"), line


def test_a_refused_choice_that_is_no_misspelling_names_no_other_choice():
    for extra in ({"mode": "serve"}, {"algorithm.algorithm_type": "gigpo"}, {"monitor.monitor_type": "swanlab"}):
        with pytest.raises(ConfigError) as err:
            translate(_with(extra), "t.yaml")
        assert "did you mean" not in str(err.value), str(err.value)


def test_rft_says_did_you_mean_for_a_misspelt_mode_and_workflow_type(work, tmp_path):
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    path.write_text(path.read_text().replace("mode: both", "mode: bothh"))
    proc = rft_here("config", "show", str(path), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"rft: error: {path}: mode='bothh': rft has both, explore, train, bench; did you mean 'both'?"), proc.stderr
    # the workflow and reward function types are checked as rft's keys, named by the Trinity key that set them
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    for override, meant in (("buffer.explorer_input.default_workflow_type=math_workfow", "'math_workflow'"),
                            ("buffer.explorer_input.default_reward_fn_type=math_rewrd", "'math_reward'")):
        with pytest.raises(ConfigError) as err:
            load_trinity(path, [override])
        key, value = override.split("=")
        assert str(err.value).startswith(f"command line ({override}): {key}={value!r} (rft's "), str(err.value)
        assert f"did you mean {meant}?" in str(err.value), str(err.value)


def test_recognised_by_its_sections_only():
    assert is_trinity(read_yaml(REPO / "examples" / "arithmetic_grpo.yaml")) is False
    assert is_trinity(read_yaml(REPO / "examples" / "arithmetic_sft_grpo.yaml")) is False
    assert is_trinity({"algorithm": {"algorithm_type": "grpo"}})
    assert is_trinity({"buffer": {}})


def _trinity_yaml(work: Path, path: Path, steps: int = 2) -> Path:
    path.write_text(f"""\
project: rft-trinity
name: ${{oc.env:RFT_TRINITY_NAME,arith}}
mode: both
checkpoint_root_dir: ${{oc.env:RFT_TRINITY_ROOT,{work}/ckpt}}
algorithm:
  algorithm_type: grpo
  repeat_times: 2
  kl_loss_fn_args: {{kl_coef: 0.01}}
model:
  model_path: {work}/m
  max_prompt_tokens: 32
  max_response_tokens: 6
buffer:
  batch_size: 4
  total_steps: {steps}
  explorer_input:
    taskset: {{name: t, path: {work}/tasks, split: train, format: {{prompt_key: prompt}}}}
    eval_tasksets:
      - {{name: e, path: {work}/tasks, split: test, rollout_args: {{temperature: 0}}}}
explorer: {{eval_interval: 2, eval_on_startup: false}}
synchronizer: {{sync_method: nccl, sync_interval: 1}}
trainer:
  trainer_type: verl
  save_interval: 1
  trainer_config: {{actor_rollout_ref: {{actor: {{ppo_micro_batch_size_per_gpu: 4, optim: {{lr: 1.0e-4}}}}}}}}
""")
    return path


def test_env_interpolation_with_and_without_the_variable(work, tmp_path, monkeypatch):
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    monkeypatch.delenv("RFT_TRINITY_NAME", raising=False)
    kind, cfg = load_trinity(path)
    assert kind == "rl" and cfg.trainer.default_local_dir == f"{work}/ckpt/rft-trinity/arith"
    assert cfg.data.train_files == f"{work}/tasks/train.parquet" and cfg.data.val_files == [f"{work}/tasks/test.parquet"]
    monkeypatch.setenv("RFT_TRINITY_NAME", "from_env")
    kind, cfg = load_trinity(path, ["buffer.total_steps=5"])  # overrides use Trinity's keys
    assert cfg.trainer.experiment_name == "from_env" and cfg.trainer.total_training_steps == 5


def test_an_interpolated_value_is_typed_as_trinitys_config_classes_type_it(work, tmp_path, monkeypatch):
    # ${oc.env:VAR,default} resolves to a string; Trinity's merge onto its config classes makes "3" the integer 3
    # in an int field and "true" True in a bool field; rft refused the string before
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    path.write_text(path.read_text().replace("total_steps: 2", "total_steps: ${oc.env:RFT_TRINITY_STEPS,3}")
                    .replace("eval_on_startup: false", "eval_on_startup: '${oc.env:RFT_TRINITY_EVAL,true}'"))
    monkeypatch.delenv("RFT_TRINITY_STEPS", raising=False)
    monkeypatch.delenv("RFT_TRINITY_EVAL", raising=False)
    kind, cfg = load_trinity(path)
    assert cfg.trainer.total_training_steps == 3 and cfg.trainer.val_before_train is True
    monkeypatch.setenv("RFT_TRINITY_STEPS", "three")
    with pytest.raises(ConfigError) as err:
        load_trinity(path)
    assert str(err.value) == f"{path}: buffer.total_steps='three' is not an integer, the type of this Trinity-RFT key"


def test_an_unset_variable_is_named_by_the_key_that_holds_it(work, tmp_path, monkeypatch):
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    path.write_text(path.read_text().replace(f"model_path: {work}/m", "model_path: ${oc.env:RFT_TRINITY_UNSET}"))
    monkeypatch.delenv("RFT_TRINITY_UNSET", raising=False)
    with pytest.raises(ConfigError) as err:
        load_trinity(path)
    assert str(err.value) == (f"{path}: model.model_path: KeyError raised while resolving interpolation: "
                              "\"Environment variable 'RFT_TRINITY_UNSET' not found\"; for a variable: set it in "
                              "the environment, or replace the ${...} by its value")


@pytest.mark.parametrize("storage, path", [("sql", "sqlite:///{blocker}/buffer.db"), ("queue", "{blocker}/b.db"),
                                           ("file", "{blocker}/experiences")])
def test_a_buffer_path_that_cannot_be_written_is_refused_by_its_trinity_key_before_loading(work, tmp_path, storage,
                                                                                          path):
    # it was an operating-system error after the models had loaded ("File exists: '...' (operating-system error
    # 17)"), naming no key
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    config = _trinity_yaml(work, tmp_path / "t.yaml")
    value = path.format(blocker=blocker)
    override = f"buffer.trainer_input.experience_buffer.path={value}"
    mode = ["mode=explore", "synchronizer.sync_method=checkpoint"] if storage == "file" else []  # file: explore's
    with pytest.raises(ConfigError) as err:
        load_trinity(config, [f"buffer.trainer_input.experience_buffer.storage_type={storage}", override, *mode])
    assert str(err.value).startswith(f"command line ({override}): buffer.trainer_input.experience_buffer.path="
                                     f"{value!r} (rft's experience_buffer.path): "), str(err.value)
    assert str(err.value).endswith(f"{blocker} is a file, not a folder, so the buffer cannot be written there; "
                                   "choose a path in a folder this process can write")


def test_an_sft_stage_leaves_the_global_queue_settings_to_the_rl_stages(work, tmp_path):
    # the reference's stage example under a global queue experience buffer (its buffer example's, max_read_timeout
    # 1800): the SFT stage inherits them; the queue's settings are the RL stage's (no effect on files, as in
    # Trinity), and a queue storage_type is refused saying to set file in the stage
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n"
                                                for i in range(8)))
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    raw = yaml.safe_load(path.read_text().replace("${oc.env:RFT_TRINITY_NAME,arith}", "staged"))
    raw["synchronizer"] = {"sync_method": "nccl", "sync_interval": 1}
    raw["buffer"]["trainer_input"] = {"experience_buffer": {"name": "q", "storage_type": "queue",
                                                            "max_read_timeout": 1800}}
    sft_buffer = {"name": "sft_buffer", "path": str(tmp_path / "sft.jsonl")}
    raw["stages"] = [{"stage_name": "sft_warmup", "mode": "train", "algorithm": {"algorithm_type": "sft"},
                      "buffer": {"train_batch_size": 4, "total_steps": 1,
                                 "trainer_input": {"experience_buffer": sft_buffer}}},
                     {"stage_name": "rft"}]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_trinity(path, validate_paths=False)
    assert str(err.value) == (f"{path}: stages[0].buffer.trainer_input.experience_buffer.storage_type='queue': an SFT "
                              "dataset is read from files; set it to file in this stage (a stage inherits the global "
                              "experience buffer's)")
    sft_buffer["storage_type"] = "file"
    path.write_text(yaml.safe_dump(raw))
    kind, (sft, rl) = load_trinity(path, validate_paths=False)
    assert kind == "stages" and sft.kind == "sft" and rl.cfg.experience_buffer.max_read_timeout == 1800


def test_stages_become_rft_stages(work, tmp_path):
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps({"q": f"{i}+1=", "a": str(i + 1)}) + "\n"
                                                for i in range(8)))
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    raw = yaml.safe_load(path.read_text().replace("${oc.env:RFT_TRINITY_NAME,arith}", "staged"))
    raw["stages"] = [
        {"stage_name": "sft_warmup", "mode": "train", "algorithm": {"algorithm_type": "sft"},
         "buffer": {"train_batch_size": 4, "total_steps": 1,
                    "trainer_input": {"experience_buffer": {"name": "s", "path": str(tmp_path / "sft.jsonl"),
                                                            "format": {"prompt_key": "q", "response_key": "a"}}}}},
        {"stage_name": "rft"},
    ]
    path.write_text(yaml.safe_dump(raw))
    kind, stages = load_trinity(path, validate_paths=False)
    assert kind == "stages" and [(s.name, s.kind) for s in stages] == [("sft_warmup", "sft"), ("rft", "rl")]
    sft, rl = stages
    assert sft.cfg.data.prompt_key == "q" and sft.cfg.data.response_key == "a" and sft.cfg.data.train_batch_size == 4
    assert sft.cfg.trainer.total_training_steps == 1 and sft.cfg.model.partial_pretrain == f"{work}/m"
    assert rl.cfg.actor_rollout_ref.model.path == str(sft.out / "model")
    assert rl.cfg.actor_rollout_ref.rollout.n == 2 and rl.cfg.trainer.total_training_steps == 2
    assert str(sft.out) == f"{work}/ckpt/rft-trinity/staged/sft_warmup"


@pytest.mark.slow
def test_rft_train_runs_a_trinity_config(work, tmp_path, monkeypatch):
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    monkeypatch.setenv("RFT_TRINITY_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("RFT_TRINITY_NAME", "run")
    show = rft_here("config", "show", str(path), cwd=tmp_path)
    assert "Trinity-RFT dialect" in show.stdout and "default_local_dir: " + str(tmp_path / "root") in show.stdout
    rft_here("train", str(path), cwd=tmp_path)
    out = tmp_path / "root" / "rft-trinity" / "run"
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (out / "model" / "model.safetensors").is_file()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["global_step_1", "global_step_2", "latest"]
    again = rft_here("train", str(path), cwd=tmp_path)  # complete: what to raise is said in Trinity's keys
    assert again.stdout.splitlines() == [
        f"rft: {out} is complete (2/2 steps, model in {out / 'model'}); nothing to do (raise buffer.total_steps / "
        "buffer.total_epochs to train on)"], again.stdout
    both = rft_here("train", str(path), "trainer.total_steps=2", cwd=tmp_path)  # the two keys that end the run
    assert both.stdout.splitlines()[-1].endswith("nothing to do (raise buffer.total_steps and trainer.total_steps "
                                                 "(the run ends at the smaller) / buffer.total_epochs to train on)")
    # an error of the run (not of the translation) names them too: the key changed, the folder, the switch
    changed = rft_here("train", str(path), "algorithm.repeat_times=4", cwd=tmp_path, check=False)
    assert changed.returncode == 2 and changed.stderr.splitlines() == [
        f"rft: error: resuming {out} from global_step_2 with changed keys algorithm.repeat_times (2 -> 4): a resumed "
        "run continues the checkpoint's training; restore them, or start a new run in another checkpoint_root_dir / "
        "project / group / name (or trainer.trainer_config.trainer.resume_mode=disable)"], changed.stderr


@pytest.mark.slow
def test_mode_explores_nothing_to_do_line_and_the_notes_name_trinitys_keys(work, tmp_path, caplog):
    """A Trinity run's notes and its explorer's nothing-to-do line name the keys as the YAML sets them (rft's
    canonical ones only where a Trinity YAML has none: under trainer.trainer_config)."""
    path = _trinity_yaml(work, tmp_path / "t.yaml", steps=1)
    explore = ["mode=explore", "synchronizer.sync_method=checkpoint", f"checkpoint_root_dir={tmp_path / 'ck'}",
               "buffer.trainer_input.experience_buffer.storage_type=file",
               "explorer.rollout_model.gpu_memory_utilization=0.3"]  # a vLLM key: no effect with the hf engine
    rft_here("train", str(path), *explore, cwd=tmp_path)
    caplog.clear()
    again = rft_here("train", str(path), *explore, cwd=tmp_path)
    out = tmp_path / "ck" / "rft-trinity" / "arith" / "explorer"
    assert again.stdout.splitlines()[-1] == (f"rft explorer: all 1 step already written to the experience buffer "
                                             f"({out}); nothing to do (raise buffer.total_steps to explore on)")
    notes = [r.getMessage() for r in caplog.records if "have no effect" in r.getMessage()]
    assert notes == ["rft: note: explorer.rollout_model.engine_type='hf' (these are the vLLM engine's), so these "
                     "keys have no effect: explorer.rollout_model.gpu_memory_utilization=0.3"], notes
    from rft.config.spelling import said

    assert said("actor_rollout_ref.rollout.n") == "actor_rollout_ref.rollout.n"  # rft's own keys after the run


def test_a_taskset_path_that_is_not_there_is_said_to_be_missing(work, tmp_path):
    """A taskset's mistyped file (no split: the path is the file) is missing, not "not a .parquet or .jsonl file";
    with a split it names Trinity's key."""
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    for override, message in [
        (["buffer.explorer_input.taskset.split=null", "buffer.explorer_input.taskset.path=/no/such/tasks.csv"],
         "data.train_files: file '/no/such/tasks.csv' does not exist, nor does its folder '/no/such'"),
        (["buffer.explorer_input.taskset.path=/no/such/tasks.csv"],
         "buffer.explorer_input.taskset.path='/no/such/tasks.csv' does not exist")]:
        proc = rft_here("train", str(path), *override, cwd=tmp_path, check=False)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_refused_trinity_config_exits_2(work, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_with({"mode": "serve", "explorer.rollout_model": {"engine_type": "sglang"}})))
    proc = rft_here("train", str(path), cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "mode='serve'" in proc.stderr and "explorer.rollout_model.engine_type='sglang'" in proc.stderr


# ------------------------------------------------------------------------ issue 11: nothing silently dropped
SFT_STAGE = {"stage_name": "sft", "mode": "train", "algorithm": {"algorithm_type": "sft"},
             "buffer": {"train_batch_size": 4, "trainer_input": {"experience_buffer": {"path": "s.jsonl"}}}}


def _sft_stage(trainer_config: dict, **top) -> dict:
    cfg = _with({"trainer.trainer_config": trainer_config, **top})
    cfg["stages"] = [SFT_STAGE, {"stage_name": "rl"}]
    return translate(cfg)["stages"][0]


def test_an_sft_stage_takes_every_trainer_config_key_with_an_sft_meaning():
    A = "actor_rollout_ref.actor"
    stage = _sft_stage({
        "actor_rollout_ref": {"model": {"lora_rank": 8, "lora_alpha": 32, "enable_gradient_checkpointing": True},
                              "actor": {"grad_clip": 0.5, "ppo_micro_batch_size_per_gpu": 2,
                                        "optim": {"lr": 2e-5, "warmup_style": "constant",
                                                  "lr_warmup_steps_ratio": 0.2}}},
        "trainer": {"max_actor_ckpt_to_keep": 3, "test_freq": 7, "save_freq": 9},
    })
    assert stage["model"]["lora_rank"] == 8 and stage["model"]["lora_alpha"] == 32
    assert stage["model"]["enable_gradient_checkpointing"] is True
    assert stage["optim"] == {"clip_grad": 0.5, "lr": 2e-5, "lr_scheduler": "constant", "warmup_steps_ratio": 0.2}
    # a trainer_config optim key is not refused as given twice: Trinity's default fills only what nothing sets
    assert _sft_stage({"actor_rollout_ref": {"actor": {"optim": {"lr": 2e-5}}}})["optim"]["lr"] == 2e-5
    assert stage["data"]["micro_batch_size_per_gpu"] == 2
    assert stage["trainer"]["max_ckpt_to_keep"] == 3 and stage["trainer"]["test_freq"] == 7
    assert stage["trainer"]["save_freq"] == 9
    # and what an SFT stage cannot do is refused by name unless at verl's default
    with pytest.raises(ConfigError, match=rf"stages\[0\]\.trainer\.trainer_config\.{A}\.optim\.num_cycles=2"):
        _sft_stage({"actor_rollout_ref": {"actor": {"optim": {"num_cycles": 2}}}})
    assert _sft_stage({"actor_rollout_ref": {"actor": {"optim": {"num_cycles": 0.5}}}})


def test_an_sft_stage_key_set_twice_is_refused():
    with pytest.raises(ConfigError, match=r"trainer_config\.actor_rollout_ref\.actor\.grad_clip=0\.5, but a Trinity key"):
        _sft_stage({"actor_rollout_ref": {"actor": {"grad_clip": 0.5}}}, **{"trainer.grad_clip": 2.0})
    with pytest.raises(ConfigError, match=r"trainer_config\.trainer\.save_freq=3, but a Trinity key"):
        translate(_with({"trainer.save_interval": 5, "trainer.trainer_config": {"trainer": {"save_freq": 3}}}))


def test_an_sft_only_run_names_the_keys_that_have_no_effect(caplog):
    cfg = _with({"mode": "train", "algorithm": {"algorithm_type": "sft"},
                 "buffer.trainer_input.experience_buffer": {"path": "s.jsonl"},
                 "trainer.trainer_config": {"critic": {"ppo_epochs": 2}}})
    out = translate(cfg, "sft.yaml")
    assert [s["stage_name"] for s in out["stages"]] == ["n"]
    assert any("no RL stage" in r.getMessage() and "trainer.trainer_config.critic.ppo_epochs" in r.getMessage()
               for r in caplog.records)


def test_an_sft_messages_buffer_learns_the_last_turn_unless_turns_are_concatenated():
    buffer = {"path": "s.jsonl", "format": {"prompt_type": "messages"}}
    cfg = _with({"mode": "train", "algorithm": {"algorithm_type": "sft"}, "buffer.trainer_input.experience_buffer":
                 buffer})
    data = translate(cfg)["stages"][0]["data"]
    assert data["multiturn"] == {"enable": True, "messages_key": "message", "last_turn_only": True}
    buffer["format"]["enable_concatenated_multi_turn"] = True
    assert translate(cfg)["stages"][0]["data"]["multiturn"]["last_turn_only"] is False
    buffer["format"] = {"prompt_type": "plaintext", "enable_concatenated_multi_turn": True}
    with pytest.raises(ConfigError, match="enable_concatenated_multi_turn: applies to prompt_type messages only"):
        translate(cfg)


def test_buffer_train_batch_size_apart_from_the_explore_step_is_the_trainers_read():
    """Trinity's experiences per trainer step, other than batch_size x repeat_times (a workflow making several
    experiences a task): rft's experience_buffer.train_batch_size, which runs the explorer apart."""
    out = translate(_with({"algorithm.repeat_times": 4, "buffer.batch_size": 8, "buffer.train_batch_size": 96}))
    assert out["data"]["train_batch_size"] == 8 and out["experience_buffer"]["train_batch_size"] == 96
    same = translate(_with({"algorithm.repeat_times": 4, "buffer.batch_size": 8, "buffer.train_batch_size": 32}))
    assert "train_batch_size" not in same.get("experience_buffer", {})


def test_buffer_train_batch_size_alone_is_tasks_times_repeat_times():
    out = translate(_with({"algorithm.repeat_times": 4, "buffer.train_batch_size": 32}))
    assert out["data"]["train_batch_size"] == 8 and out["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 8
    with pytest.raises(ConfigError, match=r"buffer\.train_batch_size=30 .* not a multiple of repeat_times=4"):
        translate(_with({"algorithm.repeat_times": 4, "buffer.train_batch_size": 30}))


@pytest.mark.parametrize("buffer_steps, trainer_steps, expected", [(2, 1000, 2), (1000, 3, 3), (None, 7, 7), (5, None, 5)])
def test_buffer_and_trainer_total_steps_together_end_the_run_at_the_smaller(buffer_steps, trainer_steps, expected):
    # Trinity's explorer stops after buffer.total_steps, its trainer after trainer.total_steps: the run ends at the
    # first (the spec's example sets trainer.total_steps: 1000; buffer.total_steps=2 on top of it runs 2 steps)
    extra = {k: v for k, v in (("buffer.total_steps", buffer_steps), ("trainer.total_steps", trainer_steps))
             if v is not None}
    assert translate(_with(extra))["trainer"]["total_training_steps"] == expected


def test_max_model_len_alone_is_checked_against_the_lengths_in_effect():
    with pytest.raises(ConfigError, match=r"model\.max_model_len=100 .* 64 \+ 64 = 128"):
        translate(_with({"model.max_model_len": 100, "trainer.trainer_config": {
            "data": {"max_prompt_length": 64, "max_response_length": 64}}}))


def test_sample_strategy_warmup_is_the_default_strategy():
    """Trinity-RFT's warmup strategy read SFT data for its sft_warmup_steps before the experiences (0 of them unless
    set, a key the spec no longer has: SFT warm-ups are stages now) and is a deprecated alias of default today; the
    expert rows mixed into every batch are the mix strategy's (tests/test_mix.py)."""
    assert translate(_with({"algorithm.sample_strategy": "warmup"})) == translate(_with({}))
    with pytest.raises(ConfigError, match=r"algorithm\.sample_strategy_args: the warmup strategy takes no"):
        translate(_with({"algorithm.sample_strategy": "warmup", "algorithm.sample_strategy_args": {"steps": 3}}))
    with pytest.raises(ConfigError, match=r"algorithm\.sample_strategy='staleness_control'"):
        translate(_with({"algorithm.sample_strategy": "staleness_control"}))


@pytest.mark.parametrize("keys, processes", [
    ({"cluster": {"gpu_per_node": 8}, "explorer.rollout_model": {"engine_num": 4}}, (1, 4)),
    ({"cluster": {"gpu_per_node": 8}, "explorer.rollout_model": {"engine_num": 2, "tensor_parallel_size": 2},
      "explorer.auxiliary_models": [{"model_path": "judge", "engine_num": 1, "tensor_parallel_size": 1}]}, (1, 3)),
    ({"cluster": {"node_num": 2, "gpu_per_node": 8}, "explorer.rollout_model": {"engine_num": 8}}, (1, 8)),
    ({"cluster": {"node_num": 3, "gpu_per_node": 8}, "explorer.rollout_model": {"engine_num": 8}}, (2, 8)),
    ({"cluster": {"node_num": 2, "gpu_per_node": 8}, "explorer.rollout_model": {"engine_num": 4}},
     "the trainer gets the 12 GPUs of the cluster's 16 the explorer's 4 leave, which is no whole number of nodes"),
    ({"cluster": {"gpu_per_node": 2}, "explorer.rollout_model": {"engine_num": 2}},
     "the cluster's 2 GPUs (node_num 1 x gpu_per_node 2) all go to the explorer's engines"),
    ({"cluster": {"gpu_per_node": 1}}, (1, 1)),  # one GPU: shared, Trinity's colocate mode
    ({"mode": "train", "cluster": {"node_num": 2, "gpu_per_node": 8}}, (2, 8)),
    ({"mode": "explore", "cluster": {"gpu_per_node": 4}, "explorer.rollout_model": {"engine_num": 4}}, None),
])
def test_the_trainer_gets_the_gpus_trinitys_explorer_leaves(keys, processes):
    """Trinity-RFT's cluster counts are the whole cluster's; its trainer gets what its explorer leaves (mode both:
    the GPUs beyond engine_num x tensor_parallel_size of the rollout model and the auxiliary models, on one node
    where they fit, else whole nodes; mode train all; modes explore / bench none). They were the trainer's own."""
    tree = _with({k: v for k, v in keys.items() if k != "cluster"})
    tree["cluster"] = keys["cluster"]
    if isinstance(processes, str):
        with pytest.raises(ConfigError, match=re.escape(processes)):
            translate(tree, "t.yaml")
        return
    trainer = translate(tree, "t.yaml")["trainer"]
    if processes is None:
        assert "n_gpus_per_node" not in trainer and "nnodes" not in trainer
    else:
        assert (trainer["nnodes"], trainer["n_gpus_per_node"]) == processes


def test_save_strategy_holds_with_one_process_and_is_refused_with_several():
    for strategy in ("single_thread", "single_process", "single_node", "unrestricted"):
        assert translate(_with({"trainer.save_strategy": strategy}))
    with pytest.raises(ConfigError, match=r"trainer\.save_strategy='single_process': with several processes"):
        # 3 GPUs, one for the explorer's engine: the trainer's 2 (Trinity's split)
        translate(_with({"trainer.save_strategy": "single_process", "cluster.gpu_per_node": 3}))
    assert translate(_with({"trainer.save_strategy": "single_process", "cluster.gpu_per_node": 2}))  # its 1
    with pytest.raises(ConfigError, match=r"trainer\.save_strategy='sometimes'"):
        translate(_with({"trainer.save_strategy": "sometimes"}))


def test_the_vllm_engine_and_its_keys_reach_the_rollout_section():
    """Trinity's engine_type vllm / vllm_async is rft's vllm engine (vllm_async in its server process,
    rollout.mode=async); its engine keys land on verl's rollout keys
    (an absent engine_type is rft's hf engine: vLLM is an optional extra, docs/rollout.md)."""
    keys = {"engine_type": "vllm_async", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.7,
            "enforce_eager": False, "enable_prefix_caching": False, "max_model_len": 96, "dtype": "float32"}
    rollout = translate(_with({"explorer.rollout_model": keys}), "t.yaml")["actor_rollout_ref"]["rollout"]
    assert {k: rollout[k] for k in ("name", "tensor_model_parallel_size", "gpu_memory_utilization", "enforce_eager",
                                    "enable_prefix_caching", "max_model_len", "dtype")} == {
        "name": "vllm", "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.7, "enforce_eager": False,
        "enable_prefix_caching": False, "max_model_len": 96, "dtype": "float32"}
    assert "name" not in translate(_with({}), "t.yaml").get("actor_rollout_ref", {}).get("rollout", {})
    # vllm_async: Trinity's asynchronous engine in a process of its own, rft's engine server; vllm stays in process
    assert rollout["mode"] == "async"
    plain = translate(_with({"explorer.rollout_model": {"engine_type": "vllm"}}), "t.yaml")["actor_rollout_ref"]
    assert plain["rollout"]["name"] == "vllm" and "mode" not in plain["rollout"]


def test_engine_num_is_the_number_of_explorer_processes(caplog):
    """Trinity's explorer.rollout_model.engine_num: one explorer process per engine (trainer.explorer_num), which
    take turns at the steps; on the on-policy schedule (mode both, sync_interval 1, sync_offset 0: Trinity's
    defaults, its toolace / mix_chord examples with 4 engines), where each step waits for the weights of the one
    before, one engine with a note (rft refuses several explorers there)."""
    out = translate(_with({"explorer.rollout_model": {"engine_num": 2}, "synchronizer": {"sync_interval": 2}}),
                    "t.yaml")
    assert out["trainer"]["explorer_num"] == 2
    assert translate(_with({"explorer.rollout_model": {"engine_num": 2}, "synchronizer": {"sync_offset": 1}}),
                     "t.yaml")["trainer"]["explorer_num"] == 2
    assert translate(_with({"explorer.rollout_model": {"engine_num": 2}, "mode": "explore"}),
                     "t.yaml")["trainer"]["explorer_num"] == 2
    import logging

    with caplog.at_level(logging.INFO, logger="rft"):
        out = translate(_with({"explorer.rollout_model": {"engine_num": 4}}), "t.yaml")
    assert "explorer_num" not in out["trainer"]
    notes = [r.getMessage() for r in caplog.records if "engine_num=4" in r.getMessage()]
    assert len(notes) == 1 and "one engine generates each step's rollouts" in notes[0], notes


# --------------------------------------- algorithm.optimizer: Trinity's OptimizerConfig is the actor's optimizer
OPTIMIZER = [
    ({"lr": 3e-6}, "lr", 3e-6),
    ({"lr_warmup_steps": 5}, "lr_warmup_steps", 5),
    ({"lr_warmup_steps_ratio": 0.1}, "lr_warmup_steps_ratio", 0.1),
    ({"betas": [0.9, 0.95]}, "betas", [0.9, 0.95]),
    ({"weight_decay": 0.0}, "weight_decay", 0.0),
    ({"lr_scheduler_type": "cosine"}, "warmup_style", "cosine"),
    ({"lr_scheduler_type": "cosine"}, "min_lr_ratio", 0.01),  # Trinity's default, read by a cosine schedule
    ({"warmup_style": "cosine", "min_lr_ratio": 0.1}, "min_lr_ratio", 0.1),
    ({"optimizer_type": "sgd"}, "optimizer", "sgd"),
]


@pytest.mark.parametrize("optimizer, key, expected", OPTIMIZER, ids=[f"{o[1]}-{i}" for i, o in enumerate(OPTIMIZER)])
def test_algorithm_optimizer_is_the_actors_optimizer(optimizer, key, expected):
    out = translate(_with({"algorithm.optimizer": optimizer}))
    assert _get(out, f"actor_rollout_ref.actor.optim.{key}") == expected


@pytest.mark.parametrize("optimizer, needle", [
    ({"lr_scheduler_type": "linear"}, "algorithm.optimizer.lr_scheduler_type='linear': rft's schedules"),
    ({"optimizer_type": "lion"}, "algorithm.optimizer.optimizer_type='lion'"),
    ({"clip_grad": 0.5}, "algorithm.optimizer.clip_grad=0.5: the actor's gradient clipping is trainer.grad_clip"),
    ({"lrr": 1e-6}, "algorithm.optimizer.lrr: unknown Trinity-RFT key; did you mean 'algorithm.optimizer.lr'?"),
])
def test_an_algorithm_optimizer_field_rft_has_not_is_refused_by_name(optimizer, needle):
    with pytest.raises(ConfigError) as err:
        translate(_with({"algorithm.optimizer": optimizer}), "t.yaml")
    assert needle in str(err.value) and "cannot honour" not in str(err.value), str(err.value)


def _offline_stage(kind: str, optimizer: dict, **top) -> dict:
    """The translation of an SFT / DPO stage (`kind`) whose algorithm section sets `optimizer`, before an RL stage."""
    cfg = _with(top)
    cfg["stages"] = [{**SFT_STAGE, "algorithm": {"algorithm_type": kind, "optimizer": optimizer}}, {"stage_name": "rl"}]
    return translate(cfg, "t.yaml")["stages"][0]


# Trinity-RFT's optimizer defaults (its verl actor's optim and grad_clip, the spec's "veRL Trainer Configuration"), as
# an SFT / DPO stage's optim keys: a constant lr of 1e-6 from the first step, the gradient norm clipped at 1
TRINITY_OPTIM = {"lr": 1e-6, "warmup_steps_ratio": 0.0, "lr_scheduler": "constant", "clip_grad": 1.0}


@pytest.mark.parametrize("kind", ["sft", "dpo"])
@pytest.mark.parametrize("optimizer, optim", [
    ({"lr": 3e-5}, {"lr": 3e-5}),
    ({"lr_warmup_steps_ratio": 0.2, "lr_warmup_steps": -1}, {"warmup_steps_ratio": 0.2}),
    ({"betas": [0.9, 0.99], "weight_decay": 0.0}, {"betas": [0.9, 0.99], "weight_decay": 0.0}),
    ({"lr_scheduler_type": "constant"}, {"lr_scheduler": "constant"}),
    ({"warmup_style": "cosine"}, {"lr_scheduler": "cosine", "min_lr_ratio": 0.01}),  # Trinity's min_lr_ratio
    ({"lr_scheduler_type": "cosine", "min_lr_ratio": 0.1}, {"lr_scheduler": "cosine", "min_lr_ratio": 0.1}),
    ({"optimizer_type": "adamw", "clip_grad": 1.0}, {}),
])
def test_algorithm_optimizer_is_an_offline_stages_optimizer(kind, optimizer, optim):
    """Trinity-RFT trains its SFT and DPO stages' actor with algorithm.optimizer as it does its RL stages'; the
    fields it leaves out are Trinity's defaults."""
    assert _offline_stage(kind, optimizer)["optim"] == {**TRINITY_OPTIM, **optim}


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_an_offline_stage_without_algorithm_optimizer_trains_with_trinitys_defaults(kind, tmp_path):
    """No algorithm.optimizer: Trinity-RFT's optimizer (constant lr 1e-6, no warm-up), not rft sft's (lr 1e-5,
    cosine after a 10% warm-up), in a stage and in a run without stages alike."""
    cfg = _with({})
    buffer = {**SFT_STAGE["buffer"], "train_batch_size": 16}  # DPO: 8 pairs
    cfg["stages"] = [{**SFT_STAGE, "algorithm": {"algorithm_type": kind}, "buffer": buffer}, {"stage_name": "rl"}]
    assert translate(cfg)["stages"][0].get("optim") == TRINITY_OPTIM
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**cfg, "stages": [cfg["stages"][0]]}))  # the typed config a stage runs with
    _, (stage,) = load_trinity(path, validate_paths=False)
    optim = stage.cfg.optim
    assert (optim.lr, optim.warmup_steps_ratio, optim.lr_scheduler, optim.clip_grad) == (1e-6, 0.0, "constant", 1.0)
    unstaged = _with({"mode": "train", "algorithm": {"algorithm_type": kind}, "buffer": buffer})
    assert translate(unstaged)["stages"][0].get("optim") == TRINITY_OPTIM


@pytest.mark.parametrize("optimizer, needle", [
    ({"optimizer_type": "sgd"}, "algorithm.optimizer.optimizer_type='sgd': an SFT / DPO stage trains with AdamW"),
    ({"lr_warmup_steps": 5}, "algorithm.optimizer.lr_warmup_steps=5: an SFT / DPO stage warms up for a fraction"),
    ({"clip_grad": 0.5}, "algorithm.optimizer.clip_grad=0.5: the actor's gradient clipping is trainer.grad_clip "
                         "(rft's optim.clip_grad)"),
    ({"lr_scheduler_type": "cosin"}, "algorithm.optimizer.lr_scheduler_type='cosin': rft's schedules after the "
                                     "warmup are constant, cosine; did you mean 'cosine'?"),
])
def test_an_offline_stages_optimizer_field_rft_has_not_is_refused_by_name(optimizer, needle):
    with pytest.raises(ConfigError) as err:
        _offline_stage("sft", optimizer)
    assert str(err.value).startswith(f"t.yaml: stages[0].{needle}"), str(err.value)


def test_an_offline_stages_lr_given_twice_is_refused():
    with pytest.raises(ConfigError, match=r"stages\[0\]\.trainer\.trainer_config\.actor_rollout_ref\.actor\.optim\.lr="
                                          r"0\.0001, but a Trinity key of this file sets optim\.lr to 3e-05"):
        _offline_stage("sft", {"lr": 3e-5}, **{"trainer.trainer_config": {"actor_rollout_ref": {"actor": {
            "optim": {"lr": 1e-4}}}}})


@pytest.mark.slow
def test_an_sft_warmup_stage_trains_with_algorithm_optimizer_lr(work, tmp_path):
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps({"q": f"{i}+1=", "a": str(i + 1)}) + "\n"
                                                for i in range(8)))
    raw = yaml.safe_load(_trinity_yaml(work, tmp_path / "t.yaml", steps=1).read_text())
    raw["stages"] = [
        {"stage_name": "sft_warmup", "mode": "train",
         "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 3.0e-5, "lr_scheduler_type": "constant"}},
         "buffer": {"train_batch_size": 4, "total_steps": 1,
                    "trainer_input": {"experience_buffer": {"name": "s", "path": str(tmp_path / "sft.jsonl"),
                                                            "format": {"prompt_key": "q", "response_key": "a"}}}}},
        {"stage_name": "rft", "algorithm": {"algorithm_type": "grpo", "optimizer": {"lr": 1.0e-4}}},
    ]
    del raw["trainer"]["trainer_config"]["actor_rollout_ref"]["actor"]["optim"]  # each stage's algorithm.optimizer
    raw["checkpoint_root_dir"] = str(tmp_path / "root")
    raw["trainer"]["save_interval"] = 0
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    rft_here("train", str(tmp_path / "t.yaml"), cwd=tmp_path)
    out = tmp_path / "root" / "rft-trinity" / "arith"
    (sft,) = [json.loads(x) for x in (out / "sft_warmup" / "metrics.jsonl").read_text().splitlines()]
    assert sft["train/lr"] == pytest.approx(3e-5), sft
    (rl,) = [json.loads(x) for x in (out / "rft" / "metrics.jsonl").read_text().splitlines()]
    assert rl["actor/lr"] == pytest.approx(1e-4), rl  # the RL stage's own


def test_explorer_rollout_model_seed_is_the_runs_seed():
    assert _get(translate(_with({"explorer.rollout_model": {"seed": 7}})), "trainer.seed") == 7


def test_config_show_gives_algorithm_optimizer_lr_as_the_actors_lr(work, tmp_path):
    raw = yaml.safe_load(_trinity_yaml(work, tmp_path / "t.yaml").read_text())
    del raw["trainer"]["trainer_config"]["actor_rollout_ref"]["actor"]["optim"]
    raw["algorithm"]["optimizer"] = {"lr": 2.5e-5}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    proc = rft_here("config", "show", str(tmp_path / "t.yaml"), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "\n    optim:\n      lr: 2.5e-05\n" in proc.stdout, proc.stdout  # actor_rollout_ref.actor.optim


@pytest.mark.parametrize("model, prompt, response", [
    ({"max_model_len": 1200, "max_response_tokens": 32}, 1168, 32),  # the trial's config: not rft's 512
    ({"max_model_len": 1200, "max_prompt_tokens": 1000}, 1000, 200),
    ({"max_model_len": 1000}, 500, 500),
    ({"max_model_len": 100, "max_response_tokens": 150}, 1, 99),  # Trinity keeps the response below max_model_len
    ({"max_prompt_tokens": 64, "max_response_tokens": 16}, 64, 16),
])
def test_the_missing_length_is_derived_from_max_model_len_as_trinity_does(model, prompt, response):
    out = translate(_with({f"model.{k}": v for k, v in model.items()}))
    assert (out["data"]["max_prompt_length"], out["data"]["max_response_length"]) == (prompt, response)


def test_a_too_long_prompt_is_named_by_the_trinity_keys(work, tmp_path):
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    proc = rft_here("train", str(path), "model.max_prompt_tokens=2", "model.enable_prompt_truncation=false",
                    cwd=tmp_path, check=False)
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert line.startswith("rft: error: ") and "model.max_prompt_tokens=2 (rft's data.max_prompt_length)" in line, line
    assert "trainer.trainer_config.data.filter_overlong_prompts=true" in line, line
    # the prompt would be cut but for the Trinity key that said not to: the line names it, not rft's data.truncation
    assert "or set model.enable_prompt_truncation=true to cut its start" in line and "truncation to" not in line, line



def test_a_staged_runs_too_long_prompt_is_named_by_its_stages_trinity_keys(work, tmp_path):
    """A stage's data error (here the second stage's prompt over its own limit, with truncation off) names the
    Trinity keys of that stage, as an unstaged run's does, in one line."""
    path = _trinity_yaml(work, tmp_path / "t.yaml")
    raw = yaml.safe_load(path.read_text())
    raw.update(name="staged", checkpoint_root_dir=str(tmp_path / "root"))
    raw["stages"] = [{"stage_name": "first"},
                     {"stage_name": "second", "model": {"max_prompt_tokens": 2, "enable_prompt_truncation": False}}]
    path.write_text(yaml.safe_dump(raw))
    # the first stage finished in an earlier start of the run, which is skipped: its model is the tiny one
    first = tmp_path / "root" / "rft-trinity" / "staged" / "first"
    shutil.copytree(work / "m", first / "model")
    (first / "STAGE_DONE").write_text("{}\n")
    proc = rft_here("train", str(path), cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("rft: error: ")]
    assert line.startswith(f"rft: error: {path}: stages[1].model.max_prompt_tokens=2 (rft's data.max_prompt_length): "
                           "stage 'second' (stages[1]): "), line
    assert "set stages[1].trainer.trainer_config.data.filter_overlong_prompts=true" in line, line
    assert "or set stages[1].model.enable_prompt_truncation=true to cut its start" in line, line
    assert "truncation to" not in line and " data.filter_overlong_prompts" not in line, line
    # given on the command line (stages.1.x), the line names the override
    raw["stages"][1].pop("model")
    path.write_text(yaml.safe_dump(raw))
    override = "stages.1.model.max_prompt_tokens=2"
    proc = rft_here("train", str(path), override, "stages.1.model.enable_prompt_truncation=false", cwd=tmp_path,
                    check=False)
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("rft: error: ")]
    assert line.startswith(f"rft: error: command line ({override}): stages[1].model.max_prompt_tokens=2 (rft's "
                           "data.max_prompt_length): stage 'second' (stages[1]): "), line


def test_an_sft_runs_data_error_is_named_by_its_trinity_key(work, tmp_path):
    """An SFT run without stages runs as one stage: its data error names the Trinity key too (no stage to name)."""
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps({"q": f"{i}+1=", "a": str(i + 1)}) + "\n"
                                                for i in range(8)))
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(_with({
        "mode": "train", "checkpoint_root_dir": str(tmp_path / "root"), "algorithm": {"algorithm_type": "sft"},
        "model": {"model_path": str(work / "m")},
        "buffer": {"train_batch_size": 4, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "path": str(tmp_path / "sft.jsonl"), "format": {"prompt_key": "question", "response_key": "a"}}}}})))
    proc = rft_here("train", str(path), cwd=tmp_path, check=False)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"rft: error: {path}: buffer.trainer_input.experience_buffer.format.prompt_key="
                                  f"'question' (rft's data.prompt_key): {tmp_path / 'sft.jsonl'} row 0: no column "
                                  "'question'"), proc.stderr

# ----------------------------- model.enable_prompt_truncation: Trinity-RFT's vLLM engine keeps a long prompt's end
@pytest.mark.parametrize("model, rollout_model, truncation", [
    ({"enable_prompt_truncation": True}, {}, "left"),
    ({"enable_prompt_truncation": False}, {}, "error"),
    ({}, {}, "left"),  # Trinity-RFT's default is true
    ({}, {"enable_prompt_truncation": False}, "error"),
    # the rollout model's own wins over model's (Trinity gives the rollout model model's only where it has none)
    ({"enable_prompt_truncation": True}, {"enable_prompt_truncation": False}, "error"),
    ({"enable_prompt_truncation": False}, {"enable_prompt_truncation": None}, "error"),
])
def test_enable_prompt_truncation_is_data_truncation(model, rollout_model, truncation):
    out = translate(_with({"model": {"model_path": "m", "max_prompt_tokens": 64, **model},
                           "explorer.rollout_model": rollout_model}), "t.yaml")
    assert out["data"]["truncation"] == truncation


def test_enable_prompt_truncation_needs_a_prompt_limit_and_is_given_once():
    # left out with no prompt limit in the file: rft's own default (an overlong prompt is an error)
    assert "truncation" not in translate(_with({}), "t.yaml").get("data", {})
    # true without one: refused, as Trinity-RFT refuses it
    with pytest.raises(ConfigError) as err:
        translate(_with({"model.enable_prompt_truncation": True}), "t.yaml")
    assert str(err.value).startswith("t.yaml: model.enable_prompt_truncation=True cuts a prompt to "
                                     "model.max_prompt_tokens, which is not set"), str(err.value)
    # the limit from max_model_len, or trainer_config's, holds too
    assert translate(_with({"model.max_model_len": 96}), "t.yaml")["data"]["truncation"] == "left"
    limit = {"data": {"max_prompt_length": 32}}
    assert translate(_with({"trainer.trainer_config": limit}), "t.yaml")["data"]["truncation"] == "left"
    # trainer_config's data.truncation is taken when the Trinity key is left out, refused when it says otherwise
    out = translate(_with({"model.max_prompt_tokens": 64, "trainer.trainer_config": {"data": {"truncation": "middle"}}}))
    assert out["data"]["truncation"] == "middle"
    with pytest.raises(ConfigError, match=r"trainer_config\.data\.truncation='middle', but a Trinity key"):
        translate(_with({"model.max_prompt_tokens": 64, "model.enable_prompt_truncation": False,
                         "trainer.trainer_config": {"data": {"truncation": "middle"}}}))
    with pytest.raises(ConfigError, match=r"model\.enable_prompt_truncation='maybe' is not a boolean"):
        translate(_with({"model.max_prompt_tokens": 64, "model.enable_prompt_truncation": "maybe"}))


def test_enable_prompt_truncation_is_the_rl_stages_in_an_sft_stage():
    cfg = _with({"model.max_prompt_tokens": 64, "model.enable_prompt_truncation": False})
    cfg["stages"] = [SFT_STAGE, {"stage_name": "rl"}]
    sft, rl = translate(cfg, "t.yaml")["stages"]
    assert "truncation" not in sft.get("data", {}) and rl["data"]["truncation"] == "error"


@pytest.mark.slow
def test_rft_train_cuts_a_long_prompts_start_with_enable_prompt_truncation(work, tmp_path):
    path = _trinity_yaml(work, tmp_path / "t.yaml", steps=1)
    for overrides in ([], ["model.enable_prompt_truncation=true"]):
        root = tmp_path / f"root{len(overrides)}"
        proc = rft_here("train", str(path), "model.max_prompt_tokens=8", f"checkpoint_root_dir={root}",
                        "trainer.save_interval=0", *overrides, cwd=tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr
        (metrics,) = [json.loads(x) for x in (root / "rft-trinity" / "arith" / "metrics.jsonl").read_text().splitlines()]
        assert metrics["prompt_length/max"] == 8, metrics  # the arithmetic prompts are longer after the chat template


def test_math_workflows_prompts_are_cut_at_max_prompt_tokens_too(work, tmp_path):
    # math_workflow adds its think / answer system prompt (~70 tokens) to each task: the prompt the model sees is
    # cut at max_prompt_tokens as the dataset's are (it went out whole: prompt_length/max 466-490 with 256 on gsm8k)
    path = _trinity_yaml(work, tmp_path / "t.yaml", steps=1)
    root = tmp_path / "root"
    proc = rft_here("train", str(path), "model.max_prompt_tokens=32", f"checkpoint_root_dir={root}",
                    "trainer.save_interval=0", "buffer.explorer_input.taskset.default_workflow_type=math_workflow",
                    "buffer.explorer_input.taskset.default_reward_fn_type=math_reward", cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    (metrics,) = [json.loads(x) for x in (root / "rft-trinity" / "arith" / "metrics.jsonl").read_text().splitlines()]
    assert metrics["prompt_length/max"] == 32, metrics


def test_math_workflow_without_a_reward_fn_scores_with_math_reward_as_trinity_does():
    out = translate(_with({"buffer.explorer_input.default_workflow_type": "math_workflow"}))
    assert out["custom_reward_function"]["reward_fn_type"] == "math_reward"
    out = translate(_with({"buffer.explorer_input.default_workflow_type": "math_workflow",
                           "buffer.explorer_input.default_reward_fn_type": "accuracy_reward"}))
    assert out["custom_reward_function"]["reward_fn_type"] == "accuracy_reward"
    out = translate(_with({"buffer.explorer_input.default_workflow_type": "math_workflow",
                           "trainer.trainer_config": {"custom_reward_function": {"path": "r.py"}}}))
    assert "reward_fn_type" not in out["custom_reward_function"]
    assert "reward_fn_type" not in translate(_with({})).get("custom_reward_function", {})


def test_an_eval_tasksets_name_labels_its_rows_without_a_data_source(work, tmp_path):
    from transformers import AutoTokenizer

    from rft.data.dataset import PromptDataset

    (tmp_path / "e.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    (tmp_path / "f.jsonl").write_text(json.dumps({"prompt": "2+2=", "answer": "4", "data_source": "own"}) + "\n")
    out = translate(_with({"buffer.explorer_input.eval_tasksets": [
        {"name": "gsm8k-eval", "path": str(tmp_path / "e.jsonl")}, {"path": str(tmp_path / "f.jsonl")}]}))
    assert out["data"]["val_data_sources"] == ["gsm8k-eval", None]
    tokenizer = AutoTokenizer.from_pretrained(work / "m")
    prompts = PromptDataset([str(tmp_path / "e.jsonl"), str(tmp_path / "f.jsonl")], tokenizer,
                            data_sources=out["data"]["val_data_sources"]).prompts
    assert [p.data_source for p in prompts] == ["gsm8k-eval", "own"]  # a row's own data_source wins
    assert PromptDataset(str(tmp_path / "e.jsonl"), tokenizer).prompts[0].data_source == "unknown"  # verl's


@pytest.mark.slow
def test_a_large_validation_note_names_the_key_as_a_trinity_yaml_sets_it(work, tmp_path, caplog):
    """Trinity-RFT has no cap on an eval taskset's rows: the note names rft's key where a Trinity YAML puts it."""
    import pandas as pd

    rows = pd.read_parquet(work / "tasks" / "test.parquet")
    pd.concat([rows] * (301 // len(rows) + 1)).head(301).to_parquet(tmp_path / "big.parquet")
    path = _trinity_yaml(work, tmp_path / "t.yaml", steps=1)
    proc = rft_here("train", str(path), f"buffer.explorer_input.eval_tasksets.0.path={tmp_path / 'big.parquet'}",
                    "buffer.explorer_input.eval_tasksets.0.split=null", "trainer.save_interval=0",
                    f"checkpoint_root_dir={tmp_path / 'ck'}", cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    notes = [r.getMessage() for r in caplog.records if "each validation generates for all 301 prompts" in r.getMessage()]
    assert len(notes) == 1 and notes[0].endswith("set trainer.trainer_config.data.val_max_samples=N to validate on "
                                                 "N of them"), notes
    from rft.config.spelling import said

    assert said("data.val_max_samples") == "data.val_max_samples"  # rft's own spelling again after the run


def test_a_ground_truth_from_format_response_key_is_named_by_its_column(work, tmp_path):
    # the spec's taskset reads its reference answers from format.response_key ('answer'): a reward that cannot use
    # them says so of that column (it named reward_model.ground_truth, which those rows do not have)
    from transformers import AutoTokenizer

    from rft.data.dataset import PromptDataset
    from rft.data.io import DataError
    from rft.explorer.preflight import _check_typed_ground_truth

    (tmp_path / "t.jsonl").write_text(json.dumps({"question": "1+1=", "answer": "it is #### 2"}) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(work / "m")
    rows = PromptDataset(str(tmp_path / "t.jsonl"), tokenizer, prompt_key="question", response_key="answer")
    with pytest.raises(DataError) as err:
        _check_typed_ground_truth("countdown_reward", rows)
    assert str(err.value).startswith("1 of 1 rows have a ground truth (their 'answer' column, data.response_key="
                                     "answer) that custom_reward_function.reward_fn_type='countdown_reward' cannot "
                                     f"use (first: {tmp_path / 't.jsonl'} row 0: "), str(err.value)


def test_a_stages_complete_line_names_the_keys_as_the_yaml_sets_them(tmp_path, monkeypatch, capsys):
    """A stage whose run is complete says so in the keys of the config's dialect, as a run without stages does."""
    import contextlib

    from rft.config.spelling import spelling_keys
    from rft.dialects.trinity import trinity_spelling
    from rft.errors import RunComplete
    from rft.orchestration import stages
    from rft.trainer import run_folder
    from rft.trainer import stages as build

    @contextlib.contextmanager
    def complete(cfg, dist):
        raise RunComplete("rft: x is complete; nothing to do (raise trainer.total_training_steps / "
                          "trainer.total_epochs to train on)")
        yield

    monkeypatch.setattr(run_folder, "run_folder", complete)
    stage = build.Stage("grpo", "rl", None, tmp_path / "grpo")
    stage.out.mkdir()
    with spelling_keys(trinity_spelling({})):
        stages.run_stage(stage)
    assert capsys.readouterr().out.splitlines() == [
        "rft: x is complete; nothing to do (raise buffer.total_steps / buffer.total_epochs to train on)"]
    assert stage.done


def test_an_auxiliary_models_load_error_names_the_trinity_key_the_yaml_wrote(work, tmp_path, capsys):
    """A judge's folder is checked once it loads (here a reward model's, whose LM head would be random weights): its
    error named `workflow.auxiliary_models[0].model.path`, neither rft's key (`...model_path`) nor the Trinity
    YAML's `explorer.auxiliary_models[0].model_path`."""
    import transformers as T

    from rft.cli import main

    rm = tmp_path / "rm"
    T.LlamaForSequenceClassification(T.LlamaConfig(
        vocab_size=275, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, pad_token_id=272, num_labels=1)).save_pretrained(rm)
    for f in (work / "m").iterdir():
        if f.name.startswith(("tokenizer", "vocab", "merges", "special")):
            shutil.copy(f, rm / f.name)
    path = _trinity_yaml(work, tmp_path / "t.yaml", steps=1)
    text = path.read_text().replace("format: {prompt_key: prompt}}", "format: {prompt_key: prompt}, "
                                    "default_reward_fn_type: llm_judge}")
    path.write_text(text.replace("explorer: {eval_interval: 2, eval_on_startup: false}",
                                 "explorer: {eval_interval: 2, eval_on_startup: false, auxiliary_models: "
                                 f"[{{model_path: {rm}}}]}}"))
    code = main(["train", str(path), f"checkpoint_root_dir={tmp_path / 'ckpt'}", "synchronizer.sync_method=memory"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    line = [x for x in err.splitlines() if x.startswith("rft: error:")]
    assert line == [f"rft: error: explorer.auxiliary_models[0].model_path='{rm}' is LlamaForSequenceClassification "
                    "(model_type 'llama'), a reward or value model: its weights hold a score head, not the LM head a "
                    "causal LM generates with (tie_word_embeddings is false: it would be random weights); point it "
                    "at a causal LM folder (the model the reward model was trained from, or a generative judge)"], err
