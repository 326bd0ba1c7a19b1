"""slack_sdk 3.x and slack_bolt 1.x against the fake Slack, pointed at it but otherwise unpatched.

The Web API tests drive a real ``AsyncWebClient(base_url=fake.api_url)``. The Socket Mode
tests run a real ``AsyncApp`` under bolt's aiohttp ``AsyncSocketModeHandler``: the handler
asks the fake's ``apps.connections.open`` (through the app's client, so through its
``base_url``) for the WebSocket URL, as against Slack. The HTTP tests serve the same app
with bolt's Starlette adapter at ``/slack/events`` and let the fake POST signed requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import pytest
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from tests.fakes.background import BackgroundServer
from tests.fakes.slack_server import BOT_ID, BOT_USER_ID, FakeSlackServer

ALICE = "U0ALICE001"
BOB = "U0BOB00001"
GENERAL = "C0GENERAL1"
ELSEWHERE = "C0ELSEWHR1"
TIMEOUT = 5.0
TS = re.compile(r"^\d{10}\.\d{6}$")

CARD_BLOCKS: list[dict[str, Any]] = [
    {"type": "section", "text": {"type": "mrkdwn", "text": "Run `ls -la`?"}},
    {
        "type": "actions",
        "block_id": "card",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "value": "call-1",
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
            },
            {
                "type": "button",
                "action_id": "reject",
                "value": "call-1",
                "style": "danger",
                "text": {"type": "plain_text", "text": "Reject"},
            },
        ],
    },
]


def reason_view(channel: str, ts: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": "reject_reason",
        "private_metadata": json.dumps({"channel": channel, "ts": ts}),
        "title": {"type": "plain_text", "text": "Reject"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": "reason",
                "label": {"type": "plain_text", "text": "Why?"},
                "element": {"type": "plain_text_input", "action_id": "text", "multiline": True},
            }
        ],
    }


async def until(condition: Callable[[], object], within_s: float = TIMEOUT) -> None:
    """Wait until ``condition()`` holds: the fake (and an HTTP app) run on other loops."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the condition")
        await asyncio.sleep(0.005)


@pytest.fixture
def fake() -> Iterator[FakeSlackServer]:
    with FakeSlackServer(ack_timeout=1.0, retry_delays=(0.0, 0.0, 0.0)) as server:
        server.add_user(ALICE, "alice", "Alice")
        server.add_user(BOB, "bob", "Bob")
        server.add_channel(GENERAL, "general", members=[ALICE, BOB])
        yield server


def web_client(fake: FakeSlackServer, token: str | None = None, **kwargs: Any) -> AsyncWebClient:
    return AsyncWebClient(token=token or fake.bot_token, base_url=fake.api_url, **kwargs)


