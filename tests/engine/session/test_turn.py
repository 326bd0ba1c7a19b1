"""The tool-calling turn: scenarios and bad input at the model and tool boundaries."""

from __future__ import annotations

import pytest

from engine.core import Engine
from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.llm.types import (
    LlmContextOverflow,
    LlmRequestError,
    LlmResponse,
    LlmServerError,
    LlmTimeout,
)
from engine.session import events as ev
from engine.session.context.elision import LEFT_OUT
from engine.session.outcomes import Exhausted, Failed, Final
from engine.session.turn.llm_round import OUTGROWN
from tests.engine.session.helpers import EchoTool, tool_messages


async def test_a_tool_round_then_an_answer_persists_every_step(engine: Engine, model):
    model.add(
        tool_call("write_file", '{"path": "a.txt", "content": "hi"}', "c1", content="Writing."),
        text("Done: a.txt holds hi.", input_tokens=50, output_tokens=7),
    )
    handler = await engine.new_session("console")
    events: list = []

    result = await handler.handle_message("write hi to a.txt", emit=events.append)

    assert isinstance(result, Final)
    assert result.content == "Done: a.txt holds hi."
    assert (result.input_tokens, result.output_tokens) == (50, 7)
    assert [type(e).__name__ for e in events] == [
        "UserMessage",
        "TextDelta",
        "Thinking",
        "ToolStart",
        "ToolDone",
        "TextDelta",
        "Done",
    ]
    rows = await engine.store.history.load((await engine.store.sessions.root_frame(1)).id)
    assert [(r.role, r.content) for r in rows] == [
        ("user", "write hi to a.txt"),
        ("assistant", "Writing."),
        ("assistant", "Done: a.txt holds hi."),
    ]
    assert [(c.name, c.status) for c in rows[1].tool_calls] == [("write_file", "done")]
    assert rows[2].model == "primary" and rows[2].input_tokens == 50


async def test_several_tool_calls_in_one_response_run_in_order(engine: Engine, model):
    echo = EchoTool()
    engine.tools.register(echo)
    model.add(
        LlmResponse(
            content="",
            tool_calls=(
                tool_call("echo", '{"text": "a"}', "x").tool_calls[0],
                tool_call("echo", '{"text": "b", "times": 2}', "y").tool_calls[0],
            ),
        ),
        text("ok"),
    )
    handler = await engine.new_session("console")
    assert isinstance(await handler.handle_message("go"), Final)
    assert echo.calls == [{"text": "a"}, {"text": "b", "times": 2}]
    assert tool_messages(model.requests[1][0]) == ["a", "bb"]


async def test_arguments_nested_past_the_parsers_depth_are_a_tool_error_not_a_broken_session(
    engine: Engine, model
):
    """6 kB of '[[[[' raised RecursionError: the turn failed, and every later turn of the
    session failed again drawing up its transcript, as did its page (found by review)."""
    nested = "[" * 3_000 + "]" * 3_000
    model.add(tool_call("list_files", nested, "c1"), text("Sorry."))
    handler = await engine.new_session("console")
    events: list = []
    assert isinstance(await handler.handle_message("list", emit=events.append), Final)
    [error] = [e for e in events if isinstance(e, ev.ToolError)]
    assert "nest too deeply" in error.error
    model.add(text("hello again"))
    assert isinstance(await handler.handle_message("are you there?"), Final)
    assert await engine.store.views.session_detail(handler.session.id) is not None


async def test_a_tool_is_told_which_message_made_its_call(engine: Engine, model):
    """What was said before that message is what the call answers (memory's tools act for
    its speaker, not for whoever wrote since)."""
    echo = EchoTool()
    engine.tools.register(echo)
    model.add(tool_call("echo", '{"text": "a"}', "x"), text("ok"))
    handler = await engine.new_session("console")
    assert isinstance(await handler.handle_message("go"), Final)
    root = await engine.store.sessions.root_frame(handler.session.id)
    [asking] = [row for row in await engine.store.history.load(root.id) if row.tool_calls]
    assert [ctx.asked_in for ctx in echo.contexts] == [asking.id]


