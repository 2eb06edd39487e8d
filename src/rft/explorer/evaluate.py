"""Held-out evaluation: generate for every prompt of a dataset and score with the reward function.

Used by the RL loop's validation, by `rft demo` and after each stage of a staged run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from rft.batch import Batch
from rft.data.dataset import Prompt, PromptDataset, left_pad
from rft.experience import Experience
from rft.rewards import score_responses
from rft.rewards.scoring import FAILED, UNSCORED_VALIDATION, UNTRAINED_STEP, report_failures
from rft.rollout import HFRollout, SamplingParams
from rft.rollout.base import RolloutOutput, eos_token_ids  # noqa: F401  (eos_token_ids: public here before it moved down)


def rollout_batch(rollout: HFRollout, tokenizer, prompts: list[Prompt], params: SamplingParams,
                  generator: torch.Generator | None) -> Batch:
    """Generate `params.n` responses for each of `prompts`; rows of one prompt are adjacent."""
    prompt_ids, prompt_mask = left_pad([p.ids for p in prompts], tokenizer.pad_token_id)
    images = [p.images for p in prompts] if any(p.images for p in prompts) else None
    out = (rollout.generate(prompt_ids, prompt_mask, params, generator) if images is None
           else rollout.generate(prompt_ids, prompt_mask, params, generator, images=images))
    return output_batch(tokenizer, prompts, out, params.n)


def output_batch(tokenizer, prompts: list[Prompt], out: RolloutOutput, n: int) -> Batch:
    """The `Batch` of `out`, `n` responses to each of `prompts` (rows of one prompt adjacent)."""
    prompt_ids, prompt_mask = left_pad([p.ids for p in prompts], tokenizer.pad_token_id)
    images = [p.images for p in prompts] if any(p.images for p in prompts) else None
    rep = lambda xs: [x for x in xs for _ in range(n)]
    return Batch(
        prompt_ids=prompt_ids.repeat_interleave(n, 0), prompt_mask=prompt_mask.repeat_interleave(n, 0),
        response_ids=out.response_ids, response_mask=out.response_mask, rollout_logprobs=out.logprobs,
        rollout_versions=out.versions,
        group=torch.arange(len(prompts)).repeat_interleave(n),
        data_source=rep([p.data_source for p in prompts]), ground_truth=rep([p.ground_truth for p in prompts]),
        extra_info=rep([p.extra_info for p in prompts]), raw_prompt=rep([p.messages for p in prompts]),
        response_text=tokenizer.batch_decode(
            [ids[m.bool()].tolist() for ids, m in zip(out.response_ids, out.response_mask)],
            skip_special_tokens=True),
        images=rep(images) if images is not None else [],
    )


@torch.no_grad()
def evaluate(rollout: HFRollout, tokenizer, dataset: PromptDataset, reward_fn, params: SamplingParams,
             chunk: int | None = None, seed: int = 0,
             scorer: Callable[[Batch, list[str]], tuple[list[float], dict[str, list[float]]]] | None = None,
             indices: list[int] | None = None,
             keep: int | None = None,
             gather: Callable[[object], list] | None = None) -> tuple[dict[str, float], list[dict]]:
    """(`val-core/<data_source>/reward/mean@<n>` metrics, per-response samples) over the whole dataset.

    Sampling (if any) draws from a generator seeded here, so evaluation never shifts a training stream. `scorer`,
    when given, scores each generated Batch instead of `reward_fn` (the RL trainer's rule + reward-model scores:
    `RewardPipeline.score_rows`). Rows whose reward failed and were scored 0 (custom_reward_function.on_error=zero)
    are counted in one warning; a validation whose every row failed raises RewardError (`report_failures`): its
    0 would read as the model's score.
    Several processes: each generates for its `indices` of the dataset (default: all), of which the first `keep`
    are real (the rest pads every rank to the same number of forward passes), and `gather` (every rank's object,
    in rank order) joins the ranks' results before the metrics.
    """
    generator = torch.Generator().manual_seed(seed)
    indices = list(range(len(dataset))) if indices is None else indices
    keep = len(indices) if keep is None else keep
    chunk = chunk or len(indices)
    sources, scores, samples, failed, failures = [], [], [], [], []
    for start in range(0, len(indices), chunk):
        batch = rollout_batch(rollout, tokenizer, [dataset[i] for i in indices[start:start + chunk]], params,
                              generator)
        if scorer is not None:
            s, extras = scorer(batch, failures)
        else:
            s, extras = score_responses(reward_fn, batch.data_source, batch.response_text, batch.ground_truth,
                                        batch.extra_info, failures)
        real = min(max(keep - start, 0), len(batch) // params.n) * params.n  # rows of real prompts
        sources += batch.data_source[:real]
        scores += s[:real]
        failed += extras.get(FAILED, [])[:real]
        samples += [{"prompt": tokenizer.decode(p[m.bool()].tolist()), "response": r, "score": x}
                    for p, m, r, x in zip(batch.prompt_ids[:real], batch.prompt_mask[:real],
                                          batch.response_text[:real], s[:real])]
    if gather is not None:
        parts = gather((sources, scores, samples, failed, failures[:1]))
        sources, scores, samples, failed, failures = ([x for part in parts for x in part[i]] for i in range(5))
    report_failures(int(sum(failed)), len(scores), next(iter(failures), None), "validation",
                    without=UNSCORED_VALIDATION)
    metrics = {}
    for source in sorted(set(sources)):
        values = [x for x, src in zip(scores, sources) if src == source]
        metrics[f"val-core/{source}/reward/mean@{params.n}"] = float(np.mean(values))
    return metrics, samples


def report_task_failures(tasks: list, experiences: list[Experience], where: str,
                         without: str = UNTRAINED_STEP) -> None:
    """`report_failures` over the responses a workflow gave `tasks` (`experiences`): those its reward scored 0
    under on_error=zero (their `reward_failed`), the first failure as the tasks recorded it (`Task.reward_failures`);
    every response failed: RewardError."""
    failures = [message for task in tasks for message in task.reward_failures]
    report_failures(sum(1 for e in experiences if e.rewards.get(FAILED)), len(experiences), next(iter(failures), None),
                    where, without=without)


def validation_metrics(tasks: list, results: list[list[Experience]], n: int,
                       prompt_of) -> tuple[dict[str, float], list[dict]]:
    """(val-core/<data_source>/reward/mean@n, samples) of the experiences each task's workflow returned, `results`
    (a task with none, skipped or failed, scores 0 for each of its n responses); `prompt_of(task)`: a sample's
    prompt."""
    by_source: dict[str, list[float]] = {}
    samples = []
    for task, experiences in zip(tasks, results):
        by_source.setdefault(task.prompt.data_source, []).extend([e.reward for e in experiences] or [0.0] * n)
        samples += [{"prompt": prompt_of(task), "response": e.info.get("response_text", ""), "score": e.reward}
                    for e in experiences]
    return {f"val-core/{src}/reward/mean@{n}": float(np.mean(v)) for src, v in sorted(by_source.items())}, samples
