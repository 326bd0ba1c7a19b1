"""Opening a database and bringing its schema up to date."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.schema import LAYERS
from engine.config import ConfigError
from engine.store import Store, connect, migrate
from engine.store.db import SQLITE_BUSY_TIMEOUT_MS
from engine.store.migrations import ENGINE, Layer, discover
from tests import legacy_schema
from tests.pg import fresh_postgres_database, requires_postgres

LATEST = len(discover(LAYERS))
ENGINE_ONLY = (ENGINE,)
ENGINE_VERSIONS = [m.version for m in discover(ENGINE_ONLY)]
BROKEN = Layer("broken", "tests.engine.store.layers.broken")


def _versions(conn: sa.Connection) -> list[int]:
    return list(
        conn.execute(sa.text("SELECT version FROM schema_version ORDER BY version")).scalars()
    )


def _table_names(conn: sa.Connection) -> set[str]:
    return set(sa.inspect(conn).get_table_names())


async def test_migrating_again_is_a_no_op_that_keeps_the_data(store: Store) -> None:
    session = await store.sessions.create("cli:me")

    assert await migrate(store.db, LAYERS) == LATEST
    assert await migrate(store.db, LAYERS) == LATEST

    assert await store.db.run(_versions) == list(range(1, LATEST + 1))
    assert await store.sessions.get(session.id) == session


async def test_reopening_a_migrated_database_keeps_the_data(store_url: str) -> None:
    first = await Store.open(store_url, LAYERS)
    session = await first.sessions.create("cli:me")
    await first.close()

    second = await Store.open(store_url, LAYERS)
    try:
        assert await second.sessions.get(session.id) == session
        assert await second.db.run(_versions) == list(range(1, LATEST + 1))
    finally:
        await second.close()


async def test_a_schema_newer_than_the_code_is_refused(store_url: str) -> None:
    def from_the_future(conn: sa.Connection) -> None:
        conn.execute(
            sa.text("INSERT INTO schema_version (version, name) VALUES (:v, 'future')"),
            {"v": LATEST + 1},
        )

    store = await Store.open(store_url, LAYERS)
    try:
        await store.db.run(from_the_future)
        with pytest.raises(RuntimeError, match=rf"version {LATEST + 1} is newer .*upgrade chathub"):
            await migrate(store.db, LAYERS)
    finally:
        await store.close()

    with pytest.raises(RuntimeError, match="newer"):
        await Store.open(store_url, LAYERS)


async def test_a_failing_migration_leaves_no_trace(store_url: str) -> None:
    with pytest.raises(RuntimeError, match="migration bug"):
        await Store.open(store_url, [*LAYERS, BROKEN])

    # Every migration ran in one transaction: nothing of it stayed, so the next start is clean.
    db = connect(store_url)
    try:
        assert await db.run(_table_names) == set()
        assert await migrate(db, LAYERS) == LATEST
        assert "half_done" not in await db.run(_table_names)
    finally:
        await db.close()


async def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}")

    def pragma(conn: sa.Connection, name: str) -> object:
        return conn.exec_driver_sql(f"PRAGMA {name}").scalar()

    try:
        assert await store.db.run(pragma, "journal_mode") == "wal"
        assert await store.db.run(pragma, "busy_timeout") == SQLITE_BUSY_TIMEOUT_MS > 0
        assert await store.db.run(pragma, "foreign_keys") == 1
    finally:
        await store.close()


async def test_two_sqlite_connections_migrating_one_file_at_once(tmp_path: Path) -> None:
    # Two processes starting together: the second waits for the first (busy timeout).
    url = f"sqlite:///{tmp_path / 'chathub.db'}"
    first, second = connect(url), connect(url)
    try:
        assert await asyncio.gather(migrate(first, LAYERS), migrate(second, LAYERS)) == [
            LATEST,
            LATEST,
        ]
        assert await first.run(_versions) == list(range(1, LATEST + 1))
    finally:
        await first.close()
        await second.close()


@requires_postgres
async def test_concurrent_migrations_on_postgresql_serialise() -> None:
    # Several workers starting at once: the advisory lock lets one migrate, the others wait.
    async with fresh_postgres_database() as url:
        workers = [connect(url) for _ in range(4)]
        try:
            versions = await asyncio.gather(*(migrate(db, LAYERS) for db in workers))
            assert versions == [LATEST] * len(workers)
            assert await workers[0].run(_versions) == list(range(1, LATEST + 1))
        finally:
            for db in workers:
                await db.close()


async def test_an_unopenable_sqlite_file_fails_instead_of_hanging(tmp_path: Path) -> None:
    async with asyncio.timeout(10):
        # One sentence naming the setting, the driver's reason in it (2026-12-07).
        with pytest.raises(ConfigError, match=r"DATABASE_URL: .*unable to open database file"):
            await Store.open(f"sqlite:///{tmp_path}")  # a directory, not a file


async def test_an_unknown_database_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported database URL scheme 'mysql'"):
        connect("mysql://localhost/chathub")


async def test_an_approval_waiting_in_an_older_database_survives_the_upgrade(
    store_url: str,
) -> None:
    """A database at 0009 (before approvals named who asked) with a call waiting: after the
    upgrade the call still waits, names nobody, and only the owner may decide it."""
    from engine.approval.broker import ApprovalBroker
    from engine.approval.bypass import Bypasses
    from engine.approval.deciders import OPERATOR, Decider
    from engine.store.inbox import NotPermitted
    from engine.store.rows import AssistantRecord, NewToolCall
    from engine.store.schema import tool_approvals, utcnow

    old = Store.over(connect(store_url))
    assert await legacy_schema.build(old.db, up_to=9) == 9  # as main's code made it
    try:
        session = await old.sessions.create("telegram:-100")
        root = await old.sessions.root_frame(session.id)
        sender = {"sender": {"id": "11", "name": "Alice"}}
        await old.history.append_message(root.id, "user", "clean up", metadata=sender)
        message = await old.history.append_assistant(
            root.id, AssistantRecord(""), [NewToolCall("c1", "execute_cmd", '{"command": "ls"}')]
        )
        call = message.tool_calls[0]
        await old.history.set_tool_status(call.id, "pending", None)

        def waiting(conn: sa.Connection) -> None:  # as 0009's code wrote it: no requester
            conn.execute(
                tool_approvals.insert().values(
                    tool_call_id=call.id, session_id=session.id, requested_at=utcnow()
                )
            )

        await old.db.run(waiting)
    finally:
        await old.close()

    store = await Store.open(store_url, LAYERS)
    try:
        assert await store.db.run(_versions) == list(range(1, LATEST + 1))
        [item] = await store.inbox.pending_approvals()
        assert item.tool_call_id == call.id
        record = await store.inbox.get(call.id)
        assert record is not None and record.requester_id is None
        broker = ApprovalBroker(store.inbox, Bypasses())
        with pytest.raises(NotPermitted):  # Alice asked, but 0009 did not record it
            await broker.approve(call.id, decider=Decider("11", is_allowed=True))
        await broker.approve(call.id, decider=OPERATOR)
        assert await store.inbox.pending_approvals() == []
        assert "web_signins" in await store.db.run(_table_names)
    finally:
        await store.close()


async def test_a_database_of_the_engine_alone_gets_the_lower_numbers_of_later_layers(
    store_url: str,
) -> None:
    """The engine alone records 1-4, 7, 9, 10; the full sequence then applies 5, 6, 8, 11
    (lower than the highest recorded) instead of taking 10 for a high-water mark."""
    first = await Store.open(store_url, ENGINE_ONLY)
    try:
        session = await first.sessions.create("cli:me")
        assert await first.db.run(_versions) == ENGINE_VERSIONS
        assert "platform_outbox" not in await first.db.run(_table_names)
        assert await migrate(first.db, ENGINE_ONLY) == max(ENGINE_VERSIONS)
    finally:
        await first.close()

    second = await Store.open(store_url, LAYERS)
    try:
        assert await second.db.run(_versions) == list(range(1, LATEST + 1))
        tables = await second.db.run(_table_names)
        assert {"platform_outbox", "job_runs", "events", "web_signins"} <= tables
        assert await second.sessions.get(session.id) == session
    finally:
        await second.close()

    # And back: the engine alone leaves the other layers' rows alone.
    third = await Store.open(store_url, ENGINE_ONLY)
    try:
        assert await third.db.run(_versions) == list(range(1, LATEST + 1))
    finally:
        await third.close()


async def test_each_applied_migration_records_its_layer(store_url: str) -> None:
    store = await Store.open(store_url, LAYERS)

    def layers(conn: sa.Connection) -> dict[int, str]:
        rows = conn.execute(sa.text("SELECT version, layer FROM schema_version"))
        return {int(version): layer for version, layer in rows}

    try:
        recorded = await store.db.run(layers)
    finally:
        await store.close()
    assert recorded == {m.version: m.layer for m in discover(LAYERS)}
    assert {recorded[5], recorded[8]} == {"telegram"}
    assert (recorded[6], recorded[11], recorded[1]) == ("scheduler", "http", "engine")


async def test_a_newer_migration_of_a_known_layer_is_refused_but_another_layers_is_not(
    store_url: str,
) -> None:
    def record(conn: sa.Connection, version: int, layer: str) -> None:
        conn.execute(
            sa.text("INSERT INTO schema_version (version, name, layer) VALUES (:v, 'x', :l)"),
            {"v": version, "l": layer},
        )

    store = await Store.open(store_url, ENGINE_ONLY)
    try:
        await store.db.run(record, 11, "http")  # not the engine's: none of its business
        engine_latest = max(m.version for m in discover(ENGINE_ONLY))
        assert await migrate(store.db, ENGINE_ONLY) == max(11, engine_latest)
        await store.db.run(record, 90, "discord")  # a layer this chathub does not have
        assert await migrate(store.db, ENGINE_ONLY) == 90
        await store.db.run(record, 91, "engine")  # the engine's, from a newer chathub
        with pytest.raises(RuntimeError, match=r"version 91 is newer .*upgrade chathub"):
            await migrate(store.db, ENGINE_ONLY)
    finally:
        await store.close()


async def test_a_version_number_taken_by_two_layers_is_refused() -> None:
    twice = Layer("twice", "tests.engine.store.layers.twice")
    with pytest.raises(RuntimeError, match=r"migration 0005 is defined twice: telegram .* twice"):
        discover([*LAYERS, twice])


def test_the_layers_together_number_their_migrations_1_to_n() -> None:
    assert [m.version for m in discover(LAYERS)] == list(range(1, LATEST + 1))
    assert LATEST >= 11


async def test_without_layers_the_engine_migrates_only_its_own_tables(store_url: str) -> None:
    store = await Store.open(store_url)
    try:
        assert await store.db.run(_versions) == ENGINE_VERSIONS
        tables = await store.db.run(_table_names)
        assert not tables & {"platform_outbox", "job_runs", "events", "web_signins"}
    finally:
        await store.close()
