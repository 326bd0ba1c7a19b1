"""Shared plumbing of the built-in tools."""

from __future__ import annotations

from typing import Any

from engine.tools.protocols import ToolCategory, ToolContext
from engine.tools.registry import validate_args


class BuiltinTool:
    """Base of the built-ins: the Tool protocol's attributes with every flag off.

    ``run`` validates the arguments against ``parameters`` itself, so a built-in is
    safe to call even by a caller that skipped ``validate_args``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    category: ToolCategory
    root_agent_only: bool = False
    sub_agents_only: bool = False
    interactive_only: bool = False
    #: Safe to run again after a crash interrupted it (read-only or idempotent).
    rerun_safe: bool = False
    #: What it does outlives the turn (a scheduled job and its standing grants): a
    #: session's bypass (⏱ 15 min, 🔄 Session) never covers it, every call asks.
    lasting: bool = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        validate_args(self, args)
        return await self._run(args, ctx)

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A closed JSON-schema object: unknown arguments are refused, not ignored."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
