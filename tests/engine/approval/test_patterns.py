"""Tool and path patterns: matching, validation, canonical paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.approval.patterns import (
    PathRefused,
    canonical_path,
    path_matches,
    tool_matches,
    validate_path_pattern,
    validate_tool_pattern,
)
from engine.tools.workspace import Workspace


@pytest.mark.parametrize(
    ("pattern", "tool", "expected"),
    [
        ("execute_cmd", "execute_cmd", True),
        ("execute_cmd", "execute_cmd2", False),
        ("mcp__gmail__*", "mcp__gmail__send", True),
        ("mcp__gmail__*", "mcp__gmailx__send", False),
        ("*", "anything", True),
        ("@fs_read", "read_file", True),
        ("@fs_read", "list_files", True),
        ("@fs_read", "write_file", False),
        ("@fs_write", "edit_file", True),
        ("@fs_write", "read_file", False),
        ("@fs_any", "write_file", True),
        ("@fs_any", "execute_cmd", False),
    ],
)
def test_tool_patterns(pattern: str, tool: str, expected: bool) -> None:
    assert tool_matches(validate_tool_pattern(pattern), tool) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("memory/*", "memory", True),
        ("memory/*", "memory/notes.md", True),
        ("memory/*", "memory/a/b.md", True),
        ("memory/*", "memory-secrets/x", False),
        ("memory/*", "memoryx", False),
        ("notes.md", "notes.md", True),
        ("notes.md", "notes.md.bak", False),
        ("log*", "logs/a", True),
        ("*", "anything/at/all", True),
        ("data/", "data", True),
        # Written with ``./`` or ``//``: matched as the canonical path (a deny rule so
        # written did nothing until 2026-12-06).
        ("./private/*", "private/key", True),
        ("private//*", "private/key", True),
        ("./private/key", "private/key", True),
        ("./*", "anything", True),
        ("./", ".", True),
    ],
)
def test_path_patterns(pattern: str, path: str, expected: bool) -> None:
    assert path_matches(validate_path_pattern(pattern), path) is expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("mcp__*__send", "may only end"),
        ("**", "may only end"),
        ("@fs_exec", "unknown class"),
        ("read file", "whitespace"),
    ],
)
def test_invalid_tool_pattern_refused(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_tool_pattern(pattern)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "empty"),
        ("/etc/*", "relative"),
        ("~/x", "relative"),
        ("../outside/*", r"\.\."),
        ("data/../secrets/*", r"\.\."),
        ("a/*/b", "may only end"),
    ],
)
def test_invalid_path_pattern_refused(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_path_pattern(pattern)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path / "ws")
    (ws.root / "secrets").mkdir()
    (ws.root / "secrets" / "key").write_text("k")
    (ws.root / "memory").mkdir()
    return ws


def test_canonical_path_resolves_dots_and_symlinks(workspace: Workspace) -> None:
    (workspace.root / "docs").mkdir()
    os.symlink(workspace.root / "memory", workspace.root / "docs" / "mem")
    assert canonical_path(workspace, "docs/../memory/a.md") == "memory/a.md"
    assert canonical_path(workspace, "docs/mem/a.md") == "memory/a.md"
    assert canonical_path(workspace, ".") == "."
    assert canonical_path(workspace, "a.md", cwd=workspace.root / "memory") == "memory/a.md"


def test_symlink_into_secrets_is_refused(workspace: Workspace) -> None:
    os.symlink(workspace.root / "secrets", workspace.root / "innocent")
    with pytest.raises(PathRefused, match="secrets"):
        canonical_path(workspace, "innocent/key")


@pytest.mark.parametrize("raw", ["../outside.txt", "memory/../../x", "/etc/passwd", "", None])
def test_escaping_or_bad_paths_are_refused(workspace: Workspace, raw: object) -> None:
    with pytest.raises(PathRefused):
        canonical_path(workspace, raw)
