"""Markdown → Telegram message text plus entities, split to Telegram's size limit.

Pure functions. Markdown is parsed by telegramify-markdown (``convert``); this module
only post-processes its output and cuts it into messages. Entities are plain Bot API
dicts (``{"type": "bold", "offset": 0, "length": 4}``) with offsets and lengths in
UTF-16 code units, re-based per chunk.

Splitting rules (``render_markdown`` and ``plain_chunks``):

- a chunk holds at most ``limit`` UTF-16 code units;
- cut at the last paragraph boundary (blank line) that fits, else the last line
  boundary, else the last space, else a hard cut;
- never cut inside an entity that fits in one chunk (a short code block moves whole to
  the next chunk); an entity longer than a chunk is cut into one entity per chunk with
  the same type and attributes (a ``pre`` keeps its ``language``);
- leading newlines and trailing whitespace of a chunk are trimmed, whitespace-only
  chunks are dropped.
"""

from __future__ import annotations

import bisect
import logging
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyromark
from telegramify_markdown import RenderConfig, convert
from telegramify_markdown import utf16_len as _lib_utf16_len
from telegramify_markdown.converter import STANDARD_OPTIONS

__all__ = [
    "TELEGRAM_LIMIT",
    "Chunk",
    "cut_utf16",
    "plain_chunks",
    "progress_text",
    "render_markdown",
    "split_text",
    "utf16_len",
]

log = logging.getLogger(__name__)

#: Telegram's maximum message text length, in UTF-16 code units.
TELEGRAM_LIMIT = 4096

# A text_link whose URL has another scheme (or none: a relative link) makes Telegram
# refuse the whole message, so it is rendered as plain text instead.
_LINK_SCHEMES = frozenset({"http", "https", "tg"})

_SPOILER_TAGS = frozenset({"<tg-spoiler>", "</tg-spoiler>"})
#: Where a dropped link's target is still worth reading: shown after its label.
_SHOWN_SCHEMES = frozenset({"mailto", "tel"})


def _render_config() -> RenderConfig:
    """The library's symbols but an open task's: its default is a *ticked* box (☑), so
    "- [ ] pay the invoice" read as done (found by review)."""
    config = RenderConfig.isolated()
    config.markdown_symbol.task_uncompleted = "\N{BALLOT BOX}"  # ☐
    return config


