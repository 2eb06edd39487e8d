"""The next prompt of a multi-turn exchange: the ids the model sampled, then the chat template's rendering of the
new turns, so no token the model wrote is ever re-tokenized.

Many chat templates are not append-only: the rendering of a conversation extended by a turn does not start with the
rendering of the conversation before it (Qwen3 and DeepSeek-R1 drop the reasoning of earlier turns, Llama and Gemma
trim whitespace, a model may end its turn with an alternative EOS its generation config declares, such as
`<|endoftext|>` for `<|im_end|>`). Re-rendering the history would change tokens the model sampled, and with them the
behaviour log-probs the loss reads. So the history is kept as ids, and only the text the template writes *after*
the last assistant turn is rendered and tokenized:

1. `before` = render(history) without the generation prompt, `after` = render(history + new) with it;
2. the new turns' text is what `after` has past the place where `before` ends: `after[len(before):]` when `before`
   is its prefix, else past the last place `after` holds the longest end of `before` (the template rewrote or moved
   earlier parts, but wrote the last assistant turn's end as before and the new turns after it);
3. the glue between the sampled ids and that text is what `before` has after the last assistant turn's end-of-turn
   token (Qwen's and Gemma's newline); a turn the model did not end (max tokens) gets the end-of-turn token too;
4. that text is tokenized behind the end-of-turn token's own text, which is then dropped, so a tokenizer's prefix
   rules (SentencePiece's leading space) see it as they see it inside a full rendering.

A mismatch with the full rendering (`after`, tokenized) is counted and described, never fatal: the sampled tokens
are the truth. One function, `continuation`, used by the workflows' conversations (`model.Conversation.add`) and
by the OpenAI-compatible endpoint (`server.OpenAIEndpoint`) for the conversations it keeps; one, `raw_reply`, for
the text both parse tool calls from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

Render = Callable[[list[dict], bool], str]
"""(messages, generation_prompt) -> the chat template's text."""


class TurnError(Exception):
    """The new turns cannot follow the conversation: the template refuses them (Gemma's alternating roles, Mistral's
    tool-call ids, Llama-3.1's one call per turn) or its rendering cannot be aligned with the history. A fault of
    this conversation (the sample), not of the run: its workflow ends it and scores it as it stands."""


@dataclass
class Continuation:
    ids: list[int]
    """The tokens after the sampled ids: the template's glue, the new turns, the generation prompt."""
    text: str
    """Their text."""
    full: str
    """The template's full rendering of the history and the new turns (with the generation prompt), which a
    re-tokenizing trainer would have used: `mismatch` compares with it."""
    rewritten: bool = False
    """The template renders the history otherwise once the new turns follow (its rendering is no prefix of
    `full`): the new turns' text was found past the longest end of it (`_past_end`)."""


def continuation(tokenizer, render: Render, history: list[dict], new: list[dict], ended: bool,
                 eos_ids: Collection[int], encode: Callable[[str], list[int]] | None = None) -> Continuation:
    """What follows the sampled ids of the last assistant turn of `history` when `new` messages come (the module
    docstring's method). `ended`: the sampled turn ends with one of `eos_ids` (the family's end-of-turn or an
    alternative it declares); `encode`: text -> ids where the tokenizer alone does not do (images)."""
    try:
        before, after = render(history, False), render(history + new, True)
    except Exception as e:  # jinja's TemplateError, or a template's own TypeError on a value it cannot join
        raise TurnError(f"the chat template refuses the conversation with its new turns: {type(e).__name__}: "
                        f"{' '.join(str(e).split())[:200]}") from None
    mark, tail = _end_of_turn(tokenizer, before, eos_ids)
    suffix = _past_end(before, after, mark)
    text = (tail if ended else mark + tail) + suffix
    ids = encode(text) if encode is not None else _encode_behind(tokenizer, mark, text)
    return Continuation(ids, text, after, not after.startswith(before))


def next_prompt(sampled: list[int], tokenizer, render: Render, history: list[dict], new: list[dict], ended: bool,
                eos_ids: Collection[int]) -> list[int]:
    """The ids of the next prompt: `sampled` (the conversation as the model saw and wrote it, ending with its last
    turn) and the `continuation` of `history` by `new`."""
    return list(sampled) + continuation(tokenizer, render, history, new, ended, eos_ids).ids


def raw_reply(tokenizer, ids: list[int], eos_ids: Collection[int]) -> str:
    """A reply's text as a tool-call parser reads it: its special tokens kept (Mistral's `[TOOL_CALLS]`, Llama's
    `<|python_tag|>` are the call's markers), the end-of-turn token that ended it dropped."""
    if ids and ids[-1] in eos_ids:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False)


def _past_end(before: str, after: str, mark: str) -> str:
    """The text of `after` past where `before` ends in it: past `before` itself where it is a prefix, else past the
    last place `after` holds the longest end of `before` (at least its closing end-of-turn `mark` and a character
    before it): the template rewrote earlier turns, or moved a part before the new ones (Mistral's tool list goes
    before the last user turn), but wrote the last assistant turn's end as before, with the new turns after it."""
    if after.startswith(before):
        return after[len(before):]
    low, high = 0, len(before)  # before[-low:] is in after, before[-(high + 1):] is not
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if before[-mid:] in after else (low, mid - 1)
    needed = len(before) - before.rfind(mark) + 1 if mark and mark in before else 1
    if low < needed:
        raise TurnError("the chat template rewrites the end of the last turn, so where the new turns begin cannot "
                        "be found")
    return after[after.rfind(before[-low:]) + low:]


def _end_of_turn(tokenizer, before: str, eos_ids: Collection[int]) -> tuple[str, str]:
    """(the text of the end-of-turn token that closes the last assistant turn in `before`, the text after it):
    the last of `eos_ids` the rendering holds ("", "" where it holds none)."""
    found = [(before.rfind(t), t) for t in _texts(tokenizer, eos_ids) if t]
    at, mark = max(found, default=(-1, ""))
    if at < 0:
        return "", ""
    return mark, before[at + len(mark):]


def _texts(tokenizer, ids: Collection[int]) -> list[str]:
    return [tokenizer.decode([i], skip_special_tokens=False) for i in sorted(set(ids))]


def _encode_behind(tokenizer, mark: str, text: str) -> list[int]:
    """`text`'s ids as they are inside a rendering where it follows `mark` (a special token's text), which is
    tokenized with it and dropped: the tokenizer's prefix rules then see what they see in a full rendering."""
    def ids(s: str) -> list[int]:
        return tokenizer(s, add_special_tokens=False)["input_ids"]

    if mark:
        head, both = ids(mark), ids(mark + text)
        if both[:len(head)] == head:
            return both[len(head):]
    return ids(text)


def mismatch(tokenizer, ids: list[int], full: str) -> str | None:
    """Where `ids` (the conversation as sampled and continued) differ from `full` (the template's rendering of it,
    tokenized), in words; None where they are equal."""
    rendered = tokenizer(full, add_special_tokens=False)["input_ids"]
    if rendered == list(ids):
        return None
    at = next((i for i, (a, b) in enumerate(zip(ids, rendered)) if a != b), min(len(ids), len(rendered)))

    def around(seq: list[int]) -> str:
        return repr(tokenizer.decode(seq[max(0, at - 3): at + 5], skip_special_tokens=False))

    return (f"from token {at} of {len(ids)} the sampled conversation reads {around(list(ids))} where the template's "
            f"full rendering ({len(rendered)} tokens) reads {around(rendered)}")
