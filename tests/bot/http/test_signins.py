"""Web sign-ins alone (bot/http/signins.py): the store on SQLite and PostgreSQL, the throttle."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.http.signins import (
    MAX_AGENT_CHARS,
    MAX_SIGNINS,
    LoginThrottle,
    SignInPolicy,
    SignIns,
    ThrottlePolicy,
    csrf_token,
    token_fingerprint,
)
from bot.http.tables import web_signins
from engine.store import Store
from tests.clock import FakeClock
from tests.pg import BACKENDS, database_url

TOKEN = "signin-token"
AGENT = "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0"


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with database_url(request.param, tmp_path, migrated=True) as url:
        store = await Store.open(url)
        try:
            yield store
        finally:
            await store.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def signins(store: Store, clock: FakeClock) -> SignIns:
    return SignIns(store.db, token=TOKEN, clock=clock)


class CountingDatabase:
    """The store's database, counting the units of work that reach it."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.units = 0

    @property
    def dialect(self) -> str:
        return self._db.dialect

    async def run(self, fn, *args, **kwargs):
        self.units += 1
        return await self._db.run(fn, *args, **kwargs)

    async def close(self) -> None:
        await self._db.close()


async def rows(store: Store) -> list[sa.Row]:
    def read(conn: sa.Connection) -> list[sa.Row]:
        return list(conn.execute(sa.select(web_signins)))

    return await store.db.run(read)


async def test_only_the_hash_of_the_cookie_value_is_stored(store, signins):
    new = await signins.create("203.0.113.9", AGENT)

    assert len(new.secret) == 43
    [row] = await rows(store)
    assert row.id_hash == hashlib.sha256(new.secret.encode()).hexdigest() == new.signin.handle
    assert new.secret not in repr(tuple(row))
    assert row.token_fingerprint == token_fingerprint(TOKEN) and TOKEN not in repr(tuple(row))
    assert (row.address, row.user_agent) == ("203.0.113.9", AGENT)
    assert await signins.lookup(new.secret) == new.signin
    other = await signins.create("203.0.113.9", AGENT)
    assert other.secret != new.secret
    assert csrf_token(other.secret) != csrf_token(new.secret)


async def test_last_seen_is_written_at_most_once_a_minute(store, signins, clock):
    new = await signins.create(None, None)
    start = clock.now

    clock.advance(timedelta(seconds=59))
    assert (await signins.lookup(new.secret)).last_seen_at == start
    assert [row.last_seen_at for row in await rows(store)] == [start]

    clock.advance(timedelta(seconds=1))
    assert (await signins.lookup(new.secret)).last_seen_at == clock.now
    assert [row.last_seen_at for row in await rows(store)] == [clock.now]


async def test_an_idle_sign_in_expires_and_its_row_goes(store, signins, clock):
    new = await signins.create(None, None)
    clock.advance(timedelta(hours=11, minutes=59))
    assert await signins.lookup(new.secret) is not None  # used: the idle time starts again
    clock.advance(timedelta(hours=11, minutes=59))
    assert await signins.lookup(new.secret) is not None
    clock.advance(timedelta(hours=12))

    assert await signins.lookup(new.secret) is None
    assert await rows(store) == []


async def test_a_sign_in_in_use_still_ends_after_the_absolute_limit(store, clock):
    signins = SignIns(
        store.db,
        token=TOKEN,
        policy=SignInPolicy(idle=timedelta(hours=2), absolute=timedelta(days=1)),
        clock=clock,
    )
    new = await signins.create(None, None)
    for _ in range(23):
        clock.advance(timedelta(hours=1))
        assert await signins.lookup(new.secret) is not None
    clock.advance(timedelta(hours=1))

    assert await signins.lookup(new.secret) is None
    assert await rows(store) == []


async def test_a_new_token_ends_every_sign_in_made_under_the_old_one(store, signins, clock):
    first = await signins.create(None, None)
    second = await signins.create(None, None)
    rotated = SignIns(store.db, token="a-new-token", clock=clock)

    assert await rotated.lookup(first.secret) is None
    assert await rows(store) == []  # the first one seen takes the others with it
    assert await signins.lookup(second.secret) is None  # going back to the old token revives none


async def test_purge_deletes_expired_rows_and_those_of_another_token(store, signins, clock):
    await SignIns(store.db, token="old-token", clock=clock).create(None, None)
    await signins.create(None, None)
    clock.advance(timedelta(hours=6))
    fresh = await signins.create(None, None)
    clock.advance(timedelta(hours=7))

    # The old token's row went when this token's first sign-in was made; the first one of
    # this token has been idle 13 h.
    assert await signins.purge() == 1
    assert [row.id_hash for row in await rows(store)] == [fresh.signin.handle]


