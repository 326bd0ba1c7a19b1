"""A Discord voice message: OGG/Opus audio posted with the IS_VOICE_MESSAGE flag.

Discord plays an attachment as a voice message when the message has the flag (8192), no
other content, one audio file, and the attachment's ``duration_secs`` and ``waveform``
(base64 of up to 256 amplitudes, 0-255). discord.py's ``File`` cannot carry those two,
so the request is built here and sent through the library's public ``Route`` and
``HTTPClient.request`` (its rate limits and retries, as every other call). The duration
is the Ogg stream's last granule position (48 kHz) less the Opus pre-skip; the waveform
is coarse: each stretch's bitrate (Opus spends few bytes on silence, more on speech).
"""

from __future__ import annotations

import base64
import io
import json
import struct
from collections.abc import Iterator
from typing import Any

import discord

__all__ = ["FILENAME", "duration_of", "voice_message", "waveform_of"]

Json = dict[str, Any]

FILENAME = "voice-message.ogg"
_RATE = 48_000
_MAX_SAMPLES = 256
#: Bytes a second heard as full loudness (Opus speech at about 32 kbit/s).
_LOUD = 4000


def _pages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Each Ogg page's granule position and body, until the data stops being Ogg."""
    at = 0
    while at + 27 <= len(data) and data[at : at + 4] == b"OggS":
        granule = struct.unpack_from("<q", data, at + 6)[0]
        count = data[at + 26]
        lacing = data[at + 27 : at + 27 + count]
        start = at + 27 + count
        size = sum(lacing)
        if len(lacing) < count or start + size > len(data):
            return
        yield granule, data[start : start + size]
        at = start + size


def _pre_skip(pages: list[tuple[int, bytes]]) -> int:
    if pages and pages[0][1].startswith(b"OpusHead") and len(pages[0][1]) >= 12:
        return int(struct.unpack_from("<H", pages[0][1], 10)[0])
    return 0


def duration_of(audio: bytes) -> float:
    """The OGG/Opus audio's length in seconds (0 when it is not Ogg)."""
    pages = list(_pages(audio))
    last = max((granule for granule, _ in pages if granule >= 0), default=0)
    return max(0.0, (last - _pre_skip(pages)) / _RATE)


def waveform_of(audio: bytes) -> bytes:
    """Up to 256 amplitudes (one per tenth of a second), each from its stretch's bitrate."""
    pages = list(_pages(audio))
    rates: list[float] = []
    previous = 0
    for granule, body in pages:
        if granule <= 0 or body.startswith((b"OpusHead", b"OpusTags")):
            continue
        span = granule - previous
        previous = granule
        if span > 0:
            rates.append(len(body) * _RATE / span)
    count = min(_MAX_SAMPLES, max(1, round(duration_of(audio) * 10)))
    if not rates:
        return bytes(count)
    samples = []
    for index in range(count):
        low = index * len(rates) // count
        high = max(low + 1, (index + 1) * len(rates) // count)
        stretch = rates[low:high]
        samples.append(min(255, round(sum(stretch) / len(stretch) * 255 / _LOUD)))
    return bytes(samples)


def voice_message(
    channel_id: int, audio: bytes, reply_to: int | None = None, nonce: str | None = None
) -> tuple[discord.http.Route, list[Json], discord.File]:
    """The request posting ``audio`` as a voice message: its route, its multipart form
    (``payload_json`` and ``files[0]``) and the file (rewound by the library's retries);
    ``nonce`` enforced, so a retry posts it once (discord.py's own retry after a 5xx
    posted it twice until 2026-12-07)."""
    attachment = {
        "id": 0,
        "filename": FILENAME,
        "duration_secs": round(duration_of(audio), 2),
        "waveform": base64.b64encode(waveform_of(audio)).decode("ascii"),
    }
    payload: Json = {
        "flags": discord.MessageFlags(voice=True).value,
        "attachments": [attachment],
        "allowed_mentions": discord.AllowedMentions.none().to_dict(),
    }
    if nonce is not None:
        payload["nonce"], payload["enforce_nonce"] = nonce, True
    if reply_to is not None:  # a reply to the message that asked (it may be gone)
        reference = discord.MessageReference(
            message_id=reply_to, channel_id=channel_id, fail_if_not_exists=False
        )
        payload["message_reference"] = reference.to_dict()
    file = discord.File(io.BytesIO(audio), filename=FILENAME)
    form: list[Json] = [
        {"name": "payload_json", "value": json.dumps(payload)},
        {"name": "files[0]", "value": file.fp, "filename": FILENAME, "content_type": "audio/ogg"},
    ]
    route = discord.http.Route("POST", "/channels/{channel_id}/messages", channel_id=channel_id)
    return route, form, file
