"""Groups that Telegram made supergroups: the old chat id and the new one."""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime

Big = sa.BigInteger()


def upgrade(op: Operations) -> None:
    op.create_table(
        "telegram_chat_moves",
        sa.Column("old_chat_id", Big, primary_key=True, autoincrement=False),
        sa.Column("new_chat_id", Big, nullable=False, unique=True),
        sa.Column("moved_at", UtcDateTime, nullable=False),
    )
