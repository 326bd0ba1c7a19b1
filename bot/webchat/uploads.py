"""A conversation's uploaded files, kept in the workspace for the model.

Telegram's shape (``bot/telegram/inbound/downloads.py``): a file lands in
``<workspace>/uploads/web/<conversation id>/<random token>_<safe name>`` and a message
names it by that file name, its id. An id is resolved only inside its own conversation's
folder, and only when it has the strict form an upload gets, so a message cannot point
the model at any other file.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import os
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_ATTACHMENTS",
    "MAX_NAME_CHARS",
    "MAX_UPLOAD_BYTES",
    "UPLOAD_ID_PATTERN",
    "AttachmentError",
    "TooLarge",
    "Upload",
    "Uploads",
    "audio_type",
    "safe_name",
]

#: Telegram's bot download limit, so a file is welcome in both front ends.
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
#: Files one message may carry.
MAX_ATTACHMENTS = 10
MAX_NAME_CHARS = 120
_TOKEN_HEX = 32
#: What an upload's id looks like: the token, then a safe name (no dot first, no slash).
UPLOAD_ID_PATTERN = (
    rf"^[0-9a-f]{{{_TOKEN_HEX}}}_[A-Za-z0-9_-][A-Za-z0-9._-]{{0,{MAX_NAME_CHARS - 1}}}$"
)
_UPLOAD_ID = re.compile(UPLOAD_ID_PATTERN)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_FOLDER = Path("uploads") / "web"
_PART = ".part"  # a file being written: its name fails the id pattern (leading dot)
_VOICE = ".voice"  # ".<id>.voice": the upload is a voice note (its duration inside)
#: What a voice note's extension says it holds (whisper servers take each of these).
_VOICE_TYPES = {
    ".ogg": "audio/ogg",
    ".oga": "audio/ogg",
    ".opus": "audio/ogg",
    ".webm": "audio/webm",
    ".m4a": "audio/mp4",
    ".mp4": "audio/mp4",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".flac": "audio/flac",
}


class TooLarge(Exception):
    def __init__(self, limit: int, message: str | None = None) -> None:
        super().__init__(message or f"The file is over the limit of {_mb(limit)}.")


class AttachmentError(ValueError):
    """A message names a file it may not attach; the message is one sentence."""


@dataclass(frozen=True, slots=True)
class Upload:
    id: str
    name: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "size": self.size}


#: Sound files known whatever the host: ``mimetypes`` knows ``.ogg``, ``.oga``, ``.m4a``
#: and ``.flac`` only from /etc/mime.types, which a slim image lacks (there such a file was
#: a "document", never heard, until 2026-12-07; found by review). Not ``.webm``/``.mp4``.
_AUDIO_TYPES = {
    extension: kind
    for extension, kind in _VOICE_TYPES.items()
    if extension not in {".webm", ".mp4"}
} | {".aac": "audio/aac"}


def audio_type(name: str) -> str | None:
    """The audio type ``name``'s extension names (``None``: not a sound file; a ``.webm``
    or ``.mp4`` is taken for a video unless it is a voice note)."""
    known = _AUDIO_TYPES.get(os.path.splitext(name)[1].lower())
    if known is not None:
        return known
    guessed = mimetypes.guess_type(name)[0]
    return guessed if guessed is not None and guessed.startswith("audio/") else None


def safe_name(name: str) -> str:
    """``name``'s last path part in letters, digits, ``.``, ``_``, ``-``; no dot first (no
    hidden file, no ``..``), at most ``MAX_NAME_CHARS`` (the extension kept)."""
    base = re.split(r"[/\\]", name)[-1]
    cleaned = _UNSAFE.sub("_", base).lstrip(".")
    if len(cleaned) > MAX_NAME_CHARS:
        stem, dot, extension = cleaned.rpartition(".")
        if dot and 0 < len(extension) <= 16:
            cleaned = f"{stem[: MAX_NAME_CHARS - len(extension) - 1]}.{extension}"
        else:
            cleaned = cleaned[:MAX_NAME_CHARS]
    return cleaned or "file"


class Uploads:
    """Saves and finds the files of the conversations under ``workspace``."""

    def __init__(self, workspace: Path, *, max_bytes: int = MAX_UPLOAD_BYTES) -> None:
        self._workspace = workspace
        self.max_bytes = max_bytes

    def _folder(self, conversation_id: str) -> Path:
        return _FOLDER / conversation_id

    async def save(
        self,
        conversation_id: str,
        name: str,
        body: AsyncIterator[bytes],
        *,
        max_bytes: int | None = None,
        too_large: str | None = None,
        voice: bool = False,
        seconds: int | None = None,
    ) -> Upload:
        """Write ``body`` chunk by chunk (never whole in memory); ``TooLarge`` (saying
        ``too_large`` when given) as soon as it passes the limit (``max_bytes`` when lower
        than the uploads'), and nothing is kept. ``voice``: the upload is a voice note
        (``seconds`` long; its mark is written before the file appears)."""
        limit = min(self.max_bytes, max_bytes) if max_bytes is not None else self.max_bytes
        kept = safe_name(name)
        upload_id = f"{secrets.token_hex(_TOKEN_HEX // 2)}_{kept}"
        folder = self._workspace / self._folder(conversation_id)
        final = folder / upload_id
        partial = folder / f"{_PART}{upload_id}"
        mark = folder / f".{upload_id}{_VOICE}"
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
        size = 0
        out = await asyncio.to_thread(partial.open, "xb")
        try:
            async for chunk in body:
                size += len(chunk)
                if size > limit:
                    raise TooLarge(limit, too_large)
                await asyncio.to_thread(out.write, chunk)
            await asyncio.to_thread(out.close)
            if voice:
                await asyncio.to_thread(mark.write_text, json.dumps({"seconds": seconds}))
            await asyncio.to_thread(os.replace, partial, final)
        except BaseException:
            out.close()
            partial.unlink(missing_ok=True)
            mark.unlink(missing_ok=True)
            raise
        return Upload(upload_id, kept, size)

    def attachments(self, conversation_id: str, ids: list[str]) -> list[dict[str, Any]]:
        """The metadata of each id's file in this conversation (the engine's attachment
        shape), or ``AttachmentError``."""
        folder = self._folder(conversation_id)
        real_folder = os.path.realpath(self._workspace / folder)
        found: list[dict[str, Any]] = []
        for upload_id in ids:
            if not _UPLOAD_ID.fullmatch(upload_id):
                raise AttachmentError("An attachment's id is not one an upload gave.")
            path = self._workspace / folder / upload_id
            real = os.path.realpath(path)
            if os.path.dirname(real) != real_folder or path.is_symlink() or not path.is_file():
                raise AttachmentError(
                    "An attached file is not in this conversation; upload it again."
                )
            name = upload_id[_TOKEN_HEX + 1 :]
            found.append(
                {
                    "path": (folder / upload_id).as_posix(),
                    "name": name,
                    **_kind_of(name, path.parent / f".{upload_id}{_VOICE}"),
                    "size": path.stat().st_size,
                }
            )
        return found


def _kind_of(name: str, mark: Path) -> dict[str, Any]:
    """``kind`` and ``mime_type`` (and a voice note's ``duration_s``) of an upload."""
    voice = _voice_mark(mark)
    if voice is not None:
        extension = os.path.splitext(name)[1].lower()
        mime_type = _VOICE_TYPES.get(extension) or audio_type(name) or "audio/ogg"
        return {"kind": "voice", "mime_type": mime_type, **voice}
    sound = audio_type(name)
    if sound is not None:
        return {"kind": "audio", "mime_type": sound}
    mime_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    kind = "photo" if mime_type.startswith("image/") else "document"
    return {"kind": kind, "mime_type": mime_type}


def _voice_mark(mark: Path) -> dict[str, Any] | None:
    """A voice note's mark (``duration_s`` when it was declared), or ``None``: none."""
    if mark.is_symlink() or not mark.is_file():
        return None
    try:
        seconds = json.loads(mark.read_text()).get("seconds")
    except (OSError, ValueError, AttributeError):
        return {}
    return {"duration_s": seconds} if isinstance(seconds, int) and seconds >= 0 else {}


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"
