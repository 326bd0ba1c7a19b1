"""Voice: what a voice note says (transcription), and later what the agent says aloud.

The face of the package: ``Transcription`` (which endpoint transcribes, reloaded when
providers change) and ``Transcriber`` (one ``POST /v1/audio/transcriptions``).
"""

from voice.settings import VoiceSettings
from voice.transcription import (
    AudioEndpoint,
    Transcriber,
    Transcription,
    TranscriptionError,
)

__all__ = [
    "AudioEndpoint",
    "Transcriber",
    "Transcription",
    "TranscriptionError",
    "VoiceSettings",
]
