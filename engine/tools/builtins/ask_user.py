"""``ask_user_clarification{question}``: ask the user and use the answer as the result.

The turn engine runs this call itself (it has to wait for a human and tell the adapter);
this class gives the model its schema and keeps it to interactive sessions.
"""

from __future__ import annotations

from typing import Any

from engine.store.inbox import ASK_USER_TOOL
from engine.tools.base import ToolError
from engine.tools.builtins._common import BuiltinTool, object_schema
from engine.tools.protocols import ToolCategory, ToolContext

__all__ = ["AskUserClarification"]


class AskUserClarification(BuiltinTool):
    name = ASK_USER_TOOL
    rerun_safe = True  # asking again is harmless
    description = (
        "Ask the user a question and wait for the answer, which becomes this call's result. "
        "Use it when you cannot proceed without a decision or a fact only the user has; "
        "do not use it for confirmations the approval prompts already handle."
    )
    category = ToolCategory.INTROSPECTION
    interactive_only = True

    def __init__(self) -> None:
        self.parameters = object_schema(
            {"question": {"type": "string", "description": "One clear question."}},
            ["question"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError(f"{self.name} can only run inside a conversation turn")
