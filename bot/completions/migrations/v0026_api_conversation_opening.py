"""An unnamed conversation remembers the instructions its first request carried (their
digest): a client's marked retry of a first message continues it only with the same ones
(two scripts asking the same first question over different documents are two
conversations)."""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    op.add_column("api_conversations", sa.Column("opening", sa.String(64)))
