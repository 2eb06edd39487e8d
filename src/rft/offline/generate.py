"""`rft generate`: n responses per prompt of a parquet / jsonl file with a model folder (verl's main_generation).

The prompts go through the chat template and the length check of training (`PromptDataset`), the responses come
from the `hf` engine, `rollout_batch` as in validation; the output is the input rows with a `responses` column (a
list of n strings), written under a temporary name and renamed, which `rft eval` reads.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rft.config.offline_schema import GenerationConfig
from rft.console import counted

RESPONSES = "responses"


def run_generate(cfg: GenerationConfig) -> Path:
    from rft.data.dataset import PromptDataset
    from rft.data.io import read_rows, write_parquet
    from rft.errors import RftError
    from rft.explorer.evaluate import rollout_batch
    from rft.fsutil import output_problem
    from rft.models.checks import check_generation_positions
    from rft.models.load import compute_dtype, load_causal_lm, load_tokenizer, resolve_device
    from rft.rollout import HFRollout, SamplingParams
    from rft.rollout.base import eos_token_ids
    from rft.runtime import configure_cpu_runtime

    configure_cpu_runtime()
    d, r, m = cfg.data, cfg.rollout, cfg.model
    problem = output_problem(d.output_path, folder=False)
    if problem:
        raise RftError(f"data.output_path: {problem}")
    start = time.perf_counter()
    device = resolve_device(cfg.trainer.device)
    dtype = compute_dtype(r.dtype, device)
    tokenizer = load_tokenizer(m.path, m.trust_remote_code)
    rows = read_rows(d.path, key="data.path")
    # every row in order (no filtering: the output keeps the input's rows); a prompt over the limit names its row
    prompts = PromptDataset([(d.path, rows)], tokenizer, prompt_key=d.prompt_key, max_prompt_length=r.prompt_length)
    check_generation_positions(m.path, prompts, r.response_length)
    model = load_causal_lm(m.path, dtype, device, external_lib=m.external_lib, trust_remote_code=m.trust_remote_code,
                           key="model", tokenizer=tokenizer)
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
    out = write_parquet([{**row, RESPONSES: texts} for row, texts in zip(rows, responses)], d.output_path)
    print(f"rft generate: {counted(len(rows), 'prompt')} x {counted(d.n_samples, 'response')} in {time.perf_counter() - start:.1f} s -> "
          f"{out}", flush=True)
    return out
