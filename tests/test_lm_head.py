"""The LM head taken out of the update's forward pass (rft/workers/lm_head.py): log-probs, entropies and every
parameter's gradient equal the full-logits pass, and no tensor of (tokens x vocabulary) for more than a chunk of
tokens exists in the forward or the backward; heads rft cannot reproduce keep the full logits."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rft.batch import Batch
from rft.workers import lm_head as head_module
from rft.workers.policy import forward_logprobs

VOCAB = 4096


class LargestVocabTensor(TorchDispatchMode):
    """The most token positions of any tensor an operator produced whose last dimension is the vocabulary."""

    def __init__(self):
        super().__init__()
        self.rows = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, tuple | list) else [out]:
            if isinstance(x, torch.Tensor) and x.dim() >= 2 and x.shape[-1] == VOCAB:
                self.rows = max(self.rows, x.numel() // VOCAB)
        return out


def _model(**config):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, **config)
    model = Qwen2ForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    return model


def _batch(rows: int = 4, prompt: int = 5, response: int = 120) -> Batch:
    g = torch.Generator().manual_seed(1)
    response_mask = torch.ones(rows, response, dtype=torch.long)
    response_mask[1, 70:] = 0  # rows of different lengths
    return Batch(prompt_ids=torch.randint(0, VOCAB, (rows, prompt), generator=g),
                 prompt_mask=torch.ones(rows, prompt, dtype=torch.long),
                 response_ids=torch.randint(0, VOCAB, (rows, response), generator=g) * response_mask,
                 response_mask=response_mask, group=torch.arange(rows))


def _pass(model, batch, chunk):
    model.zero_grad()
    with LargestVocabTensor() as seen:
        logprobs, entropy = forward_logprobs(model, batch, 0.8, with_entropy=True, entropy_grad=True,
                                             chunk_tokens=chunk)
        ((logprobs * batch.response_mask).sum() + 0.1 * (entropy * batch.response_mask).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return logprobs.detach(), entropy.detach(), grads, seen.rows


def test_the_update_never_holds_the_logits_of_more_than_a_chunk_and_matches_the_full_logits():
    """4 rows x 120 response tokens over a 4,096-token vocabulary: through the head in chunks of 32 positions the
    largest (positions x vocabulary) tensor of the forward and the backward has 32 positions (the full-logits
    pass: the 121 positions the head runs on in each row, 484); log-probs, entropies and the gradient of every
    parameter (tied embedding and untied head alike) equal the full-logits pass's (1e-5)."""
    for tied in (True, False):
        model = _model(tie_word_embeddings=tied)
        batch = _batch()
        assert head_module.lm_head(model) is not None
        chunked = _pass(model, batch, 32)
        setattr(model, head_module._HEAD_ATTR, None)  # the model's own logits
        full = _pass(model, batch, 32)
        assert chunked[3] == 32 and full[3] == 4 * 121, (chunked[3], full[3])
        assert float((chunked[0] - full[0]).abs().max()) <= 1e-5
        assert float((chunked[1] - full[1]).abs().max()) <= 1e-5
        for name, g in full[2].items():
            assert float((chunked[2][name] - g).abs().max()) <= 1e-5 * max(1.0, float(g.abs().max())), name


def test_a_head_rft_does_not_reproduce_keeps_the_full_logits(caplog):
    """A logit transform the config does not declare (here: a head whose forward adds 1 to one token's logit) fails
    the one-time check: the model's own logits are used, and the log says why."""
    model = _model()

    class Shifted(torch.nn.Linear):
        def forward(self, x):
            out = super().forward(x)
            out[..., 7] += 1.0
            return out

    shifted = Shifted(32, VOCAB, bias=False)
    shifted.weight = model.lm_head.weight
    model.lm_head = shifted
    with caplog.at_level("INFO", logger="rft"):
        assert head_module.lm_head(model) is None
    assert "output layer is a Shifted, not a Linear layer" in caplog.text
    model = _model()
    model.config.logit_scale = 3.0  # declared, but Qwen2's forward does not apply it
    with caplog.at_level("INFO", logger="rft"):
        assert head_module.lm_head(model) is None
    assert "its log-probs differ from the model's own by" in caplog.text
