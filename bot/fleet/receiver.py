"""One Telegram receiver in a fleet: whoever holds the lease ``telegram:receiver`` polls.

``ReceiverElection.run`` tries for the lease every ``min(ttl/3, 0.5 s)``; once it wins it
starts the receiver (the poller's ``run``) and renews every ``ttl/3``. The receiver is
cancelled at once when a renewal fails, raises, or comes back later than the lease could
still be ours (the process was paused: SIGSTOP, a swapped-out VM) — and only then does
the loop go back to trying, one ``ttl`` later: a paused process does not take the lease
back from under the healthy one that took over (or race it for it). A holder killed with
``kill -9`` is replaced when its lease expires: at most ``ttl`` after its last renewal,
plus one try interval of the next process: with the default 4 s, fail-over takes
3-4.5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

from engine.store import Lease, Leases

__all__ = ["RECEIVER_LEASE", "RECEIVER_TTL_S", "ReceiverElection", "process_identity"]

log = logging.getLogger(__name__)

RECEIVER_LEASE = "telegram:receiver"
RECEIVER_TTL_S = 4.0
#: How often a process that does not receive asks for the lease (one UPDATE each).
RECEIVER_TRY_S = 0.5


def process_identity() -> str:
    """``host:pid:random``: unique per process start, readable in the ``leases`` table."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class ReceiverElection:
    """Hold ``name`` and run ``receive`` while it is held (see the module's docstring)."""

    def __init__(
        self,
        leases: Leases,
        owner: str,
        receive: Callable[[], Awaitable[None]],
        *,
        name: str = RECEIVER_LEASE,
        ttl_s: float = RECEIVER_TTL_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``settle``: what must end before the lease is let go once the receiver stopped
        (the events it took, still being handled: the next holder hands over every one
        not marked handled, and one in hand here, a command, ran twice; found by review on
        2026-12-06); waited for at most what is left of the lease, unrenewed."""
        if not ttl_s > 0:
            raise ValueError(f"the receiver's lease needs a positive ttl, not {ttl_s!r}")
        self._leases = leases
        self.owner = owner
        self._receive = receive
        self.name = name
        self.ttl_s = ttl_s
        self._sleep = sleep
        self._monotonic = monotonic
        self._settle = settle
        #: The lease while this process receives, else None (``/metrics``).
        self.lease: Lease | None = None
        #: How many times this process won the lease, and lost it while receiving.
        self.won = 0
        self.lost = 0

    @property
    def interval_s(self) -> float:
        """Between renewals while receiving."""
        return self.ttl_s / 3

    @property
    def try_interval_s(self) -> float:
        """Between tries for the lease while another process holds it."""
        return min(self.interval_s, RECEIVER_TRY_S)

    async def run(self) -> None:
        """Until cancelled, or until the receiver itself ends (its exception propagates)."""
        while True:
            # The lease's time runs from the statement that took it: measure from before.
            asked = self._monotonic()
            lease = await self._try_acquire()
            if lease is None:
                await self._sleep(self.try_interval_s)
                continue
            if await self._hold(lease, asked):
                return
            # Lost while receiving (paused, cut off): another process that asks every try
            # interval takes over meanwhile; only a process alone comes back to it.
            await self._sleep(self.ttl_s)

    async def _try_acquire(self) -> Lease | None:
        try:
            return await self._leases.acquire(self.name, self.owner, self.ttl_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database is away: try again at the next try
            log.warning("could not ask for the %s lease (%s); trying again", self.name, exc)
            return None

    async def _hold(self, lease: Lease, confirmed: float) -> bool:
        """Receive while ``lease`` holds; True when the receiver ended on its own.

        ``confirmed``: monotonic time before the statement that last gave us the lease.
        """
        self.lease, self.won = lease, self.won + 1
        log.info("%s: this process (%s) receives, epoch %d", self.name, self.owner, lease.epoch)
        receiver = asyncio.ensure_future(self._receive())
        lost = False
        try:
            while True:
                tick = asyncio.ensure_future(self._sleep(self.interval_s))
                try:
                    await asyncio.wait({receiver, tick}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    tick.cancel()
                if receiver.done():
                    receiver.result()  # its exception, if any, is the caller's
                    return True
                started = self._monotonic()
                if started - confirmed >= self.ttl_s or not await self._renew(lease):
                    lost = True
                    return False
                confirmed = started
        finally:
            self.lease = None
            try:
                await _stopped(receiver)
            finally:
                if lost:  # counted once the receiver is stopped: whoever sees it sees that
                    self.lost += 1
                    log.warning("%s: lost the lease (epoch %d); stopped", self.name, lease.epoch)
                try:
                    await self._settled(confirmed + self.ttl_s - self._monotonic())
                finally:  # a second cancellation (a stop's deadline) lets go too
                    # Let the next process in now rather than at expiry. Harmless when the
                    # lease is lost already: a release needs our owner and epoch on a live
                    # lease.
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(self.interval_s):
                            await self._leases.release(lease)

    async def _settled(self, left_s: float) -> None:
        """``settle``, for at most ``left_s``: what is left of the lease (past it, the next
        holder takes the events over anyway)."""
        if self._settle is None or left_s <= 0:
            return
        try:
            async with asyncio.timeout(left_s):
                await self._settle()
        except Exception:  # a timeout included: the lease ends by itself meanwhile
            log.warning("%s: what was received is not handled yet; letting go", self.name)

    async def _renew(self, lease: Lease) -> bool:
        # A renewal slower than what is left of the lease could confirm one that already
        # expired and was taken: give up waiting for it before then. ``asyncio.timeout``,
        # not ``asyncio.wait_for``: on Python 3.11 a cancellation that arrives as the
        # renewal's answer does is dropped by ``wait_for`` (it returns the answer), and the
        # election would renew on, unstoppable (a stop waits for it forever).
        try:
            async with asyncio.timeout(self.ttl_s - self.interval_s):
                return await self._leases.renew(lease, self.ttl_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s: renewing failed (%s)", self.name, str(exc) or type(exc).__name__)
            return False


async def _stopped(task: asyncio.Future[None]) -> None:
    """Cancel ``task`` and return once it has ended, whatever it ended with.

    Not ``await task`` under ``suppress(CancelledError)``: a cancellation of the caller
    arrives through that same ``await`` while the task winds down, and was swallowed with
    the task's own (the election, told to stop, won the lease again and polled on, and
    whoever stopped it waited forever). The caller's cancellation is raised here once the
    task has ended, so that a stopped election never leaves its receiver running.
    """
    task.cancel()
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})  # raises only the caller's own cancellation
        except asyncio.CancelledError as exc:
            cancelled = exc
    if not task.cancelled():
        task.exception()  # retrieved: how a stopped receiver ended is nobody's business
    if cancelled is not None:
        raise cancelled
