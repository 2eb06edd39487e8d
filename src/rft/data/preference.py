"""Preference rows for DPO: a prompt with a chosen and a rejected response (TRL's and Trinity-RFT's formats).

A row has a prompt column (a string, or a chat message list) and two response columns, each a string (the
assistant's text) or a message list (the assistant turn(s) that continue the prompt's conversation): TRL's
"standard" and "conversational" preference formats, and Trinity-RFT's `plaintext` / `messages` prompt types. A
string prompt becomes one user message, preceded by a system message when `system_prompt_key` names a column or
`system_prompt` is set (Trinity-RFT's keys). The prompt is chat-templated with the generation prompt; a string
response is its text plus the EOS token (as in rft's SFT rows); a message-list response is the template of the
whole conversation after the prompt's tokens, with loss on its assistant turns (their text and closing EOS).

A batch of pairs is a `Batch` of 2 x pairs rows: the chosen response of pair i in row 2i, the rejected one in row
2i + 1 (group = pair), `loss_mask` on the tokens whose log-probs make the sequence log-prob.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rft.batch import Batch
from rft.data.chat import encode
from rft.data.dataset import DataError, _messages, left_pad
from rft.data.images import refuse_images
from rft.data.io import read_rows
from rft.data.lengths import Span, judge_lengths


@dataclass
class PreferenceExample:
    prompt_ids: list[int]
    chosen_ids: list[int]
    chosen_mask: list[int]
    rejected_ids: list[int]
    rejected_mask: list[int]


def _template(tokenizer, messages: list[dict], generation_prompt: bool) -> list[int]:
    return encode(tokenizer, messages, generation_prompt=generation_prompt)


def _as_messages(value: Any) -> list[dict] | None:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) and "content" in m for m in value):
        return [{"role": m.get("role", "assistant"), "content": m["content"]} for m in value]
    return None


class PreferenceDataset:
    """Every pair of one or more files, tokenized at load time. `data_cfg` has prompt_key, chosen_key,
    rejected_key, system_prompt_key, system_prompt, max_length and truncation (error | left | right)."""

    def __init__(self, files, tokenizer, data_cfg):
        files = [files] if isinstance(files, (str, Path)) else list(files)
        examples: list[PreferenceExample] = []
        spans: list[Span] = []
        self.tokenizer = tokenizer
        for file in files:
            for i, row in enumerate(read_rows(file)):
                where = f"{file} row {i}"
                refuse_images(row, where, "DPO")
                for key, column in (("prompt_key", data_cfg.prompt_key), ("chosen_key", data_cfg.chosen_key),
                                    ("rejected_key", data_cfg.rejected_key)):
                    if column not in row:
                        raise DataError(f"{where}: no column {column!r} (data.{key}); columns: {sorted(row)}")
                prompt = self._prompt(row, data_cfg, where)
                prompt_ids = _template(tokenizer, prompt, generation_prompt=True)
                chosen = self._response(prompt, prompt_ids, row[data_cfg.chosen_key], where, data_cfg.chosen_key)
                rejected = self._response(prompt, prompt_ids, row[data_cfg.rejected_key], where,
                                          data_cfg.rejected_key)
                examples.append(PreferenceExample(prompt_ids, *chosen, *rejected))
                spans.append(self._span(examples[-1], where))
        if not examples:
            raise DataError(f"no preference rows in {files}")
        keep = judge_lengths(spans, data_cfg.max_length, data_cfg.truncation, source=", ".join(map(str, files)),
                             unit="pairs")
        self.examples = [self._cut(x, data_cfg.max_length, data_cfg.truncation)
                         for x, kept in zip(examples, keep) if kept]

    @staticmethod
    def _prompt(row: dict, cfg, where: str) -> list[dict]:
        value = row[cfg.prompt_key]
        if not isinstance(value, str):
            return _messages(value, where)
        system = None
        if cfg.system_prompt_key:
            if cfg.system_prompt_key not in row:
                raise DataError(f"{where}: no column {cfg.system_prompt_key!r} (data.system_prompt_key)")
            system = row[cfg.system_prompt_key]
        elif cfg.system_prompt:
            system = cfg.system_prompt
        return ([{"role": "system", "content": str(system)}] if system is not None else []) + [
            {"role": "user", "content": value}]

    def _response(self, prompt: list[dict], prompt_ids: list[int], value: Any, where: str,
                  column: str) -> tuple[list[int], list[int]]:
        """(token ids, loss mask) of one response."""
        tok = self.tokenizer
        if isinstance(value, str):
            ids = tok(value, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            return ids, [1] * len(ids)
        turns = _as_messages(value)
        if turns is None:
            raise DataError(f"{where}: column {column!r} must be a string or a chat message list "
                            "[{role, content}, ...]")
        full = _template(tok, prompt + turns, generation_prompt=False)
        if full[:len(prompt_ids)] != prompt_ids:
            raise DataError(f"{where}: the chat template of the prompt is not a prefix of the template of the prompt "
                            f"and {column!r}; give {column!r} as a string")
        mask = [0] * len(full)
        for turn in range(len(prompt), len(prompt) + len(turns)):
            messages = (prompt + turns)[: turn + 1]
            if messages[-1]["role"] != "assistant":
                continue
            start = len(_template(tok, messages[:-1], generation_prompt=True))
            end = len(_template(tok, messages, generation_prompt=False))
            while end > start and full[end - 1] != tok.eos_token_id:  # the turn's text and EOS, not a newline
                end -= 1
            mask[start:end] = [1] * (end - start)
        ids, mask = full[len(prompt_ids):], mask[len(prompt_ids):]
        if not any(mask):
            raise DataError(f"{where}: column {column!r} has no assistant turn")
        return ids, mask

    @staticmethod
    def _span(x: PreferenceExample, where: str) -> Span:
        """The pair's lengths: the prompt with the longer response; right truncation must keep a loss token of
        each response."""
        prompt = len(x.prompt_ids)
        return Span(where, prompt, prompt + max(len(x.chosen_ids), len(x.rejected_ids)),
                    prompt + max(x.chosen_mask.index(1), x.rejected_mask.index(1)))

    @staticmethod
    def _cut(x: PreferenceExample, max_length: int, truncation: str) -> PreferenceExample:
        """`x` within `max_length`: as it is, or cut by `truncation` (a pair `judge_lengths` kept)."""
        total = len(x.prompt_ids) + max(len(x.chosen_ids), len(x.rejected_ids))
        if total <= max_length:
            return x
        if truncation == "right":  # keep the prompt: cut the responses' ends
            keep = max_length - len(x.prompt_ids)
            return PreferenceExample(x.prompt_ids, x.chosen_ids[:keep], x.chosen_mask[:keep], x.rejected_ids[:keep],
                                     x.rejected_mask[:keep])
        # left: cut the prompt's start
        return PreferenceExample(x.prompt_ids[total - max_length:], x.chosen_ids, x.chosen_mask, x.rejected_ids,
                                 x.rejected_mask)

    def __len__(self) -> int:
        return len(self.examples)

    def batch(self, indices: list[int], pad_id: int) -> Batch:
        """The pairs `indices` as 2 x len(indices) rows: chosen (even rows) and rejected (odd rows) of each pair;
        prompts left-padded, responses right-padded, `loss_mask` on the tokens that make the sequence log-prob."""
        items = [self.examples[i] for i in indices]
        prompts = [x.prompt_ids for x in items for _ in range(2)]
        responses = [(ids, mask) for x in items for ids, mask in ((x.chosen_ids, x.chosen_mask),
                                                                   (x.rejected_ids, x.rejected_mask))]
        prompt_ids, prompt_mask = left_pad(prompts, pad_id)
        width = max(len(ids) for ids, _ in responses)
        response_ids = torch.full((len(responses), width), pad_id, dtype=torch.long)  # (2N, R)
        response_mask = torch.zeros((len(responses), width), dtype=torch.long)
        loss_mask = torch.zeros((len(responses), width), dtype=torch.long)
        for row, (ids, mask) in enumerate(responses):
            response_ids[row, :len(ids)] = torch.as_tensor(ids)
            response_mask[row, :len(ids)] = 1
            loss_mask[row, :len(ids)] = torch.as_tensor(mask)
        return Batch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                     response_mask=response_mask, group=torch.arange(len(items)).repeat_interleave(2),
                     loss_mask=loss_mask)
