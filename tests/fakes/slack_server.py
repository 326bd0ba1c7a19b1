"""A fake Slack: the Web API over real HTTP and Socket Mode over a real WebSocket, on 127.0.0.1.

It runs uvicorn in a background thread with its own event loop, like the fake Telegram and
the fake Discord, so synchronous tests, async tests and subprocesses can all use it. The
Web API lives under ``api_url`` (``http://127.0.0.1:PORT/api/``: what slack_sdk's
``base_url`` or the product's ``SLACK_API_URL`` holds); ``apps.connections.open`` names
the Socket Mode WebSocket on the same server (``ws://127.0.0.1:PORT/link/?ticket=...``)::

    with FakeSlackServer() as fake:
        fake.add_user(ALICE, name="alice")
        fake.add_channel(GENERAL, name="general", members=[ALICE])
        ...  # start the bot against fake.api_url with fake.bot_token / fake.app_token
        fake.dm(ALICE, "hello")
        ...  # let it answer
        assert fake.messages(fake.dm_channel(ALICE))[-1].text == "Hi!"

Web API. ``GET`` or ``POST`` ``/api/<method>``, the arguments form-encoded, in the query or
as JSON (``Content-Type: application/json``, the token then only in the header, as on
Slack); ``blocks``, ``view`` and ``metadata`` as JSON strings in a form. Every method but
``apps.connections.open`` needs the bot token, ``Authorization: Bearer xoxb-...`` (or a
``token`` form argument): ``not_authed`` without one, ``invalid_auth`` for a wrong one,
``not_allowed_token_type`` for the app token; ``apps.connections.open`` needs the app token
(``xapp-``) in the header. Answers have Slack's shape: ``{"ok": true, ...}``, errors
``{"ok": false, "error": "channel_not_found"}`` with HTTP 200 (``invalid_blocks`` and
``invalid_arguments`` carry ``response_metadata.messages``), ``missing_scope`` when the
bot lacks the method's scope (``scopes``), ``unknown_method`` with 404. Rate limits: 429
with ``Retry-After`` (whole seconds) and ``{"ok": false, "error": "ratelimited"}``, from a
window per method (``LIMITS``: chat.postMessage about one a second per channel with short
bursts, the other methods their documented tier per minute; ``enforce_limits=False`` turns
it off) or scripted by ``rate_limit_next``; ``fail_next`` scripts any other error and
status; ``count_429`` counts the 429s sent. Every call is recorded (``calls``).

Methods: ``auth.test``, ``apps.connections.open``, ``chat.postMessage`` (to a channel id
or name, or to a user id: their DM), ``chat.update``, ``chat.delete``, ``chat.postEphemeral``,
``conversations.open`` (1:1 DMs), ``conversations.history``, ``conversations.replies``
(pages by ``limit`` and ``cursor``, ``oldest``/``latest``/``inclusive``), ``users.info``,
``reactions.add``, ``views.open``, ``views.update``, ``assistant.threads.setStatus``, and
the external file upload (scope ``files:write``): ``files.getUploadURLExternal`` names an
upload URL on the same server (``http://127.0.0.1:PORT/upload/v1/<key>``, one use, no
token: the URL is the secret), the bytes are POSTed there, and
``files.completeUploadExternal`` shares the uploaded files into ``channel_id`` (a
``thread_ts`` of it) as one bot message with those files, as Slack shows a file share
(``Message.files``; the bytes in ``uploads``).
Messages are checked as Slack does: text or blocks, at most 40,000 characters of text
(``msg_too_long``; Slack documents truncation there, the fake refuses), 50 blocks (100 in
a modal), each block's type and fields, text objects, buttons (text up to 75, ``action_id``
up to 255 and unique in its block, ``value`` up to 2000), unique ``block_id`` up to 255.
Like Slack, the fake gives every block without ``block_id`` and every interactive element
without ``action_id`` a generated one. A message's ``ts`` is ``"1712345678.000100"``-like,
increasing. ``thread_ts`` must name a message of the channel (the fake is stricter than
Slack here); a reply's ``ts`` names its parent's thread. The bot can edit and delete only
its own messages. ``views.open`` takes a ``trigger_id`` once, within ``trigger_ttl`` (3 s)
of the interaction that issued it (``invalid_trigger_id``, ``exchanged_trigger_id``,
``expired_trigger_id``); a modal needs a title of up to 24 characters and, with input
blocks, a submit button.

Socket Mode. The URL of ``apps.connections.open`` takes one connection (its ticket is
spent); the connection gets ``{"type": "hello", ...}`` and then envelopes ``events_api``
(``event_callback`` payloads), ``interactive`` (``block_actions``, ``view_submission``,
``view_closed``) and ``slash_commands``, each waiting for the client's ack
``{"envelope_id": ..., "payload"?: ...}`` within ``ack_timeout`` (3 s). Acks are taken on
any connection of the app. An events_api envelope not acked in time is sent again, the
same ``event_id`` and payload in a new envelope with ``retry_attempt`` 1, 2, 3 and
``retry_reason`` ``"timeout"``, after ``retry_delays`` (Slack: at once, after a minute,
after five); interactive and slash envelopes are not redelivered: the user sees an error
(``Delivery.expired``). New envelopes go to the newest open connection that was not told
to disconnect; without one, events wait for the next connection (as Slack's retries would
bring them), while an interaction or a slash command raises (Slack would show the user an
error). ``disconnect_socket(reason)`` sends ``{"type": "disconnect", "reason": ...}``:
``"warning"`` leaves the connection open, ``"refresh_requested"`` and ``"link_disabled"``
close it after ``close_after``; ``close_socket`` closes with a close frame, ``drop_socket``
cuts the TCP connection. ``link_disabled`` also turns ``socket_mode_enabled`` off:
``apps.connections.open`` then fails with ``SOCKET_MODE_DISABLED_ERROR``, a name the fake
chose (Slack's answer is undocumented).

HTTP Events API. With ``request_url`` set (``interactivity_url``, ``commands_url``: the
same by default), the same test controls POST instead, as Slack does: events as JSON,
interactions form-encoded ``payload=<json>``, slash commands form-encoded, signed with
``X-Slack-Request-Timestamp`` and ``X-Slack-Signature`` = ``v0=`` HMAC-SHA256 of
``v0:{timestamp}:{body}`` under ``signing_secret`` (``sign="forged"``, ``"expired"``,
``"missing"`` to test the refusal). An answer other than 2xx within ``http_timeout`` (3 s)
fails: an event is retried after ``retry_delays`` with ``X-Slack-Retry-Num`` and
``X-Slack-Retry-Reason`` (``http_timeout``, ``http_error``, ``connection_failed``) unless
the answer had ``X-Slack-No-Retry: 1``. ``verify_url`` sends the ``url_verification``
challenge. Slack disabling an app's events after many failures is not modelled.

Acks and ``response_url``. A slash command's ack (or HTTP answer) with text or blocks is
shown to the user as Slack would: ephemeral unless ``"response_type": "in_channel"``. A
view_submission's ack decides the modal: closed, or kept with ``"response_action":
"errors"``, replaced with ``"update"``, stacked with ``"push"``, all closed with ``"clear"``.
Every interaction carries a ``response_url`` (``http://127.0.0.1:PORT/response/<token>``,
5 uses in 30 minutes): ``replace_original`` edits the message the button was on,
``delete_original`` deletes it, otherwise ``response_type`` ``in_channel`` posts and the
default posts ephemerally to the user (``responses`` records them).

Events. ``dm``, ``channel_message``, ``mention``, ``thread_message`` keep the user's message
in the channel (``conversations.history`` shows it) and push what the app subscribed to
(``events``: ``app_mention``, ``message.im``, ``message.channels``, ``message.groups`` by
default): a mention in a channel brings an ``app_mention`` and a ``message`` event, two
event ids with the same ``ts`` and ``client_msg_id``; a DM never brings ``app_mention``.
A thread reply carries ``thread_ts`` and ``parent_user_id``. As on Slack, the bot's own
posts, edits and deletes come back as ``message`` events (with ``bot_id``; subtypes
``message_changed``, ``message_deleted``) where the app subscribed to the channel's
messages (``echo_bot_messages``); ephemeral messages never do. ``click``, ``submit_view``,
``close_view`` and ``slash`` push interactions; ``push_event`` any event. Every push is a
``Delivery`` in ``deliveries`` with its attempts, ack and ack payload.

Test controls are thread-safe: the state is behind a lock, sends and timers go through the
server's loop. Files people send are modelled for DMs only (``dm(files=…)``, served at
``url_private`` to the bot's token); the bot's uploads anywhere it may post. Not modelled: attachments (legacy), Enterprise Grid, mpim DMs,
OAuth, user tokens, message shortcuts, ``block_suggestion``, home tabs, the per-workspace
limit over all channels, and Slack's ~4,000-character text advice.

slack_sdk 3.48 / slack_bolt 1.30 against it, as learnt here. ``AsyncWebClient`` urljoins
``base_url`` (given its trailing slash if missing) and the method. It retries nothing but
connection errors by default, so a 429 is a ``SlackApiError`` unless the client is given
``AsyncRateLimitErrorRetryHandler`` (it sleeps ``Retry-After`` plus up to 1 s); and it warns
(``UserWarning``) when chat.postMessage has blocks but no ``text``. Bolt gives every request
an ``AsyncWebClient`` copied from the app's (its ``base_url`` included), and the Socket Mode
handler asks ``apps.connections.open`` through the app's client: pointing that one client
at the fake is enough. Bolt asks ``auth.test`` once, at the first request. It acks when a
listener calls ``ack()`` while the listener runs on, so the listener's Web API calls may
reach Slack before the ack. Its Socket Mode handler acks only a 200 from the app: an event
no listener takes (bolt answers 404) is never acked, and Slack sends it three more times.
The aiohttp ``SocketModeClient`` (built inside a running loop: its ``__init__`` starts a
task) reconnects on every ``disconnect`` envelope, ``warning`` included, by a new
``apps.connections.open``; after a dropped connection it notices only at its next
``ping_interval`` tick (the handler's default is 10 s); after ``link_disabled`` it retries
``apps.connections.open`` forever. It hands ``retry_attempt`` and ``retry_reason`` to bolt
as ``x-slack-retry-num`` / ``x-slack-retry-reason`` headers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import hashlib
import hmac
import itertools
import json
import math
import mimetypes
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self
from urllib.parse import parse_qs, urlencode

import httpx
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.fakes.background import BackgroundServer

Json = dict[str, Any]

API_ROOT = "/api/"
UPLOAD_PATH = "/upload/v1/"
SOCKET_PATH = "/link/"
RESPONSE_PATH = "/response/"

DEFAULT_BOT_TOKEN = "xoxb-fake-bot-token"
DEFAULT_APP_TOKEN = "xapp-1-A0FAKEAPP1-fake-app-token"
DEFAULT_SIGNING_SECRET = "fake-signing-secret"
DEFAULT_VERIFICATION_TOKEN = "fake-verification-token"
TEAM_ID = "T0FAKETEAM"
TEAM_DOMAIN = "fake"
BOT_USER_ID = "U0FAKEBOT1"
BOT_ID = "B0FAKEBOT1"
APP_ID = "A0FAKEAPP1"
OWNER_ID = "U0OWNER001"

#: What ``apps.connections.open`` answers after ``link_disabled`` (the fake's choice).
SOCKET_MODE_DISABLED_ERROR = "socket_mode_disabled"

MAX_TEXT = 40_000
MAX_BLOCKS = 50
MAX_MODAL_BLOCKS = 100
MAX_BLOCK_ID = 255
MAX_ACTION_ID = 255
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_MARKDOWN_TEXT = 12_000
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_URL = 3000
MAX_ACTIONS_ELEMENTS = 25
MAX_CONTEXT_ELEMENTS = 10
MAX_OPTIONS = 100
MAX_LABEL = 2000
MAX_VIEW_TITLE = 24
MAX_CALLBACK_ID = 255
MAX_PRIVATE_METADATA = 3000
MAX_INPUT_LENGTH = 3000

#: Slack's windows: a trigger id 3 s, an ack 3 s, an HTTP answer 3 s.
TRIGGER_TTL = 3.0
ACK_TIMEOUT = 3.0
HTTP_TIMEOUT = 3.0
#: Slack retries an event three times: at once, after a minute, after five.
RETRY_DELAYS = (0.0, 60.0, 300.0)
RESPONSE_URL_TTL = 30 * 60.0
RESPONSE_URL_USES = 5

DEFAULT_SCOPES = frozenset(
    {
        "app_mentions:read",
        "assistant:write",
        "channels:history",
        "chat:write",
        "commands",
        "files:write",
        "groups:history",
        "im:history",
        "im:write",
        "reactions:write",
        "users:read",
    }
)
DEFAULT_EVENTS = frozenset({"app_mention", "message.im", "message.channels", "message.groups"})

#: ``method -> (limit, window seconds, per)``: requests over it get 429. ``per`` is
#: ``"channel"`` (a window per channel) or ``""`` (one for the workspace). Methods not
#: listed are not limited (auth.test is "special"; apps.connections.open is Tier 1, but
#: the fake lets clients reconnect at will).
LIMITS: dict[str, tuple[int, float, str]] = {
    # "1 per second per channel, short bursts allowed": a burst of 5 in 5 s here.
    "chat.postMessage": (5, 5.0, "channel"),
    "chat.postEphemeral": (100, 60.0, ""),  # Tier 4
    "chat.update": (50, 60.0, ""),  # Tier 3
    "chat.delete": (50, 60.0, ""),  # Tier 3
    # Tier 3 (internal apps; non-Marketplace distributed apps since 2025: 1 a minute).
    "conversations.history": (50, 60.0, ""),
    "conversations.replies": (50, 60.0, ""),
    "conversations.open": (50, 60.0, ""),  # Tier 3
    "reactions.add": (50, 60.0, ""),  # Tier 3
    "users.info": (100, 60.0, ""),  # Tier 4
    "views.open": (100, 60.0, ""),  # Tier 4
    "views.update": (100, 60.0, ""),  # Tier 4
    "assistant.threads.setStatus": (600, 60.0, ""),
}

_MESSAGE_BLOCKS = frozenset(
    {
        "actions",
        "context",
        "divider",
        "file",
        "header",
        "image",
        "input",
        "markdown",
        "rich_text",
        "section",
        "table",
        "video",
    }
)
_MODAL_BLOCKS = frozenset(
    {"actions", "context", "divider", "header", "image", "input", "rich_text", "section", "video"}
)
_INTERACTIVE = frozenset(
    {
        "button",
        "checkboxes",
        "channels_select",
        "conversations_select",
        "datepicker",
        "datetimepicker",
        "email_text_input",
        "external_select",
        "multi_channels_select",
        "multi_conversations_select",
        "multi_external_select",
        "multi_static_select",
        "multi_users_select",
        "number_input",
        "overflow",
        "plain_text_input",
        "radio_buttons",
        "rich_text_input",
        "static_select",
        "timepicker",
        "url_text_input",
        "users_select",
        "workflow_button",
    }
)
_INPUT_ELEMENTS = _INTERACTIVE - {"button", "overflow", "workflow_button"}
_SIGN_MODES = ("valid", "forged", "expired", "missing")

Sign = Literal["valid", "forged", "expired", "missing"]


class SlackError(Exception):
    """Raised inside a Web API handler; becomes ``{"ok": false, "error": ...}``."""

    def __init__(
        self, error: str, *, status: int = 200, messages: Sequence[str] = (), **extra: Any
    ) -> None:
        super().__init__(error)
        self.error = error
        self.status = status
        self.messages = list(messages)
        self.extra = extra


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One Web API request as the fake answered it (refused ones included)."""

    method: str
    """``"chat.postMessage"``."""
    http_method: str
    params: Json
    """The arguments, query and body merged; JSON strings of a form decoded."""
    content_type: str
    token: str | None
    status: int
    error: str | None
    """The ``error`` of a refused call, ``None`` when ``ok``."""
    time: float
    """``time.monotonic()`` at arrival."""


