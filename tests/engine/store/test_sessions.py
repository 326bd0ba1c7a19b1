"""Sessions, their stack of agent frames, and which session a source is talking to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.store import Store
from engine.store.rows import AssistantRecord, FrameRow, NewToolCall


def assert_recent_utc(moment: datetime) -> None:
    assert moment.tzinfo is not None and moment.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - moment) < timedelta(minutes=1)


async def delegating_call(store: Store, frame: FrameRow) -> int:
    """An ``execute_subtask`` tool call in ``frame``; its id becomes the child's parent."""
    message = await store.history.append_assistant(
        frame.id,
        AssistantRecord(content=""),
        [NewToolCall("call_1", "execute_subtask", '{"agent_id": "coder", "prompt": "go"}')],
    )
    return message.tool_calls[0].id


async def test_a_new_session_has_a_root_frame_at_depth_zero(store: Store) -> None:
    session = await store.sessions.create(
        "telegram:42",
        agent_id="main",
        is_interactive=True,
        is_ephemeral=False,
        run_context={"chat_id": 42, "user": "Zoë 🦊"},
        title="Plans",
    )

    assert await store.sessions.get(session.id) == session
    assert session.run_context == {"chat_id": 42, "user": "Zoë 🦊"}
    assert_recent_utc(session.created_at)

    root = await store.sessions.root_frame(session.id)
    assert (root.session_id, root.agent_id, root.depth) == (session.id, "main", 0)
    assert root.parent_tool_call_id is None and root.terminated_at is None
    assert root.agent_prompt is None
    assert_recent_utc(root.created_at)
    assert await store.sessions.active_frames(session.id) == [root]


async def test_session_flags_and_defaults_round_trip(store: Store) -> None:
    task = await store.sessions.create(
        "task:7", agent_id="researcher", is_interactive=False, is_ephemeral=True
    )
    stored = await store.sessions.get(task.id)

    assert stored is not None
    assert (stored.source, stored.agent_id) == ("task:7", "researcher")
    assert (stored.is_interactive, stored.is_ephemeral) == (False, True)
    assert stored.run_context is None and stored.title is None
    assert (await store.sessions.root_frame(task.id)).agent_id == "researcher"


async def test_unknown_sessions(store: Store) -> None:
    assert await store.sessions.get(999_999) is None
    assert await store.sessions.active_frames(999_999) == []
    with pytest.raises(LookupError, match="999999 has no root frame"):
        await store.sessions.root_frame(999_999)


async def test_run_context_is_replaced_and_cleared(store: Store) -> None:
    session = await store.sessions.create("cli:me", run_context={"step": 1})

    await store.sessions.set_run_context(session.id, {"step": 2, "notes": ["ä", "日本"]})
    stored = await store.sessions.get(session.id)
    assert stored is not None and stored.run_context == {"step": 2, "notes": ["ä", "日本"]}

    await store.sessions.set_run_context(session.id, None)
    stored = await store.sessions.get(session.id)
    assert stored is not None and stored.run_context is None


async def test_sub_agent_frames_push_and_terminate(store: Store) -> None:
    session = await store.sessions.create("telegram:42")
    root = await store.sessions.root_frame(session.id)

    child = await store.sessions.push_frame(
        session.id,
        agent_id="coder",
        depth=1,
        parent_tool_call_id=await delegating_call(store, root),
        agent_prompt="Write the script",
    )
    grandchild = await store.sessions.push_frame(
        session.id,
        agent_id="tester",
        depth=2,
        parent_tool_call_id=await delegating_call(store, child),
        agent_prompt="Test the script",
    )
    assert (child.depth, child.agent_id, child.agent_prompt) == (1, "coder", "Write the script")
    assert_recent_utc(grandchild.created_at)
    assert await store.sessions.active_frames(session.id) == [root, child, grandchild]

    await store.sessions.terminate_frame(grandchild.id)
    assert await store.sessions.active_frames(session.id) == [root, child]

    await store.sessions.terminate_frame(child.id)
    assert await store.sessions.active_frames(session.id) == [root]
    assert await store.sessions.root_frame(session.id) == root


async def test_active_frames_are_ordered_by_depth_not_by_creation(store: Store) -> None:
    session = await store.sessions.create("telegram:42")
    root = await store.sessions.root_frame(session.id)
    call = await delegating_call(store, root)
    deep = await store.sessions.push_frame(
        session.id, agent_id="b", depth=2, parent_tool_call_id=call, agent_prompt="deep"
    )
    shallow = await store.sessions.push_frame(
        session.id, agent_id="a", depth=1, parent_tool_call_id=call, agent_prompt="shallow"
    )

    assert await store.sessions.active_frames(session.id) == [root, shallow, deep]


async def test_frames_of_other_sessions_do_not_mix(store: Store) -> None:
    first = await store.sessions.create("telegram:1")
    second = await store.sessions.create("telegram:2")
    first_root = await store.sessions.root_frame(first.id)
    await store.sessions.push_frame(
        first.id,
        agent_id="coder",
        depth=1,
        parent_tool_call_id=await delegating_call(store, first_root),
        agent_prompt="only in the first session",
    )

    assert [f.depth for f in await store.sessions.active_frames(first.id)] == [0, 1]
    assert await store.sessions.active_frames(second.id) == [
        await store.sessions.root_frame(second.id)
    ]


async def test_a_source_switches_between_sessions(store: Store) -> None:
    assert await store.sessions.active_for_source("telegram:42") is None
    old = await store.sessions.create("telegram:42")
    new = await store.sessions.create("telegram:42")
    other = await store.sessions.create("telegram:7")

    await store.sessions.set_active_for_source("telegram:42", old.id)
    await store.sessions.set_active_for_source("telegram:7", other.id)
    assert await store.sessions.active_for_source("telegram:42") == old.id

    await store.sessions.set_active_for_source("telegram:42", new.id)  # an upsert, not a clash
    assert await store.sessions.active_for_source("telegram:42") == new.id
    assert await store.sessions.active_for_source("telegram:7") == other.id

    await store.sessions.set_active_for_source("telegram:42", new.id)  # idempotent
    assert await store.sessions.active_for_source("telegram:42") == new.id
