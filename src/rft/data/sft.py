"""SFT rows: a prompt and a response column (optionally nested), or a messages column (multi-turn).

Each row becomes (prompt ids, response ids, loss mask over the response). Single turn: the prompt is chat-templated
with the generation prompt, the response is its text plus the EOS token, and every response token carries loss.
Multi-turn: the conversation's first token is the prompt, the rest the response, and only the assistant turns
(their text and closing EOS) carry loss; with `multiturn.last_turn_only` only the last of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rft.batch import Batch
from rft.data.chat import as_messages, encode, response_tokens, row_encoder
from rft.data.dataset import DataError, _messages, _tools, left_pad
from rft.data.images import refuse_images, row_images, with_image_parts
from rft.data.io import missing_column, read_rows
from rft.data.lengths import Span, judge_lengths


@dataclass
class SFTExample:
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    images: list[bytes] = field(default_factory=list)  # the prompt's images, encoded (a vision-language model's)


def _dig(value: Any, keys: list[str] | None, where: str, column: str) -> Any:
    for key in keys or []:
        if not isinstance(value, dict) or key not in value:
            raise DataError(f"{where}: column {column!r} has no key {key!r} (data.*_dict_keys)")
        value = value[key]
    return value


def _template(tokenizer, messages: list[dict], generation_prompt: bool, tools: list[dict] | None = None,
              template_kwargs: dict | None = None) -> list[int]:
    return encode(tokenizer, messages, generation_prompt=generation_prompt, tools=tools,
                  template_kwargs=template_kwargs)


def _row_thinking(row: dict, template_kwargs: dict, where: str, key: str | None) -> dict:
    """`template_kwargs` with the row's own enable_thinking (the column `key`, data.multiturn.enable_thinking_key,
    as verl's multi-turn SFT dataset reads it) where the row has one."""
    value = row.get(key) if key else None
    if value is None:
        return template_kwargs
    value = value.item() if hasattr(value, "item") else value  # a numpy bool from parquet
    if not isinstance(value, bool):
        raise DataError(f"{where}: column {key!r} (data.multiturn.enable_thinking_key) must be true, false or null, "
                        f"got {value!r}")
    return {**template_kwargs, "enable_thinking": value}


