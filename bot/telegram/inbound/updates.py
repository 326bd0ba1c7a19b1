"""Bot API update JSON → what the adapter acts on.

This is the adapter's edge: every field is checked here, so nothing after it meets junk.
``parse_update`` never raises. A malformed optional field is dropped (named in
``dropped`` and logged, one line per update) and the rest of the message is handled;
strings are repaired (``clean_text``); an update with nothing usable is ``Ignored``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from bot.platform.commands import COMMAND
from bot.telegram.inbound.fields import Drops, as_int, as_number
from bot.telegram.inbound.media import MEDIA_FIELDS, FileRef, descriptions_of, files_of
from bot.telegram.sending.api import Json
from engine.text import clean_text

#: A message's Telegram id in its metadata (an edit of it finds it so while it waits; a
#: question in a group replies to it).
MESSAGE_ID_KEY = "telegram_message_id"

__all__ = [
    "MESSAGE_ID_KEY",
    "Callback",
    "ChatMove",
    "Ignored",
    "Incoming",
    "Message",
    "chat_key",
    "parse_source",
    "parse_update",
    "source_of",
]

log = logging.getLogger(__name__)

GROUP_TYPES = frozenset({"group", "supergroup"})
#: Messages Telegram writes about the chat itself (pins, members, topics, calls): nobody
#: said anything to the bot, so nothing is answered.
_SERVICE_KEYS = (
    "pinned_message",
    "new_chat_members",
    "left_chat_member",
    "new_chat_title",
    "new_chat_photo",
    "delete_chat_photo",
    "group_chat_created",
    "supergroup_chat_created",
    "channel_chat_created",
    "migrate_to_chat_id",
    "migrate_from_chat_id",
    "message_auto_delete_timer_changed",
    "write_access_allowed",
    "forum_topic_created",
    "forum_topic_edited",
    "forum_topic_closed",
    "forum_topic_reopened",
    "general_forum_topic_hidden",
    "general_forum_topic_unhidden",
    "video_chat_scheduled",
    "video_chat_started",
    "video_chat_ended",
    "video_chat_participants_invited",
    "chat_background_set",
    "boost_added",
    "proximity_alert_triggered",
    "giveaway_created",
    "giveaway_completed",
    "users_shared",
    "chat_shared",
)
CHAT_TYPES = frozenset({"private", "group", "supergroup", "channel"})
# Optional fields of an entity that the adapter (or a re-send) may read, with their type.
_ENTITY_STRINGS = ("url", "language", "custom_emoji_id")


@dataclass(frozen=True, slots=True)
class Message:
    update_id: int
    chat_id: int
    chat_type: str
    thread_id: int | None
    message_id: int
    user_id: int
    user_name: str
    text: str
    entities: tuple[Json, ...] = ()
    reply_to_message_id: int | None = None
    reply_to_user_id: int | None = None
    files: tuple[FileRef, ...] = ()
    location: tuple[float, float] | None = None
    #: Lines for the model about what else the message carries (a contact, a poll, ...).
    described: tuple[str, ...] = ()
    edited: bool = False
    #: Malformed fields left out, e.g. ``"message.entities (not a list)"``.
    dropped: tuple[str, ...] = ()
    #: The album it is part of (Telegram sends one message per photo or file of it).
    album: str | None = None
    #: The line that says it was forwarded, and from whom (``None``: the sender's own
    #: words). A forward is what someone else said: never a command of the sender's.
    forwarded: str | None = None
    #: The line that quotes what it replies to (the quoted part, else the replied
    #: message's text or caption), with its sender: ``None`` when it replies to nothing
    #: with words.
    replying_to: str | None = None
    #: The person quoted part of what they reply to (the part they mean: said even of the
    #: bot's own words).
    quoted: bool = False

    @property
    def is_group(self) -> bool:
        return self.chat_type in GROUP_TYPES

    @property
    def text_with_links(self) -> str:
        """The text as the model reads it: a hidden link's address after its words ("this
        article (https://…)"), unless the text says it already (until 2026-12-07 the
        model got the words alone; found by review)."""
        links = sorted(
            (e for e in self.entities if e["type"] == "text_link" and e.get("url")),
            key=lambda e: int(e["offset"]),
        )
        if not links:
            return self.text
        units = self.text.encode("utf-16-le")  # Telegram counts UTF-16 units
        parts, at = [], 0
        for link in links:
            end = (int(link["offset"]) + int(link["length"])) * 2
            if end < at or link["url"] in self.text.split():
                continue
            parts += [units[at:end].decode("utf-16-le", "replace"), f" ({link['url']})"]
            at = end
        return "".join(parts) + units[at:].decode("utf-16-le", "replace")

    @property
    def source(self) -> str:
        return source_of(self.chat_id, self.thread_id)

    @property
    def is_command(self) -> bool:
        """``/name[@bot]``, to this bot or another: no answer to a question."""
        return self.forwarded is None and COMMAND.match(self.text) is not None

    def command(self, bot_username: str | None) -> tuple[str, str] | None:
        """``(name, argument)`` for ``/name[@bot] argument`` addressed to this bot. A name
        is what Telegram marks as a command (letters, digits, ``_``) and ends at any space:
        ``/home/alice/project``, an answer to "Which directory?", was "Unknown command",
        and so was ``/search`` followed by a line break (found by review)."""
        match = COMMAND.match(self.text) if self.forwarded is None else None
        if match is None:
            return None
        name, target = match.group(1), match.group(2)
        if target and bot_username and target.lower() != bot_username.lower():
            return None
        return name.lower(), self.text[match.end() :].strip()

    @property
    def names_a_bot(self) -> bool:
        """Whether the command says whose it is (``/name@bot``)."""
        match = COMMAND.match(self.text)
        return match is not None and bool(match.group(2))


@dataclass(frozen=True, slots=True)
class Callback:
    update_id: int
    callback_id: str
    #: ``None`` when the query has no usable sender: it is answered, never acted on.
    user_id: int | None
    user_name: str
    data: str
    chat_id: int | None
    message_id: int | None
    thread_id: int | None = None
    dropped: tuple[str, ...] = ()

    @property
    def source(self) -> str | None:
        return None if self.chat_id is None else source_of(self.chat_id, self.thread_id)


@dataclass(frozen=True, slots=True)
class ChatMove:
    """Telegram made group ``old_chat_id`` supergroup ``new_chat_id`` (either chat's service
    message says so: ``bot/telegram/chat_moves.py``)."""

    update_id: int
    old_chat_id: int
    new_chat_id: int


@dataclass(frozen=True, slots=True)
class Ignored:
    update_id: int | None
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


Incoming = Message | Callback | ChatMove | Ignored


def source_of(chat_id: int, thread_id: int | None = None) -> str:
    return f"telegram:{chat_id}" if thread_id is None else f"telegram:{chat_id}:{thread_id}"


def parse_source(source: str) -> tuple[int, int | None]:
    """``(chat_id, thread_id)`` of a ``telegram:<chat_id>[:<thread_id>]`` source."""
    parts = source.split(":")
    return int(parts[1]), int(parts[2]) if len(parts) > 2 else None


def chat_key(update: Json) -> int:
    """The chat an update belongs to, before it is parsed (its lane); 0 when none."""
    for kind in ("message", "edited_message"):
        chat = (update.get(kind) or {}).get("chat") if isinstance(update.get(kind), dict) else None
        if isinstance(chat, dict) and isinstance(chat.get("id"), int):
            return chat["id"]
    query = update.get("callback_query")
    if isinstance(query, dict) and isinstance(query.get("message"), dict):
        chat = query["message"].get("chat")
        if isinstance(chat, dict) and isinstance(chat.get("id"), int):
            return chat["id"]
    return 0


def parse_update(update: object) -> Incoming:
    if not isinstance(update, dict):
        return Ignored(None, "not an update object")
    update_id = as_int(update.get("update_id"))
    if update_id is None:
        return Ignored(None, "not an update object with an integer update_id")
    incoming = _parse_kind(update_id, update)
    if isinstance(incoming, Message | Callback) and incoming.dropped:
        log.info("update %s: dropped malformed %s", update_id, "; ".join(incoming.dropped))
    return incoming


def _parse_kind(update_id: int, update: Json) -> Incoming:
    """The first kind present as an object; a callback query first, as it must be answered."""
    kinds = ("callback_query", "message", "edited_message")
    for kind in kinds:
        body = update.get(kind)
        if isinstance(body, dict):
            drops = Drops(kind)
            if kind == "callback_query":
                return _callback(update_id, body, drops)
            return _message(update_id, body, drops, edited=kind == "edited_message")
    present = [kind for kind in kinds if kind in update]
    if present:
        return Ignored(update_id, f"{present[0]} is not an object")
    others = sorted(clean_text(str(k)) for k in update if k != "update_id")  # for the log
    return Ignored(update_id, f"unhandled update kind {others}")


def _user(obj: Json, key: str, drops: Drops) -> tuple[int | None, str]:
    """The sender's id (``None`` when unusable) and a display name."""
    user = drops.object(obj, key)
    if user is None:
        return None, "?"
    at = drops.at(key)
    user_id = at.id(user, "id")
    if user.get("id") is None:
        at.drop("id", "missing")
    names = [at.text(user, "first_name"), at.text(user, "last_name")]
    username = at.text(user, "username")
    name = " ".join(n for n in names if n)
    return user_id, name or (f"@{username}" if username else str(user_id or "?"))


