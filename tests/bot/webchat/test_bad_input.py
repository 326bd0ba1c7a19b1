"""Bad input over a real socket: each refused in one sentence, nothing else changes."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from bot.http.web import COOKIE
from bot.webchat.limits import MAX_FRAME_BYTES, SocketLimits
from bot.webchat.translate import resolved_frame
from tests.bot.webchat.conftest import ChatServer, Client, StepClock
from tests.fakes.openai_server import FakeOpenAIServer


async def refused(client: Client, code: str) -> dict:
    frame = await client.recv()
    assert frame["type"] == "error" and frame["code"] == code, frame
    assert "Traceback" not in frame["message"] and frame["message"].endswith(".")
    return frame


async def test_non_json_text_is_refused(server: ChatServer):
    client = await server.client()
    for junk in ("not json", "[1, 2]", '"text"', "{", '{"type": "ping", "x": NaN}', "1e400"):
        await client.connection.send(junk)
        await refused(client, "bad_json")
    await client.send(type="ping")
    assert (await client.recv())["type"] == "pong"  # still open


async def test_a_binary_frame_is_refused(server: ChatServer):
    client = await server.client()
    await client.connection.send(b'{"type": "ping"}')
    frame = await refused(client, "binary")
    assert "binary" in frame["message"]


async def test_an_unknown_type_is_refused(server: ChatServer):
    client = await server.client()
    await client.send(type="rm_rf", ref="r1")
    frame = await refused(client, "unknown_type")
    assert frame["ref"] == "r1"
    await client.connection.send(json.dumps({"text": "no type"}))
    await refused(client, "invalid")


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        ({"type": "message"}, "needs the field 'text'"),
        ({"type": "approve_tool"}, "needs the field 'tool_call_id'"),
        ({"type": "answer_question", "request_id": 3}, "needs the field 'answer'"),
        ({"type": "approve_tool", "tool_call_id": "7"}, "tool_call_id"),
        ({"type": "approve_tool", "tool_call_id": 2**70}, "tool_call_id"),
        ({"type": "approve_tool", "tool_call_id": 7, "bypass_secs": 5}, "bypass_secs"),
        # "No bypass" written as false or 0.0 is not 0 (a bypass for the whole session).
        ({"type": "approve_tool", "tool_call_id": 7, "bypass_secs": False}, "bypass_secs"),
        ({"type": "approve_tool", "tool_call_id": 7, "bypass_secs": 0.0}, "bypass_secs"),
        ({"type": "approve_tool", "tool_call_id": 7, "bypass_secs": 900.0}, "bypass_secs"),
        ({"type": "message", "text": "hi", "extra": 1}, "has no field 'extra'"),
        ({"type": "ping", "v": 2}, "version 1"),
    ],
)
async def test_missing_and_malformed_fields_are_refused(server: ChatServer, frame: dict, says: str):
    client = await server.client()
    await client.connection.send(json.dumps(frame))
    error = await client.recv()
    assert error["type"] == "error" and says in error["message"], error


async def test_a_frame_over_the_size_limit_closes_with_1009(server: ChatServer):
    client = await server.client()
    await client.send(type="message", text="x" * (MAX_FRAME_BYTES + 1))
    with pytest.raises(ConnectionClosed) as closed:
        await client.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    assert not server.hub.is_processing("web:c1")


async def test_a_flood_is_rate_limited_and_nothing_acknowledged_is_lost(
    make_server, rate_clock: StepClock, fake_openai: FakeOpenAIServer
):
    server = await make_server(SocketLimits(frames_per_second=1.0, burst=5, max_refused=50))
    client = await server.client()
    for i in range(12):
        await client.send(type="ping", ref=f"p{i}")
    answers = [await client.recv() for _ in range(12)]
    assert [a["type"] for a in answers] == ["pong"] * 5 + ["error"] * 7
    assert {a["code"] for a in answers[5:]} == {"rate_limited"}
    assert "slow down" in answers[5]["message"]
    rate_clock.now += 1.0  # a second later one more frame is taken
    fake_openai.reply_text("Got it.")
    await client.send(type="message", text="after the flood", ref="m")
    frames = await client.until("done")
    assert next(f for f in frames if f["type"] == "accepted")["ref"] == "m"


async def test_a_flood_that_goes_on_is_closed(make_server):
    server = await make_server(SocketLimits(frames_per_second=1.0, burst=2, max_refused=5))
    client = await server.client()
    with pytest.raises(ConnectionClosed) as closed:
        for _ in range(50):
            await client.send(type="ping")
        while True:
            await client.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_another_conversations_ids_are_refused(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "a.txt", "content": "a"}))
    fake_openai.reply_text("ok")
    mine = await server.client("c1")
    stranger = await server.client("c2")
    await mine.send(type="message", text="write")
    card = (await mine.until("approval_required"))[-1]
    call = card["tool_call_id"]
    await stranger.send(type="approve_tool", tool_call_id=call)
    await refused(stranger, "expired")
    await stranger.send(type="reject_tool", tool_call_id=call, reason="ha")
    await refused(stranger, "expired")
    await stranger.send(type="answer_question", request_id=call, answer="x")
    await refused(stranger, "expired")
    pending = await server.hub.engine.pending_approvals()
    assert [item.tool_call_id for item in pending] == [call]  # untouched
    await mine.send(type="approve_tool", tool_call_id=call)
    await mine.until("done")


async def test_an_answer_to_a_closed_or_unknown_question_is_refused(server: ChatServer):
    client = await server.client()
    await client.send(type="answer_question", request_id=12345, answer="blue")
    frame = await refused(client, "expired")
    assert frame["message"] == "That question is no longer open."


async def test_a_socket_without_auth_is_refused_before_any_frame(server: ChatServer):
    with pytest.raises(InvalidStatus) as refused_status:
        async with server.connect(auth=False):
            pass
    assert refused_status.value.response.status_code == 403
    with pytest.raises(InvalidStatus):
        async with server.connect(auth=False, headers={"Authorization": "Bearer wrong"}):
            pass
    with pytest.raises(InvalidStatus):
        async with server.connect(auth=False, headers={"Cookie": f"{COOKIE}=" + "a" * 43}):
            pass


async def test_a_token_in_the_query_string_opens_nothing(server: ChatServer):
    from websockets.asyncio.client import connect

    from tests.bot.webchat.conftest import TOKEN

    with pytest.raises(InvalidStatus):
        async with connect(f"{server.url}?conversation=c1&token={TOKEN}"):
            pass


async def test_a_foreign_origin_is_refused_even_with_the_token(server: ChatServer):
    for origin in ("http://evil.example", "null", f"https://127.0.0.1:{server.port + 1}"):
        with pytest.raises(InvalidStatus):
            async with server.connect(headers={"Origin": origin}):
                pass
    async with server.connect(headers={"Origin": f"http://127.0.0.1:{server.port}"}) as ok:
        assert json.loads(await ok.recv())["type"] == "hello"


async def test_the_inbox_sign_in_cookie_opens_a_socket(server: ChatServer):
    signin = await server.signins.create("127.0.0.1", "test")
    cookie = {"Cookie": f"{COOKIE}={signin.secret}"}
    async with server.connect(auth=False, headers=cookie) as connection:
        assert json.loads(await connection.recv())["type"] == "hello"
    await server.signins.revoke(signin.signin.handle)
    with pytest.raises(InvalidStatus):
        async with server.connect(auth=False, headers=cookie):
            pass


async def test_a_socket_whose_sign_in_ended_acts_no_more(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """Ending a sign-in (sign out, "End" on /signins, expiry) left its open socket every
    right it had: it approved a call with "no more asking" and talked to the agent
    (found by review)."""
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "a.txt", "content": "a"}))
    fake_openai.reply_text("ok")
    signin = await server.signins.create("127.0.0.1", "test")
    cookie = {"Cookie": f"{COOKIE}={signin.secret}"}
    owner = await server.client("c1")
    await owner.send(type="message", text="write")
    call = (await owner.until("approval_required"))[-1]["tool_call_id"]
    browser = Client(await server.connect("c1", auth=False, headers=cookie))
    await browser.opened()
    await server.signins.revoke(signin.signin.handle)

    await browser.send(type="approve_tool", tool_call_id=call, bypass_secs=0, ref="a")

    with pytest.raises(ConnectionClosed) as closed:
        while True:
            assert (await browser.recv())["type"] != "approval_resolved"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert await server.hub.pending_approvals(await server.hub.session_id("web:c1"))


async def test_a_sign_in_that_cannot_be_looked_up_for_a_moment_cuts_no_socket(
    server: ChatServer, monkeypatch
):
    """The database away for a moment is not a sign-out: the socket stays, its frame is
    answered."""
    signin = await server.signins.create("127.0.0.1", "test")
    browser = Client(
        await server.connect("c1", auth=False, headers={"Cookie": f"{COOKIE}={signin.secret}"})
    )
    await browser.opened()

    async def away(secret: str, *, touch: bool = True) -> None:
        raise ConnectionError("the database is restarting")

    monkeypatch.setattr(server.signins, "lookup", away)
    await browser.send(type="ping")
    assert (await browser.recv())["type"] == "pong"


async def test_a_bearer_socket_is_not_cut_by_someone_elses_wrong_tokens(server: ChatServer):
    """The check of an open socket went through the address's throttle: ten wrong tokens
    from behind the same proxy closed a healthy API socket (found by review)."""
    client = await server.client("c1")
    for _ in range(10):
        with pytest.raises(InvalidStatus):
            async with server.connect(
                "c2", auth=False, headers={"Authorization": "Bearer wrong-token"}
            ):
                pass
    await client.send(type="ping")
    assert (await client.recv())["type"] == "pong"


async def test_a_tab_left_open_does_not_keep_its_sign_in_alive(make_server):
    """The check of a listening socket noted a use of its sign-in: a tab left open kept
    an idle sign-in alive past its 12 h (found by review)."""
    server = await make_server(SocketLimits(signin_check_s=0.01))
    now = [datetime.now(UTC)]
    server.signins._clock = lambda: now[0]
    signin = await server.signins.create("127.0.0.1", "test")
    tab = Client(
        await server.connect("c1", auth=False, headers={"Cookie": f"{COOKIE}={signin.secret}"})
    )
    await tab.opened()
    started = now[0]
    now[0] = started + timedelta(hours=11)
    checked = asyncio.Event()
    looked_up = server.signins.lookup

    async def noting(secret: str, *, touch: bool = True):  # type: ignore[no-untyped-def]
        try:
            return await looked_up(secret, touch=touch)
        finally:
            checked.set()

    server.signins.lookup = noting  # type: ignore[method-assign]
    await asyncio.wait_for(checked.wait(), 5)  # the tab's check ran at 11 h
    now[0] = started + timedelta(hours=13)
    assert await looked_up(signin.secret) is None  # idle since its creation: ended


async def test_a_listening_socket_is_closed_once_its_sign_in_ends(make_server):
    """A socket that only listens receives the conversation's events: it is checked now
    and then, not only when it sends."""
    server = await make_server(SocketLimits(signin_check_s=0.01))
    signin = await server.signins.create("127.0.0.1", "test")
    cookie = {"Cookie": f"{COOKIE}={signin.secret}"}
    browser = Client(await server.connect("c1", auth=False, headers=cookie))
    await browser.opened()
    await server.signins.revoke(signin.signin.handle)
    with pytest.raises(ConnectionClosed):
        await browser.recv()


async def test_a_lone_surrogate_is_refused_as_invalid(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """JSON's "\\ud800" is no character: a message or an answer holding one failed at the
    write, answered as a failure of ours (``internal``, a traceback in the log; found by
    review)."""
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which colour?"}))
    fake_openai.reply_text("Blue it is.")
    client = await server.client()
    await client.connection.send('{"type": "message", "text": "hi \\ud800", "ref": "m1"}')
    assert (await refused(client, "invalid"))["ref"] == "m1"
    await client.send(type="message", text="paint it")
    question = (await client.until("agent_question"))[-1]
    answer = '{"type": "answer_question", "request_id": %d, "answer": "x \\ud800", "ref": "a1"}'
    await client.connection.send(answer % question["request_id"])
    assert (await client.until("error", ref="a1"))[-1]["code"] == "invalid"
    await client.send(type="answer_question", request_id=question["request_id"], answer="blue")
    await client.until("done")


async def test_a_lone_surrogate_in_a_ref_is_refused_and_the_socket_goes_on(server: ChatServer):
    """The ref was echoed into the error frame, which could not be written: the socket was
    marked gone and, open still, answered nothing more (found by review)."""
    client = await server.client()
    await client.connection.send('{"type": "message", "text": "hi", "ref": "\\ud800"}')
    assert (await refused(client, "invalid")).get("ref") is None
    await client.send(type="ping", ref="p1")
    await client.until("pong", ref="p1")


async def test_a_card_whose_call_holds_a_lone_surrogate_is_shown_and_decided(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """A model's "\\ud83d" (a token that cut an emoji) in a call's JSON arguments made a
    card no socket could write: every tab went silent while the turn waited on it, and a
    reload did the same (found by review)."""
    fake_openai.reply_tool_calls(("c1", "execute_cmd", '{"command": "echo \\ud83d done"}'))
    fake_openai.reply_text("It could not run.")
    client = await server.client()
    await client.send(type="message", text="say it")
    card = (await client.until("approval_required"))[-1]
    assert card["content"] == "echo \\ud83d done"  # shown as its code, as a control is
    await client.send(type="reject_tool", tool_call_id=card["tool_call_id"])
    await client.until("done")


async def test_a_nul_character_is_taken_as_a_replacement(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """PostgreSQL stores no NUL in text: a message holding one was "internal" there."""
    fake_openai.reply_text("ok")
    client = await server.client()
    await client.connection.send('{"type": "message", "text": "a\\u0000b", "ref": "m1"}')
    await client.until("done")
    asked = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert "a\ufffdb" in str(asked["content"])


async def test_a_malformed_conversation_id_is_refused(server: ChatServer):
    for conversation in ("", "a:b", "x" * 41, "%20"):
        with pytest.raises(InvalidStatus):
            async with server.connect(conversation):
                pass


async def test_html_in_model_output_and_arguments_travels_as_text(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    """The frames carry text; the page shows it as text (it never parses frames as HTML)."""
    script = "<script>alert(1)</script>"
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "x.html", "content": script}))
    fake_openai.reply_text(f"Here: {script}")
    client = await server.client()
    await client.send(type="message", text=script)
    card = (await client.until("approval_required"))[-1]
    assert script in card["content"]
    await client.send(type="reject_tool", tool_call_id=card["tool_call_id"])
    frames = await client.until("done")
    assert frames[-1]["content"] == f"Here: {script}"


async def test_sockets_over_the_limit_are_refused(make_server):
    server = await make_server(SocketLimits(max_sockets=2))
    first = await server.client("a")
    await server.client("b")
    with pytest.raises(InvalidStatus):
        async with server.connect("c"):
            pass
    await first.close()
    # The endpoint ends just after the close handshake; nothing signals it.
    while server.webchat.open_sockets > 1:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    third = await server.client("c")
    await third.send(type="ping")
    assert (await third.recv())["type"] == "pong"


def test_a_frame_holding_a_lone_surrogate_is_written_escaped() -> None:
    """Any text of ours that kept one (a note, a tool's output) is still a frame."""
    frame = resolved_frame(7, "reject", "Ann", note="cut \ud83d emoji")
    assert json.loads(frame.dump())["note"] == "cut \ud83d emoji"


async def test_a_card_whose_deciders_cannot_be_read_for_a_moment_still_reaches_the_tab(
    server: ChatServer, fake_openai: FakeOpenAIServer, monkeypatch
):
    """One failed read while building a card (the database away for a moment) ended the
    socket's event pump: no card, no answer, nothing more in that tab (found by review)."""
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "a.txt", "content": "x\n"}))
    fake_openai.reply_text("Wrote it.")

    async def away(tool_call_id: int) -> str:
        raise ConnectionError("the database is restarting")

    monkeypatch.setattr(server.hub, "who_may_decide", away)
    tab = await server.client()
    await tab.send(type="message", text="write a.txt", ref="m")
    card = (await tab.until("approval_required"))[-1]
    assert card["deciders"] is None
    await tab.send(type="approve_tool", tool_call_id=card["tool_call_id"])
    assert (await tab.until("done"))[-1]["content"] == "Wrote it."


async def test_a_message_whose_use_cannot_be_noted_cuts_no_socket(
    server: ChatServer, fake_openai: FakeOpenAIServer, monkeypatch
):
    """Noting a conversation's use (the sidebar's order) failed with the database away
    for a moment, and the socket closed with 1011 under an accepted message."""

    async def away(conversation_id: str) -> None:
        raise ConnectionError("the database is restarting")

    monkeypatch.setattr(server.webchat.conversations, "used", away)
    fake_openai.reply_text("Here.")
    tab = await server.client()
    await tab.send(type="message", text="hello", ref="m")
    assert (await tab.until("done"))[-1]["content"] == "Here."
    await tab.send(type="ping")
    assert (await tab.until("pong"))[-1]["type"] == "pong"
