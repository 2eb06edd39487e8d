"""Chat messages to the text a model sees: the tokenizer's chat template (or `data.chat_template`), and for a base
model whose tokenizer has none, plain text.

Plain text is completion style, the way a base model is prompted: the messages' contents in order, each message
after the first on a new line except the assistant's, which continues the text directly and ends with the EOS
token (so a model learns to stop, and an SFT turn's end is found as with a template). A single user message renders
as its content alone; a system message and a user message as `system\\nuser`. The rendering of a conversation is a
prefix of the rendering of the conversation extended by more messages, which multi-turn workflows need. A
tokenizer that adds BOS to what it encodes (Llama, Mistral, Gemma base models) gets it in front, as its own
encoding would; with a chat template, the template decides (most write the BOS themselves).

`template_kwargs` (verl's `data.apply_chat_template_kwargs`, e.g. `{enable_thinking: false}` for Qwen3) are the
template's own variables, passed to every rendering as transformers passes the extra keyword arguments of
`apply_chat_template`: a variable the template does not read changes nothing (Jinja ignores it), and plain text has
no template to read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rft.data.io import DataError


def has_template(tokenizer, chat_template: str | None = None) -> bool:
    return bool(chat_template or getattr(tokenizer, "chat_template", None))


def adds_bos(tokenizer) -> bool:
    """Whether `tokenizer` puts its BOS token in front of what it encodes (add_special_tokens=True)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    return bool(ids) and ids[0] == bos


