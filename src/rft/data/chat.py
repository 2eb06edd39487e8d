"""Chat messages to the text a model sees: the tokenizer's chat template (or `data.chat_template`), and for a base
model whose tokenizer has none, plain text.

Plain text is completion style, the way a base model is prompted: the messages' contents in order, each message
after the first on a new line except the assistant's, which continues the text directly and ends with the EOS
token (so a model learns to stop, and an SFT turn's end is found as with a template). A single user message renders
as its content alone; a system message and a user message as `system\\nuser`. The rendering of a conversation is a
prefix of the rendering of the conversation extended by more messages, which multi-turn workflows need. A
tokenizer that adds BOS to what it encodes (Llama, Mistral, Gemma base models) gets it in front, as its own
encoding would; with a chat template, the template decides (most write the BOS themselves).
"""

from __future__ import annotations


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
           chat_template: str | None = None) -> str:
    """The text of `messages` (with the assistant's generation prompt when `generation_prompt`)."""
    if has_template(tokenizer, chat_template):
        return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=generation_prompt,
                                             tokenize=False, chat_template=chat_template)
    return plain_text(tokenizer, messages)


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