@pytest.mark.parametrize(
    "value",
    [
        "",
        hashlib.sha256(b"old cookie").hexdigest(),  # the old cookie: an HMAC of the token
        "A" * 42,
        "A" * 44,
        "A" * 42 + "+",
        "A" * 42 + "=",
        "A" * 42 + "\x00",
        "é" * 43,
        "A" * 100_000,
    ],
    ids=["empty", "old-hmac", "short", "long", "plus", "padding", "nul", "unicode", "huge"],
)
async def test_a_value_of_the_wrong_shape_never_reaches_the_database(store, clock, value):
    db = CountingDatabase(store.db)
    signins = SignIns(db, token=TOKEN, clock=clock)

    assert await signins.lookup(value) is None
    assert db.units == 0


async def test_a_well_formed_unknown_value_opens_nothing(signins):
    assert await signins.lookup("A" * 43) is None


async def test_revoke_one_and_all_others(store, signins, clock):
    one = await signins.create("198.51.100.1", "one")
    clock.advance(timedelta(minutes=1))
    two = await signins.create("198.51.100.2", "two")
    clock.advance(timedelta(minutes=1))
    three = await signins.create("198.51.100.3", "three")
    clock.advance(timedelta(minutes=1))
    await signins.lookup(one.secret)  # most recently used now

    assert [s.user_agent for s in await signins.active()] == ["one", "three", "two"]
    assert await signins.revoke(two.signin.handle) is True
    assert await signins.revoke(two.signin.handle) is False
    assert await signins.lookup(two.secret) is None

    assert await signins.revoke_others(one.signin.handle) == 1
    assert await signins.lookup(three.secret) is None
    assert [s.handle for s in await signins.active()] == [one.signin.handle]
    assert await signins.revoke_others(None) == 1
    assert await rows(store) == []


async def test_the_oldest_sign_ins_end_beyond_the_cap(store, signins, clock):
    made = []
    for _ in range(MAX_SIGNINS + 3):
        made.append(await signins.create(None, None))
        clock.advance(timedelta(seconds=1))

    assert len(await rows(store)) == MAX_SIGNINS
    assert [await signins.lookup(m.secret) is None for m in made[:4]] == [True] * 3 + [False]


async def test_address_and_user_agent_are_cut_and_printable(store, signins):
    await signins.create("x" * 300, "\x1b[31mred\x07" + "b" * 1000)

    [row] = await rows(store)
    assert row.address == "x" * 64
    assert row.user_agent == "[31mred" + "b" * (MAX_AGENT_CHARS - 7)


def test_sign_ins_need_a_token():
    with pytest.raises(ValueError, match="token"):
        SignIns(None, token="")  # type: ignore[arg-type]


# -- the throttle ----------------------------------------------------------------------------


def test_ten_failures_in_the_window_close_the_address_until_the_oldest_ages_out(clock):
    throttle = LoginThrottle(clock=clock)
    for _ in range(9):
        throttle.failed("192.0.2.1")
        clock.advance(timedelta(seconds=10))
    assert throttle.retry_after("192.0.2.1") is None
    throttle.failed("192.0.2.1")

    assert throttle.retry_after("192.0.2.1") == 15 * 60 - 90
    assert throttle.retry_after("192.0.2.2") is None  # another address
    clock.advance(timedelta(seconds=15 * 60 - 91))
    assert throttle.retry_after("192.0.2.1") == 1
    clock.advance(timedelta(seconds=1))
    assert throttle.retry_after("192.0.2.1") is None  # the first failure aged out


def test_failures_spread_over_more_than_the_window_never_close(clock):
    throttle = LoginThrottle(clock=clock)
    for _ in range(50):
        throttle.failed("192.0.2.1")
        assert throttle.retry_after("192.0.2.1") is None
        clock.advance(timedelta(minutes=2))


def test_a_success_forgets_the_failures(clock):
    throttle = LoginThrottle(ThrottlePolicy(failures=3), clock=clock)
    throttle.failed("192.0.2.1")
    throttle.failed("192.0.2.1")
    throttle.succeeded("192.0.2.1")
    throttle.failed("192.0.2.1")
    throttle.failed("192.0.2.1")
    assert throttle.retry_after("192.0.2.1") is None


def test_ipv6_addresses_count_per_64_block(clock):
    throttle = LoginThrottle(ThrottlePolicy(failures=2), clock=clock)
    throttle.failed("2001:db8:1:2::1")
    throttle.failed("2001:db8:1:2:ffff::9")

    assert throttle.retry_after("2001:db8:1:2::77") is not None
    assert throttle.retry_after("2001:db8:1:3::1") is None
    throttle.failed("::ffff:192.0.2.7")  # an IPv4 address seen through an IPv6 socket
    throttle.failed("192.0.2.7")
    assert throttle.retry_after("192.0.2.7") is not None


def test_memory_is_bounded_by_forgetting_the_least_recent_addresses(clock):
    throttle = LoginThrottle(ThrottlePolicy(failures=1, max_addresses=100), clock=clock)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}")

    assert throttle.retry_after("10.0.0.0") is None  # forgotten
    assert throttle.retry_after("10.0.3.231") is not None  # the last one
    assert len(throttle._failures) == 100
