"""The provider registry's migrations (its table: ``providers/tables.py``).

One layer of the migration sequence ``bot/schema.py`` composes; each ``vNNNN_<name>.py``
defines ``upgrade(op)``. A migration is history: never edit one that has shipped.
"""
