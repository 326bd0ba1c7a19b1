"""Tool calls: when a call's side effect started, and the process group it runs in.

A call that had started and never recorded a result may or may not have had its effect:
recovery reports it to the model instead of running it again, and first makes sure the
command's process group is gone (docs/architecture.md, "Interrupted calls").
"""

import sqlalchemy as sa
from alembic.operations import Operations

from tests.legacy_schema.types import UtcDateTime


def upgrade(op: Operations) -> None:
    with op.batch_alter_table("chat_llm_tools") as batch:
        batch.add_column(sa.Column("launched_at", UtcDateTime))
        batch.add_column(sa.Column("process_group", sa.BigInteger()))
        batch.add_column(sa.Column("process_start", sa.String(80)))
