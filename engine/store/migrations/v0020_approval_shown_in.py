"""Approvals: the chat where a call of another session asks (``shown_in``).

A scheduled job's run is a session of its own; a call outside its grants is asked in the
job's chat. Recording that chat with the approval lets a decision there (a tap on the
card, also after a restart) reach the run's call, and nothing else of that session.
"""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    with op.batch_alter_table("tool_approvals") as batch:
        batch.add_column(sa.Column("shown_in", sa.String(255)))
