"""Model text as safe HTML, rendered on the server: the page never parses model text.

CommonMark (with tables, strikethrough and task lists) by ``pyromark``, written out here
from its events rather than by its own renderer, which passes raw HTML through: every
text is escaped, raw HTML is shown as text, tags and attributes come from this module
alone, a link keeps only an ``http``, ``https`` or ``mailto`` target (anything else is
text), and an image becomes a link to it (the page fetches nothing the model names).
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import pyromark

__all__ = ["render_markdown"]

log = logging.getLogger(__name__)

_OPTIONS = (
    pyromark.Options.ENABLE_TABLES
    | pyromark.Options.ENABLE_STRIKETHROUGH
    | pyromark.Options.ENABLE_TASKLISTS
)
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+-]{1,32}")
_SIMPLE = {
    "Paragraph": ("<p>", "</p>\n"),
    "Emphasis": ("<em>", "</em>"),
    "Strong": ("<strong>", "</strong>"),
    "Strikethrough": ("<del>", "</del>"),
    "Item": ("<li>", "</li>\n"),
    "TableRow": ("<tr>", "</tr>\n"),
    "HtmlBlock": ("<p>", "</p>\n"),  # raw HTML is shown as text, in a paragraph of its own
}
_HEAD_END = "</tr></thead>\n"
_MARKS = {"SoftBreak": "\n", "HardBreak": "<br>\n", "Rule": "<hr>\n"}


def render_markdown(text: str) -> str:
    """``text`` (Markdown) as HTML that is safe to insert into the page; a text this
    module fails on is shown as it is, escaped (every answer and history page goes
    through here: one such text must not make a conversation unreadable)."""
    writer = _Writer()
    try:
        for event in pyromark.events(text, options=_OPTIONS):
            writer.event(event)
    except Exception:
        log.exception("Markdown of %d characters could not be rendered; shown as text", len(text))
        return f"<pre>{_escape(text)}</pre>\n"
    return "".join(writer.out)


class _Writer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self._closers: list[str] = []  # what each open Start ends with
        self._in_head = False

    def event(self, event: Any) -> None:
        if isinstance(event, str):
            self.out.append(_MARKS.get(event, ""))
            return
        ((kind, value),) = event.items()
        match kind:
            case "Start":
                self._start(value)
            case "End":
                closer = self._closers.pop() if self._closers else ""
                if closer == _HEAD_END:
                    self._in_head = False
                self.out.append(closer)
            case "Text" | "Html" | "InlineHtml" | "InlineMath" | "DisplayMath":
                self.out.append(_escape(str(value)))
            case "Code":
                self.out.append(f"<code>{_escape(str(value))}</code>")
            case "TaskListMarker":
                checked = " checked" if value else ""
                self.out.append(f'<input type="checkbox" disabled{checked}> ')
            case "FootnoteReference":
                self.out.append(f"[{_escape(str(value))}]")

    def _start(self, tag: Any) -> None:
        name, detail = (tag, None) if isinstance(tag, str) else next(iter(tag.items()))
        opened, closer = self._open(name, detail)
        self.out.append(opened)
        self._closers.append(closer)

    def _open(self, name: str, detail: Any) -> tuple[str, str]:
        if name in _SIMPLE:
            return _SIMPLE[name]
        match name:
            case "Heading":
                level = str(detail.get("level", "H1"))[1:] if isinstance(detail, dict) else "1"
                level = level if level in "123456" and len(level) == 1 else "6"
                return f"<h{level}>", f"</h{level}>\n"
            case "BlockQuote":
                return "<blockquote>\n", "</blockquote>\n"
            case "CodeBlock":
                info = detail.get("Fenced", "") if isinstance(detail, dict) else ""
                # Split on any whitespace: an info string of only a no-break space is
                # empty after it (``split()[0]`` raised there until 2026-12-07, and the
                # answer silenced the tab and its history; found by review).
                words = str(info).split()
                language = words[0] if words else ""
                if _LANGUAGE.fullmatch(language):
                    return f'<pre><code class="language-{language}">', "</code></pre>\n"
                return "<pre><code>", "</code></pre>\n"
            case "List":
                if isinstance(detail, int) and not isinstance(detail, bool):
                    start = f' start="{detail}"' if detail != 1 else ""
                    return f"<ol{start}>\n", "</ol>\n"
                return "<ul>\n", "</ul>\n"
            case "Table":
                return "<table>\n", "</table>\n"
            case "TableHead":
                self._in_head = True
                return "<thead><tr>", _HEAD_END
            case "TableCell":
                return ("<th>", "</th>") if self._in_head else ("<td>", "</td>")
            case "Link" | "Image":
                url = str(detail.get("dest_url", "")) if isinstance(detail, dict) else ""
                if not url.lower().startswith(_SAFE_SCHEMES):
                    return "", ""  # the link's text stays, as text
                href = html.escape(url, quote=True)
                rel = ' rel="noopener noreferrer nofollow" target="_blank"'
                return f'<a href="{href}"{rel}>', "</a>"
        return "", ""


def _escape(text: str) -> str:
    return html.escape(text, quote=True)
