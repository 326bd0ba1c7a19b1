"""A fake Discord API: REST over real HTTP and the gateway over a real WebSocket, on 127.0.0.1.

It runs uvicorn in a background thread with its own event loop, like the fake Telegram, so
synchronous tests, async tests and subprocesses can all use it. REST lives under
``base_url`` (``http://127.0.0.1:PORT/api/v10``: what ``discord.http.Route.BASE`` or the
product's ``DISCORD_API_URL`` holds); ``GET /gateway/bot`` names the gateway on the same
server, ``ws://127.0.0.1:PORT/gateway``::

    with FakeDiscordServer() as fake:
        fake.add_guild(GUILD, channels=[GENERAL], members=[ALICE])
        ...  # start the bot against fake.base_url, wait until it is ready
        fake.dm(ALICE, "hello")
        ...  # let it answer
        assert fake.messages(fake.dm_channel_id(ALICE))[-1].content == "Hi!"

REST requests need ``Authorization: Bot <token>`` (else 401), except the interaction
callback and the interaction webhooks, which their token authenticates, as on Discord.
Errors have Discord's shape, ``{"message": ..., "code": ...}`` (``errors`` for an invalid
form body); unknown routes answer 404. The fake enforces the limits a bot trips over:
2000 characters of content, embed sizes, 5 rows of 5 buttons, custom ids of 1..100
characters and unique, no empty message, one initial response per interaction within
``interaction_timeout`` (3 s), follow-ups only after it, edits of the bot's own messages.
The first follow-up after a deferred message (type 5) fills its "thinking" message.
Voice messages (``IS_VOICE_MESSAGE``, flag 8192) are checked as Discord checks them: no
content, embeds, components or stickers (50159), one audio file (50160), its attachment
with ``duration_secs`` and a base64 ``waveform`` of at most 256 bytes (50161), never
edited (50162); the attachment keeps its duration and waveform (``SentMessage.voice``).

Rate limits as Discord sends them: every answer carries ``X-RateLimit-*`` headers of a
bucket per route and major parameter (5 messages per 5 s per channel; see ``BUCKETS``),
and a request over its bucket gets 429 (``enforce_limits=False`` turns that off).
``rate_limit_next`` scripts a 429 (route or global), ``fail_next`` any other error; every
429 sent is counted in ``count_429``. 429s carry ``Via``, as Discord's do: discord.py takes
a 429 without it for a Cloudflare ban and does not retry.

The gateway speaks v10 JSON, zlib-stream compressed when asked (discord.py asks for it, or
for zstd-stream when ``zstandard`` is importable): HELLO, IDENTIFY (token checked: 4004;
privileged intents checked: 4014), READY then a GUILD_CREATE per guild, heartbeats and
their ACKs, RESUME (the missed events replayed, then RESUMED) and INVALID_SESSION. Every
dispatch of a session is kept with its sequence number (``sessions``), every connection is
recorded (``connections``). Without the message content intent, as on Discord, a guild
message carries its content, embeds, attachments and components only when it mentions the
bot (or the bot wrote it); DMs always do. The bot's own REST messages, edits and deletes
come back as MESSAGE_CREATE/UPDATE/DELETE (``echo_bot_messages``), as on Discord.

Test controls are thread-safe (the state is behind a lock; sends go through the server's
loop): ``dm``, ``channel_message``, ``click``, ``modal_submit``, ``slash`` push events;
``close_gateway``, ``drop_gateway``, ``invalid_session``, ``reconnect_gateway`` break the
connection. Pushing while no session is open raises: Discord would lose the event.

discord.py 2.7.1 itself connects ``discord.Client`` to ``DiscordWebSocket.DEFAULT_GATEWAY``
(only ``AutoShardedClient`` asks ``/gateway/bot``) and goes back there after an
INVALID_SESSION: code that runs it against this fake must point that attribute at the URL
``/gateway/bot`` answers, besides ``Route.BASE``. READY's ``resume_gateway_url`` is the
same gateway at another path (Discord's is another host), so a RESUME's connection shows.
discord.py also sleeps 5 s in ``Client.before_identify_hook`` before every IDENTIFY but
the first; the fake does not enforce Discord's one IDENTIFY per 5 s.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import hashlib
import json
import math
import mimetypes
import re
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.fakes.background import BackgroundServer

Json = dict[str, Any]

API_VERSION = 10
API_ROOT = f"/api/v{API_VERSION}"
GATEWAY_PATH = "/gateway"
# Discord's resume_gateway_url is another host than /gateway/bot's; here another path of
# the same server, so tests can tell a RESUME's connection from a fresh IDENTIFY's.
RESUME_GATEWAY_PATH = "/gateway-resume"
#: An attachment's download from the CDN (``hold_answers`` takes it too).
DOWNLOAD = "GET /attachments/{channel_id}/{attachment_id}/{filename}"
DISCORD_EPOCH_MS = 1_420_070_400_000

DEFAULT_TOKEN = "fake-discord-bot-token"
DEFAULT_BOT_ID = "1100000000000000001"
DEFAULT_OWNER_ID = "1100000000000000002"

# Gateway opcodes.
OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_PRESENCE_UPDATE = 3
OP_VOICE_STATE_UPDATE = 4
OP_RESUME = 6
OP_RECONNECT = 7
OP_REQUEST_GUILD_MEMBERS = 8
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11

# Gateway intents (the bits of IDENTIFY's ``intents``).
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_PRESENCES = 1 << 8
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = {
    "members": INTENT_GUILD_MEMBERS,
    "presences": INTENT_GUILD_PRESENCES,
    "message_content": INTENT_MESSAGE_CONTENT,
}
_ALL_INTENTS = (1 << 26) - 1

# Close codes after which Discord will not resume the session.
_FINAL_CLOSE_CODES = frozenset({1000, 1001, 4004, 4007, 4009, 4010, 4011, 4012, 4013, 4014})
#: Client payloads allowed per connection per minute (then 4008, as Discord).
GATEWAY_SEND_LIMIT = 120

# Interaction and callback types.
INTERACTION_COMMAND = 2
INTERACTION_COMPONENT = 3
INTERACTION_MODAL_SUBMIT = 5
CALLBACK_MESSAGE = 4
CALLBACK_DEFERRED_MESSAGE = 5
CALLBACK_DEFERRED_UPDATE = 6
CALLBACK_UPDATE_MESSAGE = 7
CALLBACK_AUTOCOMPLETE = 8
CALLBACK_MODAL = 9
_ALLOWED_CALLBACKS = {
    INTERACTION_COMMAND: {CALLBACK_MESSAGE, CALLBACK_DEFERRED_MESSAGE, CALLBACK_MODAL},
    INTERACTION_COMPONENT: {
        CALLBACK_MESSAGE,
        CALLBACK_DEFERRED_MESSAGE,
        CALLBACK_DEFERRED_UPDATE,
        CALLBACK_UPDATE_MESSAGE,
        CALLBACK_MODAL,
    },
    INTERACTION_MODAL_SUBMIT: {
        CALLBACK_MESSAGE,
        CALLBACK_DEFERRED_MESSAGE,
        CALLBACK_DEFERRED_UPDATE,
        CALLBACK_UPDATE_MESSAGE,
    },
}
#: How long an interaction token takes follow-ups (Discord: 15 minutes).
FOLLOWUP_WINDOW_S = 15 * 60

# Message flags.
FLAG_EPHEMERAL = 1 << 6
FLAG_LOADING = 1 << 7
FLAG_VOICE_MESSAGE = 1 << 13
FLAG_COMPONENTS_V2 = 1 << 15

MAX_CONTENT_LENGTH = 2000
MAX_EMBEDS = 10
MAX_EMBED_TOTAL = 6000
MAX_ROWS = 5
MAX_ROW_WIDTH = 5
MAX_CUSTOM_ID = 100
MAX_BUTTON_LABEL = 80
_SELECT_TYPES = frozenset({3, 5, 6, 7, 8})
_COMMAND_NAME = re.compile(r"^[-_\w]{1,32}$")
_USER_MENTION = re.compile(r"<@!?(\d+)>")

#: Per-route buckets ``(limit, window seconds)``, per major parameter (channel, guild,
#: webhook); other routes get ``DEFAULT_BUCKET``. Keys are ``"METHOD /path"`` as in
#: ``FakeDiscordServer.calls`` (discord.py's ``Route.key`` spells them the same).
BUCKETS: dict[str, tuple[int, float]] = {
    "POST /channels/{channel_id}/messages": (5, 5.0),
    "PATCH /channels/{channel_id}/messages/{message_id}": (5, 5.0),
    "DELETE /channels/{channel_id}/messages/{message_id}": (5, 5.0),
    "POST /channels/{channel_id}/typing": (5, 5.0),
    "PUT /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me": (1, 0.25),
    "PUT /applications/{application_id}/commands": (2, 20.0),
    "PUT /applications/{application_id}/guilds/{guild_id}/commands": (2, 20.0),
}
DEFAULT_BUCKET = (50, 1.0)

# GUILD_CREATE's extra fields, which a REST guild object lacks.
_GATEWAY_GUILD_KEYS = frozenset(
    {
        "channels",
        "threads",
        "members",
        "voice_states",
        "presences",
        "joined_at",
        "large",
        "unavailable",
        "lazy",
        "member_count",
        "stage_instances",
        "guild_scheduled_events",
        "soundboard_sounds",
    }
)

# @everyone's permissions in the fake's guilds: view, send, embed, attach, history,
# reactions, external emojis, application commands, threads.
_EVERYONE_PERMISSIONS = str(sum(1 << bit for bit in (6, 10, 11, 14, 15, 16, 18, 31, 35, 38)))


class ApiError(Exception):
    """Raised inside a handler; becomes Discord's ``{"message", "code"[, "errors"]}``."""

    def __init__(
        self, status: int, message: str, code: int = 0, *, errors: Json | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.errors = errors


def _form_error(path: Sequence[str | int], code: str, message: str) -> ApiError:
    """Discord's 50035 "Invalid Form Body" with the error nested along ``path``."""
    errors: Json = {"_errors": [{"code": code, "message": message}]}
    for key in reversed(path):
        errors = {str(key): errors}
    return ApiError(400, "Invalid Form Body", 50035, errors=errors)


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """A file part of a multipart request (``files[n]``)."""

    field: str
    filename: str | None
    data: bytes
    content_type: str | None


@dataclass(frozen=True, slots=True)
class Call:
    """One REST request as the fake answered it (refused ones included)."""

    method: str
    route: str
    """``"POST /channels/{channel_id}/messages"``: the route's template below the API root."""
    params: dict[str, str]
    """The path parameters (``channel_id``...)."""
    query: dict[str, str]
    body: Any
    """The JSON body (a multipart request's ``payload_json``), ``None`` when none."""
    status: int
    time: float
    """``time.monotonic()`` at arrival."""
    authorized: bool
    files: list[UploadedFile] = field(default_factory=list)


@dataclass(slots=True)
class Edit:
    """A previous version of an edited message."""

    content: str
    embeds: list[Json]
    components: list[Json]
    flags: int
    time: float


@dataclass(slots=True)
class SentMessage:
    """A message the bot sent (REST or an interaction's response), latest version."""

    channel_id: str
    id: str
    content: str = ""
    embeds: list[Json] = field(default_factory=list)
    components: list[Json] = field(default_factory=list)
    flags: int = 0
    reply_to: str | None = None
    files: list[UploadedFile] = field(default_factory=list)
    interaction_id: str | None = None
    """Set for an interaction's response and follow-ups."""
    nonce: str | int | None = None
    allowed_mentions: Json | None = None
    edits: list[Edit] = field(default_factory=list)
    """Earlier versions, oldest first."""
    deleted: bool = False
    created: float = 0.0
    """``time.time()`` when sent."""
    attachment_ids: list[str] = field(default_factory=list)
    attachments: list[Json] = field(default_factory=list)
    """The request's attachment metadata (``payload_json``'s ``attachments``)."""

    @property
    def is_voice_message(self) -> bool:
        return bool(self.flags & FLAG_VOICE_MESSAGE)

    @property
    def voice(self) -> tuple[bytes, float, bytes] | None:
        """A voice message's audio, ``duration_secs`` and decoded waveform."""
        if not self.is_voice_message or not self.files or not self.attachments:
            return None
        meta = self.attachments[0]
        waveform = base64.b64decode(meta["waveform"])
        return self.files[0].data, float(meta["duration_secs"]), waveform

    @property
    def custom_ids(self) -> list[str]:
        """The ``custom_id`` of every component, in order."""
        return [c["custom_id"] for c in _walk(self.components) if "custom_id" in c]

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & FLAG_EPHEMERAL)