def _chat_type(chat: Json, chat_id: int, drops: Drops) -> str:
    """The chat's type; a malformed one is inferred from the id (groups are negative).

    Never "private" for a negative id: in a group the bot answers only when addressed.
    """
    kind = drops.text(chat, "type")
    if kind is not None and kind in CHAT_TYPES:
        return kind
    if kind is not None:
        drops.drop("type", "unknown chat type")
    return "private" if chat_id > 0 else "group"


def _message(update_id: int, message: Json, drops: Drops, *, edited: bool) -> Incoming:
    chat = drops.object(message, "chat")
    chat_id = None if chat is None else drops.at("chat").id(chat, "id")
    if chat is None or chat_id is None:
        return Ignored(update_id, "message without a chat id")
    if "migrate_to_chat_id" in message or "migrate_from_chat_id" in message:
        return _chat_move(update_id, message, chat_id, drops)
    user_id, user_name = _user(message, "from", drops)
    if user_id is None:
        return Ignored(update_id, "message without a sender (channel post or anonymous admin)")
    message_id = drops.id(message, "message_id")
    if message_id is None:
        return Ignored(update_id, "message without a message_id")
    service = next((key for key in _SERVICE_KEYS if key in message), None)
    if service is not None and "text" not in message and "caption" not in message:
        return Ignored(update_id, f"service message ({service})")
    text, entities = _text_and_entities(message, drops)
    thread_id = _thread_id(message, drops)
    reply_id, reply_user = _reply(message, drops, thread_id)
    replying_to = _replying_to(message, drops) if reply_id is not None else None
    if replying_to is None and "external_reply" in message:  # "Reply in another chat"
        replying_to = _replying_elsewhere(message, drops)
    media = not MEDIA_FIELDS.isdisjoint(message)  # most are text: no file to look for
    return Message(
        update_id=update_id,
        chat_id=chat_id,
        chat_type=_chat_type(chat, chat_id, drops.at("chat")),
        thread_id=thread_id,
        message_id=message_id,
        user_id=user_id,
        user_name=user_name,
        text=text,
        entities=entities,
        reply_to_message_id=reply_id,
        reply_to_user_id=reply_user,
        replying_to=replying_to,
        quoted=_quote_of(message) is not None,
        files=files_of(message, drops) if media else (),
        # A venue carries its location; its description names the point already.
        location=None if isinstance(message.get("venue"), dict) else _location(message, drops),
        described=descriptions_of(message, drops) if media else (),
        edited=edited,
        dropped=tuple(drops.dropped),
        album=drops.text(message, "media_group_id") if media else None,
        forwarded=_forwarded(message, drops) if _FORWARD_KEYS & message.keys() else None,
    )


