"""``VoiceNotes``: a platform's audio held to the limits, heard once downloaded."""

from __future__ import annotations

from pathlib import Path

from bot.platform.voice_notes import NOT_SET_UP, VoiceNotes, uploaded_name
from providers import Endpoint
from voice import TranscriptionError


class Transcription:
    def endpoint(self) -> Endpoint:
        return Endpoint("http://stt.example/v1", "", "whisper-1", "TRANSCRIBE_MODEL")


class Transcriber:
    def __init__(self) -> None:
        self.uploads: list[int] = []

    async def transcribe(self, endpoint: Endpoint, audio: bytes, filename: str, mime: str) -> str:
        self.uploads.append(len(audio))
        return "hello"


async def test_audio_larger_than_it_said_is_held_to_the_limit_once_downloaded(
    tmp_path: Path,
) -> None:
    """A Matrix m.audio without ``info.size`` (or with less than the file has): 30 MB
    against a 1 MB limit is refused in one line, not kept in the workspace, not sent to
    the paid transcription server (it was both; found by review)."""
    transcriber = Transcriber()
    notes = VoiceNotes(Transcription(), transcriber, tmp_path, max_bytes=1 << 20, max_seconds=600)

    async def download(url: str) -> bytes:
        return b"OggS" + bytes(30 << 20)

    for said in (None, 1000):
        audio = {"url": "mxc://hs/abc", "name": "voice.ogg", "size": said, "voice": True}
        heard = await notes.fetch([audio], Path("uploads/matrix/room"), "ev1", download)
        assert heard.texts == [] and heard.problems == [
            "🎤 voice.ogg is too large to transcribe (the limit is 1 MB)."
        ]
    assert transcriber.uploads == []
    assert not (tmp_path / "uploads").exists()


class Echoing:
    async def transcribe(self, endpoint: Endpoint, audio: bytes, filename: str, mime: str) -> str:
        return audio.decode()


async def test_two_clips_of_one_message_named_alike_are_both_kept_and_heard(
    tmp_path: Path,
) -> None:
    """Slack names every clip ``audio_message.webm``: the second was written over the
    first, which was lost, and heard twice (found by review on 2026-12-06)."""
    notes = VoiceNotes(Transcription(), Echoing(), tmp_path, max_bytes=1 << 20, max_seconds=600)
    said = {"https://files.slack.com/a": b"first clip", "https://files.slack.com/b": b"second"}
    files = [
        {"url": url, "name": "audio_message.webm", "mime": "audio/webm", "voice": True}
        for url in said
    ]

    async def download(url: str) -> bytes:
        return said[url]

    heard = await notes.fetch(files, Path("uploads/slack/C1"), "1700000000.000100", download)
    assert heard.texts == ["first clip", "second"]
    paths = [a["path"] for a in heard.attachments]
    assert len(set(paths)) == 2
    assert [(tmp_path / p).read_bytes() for p in paths] == [b"first clip", b"second"]


def test_a_voice_note_is_sent_to_be_heard_with_an_extension_that_says_its_format() -> None:
    """Element names a voice message "Voice message": OpenAI reads the format from the
    extension and refused every one as "Invalid file format" (found by review)."""
    assert uploaded_name("Voice message", "audio/ogg") == "Voice message.ogg"
    assert uploaded_name("clip", "audio/webm; codecs=opus") == "clip.webm"
    assert uploaded_name("memo.M4A", "audio/mp4") == "memo.M4A"
    assert uploaded_name("notes.txt", "audio/mpeg") == "notes.txt.mp3"
    assert uploaded_name("../../x", "application/octet-stream") == "x.ogg"


class Nowhere:
    """No transcription set up."""

    def endpoint(self) -> None:
        return None


def test_an_audio_file_nothing_transcribes_is_held_to_the_size_not_the_length(
    tmp_path: Path,
) -> None:
    """A 30-minute lecture was refused as too long to transcribe with no transcription
    set up (until 2026-12-07); its size is still held to the limit, which every platform's
    download of it is."""
    notes = VoiceNotes(Nowhere(), Echoing(), tmp_path, max_bytes=1 << 20, max_seconds=600)  # type: ignore[arg-type]
    assert notes.refusal("audio", "lecture.mp3", 1000, 1800) is None
    assert "too large (the limit is 1 MB)" in (notes.refusal("audio", "big.mp3", 2 << 20, 5) or "")
    assert "I transcribe at most 600 s" in (notes.refusal("voice", "note.ogg", 1000, 1800) or "")
    transcribing = VoiceNotes(
        Transcription(), Echoing(), tmp_path, max_bytes=1 << 20, max_seconds=600
    )
    assert "at most 600 s" in (transcribing.refusal("audio", "lecture.mp3", 1000, 1800) or "")


class Failing:
    async def transcribe(self, endpoint: Endpoint, audio: bytes, filename: str, mime: str) -> str:
        raise TranscriptionError("the transcription server failed (HTTP 503)")


async def test_a_video_note_the_server_fails_to_hear_is_dropped_as_a_voice_note_is(
    tmp_path: Path,
) -> None:
    """A Telegram video note whose transcription failed was kept as an attachment: the
    model got a turn with nothing the person said (found by review on 2026-12-07). Now
    it is dropped with the one sentence, as a voice note is; an audio file stays a file,
    and a video note nothing would transcribe stays one too."""
    for name in ("note.mp4", "clip.ogg", "song.mp3"):
        (tmp_path / name).write_bytes(b"\x00" * 100)
    files = [
        {"path": "note.mp4", "name": "note.mp4", "kind": "video_note", "mime_type": "video/mp4"},
        {"path": "clip.ogg", "name": "clip.ogg", "kind": "voice", "mime_type": "audio/ogg"},
        {"path": "song.mp3", "name": "song.mp3", "kind": "audio", "mime_type": "audio/mpeg"},
    ]
    notes = VoiceNotes(Transcription(), Failing(), tmp_path, max_bytes=1 << 20, max_seconds=600)  # type: ignore[arg-type]
    heard = await notes.hear(files)
    assert [a["name"] for a in heard.attachments] == ["song.mp3"]
    assert heard.texts == [] and len(heard.problems) == 3
    assert heard.problems[0] == (
        "🎤 I could not transcribe note.mp4: the transcription server failed (HTTP 503)."
    )
    unset = VoiceNotes(Nowhere(), Failing(), tmp_path, max_bytes=1 << 20, max_seconds=600)  # type: ignore[arg-type]
    heard = await unset.hear(files)
    assert [a["name"] for a in heard.attachments] == ["note.mp4", "song.mp3"]
    assert heard.problems == [NOT_SET_UP]
