"""The API providers an owner registers (``chathub providers add``)."""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "api_providers",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("base_url", sa.Text, nullable=False),
        sa.Column("api_key", sa.Text, nullable=False, server_default=""),
        sa.Column("serves", sa.JSON, nullable=False),
        sa.Column("models", sa.JSON, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
