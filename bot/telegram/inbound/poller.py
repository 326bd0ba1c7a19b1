"""Long polling that loses nothing: an update is stored before the offset moves past it.

Our own loop over the binding's ``get_updates``: each batch is stored in
``telegram_updates`` (insert-if-new by update id) before the next call confirms it to
Telegram by asking for ``offset = last + 1``. On SQLite the rows ride along with the first
commit a handler makes (``TelegramStore.accept_polled``), so a message's update and its user
row commit together. Updates stored but never handled (the process died in between) are
handed to the adapter again at start.

Nothing Telegram answers ends the loop: deleteWebhook (the first call) is retried like
every start-up call (``retrying.py``: only a 401/404 raises ``StartupRefused``), and a
failed getUpdates — a 5xx, a 429, a dropped or hung connection, an answer that is not
JSON — is logged in one line and asked again after a backoff (``retry_after`` for a 429,
clamped to 1..300 s). ``TelegramHealth`` is told each outcome (``/healthz``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from bot.delivery import clamp_retry_after, describe
from bot.telegram.sending.api import ALLOWED_UPDATES, BotApi, Json, RetryAfter
from bot.telegram.sending.health import TelegramHealth
from bot.telegram.sending.retrying import until_ok
from bot.telegram.store import TelegramStore, distinct_updates
from engine.failpoints import failpoint

__all__ = ["Poller"]

log = logging.getLogger(__name__)


# Updates handed over before their handlers run (a burst's first replies need not wait for
# its last updates' turns).
HANDOVER_CHUNK = 10
# Loop turns the next getUpdates waits, at most, for the batch's handlers (see below).
SETTLE_TURNS = 32
# The health kind of getUpdates outcomes (``TelegramHealth``).
POLL = "getUpdates"
# A long poll held open this long without an error tells that Telegram has us (a failing
# Telegram answers at once); real time, a health signal only.
OPEN_POLL_S = 1.0


async def _let_handlers_run() -> None:
    """Yield until the event loop has nothing ready (at most ``SETTLE_TURNS`` turns).

    The handlers of a batch (adapter, hub, turn, reply) run before the next getUpdates
    request is built and written: Telegram holds new updates until that request comes, so
    asking a moment later loses nothing, and the CPU it costs no longer stands between this
    batch's updates and their replies. Waiting for I/O (a model call, a send) ends it.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)  # asyncio's run queue; other loops: fixed turns
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return


class UpdateSink(Protocol):
    def submit(self, update: Json) -> None: ...


class Poller:
    def __init__(
        self,
        api: BotApi,
        store: TelegramStore,
        sink: UpdateSink,
        *,
        timeout_s: int = 30,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_backoff_s: float = 30.0,
        health: TelegramHealth | None = None,
    ) -> None:
        self.api = api
        self.store = store
        self.sink = sink
        self.timeout_s = timeout_s
        self._clock = clock
        self._sleep = sleep
        self._max_backoff_s = max_backoff_s
        self.health = health or TelegramHealth(clock=clock)
        #: Monotonic time of the last successful getUpdates (health checks read its age).
        self.last_success: float | None = None
        self._handed: set[int] = set()  # handed over, not yet confirmed to Telegram

    async def run(self) -> None:
        """Poll until cancelled; raises only ``StartupRefused`` (deleteWebhook: 401/404)."""
        # Polling is refused while a webhook is set (409): an earlier webhook-mode run may
        # have left one behind.
        await until_ok(
            "deleteWebhook", self.api.delete_webhook, health=self.health, sleep=self._sleep
        )
        for update in await self.store.unhandled():
            self.sink.submit(update)
        last = await self.store.last_update_id()
        offset = None if last is None else last + 1
        self.health.started()
        failures = 0
        loop = asyncio.get_running_loop()
        while True:
            held_open = loop.call_later(OPEN_POLL_S, self._polling_well)
            try:
                updates = await self.api.get_updates(
                    offset, timeout=self.timeout_s, allowed_updates=ALLOWED_UPDATES
                )
            except RetryAfter as exc:  # not a failure to back off from: Telegram names the wait
                delay = clamp_retry_after(exc.seconds)
                self.health.failed(POLL, "getUpdates", describe(exc))
                log.warning("getUpdates throttled (%s); retrying in %.1f s", exc, delay)
                await self._sleep(delay)
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a library that cannot parse a batch must not end polling
                failures += 1
                delay = min(2.0 ** min(failures, 6) / 4, self._max_backoff_s)
                self.health.failed(POLL, "getUpdates", describe(exc))
                log.warning("getUpdates failed (%s); retrying in %.1f s", describe(exc), delay)
                await self._sleep(delay)
                continue
            finally:
                held_open.cancel()
            failures = 0
            self.last_success = self._clock()
            self._polling_well()
            if not updates:
                continue
            failpoint("after_updates_fetched")
            # Telegram returns nothing below the offset it was last given, which moves only
            # past stored updates (and starts past the last one stored): what is below it,
            # or was handed over already by an attempt that failed to store, is not new.
            batch = distinct_updates(updates, offset)
            fresh = [u for u in batch if u["update_id"] not in self._handed]
            try:
                durable = await self.store.accept_polled(batch) if batch else None
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is away: ask again later, same offset
                log.exception("storing %d update(s) failed; polling them again", len(batch))
                await self._sleep(1.0)
                continue
            for index, update in enumerate(fresh, 1):
                self._handed.add(update["update_id"])
                try:
                    self.sink.submit(update)
                except Exception:
                    log.exception("handing over update %s failed", update.get("update_id"))
                if index % HANDOVER_CHUNK == 0 or index == len(fresh):
                    await _let_handlers_run()
            if durable is not None:
                try:
                    await durable()  # stored before the next getUpdates confirms them
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("storing %d update(s) failed; polling them again", len(batch))
                    await self._sleep(1.0)
                    continue
            failpoint("after_updates_stored")
            self._handed.clear()
            if batch:  # sorted, and nothing in it below the offset
                offset = batch[-1]["update_id"] + 1

    def _polling_well(self) -> None:
        """A getUpdates answered, or is held open without an error (see ``OPEN_POLL_S``)."""
        self.health.succeeded(POLL)
        self.health.receiving()

    def age(self) -> float | None:
        """Seconds since the last successful getUpdates, ``None`` before the first."""
        return None if self.last_success is None else self._clock() - self.last_success
