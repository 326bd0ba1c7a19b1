"""Bot API answers that no retry changes, and a sane wait out of any ``retry_after``.

These extend the error set of ``api.py`` (bindings raise them, the core catches them):
401 and 404 are Telegram's definitive "no" — a wrong or revoked token, a wrong API root —
where every other failure (5xx, 429, a lost connection, an answer that is not JSON) may
clear on its own and is retried.
"""

from __future__ import annotations

from typing import Any

from bot.delivery import clamp_retry_after
from bot.telegram.sending.api import RetryAfter, TelegramError

__all__ = [
    "DEFINITIVE",
    "NotFound",
    "Unauthorized",
    "retry_after",
]


class Unauthorized(TelegramError):
    """401: Telegram does not know this bot token (wrong, or revoked)."""


class NotFound(TelegramError):
    """404: no such method or bot under this API root (a malformed token, a wrong URL)."""


#: Answers that stop start-up: retrying them only repeats the same "no".
DEFINITIVE: tuple[type[TelegramError], ...] = (Unauthorized, NotFound)


def retry_after(raw: Any, description: str = "Too Many Requests") -> RetryAfter:
    """The core's ``RetryAfter`` for a 429 with ``retry_after`` as sent (see above)."""
    return RetryAfter(clamp_retry_after(raw), description)
