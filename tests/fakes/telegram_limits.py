"""Telegram's documented rate limits, for the fake Bot API (opt-in).

``FakeTelegramServer(enforce_limits=True)`` (or ``fake.enforce_limits(...)``) answers a
call over a limit as Telegram does: status 429, ``"Too Many Requests: retry after N"`` and
``parameters.retry_after`` (whole seconds, at least 1: when the fullest window admits a
call again). Every such answer is counted (``RateLimits.rejected``).

The source is the Bot API FAQ ("My bot is hitting limits, how do I avoid this?"): in a
single chat avoid more than one message per second, short bursts are allowed but
"eventually you'll begin receiving 429 errors"; no more than 20 messages per minute in a
group; no more than about 30 messages per second overall. Telegram publishes no exact
algorithm, so the fake reads the guidance as sliding windows over the calls it accepted
(a call refused with 429 sends nothing and does not count):

=====================  ==========================================================
sends, private chat     at most 5 in any 1 s (a short burst) and 65 in any 60 s
                        (one a second, with the burst on top)
sends, group            at most 5 in any 1 s and 20 in any 60 s
edits, per chat         counted apart from sends: at most 5 in any 1 s and 65 in
                        any 60 s
overall                 sends and edits in all chats: at most 30 in any 1 s
=====================  ==========================================================

Sends are the methods that post a new message (``sendMessage``, ``sendDocument``, ...);
edits are ``editMessageText`` and its siblings. Chat actions, callback answers, drafts
and everything else are not limited. A token bucket with a burst of ``b`` and a rate of
``r`` per second sends at most ``b + r * t`` in any ``t`` seconds: chathub's private
default (a burst of 4, then 1/s) stays within 5 per second and 64 per minute.

``peak`` keeps the fullest each window has been (after an accepted call): how close a
client came, even when it never crossed a limit.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EDIT_METHODS", "SEND_METHODS", "Limits", "RateLimits", "Rejection", "Window"]

SEND_METHODS = frozenset(
    m.lower()
    for m in (
        "sendMessage",
        "sendDocument",
        "sendPhoto",
        "sendAudio",
        "sendVideo",
        "sendAnimation",
        "sendVoice",
        "sendVideoNote",
        "sendSticker",
        "sendMediaGroup",
        "sendLocation",
        "sendVenue",
        "sendContact",
        "sendPoll",
        "sendDice",
        "copyMessage",
        "forwardMessage",
    )
)
EDIT_METHODS = frozenset(
    m.lower()
    for m in (
        "editMessageText",
        "editMessageCaption",
        "editMessageMedia",
        "editMessageReplyMarkup",
        "editMessageLiveLocation",
    )
)


@dataclass(frozen=True, slots=True)
class Window:
    """At most ``count`` calls in any ``seconds``."""

    count: int
    seconds: float

    def __str__(self) -> str:
        return f"{self.count}/{self.seconds:g}s"


@dataclass(frozen=True, slots=True)
class Limits:
    """The windows per scope (see the module docstring for the defaults' reasons)."""

    private: tuple[Window, ...] = (Window(5, 1.0), Window(65, 60.0))
    group: tuple[Window, ...] = (Window(5, 1.0), Window(20, 60.0))
    edits: tuple[Window, ...] = (Window(5, 1.0), Window(65, 60.0))
    overall: tuple[Window, ...] = (Window(30, 1.0),)


@dataclass(frozen=True, slots=True)
class Rejection:
    """One call answered 429."""

    method: str
    chat_id: int | None
    rule: str  # e.g. "private 5/1s"
    retry_after: int
    time: float


@dataclass
class _Counter:
    windows: tuple[Window, ...]
    times: deque[float] = field(default_factory=deque)

    def wait(self, now: float) -> float:
        """Seconds until one more call fits every window (0: it fits now)."""
        longest = max(w.seconds for w in self.windows)
        while self.times and self.times[0] <= now - longest:
            self.times.popleft()
        wait = 0.0
        for window in self.windows:
            inside = [t for t in self.times if t > now - window.seconds]
            if len(inside) >= window.count:
                wait = max(wait, inside[-window.count] + window.seconds - now)
        return wait

    def add(self, now: float) -> None:
        self.times.append(now)

    def fullness(self, now: float) -> dict[Window, int]:
        return {w: sum(1 for t in self.times if t > now - w.seconds) for w in self.windows}


class RateLimits:
    """Counts accepted sends and edits; says when a call would cross a limit."""

    def __init__(
        self, limits: Limits | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or Limits()
        self.clock = clock
        self.rejected: list[Rejection] = []
        """Every call answered 429, in order."""
        self.peak: dict[str, int] = {}
        """The most calls any window held, by rule (``"private 5/1s"``: 4)."""
        self._chats: dict[tuple[str, int], _Counter] = {}
        self._overall = _Counter(self.limits.overall)

    @property
    def count_429(self) -> int:
        return len(self.rejected)

    def reset(self) -> None:
        self.rejected.clear()
        self.peak.clear()
        self._chats.clear()
        self._overall = _Counter(self.limits.overall)

    def check(self, method: str, params: dict[str, Any]) -> int | None:
        """``None`` when the call may go through; else ``retry_after`` (and it is counted)."""
        counters = self._counters(method, params)
        if not counters:
            return None
        now = self.clock()
        worst, rule = 0.0, ""
        for scope, counter in counters:
            wait = counter.wait(now)
            if wait > worst:
                worst, rule = wait, f"{scope} " + " ".join(str(w) for w in counter.windows)
        if worst <= 0:
            return None
        retry_after = max(1, math.ceil(worst))
        self.rejected.append(Rejection(method, _chat_id(params), rule, retry_after, now))
        return retry_after

    def record(self, method: str, params: dict[str, Any]) -> None:
        """The call was accepted: it counts."""
        now = self.clock()
        for scope, counter in self._counters(method, params):
            counter.add(now)
            for window, held in counter.fullness(now).items():
                key = f"{scope} {window}"
                self.peak[key] = max(self.peak.get(key, 0), held)

    def _counters(self, method: str, params: dict[str, Any]) -> list[tuple[str, _Counter]]:
        name = method.lower()
        if name in SEND_METHODS:
            kind = "send"
        elif name in EDIT_METHODS:
            kind = "edit"
        else:
            return []
        counters = [("overall", self._overall)]
        chat_id = _chat_id(params)
        if chat_id is not None:
            if kind == "edit":
                scope, windows = "edits", self.limits.edits
            elif chat_id < 0:
                scope, windows = "group", self.limits.group
            else:
                scope, windows = "private", self.limits.private
            counter = self._chats.get((scope, chat_id))
            if counter is None:
                counter = self._chats[(scope, chat_id)] = _Counter(windows)
            counters.insert(0, (scope, counter))
        return counters


def _chat_id(params: dict[str, Any]) -> int | None:
    value = params.get("chat_id")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return -(abs(hash(value)) % 10**12) - 1  # "@channel": a group-like chat
    return None
