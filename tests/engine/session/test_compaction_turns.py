"""Compaction inside real turns: checked at the start of a turn, summary + newer rows after."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from engine.config import CompactionConfig
from engine.core import Engine
from engine.llm.scripted import text
from engine.llm.types import LlmRequestError, LlmResponse, ToolCallRequest, Usage
from engine.session import ChatSessionHandler
from engine.session.context.compaction import SUMMARIZER_PREAMBLE
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final
from tests.engine.session.helpers import EchoTool


def contents(messages) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


async def test_a_big_context_is_compacted_before_the_next_turn(engine: Engine, model):
    engine.compaction = CompactionConfig(enabled=True, threshold_tokens=1_000, keep_recent=2)
    handler = await engine.new_session("console")
    for i in range(4):
        model.add(text(f"answer {i}", input_tokens=200 * (i + 1)))
        await handler.handle_message(f"question {i} " + "x" * 50)
    model.add(text("answer 4", input_tokens=5_000))  # the last context was too big
    await handler.handle_message("question 4")
    model.add(text("SUMMARY: the user asked questions 0 to 4."), text("answer 5"))

    result = await handler.handle_message("question 5")

    assert isinstance(result, Final) and result.content == "answer 5"
    summarise, answer = model.requests[-2][0], model.requests[-1][0]
    assert "question 0" in contents(summarise)  # the summariser saw the old turns
    prompt = contents(answer)
    assert "SUMMARY: the user asked questions 0 to 4." in prompt
    assert "question 0" not in prompt and "question 5" in prompt
    summary = await engine.store.summaries.latest(
        (await engine.store.sessions.root_frame(handler.session.id)).id
    )
    assert summary is not None and summary.content.startswith("SUMMARY")


async def test_compaction_off_keeps_everything_and_ephemeral_sessions_never_compact(
    engine: Engine, model
):
    engine.compaction = replace(CompactionConfig(), enabled=True, threshold_tokens=10)
    handler = await engine.new_session("cron", is_ephemeral=True, is_interactive=False)
    model.add(text("a", input_tokens=999), text("b", input_tokens=999))
    await handler.handle_message("one")
    await handler.handle_message("two")
    assert len(model.requests) == 2  # no summarising call
    assert (
        await engine.store.summaries.latest(
            (await engine.store.sessions.root_frame(handler.session.id)).id
        )
        is None
    )


async def test_force_compaction_for_the_compact_command(engine: Engine, model):
    engine.compaction = CompactionConfig(enabled=True, threshold_tokens=10**9, keep_recent=1)
    handler = await engine.new_session("console")
    for i in range(3):
        model.add(text(f"answer {i}"))
        await handler.handle_message(f"question {i}")
    model.add(text("SUMMARY of three questions"))

    result = await handler.force_compact()

    assert result is not None and result.rows_summarised >= 2
    model.add(text("next"))
    await handler.handle_message("question 3")
    assert "SUMMARY of three questions" in contents(model.requests[-1][0])


async def _over_the_threshold(engine: Engine, model) -> ChatSessionHandler:  # type: ignore[no-untyped-def]
    """A session whose last answer's context passed the threshold: its next turn's start
    summarises."""
    engine.compaction = CompactionConfig(enabled=True, threshold_tokens=100, keep_recent=1)
    handler = await engine.new_session("console")
    for i in range(3):
        model.add(text(f"answer {i}", input_tokens=50))
        await handler.handle_message(f"question {i}")
    model.add(text("big", input_tokens=5_000))
    await handler.handle_message("question 3")
    return handler


async def test_a_summarisers_unexpected_error_skips_compaction_and_the_turn_goes_on(
    engine: Engine, model
):
    """Only CompactionError was caught: any other failure of the summarising call failed
    the turn, and every later one, since compaction is tried at each turn's start (found
    by review)."""
    handler = await _over_the_threshold(engine, model)
    answering = model.complete

    async def summariser_bug(messages, tools, *, on_delta=None):  # type: ignore[no-untyped-def]
        if "checkpoint summary" in str(messages[0]["content"]):
            raise KeyError("choices")  # a client's bug on some answer's shape
        return await answering(messages, tools, on_delta=on_delta)

    model.complete = summariser_bug
    model.add(text("answer 4"))
    assert isinstance(await handler.handle_message("question 4"), Final)


def _big_round(i: int, tokens: int) -> LlmResponse:
    return LlmResponse(
        content="thinking " + "z" * 3000,
        tool_calls=(ToolCallRequest(f"c{i}", "echo", '{"text": "y", "times": 150}'),),
        usage=Usage(input_tokens=tokens),
    )


@pytest.mark.parametrize("ending", ["failed", "exhausted"])
async def test_a_turn_that_ended_without_an_answer_still_gets_the_next_turn_compacted(
    engine: Engine, model, ending: str
):
    """Only an answer told the trigger how big the context was: after a turn that
    overflowed (a 400) or ran out of rounds, the next was sent as big, and failed too
    (found by review)."""
    engine.compaction = CompactionConfig(enabled=True, threshold_tokens=2_000, keep_recent=2)
    engine.tools.register(EchoTool())
    handler = await engine.new_session("console")
    model.add(text("first answer", input_tokens=100))
    await handler.handle_message("hello")
    rounds = 4 if ending == "failed" else 6  # max_tool_rounds is 6
    model.add(*(_big_round(i, 1000 * (i + 1)) for i in range(rounds)))
    if ending == "failed":
        model.add(LlmRequestError("maximum context length exceeded", status=400))
    result = await handler.handle_message("do lots of work")
    assert isinstance(result, Failed if ending == "failed" else Exhausted)
    model.add(text("SUMMARY of the work"), text("answer 3"))
    await handler.handle_message("continue")
    summarised = model.requests[-2][0]
    assert SUMMARIZER_PREAMBLE in "\n".join(str(m.get("content")) for m in summarised)


async def test_a_turn_known_to_be_small_reads_no_history_to_decide(engine: Engine, model):
    """With compaction on, each turn's start read and rendered the whole history since the
    last summary, though the last answer said the context was far below the threshold:
    per-turn cost grew with the history (found by review)."""
    engine.compaction = CompactionConfig(enabled=True, threshold_tokens=10**9, keep_recent=2)
    handler = await engine.new_session("console")
    history = engine.store.history
    loads: list[int] = []
    load = history.load

    async def counted(stack_id, *, after_id=0, limit=None):  # type: ignore[no-untyped-def]
        rows = await load(stack_id, after_id=after_id, limit=limit)
        loads.append(len(rows))
        return rows

    history.load = counted  # type: ignore[method-assign]
    for i in range(30):
        model.add(text(f"answer {i}", input_tokens=50))
        await handler.handle_message(f"question {i}")
    assert loads == [0, 0]  # the first turn's, before any answer said how big it was


async def test_a_stop_while_the_turn_start_summarises_stops_it(engine: Engine, model):
    """The summarising call was outside the turn's cancel scope: /stop waited for it, up
    to the model's timeout, and the summary was stored anyway (found by review)."""
    handler = await _over_the_threshold(engine, model)
    asked, never = asyncio.Event(), asyncio.Event()
    answering = model.complete

    async def summarising_slowly(messages, tools, *, on_delta=None):  # type: ignore[no-untyped-def]
        if "checkpoint summary" in str(messages[0]["content"]):
            asked.set()
            await never.wait()
        return await answering(messages, tools, on_delta=on_delta)

    model.complete = summarising_slowly
    turn = asyncio.create_task(handler.handle_message("question 4"))
    await asyncio.wait_for(asked.wait(), 5)
    handler.cancel()  # what /stop does
    assert isinstance(await asyncio.wait_for(turn, 5), Cancelled)
    root = await engine.store.sessions.root_frame(handler.session.id)
    assert await engine.store.summaries.latest(root.id) is None  # nothing stored


