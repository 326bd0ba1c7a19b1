"""Bot API update JSON → what the adapter acts on. Anything malformed becomes ``Ignored``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.telegram.api import Json

__all__ = ["Callback", "FileRef", "Ignored", "Incoming", "Message", "parse_update", "source_of"]

GROUP_TYPES = frozenset({"group", "supergroup"})


@dataclass(frozen=True, slots=True)
class FileRef:
    file_id: str
    unique_id: str
    name: str
    mime_type: str | None
    size: int | None


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
    edited: bool = False

    @property
    def is_group(self) -> bool:
        return self.chat_type in GROUP_TYPES

    @property
    def source(self) -> str:
        return source_of(self.chat_id, self.thread_id)

    def command(self, bot_username: str | None) -> tuple[str, str] | None:
        """``(name, argument)`` for ``/name[@bot] argument`` addressed to this bot."""
        if not self.text.startswith("/"):
            return None
        head, _, rest = self.text.partition(" ")
        name, _, target = head[1:].partition("@")
        if not name or (target and bot_username and target.lower() != bot_username.lower()):
            return None
        return name.lower(), rest.strip()


@dataclass(frozen=True, slots=True)
class Callback:
    update_id: int
    callback_id: str
    user_id: int
    user_name: str
    data: str
    chat_id: int | None
    message_id: int | None
    thread_id: int | None = None

    @property
    def source(self) -> str | None:
        return None if self.chat_id is None else source_of(self.chat_id, self.thread_id)


@dataclass(frozen=True, slots=True)
class Ignored:
    update_id: int | None
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


Incoming = Message | Callback | Ignored


def source_of(chat_id: int, thread_id: int | None = None) -> str:
    return f"telegram:{chat_id}" if thread_id is None else f"telegram:{chat_id}:{thread_id}"


def parse_update(update: Any) -> Incoming:
    if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
        return Ignored(None, "not an update object with an integer update_id")
    update_id: int = update["update_id"]
    if isinstance(update.get("message"), dict):
        return _message(update_id, update["message"], edited=False)
    if isinstance(update.get("edited_message"), dict):
        return _message(update_id, update["edited_message"], edited=True)
    if isinstance(update.get("callback_query"), dict):
        return _callback(update_id, update["callback_query"])
    kinds = sorted(k for k in update if k != "update_id")
    return Ignored(update_id, f"unhandled update kind {kinds}")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _name(user: Json) -> str:
    parts = [user.get("first_name"), user.get("last_name")]
    name = " ".join(p for p in parts if isinstance(p, str) and p)
    username = user.get("username")
    return name or (f"@{username}" if isinstance(username, str) else str(user.get("id", "?")))


def _message(update_id: int, message: Json, *, edited: bool) -> Incoming:
    chat = message.get("chat")
    user = message.get("from")
    if not isinstance(chat, dict) or _int(chat.get("id")) is None:
        return Ignored(update_id, "message without a chat id")
    if not isinstance(user, dict) or _int(user.get("id")) is None:
        return Ignored(update_id, "message without a sender (channel post or anonymous admin)")
    message_id = _int(message.get("message_id"))
    if message_id is None:
        return Ignored(update_id, "message without a message_id")
    text = message.get("text")
    entities = message.get("entities")
    if not isinstance(text, str):
        text = message.get("caption") if isinstance(message.get("caption"), str) else ""
        entities = message.get("caption_entities")
    reply = message.get("reply_to_message")
    reply_id = reply_user = None
    if isinstance(reply, dict):
        reply_id = _int(reply.get("message_id"))
        if isinstance(reply.get("from"), dict):
            reply_user = _int(reply["from"].get("id"))
    thread_id = _int(message.get("message_thread_id")) if message.get("is_topic_message") else None
    location = None
    loc = message.get("location")
    if isinstance(loc, dict):
        lat, lon = loc.get("latitude"), loc.get("longitude")
        if isinstance(lat, int | float) and isinstance(lon, int | float):
            location = (float(lat), float(lon))
    return Message(
        update_id=update_id,
        chat_id=chat["id"],
        chat_type=str(chat.get("type") or "private"),
        thread_id=thread_id,
        message_id=message_id,
        user_id=user["id"],
        user_name=_name(user),
        text=text,
        entities=tuple(e for e in (entities or ()) if isinstance(e, dict)),
        reply_to_message_id=reply_id,
        reply_to_user_id=reply_user,
        files=_files(message),
        location=location,
        edited=edited,
    )


def _files(message: Json) -> tuple[FileRef, ...]:
    files = []
    photos = message.get("photo")
    if isinstance(photos, list) and photos:
        sizes = [p for p in photos if isinstance(p, dict) and isinstance(p.get("file_id"), str)]
        if sizes:
            best = max(
                sizes,
                key=lambda p: (
                    (_int(p.get("width")) or 0) * (_int(p.get("height")) or 0),
                    _int(p.get("file_size")) or 0,
                ),
            )
            unique = str(best.get("file_unique_id") or best["file_id"])
            files.append(
                FileRef(
                    best["file_id"],
                    unique,
                    f"photo_{unique}.jpg",
                    "image/jpeg",
                    _int(best.get("file_size")),
                )
            )
    document = message.get("document")
    if isinstance(document, dict) and isinstance(document.get("file_id"), str):
        unique = str(document.get("file_unique_id") or document["file_id"])
        name = document.get("file_name") if isinstance(document.get("file_name"), str) else unique
        files.append(
            FileRef(
                document["file_id"],
                unique,
                name,
                document.get("mime_type") if isinstance(document.get("mime_type"), str) else None,
                _int(document.get("file_size")),
            )
        )
    return tuple(files)


def _callback(update_id: int, query: Json) -> Incoming:
    user = query.get("from")
    if (
        not isinstance(query.get("id"), str)
        or not isinstance(user, dict)
        or _int(user.get("id")) is None
    ):
        return Ignored(update_id, "callback query without an id or a sender")
    message = query.get("message") if isinstance(query.get("message"), dict) else {}
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    thread_id = _int(message.get("message_thread_id")) if message.get("is_topic_message") else None
    data = query.get("data")
    return Callback(
        update_id=update_id,
        callback_id=query["id"],
        user_id=user["id"],
        user_name=_name(user),
        data=data if isinstance(data, str) else "",
        chat_id=_int(chat.get("id")),
        message_id=_int(message.get("message_id")),
        thread_id=thread_id,
    )
