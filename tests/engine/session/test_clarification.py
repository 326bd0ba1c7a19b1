"""ask_user_clarification: the question reaches the user, the answer is the tool result."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.approval.deciders import OPERATOR
from engine.core import Engine
from engine.llm.scripted import text, tool_call
from engine.session import events as ev
from engine.session.outcomes import Cancelled, Final
from engine.store.inbox import InboxError
from tests.engine.session.helpers import start_until, tool_messages


def ask(question: str, call_id: str = "q1"):
    return tool_call("ask_user_clarification", json.dumps({"question": question}), call_id)


async def asked_turn(handler, message: str, events: list) -> tuple[asyncio.Task, ev.Question]:
    return await start_until(
        lambda emit: handler.handle_message(message, emit=emit), ev.Question, events
    )


async def test_the_answer_becomes_the_tool_result(engine: Engine, model):
    model.add(ask("Which city?"), text("Booking Rome."))
    handler = await engine.new_session("console")
    turn, question = await asked_turn(handler, "book a hotel", [])

    assert question.question == "Which city?" and question.session_id == handler.session.id
    [item] = await engine.pending_questions()
    assert item.tool_call_id == question.request_id
    decided = await engine.resolve_question(question.request_id, "Rome")

    assert decided.resolution.live
    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    assert tool_messages(model.requests[1][0]) == ["Rome"]
    assert await engine.pending_questions() == []


async def test_a_closed_channel_leaves_the_question_pending_and_a_resume_asks_again(
    engine: Engine, model
):
    model.add(ask("Which city?"))
    handler = await engine.new_session("console")
    turn, question = await asked_turn(handler, "book a hotel", [])
    engine.approvals.close_session(handler.session.id)

    assert isinstance(await asyncio.wait_for(turn, 5), Cancelled)
    call = await engine.store.history.get_tool_call(question.request_id)
    assert call is not None and call.status == "pending"

    model.add(text("Booking Paris."))
    resumed, _ = await start_until(lambda emit: handler.resume_turn(emit=emit), ev.Question, [])
    await engine.resolve_question(question.request_id, "Paris")
    assert isinstance(await asyncio.wait_for(resumed, 5), Final)
    assert tool_messages(model.requests[-1][0]) == ["Paris"]


async def test_an_answer_after_a_restart_is_stored_and_the_turn_continues(open_engine, model):
    first = await open_engine()
    model.add(ask("Which city?"))
    handler = await first.new_session("console")
    turn, question = await asked_turn(handler, "book a hotel", [])
    first.approvals.close_session(handler.session.id)
    await asyncio.wait_for(turn, 5)
    await first.close()

    second = await open_engine()
    model.add(text("Booking Oslo."))
    decided = await second.resolve_question(question.request_id, "Oslo")

    assert not decided.resolution.live
    result = await asyncio.wait_for(decided.resumed, 5)
    assert isinstance(result, Final) and result.content == "Booking Oslo."
    assert tool_messages(model.requests[-1][0]) == ["Oslo"]


async def test_stop_cancels_a_waiting_question(engine: Engine, model):
    model.add(ask("Which city?"))
    handler = await engine.new_session("console")
    turn, question = await asked_turn(handler, "book", [])
    handler.cancel()
    assert isinstance(await asyncio.wait_for(turn, 5), Cancelled)
    call = await engine.store.history.get_tool_call(question.request_id)
    assert call is not None and call.status == "cancelled"
    with pytest.raises(InboxError) as err:
        await engine.resolve_question(question.request_id, "late")
    assert err.value.code == "resolved"


async def test_bad_questions_and_answers_are_refused(engine: Engine, model):
    model.add(ask("   "), text("ok"))
    handler = await engine.new_session("console")
    await handler.handle_message("ask me nothing")
    assert tool_messages(model.requests[1][0]) == [
        "Error: ask_user_clarification: 'question' is empty"
    ]
    with pytest.raises(InboxError) as err:
        await engine.resolve_question(424242, "hello")
    assert err.value.code == "not_found"


async def test_an_approval_id_is_not_a_question(open_engine, model):
    engine = await open_engine()
    model.add(tool_call("execute_cmd", '{"command": "true"}', "c1"), text("ok"))
    handler = await engine.new_session("console")
    turn, request = await start_until(
        lambda emit: handler.handle_message("go", emit=emit), ev.ApprovalRequired, []
    )
    with pytest.raises(InboxError) as err:
        await engine.resolve_question(request.tool_call_id, "yes")
    assert err.value.code == "not_found"
    await engine.approve(request.tool_call_id, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)


async def test_background_sessions_are_never_offered_the_question_tool(engine: Engine, model):
    model.add(text("ok"))
    handler = await engine.new_session("cron", is_interactive=False)
    await handler.handle_message("run")
    offered = [schema["function"]["name"] for schema in model.requests[0][1]]
    assert "ask_user_clarification" not in offered


async def test_an_answer_given_while_nobody_waits_is_not_asked_again(engine: Engine, model):
    model.add(ask("Which city?"))
    handler = await engine.new_session("console")
    events: list = []
    turn, question = await asked_turn(handler, "book", events)
    engine.approvals.close_session(handler.session.id)  # e.g. the adapter went away
    await asyncio.wait_for(turn, 5)

    model.add(text("Booking Lima."))
    decided = await engine.resolve_question(question.request_id, "Lima", emit=events.append)

    assert not decided.resolution.live
    assert isinstance(await asyncio.wait_for(decided.resumed, 5), Final)
    assert len([e for e in events if isinstance(e, ev.Question)]) == 1
    assert tool_messages(model.requests[-1][0]) == ["Lima"]


async def test_an_answer_stored_as_a_resume_asks_again_reaches_the_resumed_turn(
    engine: Engine, model
):
    """A fleet's take-over resumes the turn while the user answers at another process: the
    answer is stored after the resume read the question open and before it waits."""
    model.add(ask("Which city?"))
    handler = await engine.new_session("console")
    turn, question = await asked_turn(handler, "book a hotel", [])
    engine.approvals.close_session(handler.session.id)
    await asyncio.wait_for(turn, 5)

    history, read = engine.store.history, engine.store.history.get_tool_call

    async def answered_right_after_reading(tool_call_id: int):
        row = await read(tool_call_id)
        if tool_call_id == question.request_id:
            history.get_tool_call = read  # type: ignore[method-assign]  # (once)
            # As the other process does: stored, no waiter here, nothing resumed.
            decided = await engine.resolve_question(tool_call_id, "Quito", resume=False)
            assert not decided.resolution.live
        return row

    history.get_tool_call = answered_right_after_reading  # type: ignore[method-assign]
    model.add(text("Booking Quito."))
    result = await asyncio.wait_for(handler.resume_turn(), 5)

    assert isinstance(result, Final) and result.content == "Booking Quito."
    assert tool_messages(model.requests[-1][0]) == ["Quito"]


async def test_an_answer_stored_before_the_turn_waits_for_it_is_taken(engine: Engine, model):
    """The answer (or its notice from another process) comes between the question being
    stored as pending and the turn beginning to wait."""
    model.add(ask("Which city?"), text("Booking Cusco."))
    handler = await engine.new_session("console")
    history, set_status = engine.store.history, engine.store.history.set_tool_status

    async def answered_once_pending(tool_call_id: int, status, result=None) -> None:
        await set_status(tool_call_id, status, result)
        if status == "pending":
            history.set_tool_status = set_status  # type: ignore[method-assign]  # (once)
            await engine.resolve_question(tool_call_id, "Cusco", resume=False)

    history.set_tool_status = answered_once_pending  # type: ignore[method-assign]
    result = await asyncio.wait_for(handler.handle_message("book a hotel"), 5)

    assert isinstance(result, Final) and result.content == "Booking Cusco."
    assert tool_messages(model.requests[-1][0]) == ["Cusco"]
