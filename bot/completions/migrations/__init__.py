"""The OpenAI-compatible API's migrations (its table: ``bot/completions/tables.py``).

One layer of the migration sequence ``bot/schema.py`` composes (``bot.completions.layer``);
each ``vNNNN_<name>.py`` defines ``upgrade(op)``. A migration is history: never edit one
that has shipped.
"""
