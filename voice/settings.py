"""Voice's variables: which model transcribes (and speaks), where, within which limits."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from engine.config import SETTINGS_CONFIG, http_url

__all__ = ["VoiceSettings"]


def _optional_url(value: Any) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    url = http_url(str(value).strip())  # a malformed one is refused there first
    if "@" in urlsplit(url).netloc:
        # The address is named in log lines (a failed voice note, a provider change):
        # until 2026-12-07 a password in it was logged (found by review). Not repeated
        # here: the refusal is printed too.
        raise ValueError("no user or password in it (it is shown in logs); give the key instead")
    return url


class VoiceSettings(BaseSettings):
    """Field names are the variable names, lower-cased (docs/voice.md)."""

    model_config = SETTINGS_CONFIG

    #: The model ``POST /v1/audio/transcriptions`` is asked with (``whisper-1``,
    #: ``whisper-large-v3``, a local server's); unset: voice notes are not transcribed.
    transcribe_model: str | None = None
    #: Its server; unset: ``LLM_BASE_URL`` (OpenAI, Groq and local servers serve chat and
    #: audio on one base URL).
    transcribe_base_url: str | None = None
    #: Its key; unset: ``LLM_API_KEY`` when the server is ``LLM_BASE_URL``'s.
    transcribe_api_key: str | None = None
    transcribe_timeout_seconds: float = Field(60.0, gt=0, le=600)
    #: The model ``POST /v1/audio/speech`` is asked with (``tts-1``, ``gpt-4o-mini-tts``, a
    #: local server's); unset: no voice replies (``/voice on`` says so).
    speech_model: str | None = None
    speech_voice: str = Field("alloy", min_length=1, max_length=64)
    #: Its server and key, as for transcription (unset: ``LLM_BASE_URL``'s).
    speech_base_url: str | None = None
    speech_api_key: str | None = None
    speech_timeout_seconds: float = Field(60.0, gt=0, le=600)
    #: A voice note longer or larger than this is refused before it is downloaded.
    voice_max_seconds: int = Field(600, ge=1, le=24 * 3600)
    voice_max_bytes: int = Field(20 * 1024 * 1024, ge=1024, le=2**31)

    @field_validator(
        "transcribe_model", "transcribe_api_key", "speech_model", "speech_api_key", mode="before"
    )
    @classmethod
    def _voice_optional(cls, value: Any) -> str | None:
        if value is None or str(value).strip() == "":
            return None
        return str(value).strip()

    @field_validator("transcribe_base_url", "speech_base_url", mode="before")
    @classmethod
    def _voice_url(cls, value: Any) -> str | None:
        return _optional_url(value)
