"""``SourceOwnership``: in a fleet, which sources this process works, under leases.

A source (a chat, a topic, a web conversation) is worked by one process at a time: the
one holding the lease ``source:<name>`` (``engine/store/leases.py``, timed by the
database's clock). This process claims a source when work for it arrives and nobody
holds it, renews what it holds every ``ttl/3``, and lets it go when the source falls
idle, so work spreads over the fleet and moves only when an owner dies or sheds it.

Each turn runs behind the lease's fence (``engine/store/fencing.py``): once the lease is
lost, none of that turn's transactions commit, so an owner paused past its expiry (SIGSTOP)
cannot answer a second time after the new owner took over.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.hub.protocols import Sleep
from engine.store.fencing import Fence
from engine.store.leases import PROCESS_LEASE_PREFIX, Lease, Leases, lease_fence

__all__ = ["SOURCE_LEASE_PREFIX", "FleetConfig", "SourceOwnership", "pick"]

log = logging.getLogger(__name__)

SOURCE_LEASE_PREFIX = "source:"


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """This process's part in a fleet of processes on one PostgreSQL database."""

    #: This process's id in the ``leases`` table (``host:pid:random``).
    owner: str
    #: A source's lease lasts this long without renewal: the longest a dead owner's
    #: sources wait before another process takes them over.
    lease_ttl_s: float = 10.0
    #: How often each process looks for work nobody holds (a dead owner's, or a message
    #: that arrived while its owner was letting the source go).
    scan_interval_s: float = 2.0

    @classmethod
    def for_lease(cls, owner: str, lease_ttl_s: float) -> FleetConfig:
        """Scans every quarter lease, at most every second: a dead owner's work is taken
        within about ``lease_ttl_s`` plus one second."""
        return cls(owner, lease_ttl_s=lease_ttl_s, scan_interval_s=min(1.0, lease_ttl_s / 4))

    def __post_init__(self) -> None:
        if not self.owner:
            raise ValueError("a fleet process needs an owner id")
        if not self.lease_ttl_s > 0 or not self.scan_interval_s > 0:
            raise ValueError("the fleet's lease ttl and scan interval must be positive")


def lease_name(source: str) -> str:
    return SOURCE_LEASE_PREFIX + source


def pick(source: str, members: Iterable[str]) -> str | None:
    """The member a free source goes to: rendezvous hashing, so every process picks the
    same one, and a member leaving moves only its own share."""
    best: tuple[bytes, str] | None = None
    for member in members:
        weight = hashlib.sha256(f"{member}\0{source}".encode()).digest()
        if best is None or weight > best[0]:
            best = (weight, member)
    return None if best is None else best[1]


