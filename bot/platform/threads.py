"""The threads the bot takes part in, where a thread goes on without a mention once the bot
was addressed in it (Slack, Matrix)."""

from __future__ import annotations

from collections import OrderedDict

from engine.hub import ChatHub

__all__ = ["JoinedThreads"]


class JoinedThreads:
    """A thread (a source) is the bot's once it was addressed there: remembered as the
    message is taken, since its turn makes the thread's session only later (a follow-up
    sent at once was dropped), and after a restart known by that session."""

    def __init__(self, hub: ChatHub, *, remembered: int = 10_000) -> None:
        self._hub = hub
        self._remembered = remembered
        self._recent: OrderedDict[str, None] = OrderedDict()

    def join(self, source: str) -> None:
        self._recent[source] = None
        self._recent.move_to_end(source)
        if len(self._recent) > self._remembered:
            self._recent.popitem(last=False)

    async def joined(self, source: str) -> bool:
        if source in self._recent:
            return True
        return await self._hub.current_session(source) is not None
