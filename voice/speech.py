"""What the agent says aloud: ``POST /v1/audio/speech`` on an OpenAI-compatible server.

``Speech`` says which endpoint speaks now (``voice/endpoints.py``: a provider serving
``speech``, else ``SPEECH_MODEL`` at ``SPEECH_BASE_URL`` or ``LLM_BASE_URL``), following
the SystemEventBus. ``Speaker`` makes the call and checks the answer is OGG/Opus (what
Telegram plays as a voice message). Every failure is a ``SpeechError`` whose text is one
sentence; a platform then sends the text instead, never nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any
from urllib.parse import urlsplit

import httpx

from providers import UNSENDABLE, Endpoint, ProviderRegistry
from voice.endpoints import AudioChoice, failure_of

__all__ = [
    "MAX_SPEECH_CHARS",
    "Speaker",
    "Speech",
    "SpeechError",
    "links",
    "sentences",
    "spoken",
    "spoken_parts",
]

log = logging.getLogger(__name__)

#: OpenAI's ``/v1/audio/speech`` takes at most 4,096 characters: a part is at most this.
MAX_SPEECH_CHARS = 2000
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
#: A link's target may hold balanced parentheses (Wikipedia's) or be in angle brackets,
#: and a title may follow it.
_MARKDOWN_LINK = re.compile(
    r'!?\[([^\]]+)\]\(\s*(?:<([^>\s]+)>|((?:[^()\s]|\([^()\s]*\))+))(?:\s+"[^"]*")?\s*\)'
)
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
_BARE_URL = re.compile(r"(?<![\w/])https?://[^\s<>\[\]`()][^\s<>\[\]`]*")
_ANY_LINK = re.compile(f"{_MARKDOWN_LINK.pattern}|{_BARE_URL.pattern}")
#: ``[words][label]`` and ``[words][]``: said as their words.
_REFERENCE_LINK = re.compile(r"!?\[([^\]\n]+)\]\[([^\]\n]*)\]")
#: A link reference definition's label and address.
_LINK_DEFINED = re.compile(
    r"^ {0,3}\[([^\]\n^][^\]\n]*)\]:[ \t]*(?:<([^>\n]*)>|(\S+))", re.MULTILINE
)
#: A link reference definition (``[label]: address "title"``), or a footnote's
#: (``[^1]: text``, with its indented lines): whole lines, never said.
_DEFINITION = re.compile(
    r"^ {0,3}(?:\[\^[^\]\n]+\]:.*(?:\n[ \t]+\S.*)*"
    r"|\[[^\]\n]+\]:[ \t]*(?:<[^>\n]*>|\S+)"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*)(?:\n|\Z)",
    re.MULTILINE,
)
#: A footnote's mark in the text (``word[^1]``), and a footnote's definition's label.
_FOOTNOTE_MARK = re.compile(r"\[\^([^\]\s]+)\]")
_FOOTNOTE_DEFINED = re.compile(r"^ {0,3}\[\^([^\]\s]+)\]:", re.MULTILINE)
_TRAILING = ".,;:!?'\"*_~"


class SpeechError(Exception):
    """Speech failed; ``str()`` is one sentence a person may read."""


class Speech(AudioChoice):
    """Which endpoint speaks now (``None``: the agent cannot answer aloud)."""

    def __init__(self, settings: Any, registry: ProviderRegistry | None = None) -> None:
        super().__init__("speech", settings, registry, prefix="speech")
        self.voice: str = settings.speech_voice


def spoken(markdown: str) -> str:
    """Markdown as it is read aloud: code fences, emphasis marks and link targets gone (a
    bare address said as its host: no one listens to a URL read out)."""
    text = _CODE_BLOCK.sub(r"\2", markdown)
    # Reference-style links: their definitions unsaid, a link said by its words (until
    # 2026-12-07 "[the guide][1]" was read with its label, and each "[1]: address" line
    # with its host; found by review). Only what the text defines: "grid[0][1]" and a
    # pattern's "[^0-9]" are said as written (the first version took them for links).
    labels = {m.group(1).strip().casefold() for m in _LINK_DEFINED.finditer(text)}
    notes = set(_FOOTNOTE_DEFINED.findall(text))
    text = _DEFINITION.sub("", text)
    text = _FOOTNOTE_MARK.sub(lambda m: "" if m.group(1) in notes else m.group(), text)
    text = _MARKDOWN_LINK.sub(r"\1", _AUTOLINK.sub(r"\1", text))
    text = _REFERENCE_LINK.sub(
        lambda m: (
            m.group(1) if (m.group(2) or m.group(1)).strip().casefold() in labels else m.group()
        ),
        text,
    )
    text = _BARE_URL.sub(_said_address, text)
    text = re.sub(r"^\s{0,3}(#{1,6}|>|[-*+])\s+", "", text, flags=re.MULTILINE)
    for emphasis in _EMPHASIS:
        text = emphasis.sub(r"\2", text)
    return re.sub(r"[ \t]+", " ", text).strip()


#: Emphasis and code marks around words, each pair dropped and its words kept. A mark that
#: pairs with none stays: ``5 * 3``, ``MAX_RETRIES``, ``first_last@example.com`` (every
#: ``*`` and ``_`` went until 2026-12-06, from the voice and from the text sent when
#: speech failed; found by review).
_EMPHASIS = (
    re.compile(r"(`+)(.+?)\1"),
    re.compile(r"(\*\*|~~)(?=\S)(.+?)(?<=\S)\1"),
    re.compile(r"(?<![\w*])(\*)(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])"),
    re.compile(r"(?<!\w)(__?)(?=[^\s_])(.+?)(?<=[^\s_])\1(?!\w)"),
)


def links(markdown: str) -> str:
    """The links a spoken ``markdown`` does not say, as Markdown lines to send beside its
    voice messages ("" when it has none): a listener cannot follow an address he heard."""
    found = [
        f"[{m.group(1)}]({m.group(2) or m.group(3)})" if m.group(1) else _trimmed(m.group())
        for m in _ANY_LINK.finditer(_AUTOLINK.sub(r"\1", _inline_references(markdown)))
    ]
    return "\n".join(f"🔗 {line}" for line in dict.fromkeys(found))


def _inline_references(markdown: str) -> str:
    """``markdown`` with each reference-style link written inline (``[words](address)``)
    and the definitions it used gone: a link is written by its words, as an inline one."""
    defined: dict[str, str] = {}
    for m in _LINK_DEFINED.finditer(markdown):
        defined.setdefault(m.group(1).strip().casefold(), m.group(2) or m.group(3))
    used: set[str] = set()

    def inline(m: re.Match[str]) -> str:
        label = (m.group(2) or m.group(1)).strip().casefold()
        if label not in defined:
            return m.group()
        used.add(label)
        return f"[{m.group(1)}]({defined[label]})"

    markdown = _REFERENCE_LINK.sub(inline, markdown)

    def unused(m: re.Match[str]) -> str:
        return "" if m.group(1).strip().casefold() in used else m.group()

    return _LINK_DEFINED.sub(unused, markdown)


def _said_address(match: re.Match[str]) -> str:
    url = _trimmed(match.group())
    return (urlsplit(url).hostname or "a link") + match.group()[len(url) :]


def _trimmed(url: str) -> str:
    """A bare address without what follows it in the sentence: punctuation, emphasis
    marks, a closing parenthesis it did not open."""
    while True:
        url = url.rstrip(_TRAILING)
        if url.endswith(")") and url.count("(") < url.count(")"):
            url = url[:-1]
            continue
        return url


def sentences(text: str, limit: int = MAX_SPEECH_CHARS) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut between sentences (a
    sentence longer than that is cut between words, then anywhere)."""
    parts: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(text.strip()):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            if current:
                parts.append(current)
                current = ""
            parts.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if current and len(current) + 1 + len(sentence) > limit:
            parts.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}".strip()
    if current:
        parts.append(current)
    return [p for p in parts if p]


