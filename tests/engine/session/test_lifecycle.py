"""/stop, orphans, serialisation, bus publication, and the cost of a step."""

from __future__ import annotations

import asyncio

from engine.bus.chat import AssistantResponse, UserMessage
from engine.core import Engine
from engine.llm.scripted import text, tool_call
from engine.llm.types import LlmResponse, ToolCallRequest
from engine.session import events as ev
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final
from engine.store.history import History
from tests.engine.session.helpers import BlockingTool


async def test_stop_cancels_a_running_tool_at_once_and_skips_the_rest(engine: Engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(
        LlmResponse(
            content="",
            tool_calls=(
                ToolCallRequest("a", "wait_here", "{}"),
                ToolCallRequest("b", "list_files", "{}"),
            ),
        )
    )
    handler = await engine.new_session("console")
    events: list = []
    turn = asyncio.create_task(handler.handle_message("wait", emit=events.append))
    await blocker.started.wait()
    handler.cancel()
    result = await turn

    assert isinstance(result, Cancelled) and blocker.cancelled
    assert isinstance(events[-1], ev.Error) and events[-1].message == "Interrupted by user."
    [row] = [r for r in await engine.store.history.load(1) if r.tool_calls]
    assert [c.status for c in row.tool_calls] == ["cancelled", "cancelled"]
    # Terminal: the next turn never re-runs them.
    model.add(text("Stopped."))
    await handler.handle_message("ok")
    assert blocker.runs == 1


async def test_stop_cancels_a_hanging_model_call(engine: Engine, model):
    called = asyncio.Event()

    class Hanging:
        name = "hanging"
        cache_hints = False

        async def complete(self, messages, tools, *, on_delta=None):
            called.set()
            await asyncio.Event().wait()  # never answers

    engine.models = type(engine.models)([Hanging()])
    handler = await engine.new_session("console")
    turn = asyncio.create_task(handler.handle_message("hello?"))
    await called.wait()
    handler.cancel()
    assert isinstance(await asyncio.wait_for(turn, 5), Cancelled)


async def test_a_stopped_turns_message_is_an_orphan_and_leaves_the_context(engine: Engine, model):
    model.add(LlmResponse(content=None))  # fails the first turn: the user is told
    handler = await engine.new_session("console")
    assert isinstance(await handler.handle_message("first try"), Failed)
    model.add(text("answer"))
    assert isinstance(await handler.handle_message("second try"), Final)
    users = [m["content"] for m in model.requests[-1][0] if m["role"] == "user"]
    assert users == ["second try"]
    rows = await engine.store.history.load(1)
    assert [r.content for r in rows] == ["second try", "answer"]  # failed rows excluded


async def test_turns_of_one_session_never_overlap(engine: Engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "a"), text("first done"), text("second done"))
    handler = await engine.new_session("console")
    first = asyncio.create_task(handler.handle_message("one"))
    await blocker.started.wait()
    second = asyncio.create_task(handler.handle_message("two"))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not second.done() and len(model.requests) == 1
    blocker.release.set()
    assert (await first).content == "first done"
    assert (await second).content == "second done"


async def test_a_final_turn_publishes_user_then_assistant_with_tool_calls(engine: Engine, model):
    subscription = engine.bus.subscribe()
    model.add(tool_call("list_files", "{}", "c1"), text("Nothing here."))
    handler = await engine.new_session("console")
    await handler.handle_message("list")
    user = await subscription.recv()
    assistant = await subscription.recv()
    assert isinstance(user, UserMessage) and user.event.content == "list"
    assert isinstance(assistant, AssistantResponse)
    assert assistant.event.content == "Nothing here."
    assert [(t.name, t.status) for t in assistant.event.tool_calls] == [("list_files", "done")]
    assert assistant.event.session_id == handler.session.id
    assert assistant.event.is_interactive and not assistant.event.is_ephemeral


async def test_cancelled_failed_and_exhausted_turns_publish_nothing(engine: Engine, model):
    subscription = engine.bus.subscribe(capacity=16)
    handler = await engine.new_session("console")
    model.add(LlmResponse(content=None))
    assert isinstance(await handler.handle_message("a"), Failed)
    model.add(*[tool_call("list_files", "{}", f"c{i}") for i in range(6)])
    assert isinstance(await handler.handle_message("b"), Exhausted)
    handler.cancel()  # no turn in flight: nothing happens
    assert subscription.pending == 0


async def test_a_step_never_rereads_the_history(engine: Engine, model, monkeypatch):
    loads: list[int] = []
    original = History.load

    async def counting_load(self, stack_id, **kwargs):
        loads.append(stack_id)
        return await original(self, stack_id, **kwargs)

    monkeypatch.setattr(History, "load", counting_load)
    handler = await engine.new_session("console")
    for i in range(5):
        model.add(tool_call("list_files", "{}", f"c{i}"), text(f"answer {i}"))
        await handler.handle_message(f"question {i}")
    frame = await engine.store.sessions.root_frame(handler.session.id)
    assert loads == [frame.id]  # once, when the handler first needed it
    users = [m["content"] for m in model.requests[-1][0] if m["role"] == "user"]
    assert users == [f"question {i}" for i in range(5)]
