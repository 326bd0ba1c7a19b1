"""A database made by ``main`` before each layer owned its tables, with a row in every
table, upgrades without losing one, and every layer's store works on it afterwards.

The old database comes from ``tests/legacy_schema`` (a vendored copy of that ``main``'s
migrations and its way of applying them); the rows are written with plain SQL against the
tables as that schema has them (reflected), never through today's table definitions.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.http.signins import SignIns, token_fingerprint
from bot.schema import LAYERS
from bot.telegram.store import TelegramStore
from engine.approval.broker import ApprovalBroker
from engine.approval.bypass import Bypasses
from engine.approval.deciders import OPERATOR
from engine.store import Store, connect
from engine.store.migrations import discover
from memory.rules import MEMORY_TOOLS
from scheduler.events import EventStore
from scheduler.store import JobStore
from tests import legacy_schema
from tests.pg import BACKENDS, database_url

# Naive UTC, as the old schema stores it; recent, so nothing has expired when the test runs.
NOW = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
AN_HOUR = timedelta(hours=1)
SECRET = "s" * 43  # a sign-in cookie's shape
TOKEN = "api-token"

# Every table of the old schema, in foreign-key order, with the rows it gets.
ROWS: dict[str, list[dict[str, Any]]] = {
    "chat_sessions": [
        {
            "id": 1,
            "title": "Chat",
            "source": "telegram:42",
            "agent_id": "main",
            "is_interactive": True,
            "is_ephemeral": False,
            "run_context": {"chat": 42},
            "created_at": NOW,
            "context_label": "telegram",
            "auto_deny_approvals": False,
        }
    ],
    "chat_sessions_stack": [
        {
            "id": 1,
            "session_id": 1,
            "agent_id": "main",
            "agent_prompt": None,
            "depth": 0,
            "parent_tool_call_id": None,
            "terminated_at": None,
            "created_at": NOW,
            "ended_turn_at": None,
        }
    ],
    "chat_history": [
        {
            "id": 1,
            "session_stack_id": 1,
            "role": "user",
            "content": "clean up",
            "status": "ok",
            "is_synthetic": False,
            "metadata": {"sender": {"id": "42", "name": "Alice"}},
            "created_at": NOW,
        },
        {
            "id": 2,
            "session_stack_id": 1,
            "role": "assistant",
            "content": "",
            "status": "ok",
            "input_tokens": 10,
            "output_tokens": 5,
            "duration_ms": 700,
            "model": "primary",
            "is_synthetic": False,
            "reasoning_content": "think",
            "cost": 0.25,
            "created_at": NOW,
        },
    ],
    "chat_llm_tools": [
        {
            "id": 1,
            "message_id": 2,
            "llm_call_id": "c1",
            "name": "execute_cmd",
            "arguments": '{"command": "ls"}',
            "result": None,
            "status": "pending",
            "created_at": NOW,
            "updated_at": NOW,
            "launched_at": None,
            "process_group": 4242,
            "process_start": "boot:1",
        }
    ],
    "chat_summaries": [
        {
            "id": 1,
            "stack_id": 1,
            "content": "the story so far",
            "covers_up_to_message_id": 1,
            "created_at": NOW,
        }
    ],
    "sources": [
        {"source": "telegram:42", "session_id": 1, "updated_at": NOW, "preferred_model": "big"}
    ],
    "session_scratchpad": [{"session_id": 1, "key": "plan", "value": "tidy", "updated_at": NOW}],
    "session_tool_grants": [{"session_id": 1, "tool_group": "files", "created_at": NOW}],
    "stack_tool_grants": [{"stack_id": 1, "tool_group": "shell", "created_at": NOW}],
    "permission_groups": [  # "default" comes from 0002 itself
        {"name": "ops", "description": "Operators", "seeded": True, "created_at": NOW}
    ],
    "approval_rules": [
        {
            "id": 1,
            "group_name": "ops",
            "agent_id": None,
            "source": "telegram:42",
            "tool_pattern": "read_*",
            "path_pattern": "/tmp/*",
            "action": "allow",
            "priority": 10,
            "note": "reads",
            "created_at": NOW,
        }
    ],
    "tool_approvals": [
        {
            "tool_call_id": 1,
            "session_id": 1,
            "requested_at": NOW,
            "decision": None,
            "note": None,
            "decided_at": None,
            "requester_id": "42",
            "requester_name": "Alice",
        }
    ],
    "queued_messages": [
        {
            "id": 1,
            "source": "telegram:42",
            "session_id": 1,
            "content": "and then",
            "is_synthetic": False,
            "metadata": {"sender": {"id": "42"}},
            "options": {"model": "big"},
            "created_at": NOW,
        }
    ],
    "app_settings": [{"key": "home", "value": "telegram:42", "updated_at": NOW}],
    "telegram_updates": [
        {
            "update_id": 9001,
            "payload": {"update_id": 9001, "message": {"text": "hi"}},
            "received_at": NOW,
            "handled_at": None,
        }
    ],
    "telegram_users": [{"user_id": 77, "name": "Bob", "paired_by": 42, "paired_at": NOW}],
    "telegram_pairing": [
        {
            "code": "ABCD1234",
            "user_id": 78,
            "chat_id": 78,
            "name": "Carol",
            "created_at": NOW,
            "expires_at": NOW + AN_HOUR,
            "used_at": None,
        }
    ],
    "telegram_cards": [
        {
            "tool_call_id": 1,
            "kind": "approval",
            "source": "telegram:42",
            "chat_id": 42,
            "message_id": 500,
            "text": "Run ls?",
            "entities": [{"type": "bold", "offset": 0, "length": 3}],
            "state": "open",
            "created_at": NOW,
        }
    ],
    "telegram_outbox": [
        {
            "id": 1,
            "chat_id": 42,
            "dedupe_key": "final:1",
            "payload": {"method": "sendMessage", "text": "done"},
            "status": "pending",
            "attempts": 1,
            "message_id": None,
            "error": None,
            "created_at": NOW,
            "sent_at": None,
            "next_attempt_at": NOW + AN_HOUR,
            "last_attempt_at": NOW,
        }
    ],
    "scheduled_jobs": [
        {
            "id": 1,
            "kind": "cron",
            "title": "Morning",
            "spec": "0 8 * * *",
            "timezone": "UTC",
            "prompt": "report",
            "agent_id": "main",
            "origin_source": "telegram:42",
            "parent_session_id": 1,
            "run_context": {"chat": 42},
            "enabled": True,
            "single_run": False,
            "coalesce": True,
            "misfire_grace_s": 300,
            "max_attempts": 3,
            "next_run_at": NOW + AN_HOUR,
            "created_at": NOW,
            "deleted_at": None,
        }
    ],
    "job_runs": [
        {
            "id": 1,
            "job_id": 1,
            "scheduled_for": NOW - AN_HOUR,
            "status": "done",
            "attempt": 1,
            "lease_owner": None,
            "lease_expires_at": None,
            "session_id": 1,
            "result": "all good",
            "error": None,
            "delivery_status": "delivered",
            "delivered_message_ids": [3],
            "created_at": NOW - AN_HOUR,
            "started_at": NOW - AN_HOUR,
            "finished_at": NOW - AN_HOUR,
            "delivered_at": NOW - AN_HOUR,
        }
    ],
    "events": [
        {
            "id": 1,
            "source": "mcp:github",
            "type": "issue",
            "payload": {"n": 1},
            "processed": False,
            "created_at": NOW,
            "processed_at": None,
        }
    ],
    "notification_log": [{"id": 1, "fingerprint": "f" * 64, "created_at": NOW}],
    "web_signins": [
        {
            "id_hash": hashlib.sha256(SECRET.encode()).hexdigest(),
            "token_fingerprint": token_fingerprint(TOKEN),
            "created_at": NOW,
            "last_seen_at": NOW,
            "address": "127.0.0.1",
            "user_agent": "Firefox",
        }
    ],
}


#: The tables 0021 moved into the delivery layer's (keyed by platform and conversation):
#: where each old row is now, and how it reads there.
MOVED: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "telegram_updates": (
        "platform_events",
        [
            {
                "platform": "telegram",
                "event_id": "9001",
                "seq": 9001,
                "payload": {"update_id": 9001, "message": {"text": "hi"}},
                "received_at": NOW,
                "handled_at": None,
            }
        ],
    ),
    "telegram_cards": (
        "platform_cards",
        [
            {
                "platform": "telegram",
                "tool_call_id": 1,
                "kind": "approval",
                "source": "telegram:42",
                "conversation": "42",
                "message_id": "500",
                "text": "Run ls?",
                "extra": [{"type": "bold", "offset": 0, "length": 3}],
                "state": "open",
                "created_at": NOW,
            }
        ],
    ),
    "telegram_outbox": (
        "platform_outbox",
        [
            {
                "id": 1,
                "platform": "telegram",
                "conversation": "42",
                "dedupe_key": "final:1",
                "payload": {"method": "sendMessage", "text": "done"},
                "status": "pending",
                "attempts": 1,
                "message_id": None,
                "error": None,
                "created_at": NOW,
                "sent_at": None,
                "next_attempt_at": NOW + AN_HOUR,
                "last_attempt_at": NOW,
                "recorded_by": None,
                "sending_by": None,
            }
        ],
    ),
}


def _fill(conn: sa.Connection) -> set[str]:
    old = sa.MetaData()
    old.reflect(conn)
    for name, rows in ROWS.items():
        for row in rows:  # one by one: rows of a table may name different columns
            conn.execute(old.tables[name].insert().values(row))
    if conn.dialect.name == "postgresql":  # the ids given here move no sequence on: do it
        for name in ROWS:
            if "id" in old.tables[name].c and old.tables[name].c.id.autoincrement:
                conn.execute(
                    sa.text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), max(id)) FROM {name}"
                    )
                )
    return set(old.tables) - {"schema_version"}


def _read(conn: sa.Connection) -> dict[str, list[dict[str, Any]]]:
    now = sa.MetaData()
    now.reflect(conn)
    found = {}
    for name, old_rows in ROWS.items():
        table_name, rows = MOVED.get(name, (name, old_rows))
        assert name == table_name or name not in now.tables, f"{name} was left behind"
        table = now.tables[table_name]
        columns = _columns(rows)
        query = sa.select(*(table.c[c] for c in columns)).order_by(*table.primary_key.columns)
        found[name] = [dict(row._mapping) for row in conn.execute(query)]
    return found


def _expected() -> dict[str, list[dict[str, Any]]]:
    expected = {}
    for name, old_rows in ROWS.items():
        rows = MOVED.get(name, (name, old_rows))[1]
        # A column a row leaves out is NULL: none of those left out here has a default.
        expected[name] = [{c: row.get(c) for c in _columns(rows)} for row in rows]
    return expected


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({column for row in rows for column in row})


def _versions(conn: sa.Connection) -> list[int]:
    query = sa.text("SELECT version FROM schema_version ORDER BY version")
    return list(conn.execute(query).scalars())


def _default_group(conn: sa.Connection) -> int:
    query = sa.text("SELECT count(*) FROM permission_groups WHERE name = 'default'")
    return int(conn.execute(query).scalar_one())


@pytest.fixture(params=BACKENDS)
async def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of a database as that ``main`` left it: at 0011, a row in every table."""
    async with database_url(request.param, tmp_path) as url:
        db = connect(url)
        try:
            assert await legacy_schema.build(db) == len(legacy_schema.LEGACY_MIGRATIONS)
            tables = await db.run(_fill)
        finally:
            await db.close()
        assert tables == set(ROWS), "a table of the old schema has no row in this test"
        yield url


