"""Markdown (as models write it) into Slack's mrkdwn, from markdown-it-py's token stream.

mrkdwn has *bold*, _italic_, ~strike~, `code`, code blocks, ``<url|text>`` links and ``>``
quotes; no headings (a heading is a bold line), no lists (lines with "•" or "1."), no
tables (a table is a code block with aligned columns: its cells stay readable and line
up). Every character of the model's text is escaped (``&``, ``<``, ``>``), inside code
too: the model can never ping ``<!channel>`` or ``<@U…>`` nor forge a link. Only http(s)
and mailto URLs become links. Emphasis against a letter (``a**b**c``) gets a zero-width
space, where Slack would otherwise show the stars.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from bot.platform.chunks import in_code_block

__all__ = ["code_block", "escape", "to_mrkdwn"]

#: No indented code blocks: a long answer is cut into messages before each is converted,
#: and a part that began with a nested list's indented line showed it as code (until
#: 2026-12-07; found by review). Models fence their code.
_PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("code")
_SAFE_LINK = re.compile(r"^(https?://|mailto:)", re.IGNORECASE)
_MARKS = {"strong": "*", "em": "_", "s": "~"}
_ZWSP = "\u200b"
_BULLETS = ("•", "◦", "▪")


#: One line that Markdown gives no meaning to (no character that starts a construct, no
#: list or block start, no edge whitespace) is mrkdwn as it stands; parsing it costs more
#: than the rest of the reply's rendering (a short answer, ~0.1 ms cold).
_SYNTAX = re.compile(r"[\\`*_~\[\]<>&#|=+\-\t\r\n\f\v\x00-\x08\x0e-\x1f\x7f]|^\d{1,9}[.)]")


def to_mrkdwn(markdown: str, references: dict[str, Any] | None = None) -> str:
    """``markdown`` as mrkdwn; never raises (what it cannot parse it shows as text).
    ``references``: the link definitions of the whole reply this is a part of
    (``bot.platform.chunks.link_definitions``)."""
    if markdown and markdown == markdown.strip() and _SYNTAX.search(markdown) is None:
        return markdown
    return _parsed(markdown, references)


def _parsed(markdown: str, references: dict[str, Any] | None = None) -> str:
    if not markdown.strip():
        return ""
    try:
        tokens = _PARSER.parse(markdown, {"references": dict(references)} if references else {})
    except Exception:  # markdown-it is robust; a plain, escaped text is the floor
        return escape(markdown)
    return _Blocks().render(tokens).strip("\n")


def escape(text: str) -> str:
    """Slack's three escapes: what the model writes stays text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_within(text: str, limit: int) -> str:
    """``text`` escaped in at most ``limit`` characters, cut (``…``) before an escape,
    never inside one (a cut after escaping left ``&am`` on screen)."""
    shown = escape(text)
    if len(shown) <= limit:
        return shown
    kept, used = [], 0
    for char in text:
        part = escape(char)
        if used + len(part) > limit - 1:
            break
        kept.append(part)
        used += len(part)
    return "".join(kept) + "…"


def code_block(code: str) -> str:
    """``code`` as a code block: ``` cannot be escaped inside one, so a zero-width space
    between the backticks of each run of three or more keeps the code from closing it (a
    Markdown example in a ```` fence closed the block early, the rest shown formatted,
    until 2026-12-06)."""
    return f"```\n{in_code_block(escape(code))}\n```"


def _url(href: str) -> str:
    """A URL inside ``<…|…>``: nothing in it may end the link early."""
    return href.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")


