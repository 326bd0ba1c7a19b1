"""The OpenAI-compatible API's layer of the migration sequence (``bot/schema.py``) and the
prefix of its hub sources: both read by the service before the API's routes load."""

from __future__ import annotations

from engine.store import Layer

__all__ = ["COMPLETIONS", "SOURCE_PREFIX"]

#: Every conversation of the OpenAI-compatible API is the hub source ``api:<id>``.
SOURCE_PREFIX = "api:"

#: the API's conversations (``bot/completions/tables.py``): 0024
COMPLETIONS = Layer("completions", "bot.completions.migrations", "bot.completions.tables")
