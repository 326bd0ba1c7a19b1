"""The fact deriver waits for a memory model that refuses whatever it is asked, or cannot
be reached, rather than counting it against the batch: three rounds of it skipped the
batch for good and its facts were never learned (found by review on 2026-12-07)."""

from __future__ import annotations

import httpx
import pytest

from engine.config import ModelConfig
from engine.llm.client import OpenAICompatModel
from tests.engine.llm.blackhole import blackhole
from tests.fakes.openai_server import FakeOpenAIServer
from tests.memory import test_deriver
from tests.memory.test_deriver import MODEL, Setup, add, answer

# The deriver tests' fixtures, asked for by name.
http, setup = test_deriver.http, test_deriver.setup


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (402, "Insufficient credits. Add more using https://openrouter.ai/credits"),
        (400, "API key not valid. Please pass a valid API key. API_KEY_INVALID"),
    ],
    ids=["402-credit-run-out", "400-gemini-key-invalid"],
)
async def test_an_account_out_of_credit_or_a_refused_key_is_waited_for_not_counted(
    setup: Setup, fake_openai: FakeOpenAIServer, status: int, message: str
) -> None:
    """Until 2026-12-07 an HTTP 402 (credit run out) and Gemini's 400 API_KEY_INVALID
    counted against the batch, as a wrong key's 401 did before."""
    chat = await setup.session("telegram:111")
    [said] = await setup.say(chat, [("", "I moved to Oslo")])
    for _ in range(3):  # three rounds while the account is out of credit / the key is wrong
        fake_openai.reply_error(status, message, model=MODEL)
        assert await setup.deriver.derive_pending() == 0
    # The operator tops up the credit (mends the key): the message is learned from.
    fake_openai.reply_text(answer(add("Ann lives in Oslo", said)), model=MODEL)
    await setup.deriver.derive_pending()
    assert [body for _, body, *_ in await setup.stored()] == ["Ann lives in Oslo"], (
        f"after three rounds of HTTP {status} the batch was skipped: mark {await setup.mark(chat)}"
    )


async def test_a_model_host_that_drops_packets_is_waited_for_not_counted(
    setup: Setup, fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """A host switched off times out connecting: nothing was sent. Until 2026-12-07 that
    was an LlmTimeout, counted against the batch."""
    chat = await setup.session("telegram:111")
    [said] = await setup.say(chat, [("", "I moved to Oslo")])
    working = setup.models
    with blackhole() as url:
        config = ModelConfig(name=MODEL, base_url=url, timeout_s=0.5)
        setup.models = [OpenAICompatModel(config, http)]
        for _ in range(3):  # three rounds while the model's host is off
            assert await setup.deriver.derive_pending() == 0
    setup.models = working  # the host is back
    fake_openai.reply_text(answer(add("Ann lives in Oslo", said)), model=MODEL)
    await setup.deriver.derive_pending()
    assert [body for _, body, *_ in await setup.stored()] == ["Ann lives in Oslo"], (
        f"three rounds of connect timeouts skipped the batch: mark {await setup.mark(chat)}"
    )