@dataclass(frozen=True, slots=True)
class InteractionResponse:
    """One accepted interaction callback."""

    interaction_id: str
    token: str
    type: int
    """4 message, 5 deferred message, 6 deferred update, 7 update, 8 autocomplete, 9 modal."""
    data: Json | None
    time: float


@dataclass(slots=True)
class GatewayConnection:
    """One WebSocket connection to the gateway, as recorded."""

    path: str
    query: dict[str, str]
    opened: float
    session_id: str | None = None
    """The session it identified or resumed, if any."""
    close_code: int | None = None
    closed_by: str | None = None
    """``"client"``, ``"server"`` or ``"drop"`` (the fake cut it without a close frame)."""
    heartbeats: int = 0
    received: list[Json] = field(default_factory=list)
    """The client's payloads, in order."""
    sent: list[Json] = field(default_factory=list)
    """The payloads written to it, in order."""


@dataclass(slots=True)
class GatewaySession:
    """A gateway session: every dispatch it was given, with its sequence number."""

    id: str
    intents: int
    identify: Json
    shard: tuple[int, int] | None
    seq: int = 0
    events: list[Json] = field(default_factory=list)
    """Every dispatch (``{"op": 0, "t", "s", "d"}``), in order: ``events[n]`` has ``s == n+1``."""
    invalidated: bool = False
    resumes: int = 0
    connection: _Connection | None = field(default=None, repr=False)

    def event_names(self) -> list[str]:
        return [event["t"] for event in self.events]


@dataclass(slots=True)
class _Interaction:
    id: str
    token: str
    type: int
    channel_id: str
    user_id: str
    message_id: str | None
    created: float
    response_type: int | None = None
    original_id: str | None = None


@dataclass(slots=True)
class _Fault:
    count: int
    status: int
    message: str
    code: int
    retry_after: float = 0.0
    is_global: bool = False
    taken: bool = False  # the request is carried out; only its answer is the error
    cloudflare: bool = False  # Cloudflare's ban: HTML, no ``Via``
    matching: str | None = None  # only a request whose body holds this text


@dataclass(slots=True)
class _Bucket:
    limit: int
    window: float
    hash: str
    remaining: int = 0
    reset_at: float = 0.0

    def refresh(self, now: float) -> None:
        if now >= self.reset_at:
            self.remaining = self.limit
            self.reset_at = now + self.window

    def headers(
        self, now: float, *, remaining: int | None = None, reset_after: float | None = None
    ) -> dict[str, str]:
        after = max(self.reset_at - now, 0.0) if reset_after is None else reset_after
        after = math.ceil(after * 1000) / 1000  # never earlier than the bucket resets
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining if remaining is None else remaining),
            "X-RateLimit-Reset": f"{time.time() + after:.3f}",
            "X-RateLimit-Reset-After": f"{after:.3f}",
            "X-RateLimit-Bucket": self.hash,
        }


@dataclass(frozen=True, slots=True)
class _Req:
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    files: list[UploadedFile]


_FLUSH = object()  # outbox item: write the session's dispatches not yet written


@dataclass(frozen=True, slots=True)
class _Close:
    code: int
    reason: str = ""
    drop: bool = False


class _Connection:
    """Server side of one gateway WebSocket; written only by its writer task."""

    def __init__(
        self,
        websocket: WebSocket,
        record: GatewayConnection,
        compress: Callable[[bytes], bytes] | None,
    ) -> None:
        self.websocket = websocket
        self.record = record
        self.compress = compress
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        self.session: GatewaySession | None = None
        self.delivered = 0  # the last sequence number of the session written here
        self.closing = False
        self.sends: deque[float] = deque()  # the client's payload times, for 4008
        # ASGI cannot drop a connection; uvicorn's receive is a method of the protocol
        # that holds the transport.
        protocol = getattr(websocket._receive, "__self__", None)
        self.transport: asyncio.Transport | None = getattr(protocol, "transport", None)


