"""The web chat's layer of the migration sequence (for ``bot/schema.py``'s ``LAYERS``), and
the prefix of its hub sources: both read by the service before the web chat loads."""

from __future__ import annotations

from engine.store import Layer

__all__ = ["SOURCE_PREFIX", "WEBCHAT"]

#: Every web conversation is the hub source ``web:<id>`` (``conversations.py``).
SOURCE_PREFIX = "web:"

#: web conversations (``bot/webchat/tables.py``): 0012
WEBCHAT = Layer("webchat", "bot.webchat.migrations", "bot.webchat.tables")
