"""Jobs that ask: who a job serves (its owner, a platform user id) and how long its runs
wait for a human's decision on a call outside the job's grants.

The grants themselves are the job's ``run_context`` (0006); a run records the chat where
its cards are shown, so a decision there may reach the run's session.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime


def upgrade(op: Operations) -> None:
    op.add_column("scheduled_jobs", sa.Column("owner_id", sa.String(255)))
    op.add_column("scheduled_jobs", sa.Column("approval_wait_s", sa.Integer))
    op.add_column("job_runs", sa.Column("cancel_requested_at", UtcDateTime))
