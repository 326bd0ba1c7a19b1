"""A model host that drops packets (switched off, a VPN peer offline): nothing answers the
SYN and the connect times out. Nothing was sent, so the host is unreachable, as when it
refuses the connection: until 2026-12-07 it was an ``LlmTimeout``, which the fact deriver
counts against its batch (found by review on 2026-12-07)."""

from __future__ import annotations

import httpx
import pytest

from engine.llm.types import LlmConnectionError
from engine.session.turn.cancel import CancelScope
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.llm_round import call_llm_round
from tests.engine.llm.blackhole import blackhole
from tests.engine.llm.test_client import both_modes, make_model
from tests.fakes.openai_server import FakeOpenAIServer

USER = [{"role": "user", "content": "Hello?"}]


@both_modes
async def test_a_host_that_drops_packets_is_unreachable_not_slow(
    http: httpx.AsyncClient, stream: bool
) -> None:
    with blackhole() as url:
        model = make_model(http, url, name="off", stream=stream, timeout_s=0.5)
        with pytest.raises(LlmConnectionError, match="cannot connect") as caught:
            await model.complete(USER, [])

    assert caught.value.retriable and caught.value.away
    assert "ConnectTimeout" in (caught.value.detail or "")  # the class: the log's only
    assert "ConnectTimeout" not in str(caught.value)


async def test_the_next_model_answers_when_the_first_host_drops_packets(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_text("Hello from the backup.", model="backup")
    with blackhole() as url:
        off = make_model(http, url, name="off", timeout_s=0.5)
        models = [off, make_model(http, fake_openai.base_url, name="backup", timeout_s=0.5)]
        result = await call_llm_round(
            models, lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
        )

    assert result.model == "backup"
    assert result.response.content == "Hello from the backup."
