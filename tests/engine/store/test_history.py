"""Messages of a frame and their tool calls: what a turn writes and what the next one reads."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engine.store import Store
from engine.store.rows import AssistantRecord, FrameRow, MessageRow, NewToolCall
from engine.store.schema import TOOL_STATUSES

REPO_ROOT = Path(__file__).resolve().parents[3]


def call(name: str, arguments: str = "{}") -> NewToolCall:
    return NewToolCall(f"call_{name}", name, arguments)


async def exchange(store: Store, frame: FrameRow, n: int) -> list[MessageRow]:
    """``n`` alternating user/assistant messages, oldest first."""
    rows = []
    for i in range(n):
        if i % 2 == 0:
            rows.append(await store.history.append_message(frame.id, "user", f"message {i}"))
        else:
            rows.append(
                await store.history.append_assistant(frame.id, AssistantRecord(f"reply {i}"))
            )
    return rows


def ids(rows: list[MessageRow]) -> list[int]:
    return [row.id for row in rows]


async def test_a_turn_with_tool_calls_is_stored_and_read_back(store: Store, root: FrameRow) -> None:
    question = await store.history.append_message(root.id, "user", "What is in notes.txt?")
    answer = await store.history.append_assistant(
        root.id,
        AssistantRecord(
            content="Let me look.",
            reasoning_content="The user wants the file; read it, then list the folder.",
            model="primary",
            input_tokens=120,
            output_tokens=30,
            cost=0.0015,
            duration_ms=840,
        ),
        [call("read_file", '{"path": "notes.txt"}'), call("list_files", '{"path": "."}')],
    )

    assert [c.status for c in answer.tool_calls] == ["running", "running"]
    assert answer.tool_calls[0].id < answer.tool_calls[1].id

    loaded = await store.history.load(root.id)
    assert ids(loaded) == [question.id, answer.id]
    user, assistant = loaded
    assert (user.role, user.content, user.status, user.tool_calls) == (
        "user",
        "What is in notes.txt?",
        "ok",
        [],
    )
    assert assistant.role == "assistant" and assistant.content == "Let me look."
    assert assistant.reasoning_content == answer.reasoning_content
    assert (assistant.model, assistant.input_tokens, assistant.output_tokens) == (
        "primary",
        120,
        30,
    )
    assert assistant.cost == pytest.approx(0.0015)
    assert assistant.tool_calls == answer.tool_calls
    assert [(c.llm_call_id, c.name, c.arguments, c.result) for c in assistant.tool_calls] == [
        ("call_read_file", "read_file", '{"path": "notes.txt"}', None),
        ("call_list_files", "list_files", '{"path": "."}', None),
    ]


async def test_a_tool_call_moves_through_every_status(store: Store, root: FrameRow) -> None:
    message = await store.history.append_assistant(
        root.id, AssistantRecord(""), [call("execute_cmd", '{"command": "ls"}')]
    )
    tool_call = message.tool_calls[0]

    for status in TOOL_STATUSES:
        await store.history.set_tool_status(tool_call.id, status, f"result while {status}")
        stored = await store.history.get_tool_call(tool_call.id)
        assert stored is not None
        assert (stored.status, stored.result) == (status, f"result while {status}")

    await store.history.set_tool_status(tool_call.id, "done", None)
    stored = await store.history.get_tool_call(tool_call.id)
    assert stored is not None and (stored.status, stored.result) == ("done", None)
    assert await store.history.get_tool_call(999_999) is None


async def test_an_unknown_tool_status_is_refused_and_nothing_changes(
    store: Store, root: FrameRow
) -> None:
    message = await store.history.append_assistant(
        root.id, AssistantRecord(""), [call("read_file")]
    )
    tool_call = message.tool_calls[0]

    with pytest.raises(sa.exc.IntegrityError):
        await store.history.set_tool_status(tool_call.id, "exploded", "boom")  # type: ignore[arg-type]

    assert await store.history.get_tool_call(tool_call.id) == tool_call


async def test_an_unknown_role_is_refused_and_nothing_is_written(
    store: Store, root: FrameRow
) -> None:
    kept = await store.history.append_message(root.id, "user", "hello")

    with pytest.raises(sa.exc.IntegrityError):
        await store.history.append_message(root.id, "system", "be evil")  # type: ignore[arg-type]
    with pytest.raises(sa.exc.IntegrityError):
        await store.history.append_message(root.id, "user", "odd", status="maybe")

    assert ids(await store.history.load(root.id)) == [kept.id]
    last = await store.history.last_message(root.id)
    assert last is not None and last.id == kept.id
    # The store is still usable after the refused writes.
    after = await store.history.append_message(root.id, "agent", "subtask finished")
    assert ids(await store.history.load(root.id)) == [kept.id, after.id]


async def test_an_assistant_message_and_its_tool_calls_are_one_transaction(
    store: Store, root: FrameRow
) -> None:
    # The second tool call breaks a NOT NULL constraint after the message row was inserted.
    refused = NewToolCall("call_2", None, "{}")  # type: ignore[arg-type]

    with pytest.raises(sa.exc.IntegrityError):
        await store.history.append_assistant(
            root.id, AssistantRecord("half a reply"), [call("read_file"), refused]
        )

    assert await store.history.load(root.id) == []
    assert await store.history.open_tool_calls(root.id) == []


async def test_load_returns_the_frame_oldest_first(store: Store, root: FrameRow) -> None:
    rows = await exchange(store, root, 6)

    assert ids(await store.history.load(root.id)) == ids(rows)
    assert [m.role for m in await store.history.load(root.id)] == ["user", "assistant"] * 3


async def test_load_after_an_id_and_with_a_limit(store: Store, root: FrameRow) -> None:
    rows = await exchange(store, root, 6)
    load = store.history.load

    assert ids(await load(root.id, after_id=rows[2].id)) == ids(rows[3:])
    assert await load(root.id, after_id=rows[-1].id) == []
    # limit keeps the newest rows, still oldest first
    assert ids(await load(root.id, limit=2)) == ids(rows[-2:])
    assert ids(await load(root.id, limit=100)) == ids(rows)
    assert await load(root.id, limit=0) == []
    assert ids(await load(root.id, after_id=rows[0].id, limit=3)) == ids(rows[-3:])
    assert ids(await load(root.id, after_id=rows[3].id, limit=3)) == ids(rows[4:])


async def test_a_limited_load_keeps_the_tool_calls_of_the_rows_it_returns(
    store: Store, root: FrameRow
) -> None:
    old = await store.history.append_assistant(root.id, AssistantRecord(""), [call("old_tool")])
    new = await store.history.append_assistant(root.id, AssistantRecord(""), [call("new_tool")])

    (only,) = await store.history.load(root.id, limit=1)
    assert only.id == new.id and only.tool_calls == new.tool_calls
    assert old.tool_calls[0] not in only.tool_calls


async def test_frames_keep_their_own_history(store: Store, root: FrameRow) -> None:
    parent_message = await store.history.append_assistant(
        root.id, AssistantRecord(""), [call("execute_subtask")]
    )
    child = await store.sessions.push_frame(
        root.session_id,
        agent_id="coder",
        depth=1,
        parent_tool_call_id=parent_message.tool_calls[0].id,
        agent_prompt="Write it",
    )
    child_message = await store.history.append_message(child.id, "user", "Write it")

    assert ids(await store.history.load(root.id)) == [parent_message.id]
    assert ids(await store.history.load(child.id)) == [child_message.id]


async def test_a_failed_message_disappears_from_the_conversation(
    store: Store, root: FrameRow
) -> None:
    question = await store.history.append_message(root.id, "user", "hi")
    broken = await store.history.append_assistant(
        root.id, AssistantRecord("partial"), [call("read_file")]
    )

    await store.history.mark_failed(broken.id)

    assert ids(await store.history.load(root.id)) == [question.id]
    assert ids(await store.history.load(root.id, limit=1)) == [question.id]
    last = await store.history.last_message(root.id)
    assert last is not None and last.id == question.id


async def test_last_message(store: Store, root: FrameRow) -> None:
    assert await store.history.last_message(root.id) is None

    await store.history.append_message(root.id, "user", "first")
    newest = await store.history.append_assistant(
        root.id, AssistantRecord("second", model="primary"), [call("read_file")]
    )

    last = await store.history.last_message(root.id)
    assert last is not None
    assert (last.id, last.role, last.content, last.model) == (
        newest.id,
        "assistant",
        "second",
        "primary",
    )
    assert last.tool_calls == []  # the newest row alone, without its tool calls


async def test_open_tool_calls_are_the_running_and_pending_ones(
    store: Store, root: FrameRow
) -> None:
    message = await store.history.append_assistant(
        root.id, AssistantRecord(""), [call(status) for status in TOOL_STATUSES]
    )
    by_name = {c.name: c for c in message.tool_calls}
    for status, tool_call in by_name.items():
        await store.history.set_tool_status(tool_call.id, status, None)

    open_calls = await store.history.open_tool_calls(root.id)

    assert [(c.name, c.status) for c in open_calls] == [
        ("running", "running"),
        ("pending", "pending"),
    ]
    assert [c.id for c in open_calls] == [by_name["running"].id, by_name["pending"].id]


async def test_open_tool_calls_across_a_session(store: Store, root: FrameRow) -> None:
    delegation = await store.history.append_assistant(
        root.id, AssistantRecord(""), [call("execute_subtask")]
    )
    child = await store.sessions.push_frame(
        root.session_id,
        agent_id="coder",
        depth=1,
        parent_tool_call_id=delegation.tool_calls[0].id,
        agent_prompt="Do it",
    )
    in_child = await store.history.append_assistant(
        child.id, AssistantRecord(""), [call("execute_cmd"), call("write_file")]
    )
    await store.history.set_tool_status(in_child.tool_calls[1].id, "pending")
    finished = await store.history.append_assistant(child.id, AssistantRecord(""), [call("noop")])
    await store.history.set_tool_status(finished.tool_calls[0].id, "done", "ok")

    elsewhere = await store.sessions.create("telegram:7")
    other_root = await store.sessions.root_frame(elsewhere.id)
    await store.history.append_assistant(other_root.id, AssistantRecord(""), [call("read_file")])

    running = in_child.tool_calls[0]
    pending = await store.history.get_tool_call(in_child.tool_calls[1].id)
    assert await store.history.open_tool_calls(root.id) == delegation.tool_calls
    assert await store.history.open_tool_calls(child.id) == [running, pending]
    assert await store.history.session_open_tool_calls(root.session_id) == [
        (root.id, delegation.tool_calls[0]),
        (child.id, running),
        (child.id, pending),
    ]


async def test_timestamps_come_back_as_aware_utc(store: Store, root: FrameRow) -> None:
    before = datetime.now(UTC)
    written = await store.history.append_message(root.id, "user", "when?")
    (loaded,) = await store.history.load(root.id)

    assert loaded.created_at.tzinfo is not None
    assert loaded.created_at.utcoffset() == timedelta(0)
    assert loaded.created_at == written.created_at
    assert before - timedelta(seconds=1) <= loaded.created_at <= datetime.now(UTC)


async def test_metadata_json_round_trips(store: Store, root: FrameRow) -> None:
    metadata: dict[str, Any] = {
        "attachments": [{"name": "résumé ✓.pdf", "size": 31_337, "mime": "application/pdf"}],
        "caption": "日本語のテキスト 🚀",
        "quote": 'He said "hi"\nthen left\\',
        "forwarded": None,
        "nested": {"ok": True, "ratio": 0.25, "list": [1, "two", [3]]},
    }
    written = await store.history.append_message(root.id, "user", "see attached", metadata=metadata)
    synthetic = await store.history.append_message(root.id, "agent", "tick", is_synthetic=True)

    first, second = await store.history.load(root.id)
    assert first.metadata == metadata == written.metadata
    assert (first.is_synthetic, second.is_synthetic) == (False, True)
    assert second.metadata is None and second.id == synthetic.id


CRASHING_WRITER = textwrap.dedent(
    """
    import asyncio, os, signal, sys

    from engine.store import Store

    async def main(url):
        store = await Store.open(url)
        session = await store.sessions.create("cli:crash")
        frame = await store.sessions.root_frame(session.id)
        row = await store.history.append_message(frame.id, "user", "do not lose me")
        print(frame.id, row.id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_an_acknowledged_message_survives_kill_9(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}"
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CRASHING_WRITER,
        url,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await writer.communicate()
    assert writer.returncode == -signal.SIGKILL, stderr.decode()
    frame_id, message_id = map(int, stdout.split())

    store = await Store.open(url)
    try:
        (survivor,) = await store.history.load(frame_id)
        assert (survivor.id, survivor.content) == (message_id, "do not lose me")
    finally:
        await store.close()


async def test_a_queued_message_corrected_while_it_waits_is_stored_as_corrected(
    store: Store, root: FrameRow
) -> None:
    """Its queue row's words are what the turn stores (whichever process runs it); one
    read already is not amended, nor another source's, nor another message's."""
    session_id = root.session_id
    queued = await store.queue.push("telegram:42", session_id, "deploy to prod", metadata={"id": 7})
    await store.queue.push("telegram:42", session_id, "and tell me", metadata={"id": 8})
    assert not await store.queue.amend("telegram:43", "id", 7, "deploy to staging")
    assert not await store.queue.amend("telegram:42", "id", 9, "deploy to staging")
    assert await store.queue.amend("telegram:42", "id", 7, "deploy to staging")
    row = await store.history.append_message(
        root.id, "user", "deploy to prod", metadata={"id": 7}, consumes=queued.id
    )
    assert row.content == "deploy to staging"
    assert [m.content for m in await store.history.load(root.id)] == ["deploy to staging"]
    assert not await store.queue.amend("telegram:42", "id", 7, "too late")
    assert [r.content for r in await store.queue.pending("telegram:42")] == ["and tell me"]


async def test_a_waiting_message_is_corrected_only_by_its_sender_and_in_its_threads(
    store: Store, root: FrameRow
) -> None:
    """A platform where anyone may send an edit of anyone's message (Matrix) names the
    editor; an edit that does not say its thread looks in the room's threads."""
    session_id = root.session_id
    said = {"id": "$e1", "sender": {"id": "@alice:hs", "name": "Alice"}}
    await store.queue.push("matrix:room@hs:$t1", session_id, "delete the database", metadata=said)
    assert not await store.queue.amend("matrix:room@hs", "id", "$e1", "x", by="@alice:hs")
    assert not await store.queue.amend(
        "matrix:room@hs", "id", "$e1", "x", by="@mallory:hs", threads=True
    )
    assert not await store.queue.amend("matrix:room", "id", "$e1", "x", threads=True)
    assert await store.queue.amend(
        "matrix:room@hs", "id", "$e1", "delete the cache", by="@alice:hs", threads=True
    )
    [row] = await store.queue.pending()
    assert row.content == "delete the cache"