def spoken_parts(markdown: str, limit: int = MAX_SPEECH_CHARS) -> list[tuple[str, str]]:
    """``markdown`` in parts to read aloud, each ``(said, written)``: what is spoken and
    the reply's own words it comes from, the Markdown a chat shows when speech fails, both
    at most ``limit`` characters. Cut between blocks (paragraphs, lists, code blocks,
    whole); a block too long at once between its lines (a code block's pieces each fenced),
    a line too long between its sentences. Until 2026-12-07 the text shown was the spoken
    form cut between sentences: a code block's lines and indentation, a list's items, ran
    together on one line (found by review)."""
    parts: list[tuple[str, str]] = []
    written: list[str] = []

    def flush() -> None:
        if written:
            parts.append((spoken("\n\n".join(written)), "\n\n".join(written)))
            written.clear()

    for block in _blocks(markdown):
        if _size("\n\n".join([*written, block])) <= limit:
            written.append(block)
            continue
        flush()
        if _size(block) <= limit:
            written.append(block)
        else:
            parts += [(spoken(piece), piece) for piece in _cut(block, limit)]
    flush()
    return [(said, text) for said, text in parts if said or text.strip()]


def _size(markdown: str) -> int:
    """What a part takes: its spoken form and its text must each fit."""
    return max(len(markdown), len(spoken(markdown)))


