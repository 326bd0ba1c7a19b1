"""A card's ❌ reject window (until when a reply is its reason, who tapped it), kept with
the card: a restart inside the window lost it, and a reply with the reason became a
message queued behind the turn the card held (until 2026-12-07)."""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    with op.batch_alter_table("platform_cards") as batch:
        batch.add_column(sa.Column("reject_window", sa.JSON))
