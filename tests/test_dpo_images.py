"""DPO on vision-language models (docs/multimodal.md, DPO): preference rows with images through `rft dpo`, the
log-prob of a chosen response against a direct forward with the processor's pixel inputs, and the refusals."""

from __future__ import annotations

import json
import math

import pytest
import torch
from cli_helpers import rft_here
from vision_helpers import png

from rft.data.io import DataError, write_parquet
from rft.data.preference import PreferenceDataset
from rft.models.vision import vision_for
from rft.tasks.shapes import shapes_rows


def shape_pairs(n: int) -> list[dict]:
    """The counting task's rows as preference pairs: the right count chosen, a wrong one rejected."""
    return [{"prompt": r["prompt"], "images": r["images"], "chosen": r["extra_info"]["answer"],
             "rejected": str(int(r["extra_info"]["answer"]) % 4 + 1)} for r in shapes_rows(n, seed=0, split="train")]


def dpo_args(model_dir, train, out, *extra: str) -> list[str]:
    return ["dpo", f"model.partial_pretrain={model_dir}", f"data.train_files={train}", "data.train_batch_size=4",
            "data.micro_batch_size_per_gpu=2", "data.max_length=64", "optim.lr=1e-3", "optim.weight_decay=0.0",
            "trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.logger=[]",
            f"trainer.default_local_dir={out}", *extra]


@pytest.mark.parametrize("family", ["qwen2_vl", "llava"])
def test_dpo_on_images_through_the_cli_trains_the_language_model_and_exports(vlm, tmp_path, family):
    from transformers import AutoModelForImageTextToText

    from rft.models.vision import load_processor

    model_dir = vlm(family)
    write_parquet(shape_pairs(4), tmp_path / "pairs.parquet")
    proc = rft_here(*dpo_args(model_dir, tmp_path / "pairs.parquet", tmp_path / "out"), cwd=tmp_path)
    assert "the vision tower and projector frozen" in proc.stderr
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    losses = [x["train/loss"] for x in lines if "train/loss" in x]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert abs(losses[0] - math.log(2)) < 1e-5  # step 1: the policy is the reference, -log sigmoid(0)
    start = AutoModelForImageTextToText.from_pretrained(model_dir)
    exported = AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "model")
    text = [*start.get_decoder().parameters(), *start.get_output_embeddings().parameters()]
    language = {n for n, p in start.named_parameters() if any(p is q for q in text)}
    after = dict(exported.named_parameters())
    moved = {n for n, p in start.named_parameters() if not torch.equal(p, after[n])}
    assert language and moved == language, f"moved but not language: {moved - language}; stayed: {language - moved}"
    assert type(exported).__name__ == json.loads((model_dir / "config.json").read_text())["architectures"][0]
    assert type(load_processor(tmp_path / "out" / "model")).__name__ == type(vision_for(str(model_dir)).processor).__name__


def _direct_logp(model, vision, messages, image: bytes, response: str) -> torch.Tensor:
    """log p(response + EOS | prompt, image) from one forward of the processor's own inputs for the prompt, the
    response's tokens appended (text token types)."""
    from rft.data.images import decode

    text = vision.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = vision.processor(text=[text], images=[[decode(image)]], return_tensors="pt", add_special_tokens=False)
    tok = vision.tokenizer
    answer = torch.tensor([tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])  # (1, R)
    p_len = inputs["input_ids"].shape[1]
    inputs["input_ids"] = torch.cat([inputs["input_ids"], answer], dim=1)
    for key in ("attention_mask", *vision.token_type_keys):
        if key in inputs:
            fill = torch.ones_like(answer) if key == "attention_mask" else torch.zeros_like(answer)
            inputs[key] = torch.cat([inputs[key], fill], dim=1)
    with torch.no_grad():
        logits = model(**inputs).logits[0, p_len - 1:-1].float()  # (R, V)
    return torch.log_softmax(logits, -1).gather(-1, answer[0][:, None]).sum()