class _Blocks:
    """Block tokens into lines: quotes and list items prefix theirs."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._quote = 0
        self._lists: list[list[int]] = []  # per open list: [ordered (0/1), next number]
        self._marker: str | None = None  # the current item's marker, for its first line

    def render(self, tokens: Sequence[Token]) -> str:
        index = 0
        while index < len(tokens):
            index = self._step(tokens, index)
        return "\n".join(self._lines)

    def _step(self, tokens: Sequence[Token], index: int) -> int:
        token = tokens[index]
        kind = token.type
        if kind in ("paragraph_open", "heading_open"):
            inline = tokens[index + 1]
            text = _inline(inline.children or [], plain=kind == "heading_open")
            if kind == "heading_open" and text.strip():
                text = f"*{text.strip()}*"
            self._block(text)
            if not token.hidden:
                self._gap()
            return index + 3
        if kind in ("fence", "code_block"):
            self._block(code_block(token.content.rstrip("\n")))
            self._gap()
        elif kind == "html_block":
            self._block(escape(token.content.rstrip("\n")))
            self._gap()
        elif kind == "hr":
            self._block("――――――――")
            self._gap()
        elif kind in ("bullet_list_open", "ordered_list_open"):
            start = token.attrGet("start")
            number = int(start) if isinstance(start, str | int) and str(start).isdigit() else 1
            self._lists.append([int(kind == "ordered_list_open"), number])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            self._lists.pop()
            if not self._lists:
                self._gap()
        elif kind == "list_item_open":
            current = self._lists[-1]
            if current[0]:
                self._marker = f"{current[1]}. "
                current[1] += 1
            else:
                self._marker = _BULLETS[(len(self._lists) - 1) % len(_BULLETS)] + " "
        elif kind == "list_item_close":
            self._marker = None
        elif kind == "blockquote_open":
            self._quote += 1
        elif kind == "blockquote_close":
            if self._lines and self._lines[-1] == ">" * self._quote:
                self._lines.pop()  # the quote's last gap: the quote ends here
            self._quote -= 1
            self._gap()
        elif kind == "table_open":
            return self._table(tokens, index)
        return index + 1

    def _block(self, text: str) -> None:
        depth = max(0, len(self._lists) - 1)
        indent = "    " * depth
        for number, line in enumerate(text.split("\n")):
            if self._marker is not None and number == 0:
                head = indent + self._marker
                self._marker = None
            elif self._lists:
                head = indent + "   "
            else:
                head = ""
            quote = "> " * self._quote
            self._lines.append((quote + head + line).rstrip() or quote.rstrip())

    def _gap(self) -> None:
        if self._lists or (self._lines and self._lines[-1] in ("", ">" * self._quote)):
            return
        self._lines.append(">" * self._quote)

    def _table(self, tokens: Sequence[Token], index: int) -> int:
        """A table as a code block with aligned columns (mrkdwn has no tables)."""
        rows: list[list[str]] = []
        while index < len(tokens) and tokens[index].type != "table_close":
            token = tokens[index]
            if token.type == "tr_open":
                rows.append([])
            elif token.type == "inline" and rows:
                rows[-1].append(_plain(token.children or []))
            index += 1
        widths = [max(len(row[c]) for row in rows if c < len(row)) for c in range(_columns(rows))]
        lines = [
            "  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip() for row in rows
        ]
        if len(lines) > 1:
            lines.insert(1, "  ".join("-" * w for w in widths))
        self._block(code_block("\n".join(lines)))
        self._gap()
        return index + 1


def _columns(rows: list[list[str]]) -> int:
    return max((len(row) for row in rows), default=0)


def _plain(children: Sequence[Token]) -> str:
    """An inline's text without marks (a table cell, inside a code block)."""
    parts: list[str] = []
    for token in children:
        if token.type in ("text", "code_inline", "html_inline"):
            parts.append(token.content)
        elif token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif token.type == "image":
            parts.append(token.content or str(token.attrGet("src") or ""))
    return "".join(parts)


def _inline(children: Sequence[Token], *, plain: bool = False) -> str:
    """Inline tokens as mrkdwn; ``plain``: without emphasis marks (inside a bold heading)."""
    out: list[str] = []
    index = 0
    while index < len(children):
        token = children[index]
        kind = token.type
        if kind == "text":
            out.append(escape(token.content))
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "code_inline":
            out.append(f"`{escape(token.content)}`")
        elif kind == "html_inline":
            out.append(escape(token.content))
        elif kind.endswith("_open") and kind[:-5] in _MARKS:
            if not plain:
                out.append(_Mark(_MARKS[kind[:-5]], opening=True))
        elif kind.endswith("_close") and kind[:-6] in _MARKS:
            if not plain:
                out.append(_Mark(_MARKS[kind[:-6]], opening=False))
        elif kind == "link_open":
            end = _closing(children, index)
            out.append(_link(str(token.attrGet("href") or ""), children[index + 1 : end]))
            index = end
        elif kind == "image":
            out.append(_link(str(token.attrGet("src") or ""), [], alt=token.content))
        index += 1
    return _joined(out)


def _closing(children: Sequence[Token], index: int) -> int:
    for end in range(index + 1, len(children)):
        if children[end].type == "link_close":
            return end
    return len(children) - 1


def _link(href: str, inner: Sequence[Token], alt: str = "") -> str:
    text = _plain(inner) if inner else alt
    if not _SAFE_LINK.match(href):
        shown = escape(text)
        return f"{shown} ({escape(href)})" if href and href != text else shown
    if not text or text == href:
        return f"<{_url(href)}>"
    return f"<{_url(href)}|{escape(text)}>"


class _Mark(str):
    """An emphasis mark, placed once its neighbours are known."""

    opening: bool

    def __new__(cls, mark: str, *, opening: bool) -> _Mark:
        made = super().__new__(cls, mark)
        made.opening = opening
        return made


def _joined(parts: list[str]) -> str:
    """Marks against a letter or digit get a zero-width space on that side: Slack formats
    ``*b*`` only where it starts and ends at a word's edge."""
    out: list[str] = []
    for index, part in enumerate(parts):
        if isinstance(part, _Mark):
            if part.opening:
                before = "".join(out)[-1:]
                out.append((_ZWSP if before.isalnum() else "") + part)
            else:
                after = next((p for p in parts[index + 1 :] if p), "")[:1]
                out.append(part + (_ZWSP if after.isalnum() else ""))
        else:
            out.append(part)
    return "".join(out)
