"""Voice: what a voice note says (transcription), and what the agent says aloud (speech).

The face of the package: ``Transcription`` / ``Speech`` (which endpoint does the job now,
reloaded when providers change), ``Transcriber`` (one ``POST /v1/audio/transcriptions``)
and ``Speaker`` (one ``POST /v1/audio/speech``), ``sentences`` and ``spoken`` (text made
ready for speech).
"""

from voice.settings import VoiceSettings
from voice.speech import Speaker, Speech, SpeechError, links, sentences, spoken, spoken_parts
from voice.transcription import Transcriber, Transcription, TranscriptionError

__all__ = [
    "Speaker",
    "Speech",
    "SpeechError",
    "Transcriber",
    "Transcription",
    "TranscriptionError",
    "VoiceSettings",
    "links",
    "sentences",
    "spoken",
    "spoken_parts",
]
