"""Telegram outbox: which process recorded a row (a fleet's process id; NULL for one process).

A row another live process recorded is that process's to send; one whose recorder is gone
(its membership lease expired) is anyone's (docs/scale-out.md).
"""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    op.add_column("telegram_outbox", sa.Column("recorded_by", sa.String(200)))
