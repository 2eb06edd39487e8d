"""`Experience`: what an explorer writes and a trainer reads, one response to one task.

An experience is one token sequence, the prompt followed by the response, with what the trainer needs to learn from
it without asking how it was produced: which response tokens the policy wrote (`action_mask`; tool results and
environment turns inside a multi-turn response are 0), the behaviour policy's log-prob of each response token, the
reward, the group it belongs to (the responses to one task), and the `model_version` of the weights that produced
it (the trainer's step count when they were synchronised), so the trainer can tell how stale it is.

A `Batch` is made from a list of experiences (`to_batch`) and back (`from_batch`); the buffers store experiences in
a compact binary form (`to_bytes` / `from_bytes`: JSON metadata + raw little-endian arrays, exact for every value)
or as a JSON line (`to_json` / `from_json`, the `file` buffer's format for people to read).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rft.batch import Batch
from rft.data.dataset import left_pad


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class Experience:
    tokens: torch.Tensor
    """(L,) long: prompt then response token ids, no padding."""
    prompt_length: int
    """Tokens of the prompt; the response is tokens[prompt_length:] (R_i = L - prompt_length tokens)."""
    action_mask: torch.Tensor = None
    """(R_i,) 0/1: the response tokens the policy produced (the loss is taken on them); not given: every one."""
    logprobs: torch.Tensor = None
    """(R_i,) float32: the behaviour policy's log-prob of each response token (0 where action_mask is 0)."""
    reward: float = 0.0
    """The response's score (reward function / reward model, overlong penalty included)."""
    group: str = ""
    """Experiences of one task share it (a GRPO group); unique over a run (a workflow's runner sets it)."""
    model_version: int = 0
    """Trainer steps behind the weights that generated it (0: the starting model)."""
    rewards: dict[str, float] = field(default_factory=dict)
    """Named per-response reward values beside `reward` (a reward function's extra entries, rm_score, ...),
    logged as reward_extra/<name>/mean."""
    info: dict[str, Any] = field(default_factory=dict)
    """data_source, ground_truth, extra_info, response_text, raw_prompt, reward_baseline (ReMax), explore_step, ...;
    kept: False on a workflow's experience whose tokens are not learnt (action mask all 0: Trinity-RFT's empty
    experience, which a RAFT workflow returns for an episode it does not learn; its reward and metrics logged)."""
    id: str = field(default_factory=new_id)
    images: list[bytes] = field(default_factory=list)
    """The prompt's images, encoded (a vision-language model's prompt; `rft.data.images`), for the trainer's passes."""
    versions: torch.Tensor | None = None
    """(R_i,) long: the weight version that drew each response token, where the engine records it per token (a
    streamed response may span weight updates); None: every token is `model_version`'s."""

    def __post_init__(self):
        """Trinity-RFT's constructor as its workflows call it (`Experience(tokens=..., prompt_length=...,
        reward=..., logprobs=...)`): lists become tensors, no action mask means every response token the model's."""
        if not torch.is_tensor(self.tokens):
            self.tokens = torch.tensor(self.tokens, dtype=torch.long)
        if self.logprobs is None:
            raise ValueError("Experience needs the behaviour policy's log-prob of each response token (logprobs: "
                             "the completion's `logprobs`)")
        if not torch.is_tensor(self.logprobs):
            self.logprobs = torch.tensor(self.logprobs, dtype=torch.float32)
        if self.action_mask is None:
            self.action_mask = torch.ones(len(self.tokens) - self.prompt_length, dtype=torch.long)
        elif not torch.is_tensor(self.action_mask):
            self.action_mask = torch.tensor(self.action_mask, dtype=torch.long)

    @property
    def response(self) -> torch.Tensor:
        return self.tokens[self.prompt_length:]

    # ------------------------------------------------------------------------------------------ storage
    def _meta(self) -> dict:
        return {"id": self.id, "prompt_length": self.prompt_length, "length": int(self.tokens.numel()),
                "reward": self.reward, "group": self.group, "model_version": self.model_version,
                "rewards": self.rewards, "info": self.info,
                **({"image_bytes": [len(b) for b in self.images]} if self.images else {}),
                **({"versions": True} if self.versions is not None else {})}

    def to_bytes(self) -> bytes:
        """JSON metadata, a newline, then tokens (int32), action mask (uint8), log-probs (float32), the per-token
        versions (int32) where recorded, then the images' bytes one after another (their lengths in the metadata)."""
        arrays = (self.tokens.numpy().astype("<i4").tobytes() + self.action_mask.numpy().astype("u1").tobytes()
                  + self.logprobs.numpy().astype("<f4").tobytes()
                  + (self.versions.numpy().astype("<i4").tobytes() if self.versions is not None else b""))
        return json.dumps(self._meta(), separators=(",", ":")).encode() + b"\n" + arrays + b"".join(self.images)

    @classmethod
    def from_bytes(cls, data: bytes) -> Experience:
        head, _, arrays = bytes(data).partition(b"\n")
        meta = json.loads(head)
        length, r = meta["length"], meta["length"] - meta["prompt_length"]
        tokens = np.frombuffer(arrays, "<i4", length, 0)
        mask = np.frombuffer(arrays, "u1", r, 4 * length)
        logprobs = np.frombuffer(arrays, "<f4", r, 4 * length + r)
        images, start = [], 4 * length + 5 * r
        versions = None
        if meta.get("versions"):
            versions = torch.from_numpy(np.frombuffer(arrays, "<i4", r, start).astype(np.int64))
            start += 4 * r
        for size in meta.get("image_bytes", []):
            images.append(bytes(arrays[start:start + size]))
            start += size
        return cls._from_meta(meta, torch.from_numpy(tokens.astype(np.int64)),
                              torch.from_numpy(mask.astype(np.int64)), torch.from_numpy(logprobs.copy()), images,
                              versions)

    def to_json(self) -> str:
        """One JSON object; images as base64 strings (`images`)."""
        meta = {k: v for k, v in self._meta().items() if k not in ("image_bytes", "versions")}
        images = {"images": [base64.b64encode(b).decode() for b in self.images]} if self.images else {}
        versions = {"versions": self.versions.tolist()} if self.versions is not None else {}
        return json.dumps({**meta, "tokens": self.tokens.tolist(), "action_mask": self.action_mask.tolist(),
                           "logprobs": self.logprobs.tolist(), **versions, **images})

    @classmethod
    def from_json(cls, line: str) -> Experience:
        meta = json.loads(line)
        return cls._from_meta(meta, torch.tensor(meta["tokens"], dtype=torch.long),
                              torch.tensor(meta["action_mask"], dtype=torch.long),
                              torch.tensor(meta["logprobs"], dtype=torch.float32),
                              [base64.b64decode(b) for b in meta.get("images", [])],
                              torch.tensor(meta["versions"], dtype=torch.long) if "versions" in meta else None)

    @classmethod
    def _from_meta(cls, meta: dict, tokens, mask, logprobs, images: list[bytes], versions=None) -> Experience:
        return cls(tokens=tokens, prompt_length=meta["prompt_length"], action_mask=mask, logprobs=logprobs,
                   reward=meta["reward"], group=meta["group"], model_version=meta["model_version"],
                   rewards=meta.get("rewards") or {}, info=meta.get("info") or {}, id=meta["id"], images=images,
                   versions=versions)


