"""Note tools: update_scratchpad and write_todos.

Both write to the session scratchpad (``ctx.scratchpad``), the blackboard shown to
every agent of the session each round. ``write_todos`` keeps its list there under the
key ``todos`` as a markdown checklist, so the plan survives across rounds and turns.
"""

from __future__ import annotations

from typing import Any

from engine.tools.base import ToolError
from engine.tools.builtins._common import BuiltinTool, object_schema
from engine.tools.protocols import ToolCategory, ToolContext

__all__ = ["TODOS_KEY", "TODO_STATUSES", "UpdateScratchpad", "WriteTodos", "render_todos"]

TODOS_KEY = "todos"
TODO_STATUSES = ("pending", "in_progress", "completed")


class UpdateScratchpad(BuiltinTool):
    """``update_scratchpad{key, value}``: set a note; an empty value deletes it."""

    name = "update_scratchpad"
    rerun_safe = True  # idempotent: the same value again
    description = (
        "Save a note in the session scratchpad, which every agent of this conversation "
        "sees on every turn. Writing a key again replaces its value; an empty value "
        "deletes the key. Keep notes short: facts, decisions, findings worth keeping."
    )
    category = ToolCategory.INTROSPECTION

    def __init__(self, *, max_key_chars: int = 100, max_value_chars: int = 8_000) -> None:
        self.max_key_chars = max_key_chars
        self.max_value_chars = max_value_chars
        self.parameters = object_schema(
            {
                "key": {"type": "string", "description": "Short name of the note."},
                "value": {
                    "type": "string",
                    "description": "Content of the note; an empty string deletes the key.",
                },
            },
            ["key", "value"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        key = args["key"].strip()
        value: str = args["value"]
        if not key:
            raise ToolError(f"{self.name}: 'key' is empty")
        if len(key) > self.max_key_chars or "\n" in key:
            raise ToolError(
                f"{self.name}: 'key' must be one line of at most {self.max_key_chars} chars"
            )
        if not value.strip():
            await ctx.scratchpad.delete(key)
            return f"deleted scratchpad key '{key}'"
        if len(value) > self.max_value_chars:
            # Refused, not cut: a silently shortened note would mislead every later reader.
            raise ToolError(
                f"{self.name}: value is {len(value)} chars; the limit is "
                f"{self.max_value_chars}. Summarize it, or keep the text in a file."
            )
        await ctx.scratchpad.set(key, value)
        return f"saved scratchpad key '{key}' ({len(value)} chars)"


def render_todos(todos: list[dict[str, str]]) -> str:
    """A markdown checklist; the item in progress is marked so."""
    lines = []
    for todo in todos:
        box = "[x]" if todo["status"] == "completed" else "[ ]"
        suffix = " (in progress)" if todo["status"] == "in_progress" else ""
        lines.append(f"- {box} {todo['content']}{suffix}")
    return "\n".join(lines)


class WriteTodos(BuiltinTool):
    """``write_todos{todos}``: replace the task list, stored as a checklist in the scratchpad."""

    name = "write_todos"
    rerun_safe = True  # idempotent: the whole list again
    description = (
        "Write your task list for multi-step work. Send the whole list every time, each "
        "item with its status (pending, in_progress, completed); it replaces the previous "
        "list. Keep one item in_progress. An empty list clears it."
    )
    category = ToolCategory.INTROSPECTION

    def __init__(self, *, max_items: int = 50, max_content_chars: int = 500) -> None:
        self.max_items = max_items
        self.max_content_chars = max_content_chars
        self.parameters = object_schema(
            {
                "todos": {
                    "type": "array",
                    "description": "The complete task list, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "description": "What to do."},
                            "status": {
                                "type": "string",
                                "enum": list(TODO_STATUSES),
                                "description": "pending, in_progress or completed.",
                            },
                        },
                        "required": ["content", "status"],
                        "additionalProperties": False,
                    },
                }
            },
            ["todos"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        todos = self._validate(args["todos"])
        if not todos:
            await ctx.scratchpad.delete(TODOS_KEY)
            return "todo list cleared"
        checklist = render_todos(todos)
        await ctx.scratchpad.set(TODOS_KEY, checklist)
        counts = {status: 0 for status in TODO_STATUSES}
        for todo in todos:
            counts[todo["status"]] += 1
        summary = (
            f"{len(todos)} todos: {counts['completed']} completed, "
            f"{counts['in_progress']} in progress, {counts['pending']} pending"
        )
        return f"{summary}\n{checklist}"

    def _validate(self, todos: list[Any]) -> list[dict[str, str]]:
        if len(todos) > self.max_items:
            raise ToolError(f"{self.name}: {len(todos)} todos; at most {self.max_items}")
        clean = []
        for index, item in enumerate(todos):
            where = f"{self.name}: todos[{index}]"
            if not isinstance(item, dict):
                raise ToolError(f"{where} must be an object with 'content' and 'status'")
            unknown = sorted(set(item) - {"content", "status"})
            if unknown:
                raise ToolError(f"{where} has unknown field(s) {', '.join(map(repr, unknown))}")
            content, status = item.get("content"), item.get("status")
            if not isinstance(content, str) or not content.strip():
                raise ToolError(f"{where}.content must be a non-empty string")
            if len(content) > self.max_content_chars:
                raise ToolError(
                    f"{where}.content is {len(content)} chars; at most {self.max_content_chars}"
                )
            if status not in TODO_STATUSES:
                raise ToolError(
                    f"{where}.status must be one of {', '.join(TODO_STATUSES)}; got {status!r}"
                )
            # One line per item, or the checklist stops being a checklist.
            clean.append({"content": " ".join(content.split()), "status": status})
        return clean
