"""Outbound pacing as data: as fast as a platform allows, never a 429 we could avoid.

A platform's limits are a ``PacingPolicy``: a bucket per conversation (private and group
rates), a window per group, one cap for the whole platform, and buckets for edits.
Telegram's (Bot API FAQ, "My bot is hitting limits, how do I avoid this?"): about one
message per second per chat, short bursts allowed; at most 20 messages per minute in a
group; about 30 messages per second overall; a ``429`` with ``retry_after`` is the
authority. So each chat has a bucket (private: a burst of 4, refilled at 1/s; group: a
burst of 3, refilled at 20 per minute, and never more than 20 in any minute), and all
chats share a cap of 30 in any second. The caps are sliding windows, not buckets: a bucket
of 30 refilled at 30/s would let 60 through in its first second.
A reply to a chat that has been quiet goes out at once, and so do the several messages of
one turn while the bucket holds. Edits of a message already sent have buckets of their own
(Telegram counts them apart from new messages; the progress line edits often). Every
other call (answering a tap, the typing indicator, a file's path) takes no token but waits
out its conversation's pause and the platform's.

The platform's cap holds for a whole fleet: each process keeps its share of it, the cap
divided by the fleet's live members (``members``; docs/scale-out.md says why).

A window counts a call from its turn until its answer came (``Ticket.answered``) and for
its window's length after: the platform counts it when it arrives, somewhere in between,
so a call still under way may not be forgotten. Counted from the turn alone, calls held
up on the way (a stalled process or network) arrived together with the next window's,
and a fleet keeping 24 a second had 31 arrive within one second.

A ``429`` pauses what it names: its conversation for ``retry_after``. When 429s come from
several conversations at once, the limit hit is the platform's, and everything waits (a
flood wait). Nothing here is persisted: after a restart the buckets start full, which the
platforms allow (their counters are per second and per minute).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ANSWER",
    "EDIT",
    "OTHER",
    "SEND",
    "Bucket",
    "CallKind",
    "Cap",
    "Pacer",
    "PacingPolicy",
    "Rate",
    "Ticket",
    "Window",
]

log = logging.getLogger(__name__)

_EPSILON = 1e-9
_MARGIN_S = 0.01
_MAX_CHATS = 4096  # remembered buckets before idle (full) ones are forgotten

#: The part of a platform's cap a fleet uses: a process that joins is counted by the
#: others only at their next scan, and until then the fleet's shares add up to more than
#: the whole (three at 8 a second and a fourth at 6 are 30).
FLEET_HEADROOM = 0.8
#: How often a full window looks again while the calls that fill it are under way.
IN_FLIGHT_POLL_S = 0.02
#: A call counts as under way at most this long (every client's calls time out sooner).
MAX_UNDER_WAY_S = 120.0

#: What a call is to the pacer: a new message, an edit of one, or anything else.
CallKind = Literal["send", "edit", "other", "answer"]
SEND: CallKind = "send"
EDIT: CallKind = "edit"
OTHER: CallKind = "other"
#: The answer to a person's tap: it waits for no chat's pause (Telegram wants it within
#: seconds, and an approval waited behind it), though a 429 on it pauses its chat.
ANSWER: CallKind = "answer"


@dataclass(frozen=True, slots=True)
class Rate:
    """``burst`` messages at once, then ``per_second`` (both > 0)."""

    burst: float
    per_second: float

    def __post_init__(self) -> None:
        for name in ("burst", "per_second"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a number above 0, not {value!r}")


@dataclass(frozen=True, slots=True)
class Cap:
    """At most ``limit`` messages in any ``seconds`` (a sliding window)."""

    limit: int
    seconds: float

    def __post_init__(self) -> None:
        if not (isinstance(self.limit, int) and self.limit >= 1):
            raise ValueError(f"limit must be a whole number above 0, not {self.limit!r}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"seconds must be a number above 0, not {self.seconds!r}")

    @classmethod
    def per_second(cls, rate: float) -> Cap:
        """``rate`` a second as a window: 30/s is 30 in any second, 0.5/s one in 2 s."""
        limit = max(1, int(rate)) if rate < 1e9 else 10**9
        return cls(limit, limit / rate)


@dataclass(frozen=True, slots=True)
class PacingPolicy:
    private: Rate = Rate(4, 1.0)
    group: Rate = Rate(3, 20 / 60)
    #: Never more than this in a group, whatever the bucket holds (Telegram: 20 a minute).
    group_cap: Cap | None = Cap(20, 60.0)
    overall: Cap = Cap(30, 1.0)
    #: Edits of sent messages, per chat (separate from new messages).
    edits: Rate = Rate(3, 1.0)
    #: 429s from this many different chats within ``flood_window_s`` mean a global flood.
    flood_chats: int = 3
    flood_window_s: float = 1.0
    #: The platform limits each method apart (Slack's tiers): a 429 on an edit pauses the
    #: conversation's edits only, and one on any other call (a DM opened, a modal, a
    #: status) nothing but that call, not the conversation's messages nor the platform.
    per_method: bool = False

    @classmethod
    def uniform(cls, per_second: float, *, burst: float = 1) -> PacingPolicy:
        """One rate for every chat (tests and benchmarks that want no waiting: a big one)."""
        rate = Rate(burst, per_second)
        return cls(
            private=rate, group=rate, group_cap=None, overall=Cap.per_second(per_second), edits=rate
        )


@dataclass(slots=True)
class Bucket:
    rate: Rate
    tokens: float
    updated: float
    paused_until: float = 0.0

    @classmethod
    def full(cls, rate: Rate, now: float) -> Bucket:
        return cls(rate, float(rate.burst), now)

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: now)."""
        self._refill(now)
        pause = max(0.0, self.paused_until - now)
        if self.tokens >= 1 - _EPSILON:  # refills in float arithmetic land just short of 1
            return pause if pause > _EPSILON else 0.0
        return max(pause, (1 - self.tokens) / self.rate.per_second)

    def take(self, now: float) -> None:
        self._refill(now)
        self.tokens -= 1

    def pause(self, until: float) -> None:
        """Nothing goes out before ``until``; afterwards one message at a time again."""
        self.paused_until = max(self.paused_until, until)
        self.tokens = min(self.tokens, 1.0)  # at ``until``: one, not a burst
        self.updated = max(self.updated, until)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            gained = (now - self.updated) * self.rate.per_second
            self.tokens = min(float(self.rate.burst), self.tokens + gained)
            self.updated = now


