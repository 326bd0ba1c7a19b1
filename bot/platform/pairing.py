"""Paired people and pairing codes for any platform, behind ``AccessStore``.

One implementation for Discord and the platforms after it (``platform_people`` and
``platform_pairing``, keyed by platform, ``bot/platform/tables.py``). Telegram keeps its own
tables (``bot/telegram/store.py``) but the same rules, which live here: a code is
``CODE_LENGTH`` characters of ``CODE_ALPHABET``, lives ``CODE_TTL`` and is used once; a
person waiting gets their code again, and at most ``MAX_PENDING_CODES`` people of a
platform wait at a time.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.platform.protocols import PairingCode
from bot.platform.tables import platform_pairing, platform_people
from engine.store import Database, insert_for, serialize, utcnow

__all__ = [
    "CODE_ALPHABET",
    "CODE_LENGTH",
    "CODE_TTL",
    "MAX_PENDING_CODES",
    "PairingStore",
    "draw_code",
]

# No 0/O or 1/I/L: a code read aloud or retyped from a phone should not be ambiguous.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
CODE_TTL = timedelta(hours=24)
MAX_PENDING_CODES = 3


def draw_code(conn: Connection, column: sa.Column[str]) -> str:
    """A new random code that ``column`` (a pairing table's code) does not hold yet."""
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        if conn.execute(sa.select(column).where(column == code)).first() is None:
            return code


class PairingStore:
    """``AccessStore`` over ``platform_people`` and ``platform_pairing`` for one platform.

    ``now`` (``issue_code``, ``redeem``): the time to judge expiry by; tests pass a fake one.
    """

    def __init__(self, db: Database, platform: str) -> None:
        self._db = db
        self.platform = platform

    async def paired_users(self) -> set[str]:
        return await self._db.run(_paired_users, self.platform)

    async def pair(self, user_id: str, name: str, paired_by: str | None) -> None:
        """Pair ``user_id``; nothing changes when they already are."""
        await self._db.run(_pair, self.platform, user_id, name, paired_by, utcnow())

    async def unpair(self, user_id: str) -> bool:
        """False when ``user_id`` was not paired."""
        return await self._db.run(_unpair, self.platform, user_id)

    async def issue_code(
        self, user_id: str, chat: str, name: str, now: datetime | None = None
    ) -> tuple[PairingCode | None, bool]:
        """``(code, new)``: the user's pending code (reused), a new one, or ``None`` when
        ``MAX_PENDING_CODES`` other people of this platform are already waiting."""
        return await self._db.run(_issue_code, self.platform, user_id, chat, name, now or utcnow())

    async def redeem(self, code: str, now: datetime | None = None) -> PairingCode | None:
        """Use a pending, unexpired code of this platform once; ``None`` when there is none."""
        return await self._db.run(_redeem, self.platform, code.strip().upper(), now or utcnow())


def _paired_users(conn: Connection, platform: str) -> set[str]:
    people = platform_people
    query = sa.select(people.c.user_id).where(people.c.platform == platform)
    return set(conn.execute(query).scalars())


def _pair(
    conn: Connection,
    platform: str,
    user_id: str,
    name: str,
    paired_by: str | None,
    now: datetime,
) -> None:
    conn.execute(
        insert_for(conn.dialect.name, platform_people)
        .values(platform=platform, user_id=user_id, name=name, paired_by=paired_by, paired_at=now)
        .on_conflict_do_nothing()
    )


def _unpair(conn: Connection, platform: str, user_id: str) -> bool:
    people = platform_people
    gone = people.delete().where(people.c.platform == platform, people.c.user_id == user_id)
    return conn.execute(gone).rowcount > 0


def _code(row: sa.Row) -> PairingCode:
    return PairingCode(row.code, row.user_id, row.chat, row.name)


def _issue_code(
    conn: Connection, platform: str, user_id: str, chat: str, name: str, now: datetime
) -> tuple[PairingCode | None, bool]:
    p = platform_pairing
    serialize(conn, f"pairing:{platform}")  # count-then-insert must not interleave
    live = sa.and_(p.c.platform == platform, p.c.used_at.is_(None), p.c.expires_at > now)
    mine = conn.execute(sa.select(p).where(live, p.c.user_id == user_id)).first()
    if mine is not None:
        return _code(mine), False
    waiting = conn.execute(sa.select(sa.func.count()).select_from(p).where(live)).scalar_one()
    if waiting >= MAX_PENDING_CODES:
        return None, False
    code = draw_code(conn, p.c.code)
    conn.execute(
        p.insert().values(
            code=code,
            platform=platform,
            user_id=user_id,
            chat=chat,
            name=name,
            created_at=now,
            expires_at=now + CODE_TTL,
        )
    )
    return PairingCode(code, user_id, chat, name), True


def _redeem(conn: Connection, platform: str, code: str, now: datetime) -> PairingCode | None:
    p = platform_pairing
    pending = sa.and_(
        p.c.code == code, p.c.platform == platform, p.c.used_at.is_(None), p.c.expires_at > now
    )
    row = conn.execute(sa.select(p).where(pending)).first()
    if row is None:
        return None
    # Under the same condition: of two concurrent redeems, the second updates nothing.
    if conn.execute(p.update().where(pending).values(used_at=now)).rowcount != 1:
        return None
    return _code(row)
