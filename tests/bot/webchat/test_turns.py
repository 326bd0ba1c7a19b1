"""A conversation over a real socket: streaming, stop, approvals, questions, tabs, reconnects."""

from __future__ import annotations

import pytest

from bot.http.operations import Operations
from bot.http.web import WEB_DECIDER
from engine.store import InboxError
from tests.bot.webchat.conftest import ChatServer, Client
from tests.fakes.openai_server import FakeOpenAIServer


def types(frames: list[dict]) -> list[str]:
    return [f["type"] for f in frames]


async def test_a_socket_opens_with_hello_then_turn_running(server: ChatServer):
    async with server.connect() as connection:
        client = Client(connection)
        hello, running = await client.opened()
    assert hello["type"] == "hello" and hello["protocol"] == 1
    assert hello["conversation_id"] == "c1" and hello["session_id"] > 0
    assert hello["limits"]["max_frame_bytes"] > 0
    assert running == {"type": "turn_running", "running": False}


async def test_a_streamed_turn_arrives_in_order(server: ChatServer, fake_openai: FakeOpenAIServer):
    fake_openai.reply_text("Hello there, my friend.")
    client = await server.client()
    await client.send(type="message", text="hi", ref="m1")
    frames = await client.until("done")
    kinds = types(frames)
    assert "accepted" in kinds
    accepted = frames[kinds.index("accepted")]
    assert accepted["ref"] == "m1"
    user = kinds.index("user_message")
    deltas = [i for i, kind in enumerate(kinds) if kind == "text_delta"]
    assert frames[user]["text"] == "hi" and frames[user]["id"] > 0
    assert len(deltas) > 1 and user < deltas[0] and deltas[-1] < len(kinds) - 1
    assert "".join(frames[i]["text"] for i in deltas) == "Hello there, my friend."
    assert frames[-1]["content"] == "Hello there, my friend."
    await client.close()


def write_call(call_id: str, path: str = "notes/a.txt", content: str = "hello\n") -> tuple:
    return (call_id, "write_file", {"path": path, "content": content})


async def test_stop_while_the_answer_streams(server: ChatServer, fake_openai: FakeOpenAIServer):
    fake_openai.reply_hang(partial="Thinking about it ")
    client = await server.client()
    await client.send(type="message", text="a long question")
    await client.until("text_delta")
    await client.send(type="stop", ref="s1")
    frames = await client.until("error", code="turn")
    notice = next(f for f in frames if f["type"] == "notice")
    assert notice["ref"] == "s1" and "Stopped" in notice["text"]
    # The next message is answered: the stop ended that turn only.
    fake_openai.reply_text("Here I am.")
    await client.send(type="message", text="still there?")
    assert (await client.until("done"))[-1]["content"] == "Here I am."


async def test_stop_while_a_tool_runs(server: ChatServer, fake_openai: FakeOpenAIServer):
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "sleep 30"}))
    client = await server.client()
    await client.send(type="message", text="wait a while")
    card = (await client.until("approval_required"))[-1]
    assert card["label"] == "Command" and "sleep 30" in card["content"]
    await client.send(type="approve_tool", tool_call_id=card["tool_call_id"])
    await client.until("approval_resolved")
    await client.send(type="stop")
    frames = await client.until("error", code="turn")
    ended = [f for f in frames if f["type"] == "tool_end"]
    assert ended and ended[-1]["status"] in ("cancelled", "failed")
    assert not server.hub.is_processing("web:c1")


@pytest.mark.parametrize(
    ("bypass_secs", "outcome", "asks_again"),
    [(None, "approve", True), (900, "bypass_15m", False), (0, "bypass_session", False)],
)
async def test_approve_with_and_without_a_bypass(
    server: ChatServer,
    fake_openai: FakeOpenAIServer,
    bypass_secs: int | None,
    outcome: str,
    asks_again: bool,
):
    fake_openai.reply_tool_calls(write_call("w1", "notes/a.txt"))
    fake_openai.reply_text("Wrote a.")
    client = await server.client()
    await client.send(type="message", text="write a")
    card = (await client.until("approval_required"))[-1]
    assert [c["choice"] for c in card["choices"]] == [
        "approve",
        "reject",
        "bypass_15m",
        "bypass_session",
    ]
    approve = {"bypass_secs": bypass_secs} if bypass_secs is not None else {}
    await client.send(type="approve_tool", tool_call_id=card["tool_call_id"], **approve)
    frames = await client.until("done")
    resolved = next(f for f in frames if f["type"] == "approval_resolved")
    assert resolved["outcome"] == outcome and resolved["by"] == "the web chat"
    assert next(f for f in frames if f["type"] == "tool_end")["status"] == "done"
    assert (server.hub.engine.workspace.root / "notes/a.txt").exists()

    fake_openai.reply_tool_calls(write_call("w2", "notes/b.txt"))
    fake_openai.reply_text("Wrote b.")
    await client.send(type="message", text="write b")
    frames = await client.until("tool_start")
    if asks_again:
        card = (await client.until("approval_required"))[-1]
        await client.send(type="approve_tool", tool_call_id=card["tool_call_id"])
    frames = await client.until("done")
    assert ("approval_required" in types(frames)) is False
    assert next(f for f in frames if f["type"] == "tool_end")["status"] == "done"