async def test_every_row_of_a_database_made_by_main_survives_the_upgrade(
    old_database: str,
) -> None:
    store = await Store.open(old_database, LAYERS)
    try:
        assert await store.db.run(_versions) == [m.version for m in discover(LAYERS)]
        rows = await store.db.run(_read)
        assert await store.db.run(_default_group) == 1  # 0002's own row, kept too
        rows["permission_groups"] = [r for r in rows["permission_groups"] if r["name"] != "default"]
        for name, expected in _expected().items():
            # Rows a later migration adds come after the old ones (memory's allow rules).
            assert rows[name][: len(expected)] == expected, name
            added = rows[name][len(expected) :]
            assert all(row.get("tool_pattern") in MEMORY_TOOLS for row in added), name
    finally:
        await store.close()


async def test_every_layer_works_on_an_upgraded_database(old_database: str) -> None:
    store = await Store.open(old_database, LAYERS)
    try:
        await _engine_works(store)
        await _telegram_works(TelegramStore(store.db))
        await _scheduler_works(JobStore(store.db), EventStore(store.db))
        await _web_works(store)
    finally:
        await store.close()

    again = await Store.open(old_database, LAYERS)  # a second start: nothing left to apply
    await again.close()


async def _engine_works(store: Store) -> None:
    session = await store.sessions.get(1)
    assert session is not None and session.source == "telegram:42"
    root = await store.sessions.root_frame(1)
    assert [m.content for m in await store.history.load(root.id)] == ["clean up", ""]
    summary = await store.summaries.latest(root.id)
    assert summary is not None and summary.content == "the story so far"
    assert await store.scratchpad.all(1) == {"plan": "tidy"}
    assert [q.content for q in await store.queue.pending("telegram:42")] == ["and then"]
    assert await store.settings.get("home") == "telegram:42"
    assert await store.sessions.source_model("telegram:42") == "big"
    [waiting] = await store.inbox.pending_approvals()
    record = await store.inbox.get(waiting.tool_call_id)
    assert record is not None and record.requester_id == "42"
    await ApprovalBroker(store.inbox, Bypasses()).approve(1, decider=OPERATOR)
    assert await store.inbox.pending_approvals() == []
    created = await store.sessions.create("console")
    frame = await store.sessions.root_frame(created.id)
    await store.history.append_message(frame.id, "user", "after the upgrade")
    assert [m.content for m in await store.history.load(frame.id)] == ["after the upgrade"]


