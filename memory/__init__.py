"""Long-term memory: a full-text index of every past conversation, fed by the ChatEventBus.

A layer above the engine (it imports ``engine``, never ``bot``): its tables and migrations
are its own (``memory/tables.py``, ``memory/migrations``), ``memory/layer.py`` names them
for ``bot/schema.py``. See docs/memory.md for what is stored and who may search it.
"""
