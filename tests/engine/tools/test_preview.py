"""The approval card's preview: a tool that describes its calls, and one whose
description fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
