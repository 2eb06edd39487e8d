"""Prompts: read verl-format rows, apply the chat template, enforce the prompt length, sample batches.

A row is `{data_source, prompt: [{role, content}, ...], ability, reward_model: {style, ground_truth}, extra_info}`;
`prompt` may also be a plain string (it becomes one user message).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rft.console import counted
from rft.data.chat import render_prompt, with_reply_prefix
from rft.data.images import has_images, row_images, with_image_parts
from rft.data.io import DataError, column_value, has_column, missing_column, raw_rows, read_rows

log = logging.getLogger("rft")


@dataclass
class Prompt:
    ids: list[int]
    data_source: str
    ground_truth: Any
    extra_info: dict
    messages: list[dict] = field(default_factory=list)  # the chat messages before the template
    origin: str = ""  # "<file> row <i>", for messages about this prompt
    tools: list[dict] | None = None  # the tools the prompt declares (OpenAI function schemas), rendered with it
    row: dict = field(default_factory=dict)  # the raw row (workflows read their own columns from it)
    images: list[bytes] = field(default_factory=list)  # the row's images, encoded (rft.data.images)


def truncate(ids: list[int], max_len: int, mode: str) -> list[int]:
    """Cut `ids` to `max_len` tokens: left drops the start, right drops the end, middle keeps both ends."""
    if len(ids) <= max_len:
        return ids
    if mode == "left":
        return ids[-max_len:]
    if mode == "right":
        return ids[:max_len]
    if mode == "middle":
        head = max_len // 2
        return ids[:head] + ids[len(ids) - (max_len - head):]
    raise ValueError(f"truncation mode {mode!r} cannot cut a prompt")


def _messages(value: Any, where: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) and "content" in m for m in value):
        return [{"role": m.get("role", "user"), "content": m["content"]} for m in value]
    raise DataError(f"{where}: the prompt must be a chat message list [{{role, content}}, ...] or a string")


def _tools(value: Any, where: str) -> list[dict]:
    """A row's tools column: a list of OpenAI function schemas ({"type": "function", "function": {...}}), or a JSON
    string of one."""
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            raise DataError(f"{where}: the tools column is a string that is not JSON") from None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, dict) for t in value):
        raise DataError(f"{where}: the tools column must be a list of OpenAI function schemas "
                        '[{"type": "function", "function": {"name": ..., "parameters": ...}}, ...]')
    return [dict(t) for t in value]


class PromptDataset:
    """All prompts of one or more files, tokenized once at load time (without a tokenizer: their messages only, for
    a model behind an API, whose prompt length is the API's)."""

    def __init__(
        self,
        files: str | Sequence[str | tuple[str, list[dict]]],
        tokenizer,
        *,
        prompt_key: str | None = "prompt",
        max_prompt_length: int = 512,
        truncation: str = "error",
        filter_overlong_prompts: bool = False,
        image_key: str = "images",
        system_prompt: str | None = None,
        system_prompt_key: str | None = None,
        reply_prefix: str | None = None,
        response_key: str | None = None,
        tools_key: str | None = None,
        chat_template: str | None = None,
        template_kwargs: dict | None = None,
        vision=None,
        data_sources: Sequence[str | None] | None = None,
        length_key: str = "data.max_prompt_length",
        file_keys: Sequence[dict] | None = None,
    ):
        """Trinity-RFT's format keys: `system_prompt` (a system message put first; `system_prompt_key`: the column
        holding one, which wins), `reply_prefix` (the start of every reply: an assistant message after the prompt's,
        which the model continues, its text after the generation prompt), `response_key` (the column holding the reference answer: the ground truth instead
        of reward_model.ground_truth), `tools_key` (the column of OpenAI function schemas rendered with the chat
        template), `chat_template` (a Jinja template used instead of the tokenizer's). `template_kwargs`: the chat
        template's variables (data.apply_chat_template_kwargs, `rft.data.chat`). `data_sources`: per file, the
        data_source of its rows that have none (else "unknown", verl's). `length_key`: the key that set
        `max_prompt_length`, named in the error of a prompt over it (rft generate's is rollout.prompt_length, and its
        command has no filter or truncation to offer). `file_keys`: per file, {"prompt_key": (column, the key that
        names it), "response_key": ...} where that file has its own (data.val_prompt_keys / val_response_keys)."""
        files = [files] if isinstance(files, (str, Path)) else list(files)
        self.chat_template = chat_template
        self.response_key = response_key  # where the ground truths came from, for messages about them
        self.prompts: list[Prompt] = []
        self.num_filtered = 0
        dropped: list[int] = []  # the lengths of the prompts filter_overlong_prompts drops
        shared = {"prompt_key": prompt_key, "response_key": response_key}
        for index, file in enumerate(files):
            source = (data_sources[index] if data_sources and index < len(data_sources) else None) or "unknown"
            own = file_keys[index] if file_keys and index < len(file_keys) else {}
            prompt_key, response_key = (own.get(k, (shared[k], None))[0] for k in ("prompt_key", "response_key"))
            prompt_what, response_what = (own.get(k, (None, f"data.{k}"))[1] for k in ("prompt_key", "response_key"))
            # a path, or (name, rows) for rows from elsewhere (a database table)
            file, rows = file if isinstance(file, tuple) else (file, read_rows(file))
            if not rows:
                raise DataError(f"data file {str(file)!r} has no rows")
            base = Path(file).parent if not isinstance(file, tuple) and Path(str(file)).exists() else None
            if vision is None:
                first = next((i for i, row in enumerate(rows) if has_images(row, image_key)), None)
                if first is not None:
                    raise DataError(f"{file} row {first}: the row has images ({image_key!r}) but the model is a "
                                    "text-only model; train a vision-language model (docs/multimodal.md) or drop "
                                    "the column")
            images = [row_images(row, image_key, base, f"{file} row {i}") for i, row in enumerate(rows)]
            texts, chats, tools = [], [], []
            for i, row in enumerate(rows):
                where = f"{file} row {i}"
                for key, what in ((prompt_key, prompt_what), (system_prompt_key, "data.system_prompt_key"),
                                  (response_key, response_what), (tools_key, "data.tools_key")):
                    if key is not None and not has_column(row, key):
                        raise raw_rows(where, file, key, what, row) or missing_column(where, key, what, row)
                if prompt_key is None:  # rows without a prompt: an environment workflow writes every message
                    texts.append("")
                    chats.append([])
                    tools.append(None)
                    continue
                chat = _messages(column_value(row, prompt_key), where)
                system = column_value(row, system_prompt_key) if system_prompt_key else system_prompt
                if system is not None and chat[0]["role"] != "system":
                    chat = [{"role": "system", "content": str(system)}, *chat]
                tools.append(_tools(column_value(row, tools_key), where) if tools_key else None)
                if images[i]:
                    chat = with_image_parts(chat, len(images[i]), where)
                elif vision is not None:  # a vision model's placeholders need images
                    with_image_parts(chat, 0, where)
                prefixed = with_reply_prefix(chat, reply_prefix)
                if tokenizer is None:  # an API model's prompts: messages only (rft.explorer.external)
                    texts.append("")
                elif images[i]:
                    texts.append(vision.render(chat, chat_template, template_kwargs=template_kwargs)
                                 + (reply_prefix or ""))
                else:
                    texts.append(render_prompt(tokenizer, prefixed, tools=tools[-1], chat_template=chat_template,
                                               template_kwargs=template_kwargs))
                chats.append(prefixed)
            encoded = tokenizer(texts, add_special_tokens=False)["input_ids"] \
                if prompt_key is not None and tokenizer is not None else [[] for _ in texts]
            for i, row_images_ in enumerate(images):  # the processor expands each image into its tokens
                if row_images_:
                    encoded[i] = vision.encode(texts[i], row_images_, f"{file} row {i}")
            for i, (row, ids, chat, row_tools) in enumerate(zip(rows, encoded, chats, tools)):
                if len(ids) > max_prompt_length:
                    if filter_overlong_prompts:
                        self.num_filtered += 1
                        dropped.append(len(ids))
                        continue
                    if truncation == "error" or images[i]:
                        remedy = ("raise it" if length_key != "data.max_prompt_length" else
                                  "raise it, set data.filter_overlong_prompts=true"
                                  + (" (a prompt with images is never cut: its image tokens stay whole)" if images[i]
                                     else ", or set data.truncation to left|right|middle"))
                        raise DataError(f"{file} row {i}: the prompt has {len(ids)} tokens > {length_key}="
                                        f"{max_prompt_length}; {remedy}")
                    ids = truncate(ids, max_prompt_length, truncation)
                reward = row.get("reward_model") or {}
                if not isinstance(row.get("extra_info") or {}, dict):
                    raise DataError(f"{file} row {i}: extra_info must be a mapping, got "
                                    f"{type(row['extra_info']).__name__}; fix the row or drop the column")
                self.prompts.append(
                    Prompt(
                        ids=list(ids),
                        data_source=str(row.get("data_source", source)),
                        ground_truth=(column_value(row, response_key) if response_key else
                                      reward.get("ground_truth") if isinstance(reward, dict) else None),
                        extra_info=dict(row.get("extra_info") or {}),
                        messages=chat,
                        origin=f"{file} row {i}",
                        tools=row_tools,
                        row=row,
                        images=images[i],
                    )
                )
        names = ", ".join(str(f[0] if isinstance(f, tuple) else f) for f in files)
        if dropped and not self.prompts:
            raise DataError(
                f"every prompt of {names} ({len(dropped)}) is longer than data.max_prompt_length={max_prompt_length} "
                f"tokens (after the chat template; the shortest has {min(dropped)}, the longest {max(dropped)}), so "
                "data.filter_overlong_prompts=true drops them all: raise data.max_prompt_length to at least "
                f"{min(dropped)}, or set data.filter_overlong_prompts=false and data.truncation to left|right|middle")
        if dropped:
            log.warning("rft: note: data.filter_overlong_prompts dropped %d of the %d prompts of %s: longer than "
                        "data.max_prompt_length=%d tokens (the longest has %d)", len(dropped),
                        len(dropped) + len(self.prompts), names, max_prompt_length, max(dropped))
        answered = sum(bool(p.messages) and p.messages[-1]["role"] == "assistant" for p in self.prompts)
        if answered:  # an SFT conversation given as RL prompts: its answer is in the prompt, and the model says more
            log.warning("rft: note: %d of the %d prompts of %s (data.prompt_key=%r) end with an assistant turn, so "
                        "the model is asked for another assistant turn after it (as verl does); if that turn is the "
                        "answer to learn, end each prompt with the user's turn and give the answer as the ground "
                        "truth (reward_model.ground_truth, or its column as data.response_key)", answered,
                        len(self.prompts), names, shared["prompt_key"])

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i: int) -> Prompt:
        return self.prompts[i]

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only the prompts at `indices`, in that order (a capped validation set)."""
        self.prompts = [self.prompts[i] for i in indices]


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), both (B, P) with P the longest sequence: left padding keeps every last token in column P-1."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, s in enumerate(seqs):
        if s:
            ids[row, width - len(s):] = torch.as_tensor(s, dtype=torch.long)
            mask[row, width - len(s):] = 1
    return ids, mask


class PromptSampler:
    """`batch_size` prompt indices per step, epoch after epoch (drop_last), resumable from `state_dict()`.

    The order of epoch e is a permutation drawn from a generator seeded with `seed + e`, so it depends on nothing
    but (seed, epoch): a resumed run sees exactly the prompts an uninterrupted run would.
    """

    def __init__(self, num_items: int, batch_size: int, shuffle: bool = True, seed: int = 1, unit: str = "prompt",
                 mini_batch_key: str | None = "actor_rollout_ref.actor.ppo_mini_batch_size",
                 batch_key: str = "data.train_batch_size"):
        """`unit`: what an item is, for the error of a training set smaller than one step (rft sft's rows, rft dpo's
        pairs); `mini_batch_key`: the key that must divide data.train_batch_size, said there (None: none);
        `batch_key`: the key that set `batch_size` (data.gen_batch_size for DAPO's generation batches)."""
        if num_items < batch_size:
            also = f" (and {mini_batch_key} to a divisor of it)" if mini_batch_key else ""
            what = "one step" if batch_key == "data.train_batch_size" else "one generation batch"
            raise DataError(
                f"the training set has {counted(num_items, unit)}, fewer than {batch_key}={batch_size} "
                f"(the {unit}s of {what}): lower {batch_key} to at most {num_items}{also}, or add "
                f"{unit}s"
            )
        self.num_items, self.batch_size, self.shuffle, self.seed = num_items, batch_size, shuffle, seed
        self.batch_key = batch_key
        self.epoch, self.batch_in_epoch = 0, 0

    @property
    def batches_per_epoch(self) -> int:
        return self.num_items // self.batch_size

    @property
    def drawn(self) -> int:
        """Batches drawn so far, over every epoch."""
        return self.epoch * self.batches_per_epoch + self.batch_in_epoch

    def _order(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.num_items)
        g = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.num_items, generator=g)

    def next_batch(self) -> list[int]:
        if self.batch_in_epoch >= self.batches_per_epoch:
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        start = self.batch_in_epoch * self.batch_size
        self.batch_in_epoch += 1
        return self._order(self.epoch)[start:start + self.batch_size].tolist()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "seed": self.seed,
                "num_items": self.num_items, "batch_size": self.batch_size}

    def load_state_dict(self, state: dict) -> None:
        """Continue where `state` stopped; refused when the data, batch size or seed differ (the batches would)."""
        for key, what in (("seed", "data.seed"), ("num_items", "the number of training prompts"),
                          ("batch_size", self.batch_key)):
            if key in state and state[key] != getattr(self, key):
                raise DataError(f"the checkpoint was written with {what}={state[key]}, this run has "
                                f"{getattr(self, key)}; resume with the same data and batch size "
                                "(or set trainer.resume_mode=disable)")
        self.epoch, self.batch_in_epoch = state["epoch"], state["batch_in_epoch"]
