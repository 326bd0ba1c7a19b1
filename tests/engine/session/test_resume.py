"""resume_turn: continue what a crash interrupted, cascading sub-agent results upward."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.core import Engine
from engine.llm.scripted import text, tool_call
from engine.llm.types import LlmError, LlmServerError
from engine.session import events as ev
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final
from engine.session.turn.resume import ENDED_CHILD_NOTE, REAPED_NOTE
from engine.store.rows import AssistantRecord, FrameRow, NewToolCall, ToolCallRow
from tests.engine.session.helpers import BlockingTool, EchoTool, roles, tool_messages


async def spawn_child(engine: Engine, session_id: int, root: FrameRow, call_id: str, prompt: str):
    """The rows a sub-agent call leaves: the parent's running call and the child's frame."""
    message = await engine.store.history.append_assistant(
        root.id,
        AssistantRecord(content=""),
        [NewToolCall(call_id, "execute_task", f'{{"prompt": "{prompt}"}}')],
    )
    [call] = message.tool_calls
    child = await engine.store.sessions.push_frame(
        session_id, agent_id="main", depth=1, parent_tool_call_id=call.id, agent_prompt=prompt
    )
    await engine.store.history.append_message(child.id, "agent", prompt)
    return call, child


async def test_nothing_to_resume_returns_none(engine: Engine, model):
    handler = await engine.new_session("console")
    assert await handler.resume_turn() is None
    model.add(text("hello"))
    await handler.handle_message("hi")
    assert await handler.resume_turn() is None
    assert await engine.interrupted_sessions() == []
    assert len(model.requests) == 1


async def test_a_message_whose_model_call_died_is_answered(engine: Engine, model):
    handler = await engine.new_session("console")
    root = await engine.store.sessions.root_frame(handler.session.id)
    await engine.store.history.append_message(root.id, "user", "still there?")
    assert await engine.interrupted_sessions() == [handler.session.id]

    model.add(text("Yes."))
    events: list = []
    result = await engine.resume(handler.session.id, emit=events.append)

    assert isinstance(result, Final) and result.content == "Yes."
    assert roles(model.requests[0][0])[1:-1] == ["user"]
    assert isinstance(events[-1], ev.Done)
    assert await engine.interrupted_sessions() == []


async def test_a_finished_child_is_propagated_without_calling_the_model_again(
    engine: Engine, model
):
    handler = await engine.new_session("console")
    session_id = handler.session.id
    root = await engine.store.sessions.root_frame(session_id)
    await engine.store.history.append_message(root.id, "user", "research X")
    call, child = await spawn_child(engine, session_id, root, "c1", "find X")
    await engine.store.history.append_assistant(child.id, AssistantRecord(content="X is 42"))

    model.add(text("X is 42, says the researcher."))
    result = await handler.resume_turn()

    assert isinstance(result, Final) and result.content == "X is 42, says the researcher."
    assert len(model.requests) == 1  # the root only: the child's answer was already there
    assert tool_messages(model.requests[0][0]) == ["X is 42"]
    assert [f.id for f in await engine.store.sessions.active_frames(session_id)] == [root.id]
    parent_call = await engine.store.history.get_tool_call(call.id)
    assert parent_call is not None and parent_call.status == "done"


async def test_an_interrupted_child_finishes_then_its_parent(engine: Engine, model):
    handler = await engine.new_session("console")
    session_id = handler.session.id
    root = await engine.store.sessions.root_frame(session_id)
    await engine.store.history.append_message(root.id, "user", "research X")
    await spawn_child(engine, session_id, root, "c1", "find X")
    assert await engine.interrupted_sessions() == [session_id]

    model.add(text("X is 42"), text("Done: 42."))
    events: list = []
    result = await handler.resume_turn(emit=events.append)

    assert isinstance(result, Final) and result.content == "Done: 42."
    child_request, root_request = (request[0] for request in model.requests)
    assert [m["content"] for m in child_request if m["role"] == "user"] == ["find X"]
    assert tool_messages(root_request) == ["X is 42"]
    assert await engine.interrupted_sessions() == []


async def child_cut_short(
    engine: Engine, handler: Any, *, prompt_stored: bool
) -> tuple[int, ToolCallRow]:
    """A turn a crash left inside its sub-agent (``find X``): the session and the spawning
    call; ``prompt_stored``: the child's frame got its prompt row before the crash."""
    session_id = handler.session.id
    root = await engine.store.sessions.root_frame(session_id)
    await engine.store.history.append_message(root.id, "user", "research X")
    message = await engine.store.history.append_assistant(
        root.id,
        AssistantRecord(content=""),
        [NewToolCall("c1", "execute_task", '{"mode": "sync", "prompt": "find X"}')],
    )
    [call] = message.tool_calls
    child = await engine.store.sessions.push_frame(
        session_id,
        agent_id="generalist",
        depth=1,
        parent_tool_call_id=call.id,
        agent_prompt="find X",
    )
    if prompt_stored:
        await engine.store.history.append_message(child.id, "agent", "find X")
    return session_id, call


