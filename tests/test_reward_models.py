"""Reward models of several transformers families, built offline with tiny random configs, as a verl user brings
them: each scores prompt + response as transformers' own forward pass reads its last token; a folder that is not a
one-label reward model (a causal LM, a 2- or 3-label classifier) and a GPT-2 whose learned position table is shorter
than the run's inputs are refused in one line before anything loads."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
import transformers as T
from rl_helpers import make_assets, rl_config

from rft.config import ConfigError
from rft.models.load import load_reward_model
from rft.rewards.model import RewardModel

os.environ["HF_HUB_OFFLINE"] = "1"

SIZES = dict(vocab_size=275, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
             intermediate_size=32, pad_token_id=272)
FAMILIES = {
    "qwen2": lambda n: T.Qwen2ForSequenceClassification(T.Qwen2Config(**SIZES, num_labels=n)),
    "llama": lambda n: T.LlamaForSequenceClassification(T.LlamaConfig(**SIZES, num_labels=n)),
    "mistral": lambda n: T.MistralForSequenceClassification(T.MistralConfig(**SIZES, num_labels=n)),
    "gemma": lambda n: T.GemmaForSequenceClassification(T.GemmaConfig(**SIZES, head_dim=8, num_labels=n)),
    "gemma2": lambda n: T.Gemma2ForSequenceClassification(T.Gemma2Config(**SIZES, head_dim=8, num_labels=n)),
    "gemma3_text": lambda n: T.Gemma3ForSequenceClassification(T.Gemma3TextConfig(**SIZES, head_dim=8, num_labels=n)),
    # GPT-2 without a pad token (transformers' own pooling of a padded batch needs one; rft's reads the last real one)
    "gpt2": lambda n: T.GPT2ForSequenceClassification(T.GPT2Config(vocab_size=275, n_embd=16, n_layer=1, n_head=2,
                                                                   n_positions=64, num_labels=n, pad_token_id=None)),
}


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    return make_assets(tmp_path_factory.mktemp("rm_assets"))


def save_rm(assets: Path, family: str, num_labels: int = 1) -> Path:
    """A random reward model of `family` with the tiny policy's tokenizer, saved once per (family, labels)."""
    out = assets / f"rm_{family}_{num_labels}"
    if not out.is_dir():
        torch.manual_seed(0)
        FAMILIES[family](num_labels).save_pretrained(out)
        for f in (assets / "model").iterdir():
            if f.name.startswith(("tokenizer", "vocab", "merges", "special")):
                shutil.copy(f, out / f.name)
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_scores_as_its_own_forward_pass_reads_the_last_token(assets, family):
    model = load_reward_model(str(save_rm(assets, family)), torch.float32, torch.device("cpu"))
    rows = [[5, 6, 7, 8, 9, 10], [11, 12, 13], list(range(20, 31))]  # ragged: right padding inside a micro-batch
    scorer = RewardModel(model, micro_rows=2)
    scorer.inputs = lambda batch: rows
    expected = torch.tensor([float(model(input_ids=torch.tensor([r])).logits[0, 0]) for r in rows])
    assert torch.allclose(scorer.score(None), expected, atol=1e-5)


