"""The provider registry's place in the one migration sequence (``bot/schema.py``)."""

from __future__ import annotations

from engine.store import Layer

__all__ = ["PROVIDERS"]

#: the API providers (``providers/tables.py``): 0023
PROVIDERS = Layer("providers", "providers.migrations", "providers.tables")
