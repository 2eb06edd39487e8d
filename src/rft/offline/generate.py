"""`rft generate`: n responses per prompt of a parquet / jsonl file with a model folder (verl's main_generation).

The prompts go through the chat template and the length check of training (`PromptDataset`), the responses come
from the engine rollout.name names (`hf`, or `vllm`: vLLM's engine in this process, serving the folder's weights
without a transformers copy beside them), `rollout_batch` as in validation; the output is the input rows with a `responses` column (a
list of n strings), written under a temporary name and renamed, which `rft eval` reads. What it was made from
(`inputs_of`: the config, data.path's bytes, the model folder) is recorded in the parquet's metadata
(`rft.offline.record`), so that the same command again says the output is complete and generates nothing, and a
rerun with other inputs is refused instead of replacing it (`check_earlier_output`). One run writes an output at a
time (`fsutil.sole_writer`): a second into the same file while the first runs is refused, naming the first.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from rft.config.offline_schema import GenerationConfig
from rft.console import counted

RESPONSES = "responses"
RECORD_KEY = b"rft.generate"
"""The parquet schema metadata key of the record of what the output was made from."""


def inputs_of(cfg: GenerationConfig) -> dict[str, str]:
    """The record of what `cfg` generates from (`rft.offline.record`): every key but data.output_path (the seed, the
    sampling, the batch sizes: each can change a response), data.path and model.path resolved, and their contents."""
    from rft.offline.record import CONTENTS, file_digest, folder_digest, resolved

    flat = _flat(asdict(cfg))
    del flat["data.output_path"]
    flat["data.path"], flat["model.path"] = resolved(cfg.data.path), resolved(cfg.model.path)
    flat["data.path" + CONTENTS] = file_digest(cfg.data.path)
    flat["model.path" + CONTENTS] = folder_digest(cfg.model.path)
    return flat


def _flat(sections: dict) -> dict[str, str]:
    """{section: {key: value}} as a record's labels ('rollout.temperature') and strings (JSON but for strings)."""
    return {f"{section}.{key}": value if isinstance(value, str) else json.dumps(value)
            for section, values in sections.items() for key, value in values.items()}


def key_defaults() -> dict[str, str]:
    """Every key's default, spelled as `inputs_of` spells values."""
    return _flat(asdict(GenerationConfig()))


