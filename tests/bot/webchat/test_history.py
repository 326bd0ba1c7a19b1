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
