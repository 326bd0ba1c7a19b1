"""Web inbox sign-ins: one row per signed-in browser (bot/http/signins.py).

The cookie holds a random id; the row holds only its sha256 (``id_hash``), a fingerprint
of the API token it was made under (a new token ends every older sign-in), when it began
and when it was last used (absolute and idle expiry), and the client's address and user
agent for the page that lists sign-ins.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "web_signins",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("token_fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("last_seen_at", UtcDateTime, nullable=False),
        sa.Column("address", sa.String(64)),
        sa.Column("user_agent", sa.String(255)),
    )
