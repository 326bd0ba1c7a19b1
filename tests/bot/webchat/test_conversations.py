"""Conversations over HTTP: list, create, rename, delete-hides, history in pages."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from bot.http.signins import csrf_token
from bot.http.web import COOKIE
from tests.bot.webchat.conftest import TOKEN, ChatServer
from tests.fakes.openai_server import FakeOpenAIServer

BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def stored(make_server) -> ChatServer:
    return await make_server(stored=True)


@pytest.fixture
async def http(stored: ChatServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stored.http, headers=BEARER) as client:
        yield client


async def test_create_list_rename_and_delete(http: httpx.AsyncClient):
    assert (await http.get("/chat/conversations")).json() == {"conversations": []}
    first = await http.post("/chat/conversations", json={})
    assert first.status_code == 201 and first.json()["title"] == "New conversation"
    second = (
        await http.post("/chat/conversations", json={"title": "  Plans\nfor <b>May</b> "})
    ).json()
    assert second["title"] == "Plans for <b>May</b>"  # one line, kept as text
    pasted = await http.post("/chat/conversations", json={"title": "t" * 1000})
    assert pasted.status_code == 201 and pasted.json()["title"] == "t" * 200  # cut, not refused
    await http.delete(f"/chat/conversations/{pasted.json()['id']}")
    listed = (await http.get("/chat/conversations")).json()["conversations"]
    assert [c["id"] for c in listed] == [second["id"], first.json()["id"]]

    renamed = await http.patch(f"/chat/conversations/{first.json()['id']}", json={"title": "Trip"})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Trip"
    listed = (await http.get("/chat/conversations")).json()["conversations"]
    assert listed[0]["title"] == "Trip"  # renamed: used most recently

    gone = await http.delete(f"/chat/conversations/{second['id']}")
    assert gone.status_code == 204
    listed = (await http.get("/chat/conversations")).json()["conversations"]
    assert [c["id"] for c in listed] == [first.json()["id"]]
    assert (await http.delete(f"/chat/conversations/{second['id']}")).status_code == 404
    assert (
        await http.patch(f"/chat/conversations/{second['id']}", json={"title": "x"})
    ).status_code == 404


async def test_bad_requests_are_refused_in_a_sentence(http: httpx.AsyncClient):
    created = (await http.post("/chat/conversations", json={})).json()
    path = f"/chat/conversations/{created['id']}"
    for response, status in [
        (await http.patch(path, json={"title": ""}), 422),
        (await http.patch(path, json={"title": " \n "}), 422),
        (await http.patch(path, json={"name": "x"}), 422),
        (await http.patch(path, content=b"{", headers={"content-type": "application/json"}), 422),
        (await http.patch(path, content=b"title=x", headers={"content-type": "text/plain"}), 415),
        (
            await http.post(
                "/chat/conversations",
                content=b"x" * 20_000,
                headers={"content-type": "application/json"},
            ),
            413,
        ),
        (await http.get("/chat/conversations/99999999999999999999999/messages"), 404),
        (await http.get("/chat/conversations/424242/messages"), 404),
        (await http.get(f"{path}/messages?limit=0"), 422),
        (await http.get(f"{path}/messages?before=abc"), 422),
    ]:
        assert response.status_code == status, (response.status_code, response.text)
        assert "Traceback" not in response.text


async def test_a_method_a_path_lacks_is_405_naming_every_method_it_has(
    http: httpx.AsyncClient,
):
    """``GET /chat/conversations/1`` said ``Allow: PATCH``: DELETE was a route of its own
    (found by review on 2026-12-06)."""
    for method, path, allowed in (
        ("PUT", "/chat/conversations", {"GET", "HEAD", "POST"}),
        ("GET", "/chat/conversations/1", {"PATCH", "DELETE"}),
    ):
        answer = await http.request(method, path, headers=BEARER)
        assert answer.status_code == 405, (method, path)
        assert set(answer.headers["allow"].split(", ")) == allowed, (method, path)


async def test_signed_out_foreign_origin_and_missing_csrf_are_refused(stored: ChatServer):
    async with httpx.AsyncClient(base_url=stored.http) as anonymous:
        assert (await anonymous.get("/chat/conversations")).status_code == 401
        assert (await anonymous.post("/chat/conversations", json={})).status_code == 401
        foreign = {**BEARER, "Origin": "http://evil.example"}
        assert (await anonymous.get("/chat/conversations", headers=foreign)).status_code == 403
        signin = await stored.signins.create("127.0.0.1", "test")
        anonymous.cookies.set(COOKIE, signin.secret)
        assert (await anonymous.get("/chat/conversations")).status_code == 200
        # A browser's sign-in writes only with its form token.
        assert (await anonymous.post("/chat/conversations", json={})).status_code == 403
        wrong = {"X-CSRF-Token": csrf_token("another sign-in")}
        assert (
            await anonymous.post("/chat/conversations", json={}, headers=wrong)
        ).status_code == 403
        right = {"X-CSRF-Token": csrf_token(signin.secret)}
        assert (
            await anonymous.post("/chat/conversations", json={}, headers=right)
        ).status_code == 201


async def test_a_deleted_conversation_opens_no_socket(stored: ChatServer, http: httpx.AsyncClient):
    from websockets.exceptions import InvalidStatus

    created = (await http.post("/chat/conversations", json={})).json()
    async with stored.connect(created["id"]) as connection:
        assert '"hello"' in await connection.recv()
    await http.delete(f"/chat/conversations/{created['id']}")
    with pytest.raises(InvalidStatus):
        async with stored.connect(created["id"]):
            pass
    with pytest.raises(InvalidStatus):
        async with stored.connect("12345"):  # never created
            pass


async def test_history_in_pages(
    stored: ChatServer, http: httpx.AsyncClient, fake_openai: FakeOpenAIServer
):
    created = (await http.post("/chat/conversations", json={})).json()
    other = (await http.post("/chat/conversations", json={"title": "other"})).json()
    client = await stored.client(created["id"])
    fake_openai.reply_tool_calls(("r1", "list_files", {"path": "."}))
    fake_openai.reply_text("answer 0")
    for i in range(1, 5):
        fake_openai.reply_text(f"answer {i}")
    for i in range(5):
        await client.send(type="message", text=f"question {i}")
        if i == 0:  # the default rules ask before listing files too
            card = (await client.until("approval_required"))[-1]
            await client.send(type="approve_tool", tool_call_id=card["tool_call_id"])
        await client.until("done")
    await client.close()
    listed = (await http.get("/chat/conversations")).json()["conversations"]
    assert listed[0]["id"] == created["id"]  # used last

    path = f"/chat/conversations/{created['id']}/messages"
    newest = (await http.get(path, params={"limit": 4})).json()
    texts = [m["text"] for m in newest["messages"]]
    assert texts == ["question 3", "answer 3", "question 4", "answer 4"]
    assert newest["next_before"] is not None
    everything = []
    page = newest
    while True:
        everything = page["messages"] + everything
        if page["next_before"] is None:
            break
        page = (await http.get(path, params={"limit": 4, "before": page["next_before"]})).json()
    assert [m["text"] for m in everything if m["role"] == "user"] == [
        f"question {i}" for i in range(5)
    ]
    first_answer = next(m for m in everything if m["role"] == "assistant" and m["tools"])
    assert first_answer["tools"][0]["name"] == "list_files"
    assert first_answer["tools"][0]["status"] == "done"
    assert everything[-1]["text"] == "answer 4"
    empty = (await http.get(f"/chat/conversations/{other['id']}/messages")).json()
    assert empty["messages"] == [] and empty["next_before"] is None


async def test_without_a_token_loopback_needs_no_sign_in_but_still_the_origin_and_csrf(
    make_server, fake_openai: FakeOpenAIServer
):
    """``make run`` without CHATHUB_API_TOKEN (loopback only): the page and the socket open
    without a sign-in; another site's page is still refused, and writes need the page's
    form token."""
    server = await make_server(page=True, token=None)
    async with httpx.AsyncClient(base_url=server.http) as http:
        page = await http.get("/chat")
        assert page.status_code == 200
        assert "content-security-policy" in page.headers
        csrf = page.text.split('name="csrf" content="')[1].split('"')[0]
        assert len(csrf) == 64
        assert (await http.post("/chat/conversations", json={})).status_code == 403
        created = await http.post("/chat/conversations", json={}, headers={"X-CSRF-Token": csrf})
        assert created.status_code == 201
        foreign = {"Origin": "http://evil.example"}
        assert (await http.get("/chat/conversations", headers=foreign)).status_code == 403
    conversation = created.json()["id"]
    fake_openai.reply_text("Local hello.")
    client = await server.client(conversation, auth=False)
    await client.send(type="message", text="hi")
    assert (await client.until("done"))[-1]["content"] == "Local hello."
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus):
        async with server.connect(conversation, auth=False, headers=foreign):
            pass


async def test_a_conversation_deleted_in_another_tab_takes_no_more_messages(
    make_server, fake_openai: FakeOpenAIServer
):
    """A tab that had it open went on: its message was answered in a conversation nobody
    could list any more (found by review)."""
    server = await make_server(stored=True)
    async with httpx.AsyncClient(base_url=server.http, headers=BEARER) as http:
        created = (await http.post("/chat/conversations", json={})).json()
        tab = await server.client(created["id"])
        assert (await http.delete(f"/chat/conversations/{created['id']}")).status_code == 204
        await tab.send(type="message", text="hello?", ref="m1")
        answer = await tab.recv()
    assert answer["type"] == "error" and answer["code"] == "deleted" and answer["ref"] == "m1"
    assert fake_openai.requests == []


async def test_a_turn_of_a_conversation_deleted_meanwhile_can_still_be_stopped(
    make_server, fake_openai: FakeOpenAIServer
):
    """Deleting hides a conversation; its running turn goes on: the tab that shows it
    must still stop it (every frame was refused as "deleted"; found by review)."""
    server = await make_server(stored=True)
    fake_openai.reply_hang(partial="Thinking about it ")
    async with httpx.AsyncClient(base_url=server.http, headers=BEARER) as http:
        created = (await http.post("/chat/conversations", json={})).json()
        tab = await server.client(created["id"])
        await tab.send(type="message", text="a long question")
        await tab.until("text_delta")
        assert (await http.delete(f"/chat/conversations/{created['id']}")).status_code == 204
        await tab.send(type="stop", ref="s1")
        frames = await tab.until("error", code="turn")
    assert all(frame.get("code") != "deleted" for frame in frames)
