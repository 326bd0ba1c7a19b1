"""One request's answer, however its stream ends: its conversation let go exactly once, and
its text sent whole, once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bot.completions.answer import Answer, EventStream
from bot.completions.conversations import Conversation
from bot.completions.exchange import Exchange, Piece, Turn
from engine.bus import Lagged
from engine.hub import HubEvent
from engine.session import Done, TextDelta


class _Events:
    def close(self) -> None:
        pass


class _Keeper:
    async def finish(self, conversation: Conversation, said: str) -> None:
        pass


def answer_holding(lock: asyncio.Lock) -> Answer:
    """An answer read back (its turn ended before): it holds ``lock`` as a request does."""
    turn = Turn(None, _Events(), None, running=False, answer=Piece("hello"), holds=False)  # type: ignore[arg-type]
    return Answer(_Keeper(), Conversation(1, "main", "n", "h", 1), turn, "main", lock, created=0)


async def next_request_runs_alone(
    lock: asyncio.Lock,
    receive: Callable[[], Awaitable[Any]],
    send: Callable[[Any], Awaitable[None]],
) -> None:
    """The conversation's next request waits for the lock; once it is in, the stream of
    the one before has ended, and the lock stays held (a third request would wait)."""
    inside = asyncio.Event()

    async def next_request() -> None:
        async with lock:
            inside.set()
            await asyncio.sleep(3600)

    following = asyncio.create_task(next_request())
    await asyncio.sleep(0)
    try:
        await EventStream(answer_holding(lock))({"type": "http"}, receive, send)
        await asyncio.wait_for(inside.wait(), 1)
        await asyncio.sleep(0.05)  # the stream's generator let go of too
        assert lock.locked(), "the next request is running, and the conversation is free"
    finally:
        following.cancel()


async def test_a_slow_last_send_does_not_free_the_next_requests_lock() -> None:
    """The stream let go twice (its generator, then the response): the second time was the
    next request's lock, and a third ran beside it (found by review)."""
    lock = asyncio.Lock()
    await lock.acquire()

    async def receive() -> Any:
        await asyncio.sleep(3600)

    async def send(message: Any) -> None:  # the socket drains slowly at the end
        if message["type"] == "http.response.body" and not message.get("more_body"):
            await asyncio.sleep(0.01)

    await next_request_runs_alone(lock, receive, send)


async def test_a_client_gone_while_its_socket_was_full_does_not_free_the_next_lock() -> None:
    lock = asyncio.Lock()
    await lock.acquire()
    paused = asyncio.Event()

    async def receive() -> Any:
        await paused.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if b"hello" in message.get("body", b""):
            paused.set()  # the client stopped reading, then went away
            await asyncio.sleep(3600)

    await next_request_runs_alone(lock, receive, send)


class _Scripted:
    """A source's events as a request reads them: these items, then nothing."""

    def __init__(self, *items: object) -> None:
        self._items = list(items)

    async def recv(self) -> HubEvent:
        item = self._items.pop(0)
        if isinstance(item, Exception):
            raise item
        return HubEvent("api:1", 1, item)  # type: ignore[arg-type]


async def test_a_stream_that_fell_behind_gets_the_rest_of_the_answer_once() -> None:
    """Its deltas went on after the hole, and at the end the whole answer again after a
    blank line: the client read "one two six seven\\n\\none two three four five six
    seven" (found by review). It gets the text up to the hole, then the rest, once."""
    exchange = Exchange(None, None)  # type: ignore[arg-type]
    events = _Scripted(
        TextDelta("one "),
        TextDelta("two "),
        Lagged(3),  # "three four five " missed
        TextDelta("six "),
        TextDelta("seven"),
        Done("one two three four five six seven", 1),
    )
    pieces = [piece.text async for piece in exchange.follow(events, None)]  # type: ignore[arg-type]
    assert "".join(pieces) == "one two three four five six seven"
