"""Which chats hear their replies as voice messages: ``/voice on|off``, kept across
restarts (``app_settings``), read without a query when a reply is prepared.

A chat with voice on gets each final reply as voice messages (its text read aloud, cut
between sentences) through the platform's outbox; the text is each voice message's
fallback, sent instead whenever speech fails, so the chat never gets nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging

from bot.platform.commands import Command, CommandContext
from engine.store import AppSettings, Notifier
from voice import Speech

__all__ = ["VOICE_HELP", "VoiceMode", "voice_command"]

log = logging.getLogger(__name__)

VOICE_HELP = "Replies here as voice messages (on) or text (off)"
NOT_SET_UP = (
    "🔇 Speech is not set up: the owner can set SPEECH_MODEL (or add a provider serving "
    "speech with `chathub providers add`, docs/voice.md)."
)
_KEY = "voice:replies"
#: Where a fleet's processes tell each other of a ``/voice`` change.
VOICE_CHANNEL = "chathub_voice"


class VoiceMode:
    """In a fleet (``notifier``) a change is told to the other processes, which read the
    setting again (``watch``): the process preparing a chat's replies is often not the one
    that took its ``/voice`` (it went on in text, or speaking, until it restarted)."""

    def __init__(
        self,
        settings: AppSettings,
        speech: Speech,
        notifier: Notifier | None = None,
        *,
        retry_s: float = 1.0,
    ) -> None:
        self._settings = settings
        self.speech = speech
        self._notifier = notifier
        self._retry_s = retry_s
        self._on: set[str] = set()

    async def load(self) -> None:
        self._on = _sources(await self._settings.get(_KEY))

    def is_on(self, source: str) -> bool:
        return source in self._on and self.speech.endpoint() is not None

    async def set(self, source: str, on: bool) -> None:
        """Read and written in one transaction: another chat's (or process's) ``/voice``
        at the same moment was lost when the two read the list before either wrote it
        (found by review on 2026-12-06)."""

        def changed(stored: str | None) -> str:
            sources = _sources(stored)
            return json.dumps(sorted(sources | {source} if on else sources - {source}))

        self._on = _sources(await self._settings.change(_KEY, changed))
        if self._notifier is not None:
            try:
                await self._notifier.publish(VOICE_CHANNEL, {})
            except Exception:
                log.exception("telling the fleet of a /voice change failed")

    async def watch(self) -> None:
        """Read the setting again whenever another process changed it, or notices may
        have been lost (runs until cancelled; a fleet's only)."""
        if self._notifier is None:
            return
        async with self._notifier.subscribe(VOICE_CHANNEL) as notices:
            async for _changed in notices:  # a Notice or a Resync: read it again
                while True:
                    try:
                        await self.load()
                        break
                    except Exception:  # a stale setting must not stay: until it is read
                        log.exception("reading the voice replies setting again failed")
                        await asyncio.sleep(self._retry_s)


def _sources(stored: str | None) -> set[str]:
    try:
        sources = json.loads(stored) if stored else []
    except ValueError:
        log.warning("the voice replies setting could not be read; voice is off everywhere")
        sources = []
    return {s for s in sources if isinstance(s, str)} if isinstance(sources, list) else set()


def voice_command(mode: VoiceMode) -> Command:
    async def voice(c: CommandContext) -> str:
        word = c.argument.strip().lower()
        if word not in ("on", "off", ""):
            return "Usage: /voice on, or /voice off."
        if word == "":
            state = "voice messages" if mode.is_on(c.source) else "text"
            return f"Replies here come as {state}. /voice on or /voice off changes it."
        if word == "on" and mode.speech.endpoint() is None:
            return NOT_SET_UP
        await mode.set(c.source, word == "on")
        if word == "on":
            return "🔊 Replies here now come as voice messages (the text if speech fails)."
        return "🔈 Replies here now come as text."

    return Command("voice", VOICE_HELP, voice, argument="<on|off>")