class Recorder:
    """What the bolt app saw."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.mentions: list[dict[str, Any]] = []
        self.clicks: list[dict[str, Any]] = []
        self.submissions: list[str] = []
        self.commands: list[dict[str, Any]] = []
        self.retry_headers: list[str | None] = []
        self.seen: set[str] = set()  # client_msg_ids: a mention comes as two events
        self.threads: set[str] = set()  # threads started by a mention


def build_app(fake: FakeSlackServer) -> tuple[AsyncApp, Recorder]:
    """A small bolt app shaped like the product's: DMs, mentions that start a thread,
    thread replies without a mention, a card, its buttons, a modal, a slash command."""
    client = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)
    app = AsyncApp(client=client, signing_secret=fake.signing_secret)
    seen = Recorder()

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: Any) -> None:
        seen.mentions.append(event)
        seen.seen.add(event["client_msg_id"])
        thread = event.get("thread_ts") or event["ts"]
        seen.threads.add(thread)
        await say(text="On it.", thread_ts=thread)

    @app.event("message")
    async def on_message(event: dict[str, Any], say: Any) -> None:
        if event.get("subtype") or event.get("bot_id"):
            return  # edits and deletes (the bot's own posts bolt acks and drops itself)
        seen.messages.append(event)
        if event.get("client_msg_id") in seen.seen:
            return  # the message event of a mention
        if event["channel_type"] == "im":
            if event["text"] == "card":
                await say(text="Run ls -la?", blocks=CARD_BLOCKS)
            else:
                await say(text=f"echo: {event['text']}")
        elif event.get("thread_ts") in seen.threads:
            await say(text=f"in thread: {event['text']}", thread_ts=event["thread_ts"])

    @app.action("approve")
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        seen.clicks.append(body)
        container = body["container"]
        if body["user"]["id"] != ALICE:
            await client.chat_postEphemeral(
                channel=container["channel_id"], user=body["user"]["id"], text="Not yours."
            )
            return
        await client.chat_update(
            channel=container["channel_id"],
            ts=container["message_ts"],
            text="Approved",
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "✅ Approved"}}],
        )

    @app.action("reject")
    async def reject(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        seen.clicks.append(body)
        container = body["container"]
        await client.views_open(
            trigger_id=body["trigger_id"],
            view=reason_view(container["channel_id"], container["message_ts"]),
        )

    @app.view("reject_reason")
    async def on_reason(ack: Any, view: dict[str, Any], client: AsyncWebClient) -> None:
        reason = view["state"]["values"]["reason"]["text"]["value"]
        seen.submissions.append(reason)
        if not reason.strip():
            await ack(response_action="errors", errors={"reason": "Say why."})
            return
        await ack()
        where = json.loads(view["private_metadata"])
        await client.chat_update(
            channel=where["channel"], ts=where["ts"], text=f"Rejected: {reason}", blocks=[]
        )

    @app.command("/chathub")
    async def command(ack: Any, command: dict[str, Any], respond: Any) -> None:
        seen.commands.append(command)
        await ack(text=f"Running {command['text']}…")
        await respond(response_type="in_channel", text=f"{command['text']}: done")

    return app, seen


@contextlib.asynccontextmanager
async def socket_mode(
    fake: FakeSlackServer, app: AsyncApp, *, ping_interval: float = 1.0
) -> AsyncIterator[AsyncSocketModeHandler]:
    handler = AsyncSocketModeHandler(app, fake.app_token, ping_interval=ping_interval)
    await handler.connect_async()
    try:
        await until(lambda: fake.ready_connections == 1)
        yield handler
    finally:
        await handler.close_async()


@contextlib.contextmanager
def http_mode(fake: FakeSlackServer, app: AsyncApp) -> Iterator[str]:
    """Serve ``app`` at ``/slack/events`` (bolt's Starlette adapter) and point the fake's
    event, interaction and command delivery at it."""
    handler = AsyncSlackRequestHandler(app)

    async def events(request: Request) -> Any:
        return await handler.handle(request)

    server = BackgroundServer(
        Starlette(routes=[Route("/slack/events", events, methods=["POST"])]), "bolt-http"
    )
    server.start()
    url = f"http://127.0.0.1:{server.port}/slack/events"
    fake.request_url = url
    try:
        yield url
    finally:
        fake.request_url = None
        server.stop()


def all_acked(fake: FakeSlackServer) -> bool:
    return all(d.acked for d in fake.deliveries)


# -- Web API ---------------------------------------------------------------------------------


async def test_auth_and_errors_have_slacks_shape(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    auth = await client.auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == (BOT_USER_ID, BOT_ID, "T0FAKETEAM")
    assert "chat:write" in auth.headers["x-oauth-scopes"]

    async def error_of(call: Any) -> tuple[int, str]:
        with pytest.raises(SlackApiError) as caught:
            await call
        return caught.value.response.status_code, caught.value.response["error"]

    assert await error_of(web_client(fake, "xoxb-wrong").auth_test()) == (200, "invalid_auth")
    anonymous = AsyncWebClient(base_url=fake.api_url)
    assert await error_of(anonymous.auth_test()) == (200, "not_authed")
    app_token = web_client(fake, fake.app_token)
    assert await error_of(app_token.chat_postMessage(channel=GENERAL, text="x")) == (
        200,
        "not_allowed_token_type",
    )
    assert await error_of(client.apps_connections_open(app_token=fake.bot_token)) == (
        200,
        "not_allowed_token_type",
    )
    assert await error_of(client.chat_postMessage(channel="C0NOWHERE", text="x")) == (
        200,
        "channel_not_found",
    )
    assert await error_of(client.api_call("chat.nothing")) == (404, "unknown_method")
    # slack_sdk urljoins base_url and the method, after adding the base's missing slash.
    unslashed = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url.rstrip("/"))
    assert (await unslashed.auth_test()).api_url == f"{fake.api_url}auth.test"
    fake.add_channel(ELSEWHERE, "elsewhere", bot_member=False)
    assert await error_of(client.chat_postMessage(channel=ELSEWHERE, text="x")) == (
        200,
        "not_in_channel",
    )
    fake.scopes = fake.scopes - {"chat:write"}
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=GENERAL, text="x")
    assert caught.value.response["error"] == "missing_scope"
    assert caught.value.response["needed"] == "chat:write"
    assert [c.error for c in fake.calls_to("chat.postMessage")] == [
        "not_allowed_token_type",
        "channel_not_found",
        "not_in_channel",
        "missing_scope",
    ]


async def test_messages_threads_and_history(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    parent = await client.chat_postMessage(channel=GENERAL, text="Run `ls`?", blocks=CARD_BLOCKS)
    assert TS.match(parent["ts"]) and parent["channel"] == GENERAL
    assert parent["message"]["bot_id"] == BOT_ID
    reply = await client.chat_postMessage(channel=GENERAL, text="a reply", thread_ts=parent["ts"])
    assert float(reply["ts"]) > float(parent["ts"])
    # A form-encoded call, blocks as a JSON string, by name.
    form = await client.api_call(
        "chat.postMessage",
        data={"channel": "#general", "text": "by form", "blocks": json.dumps(CARD_BLOCKS[:1])},
    )
    assert form["channel"] == GENERAL
    assert fake.calls_to("chat.postMessage")[-1].content_type.startswith(
        "application/x-www-form-urlencoded"
    )

    card = fake.message(GENERAL, parent["ts"])
    assert card.action_ids == ["approve", "reject"]
    assert card.blocks[0]["block_id"]  # Slack names the blocks the bot left unnamed
    assert [m.text for m in fake.messages(GENERAL, thread_ts=parent["ts"])] == [
        "Run `ls`?",
        "a reply",
    ]

    user_message = fake.channel_message(GENERAL, ALICE, "hello all")
    history = await client.conversations_history(channel=GENERAL)
    assert [m["text"] for m in history["messages"]] == ["hello all", "by form", "Run `ls`?"]
    assert history["messages"][2]["reply_count"] == 1
    replies = await client.conversations_replies(channel=GENERAL, ts=parent["ts"])
    assert [m["text"] for m in replies["messages"]] == ["Run `ls`?", "a reply"]
    assert replies["messages"][1]["parent_user_id"] == BOT_USER_ID

    updated = await client.chat_update(channel=GENERAL, ts=parent["ts"], text="Approved", blocks=[])
    assert updated["text"] == "Approved"
    assert card.text == "Approved" and card.blocks == [] and card.edits[0].text == "Run `ls`?"
    await client.reactions_add(channel=GENERAL, timestamp=user_message.ts, name="eyes")
    with pytest.raises(SlackApiError, match="already_reacted"):
        await client.reactions_add(channel=GENERAL, timestamp=user_message.ts, name="eyes")
    with pytest.raises(SlackApiError, match="cant_update_message"):
        await client.chat_update(channel=GENERAL, ts=user_message.ts, text="mine now")
    await client.chat_delete(channel=GENERAL, ts=reply["ts"])
    assert fake.message(GENERAL, reply["ts"]).deleted

    ephemeral = await client.chat_postEphemeral(channel=GENERAL, user=BOB, text="Not yours.")
    assert [m.text for m in fake.ephemerals(BOB)] == ["Not yours."]
    assert fake.ephemerals(BOB)[0].ts == ephemeral["message_ts"]
    with pytest.raises(SlackApiError, match="user_not_found"):
        await client.chat_postEphemeral(channel=GENERAL, user="U0STRANGER", text="x")
    fake.add_user("U0STRANGER", "stranger")
    with pytest.raises(SlackApiError, match="user_not_in_channel"):
        await client.chat_postEphemeral(channel=GENERAL, user="U0STRANGER", text="x")

    opened = await client.conversations_open(users=ALICE)
    assert opened["channel"]["id"] == fake.dm_channel(ALICE)
    await client.chat_postMessage(channel=ALICE, text="to the user id: their DM")
    assert fake.messages(fake.dm_channel(ALICE))[-1].text == "to the user id: their DM"
    info = await client.users_info(user=ALICE)
    assert info["user"]["name"] == "alice" and info["user"]["real_name"] == "Alice"
    with pytest.raises(SlackApiError, match="user_not_found"):
        await client.users_info(user="U0NOBODY01")


async def test_history_pages_by_cursor(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    for n in range(5):
        fake.channel_message(GENERAL, ALICE, f"m{n}")
    texts: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await client.conversations_history(channel=GENERAL, limit=2, cursor=cursor)
        pages += 1
        texts += [m["text"] for m in page["messages"]]
        cursor = page["response_metadata"]["next_cursor"]
        if not page["has_more"]:
            assert cursor == ""
            break
    assert (pages, texts) == (3, ["m4", "m3", "m2", "m1", "m0"])
    oldest = fake.history(GENERAL)[2].ts
    newer = await client.conversations_history(channel=GENERAL, oldest=oldest)
    assert [m["text"] for m in newer["messages"]] == ["m4", "m3"]


async def test_message_limits(fake: FakeSlackServer) -> None:
    fake.enforce_limits = False  # a dozen posts to one channel in a second
    client = web_client(fake)

    async def refused(**kwargs: Any) -> dict[str, Any]:
        with pytest.raises(SlackApiError) as caught:
            await client.chat_postMessage(channel=GENERAL, **kwargs)
        return dict(caught.value.response.data)

    await client.chat_postMessage(channel=GENERAL, text="x" * 40_000)
    assert (await refused(text="x" * 40_001))["error"] == "msg_too_long"
    with pytest.warns(UserWarning, match="top-level `text` argument is missing"):
        assert (await refused(text=""))["error"] == "no_text"
    divider = {"type": "divider"}
    await client.chat_postMessage(channel=GENERAL, text="fifty", blocks=[divider] * 50)
    too_many = await refused(text="x", blocks=[divider] * 51)
    assert too_many["error"] == "invalid_blocks"
    assert too_many["response_metadata"]["messages"] == [
        "[ERROR] no more than 50 items allowed [json-pointer:/blocks]"
    ]
    button = CARD_BLOCKS[1]["elements"][0]
    long_label = {**button, "text": {"type": "plain_text", "text": "x" * 76}}
    error = await refused(text="x", blocks=[{"type": "actions", "elements": [long_label]}])
    assert error["response_metadata"]["messages"] == [
        "[ERROR] must be less than 76 characters [json-pointer:/blocks/0/elements/0/text/text]"
    ]
    twice = [{"type": "actions", "elements": [button, button]}]
    error = await refused(text="x", blocks=twice)
    assert "duplicate action_id" in error["response_metadata"]["messages"][0]
    long_id = {**button, "action_id": "a" * 256}
    error = await refused(text="x", blocks=[{"type": "actions", "elements": [long_id]}])
    assert error["error"] == "invalid_blocks"
    same_block = [{**divider, "block_id": "b"}, {**divider, "block_id": "b"}]
    assert (await refused(text="x", blocks=same_block))["error"] == "invalid_blocks"
    mrkdwn_header = [{"type": "header", "text": {"type": "mrkdwn", "text": "*no*"}}]
    assert (await refused(text="x", blocks=mrkdwn_header))["error"] == "invalid_blocks"


async def test_files_upload_v2_shares_an_upload_into_a_thread(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    parent = await client.chat_postMessage(channel=GENERAL, text="a thread")
    audio = b"OggS" + bytes(100)
    shared = await client.files_upload_v2(
        channel=GENERAL,
        thread_ts=parent["ts"],
        file=audio,
        filename="voice-message.ogg",
        title="Voice message",
    )
    file = shared["file"]
    assert (file["name"], file["title"], file["mimetype"]) == (
        "voice-message.ogg",
        "Voice message",
        "audio/ogg",
    )
    share = file["shares"]["public"][GENERAL][0]
    message = fake.message(GENERAL, share["ts"])
    assert message.thread_ts == parent["ts"] and message.files[0]["id"] == file["id"]
    upload = fake.uploads[file["id"]]
    assert upload.data == audio and upload.shared_in == GENERAL
    methods = [c.method for c in fake.calls]
    assert methods[-2:] == ["files.getUploadURLExternal", "files.completeUploadExternal"]
    history = await client.conversations_replies(channel=GENERAL, ts=parent["ts"])
    assert history["messages"][-1]["files"][0]["id"] == file["id"]
    assert history["messages"][-1]["subtype"] == "file_share"

    async def error_of(call: Any) -> str:
        with pytest.raises(SlackApiError) as caught:
            await call
        return str(caught.value.response["error"])

    files = [{"id": file["id"], "title": "again"}]
    assert await error_of(client.files_completeUploadExternal(files=files)) == "file_not_found"
    announced = await client.files_getUploadURLExternal(filename="x.ogg", length=4)
    assert urlsplit(announced["upload_url"]).hostname == "127.0.0.1"
    never_sent = [{"id": announced["file_id"]}]
    assert await error_of(client.files_completeUploadExternal(files=never_sent)) == (
        "file_not_found"
    )
    async with httpx.AsyncClient() as http:
        assert (await http.post(announced["upload_url"], content=b"12345")).status_code == 400
        assert (await http.post(announced["upload_url"], content=b"1234")).status_code == 200
        assert (await http.post(announced["upload_url"], content=b"1234")).status_code == 404
    wrong_thread = client.files_completeUploadExternal(
        files=never_sent, channel_id=GENERAL, thread_ts="1.000001"
    )
    assert await error_of(wrong_thread) == "invalid_thread_ts"
    fake.scopes = fake.scopes - {"files:write"}
    assert await error_of(client.files_getUploadURLExternal(filename="x", length=1)) == (
        "missing_scope"
    )


async def test_rate_limits_and_faults(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    fake.rate_limit_next("chat.postMessage", retry_after=7)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=GENERAL, text="x")
    assert caught.value.response.status_code == 429
    assert caught.value.response["error"] == "ratelimited"
    assert caught.value.response.headers["Retry-After"] == "7"

    # slack_sdk retries a 429 only with the handler; it sleeps Retry-After plus up to 1 s.
    patient = web_client(fake, retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)])
    fake.rate_limit_next("chat.postMessage", retry_after=0)
    sent = await patient.chat_postMessage(channel=GENERAL, text="after a 429")
    assert sent["ok"] and fake.count_429 == 2
    assert [c.status for c in fake.calls_to("chat.postMessage")][-2:] == [429, 200]

    fake.fail_next("chat.update", "internal_error", status=500)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_update(channel=GENERAL, ts=sent["ts"], text="y")
    assert (caught.value.response.status_code, caught.value.response["error"]) == (
        500,
        "internal_error",
    )
    await client.chat_update(channel=GENERAL, ts=sent["ts"], text="y")

    # About one message a second per channel: a burst of five passes, the sixth waits.
    fake.add_channel(ELSEWHERE, "elsewhere")
    for n in range(5):
        await client.chat_postMessage(channel=ELSEWHERE, text=f"burst {n}")
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=ELSEWHERE, text="one too many")
    assert caught.value.response.status_code == 429
    assert int(caught.value.response.headers["Retry-After"]) >= 1
    await client.chat_postMessage(channel=GENERAL, text="another channel is not limited")


async def test_socket_url_takes_one_connection_and_the_app_token(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    opened = await client.apps_connections_open(app_token=fake.app_token)
    assert opened["url"].startswith(fake.socket_base_url + "?ticket=")
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(opened["url"]) as socket:
            hello = await socket.receive_json()
            assert hello["type"] == "hello"
            assert hello["connection_info"]["app_id"] == "A0FAKEAPP1"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(opened["url"])  # the ticket is spent
        assert refused.value.status == 403
    with pytest.raises(SlackApiError, match="invalid_auth"):
        await client.apps_connections_open(app_token="xapp-1-wrong")


# -- Socket Mode with bolt -------------------------------------------------------------------


async def test_bolt_answers_a_dm_a_mention_and_its_thread(fake: FakeSlackServer) -> None:
    app, seen = build_app(fake)
    async with socket_mode(fake, app):
        dm = fake.dm(ALICE, "hello")
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        assert fake.messages(dm_channel)[0].text == "echo: hello"
        assert seen.messages[0]["channel_type"] == "im"
        assert seen.messages[0]["ts"] == dm.ts

        mention = fake.mention(GENERAL, ALICE, "what is up?")
        await until(lambda: len(fake.messages(GENERAL)) == 1)
        reply = fake.messages(GENERAL)[0]
        assert (reply.text, reply.thread_ts) == ("On it.", mention.ts)
        # One mention, two events: app_mention and message, one client_msg_id.
        pair = fake.deliveries_for(mention)
        assert sorted(d.event["type"] for d in pair) == ["app_mention", "message"]
        assert len({d.event_id for d in pair}) == 2
        assert {d.event["client_msg_id"] for d in pair} == {mention.client_msg_id}

        fake.thread_message(GENERAL, BOB, "and without a mention?", mention.ts)
        await until(lambda: len(fake.messages(GENERAL)) == 2)
        assert fake.messages(GENERAL)[1].text == "in thread: and without a mention?"
        assert fake.messages(GENERAL)[1].thread_ts == mention.ts
        fake.channel_message(GENERAL, BOB, "not in a thread")  # no mention, no answer
        await until(lambda: all_acked(fake))
        assert len(fake.messages(GENERAL)) == 2
        # The bot's own posts come back as events; bolt acks and drops them.
        echoes = [d for d in fake.deliveries if (d.event or {}).get("bot_id") == BOT_ID]
        assert len(echoes) == 3 and all(d.acked for d in echoes)
        assert all(len(d.attempts) == 1 for d in fake.deliveries)
        assert len(fake.calls_to("auth.test")) == 1  # bolt asks once, at the first event


async def test_click_is_acked_and_the_card_updated(fake: FakeSlackServer) -> None:
    app, seen = build_app(fake)
    async with socket_mode(fake, app):
        fake.dm(ALICE, "card")
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        card = fake.messages(dm_channel)[0]
        assert card.action_ids == ["approve", "reject"]

        click = fake.click(card, ALICE, "approve")
        # bolt acks once the listener called ack(); the listener goes on meanwhile.
        await until(lambda: card.text == "Approved" and click.acked)
        assert click.ack_time is not None
        assert click.ack_time - click.attempts[0].time < fake.ack_timeout
        action = seen.clicks[0]["actions"][0]
        assert (action["action_id"], action["value"], action["block_id"]) == (
            "approve",
            "call-1",
            "card",
        )
        assert card.edits[0].text == "Run ls -la?"
        assert card.blocks[0]["text"]["text"] == "✅ Approved"
        assert fake.calls_to("chat.update")[0].params["ts"] == card.ts

        # A stranger's click is refused with an ephemeral message only they see.
        shared = await app.client.chat_postMessage(channel=GENERAL, text="card", blocks=CARD_BLOCKS)
        fake.click(fake.message(GENERAL, shared["ts"]), BOB, "approve")
        await until(lambda: len(fake.ephemerals(BOB)) == 1)
        assert fake.ephemerals(BOB)[0].text == "Not yours."
        assert fake.message(GENERAL, shared["ts"]).edits == []


async def test_reject_opens_a_modal_and_its_submission_decides(fake: FakeSlackServer) -> None:
    app, seen = build_app(fake)
    async with socket_mode(fake, app):
        fake.dm(ALICE, "card")
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        card = fake.messages(dm_channel)[0]

        click = fake.click(card, ALICE, "reject")
        await until(lambda: len(fake.open_views(ALICE)) == 1)
        view = fake.open_views(ALICE)[0]
        assert view.callback_id == "reject_reason"
        assert json.loads(view.private_metadata) == {"channel": dm_channel, "ts": card.ts}
        with pytest.raises(SlackApiError, match="exchanged_trigger_id"):
            await app.client.views_open(
                trigger_id=click.payload["trigger_id"], view=reason_view(dm_channel, card.ts)
            )

        blank = fake.submit_view(view, ALICE, {"text": "  "})
        await until(lambda: blank.acked)
        assert blank.ack_payload == {"response_action": "errors", "errors": {"reason": "Say why."}}
        assert not view.closed and view.errors == {"reason": "Say why."}

        submitted = fake.submit_view(view, ALICE, {"text": "too risky"})
        await until(lambda: card.text == "Rejected: too risky" and view.closed)
        assert seen.submissions == ["  ", "too risky"]
        assert submitted.payload["view"]["state"]["values"] == {
            "reason": {"text": {"type": "plain_text_input", "value": "too risky"}}
        }


async def test_expired_and_unknown_triggers(fake: FakeSlackServer) -> None:
    fake.trigger_ttl = 0.05
    client = web_client(fake)
    card = await client.chat_postMessage(channel=GENERAL, text="card", blocks=CARD_BLOCKS)
    app, _seen = build_app(fake)
    async with socket_mode(fake, app):
        # A trigger id used after trigger_ttl (Slack: 3 s) is refused.
        late = fake.click(fake.message(GENERAL, card["ts"]), ALICE, "approve")
        await until(lambda: late.acked)
    await asyncio.sleep(fake.trigger_ttl + 0.01)
    with pytest.raises(SlackApiError, match="expired_trigger_id"):
        await client.views_open(trigger_id=late.payload["trigger_id"], view=reason_view("C", "1"))
    with pytest.raises(SlackApiError, match="invalid_trigger_id"):
        await client.views_open(trigger_id="1.2.nonsense", view=reason_view("C", "1"))


async def test_slash_command_acked_and_answered(fake: FakeSlackServer) -> None:
    app, seen = build_app(fake)
    async with socket_mode(fake, app):
        delivery = fake.slash(GENERAL, ALICE, "/chathub", "jobs")
        await until(lambda: len(fake.messages(GENERAL)) == 1 and delivery.acked)
        assert delivery.ack_payload == {"text": "Running jobs…"}
        assert [(m.text, m.via) for m in fake.ephemerals(ALICE, GENERAL)] == [
            ("Running jobs…", "ack")
        ]
        posted = fake.messages(GENERAL)[0]
        assert (posted.text, posted.via) == ("jobs: done", "response_url")
        assert [r.effect for r in fake.responses] == ["in_channel"]
        assert seen.commands[0]["command"] == "/chathub"
        assert "thread_ts" not in seen.commands[0]


@pytest.mark.parametrize("reason", ["refresh_requested", "warning"])
async def test_disconnect_envelope_reconnect_loses_nothing(
    fake: FakeSlackServer, reason: str
) -> None:
    app, _seen = build_app(fake)
    async with socket_mode(fake, app):
        assert len(fake.calls_to("apps.connections.open")) == 1
        fake.disconnect_socket(reason)
        said = fake.dm(ALICE, "said while reconnecting")
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        assert fake.messages(dm_channel)[0].text == "echo: said while reconnecting"
        # The SDK reconnects on any disconnect envelope, through a new URL, and closes the
        # old connection (after a warning it may answer there first).
        await until(lambda: len(fake.connections) == 2 and fake.live_connections == 1)
        assert len(fake.calls_to("apps.connections.open")) == 2
        assert fake.connections[0].disconnect_reason == reason
        assert fake.connections[0].closed_by is not None
        (dm,) = fake.deliveries_for(said)
        if reason == "refresh_requested":  # the draining connection got nothing new
            assert [a.connection for a in dm.attempts] == [1]
        fake.dm(ALICE, "and after")
        await until(lambda: len(fake.messages(dm_channel)) == 2)
        await until(lambda: all_acked(fake))


async def test_dropped_socket_reconnects_and_the_event_waits(fake: FakeSlackServer) -> None:
    app, _seen = build_app(fake)
    # The aiohttp client notices a dead connection at its next ping_interval tick.
    async with socket_mode(fake, app, ping_interval=0.2):
        fake.drop_socket()
        await until(lambda: fake.live_connections == 0)
        (waiting,) = fake.deliveries_for(fake.dm(ALICE, "while nobody listens"))
        assert waiting.attempts == []  # no connection: it waits for the next one
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        assert fake.connections[0].closed_by == "drop"
        assert [a.connection for a in waiting.attempts] == [1]


async def test_unacked_envelope_is_redelivered(fake: FakeSlackServer) -> None:
    fake.ack_timeout = 0.2
    app, seen = build_app(fake)
    refused: set[str] = set()

    @app.middleware
    async def busy_once(req: AsyncBoltRequest, body: dict[str, Any], next: Any) -> Any:
        retry = req.headers.get("x-slack-retry-num", [None])[0]
        event = body.get("event") or {}
        if event.get("user") == ALICE:
            seen.retry_headers.append(retry)
            if body["event_id"] not in refused:
                refused.add(body["event_id"])
                return BoltResponse(status=503, body="busy")  # bolt's handler acks nothing
        return await next()

    async with socket_mode(fake, app):
        (delivery,) = fake.deliveries_for(fake.dm(ALICE, "try again"))
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        await until(lambda: delivery.acked)
        assert [(a.number, a.failure) for a in delivery.attempts] == [(0, "timeout"), (1, None)]
        assert len(set(delivery.envelope_ids)) == 2
        second = next(
            m for m in fake.connections[0].sent if m.get("envelope_id") == delivery.envelope_ids[1]
        )
        assert second["retry_attempt"] == 1 and second["retry_reason"] == "timeout"
        assert second["payload"]["event_id"] == delivery.event_id
        assert seen.retry_headers == ["0", "1"]

        # An event no listener takes: bolt answers 404 and acks nothing, so Slack sends
        # it three more times and gives up.
        nobody = fake.push_event({"type": "reaction_added", "user": BOB, "reaction": "eyes"})
        await until(lambda: nobody.expired)
        assert [a.number for a in nobody.attempts] == [0, 1, 2, 3]
        assert not nobody.acked


async def test_link_disabled_stops_new_connections(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    opened = await client.apps_connections_open(app_token=fake.app_token)
    async with aiohttp.ClientSession() as session, session.ws_connect(opened["url"]) as socket:
        assert (await socket.receive_json())["type"] == "hello"
        fake.disconnect_socket("link_disabled", close_after=0.0)
        message = await socket.receive_json()
        assert (message["type"], message["reason"]) == ("disconnect", "link_disabled")
        closing = await socket.receive()
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    with pytest.raises(SlackApiError, match="socket_mode_disabled"):
        await client.apps_connections_open(app_token=fake.app_token)
    with pytest.raises(RuntimeError, match="no Socket Mode connection"):
        fake.slash(GENERAL, ALICE, "/chathub")


# -- the HTTP Events API with bolt -----------------------------------------------------------


async def test_http_events_are_signed_and_forgeries_refused(fake: FakeSlackServer) -> None:
    app, seen = build_app(fake)
    with http_mode(fake, app) as url:
        assert fake.verify_url(url)
        assert not fake.verify_url(url, sign="forged")
        (good,) = fake.deliveries_for(fake.dm(ALICE, "over http"))
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        await until(lambda: good.acked)
        assert fake.messages(dm_channel)[0].text == "echo: over http"
        assert good.transport == "http" and good.attempts[0].status == 200

        for sign in ("forged", "expired", "missing"):
            (bad,) = fake.deliveries_for(fake.dm(ALICE, f"{sign} signature", sign=sign))  # type: ignore[arg-type]
            await until(lambda bad=bad: bad.expired)
            # Refused (401): Slack takes it for a failure and retries, in vain.
            assert [a.status for a in bad.attempts] == [401, 401, 401, 401]
            assert [a.failure for a in bad.attempts] == ["http_error"] * 4
        assert [m["text"] for m in seen.messages] == ["over http"]

    # The same check without a server: bolt's own dispatch.
    body = json.dumps({"type": "event_callback", "event": {"type": "app_mention"}})
    forged = fake.signed_headers(body, content_type="application/json", sign="forged")
    response = await app.async_dispatch(AsyncBoltRequest(body=body, headers=forged))
    assert response.status == 401


async def test_http_retries_a_slow_answer_and_respects_no_retry(fake: FakeSlackServer) -> None:
    fake.http_timeout = 0.3
    app, seen = build_app(fake)
    slowed: set[str] = set()
    finished: list[str] = []

    @app.middleware
    async def slow_once(req: AsyncBoltRequest, body: dict[str, Any], next: Any) -> Any:
        event = body.get("event") or {}
        seen.retry_headers.append(req.headers.get("x-slack-retry-num", [None])[0])
        if event.get("text") == "slow" and body["event_id"] not in slowed:
            slowed.add(body["event_id"])
            # Answer only after Slack gave up waiting (http_timeout): it retries meanwhile.
            (delivery,) = [d for d in fake.deliveries if d.event_id == body["event_id"]]
            await until(lambda: delivery.attempts[0].failure == "http_timeout")
            finished.append(body["event_id"])
            return BoltResponse(status=200, body="")
        if event.get("text") == "broken":
            return BoltResponse(status=500, body="", headers={"x-slack-no-retry": "1"})
        return await next()

    with http_mode(fake, app):
        (slow,) = fake.deliveries_for(fake.dm(ALICE, "slow"))
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        await until(lambda: slow.acked)
        assert [(a.number, a.failure) for a in slow.attempts] == [(0, "http_timeout"), (1, None)]
        await until(lambda: finished == [slow.event_id])  # the late answer, ignored
        assert slow.attempts[0].status is None
        assert seen.retry_headers[:2] == [None, "1"]

        (broken,) = fake.deliveries_for(fake.dm(ALICE, "broken"))
        await until(lambda: broken.expired)
        assert [(a.status, a.failure) for a in broken.attempts] == [(500, "http_error")]


async def test_http_interactions_and_commands(fake: FakeSlackServer) -> None:
    app, seen = build_app(fake)
    with http_mode(fake, app):
        fake.dm(ALICE, "card")
        dm_channel = fake.dm_channel(ALICE)
        await until(lambda: len(fake.messages(dm_channel)) == 1)
        card = fake.messages(dm_channel)[0]

        fake.click(card, ALICE, "reject")
        await until(lambda: len(fake.open_views(ALICE)) == 1)
        view = fake.open_views(ALICE)[0]
        blank = fake.submit_view(view, ALICE, {"reason": {"text": " "}})
        await until(lambda: blank.acked)
        assert blank.ack_payload == {"response_action": "errors", "errors": {"reason": "Say why."}}
        assert not view.closed
        fake.submit_view(view, ALICE, {"text": "no"})
        await until(lambda: card.text == "Rejected: no" and view.closed)

        command = fake.slash(GENERAL, ALICE, "/chathub", "help")
        await until(lambda: command.acked and len(fake.messages(GENERAL)) == 1)
        assert [m.text for m in fake.ephemerals(ALICE, GENERAL)] == ["Running help…"]
        assert fake.messages(GENERAL)[0].text == "help: done"
        assert seen.commands[0]["text"] == "help"
        await until(lambda: all_acked(fake))
        assert all(d.transport == "http" for d in fake.deliveries)


async def test_response_url_replaces_deletes_and_expires(fake: FakeSlackServer) -> None:
    client = web_client(fake)
    card = await client.chat_postMessage(channel=GENERAL, text="card", blocks=CARD_BLOCKS)
    message = fake.message(GENERAL, card["ts"])
    app, _seen = build_app(fake)
    async with socket_mode(fake, app):
        click = fake.click(message, BOB, "reject")
        await until(lambda: click.acked)
    url = click.payload["response_url"]
    async with httpx.AsyncClient() as http:
        replaced = await http.post(url, json={"replace_original": True, "text": "Replaced"})
        assert replaced.json() == {"ok": True}
        assert (message.text, message.blocks) == ("Replaced", [])  # replaced whole
        ephemeral = await http.post(url, json={"text": "only you"})
        assert ephemeral.status_code == 200
        assert fake.ephemerals(BOB)[-1].text == "only you"
        deleted = await http.post(url, json={"delete_original": True})
        assert deleted.status_code == 200 and message.deleted
        for _ in range(2):
            await http.post(url, json={"text": "again"})
        used = await http.post(url, json={"text": "a sixth time"})
        assert (used.status_code, used.json()["error"]) == (404, "used_url")
    assert [r.effect for r in fake.responses] == [
        "replaced",
        "ephemeral",
        "deleted",
        "ephemeral",
        "ephemeral",
        "used_url",
    ]
