"""The reward pipeline of a generated batch: what turns responses into scores, in one place for the explorer.

score = the reward function's score (a typed reward, built-in rules by data_source, or custom functions combined with
weights), or with a reward model `reward_weight x rm_score + rule_weight x rule_score` (the rule runs only when
rule_weight != 0, the reward model only when reward_weight != 0), plus DAPO's soft overlong penalty when enabled. Each
row also gets its named extra values (a reward function's dict entries, rm_score, rule_score, overlong_reward,
overlong), which the trainer logs as reward_extra/<name>/mean and DAPO's dynamic sampling can filter on.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rft.algorithms import overlong_penalty
from rft.batch import Batch
from rft.rewards.code import runner_from_config
from rft.rewards.combine import build_reward_fn
from rft.rewards.judge import JUDGE, LLMJudge, question_of
from rft.rewards.model import RewardModel
from rft.rewards.scoring import score_responses


class RewardPipeline:
    def __init__(self, reward_fn, reward_model: RewardModel | None = None, reward_weight: float = 1.0,
                 rule_weight: float = 0.0, overlong=None, max_response_length: int = 0):
        """`overlong`: reward_model.overlong_buffer (enable, len, penalty_factor, log) or None."""
        self.reward_fn = reward_fn
        self.reward_model = reward_model
        self.reward_weight, self.rule_weight = reward_weight, rule_weight
        self.overlong = overlong if overlong is not None and overlong.enable else None
        self.max_response_length = max_response_length
        self.judge: LLMJudge | None = None

    def attach_judge(self, judge: LLMJudge) -> None:
        """Score with `judge` (reward_fn_type llm_judge): the batch in one judge call; `reward_fn` is the judge
        for one row (workflows bind the task's question)."""
        self.judge = self.reward_fn = judge

    @classmethod
    def from_config(cls, cfg, tokenizer, dtype: torch.dtype, device: torch.device) -> RewardPipeline:
        """The pipeline of an RL config: custom_reward_function, reward_model (loaded here when enabled)."""
        from rft.rewards.checks import runs_reward_model

        crf, rm = cfg.custom_reward_function, cfg.reward_model
        reward_model = build_reward_model(rm, tokenizer, dtype, device) if runs_reward_model(rm) else None
        # llm_judge: the explorer attaches the judge (`attach_judge`) once its auxiliary models are served
        # verl's prime reward manager scores a row whose function raises or times out 0
        on_error = "zero" if rm.reward_manager == "prime" else crf.on_error
        reward_fn = None if crf.reward_fn_type == JUDGE else build_reward_fn(
            crf.path, crf.name, crf.reward_weights, crf.timeout, on_error, reward_fn_type=crf.reward_fn_type,
            num_workers=crf.num_workers, reward_kwargs=crf.reward_kwargs,
            code_runner=runner_from_config(rm.sandbox_fusion))
        weights = (rm.reward_weight, rm.rule_weight) if rm.enable else (1.0, 0.0)
        return cls(reward_fn, reward_model, *weights, rm.overlong_buffer, cfg.data.max_response_length)

    def score_rows(self, batch: Batch, failures: list[str] | None = None
                   ) -> tuple[list[float], dict[str, list[float]]]:
        """(B scores, per-row extra values) before the overlong penalty; `failures`: see `score_responses`."""
        if self.judge is not None:
            return self.judge.score_batch([question_of(p) for p in batch.raw_prompt], batch.response_text,
                                          batch.ground_truth, batch.data_source)
        if self.reward_model is None and self.reward_weight != 0:  # no reward model: the reward function's score
            return score_responses(self.reward_fn, batch.data_source, batch.response_text, batch.ground_truth,
                                   batch.extra_info, failures)
        # the weighted sum; a reward model of weight 0 is not built, its 0 x score left out
        total, extra = torch.zeros(len(batch.response_text), dtype=torch.float64), {}
        if self.reward_model is not None:
            model_scores = self.reward_model.score(batch).double()
            total, extra = self.reward_weight * model_scores, {"rm_score": model_scores.tolist()}
        if self.rule_weight != 0:
            rule, rule_extra = score_responses(self.reward_fn, batch.data_source, batch.response_text,
                                               batch.ground_truth, batch.extra_info, failures)
            total = total + self.rule_weight * torch.tensor(rule, dtype=torch.float64)
            extra = {**rule_extra, "rule_score": rule, **extra}
        return total.tolist(), extra

    def score(self, batch: Batch, failures: list[str] | None = None) -> dict[str, torch.Tensor]:
        """Set `batch.scores` (B,) and `batch.reward_rows` (each row's extras); returns every per-row value by
        name (B,) for dynamic sampling: the extras, `score` (before the overlong penalty), `seq_reward` and
        `seq_final_reward` (after it; verl's names). `failures`: the messages of the rows whose reward function
        failed and were scored 0 (on_error=zero) are appended to it."""
        scores, extra = self.score_rows(batch, failures)
        raw = torch.tensor(scores, dtype=torch.float32)
        batch.scores = raw
        if self.overlong is not None:  # DAPO's soft overlong punishment, added to the score
            penalty, logged = overlong_punishment(self.overlong, self.max_response_length,
                                                  batch.response_mask.sum(-1))
            batch.scores = raw + penalty
            extra = {**extra, **logged}
        batch.reward_rows = [{k: float(v[i]) for k, v in extra.items()} for i in range(len(batch))]
        return {**{k: torch.tensor(v, dtype=torch.float32) for k, v in extra.items()},
                "score": raw, "seq_reward": batch.scores, "seq_final_reward": batch.scores}


def overlong_punishment(ob, max_response_length: int,
                        lengths: torch.Tensor) -> tuple[torch.Tensor, dict[str, list[float]]]:
    """DAPO's soft overlong punishment (`ob`: reward_model.overlong_buffer) of responses of `lengths` tokens, added to
    their scores, and with overlong_buffer.log its parts by name (overlong_reward, overlong: penalised or not)."""
    penalty = overlong_penalty(lengths, max_response_length, ob.len, ob.penalty_factor)
    logged = {"overlong_reward": penalty.tolist(), "overlong": (penalty < 0).float().tolist()} if ob.log else {}
    return penalty, logged


def build_reward_model(rm, tokenizer, dtype: torch.dtype, device: torch.device) -> RewardModel:
    """The reward model of the `reward_model` config section; its vocabulary must be the policy's (`tokenizer`)
    unless `model.input_tokenizer` re-templates the conversation."""
    from rft.errors import ModelError
    from rft.models.load import load_reward_model, load_tokenizer

    input_tokenizer = load_tokenizer(rm.model.input_tokenizer) if rm.model.input_tokenizer else None
    rm_tokenizer = None
    if input_tokenizer is not None or (Path(rm.model.path) / "tokenizer_config.json").is_file():
        rm_tokenizer = load_tokenizer(rm.model.path, rm.model.trust_remote_code)
    if input_tokenizer is None and rm_tokenizer is not None and rm_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ModelError(f"reward_model.model.path={rm.model.path!r}: its vocabulary differs from the policy's; "
                         "set reward_model.model.input_tokenizer to the policy's tokenizer folder to re-tokenize")
    # the ids it reads: its own tokenizer's where it re-tokenizes, else the policy's
    model = load_reward_model(rm.model.path, dtype, device, external_lib=rm.model.external_lib,
                              trust_remote_code=rm.model.trust_remote_code, tokenizer=rm_tokenizer or tokenizer)
    return RewardModel(model, rm_tokenizer, input_tokenizer, rm.micro_batch_size_per_gpu, rm.max_length)
