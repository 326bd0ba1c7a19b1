"""The session scratchpad: notes every agent of a session shares, keyed by name."""

from __future__ import annotations

from engine.store import Store


async def test_notes_are_set_overwritten_and_deleted(store: Store) -> None:
    session = await store.sessions.create("telegram:42")
    pad = store.scratchpad
    assert await pad.all(session.id) == {}

    await pad.set(session.id, "plan", "1. read the logs")
    await pad.set(session.id, "owner", "Zoë")
    await pad.set(session.id, "plan", "1. read the logs\n2. fix the bug")  # overwrite, no clash

    assert await pad.all(session.id) == {
        "owner": "Zoë",
        "plan": "1. read the logs\n2. fix the bug",
    }

    await pad.delete(session.id, "owner")
    await pad.delete(session.id, "never-set")  # deleting a missing note is not an error
    assert await pad.all(session.id) == {"plan": "1. read the logs\n2. fix the bug"}


async def test_notes_come_back_ordered_by_key_whatever_the_collation(store: Store) -> None:
    session = await store.sessions.create("telegram:42")
    for key in ("zeta", "alpha", "Beta", "_draft", "étape", "mid", "10", "9"):
        await store.scratchpad.set(session.id, key, key.upper())

    notes = await store.scratchpad.all(session.id)

    # Code-point order on both back ends (a PostgreSQL en_US collation would differ).
    assert list(notes) == ["10", "9", "Beta", "_draft", "alpha", "mid", "zeta", "étape"]
    assert notes["mid"] == "MID"


async def test_values_keep_unicode_and_size(store: Store) -> None:
    session = await store.sessions.create("telegram:42")
    value = '日本語 🚀 "quoted" \\ back\nslash\t' + "x" * 50_000

    await store.scratchpad.set(session.id, "clé ✓", value)
    await store.scratchpad.set(session.id, "empty", "")

    assert await store.scratchpad.all(session.id) == {"clé ✓": value, "empty": ""}


async def test_each_session_has_its_own_scratchpad(store: Store) -> None:
    first = await store.sessions.create("telegram:1")
    second = await store.sessions.create("telegram:2")

    await store.scratchpad.set(first.id, "todo", "first's")
    await store.scratchpad.set(second.id, "todo", "second's")
    await store.scratchpad.delete(first.id, "todo")

    assert await store.scratchpad.all(first.id) == {}
    assert await store.scratchpad.all(second.id) == {"todo": "second's"}
