"""Session-scoped scratchpad notes, shared by every agent of a session."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.schema import session_scratchpad as pad
from engine.store.schema import utcnow


class ScratchpadStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def all(self, session_id: int) -> dict[str, str]:
        return await self._db.run(_all, session_id)

    async def set(self, session_id: int, key: str, value: str) -> None:
        await self._db.run(_set, session_id, key, value)

    async def delete(self, session_id: int, key: str) -> None:
        await self._db.run(_delete, session_id, key)


def _all(conn: Connection, session_id: int) -> dict[str, str]:
    """Notes by key in code-point order.

    Sorted here, not by ``ORDER BY``: PostgreSQL would sort by the database's collation
    (``en_US``: "alpha" < "Beta"), SQLite by bytes ("Beta" < "alpha"), and the prompt that
    shows the notes must not depend on the back end.
    """
    rows = conn.execute(sa.select(pad.c.key, pad.c.value).where(pad.c.session_id == session_id))
    return dict(sorted((key, value) for key, value in rows))


def _set(conn: Connection, session_id: int, key: str, value: str) -> None:
    now = utcnow()
    updated = conn.execute(
        pad.update()
        .where(pad.c.session_id == session_id, pad.c.key == key)
        .values(value=value, updated_at=now)
    )
    if updated.rowcount == 0:
        conn.execute(
            pad.insert().values(session_id=session_id, key=key, value=value, updated_at=now)
        )


def _delete(conn: Connection, session_id: int, key: str) -> None:
    conn.execute(pad.delete().where(pad.c.session_id == session_id, pad.c.key == key))
