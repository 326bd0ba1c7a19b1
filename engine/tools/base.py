"""What a tool author imports: the tool's seams (``engine.tools.protocols``), its error, and
the helpers over a tool."""

from __future__ import annotations

from typing import Any

from engine.tools.protocols import Tool

__all__ = ["ToolError", "rerun_safe", "tool_schema"]


class ToolError(Exception):
    """A failure the model should read as the tool's result (status ``failed``)."""


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
