"""Named leases over the ``leases`` table, timed by the database's own clock.

A lease is held by one owner until it expires or is released; whoever acquires it next
(after expiry or release) gets the next ``epoch``, a fencing token that only grows.
Every comparison with "now" is made by the database in the statement itself
(PostgreSQL ``clock_timestamp()``, SQLite ``julianday('now')``): processes whose clocks
disagree cannot take a lease early, nor keep one late. Each call is one statement, atomic
on both back ends whatever the number of processes racing for the same name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.fencing import Fence, Fenced
from engine.store.schema import leases as lease_rows

__all__ = [
    "PROCESS_LEASE_PREFIX",
    "Lease",
    "Leases",
    "db_now_sql",
    "lease_fence",
    "live_leases",
    "live_members",
]

#: Each live process of a fleet holds ``process:<owner>``: the fleet's membership.
PROCESS_LEASE_PREFIX = "process:"


@dataclass(frozen=True, slots=True)
class Lease:
    """One holding of a lease; ``expires_at`` and ``acquired_at``: database epoch seconds."""

    name: str
    owner: str
    epoch: int
    expires_at: float
    acquired_at: float


def db_now_sql(dialect: str) -> str:
    """The database's current time in epoch seconds (float), as SQL for ``dialect``."""
    if dialect == "postgresql":
        # clock_timestamp(), not now(): now() is the transaction's start, stale after a wait.
        return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
    if dialect == "sqlite":
        return "((julianday('now') - 2440587.5) * 86400.0)"
    raise ValueError(f"no clock for database dialect {dialect!r}")


# Free, expired or ours already: ours. The epoch moves only when the owner changes.
_ACQUIRE = """
INSERT INTO leases (name, owner, epoch, expires_at, acquired_at)
VALUES (:name, :owner, 1, {now} + :ttl, {now})
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner,
    epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch ELSE leases.epoch + 1 END,
    expires_at = excluded.expires_at,
    acquired_at = CASE WHEN leases.owner = excluded.owner
                       THEN leases.acquired_at ELSE excluded.acquired_at END
WHERE leases.owner = excluded.owner OR leases.expires_at <= {now}
RETURNING name, owner, epoch, expires_at, acquired_at
"""

_RENEW = """
UPDATE leases SET expires_at = {now} + :ttl
WHERE name = :name AND owner = :owner AND epoch = :epoch AND expires_at > {now}
RETURNING expires_at
"""

_RENEW_ALL = """
UPDATE leases SET expires_at = {now} + :ttl
WHERE owner = :owner AND name IN :names AND expires_at > {now}
RETURNING name, epoch
"""

# The row stays (expired at once): the next owner's epoch must still be higher.
_RELEASE = """
UPDATE leases SET expires_at = {now}
WHERE name = :name AND owner = :owner AND epoch = :epoch AND expires_at > {now}
"""

_HOLDER = """
SELECT name, owner, epoch, expires_at, acquired_at FROM leases
WHERE name = :name AND expires_at > {now}
"""


# FOR SHARE (PostgreSQL): the row stays locked until the transaction ends, so a take-over
# (an UPDATE of the row) waits for it: the fenced write commits before the new owner
# starts, or not at all. Shared, so a turn's concurrent transactions do not queue.
_HOLDS = """
SELECT 1 FROM leases
WHERE name = :name AND owner = :owner AND epoch = :epoch AND expires_at > {now}
"""


def lease_fence(lease: Lease) -> Fence:
    """A ``Fence`` (``engine/store/fencing.py``): raises ``Fenced`` in a transaction unless
    ``lease`` is still held, at its epoch, unexpired by the database's clock."""
    params = {"name": lease.name, "owner": lease.owner, "epoch": lease.epoch}

    def holds(conn: Connection) -> None:
        template = _HOLDS + (" FOR SHARE" if conn.dialect.name == "postgresql" else "")
        if conn.execute(_sql(conn, template), params).first() is None:
            raise Fenced(f"the lease {lease.name!r} (epoch {lease.epoch}) is no longer ours")

    return holds


def _sql(conn: Connection, template: str) -> sa.TextClause:
    return sa.text(template.format(now=db_now_sql(conn.dialect.name)))


def _lease(row: sa.Row[tuple[str, str, int, float, float]] | None) -> Lease | None:
    if row is None:
        return None
    name, owner, epoch, expires_at, acquired_at = row
    return Lease(name, owner, int(epoch), float(expires_at), float(acquired_at))


