"""Voice replies as every platform that speaks records and sends them.

A reply in a chat with voice on (``/voice on``), or the agent's ``send_voice_message``,
is its text read aloud (``voice.spoken_parts``: cut between blocks, a long one between
its lines), each part one outbox row: the platform's text message of the part's own
words, plus what it says under ``VOICE``. The row is recorded (durable, sent once) and
spoken when it is sent: the platform's client asks ``speak`` for OGG/Opus and sends a
voice message. Any speech failure is the platform's refusal whose ``fallback`` is the row
without ``VOICE``: its text, so the chat never gets nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bot.delivery import Refused
from voice import SpeechError, spoken_parts

__all__ = ["VOICE", "Speak", "audio_of", "text_instead", "voice_payloads"]

log = logging.getLogger(__name__)

Json = dict[str, Any]
#: Text to OGG/Opus bytes, raising ``SpeechError`` (``chathub serve``'s speaker).
Speak = Callable[[str], Awaitable[bytes]]
#: The payload field holding what a voice row says aloud.
VOICE = "voice"


def voice_payloads(text: str, as_text: Callable[[str], Json], field: str = VOICE) -> list[Json]:
    """``text`` read aloud, one payload per few blocks: ``as_text(written)`` (the reply's
    own words of the part, its fallback) with what the part says under ``field``."""
    return [{**as_text(written), field: said} for said, written in spoken_parts(text)]


async def audio_of(speak: Speak | None, said: str, failed: Callable[[str], Refused]) -> bytes:
    """``said`` as OGG/Opus; any speech failure raised as ``failed(description)``, the
    platform's refusal (its client's ``fallback`` then sends the text)."""
    if speak is None:
        raise failed("speech: not set up")
    try:
        return await speak(said)
    except SpeechError as exc:
        log.warning("a voice reply was sent as text: %s", exc)
        raise failed(f"speech: {exc}") from None


def text_instead(payload: Json) -> Json | None:
    """A voice row not spoken (or its voice message refused): its text; ``None`` for
    any other payload."""
    if payload.get(VOICE):
        return {k: v for k, v in payload.items() if k != VOICE}
    return None
