"""A message's files, downloaded into the workspace for the model (within a size limit)."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from bot.telegram.inbound.media import FileRef
from bot.telegram.inbound.updates import Message
from bot.telegram.sending.api import BadRequest, Json, TelegramError
from bot.telegram.sending.delivery import TelegramSender

__all__ = ["Downloads"]

log = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class Downloads:
    """Files go to ``<workspace>/uploads/telegram/<chat_id>/``."""

    def __init__(self, sender: TelegramSender, workspace: Path, max_bytes: int) -> None:
        self._sender = sender
        self._api = sender.api
        self._workspace = workspace
        self._limit = max_bytes

    async def fetch(
        self, m: Message, files: Sequence[FileRef] | None = None
    ) -> tuple[list[Json], list[str]]:
        """The message's files (or ``files`` of them) saved in the workspace, and a
        sentence for each one that could not be (too large, or the download failed)."""
        attachments: list[Json] = []
        problems: list[str] = []
        folder = Path("uploads") / "telegram" / str(m.chat_id)
        limit = self._limit
        for ref in m.files if files is None else files:
            too_large = f"{ref.name} is too large to download (the limit is {_mb(limit)})."
            if ref.size is not None and ref.size > limit:
                problems.append(too_large)
                continue
            name = _SAFE_NAME.sub("_", f"{ref.unique_id}_{ref.name}")[:150]
            relative = folder / name
            try:
                info = await self._sender.call(m.chat_id, partial(self._api.get_file, ref.file_id))
                size = info.get("file_size")  # the message may not have said (or lied)
                if isinstance(size, int) and size > limit:
                    problems.append(too_large)
                    continue
                target = self._workspace / relative
                download = partial(self._api.download_file, info["file_path"], target)
                await self._sender.call(m.chat_id, download)
            except BadRequest as exc:
                log.warning("download of %s refused: %s", ref.file_id, exc)
                # getFile's own word for a file over the Bot API's 20 MB, when the message
                # did not say its size (it read "I could not download" until 2026-12-06).
                big = "too big" in str(exc).lower()
                problems.append(
                    f"{ref.name} is too large to download (Telegram hands bots files of up "
                    "to 20 MB)."
                    if big
                    else f"I could not download {ref.name}."
                )
                continue
            except (TelegramError, KeyError, OSError) as exc:
                log.warning("download of %s failed: %s", ref.file_id, exc)
                problems.append(f"I could not download {ref.name}.")
                continue
            attachment: Json = {
                "path": relative.as_posix(),
                "name": ref.name,
                "kind": ref.kind,
                "mime_type": ref.mime_type,
                "size": (self._workspace / relative).stat().st_size,
            }
            if ref.duration is not None:
                attachment["duration_s"] = ref.duration
            attachments.append(attachment)
        return attachments, problems


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"
