"""What a platform's answer means to the delivery layer, whatever the platform.

A platform's client raises these (its own errors subclass them): ``RetryLater`` (429:
wait, then the same call), ``Unavailable`` (5xx, a lost or hung connection: retried with
backoff, then postponed), ``Refused`` (an answer no retry changes — blocked, the
conversation gone, a request the platform refuses: the delivery fails with the
platform's reason), and of those ``Gone`` (the conversation takes nothing more from the
bot: blocked, removed, deleted; its scheduled jobs pause). Any other ``PlatformError``
postpones a delivery.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "RETRY_AFTER_DEFAULT_S",
    "RETRY_AFTER_MAX_S",
    "RETRY_AFTER_MIN_S",
    "Gone",
    "PlatformError",
    "Refused",
    "RetryLater",
    "Unavailable",
    "clamp_retry_after",
    "describe",
]

#: A 429 saying "wait 0 s" (or less) still waits this long: retrying at once hammers a
#: server that just said it is overloaded.
RETRY_AFTER_MIN_S = 1.0
#: No single wait is longer than this, whatever the answer says (a typo in a proxy's
#: config must not park a chat for a day).
RETRY_AFTER_MAX_S = 300.0
#: A 429 whose retry-after is missing or not a number.
RETRY_AFTER_DEFAULT_S = 5.0


class PlatformError(Exception):
    """A platform call failed; ``description`` is the platform's text when it sent one."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class RetryLater(PlatformError):
    """429: wait ``seconds`` (clamped by the client: ``clamp_retry_after``) and try again."""

    def __init__(self, seconds: float, description: str = "Too Many Requests") -> None:
        super().__init__(f"{description} (retry after {seconds} s)")
        self.seconds = seconds


class Unavailable(PlatformError):
    """The platform or the network failed (5xx, no answer): worth retrying."""


class Refused(PlatformError):
    """The platform said no for this request (blocked, gone, malformed): never retried."""


class Gone(Refused):
    """The conversation takes no more messages from the bot (it was blocked, removed from
    it, or it was deleted): every later delivery there fails alike, until someone there
    lets the bot in again."""


def clamp_retry_after(raw: Any) -> float:
    """Seconds to wait for a retry-after as sent: clamped, defaulted when not a number.

    A platform sends a number; a proxy or a broken server may send 0, a negative number,
    a huge one, ``"soon"`` or nothing at all. Booleans are not numbers here.
    """
    if isinstance(raw, bool):
        return RETRY_AFTER_DEFAULT_S
    try:
        seconds = float(raw)
    except OverflowError:  # an integer past a float's range: as long as one can wait
        return RETRY_AFTER_MAX_S if raw > 0 else RETRY_AFTER_MIN_S
    except (TypeError, ValueError):
        return RETRY_AFTER_DEFAULT_S
    if math.isnan(seconds):
        return RETRY_AFTER_DEFAULT_S
    return min(max(seconds, RETRY_AFTER_MIN_S), RETRY_AFTER_MAX_S)


def describe(error: BaseException) -> str:
    """An error for a log line: its kind and the platform's words, never a traceback."""
    text = error.description if isinstance(error, PlatformError) else str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
