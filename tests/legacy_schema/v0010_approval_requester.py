"""Approvals: who asked.

The user whose message started the turn that raised a gated call is recorded with the
approval, so the decision rule (``APPROVERS``) can let the requester and the owner decide
and refuse other members of a group. Older rows keep NULL: only the owner decides them.
"""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    with op.batch_alter_table("tool_approvals") as batch:
        batch.add_column(sa.Column("requester_id", sa.String(64)))
        batch.add_column(sa.Column("requester_name", sa.String(255)))
