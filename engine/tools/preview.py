"""What a call would do, made concrete for the human asked to approve it.

For a file write the old and the predicted new content; for ``execute_cmd`` the command
and the directory it runs in. A preview that cannot be computed (the file is binary,
the edit does not apply) is ``None`` and the arguments alone are shown. The turn computes
it when it announces a gated call; how a surface shows it is ``engine.approval.preview``.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.tools.base import ToolError
from engine.tools.protocols import DescribesCalls
from engine.tools.workspace import Workspace

log = logging.getLogger(__name__)

__all__ = ["ApprovalPreview", "preview_call"]

# A preview is for a human's eyes; a file larger than this is described, not shown.
MAX_PREVIEW_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class ApprovalPreview:
    """``kind`` is ``file`` (path, old → new), ``command`` (command, workdir) or
    ``summary`` (plain lines the tool wrote for the human: ``DescribesCalls``)."""

    kind: str
    path: str | None = None
    old_content: str | None = None
    new_content: str | None = None
    command: str | None = None
    workdir: str | None = None
    summary: str | None = None


def preview_call(
    workspace: Workspace,
    name: str,
    args: dict[str, Any],
    cwd: Path | None = None,
    tool: object = None,
    *,
    readable: bool = True,
) -> ApprovalPreview | None:
    """What the call would do; ``tool``: the called tool, if it describes its calls;
    ``readable``: whether the rules let the file a write names be read (if not, its card
    shows the call's own arguments only: ``ApprovalPolicy.denies_reading``)."""
    if isinstance(tool, DescribesCalls):
        try:
            summary = tool.describe_call(args)
        except Exception:  # the card goes without it: a description never fails the turn
            log.exception("describing a %s call failed; the card shows its arguments", name)
            return None
        return ApprovalPreview(kind="summary", summary=summary) if summary else None
    try:
        if name == "execute_cmd":
            return _command(workspace, args, cwd)
        if not readable:
            return None
        if name == "write_file":
            path = workspace.resolve(args["path"], cwd=cwd)
            return _file(workspace, path, _read(workspace, path), str(args["content"]))
        if name == "edit_file":
            path = workspace.resolve(args["path"], cwd=cwd)
            old_text = _read(workspace, path)
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


def _read(workspace: Workspace, path: Path) -> str | None:
    """The current text, ``None`` for a file that does not exist yet. Opened as the file
    tools open it (``Workspace.open``): a hard link to a file in ``secrets/`` showed the
    secret on the card until 2026-12-06."""
    try:
        fd = workspace.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: no wait
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PREVIEW_BYTES:
            raise ToolError("not previewable")
        return file.read(MAX_PREVIEW_BYTES + 1).decode("utf-8")
