"""Web inbox sign-ins: a random id in the browser's cookie, its hash in ``web_signins``.

Only sha256 of the id is stored, so a copy of the database opens nothing. A row also holds
a fingerprint of the API token it was made under: after ``CHATHUB_API_TOKEN`` changes,
every older row is refused and deleted. A sign-in ends ``idle`` after its last request and
``absolute`` after it began, whichever comes first; ``last_seen_at`` is written at most
once per ``touch_every`` so that pages refreshing every few seconds do not write each time.

``LoginThrottle`` counts failed sign-ins per client address, in this process's memory.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import re
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.http.tables import web_signins as w
from engine.store import Database, quick_unit, utcnow

__all__ = [
    "LoginThrottle",
    "NewSignIn",
    "SignIn",
    "SignInPolicy",
    "SignIns",
    "ThrottlePolicy",
    "csrf_token",
    "is_handle",
    "token_fingerprint",
]

#: ``secrets.token_urlsafe(32)``: 43 characters of the URL-safe base64 alphabet.
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")
_HANDLE = re.compile(r"[0-9a-f]{64}")
MAX_ADDRESS_CHARS = 64
MAX_AGENT_CHARS = 200
#: Sign-ins kept at most; the oldest end when a new one would exceed it (a script that
#: signs in on every run must not grow the table without bound).
MAX_SIGNINS = 50


@dataclass(frozen=True, slots=True)
class SignInPolicy:
    idle: timedelta = timedelta(hours=12)
    absolute: timedelta = timedelta(days=7)
    touch_every: timedelta = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class SignIn:
    """One signed-in browser. ``handle`` (the stored hash) names it on the page; it opens nothing."""

    handle: str
    created_at: datetime
    last_seen_at: datetime
    address: str | None
    user_agent: str | None


@dataclass(frozen=True, slots=True)
class NewSignIn:
    """A sign-in just made: ``secret`` goes in the cookie and is never stored."""

    secret: str
    signin: SignIn


def token_fingerprint(token: str) -> str:
    """Names the API token without revealing it (an HMAC keyed by the token)."""
    return hmac.new(token.encode(), b"chathub web sign-in token v1", hashlib.sha256).hexdigest()


def csrf_token(secret: str) -> str:
    """The form token of one sign-in: another sign-in's token is refused."""
    return hmac.new(secret.encode(), b"chathub web csrf v1", hashlib.sha256).hexdigest()


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def is_handle(value: str) -> bool:
    return _HANDLE.fullmatch(value) is not None