def _chat_move(update_id: int, message: Json, chat_id: int, drops: Drops) -> Incoming:
    """The old group's ``migrate_to_chat_id`` or the new supergroup's first message,
    ``migrate_from_chat_id`` (sent by whoever moved it, or by nobody)."""
    moved_to = drops.id(message, "migrate_to_chat_id")
    if moved_to is not None:
        return ChatMove(update_id, chat_id, moved_to)
    moved_from = drops.id(message, "migrate_from_chat_id")
    if moved_from is not None:
        return ChatMove(update_id, moved_from, chat_id)
    return Ignored(update_id, "chat move without an integer chat id")


#: What marks a forward (Bot API 7's origin; the fields before it).
_FORWARD_KEYS = frozenset({"forward_origin", "forward_date"})
FORWARDED = "[Forwarded message]"
_MAX_ORIGIN = 100


def _forwarded(message: Json, drops: Drops) -> str:
    """``[Forwarded message from <who>]``: the model reads a forward as what someone else
    said, not as the sender's words (until 2026-12-07 a forwarded "please delete X" was
    the sender's own instruction to it, and a forwarded "/new" their command; found by
    review)."""
    who = _origin(drops.object(message, "forward_origin") or {}, drops.at("forward_origin"))
    if who is None:
        return FORWARDED
    return f"{FORWARDED[:-1]} from {who}]"


