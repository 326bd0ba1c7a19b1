"""The Tool protocol, the context a tool runs in, and tool errors."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol


class ToolCategory(StrEnum):
    FILESYSTEM = "Filesystem"
    SHELL = "Shell"
    SUBAGENT = "Subagent"
    INTROSPECTION = "Introspection"
    CONFIG = "Config"


class ToolError(Exception):
    """A failure the model should read as the tool's result (status ``failed``)."""


class Scratchpad(Protocol):
    """Session-scoped key/value notes shared by every agent of a session."""

    async def set(self, key: str, value: str) -> None: ...

    async def delete(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may know about the turn that called it."""

    session_id: int
    stack_id: int
    agent_id: str
    depth: int
    working_directory: Path
    scratchpad: Scratchpad


class Tool(Protocol):
    """A callable capability offered to the model."""

    name: str
    description: str
    parameters: dict[str, Any]
    category: ToolCategory
    root_agent_only: bool
    sub_agents_only: bool
    interactive_only: bool

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Run with validated-as-JSON-object ``args``. Raise ``ToolError`` for a failure.

        Cancellation arrives as ``asyncio.CancelledError``; a tool that owns resources
        (a child process) releases them before re-raising.
        """
        ...


def tool_schema(tool: Tool) -> dict[str, Any]:
    """The OpenAI ``tools`` entry for ``tool``."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
