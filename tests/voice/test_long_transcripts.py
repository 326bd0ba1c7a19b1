"""A transcript longer than ``MAX_TRANSCRIPT`` (a long talk, with ``VOICE_MAX_SECONDS``
raised): cut on a word, the model told in the text, the person in one sentence."""

from __future__ import annotations

from pathlib import Path

import httpx

from bot.platform.voice_notes import VoiceNotes
from providers import Endpoint
from voice import Transcriber
from voice.transcription import MAX_TRANSCRIPT

#: What ends a cut transcript, for the model (and the person, in the quoted line).
CUT_NOTE = " … [transcript cut at 20,000 characters]"
ENDPOINT = Endpoint("http://stt.example/v1", "", "whisper-1", "TRANSCRIBE_MODEL")


class Transcription:
    def endpoint(self) -> Endpoint:
        return ENDPOINT


def answering(text: str) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"text": text})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


async def test_a_long_talk_is_cut_on_a_word_and_both_the_person_and_the_model_are_told(
    tmp_path: Path,
) -> None:
    """A 40-minute talk's transcript (about 35,000 characters) was cut at 20,000 in the
    middle of a word, and neither the person nor the model was told: the agent summarised
    half a talk as if whole (found by review on 2026-12-07)."""
    words = " ".join(f"word{i}" for i in range(4000))
    said = f"Start of the talk. {words}. End of the talk."
    async with answering(said) as http:
        notes = VoiceNotes(
            Transcription(),  # type: ignore[arg-type]
            Transcriber(http),
            tmp_path,
            max_bytes=1 << 24,
            max_seconds=3600,
        )
        (tmp_path / "talk.ogg").write_bytes(b"OggS" + bytes(1000))
        heard = await notes.hear(
            [{"path": "talk.ogg", "name": "talk.ogg", "kind": "audio", "mime_type": "audio/ogg"}]
        )
    [text] = heard.texts
    assert text.endswith(CUT_NOTE), text[-60:]
    kept = text[: -len(CUT_NOTE)]
    assert len(kept) <= MAX_TRANSCRIPT and said.startswith(kept)
    assert said[len(kept)] == " "  # on a word: the next character begins no word of it
    assert heard.attachments[0]["transcript"] == text  # what the model reads
    assert heard.problems == [
        "🎤 talk.ogg says more than I keep: its transcript is cut at 20,000 characters."
    ]


async def test_a_transcript_within_the_limit_or_without_spaces() -> None:
    """One within the limit is whole and tells nothing; one with no space to cut at (a
    language written without them) is cut at the limit, and says so."""
    whole = "a" * 10 + " " + "b" * (MAX_TRANSCRIPT - 11)
    async with answering(whole) as http:
        assert await Transcriber(http).transcribe(ENDPOINT, b"OggS", "a.ogg", "audio/ogg") == whole
    async with answering("字" * (MAX_TRANSCRIPT + 50)) as http:
        text = await Transcriber(http).transcribe(ENDPOINT, b"OggS", "a.ogg", "audio/ogg")
    assert text == "字" * MAX_TRANSCRIPT + CUT_NOTE
