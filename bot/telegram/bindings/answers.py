"""One classification of a failed Bot API answer for both bindings.

Both libraries would classify by themselves, differently: python-telegram-bot reports a
5xx as a plain network error and rewrites descriptions; aiogram ignores a 429 whose
``retry_after`` is 0 (a falsy value) and fails to parse one that is not an integer. So
each binding hands the raw status and body of any non-2xx answer here instead.
"""

from __future__ import annotations

import json
from typing import Any

from bot.telegram.sending.api import (
    ChatMoved,
    Forbidden,
    ServerError,
    TelegramError,
    bad_request,
)
from bot.telegram.sending.errors import NotFound, Unauthorized, retry_after

__all__ = ["error_from_answer"]


def error_from_answer(status: int, body: bytes | str) -> TelegramError:
    """The core's error for an HTTP ``status`` answer with ``body`` (JSON or anything)."""
    description = f"HTTP {status}"
    raw_retry_after: Any = None
    moved_to: Any = None
    data = _json(body)
    if isinstance(data, dict):
        if isinstance(data.get("description"), str) and data["description"]:
            description = data["description"]
        parameters = data.get("parameters")
        if isinstance(parameters, dict):
            raw_retry_after = parameters.get("retry_after")
            moved_to = parameters.get("migrate_to_chat_id")
    if status == 429 or raw_retry_after is not None:  # any status naming a wait: wait
        return retry_after(raw_retry_after, description)
    if status == 400 and isinstance(moved_to, int) and not isinstance(moved_to, bool):
        return ChatMoved(description, moved_to)
    if status == 400:
        return bad_request(description)
    if status == 401:
        return Unauthorized(description)
    if status == 403:
        return Forbidden(description)
    if status == 404:
        return NotFound(description)
    if status >= 500:
        return ServerError(description)
    return TelegramError(description)


def _json(body: bytes | str) -> Any:
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        return json.loads(text)
    except (UnicodeDecodeError, ValueError):
        return None