async def test_reject_with_a_reason_the_model_reads(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_tool_calls(write_call("w1"))
    fake_openai.reply_text("Understood, I will not.")
    client = await server.client()
    await client.send(type="message", text="write it")
    card = (await client.until("approval_required"))[-1]
    await client.send(
        type="reject_tool", tool_call_id=card["tool_call_id"], reason="<b>not</b> today"
    )
    frames = await client.until("done")
    resolved = next(f for f in frames if f["type"] == "approval_resolved")
    assert resolved["outcome"] == "reject" and resolved["note"] == "<b>not</b> today"
    assert next(f for f in frames if f["type"] == "tool_end")["status"] == "rejected"
    tool_messages = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert "<b>not</b> today" in tool_messages[-1]["content"]


async def test_a_question_answered(server: ChatServer, fake_openai: FakeOpenAIServer):
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which colour?"}))
    fake_openai.reply_text("Blue it is.")
    one = await server.client()
    two = await server.client()
    await one.send(type="message", text="paint it")
    question = (await one.until("agent_question"))[-1]
    assert question["question"] == "Which colour?"
    await two.until("agent_question")
    await one.send(type="answer_question", request_id=question["request_id"], answer="blue")
    for client in (one, two):
        frames = await client.until("done")
        answered = next(f for f in frames if f["type"] == "question_answered")
        assert answered == {
            "type": "question_answered",
            "request_id": question["request_id"],
            "answer": "blue",
        }
    tool_messages = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert "blue" in tool_messages[-1]["content"]
    # Answering again: the question is closed.
    await one.send(type="answer_question", request_id=question["request_id"], answer="red", ref="x")
    error = await one.until("error")
    assert error[-1]["code"] == "expired" and error[-1]["ref"] == "x"


async def test_a_question_answered_in_the_inbox_closes_the_pages_box(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """The owner answers on the inbox page (or the API): the turn went on, but the open
    tab kept the answer box, and answering it said the question was closed (found by
    review)."""
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which colour?"}))
    fake_openai.reply_text("Blue it is.")
    tab = await server.client()
    await tab.send(type="message", text="paint it")
    question = (await tab.until("agent_question"))[-1]
    await Operations(server.hub.engine, server.hub).answer(
        question["request_id"], "blue", by=WEB_DECIDER
    )
    frames = await tab.until("done")
    answered = [f for f in frames if f["type"] == "question_answered"]
    assert answered == [
        {"type": "question_answered", "request_id": question["request_id"], "answer": "blue"}
    ]


async def test_two_sockets_of_a_conversation_see_everything(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_tool_calls(write_call("w1"))
    fake_openai.reply_text("Done writing.")
    one = await server.client()
    two = await server.client()
    other = await server.client("c2")
    await one.send(type="message", text="from tab one")
    card = (await two.until("approval_required"))[-1]
    await two.send(type="approve_tool", tool_call_id=card["tool_call_id"])
    seen_one = await one.until("done")
    seen_two = two.seen[2:] + await two.until("done")
    shown = ["user_message", "tool_start", "approval_required", "approval_resolved", "tool_end"]
    for frames in (seen_one, seen_two):
        kinds = [k for k in types(frames) if k in (*shown, "done")]
        assert kinds == [*shown, "done"]
        assert next(f for f in frames if f["type"] == "user_message")["text"] == "from tab one"
    await other.send(type="ping", ref="p")
    assert await other.recv() == {"type": "pong", "ref": "p"}  # nothing of c1 reached c2


async def test_a_reconnect_mid_turn_gets_running_then_the_answer(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """The socket closes while a card waits: the turn waits on; a new socket sees
    ``turn_running: true``, the card again, approves it and gets ``done``."""
    fake_openai.reply_tool_calls(write_call("w1"))
    fake_openai.reply_text("Written after the reload.")
    first = await server.client()
    await first.send(type="message", text="write it")
    card = (await first.until("approval_required"))[-1]
    await first.close()
    assert server.hub.is_processing("web:c1")

    async with server.connect() as connection:
        second = Client(connection)
        _hello, running = await second.opened()
        assert running == {"type": "turn_running", "running": True}
        again = await second.recv()
        assert again["type"] == "approval_required"
        assert again["tool_call_id"] == card["tool_call_id"]
        # The same card: a file write's path and content, not the call's JSON (found by
        # review on 2026-12-06).
        assert again == card
        await second.send(type="approve_tool", tool_call_id=again["tool_call_id"])
        frames = await second.until("done")
    assert frames[-1]["content"] == "Written after the reload."
    assert "tool_end" in types(frames)


async def test_a_tab_opened_while_a_message_waits_for_its_turn_is_shown_it(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """Taken ("accepted") behind a card: a reload showed it nowhere until its turn came,
    and a message whose "accepted" the dropped socket never got looked lost (found by
    review). Its ``user_message`` comes when its turn takes it."""
    fake_openai.reply_tool_calls(write_call("w1"))
    fake_openai.reply_text("Written.")
    fake_openai.reply_text("And the next one.")
    first = await server.client()
    await first.send(type="message", text="write it")
    card = (await first.until("approval_required"))[-1]
    await first.send(type="message", text="then this", ref="m2")
    accepted = (await first.until("accepted"))[-1]
    await first.close()

    async with server.connect() as connection:
        second = Client(connection)
        await second.opened()
        shown = await second.until("queued_message")
        assert shown[-1] == {
            "type": "queued_message",
            "queued_id": accepted["queued_id"],
            "text": "then this",
            "attachments": [],
        }
        await second.send(type="approve_tool", tool_call_id=card["tool_call_id"])
        frames = await second.until("user_message")
        assert frames[-1]["text"] == "then this"
        await second.until("done")


async def test_the_open_tabs_are_shown_a_message_waiting_for_its_turn(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """Only a tab opened afterwards was: the tab already open, and the sender's own, showed
    nothing until its turn came (found by review on 2026-12-07)."""
    fake_openai.reply_tool_calls(write_call("w1"))
    fake_openai.reply_text("Wrote it.")
    sender = await server.client()
    other = await server.client()
    await sender.send(type="message", text="write a", ref="m1")
    await sender.until("approval_required")
    await other.until("approval_required")
    await sender.send(type="message", text="and also b", ref="m2")
    seen_by_sender = await sender.until("accepted", ref="m2")
    await other.send(type="ping", ref="p")
    seen_by_other = await other.until("pong")
    for frames in (seen_by_sender, seen_by_other):
        shown = [(f["queued_id"], f["text"]) for f in frames if f["type"] == "queued_message"]
        assert shown == [(seen_by_sender[-1]["queued_id"], "and also b")]


async def test_text_beside_tool_calls_is_a_thinking_delta(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_tool_calls(
        ("w1", "write_file", {"path": "t.txt", "content": "t"}), content="Let me write it."
    )
    fake_openai.reply_text("Written.")
    client = await server.client()
    await client.send(type="message", text="write t.txt")
    frames = await client.until("approval_required")
    thinking = [f for f in frames if f["type"] == "thinking_delta"]
    assert thinking and "Let me write it." in thinking[0]["text"]
    await client.send(type="approve_tool", tool_call_id=frames[-1]["tool_call_id"])
    assert (await client.until("done"))[-1]["content"] == "Written."


async def test_a_tab_served_by_another_process_sees_a_card_and_a_question_close(
    make_server, fake_openai: FakeOpenAIServer
):
    """Two web chat front ends over one hub's events, as two processes of a fleet whose
    hubs relay them: a decision and an answer given in one tab reached only the tabs of
    its own process, and the other tab's card stayed open (found by review)."""
    one = await make_server()
    two = await make_server()
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "a.txt", "content": "x\n"}))
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which?"}))
    fake_openai.reply_text("Wrote it.")
    a = await one.client("c9")
    b = await two.client("c9")
    await a.send(type="message", text="write it")
    card = (await a.until("approval_required"))[-1]
    await b.until("approval_required")
    await a.send(type="approve_tool", tool_call_id=card["tool_call_id"])
    asked = await a.until("agent_question")
    await a.send(type="answer_question", request_id=asked[-1]["request_id"], answer="that")
    seen = {"a": asked + await a.until("done"), "b": await b.until("done")}
    for tab, frames in seen.items():
        kinds = [f["type"] for f in frames]
        assert kinds.count("approval_resolved") == 1, (tab, kinds)
        assert kinds.count("question_answered") == 1, (tab, kinds)


async def test_the_same_answer_sent_twice_is_no_error(
    server: ChatServer,
    fake_openai: FakeOpenAIServer,
):
    """A double click on the question's Answer: the second frame, the same words, was
    shown as "That question is no longer open." (found by review on 2026-12-07)."""
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which colour?"}))
    fake_openai.reply_text("Blue it is.")
    tab = await server.client()
    await tab.send(type="message", text="paint it")
    question = (await tab.until("agent_question"))[-1]
    request_id = question["request_id"]
    # A double click: two frames, the second read once the first was recorded.
    await tab.send(type="answer_question", request_id=request_id, answer="blue", ref="a1")
    await tab.send(type="answer_question", request_id=request_id, answer="blue", ref="a2")
    await tab.send(type="ping", ref="after")
    frames = await tab.until("pong", ref="after")
    errors = [f for f in frames if f["type"] == "error"]
    # The hub itself tells a repeat from a closed question (what the page could be told).
    try:
        await server.hub.answer(request_id, "blue", source="web:c1")
    except InboxError as exc:
        assert exc.code == "repeated", exc.code
    assert errors == [], f"a repeated answer was shown as an error: {errors}"
    await tab.until("done")
    await tab.close()
