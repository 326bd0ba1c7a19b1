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


class ProcessLog(Protocol):
    """Where a tool records the process group its command runs in (for crash recovery)."""

    async def started(self, process_group: int, process_start: str | None) -> None: ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may know about the turn that called it."""

    session_id: int
    stack_id: int
    agent_id: str
    depth: int
    working_directory: Path
    scratchpad: Scratchpad
    #: Set for the one call being run when it is not safe to repeat (see ``rerun_safe``).
    processes: ProcessLog | None = None


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


def rerun_safe(tool: Tool) -> bool:
    """Whether running ``tool`` again after a crash interrupted it can do no harm.

    Read-only and idempotent tools say so with ``rerun_safe = True`` and are re-run from
    intent. Any other call that had started is reported to the model as interrupted
    (it may or may not have had its effect), never run a second time. The default is
    the cautious one: a tool that does not say is not safe to repeat.
    """
    return bool(getattr(tool, "rerun_safe", False))


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
