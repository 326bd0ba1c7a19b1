"""Real OGG/Opus bytes for the fake speech server: an Ogg stream (RFC 3533 pages with
their CRC) carrying an Opus identification header, a comment header and ``frames``
20 ms packets of Opus silence (RFC 7845), which any Opus decoder plays as quiet."""

from __future__ import annotations

import struct

__all__ = ["opus_silence"]

#: One 20 ms CELT frame of silence (a TOC byte for CELT FB 20 ms, mono, one frame).
_SILENT_FRAME = bytes([0xF8, 0xFF, 0xFE])
_SERIAL = 0x43484154  # "CHAT"


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else (crc << 1)
        table.append(crc & 0xFFFFFFFF)
    return table


_TABLE = _crc_table()


def _crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _TABLE[((crc >> 24) & 0xFF) ^ byte]
    return crc


def _page(packet: bytes, sequence: int, granule: int, flags: int) -> bytes:
    lacing = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = struct.pack(
        "<4sBBqIIIB", b"OggS", 0, flags, granule, _SERIAL, sequence, 0, len(lacing)
    )
    page = header + bytes(lacing) + packet
    crc = _crc(page)
    return page[:22] + struct.pack("<I", crc) + page[26:]


def opus_silence(frames: int = 25) -> bytes:
    """``frames`` × 20 ms of silence as an OGG/Opus file (25 frames: half a second)."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 7) + b"chathub" + struct.pack("<I", 0)
    pages = [_page(head, 0, 0, 0x02), _page(tags, 1, 0, 0)]
    for n in range(frames):
        last = n == frames - 1
        granule = 312 + (n + 1) * 960
        pages.append(_page(_SILENT_FRAME, n + 2, granule, 0x04 if last else 0))
    return b"".join(pages)
