"""The memory layer's place in the one migration sequence (``bot/schema.py``)."""

from __future__ import annotations

from engine.store import Layer

__all__ = ["MEMORY"]

#: the search index and the per-session watermarks (``memory/tables.py``): 0013
MEMORY = Layer("memory", "memory.migrations", "memory.tables")