@dataclass(slots=True)
class Upload:
    """A file the bot uploads: announced (``files.getUploadURLExternal``), its bytes
    POSTed to its URL, then shared (``files.completeUploadExternal``)."""

    id: str
    filename: str
    length: int
    key: str
    data: bytes | None = None
    """``None`` until the bytes arrive."""
    content_type: str | None = None
    """The upload POST's ``Content-Type``."""
    title: str | None = None
    shared_in: str | None = None
    """The channel it was shared in."""


@dataclass(frozen=True, slots=True)
class Edit:
    """An earlier version of an edited message."""

    text: str
    blocks: list[Json]
    time: float


@dataclass(slots=True)
class Message:
    """A message in a channel (a user's or the bot's) or an ephemeral one, latest version."""

    channel: str
    ts: str
    user: str
    text: str = ""
    blocks: list[Json] = field(default_factory=list)
    thread_ts: str | None = None
    """The parent's ``ts`` for a reply (a parent has none)."""
    bot_id: str | None = None
    """Set for the bot's messages."""
    ephemeral_to: str | None = None
    """The user who alone sees it, for an ephemeral message."""
    hidden: bool = False
    """An ephemeral message Slack took but shows nobody: one into a thread that has no
    reply yet ("only shown if there is already an active thread")."""
    via: str = "api"
    """``"user"`` (pushed by the test), ``"api"``, ``"response_url"`` or ``"ack"``."""
    mrkdwn: bool = True
    metadata: Json | None = None
    reply_broadcast: bool = False
    client_msg_id: str | None = None
    #: Files shared with the message (``dm(files=…)``): their JSON as Slack shows it.
    files: list[Json] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    """Earlier versions, oldest first."""
    deleted: bool = False
    reactions: list[str] = field(default_factory=list)
    """The names the bot reacted with."""
    created: float = 0.0
    """``time.time()`` when posted."""

    @property
    def is_bot(self) -> bool:
        return self.bot_id is not None

    @property
    def ephemeral(self) -> bool:
        return self.ephemeral_to is not None

    @property
    def action_ids(self) -> list[str]:
        """The ``action_id`` of every interactive element, in order."""
        return [element["action_id"] for _block, element in _elements(self.blocks)]

    @property
    def buttons(self) -> list[Json]:
        """Every button, in order."""
        return [e for _b, e in _elements(self.blocks) if e.get("type") == "button"]

    def element(self, action_id: str) -> tuple[Json, Json]:
        """``(block, element)`` of the interactive element ``action_id``; ``KeyError``."""
        for block, element in _elements(self.blocks):
            if element.get("action_id") == action_id:
                return block, element
        raise KeyError(f"message {self.ts} has no element {action_id!r}: {self.action_ids}")


@dataclass(slots=True)
class View:
    """A modal the bot opened, as shown now."""

    id: str
    user: str
    trigger_id: str
    view: Json
    """The view as Slack keeps it (generated block and action ids included)."""
    opened: float
    hash: str
    root_id: str
    previous_id: str | None = None
    closed: bool = False
    submissions: list[Json] = field(default_factory=list)
    """The ``state.values`` of every submission, in order."""
    errors: Json | None = None
    """The errors of the last ``response_action: errors``."""
    versions: list[Json] = field(default_factory=list)
    """Earlier versions (views.update, ``response_action: update``), oldest first."""

    @property
    def callback_id(self) -> str:
        return str(self.view.get("callback_id") or "")

    @property
    def private_metadata(self) -> str:
        return str(self.view.get("private_metadata") or "")


@dataclass(slots=True)
class Attempt:
    """One try at delivering an envelope (Socket Mode) or a request (HTTP)."""

    number: int
    """``retry_attempt`` / ``X-Slack-Retry-Num``: 0 the first time."""
    time: float
    connection: int | None = None
    """Socket Mode: the index of the connection in ``connections``."""
    envelope_id: str | None = None
    status: int | None = None
    """HTTP: the answer's status (``None``: none came)."""
    body: str | None = None
    """HTTP: the answer's body."""
    failure: str | None = None
    """Why it failed: ``"timeout"`` (Socket Mode), ``"http_timeout"``, ``"http_error"``,
    ``"connection_failed"``; ``None`` while pending or when it succeeded."""


@dataclass(slots=True)
class Delivery:
    """One event, interaction or slash command Slack sends the app, with every try."""

    type: str
    """``"events_api"``, ``"interactive"`` or ``"slash_commands"``."""
    payload: Json
    transport: str
    """``"socket"`` or ``"http"``."""
    created: float
    sign: str = "valid"
    attempts: list[Attempt] = field(default_factory=list)
    acked: bool = False
    ack_payload: Json | None = None
    """The ack's ``payload`` (Socket Mode) or the HTTP answer's JSON (or ``{"text": ...}``)."""
    ack_time: float | None = None
    ack_error: str | None = None
    """Why Slack could not use the ack's payload (``"msg_too_long"``...)."""
    late_acks: int = 0
    """Acks after Slack gave up waiting (an interaction's, or a retried event's earlier try)."""
    expired: bool = False
    """Slack gave up: an interaction not acked in time, an event after its last retry."""
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set once acked or expired."""

    @property
    def event_id(self) -> str | None:
        return self.payload.get("event_id")

    @property
    def event(self) -> Json | None:
        return self.payload.get("event")

    @property
    def envelope_ids(self) -> list[str]:
        return [a.envelope_id for a in self.attempts if a.envelope_id]


@dataclass(slots=True)
class SocketConnection:
    """One Socket Mode WebSocket connection, as recorded."""

    ticket: str
    opened: float
    closed_by: str | None = None
    """``"client"``, ``"server"`` or ``"drop"`` (cut without a close frame)."""
    close_code: int | None = None
    disconnect_reason: str | None = None
    """The reason of the ``disconnect`` envelope sent on it, if any."""
    sent: list[Json] = field(default_factory=list)
    received: list[Json] = field(default_factory=list)
    """The client's messages (acks), in order."""


@dataclass(frozen=True, slots=True)
class ResponsePost:
    """One POST to a ``response_url``."""

    token: str
    body: Json
    status: int
    effect: str
    """``"replaced"``, ``"deleted"``, ``"ephemeral"``, ``"in_channel"`` or the error."""
    time: float


@dataclass(slots=True)
class Channel:
    id: str
    name: str
    kind: str
    """``"channel"`` (public), ``"group"`` (private) or ``"im"``."""
    members: set[str]
    bot_member: bool = True
    archived: bool = False
    user: str | None = None
    """An im's other member."""


@dataclass(slots=True)
class _Trigger:
    issued: float
    user: str
    used: bool = False


@dataclass(slots=True)
class _ResponseUrl:
    channel: str | None
    user: str
    message_ts: str | None
    ephemeral: bool
    thread_ts: str | None
    created: float
    uses: int = 0


#: What Slack's edge (Envoy) answers in plain text when the API behind it is away.
EDGE_ERROR = "upstream connect error or disconnect/reset before headers. reset reason: overflow"


@dataclass(slots=True)
class _Fault:
    count: int
    status: int
    error: str
    retry_after: float = 0.0
    plain: bool = False  # the edge's own answer: a text/plain body, no JSON


@dataclass(slots=True)
class _Window:
    limit: int
    window: float
    remaining: int = 0
    reset_at: float = 0.0

    def refresh(self, now: float) -> None:
        if now >= self.reset_at:
            self.remaining = self.limit
            self.reset_at = now + self.window


@dataclass(frozen=True, slots=True)
class _Req:
    method: str
    params: Json


@dataclass(frozen=True, slots=True)
class _Close:
    code: int
    reason: str = ""
    drop: bool = False


class _Conn:
    """Server side of one Socket Mode WebSocket; written only by its writer task."""

    def __init__(self, websocket: WebSocket, record: SocketConnection, index: int) -> None:
        self.websocket = websocket
        self.record = record
        self.index = index
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        self.closing = False
        self.draining = False  # told to disconnect: gets no new envelopes
        # ASGI cannot drop a connection; uvicorn's receive is a method of the protocol
        # that holds the transport.
        protocol = getattr(websocket._receive, "__self__", None)
        self.transport: asyncio.Transport | None = getattr(protocol, "transport", None)


