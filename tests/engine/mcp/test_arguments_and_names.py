"""Optional nulls dropped before a call, and tool names every endpoint accepts (issue 18/3)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from engine.llm.tool_schemas import portable_schema
from engine.mcp import McpToolSpec, mcp_tool_names
from engine.mcp.arguments import drop_optional_nulls
from engine.mcp.tools import McpTool, mcp_tools
from engine.tools.base import ToolError
from engine.tools.protocols import ToolContext
from engine.tools.registry import ToolRegistry

VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "head": {"type": "number"},
        "since": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "label": {"type": ["string", "null"]},
        "anything": {"description": "no type: null is valid"},
        "options": {
            "type": "object",
            "properties": {
                "depth": {"type": "integer"},
                "mode": {"type": "string"},
                "note": {"type": "string", "nullable": True},
            },
            "required": ["mode"],
        },
        "edits": {
            "type": "array",
            "items": {"$ref": "#/$defs/Edit"},
        },
    },
    "required": ["path"],
    "$defs": {
        "Edit": {
            "type": "object",
            "properties": {"old": {"type": "string"}, "dry": {"type": "boolean"}},
            "required": ["old"],
        }
    },
}


# --- nulls -------------------------------------------------------------------------------


def test_a_null_for_an_optional_number_is_dropped() -> None:
    assert drop_optional_nulls(SCHEMA, {"path": "a", "head": None}) == {"path": "a"}


def test_a_nested_null_in_an_optional_object_property_is_dropped() -> None:
    args = {"path": "a", "options": {"depth": None, "mode": "x"}}
    assert drop_optional_nulls(SCHEMA, args) == {"path": "a", "options": {"mode": "x"}}


def test_nulls_inside_array_items_behind_a_ref_are_dropped() -> None:
    args = {"path": "a", "edits": [{"old": "x", "dry": None}, {"old": None}]}
    assert drop_optional_nulls(SCHEMA, args) == {
        "path": "a",
        "edits": [{"old": "x"}, {"old": None}],  # "old" is required there: kept
    }


@pytest.mark.parametrize("key", ["since", "label", "anything"])
def test_a_null_the_schema_allows_is_kept(key: str) -> None:
    assert drop_optional_nulls(SCHEMA, {"path": "a", key: None}) == {"path": "a", key: None}


def test_a_nullable_nested_property_is_kept_and_a_required_one_too() -> None:
    args = {"path": "a", "options": {"note": None, "mode": None}}
    assert drop_optional_nulls(SCHEMA, args) == args


def test_a_required_property_given_null_is_kept() -> None:
    assert drop_optional_nulls(SCHEMA, {"path": None}) == {"path": None}


def test_unknown_properties_and_a_null_object_are_left_alone() -> None:
    args = {"path": "a", "extra": None, "options": None}
    # "options" is an object that cannot be null: optional, so dropped; "extra" is unknown.
    assert drop_optional_nulls(SCHEMA, args) == {"path": "a", "extra": None}


def test_a_ref_cycle_does_not_recurse_forever() -> None:
    schema = {
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"child": {"$ref": "#/$defs/Node"}, "size": {"type": "integer"}},
                "allOf": [{"$ref": "#/$defs/Node"}],
            }
        },
    }
    args = {"node": {"size": None, "child": {"size": None, "child": None}}}
    assert drop_optional_nulls(schema, args) == {"node": {"child": {}}}


class _Manager:
    """Records the arguments a call would send."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def call(self, server: str, tool: str, args: dict[str, Any]) -> str:
        self.calls.append((server, tool, args))
        return "ok"


class _Pad:
    async def set(self, key: str, value: str) -> None: ...

    async def delete(self, key: str) -> None: ...


CTX = ToolContext(
    session_id=1,
    stack_id=1,
    agent_id="main",
    depth=0,
    working_directory=Path("."),
    scratchpad=_Pad(),
)


def _fanning_out(depth: int) -> dict[str, Any]:
    """``D0 → anyOf[D1, D1] → anyOf[D2, D2] …``: 2^depth paths through ``depth`` definitions."""
    defs: dict[str, Any] = {
        f"D{i}": {"anyOf": [{"$ref": f"#/$defs/D{i + 1}"}, {"$ref": f"#/$defs/D{i + 1}"}]}
        for i in range(depth)
    }
    defs[f"D{depth}"] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}}, "$defs": defs}


def test_refs_that_fan_out_are_each_followed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """They were walked once per path, 2^depth times, on the event loop before every call:
    a server's schema froze every chat for seconds, or hours (found by review)."""
    import engine.llm.tool_schemas as schemas
    import engine.mcp.arguments as arguments

    followed: list[str] = []

    def counted(root: Any, ref: str) -> Any:
        followed.append(ref)
        return schemas.resolve_ref(root, ref)

    monkeypatch.setattr(arguments, "resolve_ref", counted)
    schema = _fanning_out(16)
    assert drop_optional_nulls(schema, {"x": {"n": None}}) == {"x": {}}
    assert len(followed) <= 2 * 17


