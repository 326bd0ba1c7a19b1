"""A fake Telegram Bot API server over real HTTP on 127.0.0.1.

It runs uvicorn in a background thread with its own event loop, so synchronous
tests, async tests and subprocesses (pass them ``base_url``) can all use it. Any bot
token is accepted; the routes are ``/bot<token>/<method>`` (GET or POST; JSON,
form-urlencoded or multipart bodies) and ``/file/bot<token>/<file_path>``::

    with FakeTelegramServer() as fake:
        update = fake.user_message(chat_id=42, user_id=42, text="/start")
        ...  # point the code under test at fake.base_url, let it poll and answer
        assert fake.messages(42)[-1].text == "Hello!"
        assert fake.calls_to("sendMessage")[0].params["chat_id"] == 42

The fake enforces the Bot API limits a bot trips over in practice: text length
(1..4096 UTF-16 code units), entity bounds and types, 64-byte callback data,
"message is not modified", unknown messages, unknown callback queries.

Faults, armed per method (case-insensitive; ``"*"`` = any) for its next ``count`` calls,
in the order armed; a faulty call has no effect (nothing is sent, no update confirmed),
except a hang's, which is only late:

- ``fail_next``: an error answer — 429 with ``retry_after`` (sent as given: 0, negative,
  huge, ``"soon"``; ``OMIT`` leaves it out), 5xx or any status;
- ``drop_next``: the connection is closed without an answer;
- ``hang_next``: the answer comes only after ``seconds`` (``None``: never, until the
  fake stops) — a client's timeout sees a hang;
- ``garbage_next``: an answer that is not JSON (a proxy's HTML page), any status.

``getUpdates`` long-polls like Telegram: updates below ``offset`` are confirmed
(forgotten), ``allowed_updates`` is remembered between calls, and a waiting poll
wakes as soon as a test pushes an update. While a webhook is set it answers 409.

Rate limits are off unless asked for: ``FakeTelegramServer(enforce_limits=True)`` or
``fake.enforce_limits(limits, clock=...)`` answers sends and edits over Telegram's
documented limits with 429 and ``retry_after``, and counts them (``fake.limits``; the
rules are in ``tests/fakes/telegram_limits.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from email.message import Message as _MimeHeaders
from typing import Any, Self
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.background import BackgroundServer
from tests.fakes.telegram_limits import Limits, RateLimits

Json = dict[str, Any]

MAX_TEXT_LENGTH = 4096
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024
MAX_CAPTION_LENGTH = 1024
MAX_CALLBACK_DATA_BYTES = 64
MAX_CALLBACK_ANSWER_LENGTH = 200

ENTITY_TYPES = frozenset(
    {
        "mention",
        "hashtag",
        "cashtag",
        "bot_command",
        "url",
        "email",
        "phone_number",
        "bold",
        "italic",
        "underline",
        "strikethrough",
        "spoiler",
        "blockquote",
        "expandable_blockquote",
        "code",
        "pre",
        "text_link",
        "text_mention",
        "custom_emoji",
        "date_time",
    }
)
CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
UPDATE_KINDS = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "message_reaction",
    "message_reaction_count",
    "inline_query",
    "chosen_inline_result",
    "callback_query",
    "shipping_query",
    "pre_checkout_query",
    "purchased_paid_media",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
)
# Telegram only sends these when asked for them explicitly.
_OPT_IN_KINDS = frozenset({"chat_member", "message_reaction", "message_reaction_count"})

# Form fields that are strings in the Bot API: never JSON-decoded ("123" stays "123").
_STRING_FIELDS = frozenset(
    {
        "text",
        "caption",
        "callback_query_id",
        "inline_message_id",
        "url",
        "secret_token",
        "ip_address",
        "file_id",
        "action",
        "parse_mode",
        "language_code",
        "custom_emoji_id",
    }
)
_COMMAND = re.compile(r"^[a-z0-9_]{1,32}$")
_SECRET_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_LEADING_COMMAND = re.compile(r"^/[A-Za-z0-9_]+(@[A-Za-z0-9_]+)?")

_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply "
    "markup are exactly the same as a current content and reply markup of the message"
)
_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    404: "Not Found",
    409: "Conflict",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def utf16_length(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


#: ``fail_next(..., retry_after=OMIT)``: a 429 without ``parameters.retry_after``.
OMIT: Any = object()


class ApiError(Exception):
    """Raised inside a handler; becomes ``{"ok": false, ...}`` with ``status``.

    ``retry_after`` is sent as given (any JSON value); ``None`` or ``OMIT`` sends none.
    """

    def __init__(
        self,
        status: int,
        description: str,
        retry_after: Any = None,
        *,
        migrate_to_chat_id: Any = None,
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after
        self.migrate_to_chat_id = migrate_to_chat_id


def _bad(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """A file part of a multipart request."""

    field: str
    filename: str | None
    data: bytes
    content_type: str | None


@dataclass(frozen=True, slots=True)
class Call:
    """One API call as the fake decoded it (failed calls included)."""

    method: str
    """As sent (Telegram method names are case-insensitive; compare with ``calls_to``)."""
    params: Json
    """Decoded parameters: JSON-encoded form fields (``reply_markup``, ``entities``, numbers,
    booleans) are decoded; uploaded files appear as ``UploadedFile``."""
    time: float
    """``time.monotonic()`` at arrival."""
    encoding: str
    """``"json"``, ``"form"``, ``"multipart"`` or ``"query"``: how the client sent it."""
    token: str
    files: dict[str, UploadedFile] = field(default_factory=dict)


@dataclass(slots=True)
class Edit:
    """A previous version of an edited message."""

    text: str | None
    entities: list[Json] | None
    reply_markup: Json | None
    time: float


@dataclass(slots=True)
class SentMessage:
    """A message the bot sent, as a user would see it (latest version)."""

    chat_id: int
    message_id: int
    text: str | None
    entities: list[Json] | None = None
    reply_markup: Json | None = None
    message_thread_id: int | None = None
    reply_to_message_id: int | None = None
    document: UploadedFile | None = None
    #: A voice message's audio (``sendVoice``).
    voice: UploadedFile | None = None
    caption: str | None = None
    caption_entities: list[Json] | None = None
    file_id: str | None = None
    edits: list[Edit] = field(default_factory=list)
    """Earlier versions, oldest first (the current one is the fields above)."""
    deleted: bool = False
    date: int = 0


@dataclass(slots=True)
class Draft:
    """One ``sendMessageDraft`` call as recorded per chat."""

    chat_id: int
    draft_id: int
    text: str
    entities: list[Json] | None
    message_thread_id: int | None
    time: float


@dataclass(slots=True)
class Webhook:
    url: str = ""
    secret_token: str | None = None
    allowed_updates: list[str] | None = None
    max_connections: int | None = None
    drop_pending_updates: bool = False


@dataclass(slots=True)
class _Failure:
    count: int
    status: int
    description: str
    retry_after: Any
    kind: str = "error"  # "error" | "drop" | "hang" | "garbage"
    seconds: float | None = None  # hang: how long (None: until the fake stops)
    body: bytes = b""  # garbage: the answer's body
    content_type: str = "text/html"


@dataclass(slots=True)
class _StoredFile:
    file_id: str
    file_unique_id: str
    data: bytes
    file_path: str


class FakeTelegramServer:
    """A Bot API server with state; see the module docstring."""

    def __init__(
        self, *, bot_username: str = "chathub_test_bot", enforce_limits: bool = False
    ) -> None:
        self.bot_username = bot_username
        self.limits: RateLimits | None = RateLimits() if enforce_limits else None
        """Telegram's rate limits when enforced (``enforce_limits``), else ``None``."""
        self.calls: list[Call] = []
        """Every API call received, in arrival order."""
        self.webhook = Webhook()
        """The current webhook (``url == ""`` when none is set)."""
        self.commands: dict[str, list[Json]] = {}
        """``setMyCommands`` state keyed by ``"<scope type>/<language_code>"`` (``"default/"``)."""
        self.callback_answers: list[Json] = []
        """The parameters of every successful ``answerCallbackQuery``."""
        self.chat_actions: list[Json] = []
        """The parameters of every successful ``sendChatAction``."""
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._runner: BackgroundServer | None = None
        self._port = 0
        self._closing = False
        self._init_state()

    def _init_state(self) -> None:
        self._updates: list[Json] = []
        self._next_update_id = 1
        self._allowed_updates: list[str] | None = None
        self._sent: dict[int, list[SentMessage]] = {}
        self._known: dict[int, dict[int, Json]] = {}  # chat -> message id -> message dict
        self._next_message_id: dict[int, int] = {}
        self._drafts: dict[int, list[Draft]] = {}
        self._failures: dict[str, list[_Failure]] = {}
        self._files: dict[str, _StoredFile] = {}
        self._files_by_path: dict[str, _StoredFile] = {}
        self._callbacks: set[str] = set()
        self._next_callback = 1
        self._file_counter = 0
        self._moved: dict[int, Any] = {}  # a group made a supergroup -> what 400s name

    # -- lifecycle ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The API root, ``http://127.0.0.1:PORT`` (methods are under ``/bot<token>/``)."""
        if not self._port:
            raise RuntimeError("the fake Telegram server is not started")
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> Self:
        if self._runner is None:
            app = Starlette(
                routes=[
                    Route("/bot{token}/{method}", self._handle, methods=["GET", "POST"]),
                    Route("/file/bot{token}/{file_path:path}", self._download, methods=["GET"]),
                ]
            )
            self._runner = BackgroundServer(app, "fake-telegram", self._on_loop)
        if not self._runner.running:
            self._closing = False
            self._runner.start()
            self._port = self._runner.port
        return self

    def stop(self) -> None:
        """End pending long polls and shut down; safe to call twice."""
        if self._runner is None or not self._runner.running:
            return
        self._closing = True
        self._notify()
        self._runner.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def enforce_limits(
        self, limits: Limits | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> RateLimits:
        """Answer sends and edits over Telegram's limits with 429 from now on (counted in
        the returned ``RateLimits``, also ``self.limits``); ``clock`` for fake time."""
        with self._lock:
            self.limits = RateLimits(limits, clock=clock)
            return self.limits

    def reset(self) -> None:
        """Forget all state: calls, updates, messages, files, failures, webhook, commands
        (and the rate limits' counts, when enforced)."""
        with self._lock:
            if self.limits is not None:
                self.limits.reset()
            self.calls.clear()
            self.webhook = Webhook()
            self.commands.clear()
            self.callback_answers.clear()
            self.chat_actions.clear()
            self._init_state()
        self._notify()

    # -- test-side inspection ------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        """The calls of ``method`` (case-insensitive), in order."""
        wanted = method.lower()
        with self._lock:
            return [call for call in self.calls if call.method.lower() == wanted]

    def messages(self, chat_id: int, *, include_deleted: bool = True) -> list[SentMessage]:
        """The messages the bot sent to ``chat_id``, oldest first (live objects)."""
        with self._lock:
            sent = list(self._sent.get(chat_id, ()))
        return sent if include_deleted else [m for m in sent if not m.deleted]

    def message(self, chat_id: int, message_id: int) -> SentMessage:
        """One message the bot sent; ``KeyError`` when there is none."""
        for sent in self.messages(chat_id):
            if sent.message_id == message_id:
                return sent
        raise KeyError((chat_id, message_id))

    def drafts(self, chat_id: int) -> list[Draft]:
        """The ``sendMessageDraft`` calls accepted for ``chat_id``, in order."""
        with self._lock:
            return list(self._drafts.get(chat_id, ()))

    def pending_updates(self) -> list[Json]:
        """Updates pushed and not yet confirmed by an ``offset``."""
        with self._lock:
            return copy.deepcopy(self._updates)

    # -- test-side scripting ---------------------------------------------------------

    def fail_next(
        self,
        method: str,
        count: int = 1,
        *,
        retry_after: Any = None,
        status: int = 429,
        description: str | None = None,
    ) -> None:
        """Make the next ``count`` calls of ``method`` fail (case-insensitive; ``"*"`` = any).

        ``status=429`` (the default) sends ``parameters.retry_after`` (default 1 s; any other
        value is sent as given, ``OMIT`` sends none); other statuses send Telegram's usual
        description for that code unless ``description``.
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        if description is None:
            if status == 429:
                shown = "" if retry_after is OMIT else f": retry after {retry_after}"
                description = f"Too Many Requests{shown}"
            else:
                description = _DEFAULT_DESCRIPTIONS.get(status, f"Error {status}")
        self._arm(method, _Failure(count, status, description, retry_after))

    def drop_next(self, method: str, count: int = 1) -> None:
        """Close the connection of the next ``count`` calls of ``method`` without an answer."""
        self._arm(method, _Failure(count, 0, "", None, kind="drop"))

    def hang_next(self, method: str, count: int = 1, *, seconds: float | None = None) -> None:
        """Answer the next ``count`` calls of ``method`` only after ``seconds`` (``None``:
        never; the connection is closed when the fake stops). The call then has its usual
        effect, as a slow Telegram's would: a client that gave up may find it done."""
        self._arm(method, _Failure(count, 0, "", None, kind="hang", seconds=seconds))

    def garbage_next(
        self,
        method: str,
        count: int = 1,
        *,
        body: bytes = b"<html><body><h1>502 Bad Gateway</h1></body></html>",
        status: int = 200,
        content_type: str = "text/html",
    ) -> None:
        """Answer the next ``count`` calls of ``method`` with ``body``, which is not JSON."""
        failure = _Failure(
            count, status, "", None, kind="garbage", body=body, content_type=content_type
        )
        self._arm(method, failure)

    def clear_faults(self) -> None:
        """Disarm every fault not yet used up (the outage is over)."""
        with self._lock:
            self._failures.clear()

    def _arm(self, method: str, failure: _Failure) -> None:
        with self._lock:
            self._failures.setdefault(method.lower(), []).append(failure)

    def add_file(self, file_id: str, data: bytes, file_path: str | None = None) -> Json:
        """Register a downloadable file; returns the ``getFile`` result for it."""
        with self._lock:
            return self._add_file(file_id, data, file_path)

    def push_update(self, update: Json) -> Json:
        """Queue a raw update (an ``update_id`` is assigned when missing); returns it."""
        update = copy.deepcopy(update)
        with self._lock:
            if "update_id" not in update:
                update["update_id"] = self._next_update_id
            self._next_update_id = max(self._next_update_id, int(update["update_id"]) + 1)
            for kind in ("message", "edited_message", "channel_post", "edited_channel_post"):
                message = update.get(kind)
                if isinstance(message, dict) and "chat" in message and "message_id" in message:
                    self._remember(message)
            self._updates.append(update)
            self._updates.sort(key=lambda u: u["update_id"])
        self._notify()
        return copy.deepcopy(update)

    def user_message(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        chat_type: str = "private",
        message_thread_id: int | None = None,
        reply_to_message_id: int | None = None,
        entities: list[Json] | None = None,
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> Json:
        """Push a text message from a user; a leading ``/command`` gets its entity."""
        message = self._new_message(
            chat_id,
            user_id,
            chat_type=chat_type,
            message_thread_id=message_thread_id,
            reply_to_message_id=reply_to_message_id,
            username=username,
            first_name=first_name,
        )
        message["text"] = text
        if entities is None:
            match = _LEADING_COMMAND.match(text)
            if match:
                entities = [{"type": "bot_command", "offset": 0, "length": match.end()}]
        if entities:
            message["entities"] = entities
        return self.push_update({"message": message})

    def migrate_group(
        self,
        chat_id: int,
        user_id: int,
        *,
        new_chat_id: int | None = None,
        announced: bool = True,
        named: Any = None,
    ) -> int:
        """Group ``chat_id`` becomes a supergroup (``user_id`` made it one), as Telegram
        does it: a ``migrate_to_chat_id`` message in the group, a ``migrate_from_chat_id``
        one as the supergroup's first (none: ``announced=False``), and from then on every
        call naming the group is a 400 naming the supergroup (``named``: what it names
        instead, to test junk). Returns the supergroup's id."""
        new = -1_000_000_000_000 + chat_id if new_chat_id is None else new_chat_id
        if not announced:
            with self._lock:
                self._moved[chat_id] = new if named is None else named
            return new
        old_message = self._new_message(
            chat_id, user_id, chat_type="group", username="alice", first_name="Alice"
        )
        old_message["migrate_to_chat_id"] = new
        self.push_update({"message": old_message})
        new_message = self._new_message(
            new, user_id, chat_type="supergroup", username="alice", first_name="Alice"
        )
        new_message["migrate_from_chat_id"] = chat_id
        with self._lock:
            self._moved[chat_id] = new if named is None else named
        self.push_update({"message": new_message})
        return new

    def edited_message(
        self,
        chat_id: int,
        user_id: int,
        message_id: int,
        text: str,
        *,
        chat_type: str = "private",
        entities: list[Json] | None = None,
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> Json:
        """Push an ``edited_message`` update for an earlier user message."""
        with self._lock:
            original = copy.deepcopy(self._known.get(chat_id, {}).get(message_id))
        if original is None:
            original = self._new_message(
                chat_id, user_id, chat_type=chat_type, username=username, first_name=first_name
            )
            original["message_id"] = message_id
        original["text"] = text
        original.pop("entities", None)
        if entities:
            original["entities"] = entities
        original["edit_date"] = int(time.time())
        return self.push_update({"edited_message": original})

    def callback(
        self,
        chat_id: int,
        user_id: int,
        message_id: int,
        data: str,
        *,
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> Json:
        """Push a ``callback_query`` for a button of message ``message_id``."""
        with self._lock:
            query_id = str(10_000_000 + self._next_callback)
            self._next_callback += 1
            self._callbacks.add(query_id)
            message = copy.deepcopy(self._known.get(chat_id, {}).get(message_id))
        if message is None:
            message = {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": _chat(chat_id, "private", user_id, username, first_name),
            }
        query = {
            "id": query_id,
            "from": _user(user_id, username, first_name),
            "message": message,
            "chat_instance": str(abs(chat_id) * 7919 + 1),
            "data": data,
        }
        return self.push_update({"callback_query": query})

    def photo_message(
        self,
        chat_id: int,
        user_id: int,
        data: bytes = b"\xff\xd8\xff\xe0fake-jpeg",
        *,
        caption: str | None = None,
        file_id: str | None = None,
        chat_type: str = "private",
        message_thread_id: int | None = None,
        reply_to_message_id: int | None = None,
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> Json:
        """Push a photo message; the largest size is downloadable with ``data``."""
        with self._lock:
            self._file_counter += 1
            file_id = file_id or f"photo-{self._file_counter}"
            stored = self._add_file(file_id, data, f"photos/file_{self._file_counter}.jpg")
        message = self._new_message(
            chat_id,
            user_id,
            chat_type=chat_type,
            message_thread_id=message_thread_id,
            reply_to_message_id=reply_to_message_id,
            username=username,
            first_name=first_name,
        )
        small = {
            "file_id": f"{file_id}-thumb",
            "file_unique_id": f"{stored['file_unique_id']}-t",
            "width": 90,
            "height": 90,
            "file_size": min(len(data), 1000),
        }
        large = {
            "file_id": file_id,
            "file_unique_id": stored["file_unique_id"],
            "width": 1280,
            "height": 960,
            "file_size": len(data),
        }
        message["photo"] = [small, large]
        if caption is not None:
            message["caption"] = caption
        return self.push_update({"message": message})

    def document_message(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        file_name: str = "file.txt",
        *,
        mime_type: str = "text/plain",
        caption: str | None = None,
        file_id: str | None = None,
        chat_type: str = "private",
        message_thread_id: int | None = None,
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> Json:
        """Push a document message; the file is downloadable with ``data``."""
        with self._lock:
            self._file_counter += 1
            file_id = file_id or f"document-{self._file_counter}"
            stored = self._add_file(
                file_id, data, f"documents/file_{self._file_counter}_{file_name}"
            )
        message = self._new_message(
            chat_id,
            user_id,
            chat_type=chat_type,
            message_thread_id=message_thread_id,
            username=username,
            first_name=first_name,
        )
        message["document"] = {
            "file_id": file_id,
            "file_unique_id": stored["file_unique_id"],
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": len(data),
        }
        if caption is not None:
            message["caption"] = caption
        return self.push_update({"message": message})

    def location_message(
        self,
        chat_id: int,
        user_id: int,
        latitude: float,
        longitude: float,
        *,
        chat_type: str = "private",
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> Json:
        """Push a location message."""
        message = self._new_message(
            chat_id, user_id, chat_type=chat_type, username=username, first_name=first_name
        )
        message["location"] = {"latitude": latitude, "longitude": longitude}
        return self.push_update({"message": message})

    # -- helpers (call with the lock held where noted) ----------------------------------

    def _allocate_message_id(self, chat_id: int) -> int:  # lock held
        message_id = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = message_id + 1
        return message_id

    def _remember(self, message: Json) -> None:  # lock held
        chat_id = int(message["chat"]["id"])
        message_id = int(message["message_id"])
        self._known.setdefault(chat_id, {})[message_id] = copy.deepcopy(message)
        self._next_message_id[chat_id] = max(self._next_message_id.get(chat_id, 1), message_id + 1)

    def _add_file(self, file_id: str, data: bytes, file_path: str | None) -> Json:  # lock held
        self._file_counter += 1
        path = file_path or f"files/file_{self._file_counter}"
        stored = _StoredFile(file_id, f"u{self._file_counter}-{file_id}"[:32], bytes(data), path)
        self._files[file_id] = stored
        self._files_by_path[path] = stored
        return _file_json(stored)

    def _new_message(
        self,
        chat_id: int,
        user_id: int,
        *,
        chat_type: str,
        message_thread_id: int | None = None,
        reply_to_message_id: int | None = None,
        username: str | None,
        first_name: str,
    ) -> Json:
        with self._lock:
            message_id = self._allocate_message_id(chat_id)
            replied = (
                copy.deepcopy(self._known.get(chat_id, {}).get(reply_to_message_id))
                if reply_to_message_id is not None
                else None
            )
        message: Json = {
            "message_id": message_id,
            "from": _user(user_id, username, first_name),
            "chat": _chat(chat_id, chat_type, user_id, username, first_name),
            "date": int(time.time()),
        }
        if message_thread_id is not None:
            message["message_thread_id"] = message_thread_id
            message["is_topic_message"] = True
        if reply_to_message_id is not None:
            if replied is None:
                replied = {
                    "message_id": reply_to_message_id,
                    "date": int(time.time()),
                    "chat": message["chat"],
                }
            replied.pop("reply_to_message", None)
            message["reply_to_message"] = replied
        return message

    def _notify(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def wake() -> None:
            if self._wake is not None:
                self._wake.set()

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(wake)

    def _bot_user(self, token: str) -> Json:
        prefix = token.split(":", 1)[0]
        bot_id = int(prefix) if prefix.isdigit() else 1_000_001
        return {
            "id": bot_id,
            "is_bot": True,
            "first_name": "ChatHub Test Bot",
            "username": self.bot_username,
        }

    # -- server side -------------------------------------------------------------------

    def _on_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        if loop is not None:
            self._wake = asyncio.Event()

    async def _download(self, request: Request) -> Response:
        path = request.path_params["file_path"]
        with self._lock:
            stored = self._files_by_path.get(path)
        if stored is None:
            return _error_response(ApiError(404, "Not Found"))
        return Response(stored.data, media_type="application/octet-stream")

    async def _handle(self, request: Request) -> Response:
        token = request.path_params["token"]
        method = request.path_params["method"]
        try:
            params, files, encoding = await _decode_request(request)
        except ApiError as error:
            return _error_response(error)
        with self._lock:
            self.calls.append(Call(method, params, time.monotonic(), encoding, token, files))
            failure = self._take_failure(method)
        if failure is not None and failure.kind == "hang":
            await self._hang(failure.seconds)
            if self._closing:
                return await _drop(request)
        elif failure is not None:
            return await self._fault(request, failure)
        handler = _HANDLERS.get(method.lower())
        if handler is None:
            return _error_response(ApiError(404, "Not Found: method not found"))
        try:
            if method.lower() == "getupdates":
                result = await self._get_updates(params)
            else:
                with self._lock:
                    moved = self._moved.get(_moved_chat(params), OMIT)
                    if moved is not OMIT:
                        raise ApiError(
                            400,
                            "Bad Request: group chat was upgraded to a supergroup chat",
                            migrate_to_chat_id=moved,
                        )
                    limits = self.limits
                    if limits is not None and (wait := limits.check(method, params)):
                        raise ApiError(429, f"Too Many Requests: retry after {wait}", wait)
                    result = handler(self, token, params, files)
                    if limits is not None:
                        limits.record(method, params)
        except ApiError as error:
            return _error_response(error)
        return _ApiResponse({"ok": True, "result": result})

    async def _fault(self, request: Request, failure: _Failure) -> Response:
        if failure.kind == "drop":
            return await _drop(request)
        if failure.kind == "garbage":
            return Response(failure.body, failure.status, media_type=failure.content_type)
        return _error_response(ApiError(failure.status, failure.description, failure.retry_after))

    async def _hang(self, seconds: float | None) -> None:
        """Wait ``seconds`` (``None``: forever), ending early when the fake stops."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self._closing:
            left = 0.05 if deadline is None else min(deadline - time.monotonic(), 0.05)
            if left <= 0:
                return
            await asyncio.sleep(left)

    def _take_failure(self, method: str) -> _Failure | None:  # lock held
        for key in (method.lower(), "*"):
            queue = self._failures.get(key)
            if queue:
                failure = queue[0]
                failure.count -= 1
                if failure.count <= 0:
                    queue.pop(0)
                return failure
        return None

    # -- methods -----------------------------------------------------------------------

    async def _get_updates(self, params: Json) -> list[Json]:
        offset = _int(params.get("offset"), "offset", default=0)
        limit = min(max(_int(params.get("limit"), "limit", default=100), 1), 100)
        timeout = max(_int(params.get("timeout"), "timeout", default=0), 0)
        allowed = params.get("allowed_updates")
        with self._lock:
            if self.webhook.url:
                raise ApiError(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; "
                    "use deleteWebhook to delete the webhook first",
                )
            if allowed is not None:
                if not isinstance(allowed, list):
                    raise _bad("can't parse allowed_updates JSON array")
                self._allowed_updates = [str(kind) for kind in allowed]
        deadline = time.monotonic() + timeout
        wake = self._wake
        assert wake is not None
        while True:
            wake.clear()
            with self._lock:
                batch = self._collect(offset, limit)
            if batch or self._closing:
                return batch
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), remaining)

    def _collect(self, offset: int, limit: int) -> list[Json]:  # lock held
        if offset < 0:
            self._updates = self._updates[offset:]
        elif offset:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        allowed = self._allowed_updates
        wanted = set(allowed) if allowed else set(UPDATE_KINDS) - _OPT_IN_KINDS
        kept = []
        for update in self._updates:
            kinds = [key for key in update if key != "update_id"]
            # Telegram never delivers updates of kinds the bot did not ask for.
            if not kinds or any(kind in wanted or kind not in UPDATE_KINDS for kind in kinds):
                kept.append(update)
        self._updates = kept
        return copy.deepcopy(kept[:limit])

    def _get_me(self, token: str, params: Json, files: dict[str, UploadedFile]) -> Json:
        return {
            **self._bot_user(token),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def _send_message(self, token: str, params: Json, files: dict[str, UploadedFile]) -> Json:
        chat_id = _chat_id(params)
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _bad("message text is empty")
        if utf16_length(text) > MAX_TEXT_LENGTH:
            raise _bad("message is too long")
        entities = _entities(params.get("entities"), text)
        markup = _reply_markup(params.get("reply_markup"))
        thread_id = _optional_int(params.get("message_thread_id"), "message_thread_id")
        reply_to = self._reply_to(chat_id, params)
        sent = SentMessage(
            chat_id=chat_id,
            message_id=self._allocate_message_id(chat_id),
            text=text,
            entities=entities,
            reply_markup=markup,
            message_thread_id=thread_id,
            reply_to_message_id=reply_to,
            date=int(time.time()),
        )
        return self._store_sent(token, sent)

    def _send_document(self, token: str, params: Json, files: dict[str, UploadedFile]) -> Json:
        chat_id = _chat_id(params)
        document = params.get("document")
        if isinstance(document, UploadedFile):
            upload = document
        elif isinstance(document, str) and document in self._files:
            stored = self._files[document]
            upload = UploadedFile(
                "document", stored.file_path.rsplit("/", 1)[-1], stored.data, None
            )
        else:
            raise _bad("there is no document in the request")
        caption = params.get("caption")
        caption_entities = None
        if caption is not None:
            if not isinstance(caption, str):
                raise _bad("caption must be a string")
            if utf16_length(caption) > MAX_CAPTION_LENGTH:
                raise _bad("message caption is too long")
            caption_entities = _entities(params.get("caption_entities"), caption)
        markup = _reply_markup(params.get("reply_markup"))
        thread_id = _optional_int(params.get("message_thread_id"), "message_thread_id")
        reply_to = self._reply_to(chat_id, params)
        self._file_counter += 1
        file_id = f"sent-document-{self._file_counter}"
        self._add_file(file_id, upload.data, f"documents/{file_id}_{upload.filename or 'file'}")
        sent = SentMessage(
            chat_id=chat_id,
            message_id=self._allocate_message_id(chat_id),
            text=None,
            reply_markup=markup,
            message_thread_id=thread_id,
            reply_to_message_id=reply_to,
            document=upload,
            caption=caption,
            caption_entities=caption_entities,
            file_id=file_id,
            date=int(time.time()),
        )
        return self._store_sent(token, sent)

    def _send_voice(self, token: str, params: Json, files: dict[str, UploadedFile]) -> Json:
        """A voice message: an uploaded OGG file (Telegram plays OGG/Opus as a voice note)."""
        chat_id = _chat_id(params)
        voice = params.get("voice")
        if not isinstance(voice, UploadedFile) or not voice.data:
            raise _bad("there is no voice in the request")
        if not voice.data.startswith(b"OggS"):
            raise _bad("voice must be an OGG file encoded with OPUS")
        thread_id = _optional_int(params.get("message_thread_id"), "message_thread_id")
        self._file_counter += 1
        file_id = f"sent-voice-{self._file_counter}"
        self._add_file(file_id, voice.data, f"voice/{file_id}.ogg")
        sent = SentMessage(
            chat_id=chat_id,
            message_id=self._allocate_message_id(chat_id),
            text=None,
            message_thread_id=thread_id,
            reply_to_message_id=self._reply_to(chat_id, params),
            voice=voice,
            caption=params.get("caption") if isinstance(params.get("caption"), str) else None,
            file_id=file_id,
            date=int(time.time()),
        )
        return self._store_sent(token, sent)

    def _store_sent(self, token: str, sent: SentMessage) -> Json:  # lock held
        self._sent.setdefault(sent.chat_id, []).append(sent)
        message = self._message_json(token, sent)
        self._known.setdefault(sent.chat_id, {})[sent.message_id] = copy.deepcopy(message)
        return message

    def _message_json(self, token: str, sent: SentMessage) -> Json:  # lock held
        chat = _chat_from_id(sent.chat_id, self._known.get(sent.chat_id, {}))
        message: Json = {
            "message_id": sent.message_id,
            "from": self._bot_user(token),
            "chat": chat,
            "date": sent.date,
        }
        if sent.message_thread_id is not None:
            message["message_thread_id"] = sent.message_thread_id
        if sent.reply_to_message_id is not None:
            replied = copy.deepcopy(self._known.get(sent.chat_id, {}).get(sent.reply_to_message_id))
            if replied is not None:
                replied.pop("reply_to_message", None)
                message["reply_to_message"] = replied
        if sent.text is not None:
            message["text"] = sent.text
        if sent.entities:
            message["entities"] = copy.deepcopy(sent.entities)
        if sent.document is not None:
            stored = self._files[sent.file_id or ""]
            message["document"] = {
                "file_id": stored.file_id,
                "file_unique_id": stored.file_unique_id,
                "file_name": sent.document.filename or "file",
                "mime_type": sent.document.content_type or "application/octet-stream",
                "file_size": len(stored.data),
            }
        if sent.voice is not None:
            stored = self._files[sent.file_id or ""]
            message["voice"] = {
                "file_id": stored.file_id,
                "file_unique_id": stored.file_unique_id,
                "duration": 1,
                "mime_type": "audio/ogg",
                "file_size": len(stored.data),
            }
        if sent.caption is not None:
            message["caption"] = sent.caption
        if sent.caption_entities:
            message["caption_entities"] = copy.deepcopy(sent.caption_entities)
        if sent.reply_markup is not None and "inline_keyboard" in sent.reply_markup:
            # Messages only ever carry inline keyboards; reply keyboards are not echoed.
            message["reply_markup"] = copy.deepcopy(sent.reply_markup)
        if sent.edits:
            message["edit_date"] = int(time.time())
        return message

    def _reply_to(self, chat_id: int, params: Json) -> int | None:  # lock held
        reply_to = _optional_int(params.get("reply_to_message_id"), "reply_to_message_id")
        allow_missing = bool(params.get("allow_sending_without_reply"))
        parameters = params.get("reply_parameters")
        if isinstance(parameters, dict):
            reply_to = _optional_int(parameters.get("message_id"), "reply_parameters.message_id")
            allow_missing = bool(parameters.get("allow_sending_without_reply"))
        if reply_to is None:
            return None
        if reply_to not in self._known.get(chat_id, {}) or self._is_deleted(chat_id, reply_to):
            if allow_missing:
                return None
            raise _bad("message to be replied not found")
        return reply_to

    def _is_deleted(self, chat_id: int, message_id: int) -> bool:  # lock held
        return any(m.message_id == message_id and m.deleted for m in self._sent.get(chat_id, ()))

    def _find_sent(self, chat_id: int, message_id: int, action: str) -> SentMessage:
        for sent in self._sent.get(chat_id, ()):
            if sent.message_id == message_id:
                if sent.deleted:
                    break
                return sent
        else:
            if action == "edit" and message_id in self._known.get(chat_id, {}):
                raise _bad("message can't be edited")  # a user's message
        raise _bad(f"message to {action} not found")

    def _edit_message_text(self, token: str, params: Json, files: dict[str, UploadedFile]) -> Json:
        if "inline_message_id" in params:
            raise _bad("inline messages are not supported by the fake")
        chat_id = _chat_id(params)
        message_id = _int(params.get("message_id"), "message_id")
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _bad("message text is empty")
        if utf16_length(text) > MAX_TEXT_LENGTH:
            raise _bad("message is too long")
        entities = _entities(params.get("entities"), text)
        markup = _reply_markup(params.get("reply_markup"))
        sent = self._find_sent(chat_id, message_id, "edit")
        if sent.text is None:
            raise _bad("there is no text in the message to edit")
        if (
            sent.text == text
            and (sent.entities or None) == (entities or None)
            and sent.reply_markup == markup
        ):
            raise ApiError(400, _NOT_MODIFIED)
        sent.edits.append(Edit(sent.text, sent.entities, sent.reply_markup, time.monotonic()))
        sent.text, sent.entities, sent.reply_markup = text, entities, markup
        message = self._message_json(token, sent)
        self._known.setdefault(chat_id, {})[message_id] = copy.deepcopy(message)
        return message

    def _delete_message(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        chat_id = _chat_id(params)
        message_id = _int(params.get("message_id"), "message_id")
        bot_sent = any(m.message_id == message_id for m in self._sent.get(chat_id, ()))
        # A user's message: bots may delete those too (the fake does not check rights).
        if not bot_sent and self._known.get(chat_id, {}).pop(message_id, None) is not None:
            return True
        sent = self._find_sent(chat_id, message_id, "delete")
        sent.deleted = True
        return True

    def _answer_callback_query(
        self, token: str, params: Json, files: dict[str, UploadedFile]
    ) -> bool:
        query_id = str(params.get("callback_query_id", ""))
        if query_id not in self._callbacks:
            raise _bad("query is too old and response timeout expired or query ID is invalid")
        text = params.get("text")
        if text is not None and utf16_length(str(text)) > MAX_CALLBACK_ANSWER_LENGTH:
            raise _bad("MESSAGE_TOO_LONG")
        self._callbacks.discard(query_id)
        self.callback_answers.append(dict(params))
        return True

    def _send_chat_action(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        _chat_id(params)
        if params.get("action") not in CHAT_ACTIONS:
            raise _bad("wrong parameter action in request")
        _optional_int(params.get("message_thread_id"), "message_thread_id")
        self.chat_actions.append(dict(params))
        return True

    def _set_my_commands(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise _bad("can't parse commands JSON object")
        for command in commands:
            if not isinstance(command, dict):
                raise _bad("can't parse BotCommand JSON object")
            if not _COMMAND.match(str(command.get("command", ""))):
                raise _bad("BOT_COMMAND_INVALID")
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise _bad("BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands[_commands_key(params)] = [
            {"command": str(c["command"]), "description": str(c["description"])} for c in commands
        ]
        return True

    def _get_my_commands(self, token: str, params: Json, files: dict[str, UploadedFile]) -> list:
        return copy.deepcopy(self.commands.get(_commands_key(params), []))

    def _delete_my_commands(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        self.commands.pop(_commands_key(params), None)
        return True

    def _set_webhook(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        url = params.get("url")
        if not isinstance(url, str):
            raise _bad("bad webhook: Webhook URL must be a string")
        secret = params.get("secret_token")
        if secret is not None and not _SECRET_TOKEN.match(str(secret)):
            raise _bad("secret token contains unallowed characters")
        allowed = params.get("allowed_updates")
        if allowed is not None and not isinstance(allowed, list):
            raise _bad("can't parse allowed_updates JSON array")
        drop = bool(params.get("drop_pending_updates"))
        if drop:
            self._updates.clear()
        self.webhook = Webhook(
            url=url,
            secret_token=None if secret is None else str(secret),
            allowed_updates=allowed,
            max_connections=_optional_int(params.get("max_connections"), "max_connections"),
            drop_pending_updates=drop,
        )
        if allowed is not None:
            self._allowed_updates = [str(kind) for kind in allowed]
        return True

    def _delete_webhook(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        drop = bool(params.get("drop_pending_updates"))
        if drop:
            self._updates.clear()
        self.webhook = Webhook(drop_pending_updates=drop)
        return True

    def _get_webhook_info(self, token: str, params: Json, files: dict[str, UploadedFile]) -> Json:
        info: Json = {
            "url": self.webhook.url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }
        if self.webhook.url:
            if self.webhook.max_connections is not None:
                info["max_connections"] = self.webhook.max_connections
            if self.webhook.allowed_updates is not None:
                info["allowed_updates"] = list(self.webhook.allowed_updates)
        return info

    def _get_file(self, token: str, params: Json, files: dict[str, UploadedFile]) -> Json:
        stored = self._files.get(str(params.get("file_id", "")))
        if stored is None:
            raise _bad("invalid file_id")
        if len(stored.data) > MAX_DOWNLOAD_BYTES:  # the Bot API hands bots up to 20 MB
            raise _bad("file is too big")
        return _file_json(stored)

    def _send_message_draft(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        chat_id = _chat_id(params)
        draft_id = _int(params.get("draft_id"), "draft_id")
        if draft_id == 0:
            raise _bad("draft_id must be non-zero")
        text = params.get("text", "")
        if not isinstance(text, str):
            raise _bad("text must be a string")
        if utf16_length(text) > MAX_TEXT_LENGTH:
            raise _bad("message is too long")
        entities = _entities(params.get("entities"), text)
        thread_id = _optional_int(params.get("message_thread_id"), "message_thread_id")
        self._drafts.setdefault(chat_id, []).append(
            Draft(chat_id, draft_id, text, entities, thread_id, time.monotonic())
        )
        return True

    def _true(self, token: str, params: Json, files: dict[str, UploadedFile]) -> bool:
        return True


_HANDLERS = {
    "getme": FakeTelegramServer._get_me,
    "getupdates": FakeTelegramServer._true,  # served by _get_updates (async)
    "sendmessage": FakeTelegramServer._send_message,
    "editmessagetext": FakeTelegramServer._edit_message_text,
    "deletemessage": FakeTelegramServer._delete_message,
    "answercallbackquery": FakeTelegramServer._answer_callback_query,
    "sendchataction": FakeTelegramServer._send_chat_action,
    "setmycommands": FakeTelegramServer._set_my_commands,
    "getmycommands": FakeTelegramServer._get_my_commands,
    "deletemycommands": FakeTelegramServer._delete_my_commands,
    "setwebhook": FakeTelegramServer._set_webhook,
    "deletewebhook": FakeTelegramServer._delete_webhook,
    "getwebhookinfo": FakeTelegramServer._get_webhook_info,
    "getfile": FakeTelegramServer._get_file,
    "senddocument": FakeTelegramServer._send_document,
    "sendvoice": FakeTelegramServer._send_voice,
    "sendmessagedraft": FakeTelegramServer._send_message_draft,
    "close": FakeTelegramServer._true,
    "logout": FakeTelegramServer._true,
}


# -- request decoding ----------------------------------------------------------------------


async def _decode_request(request: Request) -> tuple[Json, dict[str, UploadedFile], str]:
    params: Json = {}
    files: dict[str, UploadedFile] = {}
    encoding = "query"
    for key, value in request.query_params.multi_items():
        params[key] = _decode_field(key, value)
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    mime = content_type.split(";", 1)[0].strip().lower()
    if body and mime == "application/json":
        encoding = "json"
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise _bad("can't parse JSON request body") from exc
        if not isinstance(data, dict):
            raise _bad("request body is not a JSON object")
        params.update(data)
    elif body and mime == "application/x-www-form-urlencoded":
        encoding = "form"
        for key, value in parse_qsl(body.decode("utf-8"), keep_blank_values=True):
            params[key] = _decode_field(key, value)
    elif mime == "multipart/form-data":
        encoding = "multipart"
        for name, filename, part_type, data in _parse_multipart(content_type, body):
            if filename is None:
                params[name] = _decode_field(name, data.decode("utf-8"))
            else:
                files[name] = UploadedFile(name, filename, data, part_type)
        for key, upload in files.items():
            params.setdefault(key, upload)
        for key, value in list(params.items()):
            if isinstance(value, str) and value.startswith("attach://"):
                attached = files.get(value.removeprefix("attach://"))
                if attached is not None:
                    params[key] = attached
    return params, files, encoding


def _decode_field(key: str, value: str) -> Any:
    if key in _STRING_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _parse_multipart(
    content_type: str, body: bytes
) -> Iterable[tuple[str, str | None, str | None, bytes]]:
    header = _MimeHeaders()
    header["content-type"] = content_type
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise _bad("multipart request without a boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    chunks = body.split(delimiter)
    for chunk in chunks[1:]:
        if chunk.startswith(b"--"):
            break
        chunk = chunk.removeprefix(b"\r\n").removesuffix(b"\r\n")
        raw_headers, _, data = chunk.partition(b"\r\n\r\n")
        part = _MimeHeaders()
        for line in raw_headers.decode("utf-8", "replace").split("\r\n"):
            name, sep, value = line.partition(":")
            if sep:
                part[name.strip()] = value.strip()
        field_name = part.get_param("name", header="content-disposition")
        if not isinstance(field_name, str):
            continue
        filename = part.get_filename()
        yield field_name, filename, part.get("content-type"), data


# -- validation ----------------------------------------------------------------------------


def _int(value: Any, name: str, *, default: int | None = None) -> int:
    if value is None or value == "":
        if default is not None:
            return default
        raise _bad(f"{name} is empty")
    if isinstance(value, bool):
        raise _bad(f"wrong parameter {name}")
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise _bad(f"wrong parameter {name}") from exc


def _optional_int(value: Any, name: str) -> int | None:
    return None if value is None or value == "" else _int(value, name)


def _moved_chat(params: Json) -> int | None:
    try:
        return int(params.get("chat_id"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _chat_id(params: Json) -> int:
    value = params.get("chat_id")
    if value is None or value == "":
        raise _bad("chat_id is empty")
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise _bad("chat not found") from exc


def _entities(value: Any, text: str) -> list[Json] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise _bad("can't parse entities: entities must be a JSON array")
    size = utf16_length(text)
    result = []
    for index, entity in enumerate(value):
        where = f"entity #{index + 1}"
        if not isinstance(entity, dict):
            raise _bad(f"can't parse entities: {where} is not an object")
        kind = entity.get("type")
        if kind not in ENTITY_TYPES:
            raise _bad(f"can't parse entities: unsupported entity type {kind!r} in {where}")
        offset, length = entity.get("offset"), entity.get("length")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise _bad(f"can't parse entities: wrong offset {offset!r} in {where}")
        if not isinstance(length, int) or isinstance(length, bool) or length <= 0:
            raise _bad(f"can't parse entities: wrong length {length!r} in {where}")
        if offset + length > size:
            raise _bad(
                f"can't parse entities: {where} ends at {offset + length}, "
                f"after the end of the text ({size} UTF-16 code units)"
            )
        if kind == "text_link" and not entity.get("url"):
            raise _bad(f"can't parse entities: text_link without url in {where}")
        if kind == "text_mention" and not isinstance(entity.get("user"), dict):
            raise _bad(f"can't parse entities: text_mention without user in {where}")
        if kind == "custom_emoji" and not entity.get("custom_emoji_id"):
            raise _bad(f"can't parse entities: custom_emoji without custom_emoji_id in {where}")
        if "language" in entity and kind != "pre":
            raise _bad(f"can't parse entities: language is only allowed for pre in {where}")
        result.append(dict(entity))
    return result


def _reply_markup(value: Any) -> Json | None:
    if value is None or value == "":
        return None
    if not isinstance(value, dict):
        raise _bad("can't parse reply keyboard markup JSON object")
    if "inline_keyboard" in value:
        rows = value["inline_keyboard"]
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise _bad("can't parse inline keyboard button: rows must be arrays")
        for row in rows:
            for button in row:
                if not isinstance(button, dict) or not isinstance(button.get("text"), str):
                    raise _bad("can't parse inline keyboard button: Text must be non-empty")
                data = button.get("callback_data")
                if data is not None:
                    size = len(str(data).encode("utf-8"))
                    if not 1 <= size <= MAX_CALLBACK_DATA_BYTES:
                        raise _bad("BUTTON_DATA_INVALID")
    elif not any(key in value for key in ("keyboard", "remove_keyboard", "force_reply")):
        raise _bad("can't parse reply keyboard markup JSON object")
    return copy.deepcopy(value)


def _commands_key(params: Json) -> str:
    scope = params.get("scope")
    scope_type = scope.get("type", "default") if isinstance(scope, dict) else "default"
    extra = ""
    if isinstance(scope, dict):
        for key in ("chat_id", "user_id"):
            if key in scope:
                extra += f":{scope[key]}"
    return f"{scope_type}{extra}/{params.get('language_code') or ''}"


# -- JSON builders -------------------------------------------------------------------------


def _user(user_id: int, username: str | None, first_name: str) -> Json:
    user: Json = {"id": user_id, "is_bot": False, "first_name": first_name}
    if username:
        user["username"] = username
    user["language_code"] = "en"
    return user


def _chat(
    chat_id: int, chat_type: str, user_id: int, username: str | None, first_name: str
) -> Json:
    if chat_type == "private":
        chat: Json = {"id": chat_id, "type": "private", "first_name": first_name}
        if username:
            chat["username"] = username
        return chat
    chat = {"id": chat_id, "type": chat_type, "title": f"Test {chat_type} {chat_id}"}
    if chat_type == "supergroup":
        chat["is_forum"] = True
    return chat


def _chat_from_id(chat_id: int, known: dict[int, Json]) -> Json:
    for message in known.values():
        chat = message.get("chat")
        if isinstance(chat, dict) and chat.get("id") == chat_id:
            return copy.deepcopy(chat)
    if chat_id > 0:
        return {"id": chat_id, "type": "private", "first_name": "User"}
    return {"id": chat_id, "type": "supergroup", "title": f"Chat {chat_id}"}


def _file_json(stored: _StoredFile) -> Json:
    return {
        "file_id": stored.file_id,
        "file_unique_id": stored.file_unique_id,
        "file_size": len(stored.data),
        "file_path": stored.file_path,
    }


class _ApiResponse(JSONResponse):
    """JSON with every non-ASCII character escaped, as Telegram's own answers are.

    Only so can a lone surrogate travel: ``"\\ud800"`` is valid JSON, a lone surrogate
    encoded as UTF-8 is not (Starlette's own JSONResponse would fail on it).
    """

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
        ).encode()


def _error_response(error: ApiError) -> JSONResponse:
    body: Json = {"ok": False, "error_code": error.status, "description": error.description}
    if error.retry_after is not None and error.retry_after is not OMIT:
        body["parameters"] = {"retry_after": error.retry_after}
    if error.migrate_to_chat_id is not None:
        body["parameters"] = {"migrate_to_chat_id": error.migrate_to_chat_id}
    return _ApiResponse(body, status_code=error.status)


async def _drop(request: Request) -> Response:
    """Close the request's connection without a byte of answer.

    ASGI has no such message; uvicorn's ``receive`` is a method of the request cycle that
    holds the transport. Once the connection is lost uvicorn ignores the response below.
    """
    cycle = getattr(request.receive, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        raise RuntimeError("drop_next needs uvicorn's h11 request cycle")
    transport.abort()
    for _ in range(3):  # let uvicorn see the connection go before it would answer
        await asyncio.sleep(0)
    return Response(b"", status_code=204)


def entity(kind: str, offset: int, length: int, **extra: Any) -> Json:
    """A ``MessageEntity`` dict (a convenience for tests)."""
    return {"type": kind, "offset": offset, "length": length, **extra}


def inline_keyboard(*rows: Sequence[tuple[str, str]]) -> Json:
    """An ``InlineKeyboardMarkup`` dict from rows of ``(text, callback_data)``."""
    return {
        "inline_keyboard": [
            [{"text": text, "callback_data": data} for text, data in row] for row in rows
        ]
    }
