"""What the model is sent: the six-part order, merging, hiding, attachments, statuses."""

from __future__ import annotations

from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.session import events as ev
from engine.session.context.transcript import INTERRUPTED
from engine.session.protocols import Decision, GateRequest, QueuedMessage, Verdict
from engine.store.rows import AssistantRecord, NewToolCall
from tests.engine.session.helpers import EchoTool, roles, tool_messages


async def test_the_request_has_the_six_parts_in_order(engine: Engine, model):
    model.add(tool_call("update_scratchpad", '{"key": "goal", "value": "ship"}', "c1"))
    model.add(text("noted"))
    handler = await engine.new_session("console")
    await handler.handle_message(
        "remember the goal",
        extra_system_static="Format replies as plain text.",
        extra_system_dynamic="User memory: likes tea.",
        tail_reminder="Keep it short.",
    )
    messages = model.requests[1][0]
    assert roles(messages) == ["system", "system", "user", "assistant", "tool", "system", "system"]
    static, pad, *_, tail, reminder = messages
    assert static["content"].startswith("You are chathub")
    assert static["content"].endswith("Format replies as plain text.")
    assert pad["content"].startswith("<scratchpad>") and 'key="goal">ship<' in pad["content"]
    assert tail["content"].startswith("User memory: likes tea.")
    assert "(Europe/Rome," in tail["content"] and "Working directory: " in tail["content"]
    assert reminder["content"] == "Keep it short."


async def test_the_static_block_is_byte_identical_across_turns(engine: Engine, model):
    model.add(text("one"), text("two"))
    handler = await engine.new_session("console")
    await handler.handle_message("first", extra_system_static="rules")
    await handler.handle_message("second", extra_system_static="rules")
    assert model.requests[0][0][0] == model.requests[1][0][0]


async def test_models_with_cache_hints_get_an_ephemeral_cache_control(engine: Engine):
    cached = ScriptedModel([text("hi")], name="claude", cache_hints=True)
    engine.models = ModelRegistry([cached])
    handler = await engine.new_session("console")
    await handler.handle_message("hello")
    [part] = cached.requests[0][0][0]["content"]
    assert part["cache_control"] == {"type": "ephemeral"}
    assert part["text"].startswith("You are chathub")


async def test_messages_sent_during_a_turn_are_injected_and_merged(engine: Engine, model):
    class Inbox:
        def __init__(self) -> None:
            self.queue = [QueuedMessage("also: add eggs"), QueuedMessage("and bread")]

        def drain_user(self) -> list[QueuedMessage]:
            drained, self.queue = self.queue, []
            return drained

    inbox = Inbox()
    handler = await engine.new_session("console")
    model.add(tool_call("list_files", "{}", "c1"), text("Adding eggs and bread."))
    events: list = []
    # The first round boundary drains before the first call: both join the user turn.
    await handler.handle_message("shopping list: milk", pending_input=inbox, emit=events.append)
    first = model.requests[0][0]
    assert [m["content"] for m in first if m["role"] == "user"] == [
        "shopping list: milk\n\nalso: add eggs\n\nand bread"
    ]
    echoes = [e.content for e in events if isinstance(e, ev.UserMessage)]
    assert echoes == ["shopping list: milk", "also: add eggs", "and bread"]
    rows = await engine.store.history.load(1)
    assert [r.content for r in rows if r.role == "user"] == [
        "shopping list: milk",
        "also: add eggs",
        "and bread",
    ]


async def test_injection_happens_at_the_next_round_boundary(engine: Engine, model):
    class LateInbox:
        def __init__(self) -> None:
            self.rounds = 0

        def drain_user(self) -> list[QueuedMessage]:
            self.rounds += 1
            return [QueuedMessage("wait, use b.txt")] if self.rounds == 2 else []

    handler = await engine.new_session("console")
    model.add(tool_call("list_files", "{}", "c1"), text("Switching to b.txt."))
    await handler.handle_message("open a.txt", pending_input=LateInbox())
    second = model.requests[1][0]
    assert roles(second)[1:-1] == ["user", "assistant", "tool", "user"]
    assert second[-2]["content"] == "wait, use b.txt"


async def test_previous_turn_tool_results_over_the_limit_are_hidden(engine: Engine, model):
    engine.tools.register(EchoTool())
    handler = await engine.new_session("console")
    model.add(tool_call("echo", '{"text": "y", "times": 500}', "c1"), text("long"))
    await handler.handle_message("make it long")
    # Within the turn the model saw the result in full.
    assert tool_messages(model.requests[1][0]) == ["y" * 500]
    model.add(text("ok"))
    await handler.handle_message("next")
    [hidden] = tool_messages(model.requests[2][0])
    assert hidden.startswith("[Tool response for `echo` hidden: response was 500 chars")
    [row] = [r for r in await engine.store.history.load(1) if r.tool_calls]
    assert row.tool_calls[0].result == "y" * 500  # the database keeps it whole


async def test_attachments_are_described_on_the_fly_never_stored_in_content(engine: Engine, model):
    model.add(text("Nice photo."))
    handler = await engine.new_session("console")
    metadata = {
        "attachments": [
            {"path": "uploads/telegram/1/cat.jpg", "mime_type": "image/jpeg", "size": 2048}
        ]
    }
    events: list = []
    await handler.handle_message("look", metadata=metadata, emit=events.append)
    [user] = [m for m in model.requests[0][0] if m["role"] == "user"]
    assert user["content"].startswith("look\n\n[SYSTEM INFO] The user attached files")
    assert "- uploads/telegram/1/cat.jpg (image/jpeg, 2048)" in user["content"]
    [row] = [r for r in await engine.store.history.load(1) if r.role == "user"]
    assert row.content == "look" and row.metadata == metadata
    assert events[0].attachments == tuple(metadata["attachments"])


async def test_a_denied_call_shows_the_saved_reason(engine: Engine, model):
    class DenyShell:
        async def check(self, request: GateRequest) -> Verdict:
            if request.call.name == "execute_cmd":
                return Verdict(Decision.DENY, "shell is off")
            return Verdict(Decision.ALLOW)

    engine.policy = DenyShell()
    model.add(tool_call("execute_cmd", '{"command": "rm -rf /"}', "c1"), text("Not allowed."))
    handler = await engine.new_session("console")
    events: list = []
    await handler.handle_message("clean up", emit=events.append)
    assert tool_messages(model.requests[1][0]) == [
        "Tool call denied by the approval rules: shell is off"
    ]
    assert any(isinstance(e, ev.ToolRejected) for e in events)
    [row] = [r for r in await engine.store.history.load(1) if r.tool_calls]
    assert row.tool_calls[0].status == "rejected"


async def test_interrupted_calls_read_as_interrupted_until_resumed(engine: Engine, model):
    handler = await engine.new_session("console")
    frame = await engine.store.sessions.root_frame(handler.session.id)
    history = engine.store.history
    # A crash left this: a user row, an assistant row with a call still `pending`.
    await history.append_message(frame.id, "user", "run it")
    row = await history.append_assistant(
        frame.id, AssistantRecord(""), [NewToolCall("c1", "list_files", "{}")]
    )
    await history.set_tool_status(row.tool_calls[0].id, "pending")
    # A fresh handler (a restart) reads the transcript from the database.
    restarted = await engine.open_session(handler.session.id)
    model.add(text("Here is the listing."))
    await restarted.handle_message("and?")
    # Re-run from intent: the call ran again before the model was asked.
    [content] = tool_messages(model.requests[0][0])
    assert content != INTERRUPTED
    [call] = [c for r in await history.load(frame.id) for c in r.tool_calls]
    assert call.status == "done"