class SignIns:
    """Sign-ins made under ``token``, in the project's database."""

    def __init__(
        self,
        db: Database,
        *,
        token: str,
        policy: SignInPolicy | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if not token:
            raise ValueError("sign-ins need the API token")
        self._db = db
        self._fingerprint = token_fingerprint(token)
        self.policy = policy or SignInPolicy()
        self._clock = clock

    async def create(self, address: str | None, user_agent: str | None) -> NewSignIn:
        secret = secrets.token_urlsafe(32)
        now = self._clock()
        signin = SignIn(
            _hash(secret),
            now,
            now,
            _clean(address, MAX_ADDRESS_CHARS),
            _clean(user_agent, MAX_AGENT_CHARS),
        )
        await self._db.run(_create, signin, self._fingerprint, self._limits(now))
        return NewSignIn(secret, signin)

    async def lookup(self, secret: str, *, touch: bool = True) -> SignIn | None:
        """The live sign-in the cookie names (its last use noted, unless ``touch`` is off:
        a check that is no use of it), or None.

        A value of the wrong shape never reaches the database; an expired row is deleted,
        and a row made under another token takes every such row with it.
        """
        if _SECRET.fullmatch(secret) is None:
            return None
        now = self._clock()
        return await self._db.run(
            _lookup, _hash(secret), self._fingerprint, now, self._limits(now), self.policy, touch
        )

    async def revoke(self, handle: str) -> bool:
        """End one sign-in; False when it had already ended."""
        return await self._db.run(_revoke, handle)

    async def revoke_others(self, keep: str | None) -> int:
        """End every sign-in except ``keep`` (None: all of them); how many ended."""
        return await self._db.run(_revoke_others, keep)

    async def active(self) -> list[SignIn]:
        """The live sign-ins, most recently used first (expired ones are purged first)."""
        now = self._clock()
        return await self._db.run(_active, self._fingerprint, self._limits(now))

    async def purge(self) -> int:
        """Delete expired rows and those of another token; how many."""
        return await self._db.run(_purge, self._fingerprint, self._limits(self._clock()))

    def _limits(self, now: datetime) -> _Limits:
        return _Limits(seen_after=now - self.policy.idle, created_after=now - self.policy.absolute)


@dataclass(frozen=True, slots=True)
class _Limits:
    """A row lives while last seen after ``seen_after`` and created after ``created_after``."""

    seen_after: datetime
    created_after: datetime


def _clean(text: str | None, limit: int) -> str | None:
    """Printable text only (a header may carry control characters), cut to ``limit``."""
    if not text:
        return None
    kept = "".join(ch for ch in text if ch.isprintable())[:limit]
    return kept or None


def _signin(row: sa.Row) -> SignIn:
    return SignIn(row.id_hash, row.created_at, row.last_seen_at, row.address, row.user_agent)


def _dead(fingerprint: str, limits: _Limits) -> sa.ColumnElement[bool]:
    return sa.or_(
        w.c.token_fingerprint != fingerprint,
        w.c.last_seen_at <= limits.seen_after,
        w.c.created_at <= limits.created_after,
    )


def _create(conn: Connection, signin: SignIn, fingerprint: str, limits: _Limits) -> None:
    conn.execute(sa.delete(w).where(_dead(fingerprint, limits)))
    conn.execute(
        sa.insert(w).values(
            id_hash=signin.handle,
            token_fingerprint=fingerprint,
            created_at=signin.created_at,
            last_seen_at=signin.last_seen_at,
            address=signin.address,
            user_agent=signin.user_agent,
        )
    )
    newest = (
        sa.select(w.c.id_hash)
        .order_by(w.c.created_at.desc(), w.c.id_hash)
        .limit(MAX_SIGNINS)
        .scalar_subquery()
    )
    conn.execute(sa.delete(w).where(w.c.id_hash.not_in(newest)))


@quick_unit
def _lookup(
    conn: Connection,
    handle: str,
    fingerprint: str,
    now: datetime,
    limits: _Limits,
    policy: SignInPolicy,
    touch: bool = True,
) -> SignIn | None:
    row = conn.execute(sa.select(w).where(w.c.id_hash == handle)).one_or_none()
    if row is None:
        return None
    if not hmac.compare_digest(row.token_fingerprint, fingerprint):
        # The token changed: every sign-in made under another one ends now, not one by one.
        conn.execute(sa.delete(w).where(w.c.token_fingerprint != fingerprint))
        return None
    if row.last_seen_at <= limits.seen_after or row.created_at <= limits.created_after:
        conn.execute(sa.delete(w).where(w.c.id_hash == handle))
        return None
    signin = _signin(row)
    if touch and now - row.last_seen_at >= policy.touch_every:
        conn.execute(sa.update(w).where(w.c.id_hash == handle).values(last_seen_at=now))
        signin = SignIn(signin.handle, signin.created_at, now, signin.address, signin.user_agent)
    return signin


def _revoke(conn: Connection, handle: str) -> bool:
    return conn.execute(sa.delete(w).where(w.c.id_hash == handle)).rowcount > 0


def _revoke_others(conn: Connection, keep: str | None) -> int:
    query = sa.delete(w)
    if keep is not None:
        query = query.where(w.c.id_hash != keep)
    return conn.execute(query).rowcount


def _active(conn: Connection, fingerprint: str, limits: _Limits) -> list[SignIn]:
    conn.execute(sa.delete(w).where(_dead(fingerprint, limits)))
    rows = conn.execute(sa.select(w).order_by(w.c.last_seen_at.desc(), w.c.created_at.desc()))
    return [_signin(row) for row in rows]


def _purge(conn: Connection, fingerprint: str, limits: _Limits) -> int:
    return conn.execute(sa.delete(w).where(_dead(fingerprint, limits))).rowcount


# -- failed sign-ins ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    failures: int = 10
    window: timedelta = timedelta(minutes=15)
    #: Addresses remembered at most; the least recently failing are forgotten first.
    max_addresses: int = 10_000


class LoginThrottle:
    """After ``failures`` failed sign-ins within ``window`` from one address, wait.

    IPv6 addresses count per /64, the block one subscriber usually holds. Memory only:
    a restart forgets (acceptable for one owner's bot; each worker counts on its own).
    """

    def __init__(
        self, policy: ThrottlePolicy | None = None, *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.policy = policy or ThrottlePolicy()
        self._clock = clock
        self._failures: dict[str, deque[datetime]] = {}

    def retry_after(self, address: str | None) -> int | None:
        """Seconds until ``address`` may try again, or None when it may now."""
        key = _client_key(address)
        failures = self._failures.get(key)
        if failures is None:
            return None
        now = self._clock()
        while failures and failures[0] <= now - self.policy.window:
            failures.popleft()
        if not failures:
            del self._failures[key]
            return None
        if len(failures) < self.policy.failures:
            return None
        wait = (failures[0] + self.policy.window - now).total_seconds()
        return max(1, math.ceil(wait))

    def failed(self, address: str | None) -> None:
        key = _client_key(address)
        failures = self._failures.pop(key, None)
        if failures is None:
            failures = deque(maxlen=self.policy.failures)
        failures.append(self._clock())
        self._failures[key] = failures  # re-inserted: dict order is least recent first
        while len(self._failures) > self.policy.max_addresses:
            del self._failures[next(iter(self._failures))]

    def succeeded(self, address: str | None) -> None:
        self._failures.pop(_client_key(address), None)


def _client_key(address: str | None) -> str:
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:MAX_ADDRESS_CHARS]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)
