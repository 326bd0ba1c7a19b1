"""A scripted platform for the delivery layer, and virtual time.

``FakeClient`` is a ``bot.delivery.PlatformClient`` of a platform called ``fake``: every
try of a send is recorded with the fake time it happened at and its outcome; failures are
scripted per conversation (``fail``, ``throttle`` with a retry-after as a platform's answer
would carry it, ``gone`` for a conversation that no longer exists). ``FakeTime`` is the
clock and ``sleep`` every pacing wait and backoff goes through: nothing waits on the wall
clock. ``make_outbound`` puts them together over an ``OutboxStore``; ``outbox_rows``
reads the rows as stored.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bot.delivery import (
    Gone,
    Outbound,
    OutboxStore,
    Pacing,
    PlatformError,
    Refused,
    RetryLater,
    RetrySchedule,
    clamp_retry_after,
)
from bot.delivery.tables import platform_outbox
from engine.store import Store
from tests.clock import FakeTime

Json = dict[str, Any]

FAKE = "fake"


@dataclass(frozen=True)
class Try:
    """One call of ``send``: delivered (``message_id``) or failed (``error``)."""

    conversation: str
    payload: Json
    at: float
    error: PlatformError | None = None
    message_id: str | None = None


class FakeClient:
    """A platform whose answers the test scripts, conversation by conversation."""

    name = FAKE

    def __init__(self, time: FakeTime) -> None:
        self.time = time
        self.tries: list[Try] = []
        self._script: dict[str, list[PlatformError]] = {}
        self._gone: dict[str, str] = {}
        self._held: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}
        self._ids = itertools.count(1)

    # -- the script ------------------------------------------------------------------------

    def fail(self, conversation: str, *errors: PlatformError) -> None:
        """The next sends to ``conversation`` raise these, one each, then succeed again."""
        self._script.setdefault(conversation, []).extend(errors)

    def throttle(self, conversation: str, retry_after: Any) -> None:
        """A 429 whose retry-after reads ``retry_after`` as sent (any value at all), read
        the way a platform's client reads it: ``clamp_retry_after``."""
        self.fail(conversation, RetryLater(clamp_retry_after(retry_after)))

    def hold(self, conversation: str) -> tuple[asyncio.Event, asyncio.Event]:
        """The next send to ``conversation`` is taken (``taken`` is set, it counts as
        delivered) but answered only once ``answer`` is set: ``(taken, answer)``."""
        held = self._held[conversation] = (asyncio.Event(), asyncio.Event())
        return held

    def gone(self, conversation: str, reason: str = "Not Found: conversation deleted") -> None:
        """Every send to ``conversation`` from now on is refused for good with ``reason``."""
        self._gone[conversation] = reason

    def back(self, conversation: str) -> None:
        """``conversation`` takes messages again (the bot unblocked, added back)."""
        self._gone.pop(conversation, None)

    # -- bot.delivery.PlatformClient -------------------------------------------------------

    def is_group(self, conversation: str) -> bool:
        return conversation.startswith("group:")

    async def send(self, conversation: str, payload: Json) -> Json:
        at = self.time()
        await asyncio.sleep(0)  # in flight: other calls go out before this one's answer
        error: PlatformError | None = None
        if conversation in self._gone:
            error = Gone(self._gone[conversation])
        elif self._script.get(conversation):
            error = self._script[conversation].pop(0)
        if error is not None:
            self.tries.append(Try(conversation, payload, at, error=error))
            raise error
        message_id = f"m{next(self._ids)}"
        self.tries.append(Try(conversation, payload, at, message_id=message_id))
        held = self._held.pop(conversation, None)
        if held is not None:
            taken, answer = held
            taken.set()
            await answer.wait()
        return {"id": message_id, "conversation": conversation}

    def message_id(self, answer: Any) -> str | None:
        return answer.get("id") if isinstance(answer, dict) else None

    def fallback(self, payload: Json, error: Refused) -> Json | None:
        """Markup the platform refuses: the same text without it; a reply refused: the
        same message replying to nothing."""
        if payload.get("markup") and "markup" in error.description.lower():
            return {**payload, "markup": None}
        if payload.get("reply_to") and "reply" in error.description.lower():
            return {key: value for key, value in payload.items() if key != "reply_to"}
        return None

    # -- what happened ---------------------------------------------------------------------

    def tries_to(self, conversation: str) -> list[Try]:
        return [t for t in self.tries if t.conversation == conversation]

    def delivered(self, conversation: str | None = None) -> list[Try]:
        return [
            t
            for t in self.tries
            if t.error is None and (conversation is None or t.conversation == conversation)
        ]


# -- a rig ---------------------------------------------------------------------------------

#: Wall time at fake time 0 (a postponed row's schedule is stored as wall time).
BASE = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def wall(time: FakeTime) -> Callable[[], datetime]:
    return lambda: BASE + timedelta(seconds=time.now)


def make_outbound(
    outbox: OutboxStore,
    pacing: Pacing | None = None,
    *,
    auto: bool = True,
    **kwargs: Any,
) -> tuple[Outbound, FakeClient, FakeTime]:
    """An ``Outbound`` of the fake platform over ``outbox``, on a fake time of its own."""
    time = FakeTime(auto=auto)
    client = FakeClient(time)
    kwargs.setdefault("now", wall(time))
    out = Outbound(
        client,
        outbox,
        pacing,
        clock=time,
        sleep=time.sleep,
        schedule=RetrySchedule(),
        **kwargs,
    )
    return out, client, time


async def outbox_rows(store: Store, platform: str = FAKE) -> list[dict[str, Any]]:
    """``platform``'s outbox rows as stored, oldest first."""

    def read(conn: sa.Connection) -> list[dict[str, Any]]:
        o = platform_outbox
        query = sa.select(o).where(o.c.platform == platform).order_by(o.c.id)
        return [dict(row._mapping) for row in conn.execute(query)]

    return await store.db.run(read)
