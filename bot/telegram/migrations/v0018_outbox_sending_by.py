"""Telegram outbox: which fleet process has a row in flight after claiming it for a retry
(NULL: its recorder, or one process).

The recorder stays in ``recorded_by``; a claim by another process moves the row to that
process (docs/scale-out.md), which sends it, and whose death makes it due again.
"""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    op.add_column("telegram_outbox", sa.Column("sending_by", sa.String(200)))
