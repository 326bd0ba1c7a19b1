"""What the bot takes from a Matrix sync, and the sources it belongs to.

``Incoming`` is parsed once from a timeline event (a person's message, a reaction) or an
invite, and stored as JSON in the delivery layer's events (``platform_events``) under the
event's id: Synapse answering a sync twice, or a sync after a restart repeating what was
handled, gives the same key, so an event reaches the hub once.

Sources: a room is ``matrix:<room>``; a thread is ``matrix:<room>:<thread root>``, each
id written without its sigil and with its colons as ``@`` (which a room or event id never
holds): ``!abc:example.org`` is ``matrix:abc@example.org``. An id with a character a hub
source cannot hold (a ``/`` of an old room version's event id) is no source: such a room
is not answered, such a thread is answered as its room.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "MATRIX",
    "PREFIX",
    "Incoming",
    "Place",
    "is_event_id",
    "is_room_id",
    "parse_source",
    "source_of",
    "writable",
]

#: Matrix's name in the delivery layer's tables.
MATRIX = "matrix"
PREFIX = "matrix:"

Json = dict[str, Any]
Kind = Literal["message", "edit", "reaction", "invite", "encrypted", "upgrade"]

_ROOM = re.compile(r"^![^:\s$]{1,255}(?::[^\s$]{1,255})?$")
_EVENT = re.compile(r"^\$[^\s]{1,254}$")  # 255 in all: the events table's key
_WRITABLE = re.compile(r"^[!$][A-Za-z0-9_.+\-:]{1,120}$")
_USER = re.compile(r"^@[^:\s]{1,255}:[^\s]{1,255}$")
#: What a person writes; ``m.notice`` is what bots write, and is never answered.
_TEXT_TYPES = frozenset({"m.text", "m.emote"})
_FILE_TYPES = frozenset({"m.file", "m.image", "m.audio", "m.video"})


def source_of(room_id: str, thread: str | None = None) -> str:
    room = f"{PREFIX}{_written(room_id)}"
    return room if thread is None else f"{room}:{_written(thread)}"


def _written(matrix_id: str) -> str:
    return matrix_id[1:].replace(":", "@")


def _read(sigil: str, written: str) -> str:
    return sigil + written.replace("@", ":")


def writable(matrix_id: str) -> bool:
    """Whether the id can be part of a source (see the module's note)."""
    return bool(_WRITABLE.match(matrix_id))


def is_room_id(value: object) -> bool:
    return isinstance(value, str) and bool(_ROOM.match(value))


def is_event_id(value: object) -> bool:
    return isinstance(value, str) and bool(_EVENT.match(value))


def is_user_id(value: object) -> bool:
    return isinstance(value, str) and bool(_USER.match(value))


@dataclass(frozen=True, slots=True)
class Place:
    """Where a source's messages go: a room, in a thread or not."""

    room_id: str
    thread: str | None = None


def parse_source(source: str) -> Place:
    """The place of a Matrix source; a ValueError for anything else."""
    parts = source.removeprefix(PREFIX).split(":") if source.startswith(PREFIX) else []
    if len(parts) not in (1, 2) or not all(parts):
        raise ValueError(f"not a Matrix source: {source!r}")
    room = _read("!", parts[0])
    thread = _read("$", parts[1]) if len(parts) == 2 else None
    if not is_room_id(room) or (thread is not None and not is_event_id(thread)):
        raise ValueError(f"not a Matrix source: {source!r}")
    return Place(room, thread)


@dataclass(frozen=True, slots=True)
class Incoming:
    """An event for the bot, as stored and handed to its room's lane."""

    kind: Kind
    room_id: str
    event_id: str
    sender: str
    #: A message's text (its reply fallback removed); a reaction's key; an upgrade's new
    #: room.
    text: str = ""
    #: The thread it is in (its root's event id).
    thread: str | None = None
    #: The event it replies to (``m.in_reply_to``, not a thread's fallback) or reacts to.
    relates_to: str | None = None
    #: ``m.mentions.user_ids`` when the event has ``m.mentions`` (``None``: it has none).
    mentions: tuple[str, ...] | None = None
    #: The message's HTML (pills name who it mentions).
    html: str = ""
    files: int = 0
    #: An ``m.audio`` message's file: ``url`` (mxc), ``mime``, ``size``, ``seconds``,
    #: ``name``, ``voice`` (recorded as a voice message, MSC3245).
    audio: dict[str, Any] | None = None
    #: The room's joined members when it was sent, as its sync batch showed them
    #: (``None``: not known, asked when needed). Not stored: only whether it is for the
    #: bot, asked before it is stored, reads it.
    members: int | None = None

    @property
    def key(self) -> str:
        return self.event_id

    @property
    def lane(self) -> str:
        """Everything of a room keeps its order (a reaction after the card it decides)."""
        return self.room_id

    @property
    def source(self) -> str:
        return source_of(self.room_id, self.thread)

    @property
    def place(self) -> Place:
        return Place(self.room_id, self.thread)

    def mentions_user(self, user_id: str, display_name: str | None) -> bool:
        """``m.mentions`` when the event has it (the spec's intentional mentions); else a
        pill to the user, its id or its display name in the text."""
        if self.mentions is not None:
            return user_id in self.mentions
        if f"matrix.to/#/{user_id}" in self.html or user_id in self.text:
            return True
        return bool(display_name) and _named(display_name).search(self.text) is not None

    def text_to(self, display_name: str | None) -> str:
        """The text without the bot's name it begins with ("Max: hi", "max, hi"); a word
        that only begins like it ("Maximum of 3?") is left whole."""
        if not display_name:
            return self.text
        named = _named(display_name).match(self.text)
        return self.text if named is None else self.text[named.end() :].lstrip(":, ").strip()

    @classmethod
    def of(cls, event: Json, room_id: str, me: str) -> Incoming | None:
        """The message, edit or reaction a person sent (``None``: the bot's own, a
        notice, state, a redacted or malformed event)."""
        sender, event_id, kind = event.get("sender"), event.get("event_id"), event.get("type")
        if not is_user_id(sender) or sender == me or not is_event_id(event_id):
            return None
        if not writable(room_id):
            return None
        content = event.get("content")
        if not isinstance(content, dict) or not content:
            return None  # redacted
        relates = content.get("m.relates_to")
        relates = relates if isinstance(relates, dict) else {}
        if kind == "m.room.encrypted":
            return cls("encrypted", room_id, event_id, sender)
        if kind == "m.room.tombstone" and event.get("state_key") == "":
            new_room = content.get("replacement_room")
            if not is_room_id(new_room) or not writable(new_room):
                return None
            return cls("upgrade", room_id, event_id, sender, text=new_room)
        if kind == "m.reaction":
            target, key = relates.get("event_id"), relates.get("key")
            if relates.get("rel_type") != "m.annotation" or not is_event_id(target):
                return None
            if not isinstance(key, str) or not key or len(key) > 64:
                return None
            return cls("reaction", room_id, event_id, sender, text=key, relates_to=target)
        if kind != "m.room.message":
            return None
        return _message(event_id, room_id, sender, content, relates)

    @classmethod
    def invite(cls, room_id: str, sender: str, event_id: str | None, batch: str = "") -> Incoming:
        """``batch``: the sync that brought it, for an invite whose state has no event id
        (Synapse's): a second invite to the same room by the same person, after a kick or
        a pairing, was stored under the first's key and never acted on until 2026-12-06
        (found by review)."""
        if is_event_id(event_id):
            assert event_id is not None
            return cls("invite", room_id, event_id, sender)
        # Hashed: a user id may be 255 characters, and the key as written outgrew its
        # column on PostgreSQL: the insert failed and the sync took the batch again
        # forever (found by review on 2026-12-06).
        said = f"{room_id}\0{sender}\0{batch}".encode()
        return cls("invite", room_id, f"invite:{hashlib.sha256(said).hexdigest()}", sender)

    def to_json(self) -> Json:
        data = {k: getattr(self, k) for k in self.__slots__ if k != "members"}
        data["mentions"] = list(self.mentions) if self.mentions is not None else None
        return data

    @classmethod
    def from_json(cls, data: Json) -> Incoming:
        data = dict(data)
        mentions = data.get("mentions")
        data["mentions"] = tuple(mentions) if mentions is not None else None
        return cls(**data)


def _edit(
    event_id: str, room_id: str, sender: str, content: Json, relates: Json
) -> Incoming | None:
    """An edit (``m.replace``) of a text message: its new words, for the message if it
    still waits for its turn (one read already keeps its answer)."""
    target, new = relates.get("event_id"), content.get("m.new_content")
    if not is_event_id(target) or not isinstance(new, dict):
        return None
    body = new.get("body")
    if not isinstance(body, str) or new.get("msgtype") not in _TEXT_TYPES:
        return None
    return Incoming("edit", room_id, event_id, sender, text=body, relates_to=target)


def _message(
    event_id: str, room_id: str, sender: str, content: Json, relates: Json
) -> Incoming | None:
    msgtype, body = content.get("msgtype"), content.get("body")
    if relates.get("rel_type") == "m.replace":
        return _edit(event_id, room_id, sender, content, relates)
    if not isinstance(body, str) or not isinstance(msgtype, str):
        return None
    files = 1 if msgtype in _FILE_TYPES else 0
    if msgtype not in _TEXT_TYPES and not files:
        return None
    thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
    if thread is not None and not is_event_id(thread):
        return None
    if thread is not None and not writable(thread):
        thread = None  # an old room version's id: answered in the room
    reply = relates.get("m.in_reply_to")
    reply_to = reply.get("event_id") if isinstance(reply, dict) else None
    if relates.get("is_falling_back") or not is_event_id(reply_to):
        reply_to = None  # a thread's fallback reply is not a reply
    mentions = content.get("m.mentions")
    mentioned = None
    if isinstance(mentions, dict):
        ids = mentions.get("user_ids")
        mentioned = tuple(i for i in ids if isinstance(i, str)) if isinstance(ids, list) else ()
    html = (
        content.get("formatted_body") if content.get("format") == "org.matrix.custom.html" else ""
    )
    # A file's body is its name, unless ``filename`` names it: then the body is its
    # caption (MSC2530, as Element X sends it), which until 2026-12-07 was dropped, and
    # the model heard "translate this" as the transcript alone (found by review).
    filename = content.get("filename")
    captioned = isinstance(filename, str) and filename != body
    # Only a reply carries the quoted fallback: a message that quotes is taken whole.
    if files and not captioned:
        text = ""
    else:
        text = _without_fallback(body) if isinstance(reply, dict) else body
    return Incoming(
        "message",
        room_id,
        event_id,
        sender,
        text=text,
        thread=thread,
        relates_to=reply_to,
        mentions=mentioned,
        html=html if isinstance(html, str) else "",
        files=files,
        audio=_audio(content, body) if msgtype == "m.audio" else None,
    )


def _audio(content: Json, body: str) -> Json | None:
    """What an ``m.audio`` message's file is, or ``None`` when it names none usable."""
    url = content.get("url")
    if not isinstance(url, str) or not url.startswith("mxc://") or len(url) > 500:
        return None
    info = content.get("info") if isinstance(content.get("info"), dict) else {}
    size, duration = info.get("size"), info.get("duration")
    mime = info.get("mimetype")
    name = content.get("filename") if isinstance(content.get("filename"), str) else body
    return {
        "url": url,
        "mime": mime if isinstance(mime, str) and mime.startswith("audio/") else "audio/ogg",
        "size": size if isinstance(size, int) and not isinstance(size, bool) else None,
        "seconds": duration // 1000 if isinstance(duration, int) and duration >= 0 else None,
        "name": (name or "voice.ogg")[:100],
        "voice": "org.matrix.msc3245.voice" in content,
    }


def _named(display_name: str) -> re.Pattern[str]:
    """The display name as a word of its own (not "Max" in "Maximum")."""
    return re.compile(rf"(?<!\w){re.escape(display_name)}(?!\w)", re.IGNORECASE)


def _without_fallback(body: str) -> str:
    """A reply's body without the quoted lines (``> ``) older clients put first."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> <"):
        return body
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).strip()
