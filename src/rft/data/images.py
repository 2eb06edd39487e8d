"""Images in prompt rows (verl's multimodal format): the `data.image_key` column holds a list per row, each image as
parquet stores them (`{"bytes": ...}` or `{"path": ...}`), a path (relative to the data file, or absolute), raw
bytes, or a PIL image when rows come from Python. The prompt's text marks where each image goes with `<image>`;
with no placeholder at all, the images go first in the first user message, as verl puts them.

An image travels as its encoded bytes (a PIL image is written as PNG once): that is what experiences carry to the
buffer and the trainer, which decode them again for the processor (`decode`). What a model sees of an image (pixel
values, image tokens, positions) is the model's own processor's work (`rft.models.vision`).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rft.data.io import DataError

PLACEHOLDER = "<image>"
VIDEO_KEY = "videos"


def _pil():
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with transformers' image processors
        raise DataError("images in the data need Pillow: pip install pillow") from None
    return Image


def image_bytes(value: Any, base: Path | None, where: str) -> bytes:
    """The encoded bytes of one image entry of a row (see the module docstring), checked to decode."""
    Image = _pil()
    if isinstance(value, dict):
        if value.get("bytes") is not None:
            value = value["bytes"]
        elif value.get("path"):
            value = str(value["path"])
        elif value.get("image") is not None:
            value = value["image"]
        else:
            raise DataError(f"{where}: an image entry {sorted(value)} has neither 'bytes' nor 'path'")
    if isinstance(value, Image.Image):
        out = io.BytesIO()
        value.save(out, format="PNG")
        return out.getvalue()
    if isinstance(value, str):
        if value.startswith("file://"):
            value = value[len("file://"):]
        path = Path(value)
        if not path.is_absolute() and base is not None:
            path = base / path
        if not path.is_file():
            raise DataError(f"{where}: image file {str(path)!r} does not exist; paths are relative to the data file "
                            "or absolute")
        data = path.read_bytes()
        origin = f"image file {str(path)!r}"
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data, origin = bytes(value), "its image bytes"
    else:
        raise DataError(f"{where}: an image must be bytes, a path, {{'bytes': ...}} / {{'path': ...}} or a PIL "
                        f"image, not {type(value).__name__}")
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()  # a PNG's checksums; a JPEG's verify reads only its header
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # every pixel: a truncated JPEG fails only here (else in the processor, naming no row)
    except Exception as e:
        raise DataError(f"{where}: {origin} does not decode as an image ({type(e).__name__}: {e}); replace it "
                        "with a whole image (a truncated download or copy?) or drop the row") from None
    return data


def row_images(row: dict, image_key: str, base: Path | None, where: str) -> list[bytes]:
    """The encoded images of `row` (its `image_key` column; none when the row has no such value)."""
    if row.get(VIDEO_KEY) is not None and len(_as_list(row[VIDEO_KEY])):
        raise DataError(f"{where}: the row has videos ({VIDEO_KEY!r}): rft trains on images, not yet on videos; "
                        "drop the column or sample frames as images")
    value = row.get(image_key)
    if value is None:
        return []
    return [image_bytes(v, base, f"{where} ({image_key}[{i}])") for i, v in enumerate(_as_list(value))]


def has_images(row: dict, image_key: str) -> bool:
    """Whether `row` holds at least one image (or video)."""
    return any(row.get(k) is not None and len(_as_list(row[k])) > 0 for k in (image_key, VIDEO_KEY))


def _as_list(value: Any) -> list:
    if hasattr(value, "tolist") and not isinstance(value, (bytes, str)):
        value = value.tolist()
    return list(value) if isinstance(value, (list, tuple)) else [value]


def with_image_parts(messages: list[dict], count: int, where: str) -> list[dict]:
    """`messages` with each `<image>` of a text content as an image part ({"type": "image"}) in a content list, the
    form chat templates of vision-language models read; with no placeholder, `count` image parts put first in the
    first user message. The placeholders must number `count`."""
    placed = sum(str(m["content"]).count(PLACEHOLDER) for m in messages if isinstance(m["content"], str))
    placed += sum(1 for m in messages if isinstance(m["content"], list) for p in m["content"]
                  if isinstance(p, dict) and p.get("type") == "image")
    if placed and placed != count:
        raise DataError(f"{where}: the prompt has {placed} {PLACEHOLDER} placeholder(s) and the row {count} "
                        "image(s); give one placeholder per image, in order (or none: the images then go first); "
                        "data.image_key names the column of the images")
    out, first_user = [], True
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            pieces = re.split(f"({re.escape(PLACEHOLDER)})", content)
            parts = [{"type": "image"} if p == PLACEHOLDER else {"type": "text", "text": p} for p in pieces if p]
        else:
            parts = list(content)
        if not placed and first_user and m["role"] == "user":
            parts = [{"type": "image"} for _ in range(count)] + parts
            first_user = False
        out.append({**m, "content": parts})
    if not placed and first_user:
        raise DataError(f"{where}: the row has {count} image(s) but no user message to put them in")
    return out


IMAGE_PART_TYPES = ("image", "image_url", "input_image")


def message_images(messages: list[dict], where: str) -> tuple[list[dict], list[bytes]]:
    """(`messages` with every image part as the chat template's bare {"type": "image"}, the images' encoded bytes in
    order) for messages a workflow or the OpenAI-compatible endpoint sends: an image part is {"type": "image",
    "image": <bytes, a PIL image, a path or {"bytes": ...}>} (what `Task.messages` holds) or OpenAI's {"type":
    "image_url", "image_url": {"url": "data:image/png;base64,..."}} (a data URL: nothing is fetched). Messages
    without images come back unchanged."""
    out, images = [], []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") in IMAGE_PART_TYPES
                                                    for p in content):
            out.append(m)
            continue
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in IMAGE_PART_TYPES:
                parts.append(part)
                continue
            value = part.get("image") if kind == "image" else part.get(kind)
            if isinstance(value, dict) and kind != "image":  # {"image_url": {"url": ...}}
                value = value.get("url")
            if isinstance(value, str) and kind != "image":
                value = _data_url(value, where)
            if value is None:
                raise DataError(f"{where}: an image part without its image ({{'type': {kind!r}}}: give the image "
                                "(bytes, a path) or a data: URL)")
            images.append(image_bytes(value, None, f"{where} (image {len(images)})"))
            parts.append({"type": "image"})
        out.append({**m, "content": parts})
    return out, images


def _data_url(url: str, where: str) -> bytes:
    """The bytes of a base64 `data:` URL (an image part's image_url); any other URL is refused (rft fetches
    nothing)."""
    import base64
    import binascii

    if not url.startswith("data:") or ";base64," not in url[:100]:
        raise DataError(f"{where}: image_url {url[:60]!r} is not a base64 data: URL; rft fetches no URLs: send the "
                        "image inline (data:image/png;base64,...)")
    try:
        return base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    except (binascii.Error, ValueError) as e:
        raise DataError(f"{where}: image_url's base64 data does not decode ({e})") from None


def filled_image_parts(messages: list[dict], images: list[bytes]) -> list[dict]:
    """`messages` (with bare {"type": "image"} parts, as `with_image_parts` writes them) with each image part
    holding its image's bytes, in order: messages that carry their images (`message_images` reads them back)."""
    if not images:
        return [dict(m) for m in messages]
    it = iter(images)
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [{**p, "image": next(it)} if isinstance(p, dict) and p.get("type") == "image" else p
                       for p in content]
        out.append({**m, "content": content})
    return out


def decode(data: bytes):
    """A PIL image (RGB) from encoded bytes."""
    Image = _pil()
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def refuse_images(row: dict, where: str, what: str, key: str = "images") -> None:
    """A row with images where `what` (a trainer) does not take them yet: one error, never the images dropped."""
    if has_images(row, key):
        raise DataError(f"{where}: the row has images ({key!r} or {VIDEO_KEY!r}), which {what} does not take "
                        "(docs/multimodal.md); drop the column to train on the text alone")
