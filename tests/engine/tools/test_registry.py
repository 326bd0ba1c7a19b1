"""The registry: unique names, ordered views per level, and argument validation."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.tools.base import ToolError, tool_schema
from engine.tools.builtins import builtin_tools
from engine.tools.protocols import ToolCategory, ToolContext
from engine.tools.registry import ToolRegistry, is_visible, validate_args
from engine.tools.workspace import Workspace

WRITE_FILE_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "content": {"type": "string"},
        "mode": {"type": "string", "enum": ["overwrite", "append"]},
        "retries": {"type": "integer"},
        "ratio": {"type": "number"},
        "force": {"type": "boolean"},
        "tags": {"type": "array"},
        "meta": {"type": "object"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}


@dataclass
class FakeTool:
    name: str
    description: str = "a fake"
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    category: ToolCategory = ToolCategory.INTROSPECTION
    root_agent_only: bool = False
    sub_agents_only: bool = False
    interactive_only: bool = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return "ok"


def test_tools_are_kept_in_registration_order() -> None:
    registry = ToolRegistry([FakeTool("b"), FakeTool("a")])
    registry.register(FakeTool("c"))

    assert registry.names == ["b", "a", "c"]
    assert [tool.name for tool in registry] == ["b", "a", "c"]
    assert len(registry) == 3
    assert "a" in registry


def test_get_returns_the_tool_or_none() -> None:
    tool = FakeTool("read_file")
    registry = ToolRegistry([tool])

    assert registry.get("read_file") is tool
    assert registry.get("nope") is None


def test_a_second_tool_with_the_same_name_is_refused() -> None:
    registry = ToolRegistry([FakeTool("read_file")])

    with pytest.raises(ValueError, match="a tool named 'read_file' is already registered"):
        registry.register(FakeTool("read_file", description="an impostor"))

    assert registry.get("read_file").description == "a fake"  # the first one stays


def test_duplicate_names_in_the_constructor_are_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        ToolRegistry([FakeTool("x"), FakeTool("x")])


def test_schemas_are_openai_tool_entries_in_order() -> None:
    registry = ToolRegistry([FakeTool("a"), FakeTool("b", category=ToolCategory.CONFIG)])

    assert registry.schemas() == [tool_schema(registry.get("a")), tool_schema(registry.get("b"))]
    assert registry.schemas()[0] == {
        "type": "function",
        "function": {"name": "a", "description": "a fake", "parameters": {"type": "object"}},
    }
    no_config = registry.schemas(lambda t: t.category is not ToolCategory.CONFIG)
    assert [entry["function"]["name"] for entry in no_config] == ["a"]


def test_filtered_views_leave_the_original_alone() -> None:
    registry = ToolRegistry([FakeTool("a"), FakeTool("b"), FakeTool("c")])

    assert registry.without(["b", "unknown"]).names == ["a", "c"]
    assert registry.filtered(lambda t: t.name != "a").names == ["b", "c"]
    assert registry.names == ["a", "b", "c"]


def test_level_views_apply_the_visibility_flags() -> None:
    registry = ToolRegistry(
        [
            FakeTool("everyone"),
            FakeTool("root_only", root_agent_only=True),
            FakeTool("subs_only", sub_agents_only=True),
            FakeTool("chat_only", interactive_only=True),
        ]
    )

    root_chat = registry.for_agent(depth=0, is_interactive=True)
    sub_background = registry.for_agent(depth=2, is_interactive=False)

    assert root_chat.names == ["everyone", "root_only", "chat_only"]
    assert sub_background.names == ["everyone", "subs_only"]
    assert not is_visible(FakeTool("x", interactive_only=True), depth=0, is_interactive=False)


def test_builtin_names_are_unique_and_exactly_the_contract(tmp_path: Path) -> None:
    registry = ToolRegistry(builtin_tools(Workspace(tmp_path)))

    assert registry.names == [
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "execute_cmd",
        "update_scratchpad",
        "write_todos",
        "ask_user_clarification",
        "read_notification",
        "execute_subtask",
    ]
    for tool in registry:
        assert tool.parameters["type"] == "object"
        assert tool.parameters["additionalProperties"] is False
        for prop in tool.parameters["properties"].values():
            assert prop["description"]
        assert not tool.sub_agents_only
        assert tool.root_agent_only == (tool.name == "read_notification")
        # Only a conversation can answer a question: background sessions never see it.
        assert tool.interactive_only == (tool.name == "ask_user_clarification")


def test_builtin_arguments_follow_the_design(tmp_path: Path) -> None:
    registry = ToolRegistry(builtin_tools(Workspace(tmp_path)))

    def args(name: str) -> tuple[list[str], list[str]]:
        params = registry.get(name).parameters
        return list(params["properties"]), params["required"]

    assert args("execute_cmd") == (["command", "workdir", "timeout_s"], ["command"])
    assert args("read_file") == (["path"], ["path"])
    assert args("write_file") == (["path", "content"], ["path", "content"])
    assert args("edit_file") == (["path", "old", "new"], ["path", "old", "new"])
    assert args("list_files") == (["path"], [])
    assert args("update_scratchpad") == (["key", "value"], ["key", "value"])
    assert args("write_todos") == (["todos"], ["todos"])


# --- validate_args ---------------------------------------------------------------------

WRITE = FakeTool("write_file", parameters=WRITE_FILE_PARAMS)


def test_valid_arguments_pass() -> None:
    validate_args(
        WRITE,
        {
            "path": "a.txt",
            "content": "",
            "mode": "append",
            "retries": 3,
            "ratio": 0.5,
            "force": True,
            "tags": [],
            "meta": {},
            "note": None,
        },
    )


def test_missing_required_argument() -> None:
    with pytest.raises(ToolError) as err:
        validate_args(WRITE, {"content": "x"})

    assert str(err.value) == "write_file: missing required argument 'path'"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("path", 42, "write_file: argument 'path' must be a string, got integer"),
        ("retries", "3", "write_file: argument 'retries' must be an integer, got string"),
        ("retries", 1.5, "write_file: argument 'retries' must be an integer, got number"),
        ("ratio", True, "write_file: argument 'ratio' must be a number, got boolean"),
        ("force", "yes", "write_file: argument 'force' must be a boolean, got string"),
        ("tags", "a,b", "write_file: argument 'tags' must be an array, got string"),
        ("meta", [], "write_file: argument 'meta' must be an object, got array"),
        ("note", 1, "write_file: argument 'note' must be a string or null, got integer"),
        ("path", None, "write_file: argument 'path' must be a string, got null"),
    ],
)
def test_wrong_type_is_named(key: str, value: Any, message: str) -> None:
    args = {"path": "a.txt", "content": "x", key: value}

    with pytest.raises(ToolError) as err:
        validate_args(WRITE, args)

    assert str(err.value) == message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"ratio": NaN}', "argument 'ratio' must be a finite number, got nan"),
        ('{"ratio": 1e999}', "argument 'ratio' must be a finite number, got inf"),
        ('{"retries": -Infinity}', "argument 'retries' must be a finite number, got -inf"),
    ],
)
def test_what_no_tool_can_act_on_is_refused_before_the_gate(raw: str, message: str) -> None:
    """A ``"timeout_s": NaN`` killed an approved command at once (found by review on
    2026-12-06)."""
    args = {"path": "a", "content": "", **json.loads(raw)}
    with pytest.raises(ToolError, match=re.escape(f"write_file: {message}")):
        validate_args(WRITE, args)


def test_integral_float_counts_as_integer() -> None:
    validate_args(WRITE, {"path": "a", "content": "", "retries": 3.0})


def test_null_for_an_optional_argument_means_not_given() -> None:
    validate_args(WRITE, {"path": "a", "content": "", "retries": None, "mode": None})


def test_enum_is_checked() -> None:
    with pytest.raises(ToolError, match="argument 'mode' must be one of 'overwrite', 'append'"):
        validate_args(WRITE, {"path": "a", "content": "", "mode": "truncate"})


def test_unknown_argument_is_refused_when_the_schema_is_closed() -> None:
    with pytest.raises(ToolError) as err:
        validate_args(WRITE, {"path": "a", "content": "", "contents": "typo"})

    assert str(err.value).startswith("write_file: unknown argument 'contents' (expected: path,")


def test_unknown_argument_is_allowed_when_the_schema_is_open() -> None:
    validate_args(FakeTool("open"), {"anything": 1})


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"mode": {"enum": 5}}},
        {"type": "object", "properties": {"mode": {"type": 7}}},
        {"type": "object", "properties": {"mode": {"type": [{"x": 1}]}}},
        {"type": "object", "properties": ["mode"]},
        {"type": "object", "required": "mode"},
        {"type": "object", "required": [5]},
        "not a schema",
    ],
)
def test_a_servers_malformed_schema_is_left_unchecked_never_a_crash(schema: Any) -> None:
    """An MCP server's "enum": 5 raised TypeError, which failed the turn (found by
    review): what is not the shape read here goes unchecked (the server checks)."""
    validate_args(FakeTool("mcp__x__pick", parameters=schema), {"mode": 1})


def test_arguments_must_be_an_object() -> None:
    with pytest.raises(ToolError, match="open: arguments must be a JSON object, got array"):
        validate_args(FakeTool("open"), [1, 2])