@dataclass(frozen=True, slots=True)
class Chunk:
    """One Telegram message: ``text`` and its entities as Bot API dicts."""

    text: str
    entities: list[dict[str, Any]] = field(default_factory=list)


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (astral characters count 2)."""
    return _lib_utf16_len(text)


def render_markdown(markdown: str, *, limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    """Render ``markdown`` into Telegram chunks of at most ``limit`` UTF-16 units."""
    _check_limit(limit)
    if not markdown or not markdown.strip():
        return []
    try:
        text, lib_entities = convert(_escape_html(_table_links(markdown)), config=_CONFIG)
    except Exception:  # a renderer bug must not lose the reply
        log.warning("markdown conversion failed; sending plain text", exc_info=True)
        return plain_chunks(markdown, limit=limit)
    entities: list[dict[str, Any]] = []
    addresses: list[tuple[int, str]] = []
    for entity in lib_entities:
        if _keep_entity(entity.type, entity.url):
            entities.append(entity.to_dict())
        elif (address := _address(entity.url)) is not None:
            addresses.append((entity.offset + entity.length, f" ({address})"))
    text, entities = _inserted(text, entities, addresses)
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return split_text(text, entities, limit=limit)


def _address(url: str | None) -> str | None:
    """What a link Telegram cannot carry points to, when that is worth reading as text:
    an e-mail address, a phone number (until 2026-12-06 "[support](mailto:…)" showed
    "support" and nothing else; found by review)."""
    scheme, _, rest = (url or "").partition(":")
    rest = rest.split("?", 1)[0].strip()
    return rest if scheme.lower() in _SHOWN_SCHEMES and rest else None


def _inserted(
    text: str, entities: list[dict[str, Any]], pieces: list[tuple[int, str]]
) -> tuple[str, list[dict[str, Any]]]:
    """``pieces`` (UTF-16 offset, text) put into ``text``; the entities after each move on,
    those around it grow."""
    for at, piece in sorted(pieces, reverse=True):
        units = _utf16_table(text)
        index = bisect.bisect_left(units, at)
        text = text[:index] + piece + text[index:]
        grow = utf16_len(piece)
        for entity in entities:
            if entity["offset"] >= at:
                entity["offset"] += grow
            elif entity["offset"] + entity["length"] > at:
                entity["length"] += grow
    return text, entities


_CONFIG = _render_config()


def plain_chunks(text: str, *, limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    """Split plain ``text`` (no entities) with the same rules as ``render_markdown``."""
    return split_text(text, [], limit=limit)


def split_text(
    text: str, entities: Sequence[dict[str, Any]], *, limit: int = TELEGRAM_LIMIT
) -> list[Chunk]:
    """Split already-rendered ``text`` + Bot API ``entities`` into chunks."""
    _check_limit(limit)
    if not text or not text.strip():
        return []
    units = _utf16_table(text)
    to_index = _index_of_offset(units)
    spans = []  # (start index, end index, entity) in Python string indices
    for entity in entities:
        start = to_index(entity["offset"])
        end = to_index(entity["offset"] + entity["length"])
        if start is None or end is None or end <= start:
            continue  # not on a character boundary or empty: Telegram would refuse it
        spans.append((start, end, entity))
    blocked = _blocked_cuts(len(text), units, spans, limit)

    chunks: list[Chunk] = []
    start = 0
    while start < len(text):
        cut = _choose_cut(text, units, blocked, start, limit)
        chunk = _make_chunk(text, units, spans, start, cut)
        if chunk is not None:
            chunks.append(chunk)
        start = cut
    return chunks


def progress_text(lines: Sequence[str], *, limit: int = TELEGRAM_LIMIT) -> str:
    """The body of an in-place progress message: the last ``lines`` that fit ``limit``.

    When earlier lines are left out the body starts with a ``…`` line; a single line
    longer than the limit is cut and ends with ``…``.
    """
    _check_limit(limit)
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        cost = utf16_len(line) + (1 if kept else 0)
        if used + cost > limit:
            break
        kept.append(line)
        used += cost
    if len(kept) == len(lines):
        return "\n".join(reversed(kept))
    if not kept:  # the last line alone is too long: keep its beginning
        return cut_utf16(lines[-1], limit)
    marker = "…"
    while kept and used + utf16_len(marker) + 1 > limit:
        used -= utf16_len(kept.pop()) + (1 if kept else 0)
    if not kept:
        return cut_utf16(lines[-1], limit)
    return "\n".join([marker, *reversed(kept)])


# --- internals -----------------------------------------------------------------------


def _check_limit(limit: int) -> None:
    if limit < 2:
        raise ValueError(f"limit must be at least 2 UTF-16 units, got {limit}")


def cut_utf16(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` UTF-16 units, ending with ``…`` when cut."""
    if utf16_len(text) <= limit:
        return text
    units = _utf16_table(text)
    end = max(i for i, u in enumerate(units) if u <= limit - 1)
    return text[:end] + "…"


def _table_links(markdown: str) -> str:
    """A link in a table cell as its words and its address: a table is drawn as
    preformatted text, where "[guide](https://…)" showed "guide" alone (until 2026-12-07;
    found by review). The parser says where each link of a cell is (byte offsets)."""
    if "|" not in markdown or "]" not in markdown:
        return markdown  # no table with a link (and no parse to pay for)
    source = markdown.encode("utf-8")
    rewrites: list[tuple[int, int, bytes]] = []
    tables, link, inner = 0, None, []
    for event, span in pyromark.events_with_range(markdown, options=STANDARD_OPTIONS):
        start, end = span["start"], span["end"]
        if isinstance(event, dict) and "Start" in event:
            opened = event["Start"]
            if isinstance(opened, dict) and "Table" in opened:
                tables += 1
            elif tables and isinstance(opened, dict) and "Link" in opened:
                link, inner = (start, end, str(opened["Link"].get("dest_url") or "")), []
            elif link is not None:
                inner.append((start, end))
        elif isinstance(event, dict) and "End" in event:
            if event["End"] == "Table":
                tables -= 1
            elif event["End"] == "Link" and link is not None:
                # The label as written (its escapes kept: a "\|" stays in its cell).
                label = source[inner[0][0] : inner[-1][1]].strip() if inner else b""
                address = link[2].encode("utf-8")
                shown = label + b" (" + address + b")" if label and label != address else address
                rewrites.append((link[0], link[1], shown))
                link = None
        elif link is not None:
            inner.append((start, end))
    for start, end, shown in reversed(rewrites):
        source = source[:start] + shown + source[end:]
    return source.decode("utf-8")