async def test_a_resumed_child_whose_models_all_fail_is_its_parents_failed_call(
    engine: Engine, model
):
    """It ended the turn at the child's level: the spawning call stayed running, the child
    frame active, and the next start resumed the failed child again (found by review)."""
    handler = await engine.new_session("console")
    session_id, call = await child_cut_short(engine, handler, prompt_stored=True)
    model.add(LlmServerError("primary: HTTP 503: down", model="primary", status=503))
    model.add(text("The research could not be done."))

    result = await handler.resume_turn()

    assert isinstance(result, Final) and result.content == "The research could not be done."
    spawning = await engine.store.history.get_tool_call(call.id)
    assert spawning is not None and spawning.status == "failed"
    assert [f.depth for f in await engine.store.sessions.active_frames(session_id)] == [0]
    assert await engine.interrupted_sessions() == []


async def test_a_child_frame_opened_before_a_crash_without_its_prompt_runs(engine: Engine, model):
    """Killed between the child's frame and its prompt (two commits): the resume found
    nothing to do at every start, the spawning call stayed running (found by review)."""
    handler = await engine.new_session("console")
    _session_id, call = await child_cut_short(engine, handler, prompt_stored=False)
    model.add(text("X is 42"), text("Done: 42."))

    result = await handler.resume_turn()

    assert isinstance(result, Final) and result.content == "Done: 42."
    spawning = await engine.store.history.get_tool_call(call.id)
    assert spawning is not None and (spawning.status, spawning.result) == ("done", "X is 42")
    assert await engine.interrupted_sessions() == []


async def test_an_interrupted_parallel_batch_is_reaped_before_the_cascade(engine: Engine, model):
    handler = await engine.new_session("console")
    session_id = handler.session.id
    root = await engine.store.sessions.root_frame(session_id)
    await engine.store.history.append_message(root.id, "user", "two researches")
    message = await engine.store.history.append_assistant(
        root.id,
        AssistantRecord(content=""),
        [NewToolCall("a", "execute_task", "{}"), NewToolCall("b", "execute_task", "{}")],
    )
    for call in message.tool_calls:
        child = await engine.store.sessions.push_frame(
            session_id, agent_id="main", depth=1, parent_tool_call_id=call.id, agent_prompt="p"
        )
        await engine.store.history.append_message(child.id, "agent", "p")

    model.add(text("Both were interrupted; shall I retry?"))
    result = await handler.resume_turn()

    assert isinstance(result, Final)
    assert len(model.requests) == 1
    assert tool_messages(model.requests[0][0]) == [f"Error: {REAPED_NOTE}"] * 2
    assert [f.depth for f in await engine.store.sessions.active_frames(session_id)] == [0]


async def test_children_that_ended_before_their_results_were_stored_are_not_run_again(
    engine: Engine, model
):
    """Killed between a child frame's end and its spawning call's result (two commits; a
    batch's results wait for its last child): the resume ran the sub-agents again from
    scratch, their tools twice (found by review). One answered, one left no answer."""
    handler = await engine.new_session("cron", is_interactive=False)
    session_id = handler.session.id
    root = await engine.store.sessions.root_frame(session_id)
    await engine.store.history.append_message(root.id, "user", "research X")
    arguments = '{"agent_id": "researcher", "prompt": "find X"}'
    message = await engine.store.history.append_assistant(
        root.id,
        AssistantRecord(content=""),
        [NewToolCall(c, "execute_subtask", arguments) for c in ("a", "b")],
    )
    for call, answer in zip(message.tool_calls, ("X is 42", None), strict=True):
        child = await engine.store.sessions.push_frame(
            session_id,
            agent_id="researcher",
            depth=1,
            parent_tool_call_id=call.id,
            agent_prompt="find X",
        )
        await engine.store.history.append_message(child.id, "agent", "find X")
        if answer is not None:
            await engine.store.history.append_assistant(child.id, AssistantRecord(content=answer))
        await engine.store.sessions.terminate_frame(child.id)

    model.add(text("X is 42."))
    result = await handler.resume_turn()

    assert isinstance(result, Final) and result.content == "X is 42."
    assert len(model.requests) == 1  # the root only: no researcher was asked again
    assert tool_messages(model.requests[0][0]) == ["X is 42", f"Error: {ENDED_CHILD_NOTE}"]
    assert [f.depth for f in await engine.store.sessions.active_frames(session_id)] == [0]
    assert await engine.interrupted_sessions() == []


