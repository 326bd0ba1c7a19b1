"""Bounding tool output: head-and-tail truncation with a note that says so.

Tools return text for the model to read; a 10 MB result would blow the context window.
Both the engine's global cut (``truncate_output``) and streaming producers such as
``execute_cmd`` (``OutputCollector``) keep the beginning and the end, where the
interesting parts of most outputs are (the command echo, the error at the end).
"""

from __future__ import annotations

import codecs

__all__ = [
    "OutputCollector",
    "decode_head",
    "decode_tail",
    "truncate_output",
    "truncation_note",
]


def truncation_note(total: int, head: int, tail: int, *, unit: str = "chars") -> str:
    """The one-line marker placed where the middle of an output was dropped."""
    return (
        f"[... output truncated: {total} {unit} total, "
        f"showing first {head} and last {tail} {unit} ...]"
    )


def _split(limit: int) -> tuple[int, int]:
    """How many units to keep from the head and from the tail for ``limit``."""
    head = limit // 2
    return head, limit - head


def truncate_output(text: str, limit: int) -> str:
    """Return ``text`` unchanged if it fits in ``limit`` chars, else its head and tail.

    The kept parts add up to ``limit`` characters; the note between them (under 120
    characters) is extra, so callers that need a hard ceiling leave that much room.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    total = len(text)
    if total <= limit:
        return text
    head, tail = _split(limit)
    tail_text = text[total - tail :] if tail else ""
    return f"{text[:head]}\n{truncation_note(total, head, tail)}\n{tail_text}"


def decode_head(data: bytes, *, errors: str = "replace") -> str:
    """Decode UTF-8 ``data`` that may end in the middle of a character.

    An incomplete trailing sequence is dropped instead of becoming a replacement
    character, so a cut made by byte count never shows as garbage.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors=errors)
    return decoder.decode(data, final=False)


def decode_tail(data: bytes, *, errors: str = "replace") -> str:
    """Decode UTF-8 ``data`` that may start in the middle of a character."""
    start = 0
    # Continuation bytes look like 0b10xxxxxx; a character is at most 4 bytes long.
    while start < min(len(data), 3) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:].decode("utf-8", errors=errors)


class OutputCollector:
    """Collects a byte stream keeping at most ``limit`` bytes: a head and a rolling tail.

    Memory stays bounded whatever the stream's size, and ``total_bytes`` still counts
    every byte fed, so the note can say how much was dropped.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self._head_limit, self._tail_limit = _split(limit)
        self._head = bytearray()
        self._tail = bytearray()
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        """Add a chunk of the stream."""
        self.total_bytes += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or not self._tail_limit:
            return
        if len(data) >= self._tail_limit:
            self._tail = bytearray(data[-self._tail_limit :])
        else:
            self._tail += data
            # Deleting from the front of a bytearray is cheap in CPython.
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]

    @property
    def truncated(self) -> bool:
        """Whether bytes were dropped from the middle."""
        return self.total_bytes > len(self._head) + len(self._tail)

    def text(self) -> str:
        """The collected output, decoded as UTF-8, with a note if the middle was dropped."""
        if not self.truncated:
            return bytes(self._head + self._tail).decode("utf-8", errors="replace")
        note = truncation_note(self.total_bytes, len(self._head), len(self._tail), unit="bytes")
        return f"{decode_head(bytes(self._head))}\n{note}\n{decode_tail(bytes(self._tail))}"