def refusal(assets: Path, tmp_path: Path, *overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        rl_config(assets, tmp_path, "reward_model.enable=true", "reward_model.rule_weight=1.0", *overrides)
    return str(err.value)


def test_a_folder_that_is_not_a_one_label_reward_model_is_refused_before_it_loads(assets, tmp_path):
    said = refusal(assets, tmp_path, f"reward_model.model.path={assets / 'model'}")
    assert "is a generative model (Qwen2ForCausalLM), not a reward model" in said
    assert "AutoModelForSequenceClassification" in said
    for labels in (2, 3):  # transformers 5 writes no id2label for the default 2 labels: counted all the same
        said = refusal(assets, tmp_path, f"reward_model.model.path={save_rm(assets, 'qwen2', labels)}")
        assert f"is a classifier with {labels} labels" in said and "num_labels=1" in said


def test_a_learned_position_table_shorter_than_the_inputs_is_refused(assets, tmp_path):
    path = f"reward_model.model.path={save_rm(assets, 'gpt2')}"
    said = refusal(assets, tmp_path, path, "data.max_response_length=40")  # 32 + 40 = 72 > 64
    assert "32 + 40 = 72 tokens, more than the 64 positions" in said and "set reward_model.max_length=64" in said
    said = refusal(assets, tmp_path, path, "reward_model.max_length=100")
    assert "reward_model.max_length=100 is more than the 64 positions" in said
    said = refusal(assets, tmp_path, path, f"reward_model.model.input_tokenizer={assets / 'model'}")
    assert "re-templates" in said and "set reward_model.max_length=64" in said
    # what fits: the default lengths (32 + 6), or any input cut to the table
    rl_config(assets, tmp_path, "reward_model.enable=true", "reward_model.rule_weight=1.0", path)
    rl_config(assets, tmp_path, "reward_model.enable=true", "reward_model.rule_weight=1.0", path,
              "data.max_response_length=40", "reward_model.max_length=64")


def test_verls_documented_fsdp_block_is_accepted_and_a_real_one_refused(assets, tmp_path, caplog):
    """verl's reference config writes reward_model.model.fsdp_config {min_num_params: 0, param_offload: False}: what
    rft does anyway (a whole copy per process), so a pasted verl config runs; an offload (GPU memory between passes,
    the same scores) is accepted with a note; sharding the reward model is refused."""
    path = f"reward_model.model.path={save_rm(assets, 'qwen2')}"
    for block in ("{min_num_params: 0, param_offload: false}", "{param_offload: false}", "{param_offload: true}"):
        rl_config(assets, tmp_path, "reward_model.enable=true", "reward_model.rule_weight=1.0", path,
                  f"reward_model.model.fsdp_config={block}")
    assert "reward_model.model.fsdp_config.param_offload" in caplog.text and "rft: note:" in caplog.text
    said = refusal(assets, tmp_path, path, "reward_model.model.fsdp_config={fsdp_size: 2}")
    assert "reward_model.model.fsdp_config" in said and "fsdp_size" in said


def test_an_external_lib_that_does_not_import_is_one_line_naming_the_key(assets):
    from rft.errors import ModelError

    with pytest.raises(ModelError) as err:
        load_reward_model(str(save_rm(assets, "qwen2")), torch.float32, torch.device("cpu"),
                          external_lib="rft_no_such_module")
    assert str(err.value).startswith("reward_model.model.external_lib='rft_no_such_module' does not import "
                                     "(ModuleNotFoundError: No module named 'rft_no_such_module')")


def test_retemplating_needs_the_reward_models_tokenizer_and_its_chat_template(assets, tmp_path):
    """reward_model.model.input_tokenizer re-tokenizes each conversation with the reward model's own tokenizer and
    chat template: a folder without either failed in the first step, after the policy loaded, as 'unexpected
    ValueError ... a bug in rft'."""
    rm = save_rm(assets, "llama")
    policy = f"reward_model.model.input_tokenizer={assets / 'model'}"
    bare = tmp_path / "rm_without_tokenizer"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(rm / name, bare / name)
    said = refusal(assets, tmp_path, f"reward_model.model.path={bare}", policy)
    assert f"reward_model.model.path='{bare}' has no tokenizer" in said and "input_tokenizer to null" in said
    untemplated = tmp_path / "rm_without_template"
    shutil.copytree(rm, untemplated)
    tok = T.AutoTokenizer.from_pretrained(untemplated)
    tok.chat_template = None
    for f in untemplated.glob("chat_template*"):
        f.unlink()
    tok.save_pretrained(untemplated)
    assert not list(untemplated.glob("chat_template*"))
    said = refusal(assets, tmp_path, f"reward_model.model.path={untemplated}", policy)
    assert "the reward model's tokenizer has no chat template" in said
    rl_config(assets, tmp_path, "reward_model.enable=true", "reward_model.rule_weight=1.0",
              f"reward_model.model.path={rm}", policy)  # the policy's tokenizer files, with its chat template


def test_a_reward_model_folder_with_no_lm_head_is_refused_as_a_causal_lm(assets):
    """A reward model's folder given as the policy or a judge (workflow.auxiliary_models) loaded as a causal LM with
    a randomly initialised LM head (Llama's is untied), training or judging on noise without an error."""
    from rft.errors import ModelError
    from rft.models.load import load_causal_lm

    rm = save_rm(assets, "llama")
    with pytest.raises(ModelError) as err:
        load_causal_lm(str(rm), torch.float32, torch.device("cpu"), key="workflow.auxiliary_models[0]")
    assert str(err.value).startswith(f"workflow.auxiliary_models[0].model_path='{rm}' is "
                                     "LlamaForSequenceClassification (model_type 'llama'), a reward or value model")
    assert "tie_word_embeddings is false" in str(err.value)


def test_a_tied_reward_model_folder_is_refused_as_a_causal_lm_too(assets, tmp_path, capsys):
    """A reward model whose LM head is tied to its embeddings (Gemma's config, rft's tiny-rm) passed as a causal LM:
    it loads without a random weight and generates from layers trained to score. Refused as the untied one is, by
    the load every causal LM goes through (the policy's, a judge's) and through rft train, before its weights load."""
    from rft.cli import main
    from rft.errors import ModelError
    from rft.models.load import load_causal_lm
    from rft.models.tiny import init_model

    gemma = save_rm(assets, "gemma")
    assert T.AutoConfig.from_pretrained(gemma).tie_word_embeddings
    with pytest.raises(ModelError) as err:
        load_causal_lm(str(gemma), torch.float32, torch.device("cpu"))
    assert str(err.value) == (
        f"actor_rollout_ref.model.path='{gemma}' is GemmaForSequenceClassification (model_type 'gemma'), "
        "a reward or value model: its weights hold a score head, not the LM head a causal LM generates with "
        "(tie_word_embeddings is true: it would be the embeddings, read through layers trained to score); point it "
        "at a causal LM folder (the model the reward model was trained from, or a generative judge)")
    rm = init_model("tiny-rm", tmp_path / "rm", seed=0)
    code = main(["train", f"actor_rollout_ref.model.path={rm}", f"data.train_files={assets / 'data' / 'train.parquet'}",
                 "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=2",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
                 "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.logger=[]",
                 f"trainer.default_local_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert (f"rft: error: actor_rollout_ref.model.path='{rm}' is Qwen2ForSequenceClassification (model_type "
            "'qwen2'), a reward or value model") in err, err
