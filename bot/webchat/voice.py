"""Voice in the web chat: a voice note recorded with the page's microphone button, or an
audio file chosen with the paperclip, heard through the platforms' ``VoiceNotes``
(``bot/platform/voice_notes.py``), as on Telegram, Discord, Slack and Matrix.

An upload of either is refused before it is stored when its declared size or duration is
over ``VOICE_MAX_BYTES`` / ``VOICE_MAX_SECONDS`` (``VoiceNotes.refusal``), and its bytes
are counted against the limit while they stream (``uploads.py``). When a ``message``
carries it, ``VoiceNotes.hear`` transcribes it: the transcript is the turn's text, the
file stays an attachment (its path in the workspace), and every tab is shown the quoted
``🎤 “…”`` line first. A voice note nobody can transcribe is dropped with the platforms'
sentence; nothing half-heard reaches the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bot.platform.voice_notes import NOT_SET_UP, VOICE_KINDS, Heard, VoiceNotes

__all__ = ["Hearing", "carries_sound", "hear", "upload_refusal", "warned"]


@dataclass(frozen=True, slots=True)
class Hearing:
    """What a message carrying sound becomes: the turn's ``text`` and ``attachments``,
    the quoted lines every tab is shown, and the warning its sender is told."""

    text: str
    attachments: list[dict[str, Any]]
    quotes: str | None
    warning: str | None


def warned(line: str) -> str:
    """A problem as the platforms say it: one line after a ⚠️."""
    return f"⚠️ {line}"


def upload_refusal(
    voice: VoiceNotes | None, kind: str, name: str, size: int | None, seconds: float | None
) -> str | None:
    """Why a voice note or audio file is not even stored (too long, too large), or
    ``None``; nobody transcribes without ``voice``, and then no voice limit applies."""
    if voice is None:
        return None
    whole = math.ceil(seconds) if seconds is not None else None
    why = voice.refusal(kind, name, size, whole)
    return None if why is None else warned(why)


def carries_sound(attachments: list[dict[str, Any]]) -> bool:
    return any(item.get("kind") in VOICE_KINDS for item in attachments)


async def hear(voice: VoiceNotes | None, text: str, attachments: list[dict[str, Any]]) -> Hearing:
    """The message's sound heard (``voice`` ``None``: the web chat was given no
    transcription, which a voice note is told as everywhere; an audio file stays a file)."""
    if voice is not None:
        heard = await voice.hear(attachments)
    else:
        voice_notes = [item for item in attachments if item.get("kind") == "voice"]
        heard = Heard(
            attachments=[item for item in attachments if item.get("kind") != "voice"],
            problems=[NOT_SET_UP] if voice_notes else [],
        )
    said = heard.said()  # the quoted lines, then the problems in one warning
    warning = said[-1] if heard.problems else None
    lines = [text, *heard.texts]
    return Hearing(
        text="\n".join(line for line in lines if line),
        attachments=heard.attachments,
        quotes=heard.quotes,
        warning=warning,
    )
