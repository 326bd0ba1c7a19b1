"""Portable tool schemas: no ``$schema``, ``$ref`` inlined, cycles cut (issue 18, defect 3)."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.config import ConfigError, ModelConfig, load_config, load_settings
from engine.llm.registry import ModelRegistry
from engine.llm.tool_schemas import (
    MAX_NODES,
    PortableToolSchemas,
    allows_null,
    portable_schema,
    portable_tools,
)
from tests.fakes.openai_server import FakeOpenAIServer

# What pydantic writes for a model with a nested model and an optional field.
PYDANTIC: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "Point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            "required": ["x", "y"],
            "title": "Point",
        }
    },
    "type": "object",
    "properties": {
        "start": {"$ref": "#/$defs/Point", "description": "Where to begin"},
        "stops": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
        "end": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}], "default": None},
        "$ref": {"type": "string", "description": "a property that happens to be named $ref"},
        "definitions": {"type": "string"},
        "kind": {"enum": ["#/$defs/Point", "$schema"], "default": "$schema"},
    },
    "required": ["start"],
}

POINT = {
    "type": "object",
    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
    "required": ["x", "y"],
    "title": "Point",
}


def test_refs_are_inlined_and_document_keywords_dropped() -> None:
    original = copy.deepcopy(PYDANTIC)
    schema = portable_schema(PYDANTIC)

    assert original == PYDANTIC  # the input is not touched
    assert "$schema" not in schema and "$defs" not in schema
    props = schema["properties"]
    assert props["start"] == {**POINT, "description": "Where to begin"}  # siblings win
    assert props["stops"] == {"type": "array", "items": POINT}
    assert props["end"] == {"anyOf": [POINT, {"type": "null"}], "default": None}
    # Property names and data are not keywords: kept as they are.
    assert props["$ref"]["type"] == "string" and props["definitions"] == {"type": "string"}
    assert props["kind"] == {"enum": ["#/$defs/Point", "$schema"], "default": "$schema"}
    assert schema["required"] == ["start"]


def test_draft_7_definitions_and_pointer_escapes_resolve() -> None:
    schema = portable_schema(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"a": {"$ref": "#/definitions/a~1b"}, "b": {"$ref": "#/properties/a"}},
            "definitions": {"a/b": {"type": "integer", "minimum": 1}},
        }
    )
    assert schema == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 1},
            "b": {"type": "integer", "minimum": 1},
        },
    }


def test_a_ref_cycle_is_cut_at_a_bound_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Node": {
                "type": "object",
                "description": "A tree node",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
            }
        },
    }
    with caplog.at_level(logging.WARNING, logger="engine.llm.tool_schemas"):
        schema = portable_schema(tree, label="tool mcp__t__tree")

    assert "$ref" not in json.dumps(schema)
    level1 = schema["properties"]["root"]
    level2 = level1["properties"]["children"]["items"]
    cut = level2["properties"]["children"]["items"]
    assert level2["properties"]["name"] == {"type": "string"}  # spelled out twice
    assert cut["type"] == "object" and "properties" not in cut  # then a plain object
    assert "recursive" in cut["description"] and cut["description"].startswith("A tree node")
    [record] = caplog.records
    assert "tool mcp__t__tree" in record.message and "#/$defs/Node" in record.message
    assert "recursive" in record.message


def test_mutual_recursion_and_a_self_reference_at_the_root_end() -> None:
    mutual = {
        "$defs": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
        },
        "$ref": "#/$defs/A",
    }
    assert "$ref" not in json.dumps(portable_schema(mutual))
    selfish = {"type": "object", "properties": {"again": {"$ref": "#"}}}
    assert portable_schema(selfish)["type"] == "object"


def test_a_schema_that_reuses_definitions_stays_bounded() -> None:
    # Each level refers to the next one twice: 2**20 copies if spelled out in full.
    defs = {
        f"L{i}": {
            "type": "object",
            "properties": {"l": {"$ref": f"#/$defs/L{i + 1}"}, "r": {"$ref": f"#/$defs/L{i + 1}"}},
        }
        for i in range(20)
    }
    defs["L20"] = {"type": "string"}
    schema = portable_schema({"$defs": defs, "$ref": "#/$defs/L0"})
    text = json.dumps(schema)
    assert "$ref" not in text
    assert text.count('"type"') < 4 * MAX_NODES


def test_an_unresolvable_ref_is_left_unconstrained(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.llm.tool_schemas"):
        schema = portable_schema(
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
        )
    assert schema == {"type": "object", "properties": {"a": {}}}
    assert "cannot be resolved" in caplog.text


def test_a_schema_that_is_not_an_object_becomes_an_empty_one() -> None:
    assert portable_schema(True) == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, False),
        ({"type": ["string", "null"]}, True),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, True),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, False),
        ({"allOf": [{"type": "string"}, {}]}, False),
        ({"enum": ["a", None]}, True),
        ({"enum": ["a"]}, False),
        ({"const": 1}, False),
        ({"type": "string", "nullable": True}, True),
        ({"description": "anything"}, True),
        ({"$ref": "#/$defs/S"}, False),
    ],
)
def test_allows_null(schema: dict[str, Any], expected: bool) -> None:
    root = {"$defs": {"S": {"type": "string"}}}
    assert allows_null(schema, root) is expected


def test_portable_tools_rewrites_only_function_parameters() -> None:
    tools = [
        {"type": "function", "function": {"name": "t", "description": "d", "parameters": PYDANTIC}},
        {"type": "other"},
    ]
    [tool, other] = portable_tools(tools)
    assert tool["function"]["name"] == "t" and tool["function"]["description"] == "d"
    assert "$defs" not in tool["function"]["parameters"]
    assert other == {"type": "other"}
    assert "$defs" in tools[0]["function"]["parameters"]  # the caller's list is untouched


# --- the per-model switch -----------------------------------------------------------------


def _tool() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": "t", "description": "", "parameters": PYDANTIC},
    }


async def test_a_strict_model_is_sent_portable_schemas_and_another_is_not(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reply_text("one", model="gemini")
    fake_openai.reply_text("two", model="openai")
    configs = [
        ModelConfig(name="gemini", base_url=fake_openai.base_url, timeout_s=5),
        ModelConfig(
            name="openai", base_url=fake_openai.base_url, timeout_s=5, strict_tool_schemas=False
        ),
    ]
    async with httpx.AsyncClient() as http:
        registry = ModelRegistry.from_config(configs, http)
        strict, as_is = registry.candidates()
        assert isinstance(strict, PortableToolSchemas) and strict.name == "gemini"
        assert strict.config is configs[0]  # the rest is the wrapped client's
        for model in (strict, as_is):
            await model.complete([{"role": "user", "content": "hi"}], [_tool()])

    sent = {r["model"]: r["tools"][0]["function"]["parameters"] for r in fake_openai.requests}
    assert sent["gemini"] == portable_schema(PYDANTIC) and "$defs" not in sent["gemini"]
    assert sent["openai"] == PYDANTIC


def test_strict_tool_schemas_is_a_boolean_in_the_models_table(tmp_path: Path) -> None:
    path = tmp_path / "chathub.toml"
    path.write_text('[[models]]\nname = "m"\nstrict_tool_schemas = false\n')
    settings = load_settings(chathub_config=path, llm_model="m", _env_file=None)
    [model] = load_config(settings).models
    assert model.strict_tool_schemas is False
    assert ModelConfig(name="x", base_url="http://x").strict_tool_schemas is True

    path.write_text('[[models]]\nname = "m"\nstrict_tool_schemas = "yes"\n')
    with pytest.raises(ConfigError, match="strict_tool_schemas must be true or false"):
        load_config(load_settings(chathub_config=path, llm_model="m", _env_file=None))
