"""A Markdown answer cut into messages of at most ``limit`` characters, in order.

For platforms that render Markdown themselves and cap a message's length (Discord: 2,000
characters). Cuts fall on the best boundary that fits: a blank line between paragraphs
(when that keeps at least half a message), else a line end, else a space, else anywhere.
A cut inside a fenced code block closes the fence at the end of that message and opens
it again, with its language, at the start of the next, so every message renders as code
what was code. A cut inside a table repeats its header and delimiter rows at the start
of the next message, where the table goes on, so every part renders as a table (until
2026-12-07 the parts after the first were raw pipe text; found by review). Telegram
renders entities, not Markdown, and has its own splitter
(``bot/telegram/rendering/render.py``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

__all__ = ["MIN_LIMIT", "in_code_block", "link_definitions", "split_markdown"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
#: Discord's: only backticks, and at any indent (it draws ``` as code wherever it stands:
#: a fence indented under a list item was cut open until 2026-12-07; found by review).
_BACKTICK_FENCE = re.compile(r"^[ \t]*(`{3,})(.*)$")
#: The shortest limit that fits a reopened fence, its closing and some text.
MIN_LIMIT = 32
#: A fence is reopened as its marks and language, no longer than this: the whole opening
#: line was copied to the top of every later message until 2026-12-06, and one of 2,000
#: characters left no room for text, so the split never ended (found by review).
_MAX_REOPENED = 24
_ZWJ = "\u200d"
_ZWSP = "\u200b"
#: What ends a code block on Slack and Discord, whatever fence opened it.
_FENCE_RUN = re.compile(r"`{3,}")
#: A table's delimiter row (``| --- | :-: |``), which makes the row before it a header.
_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
Table = tuple[str, str]  # a table's header and delimiter rows


def link_definitions(markdown: str) -> dict[str, Any] | None:
    """The answer's ``[1]: https://…`` definitions (markdown-it's ``references``), which
    each part renders with: cut into messages, "[the docs][1]" in one part and its
    definition in another lost the address (until 2026-12-07; found by review). ``None``
    when it has none: most answers, which are not parsed for it."""
    if "]:" not in markdown:
        return None
    from markdown_it import MarkdownIt  # only for an answer that defines a link

    env: dict[str, Any] = {}
    try:
        MarkdownIt("commonmark").parse(markdown, env)
    except Exception:  # a part is rendered without them then
        return None
    return env.get("references")


def in_code_block(code: str) -> str:
    """``code`` that nothing in it can end the code block it is put in: ``` cannot be
    escaped there, so a zero-width space parts each run of three or more backticks."""
    return _FENCE_RUN.sub(lambda run: _ZWSP.join(run.group()), code)


def split_markdown(text: str, limit: int, *, tildes: bool = True, tables: bool = True) -> list[str]:
    """``text`` in messages of at most ``limit`` characters (none for blank text).
    ``tildes``: whether a ``~~~`` line opens code, as in CommonMark; Discord draws only
    backtick fences, and took a ``~~~`` line for one: it lost track of the real code block
    after it and cut it open (found by review on 2026-12-06). ``tables``: whether the
    platform draws tables (Discord does not: its parts need no header again)."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit: at least {MIN_LIMIT} characters, got {limit}")
    if not text.strip():
        return []
    if len(text) <= limit:
        return [text]
    fences = _FENCE if tildes else _BACKTICK_FENCE
    out = _Messages(limit, fences, any_run_closes=not tildes, tables=tables)
    for line in text.split("\n"):
        out.add_line(line)
    out.flush()
    return out.done


class _Messages:
    """The messages so far and the one being filled, with the fence open at its end."""

    def __init__(
        self, limit: int, fences: re.Pattern[str], *, any_run_closes: bool, tables: bool
    ) -> None:
        self.limit = limit
        self.opens = fences  # the lines that open or close code
        self.any_run_closes = any_run_closes  # Discord's: any ``` ends the block it is in
        self.repeat_tables = tables
        self.done: list[str] = []
        self.lines: list[str] = []
        self.fences: list[str | None] = []  # the fence open after each of ``lines``
        self.fence: str | None = None  # open at the end of ``lines``
        self.tables: list[Table | None] = []  # the table open after each of ``lines``
        self.table: Table | None = None  # open at the end of ``lines``
        self.cut_table: Table | None = None  # the last message ended inside this table
        self.reopened = 0  # leading lines that only reopen a fence or a table

    def size(self, lines: list[str]) -> int:
        return sum(len(line) for line in lines) + max(len(lines) - 1, 0)

    def fits(self, extra: str, fence_after: str | None) -> bool:
        joined = self.size([*self.lines, extra])
        return joined + _closing_cost(fence_after) <= self.limit

    def add_line(self, line: str) -> None:
        self._reopen_table(line)
        after = _after(line, self.fence, self.opens, self.any_run_closes)
        table = self._table_after(line) if after is None and self.fence is None else None
        if self.fits(line, after):
            self._append(line, after, table)
            return
        for paragraphs in (True, False):  # the last paragraph moves on with it, or not
            if len(self.lines) > self.reopened:
                self._end_message(paragraphs=paragraphs)
                self._reopen_table(line)
                if self.fits(line, after):
                    self._append(line, after, table)
                    return
        # A line longer than a message: cut it where it fits, the fence state unchanged.
        rest = line
        while not self.fits(rest, after):
            room = self.limit - self.size([*self.lines, ""]) - _closing_cost(self.fence)
            take = _cut_point(rest, room)
            self._append(rest[:take], self.fence)
            rest = rest[take:]
            self._end_message(paragraphs=False)
        self._append(rest, after, table)

    def _append(self, line: str, fence: str | None, table: Table | None = None) -> None:
        self.lines.append(line)
        self.fences.append(fence)
        self.fence = fence
        self.tables.append(table)
        self.table = table

    def _table_after(self, line: str) -> Table | None:
        """The table open after ``line``: one goes on while its rows do, and a delimiter
        row under a row of cells opens one."""
        if not self.repeat_tables or "|" not in line:
            return None
        if self.table is not None:
            return self.table
        previous = self.lines[-1] if self.lines else None
        if previous is not None and "|" in previous and _DELIMITER.match(line):
            return (previous, line)
        return None

    def _reopen_table(self, line: str) -> None:
        """The header and delimiter rows of the table the last message was cut in, at the
        top of this one, when ``line`` goes on with that table."""
        table, self.cut_table = self.cut_table, None
        if table is None or self.lines or "|" not in line:
            return
        for row in table:
            self._append(row, None, table)
        self.reopened = len(self.lines)

    def _end_message(self, *, paragraphs: bool = True) -> None:
        """Send what is filled (its last paragraph may move on to the next message)."""
        carried: list[str] = []
        carried_fences: list[str | None] = []
        carried_tables: list[Table | None] = []
        cut = self._paragraph_cut() if paragraphs and self.fence is None else None
        if cut is not None:
            carried, carried_fences = self.lines[cut + 1 :], self.fences[cut + 1 :]
            carried_tables = self.tables[cut + 1 :]
            del self.lines[cut:], self.fences[cut:], self.tables[cut:]
            self.fence = self.fences[-1] if self.fences else None
            self.table = self.tables[-1] if self.tables else None
        self.flush()
        for line, fence, table in zip(carried, carried_fences, carried_tables, strict=True):
            self._append(line, fence, table)

    def _paragraph_cut(self) -> int | None:
        """The last blank line outside code that keeps at least half the message."""
        half = self.size(self.lines) // 2
        for index in range(len(self.lines) - 1, self.reopened, -1):
            if self.lines[index].strip() or self.fences[index] is not None:
                continue
            if self.size(self.lines[:index]) >= half:
                return index
            return None
        return None

    def flush(self) -> None:
        fence = self.fence
        body = "\n".join(self.lines).rstrip()
        if fence is not None:
            body += "\n" + _closing(fence)
        if len(self.lines) > self.reopened and body.strip():
            self.done.append(body)
        self.cut_table = self.table if fence is None else None
        self.lines, self.fences, self.tables, self.reopened = [], [], [], 0
        self.table = None
        if fence is not None and len(fence) + _closing_cost(fence) < self.limit // 2:
            # The code goes on in the next message (at a limit too small for the fence and
            # some code, it goes on as plain text rather than never ending).
            self._append(fence, fence)
            self.reopened = 1
        else:
            self.fence = None