async def test_a_chat_that_only_receives_notifications_is_compacted_and_read_back(
    engine: Engine, model
):
    """Briefings into a chat nobody answers were one turn forever: never compacted, sent
    whole to the model at every notification, and read back empty after a restart (found
    by review)."""
    engine.compaction = CompactionConfig(enabled=True, threshold_tokens=100, keep_recent=1)
    handler = await engine.new_session("console")
    for i in range(3):
        model.add(text(f"told {i}", input_tokens=50 if i < 2 else 5_000))
        await handler.deliver_notifications(f'[{{"summary": "briefing {i}"}}]')
    model.add(text("SUMMARY: briefings 0 to 2 were told."), text("told 3"))

    await handler.deliver_notifications('[{"summary": "briefing 3"}]')

    summarise, answer = model.requests[-2][0], model.requests[-1][0]
    assert "briefing 0" in contents(summarise)
    assert "SUMMARY: briefings 0 to 2" in contents(answer)
    assert "briefing 0" not in contents(answer) and "briefing 3" in contents(answer)

    reopened = await engine.open_session(handler.session.id)  # a restart reads it back
    model.add(text("told 4"))
    await reopened.deliver_notifications('[{"summary": "briefing 4"}]')
    prompt = contents(model.requests[-1][0])
    assert "SUMMARY: briefings 0 to 2" in prompt and "told 3" in prompt
