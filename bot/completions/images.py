"""Images a client sends in its message (``image_url`` parts as ``data:`` URLs), kept in
the workspace as the message's attachments, as the web chat keeps its uploads.

A URL that is not ``data:`` is refused, never fetched: the service fetches no address a
request names. What is kept: ``uploads/api/<conversation>/<token>_image.<ext>``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.completions.protocol import ApiError

__all__ = ["MAX_IMAGES", "Image", "decode_images", "keep_images"]

MAX_IMAGES = 10
_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
#: Spellings clients send for a type above.
_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg"}
_DATA_URL = re.compile(r"data:(?P<type>[a-z]+/[a-z0-9.+-]+);base64,(?P<data>.*)", re.S | re.I)
_FOLDER = Path("uploads") / "api"


@dataclass(frozen=True, slots=True)
class Image:
    mime_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def decode_images(urls: list[str]) -> list[Image]:
    """The images of ``data:`` URLs; ``ApiError(400)`` for anything else."""
    if len(urls) > MAX_IMAGES:
        raise ApiError(400, f"A message carries at most {MAX_IMAGES} images.", param="messages")
    images = []
    for url in urls:
        matched = _DATA_URL.fullmatch(url.strip()) if isinstance(url, str) else None
        if matched is None:
            raise ApiError(
                400,
                "Images are taken as data: URLs (base64); this service fetches no address.",
                param="messages",
                code="unsupported_content",
            )
        kind = matched["type"].lower()
        kind = _ALIASES.get(kind, kind)
        if kind not in _TYPES:
            raise ApiError(
                400,
                "An image is PNG, JPEG, GIF or WebP.",
                param="messages",
                code="unsupported_content",
            )
        try:
            data = base64.b64decode(matched["data"], validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "An image's base64 is not valid.", param="messages") from None
        if not data:
            raise ApiError(400, "An image is empty.", param="messages")
        images.append(Image(kind, data))
    return images


async def keep_images(
    workspace: Path, conversation_id: int, images: list[Image]
) -> list[dict[str, Any]]:
    """Write ``images`` into the conversation's folder; their attachment metadata."""
    folder = _FOLDER / str(conversation_id)
    await asyncio.to_thread((workspace / folder).mkdir, parents=True, exist_ok=True)
    kept = []
    for image in images:
        name = f"image.{_TYPES[image.mime_type]}"
        path = folder / f"{secrets.token_hex(16)}_{name}"
        await asyncio.to_thread((workspace / path).write_bytes, image.data)
        kept.append(
            {
                "path": path.as_posix(),
                "name": name,
                "kind": "photo",
                "mime_type": image.mime_type,
                "size": len(image.data),
            }
        )
    return kept
