"""The platform-neutral pairing store (``bot/platform/pairing.py``) on SQLite and (when
configured) PostgreSQL: Telegram's rules, for any platform, each platform apart."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.platform.pairing import (
    CODE_ALPHABET,
    CODE_LENGTH,
    CODE_TTL,
    MAX_PENDING_CODES,
    PairingStore,
)
from bot.platform.protocols import AccessStore, PairingCode
from bot.platform.tables import platform_pairing, platform_people
from bot.schema import LAYERS
from engine.store import Database, Store
from tests.pg import BACKENDS, database_url

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DISCORD = "discord"


@pytest.fixture(params=BACKENDS)
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated database of its own (PostgreSQL skips without CHATHUB_TEST_POSTGRES_URL)."""
    async with database_url(request.param, tmp_path, migrated=True) as url:
        store = await Store.open(url, LAYERS)
        try:
            yield store.db
        finally:
            await store.close()


@pytest.fixture
def pairing(db: Database) -> PairingStore:
    return PairingStore(db, DISCORD)


def test_it_is_an_access_store(pairing: PairingStore) -> None:
    store: AccessStore = pairing  # checked by the type checker; here: it has every method
    for method in ("paired_users", "pair", "unpair", "issue_code", "redeem"):
        assert callable(getattr(store, method))


def test_the_rules_are_telegrams() -> None:
    assert CODE_LENGTH == 6
    assert not set("01OIL") & set(CODE_ALPHABET)
    assert timedelta(hours=24) == CODE_TTL
    assert MAX_PENDING_CODES == 3


async def test_a_code_is_issued_and_redeemed_once(pairing: PairingStore) -> None:
    code, new = await pairing.issue_code("1001", "2002", "Ann", now=T0)
    assert new and code is not None
    assert re.fullmatch(rf"[{CODE_ALPHABET}]{{{CODE_LENGTH}}}", code.code)
    assert code == PairingCode(code.code, "1001", "2002", "Ann")
    assert await pairing.redeem(code.code, now=T0) == code
    assert await pairing.redeem(code.code, now=T0) is None


async def test_a_code_is_read_whatever_its_case_and_spaces(pairing: PairingStore) -> None:
    code, _ = await pairing.issue_code("1001", "2002", "Ann", now=T0)
    assert code is not None
    assert await pairing.redeem(f"  {code.code.lower()} ", now=T0) == code


async def test_an_unknown_code_is_refused(pairing: PairingStore) -> None:
    assert await pairing.redeem("ABCDEF", now=T0) is None


async def test_an_expired_code_is_refused(pairing: PairingStore) -> None:
    code, _ = await pairing.issue_code("1001", "2002", "Ann", now=T0)
    assert code is not None
    assert await pairing.redeem(code.code, now=T0 + CODE_TTL) is None
    # valid until just before
    assert await pairing.redeem(code.code, now=T0 + CODE_TTL - timedelta(seconds=1)) == code


async def test_an_expired_code_is_not_reissued(pairing: PairingStore) -> None:
    old, _ = await pairing.issue_code("1001", "2002", "Ann", now=T0)
    fresh, new = await pairing.issue_code("1001", "2002", "Ann", now=T0 + CODE_TTL)
    assert old is not None and fresh is not None
    assert new and fresh.code != old.code


async def test_asking_again_returns_the_same_code(pairing: PairingStore, db: Database) -> None:
    first, new = await pairing.issue_code("1001", "2002", "Ann", now=T0)
    again, new_again = await pairing.issue_code("1001", "2002", "Ann", now=T0 + timedelta(hours=5))
    assert first is not None and new
    assert again == first and not new_again

    def expiry(conn: sa.Connection) -> list[datetime]:
        p = platform_pairing
        return list(conn.execute(sa.select(p.c.expires_at)).scalars())

    assert await db.run(expiry) == [T0 + CODE_TTL]  # asking again does not extend it


