"""Calls retried until Telegram answers; only a definitive "no" (401, 404) ends them.

Used for the start-up calls (getMe, deleteWebhook, setWebhook: ``startup.py``, the
poller): one log line per failure and no traceback, a 429's ``retry_after`` honoured,
other failures backed off up to ``Backoff.cap_s``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.delivery import RETRY_AFTER_MAX_S, Backoff, describe
from bot.telegram.sending.api import RetryAfter, TelegramError
from bot.telegram.sending.errors import DEFINITIVE, NotFound, Unauthorized
from bot.telegram.sending.health import TelegramHealth

__all__ = ["STARTUP", "STARTUP_BACKOFF", "StartupRefused", "until_ok"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The health kind start-up calls report under (``TelegramHealth``).
STARTUP = "start-up"


#: Start-up calls: 0.5, 1, 2, 4, then every 5 s.
STARTUP_BACKOFF = Backoff()


class StartupRefused(Exception):
    """Telegram said no for good: retrying cannot change a 401 or a 404."""

    def __init__(self, call: str, error: TelegramError) -> None:
        self.call = call
        self.error = error
        super().__init__(self.explain())

    def explain(self) -> str:
        """One line for the operator, naming the setting to check."""
        if isinstance(self.error, Unauthorized):
            hint = "TELEGRAM_BOT_TOKEN: Telegram does not accept this token"
        elif isinstance(self.error, NotFound):
            hint = "TELEGRAM_BOT_TOKEN or TELEGRAM_API_URL: the Bot API answered 404"
        else:
            hint = "Telegram refused the bot"
        return f"{hint} ({self.call}: {self.error.description})"


async def until_ok(
    call: str,
    op: Callable[[], Awaitable[T]],
    *,
    health: TelegramHealth,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    backoff: Backoff = STARTUP_BACKOFF,
) -> T:
    """Run ``op`` until it succeeds; a definitive answer raises ``StartupRefused``."""
    failures = 0
    while True:
        try:
            result = await op()
        except DEFINITIVE as exc:
            health.failed(STARTUP, call, describe(exc))
            raise StartupRefused(call, exc) from None
        except RetryAfter as exc:
            delay = min(exc.seconds, RETRY_AFTER_MAX_S)  # a 429 is not a failure to back off
            error: Exception = exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # 5xx, network, not JSON — or a binding's own bug
            failures += 1
            delay = backoff.delay(failures)
            error = exc
        else:
            health.succeeded(STARTUP)
            return result
        health.failed(STARTUP, call, describe(error))
        log.warning("Telegram %s failed (%s); retrying in %.1f s", call, describe(error), delay)
        await sleep(delay)
