"""Taps on buttons: handlers registered by the prefix of their data, and a once-only answer.

Like aiogram 3's router: each kind of button registers its handler (``router.on("ap1:",
handle)``, optionally with a filter) instead of one function matching every prefix; data
no handler claims goes to the fallback (for a platform: "this button has expired").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from bot.platform.protocols import Answer

__all__ = ["CallbackRouter", "OneAnswer", "TapHandler"]

Tap = TypeVar("Tap")

#: Handles one tap; answers it through ``answer`` (once) when it has something to say.
TapHandler = Callable[[Tap, Answer], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Route(Generic[Tap]):
    prefix: str
    handler: TapHandler[Tap]
    when: Callable[[Tap], bool] | None


class CallbackRouter(Generic[Tap]):
    """Routes a tap to the first handler whose prefix (and filter) matches its data."""

    def __init__(self, fallback: TapHandler[Tap]) -> None:
        self._routes: list[_Route[Tap]] = []
        self._fallback = fallback

    def on(
        self, prefix: str, handler: TapHandler[Tap], *, when: Callable[[Tap], bool] | None = None
    ) -> None:
        if any(route.prefix == prefix and route.when is None for route in self._routes):
            raise ValueError(f"callbacks {prefix!r} are routed twice")
        self._routes.append(_Route(prefix, handler, when))

    def handler_for(self, data: str, tap: Tap) -> TapHandler[Tap]:
        for route in self._routes:
            if data.startswith(route.prefix) and (route.when is None or route.when(tap)):
                return route.handler
        return self._fallback

    async def dispatch(self, data: str, tap: Tap, answer: Answer) -> None:
        await self.handler_for(data, tap)(tap, answer)


class OneAnswer:
    """The answer to one tap: the first call sends it, later calls do nothing.

    A platform keeps a button spinning until its tap is answered, and takes one answer.
    """

    def __init__(self, send: Callable[[str | None], Awaitable[None]]) -> None:
        self._send = send
        self.sent = False

    async def __call__(self, text: str | None) -> bool:
        """Answer with ``text`` unless answered already; True when this call answered."""
        if self.sent:
            return False
        self.sent = True  # before the request: a failing one is not sent twice
        await self._send(text)
        return True
