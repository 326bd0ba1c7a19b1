"""Tool schemas in the subset of JSON Schema every endpoint accepts.

MCP servers send their tools' schemas as their SDK writes them: zod's ``$schema`` line,
pydantic's ``$defs`` and ``$ref``. OpenAI takes those; Gemini's OpenAI-compatible endpoint
and some llama.cpp servers answer 400. ``portable_schema`` rewrites a schema without
changing what it accepts: ``$``-keywords (``$schema``, ``$id``, ``$comment``, ...) and
``definitions`` go, each local ``$ref`` is replaced by what it points at. A recursive
definition is spelled out ``RECURSION`` times, then left as a plain value of its type (an
object, mostly) and logged, so a ``$ref`` cycle cannot make the result infinite; after
``MAX_NODES`` schema nodes every further ``$ref`` is cut the same way.

``PortableToolSchemas`` applies it to every tool offered to one model (the per-model
switch ``strict_tool_schemas`` of ``ModelConfig``, see ``with_tool_schemas``).
"""

from __future__ import annotations

import copy
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from engine.llm.protocols import ChatModel
from engine.llm.types import DeltaCallback, LlmResponse, Message, ToolSchema

__all__ = [
    "MAX_NODES",
    "RECURSION",
    "PortableToolSchemas",
    "allows_null",
    "portable_schema",
    "portable_tools",
    "resolve_ref",
    "with_tool_schemas",
]

log = logging.getLogger(__name__)

#: How many times one recursive definition is spelled out along a path before it is cut.
RECURSION = 2
#: Schema nodes written before every further ``$ref`` is cut (a bound on the output size).
MAX_NODES = 2_000
#: ``$ref``s followed inside one another at most (a chain of 300 overflowed the stack).
MAX_REF_DEPTH = 32

# Keywords whose value is a schema, a list of schemas, or a map of names to schemas; every
# other keyword's value is data (``enum``, ``default``, ``const``, ``examples``) and is copied.
_ONE = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "contains",
        "contentSchema",
        "else",
        "if",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_MANY = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_NAMED = frozenset({"properties", "patternProperties", "dependentSchemas"})
_CACHE_SIZE = 512


def resolve_ref(root: Any, ref: str) -> Any | None:
    """What the local JSON pointer ``ref`` (``#/$defs/Node``) points at in ``root``, or None.

    Remote references and anchors are not followed: there is nothing to fetch them from.
    """
    if not ref.startswith("#"):
        return None
    pointer = unquote(ref[1:])
    if pointer == "":
        return root
    if not pointer.startswith("/"):
        return None  # an anchor ("#node")
    node = root
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def portable_schema(schema: Any, *, label: str = "tool schema") -> dict[str, Any]:
    """``schema`` without ``$``-keywords and ``$ref``s (see the module docstring).

    ``label`` names the schema in the log line that reports a cut or unresolved ``$ref``.
    """
    inliner = _Inliner(schema)
    result = inliner.schema(schema, ())
    if inliner.cut:
        log.warning(
            "%s: $ref %s recursive or too large; cut to a plain value of its type",
            label,
            ", ".join(sorted(set(inliner.cut))),
        )
    if inliner.unresolved:
        log.warning(
            "%s: $ref %s cannot be resolved here; left unconstrained",
            label,
            ", ".join(sorted(set(inliner.unresolved))),
        )
    if not isinstance(result, dict):
        return {"type": "object", "properties": {}}
    return result


class _Inliner:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.nodes = 0
        self.cut: list[str] = []
        self.unresolved: list[str] = []

    def schema(self, node: Any, path: tuple[str, ...]) -> Any:
        """``node`` rewritten; ``path`` holds the ``$ref``s being expanded around it."""
        if not isinstance(node, dict):
            return copy.deepcopy(node)  # a boolean schema (or a malformed one: not ours)
        self.nodes += 1
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._ref(node, ref, path)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key.startswith("$") or key == "definitions":
                continue  # keywords about the document, not the value; refs are inlined
            if key in _NAMED and isinstance(value, dict):
                out[key] = {name: self.schema(sub, path) for name, sub in value.items()}
            elif key in _MANY and isinstance(value, list):
                out[key] = [self.schema(sub, path) for sub in value]
            elif key in _ONE and isinstance(value, dict | bool):
                out[key] = self.schema(value, path)
            elif key == "dependencies" and isinstance(value, dict):
                # Draft 7: a schema, or a list of property names, for each property.
                out[key] = {
                    name: self.schema(sub, path) if isinstance(sub, dict) else copy.deepcopy(sub)
                    for name, sub in value.items()
                }
            else:
                out[key] = copy.deepcopy(value)
        return out

    def _ref(self, node: dict[str, Any], ref: str, path: tuple[str, ...]) -> dict[str, Any]:
        target = resolve_ref(self.root, ref)
        base: Any
        if target is None:
            self.unresolved.append(ref)
            base = {}
        elif path.count(ref) >= RECURSION or self.nodes > MAX_NODES or len(path) >= MAX_REF_DEPTH:
            self.cut.append(ref)
            base = _plain(target)
        else:
            base = self.schema(target, (*path, ref))
        if not isinstance(base, dict):
            base = {} if base is not False else {"not": {}}
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        if siblings:
            # Draft 2020-12 lets a $ref have siblings (a description, mostly): they win.
            base = {**base, **self.schema(siblings, path)}
        return base