class FakeDiscordServer:
    """Discord's REST API and gateway with state; see the module docstring."""

    def __init__(
        self,
        *,
        token: str = DEFAULT_TOKEN,
        bot_id: int | str = DEFAULT_BOT_ID,
        bot_username: str = "chathub-test",
        application_id: int | str | None = None,
        privileged_intents: Iterable[str] = (),
        heartbeat_interval: float = 41.25,
        interaction_timeout: float = 3.0,
        enforce_limits: bool = True,
        echo_bot_messages: bool = True,
        buckets: Mapping[str, tuple[int, float]] | None = None,
    ) -> None:
        """``privileged_intents``: which of ``"members"``, ``"presences"``,
        ``"message_content"`` the application may ask for (none, as a new application);
        ``heartbeat_interval`` in seconds, as HELLO announces it."""
        unknown = set(privileged_intents) - set(PRIVILEGED_INTENTS)
        if unknown:
            raise ValueError(f"unknown privileged intents: {sorted(unknown)}")
        self.token = token
        self.bot_id = _sid(bot_id)
        self.bot_username = bot_username
        self.application_id = _sid(application_id) if application_id is not None else self.bot_id
        self.allowed_intents = sum(PRIVILEGED_INTENTS[name] for name in set(privileged_intents))
        self.heartbeat_interval = heartbeat_interval
        self.interaction_timeout = interaction_timeout
        self.enforce_limits = enforce_limits
        self.echo_bot_messages = echo_bot_messages
        self.ack_heartbeats = True
        """``False``: heartbeats go unanswered (a zombie connection, for the client)."""
        self._bucket_limits = dict(BUCKETS if buckets is None else buckets)
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: BackgroundServer | None = None
        self._port = 0
        self._init_state()

    def _init_state(self) -> None:
        self.calls: list[Call] = []
        """Every REST request, in arrival order."""
        self.interaction_responses: list[InteractionResponse] = []
        """Every accepted interaction callback, in order."""
        self.sessions: list[GatewaySession] = []
        """Every gateway session, oldest first."""
        self.connections: list[GatewayConnection] = []
        """Every gateway connection, oldest first."""
        self.identifies: list[Json] = []
        """The ``d`` of every IDENTIFY received (refused ones included)."""
        self.reactions: list[tuple[str, str, str]] = []
        """``(channel_id, message_id, emoji)`` the bot reacted with, in order (removals drop)."""
        self.presences: list[Json] = []
        """The ``d`` of every presence update."""
        self.count_429 = 0
        """429 answers sent (scripted and over a bucket)."""
        self.identify_count = 0
        self.resume_count = 0
        """RESUME payloads received (successful or not; see ``GatewaySession.resumes``)."""
        self._users: dict[str, Json] = {}
        self._guilds: dict[str, Json] = {}  # id -> {"name", "channels": [ids], "members": [ids]}
        self._channels: dict[str, Json] = {}  # guild channels, threads and DM channels
        self._dm_channels: dict[str, str] = {}  # user id -> DM channel id
        self._sent: dict[str, list[SentMessage]] = {}
        self._sent_by_id: dict[str, SentMessage] = {}
        self._known: dict[str, dict[str, Json]] = {}  # channel -> message id -> user message
        self._files: dict[str, tuple[bytes, str, str]] = {}  # id -> (data, type, filename)
        #: The attachments' ids asked for from the CDN, in order.
        self.downloads: list[str] = []
        self._voice_meta: dict[str, Json] = {}  # a voice message's attachment id -> metadata
        self._typing: dict[str, list[float]] = {}
        self._commands: dict[str, list[Json]] = {}  # "" (global) or guild id -> commands
        self._interactions: dict[str, _Interaction] = {}
        self._modals: dict[str, Json] = {}  # custom_id -> the modal last opened with it
        self._faults: dict[str, list[_Fault]] = {}
        self._holds: dict[str, threading.Event] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._live: set[_Connection] = set()
        self._last_snowflake = 0
        self._session_starts = 0
        self._add_user(self.bot_id, username=self.bot_username, global_name=None, bot=True)
        self._add_user(DEFAULT_OWNER_ID, username="owner", global_name="Owner", bot=False)

    # -- lifecycle ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The REST root with its version, ``http://127.0.0.1:PORT/api/v10``."""
        return f"{self.http_url}{API_ROOT}"

    @property
    def http_url(self) -> str:
        """``http://127.0.0.1:PORT`` (attachments are served below it)."""
        if not self._port:
            raise RuntimeError("the fake Discord server is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def gateway_url(self) -> str:
        """What ``GET /gateway/bot`` answers: ``ws://127.0.0.1:PORT/gateway``."""
        return f"ws://127.0.0.1:{self._port}{GATEWAY_PATH}"

    @property
    def resume_gateway_url(self) -> str:
        """READY's ``resume_gateway_url``: the same gateway at another path."""
        return f"ws://127.0.0.1:{self._port}{RESUME_GATEWAY_PATH}"

    def start(self) -> Self:
        if self._runner is None:
            routes: list[Any] = [
                Route(
                    f"{API_ROOT}{path}",
                    self._rest_endpoint(method, path, handler, auth),
                    methods=[method],
                )
                for method, path, handler, auth in _REST_ROUTES
            ]
            routes += [
                Route("/attachments/{channel_id}/{attachment_id}/{filename}", self._download),
                WebSocketRoute(GATEWAY_PATH, self._gateway),
                WebSocketRoute(RESUME_GATEWAY_PATH, self._gateway),
            ]
            app = Starlette(
                routes=routes,
                exception_handlers={404: _not_found, 405: _method_not_allowed},
            )
            self._runner = BackgroundServer(app, "fake-discord", self._on_loop)
        if not self._runner.running:
            self._runner.start()
            self._port = self._runner.port
        return self

    def stop(self) -> None:
        """Shut down (open gateway connections get uvicorn's 1012); safe to call twice."""
        if self._runner is None or not self._runner.running:
            return
        self._runner.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Close every gateway connection (4000) and forget all state but the configuration."""
        with self._lock:
            for conn in list(self._live):
                self._close(conn, _Close(4000, "reset"))
            self._init_state()

    # -- test-side inspection -----------------------------------------------------

    def messages(self, channel_id: int | str, *, include_deleted: bool = True) -> list[SentMessage]:
        """The messages the bot sent to ``channel_id``, oldest first (live objects)."""
        with self._lock:
            sent = list(self._sent.get(_sid(channel_id), ()))
        return sent if include_deleted else [m for m in sent if not m.deleted]

    def message(self, channel_id: int | str, message_id: int | str) -> SentMessage:
        """One message the bot sent; ``KeyError`` when there is none."""
        with self._lock:
            sent = self._sent_by_id.get(_sid(message_id))
        if sent is None or sent.channel_id != _sid(channel_id):
            raise KeyError((channel_id, message_id))
        return sent

    def typing_in(self, channel_id: int | str) -> list[float]:
        """When (``time.monotonic()``) the bot triggered typing in ``channel_id``."""
        with self._lock:
            return list(self._typing.get(_sid(channel_id), ()))

    @property
    def commands(self) -> list[Json]:
        """The global application commands as last written."""
        return self.guild_commands(None)

    def guild_commands(self, guild_id: int | str | None) -> list[Json]:
        """A guild's application commands (``None``: the global ones)."""
        with self._lock:
            key = "" if guild_id is None else _sid(guild_id)
            return copy.deepcopy(self._commands.get(key, []))

    def calls_to(self, route: str) -> list[Call]:
        """The requests of ``route`` (``"POST /channels/{channel_id}/messages"``), in order."""
        with self._lock:
            return [call for call in self.calls if call.route == route]

    def dm_channel_id(self, user_id: int | str) -> str:
        """The DM channel between the bot and ``user_id`` (created when missing)."""
        with self._lock:
            return self._dm_channel(_sid(user_id))

    @property
    def session(self) -> GatewaySession | None:
        """The newest session still valid, if any."""
        with self._lock:
            valid = [s for s in self.sessions if not s.invalidated]
            return valid[-1] if valid else None

    # -- test-side world -------------------------------------------------------------

    def add_user(
        self,
        user_id: int | str,
        *,
        username: str | None = None,
        global_name: str | None = None,
        bot: bool = False,
    ) -> Json:
        """Register (or rename) a user; returns the user object."""
        with self._lock:
            return copy.deepcopy(
                self._add_user(_sid(user_id), username=username, global_name=global_name, bot=bot)
            )

    def add_guild(
        self,
        guild_id: int | str,
        channels: Sequence[int | str | Json] = (),
        *,
        name: str | None = None,
        members: Sequence[int | str] = (),
    ) -> Json:
        """Add a guild the bot is in, with ``channels`` (ids of text channels, or channel
        objects: ``{"id", "type": 11, "parent_id"}`` is a thread) and ``members`` (the bot
        always is one). Open sessions get its GUILD_CREATE, as when a bot joins a guild."""
        gid = _sid(guild_id)
        with self._lock:
            joined = gid not in self._guilds
            guild = self._guilds.setdefault(
                gid,
                {
                    "name": name or f"Guild {gid}",
                    "channels": [],
                    "members": [self.bot_id],
                    # Discord gives a bot a role of its own where it is added.
                    "bot_role": self._snowflake(),
                },
            )
            if name:
                guild["name"] = name
            added = []
            for position, spec in enumerate(channels, start=len(guild["channels"])):
                channel = self._make_channel(gid, spec, position)
                self._channels[channel["id"]] = channel
                if channel["id"] not in guild["channels"]:
                    guild["channels"].append(channel["id"])
                    added.append(channel)
            for member in members:
                self._add_member(gid, _sid(member))
            if joined:
                self._dispatch(
                    "GUILD_CREATE", lambda s: self._guild_create(gid, s), guild_id=gid, intent=None
                )
            for channel in added:
                event = "THREAD_CREATE" if channel["type"] in (10, 11, 12) else "CHANNEL_CREATE"
                self._dispatch(event, lambda _s, c=channel: c, guild_id=gid, intent=INTENT_GUILDS)
            return self._guild_create(gid, None)

    def bot_role(self, guild_id: int | str) -> str:
        """The role Discord made for the bot in the guild (``<@&id>`` mentions it)."""
        with self._lock:
            return self._guilds[_sid(guild_id)]["bot_role"]

    # -- test-side scripting -----------------------------------------------------------

    def rate_limit_next(
        self,
        route: str,
        count: int = 1,
        *,
        retry_after: float = 1.0,
        is_global: bool = False,
    ) -> None:
        """Answer the next ``count`` requests of ``route`` (``"*"``: any) with 429 and
        ``retry_after`` seconds (a route's bucket headers, or ``global``)."""
        message = "You are being rate limited."
        fault = _Fault(count, 429, message, 0, retry_after=retry_after, is_global=is_global)
        self._arm(route, fault)

    def block_next(self, route: str, count: int = 1) -> None:
        """Answer the next ``count`` requests of ``route`` as Cloudflare does an address
        it bans for a while: 429 in HTML, without ``Via`` (discord.py does not retry it)."""
        self._arm(
            route, _Fault(count, 429, "Error 1015: You are being rate limited", 0, cloudflare=True)
        )

    def fail_next(
        self,
        route: str,
        count: int = 1,
        *,
        status: int = 500,
        message: str | None = None,
        code: int = 0,
        matching: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests of ``route`` (``"*"``: any; whose body holds
        ``matching``) with an error ``{"message", "code"}`` (e.g. 403 "Missing
        Permissions" 50013)."""
        text = message if message is not None else f"{status}: {_REASONS.get(status, 'Error')}"
        self._arm(route, _Fault(count, status, text, code, matching=matching))

    def lose_answer_next(
        self, route: str, count: int = 1, *, status: int = 503, matching: str | None = None
    ) -> None:
        """Carry out the next ``count`` requests of ``route`` (whose body holds
        ``matching``), then answer each with ``status`` (Discord took the message; its
        answer never reached the bot)."""
        text = f"{status}: {_REASONS.get(status, 'Error')}"
        self._arm(route, _Fault(count, status, text, 0, taken=True, matching=matching))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def hold_answers(self, route: str) -> threading.Event:
        """Take the requests of ``route`` (their effect is recorded) but answer them only
        once the returned event is set: Discord has the message, the bot does not know."""
        released = threading.Event()
        with self._lock:
            self._holds[route] = released
        return released

    def _arm(self, route: str, fault: _Fault) -> None:
        with self._lock:
            self._faults.setdefault(route, []).append(fault)

    # -- test-side events ----------------------------------------------------------------

    def dm(
        self,
        user_id: int | str,
        content: str,
        *,
        attachments: Sequence[tuple[str, bytes] | tuple[str, bytes, str]] = (),
        reply_to: int | str | None = None,
        offline: bool = False,
        voice_seconds: float | None = None,
        extra: Json | None = None,
    ) -> Json:
        """Push a DM from ``user_id`` (MESSAGE_CREATE without ``guild_id``); returns it.
        ``offline``: written while no bot is connected: kept in the channel (its history
        shows it), sent to no session. ``voice_seconds``: a voice message (its one
        attachment carries a duration and a waveform, the message the voice flag).
        ``extra``: fields set on the message as Discord would send it (a shape of its)."""
        uid = _sid(user_id)
        with self._lock:
            if not offline:
                self._require_session()
            channel_id = self._dm_channel(uid)
            message = self._user_message(channel_id, uid, content, attachments, reply_to)
            if voice_seconds is not None:
                message["flags"] |= FLAG_VOICE_MESSAGE
                for attachment in message["attachments"]:
                    attachment["duration_secs"] = voice_seconds
                    attachment["waveform"] = "AAAA"
            message.update(copy.deepcopy(extra or {}))
            self._known[channel_id][message["id"]] = copy.deepcopy(message)  # its history too
            if not offline:
                self._dispatch_message(message, None)
            return copy.deepcopy(message)

    def channel_message(
        self,
        guild_id: int | str,
        channel_id: int | str,
        user_id: int | str,
        content: str,
        *,
        mentions_bot: bool = False,
        attachments: Sequence[tuple[str, bytes] | tuple[str, bytes, str]] = (),
        reply_to: int | str | None = None,
        offline: bool = False,
        kind: int = 0,
        ping: bool = True,
    ) -> Json:
        """Push a guild message; ``mentions_bot`` prefixes ``<@bot>`` (``<@id>`` in the
        content mentions anyone; a reply mentions the replied author unless ``ping`` is
        switched off, as Discord's client lets a person do). Returns the full
        message: sessions without the message content intent get it without content
        unless it mentions the bot. ``offline``: as ``dm``'s. ``kind``: the message type
        (0: a person's; 6: "pinned a message", 18: "started a thread", … Discord's own)."""
        gid, cid, uid = _sid(guild_id), _sid(channel_id), _sid(user_id)
        with self._lock:
            if not offline:
                self._require_session()
            if gid not in self._guilds or self._channels.get(cid, {}).get("guild_id") != gid:
                raise KeyError(f"no channel {cid} in guild {gid}: add_guild it first")
            self._add_member(gid, uid)
            mention = f"<@{self.bot_id}>"
            if mentions_bot and mention not in content:
                content = f"{mention} {content}"
            message = self._user_message(cid, uid, content, attachments, reply_to, ping)
            if kind:
                message["type"] = kind
            if not offline:
                self._dispatch_message(message, gid)
            return copy.deepcopy(message)

    def click(
        self,
        channel_id: int | str,
        message_id: int | str,
        user_id: int | str,
        custom_id: str,
        *,
        values: Sequence[str] = (),
    ) -> Json:
        """Push INTERACTION_CREATE type 3: ``user_id`` used the component ``custom_id``
        (a button, or a select with ``values``) of the bot's message; returns it."""
        cid, mid, uid = _sid(channel_id), _sid(message_id), _sid(user_id)
        with self._lock:
            self._require_session()
            sent = self._sent_by_id.get(mid)
            if sent is None or sent.channel_id != cid or sent.deleted:
                raise KeyError(f"the bot has no message {mid} in channel {cid}")
            component = next(
                (c for c in _walk(sent.components) if c.get("custom_id") == custom_id), None
            )
            if component is None:
                raise ValueError(f"message {mid} has no component {custom_id!r}: {sent.custom_ids}")
            data: Json = {"custom_id": custom_id, "component_type": component["type"]}
            if component["type"] in _SELECT_TYPES:
                data["values"] = list(values)
            message = self._message_json(sent)
            return self._push_interaction(INTERACTION_COMPONENT, cid, uid, data, message)

    def modal_submit(
        self,
        channel_id: int | str,
        user_id: int | str,
        custom_id: str,
        values: Mapping[str, str | Sequence[str]],
        *,
        message_id: int | str | None = None,
    ) -> Json:
        """Push INTERACTION_CREATE type 5: the modal ``custom_id`` submitted with
        ``values`` by input ``custom_id``. The components mirror the modal the bot opened
        (action rows or labels); without one, a row per value. Returns it."""
        cid, uid = _sid(channel_id), _sid(user_id)
        with self._lock:
            self._require_session()
            modal = self._modals.get(custom_id)
            if modal is not None:
                components = _submitted(modal.get("components") or [], values)
            else:
                components = [
                    {"type": 1, "components": [{"type": 4, "custom_id": key, "value": value}]}
                    for key, value in values.items()
                ]
            data = {"custom_id": custom_id, "components": components}
            message = None
            if message_id is not None:
                sent = self._sent_by_id.get(_sid(message_id))
                if sent is None:
                    raise KeyError(f"the bot has no message {message_id}")
                message = self._message_json(sent)
            return self._push_interaction(INTERACTION_MODAL_SUBMIT, cid, uid, data, message)

    def slash(
        self,
        channel_id: int | str,
        user_id: int | str,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> Json:
        """Push INTERACTION_CREATE type 2: ``user_id`` ran the slash command ``name``
        (registered in the channel's guild or globally) with ``options``; returns it."""
        cid, uid = _sid(channel_id), _sid(user_id)
        with self._lock:
            self._require_session()
            gid = self._channels.get(cid, {}).get("guild_id")
            candidates = self._commands.get(gid or "", []) if gid else []
            command = next(
                (c for c in [*candidates, *self._commands.get("", [])] if c["name"] == name), None
            )
            if command is None:
                raise ValueError(f"no slash command {name!r} registered for channel {cid}")
            declared = {o["name"]: o for o in command.get("options") or []}
            given = []
            for key, value in (options or {}).items():
                if key not in declared:  # Discord's client offers only the declared ones
                    raise ValueError(f"/{name} declares no option {key!r}")
                given.append({"name": key, "type": declared[key]["type"], "value": value})
            data: Json = {"id": command["id"], "name": name, "type": command.get("type", 1)}
            if given:
                data["options"] = given
            if command.get("guild_id"):
                data["guild_id"] = command["guild_id"]
            return self._push_interaction(INTERACTION_COMMAND, cid, uid, data, None)

    def dispatch(self, event: str, data: Json, *, guild_id: int | str | None = None) -> int:
        """Push any dispatch ``event`` to every valid session (of ``guild_id``'s shard);
        returns how many sessions got it."""
        with self._lock:
            self._require_session()
            gid = _sid(guild_id) if guild_id is not None else None
            return self._dispatch(event, lambda _s: data, guild_id=gid, intent=None)

    # -- test-side gateway controls ---------------------------------------------------

    def close_gateway(self, code: int = 4000, reason: str = "") -> int:
        """Close every gateway connection with ``code`` (4000: the client should resume;
        4004 and the other final codes also end the session). Returns how many."""
        with self._lock:
            live = list(self._live)
            for conn in live:
                self._close(conn, _Close(code, reason))
            return len(live)

    def drop_gateway(self) -> int:
        """Cut every gateway connection without a close frame; sessions stay resumable."""
        with self._lock:
            live = list(self._live)
            if any(conn.transport is None for conn in live):
                raise RuntimeError("drop_gateway needs uvicorn's WebSocket protocol")
            for conn in live:
                self._close(conn, _Close(1006, drop=True))
            return len(live)

    def invalid_session(self, resumable: bool = False) -> int:
        """Send INVALID_SESSION (op 9, ``d=resumable``) on every identified connection;
        unless resumable the sessions end, and the client must IDENTIFY anew."""
        with self._lock:
            live = [conn for conn in self._live if conn.session is not None]
            for conn in live:
                assert conn.session is not None
                if not resumable:
                    conn.session.invalidated = True
                self._send(conn, {"op": OP_INVALID_SESSION, "d": resumable, "s": None, "t": None})
            return len(live)

    def reconnect_gateway(self) -> int:
        """Send RECONNECT (op 7) on every connection: the client should resume."""
        with self._lock:
            for conn in self._live:
                self._send(conn, {"op": OP_RECONNECT, "d": None, "s": None, "t": None})
            return len(self._live)

    def request_heartbeat(self) -> int:
        """Send HEARTBEAT (op 1) on every connection: the client should beat at once."""
        with self._lock:
            for conn in self._live:
                self._send(conn, {"op": OP_HEARTBEAT, "d": None, "s": None, "t": None})
            return len(self._live)

    # -- state helpers (lock held) ---------------------------------------------------------

    def _snowflake(self) -> str:
        now_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        value = max((now_ms << 22) | (1 << 17), self._last_snowflake + 1)
        self._last_snowflake = value
        return str(value)

    def _add_user(
        self, user_id: str, *, username: str | None, global_name: str | None, bot: bool
    ) -> Json:
        user = self._users.get(user_id)
        if user is None:
            user = {
                "id": user_id,
                "username": username or f"user{user_id[-4:]}",
                "discriminator": "0",
                "global_name": global_name,
                "avatar": None,
                "public_flags": 0,
            }
            if bot:
                user["bot"] = True
            self._users[user_id] = user
        else:
            if username:
                user["username"] = username
            if global_name is not None:
                user["global_name"] = global_name
        return user

    def _user(self, user_id: str) -> Json:
        user = self._users.get(user_id)
        if user is None:
            user = self._add_user(user_id, username=None, global_name=None, bot=False)
        return copy.deepcopy(user)

    def _add_member(self, guild_id: str, user_id: str) -> None:
        self._user(user_id)
        members = self._guilds[guild_id]["members"]
        if user_id not in members:
            members.append(user_id)

    def _member(self, user_id: str, *, with_user: bool) -> Json:
        member: Json = {
            "nick": None,
            "avatar": None,
            "roles": [],
            "joined_at": _iso(time.time()),
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
        }
        if with_user:
            member["user"] = self._user(user_id)
        return member

    def _make_channel(self, guild_id: str, spec: int | str | Json, position: int) -> Json:
        given = dict(spec) if isinstance(spec, Mapping) else {"id": spec}
        channel_id = _sid(given.pop("id"))
        kind = int(given.get("type", 0))
        channel: Json = {
            "id": channel_id,
            "type": kind,
            "guild_id": guild_id,
            "name": f"channel-{position}",
            "position": position,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        if kind in (10, 11, 12):
            if not given.get("parent_id"):
                raise ValueError(f"thread {channel_id} needs a parent_id")
            channel.pop("permission_overwrites")
            channel.pop("position")
            channel.update(
                owner_id=self.bot_id,
                message_count=0,
                member_count=1,
                total_message_sent=0,
                thread_metadata={
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": _iso(time.time()),
                    "locked": False,
                },
            )
        channel.update(given)
        if channel.get("parent_id") is not None:
            channel["parent_id"] = _sid(channel["parent_id"])
        return channel

    def _dm_channel(self, user_id: str) -> str:
        channel_id = self._dm_channels.get(user_id)
        if channel_id is None:
            channel_id = self._snowflake()
            self._dm_channels[user_id] = channel_id
            self._channels[channel_id] = {
                "id": channel_id,
                "type": 1,
                "last_message_id": None,
                "flags": 0,
                "recipients": [self._user(user_id)],
            }
        return channel_id

    def _channel_json(self, channel_id: str) -> Json:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise ApiError(404, "Unknown Channel", 10003)
        return copy.deepcopy(channel)

    def _guild_create(self, guild_id: str, session: GatewaySession | None) -> Json:
        guild = self._guilds[guild_id]
        everyone = session is None or bool(session.intents & INTENT_GUILD_MEMBERS)
        # Without GUILD_MEMBERS Discord sends the bot's own member only.
        shown = guild["members"] if everyone else [self.bot_id]
        channels = [copy.deepcopy(self._channels[cid]) for cid in guild["channels"]]
        return {
            "id": guild_id,
            "name": guild["name"],
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": DEFAULT_OWNER_ID,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US",
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "vanity_url_code": None,
            "application_id": None,
            "max_members": 500000,
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [
                {
                    "id": guild_id,
                    "name": "@everyone",
                    "color": 0,
                    "hoist": False,
                    "position": 0,
                    "permissions": _EVERYONE_PERMISSIONS,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                },
                {
                    "id": guild["bot_role"],
                    "name": self._user(self.bot_id)["username"],
                    "color": 0,
                    "hoist": False,
                    "position": 1,
                    "permissions": _EVERYONE_PERMISSIONS,
                    "managed": True,
                    "mentionable": False,
                    "flags": 0,
                    "tags": {"bot_id": self.bot_id},
                },
            ],
            "joined_at": _iso(time.time()),
            "large": False,
            "unavailable": False,
            "lazy": True,
            "member_count": len(guild["members"]),
            "members": [self._member(uid, with_user=True) for uid in shown],
            "channels": [c for c in channels if c["type"] not in (10, 11, 12)],
            "threads": [c for c in channels if c["type"] in (10, 11, 12)],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def _application_flags(self) -> int:
        # GATEWAY_* flags: the full bit when the intent is enabled, the _LIMITED one if not.
        flags = 1 << 23  # APPLICATION_COMMAND_BADGE
        flags |= 1 << 18 if self.allowed_intents & INTENT_MESSAGE_CONTENT else 1 << 19
        flags |= 1 << 14 if self.allowed_intents & INTENT_GUILD_MEMBERS else 1 << 15
        flags |= 1 << 12 if self.allowed_intents & INTENT_GUILD_PRESENCES else 1 << 13
        return flags

    def _attachment(
        self, channel_id: str, name: str, data: bytes, content_type: str | None
    ) -> Json:
        attachment_id = self._snowflake()
        kind = content_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        self._files[attachment_id] = (data, kind, name)
        return self._file_json(channel_id, attachment_id)

    def _mentions(
        self, content: str, guild_id: str | None, extra: Iterable[str] = ()
    ) -> list[Json]:
        ids = list(dict.fromkeys([*_USER_MENTION.findall(content), *extra]))
        mentions = []
        for uid in ids:
            user = self._user(uid)
            if guild_id is not None:
                user["member"] = self._member(uid, with_user=False)
            mentions.append(user)
        return mentions

    def _user_message(
        self,
        channel_id: str,
        user_id: str,
        content: str,
        attachments: Sequence[tuple[str, bytes] | tuple[str, bytes, str]],
        reply_to: int | str | None,
        ping: bool = True,
    ) -> Json:
        channel = self._channels[channel_id]
        guild_id = channel.get("guild_id")
        message: Json = {
            "id": self._snowflake(),
            "channel_id": channel_id,
            "author": self._user(user_id),
            "content": content,
            "timestamp": _iso(time.time()),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mention_roles": re.findall(r"<@&(\d+)>", content) if guild_id is not None else [],
            "attachments": [
                self._attachment(channel_id, item[0], item[1], item[2] if len(item) > 2 else None)
                for item in attachments
            ],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
            "channel_type": channel["type"],
        }
        replied_author: list[str] = []
        if reply_to is not None:
            replied = self._message_by_id(channel_id, _sid(reply_to))
            message["type"] = 19
            message["message_reference"] = {
                "type": 0,
                "message_id": replied["id"],
                "channel_id": channel_id,
                **({"guild_id": guild_id} if guild_id else {}),
            }
            replied.pop("referenced_message", None)
            message["referenced_message"] = replied
            if ping:  # a reply pings its author by default
                replied_author = [replied["author"]["id"]]
        message["mentions"] = self._mentions(content, guild_id, replied_author)
        if guild_id is not None:
            message["guild_id"] = guild_id
            message["member"] = self._member(user_id, with_user=False)
        self._known.setdefault(channel_id, {})[message["id"]] = copy.deepcopy(message)
        return message

    def _message_by_id(self, channel_id: str, message_id: str) -> Json:
        sent = self._sent_by_id.get(message_id)
        if sent is not None and sent.channel_id == channel_id and not sent.deleted:
            return self._message_json(sent)
        known = self._known.get(channel_id, {}).get(message_id)
        if known is None:
            raise ApiError(404, "Unknown Message", 10008)
        return copy.deepcopy(known)

    def _message_json(self, sent: SentMessage) -> Json:
        message: Json = {
            "id": sent.id,
            "channel_id": sent.channel_id,
            "author": self._user(self.bot_id),
            "content": sent.content,
            "timestamp": _iso(sent.created),
            "edited_timestamp": _iso(sent.edits[-1].time) if sent.edits else None,
            "tts": False,
            "mention_everyone": False,
            "mentions": self._mentions(sent.content, None),
            "mention_roles": [],
            "attachments": [
                self._file_json(sent.channel_id, aid)
                for aid in sent.attachment_ids
                if aid in self._files
            ],
            "embeds": copy.deepcopy(sent.embeds),
            "components": copy.deepcopy(sent.components),
            "pinned": False,
            "type": 19 if sent.reply_to else 0,
            "flags": sent.flags,
        }
        if sent.reply_to:
            message["message_reference"] = {
                "type": 0,
                "message_id": sent.reply_to,
                "channel_id": sent.channel_id,
            }
            replied = self._known.get(sent.channel_id, {}).get(sent.reply_to)
            if replied is None and sent.reply_to in self._sent_by_id:
                replied = self._message_json(self._sent_by_id[sent.reply_to])
            if replied is not None:
                replied = copy.deepcopy(replied)
                replied.pop("referenced_message", None)
                message["referenced_message"] = replied
        if sent.nonce is not None:
            message["nonce"] = sent.nonce
        if sent.interaction_id is not None:
            message["webhook_id"] = self.application_id
            message["application_id"] = self.application_id
        return message

    def _file_json(self, channel_id: str, attachment_id: str) -> Json:
        data, kind, name = self._files[attachment_id]
        url = f"{self.http_url}/attachments/{channel_id}/{attachment_id}/{name}"
        return {
            "id": attachment_id,
            "filename": name,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": kind,
            **self._voice_meta.get(attachment_id, {}),
        }

    # -- dispatch (lock held) ---------------------------------------------------------------

    def _require_session(self) -> None:
        if not any(not s.invalidated for s in self.sessions):
            raise RuntimeError("no gateway session: the bot has not identified (or it ended)")

    def _on_shard(self, session: GatewaySession, guild_id: str | None) -> bool:
        if session.shard is None:
            return True
        shard_id, count = session.shard
        if guild_id is None:
            return shard_id == 0  # DMs go to shard 0
        return (int(guild_id) >> 22) % count == shard_id

    def _dispatch(
        self,
        event: str,
        build: Callable[[GatewaySession], Json | None],
        *,
        guild_id: str | None,
        intent: int | None,
    ) -> int:
        delivered = 0
        for session in self.sessions:
            if session.invalidated or not self._on_shard(session, guild_id):
                continue
            if intent is not None and not session.intents & intent:
                continue
            data = build(session)
            if data is None:
                continue
            self._append(session, event, data)
            delivered += 1
        return delivered

    def _append(self, session: GatewaySession, event: str, data: Json) -> None:
        session.seq += 1
        session.events.append(
            {"op": OP_DISPATCH, "t": event, "s": session.seq, "d": copy.deepcopy(data)}
        )
        if session.connection is not None:
            self._send(session.connection, _FLUSH)

    def _dispatch_message(
        self, message: Json, guild_id: str | None, event: str = "MESSAGE_CREATE"
    ) -> int:
        intent = INTENT_DIRECT_MESSAGES if guild_id is None else INTENT_GUILD_MESSAGES
        return self._dispatch(
            event, lambda s: self._visible(s, message), guild_id=guild_id, intent=intent
        )

    def _visible(self, session: GatewaySession, message: Json) -> Json:
        """The message as ``session`` sees it: Discord empties content, embeds, attachments
        and components of guild messages that neither mention nor come from the bot
        when the session lacks the message content intent."""
        if (
            session.intents & INTENT_MESSAGE_CONTENT
            or "guild_id" not in message
            or message.get("author", {}).get("id") == self.bot_id
            or any(m.get("id") == self.bot_id for m in message.get("mentions", []))
        ):
            return message
        stripped = dict(message, content="", embeds=[], attachments=[], components=[])
        stripped.pop("poll", None)
        return stripped

    def _echo(self, sent: SentMessage, event: str) -> None:
        # Discord sends the bot its own messages too (never the ephemeral ones).
        if not self.echo_bot_messages or sent.ephemeral:
            return
        guild_id = self._channels.get(sent.channel_id, {}).get("guild_id")
        if event == "MESSAGE_DELETE":
            data = {"id": sent.id, "channel_id": sent.channel_id}
            if guild_id:
                data["guild_id"] = guild_id
            intent = INTENT_DIRECT_MESSAGES if guild_id is None else INTENT_GUILD_MESSAGES
            self._dispatch(event, lambda _s: data, guild_id=guild_id, intent=intent)
            return
        message = self._message_json(sent)
        message["channel_type"] = self._channels.get(sent.channel_id, {}).get("type", 0)
        if guild_id:
            message["guild_id"] = guild_id
            message["member"] = self._member(self.bot_id, with_user=False)
        self._dispatch_message(message, guild_id, event)

    def _push_interaction(
        self, kind: int, channel_id: str, user_id: str, data: Json, message: Json | None
    ) -> Json:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise KeyError(f"unknown channel {channel_id}: add_guild it or dm first")
        guild_id = channel.get("guild_id")
        interaction_id = self._snowflake()
        token = f"fake-interaction-token.{interaction_id}.{uuid.uuid4().hex}"
        payload: Json = {
            "id": interaction_id,
            "application_id": self.application_id,
            "type": kind,
            "data": data,
            "channel_id": channel_id,
            "channel": copy.deepcopy(channel),
            "token": token,
            "version": 1,
            "locale": "en-US",
            "app_permissions": _EVERYONE_PERMISSIONS,
            "entitlements": [],
            "authorizing_integration_owners": {"0": guild_id} if guild_id else {"1": user_id},
            "context": 0 if guild_id else 1,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if guild_id:
            self._add_member(guild_id, user_id)
            member = self._member(user_id, with_user=True)
            member["permissions"] = _EVERYONE_PERMISSIONS
            payload.update(
                guild_id=guild_id,
                guild={"id": guild_id, "locale": "en-US", "features": []},
                guild_locale="en-US",
                member=member,
            )
        else:
            payload["user"] = self._user(user_id)
        if message is not None:
            payload["message"] = message
        self._interactions[interaction_id] = _Interaction(
            interaction_id,
            token,
            kind,
            channel_id,
            user_id,
            message["id"] if message else None,
            time.monotonic(),
        )
        self._dispatch("INTERACTION_CREATE", lambda _s: payload, guild_id=guild_id, intent=None)
        return copy.deepcopy(payload)

    # -- sending (lock held; any thread) ----------------------------------------------------

    def _send(self, conn: _Connection, item: Any) -> None:
        loop = self._loop
        if loop is None or conn.closing:
            return
        # Always through the loop, from its own thread too: one FIFO keeps the order.
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(conn.outbox.put_nowait, item)

    def _close(self, conn: _Connection, close: _Close) -> None:
        """Detach ``conn`` from its session now (later events wait for a RESUME) and have
        its writer close it."""
        if conn.closing:
            return
        self._send(conn, close)
        conn.closing = True
        self._detach(conn, close.code if not close.drop else None)

    def _detach(self, conn: _Connection, code: int | None) -> None:
        session = conn.session
        if session is not None and session.connection is conn:
            session.connection = None
        if session is not None and code in _FINAL_CLOSE_CODES:
            session.invalidated = True

    # -- REST ------------------------------------------------------------------------------

    def _on_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop

    def _rest_endpoint(
        self, method: str, path: str, handler: Callable[..., Any], auth: bool
    ) -> Callable[[Request], Any]:
        route = f"{method} {path}"

        async def endpoint(request: Request) -> Response:
            return await self._serve_rest(request, route, handler, auth)

        return endpoint

    async def _serve_rest(
        self, request: Request, route: str, handler: Callable[..., Any], auth: bool
    ) -> Response:
        now = time.monotonic()
        authorized = request.headers.get("authorization") == f"Bot {self.token}"
        params = {key: str(value) for key, value in request.path_params.items()}
        query = dict(request.query_params)
        try:
            body, files = await _decode_body(request)
        except ApiError as error:
            with self._lock:
                self.calls.append(
                    Call(request.method, route, params, query, None, error.status, now, authorized)
                )
            return _error_response(error)
        req = _Req(params, query, body, files)
        with self._lock:
            response = self._answer(route, handler, auth and not authorized, req, now)
            call = Call(
                request.method,
                route,
                params,
                query,
                copy.deepcopy(body),
                response.status_code,
                now,
                authorized,
                files,
            )
            self.calls.append(call)
            held = self._holds.get(route)
        if held is not None:
            await asyncio.to_thread(held.wait)
        if _CLOUDFLARE in response.headers:
            del response.headers[_CLOUDFLARE]
        else:
            response.headers["Via"] = "1.1 google"  # discord.py retries only 429s that have it
        return response

    def _answer(
        self, route: str, handler: Callable[..., Any], unauthorized: bool, req: _Req, now: float
    ) -> Response:  # lock held
        if unauthorized:
            return _error_response(ApiError(401, "401: Unauthorized"))
        bucket = self._bucket(route, req.params, now)
        fault = self._take_fault(route, req.body)
        if fault is not None:
            if fault.cloudflare:
                html = f"<html><body><h1>{fault.message}</h1></body></html>"
                return HTMLResponse(html, 429, headers={_CLOUDFLARE: "1"})
            if fault.status == 429:
                return self._rate_limited(fault.retry_after, bucket, now, is_global=fault.is_global)
            if fault.taken:
                with contextlib.suppress(ApiError):
                    handler(self, req)
            return _error_response(ApiError(fault.status, fault.message, fault.code))
        if self.enforce_limits and bucket.remaining <= 0:
            return self._rate_limited(bucket.reset_at - now, bucket, now)
        bucket.remaining -= 1
        try:
            result = handler(self, req)
        except ApiError as error:
            response = _error_response(error)
        else:
            response = Response(status_code=204) if result is None else _json(result)
        response.headers.update(bucket.headers(now))
        return response

    def _bucket(self, route: str, params: dict[str, str], now: float) -> _Bucket:
        major = params.get("channel_id") or params.get("guild_id") or ""
        if "webhook_id" in params:
            major = f"{params['webhook_id']}/{params.get('webhook_token', '')}"
        key = f"{route}:{major}"
        bucket = self._buckets.get(key)
        if bucket is None:
            limit, window = self._bucket_limits.get(route, DEFAULT_BUCKET)
            digest = hashlib.sha1(route.encode()).hexdigest()[:32]
            bucket = self._buckets[key] = _Bucket(limit, window, digest)
        bucket.refresh(now)
        return bucket

    def _rate_limited(
        self, retry_after: float, bucket: _Bucket, now: float, *, is_global: bool = False
    ) -> Response:
        self.count_429 += 1
        retry_after = max(retry_after, 0.0)
        body = {
            "message": "You are being rate limited.",
            "retry_after": round(retry_after, 3),
            "global": is_global,
        }
        headers = {"Retry-After": str(math.ceil(retry_after))}
        if is_global:
            headers.update({"X-RateLimit-Global": "true", "X-RateLimit-Scope": "global"})
        else:
            headers.update(bucket.headers(now, remaining=0, reset_after=retry_after))
            headers["X-RateLimit-Scope"] = "user"
        return _json(body, 429, headers)

    def _take_fault(self, route: str, body: Any = None) -> _Fault | None:
        for key in (route, "*"):
            queue = self._faults.get(key)
            if queue:
                fault = queue[0]
                if fault.matching is not None and fault.matching not in json.dumps(body):
                    continue
                fault.count -= 1
                if fault.count <= 0:
                    queue.pop(0)
                return fault
        return None

    async def _download(self, request: Request) -> Response:
        with self._lock:
            stored = self._files.get(str(request.path_params["attachment_id"]))
            self.downloads.append(str(request.path_params["attachment_id"]))
            held = self._holds.get(DOWNLOAD)
        if held is not None:
            await asyncio.to_thread(held.wait)
        if stored is None:
            return _error_response(ApiError(404, "404: Not Found"))
        return Response(stored[0], media_type=stored[1])

    # -- REST handlers (lock held) ------------------------------------------------------------

    def _get_gateway(self, req: _Req) -> Json:
        return {"url": self.gateway_url}

    def _get_gateway_bot(self, req: _Req) -> Json:
        return {
            "url": self.gateway_url,
            "shards": 1,
            "session_start_limit": {
                "total": 1000,
                "remaining": max(1000 - self._session_starts, 0),
                "reset_after": 86_400_000,
                "max_concurrency": 1,
            },
        }

    def _get_me(self, req: _Req) -> Json:
        return {
            **self._user(self.bot_id),
            "verified": True,
            "mfa_enabled": False,
            "flags": 0,
            "email": None,
            "locale": "en-US",
            "bio": "",
        }

    def _get_user(self, req: _Req) -> Json:
        user = self._users.get(req.params["user_id"])
        if user is None:
            raise ApiError(404, "Unknown User", 10013)
        return copy.deepcopy(user)

    def _create_dm(self, req: _Req) -> Json:
        recipient = (req.body or {}).get("recipient_id")
        if recipient is None:
            raise _form_error(["recipient_id"], "BASE_TYPE_REQUIRED", "This field is required")
        return self._channel_json(self._dm_channel(_sid(recipient)))

    def _get_application(self, req: _Req) -> Json:
        return {
            "id": self.application_id,
            "name": self.bot_username,
            "icon": None,
            "description": "",
            "summary": "",
            "type": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": self._application_flags(),
            "owner": self._user(DEFAULT_OWNER_ID),
            "team": None,
            "hook": True,
            "rpc_origins": [],
            "tags": [],
            "redirect_uris": [],
            "interactions_endpoint_url": None,  # else discord.py warns it gets no interactions
            "bot": self._user(self.bot_id),
        }

    def _get_channel(self, req: _Req) -> Json:
        return self._channel_json(req.params["channel_id"])

    def _get_guild(self, req: _Req) -> Json:
        guild_id = req.params["guild_id"]
        if guild_id not in self._guilds:
            raise ApiError(404, "Unknown Guild", 10004)
        full = self._guild_create(guild_id, None)
        return {key: value for key, value in full.items() if key not in _GATEWAY_GUILD_KEYS}

    def _get_guild_channels(self, req: _Req) -> list[Json]:
        guild_id = req.params["guild_id"]
        if guild_id not in self._guilds:
            raise ApiError(404, "Unknown Guild", 10004)
        return [self._channel_json(cid) for cid in self._guilds[guild_id]["channels"]]

    def _get_member(self, req: _Req) -> Json:
        guild = self._guilds.get(req.params["guild_id"])
        if guild is None:
            raise ApiError(404, "Unknown Guild", 10004)
        if req.params["user_id"] not in guild["members"]:
            raise ApiError(404, "Unknown Member", 10007)
        return self._member(req.params["user_id"], with_user=True)

    def _get_messages(self, req: _Req) -> list[Json]:
        channel_id = req.params["channel_id"]
        self._channel_json(channel_id)
        ids = set(self._known.get(channel_id, {}))
        ids |= {m.id for m in self._sent.get(channel_id, ()) if not m.deleted and not m.ephemeral}
        ordered = sorted(ids, key=int, reverse=True)
        if "before" in req.query:
            ordered = [i for i in ordered if int(i) < int(req.query["before"])]
        limit = min(max(int(req.query.get("limit", 50)), 1), 100)
        if "after" in req.query and "before" not in req.query:
            # As Discord answers: the ``limit`` messages right after it (newest first), so
            # a reader pages on from the newest of them (discord.py's ``history(after=)``).
            after = [i for i in ordered if int(i) > int(req.query["after"])]
            ordered = after[-limit:]
        elif "after" in req.query:
            ordered = [i for i in ordered if int(i) > int(req.query["after"])]
        return [self._message_by_id(channel_id, i) for i in ordered[:limit]]

    def _get_message(self, req: _Req) -> Json:
        self._channel_json(req.params["channel_id"])
        return self._message_by_id(req.params["channel_id"], req.params["message_id"])

    def _create_message(self, req: _Req) -> Json:
        channel_id = req.params["channel_id"]
        channel = self._channel_json(channel_id)
        body = req.body or {}
        _check_message(body, req.files, creating=True)
        if int(body.get("flags") or 0) & FLAG_VOICE_MESSAGE:
            _check_voice_message(body, req.files)
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            # Discord answers a repeated nonce with the first message: safe retries.
            for earlier in self._sent.get(channel_id, ()):
                if earlier.nonce == nonce and time.time() - earlier.created < 120:
                    return self._message_json(earlier)
        reply_to = None
        reference = body.get("message_reference")
        if isinstance(reference, dict) and reference.get("message_id"):
            reply_to = _sid(reference["message_id"])
            try:
                self._message_by_id(channel_id, reply_to)
            except ApiError:
                if reference.get("fail_if_not_exists", True):
                    raise _form_error(
                        ["message_reference"], "REPLIES_UNKNOWN_MESSAGE", "Unknown message"
                    ) from None
                reply_to = None
        sent = SentMessage(
            channel_id=channel_id,
            id=self._snowflake(),
            content=body.get("content") or "",
            embeds=copy.deepcopy(body.get("embeds") or []),
            components=copy.deepcopy(body.get("components") or []),
            flags=int(body.get("flags") or 0) & ~FLAG_EPHEMERAL,  # only interactions may
            reply_to=reply_to,
            files=list(req.files),
            nonce=nonce,
            allowed_mentions=copy.deepcopy(body.get("allowed_mentions")),
            created=time.time(),
            attachments=copy.deepcopy(
                [a for a in body.get("attachments") or [] if isinstance(a, dict)]
            ),
        )
        sent.attachment_ids = [
            self._attachment(channel_id, f.filename or "file", f.data, f.content_type)["id"]
            for f in req.files
        ]
        if sent.is_voice_message:
            meta = sent.attachments[0]
            self._voice_meta[sent.attachment_ids[0]] = {
                "duration_secs": float(meta["duration_secs"]),
                "waveform": meta["waveform"],
            }
        self._store(sent)
        channel["last_message_id"] = sent.id
        self._echo(sent, "MESSAGE_CREATE")
        return self._message_json(sent)

    def _store(self, sent: SentMessage) -> None:
        self._sent.setdefault(sent.channel_id, []).append(sent)
        self._sent_by_id[sent.id] = sent

    def _edit(self, sent: SentMessage, body: Json, files: list[UploadedFile]) -> None:
        if sent.is_voice_message:
            raise ApiError(400, "Voice messages cannot be edited", 50162)
        _check_message(body, files, creating=False)
        sent.edits.append(
            Edit(
                sent.content,
                copy.deepcopy(sent.embeds),
                copy.deepcopy(sent.components),
                sent.flags,
                time.time(),
            )
        )
        if "content" in body:
            sent.content = body["content"] or ""
        if "embeds" in body:
            sent.embeds = copy.deepcopy(body["embeds"] or [])
        if "components" in body:
            sent.components = copy.deepcopy(body["components"] or [])
        if body.get("flags") is not None:
            keep = sent.flags & (FLAG_EPHEMERAL | FLAG_COMPONENTS_V2)
            sent.flags = (int(body["flags"]) & ~FLAG_EPHEMERAL) | keep
        sent.flags &= ~FLAG_LOADING
        if "attachments" in body:
            kept = {str(a.get("id")) for a in body["attachments"] or [] if isinstance(a, dict)}
            sent.attachment_ids = [a for a in sent.attachment_ids if a in kept]
        for f in files:
            sent.attachment_ids.append(
                self._attachment(sent.channel_id, f.filename or "file", f.data, f.content_type)[
                    "id"
                ]
            )
            sent.files.append(f)

    def _own_message(self, channel_id: str, message_id: str) -> SentMessage:
        self._channel_json(channel_id)
        sent = self._sent_by_id.get(message_id)
        if sent is None or sent.channel_id != channel_id or sent.deleted:
            if message_id in self._known.get(channel_id, {}):
                raise ApiError(403, "Cannot edit a message authored by another user", 50005)
            raise ApiError(404, "Unknown Message", 10008)
        return sent

    def _edit_message(self, req: _Req) -> Json:
        sent = self._own_message(req.params["channel_id"], req.params["message_id"])
        self._edit(sent, req.body or {}, req.files)
        self._echo(sent, "MESSAGE_UPDATE")
        return self._message_json(sent)

    def _delete_message(self, req: _Req) -> None:
        channel_id, message_id = req.params["channel_id"], req.params["message_id"]
        self._channel_json(channel_id)
        # Another's message: bots with Manage Messages may; the fake grants it.
        if self._known.get(channel_id, {}).pop(message_id, None) is not None:
            return None
        sent = self._own_message(channel_id, message_id)
        sent.deleted = True
        self._echo(sent, "MESSAGE_DELETE")
        return None

    def _add_reaction(self, req: _Req) -> None:
        channel_id, message_id = req.params["channel_id"], req.params["message_id"]
        self._channel_json(channel_id)
        self._message_by_id(channel_id, message_id)
        entry = (channel_id, message_id, req.params["emoji"])
        if entry not in self.reactions:
            self.reactions.append(entry)
        return None

    def _remove_reaction(self, req: _Req) -> None:
        entry = (req.params["channel_id"], req.params["message_id"], req.params["emoji"])
        if entry in self.reactions:
            self.reactions.remove(entry)
        return None

    def _start_thread(self, req: _Req) -> Json:
        """A public thread on a guild message (its id is the message's, as on Discord);
        THREAD_CREATE goes to the sessions. One thread per message."""
        channel_id, message_id = req.params["channel_id"], req.params["message_id"]
        parent = self._channels.get(channel_id)
        if parent is None or parent.get("guild_id") is None or parent["type"] != 0:
            raise ApiError(404, "Unknown Channel", 10003)
        self._message_by_id(channel_id, message_id)  # 404 for a message it never saw
        body = req.body if isinstance(req.body, dict) else {}
        name = body.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            raise _form_error(
                ["name"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        if message_id in self._channels:
            raise ApiError(400, "A thread has already been created for this message", 160004)
        guild_id = parent["guild_id"]
        thread = self._make_channel(
            guild_id, {"id": message_id, "type": 11, "parent_id": channel_id, "name": name}, 0
        )
        self._channels[message_id] = thread
        self._guilds[guild_id]["channels"].append(message_id)
        created = {**thread, "newly_created": True}
        self._dispatch("THREAD_CREATE", lambda _s: created, guild_id=guild_id, intent=INTENT_GUILDS)
        return thread

    def _trigger_typing(self, req: _Req) -> None:
        channel_id = req.params["channel_id"]
        self._channel_json(channel_id)
        self._typing.setdefault(channel_id, []).append(time.monotonic())
        return None

    # Application commands.

    def _commands_key(self, req: _Req) -> str:
        if req.params["application_id"] != self.application_id:
            raise ApiError(403, "Missing Access", 50001)
        guild_id = req.params.get("guild_id")
        if guild_id is not None and guild_id not in self._guilds:
            raise ApiError(403, "Missing Access", 50001)
        return guild_id or ""

    def _get_commands(self, req: _Req) -> list[Json]:
        return copy.deepcopy(self._commands.get(self._commands_key(req), []))

    def _put_commands(self, req: _Req) -> list[Json]:
        key = self._commands_key(req)
        body = req.body
        if not isinstance(body, list):
            raise _form_error([], "LIST_TYPE_CONVERT", "Only iterables may be used in a ListType")
        if len(body) > 100:
            raise _form_error([], "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
        earlier = {(c["name"], c.get("type", 1)): c for c in self._commands.get(key, [])}
        result = []
        for index, given in enumerate(body):
            command = self._command(key, index, given, earlier)
            result.append(command)
        self._commands[key] = result
        return copy.deepcopy(result)

    def _post_command(self, req: _Req) -> Json:
        key = self._commands_key(req)
        given = req.body if isinstance(req.body, dict) else {}
        existing = self._commands.setdefault(key, [])
        earlier = {(c["name"], c.get("type", 1)): c for c in existing}
        command = self._command(key, 0, given, earlier)
        existing[:] = [c for c in existing if c["id"] != command["id"]] + [command]
        return copy.deepcopy(command)

    def _delete_command(self, req: _Req) -> None:
        key = self._commands_key(req)
        existing = self._commands.get(key, [])
        kept = [c for c in existing if c["id"] != req.params["command_id"]]
        if len(kept) == len(existing):
            raise ApiError(404, "Unknown application command", 10063)
        self._commands[key] = kept
        return None

    def _command(self, key: str, index: int, given: Any, earlier: dict[Any, Json]) -> Json:
        if not isinstance(given, dict):
            raise _form_error(
                [index], "DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType"
            )
        kind = int(given.get("type", 1))
        name = str(given.get("name", ""))
        if not _COMMAND_NAME.match(name) or (kind == 1 and name != name.lower()):
            raise _form_error(
                [index, "name"], "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid"
            )
        description = str(given.get("description", ""))
        if kind == 1 and not 1 <= len(description) <= 100:
            raise _form_error(
                [index, "description"],
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            )
        if len(given.get("options") or []) > 25:
            raise _form_error(
                [index, "options"], "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length."
            )
        previous = earlier.get((name, kind))
        command = copy.deepcopy(given)
        command.update(
            id=previous["id"] if previous else self._snowflake(),
            application_id=self.application_id,
            version=self._snowflake(),
            type=kind,
            description=description,
            default_member_permissions=given.get("default_member_permissions"),
            nsfw=bool(given.get("nsfw", False)),
        )
        command.setdefault("options", [])
        command.setdefault("contexts", None)
        command.setdefault("integration_types", [0])
        if key:
            command["guild_id"] = key
        else:
            command.setdefault("dm_permission", True)
        return command

    # Interactions.

    def _interaction_by_token(self, interaction_id: str | None, token: str) -> _Interaction | None:
        if interaction_id is not None:
            found = self._interactions.get(interaction_id)
            return found if found is not None and found.token == token else None
        return next((i for i in self._interactions.values() if i.token == token), None)

    def _interaction_callback(self, req: _Req) -> Json | None:
        interaction = self._interaction_by_token(
            req.params["webhook_id"], req.params["webhook_token"]
        )
        now = time.monotonic()
        if interaction is None or now - interaction.created > self.interaction_timeout:
            raise ApiError(404, "Unknown interaction", 10062)
        if interaction.response_type is not None:
            raise ApiError(400, "Interaction has already been acknowledged.", 40060)
        body = req.body if isinstance(req.body, dict) else {}
        kind = body.get("type")
        data = body.get("data")
        if kind not in _ALLOWED_CALLBACKS.get(interaction.type, set()):
            raise _form_error(
                ["type"], "INTERACTION_CALLBACK_TYPE_INVALID", "Invalid interaction callback type"
            )
        message: SentMessage | None = None
        if kind == CALLBACK_MESSAGE:
            data = data or {}
            _check_message(data, req.files, creating=True)
            message = self._interaction_message(interaction, data, req.files)
        elif kind == CALLBACK_DEFERRED_MESSAGE:
            flags = int((data or {}).get("flags") or 0) & FLAG_EPHEMERAL
            message = self._interaction_message(interaction, {"flags": flags | FLAG_LOADING}, [])
        elif kind in (CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE_MESSAGE):
            if interaction.message_id is None:
                raise ApiError(400, "Interaction has no message to update", 50035)
            message = self._sent_by_id[interaction.message_id]
            if kind == CALLBACK_UPDATE_MESSAGE:
                self._edit(message, data or {}, req.files)
                self._echo(message, "MESSAGE_UPDATE")
        elif kind == CALLBACK_MODAL:
            _check_modal(data)
            self._modals[data["custom_id"]] = copy.deepcopy(data)
        interaction.response_type = kind
        interaction.original_id = message.id if message is not None else None
        self.interaction_responses.append(
            InteractionResponse(
                interaction.id, interaction.token, kind, copy.deepcopy(data), time.monotonic()
            )
        )
        if req.query.get("with_response") not in ("1", "true", "True"):
            return None
        result: Json = {
            "interaction": {
                "id": interaction.id,
                "type": interaction.type,
                "response_message_loading": kind == CALLBACK_DEFERRED_MESSAGE,
                "response_message_ephemeral": bool(message and message.ephemeral),
            }
        }
        if message is not None:
            result["interaction"]["response_message_id"] = message.id
            result["resource"] = {"type": kind, "message": self._message_json(message)}
        return result

    def _interaction_message(
        self, interaction: _Interaction, data: Json, files: list[UploadedFile]
    ) -> SentMessage:
        sent = SentMessage(
            channel_id=interaction.channel_id,
            id=self._snowflake(),
            content=data.get("content") or "",
            embeds=copy.deepcopy(data.get("embeds") or []),
            components=copy.deepcopy(data.get("components") or []),
            flags=int(data.get("flags") or 0),
            files=list(files),
            interaction_id=interaction.id,
            allowed_mentions=copy.deepcopy(data.get("allowed_mentions")),
            created=time.time(),
        )
        sent.attachment_ids = [
            self._attachment(sent.channel_id, f.filename or "file", f.data, f.content_type)["id"]
            for f in files
        ]
        self._store(sent)
        self._echo(sent, "MESSAGE_CREATE")
        return sent

    def _webhook_interaction(self, req: _Req) -> _Interaction:
        if req.params["webhook_id"] != self.application_id:
            raise ApiError(404, "Unknown Webhook", 10015)
        interaction = self._interaction_by_token(None, req.params["webhook_token"])
        if (
            interaction is None
            or interaction.response_type is None
            or time.monotonic() - interaction.created > FOLLOWUP_WINDOW_S
        ):
            raise ApiError(404, "Unknown Webhook", 10015)
        return interaction

    def _webhook_message(self, interaction: _Interaction, message_id: str) -> SentMessage:
        if message_id == "@original":
            if interaction.original_id is None:
                raise ApiError(404, "Unknown Message", 10008)
            message_id = interaction.original_id
        sent = self._sent_by_id.get(message_id)
        if (
            sent is None
            or sent.deleted
            or (message_id != interaction.original_id and sent.interaction_id != interaction.id)
        ):
            raise ApiError(404, "Unknown Message", 10008)
        return sent

    def _create_followup(self, req: _Req) -> Json | None:
        interaction = self._webhook_interaction(req)
        body = req.body or {}
        _check_message(body, req.files, creating=True)
        loading = self._sent_by_id.get(interaction.original_id or "")
        if loading is not None and loading.flags & FLAG_LOADING:
            # The first follow-up after a deferred message fills its "thinking" message.
            self._edit(loading, body, req.files)
            self._echo(loading, "MESSAGE_UPDATE")
            sent = loading
        else:
            sent = self._interaction_message(interaction, body, req.files)
        if req.query.get("wait") in ("1", "true", "True"):
            return self._message_json(sent)
        return None

    def _get_webhook_message(self, req: _Req) -> Json:
        interaction = self._webhook_interaction(req)
        return self._message_json(self._webhook_message(interaction, req.params["message_id"]))

    def _edit_webhook_message(self, req: _Req) -> Json:
        interaction = self._webhook_interaction(req)
        sent = self._webhook_message(interaction, req.params["message_id"])
        self._edit(sent, req.body or {}, req.files)
        self._echo(sent, "MESSAGE_UPDATE")
        return self._message_json(sent)

    def _delete_webhook_message(self, req: _Req) -> None:
        interaction = self._webhook_interaction(req)
        sent = self._webhook_message(interaction, req.params["message_id"])
        sent.deleted = True
        self._echo(sent, "MESSAGE_DELETE")
        return None

    # -- gateway -----------------------------------------------------------------------------

    async def _gateway(self, websocket: WebSocket) -> None:
        query = dict(websocket.query_params)
        await websocket.accept()
        record = GatewayConnection(websocket.url.path, query, time.monotonic())
        try:
            compress = _compressor(query.get("compress"))
        except ValueError:
            compress = None
        conn = _Connection(websocket, record, compress)
        with self._lock:
            self.connections.append(record)
            self._live.add(conn)
            if query.get("v") != str(API_VERSION):
                self._close(conn, _Close(4012, "Invalid API version"))
            elif query.get("encoding", "json") != "json":
                self._close(conn, _Close(4002, "Only JSON encoding is supported by the fake"))
            elif query.get("compress") and compress is None:
                self._close(conn, _Close(4002, f"Unsupported compression {query['compress']}"))
            else:
                interval = int(self.heartbeat_interval * 1000)
                hello = {
                    "op": OP_HELLO,
                    "d": {"heartbeat_interval": interval},
                    "s": None,
                    "t": None,
                }
                self._send(conn, hello)
        writer = asyncio.create_task(self._write(conn))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    with self._lock:
                        if record.closed_by is None:
                            record.closed_by = "client"
                        if record.close_code is None:
                            record.close_code = int(message.get("code") or 1005)
                    break
                raw = message.get("text")
                if raw is None:
                    raw = (message.get("bytes") or b"").decode("utf-8", "replace")
                with self._lock:
                    self._on_payload(conn, raw)
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            with self._lock:
                self._live.discard(conn)
                conn.closing = True
                self._detach(conn, record.close_code if record.closed_by == "client" else None)

    async def _write(self, conn: _Connection) -> None:
        """The only writer of ``conn``: payloads, the session's dispatches, then a close."""
        try:
            while True:
                item = await conn.outbox.get()
                if isinstance(item, _Close):
                    await self._write_close(conn, item)
                    return
                if item is _FLUSH:
                    with self._lock:
                        session = conn.session
                        if session is None or session.connection is not conn:
                            continue
                        pending = session.events[conn.delivered :]
                        conn.delivered = session.seq
                    for payload in pending:
                        await self._write_payload(conn, payload)
                else:
                    await self._write_payload(conn, item)
        except (OSError, RuntimeError, WebSocketDisconnect):
            return  # the client went away: the reader ends the connection

    async def _write_payload(self, conn: _Connection, payload: Json) -> None:
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            conn.record.sent.append(payload)
        if conn.compress is not None:
            await conn.websocket.send_bytes(conn.compress(text.encode()))
        else:
            await conn.websocket.send_text(text)

    async def _write_close(self, conn: _Connection, close: _Close) -> None:
        with self._lock:
            conn.record.closed_by = "drop" if close.drop else "server"
            conn.record.close_code = close.code
        if close.drop:
            assert conn.transport is not None  # drop_gateway checked it
            conn.transport.abort()
            return
        await conn.websocket.close(close.code, close.reason)

    def _on_payload(self, conn: _Connection, raw: str) -> None:  # lock held
        if conn.closing:
            return
        now = time.monotonic()
        conn.sends.append(now)
        while conn.sends and now - conn.sends[0] > 60:
            conn.sends.popleft()
        if len(conn.sends) > GATEWAY_SEND_LIMIT:
            self._close(conn, _Close(4008, "Rate limited."))
            return
        try:
            payload = json.loads(raw)
        except ValueError:
            self._close(conn, _Close(4002, "Error while decoding payload."))
            return
        if not isinstance(payload, dict):
            self._close(conn, _Close(4002, "Error while decoding payload."))
            return
        conn.record.received.append(payload)
        op, data = payload.get("op"), payload.get("d")
        if op == OP_HEARTBEAT:
            conn.record.heartbeats += 1
            if self.ack_heartbeats:
                self._send(conn, {"op": OP_HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op == OP_IDENTIFY:
            self._identify(conn, data if isinstance(data, dict) else {})
        elif op == OP_RESUME:
            self._resume(conn, data if isinstance(data, dict) else {})
        elif op in (OP_PRESENCE_UPDATE, OP_VOICE_STATE_UPDATE, OP_REQUEST_GUILD_MEMBERS):
            if conn.session is None:
                self._close(conn, _Close(4003, "Not authenticated."))
            elif op == OP_PRESENCE_UPDATE:
                self.presences.append(copy.deepcopy(data))
            elif op == OP_REQUEST_GUILD_MEMBERS and isinstance(data, dict):
                self._members_chunk(conn.session, data)
        else:
            self._close(conn, _Close(4001, "Unknown opcode."))

    def _identify(self, conn: _Connection, data: Json) -> None:  # lock held
        self.identify_count += 1
        self.identifies.append(copy.deepcopy(data))
        if conn.session is not None:
            self._close(conn, _Close(4005, "Already authenticated."))
            return
        if data.get("token") != self.token:
            self._close(conn, _Close(4004, "Authentication failed."))
            return
        intents = data.get("intents")
        if not isinstance(intents, int) or isinstance(intents, bool) or intents & ~_ALL_INTENTS:
            self._close(conn, _Close(4013, "Invalid intent(s)."))
            return
        privileged = sum(PRIVILEGED_INTENTS.values())
        if intents & privileged & ~self.allowed_intents:
            self._close(conn, _Close(4014, "Disallowed intent(s)."))
            return
        shard = data.get("shard")
        if shard is not None and (
            not isinstance(shard, list) or len(shard) != 2 or not 0 <= shard[0] < shard[1]
        ):
            self._close(conn, _Close(4010, "Invalid shard."))
            return
        session = GatewaySession(
            id=uuid.uuid4().hex,
            intents=intents,
            identify=copy.deepcopy(data),
            shard=(int(shard[0]), int(shard[1])) if shard else None,
        )
        self._session_starts += 1
        self.sessions.append(session)
        conn.session = session
        conn.record.session_id = session.id
        session.connection = conn
        guilds = [gid for gid in self._guilds if self._on_shard(session, gid)]
        ready: Json = {
            "v": API_VERSION,
            "user": self._get_me(_Req({}, {}, None, [])),
            "guilds": [{"id": gid, "unavailable": True} for gid in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.resume_gateway_url,
            "application": {"id": self.application_id, "flags": self._application_flags()},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
            "auth": {},
            "_trace": ['["fake-discord-gateway"]'],
        }
        if session.shard is not None:
            ready["shard"] = list(session.shard)
        self._append(session, "READY", ready)
        for gid in guilds:
            self._append(session, "GUILD_CREATE", self._guild_create(gid, session))

    def _resume(self, conn: _Connection, data: Json) -> None:  # lock held
        self.resume_count += 1
        if conn.session is not None:
            self._close(conn, _Close(4005, "Already authenticated."))
            return
        if data.get("token") != self.token:
            self._close(conn, _Close(4004, "Authentication failed."))
            return
        session = next((s for s in self.sessions if s.id == data.get("session_id")), None)
        if session is None or session.invalidated:
            self._send(conn, {"op": OP_INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        seq = data.get("seq") or 0
        if not isinstance(seq, int) or seq > session.seq or seq < 0:
            session.invalidated = True
            self._close(conn, _Close(4007, "Invalid seq."))
            return
        previous = session.connection
        if previous is not None and previous is not conn:
            self._close(previous, _Close(4000, "Session resumed elsewhere"))
        session.connection = conn
        session.resumes += 1
        conn.session = session
        conn.record.session_id = session.id
        conn.delivered = seq  # the replay: everything after the client's last seq
        self._append(session, "RESUMED", {"_trace": ['["fake-discord-gateway"]']})

    def _members_chunk(self, session: GatewaySession, data: Json) -> None:  # lock held
        guild_id = str(data.get("guild_id", ""))
        guild = self._guilds.get(guild_id)
        if guild is None:
            return
        wanted = data.get("user_ids")
        ids = [uid for uid in guild["members"] if not wanted or uid in {str(w) for w in wanted}]
        chunk: Json = {
            "guild_id": guild_id,
            "members": [self._member(uid, with_user=True) for uid in ids],
            "chunk_index": 0,
            "chunk_count": 1,
        }
        if data.get("nonce") is not None:
            chunk["nonce"] = data["nonce"]
        self._append(session, "GUILD_MEMBERS_CHUNK", chunk)


_REST_ROUTES: list[tuple[str, str, Callable[..., Any], bool]] = [
    ("GET", "/gateway", FakeDiscordServer._get_gateway, False),
    ("GET", "/gateway/bot", FakeDiscordServer._get_gateway_bot, True),
    ("GET", "/users/@me", FakeDiscordServer._get_me, True),
    ("POST", "/users/@me/channels", FakeDiscordServer._create_dm, True),
    ("GET", "/users/{user_id}", FakeDiscordServer._get_user, True),
    ("GET", "/oauth2/applications/@me", FakeDiscordServer._get_application, True),
    ("GET", "/applications/@me", FakeDiscordServer._get_application, True),
    ("GET", "/channels/{channel_id}", FakeDiscordServer._get_channel, True),
    ("GET", "/channels/{channel_id}/messages", FakeDiscordServer._get_messages, True),
    ("POST", "/channels/{channel_id}/messages", FakeDiscordServer._create_message, True),
    ("GET", "/channels/{channel_id}/messages/{message_id}", FakeDiscordServer._get_message, True),
    ("PATCH", "/channels/{channel_id}/messages/{message_id}", FakeDiscordServer._edit_message, True),
    ("DELETE", "/channels/{channel_id}/messages/{message_id}", FakeDiscordServer._delete_message, True),
    ("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", FakeDiscordServer._add_reaction, True),
    ("DELETE", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", FakeDiscordServer._remove_reaction, True),
    ("POST", "/channels/{channel_id}/typing", FakeDiscordServer._trigger_typing, True),
    ("POST", "/channels/{channel_id}/messages/{message_id}/threads", FakeDiscordServer._start_thread, True),
    ("GET", "/guilds/{guild_id}", FakeDiscordServer._get_guild, True),
    ("GET", "/guilds/{guild_id}/channels", FakeDiscordServer._get_guild_channels, True),
    ("GET", "/guilds/{guild_id}/members/{user_id}", FakeDiscordServer._get_member, True),
    ("GET", "/applications/{application_id}/commands", FakeDiscordServer._get_commands, True),
    ("PUT", "/applications/{application_id}/commands", FakeDiscordServer._put_commands, True),
    ("POST", "/applications/{application_id}/commands", FakeDiscordServer._post_command, True),
    ("DELETE", "/applications/{application_id}/commands/{command_id}", FakeDiscordServer._delete_command, True),
    ("GET", "/applications/{application_id}/guilds/{guild_id}/commands", FakeDiscordServer._get_commands, True),
    ("PUT", "/applications/{application_id}/guilds/{guild_id}/commands", FakeDiscordServer._put_commands, True),
    # The interaction's token authenticates these: discord.py sends no Authorization.
    ("POST", "/interactions/{webhook_id}/{webhook_token}/callback", FakeDiscordServer._interaction_callback, False),
    ("POST", "/webhooks/{webhook_id}/{webhook_token}", FakeDiscordServer._create_followup, False),
    ("GET", "/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}", FakeDiscordServer._get_webhook_message, False),
    ("PATCH", "/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}", FakeDiscordServer._edit_webhook_message, False),
    ("DELETE", "/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}", FakeDiscordServer._delete_webhook_message, False),
]  # fmt: skip

_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


# -- helpers ---------------------------------------------------------------------------------


def _sid(value: int | str) -> str:
    """A snowflake as Discord's JSON spells it: a string of digits."""
    text = str(value)
    if not text.isdigit():
        raise ValueError(f"not a snowflake: {value!r}")
    return str(int(text))


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def _walk(components: Iterable[Any]) -> Iterable[Json]:
    """Every component, depth first (rows, containers, sections, labels)."""
    for component in components:
        if not isinstance(component, dict):
            continue
        yield component
        yield from _walk(component.get("components") or [])
        for key in ("component", "accessory"):
            if isinstance(component.get(key), dict):
                yield from _walk([component[key]])


def _submitted(modal_components: list[Json], values: Mapping[str, Any]) -> list[Json]:
    """A modal submit's components, mirroring the modal the bot opened."""
    inputs = {c["custom_id"] for c in _walk(modal_components) if "custom_id" in c}
    unknown = set(values) - inputs
    if unknown:
        raise ValueError(f"the modal has no inputs {sorted(unknown)}; it has {sorted(inputs)}")

    def answer(component: Json) -> Json:
        result: Json = {"type": component["type"], "custom_id": component["custom_id"]}
        if "id" in component:
            result["id"] = component["id"]
        value = values.get(component["custom_id"], "")
        if component["type"] == 4:
            result["value"] = value
        else:
            result["values"] = [value] if isinstance(value, str) else list(value)
        return result

    submitted = []
    for top in modal_components:
        if top.get("type") == 1:
            children = [answer(c) for c in top.get("components") or [] if "custom_id" in c]
            submitted.append({"type": 1, "components": children})
        elif top.get("type") == 18 and isinstance(top.get("component"), dict):
            label: Json = {"type": 18, "component": answer(top["component"])}
            if "id" in top:
                label["id"] = top["id"]
            submitted.append(label)
    return submitted


def _check_message(body: Json, files: Sequence[UploadedFile], *, creating: bool) -> None:
    """Discord's limits on a message's content, embeds and components."""
    if not isinstance(body, dict):
        raise ApiError(400, "400: Bad Request", 50109)
    content = body.get("content")
    if content is not None:
        if not isinstance(content, str):
            raise _form_error(["content"], "BASE_TYPE_STRING", "Must be a string.")
        if len(content) > MAX_CONTENT_LENGTH:
            raise _form_error(
                ["content"],
                "BASE_TYPE_MAX_LENGTH",
                f"Must be {MAX_CONTENT_LENGTH} or fewer in length.",
            )
    embeds = body.get("embeds") or []
    if len(embeds) > MAX_EMBEDS:
        raise _form_error(
            ["embeds"], "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_EMBEDS} or fewer in length."
        )
    total = 0
    for index, embed in enumerate(embeds):
        limits = {"title": 256, "description": 4096}
        for key, limit in limits.items():
            text = str(embed.get(key) or "")
            if len(text) > limit:
                raise _form_error(
                    ["embeds", index, key],
                    "BASE_TYPE_MAX_LENGTH",
                    f"Must be {limit} or fewer in length.",
                )
            total += len(text)
        fields = embed.get("fields") or []
        if len(fields) > 25:
            raise _form_error(
                ["embeds", index, "fields"],
                "BASE_TYPE_MAX_LENGTH",
                "Must be 25 or fewer in length.",
            )
        for number, item in enumerate(fields):
            for key, limit in (("name", 256), ("value", 1024)):
                text = str(item.get(key) or "")
                if len(text) > limit:
                    raise _form_error(
                        ["embeds", index, "fields", number, key],
                        "BASE_TYPE_MAX_LENGTH",
                        f"Must be {limit} or fewer in length.",
                    )
                total += len(text)
        total += len(str((embed.get("footer") or {}).get("text") or ""))
        total += len(str((embed.get("author") or {}).get("name") or ""))
    if total > MAX_EMBED_TOTAL:
        raise ApiError(
            400,
            "Invalid Form Body",
            50035,
            errors={
                "embeds": {
                    "_errors": [
                        {
                            "code": "MAX_EMBED_SIZE_EXCEEDED",
                            "message": "Embed size exceeds maximum size of 6000",
                        }
                    ]
                }
            },
        )
    components = body.get("components") or []
    _check_components(components, int(body.get("flags") or 0))
    empty = not (
        content or embeds or files or components or body.get("sticker_ids") or body.get("poll")
    )
    if creating and empty:
        raise ApiError(400, "Cannot send an empty message", 50006)


def _check_voice_message(body: Json, files: Sequence[UploadedFile]) -> None:
    """A voice message as Discord takes it: one audio file with its metadata, nothing else."""
    extra = ("content", "embeds", "components", "sticker_ids", "poll")
    if any(body.get(key) for key in extra):
        raise ApiError(400, "Voice messages do not support additional content", 50159)
    audio = (files[0].content_type or "").split(";")[0].strip().lower() if files else ""
    if len(files) != 1 or not audio.startswith("audio/"):
        raise ApiError(400, "Voice messages must have a single audio attachment", 50160)
    attachments = body.get("attachments")
    meta = attachments[0] if isinstance(attachments, list) and len(attachments) == 1 else None
    if not isinstance(meta, dict) or str(meta.get("id")) != "0":
        raise ApiError(400, "Voice messages must have supporting metadata", 50161)
    duration, waveform = meta.get("duration_secs"), meta.get("waveform")
    try:
        samples = base64.b64decode(str(waveform), validate=True)
    except (binascii.Error, ValueError):
        samples = b""
    numeric = isinstance(duration, int | float) and not isinstance(duration, bool)
    if not numeric or duration < 0 or not samples or len(samples) > 256:
        raise ApiError(400, "Voice messages must have supporting metadata", 50161)


def _check_components(components: list[Any], flags: int) -> None:
    seen: set[str] = set()
    if not flags & FLAG_COMPONENTS_V2:
        if len(components) > MAX_ROWS:
            raise _form_error(
                ["components"], "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_ROWS} or fewer in length."
            )
        for index, row in enumerate(components):
            if not isinstance(row, dict) or row.get("type") != 1:
                raise _form_error(
                    ["components", index, "type"],
                    "UNION_TYPE_CHOICES",
                    'Value of field "type" must be one of (1,).',
                )
            children = row.get("components") or []
            if not children or len(children) > MAX_ROW_WIDTH:
                raise _form_error(
                    ["components", index, "components"],
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 5 in length.",
                )
            if any(c.get("type") in _SELECT_TYPES for c in children) and len(children) > 1:
                raise _form_error(
                    ["components", index, "components"],
                    "COMPONENT_LAYOUT_WIDTH_EXCEEDED",
                    "The specified component exceeds the maximum width",
                )
            for number, child in enumerate(children):
                _check_button(child, ["components", index, "components", number])
    for component in _walk(components):
        if "custom_id" not in component:
            continue
        custom_id = component["custom_id"]
        if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= MAX_CUSTOM_ID:
            raise _form_error(
                ["components", "custom_id"],
                "BASE_TYPE_BAD_LENGTH",
                f"Must be between 1 and {MAX_CUSTOM_ID} in length.",
            )
        if custom_id in seen:
            raise _form_error(
                ["components", "custom_id"],
                "COMPONENT_CUSTOM_ID_DUPLICATED",
                "Component custom id cannot be duplicated",
            )
        seen.add(custom_id)


def _check_button(child: Json, path: list[str | int]) -> None:
    if child.get("type") != 2:
        return
    label = child.get("label")
    if label is not None and len(str(label)) > MAX_BUTTON_LABEL:
        raise _form_error(
            [*path, "label"],
            "BASE_TYPE_MAX_LENGTH",
            f"Must be {MAX_BUTTON_LABEL} or fewer in length.",
        )
    style = child.get("style")
    if style == 5:
        if not child.get("url") or "custom_id" in child:
            raise _form_error([*path, "url"], "BUTTON_COMPONENT_URL_REQUIRED", "A url is required")
    elif style != 6 and not child.get("custom_id"):
        raise _form_error(
            [*path, "custom_id"], "BUTTON_COMPONENT_CUSTOM_ID_REQUIRED", "A custom id is required"
        )


def _check_modal(data: Any) -> None:
    if not isinstance(data, dict):
        raise _form_error(
            ["data"], "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType"
        )
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= MAX_CUSTOM_ID:
        raise _form_error(
            ["data", "custom_id"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
        )
    title = data.get("title")
    if not isinstance(title, str) or not 1 <= len(title) <= 45:
        raise _form_error(
            ["data", "title"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 45 in length."
        )
    components = data.get("components") or []
    if not 1 <= len(components) <= 5:
        raise _form_error(
            ["data", "components"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length."
        )


async def _decode_body(request: Request) -> tuple[Any, list[UploadedFile]]:
    mime = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if mime == "multipart/form-data":
        body: Any = None
        files: list[UploadedFile] = []
        async with request.form() as form:
            for key, value in form.multi_items():
                if isinstance(value, UploadFile):
                    data = await value.read()
                    files.append(UploadedFile(key, value.filename, data, value.content_type))
                elif key == "payload_json":
                    body = _json_body(value.encode())
        return body, files
    raw = await request.body()
    return (_json_body(raw) if raw else None), []


def _json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "The request body contains invalid JSON.", 50109) from exc


def _compressor(kind: str | None) -> Callable[[bytes], bytes] | None:
    """Transport compression: one stream per connection, flushed at every payload."""
    if not kind:
        return None
    if kind == "zlib-stream":
        stream = zlib.compressobj()
        return lambda data: stream.compress(data) + stream.flush(zlib.Z_SYNC_FLUSH)
    if kind == "zstd-stream":
        # discord.py asks for it when it can decode it: zstandard, or Python 3.14's stdlib.
        try:
            import zstandard  # type: ignore[import-not-found]
        except ImportError:
            try:
                from compression import zstd  # type: ignore[import-not-found]
            except ImportError:
                raise ValueError("no zstd module") from None
            compressor = zstd.ZstdCompressor()
            return lambda data: compressor.compress(data, mode=zstd.ZstdCompressor.FLUSH_BLOCK)
        cobj = zstandard.ZstdCompressor().compressobj()
        return lambda data: cobj.compress(data) + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    raise ValueError(kind)


#: Marks an answer of Cloudflare's own (it gets no ``Via``); never sent.
_CLOUDFLARE = "x-fake-cloudflare"


def _json(
    content: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(content, status_code=status, headers=dict(headers or {}))


def _error_response(error: ApiError) -> JSONResponse:
    body: Json = {"message": error.message, "code": error.code}
    if error.errors is not None:
        body["errors"] = error.errors
    return _json(body, error.status, {"Via": "1.1 google"})


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error_response(ApiError(404, "404: Not Found"))


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error_response(ApiError(405, "405: Method Not Allowed"))
