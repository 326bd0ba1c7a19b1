"""The approval card's preview: a tool that describes its calls, and one whose
description fails."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from engine.tools.preview import preview_call
from engine.tools.workspace import Workspace


class _Describes:
    def describe_call(self, args: dict[str, Any]) -> str:
        return f"every day at {args['at']}"


class _Broken:
    def describe_call(self, args: dict[str, Any]) -> str:
        raise IsADirectoryError(21, "Is a directory", "/usr/share/zoneinfo/Europe")


def test_a_tool_that_describes_its_calls_is_shown_by_its_words(tmp_path: Path) -> None:
    preview = preview_call(Workspace(tmp_path), "execute_task", {"at": "08:00"}, tool=_Describes())
    assert preview is not None and preview.summary == "every day at 08:00"


def test_a_description_that_fails_leaves_the_card_to_its_arguments(tmp_path: Path) -> None:
    """A scheduled task's time zone "Europe" (a folder) made the description raise inside
    the gate: the turn failed, and the next message with it (found by review)."""
    assert preview_call(Workspace(tmp_path), "execute_task", {}, tool=_Broken()) is None


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write_file", {"path": "notes/t", "content": "x\n"}),
        ("edit_file", {"path": "notes/t", "old": "tok", "new": "x"}),
    ],
)
def test_a_hard_link_to_a_secret_is_never_shown_on_the_card(
    tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    """The file tools refuse a second name of a file in secrets/; the preview read it
    by its path and showed the secret as the diff's old content (found by review on
    2026-12-06)."""
    workspace = Workspace(tmp_path / "workspace")
    (workspace.root / "secrets").mkdir()
    (workspace.root / "secrets" / "token").write_text("tok-S3CR3T\n")
    (workspace.root / "notes").mkdir()
    os.link(workspace.root / "secrets" / "token", workspace.root / "notes" / "t")
    assert preview_call(workspace, tool, args, workspace.root) is None


def test_files_are_previewed_as_they_are_and_a_fifo_is_not_waited_for(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    (tmp_path / "notes.md").write_text("old line\n")
    os.mkfifo(tmp_path / "pipe")
    edit = preview_call(workspace, "edit_file", {"path": "notes.md", "old": "old", "new": "new"})
    assert edit is not None and (edit.old_content, edit.new_content) == ("old line\n", "new line\n")
    new = preview_call(workspace, "write_file", {"path": "fresh.md", "content": "hi"})
    assert new is not None and (new.old_content, new.new_content) == (None, "hi")
    assert preview_call(workspace, "write_file", {"path": "pipe", "content": "x"}) is None
