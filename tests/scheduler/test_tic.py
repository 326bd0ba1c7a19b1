"""The tic's notify tool: bad input is a tool error; the same news goes out once a day."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.util import await_only

from bot.schema import LAYERS
from engine.hub import Notification
from engine.store import Store
from engine.tools.base import ToolError
from engine.tools.protocols import ToolContext
from scheduler.events import EventStore, _take
from scheduler.tic import NotifyTool


class Hub:
    def __init__(self) -> None:
        self.sent: list[Notification] = []

    def notify(self, notification: Notification) -> None:
        self.sent.append(notification)


@pytest.fixture
async def events(tmp_path: Path):
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 't.db'}", LAYERS)
    yield EventStore(store.db)
    await store.close()


def ctx() -> ToolContext:
    return ToolContext(1, 1, "tic", 0, Path("."), None)  # type: ignore[arg-type]


async def test_the_same_notification_is_sent_once_within_the_window(events):
    hub = Hub()
    tool = NotifyTool(hub, events, "tic", timedelta(hours=24))  # type: ignore[arg-type]
    args = {"event_type": "mail", "summary": "Anna asks to move the call."}
    assert await tool.run(args, ctx()) == "sent"
    assert (await tool.run(args, ctx())).startswith("not sent")
    assert [n.summary for n in hub.sent] == ["Anna asks to move the call."]
    other = {"event_type": "mail", "summary": "Bob sent the invoice."}
    assert await tool.run(other, ctx()) == "sent"


@pytest.mark.parametrize(
    "args",
    [
        {"event_type": " ", "summary": "x"},
        {"event_type": "mail", "summary": ""},
        {"event_type": "mail", "summary": "x" * 5000},
        {"event_type": "mail"},
        {"event_type": "mail", "summary": "x", "extra": 1},
    ],
)
async def test_bad_notify_arguments_are_tool_errors(events, args):
    hub = Hub()
    tool = NotifyTool(hub, events, "tic", timedelta(hours=24))  # type: ignore[arg-type]
    with pytest.raises(ToolError):
        await tool.run(args, ctx())
    assert hub.sent == []


async def test_events_are_taken_once(events):
    await events.add("mail", "message", {"n": 1})
    await events.add("mail", "message", {"n": 2})
    assert [e.payload for e in await events.take()] == [{"n": 1}, {"n": 2}]
    assert await events.take() == []


async def test_events_taken_by_a_tic_that_died_are_taken_again_after_the_lease(events):
    await events.add("mail", "message", {"n": 1})
    assert len(await events.take()) == 1  # a tic takes it, then is killed
    assert await events.take() == []  # leased: no other tic reads it meanwhile
    retaken = await events._db.run(lambda conn: _take(conn, 50, timedelta(0)))
    assert [e.payload for e in retaken] == [{"n": 1}]
    await events.done([retaken[0].id])
    assert await events._db.run(lambda conn: _take(conn, 50, timedelta(0))) == []


async def test_two_tics_taking_at_once_never_share_an_event(
    store: Store, open_store: Callable[[], Awaitable[Store]], backend: str
) -> None:
    """PostgreSQL: a fleet's two tics take at the same moment: each event goes to one of
    them (both got it: the take returned what it read, not what it marked)."""
    if backend != "postgresql":
        pytest.skip("two transactions at once: PostgreSQL's")
    first, second = EventStore(store.db), EventStore((await open_store()).db)
    await first.add("mail", "new_mail", {"n": 1})
    taken_by_second: list[Any] = []

    class SecondTakesAfterTheRead:
        def __init__(self, conn: Any) -> None:
            self.conn, self.statements = conn, 0

        def execute(self, *args: Any, **kwargs: Any) -> Any:
            result = self.conn.execute(*args, **kwargs)
            self.statements += 1
            if self.statements == 1:  # read, not yet marked: the other tic takes now
                rows = list(result)
                taken_by_second.extend(await_only(second.take()))
                return rows
            return result

    taken_by_first = await store.db.run(lambda conn: _take(SecondTakesAfterTheRead(conn), 50))
    assert [event.payload for event in taken_by_second] == [{"n": 1}]
    assert taken_by_first == []


async def test_the_same_notice_from_two_processes_at_once_goes_out_once(
    open_store: Callable[[], Awaitable[Store]], backend: str
) -> None:
    """Each read that nothing was sent, then both sent (found by review on 2026-12-06)."""
    one, two = EventStore((await open_store()).db), EventStore((await open_store()).db)
    for attempt in range(10):
        summary = f"The boss wrote ({attempt})."
        firsts = await asyncio.gather(
            one.first_notice("mail", summary, timedelta(hours=24)),
            two.first_notice("mail", summary, timedelta(hours=24)),
        )
        assert firsts.count(True) == 1, f"attempt {attempt}: both sent"