async def test_stop_during_a_resume_cancels_it(engine: Engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    handler = await engine.new_session("console")
    root = await engine.store.sessions.root_frame(handler.session.id)
    await engine.store.history.append_message(root.id, "user", "wait")
    message = await engine.store.history.append_assistant(
        root.id, AssistantRecord(content=""), [NewToolCall("w", "wait_here", "{}")]
    )

    resumed = asyncio.create_task(handler.resume_turn())
    await asyncio.wait_for(blocker.started.wait(), 5)
    handler.cancel()

    assert isinstance(await asyncio.wait_for(resumed, 5), Cancelled)
    assert blocker.cancelled and model.requests == []
    call = await engine.store.history.get_tool_call(message.tool_calls[0].id)
    assert call is not None and call.status == "cancelled"
    assert await engine.interrupted_sessions() == []  # a /stop is not resumed at start


async def test_a_stop_during_a_resume_closes_the_rounds_later_calls_too(engine: Engine, model):
    """They stayed open: the next message ran the call the person had just stopped
    (found by review; the live loop closed them already)."""
    blocker, echo = BlockingTool(), EchoTool()
    engine.tools.register(blocker)
    engine.tools.register(echo)
    handler = await engine.new_session("console")
    root = await engine.store.sessions.root_frame(handler.session.id)
    await engine.store.history.append_message(root.id, "user", "do two things")
    message = await engine.store.history.append_assistant(
        root.id,
        AssistantRecord(content=""),
        [NewToolCall("w", "wait_here", "{}"), NewToolCall("e", "echo", '{"text": "boom"}')],
    )
    resumed = asyncio.create_task(handler.resume_turn())
    await asyncio.wait_for(blocker.started.wait(), 5)
    handler.cancel()
    assert isinstance(await asyncio.wait_for(resumed, 5), Cancelled)
    later = await engine.store.history.get_tool_call(message.tool_calls[1].id)
    assert later is not None and later.status == "cancelled"

    model.add(text("ok"))
    await handler.handle_message("hello again")
    assert echo.calls == []


async def test_a_stopped_or_failed_turn_is_not_resumed_at_start(engine: Engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    handler = await engine.new_session("console")
    turn = asyncio.create_task(handler.handle_message("wait"))
    await asyncio.wait_for(blocker.started.wait(), 5)
    handler.cancel()
    await turn
    ephemeral = await engine.new_session("cron", is_ephemeral=True, is_interactive=False)
    root = await engine.store.sessions.root_frame(ephemeral.session.id)
    await engine.store.history.append_message(root.id, "user", "job prompt")

    assert await engine.interrupted_sessions() == []


async def _interrupted_call(engine: Engine, name: str, arguments: str, *, launched: bool):
    """A user message and a call to ``name`` a crash left ``running`` (launched or not)."""
    handler = await engine.new_session("console")
    root = await engine.store.sessions.root_frame(handler.session.id)
    await engine.store.history.append_message(root.id, "user", "do it")
    message = await engine.store.history.append_assistant(
        root.id, AssistantRecord(content=""), [NewToolCall("c1", name, arguments)]
    )
    [call] = message.tool_calls
    if launched:
        await engine.store.history.mark_launched(call.id)
    return handler, call


async def test_a_command_that_had_started_is_reported_interrupted_never_rerun(
    engine: Engine, model
):
    workspace = engine.workspace.root
    command = '{"command": "echo run >> runs.log"}'
    handler, call = await _interrupted_call(engine, "execute_cmd", command, launched=True)

    model.add(text("It may not have run; let me check first."))
    events: list = []
    result = await handler.resume_turn(emit=events.append)

    assert isinstance(result, Final)
    assert not (workspace / "runs.log").exists()  # not run a second time
    assert tool_messages(model.requests[0][0]) == [
        "Error: the service restarted while this command was running; it may or may not "
        "have completed. Check before retrying."
    ]
    stored = await engine.store.history.get_tool_call(call.id)
    assert stored is not None and stored.status == "failed"
    assert [type(e) for e in events[:2]] == [ev.ToolStart, ev.ToolError]


async def test_a_command_that_never_started_still_runs_once(engine: Engine, model):
    workspace = engine.workspace.root
    command = '{"command": "echo run >> runs.log"}'
    handler, call = await _interrupted_call(engine, "execute_cmd", command, launched=False)

    model.add(text("Done."))
    assert isinstance(await handler.resume_turn(), Final)

    assert (workspace / "runs.log").read_text() == "run\n"
    stored = await engine.store.history.get_tool_call(call.id)
    assert stored is not None and stored.status == "done" and stored.launched_at is not None


async def test_a_read_only_call_is_never_marked_launched(engine: Engine, model):
    (engine.workspace.root / "notes.txt").write_text("hello")
    model.add(tool_call("read_file", '{"path": "notes.txt"}'), text("It says hello."))
    handler = await engine.new_session("console")
    await handler.handle_message("read notes.txt")
    assert await engine.store.history.session_open_tool_calls(handler.session.id) == []
    root = await engine.store.sessions.root_frame(handler.session.id)
    [read] = [c for m in await engine.store.history.load(root.id) for c in m.tool_calls]
    assert read.status == "done" and read.launched_at is None


async def test_another_side_effecting_tool_is_reported_as_an_interrupted_tool_call(
    engine: Engine, model
):
    (engine.workspace.root / "a.txt").write_text("old")
    arguments = '{"path": "a.txt", "old": "old", "new": "new"}'
    handler, _ = await _interrupted_call(engine, "edit_file", arguments, launched=True)

    model.add(text("Checking."))
    assert isinstance(await handler.resume_turn(), Final)

    assert (engine.workspace.root / "a.txt").read_text() == "old"
    [message] = tool_messages(model.requests[0][0])
    assert message.startswith("Error: the service restarted while this tool call was running")


async def test_a_turn_that_failed_after_a_tool_round_is_ended_not_resumed(engine: Engine, model):
    handler = await engine.new_session("console")
    model.add(tool_call("list_files", "{}", "c1"), LlmError("the model went away"))
    assert isinstance(await handler.handle_message("list them"), Failed)

    # The user was told it failed; a restart must not run it (and tell them) again.
    assert await engine.interrupted_sessions() == []
    model.add(text("Here they are."))
    assert isinstance(await handler.handle_message("try again"), Final)
    assert roles(model.requests[-1][0])[1:-1] == ["user", "assistant", "tool", "user"]


async def test_a_turn_that_ran_out_of_rounds_is_ended_not_resumed(engine: Engine, model, limits):
    handler = await engine.new_session("console")
    model.add(*[tool_call("list_files", "{}", f"c{i}") for i in range(limits.max_tool_rounds)])
    assert isinstance(await handler.handle_message("loop"), Exhausted)

    assert await engine.interrupted_sessions() == []
    model.add(text("Continuing."))
    assert isinstance(await handler.handle_message("go on"), Final)


async def test_a_tool_round_after_an_ended_turn_is_resumed_again(engine: Engine, model):
    handler = await engine.new_session("console")
    model.add(tool_call("list_files", "{}", "c1"), LlmError("the model went away"))
    assert isinstance(await handler.handle_message("list them"), Failed)
    root = await engine.store.sessions.root_frame(handler.session.id)
    # A later turn that a crash cuts after its tool round is mid-turn again.
    await engine.store.history.append_message(root.id, "user", "once more")
    await engine.store.history.append_assistant(
        root.id, AssistantRecord(content=""), [NewToolCall("c2", "list_files", "{}", "done", "")]
    )
    assert await engine.interrupted_sessions() == [handler.session.id]


async def test_a_notification_after_a_crash_leaves_the_cut_call_to_the_resume(
    engine: Engine, model
):
    """A notification is a turn of its own, but not while the turn before left a call
    open: it closed that turn's block and the resume never saw the call, left running
    for good (found by review)."""
    handler = await engine.new_session("console")
    root = await engine.store.sessions.root_frame(handler.session.id)
    await engine.store.history.append_message(root.id, "user", "list the workspace")
    message = await engine.store.history.append_assistant(
        root.id, AssistantRecord(content=""), [NewToolCall("c1", "list_files", "{}")]
    )
    [call] = message.tool_calls

    model.add(text("done"))
    await handler.deliver_notifications('[{"summary": "briefing"}]')

    stored = await engine.store.history.get_tool_call(call.id)
    assert stored is not None and stored.status == "done"
    assert await engine.interrupted_sessions() == []


async def test_a_notification_after_an_interrupted_sub_agent_still_brings_its_result(
    engine: Engine, model
):
    handler = await engine.new_session("console")
    root = await engine.store.sessions.root_frame(handler.session.id)
    await engine.store.history.append_message(root.id, "user", "research X")
    call, _child = await spawn_child(engine, handler.session.id, root, "c1", "find X")

    model.add(text("X is 42"), text("Done: 42, and noted the briefing."))
    result = await handler.deliver_notifications('[{"summary": "briefing"}]')

    assert isinstance(result, Final)
    parent_call = await engine.store.history.get_tool_call(call.id)
    assert parent_call is not None and parent_call.status == "done"
    assert "X is 42" in tool_messages(model.requests[-1][0])
