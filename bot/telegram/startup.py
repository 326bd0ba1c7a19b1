"""Reaching Telegram at start: each call retried until it answers; only a refusal stops.

A service that boots with its network, or while Telegram has a bad minute, sees a 500,
a 429 or a dropped connection on its first calls. None of them may end the process:
getMe, deleteWebhook and setWebhook are retried with backoff (a 429's ``retry_after``
is honoured) until they succeed, with one log line per failure and no traceback. Only a
definitive answer — 401 (the token) or 404 (the token's shape, the API root) — raises
``StartupRefused``, which ``chathub serve`` turns into one line and a non-zero exit.
setMyCommands only fills the command menu: it is retried in the background and never
holds anything up.

The backoff is capped at 5 s so that polling starts within a few seconds of a fault
clearing (the bar: within 10 s).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from bot.delivery import RETRY_AFTER_MAX_S, Backoff, describe
from bot.telegram.inbound.poller import UpdateSink
from bot.telegram.sending.api import (
    BotApi,
    Json,
    NetworkError,
    RetryAfter,
    ServerError,
    TelegramError,
)
from bot.telegram.sending.health import TelegramHealth
from bot.telegram.sending.retrying import STARTUP_BACKOFF, until_ok

__all__ = ["HeldUpdates", "TelegramStartup"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The command menu is worth little load: retried every minute at most.
COMMANDS_BACKOFF = Backoff(first_s=1.0, cap_s=60.0)


class HeldUpdates:
    """An ``UpdateSink`` for the webhook that holds updates until the bot knows itself.

    Telegram may POST to a webhook set by an earlier process while getMe is still being
    retried; the adapter needs its own username before it can tell whether a group
    message is addressed to it. The updates are stored already (the webhook stores
    before it answers); they are handed over, once each, by ``release``.
    """

    def __init__(self) -> None:
        self._held: list[Json] = []
        self._sink: UpdateSink | None = None
        self._handed: set[int] = set()  # ids handed over at release: never again

    def submit(self, update: Json) -> None:
        if self._sink is None:
            self._held.append(update)
        elif update.get("update_id") not in self._handed:
            self._sink.submit(update)

    def release(self, sink: UpdateSink, stored: Sequence[Json]) -> None:
        """Hand over ``stored`` (unhandled in the database) and what was held, once each."""
        for update in [*stored, *self._held]:
            update_id = update.get("update_id")
            if isinstance(update_id, int) and update_id in self._handed:
                continue  # stored, and also held: the webhook's handler ran meanwhile
            if isinstance(update_id, int):
                self._handed.add(update_id)
            sink.submit(update)
        self._held.clear()
        self._sink = sink


class TelegramStartup:
    """The start-up calls of the adapter, each retried as described above."""

    def __init__(
        self,
        api: BotApi,
        health: TelegramHealth,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        backoff: Backoff = STARTUP_BACKOFF,
        commands_backoff: Backoff = COMMANDS_BACKOFF,
    ) -> None:
        self.api = api
        self.health = health
        self._sleep = sleep
        self._backoff = backoff
        self._commands_backoff = commands_backoff

    async def call(self, name: str, op: Callable[[], Awaitable[T]]) -> T:
        return await until_ok(
            name, op, health=self.health, sleep=self._sleep, backoff=self._backoff
        )

    async def identify(self) -> Json:
        """getMe: who the bot is (its username decides what in a group is addressed to it)."""
        return await self.call("getMe", self.api.get_me)

    async def set_webhook(self, url: str, secret: str) -> None:
        await self.call("setWebhook", lambda: self.api.set_webhook(url, secret_token=secret))
        self.health.receiving()
        self.health.started()

    async def register_commands(self, commands: Sequence[tuple[str, str]]) -> bool:
        """setMyCommands, retried in the background; False when Telegram refused them.

        The menu is a convenience: its failures are warnings, never a health failure, and
        a refusal (a 400 for a bad command, a 401) ends the trying — commands still work
        when typed.
        """
        failures = 0
        while True:
            try:
                await self.api.set_my_commands(commands)
                return True
            except RetryAfter as exc:
                delay, error = min(exc.seconds, RETRY_AFTER_MAX_S), exc
            except (ServerError, NetworkError) as exc:
                failures += 1
                delay, error = self._commands_backoff.delay(failures), exc
            except TelegramError as exc:
                log.warning("Telegram setMyCommands refused (%s); no command menu", describe(exc))
                return False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a binding's own bug: the menu is not worth a crash
                log.warning("setMyCommands failed (%s); no command menu", describe(exc))
                return False
            log.warning(
                "Telegram setMyCommands failed (%s); the command menu waits, retrying in %.1f s",
                describe(error),
                delay,
            )
            await self._sleep(delay)