async def _telegram_works(telegram: TelegramStore) -> None:
    assert [u["update_id"] for u in await telegram.unhandled()] == [9001]
    assert await telegram.last_update_id() == 9001
    assert await telegram.paired_users() == {77}
    card = await telegram.cards.get(1)
    assert card is not None and card.text == "Run ls?" and card.state == "open"
    assert [row.dedupe_key for row in await telegram.outbox.pending()] == ["final:1"]
    redeemed = await telegram.redeem("ABCD1234", datetime.now(UTC))
    assert redeemed is not None and redeemed.user_id == 78
    added = await telegram.outbox.enqueue(
        "42", "final:2", {"method": "sendMessage", "text": "more"}
    )
    assert added is not None and added.id == 2  # the moved ids kept the sequence going
    await telegram.mark_handled(9001)
    assert await telegram.unhandled() == []


async def _scheduler_works(jobs: JobStore, events: EventStore) -> None:
    job = await jobs.get(1)
    assert job is not None and job.title == "Morning" and job.spec == "0 8 * * *"
    [run] = await jobs.runs(1)
    assert run.result == "all good" and run.delivered_message_ids == [3]
    overview = await jobs.overview()
    assert [j.id for j in overview.jobs] == [1] and overview.last[1].status == "done"
    assert await events.unprocessed_count() == 1
    [event] = await events.take()
    assert (event.source, event.payload) == ("mcp:github", {"n": 1})


async def _web_works(store: Store) -> None:
    signins = SignIns(store.db, token=TOKEN, clock=lambda: datetime.now(UTC))
    found = await signins.lookup(SECRET)
    assert found is not None and found.address == "127.0.0.1"
