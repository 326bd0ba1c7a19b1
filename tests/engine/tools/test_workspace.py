"""Workspace confinement: every path a tool touches is canonical and inside the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.tools.base import ToolError
from engine.tools.workspace import Workspace


def test_root_is_created_and_canonical(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")

    ws = Workspace(tmp_path / "link" / "ws")

    assert ws.root == (tmp_path / "real" / "ws").resolve()
    assert ws.root.is_dir()


def test_relative_paths_resolve_against_root_or_cwd(workspace: Workspace) -> None:
    (workspace.root / "sub").mkdir()

    assert workspace.resolve("a/b.txt") == workspace.root / "a" / "b.txt"
    assert workspace.resolve("b.txt", cwd=workspace.root / "sub") == workspace.root / "sub/b.txt"
    assert workspace.resolve("sub/../c.txt") == workspace.root / "c.txt"
    assert workspace.resolve(".") == workspace.root


def test_absolute_path_inside_is_accepted(workspace: Workspace) -> None:
    assert workspace.resolve(str(workspace.root / "x.txt")) == workspace.root / "x.txt"


def test_dotdot_escape_is_refused(workspace: Workspace) -> None:
    with pytest.raises(ToolError) as err:
        workspace.resolve("../x")

    assert str(err.value) == f"path '../x' is outside the workspace {workspace.root}"


def test_dotdot_escape_from_a_subdirectory_is_refused(workspace: Workspace) -> None:
    (workspace.root / "sub").mkdir()

    with pytest.raises(ToolError, match="outside the workspace"):
        workspace.resolve("../../etc/passwd", cwd=workspace.root / "sub")


def test_absolute_path_outside_is_refused(workspace: Workspace) -> None:
    with pytest.raises(ToolError, match="path '/etc/passwd' is outside the workspace"):
        workspace.resolve("/etc/passwd")


def test_sibling_with_the_root_as_name_prefix_is_outside(workspace: Workspace) -> None:
    # /tmp/x/workspace-evil starts with the string /tmp/x/workspace but is not under it.
    sibling = str(workspace.root) + "-evil/file"

    with pytest.raises(ToolError, match="outside the workspace"):
        workspace.resolve(sibling)


def test_symlinked_file_pointing_out_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("not yours")
    (workspace.root / "innocent.txt").symlink_to(secret)

    with pytest.raises(ToolError) as err:
        workspace.resolve("innocent.txt")

    assert "outside the workspace" in str(err.value)
    assert f"a symlink leads to {secret}" in str(err.value)


def test_symlinked_directory_pointing_out_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (workspace.root / "docs").symlink_to(outside, target_is_directory=True)

    for path in ("docs", "docs/new-file.txt", "docs/a/b/c"):
        with pytest.raises(ToolError, match="outside the workspace"):
            workspace.resolve(path)


def test_symlink_inside_the_workspace_is_followed(workspace: Workspace) -> None:
    (workspace.root / "real").mkdir()
    (workspace.root / "alias").symlink_to(workspace.root / "real")

    assert workspace.resolve("alias/f.txt") == workspace.root / "real" / "f.txt"


def test_secrets_are_refused_however_they_are_named(workspace: Workspace) -> None:
    (workspace.root / "secrets").mkdir()
    (workspace.root / "keys").symlink_to(workspace.root / "secrets")

    for path in ("secrets", "secrets/token", "docs/../secrets/x", "keys/token"):
        with pytest.raises(ToolError, match="secrets/ is never readable"):
            workspace.resolve(path)


def test_secrets_kept_deeper_in_the_workspace_are_refused(workspace: Workspace) -> None:
    """``secrets`` a symlink to ``config/keys``: its files were readable by either name
    until 2026-12-07 (only the path's first part was compared; found by review)."""
    (workspace.root / "config" / "keys").mkdir(parents=True)
    (workspace.root / "config" / "keys" / "api.key").write_text("sk-SECRET\n")
    (workspace.root / "secrets").symlink_to("config/keys", target_is_directory=True)

    for path in ("secrets/api.key", "config/keys/api.key", "config/keys", "config/../secrets"):
        with pytest.raises(ToolError, match="secrets/ is never readable"):
            workspace.resolve(path)
    assert workspace.resolve("config/other.toml") == workspace.root / "config" / "other.toml"


def test_secrets_are_refused_in_any_case(workspace: Workspace) -> None:
    """On a case-insensitive file system (macOS, Windows, a casefolded directory)
    ``Secrets/key`` opens ``secrets/key``; it was let through, the check comparing names
    as given. Refused on every file system: it never names anything else worth reading."""
    (workspace.root / "secrets").mkdir()
    for path in ("Secrets", "SECRETS/token", "docs/../Secrets/x", "\u017fecrets/token"):
        with pytest.raises(ToolError, match="secrets/ is never readable"):
            workspace.resolve(path)
    assert workspace.resolve("notes/Secrets") == workspace.root / "notes" / "Secrets"


def test_a_file_merely_named_like_secrets_elsewhere_is_fine(workspace: Workspace) -> None:
    assert workspace.resolve("notes/secrets") == workspace.root / "notes" / "secrets"
    assert workspace.resolve("secrets.txt") == workspace.root / "secrets.txt"


def test_empty_path_is_refused(workspace: Workspace) -> None:
    for path in ("", "   "):
        with pytest.raises(ToolError, match="path is empty"):
            workspace.resolve(path)


def test_nul_byte_is_refused(workspace: Workspace) -> None:
    with pytest.raises(ToolError, match="contains a NUL byte"):
        workspace.resolve("a\0b")


def test_cwd_outside_the_workspace_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"working directory .* is outside the workspace"):
        workspace.resolve("x", cwd=tmp_path)


def test_symlink_loop_stays_inside_and_is_left_to_the_open_call(workspace: Workspace) -> None:
    (workspace.root / "loop").symlink_to(workspace.root / "loop")

    resolved = workspace.resolve("loop")

    assert workspace.contains(resolved)
    with pytest.raises(OSError):
        os.stat(resolved)


def test_relative_names_paths_for_messages(workspace: Workspace) -> None:
    assert workspace.relative(workspace.root) == "."
    assert workspace.relative(workspace.root / "a" / "b.txt") == "a/b.txt"
    assert workspace.relative(Path("/elsewhere")) == "/elsewhere"


@pytest.mark.parametrize("path", ["memory/\ud800", "\udfff", "notes/\ud83d.md"])
def test_a_path_with_a_lone_surrogate_is_a_tool_error(workspace: Workspace, path: str) -> None:
    """The model's JSON may carry a lone surrogate (``"\\ud800"``): a ``ToolError`` the
    gate and the tool report, not an exception that ended the turn and every resume."""
    with pytest.raises(ToolError, match="not a name a file can have"):
        workspace.resolve(path)
