"""Issue 63, the Trinity-RFT half: the keys Trinity-RFT's own examples write, mapped with Trinity's meaning (the
trainer shortcuts, subset_name, the sampling no-ops, group, default_eval_workflow_type, data_selector, the replay
buffer, enable_thinking, explorer_driven as the fixed schedule), or refused by name with a true reason
(trainer_driven, the environment workflows)."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from cli_helpers import rft_here
from test_trinity import BASE, _with  # the smallest Trinity file, and it with some keys set

from rft.config.load import ConfigError
from rft.dialects.trinity import translate
from rft.trainer.configure import load_trinity

A = "actor_rollout_ref.actor"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from rft.models.tiny import init_model

    root = tmp_path_factory.mktemp("trinity_peer")
    init_model("tiny", root / "m", seed=0)
    return root


def _get(tree: dict, key: str):
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return "<missing>"
        tree = tree[part]
    return tree


def _names(tree) -> set:
    """Every trainer.experiment_name of a resolved config (the run's and each stage's)."""
    if isinstance(tree, list):
        return set().union(*map(_names, tree)) if tree else set()
    if not isinstance(tree, dict):
        return set()
    own = {tree["experiment_name"]} if "experiment_name" in tree else set()
    return own.union(*map(_names, tree.values()))


def _refusal(extra: dict) -> str:
    with pytest.raises(ConfigError) as err:
        translate(_with(extra), "t.yaml")
    return str(err.value)


# ------------------------------------------------------------------------------------------ the trainer shortcuts
def test_trainer_shortcuts_fill_the_actor_and_reference_keys_trainer_config_leaves_unset():
    out = translate(_with({"model.max_model_len": 1000, "trainer.use_dynamic_bsz": True,
                           "trainer.max_token_len_per_gpu": 4096, "trainer.ulysses_sequence_parallel_size": 1}))
    assert _get(out, f"{A}.use_dynamic_bsz") is True
    for key in (f"{A}.ppo_max_token_len_per_gpu", "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"):
        assert _get(out, key) == 4096, key
    assert _get(out, f"{A}.ulysses_sequence_parallel_size") == 1
    assert "critic" not in out  # grpo trains no critic: its keys are not filled (rft would call them unused)
    # trainer_config's own value wins, as in Trinity-RFT (the shortcut fills what it leaves unset)
    out = translate(_with({"model.max_model_len": 1000, "trainer.max_token_len_per_gpu": 4096,
                           "trainer.trainer_config": {"actor_rollout_ref": {"actor": {"ppo_max_token_len_per_gpu":
                                                                                      8192}}}}))
    assert _get(out, f"{A}.ppo_max_token_len_per_gpu") == 8192
    assert _get(out, "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu") == 4096
    # ppo trains a critic: its budgets are filled too
    out = translate(_with({"algorithm.algorithm_type": "ppo", "model.max_model_len": 1000,
                           "trainer.max_token_len_per_gpu": 4096}))
    assert _get(out, "critic.ppo_max_token_len_per_gpu") == _get(out, "critic.forward_max_token_len_per_gpu") == 4096


def test_the_token_budget_left_out_is_twice_max_model_len_and_a_short_one_is_raised(caplog):
    out = translate(_with({"model.max_model_len": 1000, "trainer.ulysses_sequence_parallel_size": 1}))
    assert _get(out, f"{A}.ppo_max_token_len_per_gpu") == 2000  # ceil(2 x 1000 / 1)
    with caplog.at_level(logging.WARNING, logger="rft"):
        out = translate(_with({"model.max_model_len": 1000, "trainer.max_token_len_per_gpu": 600}))
    assert _get(out, f"{A}.ppo_max_token_len_per_gpu") == 1000  # one row must fit in a pass
    assert "ppo_max_token_len_per_gpu=600 is raised to 1000" in caplog.text


def test_an_sft_stage_notes_the_token_budget_and_takes_sequence_parallelism(caplog):
    cfg = _with({"mode": "train", "algorithm.algorithm_type": "sft",
                 "buffer.trainer_input.experience_buffer.path": "s.jsonl",
                 "trainer": {"use_dynamic_bsz": True, "max_token_len_per_gpu": 16384,
                             "ulysses_sequence_parallel_size": 1}})
    with caplog.at_level(logging.WARNING, logger="rft"):
        out = translate(cfg, "t.yaml")
    assert out["stages"][0]["ulysses_sequence_parallel_size"] == 1
    assert "actor_rollout_ref" not in out["stages"][0]
    assert "trainer.use_dynamic_bsz=True changes nothing in rft: Trinity-RFT's SFT forms micro-batches by token " \
           "count" in caplog.text
    assert "trainer.max_token_len_per_gpu=16384 changes nothing in rft" in caplog.text


def test_an_sft_or_dpo_file_with_the_trainer_shortcuts_resolves(work, tmp_path):
    # the bug: "unknown config key 'actor_rollout_ref'" in a trainer.trainer_config the file does not have
    rows = tmp_path / "s.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n" for i in range(16)))
    pairs = tmp_path / "d.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": "0"}) + "\n"
                             for i in range(16)))
    for kind, data in (("sft", rows), ("dpo", pairs)):
        path = tmp_path / f"{kind}.yaml"
        path.write_text(yaml.safe_dump({
            "project": "p", "name": kind, "mode": "train", "checkpoint_root_dir": str(tmp_path / "ck"),
            "algorithm": {"algorithm_type": kind}, "model": {"model_path": str(work / "m"), "max_model_len": 64},
            "buffer": {"total_epochs": 1, "train_batch_size": 16,
                       "trainer_input": {"experience_buffer": {"path": str(data)}}},
            "trainer": {"use_dynamic_bsz": True, "max_token_len_per_gpu": 16384,
                        "ulysses_sequence_parallel_size": 1}}))
        proc = rft_here("config", "show", str(path), cwd=tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr
        # a file without stages is one run named `name`, as in Trinity-RFT (it was <name>_<name>, a stage's name)
        shown = next(d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict))
        assert _names(shown) == {kind}, _names(shown)
    bad = yaml.safe_load(path.read_text())
    bad["trainer"]["ulysses_sequence_parallel_size"] = 2
    path.write_text(yaml.safe_dump(bad))
    proc = rft_here("config", "show", str(path), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "trainer.ulysses_sequence_parallel_size=2: rft dpo has no sequence " \
                                   "parallelism; set 1" in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------ tasksets, sampling, the run folder
def test_subset_name_reads_the_subset_folder_of_a_dataset_of_several(tmp_path):
    for subset in ("main", "socratic"):
        (tmp_path / "gsm8k" / subset).mkdir(parents=True)
        (tmp_path / "gsm8k" / subset / "train.jsonl").write_text("{}\n")
    ts = {"path": str(tmp_path / "gsm8k"), "split": "train", "subset_name": "socratic"}
    out = translate(_with({"buffer.explorer_input.taskset": ts}))
    assert out["data"]["train_files"] == str(tmp_path / "gsm8k" / "socratic" / "train.jsonl")
    (tmp_path / "one").mkdir()  # a dataset of one subset: read as it is
    (tmp_path / "one" / "train.jsonl").write_text("{}\n")
    out = translate(_with({"buffer.explorer_input.taskset": {**ts, "path": str(tmp_path / "one")}}))
    assert out["data"]["train_files"] == str(tmp_path / "one" / "train.jsonl")


def test_sampling_no_ops_are_accepted_and_engine_keys_mapped(caplog):
    with caplog.at_level(logging.WARNING, logger="rft"):
        out = translate(_with({"buffer.explorer_input.taskset": {"path": "t.jsonl", "rollout_args": {"logprobs": 0}},
                               "explorer.rollout_model": {"enable_chunked_prefill": True,
                                                          "enable_auto_tool_choice": True},
                               "trainer.enable_preview": True}), "t.yaml")
    assert out["actor_rollout_ref"]["rollout"]["enable_chunked_prefill"] is True
    assert "logprobs" not in caplog.text  # 0: the sampled token's log-prob, what rft returns
    assert "explorer.rollout_model.enable_auto_tool_choice=True changes nothing in rft" in caplog.text
    assert "trainer.enable_preview=True changes nothing in rft" in caplog.text
    with caplog.at_level(logging.WARNING, logger="rft"):
        translate(_with({"buffer.explorer_input.taskset": {"path": "t.jsonl", "rollout_args": {"logprobs": 20}}}),
                  "t.yaml")
    assert "rollout_args.logprobs=20 changes nothing in rft" in caplog.text


def test_group_is_a_folder_of_the_run_as_in_trinity():
    out = translate(_with({"checkpoint_root_dir": "/ck", "group": "g"}))
    assert out["trainer"]["default_local_dir"] == "/ck/p/g/n"
    assert translate(_with({"checkpoint_root_dir": "/ck"}))["trainer"]["default_local_dir"] == "/ck/p/n"


def test_default_eval_workflow_type_is_the_eval_tasksets_workflow():
    out = translate(_with({"buffer.explorer_input": {
        "default_eval_workflow_type": "math_workflow",
        "eval_tasksets": [{"path": "e.jsonl", "name": "e"}]}}))
    assert out["workflow"]["type"] == "math_workflow"


def test_an_interpolation_from_the_files_root_into_trainer_config_resolves(work, tmp_path):
    path = tmp_path / "t.yaml"
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    path.write_text(yaml.safe_dump({
        **BASE, "algorithm": {"algorithm_type": "ppo"}, "model": {"model_path": str(work / "m")},
        "buffer": {"explorer_input": {"taskset": {"path": str(tmp_path), "split": "train"}}},
        "trainer": {"trainer_config": {"critic": {
            "ppo_max_token_len_per_gpu": 32768,
            "forward_max_token_len_per_gpu": "${trainer.trainer_config.critic.ppo_max_token_len_per_gpu}"}}}}))
    _, cfg = load_trinity(path)
    assert cfg.critic.forward_max_token_len_per_gpu == 32768


# ------------------------------------------------------------------------------- data_selector and replay buffer
def test_data_selector_sequential_by_default_shuffle_with_its_seed_the_others_rfts_selectors():
    ts = {"path": "t.jsonl"}
    out = translate(_with({"buffer.explorer_input.taskset": ts}))
    assert out["data"]["shuffle"] is False  # Trinity-RFT reads the tasks in the file's order
    out = translate(_with({"buffer.explorer_input.taskset": {**ts, "data_selector": {"selector_type": "shuffle"}}}))
    assert out["data"]["shuffle"] is True and out["data"]["seed"] == 42
    out = translate(_with({"buffer.explorer_input.taskset": {**ts, "data_selector": {"selector_type": "random"}}}))
    assert out["data"]["selector"] == {"selector_type": "random", "seed": 42} and "shuffle" not in out["data"]
    line = _refusal({"buffer.explorer_input.taskset": {**ts, "data_selector": {"selector_type": "by_length"}}})
    assert line.startswith("t.yaml: buffer.explorer_input.taskset.data_selector.selector_type='by_length'"), line


def test_replay_buffer_is_rfts_priority_queue():
    exp = {"storage_type": "queue", "replay_buffer": {"enable": True, "priority_fn": "linear_decay",
                                                      "priority_fn_args": {"decay": 0.1}, "reuse_cooldown_time": 5}}
    out = translate(_with({"buffer.trainer_input.experience_buffer": exp}))
    assert out["experience_buffer"]["use_priority_queue"] is True
    assert out["experience_buffer"]["priority_decay"] == 0.1 and out["experience_buffer"]["reuse_cooldown_time"] == 5
    off = translate(_with({"buffer.trainer_input.experience_buffer": {"replay_buffer": {"enable": False}}}))
    assert "use_priority_queue" not in off.get("experience_buffer", {})
    limited = translate(_with({"buffer.trainer_input.experience_buffer": {"replay_buffer": {
        "enable": True, "reuse_cooldown_time": 40, "priority_fn": "decay_limit_randomization"}}}))["experience_buffer"]
    assert (limited["priority_decay"], limited["priority_use_count_limit"], limited["priority_sigma"]) == (2.0, 3, 0.0)
    once = translate(_with({"buffer.trainer_input.experience_buffer": {"replay_buffer": {
        "enable": True, "priority_fn": "decay_limit_randomization",
        "priority_fn_args": {"decay": 1.0, "use_count_limit": 3, "sigma": 2.0}}}}))["experience_buffer"]
    assert once["priority_sigma"] == 2.0 and "priority_use_count_limit" not in once  # no cooldown: read once
    line = _refusal({"buffer.trainer_input.experience_buffer": {
        "replay_buffer": {"enable": True, "priority_fn": "fifo"}}})
    assert "replay_buffer.priority_fn='fifo': rft's priority queue ranks by linear_decay or decay_limit_rand" in line


@pytest.mark.parametrize("style", ["explorer_driven", "dynamic_by_explorer"])
def test_explorer_driven_is_the_fixed_schedule_said_once(style, caplog):
    """explorer_driven's explorer asks for weights every sync_interval of its steps and waits for them: the fixed
    schedule is its case of a trainer keeping pace (the freshest weights it can take), so it resolves with a note."""
    with caplog.at_level(logging.WARNING, logger="rft"):
        out = translate(_with({"synchronizer": {"sync_style": style, "sync_interval": 2, "sync_offset": 1}}), "t.yaml")
    assert out["synchronizer"]["sync_interval"] == 2 and out["synchronizer"]["sync_offset"] == 1
    assert "sync_style" not in out["synchronizer"]
    notes = [line for line in caplog.text.splitlines() if "sync_style" in line]
    assert len(notes) == 1 and f"synchronizer.sync_style={style!r} changes nothing in rft" in notes[0], notes
    assert "waiting until the trainer has trained those batches" in notes[0]


@pytest.mark.parametrize("mode", ["explore", "train", "bench"])
def test_nccl_apart_from_both_is_checkpoint_as_trinity_takes_it(mode, caplog):
    """Trinity-RFT's config check sets sync_method to checkpoint in modes that run the explorer or the trainer
    alone (no process group to broadcast over); rft takes it so, with a note, where it would refuse nccl."""
    with caplog.at_level(logging.WARNING, logger="rft"):
        out = translate(_with({"mode": mode, "synchronizer": {"sync_method": "nccl", "sync_interval": 3}}), "t.yaml")
    assert out["synchronizer"]["sync_method"] == "checkpoint" and out["synchronizer"]["sync_interval"] == 3
    notes = [line for line in caplog.text.splitlines() if "sync_method" in line]
    assert len(notes) == 1 and "synchronizer.sync_method='nccl' is taken as 'checkpoint'" in notes[0], notes
    both = translate(_with({"synchronizer": {"sync_method": "nccl"}}), "t.yaml")
    assert both["synchronizer"]["sync_method"] == "nccl"  # mode both: the two share a process group


def test_an_eval_tasksets_own_columns_are_its_files_own():
    """Each Trinity-RFT taskset reads its own format.prompt_key / response_key: an eval taskset's that differ from
    the training taskset's are its files' own (data.val_prompt_keys / val_response_keys), the training tasks keep
    theirs; one that says what the training tasks say needs nothing of its own."""
    out = translate(_with({"buffer.explorer_input": {
        "taskset": {"path": "t.jsonl", "format": {"prompt_key": "prompt", "response_key": "solution"}},
        "eval_tasksets": [{"path": "a.jsonl", "format": {"prompt_key": "prompt", "response_key": "solution"}},
                          {"path": "b.jsonl", "format": {"prompt_key": "question", "response_key": "answer"}},
                          {"path": "c.jsonl", "format": {"prompt_key": "problem"}}]}}), "t.yaml")
    assert out["data"]["prompt_key"] == "prompt" and out["data"]["response_key"] == "solution"
    assert out["data"]["val_files"] == ["a.jsonl", "b.jsonl", "c.jsonl"]
    assert out["data"]["val_prompt_keys"] == [None, "question", "problem"]
    assert out["data"]["val_response_keys"] == [None, "answer", None]
    same = translate(_with({"buffer.explorer_input": {
        "taskset": {"path": "t.jsonl", "format": {"prompt_key": "q"}},
        "eval_tasksets": [{"path": "a.jsonl", "format": {"prompt_key": "q"}}]}}), "t.yaml")
    assert same["data"]["prompt_key"] == "q" and "val_prompt_keys" not in same["data"]


def test_an_auxiliary_models_trinity_keys_are_rfts_or_noted(caplog):
    """A workflow's auxiliary model (a RULER judge): max_response_tokens is its replies' max_tokens, enable_thinking
    its template's variable; its vLLM engines' placement and window are noted, once each; an unknown key refused."""
    aux = {"model_path": "j", "engine_num": 1, "tensor_parallel_size": 2, "enable_thinking": False,
           "max_prompt_tokens": 12288, "max_response_tokens": 1024, "max_model_len": 16384}
    with caplog.at_level(logging.WARNING, logger="rft"):
        out = translate(_with({"explorer.auxiliary_models": [aux]}), "t.yaml")
    assert out["workflow"]["auxiliary_models"] == [{"model_path": "j", "enable_thinking": False, "max_tokens": 1024}]
    noted = [line for line in caplog.text.splitlines() if "auxiliary_models[0]" in line]
    assert len(noted) == 4 and any("tensor_parallel_size=2 changes nothing" in line for line in noted), noted
    line = _refusal({"explorer.auxiliary_models": [{"model_path": "j", "max_repsonse_tokens": 3}]})
    assert "explorer.auxiliary_models[0].max_repsonse_tokens" in line


# ------------------------------------------------------------------------------------------- refused, by name
@pytest.mark.parametrize("extra, start", [
    ({"synchronizer.sync_style": "trainer_driven"},
     "t.yaml: synchronizer.sync_style='trainer_driven': the trainer hands over its weights"),
    ({"buffer.explorer_input.taskset": {"path": "t.jsonl", "default_workflow_type": "webshop_workflow",
                                        "workflow_args": {"max_env_steps": 30}}},
     "t.yaml: buffer.explorer_input.taskset.default_workflow_type='webshop_workflow': Trinity-RFT's workflow "
     "that runs WebShop's simulated shop: it needs the webshop package"),
    ({"buffer.explorer_input.default_workflow_type": ["math_workflow"],  # a list: a TypeError before
      "buffer.explorer_input.taskset": {"path": "t.jsonl"}},
     "t.yaml: buffer.explorer_input.default_workflow_type=['math_workflow']: a default_workflow_type is a name"),
    ({"buffer.explorer_input.taskset": {"path": "t.jsonl", "default_reward_fn_type": {"math": 1}}},
     "t.yaml: buffer.explorer_input.taskset.default_reward_fn_type={'math': 1}: a default_reward_fn_type is a name"),
])
def test_what_rft_has_not_is_refused_by_the_key_written_with_its_reason(extra, start):
    line = _refusal(extra)
    assert line.startswith(start) and len(line.splitlines()) == 1, line  # one line: the workflow's args not again
    assert "no equivalent in its one-process synchronous loop" not in line and "bug in rft" not in line


def test_every_trinity_key_is_mapped_noted_or_refused_with_a_reason_of_its_own():
    # each key of Trinity-RFT's config classes (trinity_keys.TYPES), set alone on a small config: none reaches the
    # "no reason recorded" line (52 did before: trainer.use_remove_padding, explorer.over_rollout, ...)
    from rft.dialects.trinity_keys import TYPES

    values = {"int": 1, "float": 0.5, "bool": True, "str": "x", None: {}}
    base = {**BASE, "buffer": {"explorer_input": {"taskset": {"path": "t.jsonl"}}}}
    gaps = []
    for place, fields in TYPES.items():
        if "[]" in place or place.startswith("stages"):
            continue  # a list's items: the same tables as the places they mirror
        for key, kind in fields.items():
            cfg = json.loads(json.dumps(base))
            node = cfg
            for part in filter(None, place.replace("*", "sft_dataset").split(".")):
                node = node.setdefault(part, {})
            node[key] = values[(kind or "").rstrip("?") or None]
            try:
                translate(cfg, "t.yaml")
            except ConfigError as e:
                gaps += [line for line in str(e).splitlines() if "bug in rft" in line]
    assert not gaps, gaps


def test_a_tasksets_max_tokens_equal_to_the_runs_response_limit_is_that_limit():
    """Trinity's agentscope_websearch example writes each taskset's rollout_args.max_tokens equal to
    model.max_response_tokens: rft's one limit, the same; another value is refused naming the key."""
    ts = {"path": "t.jsonl", "rollout_args": {"temperature": 1.0, "max_tokens": 4096}}
    out = translate(_with({"model.max_response_tokens": 4096, "buffer.explorer_input.taskset": ts}), "t.yaml")
    assert _get(out, "data.max_response_length") == 4096 and _get(out, "actor_rollout_ref.rollout.temperature") == 1.0
    line = _refusal({"model.max_response_tokens": 2048, "buffer.explorer_input.taskset": ts})
    assert line.startswith("t.yaml: buffer.explorer_input.taskset.rollout_args.max_tokens") and \
        "a max_tokens equal to it is taken as the same limit" in line, line
