"""One request's turn followed through a fleet: the conversation runs in another process,
its events come over PostgreSQL notices (``tests/engine/hub/test_relay.py``'s processes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.completions import CompletionsApi, ExchangeLimits
from engine.llm.scripted import text
from tests.engine.hub.test_relay import process
from tests.pg import fresh_postgres_database

SOURCE = "api:7"


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with fresh_postgres_database(migrated=True) as url:
        yield url


async def test_a_long_message_and_its_long_answer_through_a_process_that_does_not_run_it(
    url: str, tmp_path: Path
) -> None:
    """Both are over a notice's 7,000 bytes, so the relayed events carry them cut: the
    request still knows its message (it ended with "not answered") and answers with the
    stored answer, whole (it was cut)."""
    message = " ".join(f"word{i}" for i in range(2_000))  # ~16 kB
    answer = "".join(f"Line {i}: all of it is stored.\n" for i in range(1_000))  # ~32 kB
    async with process(url, tmp_path, "a") as a, process(url, tmp_path, "b") as b:
        assert a.hub.fleet is not None
        a.model.add(text(answer))
        await a.hub.fleet.ownership.claim(SOURCE)
        api = CompletionsApi(
            b.hub,
            b.engine.store.db,
            lambda: ["main"],
            token=None,
            limits=ExchangeLimits(keepalive_s=0.2),
        )
        turn = await api.exchange.start(SOURCE, message)
        try:
            said = "".join([piece.text async for piece in turn.pieces()])
        finally:
            turn.close()
    assert said == answer
    messages, _tools = a.model.requests[-1]
    assert any(message in str(m) for m in messages)  # the model got it whole