# ------------------------------------------------------------------------------------------------ Batch <->
_INFO_LISTS = {"data_source": "data_source", "ground_truth": "ground_truth", "extra_info": "extra_info",
               "response_text": "response_text", "raw_prompt": "raw_prompt"}


def from_batch(batch: Batch, groups: list[str], model_version: int, info: dict[str, list] | None = None
               ) -> list[Experience]:
    """One experience per row of a scored `batch` (`scores` set; `reward_rows` and `reward_baselines` when the
    batch has them). `groups`: the group id of each row; `info`: further per-row values for `Experience.info`."""
    out = []
    for i in range(len(batch)):
        prompt = batch.prompt_ids[i][batch.prompt_mask[i].bool()]
        real = batch.response_mask[i].bool()
        response = batch.response_ids[i][real]
        logprobs = (batch.rollout_logprobs[i][real] if batch.rollout_logprobs is not None
                    else torch.zeros(len(response)))
        row_info = {key: getattr(batch, name)[i] for key, name in _INFO_LISTS.items() if getattr(batch, name)}
        if batch.reward_baselines is not None:
            row_info["reward_baseline"] = float(batch.reward_baselines[i])
        row_info.update({k: v[i] for k, v in (info or {}).items()})
        out.append(Experience(
            tokens=torch.cat([prompt, response]).long(), prompt_length=len(prompt),
            action_mask=torch.ones(len(response), dtype=torch.long), logprobs=logprobs.float().clone(),
            reward=float(batch.scores[i]), group=groups[i], model_version=model_version,
            rewards=dict(batch.reward_rows[i]) if batch.reward_rows else {}, info=row_info,
            images=list(batch.images[i]) if batch.images else [],
            versions=batch.rollout_versions[i][real].long().clone() if batch.rollout_versions is not None else None,
        ))
    return out


