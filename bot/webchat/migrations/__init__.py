"""The web chat's migrations (its table: ``bot/webchat/tables.py``).

One layer of the migration sequence ``bot/schema.py`` composes (``bot.webchat.layer``);
each ``vNNNN_<name>.py`` defines ``upgrade(op)``. A migration is history: never edit one
that has shipped.
"""
