"""A model host that drops packets (switched off, a VPN peer offline): nothing answers the
SYN and the connect times out. Nothing was sent, so the host is unreachable, as when it
refuses the connection: until 2026-12-07 it was an ``LlmTimeout``, which the fact deriver
counts against its batch (found by review on 2026-12-07)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from engine.config import ModelConfig
from engine.llm.client import OpenAICompatModel
from engine.llm.types import LlmConnectionError
from engine.session.turn.cancel import CancelScope
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.llm_round import call_llm_round
from tests.engine.llm.blackhole import blackhole
from tests.fakes.openai_server import FakeOpenAIServer

USER = [{"role": "user", "content": "Hello?"}]
both_modes = pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def make_model(
    http: httpx.AsyncClient, base_url: str, name: str, *, stream: bool = True
) -> OpenAICompatModel:
    config = ModelConfig(name=name, base_url=base_url, timeout_s=0.5, stream=stream)
    return OpenAICompatModel(config, http)


@both_modes
async def test_a_host_that_drops_packets_is_unreachable_not_slow(
    http: httpx.AsyncClient, stream: bool
) -> None:
    with blackhole() as url:
        model = make_model(http, url, "off", stream=stream)
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
        models = [make_model(http, url, "off"), make_model(http, fake_openai.base_url, "backup")]
        result = await call_llm_round(
            models, lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
        )

    assert result.model == "backup"
    assert result.response.content == "Hello from the backup."