async def test_malformed_json_arguments_go_back_to_the_model_and_the_turn_goes_on(
    engine: Engine, model
):
    model.add(tool_call("read_file", '{"path": "a.txt"', "c1"), text("Sorry, retrying later."))
    handler = await engine.new_session("console")
    events: list = []
    result = await handler.handle_message("read it", emit=events.append)
    assert isinstance(result, Final)
    [error] = [e for e in events if isinstance(e, ev.ToolError)]
    assert "invalid JSON in tool arguments" in error.error
    [content] = tool_messages(model.requests[1][0])
    assert content.startswith("Error: invalid JSON in tool arguments")
    # The malformed text is never echoed back (servers re-parse it and would fail).
    assistant = next(m for m in model.requests[1][0] if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_arguments_that_are_not_an_object_are_a_tool_error(engine: Engine, model):
    model.add(tool_call("read_file", '["a.txt"]', "c1"), text("ok"))
    handler = await engine.new_session("console")
    await handler.handle_message("read it")
    assert tool_messages(model.requests[1][0]) == [
        "Error: tool arguments must be a JSON object, got list"
    ]


async def test_an_unknown_tool_is_a_tool_error(engine: Engine, model):
    model.add(tool_call("launch_rockets", "{}", "c1"), text("I cannot do that."))
    handler = await engine.new_session("console")
    assert isinstance(await handler.handle_message("launch"), Final)
    [content] = tool_messages(model.requests[1][0])
    assert content.startswith("Error: unknown tool 'launch_rockets'; available tools: read_file")


async def test_wrong_argument_types_are_a_tool_error(engine: Engine, model):
    model.add(tool_call("write_file", '{"path": 3, "content": "x"}', "c1"), text("ok"))
    handler = await engine.new_session("console")
    await handler.handle_message("write")
    [content] = tool_messages(model.requests[1][0])
    assert content.startswith("Error: ") and "path" in content


async def test_two_tools_with_one_name_are_never_sent(engine: Engine, model):
    handler = await engine.new_session("console")
    with pytest.raises(ValueError, match="read_file"):
        await handler.handle_message("hi", interface_tools=[EchoTool("read_file")])
    assert model.requests == []
    assert await engine.store.history.load(1) == []


async def test_tool_names_in_a_request_are_unique(engine: Engine, model):
    model.add(text("hello"))
    handler = await engine.new_session("console")
    await handler.handle_message("hi", interface_tools=[EchoTool("echo")])
    names = [t["function"]["name"] for t in model.requests[0][1]]
    assert len(names) == len(set(names)) and "echo" in names


async def test_an_empty_model_response_is_a_clear_error(engine: Engine, model):
    model.add(LlmResponse(content=None))
    handler = await engine.new_session("console")
    events: list = []
    result = await handler.handle_message("hi", emit=events.append)
    assert isinstance(result, Failed)
    assert "empty response (no text, no tool call)" in result.message
    assert isinstance(events[-1], ev.Error) and "empty response" in events[-1].message


async def test_every_model_failing_ends_the_turn_and_keeps_the_message(engine: Engine, model):
    backup = ScriptedModel([LlmTimeout("backup: timed out")], name="backup")
    engine.models = type(engine.models)([model, backup])
    model.add(LlmServerError("primary: HTTP 500", status=500))
    handler = await engine.new_session("console")
    events: list = []

    result = await handler.handle_message("are you there?", emit=events.append)

    assert isinstance(result, Failed)
    assert "primary: HTTP 500" in result.message and "backup: timed out" in result.message
    assert any(isinstance(e, ev.ModelFallback) for e in events)
    assert isinstance(events[-1], ev.Error)
    # The user was told: the message is kept but leaves the context, never resumed.
    assert await engine.store.history.load(1) == []
    detail = await engine.store.views.session_detail(handler.session.id)
    assert detail is not None
    [row] = detail["messages"]
    assert (row["kind"], row["content"], row["status"]) == ("user", "are you there?", "failed")
    assert await engine.interrupted_sessions() == []


async def test_a_retriable_failure_falls_back_to_the_next_model(engine: Engine, model):
    backup = ScriptedModel([text("from backup")], name="backup")
    engine.models = type(engine.models)([model, backup])
    model.add(LlmServerError("primary: HTTP 503", status=503))
    handler = await engine.new_session("console")
    events: list = []
    result = await handler.handle_message("hi", emit=events.append)
    assert isinstance(result, Final) and result.content == "from backup"
    [fallback] = [e for e in events if isinstance(e, ev.ModelFallback)]
    assert (fallback.failed_model, fallback.next_model) == ("primary", "backup")


async def test_a_request_error_does_not_fall_back(engine: Engine, model):
    backup = ScriptedModel([text("never")], name="backup")
    engine.models = type(engine.models)([model, backup])
    model.add(LlmRequestError("primary: HTTP 400: bad tools", status=400))
    handler = await engine.new_session("console")
    result = await handler.handle_message("hi")
    assert isinstance(result, Failed) and "HTTP 400" in result.message
    assert backup.requests == []


def _overflow() -> LlmContextOverflow:
    return LlmContextOverflow(
        "primary: HTTP 400: This model's maximum context length is 8192 tokens",
        model="primary",
        status=400,
    )


async def test_a_turn_that_outgrows_the_context_window_goes_on_with_older_output_left_out(
    engine: Engine, model
):
    """Four rounds of big tool output, then the model says the request is over its window:
    it is asked again with all but the newest three results left out, and the turn's later
    rounds are sent that way from the start (the turn failed with the provider's 400)."""
    engine.tools.register(EchoTool())
    model.add(*[tool_call("echo", f'{{"text": "{i}", "times": 2000}}', f"c{i}") for i in range(4)])
    model.add(_overflow())
    model.add(tool_call("echo", '{"text": "4", "times": 2000}', "c4"))
    model.add(text("All read."))
    handler = await engine.new_session("console")
    result = await handler.handle_message("read everything")
    assert isinstance(result, Final) and result.content == "All read."
    overflowed, retried, last = model.requests[-3:]
    assert tool_messages(overflowed[0]) == [str(i) * 2000 for i in range(4)]
    left_out = LEFT_OUT.format(chars=2000)
    assert tool_messages(retried[0]) == [left_out] + [str(i) * 2000 for i in (1, 2, 3)]
    assert tool_messages(last[0]) == [left_out] * 2 + [str(i) * 2000 for i in (2, 3, 4)]
    rows = await engine.store.history.load((await engine.store.sessions.root_frame(1)).id)
    stored = [c.result for row in rows for c in row.tool_calls]
    assert stored == [str(i) * 2000 for i in range(5)]  # what is stored is whole


async def test_a_turn_that_outgrows_the_window_with_nothing_to_leave_out_says_so(
    engine: Engine, model
):
    """No tool output to leave out, and no model's window takes it: one plain sentence,
    not the provider's 400."""
    backup = ScriptedModel([_overflow()], name="backup")
    engine.models = type(engine.models)([model, backup])
    model.add(_overflow())
    handler = await engine.new_session("console")
    result = await handler.handle_message("x" * 100)
    assert isinstance(result, Failed) and result.message == OUTGROWN
    assert len(backup.requests) == 1 and len(model.requests) == 1


async def test_a_request_over_one_models_window_goes_to_the_next(engine: Engine, model):
    """The fallback model, whose window is bigger, was never asked: the turn failed with
    "start a new conversation" (found by review on 2026-12-06)."""
    backup = ScriptedModel([text("from the bigger window")], name="backup")
    engine.models = type(engine.models)([model, backup])
    model.add(_overflow())
    handler = await engine.new_session("console")
    result = await handler.handle_message("x" * 100)
    assert isinstance(result, Final) and result.content == "from the bigger window"


async def test_after_an_overflow_a_fallbacks_refusal_still_leaves_output_out(engine: Engine, model):
    """The backup's own 400 ended the turn, where leaving output out let the first model
    answer (found by review of the change that asks the fallbacks)."""
    engine.tools.register(EchoTool())
    backup = ScriptedModel(
        [LlmRequestError("backup: HTTP 400: input too large", status=400)], name="backup"
    )
    engine.models = type(engine.models)([model, backup])
    model.add(*[tool_call("echo", f'{{"text": "{i}", "times": 2000}}', f"c{i}") for i in range(4)])
    model.add(_overflow(), text("All read."))
    handler = await engine.new_session("console")
    result = await handler.handle_message("read everything")
    assert isinstance(result, Final) and result.content == "All read."


async def test_each_level_leaves_out_more_until_the_newest_result_is_cut(engine: Engine, model):
    """Overflowing again and again: three newest whole, then one, then the newest cut to
    its head and tail; past that, the turn ends with the sentence."""
    engine.tools.register(EchoTool())
    model.add(*[tool_call("echo", f'{{"text": "{i}", "times": 9000}}', f"c{i}") for i in range(4)])
    model.add(_overflow(), _overflow(), _overflow(), _overflow())
    handler = await engine.new_session("console")
    result = await handler.handle_message("read everything")
    assert isinstance(result, Failed) and result.message == OUTGROWN
    *_, whole, three, one, cut = (tool_messages(request[0]) for request in model.requests)
    left_out = LEFT_OUT.format(chars=9000)
    assert whole == [str(i) * 9000 for i in range(4)]
    assert three == [left_out, "1" * 9000, "2" * 9000, "3" * 9000]
    assert one == [left_out, left_out, left_out, "3" * 9000]
    assert cut[:3] == one[:3] and cut[3].startswith("3" * 3000 + "\n[… 5000 characters left out")
    assert cut[3].endswith("]\n" + "3" * 1000)


async def test_the_round_limit_ends_the_turn_as_exhausted(engine: Engine, model):
    model.add(*[tool_call("list_files", "{}", f"c{i}") for i in range(6)])
    handler = await engine.new_session("console")
    events: list = []
    result = await handler.handle_message("loop", emit=events.append)
    assert result == Exhausted(6)
    assert isinstance(events[-1], ev.Error) and "6 tool rounds" in events[-1].message


async def test_a_huge_tool_output_is_truncated_with_a_note(engine: Engine, model):
    big = EchoTool("big")
    engine.tools.register(big)
    model.add(tool_call("big", '{"text": "x", "times": 10485760}', "c1"), text("ok"))
    handler = await engine.new_session("console")
    await handler.handle_message("go")
    [content] = tool_messages(model.requests[1][0])
    assert len(content) < engine.limits.max_tool_output_chars + 200
    assert "output truncated: 10485760 chars total" in content


async def test_a_path_outside_the_workspace_is_refused_with_a_clear_message(engine: Engine, model):
    model.add(
        LlmResponse(
            content="",
            tool_calls=(
                tool_call("read_file", '{"path": "../etc/passwd"}', "a").tool_calls[0],
                tool_call("read_file", '{"path": "/etc/passwd"}', "b").tool_calls[0],
                tool_call("read_file", '{"path": "secrets/token"}', "c").tool_calls[0],
            ),
        ),
        text("I may not read those."),
    )
    handler = await engine.new_session("console")
    await handler.handle_message("read system files")
    results = tool_messages(model.requests[1][0])
    assert all(r.startswith("Error: ") for r in results)
    assert "outside the workspace" in results[0] and "outside the workspace" in results[1]
    assert "secrets/" in results[2]


async def test_reasoning_content_is_kept_and_echoed_back(engine: Engine, model):
    model.add(
        LlmResponse(
            content="",
            reasoning_content="I should list the files first.",
            tool_calls=tool_call("list_files", "{}", "c1").tool_calls,
        ),
        text("Empty."),
    )
    handler = await engine.new_session("console")
    await handler.handle_message("what is here?")
    assistant = next(m for m in model.requests[1][0] if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "I should list the files first."
