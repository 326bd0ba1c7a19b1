"""Context building: the six-part request, in an order that keeps the prefix cacheable.

1. static system (agent prompt + static extras): byte-identical across turns
2. scratchpad  3. compaction summary  4. history (the frame's transcript)
5. dynamic tail (extras, date/time, OS, working directory)  6. tail reminder
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from engine.llm.types import Message
from engine.session.context.transcript import FrameTranscript


@dataclass(frozen=True, slots=True)
class SystemParts:
    static: str
    dynamic_extra: str | None = None
    reminder: str | None = None


def _os_description() -> str:
    uname = platform.uname()
    return f"{uname.system} {uname.release} ({uname.machine})"


class MessageBuilder:
    """Assembles a request from the transcript and per-turn parts. Holds no session state."""

    def __init__(
        self,
        *,
        timezone: ZoneInfo,
        working_directory: Path,
        now: type[datetime] = datetime,
    ) -> None:
        self._tz = timezone
        self._tz_name = str(timezone.key)
        self.working_directory = working_directory
        self._workdir = str(working_directory)
        self._os = _os_description()
        self._now = now

    def build(
        self,
        parts: SystemParts,
        transcript: FrameTranscript,
        *,
        scratchpad: dict[str, str],
        summary: str | None = None,
        cache_hints: bool = False,
    ) -> list[Message]:
        messages: list[Message] = [static_system_message(parts.static, cache_hints)]
        if scratchpad:
            messages.append({"role": "system", "content": render_scratchpad(scratchpad)})
        if summary:
            messages.append(
                {"role": "system", "content": f"Summary of the earlier conversation:\n{summary}"}
            )
        messages.extend(transcript.messages())
        messages.append({"role": "system", "content": self.dynamic_tail(parts.dynamic_extra)})
        if parts.reminder:
            messages.append({"role": "system", "content": parts.reminder})
        return messages

    def dynamic_tail(self, extra: str | None) -> str:
        now = self._now.now(self._tz).replace(microsecond=0)
        lines = [
            f"Current date and time: {now.isoformat()} ({self._tz_name}, {now:%A})",
            f"Operating system: {self._os}",
            f"Working directory: {self._workdir} (file tools and execute_cmd resolve "
            "relative paths against it; no need to cd)",
        ]
        block = "\n".join(lines)
        return f"{extra}\n\n{block}" if extra else block


def static_system_message(text: str, cache_hints: bool) -> Message:
    if not cache_hints:
        return {"role": "system", "content": text}
    return {
        "role": "system",
        "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
    }


def render_scratchpad(notes: dict[str, str]) -> str:
    lines = [
        "<scratchpad>",
        "  <!-- Notes shared by every agent of this session. Kept for this session only. -->",
    ]
    lines.extend(
        f"  <note key={xml_attribute(k)}>{xml_text(v)}</note>" for k, v in sorted(notes.items())
    )
    lines.append("</scratchpad>")
    return "\n".join(lines)


# xml.sax.saxutils' escape and quoteattr, byte for byte (the scratchpad's lines must not
# change under a cached prompt prefix), without importing xml.sax (~2 MB per process).
def xml_text(data: str) -> str:
    return data.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def xml_attribute(data: str) -> str:
    data = xml_text(data).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")
    if '"' not in data:
        return f'"{data}"'
    if "'" not in data:
        return f"'{data}'"
    return '"{}"'.format(data.replace('"', "&quot;"))
