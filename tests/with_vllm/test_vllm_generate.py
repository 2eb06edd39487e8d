"""`rft generate` on vLLM (`rollout.name: vllm`): the responses the hf engine gives greedily, sampled ones repeated
by the seed, and the output's record naming the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.cli import main
from rft.data.io import read_rows
from rft.models.tiny import init_model


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("vllm_generate")
    model = init_model("tiny", root / "tiny", seed=0)
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": q}], "data_source": "arithmetic"})
                               + "\n" for q in ("12+7=", "3+45=", "60+31=")))
    return Path(model), prompts


def _generate(assets, out: Path, *extra: str) -> list[list[str]]:
    model, prompts = assets
    assert main(["generate", f"data.path={prompts}", f"model.path={model}", f"data.output_path={out}",
                 "data.n_samples=2", "data.batch_size=2", "rollout.prompt_length=64", "rollout.response_length=8",
                 "rollout.dtype=float32", "rollout.ignore_eos=true", *extra]) == 0
    return [row["responses"] for row in read_rows(out)]


def test_rft_generate_on_vllm_writes_the_hf_engines_greedy_responses(assets, tmp_path, capsys):
    greedy = ("rollout.do_sample=false",)
    on_vllm = _generate(assets, tmp_path / "vllm.parquet", "rollout.name=vllm", *greedy)
    on_hf = _generate(assets, tmp_path / "hf.parquet", *greedy)
    assert on_vllm == on_hf and len(on_vllm) == 3 and all(len(r) == 2 and r[0] for r in on_vllm)
    capsys.readouterr()
    # the engine is one of the inputs the output records: the same command is complete, the other engine another
    _generate(assets, tmp_path / "vllm.parquet", "rollout.name=vllm", *greedy)
    assert "already holds the responses of these inputs" in capsys.readouterr().out
    model, prompts = assets
    assert main(["generate", f"data.path={prompts}", f"model.path={model}", f"data.output_path={tmp_path / 'vllm.parquet'}",
                 "data.n_samples=2", "data.batch_size=2", "rollout.prompt_length=64", "rollout.response_length=8",
                 "rollout.dtype=float32", "rollout.ignore_eos=true", *greedy]) == 2
    assert "rollout.name" in capsys.readouterr().err


def test_rft_generate_on_vllm_samples_by_the_seed(assets, tmp_path):
    first = _generate(assets, tmp_path / "a.parquet", "rollout.name=vllm", "trainer.seed=3")
    again = _generate(assets, tmp_path / "b.parquet", "rollout.name=vllm", "trainer.seed=3")
    other = _generate(assets, tmp_path / "c.parquet", "rollout.name=vllm", "trainer.seed=4")
    assert first == again and first != other
