"""A hub over a real engine (SQLite file, workspace) and an in-process model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from engine.config import AppConfig, EngineConfig, HubConfig, load_settings
from engine.core import Engine
from engine.hub import ChatHub, HubEvent
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel
from engine.llm.types import LlmResponse, Message
from engine.session.events import Done
from engine.session.turn.gate import AllowAll
from tests.pg import migrated_sqlite


def last_user_text(messages: Sequence[Message]) -> str:
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")


class EchoModel(ScriptedModel):
    """Scripted replies first; then answers every request with ``echo: <last user text>``."""

    async def complete(self, messages, tools, *, on_delta=None):  # type: ignore[override]
        if not self.pending:
            self.add(lambda msgs: LlmResponse(content=f"echo: {last_user_text(msgs)}"))
        return await super().complete(messages, tools, on_delta=on_delta)


class Held(asyncio.Event):
    """Set, the held model answers; ``asked`` is set once it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()


def held(model: ScriptedModel) -> Held:
    """``model`` answers only once the returned event is set (a turn that takes its time)."""
    release = Held()
    answer = model.complete

    async def slow(messages, tools, *, on_delta=None):  # type: ignore[no-untyped-def]
        release.asked.set()
        await release.wait()
        return await answer(messages, tools, on_delta=on_delta)

    model.complete = slow  # type: ignore[method-assign]
    return release


class ManualSleep:
    """An injectable ``sleep``: each call waits until the test releases that duration."""

    def __init__(self) -> None:
        self._waiting: list[tuple[float, asyncio.Future[None]]] = []
        self._changed = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((seconds, future))
        self._changed.set()
        await future

    async def release(self, seconds: float) -> None:
        """End the (first) sleep of ``seconds``, waiting for it to start if needed."""

        async def find() -> asyncio.Future[None]:
            while True:
                for i, (length, future) in enumerate(self._waiting):
                    if length == seconds:
                        del self._waiting[i]
                        return future
                self._changed.clear()
                await self._changed.wait()

        (await asyncio.wait_for(find(), 5)).set_result(None)


@pytest.fixture
def model() -> EchoModel:
    return EchoModel(name="primary")


@pytest.fixture
def hub_config() -> HubConfig:
    return HubConfig(idle_evict_s=60)


@pytest.fixture
def manual_sleep() -> ManualSleep:
    return ManualSleep()


@pytest.fixture
def app_config(tmp_path: Path) -> AppConfig:
    settings = load_settings(
        database_url=migrated_sqlite(tmp_path / "chathub.db"),
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    return AppConfig(
        settings=settings, models=(), engine=EngineConfig(max_tool_rounds=6, command_timeout_s=5)
    )


@pytest.fixture
async def engine(app_config: AppConfig, model: EchoModel) -> AsyncIterator[Engine]:
    engine = await Engine.open(app_config, models=ModelRegistry([model]), policy=AllowAll())
    yield engine
    await engine.close()


@pytest.fixture
async def hub(engine: Engine, hub_config: HubConfig, manual_sleep) -> AsyncIterator[ChatHub]:
    hub = ChatHub(engine, hub_config, sleep=manual_sleep)
    await hub.start()
    yield hub
    await hub.close()


async def wait_done(events, count: int = 1) -> list[HubEvent]:
    """Collect events until ``count`` Done events arrived."""
    seen: list[HubEvent] = []
    done = 0

    async def collect() -> None:
        nonlocal done
        while done < count:
            event = await events.recv()
            seen.append(event)
            if isinstance(event.event, Done):
                done += 1

    await asyncio.wait_for(collect(), 5)
    return seen
