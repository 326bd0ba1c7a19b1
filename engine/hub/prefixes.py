"""``PrefixMap``: what an adapter registered for the sources starting with a prefix."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["PrefixMap"]

T = TypeVar("T")


class PrefixMap(Generic[T]):
    """Values keyed by source prefix; a source gets the value of its longest prefix."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[tuple[str, T]] = []

    def add(self, prefix: str, value: T) -> None:
        self._items.append((prefix, value))
        # Longest first, so the first match is the most specific; stable for equal lengths.
        self._items.sort(key=lambda item: len(item[0]), reverse=True)

    def get(self, source: str) -> T | None:
        return next((value for prefix, value in self._items if source.startswith(prefix)), None)
