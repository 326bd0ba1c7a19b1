"""``Front``, every platform's inbound side but Telegram's: a stored message is handled
once, and one a stop cut short is handed over at the next start (it was marked handled
although it never reached the hub)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import pytest

from bot.delivery import Pacing
from bot.platform.front import Front, FrontConfig
from bot.schema import LAYERS
from engine.store import Store
from tests.bot.delivery.fakes import FakeClient
from tests.clock import FakeTime
from tests.pg import BACKENDS, database_url

NAME = "fake"


@dataclass(frozen=True)
class Said:
    """A stored inbound message of the fake platform."""

    key: str
    lane: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "lane": self.lane, "text": self.text}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(data["key"], data["lane"], data["text"])


class NoHub:
    """A front end's hub, as far as ``Front`` reaches before a message is handled."""

    def on_answer(self, prefix: str, unit: Any) -> None: ...

    def on_failure(self, prefix: str, unit: Any) -> None: ...

    async def events(self) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield


class NoCards:
    async def load(self, runtime: Any) -> None: ...


async def no_welcome(_code: Any) -> None: ...


def front_over(store: Store, handle: Any, process_id: str | None = None) -> Front[Said]:
    """``process_id``: a fleet's process."""
    front: Front[Said] = Front(
        NAME,
        Said,
        NoHub(),  # type: ignore[arg-type]
        store.db,
        Pacing.unpaced(),
        FrontConfig(recover_outbox_at_start=False, process_id=process_id),
        welcome=no_welcome,
    )
    front.deliver_with(FakeClient(FakeTime()))
    front.attach(object(), object(), object(), handle, progress_interval_s=2.0)  # type: ignore[arg-type]
    return front


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with database_url(request.param, tmp_path, migrated=True) as url:
        opened = await Store.open(url, LAYERS)
        try:
            yield opened
        finally:
            await opened.close()


async def test_a_message_a_stop_cut_short_is_handed_over_at_the_next_start(store: Store) -> None:
    entered = asyncio.Event()

    async def slow(_said: Said) -> bool:  # a download, a transcription, a paced reply
        entered.set()
        await asyncio.Event().wait()
        return True

    first = front_over(store, slow)
    assert await first.take(Said("m1", "chan", "hello")) == 1
    await entered.wait()
    await first.close(grace_s=0)  # the stop: what is in hand is cancelled

    seen: list[str] = []

    async def handle(said: Said) -> bool:
        seen.append(said.key)
        return False

    second = front_over(store, handle)  # the next start
    await second.take_over()
    await second.drain()
    await second.close()
    assert seen == ["m1"]


async def test_a_message_whose_handler_fails_is_not_handed_over_again(store: Store) -> None:
    async def broken(_said: Said) -> bool:
        raise RuntimeError("a bug")

    first = front_over(store, broken)
    assert await first.take(Said("m1", "chan", "hello")) == 1
    await first.drain()
    await first.close()

    seen: list[str] = []

    async def handle(said: Said) -> bool:
        seen.append(said.key)
        return False

    second = front_over(store, handle)
    await second.take_over()
    await second.drain()
    await second.close()
    assert seen == []


async def test_a_fleet_process_starting_leaves_what_the_receiver_is_handling_to_it(
    store: Store,
) -> None:
    """In a fleet, a process that starts does not take over the stored events not handled
    yet: the receiver may be handling one right now (a /new ran twice). The process that
    wins the receiver's lease takes them over (a dead receiver's)."""
    runs: list[str] = []
    release = asyncio.Event()

    async def receiving(said: Said) -> bool:
        runs.append(f"A {said.text}")
        await release.wait()  # e.g. stopping the chat's turn in another process
        return False

    async def starting(said: Said) -> bool:
        runs.append(f"B {said.text}")
        return False

    a = front_over(store, receiving, process_id="A")
    b = front_over(store, starting, process_id="B")
    assert await a.take(Said("m1", "chan", "/new")) == 1
    while not runs:  # noqa: ASYNC110 (the lane's task takes it up)
        await asyncio.sleep(0)
    await b.start(NoCards())  # type: ignore[arg-type]
    await b.drain()
    release.set()
    await a.drain()
    await a.close()
    await b.close()
    assert runs == ["A /new"]