@dataclass(slots=True)
class Window:
    """A ``Cap`` kept: the calls within its window, those under way included. A call
    counts from its turn (``take``) until ``seconds`` after its answer (``done``); one
    that never ends counts as answered ``MAX_UNDER_WAY_S`` after its turn.

    ``share``: how many keep the cap together (a fleet's live members); this one keeps
    its part of ``FLEET_HEADROOM`` of it, rounded down, at least one.
    """

    cap: Cap
    paused_until: float = 0.0
    share: Callable[[], int] = lambda: 1
    #: The calls under way, by token: their turns' times, oldest first.
    under_way: dict[int, float] = field(default_factory=dict)
    #: When the calls still in the window were answered, in order.
    answered: list[float] = field(default_factory=list)
    _tokens: Iterator[int] = field(default_factory=itertools.count)

    @property
    def limit(self) -> int:
        share = self.share()
        if share <= 1:
            return self.cap.limit
        return max(1, int(self.cap.limit * FLEET_HEADROOM) // share)

    def wait(self, now: float) -> float:
        pause = max(0.0, self.paused_until - now)
        self._forget(now)
        over = len(self.under_way) + len(self.answered) - self.limit + 1
        if over <= 0:
            return pause if pause > _EPSILON else 0.0
        if over > len(self.answered):  # a call under way must end first: look again soon
            oldest = next(iter(self.under_way.values()))
            return max(pause, min(IN_FLIGHT_POLL_S, oldest + MAX_UNDER_WAY_S - now + _MARGIN_S))
        # The ``over`` first answered must have left, just after ``seconds``: a margin
        # keeps the count under the limit wherever the other side draws the window's edge.
        return max(pause, self.answered[over - 1] + self.cap.seconds + _MARGIN_S - now)

    def take(self, now: float) -> int:
        token = next(self._tokens)
        self.under_way[token] = now
        return token

    def done(self, token: int, now: float) -> None:
        if self.under_way.pop(token, None) is not None:
            bisect.insort(self.answered, now)

    def pause(self, until: float) -> None:
        self.paused_until = max(self.paused_until, until)

    def paused(self, now: float) -> float:
        """Seconds until a pause ends (0: none)."""
        pause = self.paused_until - now
        return pause if pause > _EPSILON else 0.0

    def idle(self, now: float) -> bool:
        self._forget(now)
        return not self.under_way and not self.answered and self.paused_until <= now

    def _forget(self, now: float) -> None:
        """Calls under way too long count as answered; those that left are forgotten."""
        while self.under_way:  # oldest first: stop at the first still under way
            token, start = next(iter(self.under_way.items()))
            if start + MAX_UNDER_WAY_S > now:
                break
            del self.under_way[token]
            bisect.insort(self.answered, start + MAX_UNDER_WAY_S)
        left = bisect.bisect_right(self.answered, now - self.cap.seconds - _MARGIN_S)
        if left:
            del self.answered[:left]


@dataclass(frozen=True, slots=True)
class Ticket:
    """A call's turn: ``answered`` once the platform answered it (or it failed or was
    never made), so the windows it is counted in start forgetting it."""

    places: tuple[tuple[Window, int], ...]
    clock: Callable[[], float]

    def answered(self) -> None:
        now = self.clock()
        for window, token in self.places:
            window.done(token, now)


@dataclass(slots=True)
class _Chat:
    sends: Bucket
    edits: Bucket
    cap: Window | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Edits wait on their own where each method is limited apart (``per_method``): an
    #: edit waiting out its 429 held the conversation's new messages behind it.
    edit_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Pacer:
    """Waits each platform call's turn: its conversation's bucket, then the platform's cap."""

    def __init__(
        self,
        policy: PacingPolicy | None = None,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        is_group: Callable[[str], bool] = lambda _conversation: False,
        members: Callable[[], int] = lambda: 1,
        name: str = "platform",
    ) -> None:
        """``members``: how many processes share the platform's cap (a fleet's live
        members, read at each send)."""
        self.policy = policy or PacingPolicy()
        self._clock = clock
        self._sleep = sleep
        self._is_group = is_group
        self._name = name
        self._chats: dict[str, _Chat] = {}
        self._overall = Window(self.policy.overall, share=members)
        self._overall_lock = asyncio.Lock()
        self._recent_429s: dict[str | None, float] = {}
        #: Seconds spent waiting for a bucket, for the benchmark's "wait due to pacing".
        self.waited_s = 0.0
        self.global_pauses = 0

    @property
    def overall_limit(self) -> int:
        """This process's share of the platform's cap, now."""
        return self._overall.limit

    async def turn(self, conversation: str | None, kind: CallKind = SEND) -> Ticket:
        """Return when a call of ``kind`` to ``conversation`` may go out; takes its token.
        The caller tells the ticket when the call was answered (in a ``finally``).

        ``conversation`` ``None``: a call of no conversation (it waits for a flood's pause).
        """
        if kind in (OTHER, ANSWER) or conversation is None:
            # Another call waits for its conversation's pause, unless 429s are per method.
            waits_for_chat = (
                conversation is not None and kind == OTHER and not self.policy.per_method
            )
            await self._paused(self._chat(conversation) if waits_for_chat else None)
            return Ticket((), self._clock)
        chat = self._chat(conversation)
        bucket = chat.edits if kind == EDIT else chat.sends
        places: list[tuple[Window, int]] = []
        apart = kind == EDIT and self.policy.per_method
        try:
            async with chat.edit_lock if apart else chat.lock:
                await self._take(bucket)
                if chat.cap is not None and kind == SEND:
                    places.append(await self._take_place(chat.cap))
                async with self._overall_lock:
                    places.append(await self._take_place(self._overall))
        except BaseException:  # cancelled while waiting: no call made, none under way
            Ticket(tuple(places), self._clock).answered()
            raise
        return Ticket(tuple(places), self._clock)

    def retry_after(self, conversation: str | None, seconds: float, kind: CallKind = SEND) -> bool:
        """A 429 for a call of ``kind`` to ``conversation``: pause it, or everything in a
        flood (True). Where each method is limited apart (``per_method``) an edit pauses
        the conversation's edits only, and another call nothing here: it waits alone
        (``waits_alone``)."""
        if self.waits_alone(conversation, kind):
            log.info("%s: 429 for a call (%s); it waits %gs", self._name, conversation, seconds)
            return False
        now = self._clock()
        until = now + seconds
        if conversation is not None:
            chat = self._chat(conversation)
            if kind == EDIT and self.policy.per_method:
                chat.edits.pause(until)
                log.info(
                    "%s: 429 for edits in %s; they wait %gs", self._name, conversation, seconds
                )
                return False
            chat.sends.pause(until)
            chat.edits.pause(until)
        self._recent_429s[conversation] = now
        window = now - self.policy.flood_window_s
        recent = [c for c, at in self._recent_429s.items() if at >= window]
        self._recent_429s = {c: self._recent_429s[c] for c in recent}
        if conversation is None or len(recent) >= self.policy.flood_chats:
            self.global_pauses += 1
            log.warning(
                "%s: 429s from %d conversation(s) at once; all calls wait %gs",
                self._name,
                len(recent),
                seconds,
            )
            self._overall.pause(until)
            return True
        log.info("%s: 429 for %s; it waits %gs", self._name, conversation, seconds)
        return False

    def waits_itself(self, conversation: str | None, kind: CallKind) -> bool:
        """Whether a call retried after a 429 must sleep out its retry-after itself: its
        next ``turn`` waits for no pause the 429 set (a call that waits alone; a tap's
        answer, which waits for no conversation's pause: until 2026-12-07 it was retried
        at once, 20 times, through a flood wait; found by review; ``Outbound`` gives it
        one short wait at most)."""
        return self.waits_alone(conversation, kind) or (kind == ANSWER and conversation is not None)

    def waits_alone(self, conversation: str | None, kind: CallKind) -> bool:
        """Whether a 429 of this call pauses nothing but the call itself (its caller waits
        the retry-after): a call of no conversation's messages where each method is
        limited apart."""
        return self.policy.per_method and (conversation is None or kind in (OTHER, ANSWER))

    async def _paused(self, chat: _Chat | None) -> None:
        while True:
            now = self._clock()
            delay = self._overall.paused(now)
            if chat is not None:
                delay = max(delay, chat.sends.paused_until - now)
            if delay <= _EPSILON:
                return
            self.waited_s += delay
            await self._sleep(delay)

    async def _take(self, bucket: Bucket) -> None:
        await self._wait_for(bucket)
        bucket.take(self._clock())

    async def _take_place(self, window: Window) -> tuple[Window, int]:
        await self._wait_for(window)
        return window, window.take(self._clock())

    async def _wait_for(self, limit: Bucket | Window) -> None:
        while (delay := limit.wait(self._clock())) > 0:
            self.waited_s += delay
            await self._sleep(delay)

    def _chat(self, conversation: str) -> _Chat:
        chat = self._chats.get(conversation)
        if chat is None:
            now = self._clock()
            if len(self._chats) >= _MAX_CHATS:
                self._forget_idle(now)
            group = self._is_group(conversation)
            rate = self.policy.group if group else self.policy.private
            cap = self.policy.group_cap if group else None
            chat = self._chats[conversation] = _Chat(
                Bucket.full(rate, now),
                Bucket.full(self.policy.edits, now),
                Window(cap) if cap is not None else None,
            )
        return chat

    def _forget_idle(self, now: float) -> None:
        """Chats whose buckets are full again are like new ones: they need no memory."""
        for key, chat in list(self._chats.items()):
            if (
                not chat.lock.locked()
                and all(
                    b.wait(now) == 0 and b.tokens >= b.rate.burst for b in (chat.sends, chat.edits)
                )
                and (chat.cap is None or chat.cap.idle(now))
            ):
                del self._chats[key]