@pytest.mark.parametrize("family", ["qwen2_vl", "gemma3"])
def test_the_dpo_logps_of_a_pair_with_an_image_equal_a_direct_forward_with_its_pixels(vlm, tmp_path, family):
    """The policy's and the reference's sequence log-probs of the chosen and rejected responses (DPOTrainer's
    logps/* and rewards/* metrics, beta = 1) equal a full forward of each model over the processor's inputs for
    the prompt and its picture. The policy is moved off the reference first, so the two differ."""
    from rft.trainer.configure import load_dpo_config
    from rft.trainer.dpo import DPOTrainer

    model_dir = vlm(family)
    image = png((0, 0, 255))
    write_parquet([{"prompt": "<image>How many?", "images": [{"bytes": image}], "chosen": "2", "rejected": "13"}],
                  tmp_path / "pair.parquet")
    cfg = load_dpo_config(None, dpo_args(model_dir, tmp_path / "pair.parquet", tmp_path / "out",
                                         "data.train_batch_size=1", "data.micro_batch_size_per_gpu=1",
                                         "algorithm.beta=1.0")[1:])
    trainer = DPOTrainer(cfg)
    with torch.no_grad():
        weight = trainer.model.get_decoder().layers[0].mlp.down_proj.weight  # Gemma 3 renormalises a scaling
        weight.add_(0.1 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    batch = trainer.train_set.batch([0], trainer.tokenizer.pad_token_id)
    assert batch.images == [[image], [image]]
    with torch.no_grad():
        _, metrics = trainer._pair_losses(batch, trainer._norm(batch, 1), n_pairs=1)
    vision = vision_for(str(model_dir))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]}]
    policy = {r: _direct_logp(trainer.model, vision, messages, image, r) for r in ("2", "13")}
    reference = {r: _direct_logp(trainer.ref_model, vision, messages, image, r) for r in ("2", "13")}
    assert abs(float(policy["2"] - reference["2"])) > 1e-3  # the two models differ
    assert metrics["logps/chosen"] == pytest.approx(float(policy["2"]), abs=1e-5)
    assert metrics["logps/rejected"] == pytest.approx(float(policy["13"]), abs=1e-5)
    assert metrics["rewards/chosen"] == pytest.approx(float(policy["2"] - reference["2"]), abs=1e-5)
    assert metrics["rewards/rejected"] == pytest.approx(float(policy["13"] - reference["13"]), abs=1e-5)


def test_a_pair_whose_placeholders_do_not_match_its_images_is_one_error_naming_the_row(vlm, tmp_path):
    rows = shape_pairs(2)
    rows[1]["prompt"] = [{"role": "user", "content": "<image> or <image>: how many?"}]
    write_parquet(rows, tmp_path / "pairs.parquet")
    proc = rft_here(*dpo_args(vlm("qwen2_vl"), tmp_path / "pairs.parquet", tmp_path / "out"), cwd=tmp_path,
                    check=False)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("rft: error:") and "Traceback" not in proc.stderr
    assert "pairs.parquet row 1: the prompt has 2 <image> placeholder(s) and the row 1 image(s)" in proc.stderr
    assert not (tmp_path / "out" / "model").exists()


def test_pairs_with_images_for_a_text_model_are_refused_not_dropped(tmp_path):
    from omegaconf import OmegaConf

    from rft.models.tiny import build_tokenizer

    write_parquet(shape_pairs(1), tmp_path / "pairs.parquet")
    cfg = OmegaConf.create({"prompt_key": "prompt", "chosen_key": "chosen", "rejected_key": "rejected",
                            "system_prompt_key": None, "system_prompt": None, "image_key": "images",
                            "max_length": 64, "truncation": "error"})
    with pytest.raises(DataError, match=r"row 0: the row has images \('images' or 'videos'\), which DPO on a "
                                        r"text-only model does not take"):
        PreferenceDataset(str(tmp_path / "pairs.parquet"), build_tokenizer(), cfg)


def test_message_list_responses_continue_the_prompt_with_its_image_tokens(vlm, tmp_path):
    """TRL's conversational pairs with an image: the prompt is the processor's (its image expanded), each response
    the assistant turn after it, with loss on its text and EOS (not the template's newline after it)."""
    from omegaconf import OmegaConf

    vision = vision_for(str(vlm("qwen2_vl")))
    write_parquet([{"prompt": [{"role": "user", "content": "count"}], "images": [{"bytes": png()}],
                    "chosen": [{"role": "assistant", "content": "one"}],
                    "rejected": [{"role": "assistant", "content": "four"}]}], tmp_path / "pairs.parquet")
    cfg = OmegaConf.create({"prompt_key": "prompt", "chosen_key": "chosen", "rejected_key": "rejected",
                            "system_prompt_key": None, "system_prompt": None, "image_key": "images",
                            "max_length": 64, "truncation": "error"})
    x = PreferenceDataset(str(tmp_path / "pairs.parquet"), vision.tokenizer, cfg, vision=vision).examples[0]
    decode = vision.tokenizer.decode
    assert decode(x.prompt_ids) == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>count<|im_end|>\n"
                                    "<|im_start|>assistant\n")  # a 40 x 30 picture: one image token
    assert decode(x.chosen_ids) == "one<|im_end|>\n" and decode(x.rejected_ids) == "four<|im_end|>\n"
    masked = [i for i, m in zip(x.chosen_ids, x.chosen_mask) if m]
    assert decode(masked) == "one<|im_end|>" and x.images == [png()]
