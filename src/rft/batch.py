"""`Batch`: the one object that travels through an RL step.

Dimension names used across rft: B rows (= prompts x n), G group size (n), P prompt tokens, R response tokens,
V vocabulary. Prompts are left-padded to P and responses right-padded to R, so `input_ids = cat(prompt, response)`
keeps every response starting at column P.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

_TENSOR_FIELDS = (
    "prompt_ids",
    "prompt_mask",
    "response_ids",
    "response_mask",
    "old_logprobs",
    "ref_logprobs",
    "rollout_logprobs",
    "rollout_versions",
    "values",
    "token_rewards",
    "scores",
    "reward_baselines",
    "ref_kl",
    "teacher_logprobs",
    "teacher_kl",
    "advantages",
    "returns",
    "group",
    "loss_mask",
    "model_version",
    "action_mask",
    "rollout_is_weights",
    "sum_pi_squared",
    "reward_components",
    "expert_mask",
)
_LIST_FIELDS = ("data_source", "ground_truth", "extra_info", "response_text", "raw_prompt", "reward_rows", "images")


@dataclass
class Batch:
    prompt_ids: torch.Tensor  # (B, P) left-padded
    prompt_mask: torch.Tensor  # (B, P) 1 on real prompt tokens
    response_ids: torch.Tensor  # (B, R) right-padded
    response_mask: torch.Tensor  # (B, R) 1 up to and including EOS
    group: torch.Tensor  # (B,) index of the prompt a row came from; rows of a group are adjacent
    old_logprobs: torch.Tensor | None = None  # (B, R)
    ref_logprobs: torch.Tensor | None = None  # (B, R)
    rollout_logprobs: torch.Tensor | None = None  # (B, R) as reported by the rollout engine
    rollout_versions: torch.Tensor | None = None  # (B, R) long: the weight version that drew each token (a streamed
    # row may span several), where the engine records it per token; None: every token is the row's model_version
    values: torch.Tensor | None = None  # (B, R)
    token_rewards: torch.Tensor | None = None  # (B, R)
    scores: torch.Tensor | None = None  # (B,)
    reward_baselines: torch.Tensor | None = None  # (B,) score of a greedy response to the row's prompt (remax)
    ref_kl: torch.Tensor | None = None  # (B, R) per-token KL(policy || ref) from logits (in-reward kl_penalty=full)
    teacher_logprobs: torch.Tensor | None = None  # (B, R) the distillation teacher's log-probs of the sampled tokens
    teacher_kl: torch.Tensor | None = None  # (B, R) the policy's divergence from the teacher (distillation as reward)
    advantages: torch.Tensor | None = None  # (B, R)
    returns: torch.Tensor | None = None  # (B, R)
    loss_mask: torch.Tensor | None = None  # (B, R) tokens that carry loss when not all response tokens do (SFT; RL:
    #                                         the response tokens rollout correction's rejection sampling keeps)
    rollout_is_weights: torch.Tensor | None = None  # (B, R) rollout correction's IS weights pi_old / pi_rollout
    sum_pi_squared: torch.Tensor | None = None  # (B, R) sum_v pi_v^2 of the old policy (optimal token baseline)
    reward_components: torch.Tensor | None = None  # (B, K) per-row reward values of algorithm.gdpo_reward_keys
    model_version: torch.Tensor | None = None  # (B,) long: the weights version that generated each row
    expert_mask: torch.Tensor | None = None  # (B,) bool: expert (SFT) rows of algorithm.mix, which carry the SFT loss
    action_mask: torch.Tensor | None = None  # (B, R) the response tokens the policy wrote (multi-turn: tool turns 0)
    data_source: list[str] = field(default_factory=list)
    ground_truth: list[Any] = field(default_factory=list)
    extra_info: list[dict] = field(default_factory=list)
    response_text: list[str] = field(default_factory=list)
    raw_prompt: list[list[dict]] = field(default_factory=list)  # the prompt's chat messages (reward-model templates)
    reward_rows: list[dict[str, float]] = field(default_factory=list)  # named per-row reward values (extras)
    images: list[list[bytes]] = field(default_factory=list)  # each row's prompt images, encoded (empty: no images)

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    @property
    def input_ids(self) -> torch.Tensor:  # (B, P + R)
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:  # (B, P + R)
        return torch.cat([self.prompt_mask, self.response_mask], dim=1)

    def select(self, index: torch.Tensor | slice | list[int]) -> Batch:
        """Rows `index` of every field (tensors and per-row lists alike)."""
        rows = list(range(len(self)))[index] if isinstance(index, slice) else torch.as_tensor(index).tolist()
        t_index = torch.as_tensor(rows, dtype=torch.long)
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                out[f.name] = None
            elif isinstance(v, torch.Tensor):
                out[f.name] = v.index_select(0, t_index.to(v.device))
            else:
                out[f.name] = [v[i] for i in rows] if v else []
        return Batch(**out)

    def split(self, rows: int) -> Iterator[Batch]:
        """Consecutive chunks of `rows` rows (the last may be shorter)."""
        for start in range(0, len(self), rows):
            yield self.select(slice(start, start + rows))

    def to(self, device: torch.device | str) -> Batch:
        return dataclasses.replace(
            self,
            **{
                f: getattr(self, f).to(device)
                for f in _TENSOR_FIELDS
                if isinstance(getattr(self, f), torch.Tensor)
            },
        )


def concat_batches(batches: list[Batch], pad_token_id: int) -> Batch:
    """The rows of `batches` one after another (DAPO's dynamic sampling gathers several generation batches).

    Prompts are left-padded again to the widest prompt (`pad_token_id`, mask 0); (B, R) tensors are right-padded
    to the widest response (`pad_token_id` for response_ids, 0 elsewhere); group labels are offset so that the
    groups of different batches stay apart (and adjacent rows keep sharing a label). A field must be set in all
    batches or in none.
    """
    out: dict[str, Any] = {}
    offset = 0
    groups = []
    for b in batches:
        groups.append(b.group + offset - (int(b.group.min()) if len(b) else 0))
        offset = int(groups[-1].max()) + 1 if len(b) else offset
    for f in dataclasses.fields(Batch):
        values = [getattr(b, f.name) for b in batches]
        if all(v is None for v in values):
            out[f.name] = None
            continue
        if any(v is None for v in values):
            raise ValueError(f"concat_batches: field {f.name!r} is set in some batches but not in others")
        if f.name == "group":
            out[f.name] = torch.cat(groups)
        elif isinstance(values[0], torch.Tensor):
            if values[0].dim() == 2:
                width = max(v.shape[1] for v in values)
                pad = pad_token_id if f.name in ("prompt_ids", "response_ids") else 0
                left = f.name.startswith("prompt_")
                values = [torch.nn.functional.pad(v, (width - v.shape[1], 0) if left else (0, width - v.shape[1]),
                                                  value=pad) for v in values]
            out[f.name] = torch.cat(values)
        else:
            out[f.name] = [x for v in values for x in v]
    return Batch(**out)