def _plain(target: Any) -> dict[str, Any]:
    """A stand-in for a definition that is not spelled out: its type and description."""
    if not isinstance(target, dict):
        return {}
    kind = target.get("type")
    plain: dict[str, Any] = {"type": copy.deepcopy(kind) if kind else "object"}
    note = "recursive: its nested structure is not spelled out here"
    description = target.get("description")
    plain["description"] = f"{description} ({note})" if isinstance(description, str) else note
    return plain


def allows_null(
    schema: Any,
    root: Any,
    _seen: tuple[str, ...] = (),
    _known: dict[str, bool] | None = None,
) -> bool:
    """Whether ``null`` may be valid for ``schema`` (``$ref``s resolved in ``root``).

    Errs towards yes: only a ``type``, ``const``, ``enum``, ``anyOf``/``oneOf``/``allOf`` that
    rules null out says no, so a value is never dropped on a guess. Each ``$ref`` is judged
    once (``_known``), and past ``MAX_REF_DEPTH`` nested ones the answer is yes: refs that
    fan out (``anyOf: [D1, D1]`` at every level) were walked once per path, 2^depth times,
    on the event loop, and a chain of 300 overflowed Python's stack (found by review).
    """
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return True
    known: dict[str, bool] = {} if _known is None else _known
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in _seen:
        if len(_seen) >= MAX_REF_DEPTH:
            return True
        verdict = known.get(ref)
        if verdict is None:
            target = resolve_ref(root, ref)
            verdict = target is None or allows_null(target, root, (*_seen, ref), known)
            known[ref] = verdict
        if not verdict:
            return False
    if schema.get("nullable") is True:  # OpenAPI 3.0's spelling
        return True
    kind = schema.get("type")
    if isinstance(kind, str) and kind != "null":
        return False
    if isinstance(kind, list) and "null" not in kind:
        return False
    if "const" in schema and schema["const"] is not None:
        return False
    enum = schema.get("enum")
    if isinstance(enum, list) and None not in enum:
        return False
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if (
            isinstance(options, list)
            and options
            and not any(allows_null(option, root, _seen, known) for option in options)
        ):
            return False
    parts = schema.get("allOf")
    return not (
        isinstance(parts, list) and not all(allows_null(p, root, _seen, known) for p in parts)
    )


def portable_tools(tools: Sequence[ToolSchema]) -> list[ToolSchema]:
    """OpenAI ``tools`` entries with portable ``parameters`` (memoised: same log line once)."""
    return [_portable_tool(tool) for tool in tools]


_memo: OrderedDict[str, dict[str, Any]] = OrderedDict()


def _portable_tool(tool: ToolSchema) -> ToolSchema:
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("parameters"), dict):
        return tool
    parameters = function["parameters"]
    key = json.dumps(parameters, sort_keys=True, default=str)
    portable = _memo.get(key)
    if portable is None:
        portable = portable_schema(parameters, label=f"tool {function.get('name')}")
        _memo[key] = portable
        if len(_memo) > _CACHE_SIZE:
            _memo.popitem(last=False)
    else:
        _memo.move_to_end(key)
    return {**tool, "function": {**function, "parameters": portable}}


class PortableToolSchemas:
    """A ``ChatModel`` that offers its tools with portable schemas; all else is the model's."""

    def __init__(self, model: ChatModel) -> None:
        self._model = model

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def cache_hints(self) -> bool:
        return self._model.cache_hints

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> LlmResponse:
        return await self._model.complete(messages, portable_tools(tools), on_delta=on_delta)

    def __getattr__(self, name: str) -> Any:
        # ``config`` and whatever else the wrapped client offers (not ``_model`` itself:
        # asked before ``__init__`` ran, as copy does, that would recurse).
        if name == "_model":
            raise AttributeError(name)
        return getattr(self._model, name)

    def __repr__(self) -> str:
        return f"PortableToolSchemas({self._model!r})"


def with_tool_schemas(model: ChatModel, *, strict: bool) -> ChatModel:
    """``model`` wrapped in ``PortableToolSchemas`` when its configuration asks (``strict``)."""
    return PortableToolSchemas(model) if strict else model
