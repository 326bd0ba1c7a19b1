"""How every surface shows a gated call: the command, a compact diff, or the arguments.

The preview itself (what the call would do) is computed by the turn: ``engine.tools.preview``.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from engine.tools.preview import ApprovalPreview

__all__ = ["CallDisplay", "compact_diff", "display_call"]


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
    lines (``summary``), else the JSON."""
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
