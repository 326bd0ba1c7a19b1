"""Scratchpad and todo tools against an in-memory scratchpad."""

from __future__ import annotations

from typing import Any

import pytest

from engine.tools.base import ToolError
from engine.tools.builtins.notes import UpdateScratchpad, WriteTodos
from engine.tools.protocols import ToolContext
from tests.engine.tools.conftest import FakeScratchpad


async def test_update_scratchpad_sets_and_replaces_a_note(
    ctx: ToolContext, scratchpad: FakeScratchpad
) -> None:
    tool = UpdateScratchpad()

    assert await tool.run({"key": "db", "value": "postgres 16"}, ctx) == (
        "saved scratchpad key 'db' (11 chars)"
    )
    await tool.run({"key": "db", "value": "postgres 17"}, ctx)

    assert scratchpad.notes == {"db": "postgres 17"}


async def test_update_scratchpad_with_empty_value_deletes(
    ctx: ToolContext, scratchpad: FakeScratchpad
) -> None:
    scratchpad.notes["db"] = "postgres"

    result = await UpdateScratchpad().run({"key": "db", "value": "  "}, ctx)

    assert result == "deleted scratchpad key 'db'"
    assert scratchpad.notes == {}


async def test_update_scratchpad_refuses_bad_keys_and_oversized_values(ctx: ToolContext) -> None:
    tool = UpdateScratchpad(max_value_chars=10)

    with pytest.raises(ToolError, match="'key' is empty"):
        await tool.run({"key": " ", "value": "x"}, ctx)
    with pytest.raises(ToolError, match="'key' must be one line"):
        await tool.run({"key": "a\nb", "value": "x"}, ctx)
    with pytest.raises(ToolError, match="value is 11 chars; the limit is 10"):
        await tool.run({"key": "k", "value": "x" * 11}, ctx)
    with pytest.raises(ToolError, match="missing required argument 'value'"):
        await tool.run({"key": "k"}, ctx)


async def test_write_todos_stores_a_markdown_checklist(
    ctx: ToolContext, scratchpad: FakeScratchpad
) -> None:
    todos = [
        {"content": "Read the spec", "status": "completed"},
        {"content": "Write the\nparser", "status": "in_progress"},
        {"content": "Ship it", "status": "pending"},
    ]

    result = await WriteTodos().run({"todos": todos}, ctx)

    checklist = "- [x] Read the spec\n- [ ] Write the parser (in progress)\n- [ ] Ship it"
    assert scratchpad.notes["todos"] == checklist
    assert result == f"3 todos: 1 completed, 1 in progress, 1 pending\n{checklist}"


async def test_write_todos_replaces_and_an_empty_list_clears(
    ctx: ToolContext, scratchpad: FakeScratchpad
) -> None:
    tool = WriteTodos()
    await tool.run({"todos": [{"content": "a", "status": "pending"}]}, ctx)
    await tool.run({"todos": [{"content": "a", "status": "completed"}]}, ctx)
    assert scratchpad.notes["todos"] == "- [x] a"

    assert await tool.run({"todos": []}, ctx) == "todo list cleared"
    assert "todos" not in scratchpad.notes


@pytest.mark.parametrize(
    ("todos", "message"),
    [
        (
            [{"content": "a", "status": "done"}],
            "write_todos: todos[0].status must be one of pending, in_progress, completed; "
            "got 'done'",
        ),
        ([{"content": "a"}], "todos[0].status must be one of"),
        ([{"content": "", "status": "pending"}], "todos[0].content must be a non-empty string"),
        (
            [{"content": "ok", "status": "pending"}, "just a string"],
            "todos[1] must be an object with 'content' and 'status'",
        ),
        ([{"content": "a", "status": "pending", "id": 1}], "todos[0] has unknown field(s) 'id'"),
    ],
)
async def test_write_todos_rejects_bad_items_and_stores_nothing(
    todos: list[Any], message: str, ctx: ToolContext, scratchpad: FakeScratchpad
) -> None:
    with pytest.raises(ToolError) as err:
        await WriteTodos().run({"todos": todos}, ctx)

    assert message in str(err.value)
    assert scratchpad.notes == {}


async def test_write_todos_wants_an_array(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="argument 'todos' must be an array, got string"):
        await WriteTodos().run({"todos": "- [ ] a"}, ctx)


async def test_write_todos_bounds_the_list(ctx: ToolContext) -> None:
    todos = [{"content": str(i), "status": "pending"} for i in range(4)]

    with pytest.raises(ToolError, match="4 todos; at most 3"):
        await WriteTodos(max_items=3).run({"todos": todos}, ctx)