def _cut(block: str, limit: int) -> list[str]:
    """A block too long for one part, cut between its lines (a code block's pieces each
    opened and closed with its fence), a line too long between its sentences."""
    lines = block.split("\n")
    fence = _FENCE.match(lines[0])
    opening, closing = "", ""
    if fence is not None:
        opening, closing = lines[0] + "\n", "\n" + fence.group(1)
        lines = lines[1:-1] if _FENCE.match(lines[-1]) and len(lines) > 1 else lines[1:]
    room = max(limit - len(opening) - len(closing), 1)
    pieces: list[str] = []
    current: list[str] = []
    for line in lines:
        for part in [line] if len(line) <= room else sentences(line, room):
            if current and len("\n".join([*current, part])) > room:
                pieces.append("\n".join(current))
                current = []
            current.append(part)
    if current:
        pieces.append("\n".join(current))
    return [f"{opening}{piece}{closing}" for piece in pieces]


def _blocks(markdown: str) -> list[str]:
    """``markdown``'s blocks: what blank lines part, a fenced code block always one block
    of its own (the text right before or after it is another)."""
    blocks: list[str] = []
    lines: list[str] = []

    def flush() -> None:
        if lines:
            blocks.append("\n".join(lines))
            lines.clear()

    fence: str | None = None
    for line in markdown.strip().replace("\r\n", "\n").split("\n"):
        stripped = line.strip()
        if fence is not None:
            lines.append(line)
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
                flush()
            continue
        opening = _FENCE.match(line)
        if opening is not None:
            flush()
            fence = opening.group(1)
            lines.append(line)
        elif not stripped:
            flush()
        else:
            lines.append(line)
    flush()
    return blocks


#: A fenced code block, its words kept: closed, or running to the end of the text.
_CODE_BLOCK = re.compile(r"(```|~~~)[^\n]*\n(.*?)(?:\1|\Z)", re.DOTALL)
_FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")


class Speaker:
    def __init__(self, http: httpx.AsyncClient, *, timeout_s: float = 60.0) -> None:
        self._http = http
        self._timeout_s = timeout_s

    async def speak(self, endpoint: Endpoint, text: str, voice: str) -> bytes:
        """``text`` (at most ``MAX_SPEECH_CHARS``) as OGG/Opus bytes."""
        if not text.strip():
            raise SpeechError("there is nothing to say")
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        body = {"model": endpoint.model, "input": text, "voice": voice, "response_format": "opus"}
        try:
            async with asyncio.timeout(self._timeout_s):  # for the whole answer, not a read
                answer = await self._http.post(
                    f"{endpoint.base_url}/audio/speech",
                    json=body,
                    headers=headers,
                    timeout=self._timeout_s,
                )
        except (httpx.TimeoutException, TimeoutError):
            raise SpeechError(
                f"the speech server did not answer within {self._timeout_s:g} s"
            ) from None
        except UNSENDABLE as exc:
            log.warning("speech at %s: %s", endpoint.base_url, type(exc).__name__)
            raise SpeechError(
                "the speech server's address or key cannot be used; check its settings"
            ) from None
        except httpx.HTTPError as exc:
            log.warning("speech at %s failed: %s", endpoint.base_url, type(exc).__name__)
            raise SpeechError("the speech server cannot be reached") from None
        failed = failure_of(answer, endpoint, "the speech server")
        if failed is not None:
            raise SpeechError(failed)
        if not answer.content.startswith(b"OggS"):
            log.warning("speech at %s: not OGG (%r)", endpoint.base_url, answer.content[:16])
            raise SpeechError("the speech server's answer is not OGG/Opus audio")
        return answer.content
