"""``read_notification``: how background notifications reach the conversational agent.

The hub stores a synthetic call to this tool with the notifications as its result, then
resumes the session. Called by the model itself it has nothing to return: ``[]``.
"""

from __future__ import annotations

from typing import Any

from engine.tools.builtins._common import BuiltinTool, object_schema
from engine.tools.protocols import ToolCategory, ToolContext

__all__ = ["ReadNotification"]


class ReadNotification(BuiltinTool):
    name = "read_notification"
    rerun_safe = True  # read-only
    description = (
        "Read pending notifications from background work (scheduled jobs, watchers). "
        "They are delivered to you automatically; calling this returns what is left, "
        "usually nothing."
    )
    category = ToolCategory.INTROSPECTION
    root_agent_only = True

    def __init__(self) -> None:
        self.parameters = object_schema({}, [])

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return "[]"
