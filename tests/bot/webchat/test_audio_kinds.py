"""An audio file is of kind ``audio`` on any host (found by review on 2026-12-07).

Before: the kind came from ``mimetypes`` alone, which knows ``.ogg``, ``.oga``, ``.m4a``
and ``.flac`` only from the host's /etc/mime.types (Python 3.11's own table lacks them).
On python:3.11-slim (the Dockerfile's base, no media-types package) such a file chosen
with the paperclip was a "document", never heard."""

from __future__ import annotations

import mimetypes
from pathlib import Path

import pytest

from bot.webchat.uploads import Uploads, audio_type


@pytest.fixture
def no_host_mime_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """``mimetypes`` as it is where /etc/mime.types does not exist."""
    builtin = mimetypes.MimeTypes(filenames=())
    monkeypatch.setattr(mimetypes, "_db", builtin)
    monkeypatch.setattr(mimetypes, "guess_type", builtin.guess_type)


@pytest.mark.parametrize(
    ("name", "mime_type"),
    [
        ("song.ogg", "audio/ogg"),
        ("note.OGA", "audio/ogg"),
        ("memo.m4a", "audio/mp4"),
        ("take.flac", "audio/flac"),
        ("tune.mp3", "audio/mpeg"),
    ],
)
async def test_an_audio_file_chosen_with_the_paperclip_is_audio_on_a_slim_host(
    tmp_path: Path, no_host_mime_types: None, name: str, mime_type: str
):
    uploads = Uploads(tmp_path)

    async def body():
        yield b"\x00" * 16

    saved = await uploads.save("1", name, body())
    [found] = uploads.attachments("1", [saved.id])
    assert (found["kind"], found["mime_type"]) == ("audio", mime_type)


@pytest.mark.parametrize("name", ["clip.webm", "clip.mp4", "notes.txt"])
def test_a_video_or_a_text_is_still_not_audio(no_host_mime_types: None, name: str):
    assert audio_type(name) is None
