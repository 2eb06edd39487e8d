"""A reward model: a sequence-classification model with one label scores prompt + response (verl's reward_model).

The score of a row is the model's head on the last hidden state of its last token,
``score(h_last) = w . h_last (+ b)``, read at the last real token whatever the padding (transformers' own pooling
looks for the pad id, which an EOS token can share). Two ways in:

* same chat template as the policy (``reward_model.model.input_tokenizer`` null): the policy's token ids of the
  prompt and the response go to the reward model as they are (its vocabulary must be the policy's);
* another template (``input_tokenizer`` set to the policy's tokenizer): the response is decoded with that
  tokenizer, appended to the prompt's chat messages as the assistant turn, and the reward model's own tokenizer
  applies its chat template and tokenizes the conversation (verl's _switch_chat_template).

Inputs longer than ``max_length`` tokens keep their last ``max_length`` tokens (where the score is read).
"""

from __future__ import annotations

import torch
from torch import nn

from rft.batch import Batch
from rft.models.load import scalar_head


class RewardModel:
    def __init__(self, model: nn.Module, tokenizer=None, input_tokenizer=None, micro_rows: int | None = None,
                 max_length: int | None = None):
        """`model`: a one-label sequence classifier (`rft.models.load.load_reward_model`); `tokenizer`: its own
        (needed with `input_tokenizer`, the tokenizer that decodes the policy's responses)."""
        if input_tokenizer is not None and not getattr(tokenizer, "chat_template", None):
            from rft.errors import ModelError

            raise ModelError("reward_model.model.input_tokenizer is set, but the reward model's tokenizer has no "
                             "chat template to apply; set input_tokenizer to null to score the policy's tokens")
        self.model = model
        self.base, self.head = scalar_head(model, "reward_model.model")
        self.tokenizer = tokenizer
        self.input_tokenizer = input_tokenizer
        self.micro_rows = micro_rows
        self.max_length = max_length

    def inputs(self, batch: Batch) -> list[list[int]]:
        """The reward model's token ids of every row's prompt + response."""
        rows = []
        for i in range(len(batch)):
            response = batch.response_ids[i][batch.response_mask[i].bool()].tolist()
            if self.input_tokenizer is None:
                ids = batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist() + response
            else:
                if not batch.raw_prompt:
                    raise ValueError("the batch carries no chat messages (raw_prompt) to re-template")
                text = self.input_tokenizer.decode(response, skip_special_tokens=True)
                chat = [*batch.raw_prompt[i], {"role": "assistant", "content": text}]
                rendered = self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=False)
                ids = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
            if self.max_length is not None:
                ids = ids[-self.max_length:]
            rows.append(ids)
        return rows

    @torch.no_grad()
    def score(self, batch: Batch) -> torch.Tensor:
        """(B,) float32 scores, `micro_rows` rows per forward pass."""
        rows = self.inputs(batch)
        device = self.head.weight.device
        out = []
        step = self.micro_rows or len(rows) or 1
        for start in range(0, len(rows), step):
            chunk = rows[start:start + step]
            width = max(1, max(len(r) for r in chunk))
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for j, r in enumerate(chunk):  # right padding: the last real token of row j is at len(r) - 1
                ids[j, :len(r)] = torch.as_tensor(r, dtype=torch.long)
                mask[j, :len(r)] = 1
            ids, mask = ids.to(device), mask.to(device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            hidden = self.base(input_ids=ids, attention_mask=mask, position_ids=positions,
                               use_cache=False).last_hidden_state  # (b, L, H)
            last = (mask.sum(-1) - 1).clamp(min=0)
            h_last = hidden[torch.arange(len(chunk), device=device), last]  # (b, H)
            out.append(self.head(h_last).squeeze(-1).float().cpu())
        return torch.cat(out) if out else torch.zeros(0)