def _closing_cost(fence: str | None) -> int:
    return 0 if fence is None else len(_closing(fence)) + 1


def _after(
    line: str, fence: str | None, fences: re.Pattern[str], any_run_closes: bool
) -> str | None:
    """The fence open after ``line`` (``None``: outside code), ``fences`` the lines that
    open or close code; ``any_run_closes``: any of them ends an open block (Discord's)."""
    match = fences.match(line)
    if match is None:
        return fence
    if fence is None:
        return _opened(match.group(1), match.group(2))
    if any_run_closes:
        return None
    # Closed by a fence of the same character, at least as long, with no info string.
    opener = _FENCE.match(fence)
    assert opener is not None
    marks, rest = match.group(1), match.group(2)
    if marks[0] == opener.group(1)[0] and len(marks) >= len(opener.group(1)) and not rest.strip():
        return None
    return fence


def _opened(marks: str, info: str) -> str | None:
    """The fence a line opens, as it is reopened: its marks and language. ``None`` for a
    backtick line whose info string holds a backtick: CommonMark's inline span
    (```` ```ls -la``` lists it ````), which opens no block."""
    if marks[0] == "`" and "`" in info:
        return None
    words = info.split()
    return (marks + (words[0] if words else ""))[:_MAX_REOPENED]


def _closing(fence: str) -> str:
    opener = _FENCE.match(fence)
    assert opener is not None
    return opener.group(1)


def _cut_point(piece: str, room: int) -> int:
    """Where to cut a piece longer than ``room``: after its last space past the middle,
    else at ``room``, stepped back off a character drawn as one with the one before it
    (an emoji's joiner, skin tone or variation, an accent, a flag's second half: until
    2026-12-06 a long line of emoji was cut inside them; found by review). At least one
    character, so a cut always advances."""
    room = max(room, 1)
    space = piece.rfind(" ", 0, room)
    if space > room // 2:
        return space + 1
    cut = room
    while cut > room // 2 and _drawn_with_previous(piece, cut):
        cut -= 1
    return cut if cut > room // 2 else room


def _drawn_with_previous(text: str, at: int) -> bool:
    """Whether ``text[at]`` is drawn as one with ``text[at - 1]`` (a cut between them
    breaks what a reader sees as one character)."""
    if not 0 < at < len(text):
        return False
    here, before = text[at], text[at - 1]
    if before == _ZWJ or here == _ZWJ or unicodedata.category(here) in ("Mn", "Mc", "Me"):
        return True
    code = ord(here)
    if 0xFE00 <= code <= 0xFE0F or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F:
        return True  # a variation selector, a skin tone, a subdivision flag's tag
    if _is_regional(here) and _is_regional(before):  # a flag is two: which half is this?
        run = at
        while run > 0 and _is_regional(text[run - 1]):
            run -= 1
        return (at - run) % 2 == 1
    return False


def _is_regional(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF
