"""The tools' seams: what a tool is, and what the turn hands it to run in.

A tool plugs in by having this shape (built-ins, MCP tools, the scheduler's tools, a
platform's interface tools); the session plugs its scratchpad and process log into
``ToolContext``. Implementations do not subclass these.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["DescribesCalls", "ProcessLog", "Scratchpad", "Tool", "ToolCategory", "ToolContext"]


class ToolCategory(StrEnum):
    """What a tool touches; a session bypass may be scoped to one category."""

    FILESYSTEM = "Filesystem"
    SHELL = "Shell"
    SUBAGENT = "Subagent"
    INTROSPECTION = "Introspection"
    CONFIG = "Config"


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
    #: The message that made the call: what was said before it is what it answers (a
    #: message that joined the turn later is not; memory's tools act for its speaker).
    asked_in: int | None = None


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


@runtime_checkable
class DescribesCalls(Protocol):
    """A tool whose calls a human approves best in its own words (``execute_task``: the
    schedule and what the job may do, one line each)."""

    def describe_call(self, args: dict[str, Any]) -> str | None:
        """Plain lines for the approval card; ``None``: show the arguments."""
        ...
