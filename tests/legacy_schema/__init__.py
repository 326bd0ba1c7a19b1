"""A database exactly as ``main`` built it before each layer owned its tables (0b2deca).

The modules ``v0001``..``v0011`` here are verbatim copies of that commit's
``engine/store/migrations`` (only their import of ``Id``/``UtcDateTime`` points at
``types.py``, a copy too), and ``build`` applies them the way its ``engine/store/db.py``
did: one sequence, ``schema_version (version, name)``, a row per migration. Vendored, not
read from git history: the tests run from a clean clone. Never update these files: they are
the past the current code must keep upgrading from.
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from engine.store.db import Database

__all__ = ["LEGACY_MIGRATIONS", "build"]

LEGACY_MIGRATIONS = (
    "initial",
    "approval",
    "approvals",
    "hub",
    "telegram",
    "scheduler",
    "tool_launch",
    "delivery_retry",
    "turn_end",
    "approval_requester",
    "web_signins",
)

_version_table = sa.Table(
    "schema_version",
    sa.MetaData(),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
)


async def build(db: Database, up_to: int = len(LEGACY_MIGRATIONS)) -> int:
    """Apply the old migrations 1..``up_to`` to ``db``, as that ``main`` did at start."""
    return await db.run(_migrate, up_to)


def _migrate(conn: Connection, up_to: int) -> int:
    _version_table.create(conn, checkfirst=True)
    current = conn.execute(sa.select(sa.func.max(_version_table.c.version))).scalar() or 0
    ops = Operations(MigrationContext.configure(conn))
    for version in range(current + 1, up_to + 1):
        name = LEGACY_MIGRATIONS[version - 1]
        module = importlib.import_module(f"{__name__}.v{version:04d}_{name}")
        module.upgrade(ops)
        conn.execute(_version_table.insert().values(version=version, name=name))
        current = version
    return current
