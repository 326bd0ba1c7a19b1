"""An album as one message to the agent.

Telegram sends each photo or file of an album as an update of its own, moments apart, and
only the first carries the caption. Each item was a hub message of its own until
2026-12-06: the model answered "compare these two photos" having seen one, then answered
again for the next (found by review). Now an album's items, downloaded in their chat's
lane as any file is, are gathered until none came for ``quiet_s`` after the last one
was downloaded (an item is held from before its download: a slow one does not split the
album), then sent as one message whose commit marks every item's update handled, those
whose files could not be read too. Until then their updates stay unhandled in the
store: a process that dies meanwhile hands them over again at its next start, and a
fleet's receiver sends what it gathered before it lets its lease go (``flush_all``). A
message of the same chat that comes after the album (or another album) sends it first,
so the chat's order holds. An album sent while a question is open answers it whole, as
a message does (until 2026-12-07 its first item did, and the rest went to the agent as
a new message with an answer of its own; found by review).

In a group, an album is for the bot when any of its items mentions it: each item may have
a caption of its own. Items not addressed so far are held (``Unaddressed``: not
downloaded, their updates unhandled) until one that is comes, which takes them into its
album first, or until the album is quiet, when they are marked handled, for no one (until
2026-12-07 the items before the one with the mention were dropped; found by review).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from bot.platform.tasks import Runtime
from bot.telegram.sending.api import Json

__all__ = ["ALBUM_QUIET_S", "Album", "Albums", "Unaddressed"]

#: How long after an album's latest item its next one may still come.
ALBUM_QUIET_S = 0.8
#: Albums held for a mention at once (the oldest let go first); Telegram's has 10 items.
_UNADDRESSED_KEPT = 200
_ITEMS_KEPT = 10

Item = TypeVar("Item")


@dataclass(slots=True)
class Album:
    """The items of one album so far: the first item's place and metadata, every item's
    text, files and update."""

    source: str
    chat_id: int
    thread_id: int | None
    metadata: dict[str, Any]
    texts: list[str] = field(default_factory=list)
    attachments: list[Json] = field(default_factory=list)
    update_ids: list[int] = field(default_factory=list)
    #: What its items' files could not give: said once, as it is sent (a message's are
    #: one line; until 2026-12-07 an album's came once per item).
    problems: list[str] = field(default_factory=list)
    #: What its first item answers (an open question, an ❌'s reason window): the whole
    #: album does.
    target: tuple[str, Any] | None = None
    #: Items on their way (downloading): no quiet wait runs meanwhile.
    arriving: int = 0
    #: The wait for its next item; then the sending (started once).
    waiting: asyncio.Task[None] | None = None
    sending: asyncio.Future[None] | None = None

    @property
    def text(self) -> str:
        return "\n".join(text for text in self.texts if text)

    @property
    def options_metadata(self) -> dict[str, Any]:
        return (
            {**self.metadata, "attachments": self.attachments}
            if self.attachments
            else self.metadata
        )


class Albums:
    """Albums being gathered, by chat and album id; ``send`` gets each one once."""

    def __init__(
        self,
        send: Callable[[Album], Awaitable[None]],
        runtime: Runtime,
        quiet_s: float = ALBUM_QUIET_S,
    ) -> None:
        self._send = send
        self._runtime = runtime
        self._quiet_s = quiet_s
        #: The albums gathered or being sent, by (chat, album id).
        self.open: dict[tuple[int, str], Album] = {}

    async def hold(self, key: tuple[int, str], first: Album) -> None:
        """An item of album ``key`` is on its way (its files downloading): the album waits
        for it (``first``: the album as its first item opens it)."""
        await self.flush(key[0], keep=key[1])  # an earlier album of the chat goes first
        album = self._gathering(key, first)
        album.arriving += 1
        if album.waiting is not None:
            album.waiting.cancel()
            album.waiting = None

    def add(
        self,
        key: tuple[int, str],
        first: Album,
        text: str,
        attachments: list[Json],
        update_id: int,
        problems: Sequence[str] = (),
    ) -> None:
        """The held item of album ``key``: its text and files (none when they could not be
        read: its update is marked with the album's), then the quiet wait begins again."""
        album = self._gathering(key, first)
        album.texts.append(text)
        album.attachments += attachments
        album.update_ids.append(update_id)
        album.problems += problems
        self.release(key)

    def release(self, key: tuple[int, str]) -> None:
        """A held item arrived (or failed): the album waits for the next a while."""
        album = self.open.get(key)
        if album is None or album.sending is not None:
            return
        album.arriving = max(0, album.arriving - 1)
        if album.arriving == 0 and album.waiting is None:
            album.waiting = self._runtime.background.spawn(self._after_quiet(key, album))

    async def flush_all(self) -> None:
        """Every album gathered, sent now (a fleet's receiver, before its lease goes)."""
        for key, album in list(self.open.items()):
            await self._sent(key, album)

    def _gathering(self, key: tuple[int, str], first: Album) -> Album:
        album = self.open.get(key)
        if album is None or album.sending is not None:  # an item after it was sent
            album = self.open[key] = first
        return album

    async def flush(self, chat_id: int, *, keep: str | None = None) -> None:
        """Every album of ``chat_id`` sent now, but ``keep`` (one whose sending began is
        waited for)."""
        for (chat, album_id), album in list(self.open.items()):
            if chat == chat_id and album_id != keep:
                await self._sent((chat, album_id), album)

    async def _after_quiet(self, key: tuple[int, str], album: Album) -> None:
        await self._runtime.sleep(self._quiet_s)
        await self._sent(key, album)

    async def _sent(self, key: tuple[int, str], album: Album) -> None:
        if album.sending is None:
            if album.waiting is not None and album.waiting is not asyncio.current_task():
                album.waiting.cancel()  # still asleep: nothing of the sending is cut
            album.sending = self._runtime.background.spawn(self._send(album))
            album.sending.add_done_callback(lambda _done: self._forget(key, album))
        with contextlib.suppress(Exception):  # the sender says what went wrong
            await asyncio.shield(album.sending)

    def _forget(self, key: tuple[int, str], album: Album) -> None:
        if self.open.get(key) is album:
            del self.open[key]


@dataclass(slots=True)
class _Held(Generic[Item]):
    items: list[tuple[int, Item]] = field(default_factory=list)
    waiting: asyncio.Task[None] | None = None


class Unaddressed(Generic[Item]):
    """A group's album items that mention no one so far, by (chat, album id): taken by
    the album's first item that addresses the bot, or let go once the album is quiet
    (``let_go``: their updates marked handled)."""

    def __init__(
        self,
        let_go: Callable[[list[int]], Awaitable[None]],
        runtime: Runtime,
        quiet_s: float = ALBUM_QUIET_S,
    ) -> None:
        self._let_go = let_go
        self._runtime = runtime
        self._quiet_s = quiet_s
        self._held: dict[tuple[int, str], _Held[Item]] = {}

    def hold(self, key: tuple[int, str], update_id: int, item: Item) -> None:
        """Item ``update_id`` of album ``key``, held until the album is quiet."""
        held = self._held.get(key)
        if held is None:
            if len(self._held) >= _UNADDRESSED_KEPT:
                self._release(next(iter(self._held)))
            held = self._held[key] = _Held()
        if len(held.items) < _ITEMS_KEPT:
            held.items.append((update_id, item))
        else:  # no album is this long: the update is for no one
            self._runtime.background.spawn(self._let_go([update_id]))
        if held.waiting is not None:
            held.waiting.cancel()
        held.waiting = self._runtime.background.spawn(self._after_quiet(key, held))

    def take(self, key: tuple[int, str]) -> list[Item]:
        """The items of album ``key`` held so far, in their order; no longer held."""
        held = self._held.pop(key, None)
        if held is None:
            return []
        if held.waiting is not None:
            held.waiting.cancel()
        return [item for _update_id, item in held.items]

    def forget_all(self) -> None:
        """Nothing held any more, its updates left unhandled: the next start (or a fleet's
        next receiver) hands them over again."""
        for key in list(self._held):
            self.take(key)

    async def _after_quiet(self, key: tuple[int, str], held: _Held[Item]) -> None:
        await self._runtime.sleep(self._quiet_s)
        if self._held.get(key) is held:
            self._release(key)

    def _release(self, key: tuple[int, str]) -> None:
        held = self._held.pop(key)
        if held.waiting is not None and held.waiting is not asyncio.current_task():
            held.waiting.cancel()
        self._runtime.background.spawn(self._let_go([u for u, _item in held.items]))