async def test_at_most_three_people_wait(pairing: PairingStore) -> None:
    codes = {}
    for user in ("1", "2", "3"):
        code, new = await pairing.issue_code(user, user, f"u{user}", now=T0)
        assert code is not None and new
        codes[user] = code
    assert await pairing.issue_code("4", "4", "u4", now=T0) == (None, False)
    # someone already waiting still gets their code back
    assert await pairing.issue_code("2", "2", "u2", now=T0) == (codes["2"], False)
    # a redeemed code frees a place
    assert await pairing.redeem(codes["1"].code, now=T0) is not None
    code, new = await pairing.issue_code("4", "4", "u4", now=T0)
    assert code is not None and new
    assert await pairing.issue_code("5", "5", "u5", now=T0) == (None, False)
    # expired codes do not count
    code, new = await pairing.issue_code("5", "5", "u5", now=T0 + CODE_TTL)
    assert code is not None and new


async def test_concurrent_strangers_cannot_exceed_the_pending_limit(
    pairing: PairingStore,
) -> None:
    results = await asyncio.gather(
        *[pairing.issue_code(str(user), str(user), "", now=T0) for user in range(10, 20)]
    )
    assert len([code for code, _ in results if code is not None]) == MAX_PENDING_CODES


async def test_concurrent_redeems_of_one_code_succeed_once(pairing: PairingStore) -> None:
    code, _ = await pairing.issue_code("1001", "2002", "Ann", now=T0)
    assert code is not None
    results = await asyncio.gather(*[pairing.redeem(code.code, now=T0) for _ in range(5)])
    assert [r for r in results if r is not None] == [code]


async def test_platforms_do_not_see_each_others_people_or_codes(db: Database) -> None:
    discord, slack = PairingStore(db, DISCORD), PairingStore(db, "slack")
    await discord.pair("42", "Ann", None)
    assert await discord.paired_users() == {"42"}
    assert await slack.paired_users() == set()
    assert not await slack.unpair("42")
    assert await discord.paired_users() == {"42"}

    code, _ = await discord.issue_code("7", "70", "Bob", now=T0)
    assert code is not None
    assert await slack.redeem(code.code, now=T0) is None  # not slack's code
    assert await discord.redeem(code.code, now=T0) == code
    # each platform has its own waiting places
    for user in ("1", "2", "3"):
        assert (await discord.issue_code(user, user, "", now=T0))[0] is not None
    assert await discord.issue_code("4", "4", "", now=T0) == (None, False)
    assert (await slack.issue_code("4", "4", "", now=T0))[0] is not None


async def test_pair_and_unpair(pairing: PairingStore, db: Database) -> None:
    await pairing.pair("42", "Ann", "1")
    await pairing.pair("43", "Bob", None)
    assert await pairing.paired_users() == {"42", "43"}
    assert await pairing.unpair("42")
    assert not await pairing.unpair("42")
    assert await pairing.paired_users() == {"43"}

    def people(conn: sa.Connection) -> list[tuple[str, str, str, str | None]]:
        t = platform_people
        query = sa.select(t.c.platform, t.c.user_id, t.c.name, t.c.paired_by)
        return [tuple(row) for row in conn.execute(query)]

    assert await db.run(people) == [(DISCORD, "43", "Bob", None)]


async def test_pairing_twice_is_a_no_op(pairing: PairingStore, db: Database) -> None:
    await pairing.pair("42", "Ann", "1")
    await pairing.pair("42", "Annie", "2")
    await asyncio.gather(*[pairing.pair("42", "Again", None) for _ in range(3)])
    assert await pairing.paired_users() == {"42"}

    def person(conn: sa.Connection) -> tuple[str, str | None]:
        t = platform_people
        row = conn.execute(sa.select(t.c.name, t.c.paired_by)).one()
        return row.name, row.paired_by

    assert await db.run(person) == ("Ann", "1")  # the first pairing stands