def _origin(origin: Json, at: Drops) -> str | None:
    """Who a ``MessageOrigin`` names (a person, a hidden one's name, a chat's title)."""
    who: str | None = None
    match origin.get("type"):
        case "user":
            _id, who = _user(origin, "sender_user", at)
        case "hidden_user":
            who = at.text(origin, "sender_user_name")
        case "chat" | "channel" as kind:
            chat = at.object(origin, "sender_chat" if kind == "chat" else "chat") or {}
            who = at.text(chat, "title")
    if who is None or not who.strip() or who == "?":
        return None
    return who.strip()[:_MAX_ORIGIN]


def _text_and_entities(message: Json, drops: Drops) -> tuple[str, tuple[Json, ...]]:
    """The text and its entities, or else the caption and the caption's entities."""
    text = drops.text(message, "text")
    if text is not None:
        return text, _entities(text, drops.array(message, "entities"), drops, "entities")
    caption = drops.text(message, "caption")
    if caption is not None:
        raw = drops.array(message, "caption_entities")
        return caption, _entities(caption, raw, drops, "caption_entities")
    return "", ()


def _entities(text: str, raw: list[Any], drops: Drops, key: str) -> tuple[Json, ...]:
    """Entities that lie inside ``text``, with only the fields we read, each type-checked."""
    size = len(text.encode("utf-16-le")) // 2  # Telegram counts UTF-16 units
    kept: list[Json] = []
    for index, entity in enumerate(raw):
        clean = _entity(entity, size)
        if clean is None:
            drops.drop(f"{key}[{index}]", "not an entity inside the text")
        else:
            kept.append(clean)
    return tuple(kept)


def _entity(entity: Any, text_size: int) -> Json | None:
    if not isinstance(entity, dict) or not isinstance(entity.get("type"), str):
        return None
    offset, length = as_int(entity.get("offset")), as_int(entity.get("length"))
    if offset is None or length is None or offset < 0 or length <= 0:
        return None
    if offset + length > text_size:
        return None
    clean: Json = {"type": clean_text(entity["type"]), "offset": offset, "length": length}
    user = entity.get("user")
    if isinstance(user, dict) and as_int(user.get("id")) is not None:
        clean["user"] = {"id": user["id"]}
    for key in _ENTITY_STRINGS:
        if isinstance(entity.get(key), str):
            clean[key] = clean_text(entity[key])
    return clean


def _reply(message: Json, drops: Drops, thread_id: int | None) -> tuple[int | None, int | None]:
    """The replied-to message's id and its sender's id (either may be ``None``).

    Telegram marks every message in a forum topic as a reply to the topic's creation
    message: that is where the message was written, not whom it answers (when the bot
    created the topic it would read as a reply to the bot). It is not a reply.
    """
    reply = drops.object(message, "reply_to_message")
    if reply is None:
        return None, None
    at = drops.at("reply_to_message")
    reply_id = at.id(reply, "message_id")
    if "forum_topic_created" in reply or (thread_id is not None and reply_id == thread_id):
        return None, None
    sender = at.object(reply, "from")
    return reply_id, None if sender is None else at.at("from").id(sender, "id")


#: The most of a replied message the model reads with the reply.
REPLIED_CHARS = 500


