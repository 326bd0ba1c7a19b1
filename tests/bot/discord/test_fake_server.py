"""discord.py 2.7.1 against the fake Discord, redirected but otherwise unpatched.

Each test drives a real ``discord.Client`` (default intents: no message content) over real
HTTP and a real WebSocket. Two class attributes are redirected, and restored after each
test: ``Route.BASE`` to the fake's REST root, and ``DiscordWebSocket.DEFAULT_GATEWAY``,
which the client's ``setup_hook`` sets to what the fake's ``GET /gateway/bot`` answers:
discord.Client never asks that endpoint itself and dials DEFAULT_GATEWAY instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from urllib.parse import urlsplit

import discord
import httpx
import pytest
import yarl
from discord.gateway import DiscordWebSocket

from bot.discord.voice_message import voice_message, waveform_of
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.ogg import opus_silence

TOKEN = "test-discord-bot-token"
ALICE = 200_000_000_000_000_001
GUILD = 300_000_000_000_000_001
GENERAL = 300_000_000_000_000_002
MESSAGES = "POST /channels/{channel_id}/messages"
TIMEOUT = 5.0


async def until(condition: Callable[[], object]) -> None:
    """Wait until ``condition()`` holds: the fake and the client run on other loops."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the condition")
        await asyncio.sleep(0.005)


class Bot(discord.Client):
    """A client that records what the gateway gives it."""

    def __init__(self) -> None:
        intents = discord.Intents.default()  # message_content stays off, as in the product
        # on_ready waits guild_ready_timeout (2 s) after the last GUILD_CREATE by default.
        super().__init__(intents=intents, guild_ready_timeout=0.05)
        self.tree = discord.app_commands.CommandTree(self)
        self.ready_count = 0
        self.resumed_count = 0
        self.received: list[discord.Message] = []
        self.interactions: list[discord.Interaction] = []
        self.identify_waits: list[bool] = []
        self.task: asyncio.Task[None] | None = None

    async def setup_hook(self) -> None:
        # discord.Client dials DEFAULT_GATEWAY, and dials it again after INVALID_SESSION.
        _shards, url, _limits = await self.http.get_bot_gateway()
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        # discord.py's own sleeps 5 s before every IDENTIFY but the first (Discord allows one
        # per 5 s); the product keeps it, the tests note the call and skip the wait.
        self.identify_waits.append(initial)

    async def on_ready(self) -> None:
        self.ready_count += 1

    async def on_resumed(self) -> None:
        self.resumed_count += 1

    async def on_message(self, message: discord.Message) -> None:
        self.received.append(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        self.interactions.append(interaction)

    def texts(self, user_id: int) -> list[str]:
        return [m.content for m in self.received if m.author.id == user_id]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscordServer]:
    with FakeDiscordServer(token=TOKEN) as server:
        server.add_user(ALICE, username="alice", global_name="Alice")
        server.add_guild(GUILD, channels=[GENERAL], name="Test guild", members=[ALICE])
        monkeypatch.setattr(discord.http.Route, "BASE", server.base_url)
        # Restored after the test, whatever setup_hook set it to.
        monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", DiscordWebSocket.DEFAULT_GATEWAY)
        yield server


@pytest.fixture
async def bot(fake: FakeDiscordServer) -> AsyncIterator[Bot]:
    client = Bot()
    task = client.task = asyncio.create_task(client.start(TOKEN))
    try:
        await until(lambda: client.ready_count or task.done())
        if task.done():
            task.result()  # raises what stopped it
        yield client
    finally:
        await client.close()
        with contextlib.suppress(discord.DiscordException, TimeoutError):
            await asyncio.wait_for(task, TIMEOUT)


async def test_the_client_identifies_and_gets_ready(fake: FakeDiscordServer, bot: Bot) -> None:
    assert bot.user is not None and bot.user.id == int(fake.bot_id)
    assert (fake.identify_count, fake.resume_count) == (1, 0)
    session = fake.session
    assert session is not None and session.event_names() == ["READY", "GUILD_CREATE"]
    assert session.intents == discord.Intents.default().value
    connection = fake.connections[0]
    assert connection.path == urlsplit(fake.gateway_url).path
    # zstd-stream instead when zstandard is importable; the fake speaks both.
    assert connection.query["compress"] in ("zlib-stream", "zstd-stream")
    assert (connection.query["v"], connection.query["encoding"]) == ("10", "json")
    assert connection.sent[0]["op"] == 10  # HELLO first
    await until(lambda: connection.heartbeats >= 1)  # discord.py beats at once on HELLO
    assert any(payload["op"] == 11 for payload in connection.sent)
    guild = bot.get_guild(GUILD)
    assert guild is not None and guild.name == "Test guild"
    assert guild.get_channel(GENERAL) is not None
    assert guild.me is not None and guild.me.id == bot.user.id
    routes = [call.route for call in fake.calls]
    assert routes == ["GET /users/@me", "GET /oauth2/applications/@me", "GET /gateway/bot"]


