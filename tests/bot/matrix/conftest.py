"""The service with Matrix against a real Synapse (one per test session and worker).

Every test registers its own bot, owner, Alice (allowed) and Bob (a stranger), so tests
sharing the homeserver never see each other's rooms.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.delivery import Pacing
from bot.serve import Service
from engine.llm.registry import ModelRegistry
from tests.bot.matrix.homeserver import Homeserver, Person
from tests.bot.telegram_contract.conftest import app_config, stop
from tests.engine.hub.conftest import EchoModel
from tests.pg import migrated_sqlite

TIMEOUT = 15.0


async def until(condition: Callable[[], Any], within_s: float = TIMEOUT) -> Any:
    """Wait until ``condition()`` is truthy (run in a thread: it may ask Synapse, whose
    answer costs it more than the bot's work: polled soon at first, then every 200 ms)."""
    deadline = time.monotonic() + within_s
    pause = 0.05
    while True:
        value = await asyncio.to_thread(condition)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the condition")
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, 0.2)


@dataclass
class Accounts:
    bot: Person
    owner: Person
    alice: Person
    bob: Person


@pytest.fixture
def accounts(homeserver: Homeserver) -> Accounts:
    tag = uuid.uuid4().hex[:8]
    return Accounts(
        bot=homeserver.register(f"bot{tag}"),
        owner=homeserver.register(f"owner{tag}"),
        alice=homeserver.register(f"alice{tag}"),
        bob=homeserver.register(f"bob{tag}"),
    )


@pytest.fixture
def model() -> EchoModel:
    return EchoModel(name="primary")


MakeService = Callable[..., Awaitable[Service]]


@pytest.fixture
async def make_service(
    tmp_path: Path, homeserver: Homeserver, accounts: Accounts, model: EchoModel
) -> AsyncIterator[MakeService]:
    """``chathub serve`` with only Matrix configured, started and syncing."""
    database_url = migrated_sqlite(tmp_path / "chathub.db")
    services: list[Service] = []

    async def make(
        *,
        ready: bool = True,
        pacing: Pacing | None = None,
        timeline_limit: int = 50,
        database: str | None = None,
        **settings: Any,
    ) -> Service:
        """``database``: a fresh database of that name instead of the test's own."""
        url = database_url if database is None else migrated_sqlite(tmp_path / f"{database}.db")
        values = {
            "matrix_homeserver": homeserver.url,
            "matrix_user_id": accounts.bot.user_id,
            "matrix_access_token": accounts.bot.token,
            "matrix_owner_id": accounts.owner.user_id,
            "matrix_allowed_user_ids": accounts.alice.user_id,
            **settings,
        }
        config = app_config(url, tmp_path / "workspace", **values)
        service = Service(
            config,
            models=ModelRegistry([model]),
            http=False,
            matrix_pacing=pacing or Pacing.unpaced(backoff_s=(0.05,), max_retry_after_s=2.0),
            matrix_sync_timeout_ms=2000,
            matrix_timeline_limit=timeline_limit,
        )
        await service.start()
        services.append(service)
        if ready:
            assert service.matrix is not None
            await until(lambda: service.matrix.state() == "ok")  # type: ignore[union-attr]
        return service

    yield make
    for service in services:
        await stop(service)


def direct_room(accounts: Accounts, person: Person | None = None) -> str:
    """A direct room of ``person`` (Alice) with the bot, joined by the bot through chathub
    (the test waits for the join)."""
    person = person or accounts.alice
    return person.create_room(invite=[accounts.bot.user_id], direct=True)


def joined(person: Person, room_id: str, user_id: str) -> bool:
    members = person.request("GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/joined_members")
    return user_id in members.get("joined", {})


def bot_messages(person: Person, room_id: str, bot: str) -> list[dict[str, Any]]:
    """The bot's messages in the room as a person's client shows them: edits applied, the
    edit events themselves left out."""
    events = person.messages(room_id)
    latest: dict[str, dict[str, Any]] = {}
    shown: list[dict[str, Any]] = []
    for event in events:
        if event.get("sender") != bot or event.get("type") != "m.room.message":
            continue
        content = event.get("content") or {}
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            latest[relates.get("event_id")] = content.get("m.new_content") or content
            continue
        shown.append(event)
    return [
        {**event, "content": latest.get(event["event_id"], event["content"])} for event in shown
    ]


def bodies(person: Person, room_id: str, bot: str) -> list[str]:
    return [m["content"].get("body", "") for m in bot_messages(person, room_id, bot)]


def _q(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")
