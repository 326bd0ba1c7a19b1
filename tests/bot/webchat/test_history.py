"""A conversation's history as the page reloads it: what the agent said and did, not the
rows by which background work reached it."""

from __future__ import annotations

from pathlib import Path

from bot.schema import LAYERS
from bot.webchat.history import read_page
from engine.store import Store
from engine.store.rows import AssistantRecord, NewToolCall
from tests.pg import database_url


async def test_a_notification_read_by_the_agent_is_no_tool_chip_after_a_reload(
    tmp_path: Path,
) -> None:
    async with database_url("sqlite", tmp_path, migrated=True) as url:
        store = await Store.open(url, LAYERS)
        try:
            session = await store.sessions.for_source("web:1")
            frame = await store.sessions.root_frame(session.id)
            await store.history.append_message(frame.id, "user", "hello")
            await store.history.append_assistant(frame.id, AssistantRecord(content="hi"))
            # A notification as the hub injects it: a synthetic row with one done call.
            injected = NewToolCall("n1", "read_notification", "{}", status="done", result="[]")
            await store.history.append_assistant(
                frame.id, AssistantRecord(content="", is_synthetic=True), [injected]
            )
            await store.history.append_assistant(frame.id, AssistantRecord(content="news!"))

            page = await read_page(store.db, session.id, before=None, limit=10)
        finally:
            await store.close()

    assert [(m["role"], m["text"], m["tools"]) for m in page.messages] == [
        ("user", "hello", []),
        ("assistant", "hi", []),
        ("assistant", "news!", []),
    ]


async def test_paging_back_past_a_page_of_notifications_reaches_the_first_message(
    tmp_path: Path,
) -> None:
    """A page that held only a notification's row had no next page: "Load earlier
    messages" went away with older messages left (found by review)."""
    async with database_url("sqlite", tmp_path, migrated=True) as url:
        store = await Store.open(url, LAYERS)
        try:
            session = await store.sessions.for_source("web:1")
            frame = await store.sessions.root_frame(session.id)
            await store.history.append_message(frame.id, "user", "first question")
            await store.history.append_assistant(frame.id, AssistantRecord(content="first answer"))
            injected = NewToolCall("n1", "read_notification", "{}", status="done", result="[]")
            await store.history.append_assistant(
                frame.id, AssistantRecord(content="", is_synthetic=True), [injected]
            )
            await store.history.append_assistant(frame.id, AssistantRecord(content="news!"))
            seen: list[str] = []
            before = None
            for _ in range(10):
                page = await read_page(store.db, session.id, before=before, limit=1)
                seen = [m["text"] for m in page.messages] + seen
                if page.next_before is None:
                    break
                before = page.next_before
        finally:
            await store.close()
    assert seen == ["first question", "first answer", "news!"]