def render(tokenizer, messages: list[dict], *, generation_prompt: bool = True, tools: list[dict] | None = None,
           chat_template: str | None = None, template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The text of `messages` (with the assistant's generation prompt when `generation_prompt`); `template_kwargs`:
    the template's variables (module docstring)."""
    if has_template(tokenizer, chat_template):
        return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=generation_prompt,
                                             tokenize=False, chat_template=chat_template, **(template_kwargs or {}))
    return plain_text(tokenizer, messages)


def reply_prefix_of(messages: list[dict]) -> tuple[list[dict], str]:
    """(`messages` before a last assistant message of text, that text): the start of the reply the model continues
    (data.reply_prefix, Trinity-RFT's format.reply_prefix; its workflows put it last, as vLLM's
    continue_final_message reads it); (`messages`, "") where the last message is not the assistant's."""
    if messages and messages[-1].get("role") == "assistant" and isinstance(messages[-1].get("content"), str):
        return messages[:-1], messages[-1]["content"]
    return messages, ""


def render_prompt(tokenizer, messages: list[dict], **kwargs) -> str:
    """The prompt text of `messages`: with the generation prompt, followed by the text of a last assistant message
    (`reply_prefix_of`), which the model's reply continues."""
    messages, prefix = reply_prefix_of(messages)
    return render(tokenizer, messages, **kwargs) + prefix


def with_reply_prefix(messages: list[dict], prefix: str | None) -> list[dict]:
    """`messages` followed by an assistant message of `prefix` (data.reply_prefix), unchanged without one."""
    return [*messages, {"role": "assistant", "content": prefix}] if prefix else messages


def template_kwargs_problem(value: Any) -> str | None:
    """What is wrong with `value` as the template's variables, None where nothing: they are a mapping by name, and
    none is one of `apply_chat_template`'s own arguments (tokenize, tools, add_generation_prompt, ...), which rft
    sets itself (transformers would fail at the first prompt: "got multiple values for keyword argument")."""
    import inspect

    from transformers import PreTrainedTokenizerBase

    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        return "give a mapping of template variables, e.g. {enable_thinking: false}"
    parameters = inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters.values()
    own = {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {"self"}
    taken = sorted(set(value) & own)
    if not taken:
        return None
    one = len(taken) == 1
    return (f"{', '.join(taken)} {'is an argument' if one else 'are arguments'} of apply_chat_template that rft sets "
            f"itself, not a template variable; remove {'it' if one else 'them'}")


def plain_text(tokenizer, messages: list[dict]) -> str:
    """A conversation as plain text (the module docstring's rules)."""
    parts = [tokenizer.bos_token] if adds_bos(tokenizer) else []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            parts.append(str(message["content"]) + (tokenizer.eos_token or ""))
        else:
            parts.append(("\n" if i else "") + str(message["content"]))
    return "".join(parts)


def encode(tokenizer, messages: list[dict], **kwargs) -> list[int]:
    """The token ids of `render(tokenizer, messages, **kwargs)` (the rendering holds every special token)."""
    return tokenizer(render(tokenizer, messages, **kwargs), add_special_tokens=False)["input_ids"]


Encode = Callable[[list[dict], bool], list[int]]
"""A row's chat encoder: (messages, generation_prompt) -> token ids."""


def _text_parts(messages: list[dict]) -> list[dict]:
    """`messages` with each string content as one text part: the content form vision-language chat templates read."""
    return [{**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str) else m
            for m in messages]


def row_encoder(tokenizer, vision=None, images: list[bytes] | None = None, where: str = "",
                template_kwargs: Mapping[str, Any] | None = None) -> Encode:
    """A row's chat encoder: the tokenizer's chat template, or with images a vision-language model's processor
    (`rft.models.vision.Vision`), which expands each image into the family's image tokens; `template_kwargs`: the
    template's variables."""
    if not images:
        return lambda messages, generation_prompt: encode(tokenizer, messages, generation_prompt=generation_prompt,
                                                          template_kwargs=template_kwargs)

    def encode_row(messages: list[dict], generation_prompt: bool) -> list[int]:
        return vision.encode(vision.render(_text_parts(messages), generation_prompt=generation_prompt,
                                           template_kwargs=template_kwargs), images, where)
    return encode_row


def as_messages(value: Any) -> list[dict] | None:
    """`value` as a chat message list [{role, content}, ...] (a role defaults to the assistant), else None."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) and "content" in m for m in value):
        return [{"role": m.get("role", "assistant"), "content": m["content"]} for m in value]
    return None


def response_tokens(tokenizer, encode_row: Encode, prompt: list[dict], prompt_ids: list[int], value: Any,
                    where: str, column: str) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of the response `value` to `prompt` (encoded as `prompt_ids`, with the generation
    prompt), as SFT and preference rows give it (TRL's standard and conversational formats): a string is its text
    plus the EOS token, every token with loss; a chat message list is the assistant turn(s) continuing the prompt's
    conversation, the template of the whole conversation after the prompt's tokens, with loss on its assistant turns
    (their text and closing EOS, not the template's newline after it)."""
    if isinstance(value, str):
        ids = tokenizer(value, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        return ids, [1] * len(ids)
    turns = as_messages(value)
    if turns is None:
        raise DataError(f"{where}: column {column!r} must be a string or a chat message list "
                        "[{role, content}, ...]")
    full = encode_row(prompt + turns, False)
    if full[:len(prompt_ids)] != prompt_ids:
        raise DataError(f"{where}: the chat template of the prompt is not a prefix of the template of the prompt "
                        f"and {column!r}; give {column!r} as a string")
    mask = [0] * len(full)
    for turn in range(len(prompt), len(prompt) + len(turns)):
        messages = (prompt + turns)[: turn + 1]
        if messages[-1]["role"] != "assistant":
            continue
        start = len(encode_row(messages[:-1], True))
        end = len(encode_row(messages, False))
        while end > start and full[end - 1] != tokenizer.eos_token_id:  # the turn's text and EOS, not a newline
            end -= 1
        mask[start:end] = [1] * (end - start)
    ids, mask = full[len(prompt_ids):], mask[len(prompt_ids):]
    if not any(mask):
        raise DataError(f"{where}: column {column!r} has no assistant turn")
    return ids, mask