class SFTDataset:
    def __init__(self, files, tokenizer, data_cfg, vision=None, keys: str = "data"):
        """`vision`: a vision-language model's `rft.models.vision.Vision`; single-turn rows with images
        (`data.image_key`) are then encoded through its processor (docs/multimodal.md). Rows over
        `data_cfg.max_length` are judged all at once (`rft.data.lengths`); `keys`: the config section that sets
        the columns, max_length and truncation, for messages (`data`, or mix's `data.expert`)."""
        files = [files] if isinstance(files, (str, Path)) else list(files)
        examples: list[SFTExample] = []
        spans: list[Span] = []
        image_key = getattr(data_cfg, "image_key", "images")
        # the template's variables (verl's key; a section built by hand may leave it out)
        template_kwargs = dict(getattr(data_cfg, "apply_chat_template_kwargs", None) or {})
        for file in files:
            # a damaged file names the key that lists it (mix's data.expert.files; rft sft's train / val files)
            for i, row in enumerate(read_rows(file, **({} if keys == "data" else {"key": f"{keys}.files"}))):
                where = f"{file} row {i}"
                if vision is None or data_cfg.multiturn.enable:
                    refuse_images(row, where, "SFT on a text-only model" if vision is None else "multi-turn SFT",
                                  image_key)
                if data_cfg.multiturn.enable:
                    example = self._multiturn(tokenizer, row, data_cfg.multiturn.messages_key, where,
                                              data_cfg.multiturn.tools_key, data_cfg.multiturn.last_turn_only,
                                              _row_thinking(row, template_kwargs, where,
                                                            getattr(data_cfg.multiturn, "enable_thinking_key", None)),
                                              # data.expert names its messages_key without a multiturn level
                                              keys=f"{keys}.multiturn" if keys == "data" else keys)
                else:
                    for column, key in ((data_cfg.prompt_key, f"{keys}.prompt_key"),
                                        (data_cfg.response_key, f"{keys}.response_key")):
                        if column not in row:
                            raise self._not_single_turn(where, row, data_cfg, keys) or \
                                missing_column(where, column, key, row)
                    prompt = _dig(row[data_cfg.prompt_key], data_cfg.prompt_dict_keys, where, data_cfg.prompt_key)
                    response = _dig(row[data_cfg.response_key], data_cfg.response_dict_keys, where,
                                    data_cfg.response_key)
                    messages = _messages(prompt, where)
                    images = row_images(row, image_key, Path(file).parent, where) if vision is not None else []
                    if images:  # the processor expands each image into the family's image tokens
                        messages = with_image_parts(messages, len(images), where)
                        prompt_ids = vision.encode(vision.render(messages, template_kwargs=template_kwargs), images,
                                                   where)
                    else:
                        if vision is not None:  # placeholders without images
                            with_image_parts(messages, 0, where)
                        prompt_ids = _template(tokenizer, messages, True, template_kwargs=template_kwargs)
                    encode_row = row_encoder(tokenizer, vision, images, where, template_kwargs)
                    # a string (any scalar: its text) or TRL's conversational completion, a message list
                    response = response if as_messages(response) is not None else str(response)
                    response_ids, loss_mask = response_tokens(tokenizer, encode_row, messages, prompt_ids, response,
                                                              where, data_cfg.response_key)
                    example = SFTExample(prompt_ids, response_ids, loss_mask, images)
                examples.append(example)
                spans.append(self._span(example, where))
        if not examples:
            raise DataError(f"no SFT rows in {files}" if keys == "data" else f"{keys}.files: no rows in {files}")
        keep = judge_lengths(spans, data_cfg.max_length, data_cfg.truncation, source=", ".join(map(str, files)),
                             key=keys)
        self.examples = [self._cut(x, data_cfg.max_length, data_cfg.truncation)
                         for x, kept in zip(examples, keep) if kept]

    @staticmethod
    def _multiturn(tokenizer, row: dict, key: str, where: str, tools_key: str | None = None,
                   last_turn_only: bool = False, template_kwargs: dict | None = None,
                   keys: str = "data.multiturn") -> SFTExample:
        if key not in row:
            raise missing_column(where, key, f"{keys}.messages_key", row)
        if tools_key is not None and tools_key not in row:
            raise missing_column(where, tools_key, f"{keys}.tools_key", row)
        messages = _messages(row[key], where)
        tools = _tools(row[tools_key], where) if tools_key else None
        full = _template(tokenizer, messages, False, tools, template_kwargs)
        mask = [0] * len(full)
        assistant = [turn for turn, m in enumerate(messages) if m["role"] == "assistant"]
        for turn, message in enumerate(messages):
            if message["role"] != "assistant" or (last_turn_only and turn != assistant[-1]):
                continue
            start = len(_template(tokenizer, messages[:turn], True, tools, template_kwargs)) if turn else 0
            # the turn's text and its EOS; not the template's trailing newline
            end = len(_template(tokenizer, messages[:turn + 1], False, tools, template_kwargs))
            while end > start and full[end - 1] != tokenizer.eos_token_id:
                end -= 1
            mask[start:end] = [1] * (end - start)
        if not any(mask):
            raise DataError(f"{where}: the conversation has no assistant turn to learn from")
        return SFTExample(full[:1], full[1:], mask[1:])

    @staticmethod
    def _not_single_turn(where: str, row: dict, data_cfg, keys: str) -> DataError | None:
        """The error for a row without the prompt column that is TRL's conversational row (a messages
        column: the key that trains on it) or its language-modeling row (a text column, which rft sft does not
        train on); None for any other row."""
        column = data_cfg.multiturn.messages_key or "messages"
        fix = (f"{keys}.messages_key={column}" if keys != "data" else "data.multiturn.enable=true" +
               ("" if column == "messages" else f" data.multiturn.messages_key={column}"))
        if data_cfg.prompt_key in row:
            return None
        if as_messages(row.get(column)) is not None:
            return DataError(f"{where}: no column {data_cfg.prompt_key!r} ({keys}.prompt_key), but chat "
                             f"conversations in {column!r} (TRL's conversational format): set {fix} to train on "
                             "their assistant turns")
        if isinstance(row.get("text"), str):
            return DataError(f"{where}: no column {data_cfg.prompt_key!r} ({keys}.prompt_key), but a 'text' column "
                             "(TRL's language-modeling format), which rft sft does not train on: write each row as "
                             f"a prompt and a response column ({keys}.prompt_key, {keys}.response_key) or as chat "
                             f"messages ({fix})")
        return None

    @staticmethod
    def _span(example: SFTExample, where: str) -> Span:
        prompt = len(example.prompt_ids)
        return Span(where, prompt, prompt + len(example.response_ids), prompt + example.loss_mask.index(1),
                    whole_prompt=bool(example.images))

    @staticmethod
    def _cut(example: SFTExample, max_length: int, truncation: str) -> SFTExample:
        """`example` within `max_length`: as it is, or cut by `truncation` (a row `judge_lengths` kept)."""
        total = len(example.prompt_ids) + len(example.response_ids)
        if total <= max_length:
            return example
        if truncation == "right":  # keep the start: cut the response's end
            keep = max_length - len(example.prompt_ids)
            return replace(example, response_ids=example.response_ids[:keep], loss_mask=example.loss_mask[:keep])
        return replace(example, prompt_ids=example.prompt_ids[total - max_length:])  # left: cut the prompt's start

    def keep(self, indices: list[int]) -> None:
        """Keep only the rows at `indices`, in that order (a capped validation set)."""
        self.examples = [self.examples[i] for i in indices]

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def longest(self) -> int:
        """Tokens of the longest row (prompt and response), as it is trained on."""
        return max((len(x.prompt_ids) + len(x.response_ids) for x in self.examples), default=0)

    def batch(self, indices: list[int], pad_id: int) -> Batch:
        """A Batch: prompts left-padded, responses right-padded, `loss_mask` on the tokens that carry loss."""
        items = [self.examples[i] for i in indices]
        prompt_ids, prompt_mask = left_pad([x.prompt_ids for x in items], pad_id)
        width = max(len(x.response_ids) for x in items)
        response_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
        response_mask = torch.zeros((len(items), width), dtype=torch.long)
        loss_mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, x in enumerate(items):
            n = len(x.response_ids)
            response_ids[row, :n] = torch.as_tensor(x.response_ids)
            response_mask[row, :n] = 1
            loss_mask[row, :n] = torch.as_tensor(x.loss_mask)
        return Batch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                     response_mask=response_mask, group=torch.arange(len(items)), loss_mask=loss_mask,
                     images=[x.images for x in items] if any(x.images for x in items) else [])