def first_appearance_labels(experiences: list[Experience]) -> list[int]:
    """Each experience's group as a number: the order in which its group first appears (0, 1, ...)."""
    first: dict[str, int] = {}
    return [first.setdefault(e.group, len(first)) for e in experiences]


def to_batch(experiences: list[Experience], pad_token_id: int, group_labels: list[int] | None = None,
             width: int = 1) -> Batch:
    """The Batch of `experiences` (rows in the given order; prompts left-padded, responses right-padded to the
    longest, or to `width` columns when wider: the widest of several processes' batches, whose (B, R) tensors the
    trainer gathers). `group`: `group_labels` when given (e.g. prompt positions shared by several processes), else the
    order in which each group first appears (0, 1, ...). `rollout_logprobs` are the behaviour log-probs. When some
    response tokens are not the policy's (a multi-turn row's tool results), `action_mask` marks the policy's and
    `loss_mask` starts as it (the losses run on it; `response_mask` stays the attention mask)."""
    if not experiences:
        raise ValueError("to_batch needs at least one experience")
    prompt_ids, prompt_mask = left_pad([e.tokens[:e.prompt_length].tolist() for e in experiences], pad_token_id)
    width = max(width, max(len(e.response) for e in experiences))
    B = len(experiences)
    response_ids = torch.full((B, width), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((B, width), dtype=torch.long)
    action_mask = torch.zeros((B, width), dtype=torch.long)
    logprobs = torch.zeros((B, width), dtype=torch.float32)
    for i, e in enumerate(experiences):
        r = len(e.response)
        response_ids[i, :r] = e.response
        response_mask[i, :r] = 1
        action_mask[i, :r] = e.action_mask
        logprobs[i, :r] = e.logprobs
    versions = None  # per-token versions where some experience records them (the others': their model_version)
    if any(e.versions is not None for e in experiences):
        versions = torch.zeros((B, width), dtype=torch.long)
        for i, e in enumerate(experiences):
            versions[i, :len(e.response)] = e.versions if e.versions is not None else e.model_version
    # multi-turn rows (tool results inside the response): the loss only on the policy's tokens
    gaps = not torch.equal(action_mask, response_mask)
    if group_labels is None:
        group_labels = first_appearance_labels(experiences)
    info = lambda key, default=None: [e.info.get(key, default) for e in experiences]
    baselines = info("reward_baseline")
    return Batch(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids, response_mask=response_mask,
        group=torch.as_tensor(group_labels, dtype=torch.long), rollout_logprobs=logprobs, rollout_versions=versions,
        scores=torch.tensor([e.reward for e in experiences], dtype=torch.float32),
        reward_baselines=(torch.tensor(baselines, dtype=torch.float32) if all(b is not None for b in baselines)
                          else None),
        data_source=info("data_source", "unknown"), ground_truth=info("ground_truth"),
        extra_info=info("extra_info", {}), response_text=info("response_text", ""), raw_prompt=info("raw_prompt", []),
        reward_rows=[dict(e.rewards) for e in experiences],
        model_version=torch.tensor([e.model_version for e in experiences], dtype=torch.long),
        action_mask=action_mask if gaps else None, loss_mask=action_mask if gaps else None,
        images=[list(e.images) for e in experiences] if any(e.images for e in experiences) else [],
    )


def replace(experience: Experience, **changes) -> Experience:
    return dataclasses.replace(experience, **changes)
