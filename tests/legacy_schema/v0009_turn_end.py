"""Frames: where the last turn that ended without an answer stopped.

A turn that failed (or ran out of rounds) after a tool round leaves a tool round as the
frame's last row, which crash recovery otherwise reads as a turn a crash cut short. The
row id recorded here, written in the commit that tells the user, says it ended.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from tests.legacy_schema.types import Id


def upgrade(op: Operations) -> None:
    with op.batch_alter_table("chat_sessions_stack") as batch:
        batch.add_column(sa.Column("ended_turn_at", Id))