def recorded_inputs(path: Path) -> dict | None:
    """The record an `rft generate` output holds; None for a file without one (not rft generate's, or an older
    rft's) or one that is no parquet."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
        record = json.loads(metadata[RECORD_KEY])
    except Exception:  # not a parquet, no record, a damaged one: none to trust
        return None
    return record if isinstance(record, dict) else None


def check_earlier_output(cfg: GenerationConfig, inputs: dict[str, str]) -> bool:
    """Whether data.output_path already holds the responses of `inputs` (then said in one line); an output of
    other inputs, or a file rft generate recorded nothing in, is refused (RftError) naming what changed."""
    import pyarrow.parquet as pq

    from rft.errors import RftError
    from rft.offline.record import changes

    out = Path(cfg.data.output_path).expanduser()
    if not out.exists():
        return False
    where = f"data.output_path {cfg.data.output_path!r}"
    recorded = recorded_inputs(out)
    if recorded is None:
        raise RftError(f"{where} exists and holds no record of what rft generate made it from (a file of yours, or "
                       "one an older rft wrote), which generating would replace; name another data.output_path, or "
                       "remove it to generate again")
    changed = changes(recorded, inputs, key_defaults())
    if changed:
        raise RftError(f"{where} holds the responses of other inputs ({'; '.join(changed)}), which generating would "
                       "replace; name another data.output_path, or remove it to generate again")
    rows = pq.read_metadata(out).num_rows
    print(f"rft generate: {where} already holds the responses of these inputs ({counted(rows, 'prompt')} x "
          f"{counted(cfg.data.n_samples, 'response')}; the same data.path, model.path and keys): nothing generated "
          "(remove it to generate again)", flush=True)
    return True


def run_generate(cfg: GenerationConfig) -> Path:
    from rft.errors import RftError
    from rft.fsutil import output_problem, sole_writer
    from rft.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    d = cfg.data
    problem = output_problem(d.output_path, folder=False)
    if problem:
        raise RftError(f"data.output_path: {problem}")
    inputs = inputs_of(cfg)  # before the work: a data.path or model changed meanwhile is not recorded as used
    # one writer of the output from its check to its rename: a second generate into it at once is refused
    with sole_writer(Path(d.output_path).expanduser(), "rft generate", file_key="data.output_path"):
        if check_earlier_output(cfg, inputs):
            return Path(d.output_path)
        return _generate(cfg, inputs)


def _generate(cfg: GenerationConfig, inputs: dict[str, str]) -> Path:
    """The responses of `cfg`, written to data.output_path with the record of `inputs`."""
    from rft.data.dataset import PromptDataset
    from rft.data.io import read_rows, write_parquet
    from rft.explorer.evaluate import rollout_batch
    from rft.models.checks import check_generation_positions
    from rft.models.load import compute_dtype, load_causal_lm, load_tokenizer, resolve_device
    from rft.models.vision import vision_for
    from rft.rollout import HFRollout, SamplingParams
    from rft.rollout.base import eos_token_ids

    d, r, m = cfg.data, cfg.rollout, cfg.model
    start = time.perf_counter()
    device = resolve_device(cfg.trainer.device)
    dtype = compute_dtype(r.dtype, device, m.path, "rollout.dtype")
    tokenizer = load_tokenizer(m.path, m.trust_remote_code)
    rows = read_rows(d.path, key="data.path")
    # every row in order (no filtering: the output keeps the input's rows); a prompt over the limit names its row;
    # a vision-language model's rows may hold images (the `images` column, as rft train's data.image_key default)
    prompts = PromptDataset([(d.path, rows)], tokenizer, prompt_key=d.prompt_key, max_prompt_length=r.prompt_length,
                            template_kwargs=d.apply_chat_template_kwargs, vision=vision_for(m.path, "model"),
                            length_key="rollout.prompt_length")
    check_generation_positions(m.path, prompts, r.response_length)
    if r.name == "vllm":
        rollout = _vllm_engine(cfg, tokenizer, dtype, max(len(p.ids) for p in prompts) if len(prompts) else 1)
    else:
        model = load_causal_lm(m.path, dtype, device, external_lib=m.external_lib,
                               trust_remote_code=m.trust_remote_code, key="model", tokenizer=tokenizer)
        model.eval()
        rollout = HFRollout(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id, r.micro_batch_size)
    params = SamplingParams(n=d.n_samples, temperature=r.temperature, top_k=r.top_k, top_p=r.top_p,
                            do_sample=r.do_sample, max_tokens=r.response_length, ignore_eos=r.ignore_eos)
    generator = torch.Generator().manual_seed(cfg.trainer.seed)
    responses: list[list[str]] = []
    with torch.no_grad():
        for first in range(0, len(prompts), d.batch_size):
            chunk = [prompts[i] for i in range(first, min(first + d.batch_size, len(prompts)))]
            texts = rollout_batch(rollout, tokenizer, chunk, params, generator).response_text
            responses += [texts[i:i + d.n_samples] for i in range(0, len(texts), d.n_samples)]
            print(f"rft generate: {len(responses)}/{len(prompts)} prompts", flush=True)
    out = write_parquet([{**row, RESPONSES: texts} for row, texts in zip(rows, responses)], d.output_path,
                        metadata={RECORD_KEY: json.dumps(inputs)})
    print(f"rft generate: {counted(len(rows), 'prompt')} x {counted(d.n_samples, 'response')} in {time.perf_counter() - start:.1f} s -> "
          f"{out}", flush=True)
    return out


def _vllm_engine(cfg: GenerationConfig, tokenizer, dtype: torch.dtype, longest_prompt: int):
    """vLLM's engine over model.path's own weights (no transformers copy: nothing is trained), its cache sized for
    one generation call (data.batch_size prompts x n_samples rows of the longest prompt + response_length)."""
    from types import SimpleNamespace

    from transformers import GenerationConfig as HFGenerationConfig

    from rft.config.checks import read_config_json
    from rft.rollout.base import eos_token_ids
    from rft.rollout.vllm_engine import VLLMOptions, VLLMRollout

    d, r, m = cfg.data, cfg.rollout, cfg.model
    if m.external_lib:
        import importlib

        importlib.import_module(m.external_lib)
    config = read_config_json(Path(m.path), m.trust_remote_code)
    try:  # the EOS ids as the loaded model's generation config holds them
        generation = HFGenerationConfig.from_pretrained(m.path)
    except OSError:
        generation = HFGenerationConfig.from_model_config(config)
    length = longest_prompt + r.response_length
    options = VLLMOptions(dtype=str(dtype).removeprefix("torch."), seed=cfg.trainer.seed, max_model_len=length,
                          kv_cache_tokens=d.batch_size * d.n_samples * length,
                          engine_kwargs={"trust_remote_code": True} if m.trust_remote_code else {})
    eos = eos_token_ids(SimpleNamespace(generation_config=generation), tokenizer)
    return VLLMRollout(None, m.path, eos, tokenizer.pad_token_id, options, config=config)
