"""Arguments as a server's schema takes them: a ``null`` meaning "not given" is left out.

Models often send ``"head": null`` for an optional argument they do not use; a server that
validates strictly (zod, pydantic) answers ``-32602 ... expected number, received null``.
``drop_optional_nulls`` removes such a ``null`` before the call, at any depth: for a property
that is not required and whose schema does not allow null. A ``null`` the schema allows is
kept, and so is a ``null`` for a required property (the server's error tells the model).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from engine.llm.tool_schemas import MAX_REF_DEPTH, allows_null, resolve_ref

__all__ = ["drop_optional_nulls"]


def drop_optional_nulls(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """``args`` without the ``null``s of optional properties that cannot be null."""
    return _object([schema], args, schema)


def _object(schemas: list[Any], value: dict[str, Any], root: Any) -> dict[str, Any]:
    views = _all_views(schemas, root)
    required: set[str] = set()
    for view in views:
        names = view.get("required")
        if isinstance(names, list):
            required.update(name for name in names if isinstance(name, str))
    kept: dict[str, Any] = {}
    for key, item in value.items():
        declared = [
            view["properties"][key]
            for view in views
            if isinstance(view.get("properties"), dict) and key in view["properties"]
        ]
        if (
            item is None
            and declared
            and key not in required
            and not any(allows_null(prop, root) for prop in declared)
        ):
            continue
        kept[key] = _value(declared, item, root) if declared else item
    return kept


def _value(schemas: list[Any], item: Any, root: Any) -> Any:
    if isinstance(item, dict):
        return _object(schemas, item, root)
    if isinstance(item, list):
        views = _all_views(schemas, root)
        items = [view["items"] for view in views if isinstance(view.get("items"), dict)]
        if items:
            return [_value(items, element, root) for element in item]
    return item


def _all_views(schemas: list[Any], root: Any) -> list[dict[str, Any]]:
    expanded: set[str] = set()
    return [view for schema in schemas for view in _views(schema, root, expanded, 0)]


def _views(schema: Any, root: Any, expanded: set[str], depth: int) -> Iterator[dict[str, Any]]:
    """``schema`` and the schemas it combines (``$ref``, ``allOf``/``anyOf``/``oneOf``).

    Properties and ``required`` lists of every branch count: a ``null`` is dropped only
    when no branch could take it, so a guess never removes a value. Each ``$ref`` is
    expanded once in a walk, and none deeper than ``MAX_REF_DEPTH``: refs that fan out
    were walked once per path, 2^depth times, on the event loop (found by review).
    """
    if not isinstance(schema, dict):
        return
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in expanded and depth < MAX_REF_DEPTH:
        expanded.add(ref)
        yield from _views(resolve_ref(root, ref), root, expanded, depth + 1)
    yield schema
    for key in ("allOf", "anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                yield from _views(option, root, expanded, depth)
