"""The tic's notices are durable like job results: their dedupe record commits with the
notice in the chat, and their events are read only once the notices are stored.

Until 2026-12-07 (found by review on 2026-12-07) the tic's notify wrote the 24-hour dedupe
record before handing the notice to the hub's memory, and the tic marked its events read as
soon as its turn answered: the home chat busy (a long turn, a card open overnight) and the
service restarted meanwhile, the boss's mail was gone, and told again it was refused as
"already sent within 24 hours"."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("MEMORY_DERIVE_FACTS", "false")

import pytest
import sqlalchemy as sa

from engine.hub import ChatHub, Notification
from engine.llm.scripted import text, tool_call
from engine.store import Store
from engine.store.schema import chat_llm_tools
from engine.tools.protocols import ToolContext
from scheduler.events import EventStore
from scheduler.tables import notification_log
from scheduler.tic import NotifyTool, Tic
from tests.engine.session.helpers import BlockingTool

HOME = "telegram:1"
SAID = {"event_type": "mail_from_boss", "summary": "The boss mailed: the server is down."}


async def notifications_stored(engine) -> list[str]:
    rows = await engine.store.db.run(
        lambda c: c.execute(
            sa.select(chat_llm_tools.c.result).where(chat_llm_tools.c.name == "read_notification")
        ).all()
    )
    return [r.result or "" for r in rows]


async def dedupe_records(engine) -> int:
    return await engine.store.db.run(
        lambda c: c.execute(sa.select(sa.func.count()).select_from(notification_log)).scalar_one()
    )


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def busy_home(engine, hub, model) -> BlockingTool:
    """The owner's own turn runs in the home chat (a long command, a card waiting)."""
    blocking = BlockingTool()
    engine.tools.register(blocking)
    await hub.set_home(HOME)
    model.add(tool_call("wait_here", "{}"))
    await hub.send_message(HOME, "run the long thing")
    await asyncio.wait_for(blocking.started.wait(), 5)
    return blocking


async def test_a_tic_notice_waiting_for_a_busy_home_chat_survives_a_restart(
    engine, hub, hub_config, manual_sleep, model
) -> None:
    """Lost in the restart, the notice's events are still unread, and nothing refuses it."""
    blocking = await busy_home(engine, hub, model)
    store = EventStore(engine.store.db)
    await store.add("mail", "new_mail", {"from": "boss", "subject": "server down"})
    model.add(tool_call("notify", json.dumps(SAID)), text("told"))
    tic = Tic(engine, hub)
    assert (await tic.tick()).events == 1
    await manual_sleep.release(hub_config.notify_window_s)  # the batch goes home, and waits
    await asyncio.sleep(0.05)

    await hub.close()  # the service stops before the owner's turn ended
    restarted = ChatHub(engine, hub_config, sleep=manual_sleep)
    await restarted.start()
    try:
        assert await store.unprocessed_count() == 1  # a later tic reads it again
        assert await dedupe_records(engine) == 0  # and may tell it
        assert not any("server is down" in r for r in await notifications_stored(engine))
    finally:
        blocking.release.set()
        await restarted.close()
        await tic.close()


async def test_after_a_lost_notice_the_same_news_is_told_again(
    engine, hub, hub_config, manual_sleep, model
) -> None:
    """The mail posted again after the restart (a webhook's retry) is told, not refused."""
    blocking = await busy_home(engine, hub, model)
    store = EventStore(engine.store.db)
    await store.add("mail", "new_mail", {"from": "boss", "subject": "server down"})
    model.add(tool_call("notify", json.dumps(SAID)), text("told"))
    first = Tic(engine, hub)
    await first.tick()
    await manual_sleep.release(hub_config.notify_window_s)
    await asyncio.sleep(0.05)
    await hub.close()

    asked = len(model.requests)

    async def recovered() -> bool:
        return len(model.requests) > asked

    restarted = ChatHub(engine, hub_config, sleep=manual_sleep)
    await restarted.start()
    try:
        await until(recovered)  # the home chat's cut turn resumed first
        await store.add("mail", "new_mail", {"from": "boss", "subject": "server down"})
        model.add(tool_call("notify", json.dumps(SAID)), text("told"))
        await Tic(engine, restarted).tick()
        answered = [str(m["content"]) for m in model.requests[-1][0] if m["role"] == "tool"]
        assert answered[-1:] == ["sent"]
    finally:
        blocking.release.set()
        await restarted.close()
        await first.close()


async def test_a_tic_notice_stored_once_the_home_chat_is_free_reads_its_events(
    engine, hub, hub_config, manual_sleep, model
) -> None:
    """While the notice waits its events stay unread; stored, they are read and its
    dedupe record is written with it: told again, it is refused."""
    blocking = await busy_home(engine, hub, model)
    store = EventStore(engine.store.db)
    await store.add("mail", "new_mail", {"from": "boss", "subject": "server down"})
    model.add(tool_call("notify", json.dumps(SAID)), text("told"))
    tic = Tic(engine, hub)
    assert (await tic.tick()).events == 1
    await manual_sleep.release(hub_config.notify_window_s)
    await asyncio.sleep(0.05)
    assert await store.unprocessed_count() == 1
    assert await dedupe_records(engine) == 0
    assert (await tic.tick()).events == 0  # still leased to the tic that told it

    model.add(text("done with the long thing"), text("Heads up: the server is down."))
    blocking.release.set()

    async def read() -> bool:
        return await store.unprocessed_count() == 0

    await until(read)
    assert any("server is down" in r for r in await notifications_stored(engine))
    assert await dedupe_records(engine) == 1

    await store.add("mail", "new_mail", {"from": "boss", "subject": "server down"})
    model.add(tool_call("notify", json.dumps(SAID)), text("nothing new"))
    await tic.tick()
    answered = [str(m["content"]) for m in model.requests[-1][0] if m["role"] == "tool"]
    assert answered[-1].startswith("not sent")
    await tic.close()


class Hub:
    """Takes notifications, delivers none: the test plays the hub's hooks."""

    def __init__(self) -> None:
        self.sent: list[Notification] = []

    def notify(self, notification: Notification) -> None:
        self.sent.append(notification)


def ctx() -> ToolContext:
    return ToolContext(1, 1, "tic", 0, Path("."), None)  # type: ignore[arg-type]


async def test_a_notice_given_back_by_the_hub_may_be_told_again(store: Store) -> None:
    """Refused as on its way while the hub holds it; given back, it is told again, and
    its record is written only in the commit storing it (a second store rolls back)."""
    from scheduler.events import NoticeTold  # new with the fix

    hub = Hub()
    tool = NotifyTool(hub, EventStore(store.db), "tic", timedelta(hours=24))  # type: ignore[arg-type]
    args = {"event_type": "mail", "summary": "Anna asks to move the call."}
    assert await tool.run(args, ctx()) == "sent"
    assert "on its way" in await tool.run(args, ctx())
    given_back = hub.sent[0]
    assert given_back.on_undelivered is not None
    await given_back.on_undelivered()
    assert tool.notices[0].result() is False

    assert await tool.run(args, ctx()) == "sent"
    told = hub.sent[1]
    assert told.delivered_in is not None and told.on_delivered is not None
    await store.db.run(told.delivered_in)
    await told.on_delivered()
    assert tool.notices[1].result() is True
    assert "within the last 24 hours" in await tool.run(args, ctx())
    with pytest.raises(NoticeTold):  # another process's copy of it, stored after
        await store.db.run(told.delivered_in)
