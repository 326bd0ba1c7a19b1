"""Approval records and open questions on both back ends: decided once, found after restart."""

from __future__ import annotations

import asyncio
import os

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from engine.store import Store
from engine.store.inbox import ASK_USER_TOOL, Decision, InboxError
from engine.store.rows import AssistantRecord, FrameRow, NewToolCall, ToolCallRow
from tests.pg import POSTGRES_URL_ENV, fresh_postgres_database


async def gated_call(store: Store, root: FrameRow, name: str = "execute_cmd") -> ToolCallRow:
    message = await store.history.append_assistant(
        root.id, AssistantRecord(""), [NewToolCall(f"c_{name}", name, '{"command": "ls"}')]
    )
    return message.tool_calls[0]


async def test_a_request_opens_one_record_and_keeps_an_earlier_decision(store: Store, root):
    call = await gated_call(store, root)
    record = await store.inbox.request_approval(call.id, root.session_id)
    assert record.decision is None
    assert (await store.history.get_tool_call(call.id)).status == "pending"

    await store.inbox.decide(call.id, Decision.APPROVED)
    again = await store.inbox.request_approval(call.id, root.session_id)  # re-gated on resume
    assert again.decision is Decision.APPROVED and again.requested_at == record.requested_at


async def test_pending_lists_undecided_approvals_and_questions_apart(store: Store, root):
    session = await store.sessions.get(root.session_id)
    gated = await gated_call(store, root)
    question = await gated_call(store, root, ASK_USER_TOOL)
    await store.inbox.request_approval(gated.id, root.session_id)
    await store.history.set_tool_status(question.id, "pending", None)

    [approval] = await store.inbox.pending_approvals()
    [asked] = await store.inbox.pending_questions(root.session_id)
    assert (approval.tool_call_id, approval.source, approval.depth) == (gated.id, session.source, 0)
    assert asked.tool_call_id == question.id and asked.name == ASK_USER_TOOL

    await store.inbox.decide(gated.id, Decision.REJECTED, "no")
    assert await store.inbox.pending_approvals() == []  # decided: no longer waits for a human


async def test_a_decision_applies_once_to_the_right_session(store: Store, root):
    call = await gated_call(store, root)
    await store.inbox.request_approval(call.id, root.session_id)
    other = await store.sessions.create("telegram:99")

    with pytest.raises(InboxError) as err:
        await store.inbox.decide(call.id, Decision.APPROVED, session_id=other.id)
    assert err.value.code == "other_session"
    with pytest.raises(InboxError) as err:
        await store.inbox.decide(call.id + 1000, Decision.APPROVED)
    assert err.value.code == "not_found"
    assert (await store.inbox.get(call.id)).decision is None

    decided = await store.inbox.decide(call.id, Decision.REJECTED, "x" * 100_000)
    assert decided.note is not None and len(decided.note) < 4100
    with pytest.raises(InboxError) as err:
        await store.inbox.decide(call.id, Decision.APPROVED)
    assert err.value.code == "resolved"
    assert (await store.inbox.get(call.id)).decision is Decision.REJECTED


async def test_what_commits_with_a_decision_is_rolled_back_with_a_refused_one(store: Store, root):
    """``also`` (a reason's message marked handled) is written in the decision's commit,
    and not at all when the decision is refused."""
    call = await gated_call(store, root)
    await store.inbox.request_approval(call.id, root.session_id)
    written: list[str] = []

    def note_it(conn: sa.Connection) -> None:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS marks (what TEXT)"))
        conn.execute(sa.text("INSERT INTO marks VALUES ('reason')"))
        written.append("reason")

    def marks(conn: sa.Connection) -> list[str]:
        return list(conn.execute(sa.text("SELECT what FROM marks")).scalars())

    await store.inbox.decide(call.id, Decision.REJECTED, "keep it", also=note_it)
    with pytest.raises(InboxError):
        await store.inbox.decide(call.id, Decision.APPROVED, also=note_it)
    assert written == ["reason"]  # the refused decision never ran it
    assert await store.db.run(marks) == ["reason"]

    other = await gated_call(store, root, "write_file")
    await store.inbox.request_approval(other.id, root.session_id)

    def handled_before(conn: sa.Connection) -> None:
        raise LookupError("its message was handled before")

    with pytest.raises(LookupError):
        await store.inbox.decide(other.id, Decision.REJECTED, "again", also=handled_before)
    assert (await store.inbox.get(other.id)).decision is None  # rolled back with it


