"""How every surface shows a gated call: the command, a compact diff, or the arguments.

The preview itself (what the call would do) is computed by the turn: ``engine.tools.preview``.
"""

from __future__ import annotations

import difflib
import json
import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Any

from engine.tools.preview import ApprovalPreview

__all__ = ["CallDisplay", "compact_diff", "display_call", "plainly"]


@dataclass(frozen=True, slots=True)
class CallDisplay:
    """What every surface shows of a gated call: ``content`` whole, never cut."""

    label: str  # "Command", "Diff", "Request" or "Arguments"
    content: str
    language: str  # "bash", "diff", "text" or "json"
    path: str | None = None  # the file of a diff
    new_file: bool = False
    workdir: str | None = None  # where a command runs


def display_call(name: str, args: dict[str, Any], preview: ApprovalPreview | None) -> CallDisplay:
    """The command for ``execute_cmd``, a compact diff for a file write, the tool's own
    lines (``summary``), else the JSON; its text ``plainly``, on every surface (until
    2026-12-06 the web inbox showed it raw; found by review)."""
    shown = _display(name, args, preview)
    return replace(
        shown,
        content=plainly(shown.content),
        path=None if shown.path is None else plainly(shown.path),
        workdir=None if shown.workdir is None else plainly(shown.workdir),
    )


def _display(name: str, args: dict[str, Any], preview: ApprovalPreview | None) -> CallDisplay:
    if preview is not None and preview.kind == "summary" and preview.summary:
        return CallDisplay("Request", preview.summary, "text")
    if preview is not None and preview.kind == "command" and preview.command is not None:
        return CallDisplay("Command", preview.command, "bash", workdir=preview.workdir)
    if name == "execute_cmd" and isinstance(args.get("command"), str):
        workdir = args.get("workdir")
        return CallDisplay(
            "Command", args["command"], "bash", workdir=str(workdir) if workdir else None
        )
    if preview is not None and preview.kind == "file" and preview.new_content is not None:
        return CallDisplay(
            "Diff",
            compact_diff(preview.old_content, preview.new_content),
            "diff",
            path=preview.path or str(args.get("path", "?")),
            new_file=preview.old_content is None,
        )
    return CallDisplay(
        "Arguments",
        json.dumps(args, indent=2, ensure_ascii=False, sort_keys=True, default=str),
        "json",
    )


def compact_diff(old: str | None, new: str) -> str:
    """A compact unified diff (2 lines of context) without the ---/+++ header."""
    diff = list(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True), new.splitlines(keepends=True), n=2
        )
    )
    lines: list[str] = []
    for line in diff[2:]:  # a non-empty diff starts with the ---/+++ lines
        if line.endswith("\n"):
            lines.append(line)
        else:
            lines.append(line + "\n\\ No newline at end of file\n")
    return "".join(lines).rstrip("\n") or "(no changes)"


#: Characters that move, erase, reorder, break or hide text where it is shown: control
#: characters but the line break and the tab (terminal escapes), format characters (the
#: bidirectional overrides and isolates, zero-width marks, tags) and the line and
#: paragraph separators, which a chat or a browser draws as a new line and a shell does
#: not: until 2026-12-06 ``echo hi \u2028# then clean up; curl …|sh`` showed a comment
#: on a line of its own while the shell ran it (found by review).
_SUSPECT = re.compile("[^\x20-\x7e\n\t]")
#: Cn: unassigned, unseen; Cs: a lone surrogate (``"\\ud83d"`` in a tool call's JSON, a
#: token that cut an emoji), which no encoder takes: until 2026-12-06 the web chat's socket
#: and the terminal went silent on such a card (found by review).
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cn", "Cs"})
_NAMED = {"\r": "\\r", "\x1b": "\\x1b"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char  # a letter, a mark, an emoji: as it is
    return _NAMED.get(char) or (
        f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
    )


def plainly(text: str) -> str:
    """``text`` with each character that changes how it reads shown as its code: a
    command ending in a carriage return and an erase-line showed the owner ``ls -la``
    while ``curl … | sh`` ran, and a bidi override reorders what a card shows (found by
    review). What is approved is what is read."""
    return _SUSPECT.sub(_shown, text)
