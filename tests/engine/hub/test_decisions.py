"""The hub's one door for decisions (``ChatHub.decide``, ``ChatHub.answer``): every surface
decides through it, with the chat it comes from or none (then the chat is found from the
call's own row), and it refuses what it must: a call of another chat, a call no longer
pending, a call that never was, a choice that is no choice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from engine.approval import BypassRequest
from engine.approval.deciders import OPERATOR
from engine.config import AppConfig
from engine.core import Engine
from engine.hub import APPROVE, CHOICES, REJECT, ChatHub, Choice, DecisionMade, HubError
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import text, tool_call
from engine.session import events as ev
from engine.store.inbox import InboxError
from tests.engine.hub.conftest import EchoModel, wait_done
from tests.engine.session.helpers import start_until

CHAT = "telegram:1"


@pytest.fixture
async def gated(app_config: AppConfig, model: EchoModel) -> AsyncIterator[ChatHub]:
    """A hub whose engine asks before ``execute_cmd`` (the default rules)."""
    engine = await Engine.open(app_config, models=ModelRegistry([model]))
    hub = ChatHub(engine)
    await hub.start()
    yield hub
    await hub.close()
    await engine.close()


async def asked(hub: ChatHub, model: EchoModel, source: str = CHAT) -> tuple[int, object]:
    """A turn in ``source`` that waits for a decision on ``echo hi``; its call and events."""
    model.add(tool_call("execute_cmd", '{"command": "echo hi"}', "c"), text("Ran it."))
    events = hub.events(source)
    await hub.send_message(source, "run it")

    async def approval() -> ev.ApprovalRequired:
        while not isinstance((event := await events.recv()).event, ev.ApprovalRequired):
            pass
        return event.event

    request = await asyncio.wait_for(approval(), 5)
    return request.tool_call_id, events


async def test_a_decision_from_the_inbox_finds_its_chat_from_the_calls_row(
    gated: ChatHub, model: EchoModel
) -> None:
    """No chat named: the call's own chat resumes, and its cards hear who decided."""
    call, events = await asked(gated, model)
    await gated.decide(call, APPROVE, decider=OPERATOR, by="the web inbox")

    seen = await wait_done(events)
    made = [e.event for e in seen if isinstance(e.event, DecisionMade)]
    assert made == [DecisionMade(call, "approve", "the web inbox")]
    assert seen[-1].event.content == "Ran it."


async def test_a_rejection_from_the_api_carries_its_note_to_the_chats_cards(
    gated: ChatHub, model: EchoModel
) -> None:
    call, events = await asked(gated, model)
    await gated.decide(call, REJECT, decider=OPERATOR, note="not today", by="the API")

    seen = await wait_done(events)
    made = [e.event for e in seen if isinstance(e.event, DecisionMade)]
    assert made == [DecisionMade(call, "reject", "the API", "not today")]


async def test_a_decision_for_a_call_of_another_chat_is_refused_and_changes_nothing(
    gated: ChatHub, model: EchoModel
) -> None:
    call, events = await asked(gated, model)
    for choice in CHOICES.values():
        with pytest.raises(InboxError) as refused:
            await gated.decide(call, choice, decider=OPERATOR, source="telegram:2")
        assert refused.value.code == "other_session"

    await gated.decide(call, APPROVE, decider=OPERATOR, source=CHAT)  # still pending
    assert (await wait_done(events))[-1].event.content == "Ran it."


async def test_a_decision_for_a_call_no_longer_pending_is_refused(
    gated: ChatHub, model: EchoModel
) -> None:
    call, events = await asked(gated, model)
    await gated.decide(call, REJECT, decider=OPERATOR, source=CHAT)
    await wait_done(events)

    for source in (CHAT, None):
        for choice in (APPROVE, REJECT):
            with pytest.raises(InboxError) as refused:
                await gated.decide(call, choice, decider=OPERATOR, source=source)
            assert refused.value.code == "resolved"


async def test_a_decision_for_a_call_that_never_was_is_refused(gated: ChatHub) -> None:
    for source in (CHAT, None):
        with pytest.raises(InboxError) as refused:
            await gated.decide(987654, APPROVE, decider=OPERATOR, source=source)
        assert refused.value.code == "not_found"
        with pytest.raises(InboxError) as refused:
            await gated.answer(987654, "blue", source=source)
        assert refused.value.code == "not_found"


async def test_a_malformed_chat_or_bypass_is_refused_before_anything_changes(
    gated: ChatHub, model: EchoModel
) -> None:
    call, events = await asked(gated, model)
    with pytest.raises(HubError, match="source"):
        await gated.decide(call, APPROVE, decider=OPERATOR, source="not a chat")
    with pytest.raises(ValueError, match="ttl"):
        await gated.decide(
            call, Choice(True, BypassRequest("all", None, 10.0**12)), decider=OPERATOR
        )
    await gated.decide(call, APPROVE, decider=OPERATOR)
    assert (await wait_done(events))[-1].event.content == "Ran it."


async def test_a_call_of_a_session_in_no_chat_is_decided_by_the_engine_alone(
    gated: ChatHub, model: EchoModel
) -> None:
    """A session the hub never served (run on the engine itself): its turn, not a chat,
    hears the decision."""
    model.add(tool_call("execute_cmd", '{"command": "echo hi"}', "c"), text("Ran it alone."))
    handler = await gated.engine.new_session("console")
    turn, request = await start_until(
        lambda emit: handler.handle_message("run it", emit=emit), ev.ApprovalRequired, []
    )

    decided = await gated.decide(request.tool_call_id, APPROVE, decider=OPERATOR, by="the API")
    assert decided.resolution.live
    result = await asyncio.wait_for(turn, 5)
    assert result.content == "Ran it alone."


async def test_an_answer_from_the_inbox_finds_its_chat_and_a_foreign_chat_is_refused(
    gated: ChatHub, model: EchoModel
) -> None:
    """The question's own row names its chat: the inbox's answer resumes that chat's turn;
    the same answer from another chat is refused, and an empty one before anything changes."""
    model.add(tool_call("ask_user_clarification", '{"question": "Which colour?"}', "q"))
    model.add(text("Painted it."))
    events = gated.events(CHAT)
    await gated.send_message(CHAT, "paint it")

    async def asked() -> ev.Question:
        while not isinstance((event := await events.recv()).event, ev.Question):
            pass
        return event.event

    question = await asyncio.wait_for(asked(), 5)
    with pytest.raises(InboxError) as refused:
        await gated.answer(question.request_id, "blue", source="telegram:2")
    assert refused.value.code == "other_session"
    with pytest.raises(HubError, match="empty"):
        await gated.answer(question.request_id, "  ")

    await gated.answer(question.request_id, "green")
    assert (await wait_done(events))[-1].event.content == "Painted it."