def _escape_html(markdown: str) -> str:
    """Backslash-escape ``<`` in raw HTML so the text is shown, not silently dropped.

    telegramify-markdown drops inline HTML (``<T>`` in prose) and whole HTML blocks.
    The parser (pyromark, the one telegramify-markdown uses) says where the HTML is;
    ``<tg-spoiler>`` tags, which telegramify-markdown understands, are kept.
    """
    if "<" not in markdown:
        return markdown  # no HTML to keep visible (and no parse to pay for)
    source = markdown.encode("utf-8")
    escapes: list[int] = []  # byte offsets of '<' to escape
    for event, source_range in pyromark.events_with_range(markdown, options=STANDARD_OPTIONS):
        if not isinstance(event, dict):
            continue
        html = event.get("InlineHtml")
        if html is None:
            html = event.get("Html")
            if html is None:
                continue
        elif html.strip().lower() in _SPOILER_TAGS:
            continue
        start, end = source_range["start"], source_range["end"]
        escapes.extend(i for i in range(start, end) if source[i] == 0x3C)  # '<'
    if not escapes:
        return markdown
    out = bytearray()
    previous = 0
    for i in sorted(set(escapes)):
        out += source[previous:i] + b"\\"
        previous = i
    out += source[previous:]
    return out.decode("utf-8")


def _keep_entity(kind: str, url: str | None) -> bool:
    if kind != "text_link":
        return True
    if not url:
        return False
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return False
    return scheme in _LINK_SCHEMES


def _utf16_table(text: str) -> list[int]:
    """``table[i]`` is the UTF-16 offset of ``text[i]``; ``table[len(text)]`` the total."""
    if len(text.encode("utf-16-le")) == 2 * len(text):  # no astral character: i is i
        return list(range(len(text) + 1))
    table = [0] * (len(text) + 1)
    total = 0
    for i, ch in enumerate(text):
        table[i] = total
        total += 2 if ord(ch) > 0xFFFF else 1
    table[len(text)] = total
    return table


def _index_of_offset(units: list[int]) -> Callable[[int], int | None]:
    """The string index at a UTF-16 offset (None: inside a surrogate pair or beyond)."""
    if units[-1] == len(units) - 1:  # no astral character
        return lambda offset: offset if 0 <= offset < len(units) else None
    return {u: i for i, u in enumerate(units)}.get


def _blocked_cuts(
    length: int, units: list[int], spans: Iterable[tuple[int, int, Any]], limit: int
) -> bytearray:
    """``blocked[i]`` is set when a cut before ``text[i]`` would split a fitting entity."""
    blocked = bytearray(length + 1)
    for start, end, _ in spans:
        if units[end] - units[start] <= limit:
            blocked[start + 1 : end] = b"\x01" * (end - start - 1)
    return blocked


def _choose_cut(text: str, units: list[int], blocked: bytearray, start: int, limit: int) -> int:
    budget = units[start] + limit
    if units[len(text)] <= budget:
        return len(text)
    # The last index whose offset fits (units ascend): the furthest a cut may go.
    hard = min(bisect_right(units, budget, lo=start) - 1, len(text))
    if hard == start:  # cannot happen with limit >= 2, kept for safety
        return start + 1
    for separator in ("\n\n", "\n", " "):  # after a paragraph, a line, a word
        cut = _last_cut_after(text, blocked, start, hard, separator)
        if cut is not None:
            return cut  # a whitespace-only piece is dropped later; progress is made
    cut = blocked.rfind(0, start + 1, hard + 1)  # a hard cut outside entities that fit
    return cut if cut > start else hard  # every position blocked: split even a fitting one


def _last_cut_after(
    text: str, blocked: bytearray, start: int, hard: int, separator: str
) -> int | None:
    """The largest cut ``i`` in ``start < i <= hard``, not blocked, right after
    ``separator`` (which may begin before ``start``)."""
    lowest = max(0, start - len(separator) + 1)
    end = hard
    while (found := text.rfind(separator, lowest, end)) >= 0:
        cut = found + len(separator)
        if cut <= start:
            return None
        if not blocked[cut]:
            return cut
        end = cut - 1  # the next occurrence ends before this cut
    return None


def _make_chunk(
    text: str,
    units: list[int],
    spans: Iterable[tuple[int, int, dict[str, Any]]],
    start: int,
    end: int,
) -> Chunk | None:
    piece = text[start:end]
    body = piece.lstrip("\r\n").rstrip()
    if not body:
        return None
    start += len(piece) - len(piece.lstrip("\r\n"))
    end = start + len(body)
    base = units[start]
    entities = []
    for ent_start, ent_end, entity in spans:
        lo, hi = max(ent_start, start), min(ent_end, end)
        if lo >= hi:
            continue
        part = dict(entity)
        part["offset"] = units[lo] - base
        part["length"] = units[hi] - units[lo]
        entities.append(part)
    return Chunk(body, entities)