def _acquire(conn: Connection, name: str, owner: str, ttl_s: float) -> Lease | None:
    params = {"name": name, "owner": owner, "ttl": float(ttl_s)}
    return _lease(conn.execute(_sql(conn, _ACQUIRE), params).first())


def _renew(conn: Connection, lease: Lease, ttl_s: float) -> bool:
    params = {"name": lease.name, "owner": lease.owner, "epoch": lease.epoch, "ttl": float(ttl_s)}
    return conn.execute(_sql(conn, _RENEW), params).first() is not None


def _renew_all(conn: Connection, leases: list[Lease], ttl_s: float) -> set[str]:
    owners = {lease.owner for lease in leases}
    if len(owners) != 1:
        raise ValueError("renew_all renews one owner's leases")
    statement = _sql(conn, _RENEW_ALL).bindparams(sa.bindparam("names", expanding=True))
    params = {"owner": owners.pop(), "names": [lease.name for lease in leases], "ttl": ttl_s}
    epochs = {lease.name: lease.epoch for lease in leases}
    # The owner's id is unique per process start, so a name held by it has the epoch it
    # took it at; a different epoch would be a holding this caller does not know of.
    return {name for name, epoch in conn.execute(statement, params) if epochs[name] == epoch}


def _release(conn: Connection, lease: Lease) -> bool:
    params = {"name": lease.name, "owner": lease.owner, "epoch": lease.epoch}
    return conn.execute(_sql(conn, _RELEASE), params).rowcount == 1


def _holder(conn: Connection, name: str) -> Lease | None:
    return _lease(conn.execute(_sql(conn, _HOLDER), {"name": name}).first())


_LIVE = """
SELECT name, owner, epoch, expires_at, acquired_at FROM leases
WHERE name LIKE :prefix ESCAPE '\\' AND expires_at > {now} ORDER BY name
"""


def live_leases(conn: Connection, prefix: str) -> list[Lease]:
    """The unexpired leases whose names start with ``prefix`` (inside a unit of work)."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = conn.execute(_sql(conn, _LIVE), {"prefix": escaped + "%"})
    return [lease for lease in map(_lease, rows) if lease is not None]


def live_members(dialect: str) -> sa.Select[tuple[str]]:
    """The owners of the unexpired process memberships, by the database's clock: a
    subquery for a statement that must read the fleet's members in its own snapshot."""
    return sa.select(lease_rows.c.owner).where(
        lease_rows.c.name.startswith(PROCESS_LEASE_PREFIX, autoescape=True),
        lease_rows.c.expires_at > sa.text(db_now_sql(dialect)),
    )


def _now(conn: Connection) -> float:
    return float(conn.execute(sa.text(f"SELECT {db_now_sql(conn.dialect.name)}")).scalar_one())


class Leases:
    """Acquire, renew, release and look up named leases (see the module's docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """The lease for ``ttl_s`` seconds if it is free, expired or ours; else None."""
        _check_ttl(ttl_s)
        return await self._db.run(_acquire, name, owner, ttl_s)

    async def renew(self, lease: Lease, ttl_s: float) -> bool:
        """Extend ``lease`` to ``ttl_s`` from now; False when it expired or changed hands."""
        _check_ttl(ttl_s)
        return await self._db.run(_renew, lease, ttl_s)

    async def renew_all(self, leases: Sequence[Lease], ttl_s: float) -> set[str]:
        """Extend every one of ``leases`` (one owner's) in one statement; the names still
        held, at their epochs."""
        _check_ttl(ttl_s)
        if not leases:
            return set()
        return await self._db.run(_renew_all, list(leases), ttl_s)

    async def release(self, lease: Lease) -> bool:
        """Let ``lease`` go at once (True), if we still held it."""
        return await self._db.run(_release, lease)

    async def holder(self, name: str) -> Lease | None:
        """Who holds ``name`` now (None: nobody, or the holding expired)."""
        return await self._db.run(_holder, name)

    async def live(self, prefix: str) -> list[Lease]:
        """The unexpired leases whose names start with ``prefix``."""
        return await self._db.run(live_leases, prefix)

    async def now(self) -> float:
        """The database's clock, epoch seconds (the one every lease is timed by)."""
        return await self._db.run(_now)


def _check_ttl(ttl_s: float) -> None:
    if not ttl_s > 0:
        raise ValueError(f"a lease needs a positive duration, not {ttl_s!r}")
