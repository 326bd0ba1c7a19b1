"""Bot API answers that no retry changes, and a sane wait out of any ``retry_after``.

These extend the error set of ``api.py`` (bindings raise them, the core catches them):
401 and 404 are Telegram's definitive "no" — a wrong or revoked token, a wrong API root —
where every other failure (5xx, 429, a lost connection, an answer that is not JSON) may
clear on its own and is retried.
"""

from __future__ import annotations

import math
from typing import Any

from bot.telegram.api import RetryAfter, TelegramError

__all__ = [
    "DEFINITIVE",
    "RETRY_AFTER_DEFAULT_S",
    "RETRY_AFTER_MAX_S",
    "RETRY_AFTER_MIN_S",
    "NotFound",
    "Unauthorized",
    "clamp_retry_after",
    "retry_after",
]

#: A 429 saying "wait 0 s" (or less) still waits this long: retrying at once hammers a
#: server that just said it is overloaded.
RETRY_AFTER_MIN_S = 1.0
#: No single wait is longer than this, whatever the answer says (a typo in a proxy's
#: config must not park a chat for a day).
RETRY_AFTER_MAX_S = 300.0
#: A 429 whose ``retry_after`` is missing or not a number.
RETRY_AFTER_DEFAULT_S = 5.0


class Unauthorized(TelegramError):
    """401: Telegram does not know this bot token (wrong, or revoked)."""


class NotFound(TelegramError):
    """404: no such method or bot under this API root (a malformed token, a wrong URL)."""


#: Answers that stop start-up: retrying them only repeats the same "no".
DEFINITIVE: tuple[type[TelegramError], ...] = (Unauthorized, NotFound)


def clamp_retry_after(raw: Any) -> float:
    """Seconds to wait for a ``retry_after`` as sent: clamped, defaulted when not a number.

    Telegram sends an integer; a proxy or a broken server may send 0, a negative number,
    a huge one, ``"soon"`` or nothing at all. Booleans are not numbers here.
    """
    if isinstance(raw, bool):
        return RETRY_AFTER_DEFAULT_S
    try:
        seconds = float(raw)
    except (TypeError, ValueError, OverflowError):
        return RETRY_AFTER_DEFAULT_S
    if math.isnan(seconds):
        return RETRY_AFTER_DEFAULT_S
    return min(max(seconds, RETRY_AFTER_MIN_S), RETRY_AFTER_MAX_S)


def retry_after(raw: Any, description: str = "Too Many Requests") -> RetryAfter:
    """The core's ``RetryAfter`` for a 429 with ``retry_after`` as sent (see above)."""
    return RetryAfter(clamp_retry_after(raw), description)
