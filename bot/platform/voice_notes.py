"""Voice notes heard, on every platform: refused before download when too long or too
large, transcribed once saved, said back as a quoted "🎤 …" line, taken as the turn's text.

A platform downloads a message's files as attachments (``path``, ``name``, ``kind``,
``mime_type``); ``VoiceNotes.hear`` transcribes those of a voice kind through whichever
endpoint ``Transcription`` names now (so a provider added while the service runs is used
by the next voice note) and keeps the transcript on the attachment, whose file stays in
the workspace as the audio's reference. A voice note nobody can transcribe is dropped
with one sentence saying how to set transcription up; an audio file or a video note is
then kept as a file, as before. A voice or video note the server fails to hear is
dropped, with one sentence: the person may send it again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from providers import Endpoint
from voice import Transcriber, Transcription, TranscriptionError
from voice.transcription import CUT_NOTE, MAX_TRANSCRIPT

__all__ = ["NOT_SET_UP", "VOICE_KINDS", "Heard", "TooLarge", "VoiceNotes"]

log = logging.getLogger(__name__)

Json = dict[str, Any]

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: What a person records (``voice``: a voice note) or sends as sound.
VOICE_KINDS = frozenset({"voice", "audio", "video_note"})
NOT_SET_UP = (
    "🎤 I cannot transcribe voice messages: no transcription is set up. The owner can set "
    "TRANSCRIBE_MODEL (or add a provider with `chathub providers add`, docs/voice.md)."
)


class TooLarge(ValueError):
    """A download found the file larger than it may be (its size was not told before)."""


@dataclass(slots=True)
class Heard:
    #: The transcripts, for the turn's text.
    texts: list[str] = field(default_factory=list)
    #: The attachments still worth the turn (an untranscribed voice note is not).
    attachments: list[Json] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def said(self) -> list[str]:
        """What the person is told: the quoted lines, then the problems in one warning."""
        lines = [self.quotes] if self.quotes else []
        return lines + (["⚠️ " + " ".join(self.problems)] if self.problems else [])

    @property
    def quotes(self) -> str | None:
        """What the person is shown: each transcript as a quoted "🎤 …" line."""
        if not self.texts:
            return None
        return "\n".join(f"🎤 “{text}”" if text else "🎤 (silence)" for text in self.texts)


class VoiceNotes:
    def __init__(
        self,
        transcription: Transcription,
        transcriber: Transcriber,
        workspace: Path,
        *,
        max_bytes: int,
        max_seconds: int,
    ) -> None:
        self._transcription = transcription
        self._transcriber = transcriber
        self.workspace = workspace
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds

    def endpoint_origin(self) -> str | None:
        """Where voice notes go now (a provider's name, ``TRANSCRIBE_MODEL``), or ``None``."""
        endpoint = self._transcription.endpoint()
        return None if endpoint is None else endpoint.origin

    def refusal(self, kind: str, name: str, size: int | None, seconds: int | None) -> str | None:
        """Why a voice file is not even downloaded (too long, too large), or ``None``. A
        sound file nothing would transcribe is kept as a file however long it is (until
        2026-12-07 a 30-minute ``lecture.mp3`` was refused as too long to transcribe with
        no transcription set up, and the model never saw it; found by review), within
        ``max_bytes`` still, which every platform's download of it is held to."""
        if kind not in VOICE_KINDS:
            return None
        untranscribed = kind == "audio" and self._transcription.endpoint() is None
        if seconds is not None and seconds > self.max_seconds and not untranscribed:
            return f"🎤 {name} is {seconds} s long; I transcribe at most {self.max_seconds} s."
        if size is not None and size > self.max_bytes:
            mb = self.max_bytes / (1024 * 1024)
            what = "too large" if untranscribed else "too large to transcribe"
            return f"🎤 {name} is {what} (the limit is {mb:g} MB)."
        return None

    async def fetch(
        self,
        files: Sequence[Json],
        folder: Path,
        stem: str,
        download: Callable[[str], Awaitable[bytes]],
    ) -> Heard:
        """Audio a platform describes (``url``, ``name``, ``mime``, ``size``, ``seconds``,
        ``voice``): refused when too long or large, else downloaded into ``folder`` (in the
        workspace, named after ``stem``) and heard. ``download`` raises ``OSError`` or
        ``ValueError`` when it cannot, ``TooLarge`` past ``max_bytes``."""
        attachments, problems = [], []
        for index, audio in enumerate(files):
            kind = "voice" if audio.get("voice") else "audio"
            name = str(audio.get("name") or "audio")
            why = self.refusal(kind, name, audio.get("size"), audio.get("seconds"))
            if why is not None:
                problems.append(why)
                continue
            # Each file of the message its own path: Slack names every clip alike, and
            # the second overwrote the first, heard twice (found by review on 2026-12-06).
            own = f"{stem}_{index}" if index else stem
            relative = folder / _SAFE.sub("_", f"{own}_{Path(name).name}")[:150]
            try:
                data = await download(str(audio["url"]))
                # Its real size: a message may give none, or less than the file has.
                why = self.refusal(kind, name, len(data), None)
                if why is not None:
                    problems.append(why)
                    continue
                target = self.workspace / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            except TooLarge:  # "could not download" until 2026-12-07 (found by review)
                problems.append(self.refusal(kind, name, self.max_bytes + 1, None) or "")
                continue
            except (OSError, ValueError) as exc:
                log.warning("downloading %s failed: %s", name, exc)
                problems.append(f"I could not download {name}.")
                continue
            attachments.append(
                {
                    "path": relative.as_posix(),
                    "name": name,
                    "kind": kind,
                    "mime_type": audio.get("mime") or "audio/ogg",
                    "size": len(data),
                }
            )
        heard = await self.hear(attachments)
        heard.problems[:0] = problems
        return heard

    async def hear(self, attachments: list[Json]) -> Heard:
        heard = Heard()
        for attachment in attachments:
            kind = attachment.get("kind")
            if kind not in VOICE_KINDS:
                heard.attachments.append(attachment)
                continue
            too_large = self._measured(attachment)
            if too_large is not None:
                heard.problems.append(too_large)
                continue
            endpoint = self._transcription.endpoint()
            text = await self._transcribe(attachment, heard, endpoint)
            if text is not None:
                if text.endswith(CUT_NOTE):  # the model reads it so; the person is told
                    name = attachment.get("name") or "the voice message"
                    heard.problems.append(
                        f"🎤 {name} says more than I keep: its transcript is cut at "
                        f"{MAX_TRANSCRIPT:,} characters."
                    )
                heard.texts.append(text)
                heard.attachments.append({**attachment, "transcript": text})
            elif kind == "audio" or (kind == "video_note" and endpoint is None):
                # A sound file stays a file, and so does a video note nothing would
                # transcribe. One the server failed to hear is dropped as a voice note is:
                # nothing half-heard reaches the model (until 2026-12-07 it went to the
                # model unheard, and a turn ran on nothing said; found by review).
                heard.attachments.append(attachment)
        return heard

    def _measured(self, attachment: Json) -> str | None:
        """Why a downloaded voice file is not sent to transcription after all: measured,
        it is over ``max_bytes`` (its message gave no size, or less than it has); then it
        is not kept either. Telegram's were sent whatever their size (until 2026-12-06;
        found by review): only the other platforms' downloads measured them."""
        name = str(attachment.get("name") or "the voice message")
        try:
            path = self.workspace / str(attachment["path"])
            size = path.stat().st_size
        except (OSError, KeyError):
            return None  # unreadable: ``_transcribe`` says so
        why = self.refusal(str(attachment.get("kind")), name, size, None)
        if why is not None:
            path.unlink(missing_ok=True)
        return why

    async def _transcribe(
        self, attachment: Json, heard: Heard, endpoint: Endpoint | None
    ) -> str | None:
        name = str(attachment.get("name") or "the voice message")
        if endpoint is None:
            if NOT_SET_UP not in heard.problems and attachment.get("kind") == "voice":
                heard.problems.append(NOT_SET_UP)
            return None
        mime_type = str(attachment.get("mime_type") or "audio/ogg")
        try:
            audio = (self.workspace / str(attachment["path"])).read_bytes()
            return await self._transcriber.transcribe(
                endpoint, audio, uploaded_name(name, mime_type), mime_type
            )
        except (OSError, KeyError) as exc:
            log.warning("reading %s for transcription failed: %s", name, exc)
            heard.problems.append(f"🎤 I could not read {name}.")
        except TranscriptionError as exc:
            heard.problems.append(f"🎤 I could not transcribe {name}: {exc}.")
        return None


#: The extensions transcription servers read a format from (OpenAI's list), and the one
#: each audio type is written with.
_AUDIO_SUFFIXES = frozenset(
    {".flac", ".m4a", ".mp3", ".mp4", ".mpeg", ".mpga", ".oga", ".ogg", ".opus", ".wav", ".webm"}
)
_SUFFIX_OF = {
    "audio/ogg": ".ogg",
    "audio/opus": ".ogg",
    "audio/webm": ".webm",
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/mp4": ".m4a",
    "audio/x-m4a": ".m4a",
    "audio/aac": ".m4a",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/flac": ".flac",
}


def uploaded_name(name: str, mime_type: str) -> str:
    """The file's name as sent to be transcribed, with an extension that says its format:
    OpenAI reads the format from it, and Element names a voice message "Voice message"
    (every one was refused as "Invalid file format" until 2026-12-06; found by review)."""
    base = Path(name).name or "voice"
    if Path(base).suffix.lower() in _AUDIO_SUFFIXES:
        return base
    kind = mime_type.split(";", 1)[0].strip().lower()
    return base + _SUFFIX_OF.get(kind, ".ogg")
