"""Attachments: a file uploaded over HTTP first, then named by a ``message`` frame."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from bot.http.signins import csrf_token
from bot.http.web import COOKIE
from bot.webchat.uploads import MAX_ATTACHMENTS, MAX_NAME_CHARS, MAX_UPLOAD_BYTES, safe_name
from tests.bot.webchat.conftest import TOKEN, ChatServer, Client
from tests.fakes.openai_server import FakeOpenAIServer

BEARER = {"Authorization": f"Bearer {TOKEN}"}
OCTETS = {"content-type": "application/octet-stream"}
LIMIT = 1000


@pytest.fixture
async def stored(make_server) -> ChatServer:
    return await make_server(stored=True, upload_limit=LIMIT)


@pytest.fixture
async def http(stored: ChatServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stored.http, headers=BEARER) as client:
        yield client


async def _conversation(http: httpx.AsyncClient) -> str:
    return (await http.post("/chat/conversations", json={})).json()["id"]


async def _upload(
    http: httpx.AsyncClient, conversation: str, name: str, body: bytes, **headers: str
) -> httpx.Response:
    return await http.post(
        f"/chat/conversations/{conversation}/files",
        params={"name": name},
        content=body,
        headers={**OCTETS, **headers},
    )


def _folder(stored: ChatServer, conversation: str) -> Path:
    return stored.hub.engine.workspace.root / "uploads" / "web" / conversation


def _last_user_message(fake_openai: FakeOpenAIServer) -> dict:
    return [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]


async def _nothing_sent(client: Client, fake_openai: FakeOpenAIServer) -> None:
    """The socket still answers, and no message was stored or sent to the model."""
    await client.send(type="ping", ref="after")
    frames = await client.until("pong", ref="after")
    assert not [f for f in client.seen if f["type"] in ("user_message", "accepted")], frames
    assert fake_openai.requests == []


async def test_an_uploaded_file_reaches_the_model_and_every_tab(
    stored: ChatServer, http: httpx.AsyncClient, fake_openai: FakeOpenAIServer
):
    conversation = await _conversation(http)
    uploaded = await _upload(http, conversation, "notes.txt", b"remember the milk")
    assert uploaded.status_code == 201, uploaded.text
    file = uploaded.json()
    assert file["name"] == "notes.txt" and file["size"] == 17
    saved = _folder(stored, conversation) / file["id"]
    assert saved.read_bytes() == b"remember the milk"
    assert file["id"].endswith("_notes.txt")

    fake_openai.reply_text("Milk noted.")
    fake_openai.reply_text("A picture.")
    client = Client(await stored.connect(conversation))
    hello, _ = await client.opened()
    assert hello["limits"]["max_upload_bytes"] == LIMIT
    assert hello["limits"]["max_attachments"] == MAX_ATTACHMENTS
    other_tab = await stored.client(conversation)
    await client.send(type="message", text="read this", attachments=[file["id"]], ref="m1")
    frames = await client.until("done")
    accepted = next(f for f in frames if f["type"] == "accepted")
    assert accepted["ref"] == "m1"
    path = f"uploads/web/{conversation}/{file['id']}"
    shown = next(f for f in frames if f["type"] == "user_message")
    assert shown["text"] == "read this"
    assert shown["attachments"] == [
        {
            "path": path,
            "name": "notes.txt",
            "kind": "document",
            "mime_type": "text/plain",
            "size": 17,
        }
    ]
    shown_first = shown["attachments"][0]
    in_other_tab = (await other_tab.until("user_message"))[-1]
    assert in_other_tab["attachments"] == shown["attachments"]
    asked = _last_user_message(fake_openai)
    assert asked["content"].startswith("read this\n\n[SYSTEM INFO] The user attached files")
    assert f"- {path} (text/plain, 17)" in asked["content"]

    # Files and no text: a message all the same.
    picture = (await _upload(http, conversation, "cat.png", b"\x89PNG")).json()
    await client.send(type="message", text="", attachments=[picture["id"]])
    frames = await client.until("done")
    shown = next(f for f in frames if f["type"] == "user_message")
    assert shown["text"] == "" and shown["attachments"][0]["kind"] == "photo"
    asked = _last_user_message(fake_openai)["content"]
    assert asked.startswith("[SYSTEM INFO]") and picture["id"] in asked
    history = (await http.get(f"/chat/conversations/{conversation}/messages")).json()
    users = [m for m in history["messages"] if m["role"] == "user"]
    assert [m["attachments"] for m in users] == [
        [{**shown_first, "path": path}],
        shown["attachments"],
    ]
    answers = [m for m in history["messages"] if m["role"] == "assistant"]
    assert all(m["attachments"] == [] for m in answers)
    await client.close()
    await other_tab.close()


async def test_an_upload_needs_the_keys_and_a_browser_its_form_token(stored: ChatServer):
    async with httpx.AsyncClient(base_url=stored.http) as anonymous:
        conversation = (
            await anonymous.post("/chat/conversations", json={}, headers=BEARER)
        ).json()["id"]
        assert (await _upload(anonymous, conversation, "a.txt", b"x")).status_code == 401
        foreign = {**BEARER, "Origin": "http://evil.example"}
        refused = await _upload(anonymous, conversation, "a.txt", b"x", **foreign)
        assert refused.status_code == 403
        signin = await stored.signins.create("127.0.0.1", "test")
        anonymous.cookies.set(COOKIE, signin.secret)
        missing = await _upload(anonymous, conversation, "a.txt", b"x")
        assert missing.status_code == 403 and "form token" in missing.json()["error"]
        wrong = {"X-CSRF-Token": csrf_token("another sign-in")}
        assert (await _upload(anonymous, conversation, "a.txt", b"x", **wrong)).status_code == 403
        right = {"X-CSRF-Token": csrf_token(signin.secret)}
        done = await _upload(anonymous, conversation, "a.txt", b"x", **right)
        assert done.status_code == 201
        assert [p.name for p in _folder(stored, conversation).iterdir()] == [done.json()["id"]]


async def test_an_upload_to_an_unknown_or_deleted_conversation_is_refused(
    stored: ChatServer, http: httpx.AsyncClient
):
    conversation = await _conversation(http)
    await http.delete(f"/chat/conversations/{conversation}")
    for target in (conversation, "424242", "99999999999999999999999"):
        refused = await _upload(http, target, "a.txt", b"x")
        assert refused.status_code == 404, (target, refused.text)
        assert refused.json() == {"error": "No such conversation."}
    assert not (stored.hub.engine.workspace.root / "uploads").exists()


async def test_bad_upload_requests_are_refused_in_a_sentence(
    stored: ChatServer, http: httpx.AsyncClient
):
    conversation = await _conversation(http)
    path = f"/chat/conversations/{conversation}/files"
    no_name = await http.post(path, content=b"x", headers=OCTETS)
    assert no_name.status_code == 422
    empty_name = await http.post(path, params={"name": ""}, content=b"x", headers=OCTETS)
    assert empty_name.status_code == 422
    as_json = await http.post(path, params={"name": "a"}, json={"a": 1})
    assert as_json.status_code == 415
    assert as_json.json() == {"error": "Send the body as application/octet-stream."}


async def test_an_upload_over_the_limit_is_refused_and_nothing_is_kept(
    stored: ChatServer, http: httpx.AsyncClient
):
    conversation = await _conversation(http)
    exactly = await _upload(http, conversation, "full.bin", b"x" * LIMIT)
    assert exactly.status_code == 201 and exactly.json()["size"] == LIMIT
    declared = await _upload(http, conversation, "big.bin", b"x" * (LIMIT + 1))
    assert declared.status_code == 413
    assert "over the limit" in declared.json()["error"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for _ in range(4):
            yield b"y" * (LIMIT // 2)

    streamed = await http.post(
        f"/chat/conversations/{conversation}/files",
        params={"name": "streamed.bin"},
        content=chunks(),
        headers=OCTETS,
    )
    assert streamed.status_code == 413, streamed.text
    assert [p.name for p in _folder(stored, conversation).iterdir()] == [exactly.json()["id"]]


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        ("a/b\\c.txt", "c.txt"),
        ("..", "file"),
        (".bashrc", "bashrc"),
        ("rapport d'été <1>.pdf", "rapport_d_t_1_.pdf"),
    ],
)
async def test_a_file_name_is_made_safe_and_stays_in_the_folder(
    stored: ChatServer, http: httpx.AsyncClient, given: str, kept: str
):
    conversation = await _conversation(http)
    uploaded = await _upload(http, conversation, given, b"data")
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["name"] == kept
    folder = _folder(stored, conversation)
    assert [p.name for p in folder.iterdir()] == [uploaded.json()["id"]]
    assert (folder / uploaded.json()["id"]).read_bytes() == b"data"


def test_a_long_name_is_cut_keeping_its_extension():
    cut = safe_name("n" * 500 + ".tar.gz")
    assert len(cut) == MAX_NAME_CHARS and cut.endswith(".gz")
    assert safe_name("x" * 500) == "x" * MAX_NAME_CHARS


async def test_a_message_naming_another_conversations_file_sends_nothing(
    stored: ChatServer, http: httpx.AsyncClient, fake_openai: FakeOpenAIServer
):
    mine = await _conversation(http)
    theirs = await _conversation(http)
    their_file = (await _upload(http, theirs, "secret.txt", b"theirs")).json()["id"]
    mine_file = (await _upload(http, mine, "mine.txt", b"mine")).json()["id"]
    client = await stored.client(mine)
    made_up = "0" * 32 + "_nothing.txt"
    for attachments in ([their_file], [mine_file, made_up]):
        await client.send(type="message", text="look", attachments=attachments, ref="bad")
        error = (await client.until("error"))[-1]
        assert error["code"] == "attachment" and error["ref"] == "bad"
        assert "not in this conversation" in error["message"]
    for hostile in ("../" + theirs + "/" + their_file, "/etc/passwd", "..", f"{mine_file}/.."):
        await client.send(type="message", text="look", attachments=[hostile], ref="bad")
        error = (await client.until("error"))[-1]
        assert error["code"] == "invalid" and error["ref"] == "bad"
        assert error["message"] == (
            "Field 'attachments.0' of the 'message' frame is not in the form the server gave."
        )
    await _nothing_sent(client, fake_openai)
    await client.close()


async def test_a_symlink_in_the_folder_is_not_attached(
    stored: ChatServer, http: httpx.AsyncClient, fake_openai: FakeOpenAIServer
):
    conversation = await _conversation(http)
    real = (await _upload(http, conversation, "real.txt", b"x")).json()["id"]
    folder = _folder(stored, conversation)
    link = "f" * 32 + "_link.txt"
    (folder / link).symlink_to(stored.hub.engine.workspace.root.parent / "chathub.db")
    client = await stored.client(conversation)
    await client.send(type="message", text="look", attachments=[real, link])
    assert (await client.until("error"))[-1]["code"] == "attachment"
    await _nothing_sent(client, fake_openai)
    await client.close()


async def test_more_than_the_maximum_of_attachments_is_refused(
    stored: ChatServer, http: httpx.AsyncClient, fake_openai: FakeOpenAIServer
):
    conversation = await _conversation(http)
    ids = [
        (await _upload(http, conversation, f"f{i}.txt", b"x")).json()["id"]
        for i in range(MAX_ATTACHMENTS + 1)
    ]
    client = await stored.client(conversation)
    await client.send(type="message", text="all", attachments=ids)
    error = (await client.until("error"))[-1]
    assert error["code"] == "invalid"
    assert error["message"] == f"A message carries at most {MAX_ATTACHMENTS} files."
    await _nothing_sent(client, fake_openai)
    fake_openai.reply_text("Ten files.")
    await client.send(type="message", text="all", attachments=ids[:MAX_ATTACHMENTS])
    shown = next(f for f in await client.until("done") if f["type"] == "user_message")
    assert len(shown["attachments"]) == MAX_ATTACHMENTS
    await client.close()


async def test_the_real_limit_is_twenty_megabytes_streamed_to_disk(make_server):
    """The default limit, a body sent in chunks without a length (never whole in memory
    on either side): 20 MB is taken, one byte more is not."""
    server = await make_server(stored=True)
    chunk = b"z" * (1024 * 1024)

    async def body(extra: bytes) -> AsyncIterator[bytes]:
        for _ in range(MAX_UPLOAD_BYTES // len(chunk)):
            yield chunk
        yield extra

    async with httpx.AsyncClient(base_url=server.http, headers=BEARER, timeout=60) as http:
        conversation = await _conversation(http)
        path = f"/chat/conversations/{conversation}/files"
        taken = await http.post(
            path, params={"name": "full.bin"}, content=body(b""), headers=OCTETS
        )
        assert taken.status_code == 201 and taken.json()["size"] == MAX_UPLOAD_BYTES
        over = await http.post(
            path, params={"name": "over.bin"}, content=body(b"!"), headers=OCTETS
        )
        assert over.status_code == 413
        assert over.json() == {"error": "The file is over the limit of 20 MB."}
    assert [p.name for p in _folder(server, conversation).iterdir()] == [taken.json()["id"]]


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def test_a_client_that_leaves_mid_upload_leaves_no_file_and_no_internal_error(
    stored: ChatServer, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
):
    conversation = await _conversation(http)
    folder = _folder(stored, conversation)

    async def leaving() -> AsyncIterator[bytes]:
        yield b"z" * (LIMIT // 2)
        await _until(lambda: folder.exists() and any(folder.iterdir()))  # the part is written
        raise ConnectionAbortedError("the browser's tab was closed")

    with pytest.raises(ConnectionAbortedError):
        await http.post(
            f"/chat/conversations/{conversation}/files",
            params={"name": "half.bin"},
            content=leaving(),
            headers=OCTETS,
        )
    await _until(lambda: not any(folder.iterdir()))  # the server notices on its own
    assert (await _upload(http, conversation, "next.bin", b"ok")).status_code == 201
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]
