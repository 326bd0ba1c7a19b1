"""Leases: a named lease row per role a fleet of processes shares (the Telegram receiver
first), with its owner, fencing epoch and expiry on the database's own clock."""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("acquired_at", sa.Float, nullable=False),
    )
