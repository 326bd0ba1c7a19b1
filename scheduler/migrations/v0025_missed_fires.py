"""A missed run's row says how many fires it stands for: past ``MAX_MISSED_ROWS`` missed
fires of one job in a dispatch step, the first fire's row also stands for those between it
and the last rows kept, so the notice tells the whole count and when it began."""

import sqlalchemy as sa
from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    op.add_column("job_runs", sa.Column("fires", sa.Integer, nullable=False, server_default="1"))