async def test_a_call_that_never_asked_cannot_be_approved(store: Store, root):
    call = await gated_call(store, root)  # still running: the gate let it through
    with pytest.raises(InboxError) as err:
        await store.inbox.decide(call.id, Decision.APPROVED)
    assert err.value.code == "resolved"


async def test_a_persisted_question_takes_its_answer_once(store: Store, root):
    question = await gated_call(store, root, ASK_USER_TOOL)
    await store.history.set_tool_status(question.id, "pending", None)
    item = await store.inbox.answer_question(question.id, "Rome", session_id=root.session_id)
    assert item.session_id == root.session_id
    stored = await store.history.get_tool_call(question.id)
    assert (stored.status, stored.result) == ("done", "Rome")
    with pytest.raises(InboxError) as err:
        await store.inbox.answer_question(question.id, "Paris")
    assert err.value.code == "resolved"
    # The same words again (the message handed over a second time): that answer.
    with pytest.raises(InboxError) as err:
        await store.inbox.answer_question(question.id, "Rome")
    assert err.value.code == "repeated"


async def test_interrupted_sessions_are_found_and_stopped_ones_are_not(store: Store, root):
    assert await store.sessions.interrupted() == []
    await store.history.append_message(root.id, "user", "hello?")
    assert await store.sessions.interrupted() == [root.session_id]
    await store.history.append_assistant(root.id, AssistantRecord("hi"))
    assert await store.sessions.interrupted() == []

    await store.history.append_message(root.id, "user", "stop this")
    call = await gated_call(store, root)
    assert await store.sessions.interrupted() == [root.session_id]  # a call still running
    await store.history.set_tool_status(call.id, "cancelled", "stopped")
    assert await store.sessions.interrupted() == []  # ended by /stop: not resumed


async def test_two_answers_at_once_apply_once_on_postgresql() -> None:
    """Two surfaces (or two processes) answer a question at the same moment: one answer
    is stored, the other is refused (both were told they answered, the second's text
    overwriting the first's). A third connection holds the row until both wait for it."""
    if not os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    async with fresh_postgres_database(migrated=True) as url:
        store = await Store.open(url)
        locker = create_async_engine(url)
        try:
            session = await store.sessions.create("discord:1")
            root = await store.sessions.root_frame(session.id)
            message = await store.history.append_assistant(
                root.id, AssistantRecord(""), [NewToolCall("c1", ASK_USER_TOOL, "{}")]
            )
            question = message.tool_calls[0]
            await store.history.set_tool_status(question.id, "pending", None)
            async with locker.connect() as holder:
                await holder.execute(
                    sa.text("SELECT id FROM chat_llm_tools WHERE id = :i FOR UPDATE"),
                    {"i": question.id},
                )
                answers = [
                    asyncio.create_task(store.inbox.answer_question(question.id, text))
                    for text in ("Rome", "Paris")
                ]
                async with locker.connect() as probe:
                    for _ in range(1000):  # both past their read, waiting for the row
                        waiting = (
                            await probe.execute(
                                sa.text(
                                    "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                    "current_database() AND wait_event_type = 'Lock'"
                                )
                            )
                        ).scalar()
                        if waiting is not None and waiting >= 2:
                            break
                        await asyncio.sleep(0.01)
                await holder.rollback()
            results = await asyncio.gather(*answers, return_exceptions=True)
            refused = [r for r in results if isinstance(r, InboxError)]
            assert len(refused) == 1 and refused[0].code == "resolved", results
            stored = await store.history.get_tool_call(question.id)
            assert stored is not None and stored.result in ("Rome", "Paris")
        finally:
            await locker.dispose()
            await store.close()
