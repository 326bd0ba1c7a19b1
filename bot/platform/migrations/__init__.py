"""The platform layer's migrations (its tables: ``bot/platform/tables.py``).

One layer of the migration sequence ``bot/schema.py`` composes; each ``vNNNN_<name>.py``
defines ``upgrade(op)``. A migration is history: never edit one that has shipped.
"""
