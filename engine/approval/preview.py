"""What a human is asked to approve: the call's full arguments, made concrete.

For a file write the old and the predicted new content; for ``execute_cmd`` the command
and the directory it runs in. A preview that cannot be computed (the file is binary,
the edit does not apply) is ``None`` and the arguments alone are shown.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.tools.base import ToolError
from engine.tools.workspace import Workspace

__all__ = ["ApprovalPreview", "CallDisplay", "compact_diff", "display_call", "preview_call"]

# A preview is for a human's eyes; a file larger than this is described, not shown.
MAX_PREVIEW_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class ApprovalPreview:
    """``kind`` is ``file`` (path, old → new) or ``command`` (command, workdir)."""

    kind: str
    path: str | None = None
    old_content: str | None = None
    new_content: str | None = None
    command: str | None = None
    workdir: str | None = None


def preview_call(
    workspace: Workspace, name: str, args: dict[str, Any], cwd: Path | None = None
) -> ApprovalPreview | None:
    try:
        if name == "execute_cmd":
            return _command(workspace, args, cwd)
        if name == "write_file":
            path = workspace.resolve(args["path"], cwd=cwd)
            return _file(workspace, path, _read(path), str(args["content"]))
        if name == "edit_file":
            path = workspace.resolve(args["path"], cwd=cwd)
            old_text = _read(path)
            if old_text is None or str(args["old"]) not in old_text:
                return None
            new_text = old_text.replace(str(args["old"]), str(args["new"]), 1)
            return _file(workspace, path, old_text, new_text)
    except (ToolError, KeyError, OSError, UnicodeDecodeError):
        return None
    return None


def _command(workspace: Workspace, args: dict[str, Any], cwd: Path | None) -> ApprovalPreview:
    workdir = workspace.resolve(str(args.get("workdir") or "."), cwd=cwd)
    return ApprovalPreview(
        kind="command", command=str(args.get("command", "")), workdir=str(workdir)
    )


def _file(workspace: Workspace, path: Path, old_text: str | None, new_text: str) -> ApprovalPreview:
    return ApprovalPreview(
        kind="file",
        path=workspace.relative(path),
        old_content=old_text,
        new_content=new_text,
    )


def _read(path: Path) -> str | None:
    """The current text, ``None`` for a file that does not exist yet."""
    if not path.exists():
        return None
    if not path.is_file() or path.stat().st_size > MAX_PREVIEW_BYTES:
        raise ToolError("not previewable")
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class CallDisplay:
    """What every surface shows of a gated call: ``content`` whole, never cut."""

    label: str  # "Command", "Diff" or "Arguments"
    content: str
    language: str  # "bash", "diff" or "json"
    path: str | None = None  # the file of a diff
    new_file: bool = False
    workdir: str | None = None  # where a command runs


def display_call(name: str, args: dict[str, Any], preview: ApprovalPreview | None) -> CallDisplay:
    """The command for ``execute_cmd``, a compact diff for a file write, else the JSON."""
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
