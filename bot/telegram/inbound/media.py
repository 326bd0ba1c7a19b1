"""What a message carries besides its text: files to download and things to describe.

Every kind a person can send gets something the model can use: photos, documents, audio,
voice notes, video, video notes and animations are files (downloaded within the size
limit and shown to the model in the attachments block, with duration and type; voice
notes, audio and video notes are transcribed, ``bot/platform/voice_notes.py``); a
contact, venue, poll, dice, sticker, game, invoice or payment becomes a short line of
text. Fields are read through ``Drops``, so a malformed part is dropped and named, never
raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.telegram.inbound.fields import Drops, as_int, as_number, file_id_of, size_of, unique_id_of
from bot.telegram.sending.api import Json

__all__ = ["MEDIA_FIELDS", "FileRef", "descriptions_of", "files_of"]

_MAX_LINE = 300  # a described field longer than this is cut (poll options, titles)
_MAX_POLL_OPTIONS = 12


@dataclass(frozen=True, slots=True)
class FileRef:
    file_id: str
    unique_id: str
    name: str
    mime_type: str | None
    size: int | None
    kind: str = "document"
    duration: int | None = None  # seconds, for audio and video


# -- files ---------------------------------------------------------------------------------

#: kind → (default mime type, extension when the message names no file).
_MEDIA = {
    "audio": ("audio/mpeg", "mp3"),
    "voice": ("audio/ogg", "ogg"),
    "video": ("video/mp4", "mp4"),
    "video_note": ("video/mp4", "mp4"),
    "animation": ("video/mp4", "mp4"),
}


def files_of(message: Json, drops: Drops) -> tuple[FileRef, ...]:
    """The files of a message, at most one per kind (the largest size of a photo)."""
    found = [_photo(message, drops)]
    for kind in _MEDIA:
        found.append(_media(message, kind, drops))
    # An animation also arrives as ``document`` (for old clients): the same file once.
    if "animation" not in message or found[-1] is None:
        found.append(_document(message, drops))
    return tuple(f for f in found if f is not None)


def _photo(message: Json, drops: Drops) -> FileRef | None:
    raw = drops.array(message, "photo")
    sizes = [p for p in raw if file_id_of(p) is not None]
    if not sizes:
        if raw:
            drops.drop("photo", "no size with a file_id")
        return None

    def area(p: Json) -> tuple[int, int]:
        width, height = as_int(p.get("width")) or 0, as_int(p.get("height")) or 0
        return width * height, size_of(p) or 0

    best = max(sizes, key=area)
    file_id = file_id_of(best)
    assert file_id is not None  # filtered above
    unique = unique_id_of(best, file_id)
    return FileRef(file_id, unique, f"photo_{unique}.jpg", "image/jpeg", size_of(best), "photo")


def _document(message: Json, drops: Drops) -> FileRef | None:
    document = drops.object(message, "document")
    if document is None:
        return None
    file_id = file_id_of(document)
    if file_id is None:
        drops.drop("document", "no file_id")
        return None
    unique = unique_id_of(document, file_id)
    at = drops.at("document")
    name = at.text(document, "file_name") or unique
    return FileRef(file_id, unique, name, at.text(document, "mime_type"), size_of(document))


def _media(message: Json, kind: str, drops: Drops) -> FileRef | None:
    body = drops.object(message, kind)
    if body is None:
        return None
    file_id = file_id_of(body)
    if file_id is None:
        drops.drop(kind, "no file_id")
        return None
    unique = unique_id_of(body, file_id)
    at = drops.at(kind)
    mime, extension = _MEDIA[kind]
    name = at.text(body, "file_name") or f"{kind}_{unique}.{extension}"
    duration = as_int(body.get("duration"))
    return FileRef(
        file_id,
        unique,
        name,
        at.text(body, "mime_type") or mime,
        size_of(body),
        kind,
        duration if duration is not None and duration >= 0 else None,
    )


# -- described kinds -------------------------------------------------------------------------


def descriptions_of(message: Json, drops: Drops) -> tuple[str, ...]:
    """One line (or a few) for each non-file kind the message carries, for the model."""
    lines = []
    for key, describe in _DESCRIBERS:
        body = drops.object(message, key)
        if body is None:
            continue
        line = describe(body, drops.at(key))
        if line is None:
            drops.drop(key, "nothing usable in it")
        else:
            lines.append(line)
    return tuple(lines)


def _contact(body: Json, at: Drops) -> str | None:
    phone = at.text(body, "phone_number")
    names = [at.text(body, "first_name"), at.text(body, "last_name")]
    name = " ".join(_cut(n) for n in names if n)
    if not phone and not name:
        return None
    parts = [p for p in (name, f"phone {_cut(phone)}" if phone else None) if p]
    user_id = at.id(body, "user_id")
    if user_id is not None:
        parts.append(f"Telegram user {user_id}")
    return "📇 Contact: " + ", ".join(parts)


def _venue(body: Json, at: Drops) -> str | None:
    title, address = at.text(body, "title"), at.text(body, "address")
    if not title and not address:
        return None
    where = ", ".join(_cut(p) for p in (title, address) if p)
    point = _point(at.object(body, "location"))
    return f"📍 Venue: {where}" + (f" ({point})" if point else "")


def _poll(body: Json, at: Drops) -> str | None:
    question = at.text(body, "question")
    if not question:
        return None
    options = []
    for option in at.array(body, "options")[:_MAX_POLL_OPTIONS]:
        text = option.get("text") if isinstance(option, dict) else None
        if isinstance(text, str) and text:
            options.append(f"- {_cut(text)}")
    kind = "Quiz" if body.get("type") == "quiz" else "Poll"
    lines = [f"📊 {kind}: {_cut(question)}", *options]
    if body.get("allows_multiple_answers") is True:
        lines.append("(several answers allowed)")
    return "\n".join(lines)


def _dice(body: Json, at: Drops) -> str | None:
    emoji, value = at.text(body, "emoji") or "🎲", as_int(body.get("value"))
    if value is None:
        return None
    return f"🎲 The user rolled {_cut(emoji)} and got {value}."


def _sticker(body: Json, at: Drops) -> str | None:
    emoji = at.text(body, "emoji")
    return f"[Sticker {_cut(emoji)}]" if emoji else "[Sticker]"


def _game(body: Json, at: Drops) -> str | None:
    title = at.text(body, "title")
    if not title:
        return None
    description = at.text(body, "description")
    return f"🎮 Game: {_cut(title)}" + (f" — {_cut(description)}" if description else "")


def _invoice(body: Json, at: Drops) -> str | None:
    title = at.text(body, "title") or "an invoice"
    return f"🧾 Invoice: {_cut(title)}, {_amount(body, at)}"


def _payment(body: Json, at: Drops) -> str | None:
    return f"💳 Payment received: {_amount(body, at)}"


_DESCRIBERS: tuple[tuple[str, Any], ...] = (
    ("contact", _contact),
    ("venue", _venue),
    ("poll", _poll),
    ("dice", _dice),
    ("sticker", _sticker),
    ("game", _game),
    ("invoice", _invoice),
    ("successful_payment", _payment),
)


#: Every field of a message ``files_of`` and ``descriptions_of`` read: a message with none
#: of them (most are text) has neither files nor descriptions.
MEDIA_FIELDS = frozenset(["photo", "document", *_MEDIA, *(key for key, _ in _DESCRIBERS)])


def _amount(body: Json, at: Drops) -> str:
    total, currency = as_int(body.get("total_amount")), at.text(body, "currency") or "?"
    if total is None:
        return f"an amount in {_cut(currency)}"
    # Telegram counts in the currency's smallest unit (cents for USD; Stars are whole).
    return f"{total} {_cut(currency)} (in the currency's smallest unit)"


def _point(location: Json | None) -> str | None:
    if location is None:
        return None
    lat, lon = as_number(location.get("latitude")), as_number(location.get("longitude"))
    if lat is None or lon is None or abs(lat) > 90 or abs(lon) > 180:
        return None
    return f"{lat:.6f}, {lon:.6f}"


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_LINE else text[:_MAX_LINE] + "…"
