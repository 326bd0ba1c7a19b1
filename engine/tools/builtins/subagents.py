"""``execute_subtask{agent_id, prompt}``: hand a self-contained task to a task agent.

The turn engine runs the sub-agent itself (one frame deeper, same lock and /stop); this
class gives the model the schema. Root agents of conversations use ``execute_task`` mode
``sync`` instead; the handler offers this one to sub-agents below the depth limit and to
background sessions.
"""

from __future__ import annotations

from typing import Any

from engine.tools.base import ToolError
from engine.tools.builtins._common import BuiltinTool, object_schema
from engine.tools.protocols import ToolCategory, ToolContext

__all__ = ["SUBTASK_TOOL", "ExecuteSubtask"]

SUBTASK_TOOL = "execute_subtask"


class ExecuteSubtask(BuiltinTool):
    name = SUBTASK_TOOL
    description = (
        "Give a self-contained task to a task agent and get its answer back. Agents: "
        "'researcher' (reads the workspace, changes nothing), 'generalist' (full tools). "
        "The prompt must stand on its own. Several calls in one step run in parallel."
    )
    category = ToolCategory.SUBAGENT

    def __init__(self) -> None:
        self.parameters = object_schema(
            {
                "agent_id": {"type": "string", "description": "researcher or generalist."},
                "prompt": {"type": "string", "description": "The complete task."},
            },
            ["agent_id", "prompt"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError(f"{self.name} can only run inside a conversation turn")
