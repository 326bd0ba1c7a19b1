"""Telegram outbox: a postponed delivery's schedule, retried by the running process.

``attempts`` (since 0005) counts delivery attempts; ``next_attempt_at`` is when a
postponed row is due again (NULL while the process that recorded it is sending it),
``last_attempt_at`` when it was last tried (bot/telegram/redelivery.py).
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime


def upgrade(op: Operations) -> None:
    with op.batch_alter_table("telegram_outbox") as batch:
        batch.add_column(sa.Column("next_attempt_at", UtcDateTime))
        batch.add_column(sa.Column("last_attempt_at", UtcDateTime))
    op.create_index("ix_tg_outbox_due", "telegram_outbox", ["status", "next_attempt_at"])
