"""The configs of the offline commands: `rft generate` (verl's generation.yaml keys, main_generation) and `rft eval`
(verl's evaluation.yaml keys, main_eval), same conventions as schema.py. Their checks: rollout/checks.py and rewards/checks.py.

`rft generate` writes the input rows with a `responses` column (a list of n strings per row), which is what
`rft eval` reads (data.response_key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from rft.config.schema import CHAT_TEMPLATE_KWARGS_HELP, DTYPES, CustomRewardConfig, fld, sub

RAY = "rft runs these commands in one process, without Ray"


# ------------------------------------------------------------------------------------------------ generate
@dataclass
class GenerationTrainerConfig:
    nnodes: int = fld(1, "Nodes; rft generate runs one process.", unsupported="several generation processes")
    n_gpus_per_node: int = fld(1, "Processes per node; rft generate runs one process (on cuda:0 when there is "
                                  "one), so verl's default 8 is refused: set 1.",
                               unsupported="several generation processes")
    device: str = fld("auto", "auto (cuda when available), cpu or cuda.", choices=("auto", "cpu", "cuda"))
    seed: int = fld(0, "Seed of the sampling generator (rft's key): the same seed samples the same responses.")


@dataclass
class GenerationDataConfig:
    path: Optional[str] = fld(None, "Prompts: a parquet/jsonl file in verl's row format (required).")
    prompt_key: str = fld("prompt", "Column holding the prompt: a chat message list, or a plain string.")
    n_samples: int = fld(5, "Responses per prompt (> 0).")
    output_path: Optional[str] = fld(
        None, "Where the rows go, with a `responses` column (n_samples strings each): a .parquet file (required, not "
        "data.path), written under a temporary name and renamed, with a record of its inputs. An existing one: "
        "complete when it holds the responses of the same inputs (nothing generated), else refused (another "
        "path, or remove it).")
    batch_size: int = fld(128, "Prompts per generation call (> 0).")
    apply_chat_template_kwargs: Dict[str, Any] = fld({}, CHAT_TEMPLATE_KWARGS_HELP)


@dataclass
class GenerationModelConfig:
    path: Optional[str] = fld(None, "Hugging Face model folder (required), e.g. an rft run's model/ or the folder "
                                    "`rft merge` writes, or a Hub id (org/name, from the local Hugging Face cache).",
                              model="folder")
    external_lib: Optional[str] = fld(None, "Python module imported before loading (registers custom models).")
    trust_remote_code: bool = fld(False, "Allow the model folder's own Python code.")


@dataclass
class GenerationRolloutConfig:
    name: str = fld("hf", "Rollout engine: hf (transformers, KV cache) or vllm (vLLM's engine in this process, "
                          "`make vllm`; text models: docs/rollout.md).", choices=("hf", "vllm"))
    temperature: float = fld(1.0, "Sampling temperature.")
    top_k: int = fld(-1, "Top-k sampling; -1 or 0 disables.")
    top_p: float = fld(1.0, "Nucleus sampling threshold in (0, 1].")
    do_sample: bool = fld(True, "Sample; false is greedy decoding (then n_samples copies of one response).")
    prompt_length: int = fld(1536, "Longest prompt in tokens (after the chat template); a longer one is an error "
                                   "naming the row.")
    response_length: int = fld(512, "Maximum number of generated tokens per response.")
    dtype: str = fld("bfloat16", "The dtype generation computes in (the model is loaded in it). On a CPU a low "
                     "precision is used only where this CPU has the instructions that compute it faster than "
                     "float32 (bf16: AMX-BF16 or AVX512-BF16; else float32, with the reason in the log).",
                     choices=DTYPES)
    micro_batch_size: Optional[int] = fld(None, "Rows per forward pass of the hf engine; null: the whole batch.")
    ignore_eos: bool = fld(False, "Keep generating after EOS up to response_length.")


@dataclass
class GenerationConfig:
    trainer: GenerationTrainerConfig = sub(GenerationTrainerConfig, "Where it runs.")
    data: GenerationDataConfig = sub(GenerationDataConfig, "Prompts in, responses out.")
    model: GenerationModelConfig = sub(GenerationModelConfig, "The model.")
    rollout: GenerationRolloutConfig = sub(GenerationRolloutConfig, "Sampling.")


# ---------------------------------------------------------------------------------------------------- eval
@dataclass
class EvalDataConfig:
    path: Optional[str] = fld(None, "Rows with generated responses: a parquet/jsonl file (required), e.g. what "
                                    "`rft generate` writes.")
    prompt_key: str = fld("prompt", "Column holding the prompt (written beside each row's scores).")
    response_key: str = fld("responses", "Column holding the responses: a list of strings (one string: one "
                                         "response).")
    data_source_key: str = fld("data_source", "Column naming the data source: the scorer and the metric group. "
                                              "With custom_reward_function.path or reward_fn_type, a row without "
                                              "the data_source column is 'unknown', as rft train reads it.")
    reward_model_key: str = fld("reward_model", "Column holding {ground_truth: ...} (a plain value is the ground "
                                                "truth itself).")


@dataclass
class EvalMetricsConfig:
    pass_threshold: float = fld(1.0, "A response passes (pass@k) when its score is >= this (rft's key).")
    k: Optional[List[int]] = fld(None, "The k of pass@k (each 1..n); null: the powers of two below n, and n.")
    output_path: Optional[str] = fld(
        None, "Where the metrics go: a .json file (written under a temporary name and renamed) with, beside it, "
        "<name>.scores.jsonl (each row's prompt, data source and scores); neither may be data.path; null: "
        "<data.path without suffix>.metrics.json.")


@dataclass
class RayInitConfig:
    num_cpus: Optional[int] = fld(None, "Ray's CPUs.", unsupported=RAY)
    timeline_json_file: Optional[str] = fld(None, "Ray's timeline file.", unsupported=RAY)


@dataclass
class EvalConfig:
    data: EvalDataConfig = sub(EvalDataConfig, "The responses and their columns (verl's evaluation.yaml).")
    custom_reward_function: CustomRewardConfig = sub(CustomRewardConfig, "The reward function, as `rft train`'s.")
    metrics: EvalMetricsConfig = sub(EvalMetricsConfig, "pass@k and where the metrics go (rft's keys).")
    ray_init: RayInitConfig = sub(RayInitConfig, "verl's Ray settings.")
