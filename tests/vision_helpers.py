"""What the vision-language tests share: a plain PNG (the tiny model folders: the `vlm` fixture, conftest.py)."""

from __future__ import annotations

import io

from PIL import Image


def png(colour=(255, 0, 0), size=(40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()
