"""Matrix's side of the delivery layer: its client (``MatrixClient``: one try of a recorded
event, ``PUT /rooms/{room}/send/{type}/{txnId}``) and its sender (``MatrixSender``).

Every call goes through ``Outbound`` (``bot.delivery``). A reply is cut on safe Markdown
boundaries, each part an ``m.text`` with its Markdown as the plain ``body`` and its HTML
(``org.matrix.custom.html``) beside it, recorded as outbox rows of the ``matrix``
platform under its room with a transaction id derived from the row's key: a PUT retried
after a crash, or by a second process, is the same transaction, and the homeserver
answers it with the event it already made instead of a second message (Matrix offers
what Telegram cannot). ``M_LIMIT_EXCEEDED`` is ``RetryLater`` with its
``retry_after_ms``, which the outbox's pacing honours for the whole fleet; matrix-nio
retries nothing itself.

Nothing is ever sent into an encrypted room but the one notice that says the bot cannot
read it (``Rooms.encrypted``, filled by the sync).
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from aiohttp import ClientError
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml as escape_html
from nio import AsyncClient, ErrorResponse, RoomSendResponse
from sqlalchemy.engine import Connection

from bot.delivery import (
    OTHER,
    Cap,
    Gone,
    Outbound,
    OutboxRow,
    Pacing,
    PacingPolicy,
    PlatformError,
    Rate,
    Refused,
    RetryLater,
    Unavailable,
    clamp_retry_after,
)
from bot.matrix.incoming import MATRIX, Place, parse_source
from bot.matrix.settings import MatrixSettings
from bot.platform.chunks import link_definitions, split_markdown
from bot.platform.outbox import RowSender, last_lines
from bot.platform.protocols import MessageRef
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_out import VOICE, Speak, audio_of, text_instead, voice_payloads

__all__ = [
    "MESSAGE_LIMIT",
    "MatrixClient",
    "MatrixError",
    "MatrixSender",
    "Rooms",
    "TokenRevoked",
    "check",
    "content_of",
    "contents_of",
    "edit_of",
    "leave",
    "matrix_pacing",
]

log = logging.getLogger(__name__)

Json = dict[str, Any]

#: Characters of Markdown per message: its body and its HTML mostly stay well inside the
#: homeserver's 64 KiB event limit; a part whose content does not (a table's HTML is
#: several times its Markdown) is cut again (``contents_of``).
MESSAGE_LIMIT = 8000
#: Bytes of one message's content at most (the event around it, its thread relation
#: included, fits the 65,536 bytes Synapse takes).
CONTENT_BUDGET = 60_000
_HTML = "org.matrix.custom.html"
#: Where ``prepare`` puts a voice reply's spoken text until ``record`` lifts it out.
_VOICE = "chathub.voice"
_CLIENT = "/_matrix/client/v3"
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(
    ["table", "strikethrough"]
)


def _image_as_link(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    """An image the model wrote, as a link to it: an ``<img>`` of any address makes a
    client that loads it fetch what the model chose (a query string can carry what it
    read; the spec allows ``mxc://`` sources only; found by review)."""
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    label = escape_html(token.content or src or "image")
    if not src.lower().startswith(("http://", "https://")):
        return label
    return f'<a href="{escape_html(src)}">{label}</a>'


_MARKDOWN.add_render_rule("image", _image_as_link)


class MatrixError(PlatformError):
    """A Matrix call failed; ``description`` is the homeserver's errcode when it sent one."""


class MatrixRetryLater(MatrixError, RetryLater):
    pass


class MatrixUnavailable(MatrixError, Unavailable):
    pass


class MatrixRefused(MatrixError, Refused):
    pass


class MatrixGone(MatrixRefused, Gone):
    """``M_FORBIDDEN``: the bot left the room, was kicked or banned, or may not speak there:
    nothing sent there gets through."""


class TokenRevoked(MatrixUnavailable):
    """``M_UNKNOWN_TOKEN``: the access token was revoked (logged out, deactivated). To a
    send it is the homeserver away, not a refusal of the message: the row waits for the
    new login (a password's, at once; a new token's, at the next start) instead of
    failing for good (until 2026-12-07 a reply sent as the token was revoked was lost;
    found by review)."""


def check(response: Any) -> Any:
    """A matrix-nio answer, or its error as the delivery layer's errors."""
    if not isinstance(response, ErrorResponse):
        return response
    transport = response.transport_response
    status = transport.status if transport is not None else 0
    code = str(response.status_code or f"HTTP {status}")
    if code == "M_LIMIT_EXCEEDED" or status == 429:
        seconds = (response.retry_after_ms or 0) / 1000 or None
        raise MatrixRetryLater(clamp_retry_after(seconds), code)
    if code == "M_UNKNOWN_TOKEN":
        raise TokenRevoked(code)
    if status >= 500 or status == 0:
        raise MatrixUnavailable(f"{code}: {response.message}")
    raise (MatrixGone if code == "M_FORBIDDEN" else MatrixRefused)(code)


async def call(op: Any) -> Any:
    """Await one matrix-nio call, its failures as the delivery layer's errors."""
    try:
        return check(await op)
    except (ClientError, OSError, TimeoutError) as exc:
        raise MatrixUnavailable(f"{type(exc).__name__}: {exc}") from None


async def leave(nio: AsyncClient, room_id: str, reason: str) -> None:
    """Leave ``room_id`` (decline its invite) with a reason its members read: matrix-nio's
    ``room_leave`` sends none, so the spec's request is made through its ``send``."""
    path = f"{_CLIENT}/rooms/{quote(room_id, safe='')}/leave"
    headers = {"Authorization": f"Bearer {nio.access_token}", "Content-Type": "application/json"}
    try:
        answer = await nio.send("POST", path, json.dumps({"reason": reason}), headers)
        status = answer.status
        body = await answer.json(content_type=None) if status >= 400 else {}
        answer.release()
    except (ClientError, OSError, TimeoutError, ValueError) as exc:
        raise MatrixUnavailable(f"{type(exc).__name__}: {exc}") from None
    body = body if isinstance(body, dict) else {}
    code = str(body.get("errcode") or f"HTTP {status}")
    if status == 429 or code == "M_LIMIT_EXCEEDED":  # leaves are limited as messages are
        seconds = body.get("retry_after_ms")
        seconds = seconds / 1000 if isinstance(seconds, int | float) else None
        raise MatrixRetryLater(clamp_retry_after(seconds), code)
    if status >= 500:
        raise MatrixUnavailable(f"HTTP {status}")
    if status >= 400:
        raise MatrixRefused(code)


def matrix_pacing(settings: MatrixSettings) -> Pacing:
    """Per room a burst then a rate; edits one per second per room; the whole account at
    most ``MATRIX_GLOBAL_PER_SECOND``, shared by a fleet (docs/matrix.md, "Pacing")."""
    room = Rate(settings.matrix_room_burst, settings.matrix_room_per_second)
    return Pacing(
        policy=PacingPolicy(
            private=room,
            group=room,
            group_cap=None,
            overall=Cap.per_second(settings.matrix_global_per_second),
            edits=Rate(2, 1.0),
        )
    )


def content_of(
    markdown: str, msgtype: str = "m.text", references: dict[str, Any] | None = None
) -> Json:
    """An ``m.room.message`` content: the Markdown as its body, its HTML beside it,
    mentioning no one: with ``m.mentions`` present homeservers notify only whom it names;
    without it they read the text, and the model's "@room" (or a stranger's display name
    said back) notified the whole room wherever the bot has the power to. ``references``:
    the link definitions of the whole reply this is a part of (``[the docs][1]`` in one
    part, ``[1]: https://…`` in another lost the address until 2026-12-07; found by
    review)."""
    env = {"references": dict(references)} if references else {}
    html = _MARKDOWN.render(markdown, env).strip()
    content: Json = {"msgtype": msgtype, "body": markdown, "m.mentions": {}}
    # Plain text needs no HTML, and a part of link definitions alone renders none.
    if html and html != f"<p>{_escape(markdown)}</p>":
        content["format"] = _HTML
        content["formatted_body"] = html
    return content


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def parts(markdown: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    return [part for part in split_markdown(markdown, limit) if part.strip()]


def contents_of(
    markdown: str, limit: int = MESSAGE_LIMIT, references: dict[str, Any] | None = None
) -> list[Json]:
    """``markdown`` as messages' contents each within ``CONTENT_BUDGET``: a part whose HTML
    makes it too big is cut again (until 2026-12-06 a long table's reply was refused by
    the homeserver and lost); one that no cut brings within it goes as plain text.
    ``references``: the whole reply's link definitions (read here when not given)."""
    contents = []
    if references is None:
        references = link_definitions(markdown) or {}
    for part in parts(markdown, limit):
        content = content_of(part, references=references)
        if _size(content) <= CONTENT_BUDGET:
            contents.append(content)
        elif limit > _SMALLEST_CUT:
            contents.extend(contents_of(part, limit // 2, references))
        else:
            contents.append(
                {k: v for k, v in content.items() if k not in ("format", "formatted_body")}
            )
    return contents


#: Below this many characters a part is not cut again for its HTML's sake.
_SMALLEST_CUT = 500


def _size(content: Json) -> int:
    return len(json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode())


def fitted(content: Json, budget: int = CONTENT_BUDGET) -> Json:
    """``content`` within ``budget`` bytes: as it is, else plain text (its HTML may be many
    times its Markdown: a question's table of 4 KB was 233 KB, which the homeserver
    refused, and the card was never shown; found by review), else its body cut."""
    if _size(content) <= budget:
        return content
    plain = {k: v for k, v in content.items() if k not in ("format", "formatted_body")}
    if _size(plain) > budget:
        body = str(plain.get("body", "")).encode()
        keep = max(0, len(body) - (_size(plain) - budget) - _CUT_MARGIN)
        plain["body"] = body[:keep].decode(errors="ignore") + "…"
    return plain


def edit_of(content: Json, event_id: str) -> Json:
    """An ``m.replace`` of ``event_id`` by ``content``, within ``CONTENT_BUDGET``: the new
    content, and around it the fallback clients without edits show. The content is
    there twice, so a card of 6,000 characters of Chinese (18 KB of body and as much
    HTML) made an edit of 72 KB, which the homeserver refused: the card kept its choices
    after it was decided. Too big, the fallback is its body's beginning, plain; still too
    big, the new content is plain text; still, its body is cut."""
    new = {k: v for k, v in content.items() if k != "m.relates_to"}
    relates = {"rel_type": "m.replace", "event_id": event_id}
    edit = {
        **new,
        "body": f"* {new.get('body', '')}",
        "m.new_content": new,
        "m.relates_to": relates,
    }
    if _size(edit) <= CONTENT_BUDGET:
        return edit
    fallback = {k: v for k, v in new.items() if k not in ("format", "formatted_body")}
    fallback["body"] = f"* {new.get('body', '')[:_FALLBACK_CHARS]}…"
    around = {**fallback, "m.relates_to": relates}
    return {**around, "m.new_content": fitted(new, CONTENT_BUDGET - _size(around))}


#: Characters of an edit's fallback when the whole content twice would not fit.
_FALLBACK_CHARS = 1000
#: Bytes a cut body leaves to spare (the "…", and room under the limit).
_CUT_MARGIN = 256


def in_thread(content: Json, place: Place) -> Json:
    """``content`` as a message of ``place``'s thread (with the fallback older clients read)."""
    if place.thread is None:
        return content
    relates = {
        "rel_type": "m.thread",
        "event_id": place.thread,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": place.thread},
    }
    return {**content, "m.relates_to": relates}


def _event(content: Json, txn: str | None = None, *, plain_notice: bool = False) -> Json:
    payload: Json = {"type": "m.room.message", "content": content, "txn": txn or _txn()}
    if plain_notice:
        payload["plain_notice"] = True
    return payload


def _txn() -> str:
    return f"chathub.{uuid.uuid4().hex}"


@dataclass
class Rooms:
    """What the sync knows of the rooms: which are encrypted, which are direct."""

    encrypted: set[str] = field(default_factory=set)
    #: Joined members per room, as the sync's summaries say.
    members: dict[str, int] = field(default_factory=dict)


class SpeechFailed(MatrixRefused):
    """A voice reply that could not be spoken: its text goes instead (``fallback``)."""


class MatrixClient:
    """A recorded event, sent to its room, or spoken and sent as a voice message when it
    is a voice reply (``bot.delivery.PlatformClient``)."""

    name = MATRIX

    def __init__(self, nio: AsyncClient, rooms: Rooms, speak: Speak | None = None) -> None:
        """``speak``: text to OGG/Opus bytes (raising ``SpeechError``) for voice replies."""
        self.nio = nio
        self.rooms = rooms
        self.speak = speak

    def is_group(self, conversation: str) -> bool:
        return self.rooms.members.get(conversation, 3) > 2

    async def send(self, conversation: str, payload: Json) -> Json:
        if conversation in self.rooms.encrypted and not payload.get("plain_notice"):
            raise MatrixRefused("encrypted room: nothing is sent in plain text")
        if not self.nio.access_token:  # a password's login under way after a revoked token
            # (matrix-nio raised "Not logged in", and the reply was failed for good)
            raise MatrixUnavailable("signing in again")
        kind, content = payload.get("type") or "m.room.message", payload.get("content") or {}
        txn = payload.get("txn") or _txn()
        if payload.get(VOICE):
            content = await self._voice(str(payload[VOICE]), content)
        answer = await call(self.nio.room_send(conversation, kind, content, tx_id=txn))
        assert isinstance(answer, RoomSendResponse)
        return {"event_id": answer.event_id}

    def message_id(self, answer: Any) -> str | None:
        event_id = answer.get("event_id") if isinstance(answer, dict) else None
        return event_id if isinstance(event_id, str) else None

    def fallback(self, payload: Json, error: Refused) -> Json | None:
        """A voice reply not spoken (or refused): its text."""
        return text_instead(payload)

    async def _voice(self, said: str, text_content: Json) -> Json:
        """The voice message's content: ``said`` spoken, uploaded, in the text's thread."""
        audio = await audio_of(self.speak, said, SpeechFailed)
        # Through ``call``: a dropped connection is the homeserver away, retried (until
        # 2026-12-07 it escaped as a bug, and the reply was failed for good, neither voice
        # nor text; found by review).
        uploaded, _keys = await call(
            self.nio.upload(
                lambda *_: io.BytesIO(audio),
                content_type="audio/ogg",
                filename="reply.ogg",
                filesize=len(audio),
            )
        )
        url = check(uploaded).content_uri
        content: Json = {
            "msgtype": "m.audio",
            "body": "Voice message",
            "url": url,
            "info": {"mimetype": "audio/ogg", "size": len(audio)},
            "org.matrix.msc3245.voice": {},
            "org.matrix.msc1767.text": said,
            "m.mentions": {},
        }
        if "m.relates_to" in text_content:
            content["m.relates_to"] = text_content["m.relates_to"]
        return content


class MatrixSender(RowSender):
    """The outbox's sender (``OutboxSender``) and every other call the adapter makes."""

    def __init__(
        self,
        client: MatrixClient,
        outbound: Outbound,
        voice_mode: VoiceMode | None = None,
        *,
        txn_prefix: str = "chathub",
    ) -> None:
        """``voice_mode``: the rooms whose replies are spoken (``/voice on``);
        ``txn_prefix``: what this database's transaction ids begin with."""
        super().__init__(outbound, lambda source: parse_source(source).room_id, voice_mode)
        self.client = client
        self.nio = client.nio
        self.txn_prefix = txn_prefix

    # -- the outbox's sender ----------------------------------------------------------------

    def written(self, source: str, text: str) -> list[Json]:
        place = parse_source(source)
        return [in_thread(content, place) for content in contents_of(text)]

    def spoken(self, source: str, text: str) -> list[Json]:
        """Each voice reply carries its text content as the fallback (``_VOICE``)."""
        place = parse_source(source)
        return voice_payloads(text, lambda part: in_thread(content_of(part), place), _VOICE)

    def record(
        self, conn: Connection, source: str, key: str, prepared: list[Any]
    ) -> list[OutboxRow]:
        """Each part's transaction id is its row's key: the same PUT however often tried."""
        return super().record(conn, source, key, self._with_txns(key, prepared))

    async def send_durable(self, source: str, key: str, prepared: list[Any]) -> None:
        await super().send_durable(source, key, self._with_txns(key, prepared))

    async def say(self, source: str, text: str) -> None:
        await self.say_at(parse_source(source), text)

    def progress_text(self, lines: Sequence[str]) -> str:
        return last_lines(lines, 4000, 300)

    async def send_progress(self, source: str, text: str) -> MessageRef | None:
        place = parse_source(source)
        return await self.post(place, in_thread(_notice(text), place))

    async def edit_progress(self, source: str, ref: MessageRef, text: str) -> None:
        await self.replace(parse_source(source).room_id, str(ref), _notice(text))

    # -- what else is sent ------------------------------------------------------------------

    async def post(self, place: Place, content: Json) -> str | None:
        """Send ``content`` now (not recorded); its event id, or ``None`` when it failed
        (logged)."""
        try:
            return await self.post_now(place, content)
        except MatrixError as exc:
            log.warning("sending to %s failed: %s", place.room_id, exc.description)
            return None

    async def post_now(self, place: Place, content: Json, key: str | None = None) -> str | None:
        """``post``, its failure raised (``MatrixError``: a card is posted again after an
        outage, not lost). ``key``: the same transaction id every time it is posted (a
        first try that reached the homeserver, its answer lost, is not a second event)."""
        txn = key and f"{self.txn_prefix}.{key}"
        answer = await self.outbound.send(place.room_id, _event(content, txn))
        return self.client.message_id(answer)

    async def say_at(self, place: Place, markdown: str) -> None:
        """Markdown as one or more messages; a failure is logged, not raised."""
        for content in contents_of(markdown):
            if await self.post(place, in_thread(content, place)) is None:
                return

    async def notice_once(self, room_id: str, key: str, text: str) -> None:
        """A plain notice sent once ever under ``key`` (recorded first), even into an
        encrypted room: the one thing the bot says there."""
        payload = _event(_notice(text), f"{self.txn_prefix}.{key}", plain_notice=True)
        try:
            await self.outbound.deliver(room_id, key, payload)
        except MatrixError as exc:
            log.info("the notice %s in %s failed: %s", key, room_id, exc.description)

    async def replace(self, room_id: str, event_id: str, content: Json) -> None:
        """Edit a message of the bot's (``m.replace``); failures are logged."""
        if room_id in self.client.rooms.encrypted:
            return
        edit = edit_of(content, event_id)

        async def send() -> Any:
            return await self.client.send(room_id, _event(edit))

        try:
            await self.outbound.edit(room_id, event_id, send)
        except MatrixError as exc:
            log.warning("editing %s in %s failed: %s", event_id, room_id, exc.description)

    def _with_txns(self, key: str, prepared: list[Any]) -> list[Any]:
        events = []
        for index, content in enumerate(prepared):
            said = content.get(_VOICE) if isinstance(content, dict) else None
            text = {k: v for k, v in content.items() if k != _VOICE}
            event = _event(text, f"{self.txn_prefix}.{key}.{index}".replace(":", "."))
            if said:
                event[VOICE] = said
            events.append(event)
        return events

    async def replace_for_good(self, room_id: str, event_id: str, content: Json, key: str) -> None:
        """``replace``, recorded under ``key`` and sent as any reply is: an outage past
        its in-line tries postpones it, and it goes out once the homeserver is back (a
        card's closing edit was dropped then, and the decided card offered its choices
        for good: until 2026-12-07; found by review)."""
        if room_id in self.client.rooms.encrypted:
            return
        edit = _event(edit_of(content, event_id), f"{self.txn_prefix}.{key}")
        try:
            await self.outbound.deliver(room_id, key, edit)
        except MatrixError as exc:
            log.warning("editing %s in %s: %s; sent later", event_id, room_id, exc.description)

    async def typing(self, room_id: str, on: bool) -> None:
        """The typing notice (30 s at most, renewed by the activity); failures ignored."""
        if room_id in self.client.rooms.encrypted:
            return
        try:
            await self.outbound.call(
                room_id,
                lambda: call(self.nio.room_typing(room_id, typing_state=on, timeout=30000)),
                kind=OTHER,
            )
        except MatrixError as exc:
            log.debug("typing in %s failed: %s", room_id, exc.description)


def _notice(text: str) -> Json:
    return {"msgtype": "m.notice", "body": text, "m.mentions": {}}
