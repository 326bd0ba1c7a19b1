"""``send_voice_message(text)``: the agent says something aloud in the chat it talks in.

The text is read aloud (``voice.spoken``, cut between sentences) and each part recorded
in the platform's outbox as a voice reply whose fallback is its text (as ``/voice on``'s
replies are): sent once, a restart included, and as text when speech fails, never
nothing. Platforms that send voice give a ``VoiceOut``; on the others the tool says so.
Like any tool it passes the approval gate: the default rules ask first
(``chathub rules add --tool send_voice_message --action allow`` lets it speak freely).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from engine.tools import BuiltinTool, ToolCategory, ToolContext, ToolError, object_schema
from voice import Speech

__all__ = ["SendVoiceMessage", "VoiceOut"]

MAX_TEXT = 4000


class VoiceOut(Protocol):
    async def send_voice(self, source: str, text: str, key: str) -> int:
        """``text`` as voice messages in ``source``, recorded under ``key``; how many."""
        ...


class SendVoiceMessage(BuiltinTool):
    name = "send_voice_message"
    description = (
        "Send `text` to the person in this chat as a voice message (read aloud). Use it "
        "when they ask to hear something; your written answer still follows as usual."
    )
    category = ToolCategory.INTROSPECTION
    root_agent_only = True
    interactive_only = True

    def __init__(
        self,
        source_of: Callable[[int], Awaitable[str | None]],
        speech: Speech,
        outs: Mapping[str, VoiceOut],
    ) -> None:
        """``source_of``: a session's source; ``outs``: by platform (``telegram``,
        ``matrix``, ``discord``, ``slack``)."""
        self._source_of = source_of
        self._speech = speech
        self._outs = outs
        self.parameters = object_schema(
            {"text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}}, ["text"]
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        text = str(args["text"]).strip()
        if not text:
            raise ToolError("send_voice_message: the text is empty")
        if self._speech.endpoint() is None:
            raise ToolError(
                "send_voice_message: speech is not set up (the owner sets SPEECH_MODEL or "
                "adds a provider serving speech); answer in text"
            )
        source = await self._source_of(ctx.session_id)
        platform = (source or "").partition(":")[0]
        out = self._outs.get(platform)
        if source is None or out is None:
            raise ToolError(
                f"send_voice_message: voice messages cannot be sent in {platform or 'this chat'} "
                "yet; answer in text"
            )
        parts = await out.send_voice(source, text, f"voice:{uuid.uuid4().hex}")
        return f"Sent as {parts} voice message{'s' if parts != 1 else ''}."
