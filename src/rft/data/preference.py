"""Preference rows for DPO: a prompt with a chosen and a rejected response (TRL's and Trinity-RFT's formats).

A row has a prompt column (a string, or a chat message list) and two response columns, each a string (the
assistant's text) or a message list (the assistant turn(s) that continue the prompt's conversation): TRL's
"standard" and "conversational" preference formats, and Trinity-RFT's `plaintext` / `messages` prompt types (a
row without the prompt column whose chosen and rejected are whole conversations is TRL's implicit prompt: the
messages both begin with are the prompt, as TRL's extract_prompt splits them). A
string prompt becomes one user message, preceded by a system message when `system_prompt_key` names a column or
`system_prompt` is set (Trinity-RFT's keys). The prompt is chat-templated with the generation prompt; a string
response is its text plus the EOS token (as in rft's SFT rows); a message-list response is the template of the
whole conversation after the prompt's tokens, with loss on its assistant turns (their text and closing EOS).

With a vision-language model, a row may hold images (`data.image_key`, as SFT and RL rows: docs/multimodal.md):
`<image>` placeholders in the prompt (or none: the images go first), and the chosen and rejected responses share
the prompt's images. The prompt, and a message-list response's conversation, are then rendered and encoded by the
model's processor (`rft.models.vision.Vision`: each image expanded into the family's image tokens); the pair's
two rows carry the images, so every forward pass over them (the policy's, the reference's) gets the same pixel
inputs. A text-only model's rows with images are refused, never dropped.

A batch of pairs is a `Batch` of 2 x pairs rows: the chosen response of pair i in row 2i, the rejected one in row
2i + 1 (group = pair), `loss_mask` on the tokens whose log-probs make the sequence log-prob, `images` each row's
prompt images (none when no pair has any).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from rft.batch import Batch
from rft.data.chat import as_messages, response_tokens, row_encoder
from rft.data.dataset import DataError, _messages, left_pad
from rft.data.images import refuse_images, row_images, with_image_parts
from rft.data.io import missing_column, read_rows
from rft.data.lengths import Span, judge_lengths


@dataclass
class PreferenceExample:
    prompt_ids: list[int]
    chosen_ids: list[int]
    chosen_mask: list[int]
    rejected_ids: list[int]
    rejected_mask: list[int]
    images: list[bytes] = field(default_factory=list)  # the prompt's images, encoded; both responses share them
    margin: float = 0.0  # data.margin_key's value (rft rm's Bradley-Terry margin), 0 without one


@dataclass
class PairSequences:
    """Pairs as whole sequences for a sequence classifier (`PreferenceDataset.sequences`): row 2i is pair i's prompt
    + chosen response, row 2i + 1 its prompt + rejected response, right-padded."""
    input_ids: torch.Tensor  # (2N, L)
    attention_mask: torch.Tensor  # (2N, L)
    margins: torch.Tensor  # (N,) float32

    def __len__(self) -> int:
        return len(self.margins)

    def split(self, pairs: int) -> list[PairSequences]:
        """Consecutive slices of at most `pairs` pairs (micro-batches), each cut to its own longest row."""
        out = []
        for start in range(0, len(self), pairs):
            mask = self.attention_mask[2 * start:2 * (start + pairs)]
            width = max(int(mask.sum(-1).max()), 1)
            out.append(PairSequences(self.input_ids[2 * start:2 * (start + pairs), :width], mask[:, :width],
                                     self.margins[start:start + pairs]))
        return out


class PreferenceDataset:
    """Every pair of one or more files, tokenized at load time. `data_cfg` has prompt_key, chosen_key,
    rejected_key, system_prompt_key, system_prompt, image_key, apply_chat_template_kwargs, max_length and truncation
    (error | left | right).
    `vision`: a vision-language model's `rft.models.vision.Vision`; rows with images are then encoded through its
    processor (module docstring)."""

    def __init__(self, files, tokenizer, data_cfg, vision=None):
        files = [files] if isinstance(files, (str, Path)) else list(files)
        examples: list[PreferenceExample] = []
        spans: list[Span] = []
        self.tokenizer = tokenizer
        image_key = getattr(data_cfg, "image_key", "images")
        template_kwargs = dict(getattr(data_cfg, "apply_chat_template_kwargs", None) or {})  # the template's variables
        margin_key = getattr(data_cfg, "margin_key", None)  # rft rm's; rft dpo's schema has none
        same: list[str] = []  # the pairs whose two responses are the same tokens
        for file in files:
            for i, row in enumerate(read_rows(file)):
                where = f"{file} row {i}"
                if vision is None:
                    refuse_images(row, where, "DPO on a text-only model", image_key)
                row = self._implicit_prompt(row, data_cfg, where)
                for key, column in (("prompt_key", data_cfg.prompt_key), ("chosen_key", data_cfg.chosen_key),
                                    ("rejected_key", data_cfg.rejected_key)):
                    if column not in row:
                        raise missing_column(where, column, f"data.{key}", row)
                prompt = self._prompt(row, data_cfg, where)
                images = row_images(row, image_key, Path(file).parent, where) if vision is not None else []
                if images:
                    prompt = with_image_parts(prompt, len(images), where)
                elif vision is not None:  # placeholders without images
                    with_image_parts(prompt, 0, where)
                encode_row = row_encoder(tokenizer, vision, images, where, template_kwargs)
                prompt_ids = encode_row(prompt, True)
                chosen = response_tokens(tokenizer, encode_row, prompt, prompt_ids, row[data_cfg.chosen_key],
                                         where, data_cfg.chosen_key)
                rejected = response_tokens(tokenizer, encode_row, prompt, prompt_ids, row[data_cfg.rejected_key],
                                           where, data_cfg.rejected_key)
                if chosen == rejected:
                    same.append(where)
                margin = self._margin(row, margin_key, where) if margin_key else 0.0
                examples.append(PreferenceExample(prompt_ids, *chosen, *rejected, images=images, margin=margin))
                spans.append(self._span(examples[-1], where))
        if not examples:
            raise DataError(f"no preference rows in {files}")
        if same:  # TRL keeps them: a constant log 2 in the loss, no gradient, a miss in the accuracy
            raise DataError(
                f"{len(same)} of {len(examples)} preference pairs have the same chosen and rejected response "
                f"(first: {same[0]}), which prefer a response to itself and teach nothing (their loss is the same "
                f"whatever the model, their gradient 0); remove them from the data")
        keep = judge_lengths(spans, data_cfg.max_length, data_cfg.truncation, source=", ".join(map(str, files)),
                             unit="pairs")
        self.examples = [self._cut(x, data_cfg.max_length, data_cfg.truncation)
                         for x, kept in zip(examples, keep) if kept]

    @staticmethod
    def _implicit_prompt(row: dict, cfg, where: str) -> dict:
        """A row of TRL's implicit-prompt format, no prompt column and chosen and rejected each a whole conversation,
        as a row with one: the messages both begin with are the prompt, the rest of each its response (TRL's
        extract_prompt). Any other row as it is."""
        if cfg.prompt_key in row:
            return row
        if isinstance(row.get(cfg.chosen_key), str) and isinstance(row.get(cfg.rejected_key), str):
            raise DataError(
                f"{where}: no column {cfg.prompt_key!r} (data.prompt_key), and {cfg.chosen_key!r} and "
                f"{cfg.rejected_key!r} are strings: TRL's implicit prompt as text, which rft does not split (where a "
                "prompt ends in text is a guess); give each row its prompt in a column (data.prompt_key), or chosen "
                "and rejected as chat message lists")
        if as_messages(row.get(cfg.chosen_key)) is None or as_messages(row.get(cfg.rejected_key)) is None:
            return row
        chosen, rejected = (list(v.tolist() if hasattr(v, "tolist") else v)
                            for v in (row[cfg.chosen_key], row[cfg.rejected_key]))
        shared = 0
        while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
            shared += 1
        if not shared or shared in (len(chosen), len(rejected)):
            raise DataError(
                f"{where}: no column {cfg.prompt_key!r} (data.prompt_key), and {cfg.chosen_key!r} and "
                f"{cfg.rejected_key!r} are conversations that " + ("share no first message" if not shared else
                                                                   "do not differ after the messages they share") +
                " to be the prompt (TRL's implicit prompt): give each row its prompt in a column (data.prompt_key)")
        return {**row, cfg.prompt_key: chosen[:shared], cfg.chosen_key: chosen[shared:],
                cfg.rejected_key: rejected[shared:]}

    @staticmethod
    def _margin(row: dict, key: str, where: str) -> float:
        """The pair's margin: the row's `key` column (data.margin_key), a finite number."""
        import math

        if key not in row:
            raise missing_column(where, key, "data.margin_key", row)
        value = row[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DataError(f"{where}: data.margin_key column {key!r} holds {value!r}; a margin is a finite number")
        return float(value)

    @staticmethod
    def _prompt(row: dict, cfg, where: str) -> list[dict]:
        value = row[cfg.prompt_key]
        if not isinstance(value, str):
            return _messages(value, where)
        system = None
        if cfg.system_prompt_key:
            if cfg.system_prompt_key not in row:
                raise missing_column(where, cfg.system_prompt_key, "data.system_prompt_key", row)
            system = row[cfg.system_prompt_key]
        elif cfg.system_prompt:
            system = cfg.system_prompt
        return ([{"role": "system", "content": str(system)}] if system is not None else []) + [
            {"role": "user", "content": value}]

    @staticmethod
    def _span(x: PreferenceExample, where: str) -> Span:
        """The pair's lengths: the prompt with the longer response; right truncation must keep a loss token of
        each response."""
        prompt = len(x.prompt_ids)
        return Span(where, prompt, prompt + max(len(x.chosen_ids), len(x.rejected_ids)),
                    prompt + max(x.chosen_mask.index(1), x.rejected_mask.index(1)), whole_prompt=bool(x.images))

    @staticmethod
    def _cut(x: PreferenceExample, max_length: int, truncation: str) -> PreferenceExample:
        """`x` within `max_length`: as it is, or cut by `truncation` (a pair `judge_lengths` kept)."""
        total = len(x.prompt_ids) + max(len(x.chosen_ids), len(x.rejected_ids))
        if total <= max_length:
            return x
        if truncation == "right":  # keep the prompt: cut the responses' ends
            keep = max_length - len(x.prompt_ids)
            return replace(x, chosen_ids=x.chosen_ids[:keep], chosen_mask=x.chosen_mask[:keep],
                           rejected_ids=x.rejected_ids[:keep], rejected_mask=x.rejected_mask[:keep])
        return replace(x, prompt_ids=x.prompt_ids[total - max_length:])  # left: cut the prompt's start (no images)

    def keep(self, indices: list[int]) -> None:
        """Keep only the pairs at `indices`, in that order (a capped validation set)."""
        self.examples = [self.examples[i] for i in indices]

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def longest(self) -> int:
        """Tokens of the longest pair's longer sequence (the prompt and its longer response), as it is trained on."""
        return max((len(x.prompt_ids) + max(len(x.chosen_ids), len(x.rejected_ids)) for x in self.examples), default=0)

    def sequences(self, indices: list[int], pad_id: int) -> PairSequences:
        """The pairs `indices` as whole sequences (`PairSequences`), padded on the right with `pad_id`: the last
        token that is not `pad_id` is where transformers' sequence classifiers read their score."""
        rows = [x.prompt_ids + ids for x in (self.examples[i] for i in indices)
                for ids in (x.chosen_ids, x.rejected_ids)]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (2N, L)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for row, ids in enumerate(rows):
            input_ids[row, :len(ids)] = torch.as_tensor(ids)
            attention_mask[row, :len(ids)] = 1
        margins = torch.tensor([self.examples[i].margin for i in indices], dtype=torch.float32)
        return PairSequences(input_ids, attention_mask, margins)

    def batch(self, indices: list[int], pad_id: int) -> Batch:
        """The pairs `indices` as 2 x len(indices) rows: chosen (even rows) and rejected (odd rows) of each pair;
        prompts left-padded, responses right-padded, `loss_mask` on the tokens that make the sequence log-prob,
        `images` each row's prompt images (the pair's two rows the same)."""
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
                     loss_mask=loss_mask,
                     images=[x.images for x in items for _ in range(2)] if any(x.images for x in items) else [])
