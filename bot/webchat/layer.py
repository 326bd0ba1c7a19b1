"""The web chat's layer of the migration sequence (for ``bot/schema.py``'s ``LAYERS``)."""

from __future__ import annotations

from engine.store.migrations import Layer

__all__ = ["WEBCHAT"]

#: web conversations (``bot/webchat/tables.py``): 0012
WEBCHAT = Layer("webchat", "bot.webchat.migrations", "bot.webchat.tables")