class SourceOwnership:
    """The sources this process holds; claims, renewals, releases and fences."""

    def __init__(
        self,
        leases: Leases,
        config: FleetConfig,
        *,
        sleep: Sleep = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases = leases
        self.config = config
        self._sleep = sleep
        self._monotonic = monotonic
        self._held: dict[str, Lease] = {}
        self._membership: Lease | None = None
        # The membership's tenure on the monotonic clock: held without a break since
        # ``_member_since`` (read after the joining statement returned) and, as far as this
        # process can tell, until ``_member_until`` (the last renewal's start plus the ttl:
        # the database's expiry is at least that late).
        self._member_since: float | None = None
        self._member_until = float("-inf")
        #: The live processes as last read (``refresh_members``), this one included.
        self.members: tuple[str, ...] = (config.owner,)

    @property
    def owner(self) -> str:
        return self.config.owner

    def owned(self) -> list[str]:
        return sorted(self._held)

    def owns(self, source: str) -> bool:
        return source in self._held

    async def claim(self, source: str) -> bool:
        """Hold ``source`` (True) unless another live process does."""
        lease = await self._leases.acquire(lease_name(source), self.owner, self.config.lease_ttl_s)
        if lease is None:
            self._held.pop(source, None)
            return False
        self._held[source] = lease
        return True

    def forget(self, source: str) -> None:
        """``source``'s lease is known gone (a transaction behind its fence failed): not
        held here, whatever the renewal last saw; a later claim asks for it anew."""
        self._held.pop(source, None)

    def fence(self, source: str) -> Fence | None:
        """The fence of ``source``'s current holding (``None``: not held here)."""
        lease = self._held.get(source)
        return None if lease is None else lease_fence(lease)

    def epoch(self, source: str) -> int | None:
        lease = self._held.get(source)
        return None if lease is None else lease.epoch

    async def holder(self, source: str) -> str | None:
        """Who holds ``source`` now, if anyone (this process included)."""
        lease = await self._leases.holder(lease_name(source))
        return None if lease is None else lease.owner

    async def release(self, source: str) -> None:
        """Let ``source`` go (it fell idle here): the next message's process claims it."""
        lease = self._held.pop(source, None)
        if lease is not None:
            try:
                await self._leases.release(lease)
            except Exception:  # expires by itself; only a take-over waits longer
                log.warning("releasing %s failed; it expires by itself", lease.name)

    async def release_all(self) -> None:
        for source in list(self._held):
            await self.release(source)

    async def join(self) -> None:
        """Hold this process's membership lease (renewed in a loop of its own)."""
        name = PROCESS_LEASE_PREFIX + self.owner
        self._member_since = None  # a new tenure: what was taken before it may be gone
        started = self._monotonic()
        self._membership = await self._leases.acquire(name, self.owner, self.config.lease_ttl_s)
        if self._membership is not None:
            self._member_since = self._monotonic()
            self._member_until = started + self.config.lease_ttl_s

    async def leave(self) -> None:
        self._member_since = None
        if self._membership is not None:
            with contextlib.suppress(Exception):
                await self._leases.release(self._membership)
            self._membership = None

    def mark(self) -> float:
        """Now, on the clock ``tenure_holds`` reads: taken before a row is recorded or
        claimed, so the row's commit comes after it."""
        return self._monotonic()

    def tenure_holds(self, mark: float) -> bool:
        """Whether this process has been a member without a break since before ``mark``
        and still is, with a quarter lease to spare.

        Others take a lapsed member for dead and send what it recorded but had not sent;
        a send that passes this check goes out before they could have (their check and
        this one are both timed against the membership's expiry in the database). Once
        it fails, what was taken at ``mark`` is no longer this process's to send.
        """
        since = self._member_since
        margin = self.config.lease_ttl_s / 4
        return (
            since is not None and since <= mark and self._monotonic() < self._member_until - margin
        )

    async def refresh_members(self) -> tuple[str, ...]:
        live = await self._leases.live(PROCESS_LEASE_PREFIX)
        owners = {lease.owner for lease in live} | {self.owner}
        members = tuple(sorted(owners))
        if members != self.members:  # what each member's share of a platform's cap follows
            log.info("fleet members now %d: %s", len(members), ", ".join(members))
        self.members = members
        return self.members

    async def renew_membership(self) -> None:
        if self._membership is None:
            return
        if self._member_since is None:
            # The last joining again failed (the database away): renewing the lease it
            # still holds would leave the tenure broken for good, every reply taken from
            # then on handed back unsent. A tenure starts only with a join.
            await self.join()
            return
        started = self._monotonic()
        try:
            kept = await self._leases.renew(self._membership, self.config.lease_ttl_s)
        except Exception:
            kept = False
        if kept:  # unexpired when renewed: the tenure goes on
            self._member_until = started + self.config.lease_ttl_s
        else:
            log.warning("this process's membership lease had lapsed; joining again")
            await self.join()

    async def renew_sources(self) -> list[str]:
        """Every source lease in one statement; the sources lost."""
        held = dict(self._held)
        started = self._monotonic()
        try:
            kept = await self._leases.renew_all(list(held.values()), self.config.lease_ttl_s)
        except Exception:
            log.warning("renewing %d source lease(s) failed; treating them as lost", len(held))
            kept = set()
        if self._monotonic() - started >= self.config.lease_ttl_s:
            kept = set()  # renewed too late to trust what ran meanwhile
        lost = []
        for source, lease in held.items():
            if lease.name not in kept and self._held.get(source) is lease:
                del self._held[source]
                lost.append(source)
        return lost

    async def keep(self, on_lost: Callable[[Iterable[str]], None]) -> None:
        """Renew every ``ttl/3`` until cancelled; ``on_lost`` gets what slipped away. The
        membership has a loop of its own: others take a lapsed member for dead and send
        its replies, so it never waits behind the sources' renewal."""
        membership = asyncio.ensure_future(self._keep_membership())
        try:
            interval = self.config.lease_ttl_s / 3
            while True:
                await self._sleep(interval)
                lost = await self.renew_sources()
                if lost:
                    log.warning("lost the lease of %d source(s): %s", len(lost), ", ".join(lost))
                    on_lost(lost)
        finally:
            membership.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await membership

    async def _keep_membership(self) -> None:
        while True:
            await self._sleep(self.config.lease_ttl_s / 3)
            try:
                await self.renew_membership()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is away: the next round
                log.warning("renewing this process's membership failed", exc_info=True)