async def test_a_dm_reaches_on_message_and_the_reply_and_typing_land(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    pushed = fake.dm(ALICE, "hello bot")
    await until(lambda: bot.texts(ALICE))
    message = next(m for m in bot.received if m.author.id == ALICE)
    assert message.content == "hello bot"
    assert isinstance(message.channel, discord.DMChannel) and message.guild is None
    async with message.channel.typing():
        reply = await message.channel.send("hi")
    channel_id = pushed["channel_id"]
    assert [m.content for m in fake.messages(channel_id)] == ["hi"]
    assert reply.id == int(fake.messages(channel_id)[0].id)
    assert len(fake.typing_in(channel_id)) >= 1
    # Discord echoes the bot's own message to it.
    assert bot.user is not None
    await until(lambda: bot.texts(bot.user.id) == ["hi"])


async def test_guild_messages_carry_content_only_when_they_mention_the_bot(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    fake.channel_message(GUILD, GENERAL, ALICE, "are you there?", mentions_bot=True)
    fake.channel_message(GUILD, GENERAL, ALICE, "just chatting")
    await until(lambda: len(bot.texts(ALICE)) == 2)
    mention, other = (m for m in bot.received if m.author.id == ALICE)
    assert mention.content == f"<@{fake.bot_id}> are you there?"
    assert bot.user in mention.mentions
    assert mention.guild is not None and mention.guild.id == GUILD
    assert isinstance(mention.author, discord.Member)
    assert other.content == ""  # no message content intent


class Confirm(discord.ui.View):
    def __init__(self) -> None:
        super().__init__(timeout=30)
        self.clicked: list[str] = []

    @discord.ui.button(label="Approve", custom_id="approve", style=discord.ButtonStyle.success)
    async def approve(self, interaction: discord.Interaction, _button: discord.ui.Button) -> None:
        self.clicked.append("approve")
        await interaction.response.defer()

    @discord.ui.button(label="Deny", custom_id="deny", style=discord.ButtonStyle.danger)
    async def deny(self, interaction: discord.Interaction, _button: discord.ui.Button) -> None:
        self.clicked.append("deny")
        await interaction.response.send_message("denied", ephemeral=True)


async def test_button_clicks_reach_the_view_and_the_responses_are_recorded(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    channel = bot.get_channel(GENERAL)
    assert isinstance(channel, discord.TextChannel)
    view = Confirm()
    sent = await channel.send("Run it?", view=view)
    recorded = fake.message(GENERAL, sent.id)
    assert recorded.custom_ids == ["approve", "deny"]
    assert [c["label"] for c in recorded.components[0]["components"]] == ["Approve", "Deny"]

    fake.click(GENERAL, sent.id, ALICE, "approve")
    await until(lambda: len(fake.interaction_responses) == 1)
    clicked = bot.interactions[0]
    assert clicked.data is not None and clicked.data["custom_id"] == "approve"
    assert clicked.user.id == ALICE and clicked.message is not None
    assert fake.interaction_responses[0].type == 6  # a component's defer: deferred update

    fake.click(GENERAL, sent.id, ALICE, "deny")
    await until(lambda: len(fake.interaction_responses) == 2)
    denied = fake.interaction_responses[1]
    assert denied.type == 4 and denied.data is not None
    assert (denied.data["content"], denied.data["flags"]) == ("denied", 64)
    assert fake.messages(GENERAL)[-1].ephemeral
    assert view.clicked == ["approve", "deny"]


class Feedback(discord.ui.Modal, title="Feedback"):
    answer = discord.ui.TextInput(label="Answer", custom_id="answer")

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(f"thanks: {self.answer.value}")


async def test_a_synced_slash_command_opens_a_modal_whose_submit_is_answered(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    @bot.tree.command(name="feedback", description="Tell us")
    async def feedback(interaction: discord.Interaction) -> None:
        await interaction.response.send_modal(Feedback(custom_id="feedback-modal"))

    synced = await bot.tree.sync()
    assert [c.name for c in synced] == ["feedback"]
    assert [c["name"] for c in fake.commands] == ["feedback"]

    fake.slash(GENERAL, ALICE, "feedback")
    await until(lambda: len(fake.interaction_responses) == 1)
    opened = fake.interaction_responses[0]
    assert opened.type == 9 and opened.data is not None
    assert opened.data["custom_id"] == "feedback-modal"

    fake.modal_submit(GENERAL, ALICE, "feedback-modal", {"answer": "great"})
    await until(lambda: len(fake.interaction_responses) == 2)
    answered = fake.interaction_responses[1]
    assert answered.type == 4 and answered.data is not None
    assert answered.data["content"] == "thanks: great"
    assert fake.messages(GENERAL)[-1].content == "thanks: great"


@pytest.mark.parametrize("cut", ["close 4000", "drop"])
async def test_a_cut_connection_resumes_and_replays_what_was_missed(
    fake: FakeDiscordServer, bot: Bot, cut: str
) -> None:
    first = fake.connections[-1]
    if cut == "drop":
        assert fake.drop_gateway() == 1
    else:
        assert fake.close_gateway(4000) == 1
    fake.dm(ALICE, "while you were away")  # kept in the session until the client resumes
    await until(lambda: bot.resumed_count == 1)
    await until(lambda: "while you were away" in bot.texts(ALICE))
    await asyncio.sleep(0.05)  # a second delivery would be here by now
    assert bot.texts(ALICE) == ["while you were away"]
    assert (fake.identify_count, fake.resume_count, bot.ready_count) == (1, 1, 1)
    assert (first.closed_by, first.close_code) == (
        ("drop", 1006) if cut == "drop" else ("server", 4000)
    )
    session = fake.session
    assert session is not None and session.resumes == 1
    assert session.event_names() == ["READY", "GUILD_CREATE", "MESSAGE_CREATE", "RESUMED"]
    assert fake.connections[-1].path == urlsplit(fake.resume_gateway_url).path


async def test_invalid_session_makes_the_client_identify_anew(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    assert fake.invalid_session(resumable=False) == 1
    await until(lambda: bot.ready_count == 2)
    assert (fake.identify_count, fake.resume_count) == (2, 0)
    assert bot.identify_waits == [True, False]  # the second would have waited 5 s
    gateway = urlsplit(fake.gateway_url).path  # what /gateway/bot answered
    assert [c.path for c in fake.connections] == [gateway, gateway]
    old, new = fake.sessions
    assert old.invalidated and not new.invalidated
    fake.dm(ALICE, "still there?")
    await until(lambda: bot.texts(ALICE) == ["still there?"])


async def test_close_4004_ends_the_client_without_reconnecting(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    assert bot.task is not None
    fake.close_gateway(4004)
    with pytest.raises(discord.ConnectionClosed) as closed:
        await asyncio.wait_for(bot.task, TIMEOUT)
    assert closed.value.code == 4004
    assert (fake.identify_count, len(fake.connections)) == (1, 1)


async def test_a_wrong_token_fails_the_login_once(fake: FakeDiscordServer) -> None:
    client = discord.Client(intents=discord.Intents.default())
    try:
        with pytest.raises(discord.LoginFailure):
            await client.start("not-the-token")
    finally:
        await client.close()
    assert [(c.route, c.status) for c in fake.calls] == [("GET /users/@me", 401)]
    assert (fake.identify_count, fake.connections) == (0, [])


async def test_a_429_on_message_creation_is_waited_out_and_retried_once(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    channel = bot.get_channel(GENERAL)
    assert isinstance(channel, discord.TextChannel)
    fake.rate_limit_next(MESSAGES, retry_after=0.2)
    started = time.monotonic()
    await channel.send("after the limit")
    assert time.monotonic() - started >= 0.2
    assert [m.content for m in fake.messages(GENERAL)] == ["after the limit"]
    assert fake.count_429 == 1
    assert [c.status for c in fake.calls_to(MESSAGES)] == [429, 200]


def test_rest_errors_and_rate_limits_have_discords_shape(fake: FakeDiscordServer) -> None:
    headers = {"Authorization": f"Bot {TOKEN}"}
    with httpx.Client(base_url=fake.base_url, headers=headers, timeout=TIMEOUT) as http:
        missing = http.get("/no/such/route")
        assert (missing.status_code, missing.json()) == (
            404,
            {"message": "404: Not Found", "code": 0},
        )
        refused = http.get("/users/@me", headers={"Authorization": "Bot wrong"})
        assert refused.status_code == 401
        assert refused.json() == {"message": "401: Unauthorized", "code": 0}

        path = f"/channels/{GENERAL}/messages"
        too_long = http.post(path, json={"content": "x" * 2001})
        assert too_long.json()["code"] == 50035
        assert too_long.json()["errors"]["content"]["_errors"][0]["code"] == "BASE_TYPE_MAX_LENGTH"
        assert http.post(path, json={"content": ""}).json()["code"] == 50006
        for remaining in (2, 1, 0):  # the failures above counted, as on Discord
            sent = http.post(path, json={"content": "ok"})
            assert sent.status_code == 200 and sent.json()["author"]["id"] == fake.bot_id
            assert sent.headers["X-RateLimit-Limit"] == "5"
            assert sent.headers["X-RateLimit-Remaining"] == str(remaining)
            assert 0 < float(sent.headers["X-RateLimit-Reset-After"]) <= 5
            assert sent.headers["X-RateLimit-Bucket"]
        limited = http.post(path, json={"content": "one too many"})
        assert limited.status_code == 429
        body = limited.json()
        assert body["message"] == "You are being rate limited." and body["global"] is False
        assert 0 < body["retry_after"] <= 5
        assert limited.headers["X-RateLimit-Remaining"] == "0"
        assert limited.headers["Retry-After"] and limited.headers["Via"]
    assert fake.count_429 == 1
    assert [m.content for m in fake.messages(GENERAL)] == ["ok", "ok", "ok"]


async def test_a_voice_message_posted_through_discord_py_keeps_its_duration_and_waveform(
    fake: FakeDiscordServer, bot: Bot
) -> None:
    audio = opus_silence(50)  # one second
    route, form, file = voice_message(GENERAL, audio)
    answer = await bot.http.request(route, files=[file], form=form)
    channel = bot.get_channel(GENERAL)
    assert isinstance(channel, discord.TextChannel)
    message = await channel.fetch_message(int(answer["id"]))
    assert message.flags.voice and message.content == ""
    attachment = message.attachments[0]
    assert attachment.is_voice_message() and attachment.content_type == "audio/ogg"
    assert attachment.duration == 1.0 and attachment.waveform == waveform_of(audio)
    assert len(attachment.waveform or b"") == 10
    assert await attachment.read() == audio
    with pytest.raises(discord.HTTPException) as edited:
        await message.edit(content="words after all")
    assert edited.value.code == 50162


def test_a_voice_message_is_one_audio_file_with_its_metadata_and_nothing_else() -> None:
    audio = opus_silence()
    meta = {"id": 0, "filename": "v.ogg", "duration_secs": 0.5, "waveform": "AAAA"}

    def post(http: httpx.Client, payload: dict, files: list) -> httpx.Response:
        data = {"payload_json": json.dumps({"flags": 8192, **payload})}
        return http.post(f"/channels/{GENERAL}/messages", data=data, files=files)

    ogg = ("files[0]", ("v.ogg", audio, "audio/ogg"))
    with FakeDiscordServer(token=TOKEN, enforce_limits=False) as server:
        server.add_guild(GUILD, channels=[GENERAL], members=[ALICE])
        headers = {"Authorization": f"Bot {TOKEN}"}
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=TIMEOUT) as http:
            words = post(http, {"content": "hi", "attachments": [meta]}, [ogg])
            assert words.status_code == 400 and words.json()["code"] == 50159
            text_file = ("files[0]", ("v.txt", b"words", "text/plain"))
            assert post(http, {"attachments": [meta]}, [text_file]).json()["code"] == 50160
            two = [ogg, ("files[1]", ("w.ogg", audio, "audio/ogg"))]
            assert post(http, {"attachments": [meta]}, two).json()["code"] == 50160
            bare = {"attachments": [{"id": 0, "filename": "v.ogg"}]}
            assert post(http, bare, [ogg]).json()["code"] == 50161
            flat = {"attachments": [{**meta, "waveform": ""}]}
            assert post(http, flat, [ogg]).json()["code"] == 50161
            sent = post(http, {"attachments": [meta]}, [ogg])
            assert sent.status_code == 200
            assert sent.json()["attachments"][0]["duration_secs"] == 0.5
    voice = server.messages(GENERAL)[0].voice
    assert voice == (audio, 0.5, b"\x00\x00\x00")