def test_a_chain_of_300_refs_is_cut_not_a_crash() -> None:
    """It overflowed Python's stack in every turn that offered the tool (found by review)."""
    defs: dict[str, Any] = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(300)}
    defs["D300"] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}}, "$defs": defs}
    assert drop_optional_nulls(schema, {"x": {"n": None}, "y": None}) == {
        "x": {"n": None},  # too deep to know: kept as sent
        "y": None,
    }
    assert portable_schema(schema)["properties"]["x"]["type"] == "object"


async def test_a_tool_sends_its_arguments_without_optional_nulls() -> None:
    manager = _Manager()
    tool = McpTool(manager, McpToolSpec("fs", "read", "", SCHEMA))  # type: ignore[arg-type]
    assert await tool.run({"path": "a", "head": None, "label": None}, CTX) == "ok"
    assert manager.calls == [("fs", "read", {"path": "a", "label": None})]
    with pytest.raises(ToolError, match="argument 'path' must be a string, got null"):
        await tool.run({"path": None}, CTX)
    assert len(manager.calls) == 1


def test_a_root_ref_schema_reaches_the_model_with_its_properties() -> None:
    """Go's invopop/jsonschema and zod-to-json-schema (given a name) write a root ``$ref``:
    empty properties were added beside it and won over the referenced ones, and the model
    was offered a tool that took no argument yet required ``path`` (found by review on
    2026-12-07)."""
    root_ref = {
        "$ref": "#/$defs/ReadArgs",
        "$defs": {
            "ReadArgs": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "head": {"type": "integer"}},
                "required": ["path"],
            }
        },
    }
    tool = McpTool(None, McpToolSpec("fs", "read", "", root_ref))  # type: ignore[arg-type]
    offered = portable_schema(tool.parameters)
    assert offered["type"] == "object" and set(offered["properties"]) == {"path", "head"}
    assert offered["required"] == ["path"]


# --- names -------------------------------------------------------------------------------


def test_plain_names_keep_the_usual_form() -> None:
    assert mcp_tool_names("fs", ["read_file", "files.read", "a-b"]) == [
        "mcp__fs__read_file",
        "mcp__fs__files_read",
        "mcp__fs__a-b",
    ]


def test_names_too_long_are_cut_to_valid_unique_names() -> None:
    long = ["x" * 80 + "_one", "x" * 80 + "_two"]
    names = mcp_tool_names("server-with-a-long-name", long)
    assert all(name is not None and VALID.match(name) for name in names)
    assert len(set(names)) == 2
    assert names == mcp_tool_names("server-with-a-long-name", list(reversed(long)))[::-1]


def test_names_colliding_after_mapping_stay_distinct() -> None:
    tools = ["get.item", "get/item", "get item", "get_item", "héllo", "h_llo"]
    names = mcp_tool_names("api", tools)
    assert all(name is not None and VALID.match(name) for name in names)
    assert len(set(names)) == len(tools)
    assert names[3] == "mcp__api__get_item"  # its own name needs no change: it keeps it
    assert names[5] == "mcp__api__h_llo"
    # The order of the listing does not change which tool gets which name.
    assert mcp_tool_names("api", tools[::-1]) == names[::-1]


def test_names_other_servers_took_are_avoided_and_duplicates_left_out() -> None:
    taken = ["mcp__a___b"]  # server "a", tool "_b"
    assert mcp_tool_names("a_", ["b", "b"], taken)[1] is None
    [name, _] = mcp_tool_names("a_", ["b", "b"], taken)
    assert name != "mcp__a___b" and name is not None and VALID.match(name)


async def test_a_mapped_name_calls_the_server_s_own_name() -> None:
    manager = _Manager()
    specs = [
        McpToolSpec("api", "get.item", "Get an item.", {"type": "object"}),
        McpToolSpec("api", "get/item", "", {"type": "object"}),
        McpToolSpec("api", "y" * 70, "", {"type": "object"}),
    ]
    tools = mcp_tools(manager, specs)  # type: ignore[arg-type]
    registry = ToolRegistry(tools)  # unique names, or this raises
    assert all(VALID.match(name) for name in registry.names)
    for tool, spec in zip(tools, specs, strict=True):
        found = registry.get(tool.name)
        assert found is not None
        await found.run({}, CTX)
        assert manager.calls[-1][:2] == ("api", spec.name)
        assert f"The server names this tool {spec.name!r}" in tool.description
