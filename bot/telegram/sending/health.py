"""What ``/healthz`` says about Telegram: ``starting``, ``ok`` or ``failing``.

``starting`` until Telegram confirmed we receive updates: a getUpdates answered or held
open without an error (a long poll waits up to 30 s when nobody writes; a failing
Telegram answers at once), or the webhook set. ``failing`` while the latest start-up,
poll or send attempt failed (a 5xx, a 429, a lost or hung connection, a refusal), ``ok``
otherwise. One success of that kind of call clears its failure: the state describes
Telegram now, not its history.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["TelegramHealth", "TelegramState"]

TelegramState = Literal["starting", "ok", "failing"]


@dataclass(frozen=True, slots=True)
class _Failure:
    call: str
    error: str
    at: float
    since: float  # the first failure of this run of failures


class TelegramHealth:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._receiving = False
        # One entry per kind of call ("start-up", "getUpdates", "send"): the latest failure of
        # that kind, cleared by its next success.
        self._failing: dict[str, _Failure] = {}
        self.failures = 0
        #: Set once the start-up calls are done or one of them failed: ``Service.start``
        #: waits for it a moment, never for a Telegram that does not answer.
        self.settled = asyncio.Event()

    def started(self) -> None:
        """The start-up calls are done (getMe, deleteWebhook or setWebhook)."""
        self.settled.set()

    def receiving(self) -> None:
        """Updates reach us: getUpdates answered or held open, or the webhook is set."""
        self._receiving = True

    def succeeded(self, kind: str) -> None:
        self._failing.pop(kind, None)

    def failed(self, kind: str, call: str, error: str) -> None:
        self.failures += 1
        now = self._clock()
        earlier = self._failing.get(kind)
        since = earlier.since if earlier is not None else now
        self._failing[kind] = _Failure(call, error[:300], now, since)
        self.settled.set()

    @property
    def state(self) -> TelegramState:
        if self._failing:
            return "failing"
        return "ok" if self._receiving else "starting"

    def report(self) -> dict[str, Any]:
        """The ``telegram*`` fields of ``/healthz``."""
        report: dict[str, Any] = {"telegram": self.state}
        if self._failing:
            latest = max(self._failing.values(), key=lambda failure: failure.at)
            report["telegram_error"] = f"{latest.call}: {latest.error}"
            report["telegram_failing_for_s"] = round(
                self._clock() - min(f.since for f in self._failing.values()), 1
            )
        return report
