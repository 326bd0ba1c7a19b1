"""Fixtures shared by the tool tests: a real temp workspace and an in-memory scratchpad."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.tools.protocols import ToolContext
from engine.tools.workspace import Workspace


class FakeScratchpad:
    """The session scratchpad, in a dict."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}

    async def set(self, key: str, value: str) -> None:
        self.notes[key] = value

    async def delete(self, key: str) -> None:
        self.notes.pop(key, None)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "workspace")


@pytest.fixture
def scratchpad() -> FakeScratchpad:
    return FakeScratchpad()


@pytest.fixture
def ctx(workspace: Workspace, scratchpad: FakeScratchpad) -> ToolContext:
    return ToolContext(
        session_id=1,
        stack_id=1,
        agent_id="main",
        depth=0,
        working_directory=workspace.root,
        scratchpad=scratchpad,
    )
