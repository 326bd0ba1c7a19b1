"""Tool and path patterns of approval rules, and path canonicalization for policy checks.

Tool patterns: an exact name (``execute_cmd``), a trailing-``*`` glob (``mcp__gmail__*``, ``*``)
or a class token (``@fs_read``, ``@fs_write``, ``@fs_any``).

Path patterns are workspace-relative: ``*`` alone matches any path; ``dir/*`` matches ``dir``
itself and everything below it (but not ``dir-x/...``); ``prefix*`` is a plain prefix; anything
else must match exactly. Paths are compared canonical (``..`` and symlinks resolved).
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from engine.tools.base import ToolError
from engine.tools.workspace import Workspace

__all__ = [
    "FS_CLASSES",
    "FS_READ_TOOLS",
    "FS_WRITE_TOOLS",
    "PathRefused",
    "canonical_path",
    "is_fs_tool",
    "literal_path_pattern",
    "path_matches",
    "tool_matches",
    "validate_path_pattern",
    "validate_tool_pattern",
]

FS_READ_TOOLS = frozenset({"read_file", "list_files"})
FS_WRITE_TOOLS = frozenset({"write_file", "edit_file"})
FS_CLASSES: dict[str, frozenset[str]] = {
    "@fs_read": FS_READ_TOOLS,
    "@fs_write": FS_WRITE_TOOLS,
    "@fs_any": FS_READ_TOOLS | FS_WRITE_TOOLS,
}


class PathRefused(Exception):
    """A tool path that escapes the workspace or lies in ``secrets/``: always denied."""


def is_fs_tool(tool_name: str) -> bool:
    """Whether ``tool_name`` is a file tool whose ``path`` argument rules may match."""
    return tool_name in FS_CLASSES["@fs_any"]


def _check_glob(pattern: str, what: str) -> None:
    star = pattern.find("*")
    if star != -1 and star != len(pattern) - 1:
        raise ValueError(f"{what} pattern {pattern!r}: '*' may only end a pattern")


def validate_tool_pattern(pattern: str) -> str:
    """Return ``pattern`` stripped, or raise ``ValueError`` saying what is wrong with it."""
    pattern = (pattern or "").strip()
    if not pattern:
        raise ValueError("tool pattern is empty")
    if any(c.isspace() for c in pattern):
        raise ValueError(f"tool pattern {pattern!r} contains whitespace")
    if pattern.startswith("@"):
        if pattern not in FS_CLASSES:
            known = ", ".join(sorted(FS_CLASSES))
            raise ValueError(f"tool pattern {pattern!r}: unknown class (known: {known})")
        return pattern
    _check_glob(pattern, "tool")
    return pattern


def validate_path_pattern(pattern: str) -> str:
    """Return ``pattern`` normalized (no trailing ``/``), or raise ``ValueError``: a pattern
    as a person types it into a rule (a leading ``~`` or a ``\\`` means a home folder or a
    Windows path there, never the workspace)."""
    pattern = (pattern or "").strip()
    if pattern.startswith("~") or "\\" in pattern:
        raise ValueError(
            f"path pattern {pattern!r} must be relative to the workspace (no leading '/' or '~')"
        )
    return literal_path_pattern(pattern)


def literal_path_pattern(pattern: str) -> str:
    """``pattern`` as the program writes one (a job's grant: a canonical workspace path),
    its characters taken as they are: ``~draft.txt`` is a file of that name. Normalized
    (no trailing ``/``), or ``ValueError``."""
    if not pattern:
        raise ValueError("path pattern is empty")
    if "\0" in pattern:
        raise ValueError("path pattern contains a NUL byte")
    if pattern.startswith("/"):
        raise ValueError(
            f"path pattern {pattern!r} must be relative to the workspace (no leading '/' or '~')"
        )
    _check_glob(pattern, "path")
    parts = pattern.split("/")
    if ".." in parts:
        raise ValueError(f"path pattern {pattern!r} must not contain '..'")
    # Written as the gate's canonical paths are: ``./private/*`` and ``private//*`` were
    # stored as written and never matched a path (a deny rule that did nothing, until
    # 2026-12-06).
    return "/".join(part for part in parts if part not in ("", ".")) or "."


def tool_matches(pattern: str, tool_name: str) -> bool:
    """Whether the (valid) tool ``pattern`` matches ``tool_name``."""
    if pattern in FS_CLASSES:
        return tool_name in FS_CLASSES[pattern]
    if pattern.endswith("*"):
        return tool_name.startswith(pattern[:-1])
    return tool_name == pattern


def path_matches(pattern: str, path: str) -> bool:
    """Whether the (valid) path ``pattern`` matches the canonical workspace-relative ``path``."""
    if pattern == "*":
        return True
    if pattern.endswith("/*"):
        base = pattern[:-2]
        return path == base or path.startswith(base + "/")
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return path == pattern


def canonical_path(workspace: Workspace, raw: object, *, cwd: Path | None = None) -> str:
    """``raw`` canonicalized by ``workspace`` and made root-relative (``.`` for the root).

    Raises ``PathRefused`` for anything ``Workspace.resolve`` refuses (outside the root, a
    symlink out, ``secrets/``, empty, not a string).
    """
    try:
        resolved = workspace.resolve(raw, cwd=cwd)  # type: ignore[arg-type]
    except ToolError as exc:
        raise PathRefused(str(exc)) from None
    rel = resolved.relative_to(workspace.root).as_posix()
    return posixpath.normpath(rel) if rel else "."