def _replying_to(message: Json, drops: Drops) -> str | None:
    """``[In reply to Bob: "…"]``: what a reply is about. "@bot translate this" as a reply
    to Bob's French message reached the model as that line alone (until 2026-12-07; found
    by review). The part the person quoted, else the message's text or caption."""
    reply = drops.object(message, "reply_to_message")
    if reply is None:
        return None
    words = _quote_of(message)
    if words is None:
        words = reply.get("text") if isinstance(reply.get("text"), str) else reply.get("caption")
    name = _author(reply, drops.at("reply_to_message"))
    if not isinstance(words, str) or not words.strip():
        # A photo, a voice note without words: the model knew nothing was meant (until
        # 2026-12-07; found by review). Its file is not fetched: it is said what it is.
        kind = _media_kind(reply)
        return None if kind is None else f"[In reply to {name}'s {kind}]"
    return f'[In reply to {name}: "{_clipped(words)}"]'


def _author(message: Json, at: Drops) -> str:
    """Who wrote ``message``: the chat it was sent on behalf of (``sender_chat``: a
    channel's post forwarded to its discussion group, an anonymous admin's words), by its
    title, else its sender. Until 2026-12-07 the model read Telegram's placeholder sender
    ("Telegram", "Group") as the author (found by review)."""
    chat = at.object(message, "sender_chat")
    title = None if chat is None else at.at("sender_chat").text(chat, "title")
    if title is not None and title.strip():
        return title.strip()[:_MAX_ORIGIN]
    return _user(message, "from", at)[1]


def _replying_elsewhere(message: Json, drops: Drops) -> str | None:
    """``[In reply to <who> (another chat): "…"]``: "Reply in another chat" sends the part
    quoted and where it is from, no ``reply_to_message`` (until 2026-12-07 the model read
    "what does this mean?" alone; found by review)."""
    external = drops.object(message, "external_reply")
    if external is None:
        return None
    at = drops.at("external_reply")
    who = _origin(at.object(external, "origin") or {}, at.at("origin")) or "someone"
    words = _quote_of(message)
    if words is not None:
        return f'[In reply to {who}, in another chat: "{_clipped(words)}"]'
    kind = _media_kind(external)
    return f"[In reply to {who}'s {kind or 'message'}, in another chat]"


def _quote_of(message: Json) -> str | None:
    """The part of the replied message the person quoted, if they did."""
    quote = message.get("quote")
    words = quote.get("text") if isinstance(quote, dict) else None
    return words if isinstance(words, str) and words.strip() else None


def _clipped(words: str) -> str:
    words = clean_text(words.strip())
    return words[:REPLIED_CHARS] + "…" if len(words) > REPLIED_CHARS else words


def _media_kind(message: Json) -> str | None:
    """What a message without words is (``photo``, ``voice note``), if it is media."""
    for key in _REPLIED_KINDS:
        if key in message:
            return _REPLIED_KINDS[key]
    return None


#: The kinds a replied message without words is named by.
_REPLIED_KINDS = {
    "photo": "photo",
    "video": "video",
    "voice": "voice note",
    "video_note": "video message",
    "audio": "audio file",
    "document": "file",
    "animation": "animation",
    "sticker": "sticker",
}


def _thread_id(message: Json, drops: Drops) -> int | None:
    """The forum topic: ``message_thread_id`` counts only in a topic message."""
    if not drops.flag(message, "is_topic_message"):
        return None
    return drops.id(message, "message_thread_id")


def _location(message: Json, drops: Drops) -> tuple[float, float] | None:
    loc = drops.object(message, "location")
    if loc is None:
        return None
    lat, lon = as_number(loc.get("latitude")), as_number(loc.get("longitude"))
    if lat is None or lon is None or abs(lat) > 90 or abs(lon) > 180:
        drops.drop("location", "not a latitude and longitude")
        return None
    return lat, lon


def _callback(update_id: int, query: Json, drops: Drops) -> Incoming:
    callback_id = query.get("id")
    if not isinstance(callback_id, str) or not callback_id:
        # Nothing to answer it with: the one callback that cannot get its answer.
        return Ignored(update_id, "callback query without an id")
    if query.get("from") is None:
        drops.drop("from", "missing")
    user_id, user_name = _user(query, "from", drops)
    message = drops.object(query, "message") or {}
    at = drops.at("message")
    chat = at.object(message, "chat") or {}
    data = drops.text(query, "data")
    return Callback(
        update_id=update_id,
        callback_id=clean_text(callback_id),
        user_id=user_id,
        user_name=user_name,
        data=data or "",
        chat_id=at.at("chat").id(chat, "id"),
        message_id=at.id(message, "message_id"),
        thread_id=_thread_id(message, at),
        dropped=tuple(drops.dropped),
    )
