"""A conversation's history as the page reloads it: what the agent said and did, not the
rows by which background work reached it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.schema import LAYERS
from bot.webchat.history import read_page
from engine.store import Store
from engine.store.rows import AssistantRecord, NewToolCall
from tests.pg import database_url


@pytest.fixture
async def notified(tmp_path: Path) -> AsyncIterator[tuple[Store, int]]:
    """A conversation of a question, its answer, a notification the agent read (a
    synthetic row with one done call, as the hub injects it), and what it then said."""
    async with database_url("sqlite", tmp_path, migrated=True) as url:
        store = await Store.open(url, LAYERS)
        try:
            session = await store.sessions.for_source("web:1")
            frame = await store.sessions.root_frame(session.id)
            await store.history.append_message(frame.id, "user", "hello")
            await store.history.append_assistant(frame.id, AssistantRecord(content="hi"))
            injected = NewToolCall("n1", "read_notification", "{}", status="done", result="[]")
            await store.history.append_assistant(
                frame.id, AssistantRecord(content="", is_synthetic=True), [injected]
            )
            await store.history.append_assistant(frame.id, AssistantRecord(content="news!"))
            yield store, session.id
        finally:
            await store.close()


async def test_a_notification_read_by_the_agent_is_no_tool_chip_after_a_reload(
    notified: tuple[Store, int],
) -> None:
    store, session_id = notified
    page = await read_page(store.db, session_id, before=None, limit=10)
    assert [(m["role"], m["text"], m["tools"]) for m in page.messages] == [
        ("user", "hello", []),
        ("assistant", "hi", []),
        ("assistant", "news!", []),
    ]


async def test_paging_back_past_a_page_of_notifications_reaches_the_first_message(
    notified: tuple[Store, int],
) -> None:
    """A page that held only a notification's row had no next page: "Load earlier
    messages" went away with older messages left (found by review)."""
    store, session_id = notified
    seen: list[str] = []
    before = None
    for _ in range(10):
        page = await read_page(store.db, session_id, before=before, limit=1)
        seen = [m["text"] for m in page.messages] + seen
        if page.next_before is None:
            break
        before = page.next_before
    assert seen == ["hello", "hi", "news!"]
