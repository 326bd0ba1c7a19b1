"""The tool registry and a small validator for tool arguments."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from engine.tools.base import ToolError, tool_schema
from engine.tools.protocols import Tool

__all__ = ["ToolRegistry", "is_visible", "validate_args"]

ToolPredicate = Callable[[Tool], bool]


def is_visible(tool: Tool, *, depth: int, is_interactive: bool) -> bool:
    """Whether ``tool`` is offered to an agent at ``depth`` in a session of that kind."""
    if tool.root_agent_only and depth > 0:
        return False
    if tool.sub_agents_only and depth == 0:
        return False
    return not (tool.interactive_only and not is_interactive)


class ToolRegistry:
    """Tools by name, in registration order.

    Names are unique: two tools with one name would be sent to the model as one
    ambiguous entry, so a second registration is refused rather than replacing the first.
    Views for a level (``filtered``, ``without``, ``for_agent``) are new registries
    sharing the same tool objects.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        #: Bumped by every registration: what was derived from an older one is stale.
        self.version = 0
        self._schemas: tuple[int, list[dict[str, Any]]] | None = None
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``; raise ``ValueError`` if its name is taken or not a valid name."""
        name = tool.name
        if not name or not isinstance(name, str):
            raise ValueError(f"tool name must be a non-empty string, got {name!r}")
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._tools[name] = tool
        self.version += 1

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names!r})"

    def filtered(self, predicate: ToolPredicate) -> ToolRegistry:
        """A new registry with the tools for which ``predicate`` is true."""
        return ToolRegistry(tool for tool in self._tools.values() if predicate(tool))

    def without(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry without the tools called ``names`` (unknown names are ignored)."""
        excluded = frozenset(names)
        return self.filtered(lambda tool: tool.name not in excluded)

    def for_agent(self, *, depth: int, is_interactive: bool) -> ToolRegistry:
        """The tools an agent at ``depth`` may see, by the three visibility flags."""
        return self.filtered(
            lambda tool: is_visible(tool, depth=depth, is_interactive=is_interactive)
        )

    def schemas(self, predicate: ToolPredicate | None = None) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries, in registration order, optionally filtered. The
        unfiltered list is built once per version and shared: callers must not change it."""
        if predicate is None:
            cached = self._schemas
            if cached is None or cached[0] != self.version:
                cached = self._schemas = (
                    self.version,
                    [tool_schema(t) for t in self._tools.values()],
                )
            return cached[1]
        return [
            tool_schema(tool)
            for tool in self._tools.values()
            if predicate is None or predicate(tool)
        ]


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _json_type(value: Any) -> str:
    """The JSON type name of a decoded JSON value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _matches(value: Any, json_type: str) -> bool:
    if json_type == "null":
        return value is None
    if json_type not in _PY_TYPES:
        return True  # A type this validator does not know is not ours to refuse.
    # bool is an int subclass in Python, but true is not a number in JSON.
    if isinstance(value, bool):
        return json_type == "boolean"
    if json_type == "integer" and isinstance(value, float):
        return value.is_integer()  # JSON Schema counts 5.0 as an integer.
    return isinstance(value, _PY_TYPES[json_type])


def validate_args(tool: Tool, args: Any) -> None:
    """Check ``args`` against the top level of ``tool.parameters``.

    Checks: ``args`` is an object, required properties are present, top-level types
    (string/integer/number/boolean/array/object/null, or a list of them) and ``enum``
    match, and no unknown property is given when ``additionalProperties`` is false.
    A ``null`` for an optional property that does not allow null is taken as absent,
    since models often send ``"workdir": null`` to mean "not given". Nested values are
    the tool's to check. Raises ``ToolError`` naming the tool and the argument.
    """
    name = tool.name
    if not isinstance(args, dict):
        raise ToolError(f"{name}: arguments must be a JSON object, got {_json_type(args)}")
    # A server's schema is its own to get wrong ("enum": 5): what is not the shape this
    # reads is left unchecked, never a crash of the turn (found by review).
    schema = tool.parameters if isinstance(tool.parameters, dict) else {}
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        properties = {}
    required = [key for key in _list(schema.get("required")) if isinstance(key, str)]

    for key in required:
        if key not in args:
            raise ToolError(f"{name}: missing required argument {key!r}")

    if schema.get("additionalProperties") is False:
        unknown = sorted(set(args) - set(properties))
        if unknown:
            expected = ", ".join(properties) or "none"
            listed = ", ".join(repr(key) for key in unknown)
            noun = "argument" if len(unknown) == 1 else "arguments"
            raise ToolError(f"{name}: unknown {noun} {listed} (expected: {expected})")

    for key, value in args.items():
        _check_value(name, key, value)
        prop = properties.get(key)
        if not isinstance(prop, dict):
            continue
        declared = prop.get("type")
        types = [declared] if isinstance(declared, str) else _list(declared)
        types = [t for t in types if isinstance(t, str)]
        if types and not any(_matches(value, t) for t in types):
            if value is None and key not in required:
                continue
            wanted = " or ".join(types)
            raise ToolError(
                f"{name}: argument {key!r} must be {_article(wanted)} {wanted}, "
                f"got {_json_type(value)}"
            )
        enum = prop.get("enum")
        if isinstance(enum, list) and value not in enum:
            allowed = ", ".join(repr(item) for item in enum)
            raise ToolError(f"{name}: argument {key!r} must be one of {allowed}, got {value!r}")


def _check_value(name: str, key: str, value: Any) -> None:
    """A number no tool can act on, refused before anyone is asked to approve it (until
    2026-12-06 a ``"timeout_s": NaN`` killed an approved command at once)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError(f"{name}: argument {key!r} must be a finite number, got {value}")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