def sign_request(secret: str, timestamp: int | str, body: bytes | str) -> str:
    """Slack's ``X-Slack-Signature``: ``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    raw = body.encode() if isinstance(body, str) else body
    base = b"v0:" + str(timestamp).encode() + b":" + raw
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class FakeSlackServer:
    """Slack's Web API, Socket Mode and HTTP event delivery with state; see the module
    docstring."""

    def __init__(
        self,
        *,
        bot_token: str = DEFAULT_BOT_TOKEN,
        app_token: str = DEFAULT_APP_TOKEN,
        signing_secret: str = DEFAULT_SIGNING_SECRET,
        verification_token: str = DEFAULT_VERIFICATION_TOKEN,
        bot_user_id: str = BOT_USER_ID,
        bot_name: str = "chathub",
        scopes: Iterable[str] = DEFAULT_SCOPES,
        events: Iterable[str] = DEFAULT_EVENTS,
        ack_timeout: float = ACK_TIMEOUT,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        trigger_ttl: float = TRIGGER_TTL,
        http_timeout: float = HTTP_TIMEOUT,
        enforce_limits: bool = True,
        echo_bot_messages: bool = True,
        limits: Mapping[str, tuple[int, float, str]] | None = None,
    ) -> None:
        """``events``: the app's event subscriptions; ``retry_delays``: before each of
        Slack's three retries of an event (tests shorten them, and ``ack_timeout``)."""
        if not bot_token.startswith("xoxb-") or not app_token.startswith("xapp-"):
            raise ValueError("the bot token starts with xoxb-, the app token with xapp-")
        self.bot_token = bot_token
        self._shared_files: dict[str, bytes] = {}
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.verification_token = verification_token
        self.bot_user_id = bot_user_id
        self.bot_name = bot_name
        self.scopes = frozenset(scopes)
        self.events = frozenset(events)
        self.ack_timeout = ack_timeout
        self.retry_delays = tuple(retry_delays)
        self.trigger_ttl = trigger_ttl
        self.http_timeout = http_timeout
        self.enforce_limits = enforce_limits
        self.echo_bot_messages = echo_bot_messages
        self.request_url: str | None = None
        """Set: events, interactions and commands are POSTed there (the HTTP Events API),
        not sent over Socket Mode."""
        self.interactivity_url: str | None = None
        """Where interactions go in HTTP mode (default ``request_url``)."""
        self.commands_url: str | None = None
        """Where slash commands go in HTTP mode (default ``request_url``)."""
        self.socket_mode_enabled = True
        """``False``: ``apps.connections.open`` fails (``link_disabled`` sets it)."""
        self._limits = dict(LIMITS if limits is None else limits)
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: BackgroundServer | None = None
        self._port = 0
        self._init_state()

    def _init_state(self) -> None:
        self.calls: list[Call] = []
        """Every Web API request, in arrival order."""
        self.deliveries: list[Delivery] = []
        """Every event, interaction and command pushed, in order."""
        self.acks: list[Json] = []
        """Every ack received over Socket Mode (unknown envelope ids included), in order."""
        self.connections: list[SocketConnection] = []
        """Every Socket Mode connection, oldest first."""
        self.responses: list[ResponsePost] = []
        """Every POST to a response_url, in order."""
        self.views: list[View] = []
        """Every modal opened (or pushed), in order."""
        self.statuses: list[tuple[str, str, str]] = []
        """``(channel, thread_ts, status)`` of every assistant.threads.setStatus."""
        self.uploads: dict[str, Upload] = {}
        """The bot's uploads by file id, in the order announced."""
        self.count_429 = 0
        """429 answers sent (scripted and over a window)."""
        self._users: dict[str, Json] = {}
        self._channels: dict[str, Channel] = {}
        self._dms: dict[str, str] = {}  # user -> im channel id
        self._messages: dict[str, list[Message]] = {}  # channel -> messages, ts order
        self._by_ts: dict[tuple[str, str], Message] = {}
        self._ephemerals: list[Message] = []
        self._views: dict[str, View] = {}
        self._triggers: dict[str, _Trigger] = {}
        self._response_urls: dict[str, _ResponseUrl] = {}
        self._tickets: dict[str, float] = {}  # unspent tickets -> issued
        self._envelopes: dict[str, tuple[Delivery, int]] = {}  # envelope id -> (delivery, try)
        self._pending: deque[Delivery] = deque()  # events waiting for a connection
        self._live: list[_Conn] = []
        self._faults: dict[str, list[_Fault]] = {}
        self._slow: dict[str, float] = {}
        self._windows: dict[str, _Window] = {}
        self._counter = itertools.count(1)
        self._last_ts = 0
        self._add_user(self.bot_user_id, self.bot_name, "Chathub", is_bot=True)
        self._add_user(OWNER_ID, "owner", "Owner")

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def http_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if not self._port:
            raise RuntimeError("the fake Slack server is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def api_url(self) -> str:
        """The Web API root, ``http://127.0.0.1:PORT/api/`` (slack_sdk's ``base_url``)."""
        return f"{self.http_url}{API_ROOT}"

    @property
    def socket_base_url(self) -> str:
        """Where ``apps.connections.open`` URLs point, without their ticket."""
        return f"ws://127.0.0.1:{self._port}{SOCKET_PATH}"

    def start(self) -> Self:
        if self._runner is None:
            routes: list[Any] = [
                Route(API_ROOT + "{method}", self._api, methods=["GET", "POST"]),
                Route(RESPONSE_PATH + "{token}", self._response_url, methods=["POST"]),
                Route(UPLOAD_PATH + "{key}", self._upload, methods=["POST"]),
                Route("/files-pri/{key}/{name}", self._file_download, methods=["GET"]),
                WebSocketRoute(SOCKET_PATH, self._socket),
                WebSocketRoute(SOCKET_PATH.rstrip("/"), self._socket),
            ]
            app = Starlette(routes=routes)
            self._runner = BackgroundServer(app, "fake-slack", self._on_loop)
        if not self._runner.running:
            self._runner.start()
            self._port = self._runner.port
        return self

    def stop(self) -> None:
        """Shut down (open Socket Mode connections get uvicorn's 1012); safe twice."""
        if self._runner is None or not self._runner.running:
            return
        self._runner.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Close every Socket Mode connection and forget all state but the configuration."""
        with self._lock:
            for conn in list(self._live):
                self._close(conn, _Close(1000, "reset"))
            self._init_state()

    def _on_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop

    # -- test-side inspection ----------------------------------------------------------------

    def messages(
        self, channel: str, thread_ts: str | None = None, *, include_deleted: bool = True
    ) -> list[Message]:
        """The bot's messages in ``channel`` (ephemeral ones aside), oldest first; with
        ``thread_ts``, those of that thread (its parent included). Live objects."""
        with self._lock:
            found = [m for m in self._messages.get(channel, ()) if m.is_bot]
        if thread_ts is not None:
            found = [m for m in found if thread_ts in (m.ts, m.thread_ts)]
        return found if include_deleted else [m for m in found if not m.deleted]

    def history(self, channel: str, thread_ts: str | None = None) -> list[Message]:
        """Every message of ``channel`` (users' and the bot's, not ephemeral, not deleted),
        oldest first; with ``thread_ts``, that thread's."""
        with self._lock:
            found = [m for m in self._messages.get(channel, ()) if not m.deleted]
        if thread_ts is not None:
            found = [m for m in found if thread_ts in (m.ts, m.thread_ts)]
        return found

    def message(self, channel: str, ts: str) -> Message:
        """One message of ``channel`` (or an ephemeral one); ``KeyError`` when none."""
        with self._lock:
            found = self._by_ts.get((channel, ts))
            if found is None:
                found = next(
                    (m for m in self._ephemerals if m.channel == channel and m.ts == ts), None
                )
        if found is None:
            raise KeyError((channel, ts))
        return found

    def ephemerals(self, user: str, channel: str | None = None) -> list[Message]:
        """The ephemeral messages ``user`` was shown (in ``channel``), oldest first."""
        with self._lock:
            return [
                m
                for m in self._ephemerals
                if m.ephemeral_to == user
                and not m.hidden
                and (channel is None or m.channel == channel)
            ]

    def calls_to(self, method: str) -> list[Call]:
        """The requests of ``method`` (``"chat.postMessage"``), in order."""
        with self._lock:
            return [call for call in self.calls if call.method == method]

    def dm_channel(self, user: str) -> str:
        """The im channel between the bot and ``user`` (created when missing)."""
        with self._lock:
            return self._dm(user)

    def view(self, view_id: str) -> View:
        with self._lock:
            return self._views[view_id]

    def open_views(self, user: str | None = None) -> list[View]:
        """The modals still open (``user``'s), oldest first."""
        with self._lock:
            return [v for v in self.views if not v.closed and user in (None, v.user)]

    @property
    def live_connections(self) -> int:
        """Socket Mode connections open now."""
        with self._lock:
            return len(self._live)

    @property
    def ready_connections(self) -> int:
        """Open Socket Mode connections that take new envelopes (not told to disconnect)."""
        with self._lock:
            return sum(1 for conn in self._live if not conn.draining and not conn.closing)

    def deliveries_of(self, kind: str) -> list[Delivery]:
        """The deliveries of an event type (``"app_mention"``), or of a payload type
        (``"block_actions"``, ``"view_submission"``), or of ``"slash_commands"``."""
        with self._lock:
            found = []
            for d in self.deliveries:
                event = d.payload.get("event") or {}
                if kind in (d.type, d.payload.get("type"), event.get("type")):
                    found.append(d)
            return found

    def deliveries_for(self, message: Message) -> list[Delivery]:
        """The deliveries of a user's ``message``: its ``message`` event and, for a
        mention, its ``app_mention``, in order."""
        with self._lock:
            return [
                d
                for d in self.deliveries
                if d.event is not None
                and d.event.get("ts") == message.ts
                and d.event.get("channel") == message.channel
                and d.event.get("user") == message.user
            ]

    # -- test-side world ---------------------------------------------------------------------

    def add_user(
        self,
        user_id: str,
        name: str | None = None,
        real_name: str | None = None,
        *,
        is_bot: bool = False,
        tz: str = "UTC",
    ) -> Json:
        """Register (or rename) a user; returns the user object."""
        with self._lock:
            return copy.deepcopy(self._add_user(user_id, name, real_name, is_bot=is_bot, tz=tz))

    def add_channel(
        self,
        channel_id: str,
        name: str | None = None,
        *,
        members: Iterable[str] = (),
        private: bool = False,
        bot_member: bool = True,
        archived: bool = False,
    ) -> None:
        """Add (or update) a public channel (``C...``), or a private one (``private``);
        ``bot_member=False``: the bot is not in it (``not_in_channel``)."""
        with self._lock:
            channel = self._channels.get(channel_id)
            if channel is None:
                channel = self._channels[channel_id] = Channel(
                    channel_id,
                    name or channel_id.lower(),
                    "group" if private else "channel",
                    set(),
                )
                self._messages.setdefault(channel_id, [])
            if name:
                channel.name = name
            channel.bot_member = bot_member
            channel.archived = archived
            for member in members:
                self._ensure_user(member)
                channel.members.add(member)

    # -- test-side scripting -----------------------------------------------------------------

    def rate_limit_next(self, method: str, count: int = 1, retry_after: float = 1.0) -> None:
        """Answer the next ``count`` calls of ``method`` (``"*"``: any) with 429 and
        ``Retry-After: ceil(retry_after)``."""
        self._arm(method, _Fault(count, 429, "ratelimited", retry_after))

    def fail_next(self, method: str, error: str, status: int = 200, count: int = 1) -> None:
        """Answer the next ``count`` calls of ``method`` (``"*"``: any) with
        ``{"ok": false, "error": error}`` and ``status`` (Slack's API errors are 200;
        ``"internal_error"`` with 500, ``"service_unavailable"`` with 503...)."""
        self._arm(method, _Fault(count, status, error))

    def slow(self, method: str, seconds: float) -> None:
        """Answer every call of ``method`` ``seconds`` late (Slack's round trip)."""
        self._slow[method] = seconds

    def edge_error_next(self, method: str, status: int = 503, count: int = 1) -> None:
        """Answer the next ``count`` calls of ``method`` as Slack's edge proxy does when
        the API behind it is down: ``status`` with a text/plain body, no JSON."""
        self._arm(method, _Fault(count, status, EDGE_ERROR, plain=True))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _arm(self, method: str, fault: _Fault) -> None:
        with self._lock:
            self._faults.setdefault(method, []).append(fault)

    # -- test-side events --------------------------------------------------------------------

    def dm(
        self,
        user: str,
        text: str,
        *,
        sign: Sign = "valid",
        files: Sequence[tuple[str, bytes, str, int | None]] = (),
    ) -> Message:
        """``user`` writes ``text`` to the bot in their DM; returns the message. Pushes a
        ``message`` event (``channel_type`` im) when subscribed to ``message.im``.
        ``files``: ``(name, data, mimetype, duration_ms)`` shared with it (a duration makes
        it an audio clip, ``slack_audio``), served at their ``url_private`` to the bot's
        token only."""
        with self._lock:
            self._ensure_user(user)
            channel = self._dm(user)
            message = self._user_message(channel, user, text, None)
            message.files = [self._file(*spec) for spec in files]
            if "message.im" in self.events:
                self._emit(self._message_event(message), sign)
            return message

    def channel_message(
        self,
        channel: str,
        user: str,
        text: str,
        thread_ts: str | None = None,
        *,
        sign: Sign = "valid",
    ) -> Message:
        """``user`` writes ``text`` in ``channel`` (in the thread ``thread_ts``); returns
        the message. Pushes ``message`` when subscribed to the channel's messages, and
        ``app_mention`` too when ``text`` mentions the bot (``<@BOT_USER_ID>``)."""
        with self._lock:
            target = self._channels.get(channel)
            if target is None or target.kind == "im":
                raise KeyError(f"no channel {channel}: add_channel it first (dm() for DMs)")
            if not target.bot_member:
                raise ValueError(f"the bot is not in {channel}: Slack sends it nothing")
            self._ensure_user(user)
            target.members.add(user)
            if thread_ts is not None:
                self._thread_parent(channel, thread_ts)  # KeyError when there is none
            message = self._user_message(channel, user, text, thread_ts)
            subscription = "message.groups" if target.kind == "group" else "message.channels"
            if f"<@{self.bot_user_id}>" in text and "app_mention" in self.events:
                self._emit(self._mention_event(message), sign)
            if subscription in self.events:
                self._emit(self._message_event(message), sign)
            return message

    def mention(
        self,
        channel: str,
        user: str,
        text: str,
        thread_ts: str | None = None,
        *,
        sign: Sign = "valid",
    ) -> Message:
        """``channel_message`` with ``<@BOT_USER_ID>`` put before ``text`` unless in it."""
        mention = f"<@{self.bot_user_id}>"
        if mention not in text:
            text = f"{mention} {text}"
        return self.channel_message(channel, user, text, thread_ts, sign=sign)

    def thread_message(
        self, channel: str, user: str, text: str, thread_ts: str, *, sign: Sign = "valid"
    ) -> Message:
        """``user`` replies ``text`` in the thread ``thread_ts`` of ``channel``."""
        return self.channel_message(channel, user, text, thread_ts, sign=sign)

    def push_event(self, event: Json, *, sign: Sign = "valid", team_id: str = TEAM_ID) -> Delivery:
        """Push any ``event`` (``{"type": "reaction_added", ...}``) as an event_callback
        (``team_id``: of another workspace, as a shared channel's may be)."""
        with self._lock:
            return self._emit(copy.deepcopy(event), sign, team_id)

    def click(
        self,
        message: Message,
        user: str,
        action_id: str,
        value: str | None = None,
        *,
        sign: Sign = "valid",
    ) -> Delivery:
        """``user`` uses the element ``action_id`` of ``message`` (the bot's, or an
        ephemeral one): a ``block_actions`` interaction with a fresh ``trigger_id`` and
        ``response_url``. ``value``: a button's (default its own) or a select's option."""
        with self._lock:
            current = self._current(message)
            if current.deleted:
                raise ValueError(f"message {current.ts} was deleted")
            if current.ephemeral and current.ephemeral_to != user:
                raise ValueError(f"{user} cannot see the ephemeral message {current.ts}")
            block, element = current.element(action_id)
            action: Json = {
                "type": element["type"],
                "action_id": action_id,
                "block_id": block["block_id"],
                "action_ts": self._next_ts(),
            }
            if element["type"] == "button":
                action["text"] = copy.deepcopy(element["text"])
                if value is not None or "value" in element:
                    action["value"] = value if value is not None else element["value"]
                if "style" in element:
                    action["style"] = element["style"]
            elif element["type"] in ("static_select", "overflow", "radio_buttons"):
                options = _options(element)
                chosen = next((o for o in options if o.get("value") == value), None)
                if chosen is None:
                    raise ValueError(f"{action_id} has no option {value!r}")
                action["selected_option"] = copy.deepcopy(chosen)
            elif value is not None:
                action["value"] = value
            trigger = self._trigger(user)
            container: Json = {
                "type": "message",
                "message_ts": current.ts,
                "channel_id": current.channel,
                "is_ephemeral": current.ephemeral,
            }
            if current.thread_ts:
                container["thread_ts"] = current.thread_ts
            response_url = self._new_response_url(
                current.channel, user, current.ts, current.ephemeral, current.thread_ts
            )
            payload: Json = {
                "type": "block_actions",
                "user": self._user_ref(user),
                "api_app_id": APP_ID,
                "token": self.verification_token,
                "container": container,
                "trigger_id": trigger,
                "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
                "enterprise": None,
                "is_enterprise_install": False,
                "channel": {"id": current.channel, "name": self._channel_name(current.channel)},
                "state": {"values": {}},
                "response_url": response_url,
                "actions": [action],
            }
            if not current.ephemeral:
                payload["message"] = self._message_json(current)
            return self._push("interactive", payload, sign)

    def submit_view(
        self,
        view: View | str,
        user: str | None = None,
        values: Mapping[str, Any] | None = None,
        *,
        sign: Sign = "valid",
    ) -> Delivery:
        """``user`` (the one it was opened for) submits the modal ``view`` (a ``View`` or
        its id) with ``values``: by ``action_id`` (or ``{block_id: {action_id: ...}}``), a
        string for text inputs, an option value (or a list) for selects. The ack decides
        whether it closes; see the module docstring."""
        with self._lock:
            shown = self._views[view if isinstance(view, str) else view.id]
            user = user or shown.user
            if shown.closed:
                raise ValueError(f"view {shown.id} is closed")
            if shown.user != user:
                raise ValueError(f"view {shown.id} was opened for {shown.user}, not {user}")
            state = _state_values(shown.view, values or {})
            payload: Json = {
                "type": "view_submission",
                "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
                "user": self._user_ref(user),
                "api_app_id": APP_ID,
                "token": self.verification_token,
                "trigger_id": self._trigger(user),
                "view": self._view_json(shown, state),
                "response_urls": [],
                "is_enterprise_install": False,
                "enterprise": None,
            }
            shown.submissions.append(copy.deepcopy(state))
            return self._push("interactive", payload, sign)

    def close_view(self, view: View | str, *, sign: Sign = "valid") -> Delivery | None:
        """The user closes the modal (Cancel or ×): it closes; a ``view_closed``
        interaction is sent only if the view asked (``notify_on_close``)."""
        with self._lock:
            shown = self._views[view if isinstance(view, str) else view.id]
            if shown.closed:
                raise ValueError(f"view {shown.id} is closed")
            shown.closed = True
            if not shown.view.get("notify_on_close"):
                return None
            payload: Json = {
                "type": "view_closed",
                "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
                "user": self._user_ref(shown.user),
                "api_app_id": APP_ID,
                "token": self.verification_token,
                "view": self._view_json(shown, {}),
                "is_cleared": False,
                "is_enterprise_install": False,
                "enterprise": None,
            }
            return self._push("interactive", payload, sign)

    def slash(
        self, channel: str, user: str, command: str, text: str = "", *, sign: Sign = "valid"
    ) -> Delivery:
        """``user`` runs ``command`` (``"/chathub"``) with ``text`` in ``channel``. The
        payload has no ``thread_ts``: Slack gives a command none, even in a thread."""
        if not command.startswith("/"):
            raise ValueError("a slash command starts with /")
        with self._lock:
            self._ensure_user(user)
            if channel not in self._channels:
                raise KeyError(f"no channel {channel}")
            payload = {
                "token": self.verification_token,
                "team_id": TEAM_ID,
                "team_domain": TEAM_DOMAIN,
                "channel_id": channel,
                "channel_name": self._channel_name(channel),
                "user_id": user,
                "user_name": self._users[user]["name"],
                "command": command,
                "text": text,
                "api_app_id": APP_ID,
                "is_enterprise_install": "false",
                "response_url": self._new_response_url(channel, user, None, False, None),
                "trigger_id": self._trigger(user),
            }
            return self._push("slash_commands", payload, sign)

    # -- test-side Socket Mode controls ------------------------------------------------------

    def disconnect_socket(
        self, reason: str = "refresh_requested", *, close_after: float | None = 0.5
    ) -> int:
        """Send ``{"type": "disconnect", "reason": reason}`` on every open connection.
        Unless ``reason`` is ``"warning"``, each gets no new envelope and the server closes
        it after ``close_after`` seconds (``None``: leave it to the client);
        ``"link_disabled"`` also turns ``socket_mode_enabled`` off. Returns how many."""
        with self._lock:
            live = [conn for conn in self._live if not conn.closing]
            if reason == "link_disabled":
                self.socket_mode_enabled = False
            for conn in live:
                conn.record.disconnect_reason = reason
                message = {
                    "type": "disconnect",
                    "reason": reason,
                    "debug_info": {"host": f"applink-fake-{conn.index}"},
                }
                self._send(conn, message)
                if reason != "warning":
                    conn.draining = True
                    if close_after is not None:
                        self._later(close_after, lambda c=conn: self._close(c, _Close(1000)))
            return len(live)

    def close_socket(self, code: int = 1000, reason: str = "") -> int:
        """Close every connection with a close frame; returns how many."""
        with self._lock:
            live = list(self._live)
            for conn in live:
                self._close(conn, _Close(code, reason))
            return len(live)

    def drop_socket(self) -> int:
        """Cut every connection without a close frame; returns how many."""
        with self._lock:
            live = list(self._live)
            if any(conn.transport is None for conn in live):
                raise RuntimeError("drop_socket needs uvicorn's WebSocket protocol")
            for conn in live:
                self._close(conn, _Close(1006, drop=True))
            return len(live)

    # -- test-side HTTP mode -----------------------------------------------------------------

    def signed_headers(
        self, body: bytes | str, *, content_type: str, sign: Sign = "valid"
    ) -> dict[str, str]:
        """The headers Slack sends with ``body`` (``sign`` forges or ages the signature)."""
        if sign not in _SIGN_MODES:
            raise ValueError(f"sign is one of {_SIGN_MODES}")
        timestamp = int(time.time()) - (600 if sign == "expired" else 0)
        secret = self.signing_secret + ("-forged" if sign == "forged" else "")
        headers = {
            "Content-Type": content_type,
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        }
        if sign != "missing":
            headers["X-Slack-Request-Timestamp"] = str(timestamp)
            headers["X-Slack-Signature"] = sign_request(secret, timestamp, body)
        return headers

    def verify_url(self, url: str | None = None, *, sign: Sign = "valid") -> bool:
        """POST the ``url_verification`` challenge to ``url`` (``request_url``), as Slack
        does when the URL is saved; True when the answer echoes it."""
        target = url or self.request_url
        if target is None:
            raise ValueError("no URL")
        challenge = uuid.uuid4().hex
        body = json.dumps(
            {"token": self.verification_token, "challenge": challenge, "type": "url_verification"}
        )
        headers = self.signed_headers(body, content_type="application/json", sign=sign)
        response = httpx.post(target, content=body, headers=headers, timeout=self.http_timeout)
        if response.status_code != 200:
            return False
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json().get("challenge") == challenge
        return response.text == challenge

    # -- state helpers (lock held) -----------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter):08X}"

    def _next_ts(self) -> str:
        now = int(time.time() * 1_000_000)
        self._last_ts = max(now, self._last_ts + 1)
        seconds, micros = divmod(self._last_ts, 1_000_000)
        return f"{seconds}.{micros:06d}"

    def _add_user(
        self,
        user_id: str,
        name: str | None,
        real_name: str | None,
        *,
        is_bot: bool = False,
        tz: str = "UTC",
    ) -> Json:
        user = self._users.get(user_id)
        if user is None:
            user = self._users[user_id] = {
                "id": user_id,
                "team_id": TEAM_ID,
                "name": user_id.lower(),
                "deleted": False,
                "real_name": user_id,
                "tz": tz,
                "is_bot": is_bot,
                "is_app_user": False,
                "profile": {"real_name": user_id, "display_name": user_id.lower()},
            }
            if is_bot:
                user["profile"]["bot_id"] = BOT_ID if user_id == self.bot_user_id else None
        if name:
            user["name"] = name
            user["profile"]["display_name"] = name
        if real_name:
            user["real_name"] = real_name
            user["profile"]["real_name"] = real_name
        user["tz"] = tz
        return user

    def _ensure_user(self, user_id: str) -> None:
        if user_id not in self._users:
            self._add_user(user_id, None, None)

    def _user_ref(self, user_id: str) -> Json:
        user = self._users[user_id]
        return {
            "id": user_id,
            "username": user["name"],
            "name": user["name"],
            "team_id": TEAM_ID,
        }

    def _dm(self, user: str) -> str:
        channel = self._dms.get(user)
        if channel is None:
            self._ensure_user(user)
            channel = self._dms[user] = self._next_id("D")
            self._channels[channel] = Channel(channel, channel, "im", {user}, user=user)
            self._messages[channel] = []
        return channel

    def _channel_name(self, channel: str) -> str:
        found = self._channels.get(channel)
        return "directmessage" if found is None or found.kind == "im" else found.name

    def _resolve_channel(self, given: Any) -> Channel:
        """A channel argument: an id, ``#name``/``name``, or a user id (their DM)."""
        if not isinstance(given, str) or not given:
            raise SlackError("channel_not_found")
        if given in self._channels:
            return self._channels[given]
        if given in self._users and given != self.bot_user_id:
            return self._channels[self._dm(given)]
        name = given.removeprefix("#")
        for channel in self._channels.values():
            if channel.kind != "im" and channel.name == name:
                return channel
        raise SlackError("channel_not_found")

    def _postable(self, channel: Channel) -> None:
        if channel.archived:
            raise SlackError("is_archived")
        if channel.kind != "im" and not channel.bot_member:
            raise SlackError("not_in_channel")

    def _thread_parent(self, channel: str, thread_ts: str) -> Message:
        found = self._by_ts.get((channel, thread_ts))
        if found is None or found.deleted:
            raise KeyError(f"no message {thread_ts} in {channel}")
        if found.thread_ts and found.thread_ts != found.ts:
            return self._by_ts[(channel, found.thread_ts)]
        return found

    def _store(self, message: Message) -> None:
        self._messages.setdefault(message.channel, []).append(message)
        self._by_ts[(message.channel, message.ts)] = message

    def _file(self, name: str, data: bytes, mimetype: str, duration_ms: int | None) -> Json:
        file_id = self._next_id("F")
        self._shared_files[file_id] = data
        shared: Json = {
            "id": file_id,
            "name": name,
            "mimetype": mimetype,
            "size": len(data),
            "url_private": f"{self.http_url}/files-pri/{TEAM_ID}-{file_id}/{name}",
        }
        if duration_ms is not None:
            shared.update(subtype="slack_audio", duration_ms=duration_ms)
        return shared

    async def _file_download(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {self.bot_token}":
            return Response("not allowed", status_code=403)
        file_id = request.path_params["key"].rpartition("-")[2]
        with self._lock:
            data = self._shared_files.get(file_id)
        if data is None:
            return Response("no such file", status_code=404)
        return Response(data, media_type="application/octet-stream")

    async def _upload(self, request: Request) -> Response:
        """An upload URL's one POST: the bytes (raw, or a multipart form's file)."""
        key = str(request.path_params["key"])
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() == "multipart/form-data":
            data = b""
            async with request.form() as form:
                for _name, value in form.multi_items():
                    if isinstance(value, UploadFile):
                        data = await value.read()
                        content_type = value.content_type or ""
                        break
        else:
            data = await request.body()
        with self._lock:
            upload = next((u for u in self.uploads.values() if u.key == key), None)
            if upload is None or upload.data is not None:
                return Response("no such upload", status_code=404)
            if len(data) != upload.length:
                return Response(f"expected {upload.length} bytes", status_code=400)
            upload.data, upload.content_type = data, content_type
        return Response(f"OK - {len(data)}", media_type="text/plain")

    def _user_message(self, channel: str, user: str, text: str, thread_ts: str | None) -> Message:
        if thread_ts is not None:
            thread_ts = self._thread_parent(channel, thread_ts).ts
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            user=user,
            text=text,
            blocks=[_rich_text(text, self._next_id("b"))],
            thread_ts=thread_ts,
            via="user",
            client_msg_id=str(uuid.uuid4()),
            created=time.time(),
        )
        self._store(message)
        return message

    def _current(self, message: Message) -> Message:
        """The fake's own object for ``message`` (tests may hold a copy)."""
        if message.ephemeral:
            for candidate in self._ephemerals:
                if candidate.ts == message.ts and candidate.channel == message.channel:
                    return candidate
            raise KeyError(f"no ephemeral message {message.ts}")
        return self._by_ts[(message.channel, message.ts)]

    def _trigger(self, user: str) -> str:
        trigger = f"{next(self._counter)}.{int(time.time())}.{uuid.uuid4().hex}"
        self._triggers[trigger] = _Trigger(time.monotonic(), user)
        return trigger

    def _new_response_url(
        self,
        channel: str | None,
        user: str,
        message_ts: str | None,
        ephemeral: bool,
        thread_ts: str | None,
    ) -> str:
        token = uuid.uuid4().hex
        self._response_urls[token] = _ResponseUrl(
            channel, user, message_ts, ephemeral, thread_ts, time.monotonic()
        )
        return f"{self.http_url}{RESPONSE_PATH}{token}"

    def _replies(self, parent: Message) -> list[Message]:
        return [
            m
            for m in self._messages.get(parent.channel, ())
            if m.thread_ts == parent.ts and m.ts != parent.ts and not m.deleted
        ]

    def _message_json(self, message: Message, *, for_history: bool = False) -> Json:
        """The message as the Web API and interaction payloads show it."""
        data: Json = {"type": "message", "text": message.text, "ts": message.ts}
        data["user"] = message.user
        if message.is_bot:
            data.update(
                bot_id=message.bot_id,
                app_id=APP_ID,
                bot_profile={"id": BOT_ID, "app_id": APP_ID, "name": self.bot_name},
            )
        else:
            data["client_msg_id"] = message.client_msg_id
        data["team"] = TEAM_ID
        if message.blocks:
            data["blocks"] = copy.deepcopy(message.blocks)
        if message.metadata is not None:
            data["metadata"] = copy.deepcopy(message.metadata)
        if message.edits:
            data["edited"] = {"user": message.user, "ts": self._last_edit_ts(message)}
        if message.reactions and for_history:
            data["reactions"] = [
                {"name": name, "users": [self.bot_user_id], "count": 1}
                for name in message.reactions
            ]
        if message.files:
            data["subtype"] = "file_share"
            data["files"] = copy.deepcopy(message.files)
        if message.thread_ts:
            data["thread_ts"] = message.thread_ts
            parent = self._by_ts.get((message.channel, message.thread_ts))
            if parent is not None and parent is not message:
                data["parent_user_id"] = parent.user
        replies = self._replies(message) if not message.thread_ts else []
        if replies and for_history:
            users = list(dict.fromkeys(r.user for r in replies))
            data.update(
                thread_ts=message.ts,
                reply_count=len(replies),
                reply_users_count=len(users),
                reply_users=users,
                latest_reply=replies[-1].ts,
            )
        return data

    def _last_edit_ts(self, message: Message) -> str:
        seconds = int(message.edits[-1].time) if message.edits else int(time.time())
        return f"{seconds}.000000"

    def _view_json(self, shown: View, state_values: Json) -> Json:
        data = copy.deepcopy(shown.view)
        data.update(
            id=shown.id,
            team_id=TEAM_ID,
            state={"values": copy.deepcopy(state_values)},
            hash=shown.hash,
            root_view_id=shown.root_id,
            previous_view_id=shown.previous_id,
            app_id=APP_ID,
            bot_id=BOT_ID,
            app_installed_team_id=TEAM_ID,
        )
        data.setdefault("private_metadata", "")
        data.setdefault("callback_id", "")
        data.setdefault("external_id", "")
        data.setdefault("clear_on_close", False)
        data.setdefault("notify_on_close", False)
        return data

    # -- events (lock held) ------------------------------------------------------------------

    def _channel_type(self, channel: str) -> str:
        return self._channels[channel].kind

    def _message_event(self, message: Message) -> Json:
        event = self._message_json(message)
        event.update(channel=message.channel, event_ts=message.ts)
        event["channel_type"] = self._channel_type(message.channel)
        return event

    def _mention_event(self, message: Message) -> Json:
        event: Json = {
            "type": "app_mention",
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "client_msg_id": message.client_msg_id,
            "team": TEAM_ID,
            "blocks": copy.deepcopy(message.blocks),
            "channel": message.channel,
            "event_ts": message.ts,
        }
        if message.thread_ts:
            event["thread_ts"] = message.thread_ts
            event["parent_user_id"] = self._by_ts[(message.channel, message.thread_ts)].user
        return event

    def _echo(self, message: Message, subtype: str | None, previous: Json | None = None) -> None:
        """The bot's own message (posted, changed, deleted) back as a message event."""
        if not self.echo_bot_messages or message.ephemeral:
            return
        kind = self._channel_type(message.channel)
        subscription = {"im": "message.im", "group": "message.groups"}.get(kind, "message.channels")
        if subscription not in self.events:
            return
        if subtype is None:
            self._emit(self._message_event(message), "valid")
            return
        now_ts = self._next_ts()
        event: Json = {
            "type": "message",
            "subtype": subtype,
            "hidden": True,
            "channel": message.channel,
            "ts": now_ts,
            "event_ts": now_ts,
            "channel_type": kind,
        }
        if subtype == "message_changed":
            event["message"] = self._message_json(message)
            event["previous_message"] = previous
        else:
            event["deleted_ts"] = message.ts
            event["previous_message"] = previous
        self._emit(event, "valid")

    def _emit(self, event: Json, sign: str, team_id: str = TEAM_ID) -> Delivery:
        payload: Json = {
            "token": self.verification_token,
            "team_id": team_id,
            "context_team_id": team_id,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": self._next_id("Ev"),
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": TEAM_ID,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{uuid.uuid4().hex}",
        }
        return self._push("events_api", payload, sign)

    # -- delivery (lock held) ----------------------------------------------------------------

    def _push(self, kind: str, payload: Json, sign: str) -> Delivery:
        if sign not in _SIGN_MODES:
            raise ValueError(f"sign is one of {_SIGN_MODES}")
        http = self.request_url is not None
        delivery = Delivery(kind, payload, "http" if http else "socket", time.monotonic(), sign)
        if http:
            self.deliveries.append(delivery)
            self._run(self._deliver_http(delivery))
            return delivery
        if kind != "events_api" and self._route() is None:
            raise RuntimeError(
                f"no Socket Mode connection for a {payload.get('type') or kind}: "
                "Slack would show the user an error"
            )
        self.deliveries.append(delivery)
        self._send_envelope(delivery, 0)
        return delivery

    def _route(self) -> _Conn | None:
        ready = [conn for conn in self._live if not conn.closing and not conn.draining]
        return ready[-1] if ready else None

    def _send_envelope(self, delivery: Delivery, number: int) -> None:
        conn = self._route()
        if conn is None:
            self._pending.append(delivery)
            return
        envelope_id = str(uuid.uuid4())
        # Slack takes a response payload in the ack of these only.
        accepts = delivery.type == "slash_commands" or delivery.payload.get("type") in (
            "view_submission",
            "block_suggestion",
        )
        envelope: Json = {
            "envelope_id": envelope_id,
            "payload": delivery.payload,
            "type": delivery.type,
            "accepts_response_payload": accepts,
        }
        if delivery.type == "events_api":
            envelope["retry_attempt"] = number
            envelope["retry_reason"] = "timeout" if number else ""
        attempt = Attempt(number, time.monotonic(), conn.index, envelope_id)
        delivery.attempts.append(attempt)
        self._envelopes[envelope_id] = (delivery, number)
        self._send(conn, envelope)
        self._later(self.ack_timeout, lambda: self._ack_deadline(delivery, number))

    def _ack_deadline(self, delivery: Delivery, number: int) -> None:
        if delivery.acked or delivery.expired or len(delivery.attempts) != number + 1:
            return
        delivery.attempts[number].failure = "timeout"
        if delivery.type == "events_api" and number < len(self.retry_delays):
            self._later(
                self.retry_delays[number], lambda: self._retry_envelope(delivery, number + 1)
            )
        else:
            delivery.expired = True
            delivery.done.set()

    def _retry_envelope(self, delivery: Delivery, number: int) -> None:
        if not delivery.acked:
            self._send_envelope(delivery, number)

    def _flush_pending(self) -> None:
        while self._pending and self._route() is not None:
            delivery = self._pending.popleft()
            if not delivery.acked:
                self._send_envelope(delivery, len(delivery.attempts))

    def _on_ack(self, message: Json) -> None:
        self.acks.append(copy.deepcopy(message))
        found = self._envelopes.get(str(message.get("envelope_id")))
        if found is None:
            return
        delivery, _number = found
        payload = message.get("payload")
        if delivery.acked or delivery.expired:
            delivery.late_acks += 1
            return
        self._acked(delivery, payload if isinstance(payload, dict) else None)

    def _acked(self, delivery: Delivery, payload: Json | None) -> None:
        delivery.acked = True
        delivery.ack_payload = copy.deepcopy(payload)
        delivery.ack_time = time.monotonic()
        delivery.done.set()
        kind = delivery.payload.get("type")
        try:
            if delivery.type == "slash_commands" and payload:
                self._apply_message_response(
                    payload,
                    channel=delivery.payload["channel_id"],
                    user=delivery.payload["user_id"],
                    source=None,
                    via="ack",
                )
            elif kind == "view_submission":
                self._apply_view_ack(delivery, payload or {})
        except SlackError as exc:  # Slack shows the user an error; the test sees it here
            delivery.ack_error = exc.error

    def _apply_view_ack(self, delivery: Delivery, payload: Json) -> None:
        shown = self._views.get(delivery.payload["view"]["id"])
        if shown is None:
            return
        action = payload.get("response_action")
        if action == "errors":
            shown.errors = copy.deepcopy(payload.get("errors"))
        elif action == "update" and isinstance(payload.get("view"), dict):
            shown.versions.append(copy.deepcopy(shown.view))
            shown.view = _stored_view(payload["view"], self._next_id)
            shown.errors = None
        elif action == "push" and isinstance(payload.get("view"), dict):
            self._open_view(payload["view"], shown.user, "", previous=shown)
        elif action == "clear":
            for other in self.views:
                if other.root_id == shown.root_id:
                    other.closed = True
        else:
            shown.closed = True

    # -- HTTP delivery (on the server's loop) ------------------------------------------------

    def _http_request(self, delivery: Delivery) -> tuple[str, bytes, str]:
        if delivery.type == "events_api":
            url = self.request_url
            body = json.dumps(delivery.payload).encode()
            content_type = "application/json"
        elif delivery.type == "interactive":
            url = self.interactivity_url or self.request_url
            body = urlencode({"payload": json.dumps(delivery.payload)}).encode()
            content_type = "application/x-www-form-urlencoded"
        else:
            url = self.commands_url or self.request_url
            body = urlencode(delivery.payload).encode()
            content_type = "application/x-www-form-urlencoded"
        assert url is not None
        return url, body, content_type

    async def _deliver_http(self, delivery: Delivery) -> None:
        with self._lock:
            url, body, content_type = self._http_request(delivery)
        async with httpx.AsyncClient(timeout=self.http_timeout) as client:
            number = 0
            while True:
                headers = self.signed_headers(
                    body,
                    content_type=content_type,
                    sign=delivery.sign,  # type: ignore[arg-type]
                )
                if number:
                    reason = delivery.attempts[-1].failure or "http_error"
                    headers["X-Slack-Retry-Num"] = str(number)
                    headers["X-Slack-Retry-Reason"] = reason
                attempt = Attempt(number, time.monotonic())
                with self._lock:
                    delivery.attempts.append(attempt)
                no_retry = False
                try:
                    response = await client.post(url, content=body, headers=headers)
                except httpx.TimeoutException:
                    failure: str | None = "http_timeout"
                except httpx.TransportError:
                    failure = "connection_failed"
                else:
                    failure = None if 200 <= response.status_code < 300 else "http_error"
                    no_retry = response.headers.get("x-slack-no-retry") == "1"
                    with self._lock:
                        attempt.status = response.status_code
                        attempt.body = response.text
                with self._lock:
                    attempt.failure = failure
                    if failure is None:
                        self._acked(delivery, _answer_payload(response))
                        return
                    retry = (
                        delivery.type == "events_api"
                        and not no_retry
                        and number < len(self.retry_delays)
                    )
                    if not retry:
                        delivery.expired = True
                        delivery.done.set()
                        return
                    delay = self.retry_delays[number]
                number += 1
                await asyncio.sleep(delay)

    # -- sending and timers (lock held; any thread) ------------------------------------------

    def _run(self, coro: Any) -> None:
        loop = self._loop
        if loop is None:
            coro.close()
            raise RuntimeError("the fake Slack server is not started")
        asyncio.run_coroutine_threadsafe(coro, loop)

    def _later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` with the lock held, ``delay`` seconds from now, on the loop."""
        loop = self._loop
        if loop is None:
            return

        def fire() -> None:
            with self._lock:
                callback()

        def arm() -> None:
            loop.call_later(max(delay, 0.0), fire)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(arm)

    def _send(self, conn: _Conn, item: Any) -> None:
        loop = self._loop
        if loop is None or conn.closing:
            return
        # Always through the loop, from its own thread too: one FIFO keeps the order.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(conn.outbox.put_nowait, item)

    def _close(self, conn: _Conn, close: _Close) -> None:
        if conn.closing:
            return
        self._send(conn, close)
        conn.closing = True

    # -- Socket Mode -------------------------------------------------------------------------

    async def _socket(self, websocket: WebSocket) -> None:
        ticket = websocket.query_params.get("ticket", "")
        with self._lock:
            issued = self._tickets.pop(ticket, None)
            valid = (
                issued is not None
                and self.socket_mode_enabled
                and websocket.query_params.get("app_id") == APP_ID
            )
        if not valid:
            await websocket.close(code=1008)  # before accept: the handshake gets 403
            return
        await websocket.accept()
        record = SocketConnection(ticket, time.monotonic())
        with self._lock:
            self.connections.append(record)
            conn = _Conn(websocket, record, len(self.connections) - 1)
            self._live.append(conn)
            hello = {
                "type": "hello",
                "num_connections": len(self._live),
                "debug_info": {
                    "host": f"applink-fake-{conn.index}",
                    "build_number": 1,
                    "approximate_connection_time": 18060,
                },
                "connection_info": {"app_id": APP_ID},
            }
            self._send(conn, hello)
            self._flush_pending()
        writer = asyncio.create_task(self._write(conn))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    with self._lock:
                        if record.closed_by is None:
                            record.closed_by = "client"
                            record.close_code = int(message.get("code") or 1005)
                    break
                raw = message.get("text")
                if raw is None:
                    raw = (message.get("bytes") or b"").decode("utf-8", "replace")
                with self._lock:
                    self._on_client_message(conn, raw)
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            with self._lock:
                conn.closing = True
                if conn in self._live:
                    self._live.remove(conn)

    def _on_client_message(self, conn: _Conn, raw: str) -> None:  # lock held
        try:
            message = json.loads(raw)
        except ValueError:
            conn.record.received.append({"unparsed": raw})
            return
        if not isinstance(message, dict):
            conn.record.received.append({"unparsed": raw})
            return
        conn.record.received.append(message)
        if "envelope_id" in message:
            self._on_ack(message)

    async def _write(self, conn: _Conn) -> None:
        """The only writer of ``conn``: messages in order, then a close."""
        try:
            while True:
                item = await conn.outbox.get()
                if isinstance(item, _Close):
                    with self._lock:
                        conn.record.closed_by = "drop" if item.drop else "server"
                        conn.record.close_code = item.code
                    if item.drop:
                        assert conn.transport is not None  # drop_socket checked it
                        conn.transport.abort()
                    else:
                        await conn.websocket.close(item.code, item.reason)
                    return
                text = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
                with self._lock:
                    conn.record.sent.append(item)
                await conn.websocket.send_text(text)
        except (OSError, RuntimeError, WebSocketDisconnect):
            return  # the client went away: the reader ends the connection

    # -- response_url ------------------------------------------------------------------------

    async def _response_url(self, request: Request) -> Response:
        token = str(request.path_params["token"])
        raw = await request.body()
        try:
            body = _decode_response_body(raw, request.headers.get("content-type", ""))
        except ValueError:
            return _ok_false("invalid_payload", 400)
        now = time.monotonic()
        with self._lock:
            url = self._response_urls.get(token)
            if url is None:
                error, status = "no_such_url", 404
            elif now - url.created > RESPONSE_URL_TTL:
                error, status = "expired_url", 404
            elif url.uses >= RESPONSE_URL_USES:
                error, status = "used_url", 404
            else:
                url.uses += 1
                try:
                    effect = self._apply_response_url(url, body)
                except SlackError as exc:
                    error, status = exc.error, 400
                else:
                    self.responses.append(ResponsePost(token, body, 200, effect, now))
                    return JSONResponse({"ok": True})
            self.responses.append(ResponsePost(token, body, status, error, now))
        return _ok_false(error, status)

    def _apply_response_url(self, url: _ResponseUrl, body: Json) -> str:  # lock held
        source = None
        if url.message_ts is not None and url.channel is not None:
            if url.ephemeral:
                source = next(
                    (m for m in self._ephemerals if m.ts == url.message_ts),
                    None,
                )
            else:
                source = self._by_ts.get((url.channel, url.message_ts))
        return self._apply_message_response(
            body, channel=url.channel, user=url.user, source=source, via="response_url"
        )

    def _apply_message_response(
        self, body: Json, *, channel: str | None, user: str, source: Message | None, via: str
    ) -> str:  # lock held
        """A message given back through a response_url or a slash command's ack."""
        if _flag(body.get("delete_original")):
            if source is None:
                raise SlackError("no_original_message")
            previous = self._message_json(source)
            source.deleted = True
            if source.is_bot:
                self._echo(source, "message_deleted", previous)
            return "deleted"
        text = body.get("text")
        blocks = body.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if text is None and blocks is None:
            raise SlackError("no_text")
        checked = _check_message(text, blocks, self._next_id)
        if _flag(body.get("replace_original")):
            if source is None:
                raise SlackError("no_original_message")
            previous = self._message_json(source)
            source.edits.append(Edit(source.text, copy.deepcopy(source.blocks), time.time()))
            source.text = text or ""  # the response replaces the whole message
            source.blocks = checked
            if source.is_bot:
                self._echo(source, "message_changed", previous)
            return "replaced"
        if channel is None:
            raise SlackError("channel_not_found")
        thread_ts = body.get("thread_ts")
        if body.get("response_type") == "in_channel":
            message = Message(
                channel=channel,
                ts=self._next_ts(),
                user=self.bot_user_id,
                text=text or "",
                blocks=checked,
                thread_ts=thread_ts,
                bot_id=BOT_ID,
                via=via,
                created=time.time(),
            )
            self._store(message)
            self._echo(message, None)
            return "in_channel"
        self._ephemerals.append(
            Message(
                channel=channel,
                ts=self._next_ts(),
                user=self.bot_user_id,
                text=text or "",
                blocks=checked,
                thread_ts=thread_ts,
                bot_id=BOT_ID,
                ephemeral_to=user,
                via=via,
                created=time.time(),
            )
        )
        return "ephemeral"

    # -- Web API -----------------------------------------------------------------------------

    async def _api(self, request: Request) -> Response:
        method = str(request.path_params["method"])
        delay = self._slow.get(method)
        if delay:  # Slack's round trip for this method (``slow``)
            await asyncio.sleep(delay)
        now = time.monotonic()
        content_type = request.headers.get("content-type", "")
        header = request.headers.get("authorization", "")
        token: str | None = header[7:].strip() if header.lower().startswith("bearer ") else None
        params: Json = {key: value for key, value in request.query_params.items()}
        error: SlackError | None = None
        raw = await request.body()
        try:
            params.update(_decode_api_body(raw, content_type))
        except SlackError as exc:
            error = exc
        if token is None and "token" in params and method != "apps.connections.open":
            token = str(params["token"])  # a form argument (not in a JSON body)
        params.pop("token", None)
        with self._lock:
            if error is None:
                response = self._answer(method, token, params, now)
            else:
                response = _error_response(error)
            call_error = None
            if response.media_type == "text/plain":  # the edge's own answer
                call_error = bytes(response.body).decode()
            elif response.status_code != 200 or not json.loads(bytes(response.body)).get("ok"):
                call_error = json.loads(bytes(response.body)).get("error")
            self.calls.append(
                Call(
                    method,
                    request.method,
                    copy.deepcopy(params),
                    content_type,
                    token,
                    response.status_code,
                    call_error,
                    now,
                )
            )
        return response

    def _answer(self, method: str, token: str | None, params: Json, now: float) -> Response:
        entry = _METHODS.get(method)
        if entry is None:
            return _error_response(SlackError("unknown_method", status=404, req_method=method))
        handler, token_kind, scope = entry
        if token is None:
            return _error_response(SlackError("not_authed"))
        expected = self.app_token if token_kind == "app" else self.bot_token
        if token != expected:
            other = self.bot_token if token_kind == "app" else self.app_token
            error = "not_allowed_token_type" if token == other else "invalid_auth"
            return _error_response(SlackError(error))
        fault = self._take_fault(method)
        if fault is not None:
            if fault.status == 429:
                return self._rate_limited(fault.retry_after)
            if fault.plain:
                return Response(fault.error, status_code=fault.status, media_type="text/plain")
            return _error_response(SlackError(fault.error, status=fault.status))
        try:
            needed = scope(self, params) if callable(scope) else scope
            if needed and needed not in self.scopes:
                raise SlackError(
                    "missing_scope", needed=needed, provided=",".join(sorted(self.scopes))
                )
            window = self._window(method, params, now)
            if window is not None:
                if window.remaining <= 0:
                    return self._rate_limited(window.reset_at - now)
                window.remaining -= 1
            result = handler(self, _Req(method, params))
        except SlackError as exc:
            return _error_response(exc)
        headers = {}
        if method == "auth.test":
            headers["x-oauth-scopes"] = ",".join(sorted(self.scopes))
        return JSONResponse({"ok": True, **result}, headers=headers)

    def _window(self, method: str, params: Json, now: float) -> _Window | None:
        if not self.enforce_limits or method not in self._limits:
            return None
        limit, seconds, per = self._limits[method]
        key = method
        if per == "channel":
            key = f"{method}:{params.get('channel', '')}"
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(limit, seconds)
        window.refresh(now)
        return window

    def _rate_limited(self, retry_after: float) -> Response:
        self.count_429 += 1
        seconds = max(math.ceil(retry_after), 0)
        return JSONResponse(
            {"ok": False, "error": "ratelimited"},
            status_code=429,
            headers={"Retry-After": str(seconds)},
        )

    def _take_fault(self, method: str) -> _Fault | None:
        for key in (method, "*"):
            queue = self._faults.get(key)
            if queue:
                fault = queue[0]
                fault.count -= 1
                if fault.count <= 0:
                    queue.pop(0)
                return fault
        return None

    # -- Web API methods (lock held) ---------------------------------------------------------

    def _auth_test(self, req: _Req) -> Json:
        return {
            "url": f"https://{TEAM_DOMAIN}.slack.com/",
            "team": "Fake Team",
            "user": self.bot_name,
            "team_id": TEAM_ID,
            "user_id": self.bot_user_id,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _connections_open(self, req: _Req) -> Json:
        if not self.socket_mode_enabled:
            raise SlackError(SOCKET_MODE_DISABLED_ERROR)
        ticket = uuid.uuid4().hex
        self._tickets[ticket] = time.monotonic()
        return {"url": f"{self.socket_base_url}?ticket={ticket}&app_id={APP_ID}"}

    def _post_message(self, req: _Req) -> Json:
        p = req.params
        channel = self._resolve_channel(p.get("channel"))
        self._postable(channel)
        blocks = _blocks_arg(p)
        text = p.get("text")
        thread_ts = _str_or_none(p.get("thread_ts"))
        if thread_ts is not None:
            try:
                thread_ts = self._thread_parent(channel.id, thread_ts).ts
            except KeyError:
                raise SlackError("thread_not_found") from None
        checked = _check_message(text, blocks, self._next_id)
        metadata = _json_arg(p, "metadata", "invalid_metadata_format")
        message = Message(
            channel=channel.id,
            ts=self._next_ts(),
            user=self.bot_user_id,
            text=str(text or ""),
            blocks=checked,
            thread_ts=thread_ts,
            bot_id=BOT_ID,
            mrkdwn=_flag(p.get("mrkdwn", True)),
            metadata=metadata,
            reply_broadcast=_flag(p.get("reply_broadcast")),
            created=time.time(),
        )
        self._store(message)
        self._echo(message, None)
        return {"channel": channel.id, "ts": message.ts, "message": self._message_json(message)}

    def _own_message(self, p: Json) -> Message:
        channel = self._resolve_channel(p.get("channel"))
        ts = _str_or_none(p.get("ts"))
        if ts is None:
            raise SlackError("message_not_found")
        message = self._by_ts.get((channel.id, ts))
        if message is None or message.deleted:
            raise SlackError("message_not_found")
        return message

    def _chat_update(self, req: _Req) -> Json:
        p = req.params
        message = self._own_message(p)
        if not message.is_bot:
            raise SlackError("cant_update_message")
        blocks = _blocks_arg(p)
        text = p.get("text")
        if text is None and blocks is None:
            raise SlackError("no_text")
        checked = _check_message(
            text if text is not None else message.text,
            blocks if blocks is not None else message.blocks,
            self._next_id,
        )
        previous = self._message_json(message)
        message.edits.append(Edit(message.text, copy.deepcopy(message.blocks), time.time()))
        if text is not None:
            message.text = str(text)
        if blocks is not None:
            message.blocks = checked
        self._echo(message, "message_changed", previous)
        return {
            "channel": message.channel,
            "ts": message.ts,
            "text": message.text,
            "message": self._message_json(message),
        }

    def _chat_delete(self, req: _Req) -> Json:
        message = self._own_message(req.params)
        if not message.is_bot:
            raise SlackError("cant_delete_message")
        previous = self._message_json(message)
        message.deleted = True
        self._echo(message, "message_deleted", previous)
        return {"channel": message.channel, "ts": message.ts}

    def _post_ephemeral(self, req: _Req) -> Json:
        p = req.params
        channel = self._resolve_channel(p.get("channel"))
        self._postable(channel)
        user = _str_or_none(p.get("user"))
        if user is None or user not in self._users:
            raise SlackError("user_not_found")
        if user not in channel.members:
            raise SlackError("user_not_in_channel")
        blocks = _blocks_arg(p)
        text = p.get("text")
        checked = _check_message(text, blocks, self._next_id)
        thread_ts = _str_or_none(p.get("thread_ts"))
        active = thread_ts is None or any(
            m.thread_ts == thread_ts and m.ts != thread_ts
            for m in self._messages.get(channel.id, ())
        )
        message = Message(
            channel=channel.id,
            ts=self._next_ts(),
            user=self.bot_user_id,
            text=str(text or ""),
            blocks=checked,
            thread_ts=thread_ts,
            bot_id=BOT_ID,
            ephemeral_to=user,
            hidden=not active,
            created=time.time(),
        )
        self._ephemerals.append(message)
        return {"message_ts": message.ts}

    def _conversations_open(self, req: _Req) -> Json:
        p = req.params
        if p.get("channel"):
            channel = self._resolve_channel(p["channel"])
            return {"channel": {"id": channel.id}, "no_op": True, "already_open": True}
        users = [u for u in str(p.get("users") or "").split(",") if u]
        if not users:
            raise SlackError("users_list_not_supplied")
        if len(users) > 1:
            raise SlackError("not_supported_by_fake", messages=["mpim DMs are not modelled"])
        if users[0] not in self._users or users[0] == self.bot_user_id:
            raise SlackError("user_not_found")
        existed = users[0] in self._dms
        channel_id = self._dm(users[0])
        return {"channel": {"id": channel_id}, "no_op": existed, "already_open": existed}

    def _readable(self, p: Json) -> Channel:
        channel = self._resolve_channel(p.get("channel"))
        if channel.kind != "im" and not channel.bot_member:
            raise SlackError("not_in_channel")
        return channel

    def _history(self, req: _Req) -> Json:
        p = req.params
        channel = self._readable(p)
        found = [
            m
            for m in self._messages.get(channel.id, ())
            if not m.deleted and (m.thread_ts in (None, m.ts) or m.reply_broadcast)
        ]
        found.reverse()  # newest first
        return self._page(found, p, newest_first=True)

    def _replies_method(self, req: _Req) -> Json:
        p = req.params
        channel = self._readable(p)
        ts = _str_or_none(p.get("ts"))
        if ts is None:
            raise SlackError("invalid_arguments", messages=["[ERROR] missing required field: ts"])
        try:
            parent = self._thread_parent(channel.id, ts)
        except KeyError:
            raise SlackError("thread_not_found") from None
        return self._page([parent, *self._replies(parent)], p, newest_first=False)

    def _page(self, found: list[Message], p: Json, *, newest_first: bool) -> Json:
        oldest = float(p.get("oldest") or 0)
        latest = float(p["latest"]) if p.get("latest") else math.inf
        inclusive = _flag(p.get("inclusive"))

        def within(m: Message) -> bool:
            value = float(m.ts)
            low = value >= oldest if inclusive else value > oldest
            high = value <= latest if inclusive else value < latest
            return low and high

        found = [m for m in found if within(m)]
        try:
            limit = int(p.get("limit") or 100)
        except ValueError:
            raise SlackError("invalid_limit") from None
        limit = min(max(limit, 1), 999)
        start = 0
        cursor = p.get("cursor")
        if cursor:
            try:
                start = int(base64.b64decode(str(cursor)).decode().removeprefix("next:"))
            except ValueError:
                raise SlackError("invalid_cursor") from None
        page = found[start : start + limit]
        more = start + limit < len(found)
        next_cursor = base64.b64encode(f"next:{start + limit}".encode()).decode() if more else ""
        data: Json = {
            "messages": [self._message_json(m, for_history=True) for m in page],
            "has_more": more,
            "response_metadata": {"next_cursor": next_cursor},
        }
        if newest_first:
            data["pin_count"] = 0
        return data

    def _upload_url(self, req: _Req) -> Json:
        p = req.params
        filename = str(p.get("filename") or "")
        try:
            length = int(p.get("length") or 0)
        except (TypeError, ValueError):
            length = 0
        if not filename or length <= 0:
            raise SlackError("invalid_arguments", messages=["filename and length are required"])
        upload = Upload(self._next_id("F"), filename, length, uuid.uuid4().hex)
        self.uploads[upload.id] = upload
        return {"upload_url": f"{self.http_url}{UPLOAD_PATH}{upload.key}", "file_id": upload.id}

    def _complete_upload(self, req: _Req) -> Json:
        p = req.params
        given = _json_arg(p, "files", "invalid_arguments")
        if not isinstance(given, list) or not given:
            raise SlackError("invalid_arguments", messages=["files is required"])
        uploads = []
        for item in given:
            upload = self.uploads.get(str(item.get("id"))) if isinstance(item, dict) else None
            if upload is None or upload.data is None or upload.shared_in is not None:
                raise SlackError("file_not_found")
            uploads.append((upload, item))
        channel_id = _str_or_none(p.get("channel_id"))
        thread_ts = _str_or_none(p.get("thread_ts"))
        channel = None
        if channel_id is not None:
            channel = self._resolve_channel(channel_id)
            self._postable(channel)
        elif thread_ts is not None:
            raise SlackError("invalid_arguments", messages=["thread_ts needs channel_id"])
        if channel is not None and thread_ts is not None:
            try:
                thread_ts = self._thread_parent(channel.id, thread_ts).ts
            except KeyError:
                raise SlackError("invalid_thread_ts") from None
        files = []
        for upload, item in uploads:
            upload.title = str(item.get("title") or upload.filename)
            files.append(self._uploaded_file(upload))
        if channel is None:
            return {"files": files}
        message = Message(
            channel=channel.id,
            ts=self._next_ts(),
            user=self.bot_user_id,
            text=str(p.get("initial_comment") or ""),
            thread_ts=thread_ts,
            bot_id=BOT_ID,
            files=copy.deepcopy(files),
            created=time.time(),
        )
        self._store(message)
        visibility = "public" if channel.kind == "channel" else "private"
        share: Json = {"ts": message.ts, "channel_name": self._channel_name(channel.id)}
        if thread_ts is not None:
            share["thread_ts"] = thread_ts
        for upload, _item in uploads:
            upload.shared_in = channel.id
        for file in files:
            file["shares"] = {visibility: {channel.id: [dict(share)]}}
        self._echo(message, None)
        return {"files": files}

    def _uploaded_file(self, upload: Upload) -> Json:
        data = upload.data or b""
        self._shared_files[upload.id] = data
        mimetype = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
        return {
            "id": upload.id,
            "name": upload.filename,
            "title": upload.title,
            "mimetype": mimetype,
            "filetype": upload.filename.rpartition(".")[2] if "." in upload.filename else "",
            "size": len(data),
            "user": self.bot_user_id,
            "url_private": f"{self.http_url}/files-pri/{TEAM_ID}-{upload.id}/{upload.filename}",
        }

    def _users_info(self, req: _Req) -> Json:
        user = self._users.get(str(req.params.get("user") or ""))
        if user is None:
            raise SlackError("user_not_found")
        return {"user": copy.deepcopy(user)}

    def _reactions_add(self, req: _Req) -> Json:
        p = req.params
        channel = self._readable(p)
        message = self._by_ts.get((channel.id, str(p.get("timestamp") or "")))
        if message is None or message.deleted:
            raise SlackError("message_not_found")
        name = str(p.get("name") or "")
        if not name or ":" in name or " " in name:
            raise SlackError("invalid_name")
        if name in message.reactions:
            raise SlackError("already_reacted")
        message.reactions.append(name)
        return {}

    def _views_open(self, req: _Req) -> Json:
        p = req.params
        trigger_id = str(p.get("trigger_id") or "")
        trigger = self._triggers.get(trigger_id)
        if trigger is None:
            raise SlackError("invalid_trigger_id")
        if trigger.used:
            raise SlackError("exchanged_trigger_id")
        if time.monotonic() - trigger.issued > self.trigger_ttl:
            raise SlackError("expired_trigger_id")
        view = _json_arg(p, "view", "invalid_arguments")
        if not isinstance(view, dict):
            raise SlackError("invalid_arguments", messages=["[ERROR] missing required field: view"])
        _check_view(view)
        trigger.used = True
        shown = self._open_view(view, trigger.user, trigger_id)
        return {"view": self._view_json(shown, {})}

    def _open_view(
        self, view: Json, user: str, trigger_id: str, previous: View | None = None
    ) -> View:
        view_id = self._next_id("V")
        shown = View(
            id=view_id,
            user=user,
            trigger_id=trigger_id,
            view=_stored_view(view, self._next_id),
            opened=time.monotonic(),
            hash=f"{int(time.time())}.{uuid.uuid4().hex[:8]}",
            root_id=previous.root_id if previous else view_id,
            previous_id=previous.id if previous else None,
        )
        self.views.append(shown)
        self._views[view_id] = shown
        return shown

    def _views_update(self, req: _Req) -> Json:
        p = req.params
        shown = self._views.get(str(p.get("view_id") or ""))
        if shown is None and p.get("external_id"):
            shown = next(
                (v for v in self.views if v.view.get("external_id") == p["external_id"]), None
            )
        if shown is None:
            raise SlackError("not_found")
        if p.get("hash") and p["hash"] != shown.hash:
            raise SlackError("hash_conflict")
        view = _json_arg(p, "view", "invalid_arguments")
        if not isinstance(view, dict):
            raise SlackError("invalid_arguments", messages=["[ERROR] missing required field: view"])
        _check_view(view)
        shown.versions.append(copy.deepcopy(shown.view))
        shown.view = _stored_view(view, self._next_id)
        shown.hash = f"{int(time.time())}.{uuid.uuid4().hex[:8]}"
        return {"view": self._view_json(shown, {})}

    def _set_status(self, req: _Req) -> Json:
        p = req.params
        channel = self._resolve_channel(p.get("channel_id"))
        thread_ts = _str_or_none(p.get("thread_ts"))
        if thread_ts is None:
            raise SlackError(
                "invalid_arguments", messages=["[ERROR] missing required field: thread_ts"]
            )
        self.statuses.append((channel.id, thread_ts, str(p.get("status") or "")))
        return {}


def _history_scope(server: FakeSlackServer, params: Json) -> str:
    try:
        channel = server._resolve_channel(params.get("channel"))
    except SlackError:
        return "channels:history"
    return {"im": "im:history", "group": "groups:history"}.get(channel.kind, "channels:history")


#: ``method -> (handler, token kind, scope or a function of the arguments giving it)``.
_METHODS: dict[str, tuple[Callable[..., Json], str, Any]] = {
    "auth.test": (FakeSlackServer._auth_test, "bot", None),
    "apps.connections.open": (FakeSlackServer._connections_open, "app", None),
    "chat.postMessage": (FakeSlackServer._post_message, "bot", "chat:write"),
    "chat.update": (FakeSlackServer._chat_update, "bot", "chat:write"),
    "chat.delete": (FakeSlackServer._chat_delete, "bot", "chat:write"),
    "chat.postEphemeral": (FakeSlackServer._post_ephemeral, "bot", "chat:write"),
    "conversations.open": (FakeSlackServer._conversations_open, "bot", "im:write"),
    "conversations.history": (FakeSlackServer._history, "bot", _history_scope),
    "conversations.replies": (FakeSlackServer._replies_method, "bot", _history_scope),
    "users.info": (FakeSlackServer._users_info, "bot", "users:read"),
    "reactions.add": (FakeSlackServer._reactions_add, "bot", "reactions:write"),
    "views.open": (FakeSlackServer._views_open, "bot", None),
    "views.update": (FakeSlackServer._views_update, "bot", None),
    "assistant.threads.setStatus": (FakeSlackServer._set_status, "bot", "assistant:write"),
    "files.getUploadURLExternal": (FakeSlackServer._upload_url, "bot", "files:write"),
    "files.completeUploadExternal": (FakeSlackServer._complete_upload, "bot", "files:write"),
}


# -- helpers -----------------------------------------------------------------------------------


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in ("true", "1", "yes")
    return bool(value)


def _str_or_none(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def _decode_api_body(raw: bytes, content_type: str) -> Json:
    if not raw:
        return {}
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            body = json.loads(raw)
        except ValueError:
            raise SlackError("invalid_json") from None
        if not isinstance(body, dict):
            raise SlackError("invalid_json")
        return body
    if kind in ("application/x-www-form-urlencoded", ""):
        try:
            form = parse_qs(raw.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            raise SlackError("invalid_form_data") from None
        return {key: values[-1] for key, values in form.items()}
    raise SlackError("invalid_form_data", messages=[f"the fake takes no {kind} body"])


def _decode_response_body(raw: bytes, content_type: str) -> Json:
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        form = parse_qs(raw.decode("utf-8"))
        raw = form.get("payload", ["{}"])[-1].encode()
    body = json.loads(raw or b"{}")
    if not isinstance(body, dict):
        raise ValueError("not an object")
    return body


def _answer_payload(response: httpx.Response) -> Json | None:
    if not response.content:
        return None
    if response.headers.get("content-type", "").startswith("application/json"):
        try:
            body = response.json()
        except ValueError:
            return {"text": response.text}
        return body if isinstance(body, dict) else {"value": body}
    return {"text": response.text}


def _json_arg(p: Json, key: str, error: str) -> Any:
    value = p.get(key)
    if isinstance(value, str):
        if not value:
            return None
        try:
            return json.loads(value)
        except ValueError:
            raise SlackError(error) from None
    return value


def _blocks_arg(p: Json) -> list[Any] | None:
    blocks = _json_arg(p, "blocks", "invalid_blocks_format")
    if blocks is not None and not isinstance(blocks, list):
        raise SlackError("invalid_blocks_format")
    return blocks


def _ok_false(error: str, status: int) -> JSONResponse:
    return JSONResponse({"ok": False, "error": error}, status_code=status)


def _error_response(error: SlackError) -> JSONResponse:
    body: Json = {"ok": False, "error": error.error, **error.extra}
    if error.messages:
        body["response_metadata"] = {"messages": error.messages}
    return JSONResponse(body, status_code=error.status)


def _rich_text(text: str, block_id: str) -> Json:
    return {
        "type": "rich_text",
        "block_id": block_id,
        "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}],
    }


def _elements(blocks: Iterable[Json]) -> Iterable[tuple[Json, Json]]:
    """``(block, element)`` for every interactive element (with an ``action_id``)."""
    for block in blocks:
        candidates: list[Any] = []
        if block.get("type") in ("actions", "context"):
            candidates = list(block.get("elements") or [])
        elif block.get("type") == "section" and isinstance(block.get("accessory"), dict):
            candidates = [block["accessory"]]
        elif block.get("type") == "input" and isinstance(block.get("element"), dict):
            candidates = [block["element"]]
        for element in candidates:
            if isinstance(element, dict) and "action_id" in element:
                yield block, element


def _options(element: Json) -> list[Json]:
    options = list(element.get("options") or [])
    for group in element.get("option_groups") or []:
        options.extend(group.get("options") or [])
    return options


def _invalid(messages: list[str], error: str = "invalid_blocks") -> SlackError:
    return SlackError(error, messages=messages)


def _pointer(path: Sequence[str | int]) -> str:
    return "/" + "/".join(str(part) for part in path)


class _Checker:
    """Block Kit checks; collects Slack-like ``[ERROR] ... [json-pointer:/...]`` lines."""

    def __init__(self, surface: str, new_id: Callable[[str], str]) -> None:
        self.surface = surface
        self.new_id = new_id
        self.errors: list[str] = []

    def fail(self, message: str, path: Sequence[str | int]) -> None:
        self.errors.append(f"[ERROR] {message} [json-pointer:{_pointer(path)}]")

    def text(
        self,
        obj: Any,
        path: list[str | int],
        *,
        max_len: int,
        plain_only: bool = False,
    ) -> None:
        if not isinstance(obj, dict):
            self.fail("must be a text object", path)
            return
        kind = obj.get("type")
        allowed = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
        if kind not in allowed:
            self.fail(f"must be one of {list(allowed)}", [*path, "type"])
        value = obj.get("text")
        if not isinstance(value, str) or not value:
            self.fail("must be more than 0 characters", [*path, "text"])
        elif len(value) > max_len:
            self.fail(f"must be less than {max_len + 1} characters", [*path, "text"])

    def blocks(self, blocks: Any, path: list[str | int]) -> list[Json]:
        allowed = _MODAL_BLOCKS if self.surface == "modal" else _MESSAGE_BLOCKS
        limit = MAX_MODAL_BLOCKS if self.surface == "modal" else MAX_BLOCKS
        if not isinstance(blocks, list):
            self.fail("must be an array", path)
            return []
        if len(blocks) > limit:
            self.fail(f"no more than {limit} items allowed", path)
        stored: list[Json] = []
        seen: set[str] = set()
        for index, block in enumerate(blocks):
            where = [*path, index]
            if not isinstance(block, dict):
                self.fail("must be an object", where)
                continue
            block = copy.deepcopy(block)
            kind = block.get("type")
            if kind not in allowed:
                self.fail(f"unsupported type {kind!r}", [*where, "type"])
                continue
            block_id = block.get("block_id")
            if block_id is None:
                block["block_id"] = self.new_id("b")
            elif not isinstance(block_id, str) or not block_id or len(block_id) > MAX_BLOCK_ID:
                self.fail(f"must be 1..{MAX_BLOCK_ID} characters", [*where, "block_id"])
            elif block_id in seen:
                self.fail("duplicate block_id", [*where, "block_id"])
            seen.add(str(block.get("block_id")))
            self.block(block, where)
            stored.append(block)
        return stored

    def block(self, block: Json, where: list[str | int]) -> None:
        kind = block["type"]
        if kind == "section":
            if "text" not in block and "fields" not in block:
                self.fail("must provide text or fields", where)
            if "text" in block:
                self.text(block["text"], [*where, "text"], max_len=MAX_SECTION_TEXT)
            if "fields" in block:
                fields = block["fields"]
                if not isinstance(fields, list) or not 1 <= len(fields) <= MAX_FIELDS:
                    self.fail(f"must have 1..{MAX_FIELDS} items", [*where, "fields"])
                else:
                    for i, item in enumerate(fields):
                        self.text(item, [*where, "fields", i], max_len=MAX_FIELD_TEXT)
            if "accessory" in block:
                self.elements([block["accessory"]], [*where, "accessory"], single=True)
        elif kind == "header":
            self.text(block.get("text"), [*where, "text"], max_len=MAX_HEADER_TEXT, plain_only=True)
        elif kind == "markdown":
            text = block.get("text")
            if not isinstance(text, str) or not text or len(text) > MAX_MARKDOWN_TEXT:
                self.fail(f"must be 1..{MAX_MARKDOWN_TEXT} characters", [*where, "text"])
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= MAX_ACTIONS_ELEMENTS:
                self.fail(f"must have 1..{MAX_ACTIONS_ELEMENTS} items", [*where, "elements"])
            else:
                self.elements(elements, [*where, "elements"])
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= MAX_CONTEXT_ELEMENTS:
                self.fail(f"must have 1..{MAX_CONTEXT_ELEMENTS} items", [*where, "elements"])
            else:
                for i, item in enumerate(elements):
                    if isinstance(item, dict) and item.get("type") == "image":
                        if not item.get("alt_text"):
                            self.fail("missing required field: alt_text", [*where, "elements", i])
                    else:
                        self.text(item, [*where, "elements", i], max_len=MAX_SECTION_TEXT)
        elif kind == "input":
            self.text(block.get("label"), [*where, "label"], max_len=MAX_LABEL, plain_only=True)
            element = block.get("element")
            if not isinstance(element, dict) or element.get("type") not in _INPUT_ELEMENTS:
                self.fail("must provide an input element", [*where, "element"])
            else:
                self.elements([element], [*where, "element"], single=True)
        elif kind == "image":
            if not block.get("alt_text"):
                self.fail("missing required field: alt_text", where)
            if not block.get("image_url") and not block.get("slack_file"):
                self.fail("missing required field: image_url", where)
        elif kind == "rich_text" and not isinstance(block.get("elements"), list):
            self.fail("missing required field: elements", where)

    def elements(self, elements: list[Any], path: list[str | int], *, single: bool = False) -> None:
        seen: set[str] = set()
        for index, element in enumerate(elements):
            where = path if single else [*path, index]
            if not isinstance(element, dict):
                self.fail("must be an object", where)
                continue
            kind = element.get("type")
            if kind == "image":
                if not element.get("alt_text"):
                    self.fail("missing required field: alt_text", where)
                continue
            if kind not in _INTERACTIVE:
                self.fail(f"unsupported type {kind!r}", [*where, "type"])
                continue
            action_id = element.get("action_id")
            if action_id is None:
                element["action_id"] = self.new_id("a")
            elif not isinstance(action_id, str) or not action_id or len(action_id) > MAX_ACTION_ID:
                self.fail(f"must be 1..{MAX_ACTION_ID} characters", [*where, "action_id"])
            elif action_id in seen:
                self.fail("duplicate action_id in the block", [*where, "action_id"])
            seen.add(str(element.get("action_id")))
            if kind == "button":
                self.text(
                    element.get("text"), [*where, "text"], max_len=MAX_BUTTON_TEXT, plain_only=True
                )
                value = element.get("value")
                if value is not None and (
                    not isinstance(value, str) or len(value) > MAX_BUTTON_VALUE
                ):
                    self.fail(f"must be at most {MAX_BUTTON_VALUE} characters", [*where, "value"])
                url = element.get("url")
                if url is not None and (not isinstance(url, str) or len(url) > MAX_URL):
                    self.fail(f"must be at most {MAX_URL} characters", [*where, "url"])
                if element.get("style") not in (None, "primary", "danger"):
                    self.fail("must be one of [primary, danger]", [*where, "style"])
            elif kind in (
                "static_select",
                "multi_static_select",
                "overflow",
                "radio_buttons",
                "checkboxes",
            ):
                options = _options(element)
                if not 1 <= len(options) <= MAX_OPTIONS:
                    self.fail(f"must have 1..{MAX_OPTIONS} options", [*where, "options"])
            elif kind == "plain_text_input":
                max_length = element.get("max_length")
                if max_length is not None and not (
                    isinstance(max_length, int) and 1 <= max_length <= MAX_INPUT_LENGTH
                ):
                    self.fail(f"must be 1..{MAX_INPUT_LENGTH}", [*where, "max_length"])


def _check_message(text: Any, blocks: Any, new_id: Callable[[str], str]) -> list[Json]:
    """The message's blocks as stored (generated ids added); raises Slack's error."""
    if (text is None or text == "") and not blocks:
        raise SlackError("no_text")
    if text is not None and not isinstance(text, str):
        raise SlackError("invalid_arguments", messages=["[ERROR] text must be a string"])
    if isinstance(text, str) and len(text) > MAX_TEXT:
        raise SlackError("msg_too_long")
    if blocks is None:
        return []
    checker = _Checker("message", new_id)
    stored = checker.blocks(blocks, ["blocks"])
    if checker.errors:
        raise _invalid(checker.errors)
    return stored


def _check_view(view: Json) -> None:
    checker = _Checker("modal", lambda prefix: prefix)
    if view.get("type") != "modal":
        checker.fail("must be modal (home tabs are not modelled)", ["view", "type"])
    checker.text(view.get("title"), ["view", "title"], max_len=MAX_VIEW_TITLE, plain_only=True)
    for key in ("submit", "close"):
        if key in view:
            checker.text(view[key], ["view", key], max_len=MAX_VIEW_TITLE, plain_only=True)
    blocks = view.get("blocks")
    checker.blocks(copy.deepcopy(blocks), ["view", "blocks"])
    has_inputs = isinstance(blocks, list) and any(
        isinstance(b, dict) and b.get("type") == "input" for b in blocks
    )
    if has_inputs and "submit" not in view:
        checker.fail("must provide a submit property when using input blocks", ["view"])
    callback_id = view.get("callback_id")
    if callback_id is not None and (
        not isinstance(callback_id, str) or len(callback_id) > MAX_CALLBACK_ID
    ):
        checker.fail(f"must be at most {MAX_CALLBACK_ID} characters", ["view", "callback_id"])
    metadata = view.get("private_metadata")
    if metadata is not None and (
        not isinstance(metadata, str) or len(metadata) > MAX_PRIVATE_METADATA
    ):
        checker.fail(
            f"must be at most {MAX_PRIVATE_METADATA} characters", ["view", "private_metadata"]
        )
    if checker.errors:
        raise _invalid(checker.errors, "invalid_arguments")


def _stored_view(view: Json, new_id: Callable[[str], str]) -> Json:
    """The view as Slack keeps it: every block and element with its id."""
    stored = copy.deepcopy(view)
    checker = _Checker("modal", new_id)
    stored["blocks"] = checker.blocks(stored.get("blocks") or [], ["view", "blocks"])
    return stored


def _state_values(view: Json, values: Mapping[str, Any]) -> Json:
    """``state.values`` of a submission of ``view``: ``{block_id: {action_id: {...}}}``."""
    state: Json = {}
    used: set[str] = set()
    for block in view.get("blocks") or []:
        if block.get("type") != "input":
            continue
        element = block["element"]
        block_id, action_id = block["block_id"], element["action_id"]
        given: Any = None
        nested = values.get(block_id)
        if isinstance(nested, Mapping) and action_id in nested:
            given = nested[action_id]
            used.add(block_id)
        elif action_id in values:
            given = values[action_id]
            used.add(action_id)
        if given is None and not block.get("optional"):
            raise ValueError(f"the input {action_id!r} ({block_id}) is required")
        state.setdefault(block_id, {})[action_id] = _input_state(element, given)
    unknown = set(values) - used
    if unknown:
        raise ValueError(f"the view has no inputs {sorted(unknown)}")
    return state


def _input_state(element: Json, given: Any) -> Json:
    kind = element["type"]
    if kind in ("static_select", "radio_buttons"):
        chosen = next((o for o in _options(element) if o.get("value") == given), None)
        if given is not None and chosen is None:
            raise ValueError(f"{element['action_id']} has no option {given!r}")
        return {"type": kind, "selected_option": copy.deepcopy(chosen)}
    if kind in ("multi_static_select", "checkboxes"):
        wanted = list(given or [])
        chosen_all = [o for o in _options(element) if o.get("value") in wanted]
        return {"type": kind, "selected_options": copy.deepcopy(chosen_all)}
    if kind == "users_select":
        return {"type": kind, "selected_user": given}
    if kind == "conversations_select":
        return {"type": kind, "selected_conversation": given}
    if kind == "channels_select":
        return {"type": kind, "selected_channel": given}
    if kind == "datepicker":
        return {"type": kind, "selected_date": given}
    return {"type": kind, "value": given}
