"""``/forget_me`` sticks: how far each person's words were forgotten.

``memory_users.forgotten_through``: the newest message id when the person last said
``/forget_me``. The deriver and the indexer pass over their words up to it (and both sides
of their own conversations), so a batch read before the forget, or one still behind it,
never brings back what was forgotten.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id


def upgrade(op: Operations) -> None:
    op.add_column("memory_users", sa.Column("forgotten_through", Id))
