"""The tic's notify tool: bad input is a tool error; the same news goes out once a day."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.schema import LAYERS
from engine.hub import Notification
from engine.store import Store
from engine.tools.base import ToolError
from engine.tools.protocols import ToolContext
from scheduler.events import EventStore
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
